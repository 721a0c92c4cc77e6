#include "mpsx/kernels/cross_channel_normalization.h"
#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include <mutex>

#include "backend.h"
#include "cross_channel_normalization.cuh"

namespace mpsx::cuda {
namespace {

// The scratch slot of the per-element factors.
constexpr size_t kFactorsSlot = 0;

// cuDNN's cross-channel LRN where it computes MPS's formula: an odd window
// (cuDNN centres it, as MPS does an odd one) of at most CUDNN_LRN_MAX_N
// channels, within cuDNN's limits on delta and beta (cuDNN divides alpha by
// N, as MPS does), on separate source and destination memory. False when it
// did not run (nothing was launched).
bool fits_cudnn(const CrossChannelNormalizationDescriptor& d) {
  return d.kernel_size % 2 == 1 && d.kernel_size <= CUDNN_LRN_MAX_N;
}

bool cudnn_forward(CudaContext& cuda, CudnnNormalization& lrn, const CrossChannelNormalizationParameters& p,
                   const ImageRegion& x, const ImageRegion& y) {
  if (overlap(x, y)) return false;
  std::lock_guard<std::mutex> lock(lrn.mutex);
  if (!lrn.prepare(p.alpha, p.beta, p.delta, {&x, &y})) return false;
  const float one = 1.0f, zero = 0.0f;
  return lrn.ran(cudnnLRNCrossChannelForward(cuda.cudnn(), lrn.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one,
                                             lrn.tensors[0], x.data, &zero, lrn.tensors[1], y.data));
}

// dx from dy and x through y, which cuDNN's backward pass reads: computed
// into `y` (dense scratch shaped as x) first.
bool cudnn_gradient(CudaContext& cuda, CudnnNormalization& lrn, const CrossChannelNormalizationParameters& p,
                    const ImageRegion& dy, const ImageRegion& x, const ImageRegion& y, const ImageRegion& dx) {
  if (overlap(dx, dy) || overlap(dx, x)) return false;
  std::lock_guard<std::mutex> lock(lrn.mutex);
  if (!lrn.prepare(p.alpha, p.beta, p.delta, {&x, &y, &dy, &dx})) return false;
  const float one = 1.0f, zero = 0.0f;
  if (!lrn.ran(cudnnLRNCrossChannelForward(cuda.cudnn(), lrn.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, lrn.tensors[0],
                                           x.data, &zero, lrn.tensors[1], y.data)))
    return false;
  MPSX_CUDA_CHECK(cudnnLRNCrossChannelBackward(cuda.cudnn(), lrn.lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one,
                                               lrn.tensors[1], y.data, lrn.tensors[2], dy.data, lrn.tensors[0],
                                               x.data, &zero, lrn.tensors[3], dx.data));
  return true;
}

// cuDNN's LRN where it fits (above), else cross_channel_normalization.cu:
// per element, two passes through scratch factors (so results may overwrite
// what they read), over any strides and float16 or float32 images.
class CudaCrossChannelNormalization final : public CrossChannelNormalizationPrimitive {
 public:
  explicit CudaCrossChannelNormalization(const CrossChannelNormalizationDescriptor& d) : d_(d) {
    const int64_t elements = checked_count({d.images, d.channels, d.height, d.width},
                                           "MPSCNNCrossChannelNormalization: the region's element count");
    bytes_ = checked_bytes(elements, (d.gradient ? 2 : 1) * sizeof(float),
                           "MPSCNNCrossChannelNormalization: the scratch size");
    if (fits_cudnn(d)) cudnn_ = std::make_unique<CudnnNormalization>(static_cast<unsigned>(d.kernel_size));
  }

  void forward(ExecutionContext& context, const CrossChannelNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    if (cudnn_ && cudnn_forward(cuda, *cudnn_, p, source, destination)) return;
    float* factors = static_cast<float*>(cuda.scratch(kFactorsSlot, bytes_));
    cross_channel_normalization_forward(window(p), source, destination, factors, cuda.stream());
  }

  void gradient(ExecutionContext& context, const CrossChannelNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CudaContext& cuda = context_of(context);
    void* scratch = cuda.scratch(kFactorsSlot, bytes_);
    if (cudnn_ &&
        cudnn_gradient(cuda, *cudnn_, p, source_gradient, source, dense_like(source, scratch), destination_gradient))
      return;
    cross_channel_normalization_gradient(window(p), source_gradient, source, destination_gradient,
                                         static_cast<float*>(scratch), cuda.stream());
  }

 private:
  // A dense NHWC region of `like`'s extents and type at `data`.
  static ImageRegion dense_like(const ImageRegion& like, void* data) {
    ImageRegion r;
    r.data = data;
    r.data_type = like.data_type;
    r.n = like.n, r.c = like.c, r.h = like.h, r.w = like.w;
    r.stride.c = 1;
    r.stride.w = r.c;
    r.stride.h = r.w * r.c;
    r.stride.n = r.h * r.stride.h;
    return r;
  }

  CrossChannelWindow window(const CrossChannelNormalizationParameters& p) const {
    CrossChannelWindow w;
    w.before = d_.before();
    w.after = d_.after();
    w.scale = p.alpha / static_cast<float>(d_.kernel_size);
    w.beta = p.beta;
    w.delta = p.delta;
    return w;
  }

  CrossChannelNormalizationDescriptor d_;
  size_t bytes_ = 0;
  std::unique_ptr<CudnnNormalization> cudnn_;
};

const Registered<CrossChannelNormalizationPrimitive, CudaCrossChannelNormalization> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda

#include "mpsx/kernels/spatial_normalization.h"
#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include <memory>
#include <mutex>

#include "backend.h"
#include "spatial_normalization.cuh"

namespace mpsx::cuda {
namespace {

// The scratch slot of the per-element factors, or of cuDNN's buffers.
constexpr size_t kFactorsSlot = 0;

// cuDNN's divisive normalization with zero means computes MPS's spatial
// normalization, x / (k + alpha/(n*n) * the sum of x^2 over the n x n window,
// taps off the image reading 0)^beta, and its exact gradient (checked on an
// H100 against this formula, NCHW and NHWC strides): for an odd window of at
// most CUDNN_LRN_MAX_N (centred, as MPS's odd windows are), edge mode ZERO,
// and a written region that covers the whole source images, since cuDNN
// reads only the tensor it writes.
bool fits_cudnn(const SpatialNormalizationDescriptor& d) {
  const ImageDescriptor& source = d.gradient ? d.secondary : d.source;
  return d.kernel_size % 2 == 1 && d.kernel_size <= CUDNN_LRN_MAX_N && d.edge_mode == EdgeMode::Zero &&
         d.source_x == 0 && d.source_y == 0 && d.width == source.width && d.height == source.height;
}

// Bytes of one of cuDNN's buffers laid out as `like`, 256-byte aligned.
size_t bytes_like(const ImageRegion& like) {
  return (static_cast<size_t>(like.span()) * size_of(like.data_type) + 255) / 256 * 256;
}

// `index`-th buffer laid out as `like` in `scratch`.
void* part(void* scratch, const ImageRegion& like, size_t index) {
  return static_cast<char*>(scratch) + index * bytes_like(like);
}

// False when it did not run (nothing was launched). The means, cuDNN's two
// temporaries (and the gradient's unused means gradient) live in scratch.
bool cudnn_forward(CudaContext& cuda, CudnnNormalization& divisive, const SpatialNormalizationParameters& p,
                   const ImageRegion& x, const ImageRegion& y) {
  if (overlap(x, y)) return false;
  std::lock_guard<std::mutex> lock(divisive.mutex);
  if (!divisive.prepare(p.alpha, p.beta, p.delta, {&x, &y})) return false;
  void* scratch = cuda.scratch(kFactorsSlot, 3 * bytes_like(x));
  MPSX_CUDA_CHECK(cudaMemsetAsync(part(scratch, x, 0), 0, bytes_like(x), cuda.stream()));
  const float one = 1.0f, zero = 0.0f;
  return divisive.ran(cudnnDivisiveNormalizationForward(
      cuda.cudnn(), divisive.lrn, CUDNN_DIVNORM_PRECOMPUTED_MEANS, &one, divisive.tensors[0], x.data,
      part(scratch, x, 0), part(scratch, x, 1), part(scratch, x, 2), &zero, divisive.tensors[1], y.data));
}

// cuDNN describes x and dy by one descriptor: they must be laid out alike.
bool cudnn_gradient(CudaContext& cuda, CudnnNormalization& divisive, const SpatialNormalizationParameters& p,
                    const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx) {
  const bool alike = dy.data_type == x.data_type && dy.stride.n == x.stride.n && dy.stride.c == x.stride.c &&
                     dy.stride.h == x.stride.h && dy.stride.w == x.stride.w;
  if (!alike || overlap(dx, dy) || overlap(dx, x)) return false;
  std::lock_guard<std::mutex> lock(divisive.mutex);
  if (!divisive.prepare(p.alpha, p.beta, p.delta, {&x, &dx})) return false;
  const size_t bytes = 3 * bytes_like(x) + bytes_like(dx);
  void* scratch = cuda.scratch(kFactorsSlot, bytes);
  void* means_gradient = static_cast<char*>(scratch) + 3 * bytes_like(x);
  MPSX_CUDA_CHECK(cudaMemsetAsync(part(scratch, x, 0), 0, bytes_like(x), cuda.stream()));
  const float one = 1.0f, zero = 0.0f;
  return divisive.ran(cudnnDivisiveNormalizationBackward(
      cuda.cudnn(), divisive.lrn, CUDNN_DIVNORM_PRECOMPUTED_MEANS, &one, divisive.tensors[0], x.data,
      part(scratch, x, 0), dy.data, part(scratch, x, 1), part(scratch, x, 2), &zero, divisive.tensors[1], dx.data,
      means_gradient));
}

// cuDNN's divisive normalization where it fits (above), else
// spatial_normalization.cu: per element, two passes through
// scratch factors of the written region (so results may overwrite what they
// read), over any strides and float16 or float32 images.
class CudaSpatialNormalization final : public SpatialNormalizationPrimitive {
 public:
  explicit CudaSpatialNormalization(const SpatialNormalizationDescriptor& d) : d_(d) {
    const int64_t elements = checked_count({d.images, d.channels, d.height, d.width},
                                           "MPSCNNSpatialNormalization: the region's element count");
    bytes_ = checked_bytes(elements, (d.gradient ? 2 : 1) * sizeof(float),
                           "MPSCNNSpatialNormalization: the scratch size");
    if (fits_cudnn(d)) cudnn_ = std::make_unique<CudnnNormalization>(static_cast<unsigned>(d.kernel_size));
  }

  void forward(ExecutionContext& context, const SpatialNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    if (cudnn_ && cudnn_forward(cuda, *cudnn_, p, source, destination)) return;
    float* factors = static_cast<float*>(cuda.scratch(kFactorsSlot, bytes_));
    spatial_normalization_forward(window(p), source, destination, factors, cuda.stream());
  }

  void gradient(ExecutionContext& context, const SpatialNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CudaContext& cuda = context_of(context);
    if (cudnn_ && cudnn_gradient(cuda, *cudnn_, p, source_gradient, source, destination_gradient)) return;
    float* factors = static_cast<float*>(cuda.scratch(kFactorsSlot, bytes_));
    spatial_normalization_gradient(window(p), source_gradient, source, destination_gradient, factors, cuda.stream());
  }

 private:
  SpatialWindow window(const SpatialNormalizationParameters& p) const {
    SpatialWindow w;
    w.before = d_.before();
    w.after = d_.after();
    w.origin_x = d_.source_x;
    w.origin_y = d_.source_y;
    w.scale = p.alpha / static_cast<float>(d_.kernel_size * d_.kernel_size);
    w.beta = p.beta;
    w.delta = p.delta;
    w.clamp = d_.edge_mode == EdgeMode::Clamp;
    return w;
  }

  SpatialNormalizationDescriptor d_;
  size_t bytes_ = 0;
  std::unique_ptr<CudnnNormalization> cudnn_;
};

const Registered<SpatialNormalizationPrimitive, CudaSpatialNormalization> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda

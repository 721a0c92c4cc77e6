#include "mpsx/kernels/cross_channel_normalization.h"
#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include <atomic>
#include <climits>
#include <initializer_list>
#include <mutex>

#include "backend.h"
#include "cross_channel_normalization.cuh"

namespace mpsx::cuda {
namespace {

// The scratch slot of the per-element factors.
constexpr size_t kFactorsSlot = 0;

// A cuDNN tensor descriptor of an image region, its strides included.
class RegionTensor {
 public:
  RegionTensor() { MPSX_CUDA_CHECK(cudnnCreateTensorDescriptor(&descriptor_)); }
  ~RegionTensor() { cudnnDestroyTensorDescriptor(descriptor_); }
  RegionTensor(const RegionTensor&) = delete;
  RegionTensor& operator=(const RegionTensor&) = delete;
  operator cudnnTensorDescriptor_t() const { return descriptor_; }

  // False when cuDNN cannot describe the region (its types, int extents).
  bool set(const ImageRegion& r) {
    const int64_t values[] = {r.n, r.c, r.h, r.w, r.stride.n, r.stride.c, r.stride.h, r.stride.w};
    for (int64_t v : values)
      if (v > INT_MAX) return false;
    if (r.data_type != DataType::Float32 && r.data_type != DataType::Float16) return false;
    const cudnnDataType_t type = r.data_type == DataType::Float32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_HALF;
    return cudnnSetTensor4dDescriptorEx(descriptor_, type, int(r.n), int(r.c), int(r.h), int(r.w), int(r.stride.n),
                                        int(r.stride.c), int(r.stride.h), int(r.stride.w)) == CUDNN_STATUS_SUCCESS;
  }

 private:
  cudnnTensorDescriptor_t descriptor_ = nullptr;
};

bool overlap(const ImageRegion& a, const ImageRegion& b) {
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.span() * size_of(b.data_type) && b0 < a0 + a.span() * size_of(a.data_type);
}

// cuDNN's cross-channel LRN where it computes MPS's formula: an odd window
// (cuDNN centres it, as MPS does an odd one) of at most CUDNN_LRN_MAX_N
// channels, delta >= CUDNN_LRN_MIN_K, beta >= CUDNN_LRN_MIN_BETA, and cuDNN
// divides alpha by N, as MPS does. It runs on separate source and
// destination memory: in place, and where cuDNN refuses the regions, the
// own kernels run.
class CudnnLocalResponseNormalization {
 public:
  static bool fits(const CrossChannelNormalizationDescriptor& d) {
    return d.kernel_size % 2 == 1 && d.kernel_size <= CUDNN_LRN_MAX_N;
  }
  static bool fits(const CrossChannelNormalizationParameters& p) {
    return p.delta >= CUDNN_LRN_MIN_K && p.beta >= CUDNN_LRN_MIN_BETA;
  }

  explicit CudnnLocalResponseNormalization(int64_t kernel_size) : kernel_size_(static_cast<unsigned>(kernel_size)) {
    MPSX_CUDA_CHECK(cudnnCreateLRNDescriptor(&lrn_));
  }
  ~CudnnLocalResponseNormalization() { cudnnDestroyLRNDescriptor(lrn_); }

  // False when it did not run (nothing was launched).
  bool forward(CudaContext& cuda, const CrossChannelNormalizationParameters& p, const ImageRegion& x,
               const ImageRegion& y) {
    if (overlap(x, y)) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!prepare(p, {&x, &y})) return false;
    const float one = 1.0f, zero = 0.0f;
    return run(cudnnLRNCrossChannelForward(cuda.cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, tensors_[0], x.data,
                                           &zero, tensors_[1], y.data));
  }

  // dx from dy and x, through y computed into `y` (dense scratch shaped as x).
  bool gradient(CudaContext& cuda, const CrossChannelNormalizationParameters& p, const ImageRegion& dy,
                const ImageRegion& x, const ImageRegion& y, const ImageRegion& dx) {
    if (overlap(dx, dy) || overlap(dx, x)) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!prepare(p, {&x, &y, &dy, &dx})) return false;
    const float one = 1.0f, zero = 0.0f;
    if (!run(cudnnLRNCrossChannelForward(cuda.cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, tensors_[0], x.data,
                                         &zero, tensors_[1], y.data)))
      return false;
    MPSX_CUDA_CHECK(cudnnLRNCrossChannelBackward(cuda.cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, tensors_[1],
                                                 y.data, tensors_[2], dy.data, tensors_[0], x.data, &zero,
                                                 tensors_[3], dx.data));
    return true;
  }

 private:
  // The LRN parameters and the regions' descriptors (their strides are fixed
  // by the primitive's image descriptors; set once).
  bool prepare(const CrossChannelNormalizationParameters& p, std::initializer_list<const ImageRegion*> regions) {
    if (refused_ || !fits(p)) return false;
    if (!described_) {
      size_t i = 0;
      for (const ImageRegion* r : regions)
        if (!tensors_[i++].set(*r)) return !(refused_ = true);
      described_ = true;
    }
    if (!(p.alpha == set_.alpha && p.beta == set_.beta && p.delta == set_.delta)) {
      if (cudnnSetLRNDescriptor(lrn_, kernel_size_, p.alpha, p.beta, p.delta) != CUDNN_STATUS_SUCCESS) return false;
      set_ = p;
    }
    return true;
  }

  // cuDNN refuses unsupported descriptors before launching anything.
  bool run(cudnnStatus_t status) {
    if (status == CUDNN_STATUS_NOT_SUPPORTED || status == CUDNN_STATUS_BAD_PARAM) return !(refused_ = true);
    MPSX_CUDA_CHECK(status);
    return true;
  }

  unsigned kernel_size_;
  cudnnLRNDescriptor_t lrn_ = nullptr;
  std::mutex mutex_;
  RegionTensor tensors_[4];  // x, y, dy, dx
  bool described_ = false, refused_ = false;
  CrossChannelNormalizationParameters set_{-1.0f, -1.0f, -1.0f};
};

// cuDNN's LRN where it fits (above), else shaders/cuda/cross_channel_normalization.cu:
// per element, two passes through scratch factors (so results may overwrite
// what they read), over any strides and float16 or float32 images.
class CudaCrossChannelNormalization final : public CrossChannelNormalizationPrimitive {
 public:
  explicit CudaCrossChannelNormalization(const CrossChannelNormalizationDescriptor& d) : d_(d) {
    const int64_t elements = checked_count({d.images, d.channels, d.height, d.width},
                                           "MPSCNNCrossChannelNormalization: the region's element count");
    bytes_ = checked_bytes(elements, (d.gradient ? 2 : 1) * sizeof(float),
                           "MPSCNNCrossChannelNormalization: the scratch size");
    if (CudnnLocalResponseNormalization::fits(d))
      cudnn_ = std::make_unique<CudnnLocalResponseNormalization>(d.kernel_size);
  }

  void forward(ExecutionContext& context, const CrossChannelNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    if (cudnn_ && cudnn_->forward(cuda, p, source, destination)) return;
    float* factors = static_cast<float*>(cuda.scratch(kFactorsSlot, bytes_));
    cross_channel_normalization_forward(window(p), source, destination, factors, cuda.stream());
  }

  void gradient(ExecutionContext& context, const CrossChannelNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CudaContext& cuda = context_of(context);
    void* scratch = cuda.scratch(kFactorsSlot, bytes_);
    if (cudnn_ && cudnn_->gradient(cuda, p, source_gradient, source, dense_like(source, scratch), destination_gradient))
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
  std::unique_ptr<CudnnLocalResponseNormalization> cudnn_;
};

std::unique_ptr<CrossChannelNormalizationPrimitive> make_cross_channel_normalization(
    Backend&, const CrossChannelNormalizationDescriptor& descriptor) {
  return std::make_unique<CudaCrossChannelNormalization>(descriptor);
}

const RegisterPrimitive<CrossChannelNormalizationPrimitive> registered("cuda", make_cross_channel_normalization);

}  // namespace

}  // namespace mpsx::cuda

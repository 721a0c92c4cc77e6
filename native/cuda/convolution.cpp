#include "mpsx/kernels/convolution.h"

#include <algorithm>
#include <climits>
#include <mutex>
#include <vector>

#include "backend.h"
#include "convolution.cuh"
#include "convolution.h"
#include "image.cuh"
#include "mpsx/errors.h"

namespace mpsx::cuda {
namespace {

// Algorithms that need more workspace are passed over.
constexpr size_t kWorkspaceLimit = size_t(256) << 20;
// Exact float32 products and sums, as the cpu backend computes them, unless
// the kernel's accumulator precision is half: then TF32 tensor cores.
cudnnMathType_t math_type(bool tensor_float32) { return tensor_float32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }
cublasComputeType_t gemm_compute(bool tensor_float32) {
  return tensor_float32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

int to_int(int64_t value) {
  if (value < 0 || value > INT_MAX)
    fail<ShapeError>("a convolution extent or stride of ", value, " exceeds what cuDNN takes (32-bit sizes)");
  return static_cast<int>(value);
}

// Dense NHWC or NCHW strides (for a filter, n being k: KRSC or KCRS).
ImageLayout dense_layout(int64_t c, int64_t h, int64_t w, bool nchw) {
  return nchw ? ImageLayout{c * h * w, h * w, w, 1} : ImageLayout{h * w * c, 1, w * c, c};
}

void describe(cudnnTensorDescriptor_t tensor, int64_t n, int64_t c, int64_t h, int64_t w, const ImageLayout& s) {
  MPSX_CUDA_CHECK(cudnnSetTensor4dDescriptorEx(tensor, CUDNN_DATA_FLOAT, to_int(n), to_int(c), to_int(h), to_int(w),
                                               to_int(s.n), to_int(s.c), to_int(s.h), to_int(s.w)));
}

// The filter [k][r][s][c] as an image region (n = k), KRSC or KCRS.
ImageRegion filter_region(void* data, const CudnnConvolutionShape& s, bool kcrs) {
  const int64_t c = s.x_channels / s.groups;
  return ImageRegion{data, DataType::Float32, s.y_channels, c, s.kernel_height, s.kernel_width,
                     dense_layout(c, s.kernel_height, s.kernel_width, kcrs)};
}

size_t filter_bytes(const CudnnConvolutionShape& s) {
  return static_cast<size_t>(filter_region(nullptr, s, false).element_count()) * sizeof(float);
}

// Primitives are built on encoding threads, away from any queue and its
// handle: algorithm queries use one cuDNN handle per device, under a lock.
// The handles live as long as the process (destroying them at exit could
// come after the CUDA runtime has gone).
struct QueryHandles {
  std::mutex mutex;
  std::vector<cudnnHandle_t> handles;

  // With `mutex` held and the device current.
  cudnnHandle_t of(int ordinal) {
    if (static_cast<size_t>(ordinal) >= handles.size()) handles.resize(ordinal + 1, nullptr);
    if (!handles[ordinal]) MPSX_CUDA_CHECK(cudnnCreate(&handles[ordinal]));
    return handles[ordinal];
  }
};

QueryHandles& query_handles() {
  static QueryHandles* handles = new QueryHandles;
  return *handles;
}

// The first of the heuristics' algorithms, best first, that cuDNN can run for
// the pass's tensors within the workspace limit. The fastest weight
// gradients sum in an order that varies from run to run (about 1e-6
// relative); deterministic ones cost several times more on the reference CNN.
template <class Perf, int Count, class Heuristics, class WorkspaceSize>
bool choose(Heuristics heuristics, WorkspaceSize workspace_size, int* algorithm, size_t* workspace) {
  Perf perf[Count];
  int returned = 0;
  if (heuristics(Count, &returned, perf) != CUDNN_STATUS_SUCCESS) return false;
  for (int i = 0; i < returned; ++i) {
    size_t bytes = 0;
    if (perf[i].status != CUDNN_STATUS_SUCCESS || workspace_size(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS ||
        bytes > kWorkspaceLimit)
      continue;
    *algorithm = static_cast<int>(perf[i].algo);
    *workspace = bytes;
    return true;
  }
  return false;
}

// A region as a pass's staging shows it to cuDNN: the region itself, or its
// float32 copy in scratch inside zero padding.
class StagedRegion {
 public:
  StagedRegion(CudaContext& context, const ImageRegion& region, const CudnnConvolution::Staging& staging, size_t slot,
               bool load)
      : context_(context), region_(region), interior_(region), copy_(staging.copy) {
    if (!copy_) {
      data_ = static_cast<float*>(region.data);
      return;
    }
    const int64_t h = region.h + staging.top + staging.bottom, w = region.w + staging.left + staging.right;
    const size_t bytes = static_cast<size_t>(region.n * region.c * h * w) * sizeof(float);
    data_ = static_cast<float*>(context.scratch(slot, bytes));
    const ImageLayout layout = dense_layout(region.c, h, w, staging.nchw);
    interior_ = ImageRegion{data_ + staging.top * layout.h + staging.left * layout.w,
                            DataType::Float32,
                            region.n,
                            region.c,
                            region.h,
                            region.w,
                            layout};
    if (!load) return;
    if (h != region.h || w != region.w) context.fill_zero(data_, bytes);
    copy_region(region, interior_, context.stream());
  }

  // What cuDNN reads or writes, padding included.
  float* data() const { return data_; }
  // The float32 values of the region within it.
  const ImageRegion& view() const { return interior_; }
  // Writes a copy back into the region.
  void store() const {
    if (copy_) copy_region(interior_, region_, context_.stream());
  }

 private:
  CudaContext& context_;
  ImageRegion region_, interior_;
  bool copy_;
  float* data_ = nullptr;
};

}  // namespace

CudnnConvolution::CudnnConvolution(int ordinal, const CudnnConvolutionShape& shape, const CudnnPasses& passes)
    : shape_(shape) {
  const CudnnConvolutionShape& s = shape_;
  DeviceScope scope(ordinal);
  QueryHandles& queries = query_handles();
  std::lock_guard<std::mutex> lock(queries.mutex);
  cudnnHandle_t handle = queries.of(ordinal);
  for (Layout layout : {Layout::AsGiven, Layout::DenseNhwc, Layout::DenseNchw}) {
    if (std::optional<Passes> configured = configure(handle, passes, layout)) {
      passes_ = std::move(*configured);
      return;
    }
  }
  fail<Error>("cuDNN has no algorithm within ", kWorkspaceLimit >> 20, " MiB of workspace for the convolution of ",
              s.images, "x", s.x_channels, "x", s.x_height, "x", s.x_width, " (NxCxHxW, padding ", s.pad_top, ", ",
              s.pad_left, ", ", s.pad_bottom, ", ", s.pad_right, ") into ", s.y_channels, "x", s.y_height, "x",
              s.y_width, " with a ", s.kernel_width, "x", s.kernel_height, " kernel, stride ", s.stride_x, "x",
              s.stride_y, ", dilation ", s.dilation_x, "x", s.dilation_y, ", groups ", s.groups);
}

std::optional<CudnnConvolution::Passes> CudnnConvolution::configure(cudnnHandle_t handle,
                                                                    const CudnnPasses& requested, Layout layout) {
  const CudnnConvolutionShape& s = shape_;
  Passes passes;
  passes.nchw = layout == Layout::DenseNchw;
  // KRSC is OHWI.
  MPSX_CUDA_CHECK(cudnnSetFilter4dDescriptor(filter_, CUDNN_DATA_FLOAT,
                                             passes.nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC,
                                             to_int(s.y_channels), to_int(s.x_channels / s.groups),
                                             to_int(s.kernel_height), to_int(s.kernel_width)));
  // cuDNN pads both sides alike: as given, it gets the padding common to
  // both, and copies of x hold the rest.
  const bool as_given = layout == Layout::AsGiven;
  const int64_t pad_y = as_given ? std::min(s.pad_top, s.pad_bottom) : 0;
  const int64_t pad_x = as_given ? std::min(s.pad_left, s.pad_right) : 0;
  MPSX_CUDA_CHECK(cudnnSetConvolution2dDescriptor(convolution_, to_int(pad_y), to_int(pad_x), to_int(s.stride_y),
                                                  to_int(s.stride_x), to_int(s.dilation_y), to_int(s.dilation_x),
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  MPSX_CUDA_CHECK(cudnnSetConvolutionGroupCount(convolution_, to_int(s.groups)));
  MPSX_CUDA_CHECK(cudnnSetConvolutionMathType(convolution_, math_type(s.tensor_float32)));

  if (requested.forward) {
    std::unique_ptr<Pass> p = prepare(*requested.forward, pad_y, pad_x, layout);
    bool found = choose<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(handle, p->x_tensor, filter_, convolution_, p->y_tensor,
                                                        count, returned, perf);
        },
        [&](cudnnConvolutionFwdAlgo_t algorithm, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(handle, p->x_tensor, filter_, convolution_, p->y_tensor,
                                                         algorithm, bytes);
        },
        &p->algorithm, &p->workspace);
    if (!found) return std::nullopt;
    passes.forward = std::move(p);
  }
  if (requested.backward_data) {
    std::unique_ptr<Pass> p = prepare(*requested.backward_data, pad_y, pad_x, layout);
    bool found = choose<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, filter_, p->y_tensor, convolution_,
                                                             p->x_tensor, count, returned, perf);
        },
        [&](cudnnConvolutionBwdDataAlgo_t algorithm, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, filter_, p->y_tensor, convolution_,
                                                              p->x_tensor, algorithm, bytes);
        },
        &p->algorithm, &p->workspace);
    if (!found) return std::nullopt;
    passes.backward_data = std::move(p);
  }
  if (requested.backward_filter) {
    std::unique_ptr<Pass> p = prepare(*requested.backward_filter, pad_y, pad_x, layout);
    bool found = choose<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
        [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, p->x_tensor, p->y_tensor, convolution_,
                                                               filter_, count, returned, perf);
        },
        [&](cudnnConvolutionBwdFilterAlgo_t algorithm, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, p->x_tensor, p->y_tensor, convolution_,
                                                                filter_, algorithm, bytes);
        },
        &p->algorithm, &p->workspace);
    if (!found) return std::nullopt;
    passes.backward_filter = std::move(p);
  }
  return passes;
}

std::unique_ptr<CudnnConvolution::Pass> CudnnConvolution::prepare(const CudnnOperands& operands, int64_t pad_y,
                                                                  int64_t pad_x, Layout layout) const {
  const CudnnConvolutionShape& s = shape_;
  const bool dense = layout != Layout::AsGiven, nchw = layout == Layout::DenseNchw;
  auto p = std::make_unique<Pass>();
  p->x.top = s.pad_top - pad_y;
  p->x.left = s.pad_left - pad_x;
  p->x.bottom = s.pad_bottom - pad_y;
  p->x.right = s.pad_right - pad_x;
  bool padded = p->x.top || p->x.left || p->x.bottom || p->x.right;
  p->x.copy = dense || padded || operands.x.type != DataType::Float32;
  p->y.copy = dense || operands.y.type != DataType::Float32;
  p->x.nchw = p->y.nchw = nchw;

  const int64_t h = s.x_height + p->x.top + p->x.bottom, w = s.x_width + p->x.left + p->x.right;
  describe(p->x_tensor, s.images, s.x_channels, h, w,
           p->x.copy ? dense_layout(s.x_channels, h, w, nchw) : operands.x.stride);
  describe(p->y_tensor, s.images, s.y_channels, s.y_height, s.y_width,
           p->y.copy ? dense_layout(s.y_channels, s.y_height, s.y_width, nchw) : operands.y.stride);

  // The shapes the families compute must be the ones cuDNN derives.
  int n = 0, c = 0, y_height = 0, y_width = 0;
  MPSX_CUDA_CHECK(cudnnGetConvolution2dForwardOutputDim(convolution_, p->x_tensor, filter_, &n, &c, &y_height,
                                                        &y_width));
  if (n != s.images || c != s.y_channels || y_height != s.y_height || y_width != s.y_width)
    fail<Error>("cuDNN derives a ", n, "x", c, "x", y_height, "x", y_width, " result from a ", s.images, "x",
                s.x_channels, "x", h, "x", w, " (NxCxHxW) padded source; the convolution expects ", s.images, "x",
                s.y_channels, "x", s.y_height, "x", s.y_width);
  return p;
}

void* CudnnConvolution::workspace(CudaContext& context, const Pass& pass) const {
  return pass.workspace ? context.scratch(kWorkspaceSlot, pass.workspace) : nullptr;
}

const float* CudnnConvolution::filter_in(CudaContext& context, const float* filter) const {
  if (!passes_.nchw) return filter;
  ImageRegion kcrs = filter_region(context.scratch(kPlanarFilterSlot, filter_bytes(shape_)), shape_, true);
  copy_region(filter_region(const_cast<float*>(filter), shape_, false), kcrs, context.stream());
  return static_cast<const float*>(kcrs.data);
}

void CudnnConvolution::forward(CudaContext& context, const ImageRegion& x, const float* filter, const float* biases,
                               const ImageRegion& y) const {
  const Pass& p = *passes_.forward;
  StagedRegion in(context, x, p.x, kFirstStagedSlot, true);
  StagedRegion out(context, y, p.y, kSecondStagedSlot, false);
  const float one = 1.0f, zero = 0.0f;
  MPSX_CUDA_CHECK(cudnnConvolutionForward(context.cudnn(), &one, p.x_tensor, in.data(), filter_,
                                          filter_in(context, filter), convolution_,
                                          static_cast<cudnnConvolutionFwdAlgo_t>(p.algorithm), workspace(context, p),
                                          p.workspace, &zero, p.y_tensor, out.data()));
  if (biases) add_biases(out.view(), biases, context.stream());
  out.store();
}

void CudnnConvolution::backward_data(CudaContext& context, const ImageRegion& dy, const float* filter,
                                     const float* biases, const ImageRegion& dx) const {
  const Pass& p = *passes_.backward_data;
  StagedRegion in(context, dy, p.y, kFirstStagedSlot, true);
  StagedRegion out(context, dx, p.x, kSecondStagedSlot, false);
  const float one = 1.0f, zero = 0.0f;
  MPSX_CUDA_CHECK(cudnnConvolutionBackwardData(
      context.cudnn(), &one, filter_, filter_in(context, filter), p.y_tensor, in.data(), convolution_,
      static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algorithm), workspace(context, p), p.workspace, &zero, p.x_tensor,
      out.data()));
  if (biases) add_biases(out.view(), biases, context.stream());
  out.store();
}

void CudnnConvolution::backward_filter(CudaContext& context, const ImageRegion& x, const ImageRegion& dy,
                                       float* filter_gradient) const {
  const Pass& p = *passes_.backward_filter;
  StagedRegion in(context, x, p.x, kFirstStagedSlot, true);
  StagedRegion gradient(context, dy, p.y, kSecondStagedSlot, true);
  ImageRegion krsc = filter_region(filter_gradient, shape_, false);
  ImageRegion out = passes_.nchw ? filter_region(context.scratch(kPlanarFilterSlot, filter_bytes(shape_)), shape_, true)
                                 : krsc;
  const float one = 1.0f, zero = 0.0f;
  MPSX_CUDA_CHECK(cudnnConvolutionBackwardFilter(
      context.cudnn(), &one, p.x_tensor, in.data(), p.y_tensor, gradient.data(), convolution_,
      static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algorithm), workspace(context, p), p.workspace, &zero, filter_,
      out.data));
  if (passes_.nchw) copy_region(out, krsc, context.stream());
}

void sum_biases_gradient(CudaContext& context, const ImageRegion& result_gradient, float* biases_gradient) {
  auto* partials = static_cast<float*>(context.scratch(kPartialSumsSlot, channel_sums_scratch_bytes(result_gradient)));
  channel_sums(result_gradient, biases_gradient, partials, context.stream());
}

namespace {

// The leading dimension of a float32 view whose images are matrix rows.
int64_t leading_dimension(const ImageRegion& view) { return view.n > 1 ? view.stride.n : view.c * view.h * view.w; }

// True if the float32 view of such a region holds each image's values as one
// row in (h, w, c) order, as a matrix product takes them; views of other
// types are dense copies.
bool image_rows(DataType type, const ImageLayout& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (type != DataType::Float32) return true;
  return s.c == 1 && (w == 1 || s.w == c) && (h == 1 || s.h == w * c) && (n == 1 || s.n >= h * w * c);
}

// One window on the whole source block (the fully connected layer), on
// regions a matrix product takes as they are.
bool is_matrix_product(const ConvolutionShape& s) {
  if (s.groups != 1 || s.height != 1 || s.width != 1 || s.kernel_height != s.source_height ||
      s.kernel_width != s.source_width || s.pad_top || s.pad_left || s.pad_bottom || s.pad_right)
    return false;
  const int64_t n = s.images, in = s.input_channels, h = s.source_height, w = s.source_width;
  // The result (or its gradient), the source, and the source's gradient.
  return image_rows(s.destination_type, s.destination_stride, n, s.output_channels, 1, 1) &&
         image_rows(s.source_type, s.source_stride, n, in, h, w) &&
         (!s.gradient || image_rows(s.destination_type, s.source_stride, n, in, h, w));
}

// C = op(A) op(B) + beta C over column-major float32 matrices.
void gemm(CudaContext& context, bool tensor_float32, cublasOperation_t a_op, cublasOperation_t b_op, int64_t m, int64_t n, int64_t k,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const float one = 1.0f;
  MPSX_CUDA_CHECK(cublasGemmEx_64(context.cublas(), a_op, b_op, m, n, k, &one, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
                                  &beta, c, CUDA_R_32F, ldc, gemm_compute(tensor_float32), CUBLAS_GEMM_DEFAULT));
}

CudnnConvolutionShape cudnn_shape(const ConvolutionShape& s) {
  CudnnConvolutionShape c;
  c.images = s.images;
  c.groups = s.groups;
  c.x_channels = s.input_channels;
  c.x_height = s.source_height;
  c.x_width = s.source_width;
  c.y_channels = s.output_channels;
  c.y_height = s.height;
  c.y_width = s.width;
  c.pad_top = s.pad_top;
  c.pad_left = s.pad_left;
  c.pad_bottom = s.pad_bottom;
  c.pad_right = s.pad_right;
  c.kernel_height = s.kernel_height;
  c.kernel_width = s.kernel_width;
  c.stride_y = s.stride_y;
  c.stride_x = s.stride_x;
  c.dilation_y = s.dilation_y;
  c.dilation_x = s.dilation_x;
  c.tensor_float32 = s.accumulator_precision == AccumulatorPrecision::Half;
  return c;
}

CudnnPasses cudnn_passes(const ConvolutionShape& s) {
  const CudnnOperand source{s.source_type, s.source_stride}, result{s.destination_type, s.destination_stride};
  CudnnPasses passes;
  if (!s.gradient) {
    passes.forward = CudnnOperands{source, result};
    return passes;
  }
  // The gradient of the source has the gradient's precision.
  passes.backward_data = CudnnOperands{CudnnOperand{s.destination_type, s.source_stride}, result};
  passes.backward_filter = CudnnOperands{source, result};
  return passes;
}

// OHWI weights are cuDNN's KRSC filter as they are. A fully connected layer
// whose regions allow it is a matrix product instead: with x [images][k]
// (k = h * w * in, an image's NHWC values) and the weights W [out][k],
// y = x W^T + b, dx = dy W, dW = dy^T x, in cuBLAS's column-major terms the
// transposes of those.
class CudaConvolution final : public ConvolutionPrimitive {
 public:
  CudaConvolution(int ordinal, const ConvolutionShape& s) : s_(s) {
    if (!is_matrix_product(s)) cudnn_ = std::make_unique<CudnnConvolution>(ordinal, cudnn_shape(s), cudnn_passes(s));
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    auto* w = static_cast<const float*>(weights);
    auto* b = static_cast<const float*>(biases);
    if (cudnn_) {
      cudnn_->forward(cuda, source, w, b, destination);
      return;
    }
    Float32Region x(cuda, source, kFirstStagedSlot, true);
    Float32Region y(cuda, destination, kSecondStagedSlot, false);
    if (b) fill_biases(y.region(), b, cuda.stream());
    gemm(cuda, tensor_float32(), CUBLAS_OP_T, CUBLAS_OP_N, s_.output_channels, s_.images, k(), w, k(), x.data(),
         leading_dimension(x.region()), b ? 1.0f : 0.0f, y.data(), leading_dimension(y.region()));
    y.store();
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const void* weights,
                     const ImageRegion& source_gradient) const override {
    CudaContext& cuda = context_of(context);
    auto* w = static_cast<const float*>(weights);
    if (cudnn_) {
      cudnn_->backward_data(cuda, result_gradient, w, nullptr, source_gradient);
      return;
    }
    Float32Region dy(cuda, result_gradient, kFirstStagedSlot, true);
    Float32Region dx(cuda, source_gradient, kSecondStagedSlot, false);
    gemm(cuda, tensor_float32(), CUBLAS_OP_N, CUBLAS_OP_N, k(), s_.images, s_.output_channels, w, k(), dy.data(),
         leading_dimension(dy.region()), 0.0f, dx.data(), leading_dimension(dx.region()));
    dx.store();
  }

  void backward_weights(ExecutionContext& context, const ImageRegion& source, const ImageRegion& result_gradient,
                        void* weights_gradient, void* biases_gradient) const override {
    CudaContext& cuda = context_of(context);
    if (biases_gradient) sum_biases_gradient(cuda, result_gradient, static_cast<float*>(biases_gradient));
    if (!weights_gradient) return;
    auto* dw = static_cast<float*>(weights_gradient);
    if (cudnn_) {
      cudnn_->backward_filter(cuda, source, result_gradient, dw);
      return;
    }
    Float32Region x(cuda, source, kFirstStagedSlot, true);
    Float32Region dy(cuda, result_gradient, kSecondStagedSlot, true);
    gemm(cuda, tensor_float32(), CUBLAS_OP_N, CUBLAS_OP_T, k(), s_.output_channels, s_.images, x.data(),
         leading_dimension(x.region()), dy.data(), leading_dimension(dy.region()), 0.0f, dw, k());
  }

 private:
  // The values of one source image the window reads.
  int64_t k() const { return s_.source_height * s_.source_width * s_.input_channels; }
  bool tensor_float32() const { return s_.accumulator_precision == AccumulatorPrecision::Half; }

  ConvolutionShape s_;
  std::unique_ptr<CudnnConvolution> cudnn_;
};

}  // namespace

std::unique_ptr<ConvolutionPrimitive> CudaBackend::make_convolution(const ConvolutionShape& shape) {
  return std::make_unique<CudaConvolution>(ordinal_, shape);
}

}  // namespace mpsx::cuda

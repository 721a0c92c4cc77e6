#include "mpsx/kernels/convolution.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "backend.h"
#include "convolution.cuh"
#include "convolution.h"
#include "cudnn_plan.h"
#include "image.cuh"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::cuda {
namespace {

// cuBLAS products in exact float32 unless the kernel's accumulator
// precision is half: then on TF32 tensor cores.
cublasComputeType_t gemm_compute(bool tensor_float32) {
  return tensor_float32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

size_t filter_bytes(const CudnnConvolutionShape& s, DataType type) {
  return static_cast<size_t>(filter_region(nullptr, s, false).element_count()) * size_of(type);
}

// A region as a pass's staging shows it to cuDNN: the region itself, or its
// copy in scratch inside zero padding.
class StagedRegion {
 public:
  StagedRegion(CudaContext& context, const ImageRegion& region, const CudnnConvolution::Staging& staging,
               DataType type, size_t slot, bool load)
      : context_(context), region_(region), interior_(region), copy_(staging.copy) {
    if (!copy_) {
      data_ = region.data;
      return;
    }
    const int64_t h = region.h + staging.top + staging.bottom, w = region.w + staging.left + staging.right;
    const size_t element = size_of(type), bytes = static_cast<size_t>(region.n * region.c * h * w) * element;
    data_ = context.scratch(slot, bytes);
    const ImageLayout layout = dense_layout(region.c, h, w, staging.nchw);
    interior_ = ImageRegion{static_cast<char*>(data_) + (staging.top * layout.h + staging.left * layout.w) * element,
                            type,
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
  void* data() const { return data_; }
  // The values of the region within it.
  const ImageRegion& view() const { return interior_; }
  // Writes a copy back into the region.
  void store() const {
    if (copy_) copy_region(interior_, region_, context_.stream());
  }

 private:
  CudaContext& context_;
  ImageRegion region_, interior_;
  bool copy_;
  void* data_ = nullptr;
};

// The results cuDNN derives along one axis from `pad` on both sides.
int64_t extent(int64_t size, int64_t pad, int64_t kernel, int64_t stride, int64_t dilation) {
  return (size + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// cuDNN pads both sides of an axis alike. It gets the padding before the
// source, where the windows start, if it derives the convolution's results
// from it: padding after the source beyond what the last window reaches is
// never read (a stride-2 window with padding 1 on an even size leaves a
// side's padding unread, and the families trim it). Otherwise it gets the
// padding common to both sides, and copies of x hold the rest.
int64_t cudnn_padding(int64_t before, int64_t after, int64_t size, int64_t kernel, int64_t stride, int64_t dilation,
                      int64_t results) {
  if (before >= after && extent(size, before, kernel, stride, dilation) == results) return before;
  return std::min(before, after);
}

}  // namespace

CudnnConvolution::CudnnConvolution(int ordinal, const CudnnConvolutionShape& shape, const CudnnPasses& passes)
    : ordinal_(ordinal), shape_(shape) {
  const CudnnConvolutionShape& s = shape_;
  DeviceScope scope(ordinal);
  QueryHandles& queries = query_handles();
  std::lock_guard<std::mutex> lock(queries.mutex);
  cudnnHandle_t handle = queries.of(ordinal);
  for (bool float32 : {false, true}) {
    for (Layout layout : {Layout::AsGiven, Layout::DenseNhwc, Layout::DenseNchw}) {
      if (std::optional<Passes> configured = configure(handle, passes, layout, float32)) {
        passes_ = std::move(*configured);
        return;
      }
    }
  }
  fail<Error>("cuDNN has no engine within ", kWorkspaceLimit >> 20, " MiB of workspace for the convolution of ",
              s.images, "x", s.x_channels, "x", s.x_height, "x", s.x_width, " (NxCxHxW, padding ", s.pad_top, ", ",
              s.pad_left, ", ", s.pad_bottom, ", ", s.pad_right, ") into ", s.y_channels, "x", s.y_height, "x",
              s.y_width, " with a ", s.kernel_width, "x", s.kernel_height, " kernel, stride ", s.stride_x, "x",
              s.stride_y, ", dilation ", s.dilation_x, "x", s.dilation_y, ", groups ", s.groups);
}

CudnnConvolution::~CudnnConvolution() = default;

std::optional<CudnnConvolution::Passes> CudnnConvolution::configure(cudnnHandle_t handle,
                                                                    const CudnnPasses& requested, Layout layout,
                                                                    bool float32) const {
  const CudnnConvolutionShape& s = shape_;
  Passes passes;
  passes.nchw = layout == Layout::DenseNchw;
  const bool as_given = layout == Layout::AsGiven;
  const int64_t pad_y = as_given ? cudnn_padding(s.pad_top, s.pad_bottom, s.x_height, s.kernel_height, s.stride_y,
                                                 s.dilation_y, s.y_height)
                                 : 0;
  const int64_t pad_x = as_given ? cudnn_padding(s.pad_left, s.pad_right, s.x_width, s.kernel_width, s.stride_x,
                                                 s.dilation_x, s.y_width)
                                 : 0;
  const std::pair<const std::optional<CudnnOperands>*, CudnnDirection> wanted[] = {
      {&requested.forward, CudnnDirection::Forward},
      {&requested.backward_data, CudnnDirection::BackwardData},
      {&requested.backward_filter, CudnnDirection::BackwardFilter}};
  for (const auto& [operands, direction] : wanted) {
    if (!*operands) continue;
    std::unique_ptr<Pass> p = prepare(direction, **operands, pad_y, pad_x, layout, float32);
    p->aligned = plan_pass(handle, ordinal_, s, *p, 16);
    if (!p->aligned) return std::nullopt;
    (direction == CudnnDirection::Forward        ? passes.forward
     : direction == CudnnDirection::BackwardData ? passes.backward_data
                                                 : passes.backward_filter) = std::move(p);
  }
  return passes;
}

std::unique_ptr<CudnnConvolution::Pass> CudnnConvolution::prepare(CudnnDirection direction,
                                                                  const CudnnOperands& operands, int64_t pad_y,
                                                                  int64_t pad_x, Layout layout, bool float32) const {
  const CudnnConvolutionShape& s = shape_;
  const bool dense = layout != Layout::AsGiven, nchw = layout == Layout::DenseNchw;
  auto p = std::make_unique<Pass>();
  p->direction = direction;
  p->pad_y = pad_y;
  p->pad_x = pad_x;
  p->x.top = s.pad_top - pad_y;
  p->x.left = s.pad_left - pad_x;
  p->x.bottom = std::max<int64_t>(0, s.pad_bottom - pad_y);
  p->x.right = std::max<int64_t>(0, s.pad_right - pad_x);
  bool padded = p->x.top || p->x.left || p->x.bottom || p->x.right;
  // Float16 on both sides goes to cuDNN as it is; anything else as float32.
  const bool half = !float32 && operands.x.type == DataType::Float16 && operands.y.type == DataType::Float16;
  p->io = half ? DataType::Float16 : DataType::Float32;
  p->x.copy = dense || padded || operands.x.type != p->io;
  p->y.copy = dense || operands.y.type != p->io;
  p->x.nchw = p->y.nchw = p->nchw = nchw;
  const int64_t h = s.x_height + p->x.top + p->x.bottom, w = s.x_width + p->x.left + p->x.right;
  p->x_height = h;
  p->x_width = w;
  p->x_stride = p->x.copy ? dense_layout(s.x_channels, h, w, nchw) : operands.x.stride;
  p->y_stride = p->y.copy ? dense_layout(s.y_channels, s.y_height, s.y_width, nchw) : operands.y.stride;

  // The shapes the families compute must be the ones cuDNN derives.
  const int64_t y_height = extent(h, pad_y, s.kernel_height, s.stride_y, s.dilation_y);
  const int64_t y_width = extent(w, pad_x, s.kernel_width, s.stride_x, s.dilation_x);
  if (y_height != s.y_height || y_width != s.y_width)
    fail<Error>("cuDNN derives a ", y_height, "x", y_width, " result from a ", h, "x", w,
                " padded source; the convolution expects ", s.y_height, "x", s.y_width);
  return p;
}

void CudnnConvolution::execute(CudaContext& context, const Pass& pass, void* x, const void* filter, void* y) const {
  CudnnPlan* plan = pass.aligned.get();
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(filter) | reinterpret_cast<uintptr_t>(y)) & 15) {
    std::lock_guard<std::mutex> lock(pass.mutex);
    if (!pass.unaligned) {
      QueryHandles& queries = query_handles();
      std::lock_guard<std::mutex> query_lock(queries.mutex);
      pass.unaligned = plan_pass(queries.of(ordinal_), ordinal_, shape_, pass, static_cast<int64_t>(size_of(pass.io)));
      if (!pass.unaligned)
        fail<Error>("cuDNN has no engine for this convolution on operands at addresses not aligned to 16 bytes");
    }
    plan = pass.unaligned.get();
  }
  void* workspace = plan->workspace ? context.scratch(kWorkspaceSlot, static_cast<size_t>(plan->workspace)) : nullptr;
  plan->execute(context.cudnn(), x, filter, y, workspace);
}

const void* CudnnConvolution::filter_in(CudaContext& context, const Pass& pass, const void* filter,
                                        DataType type) const {
  if (!passes_.nchw && pass.io == type) return filter;
  const ImageRegion in = filter_region(context.scratch(kCudnnFilterSlot, filter_bytes(shape_, pass.io)), shape_,
                                       passes_.nchw, pass.io);
  copy_region(filter_region(const_cast<void*>(filter), shape_, false, type), in, context.stream());
  return in.data;
}

DataType CudnnConvolution::filter_type() const {
  const Pass* reading = passes_.forward ? passes_.forward.get() : passes_.backward_data.get();
  return reading && !passes_.nchw && reading->io == DataType::Float16 ? DataType::Float16 : DataType::Float32;
}

void CudnnConvolution::forward(CudaContext& context, const ImageRegion& x, const void* filter, DataType filter_type,
                               const float* biases, const ImageRegion& y) const {
  const Pass& p = *passes_.forward;
  StagedRegion in(context, x, p.x, p.io, kFirstStagedSlot, true);
  StagedRegion out(context, y, p.y, p.io, kSecondStagedSlot, false);
  execute(context, p, in.data(), filter_in(context, p, filter, filter_type), out.data());
  if (biases) add_biases(out.view(), biases, context.stream());
  out.store();
}

void CudnnConvolution::backward_data(CudaContext& context, const ImageRegion& dy, const void* filter,
                                     DataType filter_type, const float* biases, const ImageRegion& dx) const {
  const Pass& p = *passes_.backward_data;
  StagedRegion in(context, dy, p.y, p.io, kFirstStagedSlot, true);
  StagedRegion out(context, dx, p.x, p.io, kSecondStagedSlot, false);
  execute(context, p, out.data(), filter_in(context, p, filter, filter_type), in.data());
  if (biases) add_biases(out.view(), biases, context.stream());
  out.store();
}

void CudnnConvolution::backward_filter(CudaContext& context, const ImageRegion& x, const ImageRegion& dy,
                                       float* filter_gradient) const {
  const Pass& p = *passes_.backward_filter;
  StagedRegion in(context, x, p.x, p.io, kFirstStagedSlot, true);
  StagedRegion gradient(context, dy, p.y, p.io, kSecondStagedSlot, true);
  const ImageRegion krsc = filter_region(filter_gradient, shape_, false);
  const bool direct = !passes_.nchw && p.io == DataType::Float32;
  const ImageRegion out =
      direct ? krsc
             : filter_region(context.scratch(kCudnnFilterSlot, filter_bytes(shape_, p.io)), shape_, passes_.nchw, p.io);
  execute(context, p, in.data(), out.data, gradient.data());
  if (!direct) copy_region(out, krsc, context.stream());
}

void sum_biases_gradient(CudaContext& context, const ImageRegion& result_gradient, float* biases_gradient) {
  auto* partials = static_cast<float*>(context.scratch(kPartialSumsSlot, channel_sums_scratch_bytes(result_gradient)));
  channel_sums(result_gradient, biases_gradient, partials, context.stream());
}

namespace {

// The leading dimension of a float32 view whose images are matrix rows.
int64_t leading_dimension(const ImageRegion& view) { return view.n > 1 ? view.stride.n : view.c * view.h * view.w; }

// True if a region of these strides holds each image's values as one row in
// (h, w, c) order, as a matrix product takes them.
bool rows_in_place(const ImageLayout& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return s.c == 1 && (w == 1 || s.w == c) && (h == 1 || s.h == w * c) && (n == 1 || s.n >= h * w * c);
}

// The same of the float32 view of such a region (Float32Region): views of
// other types are dense copies.
bool image_rows(DataType type, const ImageLayout& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return type != DataType::Float32 || rows_in_place(s, n, c, h, w);
}

// The tap over a one-result axis' first source value, where each of its
// `size` values is under a tap of its own, the next one's (dilation 1) or
// the only one (size 1).
std::optional<int64_t> first_tap(int64_t size, int64_t pad_before, int64_t kernel, int64_t dilation) {
  if (pad_before < 0) return std::nullopt;
  if (size == 1) {
    if (pad_before % dilation || pad_before / dilation >= kernel) return std::nullopt;
    return pad_before / dilation;
  }
  if (dilation != 1 || pad_before + size > kernel) return std::nullopt;
  return pad_before;
}

// The taps over the source's first row and column of a convolution with one
// result per image whose window takes in every source value (the fully
// connected layer; a 3x3 window on a 1x1 source, or padded on a 2x2 one),
// on regions a matrix product takes as they are.
struct WindowTaps {
  int64_t top = 0, left = 0;
};

std::optional<WindowTaps> one_result_window(const ConvolutionShape& s) {
  if (s.groups != 1 || s.height != 1 || s.width != 1) return std::nullopt;
  const std::optional<int64_t> top = first_tap(s.source_height, s.pad_top, s.kernel_height, s.dilation_y);
  const std::optional<int64_t> left = first_tap(s.source_width, s.pad_left, s.kernel_width, s.dilation_x);
  if (!top || !left) return std::nullopt;
  const int64_t n = s.images, in = s.input_channels, h = s.source_height, w = s.source_width;
  // The result (or its gradient), the source, and the source's gradient.
  if (!image_rows(s.destination_type, s.destination_stride, n, s.output_channels, 1, 1) ||
      !image_rows(s.source_type, s.source_stride, n, in, h, w) ||
      (s.gradient && !image_rows(s.destination_type, s.source_stride, n, in, h, w)))
    return std::nullopt;
  return WindowTaps{*top, *left};
}

// True if every image's pixels, and the images, follow one another as rows
// of c values.
bool pixel_rows(const ImageLayout& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return rows_in_place(s, n, c, h, w) && (n == 1 || s.n == h * w * c);
}

// A 1x1 window with a stride that reads no padding (ResNet's downsampling
// shortcut), whose result (or its gradient) is rows of pixels of the type
// the products take: float16 where the source and the result are, else
// float32. (The source, and its gradient, may be a window of a larger
// image: the gradient's region ends at the last pixel sampled.)
bool is_sampled_pointwise(const ConvolutionShape& s) {
  if (s.groups != 1 || s.kernel_height != 1 || s.kernel_width != 1 || (s.stride_y == 1 && s.stride_x == 1) ||
      s.pad_top != 0 || s.pad_left != 0 || s.height < 1 || s.width < 1 ||
      (s.height - 1) * s.stride_y >= s.source_height || (s.width - 1) * s.stride_x >= s.source_width)
    return false;
  const bool half = s.source_type == DataType::Float16 && s.destination_type == DataType::Float16;
  if (!half && s.destination_type != DataType::Float32) return false;
  return pixel_rows(s.destination_stride, s.images, s.output_channels, s.height, s.width);
}

// A column-major matrix: its data, type and leading dimension.
struct Matrix {
  const void* data;
  cudaDataType_t type;
  int64_t ld;
};

// A region as a matrix product takes it: itself where the product runs in
// float16, otherwise its float32 view, which store() writes back.
class MatrixRows {
 public:
  MatrixRows(CudaContext& cuda, const ImageRegion& region, size_t slot, bool load, bool half) : region_(region) {
    if (!half) region_ = view_.emplace(cuda, region, slot, load).region();
  }
  const ImageRegion& region() const { return region_; }
  Matrix matrix() const {
    return {region_.data, region_.data_type == DataType::Float16 ? CUDA_R_16F : CUDA_R_32F,
            leading_dimension(region_)};
  }
  void store() const {
    if (view_) view_->store();
  }

 private:
  std::optional<Float32Region> view_;
  ImageRegion region_;
};

// C = op(A) op(B) + beta C, summed in float32 (TF32 products where allowed;
// float16 operands on tensor cores).
void gemm(CudaContext& context, bool tensor_float32, cublasOperation_t a_op, cublasOperation_t b_op, int64_t m,
          int64_t n, int64_t k, Matrix a, Matrix b, float beta, Matrix c) {
  const float one = 1.0f;
  MPSX_CUDA_CHECK(cublasGemmEx_64(context.cublas(), a_op, b_op, m, n, k, &one, a.data, a.type, a.ld, b.data, b.type,
                                  b.ld, &beta, const_cast<void*>(c.data), c.type, c.ld, gemm_compute(tensor_float32),
                                  CUBLAS_GEMM_DEFAULT));
}

CudnnConvolutionShape cudnn_shape(const ConvolutionShape& s, bool deterministic) {
  CudnnConvolutionShape c;
  static_cast<ConvolutionWindow&>(c) = s;
  c.images = s.images;
  c.x_channels = s.input_channels;
  c.x_height = s.source_height;
  c.x_width = s.source_width;
  c.y_channels = s.output_channels;
  c.y_height = s.height;
  c.y_width = s.width;
  c.tensor_float32 = s.accumulator_precision == AccumulatorPrecision::Half;
  c.deterministic = deterministic;
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

// OHWI weights are cuDNN's KRSC filter as they are. A convolution with one
// result per image whose window takes in every source value
// (one_result_window) is a sum of matrix products instead, one per block of
// source values under consecutive taps: each source row, or the whole image
// where its rows are whole kernel rows. With x_r [images][k] (block r of
// each image's NHWC values) and W_r [out][k] (the weights of its taps, rows
// kh * kw * in apart), y = sum_r x_r W_r^T + b, dx_r = dy W_r and
// dW_r = dy^T x_r, zero for the taps that see only padding; in cuBLAS's
// column-major terms the transposes of those. Float16 regions that are rows
// as they are go to cuBLAS in float16 with the weights converted (float32
// sums, a float32 weights gradient); others as float32 views. A 1x1 window
// with a stride (is_sampled_pointwise), which cuDNN runs through a generic
// transpose kernel, is one matrix product on the sampled source pixels
// copied into rows x_s [pixels][in]: y = x_s W^T + b, dW = dy^T x_s, and
// dx_s = dy W copied into the sampled pixels of dx, zero elsewhere.
class CudaConvolution final : public ConvolutionPrimitive {
 public:
  CudaConvolution(CudaBackend& backend, const ConvolutionShape& shape)
      : sub_pixel_(sub_pixel_of(backend, shape)), s_(sub_pixel_ ? sub_pixel_->intermediate_shape() : shape) {
    const ConvolutionShape& s = s_;
    if (is_sampled_pointwise(s)) {
      sampled_ = true;
      half_ = s.source_type == DataType::Float16 && s.destination_type == DataType::Float16;
      return;
    }
    const std::optional<WindowTaps> taps = one_result_window(s);
    if (!taps) {
      cudnn_ = std::make_unique<CudnnConvolution>(backend.ordinal(), cudnn_shape(s, backend.deterministic),
                                                  cudnn_passes(s));
      return;
    }
    taps_ = *taps;
    const int64_t n = s.images, in = s.input_channels, h = s.source_height, w = s.source_width;
    blocks_ = h == 1 || w == s.kernel_width ? 1 : h;
    half_ = s.source_type == DataType::Float16 && s.destination_type == DataType::Float16 &&
            rows_in_place(s.source_stride, n, in, h, w) &&
            rows_in_place(s.destination_stride, n, s.output_channels, 1, 1);
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    CudaContext& cuda = context_of(context);
    if (!sub_pixel_) {
      convolve(cuda, source, weights, static_cast<const float*>(biases), destination);
      return;
    }
    const ImageRegion result =
        sub_pixel_->intermediate(cuda.scratch(kSubPixelSlot, sub_pixel_->intermediate_bytes()));
    convolve(cuda, source, weights, static_cast<const float*>(biases), result);
    sub_pixel_->rearrange(context, result, destination, [&cuda](const ImageRegion& from, const ImageRegion& to) {
      copy_region(from, to, cuda.stream());
    });
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& /*source*/,
                     const void* weights, const ImageRegion& source_gradient) const override {
    CudaContext& cuda = context_of(context);
    if (cudnn_) {
      cudnn_->backward_data(cuda, result_gradient, weights, weights_type(), nullptr, source_gradient);
      return;
    }
    if (sampled_) {
      const ImageRegion dx = rows_in_scratch(cuda);
      gemm(cuda, tensor_float32(), CUBLAS_OP_N, CUBLAS_OP_N, s_.input_channels, pixels(), s_.output_channels,
           weights_in(weights), rows_of(result_gradient), 0.0f, rows_of(dx));
      fill_zero(cuda, source_gradient);
      copy_region(dx, sampled(source_gradient), cuda.stream());
      return;
    }
    MatrixRows dy(cuda, result_gradient, kFirstStagedSlot, true, half_);
    MatrixRows dx(cuda, source_gradient, kSecondStagedSlot, false, half_);
    const Matrix filter = weights_in(weights);
    for (int64_t r = 0; r < blocks_; ++r)
      gemm(cuda, tensor_float32(), CUBLAS_OP_N, CUBLAS_OP_N, block_values(), s_.images, s_.output_channels,
           block_weights(filter, r), dy.matrix(), 0.0f, block(dx.matrix(), r));
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
    if (sampled_) {
      gemm(cuda, tensor_float32(), CUBLAS_OP_N, CUBLAS_OP_T, s_.input_channels, s_.output_channels, pixels(),
           rows_of(sampled_rows(cuda, source)), rows_of(result_gradient), 0.0f,
           Matrix{dw, CUDA_R_32F, s_.input_channels});
      return;
    }
    MatrixRows x(cuda, source, kFirstStagedSlot, true, half_);
    MatrixRows dy(cuda, result_gradient, kSecondStagedSlot, true, half_);
    if (blocks_ * block_values() < weights_per_output())
      cuda.fill_zero(dw, static_cast<size_t>(s_.output_channels * weights_per_output()) * sizeof(float));
    const Matrix gradient{dw, CUDA_R_32F, weights_per_output()};
    for (int64_t r = 0; r < blocks_; ++r)
      gemm(cuda, tensor_float32(), CUBLAS_OP_N, CUBLAS_OP_T, block_values(), s_.output_channels, s_.images,
           block(x.matrix(), r), dy.matrix(), 0.0f, block_weights(gradient, r));
  }

  // float16 where the products or cuDNN's passes read float16 filters.
  DataType weights_type() const override {
    if (cudnn_) return cudnn_->filter_type();
    return half_ ? DataType::Float16 : DataType::Float32;
  }
  void convert_weights(ExecutionContext& context, const float* weights, void* to, int64_t count) const override {
    const ImageRegion from{const_cast<float*>(weights), DataType::Float32, 1, count, 1, 1,
                           ImageLayout{count, 1, count, count}};
    ImageRegion into = from;
    into.data = to;
    into.data_type = weights_type();
    copy_region(from, into, context_of(context).stream());
  }

 private:
  static std::optional<SubPixelConvolution> sub_pixel_of(CudaBackend& backend, const ConvolutionShape& shape) {
    if (shape.sub_pixel_scale_factor == 1) return std::nullopt;
    return SubPixelConvolution(backend, shape);
  }

  // The regular convolution of s_ into `y_region`, with weights of weights_type().
  void convolve(CudaContext& cuda, const ImageRegion& source, const void* w, const float* b,
                const ImageRegion& y_region) const {
    if (cudnn_) {
      cudnn_->forward(cuda, source, w, weights_type(), b, y_region);
      return;
    }
    if (sampled_) {
      const ImageRegion x = sampled_rows(cuda, source);
      if (b) fill_biases(y_region, b, cuda.stream());
      gemm(cuda, tensor_float32(), CUBLAS_OP_T, CUBLAS_OP_N, s_.output_channels, pixels(), s_.input_channels,
           weights_in(w), rows_of(x), b ? 1.0f : 0.0f, rows_of(y_region));
      return;
    }
    MatrixRows x(cuda, source, kFirstStagedSlot, true, half_);
    MatrixRows y(cuda, y_region, kSecondStagedSlot, false, half_);
    if (b) fill_biases(y.region(), b, cuda.stream());
    const Matrix filter = weights_in(w);
    for (int64_t r = 0; r < blocks_; ++r)
      gemm(cuda, tensor_float32(), CUBLAS_OP_T, CUBLAS_OP_N, s_.output_channels, s_.images, block_values(),
           block_weights(filter, r), block(x.matrix(), r), b || r > 0 ? 1.0f : 0.0f, y.matrix());
    y.store();
  }

  // The result pixels of all images, which sampled_ products take as rows.
  int64_t pixels() const { return s_.images * s_.height * s_.width; }
  // A region of pixel rows as a matrix of one pixel per column.
  static Matrix rows_of(const ImageRegion& r) {
    return {r.data, r.data_type == DataType::Float16 ? CUDA_R_16F : CUDA_R_32F, r.c};
  }
  // The pixels of a source-sized region that the windows sample.
  ImageRegion sampled(const ImageRegion& r) const {
    ImageRegion view = r;
    view.h = s_.height;
    view.w = s_.width;
    view.stride.h *= s_.stride_y;
    view.stride.w *= s_.stride_x;
    return view;
  }
  // Dense rows of the sampled pixels in scratch, of the products' type.
  ImageRegion rows_in_scratch(CudaContext& cuda) const {
    const DataType type = half_ ? DataType::Float16 : DataType::Float32;
    const size_t bytes = static_cast<size_t>(pixels() * s_.input_channels) * size_of(type);
    return ImageRegion{cuda.scratch(kFirstStagedSlot, bytes), type, s_.images, s_.input_channels, s_.height,
                       s_.width, dense_layout(s_.input_channels, s_.height, s_.width, false)};
  }
  // A region zeroed: a memset where its pixels are rows, else a copy of one
  // zero.
  static void fill_zero(CudaContext& cuda, const ImageRegion& r) {
    const size_t value = size_of(r.data_type);
    if (pixel_rows(r.stride, r.n, r.c, r.h, r.w)) {
      cuda.fill_zero(r.data, static_cast<size_t>(r.element_count()) * value);
      return;
    }
    ImageRegion zero = r;
    zero.data = cuda.scratch(kSecondStagedSlot, value);
    zero.stride = ImageLayout{0, 0, 0, 0};
    cuda.fill_zero(zero.data, value);
    copy_region(zero, r, cuda.stream());
  }
  ImageRegion sampled_rows(CudaContext& cuda, const ImageRegion& source) const {
    const ImageRegion rows = rows_in_scratch(cuda);
    copy_region(sampled(source), rows, cuda.stream());
    return rows;
  }
  // The weights of one output channel, and the source values of one block.
  int64_t weights_per_output() const { return s_.kernel_height * s_.kernel_width * s_.input_channels; }
  int64_t block_values() const { return s_.source_height * s_.source_width * s_.input_channels / blocks_; }
  // Block r of an image's values (x or dx), and its taps' weights (or their gradient).
  Matrix block(Matrix images, int64_t r) const { return offset(images, r * block_values()); }
  Matrix block_weights(Matrix weights, int64_t r) const {
    return offset(weights, ((taps_.top + r) * s_.kernel_width + taps_.left) * s_.input_channels);
  }
  static Matrix offset(Matrix m, int64_t values) {
    m.data = static_cast<const char*>(m.data) + values * (m.type == CUDA_R_16F ? 2 : 4);
    return m;
  }
  // TF32 products of float32 operands where the kernel allows them.
  bool tensor_float32() const { return !half_ && s_.accumulator_precision == AccumulatorPrecision::Half; }
  // The weights [out][kh * kw * in], of weights_type(), as the products take them.
  Matrix weights_in(const void* w) const { return {w, half_ ? CUDA_R_16F : CUDA_R_32F, weights_per_output()}; }

  std::optional<SubPixelConvolution> sub_pixel_;  // before s_, which it gives
  ConvolutionShape s_;
  std::unique_ptr<CudnnConvolution> cudnn_;
  WindowTaps taps_;
  int64_t blocks_ = 1;    // matrix products per pass
  bool sampled_ = false;  // a 1x1 window with a stride
  bool half_ = false;     // products of float16 rows
};

const Registered<ConvolutionPrimitive, CudaConvolution> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda

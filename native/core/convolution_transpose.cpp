#include "mpsx/kernels/convolution_transpose.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/pool.h"
#include "mpsx/registry.h"

namespace mpsx {

bool ConvolutionTransposeShape::operator==(const ConvolutionTransposeShape& o) const {
  auto fields = [](const ConvolutionTransposeShape& s) {
    return std::tie(s.images, s.input_channels, s.output_channels, s.source_height, s.source_width, s.height,
                    s.width, s.reached_y, s.reached_x, s.reached_height, s.reached_width, s.source_stride.n,
                    s.source_stride.c, s.source_stride.h, s.source_stride.w, s.destination_stride.n,
                    s.destination_stride.c, s.destination_stride.h, s.destination_stride.w, s.source_type,
                    s.destination_type, s.gradient, s.accumulator_precision);
  };
  return ConvolutionWindow::operator==(o) && fields(*this) == fields(o);
}

ConvolutionTransposeGradientState::ConvolutionTransposeGradientState(
    std::shared_ptr<const CNNConvolutionTranspose> transpose)
    : ConvolutionGradientState(std::move(transpose)) {}

std::shared_ptr<const CNNConvolutionTranspose> ConvolutionTransposeGradientState::convolution_transpose() const {
  return std::static_pointer_cast<const CNNConvolutionTranspose>(convolution());
}

// ---------------------------------------------------------------- geometry

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// One dimension of what a transpose reads and reaches. Relative to the first
// destination pixel written: `first` is the expanded-image position of its
// window's first tap, `count` the pixels written.
struct Span {
  int64_t source_first = 0, source_count = 0;    // source pixels under some tap
  int64_t reached_first = 0, reached_count = 0;  // destination pixels they reach
  int64_t pad_before = 0, pad_after = 0;         // of the deconvolution between the two
};

Span span_of(int64_t first, int64_t count, int64_t source, int64_t stride, int64_t extent) {
  Span s;
  // Source pixel i sits at expanded position i * stride.
  int64_t lo = std::max<int64_t>(0, -floor_div(-first, stride));
  int64_t hi = std::min(source - 1, floor_div(first + count + extent - 2, stride));
  if (lo > hi) return s;
  // With the filter rotated, source pixel i reaches destination pixels
  // i * stride - first - (extent - 1) + tap: a deconvolution padded by
  // first + extent - 1, less what the blocks cut off.
  int64_t reached_end = std::min(count, stride * hi - first + 1);
  s.source_first = lo;
  s.source_count = hi - lo + 1;
  s.reached_first = std::max<int64_t>(0, stride * lo - first - extent + 1);
  s.reached_count = reached_end - s.reached_first;
  s.pad_before = first + extent - 1 + s.reached_first - stride * lo;
  s.pad_after = stride * hi - first + 1 - reached_end;
  return s;
}

struct Blocks {
  Span x, y;
  bool reads_source() const { return x.source_count > 0 && y.source_count > 0; }
};

Blocks blocks_of(const char* kernel, const ConvolutionDescriptor& d, const Image& source, const Geometry& g) {
  int64_t extent_x = (d.kernel_width - 1) * d.dilation_x + 1, extent_y = (d.kernel_height - 1) * d.dilation_y + 1;
  int64_t expanded_x = (source.width() - 1) * d.stride_x + 1, expanded_y = (source.height() - 1) * d.stride_y + 1;
  if (g.source_x + g.width + extent_x - 1 <= 0 || g.source_x >= expanded_x || g.source_y + g.height + extent_y - 1 <= 0 ||
      g.source_y >= expanded_y)
    fail<ShapeError>(kernel, ": with offset * stride + kernel offset (", g.source_x + extent_x / 2, ", ",
                     g.source_y + extent_y / 2, ") the windows read nothing of the ", expanded_x, "x", expanded_y,
                     " expanded source image");
  Blocks b{span_of(g.source_x, g.width, source.width(), d.stride_x, extent_x),
           span_of(g.source_y, g.height, source.height(), d.stride_y, extent_y)};
  if (!b.reads_source()) b = Blocks{};  // windows between source pixels: the bias only
  return b;
}

ConvolutionTransposeShape shape_of(const ConvolutionDescriptor& d, const Blocks& b, const Geometry& g,
                                   const Image& source, const ImageLayout& destination_stride,
                                   DataType destination_type, bool gradient) {
  ConvolutionTransposeShape s;
  static_cast<ConvolutionWindow&>(s) = d.window();
  s.images = g.images;
  s.input_channels = d.input_feature_channels;
  s.output_channels = d.output_feature_channels;
  s.source_height = b.y.source_count;
  s.source_width = b.x.source_count;
  s.height = g.height;
  s.width = g.width;
  s.reached_y = b.y.reached_first;
  s.reached_x = b.x.reached_first;
  s.reached_height = b.y.reached_count;
  s.reached_width = b.x.reached_count;
  s.pad_top = b.y.pad_before;
  s.pad_left = b.x.pad_before;
  s.pad_bottom = b.y.pad_after;
  s.pad_right = b.x.pad_after;
  s.source_stride = source.layout();
  s.destination_stride = destination_stride;
  s.source_type = source.data_type();
  s.destination_type = destination_type;
  s.gradient = gradient;
  return s;
}

ImageRegion source_block(const Image& image, const Geometry& g, const Blocks& b, int64_t channels) {
  return image.region(g.source_image, g.source_channel, b.y.source_first, b.x.source_first, g.images, channels,
                      b.y.source_count, b.x.source_count);
}

// Splits an expanded-image position into offset * stride + kernel offset,
// the kernel offset in [0, stride).
void split(int64_t total, int64_t stride, int64_t* offset, int64_t* kernel_offset) {
  *offset = floor_div(total, stride);
  *kernel_offset = total - *offset * stride;
}

}  // namespace

// ---------------------------------------------------------------- CNNConvolutionTranspose

CNNConvolutionTranspose::CNNConvolutionTranspose(std::shared_ptr<Device> device,
                                                 std::shared_ptr<ConvolutionDataSource> data_source)
    : CNNConvolution(std::move(device), std::move(data_source), "MPSCNNConvolutionTranspose") {
  primitive_maker<ConvolutionTransposePrimitive>(this->device().backend());  // a family the backend lacks fails here
  // MPSCNNSubPixelConvolutionDescriptor describes "MPSCNNConvolution with
  // subPixelScaleFactor > 1"; MPSCNNConvolutionTranspose.h has no such
  // rearrangement.
  if (descriptor_.sub_pixel_scale_factor != 1)
    fail<ArgumentError>(class_name(), ": MPS defines sub-pixel convolution for MPSCNNConvolution only; given "
                        "sub_pixel_scale_factor ", descriptor_.sub_pixel_scale_factor, " (must be 1)");
}

Window CNNConvolutionTranspose::window() const {
  // A stride-1 convolution over the expanded source.
  Window w;
  w.kernel_width = descriptor_.kernel_width;
  w.kernel_height = descriptor_.kernel_height;
  w.dilation_x = descriptor_.dilation_x;
  w.dilation_y = descriptor_.dilation_y;
  return w;
}

void CNNConvolutionTranspose::check_properties() const {
  CNNConvolution::check_properties();
  check_range(kernel_offset_x, -kMaxPosition, kMaxPosition, class_name(), ": kernel_offset_x");
  check_range(kernel_offset_y, -kMaxPosition, kMaxPosition, class_name(), ": kernel_offset_y");
}

Offset CNNConvolutionTranspose::source_offset() const {
  return Offset{offset.x * descriptor_.stride_x + kernel_offset_x, offset.y * descriptor_.stride_y + kernel_offset_y,
                offset.z};
}

ImageDescriptor CNNConvolutionTranspose::destination_descriptor(const Image& source, const State* source_state) {
  if (source_state) {
    // MPSImageSizeEncodingState: the size of the convolution's source.
    ImageDescriptor d = static_cast<const ConvolutionGradientState&>(*source_state).source_descriptor;
    d.channel_format = source.data_type() == DataType::Float16 ? DataType::Float16 : DataType::Float32;
    d.feature_channels = descriptor_.output_feature_channels;
    d.number_of_images = source.number_of_images() - offset.z;
    if (d.number_of_images <= 0)
      fail<ShapeError>(class_name(), ": offset.z ", offset.z, " is past the ", source.number_of_images(),
                       " source images");
    return d;
  }
  // The reverse filters' policy: the forward one over the expanded source at
  // stride 1, so the size is MPS's DestSizeReverse.
  Window w = window();
  int64_t width = (source.width() - 1) * descriptor_.stride_x + 1;
  int64_t height = (source.height() - 1) * descriptor_.stride_y + 1;
  if ((padding_method & padding::kSizeMask & ~padding::kCustom) == padding::kSizeValidOnly &&
      (width < w.extent_x() || height < w.extent_y()))
    fail<ShapeError>(class_name(), ": a ", source.width(), "x", source.height(), " source image expands to ", width,
                     "x", height, ", smaller than the ", w.extent_x(), "x", w.extent_y(),
                     " window; valid-only padding leaves no destination");
  ImageDescriptor d = apply_padding(source, width, height, w, descriptor_.output_feature_channels);
  split(offset.x, descriptor_.stride_x, &offset.x, &kernel_offset_x);
  split(offset.y, descriptor_.stride_y, &offset.y, &kernel_offset_y);
  return d;
}

std::shared_ptr<ConvolutionGradientState> CNNConvolutionTranspose::coupling(const std::shared_ptr<State>& given,
                                                                            const Image& source) const {
  if (!given) return nullptr;
  check_device(*given, "convolution gradient state");
  auto state = std::dynamic_pointer_cast<ConvolutionGradientState>(given);
  if (!state || dynamic_cast<const ConvolutionTransposeGradientState*>(given.get()))
    fail<TypeMismatchError>(class_name(), ": expected the MPSCNNConvolutionGradientState of a convolution, given an ",
                            given->class_name());
  if (!state->encoded)
    fail<StateError>(class_name(), ": the MPSCNNConvolutionGradientState was not produced by a forward encode");
  const ImageDescriptor& result = state->destination_descriptor;
  if (source.width() != result.width || source.height() != result.height)
    fail<ShapeError>(class_name(), ": the MPSCNNConvolutionGradientState comes from a convolution of ", result.width,
                     "x", result.height, " results; given a ", source.width(), "x", source.height(), " source image");
  return state;
}

void CNNConvolutionTranspose::align_with_convolution(const ConvolutionGradientState& state) {
  // Mirror the convolution's windows: the destination pixels a source pixel
  // reaches are the pixels the convolution read for it, which makes this the
  // convolution's data gradient for weights transposed and rotated by 180
  // degrees; for kernels of different parities the centres align, rounded
  // towards the top left.
  const ConvolutionDescriptor& f = state.convolution()->descriptor();
  const Geometry& g = state.geometry;
  auto total = [](int64_t extent, int64_t forward_extent, int64_t forward_first, int64_t forward_x,
                  int64_t forward_stride, int64_t clip) {
    int64_t forward_centre = forward_first + forward_extent / 2 - forward_x * forward_stride;
    return (1 - extent % 2 + 1 - forward_extent % 2) / 2 - forward_centre + clip;
  };
  Window w = window();
  split(total(w.extent_x(), (f.kernel_width - 1) * f.dilation_x + 1, g.source_x, g.x, f.stride_x, clip_rect.x),
        descriptor_.stride_x, &offset.x, &kernel_offset_x);
  split(total(w.extent_y(), (f.kernel_height - 1) * f.dilation_y + 1, g.source_y, g.y, f.stride_y, clip_rect.y),
        descriptor_.stride_y, &offset.y, &kernel_offset_y);
}

UnaryKernel::Encoded CNNConvolutionTranspose::encode(CommandBuffer& command_buffer,
                                                     const std::shared_ptr<Image>& source,
                                                     const std::shared_ptr<State>& convolution_gradient_state,
                                                     const std::shared_ptr<Image>& destination,
                                                     const std::shared_ptr<State>& state, bool want_state) {
  if (!source) fail<TypeMismatchError>(class_name(), ": expected a source image, given None");
  std::shared_ptr<State> given = convolution_gradient_state;
  auto* transpose_state = dynamic_cast<ConvolutionTransposeGradientState*>(state.get());
  if (!given && transpose_state) given = transpose_state->convolution_gradient_state;
  std::shared_ptr<ConvolutionGradientState> coupled = coupling(given, *source);
  check_properties();  // align_with_convolution reads clip_rect
  if (coupled) align_with_convolution(*coupled);
  Encoded encoded = UnaryKernel::encode(command_buffer, source, destination, state, want_state, coupled.get());
  if (coupled && encoded.state)
    static_cast<ConvolutionTransposeGradientState&>(*encoded.state).convolution_gradient_state = coupled;
  return encoded;
}

ImageDescriptor CNNConvolutionTranspose::destination_image_descriptor(
    const Image& source, const std::shared_ptr<State>& convolution_gradient_state) {
  check_device(source, "source image");
  check_properties();
  check_source(source);
  check_source_channels(source, source_channels(source));
  std::shared_ptr<ConvolutionGradientState> coupled = coupling(convolution_gradient_state, source);
  Restore<Offset> kept_offset(offset);
  Restore<int64_t> kept_x(kernel_offset_x), kept_y(kernel_offset_y);
  if (coupled) align_with_convolution(*coupled);
  return destination_descriptor(source, coupled.get());
}

std::shared_ptr<State> CNNConvolutionTranspose::new_result_state(const Image&) {
  return make_pooled<ConvolutionTransposeGradientState>(
      std::static_pointer_cast<const CNNConvolutionTranspose>(shared_from_this()));
}

std::shared_ptr<ConvolutionTransposeGradientState> CNNConvolutionTranspose::result_state(
    const Image& source, const std::shared_ptr<State>& convolution_gradient_state) {
  auto state = std::static_pointer_cast<ConvolutionTransposeGradientState>(UnaryKernel::result_state(source));
  state->convolution_gradient_state = coupling(convolution_gradient_state, source);
  return state;
}

void CNNConvolutionTranspose::check_state(const State& state) const {
  check_own_gradient_state<ConvolutionTransposeGradientState>(*this, state, "MPSCNNConvolutionTransposeGradientState");
}

void CNNConvolutionTranspose::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                     const std::shared_ptr<Image>& destination, const Geometry& g,
                                     const std::shared_ptr<State>& state) {
  Blocks b = blocks_of(class_name(), descriptor_, *source, g);
  auto* gradient_state = static_cast<ConvolutionTransposeGradientState*>(state.get());
  const int64_t in = descriptor_.input_feature_channels, out = descriptor_.output_feature_channels;
  std::shared_ptr<Image> pre = pre_activation_for(gradient_state, destination->data_type(), g);
  ConvolutionTransposeShape shape = shape_of(descriptor_, b, g, *source, pre ? pre->layout() : destination->layout(),
                                             destination->data_type(), false);
  shape.accumulator_precision = accumulator_precision;
  const auto& primitive = cached_primitive(transpose_primitives_, device().backend(), shape);
  Parameters p = parameters_for(gradient_state, pre);
  command_buffer.record([primitive, neuron = neuron_, source, destination, pre, weights = std::move(p.weights),
                         biases = std::move(p.biases), g, b, in, out](ExecutionContext& context) {
    ImageRegion to = destination_region(*destination, g, out);
    ImageRegion result = pre ? pre->whole() : to;
    primitive->forward(context, source_block(*source, g, b, in), weights->data(), biases->data(), result);
    if (neuron) neuron->forward(context, result, to, 0);
  });
}

// ---------------------------------------------------------------- CNNConvolutionTransposeGradient

CNNConvolutionTransposeGradient::CNNConvolutionTransposeGradient(std::shared_ptr<Device> device,
                                                                 std::shared_ptr<ConvolutionDataSource> data_source)
    : CNNConvolutionGradient(std::move(device), std::move(data_source)) {
  primitive_maker<ConvolutionTransposePrimitive>(this->device().backend());  // a family the backend lacks fails here
}

const GradientState& CNNConvolutionTransposeGradient::gradient_state_of(const State& state) const {
  if (!dynamic_cast<const ConvolutionTransposeGradientState*>(&state))
    fail<TypeMismatchError>(class_name(), ": expected an MPSCNNConvolutionTransposeGradientState, given an ",
                            state.class_name());
  return CNNConvolutionGradient::gradient_state_of(state);
}

void CNNConvolutionTransposeGradient::record(CommandBuffer& command_buffer,
                                             const std::shared_ptr<Image>& source_gradient,
                                             const std::shared_ptr<Image>& source_image,
                                             const std::shared_ptr<State>& state,
                                             const std::shared_ptr<Image>& destination_gradient) {
  auto gs = std::static_pointer_cast<ConvolutionTransposeGradientState>(state);
  const ConvolutionDescriptor& d = descriptor();
  const Geometry g = gs->geometry;
  const int64_t in = d.input_feature_channels, out = d.output_feature_channels;
  Blocks b = blocks_of(class_name(), d, *source_image, g);
  std::shared_ptr<Image> dy = result_gradient_scratch(*gs, source_gradient->data_type(), g);
  ConvolutionTransposeShape shape = shape_of(d, b, g, *source_image, dy ? dy->layout() : source_gradient->layout(),
                                             source_gradient->data_type(), true);
  shape.accumulator_precision = gs->convolution_transpose()->accumulator_precision;
  const auto& primitive = cached_primitive(transpose_primitives_, device().backend(), shape);
  bool data = computes_data();
  bool weights = computes_weights();
  bool covers = b.reads_source() && g.source_image == 0 && b.x.source_count == source_image->width() &&
                b.y.source_count == source_image->height() && g.source_channel == 0 &&
                in == source_image->feature_channels();
  command_buffer.record([primitive, neuron = neuron_, gs, source_gradient, source_image, destination_gradient, dy, g,
                         b, data, weights, covers, in, out](ExecutionContext& context) {
    const ImageRegion result_gradient =
        gradient_before_neuron(context, neuron.get(), *gs, destination_region(*source_gradient, g, out), dy.get());
    if (data) {
      if (!covers) context.fill_zero_image(*destination_gradient);
      if (b.reads_source())
        primitive->backward_data(context, result_gradient, source_block(*source_image, g, b, in),
                                 gs->weights->data(), source_block(*destination_gradient, g, b, in));
    }
    if (weights)
      primitive->backward_weights(context, source_block(*source_image, g, b, in), result_gradient,
                                  gs->gradient_for_weights()->data(), gs->gradient_for_biases()->data());
  });
  will_write_weights_gradients(command_buffer, *gs);
}

std::vector<std::shared_ptr<GradientKernel>> CNNConvolutionTranspose::make_gradient_kernels() const {
  return {std::make_shared<CNNConvolutionTransposeGradient>(device_ptr(), data_source())};
}

}  // namespace mpsx

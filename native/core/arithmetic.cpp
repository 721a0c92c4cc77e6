#include "mpsx/kernels/arithmetic.h"

#include <cmath>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {
namespace {

void check_operation(ArithmeticOperation operation) {
  if (static_cast<int32_t>(operation) < 0 || static_cast<int32_t>(operation) > 4)
    fail<ArgumentError>("unknown arithmetic operation ", static_cast<int32_t>(operation), "; expected 0 to 4");
}

void check_zero_or_one(int64_t value, const char* kernel, const char* name) {
  if (value != 0 && value != 1)
    fail<ArgumentError>(kernel, ": ", name, " must be 0 (broadcast) or 1, given ", value);
}

ImageRegion source_region(const Image& image, const BinarySourceGeometry& s, int64_t images) {
  return image.region(s.image, s.channel, s.y, s.x, images, s.read_channels, s.read_height, s.read_width);
}

std::string shape_of(const ImageDescriptor& d) {
  return std::to_string(d.number_of_images) + "x" + std::to_string(d.feature_channels) + "x" +
         std::to_string(d.height) + "x" + std::to_string(d.width);
}

std::string shape_of(const Image& i) { return shape_of(i.descriptor()); }

}  // namespace

const char* arithmetic_class_name(ArithmeticOperation operation) {
  switch (operation) {
    case ArithmeticOperation::Add: return "MPSCNNAdd";
    case ArithmeticOperation::Subtract: return "MPSCNNSubtract";
    case ArithmeticOperation::Multiply: return "MPSCNNMultiply";
    case ArithmeticOperation::Divide: return "MPSCNNDivide";
    case ArithmeticOperation::Compare: return "MPSNNCompare";
  }
  return "MPSCNNArithmetic";
}

ArithmeticGradientState::ArithmeticGradientState(std::shared_ptr<Device> device)
    : BinaryGradientState(device), primary_view_(device, this), secondary_view_(device, this) {}

void ArithmeticGradientState::fill_views() {
  for (View* v : {&primary_view_, &secondary_view_}) {
    bool second = v == &secondary_view_;
    v->source_descriptor = second ? secondary_descriptor : source_descriptor;
    v->destination_descriptor = destination_descriptor;
    v->geometry = geometry;
    v->forward_class = forward_class;
    v->encoded = encoded;
  }
}

CNNArithmetic::CNNArithmetic(std::shared_ptr<Device> device, ArithmeticOperation operation)
    : BinaryKernel(std::move(device)) {
  check_operation(operation);
  parameters.operation = operation;
  primitive_ = make_primitive<ArithmeticPrimitive>(this->device().backend(), operation);
}

const char* CNNArithmetic::class_name() const { return arithmetic_class_name(parameters.operation); }

void CNNArithmetic::check_properties() const {
  BinaryKernel::check_properties();
  check_zero_or_one(primary.stride_x, class_name(), "primary_stride_in_pixels_x");
  check_zero_or_one(primary.stride_y, class_name(), "primary_stride_in_pixels_y");
  check_zero_or_one(secondary.stride_x, class_name(), "secondary_stride_in_pixels_x");
  check_zero_or_one(secondary.stride_y, class_name(), "secondary_stride_in_pixels_y");
  check_zero_or_one(primary_stride_in_feature_channels, class_name(), "primary_stride_in_feature_channels");
  check_zero_or_one(secondary_stride_in_feature_channels, class_name(), "secondary_stride_in_feature_channels");
  if (static_cast<int32_t>(parameters.comparison) < 0 || parameters.comparison >= ComparisonType::Count)
    fail<ArgumentError>(class_name(), ": unknown comparison_type ", static_cast<int32_t>(parameters.comparison),
                        "; expected 0 to ", static_cast<int32_t>(ComparisonType::Count) - 1);
  if (!(parameters.minimum <= parameters.maximum))
    fail<ArgumentError>(class_name(), ": minimum_value ", parameters.minimum, " must be at most maximum_value ",
                        parameters.maximum);
}

void CNNArithmetic::check_state(const State& state) const {
  if (!dynamic_cast<const ArithmeticGradientState*>(&state))
    fail<TypeMismatchError>(class_name(), ": expected an MPSCNNArithmeticGradientState, given an ",
                            state.class_name());
}

std::shared_ptr<BinaryGradientState> CNNArithmetic::new_result_state() {
  return std::make_shared<ArithmeticGradientState>(device_ptr());
}

// Field by field: the structs have padding.
static void add_to_key(CommandKey& key, const BinarySourceGeometry& g) {
  for (int64_t v : {g.image, g.channel, g.x, g.y, g.stride_x, g.stride_y, g.read_channels, g.read_height,
                    g.read_width})
    key.add_word(static_cast<uint64_t>(v));
  key.add_word(g.broadcast_channels);
}

static void add_to_key(CommandKey& key, const BinaryGeometry& g) {
  for (int64_t v : {g.destination_image, g.images, g.destination_channel, g.channels, g.x, g.y, g.width, g.height})
    key.add_word(static_cast<uint64_t>(v));
  add_to_key(key, g.primary);
  add_to_key(key, g.secondary);
}

void CNNArithmetic::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& primary_image,
                           const std::shared_ptr<Image>& secondary_image, const std::shared_ptr<Image>& destination,
                           const BinaryGeometry& g, const std::shared_ptr<State>& state) {
  if (auto* s = dynamic_cast<ArithmeticGradientState*>(state.get())) {
    s->primary_channel_stride = primary_stride_in_feature_channels;
    s->secondary_channel_stride = secondary_stride_in_feature_channels;
    s->fill_views();
  }
  command_buffer.record(keyed_by(primitive_, primary_image, secondary_image, destination, g, as_value(parameters)),
                        [primitive = primitive_, primary_image, secondary_image, destination, g,
                         parameters = parameters](ExecutionContext& context) {
    primitive->forward(context, source_region(*primary_image, g.primary, g.images),
                       source_region(*secondary_image, g.secondary, g.images),
                       destination->region(g.destination_image, g.destination_channel, g.y, g.x, g.images,
                                           g.channels, g.height, g.width),
                       parameters);
  });
}

CNNArithmeticGradient::CNNArithmeticGradient(std::shared_ptr<Device> device, ArithmeticOperation operation,
                                             bool is_secondary_source_filter)
    : GradientKernel(std::move(device)), operation_(operation), secondary_filter_(is_secondary_source_filter) {
  check_operation(operation);
  if (operation != ArithmeticOperation::Add && operation != ArithmeticOperation::Subtract &&
      operation != ArithmeticOperation::Multiply)
    fail<ArgumentError>("MPS has no gradient of ", arithmetic_class_name(operation),
                        "; arithmetic gradients exist for Add, Subtract and Multiply");
  primitive_ = make_primitive<ArithmeticPrimitive>(this->device().backend(), operation);
}

const char* CNNArithmeticGradient::class_name() const {
  switch (operation_) {
    case ArithmeticOperation::Add: return "MPSCNNAddGradient";
    case ArithmeticOperation::Subtract: return "MPSCNNSubtractGradient";
    default: return "MPSCNNMultiplyGradient";
  }
}

GradientSecondary CNNArithmeticGradient::gradient_secondary() const {
  return reads_secondary_image() ? GradientSecondary::ForwardResult : GradientSecondary::ForwardSource;
}

const GradientState& CNNArithmeticGradient::gradient_state_of(const State& state) const {
  auto* s = dynamic_cast<const ArithmeticGradientState*>(&state);
  if (!s)
    fail<TypeMismatchError>(class_name(), ": expected an MPSCNNArithmeticGradientState, given an ",
                            state.class_name());
  return s->view(secondary_filter_);
}

void CNNArithmeticGradient::check_source_image(State& state, const GradientState& view,
                                               const Image& source_image) const {
  const ArithmeticGradientState& s = *static_cast<const ArithmeticGradientState::View&>(view).owner;
  const bool second = reads_secondary_image();
  if (source_image.identity() != (second ? s.secondary_identity : s.primary_identity))
    fail<StateError>(class_name(), ": source_image must be the forward ", second ? "secondary" : "primary",
                     " image of the encode that made this ", state.class_name(), " (the ",
                     secondary_filter_ ? "secondary" : "primary", " filter of ", arithmetic_class_name(operation_),
                     " reads the forward ", second ? "secondary" : "primary", " image)");
}

void CNNArithmeticGradient::check(const Image& source_gradient, const Image& source_image,
                                  const GradientState& view) const {
  const ArithmeticGradientState& s = *static_cast<const ArithmeticGradientState::View&>(view).owner;
  check_zero_or_one(secondary_stride_in_feature_channels, class_name(), "secondary_stride_in_feature_channels");
  bool second = reads_secondary_image();
  const ImageDescriptor& read = second ? s.secondary_descriptor : s.source_descriptor;
  if (source_image.descriptor().width != read.width || source_image.height() != read.height ||
      source_image.feature_channels() != read.feature_channels ||
      source_image.number_of_images() != read.number_of_images)
    fail<ShapeError>(class_name(), ": expected the forward ", second ? "secondary" : "primary", " image of ",
                     shape_of(read), " (NxCxHxW), given ", shape_of(source_image));
  const ImageDescriptor& d = s.destination_descriptor;
  if (source_gradient.width() != d.width || source_gradient.height() != d.height ||
      source_gradient.feature_channels() != d.feature_channels ||
      source_gradient.number_of_images() != d.number_of_images)
    fail<ShapeError>(class_name(), ": expected a source gradient shaped as the forward result, ", shape_of(d),
                     " (NxCxHxW), given ", shape_of(source_gradient));
  if (source_gradient.data_type() != DataType::Float32 && source_gradient.data_type() != DataType::Float16)
    fail<TypeMismatchError>(class_name(), ": the source gradient must be float32 or float16, given ",
                            name_of(source_gradient.data_type()));
  int64_t forward_stride = second ? s.secondary_channel_stride : s.primary_channel_stride;
  if (secondary_stride_in_feature_channels != forward_stride)
    fail<ArgumentError>(class_name(), ": secondary_stride_in_feature_channels ", secondary_stride_in_feature_channels,
                        " must equal the forward encode's stride_in_feature_channels of the ",
                        second ? "secondary" : "primary", " image (this filter's source_image), ", forward_stride);
}

void CNNArithmeticGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                   const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                                   const std::shared_ptr<Image>& destination_gradient) {
  const auto& s = static_cast<const ArithmeticGradientState&>(*state);
  const BinaryGeometry& g = s.binary_geometry;
  const BinarySourceGeometry& mine = secondary_filter_ ? g.secondary : g.primary;
  const BinarySourceGeometry& other = secondary_filter_ ? g.primary : g.secondary;
  float scale = 1;
  switch (operation_) {
    case ArithmeticOperation::Add: scale = secondary_filter_ ? secondary_scale : primary_scale; break;
    case ArithmeticOperation::Subtract: scale = secondary_filter_ ? -secondary_scale : primary_scale; break;
    default: scale = primary_scale * secondary_scale; break;
  }
  const Image& d = *destination_gradient;
  bool covers = mine.image == 0 && mine.channel == 0 && mine.x == 0 && mine.y == 0 &&
                mine.read_channels == d.feature_channels() && mine.read_height == d.height() &&
                mine.read_width == d.width();
  if (!covers) {  // pixels the forward pass did not read get no gradient
    command_buffer.record(keyed_by(destination_gradient), [destination_gradient](ExecutionContext& context) {
      context.fill_zero_image(*destination_gradient);
    });
  }
  bool multiply = operation_ == ArithmeticOperation::Multiply;
  command_buffer.record(keyed_by(primitive_, source_gradient, source_image, destination_gradient, g, mine, other, scale,
                                 multiply),
                        [primitive = primitive_, source_gradient, source_image, destination_gradient, g, mine, other,
                         scale, multiply](ExecutionContext& context) {
    ImageRegion other_region;
    if (multiply) other_region = source_region(*source_image, other, g.images);
    primitive->gradient(context,
                        source_gradient->region(g.destination_image, g.destination_channel, g.y, g.x, g.images,
                                                g.channels, g.height, g.width),
                        multiply ? &other_region : nullptr, source_region(*destination_gradient, mine, g.images),
                        scale);
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNArithmetic::make_gradient_kernels() const {
  // MPS has gradients of addition, subtraction and multiplication only.
  if (operation() == ArithmeticOperation::Divide || operation() == ArithmeticOperation::Compare) return {};
  std::vector<std::shared_ptr<GradientKernel>> gradients;
  for (bool secondary_filter : {false, true}) {
    auto g = std::make_shared<CNNArithmeticGradient>(device_ptr(), operation(), secondary_filter);
    g->primary_scale = parameters.primary_scale;
    g->secondary_scale = parameters.secondary_scale;
    g->bias = parameters.bias;
    g->minimum_value = parameters.minimum;
    g->maximum_value = parameters.maximum;
    // The stride of the forward image this filter reads, as its check wants.
    g->secondary_stride_in_feature_channels = g->reads_secondary_image() ? secondary_stride_in_feature_channels
                                                                         : primary_stride_in_feature_channels;
    gradients.push_back(std::move(g));
  }
  return gradients;
}

}  // namespace mpsx

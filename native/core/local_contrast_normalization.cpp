#include "mpsx/kernels/local_contrast_normalization.h"

#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {
namespace {

// Where the windows of geometry g are centred: source pixels
// [cx, cx + g.width) x [cy, cy + g.height), which must lie in the source.
void check_centres(const char* kernel, const Image& source, const Geometry& g, int64_t kernel_width,
                   int64_t kernel_height) {
  // check_properties() passed: positions are within 2^31, sizes within 2^30.
  int64_t cx = g.source_x + kernel_width / 2, cy = g.source_y + kernel_height / 2;
  if (cx < 0 || cy < 0 || cx + g.width > source.width() || cy + g.height > source.height())
    fail<ShapeError>(kernel, ": offset (", cx, ", ", cy, ") with a ", g.width, "x", g.height,
                     " region centres windows outside the ", source.width(), "x", source.height(), " source image");
}

LocalContrastNormalizationPass pass_of(const LocalContrastNormalizationParameters& p, EdgeMode edge_mode,
                                       const Geometry& g) {
  LocalContrastNormalizationPass pass;
  pass.parameters = p;
  pass.edge_mode = edge_mode;
  pass.first_x = g.source_x;
  pass.first_y = g.source_y;
  return pass;
}

}  // namespace

LocalContrastNormalizationSettings::LocalContrastNormalizationSettings(const char* kernel, int64_t kernel_width,
                                                                       int64_t kernel_height)
    : kernel_width_(kernel_width), kernel_height_(kernel_height) {
  lcn_window().check(kernel);
  if (kernel_width != kernel_height)
    fail<ArgumentError>(kernel, ": kernel_width must equal kernel_height (MPS); given ", kernel_width, " and ",
                        kernel_height);
}

CNNLocalContrastNormalization::CNNLocalContrastNormalization(std::shared_ptr<Device> device, int64_t kernel_width,
                                                             int64_t kernel_height)
    : UnaryKernel(std::move(device)),
      LocalContrastNormalizationSettings("MPSCNNLocalContrastNormalization", kernel_width, kernel_height) {
  primitive_ = make_primitive<LocalContrastNormalizationPrimitive>(
      this->device().backend(), LocalContrastNormalizationDescriptor{kernel_width, kernel_height, false});
}

std::shared_ptr<State> CNNLocalContrastNormalization::new_result_state(const Image&) {
  return std::make_shared<LocalContrastNormalizationGradientState>(device_ptr());
}

void CNNLocalContrastNormalization::check_state(const State& state) const {
  if (!dynamic_cast<const LocalContrastNormalizationGradientState*>(&state))
    fail<TypeMismatchError>(class_name(), ": expected a state made by result_state() of an ", class_name(),
                            ", given an ", state.class_name());
}

void CNNLocalContrastNormalization::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                           const std::shared_ptr<Image>& destination, const Geometry& g,
                                           const std::shared_ptr<State>& state) {
  check_centres(class_name(), *source, g, lcn_kernel_width(), lcn_kernel_height());
  if (auto* s = dynamic_cast<LocalContrastNormalizationGradientState*>(state.get())) {
    s->kernel_width = lcn_kernel_width();
    s->kernel_height = lcn_kernel_height();
  }
  LocalContrastNormalizationPass pass = pass_of(parameters, edge_mode, g);
  command_buffer.record([primitive = primitive_, source, destination, g, pass](ExecutionContext& context) {
    int64_t channels = g.source_channels;
    primitive->forward(context, pass, whole_source_region(*source, g, channels),
                       destination_region(*destination, g, channels));
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNLocalContrastNormalization::make_gradient_kernels() const {
  auto gradient =
      std::make_shared<CNNLocalContrastNormalizationGradient>(device_ptr(), lcn_kernel_width(), lcn_kernel_height());
  gradient->parameters = parameters;
  gradient->edge_mode = edge_mode;  // the gradient reads the forward edge mode from its own, as pooling's does
  return {gradient};
}

CNNLocalContrastNormalizationGradient::CNNLocalContrastNormalizationGradient(std::shared_ptr<Device> device,
                                                                             int64_t kernel_width,
                                                                             int64_t kernel_height)
    : GradientKernel(std::move(device)),
      LocalContrastNormalizationSettings("MPSCNNLocalContrastNormalizationGradient", kernel_width, kernel_height) {
  primitive_ = make_primitive<LocalContrastNormalizationPrimitive>(
      this->device().backend(), LocalContrastNormalizationDescriptor{kernel_width, kernel_height, true});
}

void CNNLocalContrastNormalizationGradient::check(const Image& source_gradient, const Image& source_image,
                                                  const GradientState& state) const {
  GradientKernel::check(source_gradient, source_image, state);
  auto* s = dynamic_cast<const LocalContrastNormalizationGradientState*>(&state);
  if (!s)
    fail<TypeMismatchError>(class_name(), ": expected the state of an MPSCNNLocalContrastNormalization encode, given ",
                            state.class_name(), " of ", state.forward_class ? state.forward_class : "no encode");
  if (s->kernel_width != lcn_kernel_width() || s->kernel_height != lcn_kernel_height())
    fail<ArgumentError>(class_name(), ": the state comes from a ", s->kernel_width, "x", s->kernel_height,
                        " forward kernel; this gradient kernel is ", lcn_kernel_width(), "x", lcn_kernel_height());
}

void CNNLocalContrastNormalizationGradient::record(CommandBuffer& command_buffer,
                                                   const std::shared_ptr<Image>& source_gradient,
                                                   const std::shared_ptr<Image>& source_image,
                                                   const std::shared_ptr<State>& state,
                                                   const std::shared_ptr<Image>& destination_gradient) {
  const Geometry& g = static_cast<const GradientState&>(*state).geometry;
  record_zeros_outside_slice(command_buffer, destination_gradient, *source_image, g);
  LocalContrastNormalizationPass pass = pass_of(parameters, edge_mode, g);
  command_buffer.record([primitive = primitive_, source_gradient, source_image, destination_gradient, g,
                         pass](ExecutionContext& context) {
    int64_t channels = g.source_channels;
    int64_t height = source_image->height(), width = source_image->width();
    primitive->gradient(context, pass, destination_region(*source_gradient, g, channels),
                        whole_source_region(*source_image, g, channels),
                        destination_gradient->region(g.source_image, g.source_channel, 0, 0, g.images, channels,
                                                     height, width));
  });
}

}  // namespace mpsx

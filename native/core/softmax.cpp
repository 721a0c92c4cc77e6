#include "mpsx/kernels/softmax.h"

#include <utility>

#include "mpsx/backend.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {

CNNSoftMax::CNNSoftMax(std::shared_ptr<Device> device, bool log) : InPlaceUnaryKernel(std::move(device)), log_(log) {
  primitive_maker<SoftMaxPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNSoftMax::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                        const std::shared_ptr<Image>& destination, const Geometry& g, const std::shared_ptr<State>&) {
  check_reads_inside(*source, g);
  const int64_t channels = source_channels(*source);
  const SoftMaxDescriptor d{region_pass(false, g, channels, source->descriptor(), {}, destination->descriptor()), log_};
  std::shared_ptr<SoftMaxPrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  command_buffer.record(keyed_by(primitive, source, destination, as_value(g), channels),
                        [primitive, source, destination, g, channels](ExecutionContext& context) {
    primitive->forward(context, source_region(*source, g, channels), destination_region(*destination, g, channels));
  });
}

CNNSoftMaxGradient::CNNSoftMaxGradient(std::shared_ptr<Device> device, bool log)
    : InPlaceGradientKernel(std::move(device)), log_(log) {
  primitive_maker<SoftMaxPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNSoftMaxGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                                const std::shared_ptr<Image>& destination_gradient) {
  // The forward encode's geometry: it read the forward source at
  // (source_image, source_channel, source_y, source_x) and wrote its result
  // at (destination_image, destination_channel, y, x), `channels` deep.
  const Geometry g = static_cast<const GradientState&>(*state).geometry;
  const int64_t channels = g.source_channels;
  const SoftMaxDescriptor d{region_pass(true, g, channels, source_gradient->descriptor(), source_image->descriptor(),
                                        destination_gradient->descriptor()),
                            log_};
  std::shared_ptr<SoftMaxPrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  record_zeros_outside(command_buffer, destination_gradient, g);
  command_buffer.record(keyed_by(primitive, source_gradient, source_image, destination_gradient, as_value(g), channels),
                        [primitive, source_gradient, source_image, destination_gradient, g,
                         channels](ExecutionContext& context) {
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        destination_region(*source_image, g, channels),
                        source_region(*destination_gradient, g, channels));
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNSoftMax::make_gradient_kernels() const {
  return {std::make_shared<CNNSoftMaxGradient>(device_ptr(), log_)};
}

}  // namespace mpsx

#include "mpsx/kernels/softmax.h"

#include <utility>

#include "mpsx/backend.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {
CNNSoftMax::CNNSoftMax(std::shared_ptr<Device> device, bool log) : UnaryKernel(std::move(device)), log_(log) {
  primitive_maker<SoftMaxPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNSoftMax::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                        const std::shared_ptr<Image>& destination, const Geometry& g, const std::shared_ptr<State>&) {
  check_reads_inside(*source, g);
  const int64_t channels = source_channels(*source);
  SoftMaxDescriptor d;
  d.log = log_;
  d.gradient = false;
  d.images = g.images;
  d.channels = channels;
  d.height = g.height;
  d.width = g.width;
  d.source = source->descriptor();
  d.destination = destination->descriptor();
  std::shared_ptr<SoftMaxPrimitive> primitive = primitives_.get(d, [&] {
    return std::shared_ptr<SoftMaxPrimitive>(make_primitive<SoftMaxPrimitive>(device().backend(), d));
  });
  command_buffer.record([primitive = std::move(primitive), source, destination, g, channels](ExecutionContext& context) {
    primitive->forward(context,
                       source->region(g.source_image, g.source_channel, g.source_y, g.source_x, g.images, channels,
                                      g.height, g.width),
                       destination->region(g.destination_image, g.destination_channel, g.y, g.x, g.images, channels,
                                           g.height, g.width));
  });
}

CNNSoftMaxGradient::CNNSoftMaxGradient(std::shared_ptr<Device> device, bool log)
    : GradientKernel(std::move(device)), log_(log) {
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
  SoftMaxDescriptor d;
  d.log = log_;
  d.gradient = true;
  d.images = g.images;
  d.channels = channels;
  d.height = g.height;
  d.width = g.width;
  d.source = source_gradient->descriptor();
  d.result = source_image->descriptor();
  d.destination = destination_gradient->descriptor();
  std::shared_ptr<SoftMaxPrimitive> primitive = primitives_.get(d, [&] {
    return std::shared_ptr<SoftMaxPrimitive>(make_primitive<SoftMaxPrimitive>(device().backend(), d));
  });
  record_zeros_outside(command_buffer, destination_gradient, g);
  command_buffer.record([primitive = std::move(primitive), source_gradient, source_image, destination_gradient, g,
                         channels](ExecutionContext& context) {
    primitive->gradient(context,
                        source_gradient->region(g.destination_image, g.destination_channel, g.y, g.x, g.images,
                                                channels, g.height, g.width),
                        source_image->region(g.destination_image, g.destination_channel, g.y, g.x, g.images, channels,
                                             g.height, g.width),
                        destination_gradient->region(g.source_image, g.source_channel, g.source_y, g.source_x,
                                                     g.images, channels, g.height, g.width));
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNSoftMax::make_gradient_kernels() const {
  return {std::make_shared<CNNSoftMaxGradient>(device_ptr(), log_)};
}

}  // namespace mpsx

#include "mpsx/kernels/cross_channel_normalization.h"

#include <cmath>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {
CNNCrossChannelNormalization::CNNCrossChannelNormalization(std::shared_ptr<Device> device, int64_t kernel_size)
    : UnaryKernel(std::move(device)),
      CrossChannelNormalizationProperties("MPSCNNCrossChannelNormalization", kernel_size) {
  primitive_maker<CrossChannelNormalizationPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNCrossChannelNormalization::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                          const std::shared_ptr<Image>& destination, const Geometry& g,
                                          const std::shared_ptr<State>&) {
  check_reads_inside(*source, g);
  const int64_t channels = source_channels(*source);
  CrossChannelNormalizationDescriptor d;
  d.gradient = false;
  d.kernel_size = kernel_size();
  d.images = g.images;
  d.channels = channels;
  d.height = g.height;
  d.width = g.width;
  d.source = source->descriptor();
  d.destination = destination->descriptor();
  std::shared_ptr<CrossChannelNormalizationPrimitive> primitive = primitives_.get(d, [&] {
    return std::shared_ptr<CrossChannelNormalizationPrimitive>(
        make_primitive<CrossChannelNormalizationPrimitive>(device().backend(), d));
  });
  command_buffer.record([primitive = std::move(primitive), p = parameters(), source, destination, g,
                         channels](ExecutionContext& context) {
    primitive->forward(context, p,
                       source->region(g.source_image, g.source_channel, g.source_y, g.source_x, g.images, channels,
                                      g.height, g.width),
                       destination->region(g.destination_image, g.destination_channel, g.y, g.x, g.images, channels,
                                           g.height, g.width));
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNCrossChannelNormalization::make_gradient_kernels() const {
  auto gradient = std::make_shared<CNNCrossChannelNormalizationGradient>(device_ptr(), kernel_size());
  gradient->set_alpha(alpha());
  gradient->set_beta(beta());
  gradient->set_delta(delta());
  return {gradient};
}

CNNCrossChannelNormalizationGradient::CNNCrossChannelNormalizationGradient(std::shared_ptr<Device> device,
                                                                           int64_t kernel_size)
    : GradientKernel(std::move(device)),
      CrossChannelNormalizationProperties("MPSCNNCrossChannelNormalizationGradient", kernel_size) {
  primitive_maker<CrossChannelNormalizationPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNCrossChannelNormalizationGradient::record(CommandBuffer& command_buffer,
                                                  const std::shared_ptr<Image>& source_gradient,
                                                  const std::shared_ptr<Image>& source_image,
                                                  const std::shared_ptr<State>& state,
                                                  const std::shared_ptr<Image>& destination_gradient) {
  // The forward encode's geometry: it read the forward source at
  // (source_image, source_channel, source_y, source_x) and wrote its result
  // at (destination_image, destination_channel, y, x), `channels` deep.
  const Geometry g = static_cast<const GradientState&>(*state).geometry;
  const int64_t channels = g.source_channels;
  CrossChannelNormalizationDescriptor d;
  d.gradient = true;
  d.kernel_size = kernel_size();
  d.images = g.images;
  d.channels = channels;
  d.height = g.height;
  d.width = g.width;
  d.source = source_gradient->descriptor();
  d.secondary = source_image->descriptor();
  d.destination = destination_gradient->descriptor();
  std::shared_ptr<CrossChannelNormalizationPrimitive> primitive = primitives_.get(d, [&] {
    return std::shared_ptr<CrossChannelNormalizationPrimitive>(
        make_primitive<CrossChannelNormalizationPrimitive>(device().backend(), d));
  });
  record_zeros_outside(command_buffer, destination_gradient, g);
  command_buffer.record([primitive = std::move(primitive), p = parameters(), source_gradient, source_image,
                         destination_gradient, g, channels](ExecutionContext& context) {
    primitive->gradient(context, p,
                        source_gradient->region(g.destination_image, g.destination_channel, g.y, g.x, g.images,
                                                channels, g.height, g.width),
                        source_image->region(g.source_image, g.source_channel, g.source_y, g.source_x, g.images,
                                             channels, g.height, g.width),
                        destination_gradient->region(g.source_image, g.source_channel, g.source_y, g.source_x,
                                                     g.images, channels, g.height, g.width));
  });
}

}  // namespace mpsx

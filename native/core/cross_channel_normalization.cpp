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
    : InPlaceUnaryKernel(std::move(device)),
      CrossChannelNormalizationProperties("MPSCNNCrossChannelNormalization", kernel_size) {
  primitive_maker<CrossChannelNormalizationPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNCrossChannelNormalization::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                          const std::shared_ptr<Image>& destination, const Geometry& g,
                                          const std::shared_ptr<State>&) {
  check_reads_inside(*source, g);
  const int64_t channels = source_channels(*source);
  const CrossChannelNormalizationDescriptor d{
      region_pass(false, g, channels, source->descriptor(), {}, destination->descriptor()), kernel_size()};
  record_forward(command_buffer, cached_primitive(primitives_, device().backend(), d), source_region, source,
                 destination, g, channels);
}

std::vector<std::shared_ptr<GradientKernel>> CNNCrossChannelNormalization::make_gradient_kernels() const {
  auto gradient = std::make_shared<CNNCrossChannelNormalizationGradient>(device_ptr(), kernel_size());
  gradient->set_parameters(parameters());
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
  const CrossChannelNormalizationDescriptor d{region_pass(true, g, channels, source_gradient->descriptor(),
                                                          source_image->descriptor(), destination_gradient->descriptor()),
                                              kernel_size()};
  std::shared_ptr<CrossChannelNormalizationPrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  record_zeros_outside(command_buffer, destination_gradient, g);
  record_gradient(command_buffer, std::move(primitive), source_region, source_gradient, source_image,
                  destination_gradient, g, channels);
}

}  // namespace mpsx

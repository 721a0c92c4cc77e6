#include "mpsx/kernels/spatial_normalization.h"

#include <cmath>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {
namespace {

// kernel_width, once it is checked to equal kernel_height.
int64_t square_window(const char* kernel, int64_t kernel_width, int64_t kernel_height) {
  check_size(kernel_width, kernel, ": kernel_width");
  check_size(kernel_height, kernel, ": kernel_height");
  if (kernel_width != kernel_height)
    fail<ArgumentError>(kernel, ": kernel_width must equal kernel_height (MPS requires a square window), given ",
                        kernel_width, " and ", kernel_height);
  return kernel_width;
}

}  // namespace

SpatialNormalizationProperties::SpatialNormalizationProperties(const char* kernel, int64_t kernel_width,
                                                               int64_t kernel_height)
    : ResponseNormalizationProperties(kernel, square_window(kernel, kernel_width, kernel_height), "kernel_width") {}

CNNSpatialNormalization::CNNSpatialNormalization(std::shared_ptr<Device> device, int64_t kernel_width,
                                                 int64_t kernel_height)
    : InPlaceUnaryKernel(std::move(device)),
      SpatialNormalizationProperties("MPSCNNSpatialNormalization", kernel_width, kernel_height) {
  primitive_maker<SpatialNormalizationPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNSpatialNormalization::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                          const std::shared_ptr<Image>& destination, const Geometry& g,
                                          const std::shared_ptr<State>&) {
  check_reads_inside(*source, g);
  const int64_t channels = source_channels(*source);
  const SpatialNormalizationDescriptor d{region_pass(false, g, channels, source->descriptor(), {},
                                                     destination->descriptor()),
                                         kernel_size(), edge_mode, g.source_x, g.source_y};
  record_forward(command_buffer, cached_primitive(primitives_, device().backend(), d), whole_source_region, source,
                 destination, g, channels);
}

std::vector<std::shared_ptr<GradientKernel>> CNNSpatialNormalization::make_gradient_kernels() const {
  auto gradient = std::make_shared<CNNSpatialNormalizationGradient>(device_ptr(), kernel_size(), kernel_size());
  gradient->set_parameters(parameters());
  gradient->edge_mode = edge_mode;  // the gradient reads the forward edge mode from its own, as pooling's does
  return {gradient};
}

CNNSpatialNormalizationGradient::CNNSpatialNormalizationGradient(std::shared_ptr<Device> device,
                                                                 int64_t kernel_width, int64_t kernel_height)
    : InPlaceGradientKernel(std::move(device)),
      SpatialNormalizationProperties("MPSCNNSpatialNormalizationGradient", kernel_width, kernel_height) {
  primitive_maker<SpatialNormalizationPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNSpatialNormalizationGradient::record(CommandBuffer& command_buffer,
                                                  const std::shared_ptr<Image>& source_gradient,
                                                  const std::shared_ptr<Image>& source_image,
                                                  const std::shared_ptr<State>& state,
                                                  const std::shared_ptr<Image>& destination_gradient) {
  // The forward encode's geometry, as in the cross-channel normalization's
  // gradient.
  const Geometry g = static_cast<const GradientState&>(*state).geometry;
  const int64_t channels = g.source_channels;
  const SpatialNormalizationDescriptor d{region_pass(true, g, channels, source_gradient->descriptor(),
                                                     source_image->descriptor(), destination_gradient->descriptor()),
                                         kernel_size(), edge_mode, g.source_x, g.source_y};
  std::shared_ptr<SpatialNormalizationPrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  record_zeros_outside(command_buffer, destination_gradient, g);
  record_gradient(command_buffer, std::move(primitive), whole_source_region, source_gradient, source_image,
                  destination_gradient, g, channels);
}

}  // namespace mpsx

#include "mpsx/kernels/initial_gradient.h"

#include <utility>

#include "mpsx/backend.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/registry.h"

namespace mpsx {

NNInitialGradient::NNInitialGradient(std::shared_ptr<Device> device)
    : UnaryKernel(std::move(device)),
      primitive_(make_primitive<InitialGradientPrimitive>(this->device().backend(), InitialGradientDescriptor{})) {}

void NNInitialGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                               const std::shared_ptr<Image>& destination, const Geometry& g,
                               const std::shared_ptr<State>&) {
  check_reads_inside(*source, g);
  command_buffer.record(keyed_by(primitive_, source, destination, as_value(g)),
                        [primitive = primitive_, source, destination, g](ExecutionContext& context) {
    primitive->forward(context, source_region(*source, g, g.source_channels),
                       destination_region(*destination, g, g.source_channels));
  });
}

}  // namespace mpsx

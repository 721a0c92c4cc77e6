#include "mpsx/kernels/neuron.h"

#include <cmath>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {

void NeuronDescriptor::validate() const {
  if (static_cast<int32_t>(type) < 0 || type >= NeuronType::Count)
    fail<ArgumentError>("unknown neuron type ", static_cast<int32_t>(type), "; expected 0 to ",
                        static_cast<int32_t>(NeuronType::Count) - 1);
  if (type == NeuronType::PReLU && a_per_channel.empty())
    fail<ArgumentError>("a PReLU neuron needs one slope per feature channel; given none");
  for (auto [value, name] : {std::pair{a, "a"}, {b, "b"}, {c, "c"}}) checked_parameter(value, "MPSNNNeuronDescriptor", name);
  for (size_t i = 0; i < a_per_channel.size(); ++i)
    if (!std::isfinite(a_per_channel[i]))
      checked_parameter(a_per_channel[i], "MPSNNNeuronDescriptor", detail::concat("data[", i, "]").c_str());
}

namespace {
// PReLU slopes are per feature channel of the source image.
void check_slopes(const char* kernel, const NeuronDescriptor& d, const Image& source) {
  if (d.type == NeuronType::PReLU && static_cast<int64_t>(d.a_per_channel.size()) != source.feature_channels())
    fail<ShapeError>(kernel, ": the PReLU neuron has ", d.a_per_channel.size(), " slopes; the source image has ",
                     source.feature_channels(), " feature channels");
}
}  // namespace

CNNNeuron::CNNNeuron(std::shared_ptr<Device> device, NeuronDescriptor descriptor)
    : InPlaceUnaryKernel(std::move(device)), descriptor_(std::move(descriptor)) {
  descriptor_.validate();
  primitive_ = make_primitive<NeuronPrimitive>(this->device().backend(), descriptor_);
}

void CNNNeuron::check_source(const Image& source) const {
  UnaryKernel::check_source(source);
  check_slopes(class_name(), descriptor_, source);
}

void CNNNeuron::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                       const std::shared_ptr<Image>& destination, const Geometry& g, const std::shared_ptr<State>&) {
  check_reads_inside(*source, g);
  command_buffer.record(keyed_by(primitive_, source, destination, as_value(g)),
                        [primitive = primitive_, source, destination, g](ExecutionContext& context) {
    int64_t channels = g.source_channels;
    primitive->forward(context, source_region(*source, g, channels), destination_region(*destination, g, channels),
                       g.source_channel);
  });
}

CNNNeuronGradient::CNNNeuronGradient(std::shared_ptr<Device> device, NeuronDescriptor descriptor)
    : InPlaceGradientKernel(std::move(device)), descriptor_(std::move(descriptor)) {
  descriptor_.validate();
  primitive_ = make_primitive<NeuronPrimitive>(this->device().backend(), descriptor_);
}

void CNNNeuronGradient::check(const Image& source_gradient, const Image& source_image,
                              const GradientState& state) const {
  GradientKernel::check(source_gradient, source_image, state);
  check_slopes(class_name(), descriptor_, source_image);
}

void CNNNeuronGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                               const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                               const std::shared_ptr<Image>& destination_gradient) {
  const Geometry& g = static_cast<const GradientState&>(*state).geometry;
  record_zeros_outside(command_buffer, destination_gradient, g);
  command_buffer.record(keyed_by(primitive_, source_gradient, source_image, destination_gradient, as_value(g)),
                        [primitive = primitive_, source_gradient, source_image, destination_gradient,
                         g](ExecutionContext& context) {
    int64_t channels = g.source_channels;
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        source_region(*source_image, g, channels), source_region(*destination_gradient, g, channels),
                        g.source_channel);
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNNeuron::make_gradient_kernels() const {
  return {std::make_shared<CNNNeuronGradient>(device_ptr(), descriptor_)};
}

}  // namespace mpsx

#include "mpsx/kernels/neuron.h"

#include <cstdint>
#include <map>
#include <mutex>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

static_assert(static_cast<int32_t>(NeuronType::GeLU) == static_cast<int32_t>(MPSCNNNeuronTypeGeLU) &&
                  static_cast<int32_t>(NeuronType::Count) == static_cast<int32_t>(MPSCNNNeuronTypeCount),
              "NeuronType is MPSCNNNeuronType");

// The forward kernel and its gradient, built from one neuron descriptor.
struct NeuronKernels {
  MPSCNNNeuron* neuron;
  MPSCNNNeuronGradient* gradient;
};

class MetalNeuron final : public NeuronPrimitive {
 public:
  MetalNeuron(const MetalBackend& backend, const NeuronDescriptor& descriptor)
      : device_(backend.device()), descriptor_(descriptor) {
    kernels_.emplace(0, make_kernels(0));
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               int64_t first_channel) const override {
    check_distinct("MPSCNNNeuron", source, destination);
    MPSCNNNeuron* neuron = kernels(source, first_channel).neuron;
    set_forward(neuron, source, destination);
    encode_batch(neuron, context_of(context).command_buffer(), source, destination);
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, int64_t first_channel) const override {
    check_distinct("MPSCNNNeuronGradient", source_gradient, destination_gradient);
    check_distinct("MPSCNNNeuronGradient", source, destination_gradient);
    const NeuronKernels& kernels = this->kernels(source, first_channel);
    set_forward(kernels.neuron, source, source_gradient);
    encode_gradient_with_forward_states(kernels.neuron, kernels.gradient, context_of(context).command_buffer(),
                                        source_gradient, source, origin_of(source), destination_gradient,
                                        slice_channels);
  }

 private:
  static void set_forward(MPSCNNNeuron* neuron, const ImageRegion& source, const ImageRegion& destination) {
    set_regions(neuron, origin_of(source), source, destination, slice_channels);
  }

  // MPS applies PReLU slope i to channel i of what the kernel reads, counted
  // from sourceFeatureChannelOffset; mpsx indexes the slopes by the image's
  // feature channel. So regions from channel f get kernels of their own
  // whose slope array starts at slope f; other neurons have no per-channel
  // parameter and share one pair.
  const NeuronKernels& kernels(const ImageRegion& source, int64_t first_channel) const {
    const bool prelu = descriptor_.type == NeuronType::PReLU;
    const size_t slopes = descriptor_.a_per_channel.size();
    if (prelu && static_cast<size_t>(first_channel + source.c) > slopes)
      fail<ShapeError>("MPSCNNNeuron: the PReLU neuron has ", slopes, " slopes; feature channels ", first_channel,
                       " to ", first_channel + source.c - 1, " need one each");
    const int64_t key = prelu ? first_channel : 0;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kernels_.find(key);
    if (it == kernels_.end()) it = kernels_.emplace(key, make_kernels(key)).first;
    return it->second;
  }

  NeuronKernels make_kernels(int64_t first_channel) const {
    MPSNNNeuronDescriptor* descriptor = neuron_descriptor(descriptor_, static_cast<size_t>(first_channel));
    return {[[MPSCNNNeuron alloc] initWithDevice:device_ neuronDescriptor:descriptor],
            [[MPSCNNNeuronGradient alloc] initWithDevice:device_ neuronDescriptor:descriptor]};
  }

  id<MTLDevice> device_;
  NeuronDescriptor descriptor_;
  mutable std::mutex mutex_;
  mutable std::map<int64_t, NeuronKernels> kernels_;  // by first channel
};

}  // namespace

MPSNNNeuronDescriptor* neuron_descriptor(const NeuronDescriptor& neuron, size_t first_slope) {
  if (neuron.type == NeuronType::PReLU) {
    const std::vector<float>& slopes = neuron.a_per_channel;
    NSData* data = [NSData dataWithBytes:slopes.data() + first_slope
                                  length:(slopes.size() - first_slope) * sizeof(float)];
    return [MPSNNNeuronDescriptor cnnNeuronPReLUDescriptorWithData:data noCopy:false];
  }
  return [MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:static_cast<MPSCNNNeuronType>(neuron.type)
                                                          a:neuron.a
                                                          b:neuron.b
                                                          c:neuron.c];
}

namespace {

const Registered<NeuronPrimitive, MetalNeuron> registered("metal");

}  // namespace

}  // namespace mpsx::metal

// MPSCNNNeuron / MPSCNNNeuronGradient and MPSNNNeuronDescriptor.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

// MPSCNNNeuronType, same values.
enum class NeuronType : int32_t {
  None = 0,
  ReLU,
  Linear,
  Sigmoid,
  HardSigmoid,
  TanH,
  Absolute,
  SoftPlus,
  SoftSign,
  ELU,
  PReLU,
  ReLUN,
  Power,
  Exponential,
  Logarithm,
  GeLU,
  Count
};

// MPSNNNeuronDescriptor. For PReLU, `a_per_channel` holds one slope per
// feature channel.
struct NeuronDescriptor {
  NeuronType type = NeuronType::None;
  float a = 0, b = 0, c = 0;
  std::vector<float> a_per_channel;

  bool is_identity() const { return type == NeuronType::None; }
  bool operator==(const NeuronDescriptor& o) const {
    return type == o.type && a == o.a && b == o.b && c == o.c && a_per_channel == o.a_per_channel;
  }
  // Throws ArgumentError for an unknown type, a missing PReLU slope array or
  // a parameter (a, b, c, a slope) checked_parameter refuses.
  void validate() const;
};

// What a backend runs for a neuron, f(x) as MPSCNNNeuron.h defines it, over
// regions of equal extents. `first_channel` is the feature channel of the
// regions' channel 0, for per-channel parameters.
class NeuronPrimitive : public PrimitiveInterface<NeuronDescriptor> {
 public:
  static constexpr const char* family = "neuron";
  virtual void forward(ExecutionContext& context, const ImageRegion& source,
                       const ImageRegion& destination, int64_t first_channel) const = 0;
  // destination_gradient = f'(source) * source_gradient.
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                        const ImageRegion& source, const ImageRegion& destination_gradient,
                        int64_t first_channel) const = 0;
};

// In place: pointwise; the NNGraph writes neurons over their sources.
class CNNNeuron : public InPlaceUnaryKernel {
 public:
  CNNNeuron(std::shared_ptr<Device> device, NeuronDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNNeuron"; }
  const NeuronDescriptor& neuron_descriptor() const { return descriptor_; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  void check_source(const Image& source) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  NeuronDescriptor descriptor_;
  std::shared_ptr<const NeuronPrimitive> primitive_;
};

class CNNNeuronGradient : public InPlaceGradientKernel {
 public:
  CNNNeuronGradient(std::shared_ptr<Device> device, NeuronDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNNeuronGradient"; }
  const NeuronDescriptor& neuron_descriptor() const { return descriptor_; }

 protected:
  void check(const Image& source_gradient, const Image& source_image, const GradientState& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  NeuronDescriptor descriptor_;
  std::shared_ptr<const NeuronPrimitive> primitive_;
};

}  // namespace mpsx

// MPSNNInitialGradient: ones for every source element the kernel reads, the
// gradient that starts a backward pass at an arbitrary image.
#pragma once

#include <memory>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

// The primitive depends on nothing but the backend: one per kernel.
struct InitialGradientDescriptor {
  bool operator==(const InitialGradientDescriptor&) const { return true; }
};

class InitialGradientPrimitive : public PrimitiveInterface<InitialGradientDescriptor> {
 public:
  static constexpr const char* family = "initial_gradient";
  // Writes 1 to every element of destination; source is the region read,
  // of the same extents (metal's MPSNNInitialGradient encodes from it).
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const = 0;
};

// A pointwise kernel: the destination is the source's size (the padding
// policy of a 1x1 window), and the region written must read inside the
// source. It makes no gradient.
class NNInitialGradient : public UnaryKernel {
 public:
  explicit NNInitialGradient(std::shared_ptr<Device> device);
  const char* class_name() const override { return "MPSNNInitialGradient"; }

 protected:
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  std::shared_ptr<const InitialGradientPrimitive> primitive_;
};

}  // namespace mpsx

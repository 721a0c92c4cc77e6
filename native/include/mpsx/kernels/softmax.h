// MPSCNNSoftMax, MPSCNNLogSoftMax and their gradients (MPSCNNSoftMax.h):
// over the feature channels of each pixel,
//   softmax      y_k = exp(x_k) / sum_c exp(x_c)
//   log-softmax  y_k = x_k - ln sum_c exp(x_c)
// and the gradients, which read the forward *result* y (the secondary image):
//   softmax      dx_k = y_k (dy_k - sum_c dy_c y_c)
//   log-softmax  dx_k = dy_k - exp(y_k) sum_c dy_c
#pragma once

#include <cstdint>
#include <memory>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

// The key a kernel caches its primitive under, and what a backend builds it
// from: a pass over all the channels the softmax runs over, whose gradient's
// secondary image is the forward result y.
struct SoftMaxDescriptor : RegionPass {
  bool log = false;  // log-softmax, else softmax

  bool operator==(const SoftMaxDescriptor& o) const { return RegionPass::operator==(o) && log == o.log; }
};

// What a backend runs for a SoftMaxDescriptor, over regions of the
// descriptor's extents; the reductions run over each region's channels.
class SoftMaxPrimitive : public PrimitiveInterface<SoftMaxDescriptor> {
 public:
  static constexpr const char* family = "softmax";
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const = 0;
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& result,
                        const ImageRegion& destination_gradient) const = 0;
};

// MPSCNNSoftMax (log false) and MPSCNNLogSoftMax (log true).
// In place: each pixel's channels are read (both reductions) before they are written.
class CNNSoftMax : public InPlaceUnaryKernel {
 public:
  CNNSoftMax(std::shared_ptr<Device> device, bool log);
  const char* class_name() const override { return log_ ? "MPSCNNLogSoftMax" : "MPSCNNSoftMax"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;
  bool is_log() const { return log_; }

 protected:
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  bool log_;
  PrimitiveCache<SoftMaxDescriptor, SoftMaxPrimitive> primitives_;
};

// MPSCNNSoftMaxGradient (log false) and MPSCNNLogSoftMaxGradient (log true).
// The secondary image is the forward result; the destination gradient is
// shaped as the forward source, and gets zeros where the forward pass read
// nothing.
// In place: each pixel's channels are read (the sum) before they are written.
class CNNSoftMaxGradient : public InPlaceGradientKernel {
 public:
  CNNSoftMaxGradient(std::shared_ptr<Device> device, bool log);
  const char* class_name() const override {
    return log_ ? "MPSCNNLogSoftMaxGradient" : "MPSCNNSoftMaxGradient";
  }
  bool is_log() const { return log_; }

 protected:
  GradientSecondary gradient_secondary() const override { return GradientSecondary::ForwardResult; }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  bool log_;
  PrimitiveCache<SoftMaxDescriptor, SoftMaxPrimitive> primitives_;
};

}  // namespace mpsx

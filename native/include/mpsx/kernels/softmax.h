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

// One pass over fixed images and region extents: the key a kernel caches its
// primitive under, and what a backend builds it from.
struct SoftMaxDescriptor {
  bool log = false;       // log-softmax, else softmax
  bool gradient = false;  // built for the gradient pass, else the forward pass
  // The region every image is read or written in: images x channels x
  // height x width (the channels are all the ones the softmax runs over).
  int64_t images = 0, channels = 0, height = 0, width = 0;
  // The images the regions lie in. Forward: source (x) and destination (y).
  // Gradient: source (the source gradient dy), result (the forward result
  // y) and destination (the destination gradient dx).
  ImageDescriptor source, result, destination;

  bool operator==(const SoftMaxDescriptor& o) const {
    return log == o.log && gradient == o.gradient && images == o.images && channels == o.channels &&
           height == o.height && width == o.width && source == o.source && result == o.result &&
           destination == o.destination;
  }
};

// What a backend runs for a SoftMaxDescriptor, over regions of the
// descriptor's extents; the reductions run over each region's channels.
class SoftMaxPrimitive {
 public:
  static constexpr const char* family = "softmax";
  using Descriptor = SoftMaxDescriptor;
  virtual ~SoftMaxPrimitive() = default;
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const = 0;
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& result,
                        const ImageRegion& destination_gradient) const = 0;
};

// MPSCNNSoftMax (log false) and MPSCNNLogSoftMax (log true).
class CNNSoftMax : public UnaryKernel {
 public:
  CNNSoftMax(std::shared_ptr<Device> device, bool log);
  const char* class_name() const override { return log_ ? "MPSCNNLogSoftMax" : "MPSCNNSoftMax"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;
  bool is_log() const { return log_; }

 protected:
  // Each pixel's channels are read (both reductions) before they are written.
  InPlace in_place() const override { return InPlace::Exact; }
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
class CNNSoftMaxGradient : public GradientKernel {
 public:
  CNNSoftMaxGradient(std::shared_ptr<Device> device, bool log);
  const char* class_name() const override {
    return log_ ? "MPSCNNLogSoftMaxGradient" : "MPSCNNSoftMaxGradient";
  }
  bool is_log() const { return log_; }

 protected:
  GradientSecondary gradient_secondary() const override { return GradientSecondary::ForwardResult; }
  // Each pixel's channels are read (the sum) before they are written.
  InPlace in_place(bool) const override { return InPlace::Exact; }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  bool log_;
  PrimitiveCache<SoftMaxDescriptor, SoftMaxPrimitive> primitives_;
};

}  // namespace mpsx

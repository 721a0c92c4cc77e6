// MPSCNNCrossChannelNormalization and its gradient (MPSCNNNormalization.h):
// local response normalization over a window of N feature channels,
//   y_k = x_k / L_k^beta,  L_k = delta + alpha/N * sum_{q in Q(k)} x_q^2,
//   Q(k) = [max(0, k - floor(N/2)), min(D-1, k + floor((N-1)/2))],
// and the exact derivative of that formula (the header's omits the 1/N):
//   dx_j = dy_j L_j^-beta - (2 alpha beta / N) x_j sum_{k in R(j)} dy_k x_k L_k^(-beta-1),
//   R(j) = [max(0, j - floor((N-1)/2)), min(D-1, j + floor(N/2))].
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "mpsx/kernel.h"
#include "mpsx/kernels/normalization.h"

namespace mpsx {

class ExecutionContext;

using CrossChannelNormalizationParameters = ResponseNormalizationParameters;

// The key a kernel caches its primitive under, and what a backend builds it
// from: a pass over D = `channels` channels, whose gradient's secondary
// image is the forward source x.
struct CrossChannelNormalizationDescriptor : RegionPass {
  int64_t kernel_size = 5;  // N

  // The window's reach below and above a channel, min(N/2, D) and
  // min((N-1)/2, D): Q(k) = [k - before, k + after] clipped to [0, D).
  int64_t before() const { return std::min(kernel_size / 2, channels); }
  int64_t after() const { return std::min((kernel_size - 1) / 2, channels); }

  bool operator==(const CrossChannelNormalizationDescriptor& o) const {
    return RegionPass::operator==(o) && kernel_size == o.kernel_size;
  }
};

// The window runs over each region's channels.
class CrossChannelNormalizationPrimitive : public ResponseNormalizationPasses<CrossChannelNormalizationDescriptor> {
 public:
  static constexpr const char* family = "cross_channel_normalization";
};

using CrossChannelNormalizationProperties = ResponseNormalizationProperties;

// MPSCNNCrossChannelNormalization.
// In place: the backends compute every factor before they write a result.
class CNNCrossChannelNormalization : public InPlaceUnaryKernel, public CrossChannelNormalizationProperties {
 public:
  CNNCrossChannelNormalization(std::shared_ptr<Device> device, int64_t kernel_size);
  const char* class_name() const override { return "MPSCNNCrossChannelNormalization"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  PrimitiveCache<CrossChannelNormalizationDescriptor, CrossChannelNormalizationPrimitive> primitives_;
};

// MPSCNNCrossChannelNormalizationGradient: the secondary image is the forward
// source; the destination gradient is shaped as the forward source and gets
// zeros where the forward pass read nothing. Its own alpha, beta and delta
// are used (MPS: they must equal the forward kernel's).
class CNNCrossChannelNormalizationGradient : public GradientKernel, public CrossChannelNormalizationProperties {
 public:
  CNNCrossChannelNormalizationGradient(std::shared_ptr<Device> device, int64_t kernel_size);
  const char* class_name() const override { return "MPSCNNCrossChannelNormalizationGradient"; }

 protected:
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  PrimitiveCache<CrossChannelNormalizationDescriptor, CrossChannelNormalizationPrimitive> primitives_;
};

}  // namespace mpsx

// MPSCNNSpatialNormalization and its gradient (MPSCNNNormalization.h): per
// feature channel, over a k x k window of pixels (k = kernel_width =
// kernel_height),
//   y(i,j) = x(i,j) / T(i,j)^beta,  T = delta + alpha/(k*k) * N2(i,j),
// N2 the sum of x^2 over rows [i - floor(k/2), i + floor((k-1)/2)] and the
// same columns around j, pixels off the source reading 0 (edge_mode ZERO) or
// the nearest source pixel (CLAMP: x(clamp(r), clamp(q))); and the exact
// derivative of that formula (the header's lacks the 1/(k*k) and uses T(i,j)
// where each neighbour's own T belongs):
//   dx(p) = [p written] dy(p) T(p)^-beta
//           - (2 alpha beta / (k*k)) x(p) sum_{o written} m(p, o) dy(o) x(o) T(o)^(-beta-1),
// m(p, o) the number of reads of p by the window of o (0 or 1 with ZERO; with
// CLAMP an edge pixel is also read by the taps beyond the edge).
#pragma once

#include <cstdint>
#include <memory>

#include "mpsx/kernel.h"
#include "mpsx/kernels/normalization.h"

namespace mpsx {

class ExecutionContext;

using SpatialNormalizationParameters = ResponseNormalizationParameters;

// The key a kernel caches its primitive under, and what a backend builds it
// from: a pass whose written region's pixel (0, 0) is pixel (source_x,
// source_y) of the source. Forward: source (x, the whole source image) and
// destination (y, the written region). Gradient: source (dy, the forward's
// written region), secondary (x, the whole forward source) and destination
// (dx, shaped as the whole forward source).
struct SpatialNormalizationDescriptor : RegionPass {
  int64_t kernel_size = 5;
  EdgeMode edge_mode = EdgeMode::Zero;  // what window taps off the source read
  int64_t source_x = 0, source_y = 0;

  // The window of pixel i is [i - before, i + after].
  int64_t before() const { return kernel_size / 2; }
  int64_t after() const { return (kernel_size - 1) / 2; }

  bool operator==(const SpatialNormalizationDescriptor& o) const {
    return RegionPass::operator==(o) && kernel_size == o.kernel_size && edge_mode == o.edge_mode &&
           source_x == o.source_x && source_y == o.source_y;
  }
};

// `source` and `destination_gradient` cover whole source images (all rows
// and columns, the descriptor's images and channels); `destination` and
// `source_gradient` the written region.
class SpatialNormalizationPrimitive : public ResponseNormalizationPasses<SpatialNormalizationDescriptor> {
 public:
  static constexpr const char* family = "spatial_normalization";
};

// The properties both kernels share: kernel_width = kernel_height
// (read-only), alpha (>= 0), beta, delta (finite).
class SpatialNormalizationProperties : public ResponseNormalizationProperties {
 public:
  // Throws ArgumentError unless kernel_width equals kernel_height.
  SpatialNormalizationProperties(const char* kernel, int64_t kernel_width, int64_t kernel_height);
};

// MPSCNNSpatialNormalization.
// In place: the backends compute every factor before they write a result.
class CNNSpatialNormalization : public InPlaceUnaryKernel, public SpatialNormalizationProperties {
 public:
  CNNSpatialNormalization(std::shared_ptr<Device> device, int64_t kernel_width, int64_t kernel_height);
  const char* class_name() const override { return "MPSCNNSpatialNormalization"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  PrimitiveCache<SpatialNormalizationDescriptor, SpatialNormalizationPrimitive> primitives_;
};

// MPSCNNSpatialNormalizationGradient: the secondary image is the forward
// source; the destination gradient is shaped as the forward source. Its own
// alpha, beta, delta and edge_mode are used (MPS: they must equal the forward
// kernel's; make_gradient_kernels copies them), as the pooling gradients do.
// In place: the second pass reads only the factors and the source at its own element.
class CNNSpatialNormalizationGradient : public InPlaceGradientKernel, public SpatialNormalizationProperties {
 public:
  CNNSpatialNormalizationGradient(std::shared_ptr<Device> device, int64_t kernel_width, int64_t kernel_height);
  const char* class_name() const override { return "MPSCNNSpatialNormalizationGradient"; }

 protected:
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  PrimitiveCache<SpatialNormalizationDescriptor, SpatialNormalizationPrimitive> primitives_;
};

}  // namespace mpsx

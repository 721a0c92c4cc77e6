// MPSCNNLocalContrastNormalization and MPSCNNLocalContrastNormalizationGradient.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

// The properties of both kernels, with the kernel defaults of
// MPSCNNNormalization.h (the graph node's alpha default is 1, the kernel's 0).
struct LocalContrastNormalizationParameters {
  float alpha = 0.0f;
  float beta = 0.5f;
  float delta = 1.0f / 1024.0f;
  float p0 = 1.0f;
  float pm = 0.0f;
  float ps = 1.0f;
  bool operator==(const LocalContrastNormalizationParameters& o) const {
    return alpha == o.alpha && beta == o.beta && delta == o.delta && p0 == o.p0 && pm == o.pm && ps == o.ps;
  }
};

// What a backend builds a primitive from: the window, fixed for a kernel.
struct LocalContrastNormalizationDescriptor {
  int64_t kernel_width = 1, kernel_height = 1;
  bool gradient = false;  // built for the gradient kernel, else the forward kernel
  bool operator==(const LocalContrastNormalizationDescriptor& o) const {
    return kernel_width == o.kernel_width && kernel_height == o.kernel_height && gradient == o.gradient;
  }
};

// One pass: the parameters at encode and where the windows lie. Destination
// pixel (x, y) of a pass is centred on source pixel
// (first_x + x + kernel_width / 2, first_y + y + kernel_height / 2), always
// inside the source; its window covers source columns
// [first_x + x, first_x + x + kernel_width) and the rows likewise. Window
// pixels off the source read 0 (edge_mode ZERO) or the nearest source pixel
// (CLAMP: x(clamp(row), clamp(column))). With N = kernel_width * kernel_height:
//   M = sum(window) / N,  VAR = sum((window - M)^2) / N,  T = delta + alpha * VAR
//   y = pm + ps * (x_centre - p0 * M) * T^-beta
struct LocalContrastNormalizationPass {
  LocalContrastNormalizationParameters parameters;
  EdgeMode edge_mode = EdgeMode::Zero;
  int64_t first_x = 0, first_y = 0;
};

// What a backend runs. `source` / `source_image` / `destination_gradient`
// cover whole source images (the images and channels read), `destination` /
// `source_gradient` the pixels normalized.
class LocalContrastNormalizationPrimitive : public PrimitiveInterface<LocalContrastNormalizationDescriptor> {
 public:
  static constexpr const char* family = "local_contrast_normalization";
  virtual void forward(ExecutionContext& context, const LocalContrastNormalizationPass& pass,
                       const ImageRegion& source, const ImageRegion& destination) const = 0;
  // Writes every pixel of destination_gradient: the exact derivative of the
  // forward formula summed over the windows that read each pixel (as often
  // as each reads it: with CLAMP a window reads an edge pixel once per tap
  // at or beyond that edge), times the source gradient; zero where no window
  // reads.
  virtual void gradient(ExecutionContext& context, const LocalContrastNormalizationPass& pass,
                        const ImageRegion& source_gradient, const ImageRegion& source_image,
                        const ImageRegion& destination_gradient) const = 0;
};

// The kernel size and properties shared by the forward and gradient kernels.
class LocalContrastNormalizationSettings {
 public:
  // Throws ArgumentError for a size outside 1..kMaxDimension or a width other
  // than the height (MPS: "kernelWidth must be equal to kernelHeight").
  LocalContrastNormalizationSettings(const char* kernel, int64_t kernel_width, int64_t kernel_height);
  int64_t lcn_kernel_width() const { return kernel_width_; }
  int64_t lcn_kernel_height() const { return kernel_height_; }
  LocalContrastNormalizationParameters parameters;

 protected:
  Window lcn_window() const { return Window{kernel_width_, kernel_height_, 1, 1, 1, 1}; }

 private:
  int64_t kernel_width_, kernel_height_;
};

// The gradient state of a forward encode: MPSNNGradientState, with the
// forward window so that the gradient kernel can refuse another one.
class LocalContrastNormalizationGradientState : public GradientState {
 public:
  using GradientState::GradientState;
  int64_t kernel_width = 0, kernel_height = 0;
};

class CNNLocalContrastNormalization : public UnaryKernel, public LocalContrastNormalizationSettings {
 public:
  CNNLocalContrastNormalization(std::shared_ptr<Device> device, int64_t kernel_width, int64_t kernel_height);
  const char* class_name() const override { return "MPSCNNLocalContrastNormalization"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  Window window() const override { return lcn_window(); }
  std::shared_ptr<State> new_result_state(const Image& source) override;
  // Takes only states this family made (result_state), which carry its window.
  void check_state(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  std::shared_ptr<const LocalContrastNormalizationPrimitive> primitive_;
};

// Computes with its own properties and edge_mode (MPS: they must be the
// forward kernel's; make_gradient_kernels copies them, as pooling's does);
// where the windows lie comes from the state, which must come from a forward
// kernel of the same size.
class CNNLocalContrastNormalizationGradient : public GradientKernel, public LocalContrastNormalizationSettings {
 public:
  CNNLocalContrastNormalizationGradient(std::shared_ptr<Device> device, int64_t kernel_width, int64_t kernel_height);
  const char* class_name() const override { return "MPSCNNLocalContrastNormalizationGradient"; }
  int64_t kernel_width(bool secondary) const override { return secondary ? lcn_kernel_width() : 1; }
  int64_t kernel_height(bool secondary) const override { return secondary ? lcn_kernel_height() : 1; }

 protected:
  void check(const Image& source_gradient, const Image& source_image, const GradientState& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  std::shared_ptr<const LocalContrastNormalizationPrimitive> primitive_;
};

}  // namespace mpsx

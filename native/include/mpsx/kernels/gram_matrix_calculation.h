// MPSNNGramMatrixCalculation and MPSNNGramMatrixCalculationGradient.
#pragma once

#include <memory>
#include <vector>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

// The family has one primitive per kernel, whatever the shapes: alpha comes
// with each pass.
struct GramMatrixDescriptor {
  bool operator==(const GramMatrixDescriptor&) const { return true; }
};

// What a backend runs (docs/semantics.md, "Gram matrix"). `source` holds
// N images of C channels and H x W pixels; the result of image n is the
// C x C matrix G[f][c] = alpha * sum_{y,x} source(n, f, y, x) * source(n, c,
// y, x), stored as the header says in "the feature channel and 'x'-coordinate
// indices": element (n, c, 0, f) of a region of N x C x 1 x C.
class GramMatrixPrimitive : public PrimitiveInterface<GramMatrixDescriptor> {
 public:
  static constexpr const char* family = "gram_matrix_calculation";
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                       float alpha) const = 0;
  // dL/dsource(n, f, y, x) = alpha * sum_c (dG[f][c] + dG[c][f]) * source(n, c, y, x),
  // dG[f][c] being source_gradient (n, c, 0, f); writes all of
  // destination_gradient (the extents of `source`).
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                        const ImageRegion& destination_gradient, float alpha) const = 0;
};

// What a forward encode leaves for its gradient: the geometry, and the alpha
// it was encoded with, which the gradient uses in place of its own
// (MPSCNNConvolution.h: "the value for alpha is automatically adjusted by
// the MPSNNGradientState when it is provided in the encode call").
class GramMatrixGradientState : public GradientState {
 public:
  using GradientState::GradientState;
  float alpha = 1.0f;
};

class NNGramMatrixCalculation : public UnaryKernel {
 public:
  // Throws ArgumentError for a NaN or infinite alpha.
  NNGramMatrixCalculation(std::shared_ptr<Device> device, float alpha = 1.0f);
  const char* class_name() const override { return "MPSNNGramMatrixCalculation"; }
  float alpha() const { return alpha_; }
  // Throws ArgumentError for a NaN or infinite alpha.
  void set_alpha(float alpha);
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  // Also throws ArgumentError for an offset or clip_rect away from its
  // default: the header says the kernel "does not support non-default
  // offset or cliprect properties".
  void check_properties() const override;
  std::shared_ptr<State> new_result_state(const Image& source) override;
  void check_state(const State& state) const override;
  // C x 1 pixels of C channels for C source channels read.
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  float alpha_;
  std::shared_ptr<const GramMatrixPrimitive> primitive_;
};

class NNGramMatrixCalculationGradient : public GradientKernel {
 public:
  NNGramMatrixCalculationGradient(std::shared_ptr<Device> device, float alpha = 1.0f);
  const char* class_name() const override { return "MPSNNGramMatrixCalculationGradient"; }
  // The alpha of the last state encoded with, else the constructor's.
  float alpha() const { return alpha_; }
  void set_alpha(float alpha);

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  float alpha_;
  std::shared_ptr<const GramMatrixPrimitive> primitive_;
};

}  // namespace mpsx

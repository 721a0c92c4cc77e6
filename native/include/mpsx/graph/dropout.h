// MPSCNNDropoutNode and MPSCNNDropoutGradientNode.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/dropout.h"

namespace mpsx {

// initWithSource:[keepProbability:[seed:maskStrideInPixels:]]; the
// descriptor's defaults are the node's: keep_probability 0.5, seed 0, mask
// stride (1, 1, 1) (docs/semantics.md, "NNGraph"). Throws ArgumentError as
// the kernel does for a keep_probability outside (0, 1] or a mask stride
// other than 0 or 1.
class CNNDropoutGradientNode;

class CNNDropoutNode final : public DescribedForwardNode<CNNDropout, CNNDropoutGradientNode, DropoutDescriptor> {
 public:
  static constexpr float kDefaultKeepProbability = 0.5f;
  CNNDropoutNode(std::shared_ptr<ImageNode> source, DropoutDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNDropoutNode"; }
};

// Sources: the gradient of the forward result and the forward source; the
// forward result state (the mask). Throws TypeMismatchError unless the state
// comes from an MPSCNNDropoutNode and ArgumentError unless keep_probability
// and the mask stride are that node's (the seed is kept but unused: the mask
// comes from the state).
class CNNDropoutGradientNode final : public DescribedGradientNode<CNNDropoutGradient, DropoutDescriptor> {
 public:
  CNNDropoutGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                         std::shared_ptr<StateNode> gradient_state, DropoutDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNDropoutGradientNode"; }
};

}  // namespace mpsx

// MPSNNConcatenationNode and MPSNNConcatenationGradientNode. mpsx has no
// concatenation kernel: the forward step copies each source into its slice
// of feature channels of the result (an identity neuron with
// destination_feature_channel_offset), and each gradient filter copies its
// slice out of the gradient (an addition of zeros reading the slice through
// the primary source's feature channel offset and count).
#pragma once

#include <vector>

#include "mpsx/graph.h"

namespace mpsx {

// Each source's channels start at a multiple of 4, as in MPS (images are
// padded to 4 channels there): a source of 3 channels takes 4, the fourth
// zero. The result has the sum of the rounded-up counts.
class NNConcatenationNode final : public ForwardFilterNode {
 public:
  explicit NNConcatenationNode(std::vector<std::shared_ptr<ImageNode>> sources);
  const char* class_name() const override { return "MPSNNConcatenationNode"; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  // One slice per source, in order.
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;
};

// Sources: the gradient of the concatenation's result and the one forward
// source whose gradient it slices out; the concatenation's result state.
class NNConcatenationGradientNode final : public GradientFilterNode {
 public:
  // `index`: which source of the concatenation (the first that is
  // source_image when negative).
  NNConcatenationGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                              std::shared_ptr<StateNode> gradient_state, int64_t index = -1);
  const char* class_name() const override { return "MPSNNConcatenationGradientNode"; }
  int64_t index() const { return index_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 private:
  int64_t index_;
};

}  // namespace mpsx

// MPSCNNGroupNormalizationNode and MPSCNNGroupNormalizationGradientNode, and
// what the instance normalization nodes (graph/instance_normalization.h)
// share with them, as their kernels do (kernels/group_normalization.h):
// trainable; the gradient node updates the forward filter's gamma and beta
// as its training style says.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/group_normalization.h"

namespace mpsx {

class CNNGroupNormalizationNode : public ForwardFilterNode {
 public:
  CNNGroupNormalizationNode(std::shared_ptr<ImageNode> source, std::shared_ptr<GroupNormalizationDataSource> data_source)
      : CNNGroupNormalizationNode(std::move(source), std::move(data_source), GroupNormalizationKind::Group) {}
  const char* class_name() const override {
    return kind_ == GroupNormalizationKind::Instance ? "MPSCNNInstanceNormalizationNode" : "MPSCNNGroupNormalizationNode";
  }
  bool is_trainable() const override { return true; }
  GroupNormalizationKind kind() const { return kind_; }
  const std::shared_ptr<GroupNormalizationDataSource>& data_source() const { return data_source_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  CNNGroupNormalizationNode(std::shared_ptr<ImageNode> source, std::shared_ptr<GroupNormalizationDataSource> data_source,
                            GroupNormalizationKind kind);
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  std::shared_ptr<GroupNormalizationDataSource> data_source_;
  GroupNormalizationKind kind_;
};

// Sources: the gradient of the forward result and the forward source; the
// forward's result state, which must come from a node of the same kind.
// Training style Gpu: the data source's command buffer update where it
// implements one, else its host update; Cpu: the host update; None: none. A
// style that finds no update to call throws when the graph compiles.
class CNNGroupNormalizationGradientNode : public TrainableGradientNode {
 public:
  CNNGroupNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                                    std::shared_ptr<StateNode> gradient_state)
      : CNNGroupNormalizationGradientNode(std::move(source_gradient), std::move(source_image),
                                          std::move(gradient_state), GroupNormalizationKind::Group) {}
  const char* class_name() const override {
    return kind_ == GroupNormalizationKind::Instance ? "MPSCNNInstanceNormalizationGradientNode"
                                                     : "MPSCNNGroupNormalizationGradientNode";
  }
  GroupNormalizationKind kind() const { return kind_; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  friend class CNNGroupNormalizationNode;
  CNNGroupNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                                    std::shared_ptr<StateNode> gradient_state, GroupNormalizationKind kind);

 private:
  GroupNormalizationKind kind_;
};

}  // namespace mpsx

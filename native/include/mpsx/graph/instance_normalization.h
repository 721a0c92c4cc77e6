// MPSCNNInstanceNormalizationNode and MPSCNNInstanceNormalizationGradientNode:
// the group normalization nodes with one channel per group
// (graph/group_normalization.h), under their own names.
#pragma once

#include "mpsx/graph/group_normalization.h"
#include "mpsx/kernels/instance_normalization.h"

namespace mpsx {

class CNNInstanceNormalizationNode final : public CNNGroupNormalizationNode {
 public:
  CNNInstanceNormalizationNode(std::shared_ptr<ImageNode> source,
                               std::shared_ptr<GroupNormalizationDataSource> data_source)
      : CNNGroupNormalizationNode(std::move(source), std::move(data_source), GroupNormalizationKind::Instance) {}
};

class CNNInstanceNormalizationGradientNode final : public CNNGroupNormalizationGradientNode {
 public:
  CNNInstanceNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                       std::shared_ptr<ImageNode> source_image,
                                       std::shared_ptr<StateNode> gradient_state)
      : CNNGroupNormalizationGradientNode(std::move(source_gradient), std::move(source_image),
                                          std::move(gradient_state), GroupNormalizationKind::Instance) {}
};

}  // namespace mpsx

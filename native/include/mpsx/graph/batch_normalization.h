// MPSCNNBatchNormalizationNode and MPSCNNBatchNormalizationGradientNode:
// trainable. The forward node computes the batch statistics
// (MPSCNNBatchNormalizationStatistics) and normalizes with them when its
// flags say so, and with the data source's running mean and variance
// otherwise; the gradient node runs MPSCNNBatchNormalizationStatisticsGradient
// over the whole batch, then MPSCNNBatchNormalizationGradient, and updates the
// forward filter's gamma and beta and its running mean and variance as its
// training style says.
#pragma once

#include <cstdint>

#include "mpsx/graph.h"
#include "mpsx/kernels/batch_normalization.h"

namespace mpsx {

// MPSCNNBatchNormalizationFlags.
enum class BatchNormalizationFlags : uint32_t {
  // Statistics are computed where the graph uses the result state (a
  // gradient filter reads it, or it is exported): training.
  CalculateStatisticsAutomatic = 0,
  CalculateStatisticsAlways = 1,
  // The data source's mean and variance, always.
  CalculateStatisticsNever = 2,
};

class CNNBatchNormalizationNode final : public ForwardFilterNode {
 public:
  CNNBatchNormalizationNode(std::shared_ptr<ImageNode> source,
                            std::shared_ptr<BatchNormalizationDataSource> data_source);
  const char* class_name() const override { return "MPSCNNBatchNormalizationNode"; }
  bool is_trainable() const override { return true; }
  bool fuses_neuron() const override { return true; }
  const std::shared_ptr<BatchNormalizationDataSource>& data_source() const { return data_source_; }
  BatchNormalizationFlags flags = BatchNormalizationFlags::CalculateStatisticsAutomatic;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  std::shared_ptr<BatchNormalizationDataSource> data_source_;
};

// Sources: the gradient of the forward result and the forward source; the
// forward's result state, which must come from a CNNBatchNormalizationNode.
// Training style Gpu: each of the data source's updates (gamma and beta;
// mean and variance) on the command buffer where it implements that, else
// its host update where it implements that; Cpu: the host updates it
// implements; None: none. A style that finds no update to call throws when
// the graph compiles.
class CNNBatchNormalizationGradientNode final : public TrainableGradientNode {
 public:
  CNNBatchNormalizationGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                                    std::shared_ptr<StateNode> gradient_state);
  const char* class_name() const override { return "MPSCNNBatchNormalizationGradientNode"; }
  bool fuses_neuron() const override { return true; }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
};

}  // namespace mpsx

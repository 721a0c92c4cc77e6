// MPSCNNConvolutionNode, MPSCNNFullyConnectedNode and their gradient nodes:
// trainable; the gradient node updates the forward filter's weights as its
// training style says.
#pragma once

#include "mpsx/graph.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx {

class CNNConvolutionNode : public ForwardFilterNode {
 public:
  CNNConvolutionNode(std::shared_ptr<ImageNode> source, std::shared_ptr<ConvolutionDataSource> weights,
                     bool fully_connected = false);
  const char* class_name() const override {
    return fully_connected_ ? "MPSCNNFullyConnectedNode" : "MPSCNNConvolutionNode";
  }
  bool is_trainable() const override { return true; }
  bool fully_connected() const { return fully_connected_; }
  const std::shared_ptr<ConvolutionDataSource>& weights() const { return weights_; }
  AccumulatorPrecision accumulator_precision = AccumulatorPrecision::Float;
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;

 protected:
  std::vector<std::shared_ptr<FilterNode>> make_gradient_filters(
      const std::vector<std::shared_ptr<ImageNode>>& gradient_images) override;

 private:
  std::shared_ptr<ConvolutionDataSource> weights_;
  bool fully_connected_;
};

// Sources: the gradient of the forward result and the forward source; the
// forward's convolution gradient state. Computes the gradient of the source
// and of the weights, and updates the forward filter's weights (training
// style Gpu: on the command buffer where the data source can, else on the
// host; Cpu: the host update; None: none).
class CNNConvolutionGradientNode final : public TrainableGradientNode {
 public:
  CNNConvolutionGradientNode(std::shared_ptr<ImageNode> source_gradient, std::shared_ptr<ImageNode> source_image,
                             std::shared_ptr<StateNode> gradient_state, std::shared_ptr<ConvolutionDataSource> weights,
                             bool fully_connected = false);
  const char* class_name() const override {
    return fully_connected_ ? "MPSCNNFullyConnectedGradientNode" : "MPSCNNConvolutionGradientNode";
  }
  std::unique_ptr<GraphStep> compile(const StepSlots& slots) const override;
  // Its weights gradient runs beside the rest of the backward pass, with its
  // update (CNNConvolutionGradient::encode_weights_overlapped).
  bool reads_sources_overlapped() const override { return updates_weights(); }

 private:
  std::shared_ptr<ConvolutionDataSource> weights_;
  bool fully_connected_;
};

}  // namespace mpsx

// MPSCNNLoss, MPSCNNLossDescriptor and MPSCNNLossLabels.
#pragma once

#include <cstdint>
#include <memory>

#include "mpsx/kernel.h"
#include "mpsx/state.h"

namespace mpsx {

class ExecutionContext;

// MPSCNNLossType, same values.
enum class LossType : uint32_t {
  MeanAbsoluteError = 0,
  MeanSquaredError,
  SoftMaxCrossEntropy,
  SigmoidCrossEntropy,
  CategoricalCrossEntropy,
  Hinge,
  Huber,
  CosineDistance,
  Log,
  KullbackLeiblerDivergence,
  Count
};

// MPSCNNReductionType, same values.
enum class ReductionType : int32_t { None = 0, Sum, Mean, SumByNonZeroWeights, Count };

// MPSCNNLossDescriptor, with MPS's defaults.
struct LossDescriptor {
  LossType loss_type = LossType::MeanAbsoluteError;
  ReductionType reduction_type = ReductionType::None;
  bool reduce_across_batch = false;
  float weight = 1.0f;
  float label_smoothing = 0.0f;
  uint64_t number_of_classes = 1;
  float epsilon = 1e-7f;
  float delta = 1.0f;

  // Softmax cross entropy and cosine distance combine the feature channels of
  // a pixel into one loss; the other types have one loss per value.
  bool loss_per_pixel() const {
    return loss_type == LossType::SoftMaxCrossEntropy || loss_type == LossType::CosineDistance;
  }
  bool operator==(const LossDescriptor& o) const {
    return loss_type == o.loss_type && reduction_type == o.reduction_type &&
           reduce_across_batch == o.reduce_across_batch && weight == o.weight &&
           label_smoothing == o.label_smoothing && number_of_classes == o.number_of_classes &&
           epsilon == o.epsilon && delta == o.delta;
  }
  // Throws ArgumentError for an unknown loss or reduction type or no classes.
  void validate() const;
};

// MPSCNNLossLabels: the labels (targets) of a batch, optional per-value
// weights of the same size, and the loss image the loss writes. One object
// holds the labels of every image of the batch it is used with.
class CNNLossLabels : public State {
 public:
  // `labels` and `weights` (may be null) are retained, as MPS's
  // initWithDevice:lossImageSize:labelsImage:weightsImage: does.
  CNNLossLabels(std::shared_ptr<Device> device, std::shared_ptr<Image> labels, std::shared_ptr<Image> weights);
  const char* class_name() const override { return "MPSCNNLossLabels"; }

  const std::shared_ptr<Image>& labels_image() const { return labels_; }
  const std::shared_ptr<Image>& weights_image() const { return weights_; }
  // 1x1x1 per image until a loss with ReductionType::None is encoded with
  // these labels, the source's size from then on (the loss makes it anew
  // when the size changes; ask for it after the encode).
  const std::shared_ptr<Image>& loss_image() const { return loss_; }
  // The loss image for a loss writing `descriptor`, made anew if it differs.
  const std::shared_ptr<Image>& loss_image_for(const ImageDescriptor& descriptor);

  // The loss image, labels and weights, for host reads after completion.
  void synchronize(CommandBuffer& command_buffer) override;

 private:
  std::shared_ptr<Image> labels_;
  std::shared_ptr<Image> weights_;
  std::shared_ptr<Image> loss_;
};

// What a backend runs for a loss: over N images of equal extents, the
// per-value losses and gradient of MPSCNNLoss.h for source y, labels t and
// weights (weights.data is null without per-value weights). Writes the
// gradient, and to `loss` either one value per image (1x1x1 images) or, for
// ReductionType::None, the weighted loss of every value (y's extents).
class LossPrimitive {
 public:
  static constexpr const char* family = "loss";
  using Descriptor = LossDescriptor;
  virtual ~LossPrimitive() = default;
  virtual void loss_and_gradient(ExecutionContext& context, const ImageRegion& source, const ImageRegion& labels,
                                 const ImageRegion& weights, const ImageRegion& gradient,
                                 const ImageRegion& loss) const = 0;
};

// MPSCNNLoss: encode computes the loss into the labels' loss image and
// returns its gradient with respect to the source, the first gradient of the
// backward pass.
class CNNLoss : public Kernel {
 public:
  CNNLoss(std::shared_ptr<Device> device, LossDescriptor descriptor);
  const char* class_name() const override { return "MPSCNNLoss"; }
  const LossDescriptor& loss_descriptor() const { return descriptor_; }

  // -encodeToCommandBuffer:sourceImage:labels:[destinationImage:] and the
  // batch forms: `source` holds every image of the batch, `labels` as many.
  std::shared_ptr<Image> encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                const std::shared_ptr<CNNLossLabels>& labels,
                                const std::shared_ptr<Image>& destination);
  // The gradient image's descriptor, without changing the kernel.
  ImageDescriptor destination_image_descriptor(const Image& source);

 private:
  void check_source(const Image& source) const;

  LossDescriptor descriptor_;
  std::shared_ptr<const LossPrimitive> primitive_;
};

}  // namespace mpsx

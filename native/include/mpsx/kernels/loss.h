// MPSCNNLoss, MPSCNNLossDescriptor and MPSCNNLossLabels; the separated
// losses MPSNNForwardLoss and MPSNNLossGradient.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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
  // Throws ArgumentError for an unknown loss or reduction type, no classes or
  // a parameter checked_parameter refuses.
  void validate() const;
};

// The size MPSCNNLossLabels' lossImageSize gives: {width, height, feature
// channels}; all 0 where none was given.
struct LossImageSize {
  int64_t width = 0, height = 0, feature_channels = 0;
  bool given() const { return width != 0 || height != 0 || feature_channels != 0; }
  bool operator==(const LossImageSize& o) const {
    return width == o.width && height == o.height && feature_channels == o.feature_channels;
  }
};

// MPSCNNLossLabels: labels (targets), optional per-value weights and the
// loss image the loss writes, for one image or for consecutive images of a
// batch. A loss reads the first C feature channels of the labels and weights
// for a source of C (padded labels, as MPS's 4-channel slices have them).
class CNNLossLabels : public State {
 public:
  // `labels` and `weights` (may be null) are retained, as MPS's
  // initWithDevice:lossImageSize:labelsImage:weightsImage: does.
  CNNLossLabels(std::shared_ptr<Device> device, std::shared_ptr<Image> labels, std::shared_ptr<Image> weights,
                LossImageSize loss_image_size = {});
  const char* class_name() const override { return "MPSCNNLossLabels"; }

  const std::shared_ptr<Image>& labels_image() const { return labels_; }
  const std::shared_ptr<Image>& weights_image() const { return weights_; }
  int64_t number_of_images() const { return labels_->number_of_images(); }
  const LossImageSize& loss_image_size() const { return loss_image_size_; }
  // The given loss image size, or 1x1x1, per image until a loss with
  // ReductionType::None is encoded with these labels, the source's size from
  // then on (the loss makes it anew when the size changes; ask for it after
  // the encode).
  const std::shared_ptr<Image>& loss_image() const { return loss_; }
  // The loss image for a loss writing `descriptor`, made anew if it differs.
  const std::shared_ptr<Image>& loss_image_for(const ImageDescriptor& descriptor);

  // The loss image, labels and weights, for host reads after completion.
  void synchronize(CommandBuffer& command_buffer) override;
  std::shared_ptr<State> make_stand_in() const override;
  bool pair_with_stand_in(State& stand_in, std::vector<ImagePair>& reads, std::vector<ImagePair>& writes) override;

 private:
  std::shared_ptr<Image> labels_;
  std::shared_ptr<Image> weights_;
  std::shared_ptr<Image> loss_;
  LossImageSize loss_image_size_;
};

// MPSCNNLossLabelsBatch (an NSArray of MPSCNNLossLabels, one per image), as
// a graph takes it among its source states.
class CNNLossLabelsBatch : public State {
 public:
  CNNLossLabelsBatch(std::shared_ptr<Device> device, std::vector<std::shared_ptr<CNNLossLabels>> items);
  const char* class_name() const override { return "MPSCNNLossLabelsBatch"; }
  const std::vector<std::shared_ptr<CNNLossLabels>>& items() const { return items_; }
  void synchronize(CommandBuffer& command_buffer) override;
  std::shared_ptr<State> make_stand_in() const override;
  bool pair_with_stand_in(State& stand_in, std::vector<ImagePair>& reads, std::vector<ImagePair>& writes) override;

 private:
  std::vector<std::shared_ptr<CNNLossLabels>> items_;
};

// What a backend runs for a loss: over N images of equal extents, the
// per-value losses and gradient of MPSCNNLoss.h for source y, labels t and
// weights (weights.data is null without per-value weights). Writes the
// gradient, and to `loss` either one value per image (1x1x1 images) or, for
// ReductionType::None, the weighted loss of every value (y's extents).
class LossPrimitive : public PrimitiveInterface<LossDescriptor> {
 public:
  static constexpr const char* family = "loss";
  virtual void loss_and_gradient(ExecutionContext& context, const ImageRegion& source, const ImageRegion& labels,
                                 const ImageRegion& weights, const ImageRegion& gradient,
                                 const ImageRegion& loss) const = 0;
  // MPSNNForwardLoss: the loss image alone (as loss_and_gradient writes it),
  // for `d`: the primitive's descriptor with the kernel's weight,
  // label_smoothing, epsilon and delta at encode time.
  virtual void forward_loss(ExecutionContext& context, const LossDescriptor& d, const ImageRegion& source,
                            const ImageRegion& labels, const ImageRegion& weights, const ImageRegion& loss) const = 0;
  // MPSNNLossGradient: `gradient` = sum over the loss values l that
  // forward_loss writes of source_gradient(l) * dl/dy, or dl/dt with
  // `labels_gradient` (y the source, t the labels). source_gradient has one
  // value per loss value for ReductionType::None, else one per image (1x1x1;
  // across the batch the first image's gradient applies to every image, as
  // the first loss image holds the batch's loss). The reductions' divisors
  // are constants (SUM_BY_NON_ZERO_WEIGHTS counts the weights, not the
  // source gradient).
  virtual void loss_gradient(ExecutionContext& context, const LossDescriptor& d, const ImageRegion& source,
                             const ImageRegion& labels, const ImageRegion& weights,
                             const ImageRegion& source_gradient, const ImageRegion& gradient,
                             bool labels_gradient) const = 0;
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
  // batch forms: `source` holds every image of the batch; `labels` (count
  // objects) hold as many images, in order: one object for the batch, or
  // one per image as an MPSCNNLossLabelsBatch.
  std::shared_ptr<Image> encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                const std::shared_ptr<CNNLossLabels>* labels, size_t count,
                                const std::shared_ptr<Image>& destination);
  std::shared_ptr<Image> encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                const std::shared_ptr<CNNLossLabels>& labels,
                                const std::shared_ptr<Image>& destination) {
    return encode(command_buffer, source, &labels, 1, destination);
  }
  // The gradient image's descriptor, without changing the kernel.
  ImageDescriptor destination_image_descriptor(const Image& source);

 private:
  void check_source(const Image& source) const;
  // Throws unless `labels` (count objects) hold labels, and weights for all
  // or none, for every image of a source of `s`, and any loss image size
  // they were given is `loss_size`'s; returns whether they hold weights.
  bool check_labels(const ImageDescriptor& s, const std::shared_ptr<CNNLossLabels>* labels, size_t count,
                    const ImageDescriptor& loss_size) const;
  // `destination`, checked, or a new gradient image the size of `source`.
  std::shared_ptr<Image> gradient_destination(CommandBuffer& command_buffer, const Image& source,
                                              const std::shared_ptr<Image>& destination);
  // The geometry of the gradient; ShapeError unless the loss reads whole
  // source images.
  Geometry whole_source_geometry(const Image& source, const Image& destination) const;
  // Throws where the gradient overlaps what the loss reads, or the loss image
  // (of `loss_size`) each labels object gets.
  void check_loss_aliasing(const Image& source, const Image& destination,
                           const std::shared_ptr<CNNLossLabels>* labels, size_t count,
                           ImageDescriptor loss_size) const;
  // The labels (or weights) of per-image labels objects as one batch.
  std::shared_ptr<Image> gather(CommandBuffer& command_buffer, const std::shared_ptr<CNNLossLabels>* labels,
                                size_t count, bool weights);
  void record_loss(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                   const std::shared_ptr<Image>& targets, const std::shared_ptr<Image>& weights,
                   const std::shared_ptr<Image>& result, const std::shared_ptr<Image>& loss, const Geometry& g) const;
  // The batch's `loss` copied to each labels object's loss image.
  void scatter_loss(CommandBuffer& command_buffer, const std::shared_ptr<Image>& loss,
                    const std::shared_ptr<CNNLossLabels>* labels, size_t count) const;

  LossDescriptor descriptor_;
  std::vector<std::shared_ptr<Image>> gathered_;  // reused to gather per-image labels
  std::shared_ptr<const LossPrimitive> primitive_;
};

// The state MPSNNForwardLoss makes (its result state, an MPSNNGradientState
// in MPS): the dynamic values of the forward encode, which the gradient uses
// in place of its own.
class LossGradientState : public GradientState {
 public:
  using GradientState::GradientState;
  float weight = 1.0f, label_smoothing = 0.0f, epsilon = 1e-7f, delta = 1.0f;
};

// The read-only and read-write properties the separated losses share.
class SeparatedLoss : public Kernel {
 public:
  SeparatedLoss(std::shared_ptr<Device> device, LossDescriptor descriptor);
  // Read-write, as MPS's (the descriptor's values at first).
  float weight, label_smoothing, epsilon, delta;
  // The descriptor with the current read-write values.
  LossDescriptor loss_descriptor() const;

 protected:
  // Throws ArgumentError for an offset or clip_rect away from its default,
  // which the separated losses do not support.
  void check_properties() const override;
  // The source, labels and weights (may be null) checks of both kernels.
  void check_inputs(const std::shared_ptr<Image>& source, const std::shared_ptr<Image>& labels,
                    const std::shared_ptr<Image>& weights) const;
  // The size of the loss image for `source`: one value per image (1x1x1),
  // or the source's size for ReductionType::None.
  ImageDescriptor loss_size(const Image& source) const;

  LossDescriptor descriptor_;
  std::shared_ptr<const LossPrimitive> primitive_;
};

// MPSNNForwardLoss: the loss values of a batch against labels (and
// per-value weights) given as images, with no gradient; its result state
// carries weight, label_smoothing, epsilon and delta to MPSNNLossGradient.
class NNForwardLoss final : public SeparatedLoss {
 public:
  using SeparatedLoss::SeparatedLoss;
  const char* class_name() const override { return "MPSNNForwardLoss"; }

  struct Encoded {
    std::shared_ptr<Image> image;
    std::shared_ptr<LossGradientState> state;
  };
  // -encodeBatchToCommandBuffer:sourceImages:labels:weights:
  // destinationStates:destinationImages: (weights and destination may be
  // null; with a state or want_state the result state is filled).
  Encoded encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                 const std::shared_ptr<Image>& labels, const std::shared_ptr<Image>& weights,
                 const std::shared_ptr<Image>& destination, const std::shared_ptr<State>& state, bool want_state);
  // The loss image's descriptor: N images of 1x1x1, or the source's size
  // for ReductionType::None, in the source's data type.
  ImageDescriptor destination_image_descriptor(const Image& source) const;
  // -resultStateBatchForSourceImage:...
  std::shared_ptr<LossGradientState> result_state(const Image& source) const;
};

// MPSNNLossGradient: the gradient of MPSNNForwardLoss's loss values with
// respect to its source (or its labels, with compute_label_gradients),
// given the gradient of those loss values. An MPSCNNBinaryKernel in MPS; here
// a kernel of its own, whose encode takes the five inputs of MPS's.
class NNLossGradient final : public SeparatedLoss {
 public:
  using SeparatedLoss::SeparatedLoss;
  const char* class_name() const override { return "MPSNNLossGradient"; }
  bool compute_label_gradients = false;

  // -encodeBatchToCommandBuffer:sourceGradients:sourceImages:labels:weights:
  // sourceStates:[destinationGradients:]. With a state (an NNForwardLoss
  // result state) its weight, label_smoothing, epsilon and delta are used in
  // place of the kernel's.
  std::shared_ptr<Image> encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                const std::shared_ptr<Image>& source, const std::shared_ptr<Image>& labels,
                                const std::shared_ptr<Image>& weights, const std::shared_ptr<State>& state,
                                const std::shared_ptr<Image>& destination);
  // The gradient's descriptor: the source's size in the source gradient's
  // data type.
  ImageDescriptor destination_image_descriptor(const Image& source_gradient, const Image& source) const;
};

}  // namespace mpsx

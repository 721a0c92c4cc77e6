#include "mpsx/kernels/loss.h"

#include <mutex>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

MPSCNNLossType loss_type_of(LossType type) {
  switch (type) {
    case LossType::MeanAbsoluteError: return MPSCNNLossTypeMeanAbsoluteError;
    case LossType::MeanSquaredError: return MPSCNNLossTypeMeanSquaredError;
    case LossType::SoftMaxCrossEntropy: return MPSCNNLossTypeSoftMaxCrossEntropy;
    case LossType::SigmoidCrossEntropy: return MPSCNNLossTypeSigmoidCrossEntropy;
    case LossType::CategoricalCrossEntropy: return MPSCNNLossTypeCategoricalCrossEntropy;
    case LossType::Hinge: return MPSCNNLossTypeHinge;
    case LossType::Huber: return MPSCNNLossTypeHuber;
    case LossType::CosineDistance: return MPSCNNLossTypeCosineDistance;
    case LossType::Log: return MPSCNNLossTypeLog;
    case LossType::KullbackLeiblerDivergence: return MPSCNNLossTypeKullbackLeiblerDivergence;
    case LossType::Count: break;
  }
  fail<ArgumentError>("metal: no MPSCNNLossType for loss type ", static_cast<uint32_t>(type));
}

MPSCNNReductionType reduction_type_of(ReductionType type) {
  switch (type) {
    case ReductionType::None: return MPSCNNReductionTypeNone;
    case ReductionType::Sum: return MPSCNNReductionTypeSum;
    case ReductionType::Mean: return MPSCNNReductionTypeMean;
    case ReductionType::SumByNonZeroWeights: return MPSCNNReductionTypeSumByNonZeroWeights;
    case ReductionType::Count: break;
  }
  fail<ArgumentError>("metal: no MPSCNNReductionType for reduction type ", static_cast<int32_t>(type));
}

// MPSCNNLoss over a batch. MPS computes the loss into an image of each
// image's MPSCNNLossLabels, made per encode over the region's labels and
// weights images; blits copy it into the loss region.
class MetalLoss final : public LossPrimitive {
 public:
  MetalLoss(const MetalBackend& backend, const LossDescriptor& d)
      : device_(backend.device()), per_value_(d.reduction_type == ReductionType::None) {
    id<MTLDevice> device = backend.device();
    if (d.loss_type == LossType::CosineDistance && d.reduction_type != ReductionType::Sum)
      fail<ArgumentError>("metal: MPSCNNLoss computes cosine distance with MPSCNNReductionTypeSum only "
                          "(MPSCNNLoss.h); given reduction type ",
                          static_cast<int32_t>(d.reduction_type));
    MPSCNNLossDescriptor* descriptor =
        [MPSCNNLossDescriptor cnnLossDescriptorWithType:loss_type_of(d.loss_type)
                                          reductionType:reduction_type_of(d.reduction_type)];
    descriptor.reduceAcrossBatch = d.reduce_across_batch;
    descriptor.weight = d.weight;
    descriptor.labelSmoothing = d.label_smoothing;
    descriptor.numberOfClasses = static_cast<NSUInteger>(d.number_of_classes);
    descriptor.epsilon = d.epsilon;
    descriptor.delta = d.delta;
    loss_ = [[MPSCNNLoss alloc] initWithDevice:device lossDescriptor:descriptor];
    forward_ = [[MPSNNForwardLoss alloc] initWithDevice:device lossDescriptor:descriptor];
    gradient_ = [[MPSNNLossGradient alloc] initWithDevice:device lossDescriptor:descriptor];
  }

  // MPSNNForwardLoss with the kernel's values at encode time.
  void forward_loss(ExecutionContext& context, const LossDescriptor& d, const ImageRegion& source,
                    const ImageRegion& labels, const ImageRegion& weights, const ImageRegion& loss) const override {
    MetalContext& metal = context_of(context);
    std::lock_guard<std::mutex> lock(mutex_);
    forward_.weight = d.weight;
    forward_.labelSmoothing = d.label_smoothing;
    forward_.epsilon = d.epsilon;
    forward_.delta = d.delta;
    [forward_ encodeBatchToCommandBuffer:metal.command_buffer()
                            sourceImages:images_of(source)
                                  labels:images_of(labels)
                                 weights:weights.storage ? images_of(weights) : nil
                       destinationStates:nil
                       destinationImages:images_of(loss)];
  }

  // MPSNNLossGradient with the values core resolved (the forward state's or
  // the kernel's); no MPS state is passed, so these are the ones used.
  void loss_gradient(ExecutionContext& context, const LossDescriptor& d, const ImageRegion& source,
                     const ImageRegion& labels, const ImageRegion& weights, const ImageRegion& source_gradient,
                     const ImageRegion& gradient, bool labels_gradient) const override {
    MetalContext& metal = context_of(context);
    std::lock_guard<std::mutex> lock(mutex_);
    gradient_.weight = d.weight;
    gradient_.labelSmoothing = d.label_smoothing;
    gradient_.epsilon = d.epsilon;
    gradient_.delta = d.delta;
    gradient_.computeLabelGradients = labels_gradient;
    [gradient_ encodeBatchToCommandBuffer:metal.command_buffer()
                          sourceGradients:images_of(source_gradient)
                             sourceImages:images_of(source)
                                   labels:images_of(labels)
                                  weights:weights.storage ? images_of(weights) : nil
                             sourceStates:nil
                     destinationGradients:images_of(gradient)];
  }

  void loss_and_gradient(ExecutionContext& context, const ImageRegion& source, const ImageRegion& labels,
                         const ImageRegion& weights, const ImageRegion& gradient,
                         const ImageRegion& loss) const override {
    MetalContext& metal = context_of(context);
    const NSUInteger images = static_cast<NSUInteger>(source.n);
    // {1, 1, 1} holds a reduced loss; the source's size one loss per value.
    const MTLSize loss_size = per_value_ ? MTLSizeMake(static_cast<NSUInteger>(source.w),
                                                       static_cast<NSUInteger>(source.h),
                                                       static_cast<NSUInteger>(source.c))
                                         : MTLSizeMake(1, 1, 1);
    NSMutableArray<MPSCNNLossLabels*>* batch = [NSMutableArray arrayWithCapacity:images];
    for (NSUInteger i = 0; i < images; ++i)
      [batch addObject:[[MPSCNNLossLabels alloc] initWithDevice:device_
                                                  lossImageSize:loss_size
                                                    labelsImage:image_of(labels, i)
                                                   weightsImage:weights.storage ? image_of(weights, i) : nil]];
    {
      // An MPSKernel's properties belong to one encoding thread at a time.
      std::lock_guard<std::mutex> lock(mutex_);
      loss_.offset = origin_of(source);
      loss_.clipRect = clip_rect_of(gradient);
      loss_.sourceFeatureChannelOffset = feature_channel_offset(source);
      loss_.destinationFeatureChannelOffset = feature_channel_offset(gradient);
      [loss_ encodeBatchToCommandBuffer:metal.command_buffer()
                           sourceImages:images_of(source)
                                 labels:batch
                      destinationImages:images_of(gradient)];
    }

    // A blit copies texels as they are: check every pair before encoding one.
    for (NSUInteger i = 0; i < images; ++i) {
      const MTLPixelFormat from = batch[i].lossImage.texture.pixelFormat, to = image_of(loss, i).texture.pixelFormat;
      if (from != to)
        fail<Error>("metal: MPSCNNLossLabels' loss image has MTLPixelFormat ", static_cast<NSUInteger>(from),
                    ", the loss image MTLPixelFormat ", static_cast<NSUInteger>(to), "; a blit cannot convert them");
    }
    id<MTLBlitCommandEncoder> blit = [metal.command_buffer() blitCommandEncoder];
    for (NSUInteger i = 0; i < images; ++i) {
      id<MTLTexture> from = batch[i].lossImage.texture, to = image_of(loss, i).texture;
      for (NSUInteger slice = 0; slice < to.arrayLength; ++slice)
        [blit copyFromTexture:from
                  sourceSlice:slice
                  sourceLevel:0
                 sourceOrigin:MTLOriginMake(0, 0, 0)
                   sourceSize:MTLSizeMake(to.width, to.height, 1)
                    toTexture:to
             destinationSlice:slice
             destinationLevel:0
            destinationOrigin:MTLOriginMake(0, 0, 0)];
    }
    [blit endEncoding];
  }

 private:
  id<MTLDevice> device_;
  bool per_value_;
  MPSCNNLoss* loss_;
  MPSNNForwardLoss* forward_;
  MPSNNLossGradient* gradient_;
  mutable std::mutex mutex_;
};

const Registered<LossPrimitive, MetalLoss> registered("metal");

}  // namespace

}  // namespace mpsx::metal

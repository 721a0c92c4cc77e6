#include "mpsx/kernels/arithmetic.h"

#include <cstdint>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

static_assert(static_cast<int32_t>(ComparisonType::GreaterOrEqual) ==
                  static_cast<int32_t>(MPSNNComparisonTypeGreaterOrEqual),
              "ComparisonType is MPSNNComparisonType");

// A source region's broadcasting as MPS strides: 0 along a dimension of
// extent 1 that the destination spans.
NSUInteger stride_of(int64_t extent, int64_t destination_extent) {
  return extent == 1 && destination_extent > 1 ? 0 : 1;
}

class MetalArithmetic final : public ArithmeticPrimitive {
 public:
  MetalArithmetic(const MetalBackend& backend, ArithmeticOperation operation) : operation_(operation) {
    id<MTLDevice> device = backend.device();
    switch (operation) {
      case ArithmeticOperation::Add:
        forward_ = [[MPSCNNAdd alloc] initWithDevice:device];
        primary_gradient_ = [[MPSCNNAddGradient alloc] initWithDevice:device isSecondarySourceFilter:NO];
        secondary_gradient_ = [[MPSCNNAddGradient alloc] initWithDevice:device isSecondarySourceFilter:YES];
        break;
      case ArithmeticOperation::Subtract:
        forward_ = [[MPSCNNSubtract alloc] initWithDevice:device];
        primary_gradient_ = [[MPSCNNSubtractGradient alloc] initWithDevice:device isSecondarySourceFilter:NO];
        secondary_gradient_ = [[MPSCNNSubtractGradient alloc] initWithDevice:device isSecondarySourceFilter:YES];
        break;
      case ArithmeticOperation::Multiply:
        forward_ = [[MPSCNNMultiply alloc] initWithDevice:device];
        primary_gradient_ = [[MPSCNNMultiplyGradient alloc] initWithDevice:device isSecondarySourceFilter:NO];
        secondary_gradient_ = [[MPSCNNMultiplyGradient alloc] initWithDevice:device isSecondarySourceFilter:YES];
        break;
      case ArithmeticOperation::Divide: forward_ = [[MPSCNNDivide alloc] initWithDevice:device]; break;
      case ArithmeticOperation::Compare: forward_ = [[MPSNNCompare alloc] initWithDevice:device]; break;
    }
  }

  void forward(ExecutionContext& context, const ImageRegion& primary, const ImageRegion& secondary,
               const ImageRegion& destination, const ArithmeticParameters& p) const override {
    check_distinct(forward_name(), primary, destination);
    check_distinct(forward_name(), secondary, destination);
    MPSCNNArithmetic* k = forward_;
    set_forward(k, primary, secondary, destination);
    k.primaryScale = p.primary_scale;
    k.secondaryScale = p.secondary_scale;
    k.bias = p.bias;
    k.minimumValue = p.minimum;
    k.maximumValue = p.maximum;
    if (operation_ == ArithmeticOperation::Compare) {
      MPSNNCompare* compare = (MPSNNCompare*)k;
      compare.comparisonType = static_cast<MPSNNComparisonType>(p.comparison);
      compare.threshold = p.threshold;
    }
    [k encodeBatchToCommandBuffer:context_of(context).command_buffer()
                    primaryImages:images_of(primary)
                  secondaryImages:images_of(secondary)
                destinationImages:images_of(destination)];
  }

  // MPS's gradient computes (primaryScale * dy) op (secondaryScale * y):
  // scale goes to primaryScale. Its state comes from the forward kernel over
  // images of the forward shapes: dx's shape for this input, `other` (or dx)
  // for the other one, dy's for the result.
  void gradient(ExecutionContext& context, const ImageRegion& dy, const ImageRegion* other, const ImageRegion& dx,
                float scale) const override {
    check_distinct(forward_name(), dy, dx);
    MPSCNNArithmeticGradient* g = nil;
    // Which filter: the caller passes dx of the input it differentiates;
    // both are equivalent up to the broadcasting of dx, so the primary one
    // serves with dx as its forward primary image.
    g = primary_gradient_;
    const ImageRegion& image = other ? *other : dx;
    MPSImageBatch* dx_images = images_of(dx);
    MPSImageBatch* image_images = images_of(image);
    MPSImageBatch* dy_images = images_of(dy);
    MPSCNNArithmetic* k = forward_;
    set_forward(k, dx, image, dy);
    MPSStateBatch* states = [k resultStateBatchForPrimaryImage:dx_images
                                                secondaryImage:image_images
                                                  sourceStates:nil
                                              destinationImage:dy_images];
    g.primaryScale = scale;
    g.secondaryScale = 1;
    g.bias = 0;
    g.secondaryStrideInFeatureChannels = stride_of(image.c, dy.c);
    g.secondaryStrideInPixelsX = stride_of(image.w, dy.w);
    g.secondaryStrideInPixelsY = stride_of(image.h, dy.h);
    set_gradient_regions(g, dy, image, origin_of(image), dx, slice_channels);
    encode_gradient_batch(g, context_of(context).command_buffer(), dy_images, image_images, states, dx);
  }

 private:
  const char* forward_name() const { return arithmetic_class_name(operation_); }

  static void set_forward(MPSCNNArithmetic* k, const ImageRegion& primary, const ImageRegion& secondary,
                          const ImageRegion& destination) {
    k.primaryOffset = origin_of(primary);
    k.secondaryOffset = origin_of(secondary);
    k.clipRect = clip_rect_of(destination);
    k.primaryStrideInPixelsX = stride_of(primary.w, destination.w);
    k.primaryStrideInPixelsY = stride_of(primary.h, destination.h);
    k.secondaryStrideInPixelsX = stride_of(secondary.w, destination.w);
    k.secondaryStrideInPixelsY = stride_of(secondary.h, destination.h);
    k.primaryStrideInFeatureChannels = stride_of(primary.c, destination.c);
    k.secondaryStrideInFeatureChannels = stride_of(secondary.c, destination.c);
    k.primarySourceFeatureChannelOffset = feature_channel_offset(primary);
    k.primarySourceFeatureChannelMaxCount = slice_channels(primary);
    k.secondarySourceFeatureChannelOffset = feature_channel_offset(secondary);
    k.secondarySourceFeatureChannelMaxCount = slice_channels(secondary);
    k.destinationFeatureChannelOffset = feature_channel_offset(destination);
  }

  ArithmeticOperation operation_;
  MPSCNNArithmetic* forward_ = nil;
  MPSCNNArithmeticGradient* primary_gradient_ = nil;
  MPSCNNArithmeticGradient* secondary_gradient_ = nil;
};

const Registered<ArithmeticPrimitive, MetalArithmetic> registered("metal");

}  // namespace
}  // namespace mpsx::metal

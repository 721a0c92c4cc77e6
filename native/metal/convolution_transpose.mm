#include "mpsx/kernels/convolution_transpose.h"

#include "convolution.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// MPSCNNConvolutionTranspose over the source block, writing the whole
// destination region: the pixels no source pixel reaches see only zeros and
// get the biases. The gradient passes run MPSCNNConvolutionTransposeGradient
// the way MPS pairs it with its forward kernel: the transpose, set as for the
// forward pass, makes the gradient state, which hands the forward geometry to
// the gradient.
class MetalConvolutionTranspose final : public ConvolutionTransposePrimitive {
 public:
  MetalConvolutionTranspose(const MetalBackend& backend, const ConvolutionTransposeShape& s) : s_(s) {
    id<MTLDevice> device = backend.device();
    if (s.groups > 1 && ((s.input_channels / s.groups) % 4 != 0 || (s.output_channels / s.groups) % 4 != 0))
      fail<ArgumentError>("MPSCNNConvolutionTranspose on metal: MPS groups hold multiples of 4 channels; given ",
                          s.input_channels, " input and ", s.output_channels, " output channels in ", s.groups,
                          " groups");
    // MPS takes the weights as mpsx gives them: OHWI, [out][height][width][in / groups].
    descriptor_ = convolution_descriptor(filter());
    const bool half = s.accumulator_precision == AccumulatorPrecision::Half;
    MPSXConvolutionDataSource* zeros = zero_weights_data_source(filter(), half);
    transpose_ = [[MPSCNNConvolutionTranspose alloc] initWithDevice:device weights:zeros];
    transpose_.accumulatorPrecisionOption =
        half ? MPSNNConvolutionAccumulatorPrecisionOptionHalf : MPSNNConvolutionAccumulatorPrecisionOptionFloat;
    if (!s.gradient) return;
    gradient_ = [[MPSCNNConvolutionTransposeGradient alloc] initWithDevice:device weights:zeros];
    // backward_weights has no data gradient to write; MPS still makes one.
    gradient_.destinationImageAllocator = [MPSTemporaryImage defaultAllocator];
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    MetalContext& metal = context_of(context);
    [transpose_ reloadWeightsAndBiasesWithCommandBuffer:metal.command_buffer()
                                                  state:weights_and_biases_state(metal.backend(), weights, biases,
                                                                                 descriptor_)];
    place(source, destination);
    encode_batch(transpose_, metal.command_buffer(), source, destination);
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& source,
                     const void* weights, const ImageRegion& source_gradient) const override {
    MetalContext& metal = context_of(context);
    [gradient_ reloadWeightsAndBiasesWithCommandBuffer:metal.command_buffer()
                                                 state:weights_and_biases_state(metal.backend(), weights, nullptr,
                                                                                descriptor_)];
    MPSImageBatch* sources = images_of(source);
    MPSCNNConvolutionTransposeGradientStateBatch* states = gradient_states(source, sources, result_gradient);
    [gradient_ destinationImageDescriptorForSourceImages:@[ image_of(result_gradient), sources[0] ]
                                            sourceStates:@[ states[0] ]];
    gradient_.gradientOption = MPSCNNConvolutionGradientOptionGradientWithData;
    // The primaryOffset the state set is that of source pixel (0, 0): the clip
    // starts there and ends with the block. Pixels before the block are under
    // no window; their gradient, zero, is what MPS writes there.
    gradient_.clipRect = MTLRegionMake3D(0, 0, 0, static_cast<NSUInteger>(source_gradient.x + source_gradient.w),
                                         static_cast<NSUInteger>(source_gradient.y + source_gradient.h),
                                         static_cast<NSUInteger>(source_gradient.n));
    gradient_.destinationFeatureChannelOffset = feature_channel_offset(source_gradient);
    [gradient_ encodeBatchToCommandBuffer:metal.command_buffer()
                          sourceGradients:images_of(result_gradient)
                             sourceImages:sources
                           gradientStates:states
                     destinationGradients:images_of(source_gradient)];
  }

  void backward_weights(ExecutionContext& context, const ImageRegion& source, const ImageRegion& result_gradient,
                        void* weights_gradient, void* biases_gradient) const override {
    MetalContext& metal = context_of(context);
    MPSImageBatch* sources = images_of(source);
    MPSCNNConvolutionTransposeGradientStateBatch* states = gradient_states(source, sources, result_gradient);
    gradient_.gradientOption = MPSCNNConvolutionGradientOptionGradientWithWeightsAndBias;
    gradient_.clipRect = MPSRectNoClip;
    gradient_.destinationFeatureChannelOffset = 0;
    // This encode hands the forward geometry to the gradient itself, and
    // makes temporary destinations that nothing reads.
    MPSImageBatch* data_gradients = [gradient_ encodeBatchToCommandBuffer:metal.command_buffer()
                                                          sourceGradients:images_of(result_gradient)
                                                             sourceImages:sources
                                                           gradientStates:states];
    MPSImageBatchIncrementReadCount(data_gradients, -1);
    // MPS sums over the batch into the state's buffers, OHWI like the weights.
    copy_gradients(metal, states[0], filter(), weights_gradient, biases_gradient);
  }

 private:
  ConvolutionDescriptor filter() const { return filter_of(s_, s_.input_channels, s_.output_channels); }

  // Sets the transpose to read the source block and write the destination
  // region. MPS centres the window of the destination pixel at the clip origin
  // on offset * stride + kernelOffset of the expanded source; its first tap is
  // that less half the dilated kernel.
  void place(const ImageRegion& source, const ImageRegion& destination) const {
    const int64_t extent_x = (s_.kernel_width - 1) * s_.dilation_x + 1;
    const int64_t extent_y = (s_.kernel_height - 1) * s_.dilation_y + 1;
    int64_t first_x, first_y;
    if (s_.reads_source()) {
      // With the shape's deconvolution padding, the first reached pixel's tap
      // lies extent - 1 - pad pixels before the block's first source pixel;
      // the destination starts reached pixels before that one.
      first_x = s_.stride_x * source.x + s_.pad_left - (extent_x - 1) - s_.reached_x;
      first_y = s_.stride_y * source.y + s_.pad_top - (extent_y - 1) - s_.reached_y;
    } else {
      // Windows between source pixels: those past the expanded image read the
      // same zeros (MPSImageEdgeModeZero), leaving the biases.
      MPSImage* image = image_of(source);
      first_x = s_.stride_x * static_cast<int64_t>(image.width);
      first_y = s_.stride_y * static_cast<int64_t>(image.height);
    }
    const int64_t centre_x = first_x + extent_x / 2, centre_y = first_y + extent_y / 2;
    const int64_t offset_x = floor_div(centre_x, s_.stride_x), offset_y = floor_div(centre_y, s_.stride_y);
    transpose_.offset = MPSOffset{static_cast<NSInteger>(offset_x), static_cast<NSInteger>(offset_y), 0};
    transpose_.kernelOffsetX = static_cast<NSInteger>(centre_x - offset_x * s_.stride_x);
    transpose_.kernelOffsetY = static_cast<NSInteger>(centre_y - offset_y * s_.stride_y);
    // clipRect depth: the images of a batch encode.
    transpose_.clipRect = MTLRegionMake3D(
        static_cast<NSUInteger>(destination.x), static_cast<NSUInteger>(destination.y), 0,
        static_cast<NSUInteger>(destination.w), static_cast<NSUInteger>(destination.h),
        static_cast<NSUInteger>(destination.n));
    transpose_.sourceFeatureChannelOffset = feature_channel_offset(source);
    transpose_.destinationFeatureChannelOffset = feature_channel_offset(destination);
  }

  // The gradient state of a forward pass from `block` (of `sources`) to the
  // region of `result_gradient`: the transpose records its properties in the
  // state it makes, one object for the whole batch.
  MPSCNNConvolutionTransposeGradientStateBatch* gradient_states(const ImageRegion& block, MPSImageBatch* sources,
                                                                const ImageRegion& result_gradient) const {
    // MPS gradient kernels refuse forward passes whose clipRect covers part
    // of the result: the gradient's windows would read past it.
    MPSImage* image = image_of(result_gradient);
    if (result_gradient.x != 0 || result_gradient.y != 0 ||
        result_gradient.w != static_cast<int64_t>(image.width) ||
        result_gradient.h != static_cast<int64_t>(image.height))
      fail<Error>("MPSCNNConvolutionTransposeGradient on metal: the forward pass wrote the ", result_gradient.w, "x",
                  result_gradient.h, " block at (", result_gradient.x, ", ", result_gradient.y, ") of ", image.width,
                  "x", image.height, " images; MPS gradients need it to write whole images");
    place(block, result_gradient);
    gradient_.primarySourceFeatureChannelOffset = feature_channel_offset(result_gradient);
    return [transpose_ resultStateBatchForSourceImage:sources
                                         sourceStates:nil
                                     destinationImage:images_of(result_gradient)];
  }

  ConvolutionTransposeShape s_;
  MPSCNNConvolutionDescriptor* descriptor_;
  MPSCNNConvolutionTranspose* transpose_;
  MPSCNNConvolutionTransposeGradient* gradient_ = nil;  // for gradient shapes
};

const Registered<ConvolutionTransposePrimitive, MetalConvolutionTranspose> registered("metal");

}  // namespace

}  // namespace mpsx::metal

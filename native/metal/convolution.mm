// The convolution family on metal: MPSCNNConvolution / MPSCNNFullyConnected
// and their gradients over the weights the core passes at each encode, and
// MPSXConvolutionDataSource, the MPSCNNConvolutionDataSource protocol over a
// C++ ConvolutionDataSource.
#include "convolution.h"

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mpsx/errors.h"
#include "mpsx/kernels/convolution.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

MPSDataType mps_data_type(DataType type) {
  switch (type) {
    case DataType::Float32: return MPSDataTypeFloat32;
    case DataType::Float16: return MPSDataTypeFloat16;
    case DataType::UInt8: return MPSDataTypeUInt8;
    case DataType::BFloat16: break;
  }
  fail<TypeMismatchError>("metal: MPS convolution weights are float32, float16 or uint8; given ", name_of(type));
}

}  // namespace

MPSCNNConvolutionDescriptor* convolution_descriptor(const ConvolutionDescriptor& d) {
  const int64_t in = d.input_feature_channels / d.groups, out = d.output_feature_channels / d.groups;
  // One input channel per group is MPS's depthwise convolution, whose
  // weights [out][kernel_height][kernel_width] are OHWI with I = 1.
  const int64_t r = d.sub_pixel_scale_factor;
  const bool depthwise = d.depthwise || (d.groups > 1 && in == 1 && r == 1);
  if (d.groups > 1 && !depthwise && (in % 4 || out % 4))
    fail<ArgumentError>("metal: MPS convolution groups hold multiples of 4 feature channels; given ", in, " -> ", out,
                        " per group (groups ", d.groups, ")");
  // MPSCNNSubPixelConvolutionDescriptor: "Number of feature channels in
  // reshaped output image (N/r^2) can be any value when groups = 1 but must be
  // multiple of 4 when groups > 1."
  if (r > 1 && d.groups > 1 && (d.output_feature_channels / (r * r)) % 4)
    fail<ArgumentError>("metal: MPS sub-pixel convolutions of several groups write multiples of 4 feature channels; "
                        "given ", d.output_feature_channels / (r * r), " (", d.output_feature_channels,
                        " / sub_pixel_scale_factor ", r, "^2, groups ", d.groups, ")");
  Class kind = depthwise ? [MPSCNNDepthWiseConvolutionDescriptor class]
               : r > 1   ? [MPSCNNSubPixelConvolutionDescriptor class]
                         : [MPSCNNConvolutionDescriptor class];
  MPSCNNConvolutionDescriptor* descriptor = [kind cnnConvolutionDescriptorWithKernelWidth:d.kernel_width
                                                                              kernelHeight:d.kernel_height
                                                                      inputFeatureChannels:d.input_feature_channels
                                                                     outputFeatureChannels:d.output_feature_channels];
  descriptor.strideInPixelsX = d.stride_x;
  descriptor.strideInPixelsY = d.stride_y;
  descriptor.dilationRateX = d.dilation_x;
  descriptor.dilationRateY = d.dilation_y;
  if (!depthwise) descriptor.groups = d.groups;
  if (r > 1) static_cast<MPSCNNSubPixelConvolutionDescriptor*>(descriptor).subPixelScaleFactor = r;
  if (!d.fused_neuron.is_identity()) descriptor.fusedNeuronDescriptor = neuron_descriptor(d.fused_neuron);
  if (d.batch_normalization)
    [descriptor setBatchNormalizationParametersForInferenceWithMean:d.batch_normalization_mean.data()
                                                           variance:d.batch_normalization_variance.data()
                                                              gamma:d.batch_normalization_gamma.data()
                                                               beta:d.batch_normalization_beta.data()
                                                            epsilon:d.batch_normalization_epsilon];
  return descriptor;
}

}  // namespace mpsx::metal


@implementation MPSXConvolutionDataSource {
  std::shared_ptr<mpsx::ConvolutionDataSource> _source;
  std::exception_ptr _error;
  NSUInteger _loads;
  MPSCNNConvolutionDescriptor* _descriptor;
  MPSDataType _dataType, _kernelWeightsDataType;
  MPSCNNWeightsQuantizationType _quantization;
  NSString* _label;
  mpsx::HostArray _weights, _biasTerms, _ranges, _lookupTable;
}

- (instancetype)initWithSource:(std::shared_ptr<mpsx::ConvolutionDataSource>)source {
  if ((self = [super init])) _source = std::move(source);
  return self;
}

- (std::exception_ptr)takeError {
  return std::exchange(_error, nullptr);
}

- (void)keep:(std::exception_ptr)error {
  if (!_error) _error = error;
}

- (BOOL)load {
  bool loaded = false;
  try {
    loaded = _source->load();
    if (loaded && _loads == 0) [self take];
  } catch (...) {
    [self keep:std::current_exception()];
    [self drop];
    if (loaded) [self purgeSource];
    return NO;
  }
  if (loaded) ++_loads;
  return loaded;
}

- (void)purge {
  if (_loads == 0) return;  // nothing loaded: a failed load is not balanced
  if (--_loads == 0) [self drop];
  [self purgeSource];
}

// Throws for values MPS would misread.
- (void)take {
  const mpsx::ConvolutionDescriptor d = _source->descriptor();
  d.validate();
  const mpsx::DataType type = _source->data_type();
  mpsx::HostArray weights = _source->weights(), biases = _source->bias_terms();
  if (weights.count != d.weight_count() || weights.type != type)
    mpsx::fail<mpsx::ShapeError>("MPSCNNConvolutionDataSource: the weights hold ", weights.count, " ",
                                 mpsx::name_of(weights.type), " values; the ", mpsx::name_of(type), " ",
                                 d.output_feature_channels, "x", d.kernel_height, "x", d.kernel_width, "x",
                                 d.input_feature_channels / d.groups, " (OHWI) filter needs ", d.weight_count());
  const size_t out = static_cast<size_t>(d.output_feature_channels);
  if (!biases.none() && (biases.count != out || biases.type != mpsx::DataType::Float32))
    mpsx::fail<mpsx::ShapeError>("MPSCNNConvolutionDataSource: the bias terms hold ", biases.count, " ",
                                 mpsx::name_of(biases.type), " values; expected ", out, " float32");
  // WeightsQuantization has MPSCNNWeightsQuantizationType's values.
  _quantization = static_cast<MPSCNNWeightsQuantizationType>(_source->weights_quantization_type());
  if (type == mpsx::DataType::UInt8) {
    switch (_quantization) {
      case MPSCNNWeightsQuantizationTypeLookupTable:
        _lookupTable = _source->lookup_table_for_uint8_kernel();
        if (_lookupTable.count != 256 || _lookupTable.type != mpsx::DataType::Float32)
          mpsx::fail<mpsx::ShapeError>("MPSCNNConvolutionDataSource: lookup_table_for_uint8_kernel() must give 256 "
                                       "float32 values; given ", _lookupTable.count, " ",
                                       mpsx::name_of(_lookupTable.type));
        break;
      case MPSCNNWeightsQuantizationTypeLinear:
        _ranges = _source->ranges_for_uint8_kernel();
        if (_ranges.count != 2 * out || _ranges.type != mpsx::DataType::Float32)
          mpsx::fail<mpsx::ShapeError>("MPSCNNConvolutionDataSource: ranges_for_uint8_kernel() must give ", out,
                                       " (min, max) float32 pairs; given ", _ranges.count, " ",
                                       mpsx::name_of(_ranges.type), " values");
        break;
      case MPSCNNWeightsQuantizationTypeNone:
        mpsx::fail<mpsx::ArgumentError>("MPSCNNConvolutionDataSource: uint8 weights need weights_quantization_type "
                                        "\"linear\" or \"lookup_table\"");
    }
  }
  _descriptor = mpsx::metal::convolution_descriptor(d);
  _dataType = mpsx::metal::mps_data_type(type);
  // MPS computes uint8 and float16 weights in float16 only.
  _kernelWeightsDataType =
      type == mpsx::DataType::Float32 && _source->kernel_weights_data_type() == mpsx::DataType::Float32
          ? MPSDataTypeFloat32
          : MPSDataTypeFloat16;
  _label = [NSString stringWithUTF8String:_source->label().c_str()];
  _weights = std::move(weights);
  _biasTerms = std::move(biases);
}

- (void)drop {
  _weights = {};
  _biasTerms = {};
  _ranges = {};
  _lookupTable = {};
}

- (void)purgeSource {
  try {
    _source->purge();
  } catch (...) {
    [self keep:std::current_exception()];
  }
}

- (MPSDataType)dataType {
  return _dataType;
}

- (MPSCNNConvolutionDescriptor*)descriptor {
  return _descriptor;
}

- (void*)weights {
  return const_cast<void*>(_weights.data);
}

- (float*)biasTerms {
  return !_biasTerms.none() ? static_cast<float*>(const_cast<void*>(_biasTerms.data)) : nullptr;
}

- (NSString*)label {
  return _label;
}

- (MPSDataType)kernelWeightsDataType {
  return _kernelWeightsDataType;
}

- (MPSCNNWeightsQuantizationType)weightsQuantizationType {
  return _quantization;
}

- (vector_float2*)rangesForUInt8Kernel {
  return static_cast<vector_float2*>(const_cast<void*>(_ranges.data));
}

- (float*)lookupTableForUInt8Kernel {
  return static_cast<float*>(const_cast<void*>(_lookupTable.data));
}

- (MPSCNNConvolutionWeightsLayout)weightsLayout {
  return MPSCNNConvolutionWeightsLayoutOHWI;
}

// A forwarder of its own, loaded and purged apart, over the same source.
- (id)copyWithZone:(NSZone*)zone {
  return [[MPSXConvolutionDataSource allocWithZone:zone] initWithSource:_source];
}

@end

namespace mpsx::metal {
namespace {

// A window on the whole source image with one result pixel: MPSCNNFullyConnected
// ("kernelWidth == source.width", strides and groups 1). Metal images are laid
// out as nchw_layout, so the source strides give the image's extents.
bool fully_connected(const ConvolutionShape& s) {
  return s.groups == 1 && s.stride_x == 1 && s.stride_y == 1 && s.dilation_x == 1 && s.dilation_y == 1 &&
         s.height == 1 && s.width == 1 && s.kernel_width == s.source_width && s.kernel_height == s.source_height &&
         !s.pad_top && !s.pad_left && !s.pad_bottom && !s.pad_right && s.source_stride.h == s.source_width &&
         s.source_stride.c == s.source_height * s.source_width;
}

// Hands temporary images back to MPS once no kernel will read them.
void release_temporary(NSArray<MPSTemporaryImage*>* images) {
  for (MPSTemporaryImage* image in images)
    if (image.readCount) image.readCount = 0;
}

// Images and the feature channel their region starts at.
struct Images {
  MPSImageBatch* images;
  NSUInteger channel;
};

// forward: MPSCNNConvolution (MPSCNNFullyConnected for a window on the whole
// image), with MPS's subPixelScaleFactor and fused neuron for a sub-pixel
// convolution, whose clipRect is the destination region; backward_data and backward_weights: MPSCNNConvolutionGradient
// (MPSCNNFullyConnectedGradient) with gradientOption GradientWithData and
// GradientWithWeightsAndBias. Each method sets the kernels' properties and
// encodes under a lock, as one primitive serves every encoding thread.
class MetalConvolution final : public ConvolutionPrimitive {
 public:
  MetalConvolution(const MetalBackend& backend, const ConvolutionShape& s)
      : shape_(s),
        extent_x_((s.kernel_width - 1) * s.dilation_x + 1),
        extent_y_((s.kernel_height - 1) * s.dilation_y + 1) {
    id<MTLDevice> device = backend.device();
    ConvolutionDescriptor filter = filter_of(s, s.input_channels, s.output_channels);
    filter.sub_pixel_scale_factor = s.sub_pixel_scale_factor;
    if (s.sub_pixel_neuron) filter.fused_neuron = *s.sub_pixel_neuron;
    descriptor_ = convolution_descriptor(filter);
    // The forward kernel and the gradient share the data source, as MPS asks.
    MPSXConvolutionDataSource* source =
        zero_weights_data_source(filter, s.accumulator_precision == AccumulatorPrecision::Half);
    const bool whole = fully_connected(s) && s.sub_pixel_scale_factor == 1;
    convolution_ = whole ? [[MPSCNNFullyConnected alloc] initWithDevice:device weights:source]
                         : [[MPSCNNConvolution alloc] initWithDevice:device weights:source];
    check_made(convolution_, source, "MPSCNNConvolution");
    convolution_.edgeMode = MPSImageEdgeModeZero;  // the padding
    convolution_.accumulatorPrecisionOption = s.accumulator_precision == AccumulatorPrecision::Half
                                                  ? MPSNNConvolutionAccumulatorPrecisionOptionHalf
                                                  : MPSNNConvolutionAccumulatorPrecisionOptionFloat;
    if (!s.gradient) return;
    gradient_ = whole ? [[MPSCNNFullyConnectedGradient alloc] initWithDevice:device weights:source]
                      : [[MPSCNNConvolutionGradient alloc] initWithDevice:device weights:source];
    check_made(gradient_, source, "MPSCNNConvolutionGradient");
    // Set here, not from a forward encode's state: the gradient kernel
    // copies those only where it makes its own destination.
    gradient_.primaryEdgeMode = MPSImageEdgeModeZero;
    gradient_.secondaryEdgeMode = MPSImageEdgeModeZero;
    gradient_.primaryStrideInPixelsX = s.stride_x;
    gradient_.primaryStrideInPixelsY = s.stride_y;
    gradient_.secondaryStrideInPixelsX = s.stride_x;
    gradient_.secondaryStrideInPixelsY = s.stride_y;
    // The result gradient's images hold just the forward result block
    // (result_gradient_images): primaryOffset 0. On that gradient upsampled
    // with zeros, MPS centres the rotated window of source gradient pixel
    // clipRect.origin + t on kernelOffset + t; for the forward windows that
    // start `pad` before the block, that is pad + extent / 2 + 1 - extent
    // (the header's -offset + (~extent & 1) where the block starts at 0).
    gradient_.primaryOffset = MPSOffset{0, 0, 0};
    gradient_.kernelOffsetX = s.pad_left + extent_x_ / 2 + 1 - extent_x_;
    gradient_.kernelOffsetY = s.pad_top + extent_y_ / 2 + 1 - extent_y_;
    slice_ = [[MPSCNNNeuron alloc] initWithDevice:device
                                 neuronDescriptor:neuron_descriptor(NeuronDescriptor{})];
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const void* weights, const void* biases,
               const ImageRegion& destination) const override {
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    std::lock_guard<std::mutex> lock(mutex_);
    [convolution_ reloadWeightsAndBiasesWithCommandBuffer:command_buffer
                                                    state:weights_and_biases_state(metal.backend(), weights, biases,
                                                                                   descriptor_)];
    // offset: where the window's centre lands for clipRect.origin.
    convolution_.offset = MPSOffset{window_x(source) + extent_x_ / 2, window_y(source) + extent_y_ / 2, 0};
    convolution_.clipRect = clip_rect_of(destination);
    convolution_.sourceFeatureChannelOffset = feature_channel_offset(source);
    convolution_.destinationFeatureChannelOffset = feature_channel_offset(destination);
    encode_batch(convolution_, command_buffer, source, destination);
  }

  void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& source,
                     const void* weights, const ImageRegion& source_gradient) const override {
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    std::lock_guard<std::mutex> lock(mutex_);
    [gradient_ reloadWeightsAndBiasesWithCommandBuffer:command_buffer
                                                 state:weights_and_biases_state(metal.backend(), weights, nullptr,
                                                                                descriptor_)];
    encode_gradient(command_buffer, MPSCNNConvolutionGradientOptionGradientWithData,
                    result_gradient_images(command_buffer, result_gradient),
                    Images{images_of(source), feature_channel_offset(source)}, source_gradient,
                    Images{images_of(source_gradient), feature_channel_offset(source_gradient)});
  }

  void backward_weights(ExecutionContext& context, const ImageRegion& source, const ImageRegion& result_gradient,
                        void* weights_gradient, void* biases_gradient) const override {
    if (!weights_gradient && !biases_gradient) return;
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    std::lock_guard<std::mutex> lock(mutex_);
    // GradientWithWeightsAndBias writes no source gradient, but the encode
    // takes a destination: an unwritten temporary image of the source's extent.
    MPSImage* like = image_of(source);
    NSArray<MPSTemporaryImage*>* stand_in =
        temporary_images(command_buffer, source.data_type, like.width, like.height, shape_.input_channels, source.n);
    MPSCNNConvolutionGradientState* state =
        encode_gradient(command_buffer, MPSCNNConvolutionGradientOptionGradientWithWeightsAndBias,
                        result_gradient_images(command_buffer, result_gradient),
                        Images{images_of(source), feature_channel_offset(source)}, source, Images{stand_in, 0});
    release_temporary(stand_in);
    copy_gradients(metal, state, filter_of(shape_, shape_.input_channels, shape_.output_channels), weights_gradient,
                   biases_gradient);
  }

 private:
  static void check_made(id kernel, MPSXConvolutionDataSource* source, const char* name) {
    if (std::exception_ptr error = [source takeError]) std::rethrow_exception(error);
    if (!kernel) fail<Error>("metal: MPS could not make the ", name);
  }

  // Where the forward windows start in the source image: the block's origin
  // less its padding.
  int64_t window_x(const ImageRegion& block) const { return block.x - shape_.pad_left; }
  int64_t window_y(const ImageRegion& block) const { return block.y - shape_.pad_top; }

  // The result gradient in images of its own extent: the gradient kernel sums
  // the weight gradient over its whole primary image and reads the data
  // gradient's inputs past the forward block's edges, where only zeros may
  // be. A region short of its images is sliced out into temporary images
  // first, as MPSCNNConvolutionGradient's header advises.
  Images result_gradient_images(id<MTLCommandBuffer> command_buffer, const ImageRegion& region) const {
    MPSImage* image = image_of(region);
    if (region.x == 0 && region.y == 0 && static_cast<NSUInteger>(region.w) == image.width &&
        static_cast<NSUInteger>(region.h) == image.height)
      return Images{images_of(region), feature_channel_offset(region)};
    NSArray<MPSTemporaryImage*>* slices =
        temporary_images(command_buffer, region.data_type, region.w, region.h, region.c, region.n);
    slice_.offset = origin_of(region);
    slice_.sourceFeatureChannelOffset = feature_channel_offset(region);
    [slice_ encodeBatchToCommandBuffer:command_buffer sourceImages:images_of(region) destinationImages:slices];
    return Images{slices, 0};
  }

  // `block` is the forward source block, the source gradient's clipRect.
  MPSCNNConvolutionGradientState* encode_gradient(id<MTLCommandBuffer> command_buffer,
                                                  MPSCNNConvolutionGradientOption option, const Images& result_gradient,
                                                  const Images& source, const ImageRegion& block,
                                                  const Images& source_gradient) const {
    // The state that receives the weight gradients. MPS uses one state for a
    // whole batch and sums the batch's gradients in it.
    MPSCNNConvolutionGradientStateBatch* states = [convolution_ resultStateBatchForSourceImage:source.images
                                                                                  sourceStates:nil
                                                                              destinationImage:result_gradient.images];
    gradient_.gradientOption = option;
    gradient_.primarySourceFeatureChannelOffset = result_gradient.channel;
    gradient_.secondaryOffset = MPSOffset{window_x(block), window_y(block), 0};
    gradient_.secondarySourceFeatureChannelOffset = source.channel;
    gradient_.clipRect = clip_rect_of(block);
    gradient_.destinationFeatureChannelOffset = source_gradient.channel;
    [gradient_ encodeBatchToCommandBuffer:command_buffer
                          sourceGradients:result_gradient.images
                             sourceImages:source.images
                           gradientStates:states
                     destinationGradients:source_gradient.images];
    return states.firstObject;
  }

  const ConvolutionShape shape_;
  const int64_t extent_x_, extent_y_;  // the dilated window
  MPSCNNConvolutionDescriptor* descriptor_;
  MPSCNNConvolution* convolution_;
  MPSCNNConvolutionGradient* gradient_ = nil;  // for shape_.gradient
  MPSCNNNeuron* slice_ = nil;                  // identity, for result_gradient_images
  mutable std::mutex mutex_;
};

const Registered<ConvolutionPrimitive, MetalConvolution> registered("metal");

}  // namespace

}  // namespace mpsx::metal

namespace mpsx::metal {
namespace {

// The primitives' own data source: a filter with zero weights and biases,
// which exist between load and purge only.
class ZeroWeights final : public ConvolutionDataSource {
 public:
  ZeroWeights(const ConvolutionDescriptor& filter, bool half) : filter_(filter), half_(half) {}
  bool load() override { return true; }
  void purge() override {}
  ConvolutionDescriptor descriptor() override { return filter_; }
  DataType data_type() override { return DataType::Float32; }
  HostArray weights() override { return zeros(filter_.weight_count()); }
  HostArray bias_terms() override { return zeros(static_cast<size_t>(filter_.output_feature_channels)); }
  std::string label() override { return {}; }
  DataType kernel_weights_data_type() override { return half_ ? DataType::Float16 : DataType::Float32; }

 private:
  static HostArray zeros(size_t count) {
    auto values = std::make_shared<std::vector<float>>(count);
    return HostArray{values->data(), count, DataType::Float32, values, {}};
  }

  ConvolutionDescriptor filter_;
  bool half_;
};

}  // namespace

ConvolutionDescriptor filter_of(const ConvolutionWindow& w, int64_t input_channels, int64_t output_channels) {
  ConvolutionDescriptor d;
  d.kernel_width = w.kernel_width;
  d.kernel_height = w.kernel_height;
  d.input_feature_channels = input_channels;
  d.output_feature_channels = output_channels;
  d.stride_x = w.stride_x;
  d.stride_y = w.stride_y;
  d.dilation_x = w.dilation_x;
  d.dilation_y = w.dilation_y;
  d.groups = w.groups;
  return d;
}

MPSXConvolutionDataSource* zero_weights_data_source(const ConvolutionDescriptor& filter, bool half) {
  return [[MPSXConvolutionDataSource alloc] initWithSource:std::make_shared<ZeroWeights>(filter, half)];
}

MPSCNNConvolutionWeightsAndBiasesState* weights_and_biases_state(MetalBackend& backend, const void* weights,
                                                                 const void* biases,
                                                                 MPSCNNConvolutionDescriptor* descriptor) {
  const BufferAddress w = backend.address_of(weights);
  const BufferAddress b =
      biases ? backend.address_of(biases)
             : BufferAddress{backend.zeros(descriptor.outputFeatureChannels * sizeof(float)), 0};
  return [[MPSCNNConvolutionWeightsAndBiasesState alloc] initWithWeights:w.buffer
                                                           weightsOffset:w.offset
                                                                  biases:b.buffer
                                                            biasesOffset:b.offset
                                                cnnConvolutionDescriptor:descriptor];
}

void copy_gradients(MetalContext& context, MPSCNNConvolutionGradientState* state, const ConvolutionDescriptor& filter,
                    void* weights_gradient, void* biases_gradient) {
  // Addresses first: an encoder must end even where one is not found.
  const BufferAddress weights = weights_gradient ? context.backend().address_of(weights_gradient) : BufferAddress{};
  const BufferAddress biases = biases_gradient ? context.backend().address_of(biases_gradient) : BufferAddress{};
  id<MTLBlitCommandEncoder> blit = [context.command_buffer() blitCommandEncoder];
  if (weights.buffer)
    [blit copyFromBuffer:state.gradientForWeights
            sourceOffset:0
                toBuffer:weights.buffer
       destinationOffset:weights.offset
                    size:filter.weight_count() * sizeof(float)];
  if (biases.buffer)
    [blit copyFromBuffer:state.gradientForBiases
            sourceOffset:0
                toBuffer:biases.buffer
       destinationOffset:biases.offset
                    size:static_cast<NSUInteger>(filter.output_feature_channels) * sizeof(float)];
  [blit endEncoding];
}

}  // namespace mpsx::metal

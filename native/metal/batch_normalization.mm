// Batch normalization on metal: MPSCNNBatchNormalization, its statistics and
// gradient kernels, and MPSXBatchNormalizationDataSource, the
// <MPSCNNBatchNormalizationDataSource> that forwards to an mpsx data source.
//
// MPS keeps a batch's statistics, the gamma and beta its forward pass used
// and their gradients in an MPSCNNBatchNormalizationState it allocates;
// mpsx keeps them in its own state's buffers and hands the primitive their
// addresses. So each encode that needs an MPS state makes one, runs MPS's
// statistics kernel on it (the precondition of every MPS kernel that takes
// one), and copies the given values in and the results out with blits.
#include "mpsx/kernels/batch_normalization.h"

#include <cfloat>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace {

// Exceptions must not unwind through MPS's frames: a forwarded call keeps the
// first one and answers `otherwise`; rethrowError throws it once MPS returns.
template <class F, class R>
R forwarded(std::exception_ptr& error, F&& call, R otherwise) {
  try {
    return call();
  } catch (...) {
    if (!error) error = std::current_exception();
    return otherwise;
  }
}

template <class F>
void forwarded(std::exception_ptr& error, F&& call) {
  try {
    call();
  } catch (...) {
    if (!error) error = std::current_exception();
  }
}

// Copies what the data source gave into `held` (MPS reads it until purge);
// an array not given (None) becomes mpsx's default.
float* hold(std::vector<float>& held, const mpsx::HostArray& given, int64_t channels, float otherwise,
            const char* name) {
  if (!given.data && !given.owner) {
    held.assign(static_cast<size_t>(channels), otherwise);
  } else {
    if (given.count != static_cast<size_t>(channels))
      mpsx::fail<mpsx::ShapeError>("MPSCNNBatchNormalizationDataSource: the data source's ", name, " holds ",
                                   given.count, " values; expected ", channels, " (number_of_feature_channels)");
    const float* values = static_cast<const float*>(given.data);
    held.assign(values, values + given.count);
  }
  return held.data();
}

}  // namespace

// An <MPSCNNBatchNormalizationDataSource> over an mpsx data source, native or
// Python. MPS never sees NULL arrays: None becomes gamma and variance ones,
// beta and mean zeros, as in mpsx. The optional update methods take MPS
// states, which mpsx data sources (their update methods take mpsx states)
// cannot read, and the coding methods have nothing to archive, so neither is
// implemented.
@interface MPSXBatchNormalizationDataSource : NSObject <MPSCNNBatchNormalizationDataSource>
- (instancetype)initWithSource:(std::shared_ptr<mpsx::BatchNormalizationDataSource>)source NS_DESIGNATED_INITIALIZER;
- (instancetype)init NS_UNAVAILABLE;
// Throws the first exception a forwarded call caught.
- (void)rethrowError;
@end

@implementation MPSXBatchNormalizationDataSource {
  std::shared_ptr<mpsx::BatchNormalizationDataSource> _source;
  std::vector<float> _gamma, _beta, _mean, _variance;
  std::exception_ptr _error;
}

- (instancetype)initWithSource:(std::shared_ptr<mpsx::BatchNormalizationDataSource>)source {
  if ((self = [super init])) _source = std::move(source);
  return self;
}

- (void)rethrowError {
  if (std::exception_ptr error = std::exchange(_error, nullptr)) std::rethrow_exception(error);
}

- (NSUInteger)numberOfFeatureChannels {
  return forwarded(_error, [&] { return static_cast<NSUInteger>(_source->number_of_feature_channels()); },
                   NSUInteger{0});
}

- (float*)gamma {
  return forwarded(
      _error, [&] { return hold(_gamma, _source->gamma(), _source->number_of_feature_channels(), 1.0f, "gamma"); },
      static_cast<float*>(nullptr));
}

- (float*)beta {
  return forwarded(
      _error, [&] { return hold(_beta, _source->beta(), _source->number_of_feature_channels(), 0.0f, "beta"); },
      static_cast<float*>(nullptr));
}

- (float*)mean {
  return forwarded(
      _error, [&] { return hold(_mean, _source->mean(), _source->number_of_feature_channels(), 0.0f, "mean"); },
      static_cast<float*>(nullptr));
}

- (float*)variance {
  return forwarded(_error,
                   [&] {
                     return hold(_variance, _source->variance(), _source->number_of_feature_channels(), 1.0f,
                                 "variance");
                   },
                   static_cast<float*>(nullptr));
}

- (BOOL)load {
  return forwarded(_error, [&] { return _source->load() ? YES : NO; }, NO);
}

- (void)purge {
  for (std::vector<float>* held : {&_gamma, &_beta, &_mean, &_variance}) std::vector<float>().swap(*held);
  forwarded(_error, [&] { _source->purge(); });
}

- (NSString*)label {
  return forwarded(_error, [&] { return [NSString stringWithUTF8String:_source->label().c_str()]; },
                   static_cast<NSString*>(nil));
}

- (float)epsilon {
  return forwarded(_error, [&] { return _source->epsilon(); }, FLT_MIN);
}

// A copy forwards to the same mpsx data source: it is one object to mpsx.
- (id)copyWithZone:(NSZone*)zone {
  return [[MPSXBatchNormalizationDataSource allocWithZone:zone] initWithSource:_source];
}

- (instancetype)copyWithZone:(NSZone*)zone device:(id<MTLDevice>)device {
  return [self copyWithZone:zone];  // host arrays serve any device
}

@end

namespace mpsx::metal {
namespace {

// The data source of the primitive's own MPS kernels: neutral values, since
// every encode brings gamma, beta, mean, variance and epsilon of its own.
class NeutralDataSource final : public BatchNormalizationDataSource {
 public:
  explicit NeutralDataSource(int64_t channels) : channels_(channels) {}
  bool load() override { return true; }
  void purge() override {}
  int64_t number_of_feature_channels() override { return channels_; }
  HostArray gamma() override { return {}; }
  HostArray beta() override { return {}; }
  HostArray mean() override { return {}; }
  HostArray variance() override { return {}; }
  std::string label() override { return "mpsx batch normalization"; }

 private:
  int64_t channels_;
};

// The clipRect of kernels without a destination image: the region's extent
// from (0, 0).
MTLRegion extent_of(const ImageRegion& region) {
  return MTLRegionMake3D(0, 0, 0, static_cast<NSUInteger>(region.w), static_cast<NSUInteger>(region.h), 1);
}

NSUInteger bytes_of(int64_t channels) { return static_cast<NSUInteger>(channels) * sizeof(float); }

BufferAddress address(MetalContext& metal, const float* values) { return metal.backend().address_of(values); }

// One of the MPS state's buffers: MPS's accessors may answer nil.
BufferAddress in_state(id<MTLBuffer> buffer, const char* name) {
  if (!buffer) fail<Error>("metal: MPS gave the MPSCNNBatchNormalizationState no ", name, " buffer");
  return {buffer, 0};
}

// MPS's normalization states hold whole MTLBuffers.
id<MTLBuffer> whole_buffer(MetalContext& metal, const float* values, const char* name) {
  const BufferAddress a = address(metal, values);
  if (a.offset != 0)
    fail<Error>("metal: MPSCNNBatchNormalization reloads ", name, " from a whole MTLBuffer; the ", name,
                " array starts ", a.offset, " bytes into one");
  return a.buffer;
}

// `channels` float32 from `a`, as the one-row matrix MPS's matrix kernels take.
MPSMatrix* row(const BufferAddress& a, int64_t channels) {
  MPSMatrixDescriptor* descriptor = [MPSMatrixDescriptor matrixDescriptorWithRows:1
                                                                          columns:static_cast<NSUInteger>(channels)
                                                                         rowBytes:bytes_of(channels)
                                                                         dataType:MPSDataTypeFloat32];
  return [[MPSMatrix alloc] initWithBuffer:a.buffer offset:a.offset descriptor:descriptor];
}

struct Copy {
  BufferAddress from, to;
};

void copy(id<MTLCommandBuffer> command_buffer, std::initializer_list<Copy> copies, NSUInteger bytes) {
  id<MTLBlitCommandEncoder> blit = [command_buffer blitCommandEncoder];
  for (const Copy& c : copies)
    [blit copyFromBuffer:c.from.buffer sourceOffset:c.from.offset toBuffer:c.to.buffer destinationOffset:c.to.offset
                    size:bytes];
  [blit endEncoding];
}

// What MPS's gradient kernels read as their primary image.
struct Gradients {
  MPSImageBatch* images;
  MPSOffset offset;
  NSUInteger channel;
};

Gradients gradients_of(const ImageRegion& region) {
  return {images_of(region), origin_of(region), feature_channel_offset(region)};
}

void set_sources(MPSCNNGradientKernel* kernel, const Gradients& dy, const ImageRegion& x) {
  kernel.primaryOffset = dy.offset;
  kernel.primarySourceFeatureChannelOffset = dy.channel;
  kernel.secondaryOffset = origin_of(x);
  kernel.secondarySourceFeatureChannelOffset = feature_channel_offset(x);
}

// The kernels that have a channel count.
struct Kernels {
  MPSCNNBatchNormalization* batch_normalization;
  MPSMatrixSum* running_statistics;  // sum of scale[i] * matrix[i] over (running, batch)
};

class MetalBatchNormalization final : public BatchNormalizationPrimitive {
 public:
  MetalBatchNormalization(id<MTLDevice> device, const BatchNormalizationDescriptor& d)
      : device_(device),
        fused_neuron_(d.fused_neuron.is_identity() ? nil : neuron_descriptor(d.fused_neuron)),
        statistics_([[MPSCNNBatchNormalizationStatistics alloc] initWithDevice:device]),
        statistics_gradient_([[MPSCNNBatchNormalizationStatisticsGradient alloc] initWithDevice:device
                                                                          fusedNeuronDescriptor:fused_neuron_]),
        gradient_([[MPSCNNBatchNormalizationGradient alloc] initWithDevice:device fusedNeuronDescriptor:fused_neuron_]),
        zero_([[MPSCNNNeuron alloc]
              initWithDevice:device
            neuronDescriptor:[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:MPSCNNNeuronTypeLinear a:0 b:0]]),
        scale_([[MPSMatrixNeuron alloc] initWithDevice:device]) {}

  void statistics(ExecutionContext& context, const ImageRegion& source, float* mean,
                  float* variance) const override {
    if (source.element_count() == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    MPSCNNBatchNormalizationState* state = batch_statistics(metal, source);
    copy(metal.command_buffer(),
         {{in_state([state mean], "mean"), address(metal, mean)},
          {in_state([state variance], "variance"), address(metal, variance)}},
         bytes_of(source.c));
  }

  void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                 const float* gamma, const float* beta, const float* mean, const float* variance, float epsilon,
                 float* kept_gamma, float* kept_beta) const override {
    if (source.element_count() == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    MPSCNNBatchNormalization* kernel = kernels_for(source.c).batch_normalization;
    // Without a state MPS normalizes with the kernel's own four arrays:
    // reload them from the given ones, in command buffer order.
    [kernel reloadGammaAndBetaWithCommandBuffer:command_buffer
                              gammaAndBetaState:[[MPSCNNNormalizationGammaAndBetaState alloc]
                                                    initWithGamma:whole_buffer(metal, gamma, "gamma")
                                                             beta:whole_buffer(metal, beta, "beta")]];
    [kernel reloadMeanAndVarianceWithCommandBuffer:command_buffer
                              meanAndVarianceState:[[MPSCNNNormalizationMeanAndVarianceState alloc]
                                                       initWithMean:whole_buffer(metal, mean, "mean")
                                                           variance:whole_buffer(metal, variance, "variance")]];
    kernel.epsilon = epsilon;
    kernel.offset = origin_of(source);
    kernel.clipRect = clip_rect_of(destination);
    kernel.sourceFeatureChannelOffset = feature_channel_offset(source);
    kernel.destinationFeatureChannelOffset = feature_channel_offset(destination);
    [kernel encodeBatchToCommandBuffer:command_buffer
                          sourceImages:images_of(source)
                     destinationImages:images_of(destination)];
    if (kept_gamma)
      copy(command_buffer,
           {{address(metal, gamma), address(metal, kept_gamma)}, {address(metal, beta), address(metal, kept_beta)}},
           bytes_of(source.c));
  }

  void statistics_gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                           const float* gamma, const float* beta, const float* mean, const float* variance,
                           float epsilon, float* gradient_for_gamma, float* gradient_for_beta) const override {
    if (source.element_count() == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    MPSCNNBatchNormalizationState* state = training_state(metal, source, gamma, beta, mean, variance, epsilon);
    encode_statistics_gradient(metal.command_buffer(), gradients_of(source_gradient), source, state);
    copy(metal.command_buffer(),
         {{in_state([state gradientForGamma], "gradientForGamma"), address(metal, gradient_for_gamma)},
          {in_state([state gradientForBeta], "gradientForBeta"), address(metal, gradient_for_beta)}},
         bytes_of(source.c));
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, const float* gamma, const float* beta, const float* mean,
                const float* variance, float epsilon, const float* gradient_for_gamma, const float* gradient_for_beta,
                int64_t count) const override {
    if (source.element_count() == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    MPSCNNBatchNormalizationState* state = training_state(metal, source, gamma, beta, mean, variance, epsilon);
    // Core signals "no source gradient" (dz = 0) with a default region, which
    // names no storage; MPS reads gradients only from images.
    const Gradients dy = source_gradient.storage ? gradients_of(source_gradient) : zeros_like(command_buffer, source);
    // MPS's gradient wants a state its statistics gradient has run with; then
    // the given sums replace the ones it found. MPS divides them by the
    // pixels it normalizes, the contract by `count`: scale them by the ratio.
    encode_statistics_gradient(command_buffer, dy, source, state);
    scale_.alpha = static_cast<double>(source.n * source.h * source.w) / static_cast<double>(count);
    [scale_ encodeToCommandBuffer:command_buffer
                      inputMatrix:row(address(metal, gradient_for_gamma), source.c)
                       biasVector:nil
                     resultMatrix:row(in_state([state gradientForGamma], "gradientForGamma"), source.c)];
    [scale_ encodeToCommandBuffer:command_buffer
                      inputMatrix:row(address(metal, gradient_for_beta), source.c)
                       biasVector:nil
                     resultMatrix:row(in_state([state gradientForBeta], "gradientForBeta"), source.c)];
    set_sources(gradient_, dy, source);
    gradient_.clipRect = clip_rect_of(destination_gradient);
    gradient_.destinationFeatureChannelOffset = feature_channel_offset(destination_gradient);
    [gradient_ encodeBatchToCommandBuffer:command_buffer
                          sourceGradients:dy.images
                             sourceImages:images_of(source)
                  batchNormalizationState:state
                     destinationGradients:images_of(destination_gradient)];
  }

  // MPS has no running-statistics update (its optimizers train gamma and
  // beta only; MPS leaves mean and variance to the data source's
  // updateMeanAndVariance methods): MPSMatrixSum computes the blend.
  void update_running_statistics(ExecutionContext& context, int64_t channels, const float* mean,
                                 const float* variance, const float* batch_mean, const float* batch_variance,
                                 float momentum, float bessel, float* result_mean,
                                 float* result_variance) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    MPSMatrixSum* sum = kernels_for(channels).running_statistics;
    // The mean's scale factors, then the variance's. MPS reads them from a
    // buffer, so each encode has its own.
    const float scales[4] = {1.0f - momentum, momentum, 1.0f - momentum, momentum * bessel};
    id<MTLBuffer> buffer = [device_ newBufferWithBytes:scales
                                                length:sizeof(scales)
                                               options:MTLResourceStorageModeShared];
    if (!buffer) fail<OutOfMemoryError>("out of memory: metal could not allocate ", sizeof(scales), " bytes");
    MPSVectorDescriptor* four = [MPSVectorDescriptor vectorDescriptorWithLength:4 dataType:MPSDataTypeFloat32];
    MPSVector* scale = [[MPSVector alloc] initWithBuffer:buffer descriptor:four];
    auto matrix = [&](const float* values) { return row(address(metal, values), channels); };
    [sum encodeToCommandBuffer:command_buffer
                sourceMatrices:@[ matrix(mean), matrix(batch_mean) ]
                  resultMatrix:matrix(result_mean)
                   scaleVector:scale
                  offsetVector:nil
                    biasVector:nil
                    startIndex:0];
    [sum encodeToCommandBuffer:command_buffer
                sourceMatrices:@[ matrix(variance), matrix(batch_variance) ]
                  resultMatrix:matrix(result_variance)
                   scaleVector:scale
                  offsetVector:nil
                    biasVector:nil
                    startIndex:2];
  }

 private:
  // MPS kernels have a channel count, the descriptor none: one set per
  // count, built on its first use.
  const Kernels& kernels_for(int64_t channels) const {
    auto it = kernels_.find(channels);
    if (it != kernels_.end()) return it->second;
    MPSXBatchNormalizationDataSource* source =
        [[MPSXBatchNormalizationDataSource alloc] initWithSource:std::make_shared<NeutralDataSource>(channels)];
    MPSCNNBatchNormalization* batch_normalization = [[MPSCNNBatchNormalization alloc] initWithDevice:device_
                                                                                         dataSource:source
                                                                              fusedNeuronDescriptor:fused_neuron_];
    [source rethrowError];
    MPSMatrixSum* running_statistics = [[MPSMatrixSum alloc] initWithDevice:device_
                                                                      count:2
                                                                       rows:1
                                                                    columns:static_cast<NSUInteger>(channels)
                                                                  transpose:NO];
    return kernels_.emplace(channels, Kernels{batch_normalization, running_statistics}).first->second;
  }

  // A new MPS state holding the batch statistics of x's pixels.
  MPSCNNBatchNormalizationState* batch_statistics(MetalContext& metal, const ImageRegion& x) const {
    MPSImage* image = image_of(x);
    MPSCNNBatchNormalizationState* state = [kernels_for(x.c).batch_normalization resultStateForSourceImage:image
                                                                                              sourceStates:nil
                                                                                          destinationImage:image];
    if (!state) fail<Error>("metal: MPSCNNBatchNormalization made no MPSCNNBatchNormalizationState");
    statistics_.offset = origin_of(x);
    statistics_.clipRect = extent_of(x);
    statistics_.sourceFeatureChannelOffset = feature_channel_offset(x);
    [statistics_ encodeBatchToCommandBuffer:metal.command_buffer()
                               sourceImages:images_of(x)
                    batchNormalizationState:state];
    return state;
  }

  // A new MPS state for a gradient over x, holding the given gamma, beta,
  // mean and variance; the gradient kernels take epsilon from the state's
  // batch normalization.
  MPSCNNBatchNormalizationState* training_state(MetalContext& metal, const ImageRegion& x, const float* gamma,
                                                const float* beta, const float* mean, const float* variance,
                                                float epsilon) const {
    MPSCNNBatchNormalizationState* state = batch_statistics(metal, x);
    kernels_for(x.c).batch_normalization.epsilon = epsilon;
    copy(metal.command_buffer(),
         {{address(metal, gamma), in_state([state gamma], "gamma")},
          {address(metal, beta), in_state([state beta], "beta")},
          {address(metal, mean), in_state([state mean], "mean")},
          {address(metal, variance), in_state([state variance], "variance")}},
         bytes_of(x.c));
    return state;
  }

  void encode_statistics_gradient(id<MTLCommandBuffer> command_buffer, const Gradients& dy, const ImageRegion& x,
                                  MPSCNNBatchNormalizationState* state) const {
    set_sources(statistics_gradient_, dy, x);
    statistics_gradient_.clipRect = extent_of(x);
    [statistics_gradient_ encodeBatchToCommandBuffer:command_buffer
                                     sourceGradients:dy.images
                                        sourceImages:images_of(x)
                             batchNormalizationState:state];
  }

  // Zeros of x's extents, read by the statistics gradient and the gradient.
  // Temporary images live in heaps that blits would need fences for, so a
  // neuron f(x) = 0 * x + 0 writes them.
  Gradients zeros_like(id<MTLCommandBuffer> command_buffer, const ImageRegion& x) const {
    NSArray<MPSTemporaryImage*>* zeros = temporary_images(command_buffer, x.data_type, x.w, x.h, x.c, x.n);
    for (MPSTemporaryImage* image in zeros) image.readCount = 2;
    zero_.offset = origin_of(x);
    zero_.clipRect = extent_of(x);
    zero_.sourceFeatureChannelOffset = feature_channel_offset(x);
    [zero_ encodeBatchToCommandBuffer:command_buffer sourceImages:images_of(x) destinationImages:zeros];
    return {zeros, MPSOffset{0, 0, 0}, 0};
  }

  id<MTLDevice> device_;
  MPSNNNeuronDescriptor* fused_neuron_;  // nil: none
  MPSCNNBatchNormalizationStatistics* statistics_;
  MPSCNNBatchNormalizationStatisticsGradient* statistics_gradient_;
  MPSCNNBatchNormalizationGradient* gradient_;
  MPSCNNNeuron* zero_;
  MPSMatrixNeuron* scale_;
  // The kernels' properties are set per encode: one encode at a time.
  mutable std::mutex mutex_;
  mutable std::map<int64_t, Kernels> kernels_;
};

std::unique_ptr<BatchNormalizationPrimitive> make_batch_normalization(Backend& backend, const BatchNormalizationDescriptor& descriptor) {
  return std::make_unique<MetalBatchNormalization>(static_cast<MetalBackend&>(backend).device(), descriptor);
}

const RegisterPrimitive<BatchNormalizationPrimitive> registered("metal", make_batch_normalization);

}  // namespace

}  // namespace mpsx::metal

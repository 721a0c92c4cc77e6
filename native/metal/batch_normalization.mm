// Batch normalization on metal: MPSCNNBatchNormalization, its statistics and
// gradient kernels over the real MPSCNNBatchNormalizationState.
//
// Each mpsx batch normalization state's per-batch data is a MetalBatch: it
// holds the MPSCNNBatchNormalizationState that MPSCNNBatchNormalizationStatistics
// makes and accumulates into (one per batch, made by the first sub-batch's
// statistics), which the forward, statistics gradient and gradient kernels
// then read and update, each encoded once. mpsx's host-readable buffers of
// the state (gamma, beta, mean, variance and the gradients) are copied from
// the MPS state's buffers after the passes that change them.
#include "mpsx/kernels/batch_normalization.h"

#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/kernels/normalization.h"
#include "mpsx/registry.h"
#include "normalization.h"

// The <MPSCNNBatchNormalizationDataSource> of the primitive's own
// MPSCNNBatchNormalization kernels: the neutral normalization, with its mean
// and variance, since every encode brings its gamma, beta, mean, variance
// and epsilon.
@interface MPSXNeutralBatchNormalizationDataSource
    : MPSXNeutralNormalizationDataSource <MPSCNNBatchNormalizationDataSource>
@end

@implementation MPSXNeutralBatchNormalizationDataSource {
  std::vector<float> _mean, _variance;
}

- (instancetype)initWithChannels:(int64_t)channels {
  if ((self = [super initWithChannels:channels])) {
    using mpsx::NormalizationArray;
    const size_t count = static_cast<size_t>(channels);
    _mean.assign(count, mpsx::normalization_default(NormalizationArray::Mean));
    _variance.assign(count, mpsx::normalization_default(NormalizationArray::Variance));
  }
  return self;
}

- (float*)mean {
  return _mean.data();
}

- (float*)variance {
  return _variance.data();
}

- (NSString*)label {
  return @"mpsx batch normalization";
}

@end

namespace mpsx::metal {
namespace {

// The clipRect of kernels without a destination image: the region's extent
// from (0, 0).
MTLRegion extent_of(const ImageRegion& region) {
  return MTLRegionMake3D(0, 0, 0, static_cast<NSUInteger>(region.w), static_cast<NSUInteger>(region.h), 1);
}

// What whole_buffer names in its errors.
constexpr const char* kBatchNormalization = "MPSCNNBatchNormalization";

// One of the MPS state's buffers: MPS's accessors may answer nil.
BufferAddress in_state(id<MTLBuffer> buffer, const char* name) {
  if (!buffer) fail<Error>("metal: MPS gave the MPSCNNBatchNormalizationState no ", name, " buffer");
  return {buffer, 0};
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

// A state's per-batch data: mpsx's buffers, read by the host and by the
// running-statistics update, and the MPS state every pass works on.
class MetalBatch final : public BatchNormalizationBatch {
 public:
  using BatchNormalizationBatch::BatchNormalizationBatch;
  // Made by the statistics of the batch's first sub-batch; nil before.
  MPSCNNBatchNormalizationState* state = nil;

  MPSCNNBatchNormalizationState* checked_state() const {
    if (!state) fail<Error>("metal: the MPSCNNBatchNormalizationState was not made by a statistics encode");
    return state;
  }
  // Copies the MPS state's statistics into mpsx's mean and variance.
  void copy_statistics(MetalContext& metal) const {
    copy(metal.command_buffer(),
         {{in_state([state mean], "mean"), address(metal, mean())},
          {in_state([state variance], "variance"), address(metal, variance())}},
         bytes_of(channels()));
  }
  // Copies the MPS state's gradients for gamma and beta into mpsx's.
  void copy_gradients(MetalContext& metal) const {
    copy(metal.command_buffer(),
         {{in_state([state gradientForGamma], "gradientForGamma"), address(metal, gradient_for_gamma())},
          {in_state([state gradientForBeta], "gradientForBeta"), address(metal, gradient_for_beta())}},
         bytes_of(channels()));
  }
};

MetalBatch& metal_batch(BatchNormalizationBatch& batch) { return static_cast<MetalBatch&>(batch); }

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
  MetalBatchNormalization(const MetalBackend& backend, const BatchNormalizationDescriptor& d)
      : device_(backend.device()),
        fused_neuron_(d.fused_neuron.is_identity() ? nil : neuron_descriptor(d.fused_neuron)),
        statistics_([[MPSCNNBatchNormalizationStatistics alloc] initWithDevice:backend.device()]),
        statistics_gradient_([[MPSCNNBatchNormalizationStatisticsGradient alloc] initWithDevice:backend.device()
                                                                          fusedNeuronDescriptor:fused_neuron_]),
        gradient_([[MPSCNNBatchNormalizationGradient alloc] initWithDevice:backend.device()
                                                      fusedNeuronDescriptor:fused_neuron_]),
        zero_([[MPSCNNNeuron alloc]
              initWithDevice:backend.device()
            neuronDescriptor:[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:MPSCNNNeuronTypeLinear a:0 b:0]]) {}

  std::shared_ptr<BatchNormalizationBatch> make_batch(const std::shared_ptr<Device>& device,
                                                      int64_t channels) const override {
    return std::make_shared<MetalBatch>(device, channels);
  }

  // MPS accumulates the statistics of every sub-batch encoded into one
  // state; the first sub-batch of a batch (before 0) starts a new state.
  void statistics(ExecutionContext& context, const ImageRegion& source, BatchNormalizationBatch& data,
                  int64_t before) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    MetalBatch& batch = metal_batch(data);
    if (before == 0 || !batch.state) {
      MPSImage* image = image_of(source);
      batch.state = [kernels_for(source.c).batch_normalization resultStateForSourceImage:image
                                                                            sourceStates:nil
                                                                        destinationImage:image];
      if (!batch.state) fail<Error>("metal: MPSCNNBatchNormalization made no MPSCNNBatchNormalizationState");
    }
    if (source.element_count() == 0) return;
    statistics_.offset = origin_of(source);
    statistics_.clipRect = extent_of(source);
    statistics_.sourceFeatureChannelOffset = feature_channel_offset(source);
    [statistics_ encodeBatchToCommandBuffer:metal.command_buffer()
                               sourceImages:images_of(source)
                    batchNormalizationState:batch.state];
    batch.copy_statistics(metal);
  }

  // Inference: MPS normalizes with the kernel's own four arrays, reloaded
  // from the given ones in command buffer order.
  void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                 const float* gamma, const float* beta, const float* mean, const float* variance,
                 float epsilon) const override {
    if (source.element_count() == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    MPSCNNBatchNormalization* kernel = prepared(metal, source, destination, gamma, beta, epsilon);
    id<MTLBuffer> means = whole_buffer(metal, mean, kBatchNormalization, "mean");
    id<MTLBuffer> variances = whole_buffer(metal, variance, kBatchNormalization, "variance");
    [kernel reloadMeanAndVarianceWithCommandBuffer:command_buffer
                              meanAndVarianceState:[[MPSCNNNormalizationMeanAndVarianceState alloc]
                                                       initWithMean:means
                                                           variance:variances]];
    encode_batch(kernel, command_buffer, source, destination);
  }

  // Training: the batch statistics of the MPS state; the state also takes
  // the gamma and beta its gradients use.
  void normalize(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
                 const float* gamma, const float* beta, float epsilon, BatchNormalizationBatch& data) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    MetalBatch& batch = metal_batch(data);
    MPSCNNBatchNormalizationState* state = batch.checked_state();
    copy(command_buffer,
         {{address(metal, gamma), in_state([state gamma], "gamma")},
          {address(metal, beta), in_state([state beta], "beta")},
          {address(metal, gamma), address(metal, batch.gamma())},
          {address(metal, beta), address(metal, batch.beta())}},
         bytes_of(source.c));
    if (source.element_count() == 0) return;
    MPSCNNBatchNormalization* kernel = prepared(metal, source, destination, gamma, beta, epsilon);
    [kernel encodeBatchToCommandBuffer:command_buffer
                          sourceImages:images_of(source)
               batchNormalizationState:state
                     destinationImages:images_of(destination)];
    batch.copy_statistics(metal);  // as the forward pass used them
  }

  // MPS adds each sub-batch's sums into the state's gradients; core starts a
  // batch's sums (accumulate false) only on a state whose statistics
  // gradient has not run, which MPS's state starts at zero.
  void statistics_gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                           float epsilon, BatchNormalizationBatch& data, bool) const override {
    if (source.element_count() == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    MetalBatch& batch = metal_batch(data);
    MPSCNNBatchNormalizationState* state = batch.checked_state();
    kernels_for(source.c).batch_normalization.epsilon = epsilon;  // the gradient kernels read the state's kernel's
    const Gradients dy = gradients_of(source_gradient);
    set_sources(statistics_gradient_, dy, source);
    statistics_gradient_.clipRect = extent_of(source);
    [statistics_gradient_ encodeBatchToCommandBuffer:metal.command_buffer()
                                     sourceGradients:dy.images
                                        sourceImages:images_of(source)
                             batchNormalizationState:state];
    batch.copy_gradients(metal);
  }

  // MPS's gradient divides by the values its statistics accumulated: `count`.
  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, float epsilon, BatchNormalizationBatch& data,
                int64_t) const override {
    if (source.element_count() == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    MetalContext& metal = context_of(context);
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    MPSCNNBatchNormalizationState* state = metal_batch(data).checked_state();
    kernels_for(source.c).batch_normalization.epsilon = epsilon;
    // Core signals "no source gradient" (dz = 0) with a default region, which
    // names no storage; MPS reads gradients only from images.
    const Gradients dy = source_gradient.storage ? gradients_of(source_gradient) : zeros_like(command_buffer, source);
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
    MPSXNeutralBatchNormalizationDataSource* source =
        [[MPSXNeutralBatchNormalizationDataSource alloc] initWithChannels:channels];
    MPSCNNBatchNormalization* batch_normalization = [[MPSCNNBatchNormalization alloc] initWithDevice:device_
                                                                                         dataSource:source
                                                                              fusedNeuronDescriptor:fused_neuron_];
    MPSMatrixSum* running_statistics = [[MPSMatrixSum alloc] initWithDevice:device_
                                                                      count:2
                                                                       rows:1
                                                                    columns:static_cast<NSUInteger>(channels)
                                                                  transpose:NO];
    return kernels_.emplace(channels, Kernels{batch_normalization, running_statistics}).first->second;
  }

  // The kernel for source's channels with the given gamma and beta reloaded
  // (in command buffer order), epsilon and the regions set.
  MPSCNNBatchNormalization* prepared(MetalContext& metal, const ImageRegion& source, const ImageRegion& destination,
                                     const float* gamma, const float* beta, float epsilon) const {
    MPSCNNBatchNormalization* kernel = kernels_for(source.c).batch_normalization;
    id<MTLBuffer> gammas = whole_buffer(metal, gamma, kBatchNormalization, "gamma");
    id<MTLBuffer> betas = whole_buffer(metal, beta, kBatchNormalization, "beta");
    [kernel reloadGammaAndBetaWithCommandBuffer:metal.command_buffer()
                              gammaAndBetaState:[[MPSCNNNormalizationGammaAndBetaState alloc] initWithGamma:gammas
                                                                                                       beta:betas]];
    kernel.epsilon = epsilon;
    kernel.offset = origin_of(source);
    kernel.clipRect = clip_rect_of(destination);
    kernel.sourceFeatureChannelOffset = feature_channel_offset(source);
    kernel.destinationFeatureChannelOffset = feature_channel_offset(destination);
    return kernel;
  }

  // Zeros of x's extents, read by the gradient. Temporary images live in
  // heaps that blits would need fences for, so a neuron f(x) = 0 * x + 0
  // writes them.
  Gradients zeros_like(id<MTLCommandBuffer> command_buffer, const ImageRegion& x) const {
    NSArray<MPSTemporaryImage*>* zeros = temporary_images(command_buffer, x.data_type, x.w, x.h, x.c, x.n);
    for (MPSTemporaryImage* image in zeros) image.readCount = 1;
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
  // The kernels' properties are set per encode: one encode at a time.
  mutable std::mutex mutex_;
  mutable std::map<int64_t, Kernels> kernels_;
};

const Registered<BatchNormalizationPrimitive, MetalBatchNormalization> registered("metal");

}  // namespace

}  // namespace mpsx::metal

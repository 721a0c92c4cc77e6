// Instance and group normalization on metal: MPSCNNInstanceNormalization(+Gradient)
// for kind Instance, MPSCNNGroupNormalization(+Gradient) for kind Group, over
// their real gradient states.
//
// The MPS kernels are made once per (channels, groups) with a neutral data
// source (gamma ones, beta zeros, the number of groups); each encode reloads
// the gamma and beta it brings with reloadGammaAndBetaWithCommandBuffer:
// (command buffer order) and sets epsilon, as batch_normalization.mm does.
// The forward encode makes one MPS gradient state per image (MPS's model)
// and keeps the array in GroupNormalizationStatistics::backend; the gradient
// encode reloads the forward's gamma, beta and epsilon into the states'
// kernel, hands the states to MPS's gradient kernel, then sums their
// per-image gradients for gamma and beta into mpsx's buffers with
// MPSMatrixSum (mpsx's are sums over the encode's images).
//
// MPS's states expose no mean or variance (only gamma, beta and the
// gradients), so on metal mpsx's statistics buffers (mean, variance) are left
// unwritten: nothing reads them but the backend's own gradient, and metal's
// gradient works from MPS's state instead.
#include "mpsx/kernels/group_normalization.h"

#include <cstdint>
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

// The <MPSCNNInstanceNormalizationDataSource> and
// <MPSCNNGroupNormalizationDataSource> of the primitive's own
// MPSCNNInstanceNormalization and MPSCNNGroupNormalization kernels: the
// neutral normalization, since every encode reloads its gamma and beta and
// sets its epsilon; the group one with the number of groups the kernel is
// made for.
@interface MPSXInstanceNormalizationDataSource
    : MPSXNeutralNormalizationDataSource <MPSCNNInstanceNormalizationDataSource>
@end

@implementation MPSXInstanceNormalizationDataSource

- (NSString*)label {
  return @"mpsx instance normalization";
}

@end

@interface MPSXGroupNormalizationDataSource : MPSXNeutralNormalizationDataSource <MPSCNNGroupNormalizationDataSource>
- (instancetype)initWithChannels:(int64_t)channels groups:(int64_t)groups NS_DESIGNATED_INITIALIZER;
- (instancetype)initWithChannels:(int64_t)channels NS_UNAVAILABLE;
@end

@implementation MPSXGroupNormalizationDataSource

// The protocol's numberOfGroups is read-write.
@synthesize numberOfGroups = _numberOfGroups;

- (instancetype)initWithChannels:(int64_t)channels groups:(int64_t)groups {
  if ((self = [super initWithChannels:channels])) _numberOfGroups = static_cast<NSUInteger>(groups);
  return self;
}

- (NSString*)label {
  return @"mpsx group normalization";
}

// numberOfGroups can be set: a copy is a new source of the same values.
- (id)copyWithZone:(NSZone*)zone {
  return [[MPSXGroupNormalizationDataSource alloc] initWithChannels:static_cast<int64_t>(self.numberOfFeatureChannels)
                                                             groups:static_cast<int64_t>(_numberOfGroups)];
}

@end

namespace mpsx::metal {
namespace {

// One lock for every primitive of the family: a gradient primitive sets
// properties of (and reloads) the forward kernel that made its states, which
// belongs to another primitive.
std::mutex& encode_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The MPS classes of each kind.
struct InstanceNormalizationClasses {
  using Kernel = MPSCNNInstanceNormalization;
  using Gradient = MPSCNNInstanceNormalizationGradient;
  using State = MPSCNNInstanceNormalizationGradientState;
  static constexpr const char* kernel_name = "MPSCNNInstanceNormalization";
  static constexpr const char* gradient_name = "MPSCNNInstanceNormalizationGradient";
  static constexpr const char* state_name = "MPSCNNInstanceNormalizationGradientState";
  // An instance normalization has one channel per group: `groups` is the channels.
  static Kernel* make_kernel(id<MTLDevice> device, int64_t channels, int64_t) {
    return [[MPSCNNInstanceNormalization alloc]
        initWithDevice:device
            dataSource:[[MPSXInstanceNormalizationDataSource alloc] initWithChannels:channels]];
  }
  static Kernel* kernel_of(State* state) { return state.instanceNormalization; }
};

struct GroupNormalizationClasses {
  using Kernel = MPSCNNGroupNormalization;
  using Gradient = MPSCNNGroupNormalizationGradient;
  using State = MPSCNNGroupNormalizationGradientState;
  static constexpr const char* kernel_name = "MPSCNNGroupNormalization";
  static constexpr const char* gradient_name = "MPSCNNGroupNormalizationGradient";
  static constexpr const char* state_name = "MPSCNNGroupNormalizationGradientState";
  static Kernel* make_kernel(id<MTLDevice> device, int64_t channels, int64_t groups) {
    return [[MPSCNNGroupNormalization alloc]
        initWithDevice:device
            dataSource:[[MPSXGroupNormalizationDataSource alloc] initWithChannels:channels groups:groups]];
  }
  static Kernel* kernel_of(State* state) { return state.groupNormalization; }
};

template <class Classes>
class MetalGroupNormalization final : public GroupNormalizationPrimitive {
  using Kernel = typename Classes::Kernel;
  using Gradient = typename Classes::Gradient;
  using State = typename Classes::State;

  // What a forward encode leaves in GroupNormalizationStatistics::backend:
  // MPS's gradient state of each image of the region, in order.
  struct States {
    NSArray<State*>* states;
  };

  // Sums `count` one-row matrices of `channels` float32 with unit scales.
  struct Sum {
    MPSMatrixSum* kernel;
    MPSVector* ones;
  };

 public:
  explicit MetalGroupNormalization(id<MTLDevice> device)
      : device_(device), gradient_([[Gradient alloc] initWithDevice:device]) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination, int64_t groups,
               const float* gamma, const float* beta, float epsilon,
               GroupNormalizationStatistics& statistics) const override {
    statistics.backend.reset();  // a pooled state may hold an earlier encode's
    if (source.element_count() == 0) return;
    check_distinct(Classes::kernel_name, source, destination);
    std::lock_guard<std::mutex> lock(encode_mutex());
    MetalContext& metal = context_of(context);
    const NSUInteger source_channel = feature_channel_offset(source);  // these may refuse: before any encode
    const NSUInteger destination_channel = feature_channel_offset(destination);
    Kernel* kernel = kernel_for(source.c, groups);
    reload(metal, kernel, gamma, beta, epsilon);
    kernel.offset = origin_of(source);
    kernel.clipRect = clip_rect_of(destination);
    kernel.sourceFeatureChannelOffset = source_channel;
    kernel.sourceFeatureChannelMaxCount = exact_channels(source);
    kernel.destinationFeatureChannelOffset = destination_channel;
    MPSImageBatch* sources = images_of(source);
    MPSImageBatch* destinations = images_of(destination);
    NSMutableArray<State*>* states = [NSMutableArray arrayWithCapacity:sources.count];
    for (NSUInteger i = 0; i < sources.count; ++i) {
      State* state = [kernel resultStateForSourceImage:sources[i] sourceStates:nil destinationImage:destinations[i]];
      if (!state) fail<Error>("metal: ", Classes::kernel_name, " made no ", Classes::state_name);
      [states addObject:state];
    }
    [kernel encodeBatchToCommandBuffer:metal.command_buffer()
                          sourceImages:sources
                     destinationStates:states
                     destinationImages:destinations];
    statistics.backend = std::make_shared<States>(States{states});
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, int64_t, const float* gamma, const float* beta,
                float epsilon, GroupNormalizationStatistics& statistics, float* gradient_for_gamma,
                float* gradient_for_beta) const override {
    MetalContext& metal = context_of(context);
    const NSUInteger bytes = bytes_of(source.c);
    if (source.element_count() == 0) {  // no pixels: no gradient
      metal.fill_zero(gradient_for_gamma, bytes);
      metal.fill_zero(gradient_for_beta, bytes);
      return;
    }
    const auto* held = static_cast<const States*>(statistics.backend.get());
    if (!held)
      fail<Error>("metal: the state holds no ", Classes::state_name, "; encode ", Classes::kernel_name, " first");
    NSArray<State*>* states = held->states;
    if (states.count != static_cast<NSUInteger>(source.n))
      fail<Error>("metal: the forward encode made ", states.count, " ", Classes::state_name, "s; the gradient reads ",
                  source.n, " images");
    check_distinct(Classes::gradient_name, source_gradient, destination_gradient);
    check_distinct(Classes::gradient_name, source, destination_gradient);
    const NSUInteger gradient_channel = feature_channel_offset(source_gradient);  // before any encode
    const NSUInteger source_channel = feature_channel_offset(source);
    const NSUInteger destination_channel = feature_channel_offset(destination_gradient);
    std::lock_guard<std::mutex> lock(encode_mutex());
    id<MTLCommandBuffer> command_buffer = metal.command_buffer();
    // Later encodes may have reloaded the states' kernel: give it back the
    // gamma, beta and epsilon the forward encode used (the state's copies),
    // in case MPS's gradient reads them from the kernel. The states' own
    // gamma and beta buffers stay as MPS made them: they may be the very
    // buffers the forward reloaded from, which mpsx may have updated since.
    reload(metal, Classes::kernel_of(states[0]), gamma, beta, epsilon);

    gradient_.primaryOffset = origin_of(source_gradient);
    gradient_.primarySourceFeatureChannelOffset = gradient_channel;
    gradient_.primarySourceFeatureChannelMaxCount = exact_channels(source_gradient);
    gradient_.secondaryOffset = origin_of(source);
    gradient_.secondarySourceFeatureChannelOffset = source_channel;
    gradient_.secondarySourceFeatureChannelMaxCount = exact_channels(source);
    gradient_.clipRect = clip_rect_of(destination_gradient);
    gradient_.destinationFeatureChannelOffset = destination_channel;
    [gradient_ encodeBatchToCommandBuffer:command_buffer
                          sourceGradients:images_of(source_gradient)
                             sourceImages:images_of(source)
                           gradientStates:states
                     destinationGradients:images_of(destination_gradient)];

    // MPS's gradients are per image (per state); mpsx's are their sums.
    const Sum& sum = sum_for(source.n, source.c);
    NSMutableArray<MPSMatrix*>* gamma_gradients = [NSMutableArray arrayWithCapacity:states.count];
    NSMutableArray<MPSMatrix*>* beta_gradients = [NSMutableArray arrayWithCapacity:states.count];
    for (State* state in states) {
      [gamma_gradients addObject:row(BufferAddress{state.gradientForGamma, 0}, source.c)];
      [beta_gradients addObject:row(BufferAddress{state.gradientForBeta, 0}, source.c)];
    }
    [sum.kernel encodeToCommandBuffer:command_buffer
                       sourceMatrices:gamma_gradients
                         resultMatrix:row(address(metal, gradient_for_gamma), source.c)
                          scaleVector:sum.ones
                         offsetVector:nil
                           biasVector:nil
                           startIndex:0];
    [sum.kernel encodeToCommandBuffer:command_buffer
                       sourceMatrices:beta_gradients
                         resultMatrix:row(address(metal, gradient_for_beta), source.c)
                          scaleVector:sum.ones
                         offsetVector:nil
                           biasVector:nil
                           startIndex:0];
  }

 private:
  // The encode's gamma and beta into the kernel (command buffer order), and its epsilon.
  static void reload(MetalContext& metal, Kernel* kernel, const float* gamma, const float* beta, float epsilon) {
    id<MTLBuffer> gammas = whole_buffer(metal, gamma, Classes::kernel_name, "gamma");
    id<MTLBuffer> betas = whole_buffer(metal, beta, Classes::kernel_name, "beta");
    [kernel reloadGammaAndBetaWithCommandBuffer:metal.command_buffer()
                              gammaAndBetaState:[[MPSCNNNormalizationGammaAndBetaState alloc] initWithGamma:gammas
                                                                                                       beta:betas]];
    kernel.epsilon = epsilon;
  }

  // MPS kernels have a channel and group count, the descriptor neither: one
  // kernel per pair, made on its first use. Called under encode_mutex().
  Kernel* kernel_for(int64_t channels, int64_t groups) const {
    const std::pair<int64_t, int64_t> key{channels, groups};
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    Kernel* kernel = Classes::make_kernel(device_, channels, groups);
    if (!kernel)
      fail<Error>("metal: MPS made no ", Classes::kernel_name, " of ", channels, " feature channels in ", groups,
                  " groups");
    return kernels_.emplace(key, kernel).first->second;
  }

  // The sum of `images` states' gradients, made on its first use. Called
  // under encode_mutex().
  const Sum& sum_for(int64_t images, int64_t channels) const {
    const std::pair<int64_t, int64_t> key{images, channels};
    auto it = sums_.find(key);
    if (it != sums_.end()) return it->second;
    const std::vector<float> ones(static_cast<size_t>(images), 1.0f);
    id<MTLBuffer> buffer = [device_ newBufferWithBytes:ones.data()
                                                length:bytes_of(images)
                                               options:MTLResourceStorageModeShared];
    if (!buffer) fail<OutOfMemoryError>("out of memory: metal could not allocate ", bytes_of(images), " bytes");
    MPSVectorDescriptor* descriptor =
        [MPSVectorDescriptor vectorDescriptorWithLength:static_cast<NSUInteger>(images) dataType:MPSDataTypeFloat32];
    Sum sum{[[MPSMatrixSum alloc] initWithDevice:device_
                                           count:static_cast<NSUInteger>(images)
                                            rows:1
                                         columns:static_cast<NSUInteger>(channels)
                                       transpose:NO],
            [[MPSVector alloc] initWithBuffer:buffer descriptor:descriptor]};
    return sums_.emplace(key, sum).first->second;
  }

  id<MTLDevice> device_;
  Gradient* gradient_;
  mutable std::map<std::pair<int64_t, int64_t>, Kernel*> kernels_;  // by (channels, groups)
  mutable std::map<std::pair<int64_t, int64_t>, Sum> sums_;         // by (images, channels)
};

std::unique_ptr<GroupNormalizationPrimitive> make_group_normalization(Backend& backend,
                                                                      const GroupNormalizationDescriptor& descriptor) {
  id<MTLDevice> device = static_cast<MetalBackend&>(backend).device();
  if (descriptor.kind == GroupNormalizationKind::Instance)
    return std::make_unique<MetalGroupNormalization<InstanceNormalizationClasses>>(device);
  return std::make_unique<MetalGroupNormalization<GroupNormalizationClasses>>(device);
}

const RegisterPrimitive<GroupNormalizationPrimitive> registered("metal", make_group_normalization);

}  // namespace

}  // namespace mpsx::metal

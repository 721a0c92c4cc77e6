#include "mpsx/kernels/dropout.h"

#include <algorithm>
#include <cstring>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

// What DropoutGradientState::backend_state holds on metal: the MPS state of
// the forward encode, which holds Apple's mask.
struct MetalDropoutState {
  MPSCNNDropoutGradientState* state = nil;
};

class MetalDropout final : public DropoutPrimitive {
 public:
  MetalDropout(const MetalBackend& backend, const DropoutDescriptor& d) {
    id<MTLDevice> device = backend.device();
    MTLSize stride = MTLSizeMake(ns(d.mask_stride_x), ns(d.mask_stride_y), ns(d.mask_stride_z));
    dropout_ = [[MPSCNNDropout alloc] initWithDevice:device
                                     keepProbability:d.keep_probability
                                                seed:static_cast<NSUInteger>(d.seed)
                                  maskStrideInPixels:stride];
    gradient_ = [[MPSCNNDropoutGradient alloc] initWithDevice:device
                                              keepProbability:d.keep_probability
                                                         seed:static_cast<NSUInteger>(d.seed)
                                           maskStrideInPixels:stride];
  }

  // Apple's kernel draws its own masks: `generator` is mpsx's.
  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination,
               const DropoutOrigin&, const DropoutGenerator&, DropoutGradientState& state) const override {
    id<MTLCommandBuffer> command_buffer = context_of(context).command_buffer();
    set_regions(dropout_, origin_of(source), source, destination, slice_channels);
    MPSImageBatch* sources = images_of(source);
    MPSImageBatch* destinations = images_of(destination);
    // One state for the whole batch, as MPS's batch result state is.
    MPSCNNDropoutGradientState* mps_state = [dropout_ resultStateBatchForSourceImage:sources
                                                                        sourceStates:nil
                                                                    destinationImage:destinations];
    NSMutableArray<MPSState*>* states = [NSMutableArray arrayWithCapacity:sources.count];
    for (NSUInteger i = 0; i < sources.count; ++i) [states addObject:mps_state];
    [dropout_ encodeBatchToCommandBuffer:command_buffer
                            sourceImages:sources
                       destinationStates:states
                       destinationImages:destinations];
    auto holder = std::make_shared<MetalDropoutState>();
    holder->state = mps_state;
    state.backend_state = holder;
    // mask_data() reads Apple's mask bytes, copied into the state's mask
    // buffer once the command buffer completed.
    [mps_state synchronizeOnCommandBuffer:command_buffer];
    void* mask = state.mask()->data();
    const NSUInteger length = static_cast<NSUInteger>(state.mask()->length());
    [command_buffer addCompletedHandler:^(id<MTLCommandBuffer>) {
      NSData* data = [mps_state maskData];
      const NSUInteger copied = std::min(length, static_cast<NSUInteger>(data.length));
      std::memcpy(mask, data.bytes, copied);
      if (copied < length) std::memset(static_cast<char*>(mask) + copied, 0, length - copied);
    }];
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient, const DropoutOrigin&,
                const DropoutGradientState& state) const override {
    auto holder = std::static_pointer_cast<MetalDropoutState>(state.backend_state);
    if (!holder || !holder->state)
      fail<StateError>("MPSCNNDropoutGradient: the MPSCNNDropoutGradientState holds no MPS mask");
    MPSImageBatch* sources = images_of(source);
    NSMutableArray<MPSState*>* states = [NSMutableArray arrayWithCapacity:sources.count];
    for (NSUInteger i = 0; i < sources.count; ++i) [states addObject:holder->state];
    // The secondary offset is the offset into the mask.
    set_gradient_regions(gradient_, source_gradient, source, origin_of(source), destination_gradient, slice_channels);
    encode_gradient_batch(gradient_, context_of(context).command_buffer(), images_of(source_gradient), sources, states,
                          destination_gradient);
  }

 private:
  MPSCNNDropout* dropout_;
  MPSCNNDropoutGradient* gradient_;
};

const Registered<DropoutPrimitive, MetalDropout> registered("metal");

}  // namespace

}  // namespace mpsx::metal

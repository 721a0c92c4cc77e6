#include "mpsx/kernels/optimizer.h"

#include <mutex>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

MPSNNRegularizationType regularization_type_of(RegularizationType type) {
  switch (type) {
    case RegularizationType::None: return MPSNNRegularizationTypeNone;
    case RegularizationType::L1: return MPSNNRegularizationTypeL1;
    case RegularizationType::L2: return MPSNNRegularizationTypeL2;
    case RegularizationType::Count: break;
  }
  fail<ArgumentError>("metal: no MPSNNRegularizationType for regularization type ", static_cast<uint32_t>(type));
}

MPSDataType data_type_of(DataType type) {
  switch (type) {
    case DataType::Float32: return MPSDataTypeFloat32;
    case DataType::Float16: return MPSDataTypeFloat16;
    default: break;
  }
  fail<ArgumentError>("metal: MPS optimizers update float32 or float16 vectors; given ", name_of(type));
}

// MPSNNOptimizerStochasticGradientDescent, MPSNNOptimizerAdam or
// MPSNNOptimizerRMSProp over MPSVectors of the arrays' MTLBuffers, made with
// every value MPS fixes at init; the learning rate and Adam's timeStep are
// set per update.
class MetalOptimizer final : public OptimizerPrimitive {
 public:
  MetalOptimizer(const MetalBackend& backend, const OptimizerConfiguration& c)
      : kind_(c.kind), data_type_(data_type_of(c.data_type)) {
    id<MTLDevice> device = backend.device();
    MPSNNOptimizerDescriptor* descriptor =
        [MPSNNOptimizerDescriptor optimizerDescriptorWithLearningRate:0
                                                      gradientRescale:c.gradient_rescale
                                                applyGradientClipping:c.gradient_clipping
                                                      gradientClipMax:c.gradient_clip_max
                                                      gradientClipMin:c.gradient_clip_min
                                                   regularizationType:regularization_type_of(c.regularization_type)
                                                  regularizationScale:c.regularization_scale];
    switch (c.kind) {
      case OptimizerKind::StochasticGradientDescent:
        optimizer_ = [[MPSNNOptimizerStochasticGradientDescent alloc] initWithDevice:device
                                                                       momentumScale:c.momentum_scale
                                                                 useNesterovMomentum:c.nesterov
                                                                 optimizerDescriptor:descriptor];
        break;
      case OptimizerKind::Adam:
        optimizer_ = [[MPSNNOptimizerAdam alloc] initWithDevice:device
                                                          beta1:c.beta1
                                                          beta2:c.beta2
                                                        epsilon:c.epsilon
                                                       timeStep:0
                                            optimizerDescriptor:descriptor];
        break;
      case OptimizerKind::RMSProp:
        optimizer_ = [[MPSNNOptimizerRMSProp alloc] initWithDevice:device
                                                             decay:c.decay
                                                           epsilon:c.epsilon
                                               optimizerDescriptor:descriptor];
        break;
    }
  }

  void update(ExecutionContext& context, const OptimizerStep& step, const OptimizerArrayList& list) const override {
    MetalContext& metal = context_of(context);
    // An MPSKernel's properties belong to one encoding thread at a time.
    std::lock_guard<std::mutex> lock(mutex_);
    // MPS applies Adam's bias corrections itself, from timeStep: it gets the
    // descriptor's learning rate, not core's corrected one.
    [optimizer_ setLearningRate:step.base_learning_rate];
    for (size_t i = 0; i < list.count; ++i) {
      const OptimizerArrays& a = list.arrays[i];
      if (a.count == 0) continue;  // nothing to update
      MPSVectorDescriptor* descriptor = [MPSVectorDescriptor vectorDescriptorWithLength:a.count dataType:data_type_];
      auto vector = [&](const void* data) -> MPSVector* {
        if (!data) return nil;
        const BufferAddress at = metal.backend().address_of(data);
        return [[MPSVector alloc] initWithBuffer:at.buffer offset:at.offset descriptor:descriptor];
      };
      switch (kind_) {
        case OptimizerKind::StochasticGradientDescent:
          [(MPSNNOptimizerStochasticGradientDescent*)optimizer_ encodeToCommandBuffer:metal.command_buffer()
                                                                  inputGradientVector:vector(a.gradient)
                                                                    inputValuesVector:vector(a.values)
                                                                  inputMomentumVector:vector(a.momentum)
                                                                   resultValuesVector:vector(a.result)];
          break;
        case OptimizerKind::Adam: {
          auto* adam = (MPSNNOptimizerAdam*)optimizer_;
          adam.timeStep = step.time_step - 1;  // the encode advances it to this update's
          [adam encodeToCommandBuffer:metal.command_buffer()
                  inputGradientVector:vector(a.gradient)
                    inputValuesVector:vector(a.values)
                  inputMomentumVector:vector(a.momentum)
                  inputVelocityVector:vector(a.velocity)
                maximumVelocityVector:vector(a.maximum_velocity)
                   resultValuesVector:vector(a.result)];
          break;
        }
        case OptimizerKind::RMSProp:
          [(MPSNNOptimizerRMSProp*)optimizer_ encodeToCommandBuffer:metal.command_buffer()
                                                inputGradientVector:vector(a.gradient)
                                                  inputValuesVector:vector(a.values)
                                            inputSumOfSquaresVector:vector(a.sum_of_squares)
                                                 resultValuesVector:vector(a.result)];
          break;
      }
    }
  }

 private:
  OptimizerKind kind_;
  MPSDataType data_type_;
  MPSNNOptimizer* optimizer_ = nil;
  mutable std::mutex mutex_;
};

const Registered<OptimizerPrimitive, MetalOptimizer> registered("metal");

}  // namespace

}  // namespace mpsx::metal

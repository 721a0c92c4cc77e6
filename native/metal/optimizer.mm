#include "mpsx/kernels/optimizer.h"

#include <mutex>

#include "backend.h"
#include "mpsx/errors.h"

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
// MPSNNOptimizerRMSProp over MPSVectors of the arrays' MTLBuffers.
class MetalOptimizer final : public OptimizerPrimitive {
 public:
  MetalOptimizer(id<MTLDevice> device, const OptimizerConfiguration& c)
      : device_(device), configuration_(c), data_type_(data_type_of(c.data_type)) {}

  void update(ExecutionContext& context, const OptimizerScalars& scalars,
              const OptimizerArrayList& list) const override {
    MetalContext& metal = context_of(context);
    // An MPSKernel's properties, and the optimizer prepare makes, belong to
    // one encoding thread at a time.
    std::lock_guard<std::mutex> lock(mutex_);
    prepare(scalars);
    // MPS applies Adam's bias corrections itself, from timeStep: it gets the
    // descriptor's learning rate, not core's corrected one.
    [optimizer_ setLearningRate:configuration_.kind == OptimizerKind::Adam ? scalars.base_learning_rate
                                                                           : scalars.learning_rate];
    for (size_t i = 0; i < list.count; ++i) {
      const OptimizerArrays& a = list.arrays[i];
      if (a.count == 0) continue;  // nothing to update
      MPSVectorDescriptor* descriptor = [MPSVectorDescriptor vectorDescriptorWithLength:a.count dataType:data_type_];
      auto vector = [&](const void* data) -> MPSVector* {
        if (!data) return nil;
        const BufferAddress at = metal.backend().address_of(data);
        return [[MPSVector alloc] initWithBuffer:at.buffer offset:at.offset descriptor:descriptor];
      };
      switch (configuration_.kind) {
        case OptimizerKind::StochasticGradientDescent:
          [(MPSNNOptimizerStochasticGradientDescent*)optimizer_ encodeToCommandBuffer:metal.command_buffer()
                                                                  inputGradientVector:vector(a.gradient)
                                                                    inputValuesVector:vector(a.values)
                                                                  inputMomentumVector:vector(a.momentum)
                                                                   resultValuesVector:vector(a.result)];
          break;
        case OptimizerKind::Adam: {
          auto* adam = (MPSNNOptimizerAdam*)optimizer_;
          adam.timeStep = scalars.time_step - 1;  // the encode advances it to this update's
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
  // MPS fixes every scalar but the learning rate when it makes an optimizer,
  // while core hands them to each update: make it on the first update, and
  // anew should they change.
  static bool same_fixed_values(const OptimizerScalars& a, const OptimizerScalars& b) {
    return a.gradient_rescale == b.gradient_rescale && a.gradient_clip_min == b.gradient_clip_min &&
           a.gradient_clip_max == b.gradient_clip_max && a.regularization_scale == b.regularization_scale &&
           a.momentum_scale == b.momentum_scale && a.epsilon == b.epsilon && a.beta1_as_given == b.beta1_as_given &&
           a.beta2_as_given == b.beta2_as_given && a.decay_as_given == b.decay_as_given;
  }

  void prepare(const OptimizerScalars& s) const {
    if (!optimizer_ || !same_fixed_values(s, made_for_)) {
      MPSNNOptimizerDescriptor* descriptor = [MPSNNOptimizerDescriptor
          optimizerDescriptorWithLearningRate:s.learning_rate
                              gradientRescale:s.gradient_rescale
                        applyGradientClipping:configuration_.gradient_clipping
                              gradientClipMax:s.gradient_clip_max
                              gradientClipMin:s.gradient_clip_min
                           regularizationType:regularization_type_of(configuration_.regularization_type)
                          regularizationScale:s.regularization_scale];
      switch (configuration_.kind) {
        case OptimizerKind::StochasticGradientDescent:
          optimizer_ = [[MPSNNOptimizerStochasticGradientDescent alloc] initWithDevice:device_
                                                                         momentumScale:s.momentum_scale
                                                                   useNesterovMomentum:configuration_.nesterov
                                                                   optimizerDescriptor:descriptor];
          break;
        case OptimizerKind::Adam:
          optimizer_ = [[MPSNNOptimizerAdam alloc] initWithDevice:device_
                                                            beta1:s.beta1_as_given
                                                            beta2:s.beta2_as_given
                                                          epsilon:s.epsilon
                                                         timeStep:0
                                              optimizerDescriptor:descriptor];
          break;
        case OptimizerKind::RMSProp:
          optimizer_ = [[MPSNNOptimizerRMSProp alloc] initWithDevice:device_
                                                               decay:s.decay_as_given
                                                             epsilon:s.epsilon
                                                 optimizerDescriptor:descriptor];
          break;
      }
      made_for_ = s;
    }
  }

  id<MTLDevice> device_;
  OptimizerConfiguration configuration_;
  MPSDataType data_type_;
  mutable std::mutex mutex_;
  mutable MPSNNOptimizer* optimizer_ = nil;
  mutable OptimizerScalars made_for_;  // what optimizer_ was made with
};

}  // namespace

std::unique_ptr<OptimizerPrimitive> MetalBackend::make_optimizer(const OptimizerConfiguration& configuration) {
  return std::make_unique<MetalOptimizer>(device_, configuration);
}

}  // namespace mpsx::metal

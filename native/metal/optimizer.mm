#include "mpsx/kernels/optimizer.h"

#include <cmath>
#include <cstring>
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
    // Core hands over Adam's lr[t], its bias corrections applied; MPS applies
    // them again, for timeStep + 1. Each encode below starts from timeStep 0,
    // where MPS multiplies by sqrt(1 - beta2) / (1 - beta1): divide it out.
    [optimizer_ setLearningRate:configuration_.kind == OptimizerKind::Adam
                                    ? static_cast<float>(static_cast<double>(scalars.learning_rate) *
                                                         scalars.one_minus_beta1 /
                                                         std::sqrt(static_cast<double>(scalars.one_minus_beta2)))
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
          adam.timeStep = 0;  // the encode advances it
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
  void prepare(const OptimizerScalars& s) const {
    OptimizerScalars fixed = s;
    fixed.learning_rate = 0;
    if (!optimizer_ || std::memcmp(&fixed, &made_for_, sizeof fixed) != 0) {
      MPSNNOptimizerDescriptor* descriptor = [MPSNNOptimizerDescriptor
          optimizerDescriptorWithLearningRate:s.learning_rate
                              gradientRescale:s.gradient_rescale
                        applyGradientClipping:configuration_.gradient_clipping
                              gradientClipMax:s.gradient_clip_max
                              gradientClipMin:s.gradient_clip_min
                           regularizationType:regularization_type_of(configuration_.regularization_type)
                          regularizationScale:s.regularization_scale];
      // Betas and decay from core's complements, so that 1 - beta of MPS's
      // double properties is exactly the complement core computes with.
      switch (configuration_.kind) {
        case OptimizerKind::StochasticGradientDescent:
          optimizer_ = [[MPSNNOptimizerStochasticGradientDescent alloc] initWithDevice:device_
                                                                         momentumScale:s.momentum_scale
                                                                   useNesterovMomentum:configuration_.nesterov
                                                                   optimizerDescriptor:descriptor];
          break;
        case OptimizerKind::Adam:
          optimizer_ = [[MPSNNOptimizerAdam alloc] initWithDevice:device_
                                                            beta1:1.0 - static_cast<double>(s.one_minus_beta1)
                                                            beta2:1.0 - static_cast<double>(s.one_minus_beta2)
                                                          epsilon:s.epsilon
                                                         timeStep:0
                                              optimizerDescriptor:descriptor];
          break;
        case OptimizerKind::RMSProp:
          optimizer_ = [[MPSNNOptimizerRMSProp alloc] initWithDevice:device_
                                                               decay:1.0 - static_cast<double>(s.one_minus_decay)
                                                             epsilon:s.epsilon
                                                 optimizerDescriptor:descriptor];
          break;
      }
      made_for_ = fixed;
    }
  }

  id<MTLDevice> device_;
  OptimizerConfiguration configuration_;
  MPSDataType data_type_;
  mutable std::mutex mutex_;
  mutable MPSNNOptimizer* optimizer_ = nil;
  mutable OptimizerScalars made_for_;  // what optimizer_ was made with, less the learning rate
};

}  // namespace

std::unique_ptr<OptimizerPrimitive> MetalBackend::make_optimizer(const OptimizerConfiguration& configuration) {
  return std::make_unique<MetalOptimizer>(device_, configuration);
}

}  // namespace mpsx::metal

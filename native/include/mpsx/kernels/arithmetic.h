// MPSCNNArithmetic (MPSCNNAdd, Subtract, Multiply, Divide, MPSNNCompare),
// MPSCNNArithmeticGradientState and MPSCNNArithmeticGradient (Add, Subtract,
// Multiply).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

enum class ArithmeticOperation : int32_t { Add = 0, Subtract, Multiply, Divide, Compare };

// The MPS class of the forward kernel of an operation ("MPSCNNAdd", ...).
const char* arithmetic_class_name(ArithmeticOperation operation);

// MPSNNComparisonType, same values.
enum class ComparisonType : int32_t { Equal = 0, NotEqual, Less, LessOrEqual, Greater, GreaterOrEqual, Count };

// What one forward encode computes:
// clamp((primary_scale * x) op (secondary_scale * y) + bias, minimum, maximum);
// Compare gives 1 or 0 (scales and bias unused) and is clamped likewise.
struct ArithmeticParameters {
  ArithmeticOperation operation = ArithmeticOperation::Add;
  float primary_scale = 1, secondary_scale = 1, bias = 0;
  float minimum = -3.402823466e+38f, maximum = 3.402823466e+38f;
  ComparisonType comparison = ComparisonType::Equal;
  float threshold = 0;
};

// What a backend runs. Regions hold float32, float16 or (sources only)
// uint8 values, channels of equal count where not broadcast. A source region
// has the destination's extents except 1 in each broadcast dimension (never
// the number of images), which repeats its one value.
class ArithmeticPrimitive : public PrimitiveInterface<ArithmeticOperation> {
 public:
  static constexpr const char* family = "arithmetic";
  virtual void forward(ExecutionContext& context, const ImageRegion& primary, const ImageRegion& secondary,
                       const ImageRegion& destination, const ArithmeticParameters& parameters) const = 0;
  // destination_gradient = scale * sum over its broadcast dimensions of
  // source_gradient (* other, for Multiply). destination_gradient has the
  // extents of the forward input it belongs to (1 where that input
  // broadcast); source_gradient the forward destination's; other (null for
  // Add and Subtract) the other forward input's block, 1 where it broadcast.
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion* other,
                        const ImageRegion& destination_gradient, float scale) const = 0;
};

// MPSCNNArithmeticGradientState: both forward image shapes, the geometry,
// and for each gradient filter the forward shape it produces.
class ArithmeticGradientState : public BinaryGradientState {
 public:
  explicit ArithmeticGradientState(std::shared_ptr<Device> device);
  const char* class_name() const override { return "MPSCNNArithmeticGradientState"; }
  // The feature channel strides of the forward encode.
  int64_t primary_channel_stride = 1, secondary_channel_stride = 1;
  // What a primary (false) or secondary (true) gradient filter reads as
  // GradientState: source_descriptor is that input's shape.
  struct View : GradientState {
    View(std::shared_ptr<Device> device, const ArithmeticGradientState* owner)
        : GradientState(std::move(device)), owner(owner) {}
    const ArithmeticGradientState* owner;
  };
  const View& view(bool secondary) const { return secondary ? secondary_view_ : primary_view_; }
  // Copies the forward encode's fields into both views.
  void fill_views();

 private:
  View primary_view_, secondary_view_;
};

class CNNArithmetic : public BinaryKernel {
 public:
  CNNArithmetic(std::shared_ptr<Device> device, ArithmeticOperation operation);
  const char* class_name() const override;
  ArithmeticOperation operation() const { return parameters.operation; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

  // Scales, bias, clamp, comparison type and threshold; operation is fixed.
  ArithmeticParameters parameters;
  int64_t primary_stride_in_feature_channels = 1, secondary_stride_in_feature_channels = 1;

  int64_t feature_channel_stride(bool secondary) const override {
    return secondary ? secondary_stride_in_feature_channels : primary_stride_in_feature_channels;
  }

 protected:
  void check_properties() const override;
  void check_state(const State& state) const override;
  std::shared_ptr<BinaryGradientState> new_result_state() override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& primary_image,
              const std::shared_ptr<Image>& secondary_image, const std::shared_ptr<Image>& destination,
              const BinaryGeometry& geometry, const std::shared_ptr<State>& state) override;

 private:
  std::shared_ptr<const ArithmeticPrimitive> primitive_;
};

// Add, Subtract or Multiply gradient for the primary or the secondary
// forward input. primary_scale and secondary_scale are the forward's;
// the result is the exact derivative of the unclamped forward formula
// (docs/semantics.md, "Arithmetic gradients").
class CNNArithmeticGradient : public GradientKernel {
 public:
  CNNArithmeticGradient(std::shared_ptr<Device> device, ArithmeticOperation operation,
                        bool is_secondary_source_filter);
  const char* class_name() const override;
  ArithmeticOperation operation() const { return operation_; }
  bool is_secondary_source_filter() const { return secondary_filter_; }
  // Whether source_image is the forward secondary image (Add/Subtract's
  // secondary filter, Multiply's primary filter).
  bool reads_secondary_image() const { return (operation_ == ArithmeticOperation::Multiply) != secondary_filter_; }

  float primary_scale = 1, secondary_scale = 1, bias = 0;
  float minimum_value = -3.402823466e+38f, maximum_value = 3.402823466e+38f;
  int64_t secondary_stride_in_feature_channels = 1;

 protected:
  // source_image must be the forward image this filter reads; the message
  // names it.
  void check_source_image(State& state, const GradientState& view, const Image& source_image) const override;
  GradientSecondary gradient_secondary() const override;
  const GradientState& gradient_state_of(const State& state) const override;
  void check(const Image& source_gradient, const Image& source_image, const GradientState& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  ArithmeticOperation operation_;
  bool secondary_filter_;
  std::shared_ptr<const ArithmeticPrimitive> primitive_;
};

}  // namespace mpsx

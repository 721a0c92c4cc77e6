// MPSCNNConvolutionTranspose, its gradient state and its gradient.
//
// The source is expanded by putting stride - 1 zeros between its pixels
// ((size - 1) * stride + 1 pixels), then convolved at stride 1 with the data
// source's OHWI weights as they are (no 180-degree rotation). Positions are
// those of the expanded image: the window of the destination pixel at the
// clip origin is centred on offset * stride + kernel_offset. The transpose
// shares the weights, the data source protocol and the weight updates of
// CNNConvolution.
#pragma once

#include <cstdint>
#include <memory>

#include "mpsx/kernels/convolution.h"

namespace mpsx {

class CNNConvolutionTranspose;

// MPSCNNConvolutionTransposeGradientState: the gradients of the transpose's
// weights and biases (batch sums, OHWI), what its forward encode used, and the
// MPSCNNConvolutionGradientState of the convolution it undoes, if any.
class ConvolutionTransposeGradientState : public ConvolutionGradientState {
 public:
  explicit ConvolutionTransposeGradientState(std::shared_ptr<const CNNConvolutionTranspose> transpose);
  const char* class_name() const override { return "MPSCNNConvolutionTransposeGradientState"; }

  std::shared_ptr<const CNNConvolutionTranspose> convolution_transpose() const;

  // Given to result_state or to the encode.
  std::shared_ptr<ConvolutionGradientState> convolution_gradient_state;
};

// One transposed convolution as a backend runs it: the block of the source
// read (empty when no source pixel reaches the destination), the destination
// region written, the part of it the source reaches (the rest gets the bias
// only) and the padding relating that part to the source block as in a
// deconvolution whose filter is the weights rotated by 180 degrees.
struct ConvolutionTransposeShape : ConvolutionWindow {
  int64_t images = 0, input_channels = 0, output_channels = 0;
  int64_t source_height = 0, source_width = 0;
  int64_t height = 0, width = 0;
  int64_t reached_y = 0, reached_x = 0, reached_height = 0, reached_width = 0;
  ImageLayout source_stride, destination_stride;
  DataType source_type = DataType::Float32, destination_type = DataType::Float32;
  bool gradient = false;  // a primitive for the backward passes
  // As ConvolutionShape's: that of the forward kernel.
  AccumulatorPrecision accumulator_precision = AccumulatorPrecision::Float;

  bool reads_source() const { return source_height > 0 && source_width > 0; }
  bool operator==(const ConvolutionTransposeShape& o) const;
};

// What a backend runs for a transposed convolution. `destination` and
// `result_gradient` are the whole region written, `source` and
// `source_gradient` the source block.
class ConvolutionTransposePrimitive : public ConvolutionPasses<ConvolutionTransposeShape> {
 public:
  static constexpr const char* family = "convolution transpose";
};

// MPSCNNConvolutionTranspose. A CNNConvolution for its weights, data source
// and updates; its window, padding policy, states and execution are its own.
class CNNConvolutionTranspose : public CNNConvolution {
 public:
  CNNConvolutionTranspose(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source);
  const char* class_name() const override { return "MPSCNNConvolutionTranspose"; }
  bool is_backwards() const override { return true; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

  int64_t kernel_offset_x = 0, kernel_offset_y = 0;

  // -encodeToCommandBuffer:sourceImage:convolutionGradientState:[destinationImage:|destinationState:...].
  // A convolution gradient state (given here or to result_state) of the
  // convolution this transpose undoes sets offset and kernel offsets to
  // mirror its windows and, without a destination, sizes the destination as
  // that convolution's source.
  Encoded encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                 const std::shared_ptr<State>& convolution_gradient_state, const std::shared_ptr<Image>& destination,
                 const std::shared_ptr<State>& state, bool want_state);
  ImageDescriptor destination_image_descriptor(const Image& source,
                                               const std::shared_ptr<State>& convolution_gradient_state);
  // -resultStateForSourceImage:sourceStates:destinationImage: with the
  // convolution gradient state among the source states.
  std::shared_ptr<ConvolutionTransposeGradientState> result_state(
      const Image& source, const std::shared_ptr<State>& convolution_gradient_state);

 protected:
  std::shared_ptr<State> new_result_state(const Image& source) override;
  // Also the kernel offsets.
  void check_properties() const override;
  Window window() const override;
  int64_t source_channels(const Image&) const override { return descriptor_.input_feature_channels; }
  // In the expanded source: below 2^62 once check_properties() passed.
  Offset source_offset() const override;
  // With a convolution gradient state (the coupled convolution's), the size
  // of that convolution's source.
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  // Its padding also depends on the coupled convolution and the kernel offsets.
  bool reuses_padding() const override { return false; }
  void check_state(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  // The convolution gradient state checked, or null for none.
  std::shared_ptr<ConvolutionGradientState> coupling(const std::shared_ptr<State>& convolution_gradient_state,
                                                     const Image& source) const;
  // Sets offset and kernel offsets so that the transpose reads where the
  // convolution of `state` wrote and writes where it read.
  void align_with_convolution(const ConvolutionGradientState& state);

  PrimitiveCache<ConvolutionTransposeShape, ConvolutionTransposePrimitive> transpose_primitives_;
};

// MPSCNNConvolutionTransposeGradient: the gradient of the transpose's source,
// weights and biases, computed with the weights its forward encode used.
class CNNConvolutionTransposeGradient : public CNNConvolutionGradient {
 public:
  CNNConvolutionTransposeGradient(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source);
  const char* class_name() const override { return "MPSCNNConvolutionTransposeGradient"; }

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  // Its data gradient runs before its weights gradient, which reads the source.
  InPlace in_place(bool) const override { return InPlace::None; }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  PrimitiveCache<ConvolutionTransposeShape, ConvolutionTransposePrimitive> transpose_primitives_;
};

}  // namespace mpsx

// MPSCNNConvolution and its relatives: the descriptor, the data source
// protocol, the weights and gradient states, the gradient kernel and the
// fully connected layer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpsx/buffer.h"
#include "mpsx/data_source.h"
#include "mpsx/errors.h"
#include "mpsx/kernel.h"
#include "mpsx/kernels/neuron.h"
#include "mpsx/kernels/optimizer.h"
#include "mpsx/pool.h"

namespace mpsx {

class Backend;
class ExecutionContext;

// MPSCNNConvolutionDescriptor.
// The filter window of a convolution problem and the zero padding around its
// source block: what every shape of the convolution families shares.
struct ConvolutionWindow {
  int64_t groups = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t kernel_height = 1, kernel_width = 1;
  int64_t stride_y = 1, stride_x = 1, dilation_y = 1, dilation_x = 1;

  bool operator==(const ConvolutionWindow& o) const;
};

struct ConvolutionDescriptor {
  int64_t kernel_width = 1, kernel_height = 1;
  int64_t input_feature_channels = 1, output_feature_channels = 1;
  int64_t stride_x = 1, stride_y = 1;
  int64_t dilation_x = 1, dilation_y = 1;
  int64_t groups = 1;
  // MPSCNNDepthWiseConvolutionDescriptor: groups equals the input channels,
  // whose weights [out][kernel_height][kernel_width] are OHWI with I = 1.
  bool depthwise = false;
  // MPSCNNSubPixelConvolutionDescriptor.subPixelScaleFactor r: the result's
  // output_feature_channels at each pixel become an r x r block of
  // output_feature_channels / r^2 channels; 1 for every other convolution.
  int64_t sub_pixel_scale_factor = 1;
  NeuronDescriptor fused_neuron;
  // setBatchNormalizationParametersForInferenceWithMean:variance:gamma:beta:epsilon:,
  // folded into the weights and biases a convolution loads from its data
  // source; one value per output feature channel each.
  bool batch_normalization = false;
  std::vector<float> batch_normalization_mean, batch_normalization_variance, batch_normalization_gamma,
      batch_normalization_beta;
  float batch_normalization_epsilon = 0.0f;

  // Throws ArgumentError for sizes outside 1..kMaxDimension or channel
  // counts that groups do not divide, ShapeError for a window extent above
  // kMaxDimension or weights whose count or bytes overflow.
  void validate() const;
  // Values of an OHWI weights array: [out][kernel_height][kernel_width][in / groups];
  // they and their bytes fit once validate() passed.
  size_t weight_count() const {
    return static_cast<size_t>(output_feature_channels * kernel_height * kernel_width *
                               (input_feature_channels / groups));
  }
  bool operator==(const ConvolutionDescriptor& o) const;
  // The descriptor's window, unpadded.
  ConvolutionWindow window() const;
};

// MPSCNNWeightsQuantizationType.
enum class WeightsQuantization : uint32_t { None = 0, Linear = 1, LookupTable = 2 };

class ConvolutionGradientState;
class ConvolutionWeightsAndBiasesState;
class ConvolutionWeightsCopy;

// MPSCNNConvolutionDataSource. Native (ConvolutionWeights) or a Python object
// (mpsx/_data_sources.h). The update methods are the optional part of the
// protocol; supports_*() says whether the source implements them.
class ConvolutionDataSource {
 public:
  virtual ~ConvolutionDataSource() = default;
  virtual bool load() = 0;
  virtual void purge() = 0;
  virtual ConvolutionDescriptor descriptor() = 0;
  virtual DataType data_type() = 0;
  virtual HostArray weights() = 0;
  // count 0: no bias.
  virtual HostArray bias_terms() = 0;
  virtual std::string label() = 0;
  // The precision the kernel computes with; float16 rounds the weights.
  virtual DataType kernel_weights_data_type() { return data_type(); }
  virtual WeightsQuantization weights_quantization_type() { return WeightsQuantization::None; }
  // 256 floats.
  virtual HostArray lookup_table_for_uint8_kernel() { return {}; }
  // {min, max} per output channel.
  virtual HostArray ranges_for_uint8_kernel() { return {}; }

  virtual bool supports_update() { return false; }
  // CPU-side update from synchronized gradients; true if the weights changed.
  virtual bool update(const std::shared_ptr<ConvolutionGradientState>& gradient_state,
                      const std::shared_ptr<ConvolutionWeightsAndBiasesState>& source_state) {
    return false;
  }
  virtual bool supports_update_on_command_buffer() { return false; }
  // GPU-side update encoded on the command buffer; the returned state holds
  // the new weights (null: no update).
  virtual std::shared_ptr<ConvolutionWeightsAndBiasesState> update_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<ConvolutionGradientState>& gradient_state,
      const std::shared_ptr<ConvolutionWeightsAndBiasesState>& source_state) {
    return nullptr;
  }
};

// What a convolution loads from its data source: float32 OHWI weights and
// biases (zeros without bias terms), checked against the descriptor.
struct ConvolutionParameters {
  ConvolutionDescriptor descriptor;
  std::vector<float> weights;
  std::vector<float> biases;
  std::string label;
};
// Calls load, descriptor, weights, bias_terms and purge; dequantizes uint8
// and rounds to float16 as the source asks. Throws ShapeError for arrays of
// the wrong size or shape.
ConvolutionParameters load_convolution_parameters(ConvolutionDataSource& source, const char* kernel);
// Throws ShapeError unless weights given with `shape` (empty for a flat
// array) are in the OHWI layout of `d`.
void check_weights_shape(const ConvolutionDescriptor& d, const std::vector<int64_t>& shape, const char* kernel);

// A data source held natively: ConvolutionWeights(descriptor, weights,
// biases, optimizer). With an optimizer it trains itself on the device:
// update_on_command_buffer encodes the optimizer from the weights the forward
// pass used into weights it holds on the optimizer's device, with the
// optimizer's vectors (momentum, ...) it keeps there, and returns them for the
// kernel to reload. A kernel's own update (update_in_place) writes into the
// kernel's buffers instead, which then hold the source's weights: the kernel
// needs no reload. Its weights then are the device's: host reads of them
// (weights(), weight_values(), ...) need the command buffer of the last update
// to have completed, and raise SynchronizationError before.
class ConvolutionWeights : public ConvolutionDataSource {
 public:
  // `weights_shape`: the dimensions the weights were given with, checked
  // as a data source's are. `biases`: one per output feature channel, or
  // none (MPS's biasTerms).
  ConvolutionWeights(ConvolutionDescriptor descriptor, std::vector<float> weights,
                     const std::vector<int64_t>& weights_shape, std::optional<std::vector<float>> biases,
                     std::string label, std::shared_ptr<NNOptimizer> optimizer = nullptr);
  bool load() override { return true; }
  void purge() override {}
  ConvolutionDescriptor descriptor() override { return descriptor_; }
  DataType data_type() override { return DataType::Float32; }
  HostArray weights() override;
  HostArray bias_terms() override;
  std::string label() override { return label_; }
  // New values in place of the current ones and of every update encoded
  // before (a convolution reads them at reload): checked as the
  // constructor's, with bias terms where the source has them.
  void set_weights_and_biases(std::vector<float> weights, const std::vector<int64_t>& weights_shape,
                              std::optional<std::vector<float>> biases);
  // Host copies of what the source holds now.
  const std::vector<float>& weight_values();
  const std::vector<float>& bias_values();

  const std::shared_ptr<NNOptimizer>& optimizer() const { return optimizer_; }
  // The optimizer's vectors (none without an optimizer), made zeroed on the
  // first call or update: read after the last update completed, written
  // before the next.
  KeptOptimizerVectors& optimizer_vectors();
  bool supports_update_on_command_buffer() override { return optimizer_ != nullptr; }
  std::shared_ptr<ConvolutionWeightsAndBiasesState> update_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<ConvolutionGradientState>& gradient_state,
      const std::shared_ptr<ConvolutionWeightsAndBiasesState>& source_state) override;
  // The update of a kernel that still holds the weights its forward pass
  // used (the gradient state's): the optimizer updates them in place (the
  // biases where the source has bias terms), and they hold the source's
  // weights from then on.
  void update_in_place(CommandBuffer& command_buffer, const std::shared_ptr<ConvolutionGradientState>& gradient_state);
  // Where the latest weights are in `weights` (a kernel's, updated in place),
  // copies of them, made on the command buffer, become the latest: the
  // kernel is about to write other weights there.
  void move_latest_out_of(CommandBuffer& command_buffer, const std::shared_ptr<Buffer>& weights);

 private:
  void set_values(std::vector<float> weights, std::optional<std::vector<float>> biases);
  // Copies the trained weights to the host copies if an update wrote them since.
  void read_trained();
  // Makes the optimizer's vectors on the first call.
  void prepare_training();
  // The optimizer from `from` into `into`, which then holds the source's weights.
  void encode_update(CommandBuffer& command_buffer, const std::shared_ptr<ConvolutionGradientState>& gradient_state,
                     const std::shared_ptr<ConvolutionWeightsAndBiasesState>& from,
                     const std::shared_ptr<ConvolutionWeightsAndBiasesState>& into);

  ConvolutionDescriptor descriptor_;
  std::vector<float> weights_, biases_;  // biases_ empty: none
  std::string label_;
  std::shared_ptr<NNOptimizer> optimizer_;
  std::shared_ptr<ConvolutionWeightsAndBiasesState> trained_;  // what update_on_command_buffer writes
  std::shared_ptr<ConvolutionWeightsAndBiasesState> latest_;   // what the last update wrote
  KeptOptimizerVectors optimizer_vectors_;
  bool training_prepared_ = false;
  bool trained_on_device_ = false;  // latest_ holds the values: an update was encoded since they were set
};

// MPSCNNConvolutionWeightsAndBiasesState: float32 OHWI weights and biases.
class ConvolutionWeightsAndBiasesState : public State {
 public:
  ConvolutionWeightsAndBiasesState(std::shared_ptr<Buffer> weights, std::shared_ptr<Buffer> biases,
                                   size_t weights_offset = 0, size_t biases_offset = 0);
  // initWithWeights:weightsOffset:biases:biasesOffset:cnnConvolutionDescriptor:
  // the filter's values from the offsets on, in buffers that may hold more.
  // Throws ArgumentError for offsets not a multiple of 4 and ShapeError for
  // buffers too short.
  ConvolutionWeightsAndBiasesState(std::shared_ptr<Buffer> weights, std::shared_ptr<Buffer> biases,
                                   size_t weights_offset, size_t biases_offset, const ConvolutionDescriptor& descriptor);
  // New buffers sized for `descriptor`; their values are whatever the pool's held.
  ConvolutionWeightsAndBiasesState(std::shared_ptr<Device> device, const ConvolutionDescriptor& descriptor);
  const char* class_name() const override { return "MPSCNNConvolutionWeightsAndBiasesState"; }
  void synchronize(CommandBuffer& command_buffer) override;
  // Throws ShapeError unless the buffers hold `descriptor`'s weights and biases.
  void check_fits(const ConvolutionDescriptor& descriptor, const char* kernel) const;

  const std::shared_ptr<Buffer>& weights() const { return weights_; }
  const std::shared_ptr<Buffer>& biases() const { return biases_; }
  size_t weights_offset() const { return weights_offset_; }
  size_t biases_offset() const { return biases_offset_; }

 private:
  std::shared_ptr<Buffer> weights_, biases_;
  size_t weights_offset_ = 0, biases_offset_ = 0;
  // The filter's byte counts where made with a descriptor; 0: the buffers
  // past the offsets hold exactly the filter.
  size_t weights_bytes_ = 0, biases_bytes_ = 0;
};

class CNNConvolution;

// MPSCNNConvolutionGradientState: the gradients of the weights and biases,
// batch sums, plus what the forward encode used (its weights, and the result
// before the fused neuron) so the gradient matches the forward exactly.
class ConvolutionGradientState : public GradientState {
 public:
  ConvolutionGradientState(std::shared_ptr<const CNNConvolution> convolution);
  const char* class_name() const override { return "MPSCNNConvolutionGradientState"; }
  void synchronize(CommandBuffer& command_buffer) override;
  bool shares_memory(const Image& image) const override;
  void append_trainable_gradients(std::vector<std::shared_ptr<Buffer>>& gradients) const override {
    gradients.push_back(gradient_for_weights_);
    if (gradient_for_biases_) gradients.push_back(gradient_for_biases_);
  }

  const std::shared_ptr<const CNNConvolution>& convolution() const { return convolution_; }
  const std::shared_ptr<Buffer>& gradient_for_weights() const { return gradient_for_weights_; }
  const std::shared_ptr<Buffer>& gradient_for_biases() const { return gradient_for_biases_; }

  // Set by the forward encode.
  std::shared_ptr<Buffer> weights, biases;
  std::shared_ptr<ConvolutionWeightsCopy> weights_copy;
  std::shared_ptr<Image> pre_activation;

 private:
  std::shared_ptr<const CNNConvolution> convolution_;
  std::shared_ptr<Buffer> gradient_for_weights_, gradient_for_biases_;
};

// MPSNNConvolutionAccumulatorPrecisionOption.
enum class AccumulatorPrecision : uint32_t { Half = 0, Float = 1 };

// One convolution problem as a backend runs it: the block of the source read
// (inside the image), its zero padding, the destination block and the filter.
struct ConvolutionShape : ConvolutionWindow {
  int64_t images = 0, input_channels = 0, output_channels = 0;
  int64_t source_height = 0, source_width = 0;
  int64_t height = 0, width = 0;
  ImageLayout source_stride, destination_stride;
  DataType source_type = DataType::Float32, destination_type = DataType::Float32;
  bool gradient = false;  // a primitive for the backward passes
  // Half lets a backend use reduced-precision products (cuda: TF32 tensor cores).
  AccumulatorPrecision accumulator_precision = AccumulatorPrecision::Float;
  // A sub-pixel convolution (r > 1; forward only): height and width are the
  // intermediate result's, whose r x r blocks the forward pass writes into
  // the destination region, output_channels / r^2 deep, cut where the region
  // ends. Its fused neuron applies to the intermediate result, whose
  // output_channels its per-channel parameters index, so the primitive applies
  // it (null: none); core applies every other convolution's.
  int64_t sub_pixel_scale_factor = 1;
  std::shared_ptr<const NeuronDescriptor> sub_pixel_neuron;

  bool operator==(const ConvolutionShape& o) const;
};

// A sub-pixel convolution on backends whose regions are memory (cpu, cuda):
// the regular convolution of intermediate_shape() writes the intermediate
// result, dense in scratch; the fused neuron applies there; r x r strided
// copies then rearrange it into the destination region as
// MPSCNNSubPixelConvolutionDescriptor says.
class SubPixelConvolution {
 public:
  SubPixelConvolution(Backend& backend, const ConvolutionShape& shape);
  const ConvolutionShape& intermediate_shape() const { return intermediate_; }
  size_t intermediate_bytes() const;
  // The intermediate result in scratch at `data`.
  ImageRegion intermediate(void* data) const;
  // Applies the neuron to `intermediate` and calls copy(from, to) with the
  // intermediate channels and the destination pixels of each r x r phase.
  template <class Copy>
  void rearrange(ExecutionContext& context, const ImageRegion& intermediate, const ImageRegion& destination,
                 Copy copy) const;

 private:
  ConvolutionShape intermediate_;
  int64_t r_;
  std::shared_ptr<const NeuronPrimitive> neuron_;
};

template <class Copy>
void SubPixelConvolution::rearrange(ExecutionContext& context, const ImageRegion& intermediate,
                                    const ImageRegion& destination, Copy copy) const {
  if (neuron_) neuron_->forward(context, intermediate, intermediate, 0);
  // Destination pixel (r * i + a, r * j + b) of the region, channel c, is
  // intermediate pixel (i, j), channel (N / r^2) * (r * a + b) + c.
  const size_t from_element = size_of(intermediate.data_type), to_element = size_of(destination.data_type);
  for (int64_t a = 0; a < r_ && a < destination.h; ++a)
    for (int64_t b = 0; b < r_ && b < destination.w; ++b) {
      ImageRegion from = intermediate, to = destination;
      from.data = static_cast<char*>(intermediate.data) +
                  (r_ * a + b) * destination.c * intermediate.stride.c * static_cast<int64_t>(from_element);
      from.c = destination.c;
      to.data = static_cast<char*>(destination.data) +
                (a * destination.stride.h + b * destination.stride.w) * static_cast<int64_t>(to_element);
      to.stride.h *= r_;
      to.stride.w *= r_;
      from.h = to.h = (destination.h - a + r_ - 1) / r_;
      from.w = to.w = (destination.w - b + r_ - 1) / r_;
      copy(from, to);
    }
}

// The passes a backend runs for a convolution or a transposed convolution
// (D: ConvolutionShape, ConvolutionTransposeShape); weights float32 OHWI,
// biases [out].
// Throws unless `state` is a gradient state S (named `state_class`) that
// `kernel` made: the states a convolution or convolution transpose takes at
// its forward encode.
template <class S, class Kernel>
void check_own_gradient_state(const Kernel& kernel, const State& state, const char* state_class) {
  auto* s = dynamic_cast<const S*>(&state);
  if (!s) fail<TypeMismatchError>(kernel.class_name(), ": expected an ", state_class, ", given an ", state.class_name());
  if (s->convolution().get() != &kernel)
    fail<StateError>(kernel.class_name(), ": the ", state_class, " was made by another kernel");
}

template <class D>
class ConvolutionPasses : public PrimitiveInterface<D> {
 public:
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const void* weights,
                       const void* biases, const ImageRegion& destination) const = 0;
  // source_gradient (the gradient of the forward source block) from the
  // gradient of the forward result. The result does not depend on `source`,
  // the forward source block; backends whose gradient kernels take it (MPS)
  // pass it on.
  virtual void backward_data(ExecutionContext& context, const ImageRegion& result_gradient, const ImageRegion& source,
                             const void* weights, const ImageRegion& source_gradient) const = 0;
  // Batch sums; either output may be null.
  virtual void backward_weights(ExecutionContext& context, const ImageRegion& source,
                                const ImageRegion& result_gradient, void* weights_gradient,
                                void* biases_gradient) const = 0;
  // The type of the OHWI weights forward and backward_data take: float32,
  // or float16 where the backend's passes read float16 filters, which a
  // convolution kernel then keeps beside its float32 weights
  // (ConvolutionWeightsCopy) rather than converting them on every pass.
  virtual DataType weights_type() const { return DataType::Float32; }
  // Writes `count` float32 weights into `to` as weights_type(), ordered on
  // the context (for a weights_type() other than float32).
  virtual void convert_weights(ExecutionContext& /*context*/, const float* /*weights*/, void* /*to*/,
                               int64_t /*count*/) const {}
};

class ConvolutionPrimitive : public ConvolutionPasses<ConvolutionShape> {
 public:
  static constexpr const char* family = "convolution";
};

// A convolution kernel's float32 weights in the type its primitives' passes
// read (ConvolutionPasses::weights_type), made at the first encode whose
// primitive reads another type. Every command that writes the weights
// brings the copy up to date on the device (refresh), once it exists, and
// a pass converts the weights itself only where no command has since the
// copy was made; both are decided as commands run, in the order their work
// runs, so that command buffers committed in another order than they were
// encoded, and replayed ones, read the weights as they are. A command that
// wrote the weights before the copy existed may run again as a CUDA graph
// captured then, which refreshes nothing: from then on every pass converts.
class ConvolutionWeightsCopy {
 public:
  ConvolutionWeightsCopy(std::shared_ptr<Buffer> weights, int64_t count) : weights_(std::move(weights)), count_(count) {}
  // At encode: makes the copy if `primitive` reads weights of another type.
  void make_for(const std::shared_ptr<const ConvolutionPrimitive>& primitive);
  // As a command runs: the weights as `primitive` takes them.
  const void* for_primitive(ExecutionContext& context, const ConvolutionPrimitive& primitive);
  // As a command that wrote the weights runs, after it has: the copy, if
  // there is one, made current.
  void refresh(ExecutionContext& context);

 private:
  // The copy made current (lock_ held).
  void convert(ExecutionContext& context);

  std::shared_ptr<Buffer> weights_;
  int64_t count_;
  mutable detail::SpinLock lock_;
  std::shared_ptr<Buffer> copy_;                         // guarded by lock_
  std::shared_ptr<const ConvolutionPrimitive> writer_;  // converts into copy_; guarded by lock_
  bool current_ = false;                                // copy_ holds the weights; guarded by lock_
  bool written_before_copy_ = false;                    // guarded by lock_
};

// The descriptor of the block `geometry` writes, for intermediate results.
ImageDescriptor block_descriptor(DataType type, const Geometry& geometry, int64_t channels);


class CNNConvolution : public UnaryKernel {
 public:
  CNNConvolution(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source);
  const char* class_name() const override { return "MPSCNNConvolution"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

  const ConvolutionDescriptor& descriptor() const { return descriptor_; }
  const std::shared_ptr<ConvolutionDataSource>& data_source() const { return data_source_; }
  AccumulatorPrecision accumulator_precision = AccumulatorPrecision::Float;

  // CPU side: loads the data source's current weights. Commands encoded
  // before keep the weights they were encoded with.
  void reload_weights_and_biases_from_data_source();
  // GPU side: copies the state's weights in, ordered on the command buffer.
  void reload_weights_and_biases(CommandBuffer& command_buffer, const ConvolutionWeightsAndBiasesState& state);
  // Copies the current weights out into a new state, ordered on the command buffer.
  std::shared_ptr<ConvolutionWeightsAndBiasesState> export_weights_and_biases(CommandBuffer& command_buffer);
  // The weight update of MPS's training styles, for hand-encoded training: a
  // data source with update_on_command_buffer encodes its update now and the
  // kernel reloads the state it returns, on the command buffer (a native
  // ConvolutionWeights updates the kernel's buffers in place, when they hold
  // the weights the forward pass used, and keeps a copy of them when the
  // kernel reloads others); one with
  // update is called once the command buffer has completed, with the
  // synchronized gradients, and the kernel then reloads from it. An update
  // that throws fails the command buffer and leaves the weights as they were.
  // Without `on_command_buffer` (the graph's training style Cpu) the host
  // update runs even where the data source has the other.
  void encode_weights_and_bias_update(CommandBuffer& command_buffer,
                                      const std::shared_ptr<ConvolutionGradientState>& gradient_state,
                                      bool on_command_buffer = true);

 protected:
  std::shared_ptr<State> new_result_state(const Image& source) override;
  Window window() const override;
  // A sub-pixel convolution's is r times the padding policy's size.
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  int64_t source_channels(const Image&) const override { return descriptor_.input_feature_channels; }
  // N / r^2 for a sub-pixel convolution.
  int64_t destination_channels(const Image&) const override {
    const int64_t r = descriptor_.sub_pixel_scale_factor;
    return descriptor_.output_feature_channels / (r * r);
  }
  void check_state(const State& state) const override;
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

  // For kernels that share the weights and updates of a convolution;
  // `kernel` names them in the data source's errors.
  CNNConvolution(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source,
                 const char* kernel);

  struct Parameters {
    std::shared_ptr<Buffer> weights, biases;
    std::shared_ptr<ConvolutionWeightsCopy> weights_copy;  // of weights
  };
  // Updates from a command buffer's host step may swap the buffers while
  // another thread encodes.
  Parameters parameters() const;
  // The result before the fused neuron, which the gradient needs: scratch of
  // the block `g` writes where a gradient state is filled and a neuron fused,
  // else null.
  std::shared_ptr<Image> pre_activation_for(const ConvolutionGradientState* state, DataType type,
                                            const Geometry& g) const;
  // parameters(), kept in `state` (may be null) with `pre_activation` for
  // the gradient.
  Parameters parameters_for(ConvolutionGradientState* state, std::shared_ptr<Image> pre_activation) const;

  ConvolutionDescriptor descriptor_;
  // The fused neuron core applies; a sub-pixel convolution's primitive
  // applies its own (ConvolutionShape::sub_pixel_neuron).
  std::shared_ptr<const NeuronPrimitive> neuron_;
  std::shared_ptr<const NeuronDescriptor> sub_pixel_neuron_;

 private:
  void set_parameters(const ConvolutionParameters& parameters);

  std::shared_ptr<ConvolutionDataSource> data_source_;
  mutable detail::SpinLock parameters_lock_;
  std::shared_ptr<Buffer> weights_, biases_;
  std::shared_ptr<ConvolutionWeightsCopy> weights_copy_;
  PrimitiveCache<ConvolutionShape, ConvolutionPrimitive> primitives_;
};

// MPSCNNFullyConnected: a convolution whose window is the whole source image,
// producing 1x1 results; offset and padding do not apply.
class CNNFullyConnected : public CNNConvolution {
 public:
  CNNFullyConnected(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source);
  const char* class_name() const override { return "MPSCNNFullyConnected"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  void check_source(const Image& source) const override;
  ImageDescriptor destination_descriptor(const Image& source, const State* source_state) override;
  Offset source_offset() const override;
};

// MPSCNNConvolutionGradientOption.
enum class ConvolutionGradientOption : uint32_t { Data = 1, WeightsAndBias = 2, All = 3 };

// MPSCNNConvolutionGradient. It computes with the weights the forward encode
// used, which its gradient state carries, so it needs no weights of its own.
class CNNConvolutionGradient : public GradientKernel {
 public:
  CNNConvolutionGradient(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source);
  const char* class_name() const override { return "MPSCNNConvolutionGradient"; }
  // It writes the weight and bias gradients into the gradient state.
  bool is_state_modified() const override { return true; }

  const ConvolutionDescriptor& descriptor() const { return descriptor_; }
  const std::shared_ptr<ConvolutionDataSource>& data_source() const { return data_source_; }
  ConvolutionGradientOption gradient_option = ConvolutionGradientOption::All;
  // The secondary (forward source) window is the forward convolution's.
  int64_t kernel_width(bool secondary) const override { return secondary ? descriptor_.kernel_width : 1; }
  int64_t kernel_height(bool secondary) const override { return secondary ? descriptor_.kernel_height : 1; }
  int64_t dilation_rate_x(bool secondary) const override { return secondary ? descriptor_.dilation_x : 1; }
  int64_t dilation_rate_y(bool secondary) const override { return secondary ? descriptor_.dilation_y : 1; }
  // encode, for a training graph whose updates run as overlapped work: the
  // weights gradient recorded as overlapped work too
  // (CommandBuffer::record_overlapped), after the data gradient, so that
  // the rest of the backward pass does not wait for it. The caller keeps
  // the images it reads unwritten until it joins that work.
  std::shared_ptr<Image> encode_weights_overlapped(CommandBuffer& command_buffer,
                                                   const std::shared_ptr<Image>& source_gradient,
                                                   const std::shared_ptr<Image>& source_image,
                                                   const std::shared_ptr<State>& gradient_state);

 protected:
  const GradientState& gradient_state_of(const State& state) const override;
  // The data gradient reads the source gradient around each pixel, unless a
  // fused neuron's gradient first takes it to scratch; it never reads the
  // forward source, whose weights gradient runs first when overwritten.
  InPlace in_place(bool secondary) const override {
    return secondary || neuron_ || !computes_data() ? InPlace::Any : InPlace::None;
  }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

  // What gradient_option asks for.
  bool computes_data() const {
    return static_cast<uint32_t>(gradient_option) & static_cast<uint32_t>(ConvolutionGradientOption::Data);
  }
  bool computes_weights() const {
    return static_cast<uint32_t>(gradient_option) & static_cast<uint32_t>(ConvolutionGradientOption::WeightsAndBias);
  }
  // Scratch for the gradient at the result before the fused neuron, where
  // the forward pass kept its pre-activation (`g`'s block of `type`), else null.
  std::shared_ptr<Image> result_gradient_scratch(const ConvolutionGradientState& state, DataType type,
                                                 const Geometry& g) const;
  // In the command: the gradient at the convolution's result, `incoming`, or
  // with a fused neuron its gradient through the neuron into `scratch`.
  static ImageRegion gradient_before_neuron(ExecutionContext& context, const NeuronPrimitive* neuron,
                                            const ConvolutionGradientState& state, const ImageRegion& incoming,
                                            const Image* scratch);
  // The weights and biases gradients the command writes, where it computes them.
  void will_write_weights_gradients(CommandBuffer& command_buffer, const ConvolutionGradientState& state) const;

  std::shared_ptr<const NeuronPrimitive> neuron_;
  // Set by encode_weights_overlapped while it encodes (a graph's kernel,
  // encoded under the graph's lock).
  bool weights_overlapped_ = false;

 private:
  std::shared_ptr<ConvolutionDataSource> data_source_;
  ConvolutionDescriptor descriptor_;
  PrimitiveCache<ConvolutionShape, ConvolutionPrimitive> primitives_;
};

// MPSCNNFullyConnectedGradient.
class CNNFullyConnectedGradient : public CNNConvolutionGradient {
 public:
  using CNNConvolutionGradient::CNNConvolutionGradient;
  const char* class_name() const override { return "MPSCNNFullyConnectedGradient"; }
};

}  // namespace mpsx

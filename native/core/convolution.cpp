#include "mpsx/kernels/convolution.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/half.h"
#include "mpsx/pool.h"
#include "mpsx/registry.h"

namespace mpsx {

void ConvolutionDescriptor::validate() const {
  const char* name = "MPSCNNConvolutionDescriptor";
  Window{kernel_width, kernel_height, stride_x, stride_y, dilation_x, dilation_y}.check(name);
  check_size(input_feature_channels, name, ": input_feature_channels");
  check_size(output_feature_channels, name, ": output_feature_channels");
  check_size(groups, name, ": groups");
  if (depthwise && output_feature_channels % input_feature_channels != 0)
    fail<ArgumentError>("a depthwise convolution's output feature channels (", output_feature_channels,
                        ") must be a multiple of its input feature channels (", input_feature_channels, ")");
  if (input_feature_channels % groups != 0 || output_feature_channels % groups != 0)
    fail<ArgumentError>("groups (", groups, ") must divide the input (", input_feature_channels, ") and output (",
                        output_feature_channels, ") feature channels");
  check_size(sub_pixel_scale_factor, name, ": sub_pixel_scale_factor");
  if (output_feature_channels % (sub_pixel_scale_factor * sub_pixel_scale_factor) != 0)
    fail<ArgumentError>("a sub-pixel convolution's output feature channels (", output_feature_channels,
                        ") must be a multiple of sub_pixel_scale_factor squared (", sub_pixel_scale_factor, "^2 = ",
                        sub_pixel_scale_factor * sub_pixel_scale_factor, ")");
  if (depthwise && groups != input_feature_channels)
    fail<ArgumentError>("a depthwise convolution has one group per input feature channel (", input_feature_channels,
                        "); given groups ", groups);
  const int64_t weights =
      checked_count({output_feature_channels, kernel_height, kernel_width, input_feature_channels / groups}, name,
                    ": the weight count (OHWI)");
  checked_bytes(weights, sizeof(float), name, ": the byte count of ", weights, " float32 weights");
  fused_neuron.validate();
  if (batch_normalization)
    for (const auto* values : {&batch_normalization_mean, &batch_normalization_variance, &batch_normalization_gamma,
                               &batch_normalization_beta})
      if (static_cast<int64_t>(values->size()) != output_feature_channels)
        fail<ArgumentError>("the batch normalization parameters hold ", values->size(), " values each; the "
                            "convolution has ", output_feature_channels, " output feature channels");
  if (fused_neuron.type == NeuronType::PReLU &&
      static_cast<int64_t>(fused_neuron.a_per_channel.size()) != output_feature_channels)
    fail<ArgumentError>("the fused PReLU neuron has ", fused_neuron.a_per_channel.size(), " slopes; the convolution has ",
                        output_feature_channels, " output feature channels");
}

bool ConvolutionDescriptor::operator==(const ConvolutionDescriptor& o) const {
  return kernel_width == o.kernel_width && kernel_height == o.kernel_height &&
         input_feature_channels == o.input_feature_channels &&
         output_feature_channels == o.output_feature_channels && stride_x == o.stride_x && stride_y == o.stride_y &&
         dilation_x == o.dilation_x && dilation_y == o.dilation_y && groups == o.groups &&
         depthwise == o.depthwise && sub_pixel_scale_factor == o.sub_pixel_scale_factor &&
         fused_neuron == o.fused_neuron && batch_normalization == o.batch_normalization &&
         batch_normalization_mean == o.batch_normalization_mean &&
         batch_normalization_variance == o.batch_normalization_variance &&
         batch_normalization_gamma == o.batch_normalization_gamma &&
         batch_normalization_beta == o.batch_normalization_beta &&
         batch_normalization_epsilon == o.batch_normalization_epsilon;
}

ConvolutionWindow ConvolutionDescriptor::window() const {
  ConvolutionWindow w;
  w.groups = groups;
  w.kernel_height = kernel_height;
  w.kernel_width = kernel_width;
  w.stride_y = stride_y;
  w.stride_x = stride_x;
  w.dilation_y = dilation_y;
  w.dilation_x = dilation_x;
  return w;
}

bool ConvolutionWindow::operator==(const ConvolutionWindow& o) const {
  auto fields = [](const ConvolutionWindow& w) {
    return std::tie(w.groups, w.pad_top, w.pad_left, w.pad_bottom, w.pad_right, w.kernel_height, w.kernel_width,
                    w.stride_y, w.stride_x, w.dilation_y, w.dilation_x);
  };
  return fields(*this) == fields(o);
}

bool ConvolutionShape::operator==(const ConvolutionShape& o) const {
  auto same = [](const ImageLayout& a, const ImageLayout& b) {
    return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w;
  };
  return ConvolutionWindow::operator==(o) && images == o.images && input_channels == o.input_channels &&
         output_channels == o.output_channels && source_height == o.source_height &&
         source_width == o.source_width && height == o.height && width == o.width &&
         same(source_stride, o.source_stride) &&
         same(destination_stride, o.destination_stride) && source_type == o.source_type &&
         destination_type == o.destination_type && gradient == o.gradient &&
         accumulator_precision == o.accumulator_precision && sub_pixel_scale_factor == o.sub_pixel_scale_factor &&
         (sub_pixel_neuron == o.sub_pixel_neuron ||
          (sub_pixel_neuron && o.sub_pixel_neuron && *sub_pixel_neuron == *o.sub_pixel_neuron));
}

SubPixelConvolution::SubPixelConvolution(Backend& backend, const ConvolutionShape& shape)
    : intermediate_(shape), r_(shape.sub_pixel_scale_factor) {
  intermediate_.sub_pixel_scale_factor = 1;
  intermediate_.sub_pixel_neuron = nullptr;
  const int64_t c = shape.output_channels, h = shape.height, w = shape.width;
  intermediate_.destination_stride = ImageLayout{h * w * c, 1, w * c, c};
  if (shape.sub_pixel_neuron)
    neuron_ = std::shared_ptr<const NeuronPrimitive>(make_primitive<NeuronPrimitive>(backend, *shape.sub_pixel_neuron));
}

size_t SubPixelConvolution::intermediate_bytes() const {
  const ConvolutionShape& s = intermediate_;
  return static_cast<size_t>(s.images * s.output_channels * s.height * s.width) * size_of(s.destination_type);
}

ImageRegion SubPixelConvolution::intermediate(void* data) const {
  const ConvolutionShape& s = intermediate_;
  return ImageRegion{data, s.destination_type, s.images, s.output_channels, s.height, s.width, s.destination_stride};
}

// ---------------------------------------------------------------- data sources

namespace {

float value_of(const HostArray& a, size_t i) {
  switch (a.type) {
    case DataType::Float32: return static_cast<const float*>(a.data)[i];
    case DataType::Float16: return half_to_float(static_cast<const uint16_t*>(a.data)[i]);
    case DataType::BFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(a.data)[i]);
    case DataType::UInt8: return static_cast<const uint8_t*>(a.data)[i];
  }
  return 0;
}

}  // namespace

void check_weights_shape(const ConvolutionDescriptor& d, const std::vector<int64_t>& shape, const char* kernel) {
  if (shape.size() <= 1) return;
  // PyTorch's OIHW layout has as many values: taken for OHWI it would
  // scramble the filter.
  const std::vector<int64_t> ohwi{d.output_feature_channels, d.kernel_height, d.kernel_width,
                                  d.input_feature_channels / d.groups};
  if (shape == ohwi) return;
  std::ostringstream given;
  for (size_t i = 0; i < shape.size(); ++i) given << (i ? ", " : "") << shape[i];
  const bool oihw = shape == std::vector<int64_t>{ohwi[0], ohwi[3], ohwi[1], ohwi[2]};
  fail<ShapeError>(kernel, ": expected weights of shape (", ohwi[0], ", ", ohwi[1], ", ", ohwi[2], ", ", ohwi[3],
                   ") (OHWI: output channels, kernel height, kernel width, input channels / groups) or flat; given ",
                   "shape (", given.str(), ")",
                   oihw ? "; that is PyTorch's OIHW layout: pass weight.transpose(0, 2, 3, 1) (numpy) or "
                          "weight.permute(0, 2, 3, 1) (torch)"
                        : "");
}

ConvolutionParameters load_convolution_parameters(ConvolutionDataSource& source, const char* kernel) {
  Loaded<ConvolutionDataSource> loaded(source, kernel);
  ConvolutionParameters p;
  p.descriptor = source.descriptor();
  p.descriptor.validate();
  const ConvolutionDescriptor& d = p.descriptor;
  const size_t count = d.weight_count();

  HostArray w = source.weights();
  check_weights_shape(d, w.shape, kernel);
  if (w.count != count)
    fail<ShapeError>(kernel, ": the data source's weights hold ", w.count, " values; a ", d.output_feature_channels,
                     "x", d.kernel_height, "x", d.kernel_width, "x", d.input_feature_channels / d.groups,
                     " (OHWI) filter needs ", count);
  DataType declared = source.data_type();
  if (w.type != declared)
    fail<TypeMismatchError>(kernel, ": the data source's data_type is ", name_of(declared), " but its weights are ",
                            name_of(w.type));
  p.weights.resize(count);
  if (w.type == DataType::UInt8) {
    const size_t per_output = count / static_cast<size_t>(d.output_feature_channels);
    switch (source.weights_quantization_type()) {
      case WeightsQuantization::LookupTable: {
        HostArray table = source.lookup_table_for_uint8_kernel();
        if (table.count != 256 || table.type != DataType::Float32)
          fail<ShapeError>(kernel, ": lookup_table_for_uint8_kernel() must give 256 float32 values; given ",
                           table.count, " ", name_of(table.type));
        const float* t = static_cast<const float*>(table.data);
        for (size_t i = 0; i < count; ++i) p.weights[i] = t[static_cast<const uint8_t*>(w.data)[i]];
        break;
      }
      case WeightsQuantization::Linear: {
        HostArray ranges = source.ranges_for_uint8_kernel();
        if (ranges.count != 2 * static_cast<size_t>(d.output_feature_channels) || ranges.type != DataType::Float32)
          fail<ShapeError>(kernel, ": ranges_for_uint8_kernel() must give ", d.output_feature_channels,
                           " (min, max) float32 pairs; given ", ranges.count, " ", name_of(ranges.type), " values");
        const float* r = static_cast<const float*>(ranges.data);
        for (size_t i = 0; i < count; ++i) {
          size_t o = i / per_output;
          float unorm = static_cast<const uint8_t*>(w.data)[i] / 255.0f;
          p.weights[i] = unorm * (r[2 * o + 1] - r[2 * o]) + r[2 * o];
        }
        break;
      }
      case WeightsQuantization::None:
        fail<ArgumentError>(kernel, ": uint8 weights need weights_quantization_type \"linear\" or \"lookup_table\"");
    }
  } else if (w.type == DataType::Float32 || w.type == DataType::Float16) {
    for (size_t i = 0; i < count; ++i) p.weights[i] = value_of(w, i);
  } else {
    fail<TypeMismatchError>(kernel, ": weights must be float32, float16 or uint8; given ", name_of(w.type));
  }

  HostArray b = source.bias_terms();
  p.biases.assign(static_cast<size_t>(d.output_feature_channels), 0.0f);
  // MPS's biasTerms: nil, or one float per output feature channel.
  if (!b.none()) {
    if (b.count != p.biases.size() || b.type != DataType::Float32)
      fail<ShapeError>(kernel, ": the data source's bias_terms hold ", b.count, " ", name_of(b.type),
                       " values; expected ", p.biases.size(), " float32");
    std::memcpy(p.biases.data(), b.data, p.biases.size() * sizeof(float));
  }
  if (d.batch_normalization) {
    // The header's fold: I = gamma / sqrt(variance + epsilon),
    // J = beta - I * mean; W = w * I, B = b * I + J per output channel.
    const size_t per_output = count / static_cast<size_t>(d.output_feature_channels);
    for (size_t o = 0; o < p.biases.size(); ++o) {
      const float i = d.batch_normalization_gamma[o] /
                      std::sqrt(d.batch_normalization_variance[o] + d.batch_normalization_epsilon);
      for (size_t k = 0; k < per_output; ++k) p.weights[o * per_output + k] *= i;
      p.biases[o] = p.biases[o] * i + (d.batch_normalization_beta[o] - i * d.batch_normalization_mean[o]);
    }
  }
  if (source.kernel_weights_data_type() == DataType::Float16)
    for (float& v : p.weights) v = half_to_float(float_to_half(v));
  p.label = source.label();
  return p;
}

ConvolutionWeights::ConvolutionWeights(ConvolutionDescriptor descriptor, std::vector<float> weights,
                                       const std::vector<int64_t>& weights_shape,
                                       std::optional<std::vector<float>> biases,
                                       std::string label, std::shared_ptr<NNOptimizer> optimizer)
    : descriptor_(std::move(descriptor)), label_(std::move(label)), optimizer_(std::move(optimizer)) {
  descriptor_.validate();
  check_weights_shape(descriptor_, weights_shape, "ConvolutionWeights");
  set_values(std::move(weights), std::move(biases));
}

void ConvolutionWeights::set_weights_and_biases(std::vector<float> weights, const std::vector<int64_t>& weights_shape,
                                                std::optional<std::vector<float>> biases) {
  check_weights_shape(descriptor_, weights_shape, "ConvolutionWeights");
  if (biases.has_value() == biases_.empty())
    fail<ShapeError>("ConvolutionWeights: expected ", biases_.empty() ? "no biases (it has no bias terms)" : "biases",
                     ", given ", biases ? "biases" : "None");
  set_values(std::move(weights), std::move(biases));
}

void ConvolutionWeights::set_values(std::vector<float> weights, std::optional<std::vector<float>> biases) {
  if (weights.size() != descriptor_.weight_count())
    fail<ShapeError>("ConvolutionWeights: expected ", descriptor_.weight_count(), " weights (",
                     descriptor_.output_feature_channels, "x", descriptor_.kernel_height, "x",
                     descriptor_.kernel_width, "x", descriptor_.input_feature_channels / descriptor_.groups,
                     " OHWI), given ", weights.size());
  if (biases && biases->size() != static_cast<size_t>(descriptor_.output_feature_channels))
    fail<ShapeError>("ConvolutionWeights: expected ", descriptor_.output_feature_channels, " biases or None, given ",
                     biases->size());
  weights_ = std::move(weights);
  biases_ = biases ? std::move(*biases) : std::vector<float>{};
  trained_on_device_ = false;
}

// Each read: a replay of the last update's command buffer trains them again.
void ConvolutionWeights::read_trained() {
  if (!trained_on_device_) return;
  const char* what = "the weights of a ConvolutionWeights trained on the device";
  latest_->weights()->read(weights_.data(), latest_->weights_offset(), weights_.size() * sizeof(float), what);
  if (latest_->biases())
    latest_->biases()->read(biases_.data(), latest_->biases_offset(), biases_.size() * sizeof(float), what);
}

const std::vector<float>& ConvolutionWeights::weight_values() {
  read_trained();
  return weights_;
}

const std::vector<float>& ConvolutionWeights::bias_values() {
  read_trained();
  return biases_;
}

HostArray ConvolutionWeights::weights() {
  read_trained();
  return HostArray{weights_.data(), weights_.size(), DataType::Float32, {}, {}};
}

HostArray ConvolutionWeights::bias_terms() {
  read_trained();
  if (biases_.empty()) return HostArray{};  // none
  return HostArray{biases_.data(), biases_.size(), DataType::Float32, {}, {}};
}

void ConvolutionWeights::prepare_training() {
  if (training_prepared_ || !optimizer_) return;
  // Without bias terms the optimizer's lists have the weights' vectors alone.
  std::vector<size_t> counts{weights_.size()};
  if (!biases_.empty()) counts.push_back(biases_.size());
  optimizer_vectors_ = KeptOptimizerVectors(*optimizer_, counts);
  training_prepared_ = true;
}

KeptOptimizerVectors& ConvolutionWeights::optimizer_vectors() {
  prepare_training();
  return optimizer_vectors_;
}

std::shared_ptr<ConvolutionWeightsAndBiasesState> ConvolutionWeights::update_on_command_buffer(
    CommandBuffer& command_buffer, const std::shared_ptr<ConvolutionGradientState>& gradient_state,
    const std::shared_ptr<ConvolutionWeightsAndBiasesState>& source_state) {
  if (!trained_) {
    // Every update writes all of it: without bias terms it has no biases.
    const std::shared_ptr<Device>& device = optimizer_->device_ptr();
    trained_ = std::make_shared<ConvolutionWeightsAndBiasesState>(
        std::make_shared<Buffer>(device, weights_.size() * sizeof(float)),
        biases_.empty() ? nullptr : std::make_shared<Buffer>(device, biases_.size() * sizeof(float)));
  }
  encode_update(command_buffer, gradient_state, source_state, trained_);
  return trained_;
}

void ConvolutionWeights::update_in_place(CommandBuffer& command_buffer,
                                         const std::shared_ptr<ConvolutionGradientState>& gradient_state) {
  auto used = make_pooled<ConvolutionWeightsAndBiasesState>(gradient_state->weights,
                                                            biases_.empty() ? nullptr : gradient_state->biases);
  encode_update(command_buffer, gradient_state, used, used);
}

void ConvolutionWeights::move_latest_out_of(CommandBuffer& command_buffer, const std::shared_ptr<Buffer>& weights) {
  if (!latest_ || latest_->weights() != weights) return;
  const std::shared_ptr<Device>& device = optimizer_->device_ptr();
  auto copy = std::make_shared<ConvolutionWeightsAndBiasesState>(
      std::make_shared<Buffer>(device, weights_.size() * sizeof(float)),
      latest_->biases() ? std::make_shared<Buffer>(device, biases_.size() * sizeof(float)) : nullptr);
  command_buffer.record(keyed_by(latest_->weights(), latest_->biases(), copy->weights(), copy->biases()),
                        [from = latest_, to = copy](ExecutionContext& context) {
    context.copy(to->weights()->data(), from->weights()->data(), to->weights()->length());
    if (to->biases()) context.copy(to->biases()->data(), from->biases()->data(), to->biases()->length());
  });
  copy->weights()->will_write(command_buffer);
  if (copy->biases()) copy->biases()->will_write(command_buffer);
  copy->synchronize(command_buffer);
  latest_ = copy;
}

void ConvolutionWeights::encode_update(CommandBuffer& command_buffer,
                                       const std::shared_ptr<ConvolutionGradientState>& gradient_state,
                                       const std::shared_ptr<ConvolutionWeightsAndBiasesState>& from,
                                       const std::shared_ptr<ConvolutionWeightsAndBiasesState>& into) {
  prepare_training();
  optimizer_->encode(command_buffer, gradient_state, from, optimizer_vectors_.lists(), into);
  // So that host reads need no more than the command buffer's completion.
  into->synchronize(command_buffer);
  optimizer_vectors_.synchronize(command_buffer);
  latest_ = into;
  trained_on_device_ = true;
}

// ---------------------------------------------------------------- states

ConvolutionWeightsAndBiasesState::ConvolutionWeightsAndBiasesState(std::shared_ptr<Buffer> weights,
                                                                   std::shared_ptr<Buffer> biases,
                                                                   size_t weights_offset, size_t biases_offset)
    : State(weights ? weights->device_ptr() : nullptr),
      weights_(std::move(weights)),
      biases_(std::move(biases)),
      weights_offset_(weights_offset),
      biases_offset_(biases_offset) {
  if (!weights_) fail<TypeMismatchError>("MPSCNNConvolutionWeightsAndBiasesState needs a weights buffer, given None");
  if (biases_ && &biases_->device() != &weights_->device())
    fail<DeviceMismatchError>("the weights buffer is on device ", weights_->device().name(), ", the biases on ",
                              biases_->device().name());
}

ConvolutionWeightsAndBiasesState::ConvolutionWeightsAndBiasesState(std::shared_ptr<Buffer> weights,
                                                                   std::shared_ptr<Buffer> biases,
                                                                   size_t weights_offset, size_t biases_offset,
                                                                   const ConvolutionDescriptor& d)
    : ConvolutionWeightsAndBiasesState(std::move(weights), std::move(biases), weights_offset, biases_offset) {
  d.validate();
  // "Offsets must of sizeof(float) aligned i.e. multiple of 4"; "weightsOffset
  // + weightsLength <= [weights length] and biasesOffset + biasesLength <= [biases length]".
  if (weights_offset % sizeof(float) || biases_offset % sizeof(float))
    fail<ArgumentError>("MPSCNNConvolutionWeightsAndBiasesState: offsets must be multiples of 4; given weights_offset ",
                        weights_offset, ", biases_offset ", biases_offset);
  weights_bytes_ = d.weight_count() * sizeof(float);
  if (weights_offset > weights_->length() || weights_->length() - weights_offset < weights_bytes_)
    fail<ShapeError>("MPSCNNConvolutionWeightsAndBiasesState: the weights buffer holds ", weights_->length(),
                     " bytes; the filter needs ", weights_bytes_, " from offset ", weights_offset);
  if (biases_) {
    biases_bytes_ = static_cast<size_t>(d.output_feature_channels) * sizeof(float);
    if (biases_offset > biases_->length() || biases_->length() - biases_offset < biases_bytes_)
      fail<ShapeError>("MPSCNNConvolutionWeightsAndBiasesState: the biases buffer holds ", biases_->length(),
                       " bytes; the filter needs ", biases_bytes_, " from offset ", biases_offset);
  }
}

ConvolutionWeightsAndBiasesState::ConvolutionWeightsAndBiasesState(std::shared_ptr<Device> device,
                                                                   const ConvolutionDescriptor& descriptor)
    : ConvolutionWeightsAndBiasesState(
          make_pooled<Buffer>(device, descriptor.weight_count() * sizeof(float)),
          make_pooled<Buffer>(device, static_cast<size_t>(descriptor.output_feature_channels) * sizeof(float))) {}

void ConvolutionWeightsAndBiasesState::synchronize(CommandBuffer& command_buffer) {
  weights_->synchronize(command_buffer);
  if (biases_) biases_->synchronize(command_buffer);
}

void ConvolutionWeightsAndBiasesState::check_fits(const ConvolutionDescriptor& d, const char* kernel) const {
  // Exactly the filter's values past the offsets: other sizes are most
  // likely another layer's weights.
  size_t weights = d.weight_count() * sizeof(float);
  if (weights_bytes_) {
    // Made for a filter: its values from the offsets on, whatever follows.
    if (weights_bytes_ != weights ||
        (biases_ && biases_bytes_ != static_cast<size_t>(d.output_feature_channels) * sizeof(float)))
      fail<ShapeError>(kernel, ": the state was made for a filter of ", weights_bytes_ / sizeof(float), " weights and ",
                       biases_bytes_ / sizeof(float), " biases; this one has ", d.weight_count(), " and ",
                       d.output_feature_channels);
    return;
  }
  if (weights_offset_ > weights_->length() || weights != weights_->length() - weights_offset_)
    fail<ShapeError>(kernel, ": the weights buffer holds ", weights_->length() - std::min(weights_offset_, weights_->length()),
                     " bytes past its offset; the filter needs exactly ", weights, " (", d.weight_count(),
                     " float32, OHWI)");
  size_t biases = static_cast<size_t>(d.output_feature_channels) * sizeof(float);
  if (biases_ && (biases_offset_ > biases_->length() || biases != biases_->length() - biases_offset_))
    fail<ShapeError>(kernel, ": the biases buffer holds ", biases_->length() - std::min(biases_offset_, biases_->length()),
                     " bytes past its offset; the filter needs exactly ", biases, " (", d.output_feature_channels,
                     " float32)");
}

ConvolutionGradientState::ConvolutionGradientState(std::shared_ptr<const CNNConvolution> convolution)
    : GradientState(convolution->device_ptr()), convolution_(std::move(convolution)) {
  const ConvolutionDescriptor& d = convolution_->descriptor();
  gradient_for_weights_ = make_pooled<Buffer>(device_ptr(), d.weight_count() * sizeof(float));
  gradient_for_biases_ =
      make_pooled<Buffer>(device_ptr(), static_cast<size_t>(d.output_feature_channels) * sizeof(float));
}

void ConvolutionGradientState::synchronize(CommandBuffer& command_buffer) {
  gradient_for_weights_->synchronize(command_buffer);
  gradient_for_biases_->synchronize(command_buffer);
}

bool ConvolutionGradientState::shares_memory(const Image& image) const {
  for (const auto* buffer : {&gradient_for_weights_, &gradient_for_biases_, &weights, &biases})
    if (image.overlaps(buffer->get())) return true;
  return false;
}

// ---------------------------------------------------------------- geometry

namespace {

// The block of the source a forward encode reads and its zero padding; the
// padding makes oneDNN-style output sizes come out exactly as `g` says.
struct SourceBlock {
  int64_t x = 0, y = 0, width = 0, height = 0;
  int64_t pad_left = 0, pad_right = 0, pad_top = 0, pad_bottom = 0;
};

SourceBlock source_block(const char* kernel, const ConvolutionDescriptor& d, const Image& source, const Geometry& g) {
  SourceBlock b;
  int64_t extent_x = (d.kernel_width - 1) * d.dilation_x + 1, extent_y = (d.kernel_height - 1) * d.dilation_y + 1;
  int64_t end_x = g.source_x + (g.width - 1) * d.stride_x + extent_x;
  int64_t end_y = g.source_y + (g.height - 1) * d.stride_y + extent_y;
  b.x = std::max<int64_t>(g.source_x, 0);
  b.y = std::max<int64_t>(g.source_y, 0);
  b.width = std::min(end_x, source.width()) - b.x;
  b.height = std::min(end_y, source.height()) - b.y;
  if (b.width <= 0 || b.height <= 0)
    fail<ShapeError>(kernel, ": with offset (", g.source_x + extent_x / 2, ", ", g.source_y + extent_y / 2,
                     ") the windows read nothing of the ", source.width(), "x", source.height(), " source image");
  b.pad_left = b.x - g.source_x;
  b.pad_top = b.y - g.source_y;
  b.pad_right = end_x - (b.x + b.width);
  b.pad_bottom = end_y - (b.y + b.height);
  return b;
}

ConvolutionShape shape_of(const ConvolutionDescriptor& d, const SourceBlock& b, const Geometry& g,
                          const Image& source, const ImageLayout& destination_stride, DataType destination_type,
                          bool gradient) {
  ConvolutionShape s;
  static_cast<ConvolutionWindow&>(s) = d.window();
  s.images = g.images;
  s.input_channels = d.input_feature_channels;
  s.output_channels = d.output_feature_channels;
  s.source_height = b.height;
  s.source_width = b.width;
  s.pad_top = b.pad_top;
  s.pad_left = b.pad_left;
  s.pad_bottom = b.pad_bottom;
  s.pad_right = b.pad_right;
  s.height = g.height;
  s.width = g.width;
  s.source_stride = source.layout();
  s.destination_stride = destination_stride;
  s.source_type = source.data_type();
  s.destination_type = destination_type;
  s.gradient = gradient;
  return s;
}

// The regular convolution a sub-pixel convolution of factor r computes for
// the clip region of `g`: the same windows from the region's first pixel on,
// one result per r x r block of the region (MPSCNNConvolution.h: "width =
// (clipRect.size.width + r - 1) / r").
Geometry intermediate_geometry(const Geometry& g, int64_t r) {
  Geometry i = g;
  i.width = (g.width + r - 1) / r;
  i.height = (g.height + r - 1) / r;
  return i;
}

// The block of the forward source that a gradient command reads (or, of
// the source gradient, writes).
ImageRegion forward_source(const Image& source, const Geometry& g, const SourceBlock& b, int64_t channels) {
  return source.region(g.source_image, g.source_channel, b.y, b.x, g.images, channels, b.height, b.width);
}

// The weights pass of a gradient command, into its state's gradients.
void weights_gradients(ExecutionContext& context, const ConvolutionPrimitive& primitive,
                       const ConvolutionGradientState& state, const ImageRegion& source,
                       const ImageRegion& result_gradient) {
  primitive.backward_weights(context, source, result_gradient, state.gradient_for_weights()->data(),
                             state.gradient_for_biases()->data());
}

std::shared_ptr<Buffer> upload(const std::shared_ptr<Device>& device, const std::vector<float>& values) {
  auto buffer = make_pooled<Buffer>(device, values.size() * sizeof(float));
  buffer->write(values.data(), 0, values.size() * sizeof(float));
  return buffer;
}

}  // namespace

ImageDescriptor block_descriptor(DataType type, const Geometry& g, int64_t channels) {
  ImageDescriptor d;
  d.channel_format = type;
  d.width = g.width;
  d.height = g.height;
  d.feature_channels = channels;
  d.number_of_images = g.images;
  return d;
}

// ---------------------------------------------------------------- ConvolutionWeightsCopy

void ConvolutionWeightsCopy::make_for(const std::shared_ptr<const ConvolutionPrimitive>& primitive) {
  const DataType type = primitive->weights_type();
  if (type == DataType::Float32) return;
  std::lock_guard<detail::SpinLock> lock(lock_);
  if (copy_) return;
  copy_ = std::make_shared<Buffer>(weights_->device_ptr(), static_cast<size_t>(count_) * size_of(type));
  writer_ = primitive;
}

const void* ConvolutionWeightsCopy::for_primitive(ExecutionContext& context, const ConvolutionPrimitive& primitive) {
  if (primitive.weights_type() == DataType::Float32) return weights_->data();
  std::lock_guard<detail::SpinLock> lock(lock_);
  if (!copy_) fail<Error>("ConvolutionWeightsCopy: a pass reads the copy that no encode made");
  if (!current_ || written_before_copy_) convert(context);
  return copy_->data();
}

void ConvolutionWeightsCopy::refresh(ExecutionContext& context) {
  std::lock_guard<detail::SpinLock> lock(lock_);
  if (copy_)
    convert(context);
  else
    written_before_copy_ = true;
}

void ConvolutionWeightsCopy::convert(ExecutionContext& context) {
  writer_->convert_weights(context, static_cast<const float*>(weights_->data()), copy_->data(), count_);
  current_ = true;
}

// ---------------------------------------------------------------- CNNConvolution

CNNConvolution::CNNConvolution(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source)
    : CNNConvolution(std::move(device), std::move(data_source), "MPSCNNConvolution") {
  primitive_maker<ConvolutionPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

CNNConvolution::CNNConvolution(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source,
                               const char* kernel)
    : UnaryKernel(std::move(device)), data_source_(std::move(data_source)) {
  if (!data_source_) fail<TypeMismatchError>(kernel, ": expected a data source, given None");
  set_parameters(load_convolution_parameters(*data_source_, kernel));
}

void CNNConvolution::set_parameters(const ConvolutionParameters& p) {
  std::shared_ptr<Buffer> weights = upload(device_ptr(), p.weights), biases = upload(device_ptr(), p.biases);
  auto weights_copy = std::make_shared<ConvolutionWeightsCopy>(weights, static_cast<int64_t>(p.weights.size()));
  if (!weights_) {  // first load
    descriptor_ = p.descriptor;
    label = p.label;
    const bool fused = !descriptor_.fused_neuron.is_identity();
    if (fused && descriptor_.sub_pixel_scale_factor > 1)
      sub_pixel_neuron_ = std::make_shared<const NeuronDescriptor>(descriptor_.fused_neuron);
    else if (fused)
      neuron_ = std::shared_ptr<const NeuronPrimitive>(make_primitive<NeuronPrimitive>(device().backend(), descriptor_.fused_neuron));
  } else if (!(p.descriptor == descriptor_)) {
    // Reloads may run on a command buffer's thread while another thread
    // encodes, so only the weights may change.
    fail<ShapeError>(class_name(), ": the data source now describes another convolution; make a new kernel for it");
  }
  parameters_lock_.lock();
  weights_.swap(weights);
  biases_.swap(biases);
  weights_copy_.swap(weights_copy);
  parameters_lock_.unlock();
}

void CNNConvolution::reload_weights_and_biases_from_data_source() {
  set_parameters(load_convolution_parameters(*data_source_, class_name()));
}

CNNConvolution::Parameters CNNConvolution::parameters() const {
  parameters_lock_.lock();
  Parameters p{weights_, biases_, weights_copy_};
  parameters_lock_.unlock();
  return p;
}

std::shared_ptr<Image> CNNConvolution::pre_activation_for(const ConvolutionGradientState* state, DataType type,
                                                          const Geometry& g) const {
  if (!state || !neuron_) return nullptr;
  return make_pooled<Image>(device_ptr(), block_descriptor(type, g, descriptor_.output_feature_channels));
}

CNNConvolution::Parameters CNNConvolution::parameters_for(ConvolutionGradientState* state,
                                                          std::shared_ptr<Image> pre_activation) const {
  Parameters p = parameters();
  if (state) {
    state->weights = p.weights;
    state->biases = p.biases;
    state->weights_copy = p.weights_copy;
    state->pre_activation = std::move(pre_activation);
  }
  return p;
}

void CNNConvolution::reload_weights_and_biases(CommandBuffer& command_buffer,
                                               const ConvolutionWeightsAndBiasesState& state) {
  check_command_buffer(command_buffer);
  check_device(state, "weights and biases state");
  state.check_fits(descriptor_, class_name());
  Parameters p = parameters();
  if (auto* native = dynamic_cast<ConvolutionWeights*>(data_source_.get()))
    native->move_latest_out_of(command_buffer, p.weights);
  command_buffer.record(keyed_by(p.weights, p.biases, state.weights(), state.biases(), state.weights_offset(),
                                 state.biases_offset()),
                        [weights = p.weights, biases = p.biases, weights_copy = p.weights_copy,
                         from_weights = state.weights(), from_biases = state.biases(),
                         weights_offset = state.weights_offset(),
                         biases_offset = state.biases_offset()](ExecutionContext& context) {
    context.copy(weights->data(), static_cast<const char*>(from_weights->data()) + weights_offset, weights->length());
    if (from_biases)
      context.copy(biases->data(), static_cast<const char*>(from_biases->data()) + biases_offset, biases->length());
    weights_copy->refresh(context);
  });
}

std::shared_ptr<ConvolutionWeightsAndBiasesState> CNNConvolution::export_weights_and_biases(
    CommandBuffer& command_buffer) {
  check_command_buffer(command_buffer);
  auto state = make_pooled<ConvolutionWeightsAndBiasesState>(device_ptr(), descriptor_);
  Parameters p = parameters();
  command_buffer.record(keyed_by(p.weights, p.biases, state->weights(), state->biases()),
                        [weights = p.weights, biases = p.biases, state](ExecutionContext& context) {
    context.copy(state->weights()->data(), weights->data(), weights->length());
    context.copy(state->biases()->data(), biases->data(), biases->length());
  });
  state->weights()->will_write(command_buffer);
  state->biases()->will_write(command_buffer);
  return state;
}

void CNNConvolution::encode_weights_and_bias_update(CommandBuffer& command_buffer,
                                                    const std::shared_ptr<ConvolutionGradientState>& gradient_state,
                                                    bool on_command_buffer) {
  check_command_buffer(command_buffer);
  if (!gradient_state) fail<TypeMismatchError>(class_name(), ": expected a gradient state, given None");
  check_state(*gradient_state);
  if (!gradient_state->encoded || !gradient_state->weights)
    fail<StateError>(class_name(), ": the gradient state was not produced by a forward encode");
  if (!on_command_buffer && !data_source_->supports_update())
    fail<TypeMismatchError>(class_name(), ": training style CPU calls the data source's update_with_gradient_state, "
                                          "which it does not implement");
  auto* native = dynamic_cast<ConvolutionWeights*>(data_source_.get());
  if (on_command_buffer && native && native->supports_update_on_command_buffer()) {
    parameters_lock_.lock();
    const bool current = weights_ == gradient_state->weights && biases_ == gradient_state->biases;
    parameters_lock_.unlock();
    if (current) {  // updated in place: nothing to reload
      native->update_in_place(command_buffer, gradient_state);
      command_buffer.record(keyed_by(gradient_state->weights),
                            [weights_copy = gradient_state->weights_copy](ExecutionContext& context) {
        weights_copy->refresh(context);
      });
      return;
    }
  }
  // The weights the forward pass used, which the gradients belong to.
  auto used = make_pooled<ConvolutionWeightsAndBiasesState>(gradient_state->weights, gradient_state->biases);
  auto self = std::static_pointer_cast<CNNConvolution>(shared_from_this());
  encode_update(
      command_buffer, class_name(), "update_with_command_buffer nor update_with_gradient_state",
      on_command_buffer && data_source_->supports_update_on_command_buffer(),
      data_source_->supports_update(), *gradient_state,
      [&] { return data_source_->update_on_command_buffer(command_buffer, gradient_state, used); },
      [&](const ConvolutionWeightsAndBiasesState& updated) { reload_weights_and_biases(command_buffer, updated); },
      [self, gradient_state, used] {
        if (self->data_source_->update(gradient_state, used)) self->reload_weights_and_biases_from_data_source();
      });
}

std::shared_ptr<State> CNNConvolution::new_result_state(const Image&) {
  return make_pooled<ConvolutionGradientState>(
      std::static_pointer_cast<const CNNConvolution>(shared_from_this()));
}

ImageDescriptor CNNConvolution::destination_descriptor(const Image& source, const State* source_state) {
  ImageDescriptor d = UnaryKernel::destination_descriptor(source, source_state);
  // MPS does not say; each pixel of the regular result becomes an r x r block.
  const int64_t r = descriptor_.sub_pixel_scale_factor;
  if (d.width > kMaxDimension / r || d.height > kMaxDimension / r)
    fail<ShapeError>(class_name(), ": the padding policy makes a ", d.width, "x", d.height,
                     " result, whose sub-pixel blocks (sub_pixel_scale_factor ", r, ") make a ", d.width * r, "x",
                     d.height * r, " destination; image sizes must be at most ", kMaxDimension);
  d.width *= r;
  d.height *= r;
  return d;
}

Window CNNConvolution::window() const {
  Window w;
  w.kernel_width = descriptor_.kernel_width;
  w.kernel_height = descriptor_.kernel_height;
  w.stride_x = descriptor_.stride_x;
  w.stride_y = descriptor_.stride_y;
  w.dilation_x = descriptor_.dilation_x;
  w.dilation_y = descriptor_.dilation_y;
  return w;
}

void CNNConvolution::check_state(const State& state) const {
  check_own_gradient_state<ConvolutionGradientState>(*this, state, "MPSCNNConvolutionGradientState");
}

void CNNConvolution::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                            const std::shared_ptr<Image>& destination, const Geometry& g,
                            const std::shared_ptr<State>& state) {
  const int64_t r = descriptor_.sub_pixel_scale_factor;
  SourceBlock b = source_block(class_name(), descriptor_, *source, intermediate_geometry(g, r));
  auto* gradient_state = static_cast<ConvolutionGradientState*>(state.get());
  std::shared_ptr<Image> pre = pre_activation_for(gradient_state, destination->data_type(), g);
  ConvolutionShape shape = shape_of(descriptor_, b, intermediate_geometry(g, r), *source,
                                    pre ? pre->layout() : destination->layout(), destination->data_type(), false);
  shape.accumulator_precision = accumulator_precision;
  shape.sub_pixel_scale_factor = r;
  shape.sub_pixel_neuron = sub_pixel_neuron_;
  const auto& primitive = cached_primitive(primitives_, device().backend(), shape);
  Parameters p = parameters_for(gradient_state, pre);
  p.weights_copy->make_for(primitive);
  const int64_t in = descriptor_.input_feature_channels, out = destination_channels(*source);
  command_buffer.record(keyed_by(primitive, neuron_, source, destination, pre, p.weights, p.biases, as_value(g),
                                 as_value(b), in, out),
                        [primitive, neuron = neuron_, source, destination, pre, weights = p.weights_copy,
                         biases = p.biases, g, b, in, out](ExecutionContext& context) {
    ImageRegion from = source->region(g.source_image, g.source_channel, b.y, b.x, g.images, in, b.height, b.width);
    ImageRegion to = destination_region(*destination, g, out);
    ImageRegion result = pre ? pre->whole() : to;
    primitive->forward(context, from, weights->for_primitive(context, *primitive), biases->data(), result);
    if (neuron) neuron->forward(context, result, to, 0);
  });
}

// ---------------------------------------------------------------- CNNFullyConnected

CNNFullyConnected::CNNFullyConnected(std::shared_ptr<Device> device, std::shared_ptr<ConvolutionDataSource> data_source)
    : CNNConvolution(std::move(device), std::move(data_source)) {
  if (descriptor_.stride_x != 1 || descriptor_.stride_y != 1 || descriptor_.dilation_x != 1 ||
      descriptor_.dilation_y != 1 || descriptor_.groups != 1)
    fail<ArgumentError>(class_name(), ": strides, dilation rates and groups must be 1; given stride ",
                        descriptor_.stride_x, "x", descriptor_.stride_y, ", dilation ", descriptor_.dilation_x, "x",
                        descriptor_.dilation_y, ", groups ", descriptor_.groups);
}

void CNNFullyConnected::check_source(const Image& source) const {
  UnaryKernel::check_source(source);
  if (source.width() != descriptor_.kernel_width || source.height() != descriptor_.kernel_height)
    fail<ShapeError>(class_name(), ": expected a ", descriptor_.kernel_width, "x", descriptor_.kernel_height,
                     " source image (the kernel size), given ", source.width(), "x", source.height());
}

ImageDescriptor CNNFullyConnected::destination_descriptor(const Image& source, const State*) {
  ImageDescriptor d;
  d.channel_format = source.data_type() == DataType::Float16 ? DataType::Float16 : DataType::Float32;
  // One block of r x r pixels for a sub-pixel convolution.
  d.width = d.height = descriptor_.sub_pixel_scale_factor;
  d.feature_channels = destination_channels(source);
  d.number_of_images = source.number_of_images() - offset.z;
  return d;
}

Offset CNNFullyConnected::source_offset() const {
  return Offset{descriptor_.kernel_width / 2, descriptor_.kernel_height / 2, offset.z};
}

// ---------------------------------------------------------------- CNNConvolutionGradient

CNNConvolutionGradient::CNNConvolutionGradient(std::shared_ptr<Device> device,
                                               std::shared_ptr<ConvolutionDataSource> data_source)
    : GradientKernel(std::move(device)), data_source_(std::move(data_source)) {
  if (!data_source_) fail<TypeMismatchError>(class_name(), ": expected a data source, given None");
  primitive_maker<ConvolutionPrimitive>(this->device().backend());
  Loaded<ConvolutionDataSource> loaded(*data_source_, class_name());
  descriptor_ = data_source_->descriptor();
  descriptor_.validate();
  // "Back propagation sub-pixel convolution are not supported. So
  // channelMultiplier and subPixelScaleFactor must be one."
  if (descriptor_.sub_pixel_scale_factor != 1)
    fail<ArgumentError>(class_name(), ": MPS has no gradient of a sub-pixel convolution; given sub_pixel_scale_factor ",
                        descriptor_.sub_pixel_scale_factor, " (must be 1)");
  const int64_t limit = this->device().backend().limits().summed_feature_channels;
  if (descriptor_.output_feature_channels > limit)
    fail<ShapeError>(class_name(), ": the descriptor has ", descriptor_.output_feature_channels,
                     " output feature channels; the gradient of the biases on device ", this->device().name(),
                     " takes at most ", limit);
  if (!descriptor_.fused_neuron.is_identity())
    neuron_ = std::shared_ptr<const NeuronPrimitive>(make_primitive<NeuronPrimitive>(this->device().backend(), descriptor_.fused_neuron));
}

const GradientState& CNNConvolutionGradient::gradient_state_of(const State& state) const {
  auto* s = dynamic_cast<const ConvolutionGradientState*>(&state);
  if (!s) fail<TypeMismatchError>(class_name(), ": expected an MPSCNNConvolutionGradientState, given an ", state.class_name());
  const ConvolutionDescriptor& forward = s->convolution()->descriptor();
  if (!(forward == descriptor_))
    fail<ArgumentError>(class_name(), ": the gradient state comes from a convolution of another descriptor (",
                        forward.input_feature_channels, " -> ", forward.output_feature_channels, ", kernel ",
                        forward.kernel_width, "x", forward.kernel_height, "); this gradient is for ",
                        descriptor_.input_feature_channels, " -> ", descriptor_.output_feature_channels, ", kernel ",
                        descriptor_.kernel_width, "x", descriptor_.kernel_height);
  return *s;
}

// What the gradient's command reads of the state.
static void add_to_key(CommandKey& key, const ConvolutionGradientState& state) {
  add_to_key(key, state.weights);
  add_to_key(key, state.gradient_for_weights());
  add_to_key(key, state.gradient_for_biases());
  add_to_key(key, state.pre_activation);
}

void CNNConvolutionGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                    const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                                    const std::shared_ptr<Image>& destination_gradient) {
  auto gs = std::static_pointer_cast<ConvolutionGradientState>(state);
  const Geometry g = gs->geometry;
  SourceBlock b = source_block(class_name(), descriptor_, *source_image, g);
  std::shared_ptr<Image> dy = result_gradient_scratch(*gs, source_gradient->data_type(), g);
  ConvolutionShape shape = shape_of(descriptor_, b, g, *source_image,
                                    dy ? dy->layout() : source_gradient->layout(), source_gradient->data_type(), true);
  // MPSCNNConvolutionGradient has no precision option of its own: it computes
  // as the forward kernel that made the state allows (TF32 where "half").
  shape.accumulator_precision = gs->convolution()->accumulator_precision;
  const auto& primitive = cached_primitive(primitives_, device().backend(), shape);
  bool data = computes_data();
  bool weights = computes_weights();
  if (data) gs->weights_copy->make_for(primitive);
  bool covers = b.x == 0 && b.y == 0 && b.width == source_image->width() && b.height == source_image->height() &&
                g.source_channel == 0 && descriptor_.input_feature_channels == source_image->feature_channels();
  const int64_t in = descriptor_.input_feature_channels, out = descriptor_.output_feature_channels;
  // The passes share only what they read, unless the source gradient is
  // written over the source: then the weights gradient first, from the
  // source as it was encoded.
  const bool separate = data && !overlap(destination_gradient->whole(), forward_source(*source_image, g, b, in));
  // Overlapped, the weights gradient runs after the data gradient, so not
  // where that writes over the source.
  const bool overlapped = weights_overlapped_ && weights && (separate || !data);
  const bool weights_in_command = weights && !overlapped;
  const bool concurrent = weights_in_command && separate;
  command_buffer.record(keyed_by(primitive, neuron_, gs, source_gradient, source_image, destination_gradient, dy,
                                 as_value(g), as_value(b), data, weights_in_command, covers, concurrent, in, out),
                        [primitive, neuron = neuron_, gs, source_gradient, source_image, destination_gradient, dy,
                         g, b, data, weights_in_command, covers, concurrent, in, out](ExecutionContext& context) {
    const ImageRegion result_gradient =
        gradient_before_neuron(context, neuron.get(), *gs, destination_region(*source_gradient, g, out), dy.get());
    const ImageRegion source = forward_source(*source_image, g, b, in);
    auto data_pass = [&] {
      if (!data) return;
      if (!covers) context.fill_zero_image(*destination_gradient);
      primitive->backward_data(context, result_gradient, source, gs->weights_copy->for_primitive(context, *primitive),
                               forward_source(*destination_gradient, g, b, in));
    };
    auto weights_pass = [&] {
      if (weights_in_command) weights_gradients(context, *primitive, *gs, source, result_gradient);
    };
    if (concurrent) {
      context.run_concurrently(data_pass, weights_pass);
    } else {
      weights_pass();
      data_pass();
    }
  });
  if (overlapped) {  // from the gradient at the result as the command above left it
    auto record_weights_pass = [&] {
      command_buffer.record(keyed_by(primitive, gs, source_gradient, source_image, dy, as_value(g), as_value(b), in,
                                     out),
                            [primitive, gs, source_gradient, source_image, dy, g, b, in, out](ExecutionContext& context) {
        weights_gradients(context, *primitive, *gs, forward_source(*source_image, g, b, in),
                          dy ? dy->whole() : destination_region(*source_gradient, g, out));
      });
    };
    command_buffer.record_overlapped(record_weights_pass);
  }
  will_write_weights_gradients(command_buffer, *gs);
}

std::shared_ptr<Image> CNNConvolutionGradient::encode_weights_overlapped(CommandBuffer& command_buffer,
                                                                         const std::shared_ptr<Image>& source_gradient,
                                                                         const std::shared_ptr<Image>& source_image,
                                                                         const std::shared_ptr<State>& gradient_state) {
  Restore<bool> kept(weights_overlapped_);
  weights_overlapped_ = true;
  return encode(command_buffer, source_gradient, source_image, gradient_state, nullptr);
}

std::shared_ptr<Image> CNNConvolutionGradient::result_gradient_scratch(const ConvolutionGradientState& state,
                                                                       DataType type, const Geometry& g) const {
  if (!state.pre_activation) return nullptr;
  return make_pooled<Image>(device_ptr(), block_descriptor(type, g, descriptor_.output_feature_channels));
}

ImageRegion CNNConvolutionGradient::gradient_before_neuron(ExecutionContext& context, const NeuronPrimitive* neuron,
                                                           const ConvolutionGradientState& state,
                                                           const ImageRegion& incoming, const Image* scratch) {
  if (!scratch) return incoming;
  ImageRegion result_gradient = scratch->whole();
  neuron->gradient(context, incoming, state.pre_activation->whole(), result_gradient, 0);
  return result_gradient;
}

void CNNConvolutionGradient::will_write_weights_gradients(CommandBuffer& command_buffer,
                                                          const ConvolutionGradientState& state) const {
  if (!computes_weights()) return;
  state.gradient_for_weights()->will_write(command_buffer);
  state.gradient_for_biases()->will_write(command_buffer);
}

std::vector<std::shared_ptr<GradientKernel>> CNNConvolution::make_gradient_kernels() const {
  return {std::make_shared<CNNConvolutionGradient>(device_ptr(), data_source_)};
}

std::vector<std::shared_ptr<GradientKernel>> CNNFullyConnected::make_gradient_kernels() const {
  return {std::make_shared<CNNFullyConnectedGradient>(device_ptr(), data_source())};
}

}  // namespace mpsx

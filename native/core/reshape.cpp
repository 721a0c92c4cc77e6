#include "mpsx/kernels/reshape.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {

bool ReshapeDescriptor::operator==(const ReshapeDescriptor& o) const {
  auto fields = [](const ReshapeDescriptor& d) {
    return std::tie(d.kind, d.gradient, d.edge_mode, d.fill_value, d.fill_values, d.source, d.destination, d.images,
                    d.source_channels, d.source_height, d.source_width, d.channels, d.height, d.width,
                    d.first_channel, d.first_y, d.first_x);
  };
  return fields(*this) == fields(o);
}

std::vector<int64_t> pad_map(EdgeMode mode, int64_t size, int64_t first, int64_t count) {
  std::vector<int64_t> map(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    const int64_t p = first + k;
    int64_t i = p;
    if (p < 0 || p >= size) {
      switch (mode) {
        case EdgeMode::Clamp: i = std::clamp<int64_t>(p, 0, size - 1); break;
        case EdgeMode::Mirror: {  // period 2 (size - 1): the edge element is not repeated
          const int64_t period = 2 * (size - 1);
          if (period == 0) {
            i = 0;
            break;
          }
          const int64_t q = ((p % period) + period) % period;
          i = q < size ? q : period - q;
          break;
        }
        case EdgeMode::MirrorWithEdge: {  // period 2 size: the edge element is repeated
          const int64_t period = 2 * size;
          const int64_t q = ((p % period) + period) % period;
          i = q < size ? q : period - 1 - q;
          break;
        }
        default: i = -1;
      }
    }
    map[static_cast<size_t>(k)] = i;
  }
  return map;
}

PadReaders pad_readers(const std::vector<int64_t>& map, int64_t size) {
  PadReaders r;
  r.begin.assign(static_cast<size_t>(size) + 1, 0);
  for (int64_t i : map)
    if (i >= 0) ++r.begin[static_cast<size_t>(i) + 1];
  for (size_t i = 1; i < r.begin.size(); ++i) r.begin[i] += r.begin[i - 1];
  r.readers.resize(static_cast<size_t>(r.begin.back()));
  std::vector<int64_t> next(r.begin.begin(), r.begin.end() - 1);
  for (size_t k = 0; k < map.size(); ++k)
    if (map[k] >= 0) r.readers[static_cast<size_t>(next[static_cast<size_t>(map[k])]++)] = static_cast<int64_t>(k);
  return r;
}

namespace {

void check_padding(const char* kernel, const ImageCoordinate& c, const char* name) {
  for (auto [value, axis] : {std::pair{c.x, ".x"}, {c.y, ".y"}, {c.channel, ".channel"}})
    check_range(value, 0, kMaxDimension, kernel, ": ", name, axis);
}

// source + before + after along one axis, each at most kMaxDimension (check_padding), so the sum cannot overflow.
int64_t padded(const char* kernel, int64_t source, int64_t before, int64_t after, const char* what) {
  const int64_t size = source + before + after;
  if (size > kMaxDimension)
    fail<ShapeError>(kernel, ": padding ", source, " ", what, " by ", before, " before and ", after,
                     " after makes ", size, "; sizes must be at most ", kMaxDimension);
  return size;
}

const ReshapeGradientState& reshape_state_of(const State& state, ReshapeKind kind, const char* kernel) {
  auto* s = dynamic_cast<const ReshapeGradientState*>(&state);
  if (!s || s->kind != kind)
    fail<TypeMismatchError>(kernel, ": expected the state of an ",
                            kind == ReshapeKind::Pad ? "MPSNNPad" : "MPSNNReshape", " forward encode, given an ",
                            state.class_name());
  return *s;
}

}  // namespace

// ---------------------------------------------------------------- pad

NNPad::NNPad(std::shared_ptr<Device> device, ImageCoordinate before, ImageCoordinate after,
             std::vector<float> fill_value_array)
    : UnaryKernel(std::move(device)), padding_size_before(before), padding_size_after(after) {
  primitive_maker<ReshapePrimitive>(this->device().backend());  // a family the backend lacks fails here
  check_padding(class_name(), before, "padding_size_before");
  check_padding(class_name(), after, "padding_size_after");
  if (!fill_value_array.empty())
    fill_values_ = std::make_shared<const std::vector<float>>(std::move(fill_value_array));
}

void NNPad::check_properties() const {
  UnaryKernel::check_properties();
  check_padding(class_name(), padding_size_before, "padding_size_before");
  check_padding(class_name(), padding_size_after, "padding_size_after");
}

void NNPad::check_source(const Image& source) const {
  UnaryKernel::check_source(source);
  // MPS: "Failing to pass a large enough array will result in undefined behavior."
  if (edge_mode != EdgeMode::Constant || !fill_values_) return;
  const int64_t channels = destination_channels(source);
  if (static_cast<int64_t>(fill_values_->size()) < channels)
    fail<ShapeError>(class_name(), ": the fill value array holds ", fill_values_->size(),
                     " values; this encode writes ", channels, " feature channels, each needing one");
}

int64_t NNPad::destination_channels(const Image& source) const {
  return padded(class_name(), source_channels(source), padding_size_before.channel, padding_size_after.channel,
                "feature channels");
}

ImageDescriptor NNPad::destination_descriptor(const Image& source, const State*) {
  ImageDescriptor d;
  d.width = padded(class_name(), source.width(), padding_size_before.x, padding_size_after.x, "columns");
  d.height = padded(class_name(), source.height(), padding_size_before.y, padding_size_after.y, "rows");
  d.feature_channels = destination_channels(source);
  offset.x = -padding_size_before.x;
  offset.y = -padding_size_before.y;
  return with_source_images(source, d);
}

std::shared_ptr<State> NNPad::new_result_state(const Image&) {
  auto state = std::make_shared<ReshapeGradientState>(device_ptr());
  state->kind = ReshapeKind::Pad;
  return state;
}

void NNPad::check_state(const State& state) const { reshape_state_of(state, ReshapeKind::Pad, class_name()); }

void NNPad::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                   const std::shared_ptr<Image>& destination, const Geometry& g,
                   const std::shared_ptr<State>& state) {
  const int64_t channels = destination_channels(*source);
  ReshapeDescriptor d;
  d.kind = ReshapeKind::Pad;
  d.edge_mode = edge_mode;
  d.fill_value = fill_value;
  if (edge_mode == EdgeMode::Constant) d.fill_values = fill_values_;
  d.source = source->descriptor();
  d.destination = destination->descriptor();
  d.images = g.images;
  d.source_channels = g.source_channels;
  d.source_height = source->height();
  d.source_width = source->width();
  d.channels = channels;
  d.height = g.height;
  d.width = g.width;
  d.first_channel = -padding_size_before.channel;
  d.first_y = g.source_y;
  d.first_x = g.source_x;
  if (auto* s = dynamic_cast<ReshapeGradientState*>(state.get())) {
    s->edge_mode = edge_mode;
    s->first_channel = d.first_channel;
    s->channels = channels;
  }
  std::shared_ptr<ReshapePrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  command_buffer.record([primitive = std::move(primitive), source, destination, g,
                         channels](ExecutionContext& context) {
    primitive->forward(context, whole_source_region(*source, g, g.source_channels),
                       destination_region(*destination, g, channels));
  });
}

std::vector<std::shared_ptr<GradientKernel>> NNPad::make_gradient_kernels() const {
  return {std::make_shared<NNPadGradient>(device_ptr())};
}

NNPadGradient::NNPadGradient(std::shared_ptr<Device> device) : GradientKernel(std::move(device)) {
  primitive_maker<ReshapePrimitive>(this->device().backend());
}

const GradientState& NNPadGradient::gradient_state_of(const State& state) const {
  return reshape_state_of(state, ReshapeKind::Pad, class_name());
}

namespace {

// The gradient pass of the forward encode `s` recorded: dx, the whole source
// slice, from dy, the region the forward pass wrote.
void record_reshape_gradient(CommandBuffer& command_buffer, PrimitiveCache<ReshapeDescriptor, ReshapePrimitive>& cache,
                             Backend& backend, const ReshapeGradientState& s,
                             const std::shared_ptr<Image>& source_gradient,
                             const std::shared_ptr<Image>& destination_gradient) {
  const Geometry g = s.geometry;
  ReshapeDescriptor d;
  d.kind = s.kind;
  d.gradient = true;
  d.edge_mode = s.edge_mode;
  d.source = destination_gradient->descriptor();
  d.destination = source_gradient->descriptor();
  d.images = g.images;
  d.source_channels = g.source_channels;
  d.source_height = s.source_descriptor.height;
  d.source_width = s.source_descriptor.width;
  d.channels = s.channels;
  d.height = g.height;
  d.width = g.width;
  d.first_channel = s.first_channel;
  d.first_y = g.source_y;
  d.first_x = g.source_x;
  std::shared_ptr<ReshapePrimitive> primitive = cached_primitive(cache, backend, d);
  command_buffer.record([primitive = std::move(primitive), source_gradient, destination_gradient, g,
                         channels = s.channels, height = d.source_height,
                         width = d.source_width](ExecutionContext& context) {
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        destination_gradient->region(g.source_image, g.source_channel, 0, 0, g.images,
                                                     g.source_channels, height, width));
  });
}

}  // namespace

void NNPadGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                           const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                           const std::shared_ptr<Image>& destination_gradient) {
  const auto& s = static_cast<const ReshapeGradientState&>(gradient_state_of(*state));
  record_zeros_outside_slice(command_buffer, destination_gradient, *source_image, s.geometry);
  record_reshape_gradient(command_buffer, primitives_, device().backend(), s, source_gradient, destination_gradient);
}

// ---------------------------------------------------------------- reshape

NNReshape::NNReshape(std::shared_ptr<Device> device, int64_t width, int64_t height, int64_t channels)
    : UnaryKernel(std::move(device)) {
  primitive_maker<ReshapePrimitive>(this->device().backend());
  if (width != 0 || height != 0 || channels != 0) {
    check_size(width, class_name(), ": reshaped width");
    check_size(height, class_name(), ": reshaped height");
    check_size(channels, class_name(), ": reshaped feature channels");
    reshaped_ = {width, height, channels};
  }
}

void NNReshape::check_properties() const {
  UnaryKernel::check_properties();
  // The header defines a reshape by the shapes alone ("copies data from
  // source MPSImage into the new shape"): a shifted or clipped one means
  // nothing (docs/semantics.md, "Reshape").
  if (offset.x != 0 || offset.y != 0)
    fail<ArgumentError>(class_name(), ": offset.x and offset.y must be 0, given ", offset.x, " and ", offset.y,
                        "; a reshape reads the whole source");
  if (clip_rect.x != 0 || clip_rect.y != 0 || clip_rect.width != kRectNoClip.width ||
      clip_rect.height != kRectNoClip.height)
    fail<ArgumentError>(class_name(), ": clip_rect's x, y, width and height must keep their defaults; a reshape ",
                        "writes the whole destination");
}

void NNReshape::size_for(int64_t width, int64_t height, int64_t channels, const Image* destination) {
  if (width != 0 || height != 0 || channels != 0) {
    check_size(width, class_name(), ": reshaped_width");
    check_size(height, class_name(), ": reshaped_height");
    check_size(channels, class_name(), ": reshaped_feature_channels");
    reshaped_ = {width, height, channels};
  }
  if (!destination) return;
  if (reshaped_.x == 0) {
    const int64_t c = destination->feature_channels() - destination_feature_channel_offset;
    if (c < 1)
      fail<ShapeError>(class_name(), ": destination_feature_channel_offset ", destination_feature_channel_offset,
                       " is past the destination's ", destination->feature_channels(), " feature channels");
    reshaped_ = {destination->width(), destination->height(), c};
  } else if (destination->width() != reshaped_.x || destination->height() != reshaped_.y) {
    fail<ShapeError>(class_name(), ": expected a ", reshaped_.x, "x", reshaped_.y,
                     " destination (width x height) for the reshaped sizes, given ", destination->width(), "x",
                     destination->height());
  }
}

NNReshape::Encoded NNReshape::encode(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                                     const std::shared_ptr<Image>& destination, const std::shared_ptr<State>& state,
                                     bool want_state, int64_t width, int64_t height, int64_t channels) {
  Restore<ImageCoordinate> kept(reshaped_);
  size_for(width, height, channels, destination.get());
  return UnaryKernel::encode(command_buffer, source, destination, state, want_state);
}

ImageDescriptor NNReshape::destination_image_descriptor(const Image& source, int64_t width, int64_t height,
                                                        int64_t channels) {
  Restore<ImageCoordinate> kept(reshaped_);
  size_for(width, height, channels, nullptr);
  return UnaryKernel::destination_image_descriptor(source);
}

void NNReshape::check_source(const Image& source) const {
  UnaryKernel::check_source(source);
  if (reshaped_.x == 0) return;
  const int64_t slice = source_slice(source);
  const int64_t have = checked_count({source.width(), source.height(), slice}, class_name(), ": source elements");
  const int64_t want =
      checked_count({reshaped_.x, reshaped_.y, reshaped_.channel}, class_name(), ": reshaped elements");
  if (have != want)
    fail<ShapeError>(class_name(), ": a ", source.width(), "x", source.height(), "x", slice,
                     " source (width x height x feature channels) holds ", have, " elements per image; the reshaped ",
                     reshaped_.x, "x", reshaped_.y, "x", reshaped_.channel, " holds ", want);
}

int64_t NNReshape::destination_channels(const Image& source) const {
  return reshaped_.x != 0 ? reshaped_.channel : source_channels(source);
}

ImageDescriptor NNReshape::destination_descriptor(const Image& source, const State*) {
  ImageDescriptor d;
  d.width = reshaped_.x != 0 ? reshaped_.x : source.width();
  d.height = reshaped_.x != 0 ? reshaped_.y : source.height();
  d.feature_channels = destination_channels(source);
  return with_source_images(source, d);
}

std::shared_ptr<State> NNReshape::new_result_state(const Image&) {
  auto state = std::make_shared<ReshapeGradientState>(device_ptr());
  state->kind = ReshapeKind::Reshape;
  return state;
}

void NNReshape::check_state(const State& state) const {
  reshape_state_of(state, ReshapeKind::Reshape, class_name());
}

void NNReshape::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                       const std::shared_ptr<Image>& destination, const Geometry& g,
                       const std::shared_ptr<State>& state) {
  const int64_t channels = destination_channels(*source);
  ReshapeDescriptor d;
  d.kind = ReshapeKind::Reshape;
  d.source = source->descriptor();
  d.destination = destination->descriptor();
  d.images = g.images;
  d.source_channels = g.source_channels;
  d.source_height = source->height();
  d.source_width = source->width();
  d.channels = channels;
  d.height = g.height;
  d.width = g.width;
  if (auto* s = dynamic_cast<ReshapeGradientState*>(state.get())) s->channels = channels;
  std::shared_ptr<ReshapePrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  command_buffer.record([primitive = std::move(primitive), source, destination, g,
                         channels](ExecutionContext& context) {
    primitive->forward(context, whole_source_region(*source, g, g.source_channels),
                       destination_region(*destination, g, channels));
  });
}

std::vector<std::shared_ptr<GradientKernel>> NNReshape::make_gradient_kernels() const {
  return {std::make_shared<NNReshapeGradient>(device_ptr())};
}

NNReshapeGradient::NNReshapeGradient(std::shared_ptr<Device> device) : GradientKernel(std::move(device)) {
  primitive_maker<ReshapePrimitive>(this->device().backend());
}

const GradientState& NNReshapeGradient::gradient_state_of(const State& state) const {
  return reshape_state_of(state, ReshapeKind::Reshape, class_name());
}

void NNReshapeGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                               const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                               const std::shared_ptr<Image>& destination_gradient) {
  const auto& s = static_cast<const ReshapeGradientState&>(gradient_state_of(*state));
  record_zeros_outside_slice(command_buffer, destination_gradient, *source_image, s.geometry);
  record_reshape_gradient(command_buffer, primitives_, device().backend(), s, source_gradient, destination_gradient);
}

}  // namespace mpsx

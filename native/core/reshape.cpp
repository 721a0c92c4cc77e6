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

// A pass of forward geometry `g` over a source of source_height x
// source_width writing `channels`: the fields forward and gradient passes
// share, the rest at their defaults.
ReshapeDescriptor describe(ReshapeKind kind, const ImageDescriptor& source, const ImageDescriptor& destination,
                           const Geometry& g, int64_t channels, int64_t source_height, int64_t source_width) {
  ReshapeDescriptor d;
  d.kind = kind;
  d.source = source;
  d.destination = destination;
  d.images = g.images;
  d.source_channels = g.source_channels;
  d.source_height = source_height;
  d.source_width = source_width;
  d.channels = channels;
  d.height = g.height;
  d.width = g.width;
  return d;
}

}  // namespace

// ---------------------------------------------------------------- shared

ReshapeKernel::ReshapeKernel(std::shared_ptr<Device> device, ReshapeKind kind)
    : UnaryKernel(std::move(device)), kind_(kind) {
  primitive_maker<ReshapePrimitive>(this->device().backend());  // a family the backend lacks fails here
}

std::shared_ptr<State> ReshapeKernel::new_result_state(const Image&) {
  auto state = std::make_shared<ReshapeGradientState>(device_ptr());
  state->kind = kind_;
  return state;
}

void ReshapeKernel::check_state(const State& state) const { reshape_state_of(state, kind_, class_name()); }

void ReshapeKernel::record_pass(CommandBuffer& command_buffer, const ReshapeDescriptor& d,
                                const std::shared_ptr<Image>& source, const std::shared_ptr<Image>& destination,
                                const Geometry& g, const std::shared_ptr<State>& state) {
  if (auto* s = dynamic_cast<ReshapeGradientState*>(state.get())) {
    s->edge_mode = d.edge_mode;
    s->first_channel = d.first_channel;
    s->channels = d.channels;
  }
  std::shared_ptr<ReshapePrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  command_buffer.record([primitive = std::move(primitive), source, destination, g,
                         channels = d.channels](ExecutionContext& context) {
    primitive->forward(context, whole_source_region(*source, g, g.source_channels),
                       destination_region(*destination, g, channels));
  });
}

ReshapeGradientKernel::ReshapeGradientKernel(std::shared_ptr<Device> device, ReshapeKind kind)
    : GradientKernel(std::move(device)), kind_(kind) {
  primitive_maker<ReshapePrimitive>(this->device().backend());
}

const GradientState& ReshapeGradientKernel::gradient_state_of(const State& state) const {
  return reshape_state_of(state, kind_, class_name());
}

// The gradient pass of the forward encode the state recorded: dx, the whole
// source slice, from dy, the region the forward pass wrote.
void ReshapeGradientKernel::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                   const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                                   const std::shared_ptr<Image>& destination_gradient) {
  const auto& s = static_cast<const ReshapeGradientState&>(gradient_state_of(*state));
  const Geometry g = s.geometry;
  record_zeros_outside_slice(command_buffer, destination_gradient, *source_image, g);
  ReshapeDescriptor d = describe(s.kind, destination_gradient->descriptor(), source_gradient->descriptor(), g,
                                 s.channels, s.source_descriptor.height, s.source_descriptor.width);
  d.gradient = true;
  d.edge_mode = s.edge_mode;
  d.first_channel = s.first_channel;
  d.first_y = g.source_y;
  d.first_x = g.source_x;
  std::shared_ptr<ReshapePrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  command_buffer.record([primitive = std::move(primitive), source_gradient, destination_gradient, g,
                         channels = s.channels, height = d.source_height,
                         width = d.source_width](ExecutionContext& context) {
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        destination_gradient->region(g.source_image, g.source_channel, 0, 0, g.images,
                                                     g.source_channels, height, width));
  });
}

// ---------------------------------------------------------------- pad

NNPad::NNPad(std::shared_ptr<Device> device, ImageCoordinate before, ImageCoordinate after,
             std::vector<float> fill_value_array)
    : ReshapeKernel(std::move(device), ReshapeKind::Pad), padding_size_before(before), padding_size_after(after) {
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

void NNPad::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                   const std::shared_ptr<Image>& destination, const Geometry& g,
                   const std::shared_ptr<State>& state) {
  ReshapeDescriptor d = describe(ReshapeKind::Pad, source->descriptor(), destination->descriptor(), g,
                                 destination_channels(*source), source->height(), source->width());
  d.edge_mode = edge_mode;
  d.fill_value = fill_value;
  if (edge_mode == EdgeMode::Constant) d.fill_values = fill_values_;
  d.first_channel = -padding_size_before.channel;
  d.first_y = g.source_y;
  d.first_x = g.source_x;
  record_pass(command_buffer, d, source, destination, g, state);
}

std::vector<std::shared_ptr<GradientKernel>> NNPad::make_gradient_kernels() const {
  return {std::make_shared<NNPadGradient>(device_ptr())};
}

// ---------------------------------------------------------------- reshape

NNReshape::NNReshape(std::shared_ptr<Device> device, int64_t width, int64_t height, int64_t channels)
    : ReshapeKernel(std::move(device), ReshapeKind::Reshape) {
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

void NNReshape::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                       const std::shared_ptr<Image>& destination, const Geometry& g,
                       const std::shared_ptr<State>& state) {
  record_pass(command_buffer,
              describe(ReshapeKind::Reshape, source->descriptor(), destination->descriptor(), g,
                       destination_channels(*source), source->height(), source->width()),
              source, destination, g, state);
}

std::vector<std::shared_ptr<GradientKernel>> NNReshape::make_gradient_kernels() const {
  return {std::make_shared<NNReshapeGradient>(device_ptr())};
}

}  // namespace mpsx

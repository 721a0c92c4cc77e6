#include "mpsx/kernels/reduction.h"

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

bool ReductionDescriptor::operator==(const ReductionDescriptor& o) const {
  auto fields = [](const ReductionDescriptor& d) {
    return std::tie(d.source, d.destination, d.images, d.channels, d.height, d.width);
  };
  return fields(*this) == fields(o);
}

void check_clip_rect_source(const Region& r, const char* owner) {
  for (auto [value, name] : {std::pair{r.x, "clip_rect_source.x"}, {r.y, "clip_rect_source.y"},
                             {r.z, "clip_rect_source.z"}})
    check_range(value, -kMaxPosition, kMaxPosition, owner, ": ", name);
  // Any size from 0 up: MPSRectNoClip's are huge.
  if (r.width < 0 || r.height < 0 || r.depth < 0)
    fail<ArgumentError>(owner, ": clip_rect_source sizes must be non-negative; given width ", r.width, ", height ",
                        r.height, ", depth ", r.depth);
}

PoolingDescriptor spatial_mean_pass(bool gradient, const Region& read, int64_t images, int64_t channels,
                                    const ImageDescriptor& source, const ImageDescriptor& destination) {
  PoolingDescriptor d;
  d.kind = PoolingKind::Average;
  d.gradient = gradient;
  d.window.kernel_width = d.window.stride_x = read.width;
  d.window.kernel_height = d.window.stride_y = read.height;
  d.source = source;
  d.destination = destination;
  d.images = images;
  d.channels = channels;
  d.width = d.height = 1;
  d.source_x = read.x;
  d.source_y = read.y;
  return d;
}

// ---------------------------------------------------------------- forward

NNReduceUnary::NNReduceUnary(std::shared_ptr<Device> device, ReductionKind kind)
    : UnaryKernel(std::move(device)), kind_(kind) {
  if (kind_ == ReductionKind::SpatialMean)
    primitive_maker<PoolingPrimitive>(this->device().backend());  // a family the backend lacks fails here
  else if (kind_ == ReductionKind::FeatureChannelsSum)
    primitive_maker<ReductionPrimitive>(this->device().backend());
  else
    fail<ArgumentError>("a reduction kernel: unknown kind ", static_cast<int32_t>(kind_),
                        "; expected 0 (spatial mean) or 1 (feature channels sum)");
}

const char* NNReduceUnary::class_name() const {
  // MPS's spatial mean node makes a kernel of no public class.
  return kind_ == ReductionKind::SpatialMean ? "MPSNNReduceSpatialMean" : "MPSNNReduceFeatureChannelsSum";
}

void NNReduceUnary::check_properties() const {
  UnaryKernel::check_properties();
  check_clip_rect_source(clip_rect_source, class_name());
}

Region NNReduceUnary::source_rectangle(const Image& source) const {
  // check_properties() passed: every sum below is far inside int64_t.
  const Region& r = clip_rect_source;
  const int64_t x0 = std::max<int64_t>(r.x, 0), y0 = std::max<int64_t>(r.y, 0);
  const int64_t x1 = r.width < source.width() - r.x ? r.x + r.width : source.width();
  const int64_t y1 = r.height < source.height() - r.y ? r.y + r.height : source.height();
  if (x1 <= x0 || y1 <= y0)
    fail<ShapeError>(class_name(), ": clip_rect_source (x ", r.x, ", y ", r.y, ", width ", r.width, ", height ",
                     r.height, ") does not intersect the ", source.width(), "x", source.height(), " source");
  return Region{x0, y0, 0, x1 - x0, y1 - y0, 1};
}

int64_t NNReduceUnary::destination_channels(const Image& source) const {
  return kind_ == ReductionKind::FeatureChannelsSum ? 1 : source_channels(source);
}

ImageDescriptor NNReduceUnary::destination_descriptor(const Image& source, const State*) {
  const Region read = source_rectangle(source);
  ImageDescriptor d;
  d.width = kind_ == ReductionKind::SpatialMean ? 1 : read.width;
  d.height = kind_ == ReductionKind::SpatialMean ? 1 : read.height;
  d.feature_channels = destination_channels(source);
  d.number_of_images = source.number_of_images();
  const DataType t = source.data_type();
  d.channel_format = (t == DataType::Float16 || t == DataType::Float32) ? t : DataType::Float32;
  return d;
}

std::shared_ptr<State> NNReduceUnary::new_result_state(const Image&) {
  if (kind_ != ReductionKind::SpatialMean)
    fail<TypeMismatchError>(class_name(), ": MPS has no gradient of the feature channel sum; it makes no state");
  return std::make_shared<ReductionGradientState>(device_ptr());
}

void NNReduceUnary::check_state(const State& state) const {
  if (kind_ != ReductionKind::SpatialMean || !dynamic_cast<const ReductionGradientState*>(&state))
    fail<TypeMismatchError>(class_name(), ": expected a state made by this kernel's result_state, given an ",
                            state.class_name());
}

void NNReduceUnary::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                           const std::shared_ptr<Image>& destination, const Geometry& resolved,
                           const std::shared_ptr<State>& state) {
  const Region read = source_rectangle(*source);
  Geometry g = resolved;
  g.width = kind_ == ReductionKind::SpatialMean ? 1 : read.width;
  g.height = kind_ == ReductionKind::SpatialMean ? 1 : read.height;
  g.source_x = read.x;
  g.source_y = read.y;
  if (g.x + g.width > destination->width() || g.y + g.height > destination->height())
    fail<ShapeError>(class_name(), ": the ", g.width, "x", g.height, " result at clip_rect's origin (", g.x, ", ",
                     g.y, ") does not fit the ", destination->width(), "x", destination->height(), " destination");
  const int64_t channels = source_channels(*source);
  if (auto* s = dynamic_cast<ReductionGradientState*>(state.get())) {
    // What the gradient reads: the pixel written and the rectangle averaged.
    s->geometry = g;
    s->read = read;
  }
  if (kind_ == ReductionKind::SpatialMean) {
    std::shared_ptr<PoolingPrimitive> primitive = cached_primitive(
        means_, device().backend(),
        spatial_mean_pass(false, read, g.images, channels, source->descriptor(), destination->descriptor()));
    command_buffer.record(keyed_by(primitive, source, destination, as_value(g), channels),
                          [primitive, source, destination, g, channels](ExecutionContext& c) {
      primitive->forward(c, whole_source_region(*source, g, channels), destination_region(*destination, g, channels));
    });
    return;
  }
  ReductionDescriptor d;
  d.source = source->descriptor();
  d.destination = destination->descriptor();
  d.images = g.images;
  d.channels = channels;
  d.height = g.height;
  d.width = g.width;
  std::shared_ptr<ReductionPrimitive> primitive = cached_primitive(sums_, device().backend(), d);
  command_buffer.record(
      keyed_by(primitive, source, destination, as_value(g), channels, weight),
      [primitive, source, destination, g, channels, weight = weight](ExecutionContext& c) {
        primitive->feature_channels_sum(c, source_region(*source, g, channels), destination_region(*destination, g, 1),
                                        weight);
      });
}

std::vector<std::shared_ptr<GradientKernel>> NNReduceUnary::make_gradient_kernels() const {
  if (kind_ != ReductionKind::SpatialMean) return {};
  return {std::make_shared<NNReduceSpatialMeanGradient>(device_ptr())};
}

// ---------------------------------------------------------------- gradient

NNReduceSpatialMeanGradient::NNReduceSpatialMeanGradient(std::shared_ptr<Device> device)
    : GradientKernel(std::move(device)) {
  primitive_maker<PoolingPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

const GradientState& NNReduceSpatialMeanGradient::gradient_state_of(const State& state) const {
  auto* s = dynamic_cast<const ReductionGradientState*>(&state);
  if (!s)
    fail<TypeMismatchError>(class_name(), ": expected the state of a spatial mean forward encode, given an ",
                            state.class_name());
  return *s;
}

void NNReduceSpatialMeanGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                         const std::shared_ptr<Image>& source_image,
                                         const std::shared_ptr<State>& state,
                                         const std::shared_ptr<Image>& destination_gradient) {
  const auto& s = static_cast<const ReductionGradientState&>(*state);
  const Geometry g = s.geometry;
  const int64_t channels = g.source_channels;
  std::shared_ptr<PoolingPrimitive> primitive = cached_primitive(
      primitives_, device().backend(),
      spatial_mean_pass(true, s.read, g.images, channels, destination_gradient->descriptor(),
                        source_gradient->descriptor()));
  record_zeros_outside_slice(command_buffer, destination_gradient, *source_image, g);
  command_buffer.record(keyed_by(primitive, source_gradient, source_image, destination_gradient, as_value(g), channels),
                        [primitive, source_gradient, source_image, destination_gradient, g,
                         channels](ExecutionContext& context) {
    const int64_t height = source_image->height(), width = source_image->width();
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        whole_source_region(*source_image, g, channels),
                        destination_gradient->region(g.source_image, g.source_channel, 0, 0, g.images, channels,
                                                     height, width));
  });
}

}  // namespace mpsx

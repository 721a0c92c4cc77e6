#include "mpsx/kernels/upsampling.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {
namespace {

const char* upsampling_name(UpsamplingKind kind, bool gradient) {
  switch (kind) {
    case UpsamplingKind::Nearest: return gradient ? "MPSCNNUpsamplingNearestGradient" : "MPSCNNUpsamplingNearest";
    case UpsamplingKind::Bilinear: return gradient ? "MPSCNNUpsamplingBilinearGradient" : "MPSCNNUpsamplingBilinear";
  }
  fail<ArgumentError>("unknown upsampling kind ", static_cast<int32_t>(kind), "; expected 0 or 1");
}

}  // namespace

bool UpsamplingDescriptor::operator==(const UpsamplingDescriptor& o) const {
  auto fields = [](const UpsamplingDescriptor& d) {
    return std::tie(d.kind, d.gradient, d.align_corners, d.scale_x, d.scale_y, d.source, d.destination, d.images,
                    d.channels, d.source_width, d.source_height, d.first_x, d.first_y, d.width, d.height);
  };
  return fields(*this) == fields(o);
}

std::vector<UpsamplingTap> upsampling_taps(UpsamplingKind kind, bool align_corners, int64_t scale, int64_t size,
                                           int64_t first, int64_t count) {
  std::vector<UpsamplingTap> taps(static_cast<size_t>(count));
  const int64_t upsampled = size * scale;
  for (int64_t o = 0; o < count; ++o) {
    const int64_t u = first + o;
    UpsamplingTap& t = taps[static_cast<size_t>(o)];
    if (kind == UpsamplingKind::Nearest) {
      t.i0 = t.i1 = std::min(u / scale, size - 1);
      continue;
    }
    double source;
    if (align_corners)
      source = upsampled > 1 ? static_cast<double>(u) * static_cast<double>(size - 1) / static_cast<double>(upsampled - 1)
                             : 0.0;
    else
      source = std::max((static_cast<double>(u) + 0.5) / static_cast<double>(scale) - 0.5, 0.0);
    t.i0 = std::min(static_cast<int64_t>(std::floor(source)), size - 1);
    t.i1 = std::min(t.i0 + 1, size - 1);
    t.lambda = static_cast<float>(source - static_cast<double>(t.i0));
  }
  return taps;
}

std::vector<std::pair<int64_t, int64_t>> upsampling_readers(const std::vector<UpsamplingTap>& taps, int64_t size) {
  std::vector<std::pair<int64_t, int64_t>> readers(static_cast<size_t>(size), {0, 0});
  std::vector<bool> seen(static_cast<size_t>(size), false);
  for (int64_t o = 0; o < static_cast<int64_t>(taps.size()); ++o) {
    for (int64_t i : {taps[static_cast<size_t>(o)].i0, taps[static_cast<size_t>(o)].i1}) {
      auto& r = readers[static_cast<size_t>(i)];
      if (!seen[static_cast<size_t>(i)]) {
        r = {o, o + 1};
        seen[static_cast<size_t>(i)] = true;
      } else {
        r.first = std::min(r.first, o);
        r.second = std::max(r.second, o + 1);
      }
    }
  }
  return readers;
}

UpsamplingParameters::UpsamplingParameters(UpsamplingKind kind, bool gradient, int64_t scale_x, int64_t scale_y,
                                           bool align_corners)
    : class_name_(upsampling_name(kind, gradient)),
      kind_(kind),
      gradient_(gradient),
      scale_x_(scale_x),
      scale_y_(scale_y),
      align_corners_(align_corners) {
  check_size(scale_x, class_name_, ": integer_scale_factor_x");
  check_size(scale_y, class_name_, ": integer_scale_factor_y");
}

UpsamplingDescriptor UpsamplingParameters::describe(const Geometry& g, int64_t channels, int64_t source_width,
                                                    int64_t source_height, const ImageDescriptor& source,
                                                    const ImageDescriptor& destination) const {
  UpsamplingDescriptor d;
  d.kind = kind_;
  d.gradient = gradient_;
  d.align_corners = align_corners_;
  d.scale_x = scale_x_;
  d.scale_y = scale_y_;
  d.source = source;
  d.destination = destination;
  d.images = g.images;
  d.channels = channels;
  d.source_width = source_width;
  d.source_height = source_height;
  d.first_x = g.source_x;
  d.first_y = g.source_y;
  d.width = g.width;
  d.height = g.height;
  return d;
}

// ---------------------------------------------------------------- forward

CNNUpsampling::CNNUpsampling(std::shared_ptr<Device> device, UpsamplingKind kind, int64_t scale_x, int64_t scale_y,
                             bool align_corners)
    : UnaryKernel(std::move(device)), UpsamplingParameters(kind, false, scale_x, scale_y, align_corners) {
  primitive_maker<UpsamplingPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

std::shared_ptr<State> CNNUpsampling::new_result_state(const Image&) {
  auto state = std::make_shared<UpsamplingGradientState>(device_ptr());
  state->scale_x = scale_factor_x();
  state->scale_y = scale_factor_y();
  state->align_corners = align_corners();
  return state;
}

void CNNUpsampling::check_state(const State& state) const {
  auto* s = dynamic_cast<const UpsamplingGradientState*>(&state);
  if (!s || s->scale_x != scale_factor_x() || s->scale_y != scale_factor_y() || s->align_corners != align_corners())
    fail<TypeMismatchError>(class_name(), ": expected a state made by this kernel's result_state, given an ",
                            state.class_name());
}

ImageDescriptor CNNUpsampling::destination_descriptor(const Image& source, const State*) {
  // The destination is the upsampled image; destination pixel (x, y) is
  // upsampled pixel offset + (x, y) - clip_rect.origin.
  const int64_t width = checked_mul(source.width(), scale_factor_x(), class_name(), ": upsampled width");
  const int64_t height = checked_mul(source.height(), scale_factor_y(), class_name(), ": upsampled height");
  if (width > kMaxDimension || height > kMaxDimension)
    fail<ShapeError>(class_name(), ": upsampling a ", source.width(), "x", source.height(), " image by ",
                     scale_factor_x(), "x", scale_factor_y(), " makes a ", width, "x", height,
                     " image; image sizes must be at most ", kMaxDimension);
  offset.x = 0;
  offset.y = 0;
  ImageDescriptor d;
  d.width = width;
  d.height = height;
  d.feature_channels = destination_channels(source);
  return with_source_images(source, d);
}

void CNNUpsampling::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                           const std::shared_ptr<Image>& destination, const Geometry& g,
                           const std::shared_ptr<State>&) {
  // check_properties() passed: these products and sums stay far inside int64_t.
  const int64_t upsampled_width = source->width() * scale_factor_x();
  const int64_t upsampled_height = source->height() * scale_factor_y();
  if (g.source_x < 0 || g.source_y < 0 || g.source_x + g.width > upsampled_width ||
      g.source_y + g.height > upsampled_height)
    fail<ShapeError>(class_name(), ": offset (", g.source_x, ", ", g.source_y, ") with a ", g.width, "x", g.height,
                     " region reads outside the ", upsampled_width, "x", upsampled_height,
                     " upsampled image of the ", source->width(), "x", source->height(), " source");
  const int64_t channels = source_channels(*source);
  UpsamplingDescriptor d = describe(g, channels, source->width(), source->height(), source->descriptor(),
                                    destination->descriptor());
  std::shared_ptr<UpsamplingPrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  command_buffer.record(keyed_by(primitive, source, destination, as_value(g), channels),
                        [primitive, source, destination, g, channels](ExecutionContext& context) {
    primitive->forward(context, whole_source_region(*source, g, channels),
                       destination_region(*destination, g, channels));
  });
}

// ---------------------------------------------------------------- gradient

CNNUpsamplingGradient::CNNUpsamplingGradient(std::shared_ptr<Device> device, UpsamplingKind kind, int64_t scale_x,
                                             int64_t scale_y, bool align_corners)
    : GradientKernel(std::move(device)), UpsamplingParameters(kind, true, scale_x, scale_y, align_corners) {
  primitive_maker<UpsamplingPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

const GradientState& CNNUpsamplingGradient::gradient_state_of(const State& state) const {
  auto* s = dynamic_cast<const UpsamplingGradientState*>(&state);
  if (!s)
    fail<TypeMismatchError>(class_name(), ": expected the state of an upsampling forward encode, given an ",
                            state.class_name());
  if (s->scale_x != scale_factor_x() || s->scale_y != scale_factor_y() || s->align_corners != align_corners())
    fail<ArgumentError>(class_name(), ": the forward pass upsampled by ", s->scale_x, "x", s->scale_y,
                        " with align_corners ", s->align_corners ? "True" : "False", "; this kernel has ",
                        scale_factor_x(), "x", scale_factor_y(), " with align_corners ",
                        align_corners() ? "True" : "False");
  return *s;
}

void CNNUpsamplingGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                   const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                                   const std::shared_ptr<Image>& destination_gradient) {
  const Geometry g = static_cast<const GradientState&>(*state).geometry;
  const int64_t channels = g.source_channels;
  const int64_t height = source_image->height(), width = source_image->width();
  UpsamplingDescriptor d =
      describe(g, channels, width, height, destination_gradient->descriptor(), source_gradient->descriptor());
  std::shared_ptr<UpsamplingPrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  record_zeros_outside_slice(command_buffer, destination_gradient, *source_image, g);
  command_buffer.record(keyed_by(primitive, source_gradient, destination_gradient, as_value(g), channels, height, width),
                        [primitive, source_gradient, destination_gradient, g, channels, height,
                         width](ExecutionContext& context) {
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        destination_gradient->region(g.source_image, g.source_channel, 0, 0, g.images, channels,
                                                     height, width));
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNUpsampling::make_gradient_kernels() const {
  return {std::make_shared<CNNUpsamplingGradient>(device_ptr(), kind(), scale_factor_x(), scale_factor_y(),
                                                  align_corners())};
}

}  // namespace mpsx

#include "mpsx/kernels/scale.h"

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

constexpr double kPi = 3.14159265358979323846;
constexpr double kLanczosLobes = 3;

double sinc(double x) { return x == 0 ? 1.0 : std::sin(kPi * x) / (kPi * x); }

// The filter at distance x from the centre, in source pixels once scaled.
double filter(ScaleKind kind, double x) {
  x = std::abs(x);
  if (kind == ScaleKind::Bilinear) return x < 1 ? 1 - x : 0;
  return x < kLanczosLobes ? sinc(x) * sinc(x / kLanczosLobes) : 0;
}

}  // namespace

void check_scale_transform(const ScaleTransform& t, const char* owner, const char* what) {
  for (auto [value, name] : {std::pair{t.scale_x, "scale_x"}, {t.scale_y, "scale_y"}})
    if (!(std::isfinite(value) && value > 0))
      fail<ArgumentError>(owner, ": ", what, ".", name, " must be finite and positive, given ", value);
  for (auto [value, name] : {std::pair{t.translate_x, "translate_x"}, {t.translate_y, "translate_y"}})
    if (!std::isfinite(value)) fail<ArgumentError>(owner, ": ", what, ".", name, " must be finite, given ", value);
}

bool ScaleDescriptor::operator==(const ScaleDescriptor& o) const {
  auto fields = [](const ScaleDescriptor& d) {
    return std::tie(d.kind, d.transform, d.source, d.destination, d.images, d.channels, d.source_width,
                    d.source_height, d.offset_x, d.offset_y, d.first_x, d.first_y, d.width, d.height);
  };
  return fields(*this) == fields(o);
}

ScaleTaps scale_taps(ScaleKind kind, double scale, double translate, int64_t offset, int64_t size, int64_t first,
                     int64_t count) {
  // Lanczos low-passes when downscaling: its window widens by 1 / scale.
  const double stretch = kind == ScaleKind::Lanczos ? std::min(scale, 1.0) : 1.0;
  const double support = (kind == ScaleKind::Lanczos ? kLanczosLobes : 1.0) / stretch;
  // A position past the image's edges samples at the edge: c stays within
  // the image's extent, -0.5 .. size - 0.5 in pixel centres.
  auto centre = [&](int64_t o) {
    const double c = static_cast<double>(offset) + (static_cast<double>(first + o) + 0.5 - translate) / scale - 0.5;
    return std::clamp(c, -0.5, static_cast<double>(size) - 0.5);
  };
  // The source pixels strictly inside the support around c, clipped to the image.
  auto window = [&](double c) {
    const double lo = std::clamp(std::floor(c - support) + 1, 0.0, static_cast<double>(size));
    const double hi = std::clamp(std::ceil(c + support) - 1, -1.0, static_cast<double>(size - 1));
    return std::pair{static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
  };
  ScaleTaps taps;
  taps.per_output = 1;
  for (int64_t o = 0; o < count; ++o) {
    auto [lo, hi] = window(centre(o));
    taps.per_output = std::max(taps.per_output, hi - lo + 1);
  }
  const size_t total = static_cast<size_t>(count * taps.per_output);
  taps.index.assign(total, 0);
  taps.weight.assign(total, 0.0f);
  for (int64_t o = 0; o < count; ++o) {
    const double c = centre(o);
    auto [lo, hi] = window(c);
    const size_t at = static_cast<size_t>(o * taps.per_output);
    // Taps outside the image are dropped and the rest normalized to sum 1
    // (as Pillow resamples). With c inside the image's extent the pixel
    // nearest c weighs at least filter(0.5) and the sum stays above 0.49.
    double sum = 0;
    for (int64_t i = lo; i <= hi; ++i) sum += filter(kind, (c - static_cast<double>(i)) * stretch);
    for (int64_t i = lo; i <= hi; ++i) {
      taps.index[at + static_cast<size_t>(i - lo)] = i;
      taps.weight[at + static_cast<size_t>(i - lo)] =
          static_cast<float>(filter(kind, (c - static_cast<double>(i)) * stretch) / sum);
    }
  }
  return taps;
}

// ---------------------------------------------------------------- kernel

ImageScale::ImageScale(std::shared_ptr<Device> device, ScaleKind kind) : UnaryKernel(std::move(device)), kind_(kind) {
  if (kind_ != ScaleKind::Bilinear && kind_ != ScaleKind::Lanczos)
    fail<ArgumentError>("a scale kernel: unknown kind ", static_cast<int32_t>(kind_),
                        "; expected 0 (bilinear) or 1 (Lanczos)");
  primitive_maker<ScalePrimitive>(this->device().backend());  // a family the backend lacks fails here
}

const char* ImageScale::class_name() const {
  return kind_ == ScaleKind::Bilinear ? "MPSImageBilinearScale" : "MPSImageLanczosScale";
}

void ImageScale::check_properties() const {
  UnaryKernel::check_properties();
  check_size(output_width, class_name(), ": output width");
  check_size(output_height, class_name(), ": output height");
  if (scale_transform) check_scale_transform(*scale_transform, class_name(), "scale_transform");
}

ImageDescriptor ImageScale::destination_descriptor(const Image& source, const State*) {
  ImageDescriptor d;
  d.width = output_width;
  d.height = output_height;
  d.feature_channels = destination_channels(source);
  return with_source_images(source, d);
}

std::shared_ptr<State> ImageScale::new_result_state(const Image&) {
  fail<TypeMismatchError>(class_name(), ": MPS has no gradient of image scaling; it makes no state");
}

void ImageScale::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                        const std::shared_ptr<Image>& destination, const Geometry& g, const std::shared_ptr<State>&) {
  const int64_t channels = source_channels(*source);
  ScaleDescriptor d;
  d.kind = kind_;
  // MPSImageScale.h: "If the scaleTransform is NULL, then [it] will rescale the image so that the source image
  // fits exactly into the destination texture."
  d.transform = scale_transform.value_or(
      ScaleTransform{static_cast<double>(destination->width()) / static_cast<double>(source->width()),
                     static_cast<double>(destination->height()) / static_cast<double>(source->height()), 0, 0});
  d.source = source->descriptor();
  d.destination = destination->descriptor();
  d.images = g.images;
  d.channels = channels;
  d.source_width = source->width();
  d.source_height = source->height();
  d.offset_x = offset.x;
  d.offset_y = offset.y;
  // check_properties() passed: these differences stay far inside int64_t.
  d.first_x = g.x - clip_rect.x;
  d.first_y = g.y - clip_rect.y;
  d.width = g.width;
  d.height = g.height;
  std::shared_ptr<ScalePrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  command_buffer.record([primitive = std::move(primitive), source, destination, g, channels](ExecutionContext& context) {
    primitive->forward(context, whole_source_region(*source, g, channels),
                       destination_region(*destination, g, channels));
  });
}

}  // namespace mpsx

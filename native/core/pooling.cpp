#include "mpsx/kernels/pooling.h"

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
namespace {

const char* pooling_name(PoolingKind kind, bool gradient) {
  switch (kind) {
    case PoolingKind::Max: return gradient ? "MPSCNNPoolingMaxGradient" : "MPSCNNPoolingMax";
    case PoolingKind::Average: return gradient ? "MPSCNNPoolingAverageGradient" : "MPSCNNPoolingAverage";
    case PoolingKind::L2Norm: return gradient ? "MPSCNNPoolingL2NormGradient" : "MPSCNNPoolingL2Norm";
    case PoolingKind::DilatedMax: return gradient ? "MPSCNNDilatedPoolingMaxGradient" : "MPSCNNDilatedPoolingMax";
  }
  fail<ArgumentError>("unknown pooling kind ", static_cast<int32_t>(kind), "; expected 0 to 3");
}

void check_at_least_one(const char* kernel, const char* name, int64_t value) {
  if (value < 1) fail<ArgumentError>(kernel, ": ", name, " must be at least 1, given ", value);
}

}  // namespace

bool PoolingDescriptor::operator==(const PoolingDescriptor& o) const {
  auto fields = [](const PoolingDescriptor& d) {
    const Window& w = d.window;
    return std::tie(d.kind, d.gradient, d.edge_mode, w.kernel_width, w.kernel_height, w.stride_x, w.stride_y,
                    w.dilation_x, w.dilation_y, d.count_pad_x, d.count_pad_y, d.source, d.destination, d.images,
                    d.channels, d.width, d.height, d.source_x, d.source_y);
  };
  return fields(*this) == fields(o);
}

PoolingParameters::PoolingParameters(PoolingKind kind, bool gradient, int64_t kernel_width, int64_t kernel_height,
                                     int64_t stride_x, int64_t stride_y, int64_t dilation_x, int64_t dilation_y)
    : class_name_(pooling_name(kind, gradient)),
      kind_(kind),
      gradient_(gradient),
      window_{kernel_width, kernel_height, stride_x, stride_y, dilation_x, dilation_y} {
  window_.check(class_name_);
}

void PoolingParameters::set_zero_pad_size_x(int64_t value) {
  check_range(value, 0, kMaxDimension, class_name_, ": zero_pad_size_x");
  zero_pad_size_x_ = value;
}

void PoolingParameters::set_zero_pad_size_y(int64_t value) {
  check_range(value, 0, kMaxDimension, class_name_, ": zero_pad_size_y");
  zero_pad_size_y_ = value;
}

PoolingDescriptor PoolingParameters::describe(const Kernel& kernel, const Geometry& g, int64_t channels,
                                              const ImageDescriptor& source,
                                              const ImageDescriptor& destination) const {
  PoolingDescriptor d;
  d.kind = kind_;
  d.gradient = gradient_;
  d.edge_mode = kernel.edge_mode;
  d.window = window_;
  if (kind_ == PoolingKind::Average && kernel.edge_mode == EdgeMode::Clamp) {
    d.count_pad_x = zero_pad_size_x_;
    d.count_pad_y = zero_pad_size_y_;
  } else if (kind_ == PoolingKind::Average && (kernel.padding_method & padding::kExcludeEdges)) {
    // Caffe's padding: what the window of destination pixel 0 reads before
    // the image, on both sides; taps beyond it do not count.
    d.count_pad_x = std::max<int64_t>(0, g.x * window_.stride_x - g.source_x);
    d.count_pad_y = std::max<int64_t>(0, g.y * window_.stride_y - g.source_y);
  }
  d.source = source;
  d.destination = destination;
  d.images = g.images;
  d.channels = channels;
  d.width = g.width;
  d.height = g.height;
  d.source_x = g.source_x;
  d.source_y = g.source_y;
  return d;
}

CNNPooling::CNNPooling(std::shared_ptr<Device> device, PoolingKind kind, int64_t kernel_width, int64_t kernel_height,
                       int64_t stride_x, int64_t stride_y, int64_t dilation_x, int64_t dilation_y)
    : UnaryKernel(std::move(device)),
      PoolingParameters(kind, false, kernel_width, kernel_height, stride_x, stride_y, dilation_x, dilation_y) {
  primitive_maker<PoolingPrimitive>(this->device().backend());  // a family the backend lacks fails here
}

void CNNPooling::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
                        const std::shared_ptr<Image>& destination, const Geometry& g, const std::shared_ptr<State>&) {
  int64_t channels = source_channels(*source);
  PoolingDescriptor d = describe(*this, g, channels, source->descriptor(), destination->descriptor());
  std::shared_ptr<PoolingPrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  command_buffer.record(keyed_by(primitive, source, destination, as_value(g), channels),
                        [primitive, source, destination, g, channels](ExecutionContext& context) {
    primitive->forward(context, whole_source_region(*source, g, channels),
                       destination_region(*destination, g, channels));
  });
}

CNNPoolingGradient::CNNPoolingGradient(std::shared_ptr<Device> device, PoolingKind kind, int64_t kernel_width,
                                       int64_t kernel_height, int64_t stride_x, int64_t stride_y, int64_t dilation_x,
                                       int64_t dilation_y)
    : GradientKernel(std::move(device)),
      PoolingParameters(kind, true, kernel_width, kernel_height, stride_x, stride_y, dilation_x, dilation_y) {
  primitive_maker<PoolingPrimitive>(this->device().backend());  // a family the backend lacks fails here
  const int64_t taps = kernel_width * kernel_height;
  const int64_t limit = this->device().backend().limits().max_pooling_gradient_taps;
  if (is_max(kind) && taps > limit)
    fail<ShapeError>(class_name(), ": a ", kernel_width, "x", kernel_height, " window has ", taps,
                     " taps; max pooling gradients on device ", this->device().name(), " take at most ", limit);
}

void CNNPoolingGradient::set_source_size(int64_t width, int64_t height, int64_t depth) {
  check_at_least_one(class_name(), "source_size.width", width);
  check_at_least_one(class_name(), "source_size.height", height);
  check_at_least_one(class_name(), "source_size.depth", depth);
  source_size_[0] = width;
  source_size_[1] = height;
  source_size_[2] = depth;
}

void CNNPoolingGradient::record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
                                const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
                                const std::shared_ptr<Image>& destination_gradient) {
  Geometry g = static_cast<const GradientState&>(*state).geometry;
  g.width = std::min(g.width, source_size_[0]);
  g.height = std::min(g.height, source_size_[1]);
  g.images = std::min(g.images, source_size_[2]);
  int64_t channels = g.source_channels;
  PoolingDescriptor d =
      describe(*this, g, channels, destination_gradient->descriptor(), source_gradient->descriptor());
  std::shared_ptr<PoolingPrimitive> primitive = cached_primitive(primitives_, device().backend(), d);
  record_zeros_outside_slice(command_buffer, destination_gradient, *source_image, g);
  command_buffer.record(keyed_by(primitive, source_gradient, source_image, destination_gradient, as_value(g), channels),
                        [primitive, source_gradient, source_image, destination_gradient, g,
                         channels](ExecutionContext& context) {
    int64_t height = source_image->height(), width = source_image->width();
    primitive->gradient(context, destination_region(*source_gradient, g, channels),
                        whole_source_region(*source_image, g, channels),
                        destination_gradient->region(g.source_image, g.source_channel, 0, 0, g.images, channels,
                                                     height, width));
  });
}

std::vector<std::shared_ptr<GradientKernel>> CNNPooling::make_gradient_kernels() const {
  const Window& w = pooling_window();
  auto gradient = std::make_shared<CNNPoolingGradient>(device_ptr(), kind(), w.kernel_width, w.kernel_height,
                                                       w.stride_x, w.stride_y, w.dilation_x, w.dilation_y);
  gradient->edge_mode = edge_mode;  // the pooling gradient reads the forward edge mode from its own
  gradient->set_zero_pad_size_x(zero_pad_size_x());
  gradient->set_zero_pad_size_y(zero_pad_size_y());
  return {gradient};
}

}  // namespace mpsx

// MPSCNNPooling (Max, Average, L2Norm, DilatedMax) and MPSCNNPoolingGradient.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

#include "mpsx/kernel.h"

namespace mpsx {

class ExecutionContext;

// The MPS pooling class: what the window computes.
enum class PoolingKind : int32_t { Max = 0, Average, L2Norm, DilatedMax };

inline bool is_max(PoolingKind kind) { return kind == PoolingKind::Max || kind == PoolingKind::DilatedMax; }

// Calls f with `kind` as a std::integral_constant, for kernel templates;
// dilated max pools as max.
template <class F>
void with_pooling_kind(PoolingKind kind, F&& f) {
  switch (kind) {
    case PoolingKind::Max:
    case PoolingKind::DilatedMax: f(std::integral_constant<PoolingKind, PoolingKind::Max>{}); return;
    case PoolingKind::Average: f(std::integral_constant<PoolingKind, PoolingKind::Average>{}); return;
    case PoolingKind::L2Norm: f(std::integral_constant<PoolingKind, PoolingKind::L2Norm>{}); return;
  }
}

// One pooling pass over fixed images and geometry: the key a kernel caches
// its primitive under, and everything the backend builds it from.
struct PoolingDescriptor {
  // Average pooling divides by the number of window taps that lie within
  // count_pad pixels beyond each source edge (MPSImageEdgeModeClamp with
  // zeroPadSize, MPSNNPaddingMethodExcludeEdges); kAllTaps counts the whole
  // window (MPSImageEdgeModeZero).
  static constexpr int64_t kAllTaps = -1;

  PoolingKind kind = PoolingKind::Max;
  bool gradient = false;  // built for the gradient pass, else the forward pass
  EdgeMode edge_mode = EdgeMode::Zero;
  Window window;
  int64_t count_pad_x = kAllTaps, count_pad_y = kAllTaps;
  // The forward source and destination images: x and y for the forward pass,
  // the destination gradient and the source gradient for the gradient pass.
  ImageDescriptor source, destination;
  int64_t images = 0, channels = 0;
  // Destination pixels pooled, and the source position of the top-left tap
  // of the first one (negative where the window starts off the image).
  int64_t width = 0, height = 0;
  int64_t source_x = 0, source_y = 0;

  bool operator==(const PoolingDescriptor& o) const;
};

// What a backend runs for a PoolingDescriptor. Regions cover all pixels of
// the pooled images and channels of the forward source (`source`,
// `source_image`, `destination_gradient`) or the pixels pooled into
// (`destination`, `source_gradient`).
class PoolingPrimitive : public PrimitiveInterface<PoolingDescriptor> {
 public:
  static constexpr const char* family = "pooling";
  virtual void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const = 0;
  // Writes every pixel of destination_gradient: the sum over the windows
  // that read it of d out / d in times the source gradient, zero elsewhere.
  virtual void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source_image,
                        const ImageRegion& destination_gradient) const = 0;
};

// Pooling geometry shared by the forward and gradient kernels.
class PoolingParameters {
 public:
  // Throws as Window::check does.
  PoolingParameters(PoolingKind kind, bool gradient, int64_t kernel_width, int64_t kernel_height, int64_t stride_x,
                    int64_t stride_y, int64_t dilation_x, int64_t dilation_y);
  // The MPS class name, e.g. "MPSCNNPoolingMaxGradient".
  const char* pooling_class_name() const { return class_name_; }
  PoolingKind kind() const { return kind_; }
  const Window& pooling_window() const { return window_; }
  // MPSCNNPoolingAverage zeroPadSizeX / zeroPadSizeY, 0 to kMaxDimension.
  int64_t zero_pad_size_x() const { return zero_pad_size_x_; }
  int64_t zero_pad_size_y() const { return zero_pad_size_y_; }
  void set_zero_pad_size_x(int64_t value);
  void set_zero_pad_size_y(int64_t value);

 protected:
  // The descriptor of a pass over `g` (the forward encode's geometry, pixels
  // pooled as the pass covers them) with the kernel's edge mode and padding
  // method, between images shaped as `source` and `destination`.
  PoolingDescriptor describe(const Kernel& kernel, const Geometry& g, int64_t channels, const ImageDescriptor& source,
                             const ImageDescriptor& destination) const;

 private:
  const char* class_name_;
  PoolingKind kind_;
  bool gradient_;
  Window window_;
  int64_t zero_pad_size_x_ = 0, zero_pad_size_y_ = 0;
};

// MPSCNNPooling and its subclasses (by kind).
class CNNPooling : public UnaryKernel, public PoolingParameters {
 public:
  CNNPooling(std::shared_ptr<Device> device, PoolingKind kind, int64_t kernel_width, int64_t kernel_height,
             int64_t stride_x, int64_t stride_y, int64_t dilation_x = 1, int64_t dilation_y = 1);
  const char* class_name() const override { return pooling_class_name(); }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;

 protected:
  Window window() const override { return pooling_window(); }
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source,
              const std::shared_ptr<Image>& destination, const Geometry& geometry,
              const std::shared_ptr<State>& state) override;

 private:
  PrimitiveCache<PoolingDescriptor, PoolingPrimitive> primitives_;
};

// MPSCNNPoolingGradient and its subclasses (by kind). Where the windows lie
// comes from the gradient state (the forward encode's geometry); their size,
// strides and edge handling from this kernel, set as on the forward kernel.
class CNNPoolingGradient : public GradientKernel, public PoolingParameters {
 public:
  // Also throws ShapeError for a max pooling window of more taps than the
  // backend's BackendLimits::max_pooling_gradient_taps.
  CNNPoolingGradient(std::shared_ptr<Device> device, PoolingKind kind, int64_t kernel_width, int64_t kernel_height,
                     int64_t stride_x, int64_t stride_y, int64_t dilation_x = 1, int64_t dilation_y = 1);
  const char* class_name() const override { return pooling_class_name(); }

  // MPSCNNPoolingGradient sourceSize: how many source gradient pixels (and
  // images), from the forward clip origin on, contribute; kAll: every one.
  static constexpr int64_t kAll = INT64_MAX;
  int64_t source_size_width() const { return source_size_[0]; }
  int64_t source_size_height() const { return source_size_[1]; }
  int64_t source_size_depth() const { return source_size_[2]; }
  void set_source_size(int64_t width, int64_t height, int64_t depth);
  // The secondary (forward source) window is the forward pooling's.
  int64_t kernel_width(bool secondary) const override { return secondary ? pooling_window().kernel_width : 1; }
  int64_t kernel_height(bool secondary) const override { return secondary ? pooling_window().kernel_height : 1; }
  int64_t dilation_rate_x(bool secondary) const override { return secondary ? pooling_window().dilation_x : 1; }
  int64_t dilation_rate_y(bool secondary) const override { return secondary ? pooling_window().dilation_y : 1; }

 protected:
  void record(CommandBuffer& command_buffer, const std::shared_ptr<Image>& source_gradient,
              const std::shared_ptr<Image>& source_image, const std::shared_ptr<State>& state,
              const std::shared_ptr<Image>& destination_gradient) override;

 private:
  int64_t source_size_[3] = {kAll, kAll, kAll};
  PrimitiveCache<PoolingDescriptor, PoolingPrimitive> primitives_;
};

}  // namespace mpsx

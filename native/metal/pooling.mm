#include "mpsx/kernels/pooling.h"

#include <algorithm>
#include <cstdint>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::metal {
namespace {

// The region less its first skip_x columns and skip_y rows.
MTLRegion clip_rect_after(const ImageRegion& region, int64_t skip_x, int64_t skip_y) {
  return MTLRegionMake3D(ns(region.x + skip_x), ns(region.y + skip_y), 0, ns(region.w - skip_x),
                         ns(region.h - skip_y), 1);
}

// An MPS pooling offset is the centre of the window of the clipRect's first
// pixel: floor(extent / 2) right of and below its top-left tap
// (MPSCNNPooling.h, "Pooling window notes"; MPSCNNPoolingMaxGradient.h on
// dilated windows of even size).
MPSOffset window_centre(const PoolingDescriptor& d) {
  return MPSOffset{d.source_x + d.window.extent_x() / 2, d.source_y + d.window.extent_y() / 2, 0};
}

// What the windows read off the image. Average pooling counting the taps
// within count_pad pixels of the image is MPSImageEdgeModeClamp with
// zeroPadSize; L2 norm pooling leaves such taps out, which the zeros of
// MPSImageEdgeModeZero do too (a clamped edge pixel would count again).
MPSImageEdgeMode edge_mode(const PoolingDescriptor& d) {
  switch (d.kind) {
    case PoolingKind::Average:
      return d.count_pad_x == PoolingDescriptor::kAllTaps ? MPSImageEdgeModeZero : MPSImageEdgeModeClamp;
    case PoolingKind::L2Norm: return MPSImageEdgeModeZero;
    case PoolingKind::Max:
    case PoolingKind::DilatedMax: break;
  }
  return d.edge_mode == EdgeMode::Clamp ? MPSImageEdgeModeClamp : MPSImageEdgeModeZero;
}

NSUInteger zero_pad_size(int64_t count_pad) { return ns(count_pad == PoolingDescriptor::kAllTaps ? 0 : count_pad); }

// Max pooling with a dilation pools as MPSCNNDilatedPoolingMax; MPS dilates no other kind.
bool dilated(const PoolingDescriptor& d) {
  return d.kind == PoolingKind::DilatedMax || d.window.dilation_x != 1 || d.window.dilation_y != 1;
}

// The forward classes and their gradients take the same initializers.
template <class Kernel>
Kernel* pooling_kernel(id<MTLDevice> device, const Window& w) {
  return [[Kernel alloc] initWithDevice:device
                            kernelWidth:ns(w.kernel_width)
                           kernelHeight:ns(w.kernel_height)
                        strideInPixelsX:ns(w.stride_x)
                        strideInPixelsY:ns(w.stride_y)];
}

template <class Kernel>
Kernel* dilated_pooling_kernel(id<MTLDevice> device, const Window& w) {
  return [[Kernel alloc] initWithDevice:device
                            kernelWidth:ns(w.kernel_width)
                           kernelHeight:ns(w.kernel_height)
                          dilationRateX:ns(w.dilation_x)
                          dilationRateY:ns(w.dilation_y)
                        strideInPixelsX:ns(w.stride_x)
                        strideInPixelsY:ns(w.stride_y)];
}

// The pooling class of `d`'s kind: Base is MPSCNNPooling or
// MPSCNNPoolingGradient, the others its subclasses.
template <class Base, class Max, class DilatedMax, class Average, class L2Norm>
Base* pooling_of_kind(id<MTLDevice> device, const PoolingDescriptor& d) {
  switch (d.kind) {
    case PoolingKind::Max:
    case PoolingKind::DilatedMax:
      if (dilated(d)) return dilated_pooling_kernel<DilatedMax>(device, d.window);
      return pooling_kernel<Max>(device, d.window);
    case PoolingKind::Average: {
      Average* average = pooling_kernel<Average>(device, d.window);
      average.zeroPadSizeX = zero_pad_size(d.count_pad_x);
      average.zeroPadSizeY = zero_pad_size(d.count_pad_y);
      return average;
    }
    case PoolingKind::L2Norm: return pooling_kernel<L2Norm>(device, d.window);
  }
  return nil;
}

MPSCNNPooling* make_pooling(id<MTLDevice> device, const PoolingDescriptor& d) {
  MPSCNNPooling* pooling = pooling_of_kind<MPSCNNPooling, MPSCNNPoolingMax, MPSCNNDilatedPoolingMax,
                                           MPSCNNPoolingAverage, MPSCNNPoolingL2Norm>(device, d);
  pooling.edgeMode = edge_mode(d);
  return pooling;
}

MPSCNNPoolingGradient* make_pooling_gradient(id<MTLDevice> device, const PoolingDescriptor& d) {
  MPSCNNPoolingGradient* gradient =
      pooling_of_kind<MPSCNNPoolingGradient, MPSCNNPoolingMaxGradient, MPSCNNDilatedPoolingMaxGradient,
                      MPSCNNPoolingAverageGradient, MPSCNNPoolingL2NormGradient>(device, d);
  // The forward pass's edge mode belongs to the secondary (forward source)
  // image, as -[MPSCNNGradientKernel readGradientState:] would set it.
  gradient.secondaryEdgeMode = edge_mode(d);
  return gradient;
}

class MetalPooling final : public PoolingPrimitive {
 public:
  MetalPooling(const MetalBackend& backend, const PoolingDescriptor& d)
      : d_(d),
        pooling_(make_pooling(backend.device(), d)),  // the gradient pass makes its states with it
        gradient_(d.gradient ? make_pooling_gradient(backend.device(), d) : nil) {}

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    set_forward(source, destination);
    encode_batch(pooling_, context_of(context).command_buffer(), source, destination);
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source_image,
                const ImageRegion& destination_gradient) const override {
    MetalContext& metal = context_of(context);
    // MPSCNNPoolingGradient writes from the first source pixel the first
    // window reads (clamped to the image) at the clipRect origin on, and
    // zeroes what no window reads there; the pixels before it are ours.
    const int64_t skip_x = std::clamp<int64_t>(d_.source_x, 0, destination_gradient.w);
    const int64_t skip_y = std::clamp<int64_t>(d_.source_y, 0, destination_gradient.h);
    if (skip_x > 0 || skip_y > 0) metal.fill_zero_slices(destination_gradient);
    if (skip_x == destination_gradient.w || skip_y == destination_gradient.h) return;  // every window right or below

    MPSImageBatch* source_images = images_of(source_image);
    MPSImageBatch* source_gradients = images_of(source_gradient);
    // The gradient encode takes the forward pass's states: made by the
    // forward kernel, set as for that pass.
    set_forward(source_image, source_gradient);
    MPSStateBatch* states = [pooling_ resultStateBatchForSourceImage:source_images
                                                        sourceStates:nil
                                                    destinationImage:source_gradients];
    set_gradient_regions(gradient_, source_gradient, source_image, window_centre(d_), destination_gradient,
                         slice_channels);
    gradient_.sourceSize = MTLSizeMake(ns(source_gradient.w), ns(source_gradient.h), 1);
    gradient_.clipRect = clip_rect_after(destination_gradient, skip_x, skip_y);
    encode_gradient_batch(gradient_, metal.command_buffer(), source_gradients, source_images, states,
                          destination_gradient);
  }

 private:
  void set_forward(const ImageRegion& source, const ImageRegion& destination) const {
    set_regions(pooling_, window_centre(d_), source, destination, slice_channels);
  }

  PoolingDescriptor d_;
  MPSCNNPooling* pooling_;
  MPSCNNPoolingGradient* gradient_;
};

std::unique_ptr<PoolingPrimitive> make_pooling(Backend& backend, const PoolingDescriptor& descriptor) {
  if (!is_max(descriptor.kind) && (descriptor.window.dilation_x != 1 || descriptor.window.dilation_y != 1))
    fail<ArgumentError>(descriptor.kind == PoolingKind::Average ? "MPSCNNPoolingAverage" : "MPSCNNPoolingL2Norm",
                        ": MPS dilates max pooling only (MPSCNNDilatedPoolingMax); given dilation ",
                        descriptor.window.dilation_x, "x", descriptor.window.dilation_y);
  return std::make_unique<MetalPooling>(static_cast<MetalBackend&>(backend), descriptor);
}

const RegisterPrimitive<PoolingPrimitive> registered("metal", make_pooling);

}  // namespace

}  // namespace mpsx::metal

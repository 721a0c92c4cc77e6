#include "mpsx/kernels/upsampling.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

class CpuUpsampling final : public UpsamplingPrimitive {
 public:
  CpuUpsampling(const CpuBackend& backend, const UpsamplingDescriptor& d)
      : d_(d),
        taps_x_(upsampling_taps(d.kind, d.align_corners, d.scale_x, d.source_width, d.first_x, d.width)),
        taps_y_(upsampling_taps(d.kind, d.align_corners, d.scale_y, d.source_height, d.first_y, d.height)) {
    if (d.gradient) {
      readers_x_ = upsampling_readers(taps_x_, d.source_width);
      readers_y_ = upsampling_readers(taps_y_, d.source_height);
    }
    // oneDNN's resampling computes torch's align_corners=False interpolation
    // over the whole upsampled image (docs/semantics.md, "Upsampling").
    if (!d.align_corners && d.first_x == 0 && d.first_y == 0 && d.width == d.source_width * d.scale_x &&
        d.height == d.source_height * d.scale_y)
      build(backend);
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    float32_pass(context, source, destination, [&](const Float32Region& x, const Float32Region& y) {
      if (onednn_) {
        execute_and_wait(context_of(context), forward_, source_desc_, x.data(), destination_desc_, y.data());
      } else {
        interpolate(x.region(), y.region());
      }
    });
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                const ImageRegion& destination_gradient) const override {
    float32_pass(context, source_gradient, destination_gradient, [&](const Float32Region& dy, const Float32Region& dx) {
      if (onednn_) {
        CpuContext& cpu = context_of(context);
        dnnl::memory diff_dst(destination_desc_, cpu.engine(), dy.data());
        dnnl::memory diff_src(source_desc_, cpu.engine(), dx.data());
        backward_.execute(cpu.stream(), {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_src}});
        cpu.stream().wait();
      } else {
        transpose(dy.region(), dx.region());
      }
    });
  }

 private:
  // y = the interpolation of x at the taps.
  void interpolate(const ImageRegion& in, const ImageRegion& out) const {
    const float* x = static_cast<const float*>(in.data);
    float* y = static_cast<float*>(out.data);
    detail::parallel_rows(out, 16384, [&](int64_t n, int64_t row) {
      const UpsamplingTap& ty = taps_y_[static_cast<size_t>(row)];
      for (int64_t column = 0; column < out.w; ++column) {
        const UpsamplingTap& tx = taps_x_[static_cast<size_t>(column)];
        const float* p00 = x + detail::pixel_offset(in, n, ty.i0, tx.i0);
        const float* p01 = x + detail::pixel_offset(in, n, ty.i0, tx.i1);
        const float* p10 = x + detail::pixel_offset(in, n, ty.i1, tx.i0);
        const float* p11 = x + detail::pixel_offset(in, n, ty.i1, tx.i1);
        float* q = y + detail::pixel_offset(out, n, row, column);
        for (int64_t c = 0; c < out.c; ++c) {
          const int64_t k = c * in.stride.c;
          float top = (1.0f - tx.lambda) * p00[k] + tx.lambda * p01[k];
          float bottom = (1.0f - tx.lambda) * p10[k] + tx.lambda * p11[k];
          q[c * out.stride.c] = (1.0f - ty.lambda) * top + ty.lambda * bottom;
        }
      }
    });
  }

  // dx = the transpose of the interpolation applied to dy: each source pixel
  // gathers from the upsampled pixels that read it.
  void transpose(const ImageRegion& g, const ImageRegion& out) const {
    const float* dy = static_cast<const float*>(g.data);
    float* dx = static_cast<float*>(out.data);
    detail::parallel_rows(out, 4096, [&](int64_t n, int64_t i) {
      const auto [y0, y1] = readers_y_[static_cast<size_t>(i)];
      for (int64_t j = 0; j < out.w; ++j) {
        const auto [x0, x1] = readers_x_[static_cast<size_t>(j)];
        float* q = dx + detail::pixel_offset(out, n, i, j);
        for (int64_t c = 0; c < out.c; ++c) q[c * out.stride.c] = 0.0f;
        for (int64_t Y = y0; Y < y1; ++Y) {
          const float wy = upsampling_weight(taps_y_[static_cast<size_t>(Y)], i);
          if (wy == 0.0f) continue;
          for (int64_t X = x0; X < x1; ++X) {
            const float w = wy * upsampling_weight(taps_x_[static_cast<size_t>(X)], j);
            if (w == 0.0f) continue;
            const float* p = dy + detail::pixel_offset(g, n, Y, X);
            for (int64_t c = 0; c < out.c; ++c) q[c * out.stride.c] += w * p[c * g.stride.c];
          }
        }
      }
    });
  }

  void build(const CpuBackend& backend) {
    // Regions as Float32Region presents them: the image's own layout for
    // float32, dense NHWC otherwise.
    auto layout = [&](const ImageDescriptor& image, int64_t height, int64_t width) {
      return backend.float32_layout(image, height, width, d_.channels);
    };
    ImageLayout source = layout(d_.source, d_.source_height, d_.source_width);
    ImageLayout destination = layout(d_.destination, d_.height, d_.width);
    source_desc_ = dnnl::memory::desc({d_.images, d_.channels, d_.source_height, d_.source_width},
                                      dnnl::memory::data_type::f32, {source.n, source.c, source.h, source.w});
    destination_desc_ = dnnl::memory::desc({d_.images, d_.channels, d_.height, d_.width}, dnnl::memory::data_type::f32,
                                           {destination.n, destination.c, destination.h, destination.w});
    const dnnl::algorithm algorithm = d_.kind == UpsamplingKind::Nearest ? dnnl::algorithm::resampling_nearest
                                                                        : dnnl::algorithm::resampling_linear;
    dnnl::resampling_forward::primitive_desc forward(
        backend.engine(), d_.gradient ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
        algorithm, source_desc_, destination_desc_);
    if (d_.gradient)
      backward_ = dnnl::resampling_backward(dnnl::resampling_backward::primitive_desc(
          backend.engine(), algorithm, source_desc_, destination_desc_, forward));
    else
      forward_ = dnnl::resampling_forward(forward);
    onednn_ = true;
  }

  UpsamplingDescriptor d_;
  std::vector<UpsamplingTap> taps_x_, taps_y_;
  std::vector<std::pair<int64_t, int64_t>> readers_x_, readers_y_;
  bool onednn_ = false;
  dnnl::memory::desc source_desc_, destination_desc_;
  dnnl::resampling_forward forward_;
  dnnl::resampling_backward backward_;
};

const Registered<UpsamplingPrimitive, CpuUpsampling> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu

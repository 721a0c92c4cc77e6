#include "mpsx/kernels/pooling.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// Taps j in [begin, end) of one window dimension.
struct TapRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// One dimension of the pooling windows over the source.
struct Axis {
  int64_t size;       // source pixels
  int64_t first;      // position of tap 0 of destination 0
  int64_t stride, dilation, taps;
  int64_t count_pad;  // PoolingDescriptor::count_pad_*

  // Taps of destination i at positions in [lo, hi).
  TapRange within(int64_t i, int64_t lo, int64_t hi) const {
    int64_t p = first + i * stride;
    auto steps = [&](int64_t distance) {  // taps before `distance`, rounded up
      if (distance <= 0) return int64_t{0};
      return dilation == 1 ? distance : (distance + dilation - 1) / dilation;
    };
    int64_t begin = steps(lo - p), end = steps(hi - p);
    begin = std::min(begin, taps);
    return {begin, std::max(begin, std::min(end, taps))};
  }
  TapRange inside(int64_t i) const { return within(i, 0, size); }
  // Taps average pooling divides by.
  int64_t counted(int64_t i) const {
    return count_pad == PoolingDescriptor::kAllTaps ? taps : within(i, -count_pad, size + count_pad).size();
  }
  int64_t position(int64_t i, int64_t j) const { return first + i * stride + j * dilation; }
};

Axis axis_x(const PoolingDescriptor& d) {
  return {d.source.width, d.source_x, d.window.stride_x, d.window.dilation_x, d.window.kernel_width, d.count_pad_x};
}
Axis axis_y(const PoolingDescriptor& d) {
  return {d.source.height, d.source_y, d.window.stride_y, d.window.dilation_y, d.window.kernel_height, d.count_pad_y};
}

inline const float* at(const ImageRegion& r, int64_t n, int64_t y, int64_t x) {
  return static_cast<const float*>(r.data) + n * r.stride.n + y * r.stride.h + x * r.stride.w;
}
inline float* at_mutable(const ImageRegion& r, int64_t n, int64_t y, int64_t x) {
  return static_cast<float*>(r.data) + n * r.stride.n + y * r.stride.h + x * r.stride.w;
}

// Work per parallel chunk, in multiply-adds.
constexpr int64_t kGrain = 1 << 15;

// Rows of `r` per parallel chunk. Work is estimated in double: a row of
// windows of up to 2^60 taps overflows int64_t.
int64_t rows_per_chunk(const ImageRegion& r, const Window& w) {
  const double work = static_cast<double>(r.w) * static_cast<double>(r.c) * static_cast<double>(w.kernel_width) *
                      static_cast<double>(w.kernel_height);
  return std::max<int64_t>(1, static_cast<int64_t>(kGrain / std::max(work, 1.0)));
}

void zero_region(const ImageRegion& r) {
  if (is_dense_nhwc(r)) {
    std::memset(r.data, 0, static_cast<size_t>(r.element_count()) * sizeof(float));
    return;
  }
  for (int64_t n = 0; n < r.n; ++n)
    for (int64_t y = 0; y < r.h; ++y)
      for (int64_t x = 0; x < r.w; ++x) std::memset(at_mutable(r, n, y, x), 0, static_cast<size_t>(r.c) * sizeof(float));
}

// destination = pool(source), channels innermost (cpu images are NHWC).
template <PoolingKind K>
MPSX_CPU_LOOP void pool_rows(const PoolingDescriptor& d, const ImageRegion& x, const ImageRegion& y, int64_t first,
                               int64_t rows) {
  const Axis ax = axis_x(d), ay = axis_y(d);
  const int64_t channels = x.c;
  const bool zero_edges = d.edge_mode == EdgeMode::Zero;
  for (int64_t row = first; row < first + rows; ++row) {
    const int64_t n = row / y.h, oy = row % y.h;
    const TapRange ry = ay.inside(oy);
    for (int64_t ox = 0; ox < y.w; ++ox) {
      const TapRange rx = ax.inside(ox);
      float* out = at_mutable(y, n, oy, ox);
      int64_t count = ry.size() * rx.size();
      if constexpr (K == PoolingKind::Average) count = ax.counted(ox) * ay.counted(oy);
      if (ry.size() == 0 || rx.size() == 0 || count == 0) {  // nothing of the image in the window
        std::fill(out, out + channels, 0.0f);
        continue;
      }
      std::fill(out, out + channels, K == PoolingKind::Max ? -std::numeric_limits<float>::infinity() : 0.0f);
      for (int64_t jy = ry.begin; jy < ry.end; ++jy)
        for (int64_t jx = rx.begin; jx < rx.end; ++jx) {
          const float* in = at(x, n, ay.position(oy, jy), ax.position(ox, jx));
          for (int64_t c = 0; c < channels; ++c) {
            if constexpr (K == PoolingKind::Max) out[c] = std::max(out[c], in[c]);
            else if constexpr (K == PoolingKind::Average) out[c] += in[c];
            else out[c] += in[c] * in[c];
          }
        }
      if constexpr (K == PoolingKind::Max) {
        // MPSImageEdgeModeZero: taps off the image read 0
        if (zero_edges && (ry.size() < ay.taps || rx.size() < ax.taps))
          for (int64_t c = 0; c < channels; ++c) out[c] = std::max(out[c], 0.0f);
      } else if constexpr (K == PoolingKind::Average) {
        const float scale = 1.0f / static_cast<float>(count);
        for (int64_t c = 0; c < channels; ++c) out[c] *= scale;
      } else {
        for (int64_t c = 0; c < channels; ++c) out[c] = std::sqrt(out[c]);
      }
    }
  }
}

// dx += d out / d in * dy for the destination rows given; no two of them
// share a source pixel, so rows may run in parallel. With Disjoint, no two
// windows share one, and each writes its pixels instead of adding to them.
template <PoolingKind K, bool Disjoint>
MPSX_CPU_LOOP void unpool_rows(const PoolingDescriptor& d, const ImageRegion& dy, const ImageRegion& x,
                                 const ImageRegion& dx, int64_t phase, int64_t phases, int64_t rows_per_image,
                                 int64_t first, int64_t rows) {
  constexpr int64_t kBlock = 64;
  const Axis ax = axis_x(d), ay = axis_y(d);
  const bool zero_edges = d.edge_mode == EdgeMode::Zero;
  // Calls f(out, in) for each in-image tap: channels c0.. of dx and x there.
  auto for_each_tap = [&](int64_t n, int64_t oy, int64_t ox, const TapRange& ry, const TapRange& rx, int64_t c0,
                          auto&& f) {
    for (int64_t jy = ry.begin; jy < ry.end; ++jy)
      for (int64_t jx = rx.begin; jx < rx.end; ++jx) {
        const int64_t sy = ay.position(oy, jy), sx = ax.position(ox, jx);
        f(at_mutable(dx, n, sy, sx) + c0, K == PoolingKind::Average ? nullptr : at(x, n, sy, sx) + c0, jy, jx);
      }
  };
  for (int64_t item = first; item < first + rows; ++item) {
    const int64_t n = item / rows_per_image, oy = phase + (item % rows_per_image) * phases;
    const TapRange ry = ay.inside(oy);
    for (int64_t ox = 0; ox < dy.w; ++ox) {
      const TapRange rx = ax.inside(ox);
      int64_t count = ry.size() * rx.size();
      if constexpr (K == PoolingKind::Average) count = ax.counted(ox) * ay.counted(oy);
      if (ry.size() == 0 || rx.size() == 0) continue;
      const bool partial = ry.size() < ay.taps || rx.size() < ax.taps;
      const float* g = at(dy, n, oy, ox);
      for (int64_t c0 = 0; c0 < dy.c; c0 += kBlock) {
        const int64_t block = std::min(kBlock, dy.c - c0);
        if constexpr (K == PoolingKind::Max) {
          // The first maximum in scan order gets the gradient; when a zero
          // read off the image is larger than every pixel, none does.
          float best[kBlock];
          int32_t best_y[kBlock], best_x[kBlock];
          std::fill(best, best + block, -std::numeric_limits<float>::infinity());
          std::fill(best_y, best_y + block, static_cast<int32_t>(ry.begin));
          std::fill(best_x, best_x + block, static_cast<int32_t>(rx.begin));
          for_each_tap(n, oy, ox, ry, rx, c0, [&](float*, const float* in, int64_t jy, int64_t jx) {
            for (int64_t c = 0; c < block; ++c) {  // branch-free, so it vectorizes
              const bool larger = in[c] > best[c];
              best[c] = larger ? in[c] : best[c];
              best_y[c] = larger ? static_cast<int32_t>(jy) : best_y[c];
              best_x[c] = larger ? static_cast<int32_t>(jx) : best_x[c];
            }
          });
          if (zero_edges && partial)
            for (int64_t c = 0; c < block; ++c) best_y[c] = best[c] < 0.0f ? -1 : best_y[c];
          if constexpr (Disjoint) {
            for_each_tap(n, oy, ox, ry, rx, c0, [&](float* out, const float*, int64_t jy, int64_t jx) {
              for (int64_t c = 0; c < block; ++c) out[c] = best_y[c] == jy && best_x[c] == jx ? g[c0 + c] : 0.0f;
            });
          } else {
            for (int64_t c = 0; c < block; ++c)
              if (best_y[c] >= 0) at_mutable(dx, n, ay.position(oy, best_y[c]), ax.position(ox, best_x[c]))[c0 + c] += g[c0 + c];
          }
        } else {
          float scaled[kBlock];  // average: dy / count; L2 norm: dy / out
          if constexpr (K == PoolingKind::Average) {
            const float scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
            for (int64_t c = 0; c < block; ++c) scaled[c] = g[c0 + c] * scale;
          } else {
            std::fill(scaled, scaled + block, 0.0f);
            for_each_tap(n, oy, ox, ry, rx, c0, [&](float*, const float* in, int64_t, int64_t) {
              for (int64_t c = 0; c < block; ++c) scaled[c] += in[c] * in[c];
            });
            for (int64_t c = 0; c < block; ++c) scaled[c] = scaled[c] > 0.0f ? g[c0 + c] / std::sqrt(scaled[c]) : 0.0f;
          }
          for_each_tap(n, oy, ox, ry, rx, c0, [&](float* out, const float* in, int64_t, int64_t) {
            for (int64_t c = 0; c < block; ++c) {
              const float v = K == PoolingKind::Average ? scaled[c] : in[c] * scaled[c];
              out[c] = Disjoint ? v : out[c] + v;
            }
          });
        }
      }
    }
  }
}

// The source pixels a pass reads along one axis, and the padding the
// windows read beyond them on each side.
struct Span {
  int64_t begin, end, pad_before, pad_after;
};
Span span_of(const Axis& a, int64_t destination) {
  int64_t extent = (a.taps - 1) * a.dilation + 1;
  int64_t read_begin = a.first, read_end = a.first + (destination - 1) * a.stride + extent;
  Span s{std::max<int64_t>(read_begin, 0), std::min(read_end, a.size), 0, 0};
  s.pad_before = s.begin - read_begin;
  s.pad_after = read_end - s.end;
  return s;
}

class CpuPooling final : public PoolingPrimitive {
 public:
  CpuPooling(const CpuBackend& backend, const PoolingDescriptor& d) : d_(d) {
    dnnl::algorithm algorithm;
    Span sx = span_of(axis_x(d), d.width), sy = span_of(axis_y(d), d.height);
    disjoint_ = d.window.stride_x >= d.window.extent_x() && d.window.stride_y >= d.window.extent_y();
    // Windows side by side over the whole source write every pixel of the gradient.
    tiles_ = d.window.stride_x == d.window.kernel_width && d.window.stride_y == d.window.kernel_height &&
             d.window.dilation_x == 1 && d.window.dilation_y == 1 && sx.begin == 0 && sy.begin == 0 &&
             sx.end == d.source.width && sy.end == d.source.height;
    if (onednn_algorithm(sx, sy, &algorithm)) build(backend, sx, sy, algorithm);
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region x(cpu, source, 0, true);
    Float32Region y(cpu, destination, 1, false);
    if (onednn_) {
      execute_and_wait(cpu, forward_, source_desc_, x.data() + source_offset_, destination_desc_, y.data());
    } else {
      const ImageRegion& in = x.region();
      const ImageRegion& out = y.region();
      with_pooling_kind(d_.kind, [&](auto kind) {
        detail::parallel_chunks(out.n * out.h, rows_per_chunk(out, d_.window), [&](int64_t first, int64_t rows) {
          Cloned<pool_rows<decltype(kind)::value>>::run(d_, in, out, first, rows);
        });
      });
    }
    y.store();
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient, const ImageRegion& source_image,
                const ImageRegion& destination_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dy(cpu, source_gradient, 0, true);
    Float32Region dx(cpu, destination_gradient, 1, false);
    if (onednn_ ? !covers_source_ : !tiles_) zero_region(dx.region());
    if (onednn_) {
      dnnl::memory diff_dst(destination_desc_, cpu.engine(), dy.data());
      dnnl::memory diff_src(source_desc_, cpu.engine(), dx.data() + source_offset_);
      backward_.execute(cpu.stream(), {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_src}});
      cpu.stream().wait();
    } else {
      // Average pooling is linear: its gradient never reads the source.
      bool reads_source = d_.kind != PoolingKind::Average;
      Float32Region x(cpu, reads_source ? source_image : ImageRegion{}, 2, reads_source);
      const ImageRegion& g = dy.region();
      // Rows `phases` apart read disjoint source rows, so each phase runs its rows in parallel.
      int64_t phases = (d_.window.extent_y() + d_.window.stride_y - 1) / d_.window.stride_y;
      with_pooling_kind(d_.kind, [&](auto kind) {
        for (int64_t phase = 0; phase < std::min(phases, g.h); ++phase) {
          int64_t rows_per_image = (g.h - phase + phases - 1) / phases;
          detail::parallel_chunks(g.n * rows_per_image, rows_per_chunk(g, d_.window),
                                  [&](int64_t first, int64_t rows) {
                                    constexpr PoolingKind K = decltype(kind)::value;
                                    if (disjoint_)
                                      Cloned<unpool_rows<K, true>>::run(d_, g, x.region(), dx.region(), phase, phases,
                                                                       rows_per_image, first, rows);
                                    else
                                      Cloned<unpool_rows<K, false>>::run(d_, g, x.region(), dx.region(), phase, phases,
                                                                        rows_per_image, first, rows);
                                  });
        }
      });
    }
    dx.store();
  }

 private:
  // The oneDNN algorithm that computes exactly what MPS defines for this
  // pass, if there is one.
  bool onednn_algorithm(const Span& sx, const Span& sy, dnnl::algorithm* algorithm) const {
    // oneDNN 3's jit pooling keeps window sizes in int: larger windows end in
    // a division by zero (SIGFPE) while it builds the primitive.
    if (d_.window.kernel_width * d_.window.kernel_height > INT32_MAX) return false;
    int64_t extent_x = d_.window.extent_x(), extent_y = d_.window.extent_y();
    // oneDNN needs every window to overlap the source.
    if (sx.end <= sx.begin || sy.end <= sy.begin || sx.pad_before >= extent_x || sx.pad_after >= extent_x ||
        sy.pad_before >= extent_y || sy.pad_after >= extent_y)
      return false;
    bool padded = sx.pad_before || sx.pad_after || sy.pad_before || sy.pad_after;
    if (is_max(d_.kind)) {
      // oneDNN's max skips padding: MPSImageEdgeModeClamp. Its gradient
      // needs the forward workspace; unpool_rows recomputes the argmax.
      *algorithm = dnnl::algorithm::pooling_max;
      return !d_.gradient && (!padded || d_.edge_mode == EdgeMode::Clamp);
    }
    if (d_.kind != PoolingKind::Average) return false;
    auto counts_all = [](const Span& s, int64_t pad) {
      return pad == PoolingDescriptor::kAllTaps || (pad >= s.pad_before && pad >= s.pad_after);
    };
    auto counts_inside = [](const Span& s, int64_t pad) { return pad == 0 || (!s.pad_before && !s.pad_after); };
    if (counts_all(sx, d_.count_pad_x) && counts_all(sy, d_.count_pad_y)) {
      *algorithm = dnnl::algorithm::pooling_avg_include_padding;
      return true;
    }
    if (counts_inside(sx, d_.count_pad_x) && counts_inside(sy, d_.count_pad_y)) {
      *algorithm = dnnl::algorithm::pooling_avg_exclude_padding;
      return true;
    }
    return false;
  }

  void build(const CpuBackend& backend, const Span& sx, const Span& sy, dnnl::algorithm algorithm) {
    // Regions as Float32Region presents them: the image's own layout for
    // float32, dense NHWC otherwise.
    auto layout = [&](const ImageDescriptor& image, int64_t height, int64_t width) {
      return backend.float32_layout(image, height, width, d_.channels);
    };
    ImageLayout source = layout(d_.source, d_.source.height, d_.source.width);
    ImageLayout destination = layout(d_.destination, d_.height, d_.width);
    source_offset_ = sy.begin * source.h + sx.begin * source.w;
    covers_source_ = sx.begin == 0 && sy.begin == 0 && sx.end == d_.source.width && sy.end == d_.source.height;
    source_desc_ = dnnl::memory::desc({d_.images, d_.channels, sy.end - sy.begin, sx.end - sx.begin},
                                      dnnl::memory::data_type::f32, {source.n, source.c, source.h, source.w});
    destination_desc_ = dnnl::memory::desc({d_.images, d_.channels, d_.height, d_.width}, dnnl::memory::data_type::f32,
                                           {destination.n, destination.c, destination.h, destination.w});
    dnnl::memory::dims strides{d_.window.stride_y, d_.window.stride_x};
    dnnl::memory::dims kernel{d_.window.kernel_height, d_.window.kernel_width};
    dnnl::memory::dims dilation{d_.window.dilation_y - 1, d_.window.dilation_x - 1};
    dnnl::memory::dims before{sy.pad_before, sx.pad_before}, after{sy.pad_after, sx.pad_after};
    dnnl::pooling_forward::primitive_desc forward(
        backend.engine(), d_.gradient ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
        algorithm, source_desc_, destination_desc_, strides, kernel, dilation, before, after);
    if (d_.gradient)
      backward_ = dnnl::pooling_backward(dnnl::pooling_backward::primitive_desc(
          backend.engine(), algorithm, source_desc_, destination_desc_, strides, kernel, dilation, before, after,
          forward));
    else
      forward_ = dnnl::pooling_forward(forward);
    onednn_ = true;
  }

  PoolingDescriptor d_;
  bool onednn_ = false;
  bool covers_source_ = false;
  bool disjoint_ = false, tiles_ = false;
  int64_t source_offset_ = 0;  // elements from the region's origin to the part oneDNN reads
  dnnl::memory::desc source_desc_, destination_desc_;
  dnnl::pooling_forward forward_;
  dnnl::pooling_backward backward_;
};

const Registered<PoolingPrimitive, CpuPooling> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu

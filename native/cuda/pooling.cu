#include "pooling.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// Coordinates along an axis may be negative (padding): signed, of the index's width.
template <class Index>
using Signed = std::make_signed_t<Index>;

// Taps j in [begin, end) of one window dimension.
template <class S>
struct TapRange {
  S begin = 0, end = 0;
  __device__ S size() const { return end - begin; }
};

// One dimension of the pooling windows over the source, as the cpu backend
// defines it. Divisions by the stride and the dilation take non-negative
// numerators, through Divider.
template <class Index>
struct Axis {
  using S = Signed<Index>;
  S size;   // source pixels
  S first;  // position of tap 0 of destination 0
  S taps;
  S count_pad;  // PoolingDescriptor::count_pad_*
  Divider<Index> stride, dilation;

  __device__ S step() const { return static_cast<S>(stride.divisor); }
  __device__ S spacing() const { return static_cast<S>(dilation.divisor); }
  // Taps of destination i at positions in [lo, hi).
  __device__ TapRange<S> within(S i, S lo, S hi) const {
    const S p = first + i * step();
    auto steps = [&](S distance) -> S {  // taps before `distance`, rounded up
      if (distance <= 0) return 0;
      return static_cast<S>(dilation.divide(static_cast<Index>(distance) + dilation.divisor - 1));
    };
    const S begin = min(steps(lo - p), taps);
    return {begin, max(begin, min(steps(hi - p), taps))};
  }
  __device__ TapRange<S> inside(S i) const { return within(i, 0, size); }
  // Taps average pooling divides by.
  __device__ S counted(S i) const {
    return count_pad == PoolingDescriptor::kAllTaps ? taps : within(i, -count_pad, size + count_pad).size();
  }
  __device__ S position(S i, S j) const { return first + i * step() + j * spacing(); }

  // Destinations [*begin, *end) of the `destinations` whose windows span
  // source position s (an empty range may come out with *end < *begin);
  // tap() says which of them read it.
  __device__ void spanning(S s, S destinations, S* begin, S* end) const {
    const S past_first = s - first, past_last = past_first - (taps - 1) * spacing();
    *begin = past_last > 0 ? static_cast<S>(stride.divide(static_cast<Index>(past_last) + stride.divisor - 1)) : 0;
    *end = past_first >= 0 ? min(destinations, static_cast<S>(stride.divide(static_cast<Index>(past_first))) + 1) : 0;
  }
  // Whether destination i's window, among those spanning position s, reads
  // it, and through which tap.
  __device__ bool tap(S i, S s, S* j) const {
    const Index distance = static_cast<Index>(s - first - i * step());
    const Index q = dilation.divide(distance);
    if (distance != q * dilation.divisor) return false;
    *j = static_cast<S>(q);
    return true;
  }
};

template <class Index>
Axis<Index> axis_of(int64_t size, int64_t first, int64_t stride, int64_t dilation, int64_t taps, int64_t count_pad) {
  using S = Signed<Index>;
  return {static_cast<S>(size), static_cast<S>(first), static_cast<S>(taps), static_cast<S>(count_pad),
          Divider<Index>(stride), Divider<Index>(dilation)};
}

// Whether an axis's arithmetic, over `destinations` windows, fits 32 bits
// with room to spare (below 2^30).
bool narrow_axis(int64_t size, int64_t first, int64_t stride, int64_t dilation, int64_t taps, int64_t count_pad,
                 int64_t destinations) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  const int64_t parts[] = {size, first < 0 ? -first : first, stride, dilation, taps, count_pad < 0 ? -count_pad : count_pad,
                           destinations};
  int64_t bound = 0;
  for (int64_t part : parts) {
    if (part >= kLimit) return false;
    bound += part;
  }
  return bound < kLimit && (destinations + 1) * stride < kLimit && taps * dilation < kLimit;
}

// A pass's windows and edge handling.
template <class Index>
struct Pass {
  Axis<Index> x, y;
  bool zero_edges;  // MPSImageEdgeModeZero: max taps off the image read 0
};

template <class Index>
Pass<Index> pass_of(const PoolingDescriptor& d) {
  const Window& w = d.window;
  return {axis_of<Index>(d.source.width, d.source_x, w.stride_x, w.dilation_x, w.kernel_width, d.count_pad_x),
          axis_of<Index>(d.source.height, d.source_y, w.stride_y, w.dilation_y, w.kernel_height, d.count_pad_y),
          d.edge_mode == EdgeMode::Zero};
}

// Whether 32-bit arithmetic holds the regions' indices and the windows' axes
// over `destinations` (the pooled region).
bool narrow_pass(const PoolingDescriptor& d, const ImageRegion& destinations, int64_t count,
                 std::initializer_list<ImageRegion> regions) {
  const Window& w = d.window;
  return narrow_indices(count, regions) && w.kernel_width * w.kernel_height < (int64_t{1} << 30) &&
         narrow_axis(d.source.width, d.source_x, w.stride_x, w.dilation_x, w.kernel_width, d.count_pad_x,
                     destinations.w) &&
         narrow_axis(d.source.height, d.source_y, w.stride_y, w.dilation_y, w.kernel_height, d.count_pad_y,
                     destinations.h);
}

// Element i of a region (NHWC order) as image, channel and signed row and column.
template <class Index>
struct Element {
  Index n, c;
  Signed<Index> y, x;
};
template <class Index>
__device__ __forceinline__ Element<Index> element_of(const Extents<Index>& e, Index i) {
  Index n, y, x;
  const Index c = e.element(i, &n, &y, &x);
  return {n, c, static_cast<Signed<Index>>(y), static_cast<Signed<Index>>(x)};
}

// The offset of (n, c) at a signed (row, column) within the region.
template <class Index>
__device__ __forceinline__ Index offset_at(const Strided<Index>& r, Index n, Index c, Signed<Index> y,
                                           Signed<Index> x) {
  return r.at(n, c, static_cast<Index>(y), static_cast<Index>(x));
}

// One destination value per thread: channels innermost, so neighbouring
// threads read neighbouring source values.
template <PoolingKind K, class Index>
__global__ void pool_kernel(Pass<Index> p, Extents<Index> e, Strided<Index> x, Strided<Index> y, Index count) {
  using S = Signed<Index>;
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    const Element<Index> o = element_of(e, i);
    const TapRange<S> ry = p.y.inside(o.y), rx = p.x.inside(o.x);
    S taps = ry.size() * rx.size();
    if constexpr (K == PoolingKind::Average) taps = p.x.counted(o.x) * p.y.counted(o.y);
    float out = 0.0f;  // nothing of the image in the window
    if (ry.size() > 0 && rx.size() > 0 && taps != 0) {
      out = K == PoolingKind::Max ? -INFINITY : 0.0f;
      for (S jy = ry.begin; jy < ry.end; ++jy)
        for (S jx = rx.begin; jx < rx.end; ++jx) {
          const float v = x.load(offset_at(x, o.n, o.c, p.y.position(o.y, jy), p.x.position(o.x, jx)));
          if constexpr (K == PoolingKind::Max) out = fmaxf(out, v);
          else if constexpr (K == PoolingKind::Average) out += v;
          else out += v * v;
        }
      if constexpr (K == PoolingKind::Max) {
        if (p.zero_edges && (ry.size() < p.y.taps || rx.size() < p.x.taps)) out = fmaxf(out, 0.0f);
      } else if constexpr (K == PoolingKind::Average) {
        out *= 1.0f / static_cast<float>(taps);
      } else {
        out = sqrtf(out);
      }
    }
    y.store(offset_at(y, o.n, o.c, o.y, o.x), out);
  }
}

// Max pooling: the tap of destination (n, c, oy, ox)'s window that gets its
// gradient (jy * taps_x + jx): the first maximum in scan order; -1 for none,
// an empty window or a zero read off the image larger than every pixel.
template <class Index>
__device__ int32_t chosen_tap(const Pass<Index>& p, const Strided<Index>& x, Index n, Index c, Signed<Index> oy,
                              Signed<Index> ox) {
  using S = Signed<Index>;
  const TapRange<S> ry = p.y.inside(oy), rx = p.x.inside(ox);
  if (ry.size() == 0 || rx.size() == 0) return -1;
  float best = -INFINITY;
  S best_y = ry.begin, best_x = rx.begin;
  for (S jy = ry.begin; jy < ry.end; ++jy)
    for (S jx = rx.begin; jx < rx.end; ++jx) {
      const float v = x.load(offset_at(x, n, c, p.y.position(oy, jy), p.x.position(ox, jx)));
      if (v > best) {
        best = v;
        best_y = jy;
        best_x = jx;
      }
    }
  const bool partial = ry.size() < p.y.taps || rx.size() < p.x.taps;
  if (p.zero_edges && partial && best < 0.0f) return -1;
  return static_cast<int32_t>(best_y * p.x.taps + best_x);
}

// Per source gradient value (dense, NHWC order, over dy's extents e): for max
// pooling chosen_tap, for L2 norm pooling dy / out.
template <PoolingKind K, class Index>
__global__ void window_kernel(Pass<Index> p, Extents<Index> e, Strided<Index> dy, Strided<Index> x, void* windows,
                              Index count) {
  using S = Signed<Index>;
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    const Element<Index> o = element_of(e, i);
    if constexpr (K == PoolingKind::Max) {
      static_cast<int32_t*>(windows)[i] = chosen_tap(p, x, o.n, o.c, o.y, o.x);
    } else {
      const TapRange<S> ry = p.y.inside(o.y), rx = p.x.inside(o.x);
      float scaled = 0.0f;
      if (ry.size() > 0 && rx.size() > 0) {
        float sum = 0.0f;
        for (S jy = ry.begin; jy < ry.end; ++jy)
          for (S jx = rx.begin; jx < rx.end; ++jx) {
            const float v = x.load(offset_at(x, o.n, o.c, p.y.position(o.y, jy), p.x.position(o.x, jx)));
            sum += v * v;
          }
        if (sum > 0.0f) scaled = dy.load(offset_at(dy, o.n, o.c, o.y, o.x)) / sqrtf(sum);
      }
      static_cast<float*>(windows)[i] = scaled;
    }
  }
}

// One destination gradient value per thread, gathering from the windows
// that read it in a fixed order: deterministic, and every value written.
// `windows` indexes window_kernel's values by dy's coordinates; with
// kChoose, max pooling's windows do not overlap and each thread finds the
// chosen tap of its one window itself.
template <PoolingKind K, bool kChoose, class Index>
__global__ void unpool_kernel(Pass<Index> p, Extents<Index> e, Strided<Index> dy, Strided<Index> x, Strided<Index> dx,
                              Strided<Index> windows, Signed<Index> dy_h, Signed<Index> dy_w, Index count) {
  using S = Signed<Index>;
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    const Element<Index> o = element_of(e, i);
    float in = 0.0f;
    if constexpr (K == PoolingKind::L2Norm) in = x.load(offset_at(x, o.n, o.c, o.y, o.x));
    S y_begin, y_end, x_begin, x_end;
    p.y.spanning(o.y, dy_h, &y_begin, &y_end);
    p.x.spanning(o.x, dy_w, &x_begin, &x_end);
    float sum = 0.0f;
    for (S oy = y_begin; oy < y_end; ++oy) {
      S jy;
      if (!p.y.tap(oy, o.y, &jy)) continue;
      for (S ox = x_begin; ox < x_end; ++ox) {
        S jx;
        if (!p.x.tap(ox, o.x, &jx)) continue;
        const Index w = offset_at(windows, o.n, o.c, oy, ox);
        if constexpr (K == PoolingKind::Max) {
          const int32_t chosen =
              kChoose ? chosen_tap(p, x, o.n, o.c, oy, ox) : static_cast<const int32_t*>(windows.data)[w];
          if (chosen == jy * p.x.taps + jx) sum += dy.load(offset_at(dy, o.n, o.c, oy, ox));
        } else if constexpr (K == PoolingKind::Average) {
          const S taps = p.x.counted(ox) * p.y.counted(oy);
          const float scale = taps > 0 ? 1.0f / static_cast<float>(taps) : 0.0f;
          sum += dy.load(offset_at(dy, o.n, o.c, oy, ox)) * scale;
        } else {
          sum += in * static_cast<const float*>(windows.data)[w];
        }
      }
    }
    dx.store(offset_at(dx, o.n, o.c, o.y, o.x), sum);
  }
}

// Max pooling whose windows tile dx: one thread per window (dy's element i,
// NHWC order over dy's extents e) writes its dy value at the chosen tap and
// zero at the window's other taps within dx.
template <class Index>
__global__ void unpool_windows_kernel(Pass<Index> p, Extents<Index> e, Strided<Index> dy, Strided<Index> x,
                                      Strided<Index> dx, Signed<Index> dx_h, Signed<Index> dx_w, Index count) {
  using S = Signed<Index>;
  for (Index i = grid_first<Index>(); i < count; i += grid_step<Index>()) {
    const Element<Index> o = element_of(e, i);
    const int32_t chosen = chosen_tap(p, x, o.n, o.c, o.y, o.x);
    const float g = chosen >= 0 ? dy.load(offset_at(dy, o.n, o.c, o.y, o.x)) : 0.0f;
    for (S jy = 0; jy < p.y.taps; ++jy) {
      const S sy = p.y.position(o.y, jy);
      if (sy >= dx_h) break;
      for (S jx = 0; jx < p.x.taps; ++jx) {
        const S sx = p.x.position(o.x, jx);
        if (sx >= dx_w) break;
        dx.store(offset_at(dx, o.n, o.c, sy, sx), chosen == jy * p.x.taps + jx ? g : 0.0f);
      }
    }
  }
}

// Whether every source pixel lies in at most one max pooling window: the
// gradient then finds each window's chosen tap where it is used, in one pass.
bool choose_in_place(const PoolingDescriptor& d) {
  const bool max = d.kind == PoolingKind::Max || d.kind == PoolingKind::DilatedMax;
  return max && d.window.stride_x >= d.window.extent_x() && d.window.stride_y >= d.window.extent_y();
}

// Whether, beside that, the windows of the dy region cover every pixel of
// dx without gaps (undilated windows, each starting where the last ended,
// the first at dx's origin): one pass over the windows then writes all of dx.
bool windows_tile(const PoolingDescriptor& d, const ImageRegion& dy, const ImageRegion& dx) {
  const Window& w = d.window;
  return choose_in_place(d) && d.source_x == 0 && d.source_y == 0 && w.dilation_x == 1 && w.dilation_y == 1 &&
         w.stride_x == w.kernel_width && w.stride_y == w.kernel_height && dy.w * w.stride_x >= dx.w &&
         dy.h * w.stride_y >= dx.h;
}

// The dense NHWC layout of per-window values over dy's extents.
ImageRegion windows_of(const ImageRegion& dy, void* scratch) {
  ImageRegion r = dy;
  r.data = scratch;
  r.stride = ImageLayout{dy.h * dy.w * dy.c, 1, dy.w * dy.c, dy.c};
  return r;
}

}  // namespace

void pooling_forward(const PoolingDescriptor& d, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream) {
  const int64_t count = y.element_count();
  if (count == 0) return;
  with_index(narrow_pass(d, y, count, {x, y}), [&](auto index) {
    using Index = decltype(index);
    with_pooling_kind(d.kind, [&](auto kind) {
      pool_kernel<decltype(kind)::value, Index><<<blocks_for(count), 256, 0, stream>>>(
          pass_of<Index>(d), Extents<Index>(y), Strided<Index>(x), Strided<Index>(y), static_cast<Index>(count));
    });
  });
}

size_t pooling_gradient_scratch_bytes(const PoolingDescriptor& d, const ImageRegion& dy) {
  // Average pooling's windows need nothing but their tap counts.
  if (d.kind == PoolingKind::Average || choose_in_place(d)) return 0;
  return static_cast<size_t>(dy.element_count()) * sizeof(int32_t);
}

void pooling_gradient(const PoolingDescriptor& d, const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx,
                      void* scratch, cudaStream_t stream) {
  const int64_t windows = dy.element_count(), count = dx.element_count();
  if (count == 0) return;
  const ImageRegion values = windows_of(dy, scratch);
  const bool choose = choose_in_place(d);
  with_index(narrow_pass(d, dy, std::max(windows, count), {dy, x, dx, values}), [&](auto index) {
    using Index = decltype(index);
    const Pass<Index> p = pass_of<Index>(d);
    const Extents<Index> e(dx);
    const Strided<Index> gradient(dy), source(x), result(dx), per_window(values);
    const auto h = static_cast<Signed<Index>>(dy.h), w = static_cast<Signed<Index>>(dy.w);
    with_pooling_kind(d.kind, [&](auto kind) {
      constexpr PoolingKind K = decltype(kind)::value;
      if constexpr (K == PoolingKind::Max)
        if (windows_tile(d, dy, dx)) {
          unpool_windows_kernel<Index><<<blocks_for(windows), 256, 0, stream>>>(
              p, Extents<Index>(dy), gradient, source, result, static_cast<Signed<Index>>(dx.h),
              static_cast<Signed<Index>>(dx.w), static_cast<Index>(windows));
          return;
        }
      if constexpr (K == PoolingKind::Max)
        if (choose) {
          unpool_kernel<K, true, Index><<<blocks_for(count), 256, 0, stream>>>(
              p, e, gradient, source, result, per_window, h, w, static_cast<Index>(count));
          return;
        }
      if constexpr (K != PoolingKind::Average)
        if (windows > 0)
          window_kernel<K, Index><<<blocks_for(windows), 256, 0, stream>>>(p, Extents<Index>(dy), gradient, source,
                                                                            scratch, static_cast<Index>(windows));
      unpool_kernel<K, false, Index><<<blocks_for(count), 256, 0, stream>>>(p, e, gradient, source, result, per_window,
                                                                            h, w, static_cast<Index>(count));
    });
  });
}

}  // namespace mpsx::cuda

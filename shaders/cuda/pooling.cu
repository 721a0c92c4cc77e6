#include "pooling.cuh"

#include <cstdint>
#include <type_traits>

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// Taps j in [begin, end) of one window dimension.
struct TapRange {
  int64_t begin = 0, end = 0;
  __device__ int64_t size() const { return end - begin; }
};

// a / b rounded down, for b > 0.
__device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((b - 1 - a) / b); }

// One dimension of the pooling windows over the source, as the cpu backend
// defines it.
struct Axis {
  int64_t size;       // source pixels
  int64_t first;      // position of tap 0 of destination 0
  int64_t stride, dilation, taps;
  int64_t count_pad;  // PoolingDescriptor::count_pad_*

  // Taps of destination i at positions in [lo, hi).
  __device__ TapRange within(int64_t i, int64_t lo, int64_t hi) const {
    const int64_t p = first + i * stride;
    auto steps = [&](int64_t distance) {  // taps before `distance`, rounded up
      if (distance <= 0) return int64_t{0};
      return dilation == 1 ? distance : (distance + dilation - 1) / dilation;
    };
    int64_t begin = steps(lo - p), end = steps(hi - p);
    begin = min(begin, taps);
    return {begin, max(begin, min(end, taps))};
  }
  __device__ TapRange inside(int64_t i) const { return within(i, 0, size); }
  // Taps average pooling divides by.
  __device__ int64_t counted(int64_t i) const {
    return count_pad == PoolingDescriptor::kAllTaps ? taps : within(i, -count_pad, size + count_pad).size();
  }
  __device__ int64_t position(int64_t i, int64_t j) const { return first + i * stride + j * dilation; }

  // Destinations [*begin, *end) of the `destinations` whose windows span
  // source position s; tap() says which of them read it.
  __device__ void spanning(int64_t s, int64_t destinations, int64_t* begin, int64_t* end) const {
    *begin = max(int64_t{0}, -floor_div(first + (taps - 1) * dilation - s, stride));
    *end = min(destinations, floor_div(s - first, stride) + 1);
  }
  // Whether destination i's window reads position s (within its span), and through which tap.
  __device__ bool tap(int64_t i, int64_t s, int64_t* j) const {
    const int64_t distance = s - first - i * stride;
    if (distance % dilation != 0) return false;
    *j = distance / dilation;
    return true;
  }
};

// A pass's windows and edge handling.
struct Pass {
  Axis x, y;
  bool zero_edges;  // MPSImageEdgeModeZero: max taps off the image read 0
};

Pass pass_of(const PoolingDescriptor& d) {
  const Window& w = d.window;
  return {{d.source.width, d.source_x, w.stride_x, w.dilation_x, w.kernel_width, d.count_pad_x},
          {d.source.height, d.source_y, w.stride_y, w.dilation_y, w.kernel_height, d.count_pad_y},
          d.edge_mode == EdgeMode::Zero};
}

// The image, row, column and channel of the i-th value of a region, counted
// channels innermost (NHWC order).
struct Element {
  int64_t n, y, x, c;
};
__device__ __forceinline__ Element element_of(const ImageRegion& r, int64_t i) {
  Element e;
  e.c = i % r.c;
  int64_t rest = i / r.c;
  e.x = rest % r.w;
  rest /= r.w;
  e.y = rest % r.h;
  e.n = rest / r.h;
  return e;
}

// One destination value per thread: channels innermost, so neighbouring
// threads read neighbouring source values.
template <PoolingKind K>
__global__ void pool_kernel(Pass p, ImageRegion x, ImageRegion y, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const Element e = element_of(y, i);
    const TapRange ry = p.y.inside(e.y), rx = p.x.inside(e.x);
    int64_t taps = ry.size() * rx.size();
    if constexpr (K == PoolingKind::Average) taps = p.x.counted(e.x) * p.y.counted(e.y);
    float out = 0.0f;  // nothing of the image in the window
    if (ry.size() > 0 && rx.size() > 0 && taps != 0) {
      out = K == PoolingKind::Max ? -INFINITY : 0.0f;
      for (int64_t jy = ry.begin; jy < ry.end; ++jy)
        for (int64_t jx = rx.begin; jx < rx.end; ++jx) {
          const float v = load(x.data, offset_of(x, e.n, e.c, p.y.position(e.y, jy), p.x.position(e.x, jx)), x.data_type);
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
    store(y.data, offset_of(y, e.n, e.c, e.y, e.x), y.data_type, out);
  }
}

// Per source gradient value (dense, NHWC order): for max pooling the tap
// that gets the gradient (jy * taps_x + jx, or -1 for none): the first
// maximum in scan order, none when a zero read off the image is larger than
// every pixel; for L2 norm pooling dy / out.
template <PoolingKind K>
__global__ void window_kernel(Pass p, ImageRegion dy, ImageRegion x, void* windows, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const Element e = element_of(dy, i);
    const TapRange ry = p.y.inside(e.y), rx = p.x.inside(e.x);
    const bool empty = ry.size() == 0 || rx.size() == 0;
    if constexpr (K == PoolingKind::Max) {
      int32_t chosen = -1;
      if (!empty) {
        float best = -INFINITY;
        int64_t best_y = ry.begin, best_x = rx.begin;
        for (int64_t jy = ry.begin; jy < ry.end; ++jy)
          for (int64_t jx = rx.begin; jx < rx.end; ++jx) {
            const float v =
                load(x.data, offset_of(x, e.n, e.c, p.y.position(e.y, jy), p.x.position(e.x, jx)), x.data_type);
            if (v > best) {
              best = v;
              best_y = jy;
              best_x = jx;
            }
          }
        const bool partial = ry.size() < p.y.taps || rx.size() < p.x.taps;
        if (!(p.zero_edges && partial && best < 0.0f)) chosen = static_cast<int32_t>(best_y * p.x.taps + best_x);
      }
      static_cast<int32_t*>(windows)[i] = chosen;
    } else {
      float scaled = 0.0f;
      if (!empty) {
        float sum = 0.0f;
        for (int64_t jy = ry.begin; jy < ry.end; ++jy)
          for (int64_t jx = rx.begin; jx < rx.end; ++jx) {
            const float v =
                load(x.data, offset_of(x, e.n, e.c, p.y.position(e.y, jy), p.x.position(e.x, jx)), x.data_type);
            sum += v * v;
          }
        if (sum > 0.0f) scaled = load(dy.data, offset_of(dy, e.n, e.c, e.y, e.x), dy.data_type) / sqrtf(sum);
      }
      static_cast<float*>(windows)[i] = scaled;
    }
  }
}

// One destination gradient value per thread, gathering from the windows
// that read it in a fixed order: deterministic, and every value written.
template <PoolingKind K>
__global__ void unpool_kernel(Pass p, ImageRegion dy, ImageRegion x, ImageRegion dx, const void* windows,
                              int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const Element e = element_of(dx, i);
    float in = 0.0f;
    if constexpr (K == PoolingKind::L2Norm) in = load(x.data, offset_of(x, e.n, e.c, e.y, e.x), x.data_type);
    int64_t y_begin, y_end, x_begin, x_end;
    p.y.spanning(e.y, dy.h, &y_begin, &y_end);
    p.x.spanning(e.x, dy.w, &x_begin, &x_end);
    float sum = 0.0f;
    for (int64_t oy = y_begin; oy < y_end; ++oy) {
      int64_t jy;
      if (!p.y.tap(oy, e.y, &jy)) continue;
      for (int64_t ox = x_begin; ox < x_end; ++ox) {
        int64_t jx;
        if (!p.x.tap(ox, e.x, &jx)) continue;
        const int64_t w = ((e.n * dy.h + oy) * dy.w + ox) * dy.c + e.c;
        if constexpr (K == PoolingKind::Max) {
          if (static_cast<const int32_t*>(windows)[w] == jy * p.x.taps + jx)
            sum += load(dy.data, offset_of(dy, e.n, e.c, oy, ox), dy.data_type);
        } else if constexpr (K == PoolingKind::Average) {
          const int64_t taps = p.x.counted(ox) * p.y.counted(oy);
          const float scale = taps > 0 ? 1.0f / static_cast<float>(taps) : 0.0f;
          sum += load(dy.data, offset_of(dy, e.n, e.c, oy, ox), dy.data_type) * scale;
        } else {
          sum += in * static_cast<const float*>(windows)[w];
        }
      }
    }
    store(dx.data, offset_of(dx, e.n, e.c, e.y, e.x), dx.data_type, sum);
  }
}

// Calls f with the kernel template's kind: dilated max pools as max.
template <class F>
void dispatch(PoolingKind kind, F&& f) {
  switch (kind) {
    case PoolingKind::Max:
    case PoolingKind::DilatedMax: f(std::integral_constant<PoolingKind, PoolingKind::Max>{}); return;
    case PoolingKind::Average: f(std::integral_constant<PoolingKind, PoolingKind::Average>{}); return;
    case PoolingKind::L2Norm: f(std::integral_constant<PoolingKind, PoolingKind::L2Norm>{}); return;
  }
}

}  // namespace

void pooling_forward(const PoolingDescriptor& d, const ImageRegion& x, const ImageRegion& y, cudaStream_t stream) {
  const int64_t count = y.element_count();
  if (count == 0) return;
  dispatch(d.kind, [&](auto kind) {
    pool_kernel<decltype(kind)::value><<<blocks_for(count), 256, 0, stream>>>(pass_of(d), x, y, count);
  });
}

size_t pooling_gradient_scratch_bytes(const PoolingDescriptor& d, const ImageRegion& dy) {
  // Average pooling's windows need nothing but their tap counts.
  return d.kind == PoolingKind::Average ? 0 : static_cast<size_t>(dy.element_count()) * sizeof(int32_t);
}

void pooling_gradient(const PoolingDescriptor& d, const ImageRegion& dy, const ImageRegion& x, const ImageRegion& dx,
                      void* scratch, cudaStream_t stream) {
  const int64_t windows = dy.element_count(), count = dx.element_count();
  if (count == 0) return;
  const Pass p = pass_of(d);
  dispatch(d.kind, [&](auto kind) {
    constexpr PoolingKind K = decltype(kind)::value;
    if constexpr (K != PoolingKind::Average)
      if (windows > 0) window_kernel<K><<<blocks_for(windows), 256, 0, stream>>>(p, dy, x, scratch, windows);
    unpool_kernel<K><<<blocks_for(count), 256, 0, stream>>>(p, dy, x, dx, scratch, count);
  });
}

}  // namespace mpsx::cuda

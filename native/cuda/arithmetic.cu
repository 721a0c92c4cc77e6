#include "arithmetic.cuh"

#include "channels.cuh"
#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// Strides of a source read over `extent`'s dimensions: 0 where the source
// has extent 1 and repeats.
Strided<int64_t> broadcast(const ImageRegion& r) {
  Strided<int64_t> s(r);
  if (r.c == 1) s.c = 0;
  if (r.h == 1) s.h = 0;
  if (r.w == 1) s.w = 0;
  return s;
}

__device__ __forceinline__ float clamp_to(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

__device__ __forceinline__ float arithmetic_value(const ArithmeticParameters& p, float x, float y) {
  float r = 0;
  switch (p.operation) {
    case ArithmeticOperation::Add: r = p.primary_scale * x + p.secondary_scale * y + p.bias; break;
    case ArithmeticOperation::Subtract: r = p.primary_scale * x - p.secondary_scale * y + p.bias; break;
    case ArithmeticOperation::Multiply: r = (p.primary_scale * x) * (p.secondary_scale * y) + p.bias; break;
    case ArithmeticOperation::Divide: r = (p.primary_scale * x) / (p.secondary_scale * y) + p.bias; break;
    case ArithmeticOperation::Compare: {
      bool holds = false;
      switch (p.comparison) {
        case ComparisonType::Equal: holds = fabsf(x - y) <= p.threshold; break;
        case ComparisonType::NotEqual: holds = !(fabsf(x - y) <= p.threshold); break;
        case ComparisonType::Less: holds = x < y; break;
        case ComparisonType::LessOrEqual: holds = x <= y; break;
        case ComparisonType::Greater: holds = x > y; break;
        case ComparisonType::GreaterOrEqual: holds = x >= y; break;
        default: break;
      }
      r = holds ? 1.0f : 0.0f;
      break;
    }
  }
  return clamp_to(r, p.minimum, p.maximum);
}

__global__ void forward_kernel(ArithmeticParameters p, Extents<int64_t> e, Strided<int64_t> a, Strided<int64_t> b,
                               Strided<int64_t> y, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    y.store(y.at(image, c, row, column),
            arithmetic_value(p, a.load(a.at(image, c, row, column)), b.load(b.at(image, c, row, column))));
  }
}

// One thread per dx element: sums dy (* other) over the dimensions where dx
// has extent 1 and dy does not.
__global__ void gradient_kernel(Extents<int64_t> e, Strided<int64_t> dy, int64_t dy_c, int64_t dy_h, int64_t dy_w,
                                bool has_other, Strided<int64_t> other, Strided<int64_t> dx, int64_t dx_c,
                                int64_t dx_h, int64_t dx_w, float scale, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    const int64_t c0 = dx_c == 1 ? 0 : c, c1 = dx_c == 1 ? dy_c : c + 1;
    const int64_t y0 = dx_h == 1 ? 0 : row, y1 = dx_h == 1 ? dy_h : row + 1;
    const int64_t x0 = dx_w == 1 ? 0 : column, x1 = dx_w == 1 ? dy_w : column + 1;
    float sum = 0;
    for (int64_t yy = y0; yy < y1; ++yy)
      for (int64_t xx = x0; xx < x1; ++xx)
        for (int64_t cc = c0; cc < c1; ++cc) {
          float v = dy.load(dy.at(image, cc, yy, xx));
          if (has_other) v *= other.load(other.at(image, cc, yy, xx));
          sum += v;
        }
    dx.store(dx.at(image, c, row, column), scale * sum);
  }
}

// Regions of equal extents that are all dense (dense_type): a flat pass over
// their values, a vector at a time. y = f(a, b), or with `other` null,
// y = scale * a (* b).
template <class T, bool kForward>
__global__ void dense_kernel(ArithmeticParameters p, float scale, const T* a, const T* b, T* y, int64_t vectors) {
  for (int64_t i = grid_first<int64_t>(); i < vectors; i += grid_step<int64_t>()) {
    float u[kVectorWidth], v[kVectorWidth], r[kVectorWidth];
    load_vector<T, kVectorWidth>(a, i * kVectorWidth, u);
    if (b) load_vector<T, kVectorWidth>(b, i * kVectorWidth, v);
#pragma unroll
    for (int k = 0; k < kVectorWidth; ++k)
      r[k] = kForward ? arithmetic_value(p, u[k], v[k]) : scale * (b ? u[k] * v[k] : u[k]);
    store_vector<T, kVectorWidth>(y, i * kVectorWidth, r);
  }
}

// Launches dense_kernel where the regions allow it; false otherwise.
template <bool kForward>
bool launch_dense(const ArithmeticParameters& p, float scale, const ImageRegion& a, const ImageRegion* b,
                  const ImageRegion& y, cudaStream_t stream) {
  if (!same_extents(a, y) || (b && !same_extents(*b, y))) return false;
  const DataType type = b ? dense_type({a, *b, y}) : dense_type({a, y});
  const int64_t vectors = y.element_count() / kVectorWidth;
  auto launch = [&](auto element) {
    using T = decltype(element);
    dense_kernel<T, kForward><<<blocks_for(vectors), 256, 0, stream>>>(
        p, scale, static_cast<const T*>(a.data), b ? static_cast<const T*>(b->data) : nullptr,
        static_cast<T*>(y.data), vectors);
  };
  if (type == DataType::Float32) launch(float{});
  else if (type == DataType::Float16) launch(__half{});
  else return false;
  return true;
}

}  // namespace

void arithmetic_forward(const ArithmeticParameters& p, const ImageRegion& primary, const ImageRegion& secondary,
                        const ImageRegion& destination, cudaStream_t stream) {
  const int64_t count = destination.element_count();
  if (count == 0 || launch_dense<true>(p, 1.0f, primary, &secondary, destination, stream)) return;
  forward_kernel<<<blocks_for(count), 256, 0, stream>>>(p, Extents<int64_t>(destination), broadcast(primary),
                                                        broadcast(secondary), Strided<int64_t>(destination), count);
}

void arithmetic_gradient(const ImageRegion& dy, const ImageRegion* other, const ImageRegion& dx, float scale,
                         cudaStream_t stream) {
  const int64_t count = dx.element_count();
  if (count == 0 || launch_dense<false>(ArithmeticParameters{}, scale, dy, other, dx, stream)) return;
  Strided<int64_t> o = other ? broadcast(*other) : Strided<int64_t>();
  gradient_kernel<<<blocks_for(count), 256, 0, stream>>>(Extents<int64_t>(dx), Strided<int64_t>(dy), dy.c, dy.h,
                                                         dy.w, other != nullptr, o, Strided<int64_t>(dx), dx.c, dx.h,
                                                         dx.w, scale, count);
}

}  // namespace mpsx::cuda

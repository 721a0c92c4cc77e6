#include "loss.cuh"

#include <algorithm>
#include <cstdint>

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// Work is split into tasks of `chunk` pixels of one image, each done by a
// group of `lanes` threads of one warp (a power of two) whose sum goes to
// scratch; a single block then folds the sums of each image in a fixed
// order, so results never depend on scheduling. Sources of up to
// kFusedValues values run in one block and one launch: the reference CNN's
// N x 10 x 1 x 1 loss costs a single kernel.
constexpr int kThreads = 256;
constexpr int kFusedThreads = 1024;
constexpr int64_t kFusedValues = 8192;
constexpr int64_t kValuesPerLane = 8;

// Everything the kernels read: the descriptor's values resolved, the
// regions, the split into tasks and the scratch arrays.
// What the loss and its gradient take of the descriptor for every value.
struct LossConstants {
  LossType type;
  float weight, keep, spread, delta, epsilon, share;
  bool smooth;
};

LossConstants loss_constants(const LossDescriptor& d, const ImageRegion& y) {
  LossConstants k;
  k.type = d.loss_type;
  k.weight = d.weight;
  k.smooth = d.label_smoothing > 0;
  k.keep = 1.0f - d.label_smoothing;
  k.spread = d.loss_type == LossType::SoftMaxCrossEntropy
                 ? d.label_smoothing / static_cast<float>(d.number_of_classes)
                 : 0.5f * d.label_smoothing;
  k.delta = d.delta;
  k.epsilon = d.epsilon;
  k.share = 1.0f / static_cast<float>(y.c);
  return k;
}

struct Loss : LossConstants {
  bool loss_per_pixel;  // the reduction counts pixels, not values
  bool per_value_loss;  // ReductionType::None
  bool across;          // reduce_across_batch, when reducing
  bool count_weights;   // SUM_BY_NON_ZERO_WEIGHTS with a weights image
  double scale;         // every image's reduction scale, unless count_weights
  ImageRegion y, t, w, g, loss;
  // Division by the channels, the width and the chunks: by multiply and
  // shift where an image's values and the tasks count below 2^31.
  bool narrow;
  Divider<uint32_t> by_channels, by_width, by_chunks;
  int lanes;
  int64_t chunk, chunks, tasks;
  double* sums;    // [tasks]
  double* counts;  // [tasks], non-zero weights
  double* scales;  // [images], from the counts
};

// std::max's choice, so that NaNs propagate as on the cpu.
__device__ __forceinline__ float maximum(float a, float b) { return a < b ? b : a; }

__device__ __forceinline__ float sigmoid(float x) {
  if (x >= 0) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}

// The loss of one value and its derivative, for the types with one loss
// per value (native/cpu/loss.cpp has the reasoning behind each).
__device__ float value_loss(const Loss& k, float y, float t, float* dy) {
  switch (k.type) {
    case LossType::MeanAbsoluteError: {
      float diff = y - t;
      *dy = static_cast<float>((diff > 0) - (diff < 0));
      return fabsf(diff);
    }
    case LossType::MeanSquaredError: {
      float diff = y - t;
      *dy = 2 * diff;
      return diff * diff;
    }
    case LossType::SigmoidCrossEntropy: {
      float label = k.smooth ? t * k.keep + k.spread : t;
      *dy = sigmoid(y) - label;
      return maximum(y, 0.0f) - y * label + log1pf(expf(-fabsf(y)));
    }
    case LossType::CategoricalCrossEntropy:
      if (t == 0) return 0;  // 0 log 0 = 0
      *dy = -t / y;
      return -t * logf(y);
    case LossType::Hinge: {
      float sign = 2 * t - 1, margin = 1 - sign * y;
      *dy = margin > 0 ? -sign : 0.0f;
      return maximum(margin, 0.0f);
    }
    case LossType::Huber: {
      float diff = y - t, size = fabsf(diff), delta = k.delta;
      if (size <= delta) {
        *dy = diff;
        return 0.5f * diff * diff;
      }
      *dy = diff > 0 ? delta : -delta;
      return 0.5f * delta * delta + delta * (size - delta);
    }
    case LossType::CosineDistance: *dy = -t; return k.share - y * t;
    case LossType::Log: {
      float eps = k.epsilon;
      *dy = -t / (y + eps) + (1 - t) / (1 - y + eps);
      return -t * logf(y + eps) - (1 - t) * logf(1 - y + eps);
    }
    case LossType::KullbackLeiblerDivergence: *dy = -t; return (t == 0 ? 0.0f : t * logf(t)) - t * y;
    default: return 0;
  }
}

__device__ __forceinline__ float weight_at(const Loss& k, int64_t offset) {
  return k.w.data ? k.weight * load(k.w.data, offset, k.w.data_type) : k.weight;
}

// n / divisor, through `narrow` where the Loss is narrow.
__device__ __forceinline__ int64_t quotient(const Loss& k, const Divider<uint32_t>& narrow, int64_t divisor, int64_t n) {
  return k.narrow ? narrow.divide(static_cast<uint32_t>(n)) : n / divisor;
}

// Pixel p of an image as (row, column).
__device__ __forceinline__ void pixel_at(const Loss& k, int64_t p, int64_t* row, int64_t* column) {
  *row = quotient(k, k.by_width, k.y.w, p);
  *column = p - *row * k.y.w;
}

// Value u of the pixels from p0 (channels innermost) as (row, column, channel).
__device__ __forceinline__ int64_t value_at(const Loss& k, int64_t p0, int64_t u, int64_t* row, int64_t* column) {
  const int64_t pixel = quotient(k, k.by_channels, k.y.c, u);
  pixel_at(k, p0 + pixel, row, column);
  return u - pixel * k.y.c;
}

// The lanes of a group, with the mask of their shuffles: groups of one warp
// may take different trip counts.
struct Group {
  int lane, lanes;
  unsigned mask;
};

__device__ __forceinline__ float group_max(float v, const Group& g) {
  for (int offset = g.lanes / 2; offset > 0; offset /= 2) v = maximum(v, __shfl_xor_sync(g.mask, v, offset, g.lanes));
  return v;
}

template <class T>
__device__ __forceinline__ T group_sum(T v, const Group& g) {
  for (int offset = g.lanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(g.mask, v, offset, g.lanes);
  return v;
}

// One loss per value over pixels [p0, p1) of image n, values spread over the
// lanes channels innermost. Values of weight zero are masked out: they add
// nothing, even where the loss is not finite.
__device__ double values_loss(const Loss& k, int64_t n, int64_t p0, int64_t p1, const Group& g, float scale) {
  const int64_t channels = k.y.c, count = (p1 - p0) * channels;
  double sum = 0;
  for (int64_t u = g.lane; u < count; u += g.lanes) {
    int64_t row, column;
    const int64_t c = value_at(k, p0, u, &row, &column);
    float we = weight_at(k, offset_of(k.w, n, c, row, column)), e = 0, dy = 0;
    if (we != 0)
      e = value_loss(k, load(k.y.data, offset_of(k.y, n, c, row, column), k.y.data_type),
                     load(k.t.data, offset_of(k.t, n, c, row, column), k.t.data_type), &dy);
    store(k.g.data, offset_of(k.g, n, c, row, column), k.g.data_type, scale * we * dy);
    float weighted = we * e;
    if (k.per_value_loss) store(k.loss.data, offset_of(k.loss, n, c, row, column), k.loss.data_type, weighted);
    sum += weighted;
  }
  return sum;
}

// -sum_c w_c t_c LogSoftMax(y)_c at each pixel of [p0, p1), the pixel's
// channels spread over the lanes; the derivative for y_k is
// SoftMax(y)_k * sum_c w_c t_c - w_k t_k.
__device__ double softmax_cross_entropy(const Loss& k, int64_t n, int64_t p0, int64_t p1, const Group& g,
                                        float scale) {
  const int64_t channels = k.y.c;
  double sum = 0;
  for (int64_t p = p0; p < p1; ++p) {
    int64_t row, column;
    pixel_at(k, p, &row, &column);
    const int64_t y0 = offset_of(k.y, n, 0, row, column), t0 = offset_of(k.t, n, 0, row, column);
    const int64_t w0 = offset_of(k.w, n, 0, row, column), g0 = offset_of(k.g, n, 0, row, column);
    const int64_t l0 = offset_of(k.loss, n, 0, row, column);
    auto y = [&](int64_t c) { return load(k.y.data, y0 + c * k.y.stride.c, k.y.data_type); };
    auto label = [&](int64_t c) {
      float t = load(k.t.data, t0 + c * k.t.stride.c, k.t.data_type);
      return k.smooth ? t * k.keep + k.spread : t;
    };
    float m = -INFINITY;
    for (int64_t c = g.lane; c < channels; c += g.lanes) m = maximum(m, y(c));
    m = group_max(m, g);
    float s = 0;
    for (int64_t c = g.lane; c < channels; c += g.lanes) s += expf(y(c) - m);
    s = group_sum(s, g);
    const float log_sum = m + logf(s), inverse_sum = 1.0f / s;
    float weighted_labels = 0;
    for (int64_t c = g.lane; c < channels; c += g.lanes) {
      float we = weight_at(k, w0 + c * k.w.stride.c), tc = label(c);
      float e = -we * tc * (y(c) - log_sum);
      weighted_labels += we * tc;
      if (k.per_value_loss) store(k.loss.data, l0 + c * k.loss.stride.c, k.loss.data_type, e);
      sum += e;
    }
    weighted_labels = group_sum(weighted_labels, g);
    for (int64_t c = g.lane; c < channels; c += g.lanes) {
      float we = weight_at(k, w0 + c * k.w.stride.c), tc = label(c);
      float gradient = scale * (expf(y(c) - m) * inverse_sum * weighted_labels - we * tc);
      store(k.g.data, g0 + c * k.g.stride.c, k.g.data_type, gradient);
    }
  }
  return sum;
}

// Losses of non-zero weight among pixels [p0, p1) of image n: pixels with
// any where a pixel has one loss, values otherwise.
__device__ double nonzero_weights(const Loss& k, int64_t n, int64_t p0, int64_t p1, const Group& g) {
  const int64_t channels = k.y.c;
  double sum = 0;
  if (k.loss_per_pixel) {
    for (int64_t p = p0; p < p1; ++p) {
      int64_t row, column;
      pixel_at(k, p, &row, &column);
      const int64_t w0 = offset_of(k.w, n, 0, row, column);
      int any = 0;
      for (int64_t c = g.lane; c < channels && !any; c += g.lanes)
        any = load(k.w.data, w0 + c * k.w.stride.c, k.w.data_type) != 0;
      if (group_sum(any, g) > 0 && g.lane == 0) sum += 1;
    }
    return sum;
  }
  for (int64_t u = g.lane; u < (p1 - p0) * channels; u += g.lanes) {
    int64_t row, column;
    const int64_t c = value_at(k, p0, u, &row, &column);
    sum += load(k.w.data, offset_of(k.w, n, c, row, column), k.w.data_type) != 0;
  }
  return sum;
}

__device__ __forceinline__ double scale_of(const Loss& k, int64_t image) {
  return k.count_weights ? k.scales[image] : k.scale;
}

enum class Phase { Count, Loss };

// Every task of the phase, group by group over the grid; with `out`, the
// group's sum of each task is written there.
__device__ void over_tasks(const Loss& k, Phase phase, double* out) {
  const int64_t thread = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t groups = int64_t(gridDim.x) * blockDim.x / k.lanes;
  const unsigned first_lane = threadIdx.x % 32 / k.lanes * k.lanes;
  const Group g{static_cast<int>(threadIdx.x % k.lanes), k.lanes,
                k.lanes == 32 ? 0xffffffffu : ((1u << k.lanes) - 1) << first_lane};
  for (int64_t task = thread / k.lanes; task < k.tasks; task += groups) {
    const int64_t n = quotient(k, k.by_chunks, k.chunks, task), p0 = (task - n * k.chunks) * k.chunk;
    const int64_t p1 = min(p0 + k.chunk, k.y.h * k.y.w);
    double sum;
    if (phase == Phase::Count) {
      sum = nonzero_weights(k, n, p0, p1, g);
    } else {
      const float scale = static_cast<float>(scale_of(k, n));
      sum = k.type == LossType::SoftMaxCrossEntropy ? softmax_cross_entropy(k, n, p0, p1, g, scale)
                                                    : values_loss(k, n, p0, p1, g, scale);
    }
    if (!out) continue;
    sum = group_sum(sum, g);
    if (g.lane == 0) out[task] = sum;
  }
}

// The sum of v over the block, in a fixed order, returned to every thread.
__device__ double block_sum(double v) {
  __shared__ double partial[33];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  __syncthreads();  // an earlier call's readers are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? partial[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) partial[32] = v;
  }
  __syncthreads();
  return partial[32];
}

// Per image: the sum of its counts of non-zero weights, then the scale of
// SUM_BY_NON_ZERO_WEIGHTS (none: 0 loss and gradient). One block.
__device__ void scales_from_counts(const Loss& k) {
  const int64_t images = k.y.n;
  double partial = 0;
  for (int64_t i = threadIdx.x; i < images; i += blockDim.x) {
    double count = 0;
    for (int64_t j = 0; j < k.chunks; ++j) count += k.counts[i * k.chunks + j];
    k.scales[i] = count;
    partial += count;
  }
  const double total = block_sum(partial);
  for (int64_t i = threadIdx.x; i < images; i += blockDim.x) {
    double divisor = k.across ? total : k.scales[i];
    k.scales[i] = divisor > 0 ? 1.0 / divisor : 0.0;
  }
}

// The loss of each image, its tasks' sums in order, scaled; across the batch
// the first image holds the loss, the others zero. One block.
__device__ void fold(const Loss& k) {
  const int64_t images = k.y.n;
  double partial = 0;
  for (int64_t i = threadIdx.x; i < images; i += blockDim.x) {
    double sum = 0;
    for (int64_t j = 0; j < k.chunks; ++j) sum += k.sums[i * k.chunks + j];
    partial += sum;
    float value = k.across ? 0.0f : static_cast<float>(sum * scale_of(k, i));
    store(k.loss.data, offset_of(k.loss, i, 0, 0, 0), k.loss.data_type, value);
  }
  if (!k.across) return;
  const double total = block_sum(partial);
  if (threadIdx.x == 0) store(k.loss.data, 0, k.loss.data_type, static_cast<float>(total * scale_of(k, 0)));
}

__global__ void __launch_bounds__(kFusedThreads) fused_kernel(const __grid_constant__ Loss k) {
  if (k.count_weights) {
    over_tasks(k, Phase::Count, k.counts);
    __syncthreads();
    scales_from_counts(k);
    __syncthreads();
  }
  over_tasks(k, Phase::Loss, k.per_value_loss ? nullptr : k.sums);
  if (k.per_value_loss) return;
  __syncthreads();
  fold(k);
}

__global__ void count_kernel(const __grid_constant__ Loss k) { over_tasks(k, Phase::Count, k.counts); }
__global__ void scale_kernel(const __grid_constant__ Loss k) { scales_from_counts(k); }
__global__ void loss_kernel(const __grid_constant__ Loss k) {
  over_tasks(k, Phase::Loss, k.per_value_loss ? nullptr : k.sums);
}
__global__ void fold_kernel(const __grid_constant__ Loss k) { fold(k); }

// The split of a source into tasks.
struct Split {
  bool fused;
  int lanes;
  int64_t chunk, chunks, tasks;
};

Split split_of(const LossDescriptor& d, const ImageRegion& y) {
  const int64_t pixels = y.h * y.w, channels = y.c;
  Split s;
  s.fused = y.element_count() <= kFusedValues;
  // One block spreads the values over its threads; large sources give each
  // lane about kValuesPerLane values of a task.
  const int64_t per_lane =
      s.fused ? std::max<int64_t>(1, (y.element_count() + kFusedThreads - 1) / kFusedThreads) : kValuesPerLane;
  auto power_of_two = [](int64_t lanes) {
    int p = 1;
    while (p < 32 && p < lanes) p *= 2;
    return p;
  };
  if (d.loss_type == LossType::SoftMaxCrossEntropy) {
    // A pixel's channels spread over the lanes, pixel after pixel; one block
    // takes fewer lanes a pixel rather than several rounds.
    s.lanes = power_of_two(channels);
    if (s.fused) {
      const int64_t all_pixels = y.n * pixels;
      while (s.lanes > 1 && all_pixels * s.lanes > kFusedThreads) s.lanes /= 2;
      s.chunk = std::clamp<int64_t>((all_pixels * s.lanes + kFusedThreads - 1) / kFusedThreads, 1, pixels);
    } else {
      s.chunk = std::clamp<int64_t>(per_lane * s.lanes / channels, 1, pixels);
    }
  } else {
    s.chunk = std::clamp<int64_t>(32 * per_lane / channels, 1, pixels);
    s.lanes = power_of_two((s.chunk * channels + per_lane - 1) / per_lane);
  }
  s.chunks = (pixels + s.chunk - 1) / s.chunk;
  s.tasks = y.n * s.chunks;
  return s;
}

}  // namespace

size_t loss_scratch_bytes(const LossDescriptor& d, const ImageRegion& y) {
  if (d.reduction_type == ReductionType::None) return 0;
  return static_cast<size_t>(2 * split_of(d, y).tasks + y.n) * sizeof(double);
}

void loss_and_gradient(const LossDescriptor& d, const ImageRegion& y, const ImageRegion& t, const ImageRegion& w,
                       const ImageRegion& g, const ImageRegion& loss, void* scratch, cudaStream_t stream) {
  const Split s = split_of(d, y);
  Loss k{};
  static_cast<LossConstants&>(k) = loss_constants(d, y);
  k.loss_per_pixel = d.loss_per_pixel();
  k.per_value_loss = d.reduction_type == ReductionType::None;
  k.across = d.reduce_across_batch && !k.per_value_loss;
  k.count_weights = d.reduction_type == ReductionType::SumByNonZeroWeights && w.data && d.weight != 0;
  k.y = y;
  k.t = t;
  k.w = w;
  k.g = g;
  k.loss = loss;
  k.lanes = s.lanes;
  k.chunk = s.chunk;
  k.chunks = s.chunks;
  k.tasks = s.tasks;
  k.narrow = y.element_count() / std::max<int64_t>(y.n, 1) < kNarrowLimit && s.tasks < kNarrowLimit;
  if (k.narrow) {
    k.by_channels = Divider<uint32_t>(y.c);
    k.by_width = Divider<uint32_t>(y.w);
    k.by_chunks = Divider<uint32_t>(s.chunks);
  }
  if (!k.per_value_loss) {
    k.sums = static_cast<double*>(scratch);
    k.counts = k.sums + s.tasks;
    k.scales = k.counts + s.tasks;
  }

  // The reduction's divisor, applied to the loss and, so that the gradient
  // is the exact derivative of the loss reported, to the gradient too: MEAN
  // divides by the losses per image (W*H*C; W*H where a pixel has one loss)
  // times N across the batch; SUM_BY_NON_ZERO_WEIGHTS by the losses of
  // non-zero weight, counted on the device when there are weights.
  const double images = static_cast<double>(y.n);
  const double losses_per_image = static_cast<double>(y.h * y.w) * (k.loss_per_pixel ? 1 : y.c);
  k.scale = 1;
  if (d.reduction_type == ReductionType::Mean) {
    k.scale = 1.0 / (losses_per_image * (k.across ? images : 1));
  } else if (d.reduction_type == ReductionType::SumByNonZeroWeights && !k.count_weights) {
    const double divisor = d.weight != 0 ? losses_per_image * (k.across ? images : 1) : 0;
    k.scale = divisor > 0 ? 1.0 / divisor : 0.0;
  }

  if (s.fused) {
    fused_kernel<<<1, kFusedThreads, 0, stream>>>(k);
    return;
  }
  const unsigned blocks = blocks_for(s.tasks * s.lanes, kThreads);
  if (k.count_weights) {
    count_kernel<<<blocks, kThreads, 0, stream>>>(k);
    scale_kernel<<<1, kThreads, 0, stream>>>(k);
  }
  loss_kernel<<<blocks, kThreads, 0, stream>>>(k);
  if (!k.per_value_loss) fold_kernel<<<1, kThreads, 0, stream>>>(k);
}

// ---------------------------------------------------------------- MPSNNLossGradient
//
// Written plainly: a block per image counts non-zero weights where
// SUM_BY_NON_ZERO_WEIGHTS needs them, one thread computes every image's
// scale (the reduction's divisor times the image's source gradient for
// reduced losses), and one thread per pixel writes the gradient of its
// values. native/cpu/loss.cpp has the same math with the reasoning.

namespace {

struct Gradient : LossConstants {
  ReductionType reduction;
  bool per_pixel, across, labels;
  ImageRegion y, t, w, s, g;
  double* scales;  // [images]: counts first, where counted
};

__device__ __forceinline__ float gradient_weight(const Gradient& k, int64_t offset) {
  return k.w.data ? k.weight * load(k.w.data, offset, k.w.data_type) : k.weight;
}

// dy and dt of the loss of one value, for the types with one loss per value.
__device__ void derivatives(const Gradient& k, float y, float t, float* dy, float* dt) {
  switch (k.type) {
    case LossType::MeanAbsoluteError: {
      float diff = y - t;
      *dy = static_cast<float>((diff > 0) - (diff < 0));
      *dt = -*dy;
      return;
    }
    case LossType::MeanSquaredError: *dy = 2 * (y - t); *dt = -*dy; return;
    case LossType::SigmoidCrossEntropy: {
      float label = k.smooth ? t * k.keep + k.spread : t;
      *dy = sigmoid(y) - label;
      *dt = -y * (k.smooth ? k.keep : 1.0f);
      return;
    }
    case LossType::CategoricalCrossEntropy: *dy = t == 0 ? 0.0f : -t / y; *dt = -logf(y); return;
    case LossType::Hinge: {
      float sign = 2 * t - 1, margin = 1 - sign * y;
      *dy = margin > 0 ? -sign : 0.0f;
      *dt = margin > 0 ? -2 * y : 0.0f;
      return;
    }
    case LossType::Huber: {
      float diff = y - t;
      *dy = fabsf(diff) <= k.delta ? diff : (diff > 0 ? k.delta : -k.delta);
      *dt = -*dy;
      return;
    }
    case LossType::CosineDistance: *dy = -t; *dt = -y; return;
    case LossType::Log:
      *dy = -t / (y + k.epsilon) + (1 - t) / (1 - y + k.epsilon);
      *dt = logf(1 - y + k.epsilon) - logf(y + k.epsilon);
      return;
    case LossType::KullbackLeiblerDivergence: *dy = -t; *dt = logf(t) + 1 - y; return;
    default: *dy = 0; *dt = 0; return;
  }
}

// One block per image: its losses of non-zero weight into scales[image].
__global__ void gradient_count_kernel(const __grid_constant__ Gradient k) {
  const int64_t n = blockIdx.x, pixels = k.y.h * k.y.w;
  double count = 0;
  for (int64_t p = threadIdx.x; p < pixels; p += blockDim.x) {
    const int64_t row = p / k.y.w, column = p % k.y.w;
    int64_t nonzero = 0;
    for (int64_t c = 0; c < k.y.c; ++c)
      nonzero += load(k.w.data, offset_of(k.w, n, c, row, column), k.w.data_type) != 0;
    count += k.per_pixel ? (nonzero > 0) : nonzero;
  }
  count = block_sum(count);
  if (threadIdx.x == 0) k.scales[n] = count;
}

// One thread: every image's scale.
__global__ void gradient_scale_kernel(const __grid_constant__ Gradient k, bool counted) {
  const int64_t images = k.y.n;
  const double losses_per_image =
      static_cast<double>(k.y.h) * k.y.w * (k.per_pixel ? 1 : k.y.c);
  double total = 0;
  for (int64_t i = 0; i < images; ++i) {
    if (k.reduction == ReductionType::SumByNonZeroWeights && !counted)
      k.scales[i] = k.weight != 0 ? losses_per_image : 0.0;
    total += k.scales[i];
  }
  for (int64_t i = 0; i < images; ++i) {
    double scale = 1.0;
    if (k.reduction == ReductionType::Mean) scale = 1.0 / (losses_per_image * (k.across ? images : 1));
    if (k.reduction == ReductionType::SumByNonZeroWeights) {
      double divisor = k.across ? total : k.scales[i];
      scale = divisor > 0 ? 1.0 / divisor : 0.0;
    }
    if (k.reduction != ReductionType::None)
      scale *= load(k.s.data, offset_of(k.s, k.across ? 0 : i, 0, 0, 0), k.s.data_type);
    k.scales[i] = scale;
  }
}

// One thread per pixel: the gradient of its values.
__global__ void gradient_kernel(const __grid_constant__ Gradient k) {
  const int64_t pixels = k.y.h * k.y.w;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= k.y.n * pixels) return;
  const int64_t n = index / pixels, p = index % pixels, row = p / k.y.w, column = p % k.y.w;
  const float scale = static_cast<float>(k.scales[n]);
  const bool per_value_gradient = k.reduction == ReductionType::None;
  auto source_gradient = [&](int64_t c) {
    return per_value_gradient ? load(k.s.data, offset_of(k.s, n, c, row, column), k.s.data_type) : 1.0f;
  };
  auto y_at = [&](int64_t c) { return load(k.y.data, offset_of(k.y, n, c, row, column), k.y.data_type); };
  auto t_at = [&](int64_t c) { return load(k.t.data, offset_of(k.t, n, c, row, column), k.t.data_type); };
  auto w_at = [&](int64_t c) { return gradient_weight(k, k.w.data ? offset_of(k.w, n, c, row, column) : 0); };
  auto write = [&](int64_t c, float value) { store(k.g.data, offset_of(k.g, n, c, row, column), k.g.data_type, value); };

  if (k.type == LossType::SoftMaxCrossEntropy) {
    float m = y_at(0);
    for (int64_t c = 1; c < k.y.c; ++c) m = maximum(m, y_at(c));
    float sum_exp = 0;
    for (int64_t c = 0; c < k.y.c; ++c) sum_exp += expf(y_at(c) - m);
    const float log_sum = m + logf(sum_exp);
    float weighted_labels = 0;
    for (int64_t c = 0; c < k.y.c; ++c) {
      float label = k.smooth ? t_at(c) * k.keep + k.spread : t_at(c);
      weighted_labels += w_at(c) * source_gradient(c) * label;
    }
    for (int64_t c = 0; c < k.y.c; ++c) {
      float y = y_at(c), label = k.smooth ? t_at(c) * k.keep + k.spread : t_at(c);
      float mc = w_at(c) * source_gradient(c);
      write(c, k.labels ? scale * (-mc * (k.smooth ? k.keep : 1.0f) * (y - log_sum))
                        : scale * (expf(y - log_sum) * weighted_labels - mc * label));
    }
    return;
  }
  for (int64_t c = 0; c < k.y.c; ++c) {
    float mc = w_at(c) * source_gradient(c), dy = 0, dt = 0;
    if (mc != 0) derivatives(k, y_at(c), t_at(c), &dy, &dt);
    write(c, scale * mc * (k.labels ? dt : dy));
  }
}

}  // namespace

size_t loss_gradient_scratch_bytes(const ImageRegion& y) { return static_cast<size_t>(y.n) * sizeof(double); }

void loss_gradient(const LossDescriptor& d, const ImageRegion& y, const ImageRegion& t, const ImageRegion& w,
                   const ImageRegion& source_gradient, const ImageRegion& g, bool labels_gradient, void* scratch,
                   cudaStream_t stream) {
  if (y.n == 0 || y.c == 0 || y.h == 0 || y.w == 0) return;
  Gradient k;
  static_cast<LossConstants&>(k) = loss_constants(d, y);
  k.reduction = d.reduction_type;
  k.per_pixel = d.loss_per_pixel();
  k.across = d.reduce_across_batch && d.reduction_type != ReductionType::None;
  k.labels = labels_gradient;
  k.y = y;
  k.t = t;
  k.w = w;
  k.s = source_gradient;
  k.g = g;
  k.scales = static_cast<double*>(scratch);
  const bool counted = d.reduction_type == ReductionType::SumByNonZeroWeights && w.data && d.weight != 0;
  if (counted) gradient_count_kernel<<<static_cast<unsigned>(y.n), kThreads, 0, stream>>>(k);
  gradient_scale_kernel<<<1, 1, 0, stream>>>(k, counted);
  const int64_t total = y.n * y.h * y.w;
  gradient_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(k);
}

}  // namespace mpsx::cuda

#include "mpsx/kernels/loss.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// Float32 regions of one batch, NHWC with channels innermost (the cpu layout
// and Float32Region's). `loss` is set for per-value losses (ReductionType::None);
// g.data is null where no gradient is asked (MPSNNForwardLoss); s is the
// per-value source gradient of MPSNNLossGradient under ReductionType::None
// (s.data null otherwise: a per-image source gradient is in the scale).
struct Regions {
  ImageRegion y, t, w, g, s;
  const ImageRegion* loss = nullptr;
  bool labels_gradient = false;  // g is d/dt, not d/dy
};

inline float* at(const ImageRegion& r, int64_t n, int64_t y, int64_t x) {
  return static_cast<float*>(r.data) + detail::pixel_offset(r, n, y, x);
}

inline float sigmoid(float x) {
  if (x >= 0) return 1.0f / (1.0f + std::exp(-x));
  float e = std::exp(x);
  return e / (1.0f + e);
}

// pixel(y, t, w, g, l, s) over pixels [first, first + count) of image n, in
// row-major order; w is null without per-value weights, g without a
// gradient, l unless the losses are per value, s without a per-value source
// gradient. Returns the sum of what pixel returns.
template <class Pixel>
double over_pixels(const Regions& r, int64_t n, int64_t first, int64_t count, Pixel&& pixel) {
  const int64_t width = r.y.w;
  int64_t y = first / width, x = first % width;
  double sum = 0;
  for (int64_t i = 0; i < count; ++i) {
    sum += pixel(at(r.y, n, y, x), at(r.t, n, y, x), r.w.data ? at(r.w, n, y, x) : nullptr,
                 r.g.data ? at(r.g, n, y, x) : nullptr, r.loss ? at(*r.loss, n, y, x) : nullptr,
                 r.s.data ? at(r.s, n, y, x) : nullptr);
    if (++x == width) {
      x = 0;
      ++y;
    }
  }
  return sum;
}

// The losses of one value each: value(y, t, &loss, &dy, &dt), dy and dt the
// derivatives for the source and the labels. Values of weight zero are masked
// out: they add nothing, even where the loss is not finite (log of 0). Each
// loss is linear in its weight, so a per-value source gradient multiplies it.
template <class Value>
double per_value(const Regions& r, const LossDescriptor& d, int64_t n, int64_t first, int64_t count, float scale,
                 Value&& value) {
  const int64_t channels = r.y.c;
  const float weight = d.weight;
  const bool labels = r.labels_gradient;
  return over_pixels(r, n, first, count,
                     [&](const float* y, const float* t, const float* w, float* g, float* l, const float* s) {
                       double sum = 0;
                       for (int64_t c = 0; c < channels; ++c) {
                         float we = w ? weight * w[c] : weight, m = s ? we * s[c] : we, e = 0, dy = 0, dt = 0;
                         if (m != 0) value(y[c], t[c], &e, &dy, &dt);
                         if (g) g[c] = scale * m * (labels ? dt : dy);
                         if (l) l[c] = we * e;
                         sum += we * e;
                       }
                       return sum;
                     });
}

// -sum_c w_c t_c LogSoftMax(y)_c at each pixel; its derivative for y_k is
// SoftMax(y)_k * sum_c w_c t_c - w_k t_k (SoftMax(y) - t where the weights
// are equal and the labels sum to 1, as MPSCNNLoss.h writes it); for t_k
// (smoothed labels: times 1 - label_smoothing) -w_k LogSoftMax(y)_k. A
// per-value source gradient multiplies each w_c.
double softmax_cross_entropy(const Regions& r, const LossDescriptor& d, int64_t n, int64_t first, int64_t count,
                             float scale) {
  const int64_t channels = r.y.c;
  const float weight = d.weight, keep = 1.0f - d.label_smoothing;
  const float spread = d.label_smoothing / static_cast<float>(d.number_of_classes);
  const bool smooth = d.label_smoothing > 0, labels = r.labels_gradient;
  const float label_slope = smooth ? keep : 1.0f;
  return over_pixels(r, n, first, count,
                     [&](const float* y, const float* t, const float* w, float* g, float* l, const float* s) {
                       float m = y[0];
                       for (int64_t c = 1; c < channels; ++c) m = std::max(m, y[c]);
                       float sum_exp = 0;
                       for (int64_t c = 0; c < channels; ++c) {
                         float e = std::exp(y[c] - m);
                         if (g) g[c] = e;  // g holds exp until the end
                         sum_exp += e;
                       }
                       const float log_sum = m + std::log(sum_exp), inverse_sum = 1.0f / sum_exp;
                       float weighted_labels = 0;
                       double sum = 0;
                       for (int64_t c = 0; c < channels; ++c) {
                         float we = w ? weight * w[c] : weight, label = smooth ? t[c] * keep + spread : t[c];
                         float e = -we * label * (y[c] - log_sum);
                         weighted_labels += (s ? we * s[c] : we) * label;
                         if (l) l[c] = e;
                         sum += e;
                       }
                       if (g) {
                         for (int64_t c = 0; c < channels; ++c) {
                           float we = w ? weight * w[c] : weight, label = smooth ? t[c] * keep + spread : t[c];
                           float mc = s ? we * s[c] : we;
                           g[c] = labels ? scale * (-mc * label_slope * (y[c] - log_sum))
                                         : scale * (g[c] * inverse_sum * weighted_labels - mc * label);
                         }
                       }
                       return sum;
                     });
}

// The weighted loss sum of pixels [first, first + count) of image n; writes
// scale times its gradient where asked, and the weighted per-value losses
// where asked.
double loss_of_pixels(const Regions& r, const LossDescriptor& d, int64_t n, int64_t first, int64_t count,
                      float scale) {
  switch (d.loss_type) {
    case LossType::MeanAbsoluteError:
      return per_value(r, d, n, first, count, scale, [](float y, float t, float* e, float* dy, float* dt) {
        float diff = y - t;
        *e = std::fabs(diff);
        *dy = static_cast<float>((diff > 0) - (diff < 0));
        *dt = -*dy;
      });
    case LossType::MeanSquaredError:
      return per_value(r, d, n, first, count, scale, [](float y, float t, float* e, float* dy, float* dt) {
        float diff = y - t;
        *e = diff * diff;
        *dy = 2 * diff;
        *dt = -*dy;
      });
    case LossType::SoftMaxCrossEntropy: return softmax_cross_entropy(r, d, n, first, count, scale);
    case LossType::SigmoidCrossEntropy: {
      const float keep = 1.0f - d.label_smoothing, spread = 0.5f * d.label_smoothing;
      const bool smooth = d.label_smoothing > 0;
      return per_value(r, d, n, first, count, scale, [=](float y, float t, float* e, float* dy, float* dt) {
        float label = smooth ? t * keep + spread : t;
        *e = std::max(y, 0.0f) - y * label + std::log1p(std::exp(-std::fabs(y)));
        *dy = sigmoid(y) - label;
        *dt = -y * (smooth ? keep : 1.0f);
      });
    }
    case LossType::CategoricalCrossEntropy:
      return per_value(r, d, n, first, count, scale, [](float y, float t, float* e, float* dy, float* dt) {
        float log_y = std::log(y);
        *dt = -log_y;
        if (t == 0) return;  // 0 log 0 = 0
        *e = -t * log_y;
        *dy = -t / y;
      });
    case LossType::Hinge:
      // Labels 0 and 1 stand for -1 and 1, as the header's gradient and its
      // "labels are expected to be 0.0 or 1.0" say.
      return per_value(r, d, n, first, count, scale, [](float y, float t, float* e, float* dy, float* dt) {
        float sign = 2 * t - 1, margin = 1 - sign * y;
        *e = std::max(margin, 0.0f);
        *dy = margin > 0 ? -sign : 0.0f;
        *dt = margin > 0 ? -2 * y : 0.0f;
      });
    case LossType::Huber: {
      const float delta = d.delta;
      return per_value(r, d, n, first, count, scale, [=](float y, float t, float* e, float* dy, float* dt) {
        float diff = y - t, size = std::fabs(diff);
        if (size <= delta) {
          *e = 0.5f * diff * diff;
          *dy = diff;
        } else {
          *e = 0.5f * delta * delta + delta * (size - delta);
          *dy = diff > 0 ? delta : -delta;
        }
        *dt = -*dy;
      });
    }
    case LossType::CosineDistance: {
      // 1 - sum_c y_c t_c at each pixel, spread over its values so that the
      // weight of each value scales its share.
      const float share = 1.0f / static_cast<float>(r.y.c);
      return per_value(r, d, n, first, count, scale, [=](float y, float t, float* e, float* dy, float* dt) {
        *e = share - y * t;
        *dy = -t;
        *dt = -y;
      });
    }
    case LossType::Log: {
      const float eps = d.epsilon;
      return per_value(r, d, n, first, count, scale, [=](float y, float t, float* e, float* dy, float* dt) {
        float log_y = std::log(y + eps), log_not_y = std::log(1 - y + eps);
        *e = -t * log_y - (1 - t) * log_not_y;
        *dy = -t / (y + eps) + (1 - t) / (1 - y + eps);
        *dt = log_not_y - log_y;
      });
    }
    case LossType::KullbackLeiblerDivergence:
      // y holds log-probabilities; d/dy of t (log t - y) is -t, d/dt is
      // log t + 1 - y (-infinity at t = 0).
      return per_value(r, d, n, first, count, scale, [](float y, float t, float* e, float* dy, float* dt) {
        *e = (t == 0 ? 0.0f : t * std::log(t)) - t * y;
        *dy = -t;
        *dt = std::log(t) + 1 - y;
      });
    case LossType::Count: break;
  }
  return 0;
}

// Losses with a non-zero weight among pixels [first, first + count) of image n.
double nonzero_weights(const Regions& r, bool per_pixel, int64_t n, int64_t first, int64_t count) {
  const int64_t channels = r.y.c;
  return over_pixels(r, n, first, count,
                     [&](const float*, const float*, const float* w, float*, float*, const float*) {
    int64_t nonzero = 0;
    for (int64_t c = 0; c < channels; ++c) nonzero += w[c] != 0;
    return static_cast<double>(per_pixel ? nonzero > 0 : nonzero);
  });
}

constexpr int64_t kChunkValues = 16384;
constexpr int64_t kParallelValues = 32768;

// One pass over a batch: the loss (into `loss` where given), and the gradient
// (into `gradient` where given) for `source_gradient`: none (CNNLoss's
// gradient of the loss), per value (ReductionType::None) or per image.
void run(CpuContext& cpu, const LossDescriptor& d_, const ImageRegion& source, const ImageRegion& labels,
         const ImageRegion& weights, const ImageRegion& source_gradient, const ImageRegion& gradient,
         const ImageRegion& loss, bool labels_gradient) {
  Float32Region y(cpu, source, 0, true), t(cpu, labels, 1, true), w(cpu, weights, 2, true);
  Float32Region g(cpu, gradient, 3, false), l(cpu, loss, 4, false), sg(cpu, source_gradient, 6, true);
  const bool per_value_loss = d_.reduction_type == ReductionType::None;
  const bool across = d_.reduce_across_batch && !per_value_loss;
  Regions r{y.region(), t.region(), w.region(), g.region(), per_value_loss ? sg.region() : ImageRegion{},
            per_value_loss && loss.data ? &l.region() : nullptr, labels_gradient};

  // Work in chunks of pixels of one image, so that images of any size and
  // batches of any length spread over threads and sum in a fixed order.
  const int64_t images = source.n, channels = source.c, pixels = source.h * source.w;
  const int64_t chunk = std::min(pixels, std::max<int64_t>(1, kChunkValues / channels));
  const int64_t chunks = (pixels + chunk - 1) / chunk, tasks = images * chunks;
  const int64_t task_grain = std::max<int64_t>(1, kParallelValues / (chunk * channels));
  char* memory = static_cast<char*>(cpu.scratch(5, static_cast<size_t>(tasks + 2 * images) * sizeof(double)));
  double* sums = reinterpret_cast<double*>(memory);
  double* scales = sums + tasks;
  double* gradient_scales = scales + images;
  auto each_task = [&](auto&& body) {
    detail::parallel_chunks(tasks, task_grain, [&](int64_t first, int64_t count) {
      for (int64_t task = first; task < first + count; ++task) {
        int64_t image = task / chunks, from = (task % chunks) * chunk;
        sums[task] = body(image, from, std::min(chunk, pixels - from));
      }
    });
  };
  auto image_sum = [&](int64_t image) {
    double s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += sums[image * chunks + k];
    return s;
  };

  // The reduction's divisor, applied to the loss and, so that the gradient
  // is the exact derivative of the loss reported, to the gradient too: MEAN
  // divides by the losses per image (W*H*C; W*H where a pixel has one loss)
  // times N across the batch; SUM_BY_NON_ZERO_WEIGHTS by the losses of
  // non-zero weight (none: 0 loss and gradient). NONE and SUM scale by 1.
  const double losses_per_image = d_.loss_per_pixel() ? pixels : pixels * channels;
  switch (d_.reduction_type) {
    case ReductionType::Mean:
      std::fill_n(scales, images, 1.0 / (losses_per_image * (across ? images : 1)));
      break;
    case ReductionType::SumByNonZeroWeights: {
      if (r.w.data && d_.weight != 0) {
        each_task([&](int64_t image, int64_t from, int64_t count) {
          return nonzero_weights(r, d_.loss_per_pixel(), image, from, count);
        });
        for (int64_t i = 0; i < images; ++i) scales[i] = image_sum(i);  // counts, inverted below
      } else {
        std::fill_n(scales, images, d_.weight != 0 ? losses_per_image : 0.0);
      }
      double total = 0;
      for (int64_t i = 0; i < images; ++i) total += scales[i];
      for (int64_t i = 0; i < images; ++i) {
        double divisor = across ? total : scales[i];
        scales[i] = divisor > 0 ? 1.0 / divisor : 0.0;
      }
      break;
    }
    default: std::fill_n(scales, images, 1.0); break;
  }
  // A reduced loss's source gradient: one value per image, the first
  // image's for all across the batch.
  for (int64_t i = 0; i < images; ++i) {
    double factor = 1.0;
    if (source_gradient.data && !per_value_loss) factor = *at(sg.region(), across ? 0 : i, 0, 0);
    gradient_scales[i] = scales[i] * factor;
  }

  each_task([&](int64_t image, int64_t from, int64_t count) {
    return loss_of_pixels(r, d_, image, from, count, static_cast<float>(gradient_scales[image]));
  });
  if (loss.data && !per_value_loss) {
    float* out = l.data();
    const int64_t stride = l.region().stride.n;
    double total = 0;
    for (int64_t i = 0; i < images; ++i) {
      double s = image_sum(i);
      total += s;
      out[i * stride] = across ? 0.0f : static_cast<float>(s * scales[i]);
    }
    // Across the batch the first image holds the loss, the others zero.
    if (across) out[0] = static_cast<float>(total * scales[0]);
  }
  g.store();
  l.store();
}

class CpuLoss final : public LossPrimitive {
 public:
  explicit CpuLoss(const LossDescriptor& d) : d_(d) {}

  void loss_and_gradient(ExecutionContext& context, const ImageRegion& source, const ImageRegion& labels,
                         const ImageRegion& weights, const ImageRegion& gradient,
                         const ImageRegion& loss) const override {
    run(context_of(context), d_, source, labels, weights, ImageRegion{}, gradient, loss, false);
  }

  void forward_loss(ExecutionContext& context, const LossDescriptor& d, const ImageRegion& source,
                    const ImageRegion& labels, const ImageRegion& weights, const ImageRegion& loss) const override {
    run(context_of(context), d, source, labels, weights, ImageRegion{}, ImageRegion{}, loss, false);
  }

  void loss_gradient(ExecutionContext& context, const LossDescriptor& d, const ImageRegion& source,
                     const ImageRegion& labels, const ImageRegion& weights, const ImageRegion& source_gradient,
                     const ImageRegion& gradient, bool labels_gradient) const override {
    run(context_of(context), d, source, labels, weights, source_gradient, gradient, ImageRegion{}, labels_gradient);
  }

 private:
  LossDescriptor d_;
};

const Registered<LossPrimitive, CpuLoss> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu

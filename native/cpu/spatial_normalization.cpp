#include "mpsx/kernels/spatial_normalization.h"
#include "mpsx/checked.h"
#include "mpsx/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// oneDNN's lrn_within_channel is documented as x / (k + alpha/n * the sum of
// x^2 over the n x n window)^beta, but oneDNN 3.2 (the version built here)
// computes alpha/(n*n): MPS's T for edge mode ZERO and an odd n (whose window
// is centred, taps off the image read 0), forward and backward (its backward
// pass is the exact derivative, borders included; checked against the loops'
// formula for its reference and jit kernels, batches and channel subsets
// with strides, n = 1 to 9). It runs there when the written region is the
// whole source image (oneDNN reads only the tensor it writes) and oneDNN
// picks a jit kernel (dense NHWC, channels a multiple of 8 or 16, n <= 5,
// beta 0.75 in 3.2): its reference kernel is slower than the loops below.
// Even n (oneDNN's window is centred, MPS's is not), CLAMP, sub-regions and
// the rest run the loops.

// Scratch slots (Float32Region takes 0 to 2): the loops' per element of the
// written region, in (image, row, column, channel) order; oneDNN's copies of
// inputs its output overlaps.
constexpr size_t kFirstSlot = 3;

// T(o) = delta + alpha/(k*k) * the sum of x^2 over the window of source pixel
// (row, column), channel offset `c` of the whole-image region x, taps off
// the image read as the edge mode says.
inline float denominator(const SpatialNormalizationDescriptor& d, const SpatialNormalizationParameters& p,
                         const ImageRegion& x, const float* image, int64_t c, int64_t row, int64_t column) {
  double sum = 0.0;
  for (int64_t r = row - d.before(); r <= row + d.after(); ++r) {
    const int64_t tr = tap(d.edge_mode, r, x.h);
    if (tr < 0) continue;
    for (int64_t q = column - d.before(); q <= column + d.after(); ++q) {
      const int64_t tq = tap(d.edge_mode, q, x.w);
      if (tq < 0) continue;
      const float v = image[tr * x.stride.h + tq * x.stride.w + c * x.stride.c];
      sum += double(v) * v;
    }
  }
  return p.delta + p.alpha / static_cast<float>(d.kernel_size * d.kernel_size) * static_cast<float>(sum);
}

// Calls f(n, row, column, index) for every pixel of the written region, in
// parallel; index counts pixels in (image, row, column) order.
template <class F>
void for_region_pixels(const SpatialNormalizationDescriptor& d, F&& f) {
  const int64_t pixels = d.images * d.height * d.width;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(d.channels, 1));
  detail::parallel_chunks(pixels, grain, [&](int64_t first, int64_t count) {
    for (int64_t i = first; i < first + count; ++i) f(i / (d.height * d.width), (i / d.width) % d.height, i % d.width, i);
  });
}

// Scratch slots of the gradient's forward-training pass: its workspace and
// its result (not kept).
constexpr size_t kWorkspaceSlot = kFirstSlot + 2, kTrainingSlot = kFirstSlot + 3;

// The oneDNN primitives of one set of alpha, beta and delta (oneDNN bakes
// them in): the forward or backward pass, and for a backward pass that reads
// a workspace (its jit kernels do, its reference kernel does not) the
// forward-training pass that writes it.
struct Built {
  SpatialNormalizationParameters p;
  dnnl::primitive primitive, training;
  dnnl::memory::desc workspace_desc;
  size_t workspace_bytes = 0;
};

// Memory slots: x, y or dy, dx, workspace, the training pass's result.
enum { kX, kY, kDy = kY, kDx, kWorkspace, kTrainingResult, kMemories };

// The memory objects of one queue's context for one Built: made on its first
// encode, then each execution only points them at its data, so the steady
// state allocates nothing. Only the context's worker thread uses it.
struct Binding {
  const CpuContext* context = nullptr;
  std::shared_ptr<const Built> built;
  dnnl::memory memory[kMemories];
  int count = 0;
  dnnl_exec_arg_t arguments[4];
  dnnl_exec_arg_t training_arguments[3];

  void set(int slot, const void* data) const { memory[slot].set_data_handle(const_cast<void*>(data)); }
  void execute(CpuContext& cpu) const {
    if (built->workspace_bytes > 0)
      dnnl::error::wrap_c_api(
          dnnl_primitive_execute(built->training.get(), cpu.stream().get(), 3, training_arguments),
          "could not execute a spatial normalization primitive");
    dnnl::error::wrap_c_api(dnnl_primitive_execute(built->primitive.get(), cpu.stream().get(), count, arguments),
                            "could not execute a spatial normalization primitive");
  }
};

// At most this many parameter sets (and context bindings) are kept per
// primitive; the oldest make way (a running command keeps its own).
constexpr size_t kMaxKept = 4;

template <class T>
void keep(std::vector<std::shared_ptr<const T>>& kept, size_t& next, std::shared_ptr<const T> made) {
  if (kept.size() < kMaxKept) return kept.push_back(std::move(made));
  kept[next] = std::move(made);
  next = (next + 1) % kMaxKept;
}

class CpuSpatialNormalization final : public SpatialNormalizationPrimitive {
 public:
  CpuSpatialNormalization(const CpuBackend& backend, const SpatialNormalizationDescriptor& d)
      : d_(d),
        bytes_(checked_bytes(checked_count({d.images, d.height, d.width, d.channels},
                                           "MPSCNNSpatialNormalization: the region's element count"),
                             sizeof(float), "MPSCNNSpatialNormalization: the scratch size")),
        engine_(backend.engine()) {
    const ImageDescriptor& x = d.gradient ? d.secondary : d.source;
    onednn_ = d.kernel_size % 2 == 1 && d.edge_mode == EdgeMode::Zero && d.source_x == 0 && d.source_y == 0 &&
              x.width == d.width && x.height == d.height && d.images > 0 && d.channels > 0;
    if (!onednn_) return;
    // Forward: source x, destination y. Gradient: source dy, secondary x,
    // destination dx. All of the region's extents here.
    descs_[0] = region_desc(backend, x);
    descs_[1] = region_desc(backend, d.gradient ? d.source : d.destination);
    if (d.gradient) descs_[2] = region_desc(backend, d.destination);
  }

  void forward(ExecutionContext& context, const SpatialNormalizationParameters& p, const ImageRegion& source,
               const ImageRegion& destination) const override {
    CpuContext& cpu = context_of(context);
    Float32Region xr(cpu, source, 0, true);
    Float32Region yr(cpu, destination, 1, false);
    std::shared_ptr<const Binding> binding;
    if (onednn(cpu, p, binding)) {
      binding->set(kX, unaliased_input(cpu, xr.region(), yr.region(), kFirstSlot, OneDnnInPlace::Unsupported));
      binding->set(kY, yr.data());
      binding->execute(cpu);
      cpu.stream().wait();
      return yr.store();
    }
    const ImageRegion& x = xr.region();
    const ImageRegion& y = yr.region();
    const int64_t channels = d_.channels;
    // Pass 1: factors T^-beta of the whole region, read from x only; pass 2
    // writes y, so y may be x.
    float* factors = static_cast<float*>(cpu.scratch(kFirstSlot, bytes()));
    const float* in = xr.data();
    for_region_pixels(d_, [&](int64_t n, int64_t row, int64_t column, int64_t i) {
      const float* image = in + n * x.stride.n;
      for (int64_t c = 0; c < channels; ++c)
        factors[i * channels + c] =
            std::pow(denominator(d_, p, x, image, c, row + d_.source_y, column + d_.source_x), -p.beta);
    });
    float* out = yr.data();
    for_region_pixels(d_, [&](int64_t n, int64_t row, int64_t column, int64_t i) {
      const float* a = in + n * x.stride.n + (row + d_.source_y) * x.stride.h + (column + d_.source_x) * x.stride.w;
      float* b = out + detail::pixel_offset(y, n, row, column);
      for (int64_t c = 0; c < channels; ++c) b[c * y.stride.c] = a[c * x.stride.c] * factors[i * channels + c];
    });
    yr.store();
  }

  void gradient(ExecutionContext& context, const SpatialNormalizationParameters& p,
                const ImageRegion& source_gradient, const ImageRegion& source,
                const ImageRegion& destination_gradient) const override {
    CpuContext& cpu = context_of(context);
    Float32Region dyr(cpu, source_gradient, 0, true);
    Float32Region xr(cpu, source, 1, true);
    Float32Region dxr(cpu, destination_gradient, 2, false);
    const ImageRegion& dy = dyr.region();
    const ImageRegion& x = xr.region();
    const ImageRegion& dx = dxr.region();
    std::shared_ptr<const Binding> binding;
    if (onednn(cpu, p, binding)) {
      binding->set(kX, unaliased_input(cpu, x, dx, kFirstSlot, OneDnnInPlace::Unsupported));
      binding->set(kDy, unaliased_input(cpu, dy, dx, kFirstSlot + 1, OneDnnInPlace::Unsupported));
      binding->set(kDx, dxr.data());
      if (const size_t bytes = binding->built->workspace_bytes) {
        binding->set(kWorkspace, cpu.scratch(kWorkspaceSlot, bytes));
        binding->set(kTrainingResult, cpu.scratch(kTrainingSlot, bytes_));
      }
      binding->execute(cpu);
      cpu.stream().wait();
      return dxr.store();
    }
    const int64_t channels = d_.channels;
    // Pass 1, per element o of the written region: direct = dy(o) T(o)^-beta
    // and spread = dy(o) x(o) T(o)^(-beta-1).
    float* direct = static_cast<float*>(cpu.scratch(kFirstSlot, bytes()));
    float* spread = static_cast<float*>(cpu.scratch(kFirstSlot + 1, bytes()));
    const float* g = dyr.data();
    const float* in = xr.data();
    for_region_pixels(d_, [&](int64_t n, int64_t row, int64_t column, int64_t i) {
      const float* image = in + n * x.stride.n;
      const float* pg = g + detail::pixel_offset(dy, n, row, column);
      const int64_t sr = row + d_.source_y, sc = column + d_.source_x;
      for (int64_t c = 0; c < channels; ++c) {
        const float t = denominator(d_, p, x, image, c, sr, sc);
        const float power = std::pow(t, -p.beta);
        const float gc = pg[c * dy.stride.c];
        direct[i * channels + c] = gc * power;
        spread[i * channels + c] = gc * image[sr * x.stride.h + sc * x.stride.w + c * x.stride.c] * power / t;
      }
    });
    // Pass 2, per pixel s of the whole source: dx(s) = [s written] direct(s)
    // - (2 alpha beta / (k*k)) x(s) * the sum over the written o of
    // reads(s, o) * spread(o), reads(s, o) the number of taps of o's window
    // that read s: the o in rows [s - after, s + before] once each, and with
    // CLAMP, for s on an edge, any o whose window reaches beyond that edge
    // (every written row is a candidate; reads() is 0 for the others).
    // Likewise for columns. It reads x(s) and scratch only, so dx may be x or dy.
    const float scale = 2.0f * p.alpha * p.beta / static_cast<float>(d_.kernel_size * d_.kernel_size);
    const bool clamp = d_.edge_mode == EdgeMode::Clamp;
    float* out = dxr.data();
    const int64_t pixels = x.n * x.h * x.w;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(channels, 1));
    detail::parallel_chunks(pixels, grain, [&](int64_t first, int64_t count) {
      for (int64_t s = first; s < first + count; ++s) {
        const int64_t n = s / (x.h * x.w), row = (s / x.w) % x.h, column = s % x.w;
        // The written region's rows and columns, relative to its origin.
        const int64_t r = row - d_.source_y, q = column - d_.source_x;
        int64_t top = std::max<int64_t>(0, r - d_.after()), bottom = std::min(d_.height - 1, r + d_.before());
        int64_t left = std::max<int64_t>(0, q - d_.after()), right = std::min(d_.width - 1, q + d_.before());
        if (clamp && row == 0) top = 0;
        if (clamp && row == x.h - 1) bottom = d_.height - 1;
        if (clamp && column == 0) left = 0;
        if (clamp && column == x.w - 1) right = d_.width - 1;
        const bool written = r >= 0 && r < d_.height && q >= 0 && q < d_.width;
        const float* a = in + detail::pixel_offset(x, n, row, column);
        float* b = out + detail::pixel_offset(dx, n, row, column);
        for (int64_t c = 0; c < channels; ++c) {
          double sum = 0.0;
          for (int64_t o_row = top; o_row <= bottom; ++o_row) {
            const int64_t o_source_row = o_row + d_.source_y;
            const int64_t reads_row =
                reads(d_.edge_mode, row, x.h, o_source_row - d_.before(), o_source_row + d_.after());
            if (reads_row == 0) continue;
            for (int64_t o_column = left; o_column <= right; ++o_column) {
              const int64_t o_source_column = o_column + d_.source_x;
              const int64_t reads_column =
                  reads(d_.edge_mode, column, x.w, o_source_column - d_.before(), o_source_column + d_.after());
              sum += static_cast<double>(reads_row * reads_column) *
                     spread[((n * d_.height + o_row) * d_.width + o_column) * channels + c];
            }
          }
          const float first_term = written ? direct[((n * d_.height + r) * d_.width + q) * channels + c] : 0.0f;
          b[c * dx.stride.c] = first_term - scale * a[c * x.stride.c] * static_cast<float>(sum);
        }
      }
    });
    dxr.store();
  }

 private:
  size_t bytes() const { return bytes_; }

  // The oneDNN primitives for `p` (built on the first use of a parameter
  // set) and the memory objects of `cpu` for them; false where the loops run. The lock
  // guards queues that share the kernel.
  bool onednn(CpuContext& cpu, const SpatialNormalizationParameters& p,
              std::shared_ptr<const Binding>& binding) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!onednn_) return false;
    std::shared_ptr<const Built> built;
    for (const auto& b : built_)
      if (b->p.alpha == p.alpha && b->p.beta == p.beta && b->p.delta == p.delta) built = b;
    if (!built) {
      built = build(p);
      keep(built_, next_built_, built);
    }
    if (!built->primitive) return false;
    for (const auto& b : bindings_)
      if (b->context == &cpu && b->built == built) binding = b;
    if (binding) return true;
    auto b = std::make_shared<Binding>();
    b->context = &cpu;
    b->built = built;
    for (int i = 0; i < (d_.gradient ? 3 : 2); ++i) b->memory[i] = dnnl::memory(descs_[i], engine_, nullptr);
    if (!d_.gradient) {
      b->count = 2;
      b->arguments[0] = {DNNL_ARG_SRC, b->memory[kX].get()};
      b->arguments[1] = {DNNL_ARG_DST, b->memory[kY].get()};
    } else {
      b->count = 3;
      b->arguments[0] = {DNNL_ARG_SRC, b->memory[kX].get()};
      b->arguments[1] = {DNNL_ARG_DIFF_DST, b->memory[kDy].get()};
      b->arguments[2] = {DNNL_ARG_DIFF_SRC, b->memory[kDx].get()};
      if (built->workspace_bytes > 0) {
        b->memory[kWorkspace] = dnnl::memory(built->workspace_desc, engine_, nullptr);
        b->memory[kTrainingResult] = dnnl::memory(dense_desc(), engine_, nullptr);
        b->arguments[b->count++] = {DNNL_ARG_WORKSPACE, b->memory[kWorkspace].get()};
        b->training_arguments[0] = {DNNL_ARG_SRC, b->memory[kX].get()};
        b->training_arguments[1] = {DNNL_ARG_DST, b->memory[kTrainingResult].get()};
        b->training_arguments[2] = {DNNL_ARG_WORKSPACE, b->memory[kWorkspace].get()};
      }
    }
    binding = b;
    keep(bindings_, next_binding_, binding);
    return true;
  }

  // Built with no primitive (the loops, for this parameter set) where
  // oneDNN refuses the configuration or would run its reference kernel:
  // that recomputes every neighbour's T in the backward pass (k^4 work per
  // element) and measured several times slower than the loops here.
  std::shared_ptr<const Built> build(const SpatialNormalizationParameters& p) const {
    auto b = std::make_shared<Built>();
    b->p = p;
    const auto reference = [](const auto& pd) { return std::string(pd.impl_info_str()).rfind("ref", 0) == 0; };
    try {
      const auto algorithm = dnnl::algorithm::lrn_within_channel;
      const dnnl::memory::dim size = d_.kernel_size;
      if (!d_.gradient) {
        const dnnl::lrn_forward::primitive_desc pd(engine_, dnnl::prop_kind::forward_inference, algorithm,
                                                   descs_[kX], descs_[kY], size, p.alpha, p.beta, p.delta);
        if (!reference(pd)) b->primitive = dnnl::lrn_forward(pd);
      } else {
        // The backward pass reads the forward pass's workspace where it has
        // one (the jit kernels): the gradient runs the forward pass into
        // scratch first.
        const dnnl::lrn_forward::primitive_desc hint(engine_, dnnl::prop_kind::forward_training, algorithm,
                                                     descs_[kX], dense_desc(), size, p.alpha, p.beta, p.delta);
        const dnnl::lrn_backward::primitive_desc pd(engine_, algorithm, descs_[kDx], descs_[kDy], descs_[kX], size,
                                                    p.alpha, p.beta, p.delta, hint);
        if (!reference(hint) && !reference(pd)) {
          b->workspace_desc = hint.workspace_desc();
          b->workspace_bytes = b->workspace_desc.get_size();
          if (b->workspace_bytes > 0) b->training = dnnl::lrn_forward(hint);
          b->primitive = dnnl::lrn_backward(pd);
        }
      }
    } catch (const dnnl::error&) {  // a configuration oneDNN does not take: the loops
      b->primitive = dnnl::primitive();
    }
    return b;
  }

  // Dense NHWC float32 of the region's extents.
  dnnl::memory::desc dense_desc() const {
    return dnnl::memory::desc({d_.images, d_.channels, d_.height, d_.width}, dnnl::memory::data_type::f32,
                              {d_.height * d_.width * d_.channels, 1, d_.width * d_.channels, d_.channels});
  }

  // oneDNN descriptor of a region of the descriptor's extents in `image`, as
  // Float32Region presents it: the image's own strides for float32, dense
  // NHWC otherwise.
  dnnl::memory::desc region_desc(const CpuBackend& backend, const ImageDescriptor& image) const {
    return float32_region_desc(backend, image, d_.images, d_.channels, d_.height, d_.width);
  }

  SpatialNormalizationDescriptor d_;
  size_t bytes_;
  dnnl::engine engine_;
  mutable bool onednn_ = false;
  dnnl::memory::desc descs_[3];
  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const Built>> built_;
  mutable std::vector<std::shared_ptr<const Binding>> bindings_;
  mutable size_t next_built_ = 0, next_binding_ = 0;
};

const Registered<SpatialNormalizationPrimitive, CpuSpatialNormalization> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu

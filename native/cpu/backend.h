// The cpu backend: oneDNN primitives and plain C++ over NHWC images, run by
// one worker thread per command queue.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "mpsx/backend.h"
#include "mpsx/registry.h"
#include "mpsx/command_buffer.h"

// Hot loops (MPSX_CPU_LOOP functions run through Cloned<f>::run) are
// compiled for AVX-512, AVX2 and baseline x86-64. The widest that oneDNN's
// effective ISA includes runs, so a portable wheel still runs at the
// machine's width, and ONEDNN_MAX_CPU_ISA reproduces another machine's
// choices for mpsx's loops as for oneDNN's.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MPSX_CPU_CLONES_X86 1
#endif
#define MPSX_CPU_LOOP [[gnu::always_inline]] inline

namespace mpsx {
struct NeuronDescriptor;  // kernels/neuron.h
}  // namespace mpsx

namespace mpsx::cpu {

enum class CpuClone { Baseline, AVX2, AVX512F };
CpuClone cpu_clone();

// Whether convolutions of float16 images run on them as they are (oneDNN's
// float16 kernels, on a processor with AVX-512 FP16) rather than on float32
// copies (convolution.cpp).
bool runs_float16_convolutions();

template <auto Body>
struct Cloned;
// Body, inlined into one function per clone; run calls the clone cpu_clone()
// names.
template <class R, class... A, R (*Body)(A...)>
struct Cloned<Body> {
  static R run(A... a) {
#ifdef MPSX_CPU_CLONES_X86
    switch (cpu_clone()) {
      case CpuClone::AVX512F: return avx512f(a...);
      case CpuClone::AVX2: return avx2(a...);
      case CpuClone::Baseline: break;
    }
#endif
    return Body(a...);
  }

 private:
#ifdef MPSX_CPU_CLONES_X86
  [[gnu::target("avx512f")]] static R avx512f(A... a) { return Body(a...); }
  [[gnu::target("avx2")]] static R avx2(A... a) { return Body(a...); }
#endif
};

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  const char* kind() const override { return "cpu"; }
  bool host_addressable() const override { return true; }
  bool runs_on_foreign_memory() const override { return true; }
  std::string device_name() const override { return "cpu"; }
  void* allocate(size_t bytes) override;
  void deallocate(void* data, size_t bytes) override;
  void copy_to_host(void* host, const void* device, size_t bytes) override;
  void copy_from_host(void* device, const void* host, size_t bytes) override;
  void fill_zero(void* device, size_t bytes) override;
  void read_region(const ImageRegion& device, const ImageRegion& host) override { copy_region(device, host); }
  void write_region(const ImageRegion& host, const ImageRegion& device) override { copy_region(host, device); }
  ImageLayout image_layout(const ImageDescriptor& descriptor) const override;
  // The strides Float32Region presents a height x width x channels region of
  // `image` with: the image's own for float32, dense NHWC otherwise.
  ImageLayout float32_layout(const ImageDescriptor& image, int64_t height, int64_t width, int64_t channels) const {
    if (image.channel_format == DataType::Float32) return image_layout(image);
    return ImageLayout{height * width * channels, 1, width * channels, channels};
  }
  std::unique_ptr<Executor> new_executor() override;
  // "avx512f", "avx2" or "baseline": cpu_clone().
  const char* loop_clone() const override;
  bool runs_float16_convolutions() const override { return cpu::runs_float16_convolutions(); }
  bool computes_in_float16() const override { return cpu::runs_float16_convolutions(); }
  const char* onednn_isa() const override;

  const dnnl::engine& engine() const { return engine_; }

 private:
  dnnl::engine engine_;
};

// The registration of a family's implementation I of P on this backend
// (mpsx::Registered, registry.h).
template <class P, class I>
using Registered = mpsx::Registered<P, I, CpuBackend>;

// oneDNN's descriptor (dims N, C, H, W) of such a region of `image`.
inline dnnl::memory::desc float32_region_desc(const CpuBackend& backend, const ImageDescriptor& image, int64_t images,
                                              int64_t channels, int64_t height, int64_t width) {
  const ImageLayout s = backend.float32_layout(image, height, width, channels);
  return dnnl::memory::desc({images, channels, height, width}, dnnl::memory::data_type::f32, {s.n, s.c, s.h, s.w});
}

// What commands get while a cpu queue runs them.
class CpuContext final : public ExecutionContext {
 public:
  explicit CpuContext(const dnnl::engine& engine);
  void copy(void* destination, const void* source, size_t bytes) override;
  void fill_zero(void* destination, size_t bytes) override;

  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }
  // Scratch memory of the queue: slot i stays valid until the next request
  // for slot i, so a command can hold several at once.
  void* scratch(size_t slot, size_t bytes);

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  struct Block {
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<Block> scratch_;

 public:
  ~CpuContext() override;
};

inline CpuContext& context_of(ExecutionContext& context) { return static_cast<CpuContext&>(context); }

// Runs a oneDNN primitive of one source and one destination: `x`, described
// by `source`, into `y`, described by `destination`; returns when it is done.
inline void execute_and_wait(CpuContext& cpu, const dnnl::primitive& primitive, const dnnl::memory::desc& source,
                             const void* x, const dnnl::memory::desc& destination, void* y) {
  dnnl::memory src(source, cpu.engine(), const_cast<void*>(x));
  dnnl::memory dst(destination, cpu.engine(), y);
  primitive.execute(cpu.stream(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  cpu.stream().wait();
}

// A float32 view of an image region: the region itself when it is float32,
// otherwise a converted copy in scratch that store() writes back.
class Float32Region {
 public:
  Float32Region(CpuContext& context, const ImageRegion& region, size_t slot, bool load);
  const ImageRegion& region() const { return view_; }
  float* data() const { return static_cast<float*>(view_.data); }
  void store() const;

 private:
  ImageRegion original_;
  ImageRegion view_;
};

// Runs f(x, y) on float32 views of `source` (read) and `destination`, then
// writes y back: a pass of a family computed in float32 whatever the images
// hold.
template <class F>
void float32_pass(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination, F&& f) {
  CpuContext& cpu = context_of(context);
  Float32Region x(cpu, source, 0, true);
  Float32Region y(cpu, destination, 1, false);
  f(x, y);
  y.store();
}

// oneDNN descriptor of a float32 region: dims N, C, H, W with its strides.
dnnl::memory::desc memory_desc(const ImageRegion& region);
// oneDNN memory over a float32 region's data.
dnnl::memory memory_of(const dnnl::engine& engine, const ImageRegion& region);

// True if the region is one dense NHWC block (channels innermost).
bool is_dense_nhwc(const ImageRegion& region);

// Whether a oneDNN primitive may be given an input that is exactly its
// output: oneDNN documents in place for eltwise, softmax, batch
// normalization and binary (src0) only; the rest (LRN among them, whose
// reference kernel writes each value before its neighbours read it) need
// separate memory for every implementation oneDNN may pick.
enum class OneDnnInPlace { Documented, Unsupported };

// The data of float32 region `input` for a oneDNN primitive that writes
// `output`: the input itself, or where the two overlap (other than exactly,
// for OneDnnInPlace::Documented) a copy of its span in scratch `slot`, same
// strides.
const float* unaliased_input(CpuContext& context, const ImageRegion& input, const ImageRegion& output, size_t slot,
                             OneDnnInPlace in_place);

namespace detail {
// Calls body(first, count) over [0, total) in parallel when it is large.
template <class Body>
void parallel_chunks(int64_t total, int64_t grain, Body&& body) {
  int64_t chunks = (total + grain - 1) / grain;
  if (chunks <= 1) {  // starting a thread team costs more than small work
    if (total > 0) body(0, total);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < chunks; ++i) {
    int64_t first = i * grain;
    body(first, std::min(grain, total - first));
  }
}

inline int64_t pixel_offset(const ImageRegion& r, int64_t n, int64_t y, int64_t x) {
  return n * r.stride.n + y * r.stride.h + x * r.stride.w;
}

// Calls row(n, y) for every row y of every image n of `out`, in parallel
// chunks of about `grain` elements.
template <class Row>
void parallel_rows(const ImageRegion& out, int64_t grain, Row&& row) {
  parallel_chunks(out.n * out.h, std::max<int64_t>(1, grain / std::max<int64_t>(out.w * out.c, 1)),
                  [&](int64_t first, int64_t rows) {
                    for (int64_t r = first; r < first + rows; ++r) row(r / out.h, r % out.h);
                  });
}

// Calls f(offsets) for pixels [first, first + count) of regions of equal
// extents, counted in (image, row, column) order: offsets[k] is that of
// channel 0 in regions[k].
template <size_t K, class F>
inline void for_pixels(const ImageRegion* const (&regions)[K], int64_t first, int64_t count, F&& f) {
  const ImageRegion& r0 = *regions[0];
  for (int64_t p = first; p < first + count; ++p) {
    const int64_t x = p % r0.w, row = p / r0.w;
    const int64_t y = row % r0.h, n = row / r0.h;
    int64_t offsets[K];
    for (size_t k = 0; k < K; ++k) offsets[k] = pixel_offset(*regions[k], n, y, x);
    f(offsets);
  }
}

// Float32 regions of equal extents with channels innermost: calls
// run(offsets..., pixels) for runs of pixels whose channels are contiguous.
template <size_t K, class Run>
void for_each_run(const ImageRegion* const (&regions)[K], Run&& run) {
  const ImageRegion& r0 = *regions[0];
  bool dense = true, rows = true;
  for (const ImageRegion* r : regions) {
    dense = dense && is_dense_nhwc(*r);
    rows = rows && r->stride.c == 1 && r->stride.w == r0.c;
  }
  constexpr int64_t kGrain = 16384;
  if (dense) {
    int64_t pixels = r0.n * r0.h * r0.w;
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(r0.c, 1));
    parallel_chunks(pixels, grain, [&](int64_t first, int64_t count) {
      int64_t offsets[K];
      for (size_t k = 0; k < K; ++k) offsets[k] = first * r0.c;
      run(offsets, count);
    });
    return;
  }
  int64_t length = rows ? r0.w : 1;
  int64_t per_row = r0.w / length;
  int64_t runs = r0.n * r0.h * per_row;
  int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(length * r0.c, 1));
  parallel_chunks(runs, grain, [&](int64_t first, int64_t count) {
    for (int64_t i = first; i < first + count; ++i) {
      int64_t x = (i % per_row) * length, row = i / per_row;
      int64_t y = row % r0.h, n = row / r0.h;
      int64_t offsets[K];
      for (size_t k = 0; k < K; ++k) offsets[k] = pixel_offset(*regions[k], n, y, x);
      run(offsets, length);
    }
  });
}
}  // namespace detail

// f(in, out, pixels) over float32 regions x -> y.
template <class F>
void for_each_channel_run(const ImageRegion& x, const ImageRegion& y, F&& f) {
  const ImageRegion* const regions[2] = {&x, &y};
  const float* in = static_cast<const float*>(x.data);
  float* out = static_cast<float*>(y.data);
  detail::for_each_run<2>(regions, [&](const int64_t* o, int64_t pixels) { f(in + o[0], out + o[1], pixels); });
}

// f(a, b, out, pixels) over float32 regions a, b -> out.
template <class F>
void for_each_channel_run(const ImageRegion& a, const ImageRegion& b, const ImageRegion& out, F&& f) {
  const ImageRegion* const regions[3] = {&a, &b, &out};
  const float* pa = static_cast<const float*>(a.data);
  const float* pb = static_cast<const float*>(b.data);
  float* po = static_cast<float*>(out.data);
  detail::for_each_run<3>(regions, [&](const int64_t* o, int64_t pixels) { f(pa + o[0], pb + o[1], po + o[2], pixels); });
}

// Neuron math shared by every family with a fused neuron (float32 regions).
void apply_neuron(const NeuronDescriptor& d, const ImageRegion& x, const ImageRegion& y, int64_t first_channel);
void apply_neuron_gradient(const NeuronDescriptor& d, const ImageRegion& dy, const ImageRegion& x,
                           const ImageRegion& dx, int64_t first_channel);

// Window taps of the spatial normalizations (spatial, local contrast) along
// one axis, edge mode by edge mode.
// The pixel a window tap at position v of an axis of n pixels reads: v, or
// off the source -1 (ZERO: the tap reads 0) or the nearest pixel (CLAMP).
inline int64_t tap(EdgeMode mode, int64_t v, int64_t n) {
  if (v >= 0 && v < n) return v;
  if (mode == EdgeMode::Zero) return -1;
  return v < 0 ? 0 : n - 1;
}

// How many taps of [first, last] read pixel p of an axis of n pixels: the
// tap at p, and with CLAMP the taps beyond the edge p is on.
inline int64_t reads(EdgeMode mode, int64_t p, int64_t n, int64_t first, int64_t last) {
  int64_t low = p, high = p;
  if (mode == EdgeMode::Clamp && p == 0) low = std::min(first, p);
  if (mode == EdgeMode::Clamp && p == n - 1) high = std::max(last, p);
  return std::max<int64_t>(0, std::min(high, last) - std::max(low, first) + 1);
}

}  // namespace mpsx::cpu

#include <cstdlib>
#include <cstring>
#include <new>

#include "backend.h"
#include "mpsx/errors.h"
#include "mpsx/half.h"

namespace mpsx::cpu {

CpuBackend::CpuBackend() : engine_(dnnl::engine::kind::cpu, 0) {}

void* CpuBackend::allocate(size_t bytes) {
  void* data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!data) fail<OutOfMemoryError>("out of memory: the cpu device could not allocate ", bytes, " bytes");
  return data;
}

void CpuBackend::deallocate(void* data, size_t) { std::free(data); }

void CpuBackend::copy_to_host(void* host, const void* device, size_t bytes) { std::memcpy(host, device, bytes); }

void CpuBackend::copy_from_host(void* device, const void* host, size_t bytes) { std::memcpy(device, host, bytes); }

void CpuBackend::fill_zero(void* device, size_t bytes) { std::memset(device, 0, bytes); }

ImageLayout CpuBackend::image_layout(const ImageDescriptor& d) const {
  // NHWC: oneDNN's channels-last kernels and pointwise loops over contiguous
  // channels both run well on it.
  return ImageLayout{d.height * d.width * d.feature_channels, 1, d.width * d.feature_channels, d.feature_channels};
}

CpuContext::CpuContext(const dnnl::engine& engine) : engine_(engine), stream_(engine_) {}

CpuContext::~CpuContext() {
  for (auto& b : scratch_) std::free(b.data);
}

void CpuContext::copy(void* destination, const void* source, size_t bytes) {
  std::memmove(destination, source, bytes);
}

void CpuContext::fill_zero(void* destination, size_t bytes) { std::memset(destination, 0, bytes); }

void* CpuContext::scratch(size_t slot, size_t bytes) {
  if (slot >= scratch_.size()) scratch_.resize(slot + 1);
  Block& b = scratch_[slot];
  if (b.bytes < bytes) {
    std::free(b.data);
    size_t rounded = (bytes + 4095) / 4096 * 4096;
    b.data = std::aligned_alloc(64, rounded);
    if (!b.data) {
      b.bytes = 0;
      fail<OutOfMemoryError>("out of memory: the cpu device could not allocate ", bytes, " bytes of scratch");
    }
    b.bytes = rounded;
  }
  return b.data;
}

dnnl::memory::desc memory_desc(const ImageRegion& r) {
  return dnnl::memory::desc({r.n, r.c, r.h, r.w}, dnnl::memory::data_type::f32,
                            {r.stride.n, r.stride.c, r.stride.h, r.stride.w});
}

dnnl::memory memory_of(const dnnl::engine& engine, const ImageRegion& r) {
  return dnnl::memory(memory_desc(r), engine, r.data);
}

bool is_dense_nhwc(const ImageRegion& r) {
  return r.stride.c == 1 && r.stride.w == r.c && r.stride.h == r.w * r.c && r.stride.n == r.h * r.w * r.c;
}

const float* unaliased_input(CpuContext& context, const ImageRegion& input, const ImageRegion& output, size_t slot,
                             OneDnnInPlace in_place) {
  const bool exactly = input.data == output.data && input.n == output.n && input.c == output.c &&
                       input.h == output.h && input.w == output.w && input.stride.n == output.stride.n &&
                       input.stride.c == output.stride.c && input.stride.h == output.stride.h &&
                       input.stride.w == output.stride.w;
  if (!overlap(input, output) || (exactly && in_place == OneDnnInPlace::Documented))
    return static_cast<const float*>(input.data);
  const size_t bytes = static_cast<size_t>(input.span()) * sizeof(float);
  void* copy = context.scratch(slot, bytes);
  std::memcpy(copy, input.data, bytes);
  return static_cast<const float*>(copy);
}

namespace {
CpuClone widest_clone() {
#ifdef MPSX_CPU_CLONES_X86
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto includes = [isa](dnnl::cpu_isa level) {
    return (isa & static_cast<unsigned>(level)) == static_cast<unsigned>(level);
  };
  if (includes(dnnl::cpu_isa::avx512_core) && __builtin_cpu_supports("avx512f")) return CpuClone::AVX512F;
  if (includes(dnnl::cpu_isa::avx2) && __builtin_cpu_supports("avx2")) return CpuClone::AVX2;
#endif
  return CpuClone::Baseline;
}

// Decided when the library loads, before any thread runs: a function-local
// static's guard, held by a queue's thread at a fork(), would never be
// released in the child.
const CpuClone clone_of_this_process = widest_clone();
}  // namespace

CpuClone cpu_clone() { return clone_of_this_process; }

namespace {

// mpsx/half.h's conversions, inlined into each clone, which vectorizes them.
MPSX_CPU_LOOP
void halves_to_floats(const uint16_t* in, float* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = half_to_float(in[i]);
}

MPSX_CPU_LOOP
void floats_to_halves(const float* in, uint16_t* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = float_to_half(in[i]);
}

// A float16 region into a float32 one of equal extents, or back, channels
// innermost: in parallel runs of contiguous channels. copy_region otherwise.
void convert(const ImageRegion& from, const ImageRegion& to) {
  const bool widen = from.data_type == DataType::Float16 && to.data_type == DataType::Float32;
  const bool narrow = from.data_type == DataType::Float32 && to.data_type == DataType::Float16;
  if (!(widen || narrow) || from.stride.c != 1 || to.stride.c != 1) return copy_region(from, to);
  const ImageRegion* const regions[2] = {&from, &to};
  detail::for_each_run(regions, [&](const int64_t* offsets, int64_t pixels) {
    const int64_t count = pixels * from.c;
    if (widen)
      Cloned<&halves_to_floats>::run(static_cast<const uint16_t*>(from.data) + offsets[0],
                                     static_cast<float*>(to.data) + offsets[1], count);
    else
      Cloned<&floats_to_halves>::run(static_cast<const float*>(from.data) + offsets[0],
                                     static_cast<uint16_t*>(to.data) + offsets[1], count);
  });
}

}  // namespace

Float32Region::Float32Region(CpuContext& context, const ImageRegion& region, size_t slot, bool load)
    : original_(region), view_(region) {
  if (region.data_type == DataType::Float32) return;
  view_.data_type = DataType::Float32;
  view_.stride = ImageLayout{region.h * region.w * region.c, 1, region.w * region.c, region.c};
  view_.data = context.scratch(slot, static_cast<size_t>(region.element_count()) * sizeof(float));
  if (load) convert(original_, view_);
}

void Float32Region::store() const {
  if (original_.data_type != DataType::Float32) convert(view_, original_);
}

namespace {
std::vector<std::unique_ptr<Backend>> enumerate() {
  std::vector<std::unique_ptr<Backend>> list;
  list.push_back(std::make_unique<CpuBackend>());
  return list;
}
// The cpu backend is always present and ranks last.
const bool registered = (register_backend(0, &enumerate), true);
}  // namespace

const char* CpuBackend::loop_clone() const {
  switch (cpu_clone()) {
    case CpuClone::AVX512F: return "avx512f";
    case CpuClone::AVX2: return "avx2";
    case CpuClone::Baseline: break;
  }
  return "baseline";
}

const char* CpuBackend::onednn_isa() const {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41: return "SSE41";
    case isa::avx: return "AVX";
    case isa::avx2: return "AVX2";
    case isa::avx2_vnni: return "AVX2_VNNI";
    case isa::avx2_vnni_2: return "AVX2_VNNI_2";
    case isa::avx512_core: return "AVX512_CORE";
    case isa::avx512_core_vnni: return "AVX512_CORE_VNNI";
    case isa::avx512_core_bf16: return "AVX512_CORE_BF16";
    case isa::avx512_core_fp16: return "AVX512_CORE_FP16";
    case isa::avx512_core_amx: return "AVX512_CORE_AMX";
    case isa::avx512_core_amx_fp16: return "AVX512_CORE_AMX_FP16";
    default: return "DEFAULT";  // no x86 ISA: oneDNN's reference or other-architecture kernels
  }
}

}  // namespace mpsx::cpu

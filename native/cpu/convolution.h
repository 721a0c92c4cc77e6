// oneDNN pieces the convolution families share (convolution.cpp,
// convolution_transpose.cpp): the regions a pass runs on, OHWI weights and
// the per-execution reorders and scratchpads around a primitive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "backend.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx::cpu {

// Each pass (forward, backward data, backward weights) of a primitive whose
// source and destination are float16 runs in float16 where oneDNN computes
// it natively: on the regions as they are, float16 weights, float32 biases
// and float32 accumulation. Otherwise, and where oneDNN has only its
// reference kernel for the pass, on float32 views of the regions.
inline bool may_run_in_float16(DataType source, DataType destination) {
  return source == DataType::Float16 && destination == DataType::Float16 && runs_float16_convolutions();
}

// oneDNN's type of the regions of a pass: float16, or their float32 views.
inline dnnl::memory::data_type pass_type(bool half) {
  return half ? dnnl::memory::data_type::f16 : dnnl::memory::data_type::f32;
}

// The primitive descriptor make(half) gives in float16 if `try_half` and
// oneDNN has a kernel for it other than its reference one, else in float32;
// `half` says which.
template <class Make>
auto make_pass(bool try_half, bool& half, Make make) -> decltype(make(false)) {
  half = false;
  if (try_half) {
    try {
      auto pd = make(true);
      std::string impl = pd.impl_info_str();
      half = impl.rfind("ref", 0) != 0 && impl.find("ref:") == std::string::npos;
      if (half) return pd;
    } catch (const dnnl::error&) {  // a configuration oneDNN refuses in float16
    }
  }
  return make(false);
}

// The strides of the region a pass runs on for a region with `stride`: its
// own when float32 or when the pass runs in float16 (`half`), the dense block
// Float32Region converts float16 into otherwise.
inline ImageLayout view_stride(DataType type, const ImageLayout& stride, int64_t c, int64_t h, int64_t w, bool half) {
  if (type == DataType::Float32 || half) return stride;
  return ImageLayout{h * w * c, 1, w * c, c};
}

// What oneDNN sees of such a region: dims N, C, H, W.
inline dnnl::memory::desc region_desc(int64_t n, int64_t c, int64_t h, int64_t w, DataType type,
                                      const ImageLayout& stride, bool half) {
  ImageLayout s = view_stride(type, stride, c, h, w, half);
  return dnnl::memory::desc({n, c, h, w}, pass_type(half), {s.n, s.c, s.h, s.w});
}

// What oneDNN sees of a pass's source block, and of its gradient (which
// has the result gradient's precision, hence maybe another layout), for
// either family's shape.
template <class Shape>
dnnl::memory::desc source_desc(const Shape& s, bool half) {
  return region_desc(s.images, s.input_channels, s.source_height, s.source_width, s.source_type, s.source_stride,
                     half);
}

template <class Shape>
dnnl::memory::desc source_gradient_desc(const Shape& s, bool half) {
  return region_desc(s.images, s.input_channels, s.source_height, s.source_width, s.destination_type,
                     s.source_stride, half);
}

// A region as a pass takes it: itself where the pass runs in float16,
// otherwise Float32Region's float32 view, which store() writes back.
class PassRegion {
 public:
  PassRegion(CpuContext& cpu, const ImageRegion& region, size_t slot, bool load, bool half) : region_(region) {
    if (!half) region_ = view_.emplace(cpu, region, slot, load).region();
  }
  const ImageRegion& region() const { return region_; }
  void* data() const { return region_.data; }
  void store() const {
    if (view_) view_->store();
  }

 private:
  std::optional<Float32Region> view_;
  ImageRegion region_;
};

// OHWI weights as oneDNN dims: [O][I][H][W] laid out ohwi, or grouped
// [G][O/G][I/G][H][W] laid out gohwi; `any` lets the primitive choose.
template <class Shape>
dnnl::memory::desc weights_desc(const Shape& s, dnnl::memory::format_tag layout_or_any,
                                dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  using tag = dnnl::memory::format_tag;
  if (s.groups == 1)
    return dnnl::memory::desc({s.output_channels, s.input_channels, s.kernel_height, s.kernel_width}, type,
                              layout_or_any == tag::any ? tag::any : tag::ohwi);
  return dnnl::memory::desc({s.groups, s.output_channels / s.groups, s.input_channels / s.groups, s.kernel_height,
                             s.kernel_width},
                            type, layout_or_any == tag::any ? tag::any : tag::gohwi);
}

inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Scratch slots: 0-2 hold float32 copies of float16 regions, 3-4 weights in
// oneDNN's layout, 5 the primitive's own scratchpad, 6 rearranged OHWI
// weights, 7 a dense copy of a result block.
constexpr size_t kWeightsSlot = 3, kDiffWeightsSlot = 4, kScratchpadSlot = 5, kHostWeightsSlot = 6,
                 kDenseResultSlot = 7;

// A primitive over OHWI weights. Weights go to oneDNN as "any": with plain
// OHWI it would fall back to its reference kernels, so they are reordered per
// execution instead (to float16 for a pass run in float16).
class OhwiWeightsPrimitive {
 protected:
  OhwiWeightsPrimitive(const dnnl::engine& engine, const dnnl::memory::desc& user_weights)
      : engine_(engine), user_weights_(user_weights) {}

  dnnl::reorder reorder_if_needed(const dnnl::memory::desc& from, const dnnl::memory::desc& to) const {
    if (from == to) return {};
    return dnnl::reorder(dnnl::reorder::primitive_desc(engine_, from, engine_, to));
  }

  dnnl::memory weights_in(CpuContext& cpu, const void* weights, const dnnl::reorder& reorder,
                          const dnnl::memory::desc& layout) const {
    dnnl::memory user(user_weights_, engine_, const_cast<void*>(weights));
    if (!reorder) return user;
    dnnl::memory converted(layout, engine_, cpu.scratch(kWeightsSlot, layout.get_size()));
    reorder.execute(cpu.stream(), user, converted);
    return converted;
  }

  template <class PrimitiveDesc>
  dnnl::memory scratchpad(CpuContext& cpu, const PrimitiveDesc& pd) const {
    dnnl::memory::desc d = pd.scratchpad_desc();
    return dnnl::memory(d, engine_, cpu.scratch(kScratchpadSlot, d.get_size()));
  }

  // Runs a forward pass `pd` of either family: the source block at `x` into
  // the destination block at `y`.
  template <class PrimitiveDesc>
  void execute_forward(CpuContext& cpu, const dnnl::primitive& pass, const PrimitiveDesc& pd, void* x,
                       const dnnl::memory& w, const void* biases, void* y) const {
    pass.execute(cpu.stream(), {{DNNL_ARG_SRC, dnnl::memory(pd.src_desc(), engine_, x)},
                                {DNNL_ARG_WEIGHTS, w},
                                {DNNL_ARG_BIAS, dnnl::memory(pd.bias_desc(), engine_, const_cast<void*>(biases))},
                                {DNNL_ARG_DST, dnnl::memory(pd.dst_desc(), engine_, y)},
                                {DNNL_ARG_SCRATCHPAD, scratchpad(cpu, pd)}});
  }

  // Runs a backward-data pass `pd` of either family: the result gradient
  // block at `dy` into the source gradient block at `dx`.
  template <class PrimitiveDesc>
  void execute_backward_data(CpuContext& cpu, const dnnl::primitive& pass, const PrimitiveDesc& pd, void* dy,
                             const dnnl::memory& w, void* dx) const {
    pass.execute(cpu.stream(), {{DNNL_ARG_DIFF_DST, dnnl::memory(pd.diff_dst_desc(), engine_, dy)},
                                {DNNL_ARG_WEIGHTS, w},
                                {DNNL_ARG_DIFF_SRC, dnnl::memory(pd.diff_src_desc(), engine_, dx)},
                                {DNNL_ARG_SCRATCHPAD, scratchpad(cpu, pd)}});
  }

  dnnl::engine engine_;
  dnnl::memory::desc user_weights_;
};

}  // namespace mpsx::cpu

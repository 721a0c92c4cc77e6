// oneDNN pieces the convolution families share (convolution.cpp,
// convolution_transpose.cpp): float32 views of regions, OHWI weights and the
// per-execution reorders and scratchpads around a primitive.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend.h"

namespace mpsx::cpu {

// The strides of the float32 view Float32Region gives of a region with
// `stride`: its own when float32, the dense block float16 is converted into
// otherwise.
inline ImageLayout float32_view_stride(DataType type, const ImageLayout& stride, int64_t c, int64_t h, int64_t w) {
  if (type == DataType::Float32) return stride;
  return ImageLayout{h * w * c, 1, w * c, c};
}

// What oneDNN sees of such a view: dims N, C, H, W.
inline dnnl::memory::desc region_desc(int64_t n, int64_t c, int64_t h, int64_t w, DataType type,
                                      const ImageLayout& stride) {
  ImageLayout s = float32_view_stride(type, stride, c, h, w);
  return dnnl::memory::desc({n, c, h, w}, dnnl::memory::data_type::f32, {s.n, s.c, s.h, s.w});
}

// OHWI weights as oneDNN dims: [O][I][H][W] laid out ohwi, or grouped
// [G][O/G][I/G][H][W] laid out gohwi; `any` lets the primitive choose.
template <class Shape>
dnnl::memory::desc weights_desc(const Shape& s, dnnl::memory::format_tag layout_or_any) {
  using tag = dnnl::memory::format_tag;
  if (s.groups == 1)
    return dnnl::memory::desc({s.output_channels, s.input_channels, s.kernel_height, s.kernel_width},
                              dnnl::memory::data_type::f32, layout_or_any == tag::any ? tag::any : tag::ohwi);
  return dnnl::memory::desc({s.groups, s.output_channels / s.groups, s.input_channels / s.groups, s.kernel_height,
                             s.kernel_width},
                            dnnl::memory::data_type::f32, layout_or_any == tag::any ? tag::any : tag::gohwi);
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
// execution instead.
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

  dnnl::engine engine_;
  dnnl::memory::desc user_weights_;
};

}  // namespace mpsx::cpu

// oneDNN pieces the convolution families share (convolution.cpp,
// convolution_transpose.cpp): the regions a pass runs on, OHWI weights and
// the per-execution reorders and scratchpads around a primitive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

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
// oneDNN has a generated kernel for it, else in float32; `half` says which.
// oneDNN's generated kernels carry "jit" or "brg" (brgemm) in their names;
// the others are loops far slower than float32 copies: "ref", and the inner
// product a whole-image convolution becomes, "ip:any+:any" in float16.
template <class Make>
auto make_pass(bool try_half, bool& half, Make make) -> decltype(make(false)) {
  half = false;
  if (try_half) {
    try {
      auto pd = make(true);
      std::string impl = pd.impl_info_str();
      half = impl.find("jit") != std::string::npos || impl.find("brg") != std::string::npos;
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
// weights, 7 a dense copy of a result block, 8 a sub-pixel convolution's
// intermediate result.
constexpr size_t kWeightsSlot = 3, kDiffWeightsSlot = 4, kScratchpadSlot = 5, kHostWeightsSlot = 6,
                 kDenseResultSlot = 7, kSubPixelSlot = 8;

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

  dnnl::engine engine_;
  dnnl::memory::desc user_weights_;
};

// The three passes of a convolution-like oneDNN operation over OHWI weights
// (Forward, Data, Weights: the convolution's or the deconvolution's
// primitives), each run in float16 where oneDNN can (make_pass), with the
// reorders of the weights each needs.
template <class Forward, class Data, class Weights>
class OhwiWeightsPasses : protected OhwiWeightsPrimitive {
 protected:
  using OhwiWeightsPrimitive::OhwiWeightsPrimitive;

  template <class Make>
  void make_forward(bool try_half, Make make) {
    forward_pd_ = make_pass(try_half, forward_half_, make);
    forward_ = Forward(forward_pd_);
    weights_to_forward_ = reorder_if_needed(user_weights_, forward_pd_.weights_desc());
  }

  template <class Make>
  void make_backward_data(bool try_half, Make make) {
    data_pd_ = make_pass(try_half, data_half_, make);
    data_ = Data(data_pd_);
    weights_to_data_ = reorder_if_needed(user_weights_, data_pd_.weights_desc());
  }

  template <class Make>
  void make_backward_weights(bool try_half, Make make) {
    weights_pd_ = make_pass(try_half, weights_half_, make);
    weights_ = Weights(weights_pd_);
    weights_from_gradient_ = reorder_if_needed(weights_pd_.diff_weights_desc(), user_weights_);
  }

  // The source block at `x` into the destination block at `y`.
  void execute_forward(CpuContext& cpu, void* x, const void* weights, const void* biases, void* y) const {
    dnnl::memory w = weights_in(cpu, weights, weights_to_forward_, forward_pd_.weights_desc());
    forward_.execute(cpu.stream(),
                     {{DNNL_ARG_SRC, dnnl::memory(forward_pd_.src_desc(), engine_, x)},
                      {DNNL_ARG_WEIGHTS, w},
                      {DNNL_ARG_BIAS, dnnl::memory(forward_pd_.bias_desc(), engine_, const_cast<void*>(biases))},
                      {DNNL_ARG_DST, dnnl::memory(forward_pd_.dst_desc(), engine_, y)},
                      {DNNL_ARG_SCRATCHPAD, scratchpad(cpu, forward_pd_)}});
  }

  // The result gradient block at `dy` into the source gradient block at `dx`.
  void execute_backward_data(CpuContext& cpu, void* dy, const void* weights, void* dx) const {
    dnnl::memory w = weights_in(cpu, weights, weights_to_data_, data_pd_.weights_desc());
    data_.execute(cpu.stream(), {{DNNL_ARG_DIFF_DST, dnnl::memory(data_pd_.diff_dst_desc(), engine_, dy)},
                                 {DNNL_ARG_WEIGHTS, w},
                                 {DNNL_ARG_DIFF_SRC, dnnl::memory(data_pd_.diff_src_desc(), engine_, dx)},
                                 {DNNL_ARG_SCRATCHPAD, scratchpad(cpu, data_pd_)}});
  }

  // The OHWI weights gradient at `weights_gradient` from the blocks at `x`
  // and `dy`, and the biases gradient where the pass has one.
  void execute_backward_weights(CpuContext& cpu, void* x, void* dy, void* weights_gradient,
                                void* biases_gradient) const {
    dnnl::memory user(user_weights_, engine_, weights_gradient);
    dnnl::memory diff_weights =
        weights_from_gradient_ ? dnnl::memory(weights_pd_.diff_weights_desc(), engine_,
                                              cpu.scratch(kDiffWeightsSlot, weights_pd_.diff_weights_desc().get_size()))
                               : user;
    std::unordered_map<int, dnnl::memory> arguments{
        {DNNL_ARG_SRC, dnnl::memory(weights_pd_.src_desc(), engine_, x)},
        {DNNL_ARG_DIFF_DST, dnnl::memory(weights_pd_.diff_dst_desc(), engine_, dy)},
        {DNNL_ARG_DIFF_WEIGHTS, diff_weights},
        {DNNL_ARG_SCRATCHPAD, scratchpad(cpu, weights_pd_)}};
    if (!weights_pd_.diff_bias_desc().is_zero())
      arguments.emplace(DNNL_ARG_DIFF_BIAS, dnnl::memory(weights_pd_.diff_bias_desc(), engine_, biases_gradient));
    weights_.execute(cpu.stream(), arguments);
    if (weights_from_gradient_) weights_from_gradient_.execute(cpu.stream(), diff_weights, user);
  }

  bool forward_half_ = false, data_half_ = false, weights_half_ = false;  // the passes run in float16
  typename Forward::primitive_desc forward_pd_;
  typename Data::primitive_desc data_pd_;
  typename Weights::primitive_desc weights_pd_;

 private:
  Forward forward_;
  dnnl::reorder weights_to_forward_;
  Data data_;
  dnnl::reorder weights_to_data_;
  Weights weights_;
  dnnl::reorder weights_from_gradient_;
};

}  // namespace mpsx::cpu

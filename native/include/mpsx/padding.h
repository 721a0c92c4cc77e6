// MPSNNPadding and MPSNNDefaultPadding: padding policy objects, which kernels
// and filter nodes hold besides their MPSNNPaddingMethod bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpsx/image.h"
#include "mpsx/types.h"

namespace mpsx {

class Kernel;
class State;

// @protocol MPSNNPadding. A kernel runs it last when it sizes a destination
// (MPS-REFERENCE's order: the default calculation, the family's own, the
// source states, then this object's custom method).
class PaddingPolicy : public std::enable_shared_from_this<PaddingPolicy> {
 public:
  virtual ~PaddingPolicy() = default;
  // -paddingMethod.
  virtual uint32_t padding_method() const = 0;
  // -label.
  virtual std::string label() const = 0;
  // -destinationImageDescriptorForSourceImages:sourceStates:forKernel:
  // suggestedDescriptor:, called only where padding_method() has the Custom
  // bit: returns the destination's descriptor and may set the kernel's
  // properties (offset, edge mode, ...).
  virtual ImageDescriptor destination_image_descriptor(const std::vector<const Image*>& source_images,
                                                       const std::vector<const State*>& source_states,
                                                       Kernel& kernel, const ImageDescriptor& suggested) const = 0;
  // -inverse: the policy of the gradient pass, or null where there is none.
  virtual std::shared_ptr<const PaddingPolicy> inverse() const = 0;
};

// MPSNNDefaultPadding.
class DefaultPadding final : public PaddingPolicy {
 public:
  // +paddingWithMethod:.
  static std::shared_ptr<const DefaultPadding> with_method(uint32_t method);
  // +paddingForTensorflowAveragePooling and ...ValidOnly: the average
  // divides by the valid taps (edge mode Clamp), sized as TensorFlow's SAME
  // (or VALID) pooling.
  static std::shared_ptr<const DefaultPadding> for_tensorflow_average_pooling(bool valid_only);

  uint32_t padding_method() const override { return method_; }
  std::string label() const override;
  ImageDescriptor destination_image_descriptor(const std::vector<const Image*>& source_images,
                                               const std::vector<const State*>& source_states,
                                               Kernel& kernel, const ImageDescriptor& suggested) const override;
  // Itself: the default policies size a gradient as its forward source.
  std::shared_ptr<const PaddingPolicy> inverse() const override;
  bool clamps_edges() const { return clamps_edges_; }

  DefaultPadding(uint32_t method, bool clamps_edges) : method_(method), clamps_edges_(clamps_edges) {}

 private:
  uint32_t method_;
  bool clamps_edges_;
};

// Whether a kernel with these bits and policy runs the policy's custom method.
inline bool runs_custom_padding(uint32_t method, const PaddingPolicy* policy) {
  return policy && (method & padding::kCustom);
}

}  // namespace mpsx

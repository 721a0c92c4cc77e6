// Python objects implementing MPSNNPadding, seen by the runtime as padding
// policies. The calls into Python are Cython functions
// (mpsx/kernels/padding.pxi) that return with a Python error set on failure.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "_callbacks.h"
#include "mpsx/kernel.h"
#include "mpsx/padding.h"

namespace mpsx::python {

// MPSNNPadding calls, filled in when mpsx._kernels is imported.
struct PaddingCalls {
  std::string (*label)(PyObject* policy) = nullptr;
  ImageDescriptor (*destination_image_descriptor)(PyObject* policy, const std::vector<std::shared_ptr<Image>>& sources,
                                                  const std::vector<std::shared_ptr<State>>& states,
                                                  const std::shared_ptr<Kernel>& kernel,
                                                  const ImageDescriptor& suggested) = nullptr;
  std::shared_ptr<const PaddingPolicy> (*inverse)(PyObject* policy) = nullptr;
};

inline PaddingCalls& padding_calls() {
  static PaddingCalls calls;
  return calls;
}

// The Python object's paddingMethod is read once, when it is made (it is
// what a kernel or node is given as its padding).
class PythonPaddingPolicy final : public PaddingPolicy {
 public:
  PythonPaddingPolicy(PyObject* policy, uint32_t method) : policy_(hold(policy)), method_(method) {}

  PyObject* object() const { return static_cast<PyObject*>(policy_.get()); }
  uint32_t padding_method() const override { return method_; }
  std::string label() const override {
    return call_python([&] { return padding_calls().label(object()); });
  }
  ImageDescriptor destination_image_descriptor(const std::vector<const Image*>& source_images,
                                               const std::vector<const State*>& source_states, Kernel& kernel,
                                               const ImageDescriptor& suggested) const override {
    std::vector<std::shared_ptr<Image>> images;
    for (const Image* image : source_images) images.push_back(std::const_pointer_cast<Image>(image->shared_from_this()));
    std::vector<std::shared_ptr<State>> states;
    for (const State* state : source_states) states.push_back(std::const_pointer_cast<State>(state->shared_from_this()));
    std::shared_ptr<Kernel> held = kernel.shared_from_this();
    return call_python([&] { return padding_calls().destination_image_descriptor(object(), images, states, held, suggested); });
  }
  std::shared_ptr<const PaddingPolicy> inverse() const override {
    return call_python([&] { return padding_calls().inverse(object()); });
  }

 private:
  std::shared_ptr<void> policy_;
  uint32_t method_;
};

// A native policy that is no Python object's: an MPSNNDefaultPadding.
inline std::shared_ptr<const DefaultPadding> default_padding_of(const std::shared_ptr<const PaddingPolicy>& policy) {
  return std::dynamic_pointer_cast<const DefaultPadding>(policy);
}

// The Python object behind a policy, or nullptr for a native one.
inline PyObject* python_policy_of(const std::shared_ptr<const PaddingPolicy>& policy) {
  auto* python = dynamic_cast<const PythonPaddingPolicy*>(policy.get());
  return python ? python->object() : nullptr;
}

}  // namespace mpsx::python

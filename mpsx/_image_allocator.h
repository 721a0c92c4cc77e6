// Python objects implementing MPSImageAllocator, seen by the runtime as
// image allocators. The call into Python is a Cython function
// (mpsx/kernels/image_allocator.pxi) that returns with a Python error set on
// failure.
#pragma once

#include <Python.h>

#include <memory>

#include "_callbacks.h"
#include "mpsx/kernel.h"

namespace mpsx::python {

struct ImageAllocatorCalls {
  std::shared_ptr<Image> (*image)(PyObject* allocator, const std::shared_ptr<CommandBuffer>& command_buffer,
                                  const ImageDescriptor& descriptor, const std::shared_ptr<Kernel>& kernel) = nullptr;
};

inline ImageAllocatorCalls& image_allocator_calls() {
  static ImageAllocatorCalls calls;
  return calls;
}

class PythonImageAllocator final : public ImageAllocator {
 public:
  explicit PythonImageAllocator(PyObject* allocator) : allocator_(hold(allocator)) {}

  PyObject* object() const { return static_cast<PyObject*>(allocator_.get()); }
  std::shared_ptr<Image> image(CommandBuffer& command_buffer, const ImageDescriptor& descriptor,
                               const Kernel& kernel) override {
    std::shared_ptr<CommandBuffer> held = command_buffer.shared_from_this();
    std::shared_ptr<Kernel> for_kernel = std::const_pointer_cast<Kernel>(kernel.shared_from_this());
    return call_python([&] { return image_allocator_calls().image(object(), held, descriptor, for_kernel); });
  }

 private:
  std::shared_ptr<void> allocator_;
};

// The Python object behind an allocator, or nullptr for a native one.
inline PyObject* python_allocator_of(const std::shared_ptr<ImageAllocator>& allocator) {
  auto* python = dynamic_cast<PythonImageAllocator*>(allocator.get());
  return python ? python->object() : nullptr;
}

inline std::shared_ptr<DefaultImageAllocator> default_allocator_of(const std::shared_ptr<ImageAllocator>& allocator) {
  return std::dynamic_pointer_cast<DefaultImageAllocator>(allocator);
}

}  // namespace mpsx::python

// The base of every primitive interface: what a family's header
// (kernels/<family>.h) declares for its backends to implement, and the
// registry (registry.h) builds.
#pragma once

#include <cstdint>

namespace mpsx {

// Unique for the lifetime of the process, so identities never repeat.
uint64_t next_primitive_identity();

// One primitive is built for one D (its Descriptor). The interface adds
//   static constexpr const char* family = "<family>";
// the name the registry's errors print, and its passes as pure virtuals.
template <class D>
class PrimitiveInterface {
 public:
  using Descriptor = D;
  virtual ~PrimitiveInterface() = default;
  // What a command's key (CommandKey) names the primitive by: a command
  // buffer's CUDA graph refers to what this primitive owns.
  const uint64_t identity = next_primitive_identity();
};

}  // namespace mpsx

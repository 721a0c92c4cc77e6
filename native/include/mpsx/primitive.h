// The base of every primitive interface: what a family's header
// (kernels/<family>.h) declares for its backends to implement, and the
// registry (registry.h) builds.
#pragma once

namespace mpsx {

// One primitive is built for one D (its Descriptor). The interface adds
//   static constexpr const char* family = "<family>";
// the name the registry's errors print, and its passes as pure virtuals.
template <class D>
class PrimitiveInterface {
 public:
  using Descriptor = D;
  virtual ~PrimitiveInterface() = default;
};

}  // namespace mpsx

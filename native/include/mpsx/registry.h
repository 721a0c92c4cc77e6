// How core gets a kernel family's backend primitive. No shared header lists
// the families: each backend's file of a family registers the primitive it
// provides, and a family that a backend lacks is an Error naming both when a
// kernel of it is made.
#pragma once

#include <memory>
#include <type_traits>

#include "mpsx/backend.h"

namespace mpsx {

// A primitive interface P (kernels/<family>.h) is a PrimitiveInterface of
// its Descriptor (primitive.h) and declares its `family`.
template <class P>
using PrimitiveMaker = std::unique_ptr<P> (*)(Backend& backend, const typename P::Descriptor& descriptor);

namespace detail {
using ErasedMaker = void (*)();
void register_primitive(const char* family, const char* backend_kind, ErasedMaker maker);
// Throws Error when the backend registered no primitive of the family.
ErasedMaker find_primitive(const char* family, const Backend& backend);
}  // namespace detail

// Forgets a backend's primitive of a family, as if the backend lacked it:
// for tests of that error, in a process of their own.
void unregister_primitive(const char* family, const char* backend_kind);

// A backend file's registration, as a static object:
//   const RegisterPrimitive<NeuronPrimitive> registered("cpu", make_neuron);
template <class P>
struct RegisterPrimitive {
  RegisterPrimitive(const char* backend_kind, PrimitiveMaker<P> maker) {
    detail::register_primitive(P::family, backend_kind, reinterpret_cast<detail::ErasedMaker>(maker));
  }
};

// The registration of I, a backend's implementation of P, made from what
// its constructor takes: the backend (as the backend's class B) and the
// descriptor, either, or neither:
//   const Registered<NeuronPrimitive, CudaNeuron, CudaBackend> registered("cuda");
template <class P, class I, class B>
struct Registered : RegisterPrimitive<P> {
  explicit Registered(const char* backend_kind) : RegisterPrimitive<P>(backend_kind, make) {}

  static std::unique_ptr<P> make(Backend& backend, const typename P::Descriptor& descriptor) {
    using D = typename P::Descriptor;
    if constexpr (std::is_constructible_v<I, B&, const D&>)
      return std::make_unique<I>(static_cast<B&>(backend), descriptor);
    else if constexpr (std::is_constructible_v<I, const D&>)
      return std::make_unique<I>(descriptor);
    else if constexpr (std::is_constructible_v<I, B&>)
      return std::make_unique<I>(static_cast<B&>(backend));
    else
      return std::make_unique<I>();
  }
};

// The backend's maker of P: kernels look it up when they are made, so a
// missing family fails there, and build primitives with it later.
template <class P>
PrimitiveMaker<P> primitive_maker(const Backend& backend) {
  return reinterpret_cast<PrimitiveMaker<P>>(detail::find_primitive(P::family, backend));
}

template <class P>
std::unique_ptr<P> make_primitive(Backend& backend, const typename P::Descriptor& descriptor) {
  return primitive_maker<P>(backend)(backend, descriptor);
}

template <class Key, class Primitive>
class PrimitiveCache;

// The primitive `cache` holds for `descriptor`, which `backend` makes the
// first time.
template <class P>
const std::shared_ptr<P>& cached_primitive(PrimitiveCache<typename P::Descriptor, P>& cache, Backend& backend,
                                           const typename P::Descriptor& descriptor) {
  return cache.get(descriptor, [&] { return std::shared_ptr<P>(make_primitive<P>(backend, descriptor)); });
}

}  // namespace mpsx

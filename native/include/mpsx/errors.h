// Errors raised by the runtime. Each maps to one Python exception class
// (mpsx/_errors.py); messages name what was expected and what was given.
#pragma once

#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mpsx {

// Base of every runtime error -> mpsx.MPSXError.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A shape, size or channel count that does not fit -> mpsx.ShapeError.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// An argument value out of its domain -> ValueError.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// An argument of the wrong kind (data type, missing object) -> TypeError.
class TypeMismatchError : public Error {
 public:
  using Error::Error;
};

// Host access to memory a command buffer writes, without synchronize and
// completion -> mpsx.SynchronizationError.
class SynchronizationError : public Error {
 public:
  using Error::Error;
};

// A state used with another batch or in the wrong place -> mpsx.StateError.
class StateError : public Error {
 public:
  using Error::Error;
};

// Objects of different devices mixed in one call -> mpsx.DeviceMismatchError.
class DeviceMismatchError : public Error {
 public:
  using Error::Error;
};

// Memory that cannot be shared with another library as asked (DLPack: a
// layout it cannot describe, a copy the caller refused) -> BufferError, as
// the buffer protocol and DLPack raise.
class BufferError : public Error {
 public:
  using Error::Error;
};

// The device could not provide memory -> MemoryError.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A data-parallel group that cannot be joined, or a collective that failed
// or timed out (a peer died) -> mpsx.DistributedError.
class DistributedError : public Error {
 public:
  using Error::Error;
};

// An exception raised by user code called from the runtime (a Python data
// source, a completed handler). The payload is the original exception object,
// owned opaquely so the runtime does not depend on Python.
class ForeignError : public Error {
 public:
  ForeignError(const std::string& message, std::shared_ptr<void> payload)
      : Error(message), payload_(std::move(payload)) {}
  const std::shared_ptr<void>& payload() const { return payload_; }

 private:
  std::shared_ptr<void> payload_;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// fail<ShapeError>("expected ", a, ", given ", b): builds the message and throws.
template <class E, class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw E(detail::concat(parts...));
}

}  // namespace mpsx

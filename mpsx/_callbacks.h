// Python objects held by the runtime, and calls from runtime threads into
// Python. Compiled into the extension modules only.
#pragma once

#include <Python.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "mpsx/command_buffer.h"
#include "mpsx/errors.h"

namespace mpsx::python {

// Set at interpreter exit: runtime threads then no longer call into Python.
inline std::atomic<bool>& finalizing() {
  static std::atomic<bool> flag{false};
  return flag;
}

// Owns a reference to `object`; the reference is dropped with the GIL held,
// whichever thread releases the last owner.
inline std::shared_ptr<void> hold(PyObject* object) {
  Py_INCREF(object);
  return std::shared_ptr<void>(object, [](void* p) {
    if (finalizing().load()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(p));
    PyGILState_Release(gil);
  });
}

// The Python exception being handled, as a ForeignError the runtime can carry
// across threads and hand back unchanged. Call with the GIL held.
inline ForeignError fetch_foreign_error() {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  std::string message = "an exception in Python code";
  if (value) {
    if (traceback) PyException_SetTraceback(value, traceback);
    PyObject* text = PyObject_Str(value);
    if (text) {
      const char* utf8 = PyUnicode_AsUTF8(text);
      if (utf8) message = std::string(Py_TYPE(value)->tp_name) + ": " + utf8;
      Py_DECREF(text);
    }
    PyErr_Clear();
  }
  std::shared_ptr<void> payload = value ? hold(value) : nullptr;
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return ForeignError(message, payload);
}

using CompletedCall = void (*)(PyObject* handler, CommandBuffer& command_buffer);

// A completed handler that calls `handler(command_buffer)` in Python.
inline std::function<void(CommandBuffer&)> completed_handler(PyObject* handler, CompletedCall call) {
  std::shared_ptr<void> held = hold(handler);
  return [held, call](CommandBuffer& command_buffer) {
    if (finalizing().load()) return;
    call(static_cast<PyObject*>(held.get()), command_buffer);
  };
}

// The GIL for the scope; runtime threads take it before calling Python.
class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// A host step that calls `step()` in Python; a Python exception fails the
// command buffer with that exception.
inline std::function<void()> host_step(PyObject* step) {
  std::shared_ptr<void> held = hold(step);
  return [held] {
    if (finalizing().load()) return;
    Gil gil;
    PyObject* result = PyObject_CallNoArgs(static_cast<PyObject*>(held.get()));
    if (!result) throw fetch_foreign_error();
    Py_DECREF(result);
  };
}

}  // namespace mpsx::python

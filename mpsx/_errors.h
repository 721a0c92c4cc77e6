// Translates runtime exceptions into the Python exceptions of mpsx/_errors.py.
// Compiled into every extension module (Cython's `except +raise_py_error`).
#pragma once

#include <Python.h>

#include <exception>
#include <new>

#include "mpsx/errors.h"

namespace mpsx::python {

inline PyObject* exception_class(const char* name) {
  PyObject* module = PyImport_ImportModule("mpsx._errors");
  if (!module) return nullptr;
  PyObject* cls = PyObject_GetAttrString(module, name);
  Py_DECREF(module);
  return cls;
}

inline void set_error(const char* name, const char* message) {
  PyObject* cls = exception_class(name);
  if (!cls) return;  // the import error stays set
  PyErr_SetString(cls, message);
  Py_DECREF(cls);
}

// Raises the Python form of the exception being handled. Called from a catch block.
inline int raise_py_error() {
  try {
    throw;
  } catch (const mpsx::ForeignError& e) {
    PyObject* original = static_cast<PyObject*>(e.payload().get());
    if (original) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(original)), original);
    } else {
      set_error("MPSXError", e.what());
    }
  } catch (const mpsx::ShapeError& e) {
    set_error("ShapeError", e.what());
  } catch (const mpsx::ArgumentError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const mpsx::BufferError& e) {
    PyErr_SetString(PyExc_BufferError, e.what());
  } catch (const mpsx::TypeMismatchError& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const mpsx::SynchronizationError& e) {
    set_error("SynchronizationError", e.what());
  } catch (const mpsx::StateError& e) {
    set_error("StateError", e.what());
  } catch (const mpsx::DeviceMismatchError& e) {
    set_error("DeviceMismatchError", e.what());
  } catch (const mpsx::OutOfMemoryError& e) {
    set_error("OutOfMemoryError", e.what());
  } catch (const mpsx::DistributedError& e) {
    set_error("DistributedError", e.what());
  } catch (const mpsx::Error& e) {
    set_error("MPSXError", e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    set_error("MPSXError", e.what());
  } catch (...) {
    set_error("MPSXError", "unknown native exception");
  }
  return 0;
}

// Raises the Python form of a stored exception.
inline void raise_stored(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (...) {
    raise_py_error();
  }
}

}  // namespace mpsx::python

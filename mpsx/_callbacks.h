// Python objects held by the runtime, and calls from runtime threads into
// Python. Compiled into the extension modules only.
#pragma once

#include <Python.h>

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "mpsx/capture.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"

namespace mpsx::python {

// Set at interpreter exit: runtime threads then no longer call into Python.
inline std::atomic<bool>& finalizing() {
  static std::atomic<bool> flag{false};
  return flag;
}

// The thread Python runs signal handlers on (threading.main_thread()).
inline std::atomic<unsigned long>& main_thread() {
  static std::atomic<unsigned long> ident{0};
  return ident;
}

// Calls into Python under way (Gil scopes), for the exit: a thread waiting
// for the GIL or running Python code when the interpreter ends is ended by
// Python, through C++ frames that cannot be unwound.
inline std::atomic<int>& python_calls() {
  static std::atomic<int> count{0};
  return count;
}

// Held while a runtime thread makes its Python thread state, and by fork()
// (os.register_at_fork in _runtime.pyx). Making one takes the interpreter's
// list lock without the GIL, and CPython 3.11's child takes that lock after a
// fork before it makes it anew: a fork meanwhile left the child hung.
inline std::mutex& thread_state_mutex() {
  static std::mutex mutex;
  return mutex;
}
inline void before_fork() { thread_state_mutex().lock(); }
inline void after_fork() { thread_state_mutex().unlock(); }

// The GIL for the scope; runtime threads take it before calling Python,
// having stepped out of their RuntimeWork: a fork() holds the GIL while it
// waits for that. Throws Error once the interpreter exits (finalizing).
class Gil {
 public:
  Gil() {
    // Counted before finalizing is read, as the exit sets finalizing before
    // it reads the count: one of them sees the other.
    python_calls().fetch_add(1);
    if (finalizing().load()) {
      python_calls().fetch_sub(1);
      fail<Error>("the interpreter is exiting: no more calls into Python");
    }
    if (PyGILState_GetThisThreadState()) {
      state_ = PyGILState_Ensure();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(thread_state_mutex());
      made_ = PyThreadState_New(PyInterpreterState_Main());
    }
    PyEval_RestoreThread(made_);
  }
  ~Gil() {
    if (made_) {
      // Deleted with the GIL held, so never during a fork.
      PyThreadState_Clear(made_);
      PyThreadState_DeleteCurrent();
    } else {
      PyGILState_Release(state_);
    }
    python_calls().fetch_sub(1);
  }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  detail::RuntimeWorkPause pause_;  // first made, last ended
  PyGILState_STATE state_{};
  PyThreadState* made_ = nullptr;  // this thread's thread state, made for the scope
};

// Owns a reference to `object`; the reference is dropped with the GIL held,
// whichever thread releases the last owner.
inline std::shared_ptr<void> hold(PyObject* object) {
  Py_INCREF(object);
  return std::shared_ptr<void>(object, [](void* p) {
    try {
      Gil gil;
      Py_DECREF(static_cast<PyObject*>(p));
    } catch (const Error&) {
      // The interpreter is exiting and frees what remains.
    }
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

// Runs f() with the GIL held; a Python error it leaves set is thrown as a
// ForeignError.
template <class F>
auto call_python(F&& f) {
  check_not_capturing("a call into Python");
  Gil gil;
  auto result = f();
  if (PyErr_Occurred()) throw fetch_foreign_error();
  return result;
}

using CompletedCall = void (*)(PyObject* handler, CommandBuffer& command_buffer);

// A completed handler that calls `handler(command_buffer)` in Python.
inline std::function<void(CommandBuffer&)> completed_handler(PyObject* handler, CompletedCall call) {
  std::shared_ptr<void> held = hold(handler);
  return [held, call](CommandBuffer& command_buffer) {
    if (finalizing().load()) return;
    Gil gil;
    call(static_cast<PyObject*>(held.get()), command_buffer);
  };
}

// The runtime's interrupt check (mpsx/command_buffer.h): on Python's main
// thread, runs the signal handlers of signals that arrived (Ctrl-C's raises
// KeyboardInterrupt) and throws what they raise. Elsewhere Python runs no
// handlers, so the wait goes on without taking the GIL.
inline void check_signals() {
  if (finalizing().load() || PyThread_get_thread_ident() != main_thread().load(std::memory_order_relaxed)) return;
  Gil gil;
  if (PyErr_CheckSignals() < 0) throw fetch_foreign_error();
}

// Sets the thread check_signals runs handlers on, and installs it.
inline void install_interrupt_check(unsigned long main) {
  main_thread().store(main);
  set_interrupt_check(check_signals);
}

// CommandQueue::wait_until_all_idle for at most `seconds`.
inline bool wait_until_all_idle(double seconds) {
  return CommandQueue::wait_until_all_idle(std::chrono::milliseconds(static_cast<long long>(seconds * 1000)));
}

// Once the exit gave up on command buffers still running (finalizing set):
// the process is to end at exit() with its status, before the destructors of
// the libraries whose code the queues' threads still run. False while a
// runtime thread is in Python, which the interpreter cannot end under it,
// and where the C library cannot pass exit()'s status to a handler (macOS has
// no on_exit): the caller then ends the process at once.
inline bool end_at_exit() {
#if defined(__GLIBC__)
  if (python_calls().load() > 0) return false;
  on_exit([](int status, void*) {
    std::fflush(nullptr);
    _exit(status);
  }, nullptr);
  return true;
#else
  return false;
#endif
}

// Whether the runtime gave up waiting for a thread that may still run library
// code (mpsx/device.h): the exit then ends the process before the libraries'
// destructors, which would run under it.
inline bool threads_abandoned() { return detail::abandoned_threads.load() > 0; }

}  // namespace mpsx::python

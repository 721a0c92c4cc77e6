// The binding's MPI for the cpu backend's collectives: a Python all-reduce
// (mpi4py's), called from the queue's worker thread with the GIL.
#pragma once

#include <Python.h>

#include <functional>
#include <memory>

#include "_callbacks.h"
#include "mpsx/distributed.h"

namespace mpsx::python {

// call(function, data, count, mean) runs function over the values; it
// returns -1 with a Python exception set when that raised.
using HostAllReduceCall = int (*)(PyObject* function, float* data, size_t count, int mean);

inline std::function<void(float*, size_t, ReduceOperation)> host_all_reduce(PyObject* function,
                                                                            HostAllReduceCall call) {
  std::shared_ptr<void> held = hold(function);
  return [held, call](float* data, size_t count, ReduceOperation operation) {
    if (finalizing().load()) fail<DistributedError>("the interpreter is exiting: no all-reduce");
    Gil gil;
    if (call(static_cast<PyObject*>(held.get()), data, count, operation == ReduceOperation::Mean) < 0)
      throw fetch_foreign_error();
  };
}

}  // namespace mpsx::python

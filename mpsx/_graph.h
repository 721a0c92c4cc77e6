// training_graph with a Python node handler. Compiled into the extension
// modules only.
#pragma once

#include <Python.h>

#include <memory>
#include <vector>

#include "mpsx/graph.h"
#include "_callbacks.h"

namespace mpsx::python {

// The Python object of a native node (a new reference), or NULL with a
// Python exception set.
using WrapFilterNode = PyObject* (*)(const std::shared_ptr<FilterNode>&);
using WrapImageNode = PyObject* (*)(const std::shared_ptr<ImageNode>&);

// Calls handler(gradient, inference, inference_source, gradient_source)
// for each new node; an exception it raises comes back as itself.
inline std::vector<std::shared_ptr<FilterNode>> python_training_graph(const std::shared_ptr<FilterNode>& last,
                                                                      std::shared_ptr<ImageNode> source_gradient,
                                                                      PyObject* handler, WrapFilterNode wrap_filter,
                                                                      WrapImageNode wrap_image) {
  TrainingNodeHandler call;
  if (handler != Py_None) {
    call = [handler, wrap_filter, wrap_image](const std::shared_ptr<FilterNode>& gradient,
                                              const std::shared_ptr<FilterNode>& inference,
                                              const std::shared_ptr<ImageNode>& inference_source,
                                              const std::shared_ptr<ImageNode>& gradient_source) {
      PyObject* arguments[4] = {wrap_filter(gradient), wrap_filter(inference), wrap_image(inference_source),
                                wrap_image(gradient_source)};
      PyObject* result = nullptr;
      if (arguments[0] && arguments[1] && arguments[2] && arguments[3])
        result = PyObject_CallFunctionObjArgs(handler, arguments[0], arguments[1], arguments[2], arguments[3], nullptr);
      for (PyObject* a : arguments) Py_XDECREF(a);
      if (!result) throw fetch_foreign_error();
      Py_DECREF(result);
    };
  }
  return training_graph(last, std::move(source_gradient), call);
}

}  // namespace mpsx::python

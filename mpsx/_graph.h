// training_graph with a Python node handler, and the loss nodes' Python
// callback. Compiled into the extension modules only.
#pragma once

#include <Python.h>

#include <memory>
#include <vector>

#include "mpsx/graph.h"
#include "mpsx/graph/loss.h"
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

using WrapLossImage = PyObject* (*)(const std::shared_ptr<mpsx::Image>&);
// An MPSNNLossCallback in Python: an object with
// scalar_weight_for_source_image(source_image, destination_image) -> float.
class PythonLossCallback final : public mpsx::LossCallback {
 public:
  PythonLossCallback(PyObject* object, WrapLossImage wrap) : object_(hold(object)), wrap_(wrap) {}
  float scalar_weight(const std::shared_ptr<mpsx::Image>& source,
                      const std::shared_ptr<mpsx::Image>& destination) override {
    Gil gil;
    PyObject* s = wrap_(source);
    PyObject* d = s ? wrap_(destination) : nullptr;
    PyObject* result = nullptr;
    if (s && d)
      result = PyObject_CallMethod(object(), "scalar_weight_for_source_image", "OO", s, d);
    Py_XDECREF(s);
    Py_XDECREF(d);
    if (!result) throw fetch_foreign_error();
    double value = PyFloat_AsDouble(result);
    Py_DECREF(result);
    if (value == -1.0 && PyErr_Occurred()) throw fetch_foreign_error();
    return static_cast<float>(value);
  }
  PyObject* object() const { return static_cast<PyObject*>(object_.get()); }

 private:
  std::shared_ptr<void> object_;
  WrapLossImage wrap_;
};
inline std::shared_ptr<mpsx::LossCallback> make_python_loss_callback(PyObject* object, WrapLossImage wrap) {
  return std::make_shared<PythonLossCallback>(object, wrap);
}
// The Python object of a callback (borrowed), or None.
inline PyObject* python_loss_callback_object(const std::shared_ptr<mpsx::LossCallback>& callback) {
  auto* python = dynamic_cast<PythonLossCallback*>(callback.get());
  return python ? python->object() : Py_None;
}

}  // namespace mpsx::python

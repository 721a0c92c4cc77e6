// training_graph with a Python node handler, the Python property callbacks
// of the loss and gram matrix nodes, and the scale nodes' transform providers. Compiled into the extension
// modules only.
#pragma once

#include <Python.h>

#include <memory>
#include <vector>

#include "mpsx/graph.h"
#include "mpsx/graph/gram_matrix_calculation.h"
#include "mpsx/graph/loss.h"
#include "mpsx/graph/scale.h"
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

// object.method(source, destination) as a float: what a property callback
// returns. Its exception comes back as itself; a result that is not a real
// number is a TypeError naming the method.
inline float call_image_callback(PyObject* object, const char* method, WrapLossImage wrap,
                                 const std::shared_ptr<mpsx::Image>& source,
                                 const std::shared_ptr<mpsx::Image>& destination) {
  check_not_capturing("a Python property callback");
  Gil gil;
  PyObject* s = wrap(source);
  PyObject* d = s ? wrap(destination) : nullptr;
  PyObject* result = nullptr;
  if (s && d) result = PyObject_CallMethod(object, method, "OO", s, d);
  Py_XDECREF(s);
  Py_XDECREF(d);
  if (!result) throw fetch_foreign_error();
  double value = -1.0;
  if (PyNumber_Check(result))
    value = PyFloat_AsDouble(result);
  else
    PyErr_Format(PyExc_TypeError, "%s() must return a float, given %s", method, Py_TYPE(result)->tp_name);
  Py_DECREF(result);
  if (value == -1.0 && PyErr_Occurred()) throw fetch_foreign_error();
  return static_cast<float>(value);
}

// A property callback in Python: `Interface`'s one method calls `method` of
// the object.
template <class Interface>
class PythonImageCallback : public Interface {
 public:
  PythonImageCallback(PyObject* object, const char* method, WrapLossImage wrap)
      : object_(hold(object)), method_(method), wrap_(wrap) {}
  PyObject* object() const { return static_cast<PyObject*>(object_.get()); }

 protected:
  float call(const std::shared_ptr<mpsx::Image>& source, const std::shared_ptr<mpsx::Image>& destination) const {
    return call_image_callback(object(), method_, wrap_, source, destination);
  }

 private:
  std::shared_ptr<void> object_;
  const char* method_;
  WrapLossImage wrap_;
};

// The Python object of a callback (borrowed), or None.
template <class Interface>
PyObject* python_callback_object(const std::shared_ptr<Interface>& callback) {
  auto* python = dynamic_cast<PythonImageCallback<Interface>*>(callback.get());
  return python ? python->object() : Py_None;
}

// An MPSNNLossCallback in Python: an object with
// scalar_weight_for_source_image(source_image, destination_image) -> float.
class PythonLossCallback final : public PythonImageCallback<mpsx::LossCallback> {
 public:
  PythonLossCallback(PyObject* object, WrapLossImage wrap)
      : PythonImageCallback(object, "scalar_weight_for_source_image", wrap) {}
  float scalar_weight(const std::shared_ptr<mpsx::Image>& source,
                      const std::shared_ptr<mpsx::Image>& destination) override {
    return call(source, destination);
  }
};
inline std::shared_ptr<mpsx::LossCallback> make_python_loss_callback(PyObject* object, WrapLossImage wrap) {
  return std::make_shared<PythonLossCallback>(object, wrap);
}
inline PyObject* python_loss_callback_object(const std::shared_ptr<mpsx::LossCallback>& callback) {
  return python_callback_object(callback);
}

// An MPSNNGramMatrixCallback in Python: an object with
// alpha_for_source_image(source_image, destination_image) -> float.
class PythonGramMatrixCallback final : public PythonImageCallback<mpsx::GramMatrixCallback> {
 public:
  PythonGramMatrixCallback(PyObject* object, WrapLossImage wrap)
      : PythonImageCallback(object, "alpha_for_source_image", wrap) {}
  float alpha(const std::shared_ptr<mpsx::Image>& source, const std::shared_ptr<mpsx::Image>& destination) override {
    return call(source, destination);
  }
};
inline std::shared_ptr<mpsx::GramMatrixCallback> make_python_gram_matrix_callback(PyObject* object,
                                                                                    WrapLossImage wrap) {
  return std::make_shared<PythonGramMatrixCallback>(object, wrap);
}
inline PyObject* python_gram_matrix_callback_object(const std::shared_ptr<mpsx::GramMatrixCallback>& callback) {
  return python_callback_object(callback);
}

// An MPSImageTransformProvider in Python: an object with
// transform_for_source_image(image, handle) -> (scale_x, scale_y,
// translate_x, translate_y), an mpsx.ScaleTransform or a tuple of four real
// numbers. Its exception comes back as itself; another result is a
// TypeError naming the method.
class PythonImageTransformProvider final : public mpsx::ImageTransformProvider {
 public:
  PythonImageTransformProvider(PyObject* object, WrapLossImage wrap) : object_(hold(object)), wrap_(wrap) {}
  PyObject* object() const { return static_cast<PyObject*>(object_.get()); }
  mpsx::ScaleTransform transform(const std::shared_ptr<mpsx::Image>& image, const NodeHandle& handle) override {
    check_not_capturing("a Python transform provider");
    Gil gil;
    PyObject* i = wrap_(image);
    PyObject* result = nullptr;
    if (i)
      result = PyObject_CallMethod(object(), "transform_for_source_image", "OO", i,
                                   handle ? static_cast<PyObject*>(handle.get()) : Py_None);
    Py_XDECREF(i);
    if (!result) throw fetch_foreign_error();
    double values[4] = {0, 0, 0, 0};
    bool ok = PyTuple_Check(result) && PyTuple_GET_SIZE(result) == 4;
    for (Py_ssize_t k = 0; ok && k < 4; ++k) {
      PyObject* item = PyTuple_GET_ITEM(result, k);
      ok = PyNumber_Check(item) && !PyBool_Check(item);
      if (ok) values[k] = PyFloat_AsDouble(item);
      if (ok && values[k] == -1.0 && PyErr_Occurred()) {
        Py_DECREF(result);
        throw fetch_foreign_error();
      }
    }
    if (!ok)
      PyErr_Format(PyExc_TypeError,
                   "transform_for_source_image() must return an mpsx.ScaleTransform (scale_x, scale_y, "
                   "translate_x, translate_y) of real numbers, given %R",
                   result);
    Py_DECREF(result);
    if (!ok) throw fetch_foreign_error();
    return mpsx::ScaleTransform{values[0], values[1], values[2], values[3]};
  }

 private:
  std::shared_ptr<void> object_;
  WrapLossImage wrap_;
};
inline std::shared_ptr<mpsx::ImageTransformProvider> make_python_transform_provider(PyObject* object,
                                                                                     WrapLossImage wrap) {
  return std::make_shared<PythonImageTransformProvider>(object, wrap);
}
// The Python object of a provider (borrowed), or None.
inline PyObject* python_transform_provider_object(const std::shared_ptr<mpsx::ImageTransformProvider>& provider) {
  auto* python = dynamic_cast<PythonImageTransformProvider*>(provider.get());
  return python ? python->object() : Py_None;
}

}  // namespace mpsx::python

// Python objects implementing the MPS data source protocols, seen by the
// runtime as native data sources. The calls into Python are Cython functions
// (mpsx/kernels/*.pxi) that return with a Python error set on failure.
#pragma once

#include <Python.h>

#include <memory>
#include <string>

#include "_callbacks.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx::python {

// MPSCNNConvolutionDataSource calls, filled in when mpsx._kernels is imported.
struct ConvolutionDataSourceCalls {
  bool (*load)(PyObject* source) = nullptr;
  void (*purge)(PyObject* source) = nullptr;
  ConvolutionDescriptor (*descriptor)(PyObject* source) = nullptr;
  DataType (*data_type)(PyObject* source, const char* attribute) = nullptr;
  HostArray (*array)(PyObject* source, const char* method, DataType type) = nullptr;
  std::string (*label)(PyObject* source) = nullptr;
  WeightsQuantization (*weights_quantization_type)(PyObject* source) = nullptr;
  bool (*has)(PyObject* source, const char* attribute) = nullptr;
  bool (*update)(PyObject* source, std::shared_ptr<ConvolutionGradientState> gradient_state,
                 std::shared_ptr<ConvolutionWeightsAndBiasesState> source_state) = nullptr;
  std::shared_ptr<ConvolutionWeightsAndBiasesState> (*update_on_command_buffer)(
      PyObject* source, CommandBuffer& command_buffer, std::shared_ptr<ConvolutionGradientState> gradient_state,
      std::shared_ptr<ConvolutionWeightsAndBiasesState> source_state) = nullptr;
};

inline ConvolutionDataSourceCalls& convolution_data_source_calls() {
  static ConvolutionDataSourceCalls calls;
  return calls;
}

class PythonConvolutionDataSource final : public ConvolutionDataSource {
  // Defined first: the overrides below deduce their results from it.
  static ConvolutionDataSourceCalls& calls() { return convolution_data_source_calls(); }

  template <class F>
  auto call(F&& f) {
    Gil gil;
    auto result = f();
    if (PyErr_Occurred()) throw fetch_foreign_error();
    return result;
  }

 public:
  explicit PythonConvolutionDataSource(PyObject* source) : source_(hold(source)) {}
  PyObject* object() const { return static_cast<PyObject*>(source_.get()); }

  bool load() override { return call([&] { return calls().load(object()); }); }
  void purge() override {
    call([&] {
      calls().purge(object());
      return true;
    });
  }
  ConvolutionDescriptor descriptor() override { return call([&] { return calls().descriptor(object()); }); }
  DataType data_type() override { return call([&] { return calls().data_type(object(), "data_type"); }); }
  HostArray weights() override { return call([&] { return calls().array(object(), "weights", data_type()); }); }
  HostArray bias_terms() override {
    return call([&] { return calls().array(object(), "bias_terms", DataType::Float32); });
  }
  std::string label() override { return call([&] { return calls().label(object()); }); }
  DataType kernel_weights_data_type() override {
    return call([&] { return calls().data_type(object(), "kernel_weights_data_type"); });
  }
  WeightsQuantization weights_quantization_type() override {
    return call([&] { return calls().weights_quantization_type(object()); });
  }
  HostArray lookup_table_for_uint8_kernel() override {
    return call([&] { return calls().array(object(), "lookup_table_for_uint8_kernel", DataType::Float32); });
  }
  HostArray ranges_for_uint8_kernel() override {
    return call([&] { return calls().array(object(), "ranges_for_uint8_kernel", DataType::Float32); });
  }
  bool supports_update() override { return call([&] { return calls().has(object(), "update"); }); }
  bool update(const std::shared_ptr<ConvolutionGradientState>& gradient_state,
              const std::shared_ptr<ConvolutionWeightsAndBiasesState>& source_state) override {
    return call([&] { return calls().update(object(), gradient_state, source_state); });
  }
  bool supports_update_on_command_buffer() override {
    return call([&] { return calls().has(object(), "update_on_command_buffer"); });
  }
  std::shared_ptr<ConvolutionWeightsAndBiasesState> update_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<ConvolutionGradientState>& gradient_state,
      const std::shared_ptr<ConvolutionWeightsAndBiasesState>& source_state) override {
    return call([&] { return calls().update_on_command_buffer(object(), command_buffer, gradient_state, source_state); });
  }

 private:
  std::shared_ptr<void> source_;
};

// The Python object behind a data source, or nullptr for a native one.
inline PyObject* python_object_of(const std::shared_ptr<ConvolutionDataSource>& source) {
  auto* python = dynamic_cast<PythonConvolutionDataSource*>(source.get());
  return python ? python->object() : nullptr;
}

}  // namespace mpsx::python

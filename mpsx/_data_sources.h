// Python objects implementing the MPS data source protocols, seen by the
// runtime as native data sources. The calls into Python are Cython functions
// (mpsx/kernels/*.pxi) that return with a Python error set on failure.
#pragma once

#include <Python.h>

#include <memory>
#include <string>

#include "_callbacks.h"
#include "mpsx/kernels/batch_normalization.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx::python {

// The Python object behind a data source, and the calls to it that every
// data source protocol has (load and purge).
class PythonDataSourceObject {
 public:
  PyObject* object() const { return static_cast<PyObject*>(source_.get()); }

 protected:
  explicit PythonDataSourceObject(PyObject* source) : source_(hold(source)) {}

  bool load_with(bool (*const& load)(PyObject*)) const { return call_python([&] { return load(object()); }); }
  void purge_with(void (*const& purge)(PyObject*)) const {
    call_python([&] {
      purge(object());
      return true;
    });
  }

 private:
  std::shared_ptr<void> source_;
};

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

class PythonConvolutionDataSource final : public ConvolutionDataSource, public PythonDataSourceObject {
  // Defined first: the overrides below deduce their results from it.
  static ConvolutionDataSourceCalls& calls() { return convolution_data_source_calls(); }

 public:
  explicit PythonConvolutionDataSource(PyObject* source) : PythonDataSourceObject(source) {}

  bool load() override { return load_with(calls().load); }
  void purge() override { purge_with(calls().purge); }
  ConvolutionDescriptor descriptor() override { return call_python([&] { return calls().descriptor(object()); }); }
  DataType data_type() override { return call_python([&] { return calls().data_type(object(), "data_type"); }); }
  HostArray weights() override { return call_python([&] { return calls().array(object(), "weights", data_type()); }); }
  HostArray bias_terms() override {
    return call_python([&] { return calls().array(object(), "bias_terms", DataType::Float32); });
  }
  std::string label() override { return call_python([&] { return calls().label(object()); }); }
  DataType kernel_weights_data_type() override {
    return call_python([&] { return calls().data_type(object(), "kernel_weights_data_type"); });
  }
  WeightsQuantization weights_quantization_type() override {
    return call_python([&] { return calls().weights_quantization_type(object()); });
  }
  HostArray lookup_table_for_uint8_kernel() override {
    return call_python([&] { return calls().array(object(), "lookup_table_for_uint8_kernel", DataType::Float32); });
  }
  HostArray ranges_for_uint8_kernel() override {
    return call_python([&] { return calls().array(object(), "ranges_for_uint8_kernel", DataType::Float32); });
  }
  bool supports_update() override {
    return call_python([&] { return calls().has(object(), "update_with_gradient_state"); });
  }
  bool update(const std::shared_ptr<ConvolutionGradientState>& gradient_state,
              const std::shared_ptr<ConvolutionWeightsAndBiasesState>& source_state) override {
    return call_python([&] { return calls().update(object(), gradient_state, source_state); });
  }
  bool supports_update_on_command_buffer() override {
    return call_python([&] { return calls().has(object(), "update_with_command_buffer"); });
  }
  std::shared_ptr<ConvolutionWeightsAndBiasesState> update_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<ConvolutionGradientState>& gradient_state,
      const std::shared_ptr<ConvolutionWeightsAndBiasesState>& source_state) override {
    return call_python([&] { return calls().update_on_command_buffer(object(), command_buffer, gradient_state, source_state); });
  }
};

// The Python object behind a data source, or nullptr for a native one.
inline PyObject* python_object_of(const std::shared_ptr<ConvolutionDataSource>& source) {
  auto* python = dynamic_cast<PythonConvolutionDataSource*>(source.get());
  return python ? python->object() : nullptr;
}

}  // namespace mpsx::python

// ---------------------------------------------------------------- batch normalization

namespace mpsx::python {

// MPSCNNBatchNormalizationDataSource calls, filled in when mpsx._kernels is imported.
struct BatchNormalizationDataSourceCalls {
  bool (*load)(PyObject* source) = nullptr;
  void (*purge)(PyObject* source) = nullptr;
  int64_t (*number_of_feature_channels)(PyObject* source) = nullptr;
  HostArray (*array)(PyObject* source, const char* method) = nullptr;
  float (*epsilon)(PyObject* source) = nullptr;
  std::string (*label)(PyObject* source) = nullptr;
  bool (*has)(PyObject* source, const char* attribute) = nullptr;
  // update_gamma_and_beta_with_batch_normalization_state or
  // update_mean_and_variance_with_batch_normalization_state.
  bool (*update)(PyObject* source, const char* method, std::shared_ptr<BatchNormalizationState> state) = nullptr;
  std::shared_ptr<NormalizationGammaAndBetaState> (*update_gamma_and_beta_on_command_buffer)(
      PyObject* source, CommandBuffer& command_buffer, std::shared_ptr<BatchNormalizationState> state) = nullptr;
  std::shared_ptr<NormalizationMeanAndVarianceState> (*update_mean_and_variance_on_command_buffer)(
      PyObject* source, CommandBuffer& command_buffer, std::shared_ptr<BatchNormalizationState> state) = nullptr;
};

inline BatchNormalizationDataSourceCalls& batch_normalization_data_source_calls() {
  static BatchNormalizationDataSourceCalls calls;
  return calls;
}

class PythonBatchNormalizationDataSource final : public BatchNormalizationDataSource, public PythonDataSourceObject {
  static BatchNormalizationDataSourceCalls& calls() { return batch_normalization_data_source_calls(); }

 public:
  explicit PythonBatchNormalizationDataSource(PyObject* source) : PythonDataSourceObject(source) {}

  bool load() override { return load_with(calls().load); }
  void purge() override { purge_with(calls().purge); }
  int64_t number_of_feature_channels() override {
    return call_python([&] { return calls().number_of_feature_channels(object()); });
  }
  HostArray gamma() override { return array("gamma"); }
  HostArray beta() override { return array("beta"); }
  HostArray mean() override { return array("mean"); }
  HostArray variance() override { return array("variance"); }
  float epsilon() override { return call_python([&] { return calls().epsilon(object()); }); }
  std::string label() override { return call_python([&] { return calls().label(object()); }); }

  bool supports_update_gamma_and_beta() override {
    return has("update_gamma_and_beta_with_batch_normalization_state");
  }
  bool update_gamma_and_beta(const std::shared_ptr<BatchNormalizationState>& state) override {
    return call_python(
        [&] { return calls().update(object(), "update_gamma_and_beta_with_batch_normalization_state", state); });
  }
  bool supports_update_mean_and_variance() override {
    return has("update_mean_and_variance_with_batch_normalization_state");
  }
  bool update_mean_and_variance(const std::shared_ptr<BatchNormalizationState>& state) override {
    return call_python(
        [&] { return calls().update(object(), "update_mean_and_variance_with_batch_normalization_state", state); });
  }
  bool supports_update_gamma_and_beta_on_command_buffer() override {
    return has("update_gamma_and_beta_with_command_buffer");
  }
  std::shared_ptr<NormalizationGammaAndBetaState> update_gamma_and_beta_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<BatchNormalizationState>& state) override {
    return call_python(
        [&] { return calls().update_gamma_and_beta_on_command_buffer(object(), command_buffer, state); });
  }
  bool supports_update_mean_and_variance_on_command_buffer() override {
    return has("update_mean_and_variance_with_command_buffer");
  }
  std::shared_ptr<NormalizationMeanAndVarianceState> update_mean_and_variance_on_command_buffer(
      CommandBuffer& command_buffer, const std::shared_ptr<BatchNormalizationState>& state) override {
    return call_python(
        [&] { return calls().update_mean_and_variance_on_command_buffer(object(), command_buffer, state); });
  }

 private:
  HostArray array(const char* method) { return call_python([&] { return calls().array(object(), method); }); }
  bool has(const char* attribute) { return call_python([&] { return calls().has(object(), attribute); }); }
};

}  // namespace mpsx::python

// ---------------------------------------------------------------- instance and group normalization

#include "mpsx/kernels/group_normalization.h"

namespace mpsx::python {

// MPSCNNInstanceNormalizationDataSource and MPSCNNGroupNormalizationDataSource
// calls, filled in when mpsx._kernels is imported. `instance` selects the
// protocol's method names.
struct GroupNormalizationDataSourceCalls {
  int64_t (*integer)(PyObject* source, const char* attribute) = nullptr;
  // update_gamma_and_beta_with_*_state_batch: the states as a list.
  bool (*update)(PyObject* source, bool instance, const GroupNormalizationDataSource::States& states) = nullptr;
  std::shared_ptr<NormalizationGammaAndBetaState> (*update_on_command_buffer)(
      PyObject* source, bool instance, CommandBuffer& command_buffer,
      const GroupNormalizationDataSource::States& states) = nullptr;
};

inline GroupNormalizationDataSourceCalls& group_normalization_data_source_calls() {
  static GroupNormalizationDataSourceCalls calls;
  return calls;
}

class PythonGroupNormalizationDataSource final : public GroupNormalizationDataSource, public PythonDataSourceObject {
  static BatchNormalizationDataSourceCalls& common() { return batch_normalization_data_source_calls(); }
  static GroupNormalizationDataSourceCalls& calls() { return group_normalization_data_source_calls(); }

 public:
  PythonGroupNormalizationDataSource(PyObject* source, bool instance)
      : PythonDataSourceObject(source), instance_(instance) {}

  bool load() override { return load_with(common().load); }
  void purge() override { purge_with(common().purge); }
  int64_t number_of_feature_channels() override {
    return call_python([&] { return calls().integer(object(), "number_of_feature_channels"); });
  }
  int64_t number_of_groups() override {
    return call_python([&] { return calls().integer(object(), "number_of_groups"); });
  }
  HostArray gamma() override { return call_python([&] { return common().array(object(), "gamma"); }); }
  HostArray beta() override { return call_python([&] { return common().array(object(), "beta"); }); }
  float epsilon() override { return call_python([&] { return common().epsilon(object()); }); }
  std::string label() override { return call_python([&] { return common().label(object()); }); }

  bool supports_update_gamma_and_beta() override {
    return has(instance_ ? "update_gamma_and_beta_with_instance_normalization_state_batch"
                         : "update_gamma_and_beta_with_group_normalization_state_batch");
  }
  bool update_gamma_and_beta(const States& states) override {
    return call_python([&] { return calls().update(object(), instance_, states); });
  }
  bool supports_update_gamma_and_beta_on_command_buffer() override {
    return has("update_gamma_and_beta_with_command_buffer");
  }
  std::shared_ptr<NormalizationGammaAndBetaState> update_gamma_and_beta_on_command_buffer(
      CommandBuffer& command_buffer, const States& states) override {
    return call_python([&] { return calls().update_on_command_buffer(object(), instance_, command_buffer, states); });
  }

 private:
  bool has(const char* attribute) { return call_python([&] { return common().has(object(), attribute); }); }

  bool instance_;
};

}  // namespace mpsx::python

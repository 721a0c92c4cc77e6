# cdef extern declarations of native/include/mpsx/kernels/batch_normalization.h
from mpsx.includes.kernel cimport *
from mpsx.includes.buffer cimport CBuffer
from mpsx.includes.data_source cimport HostArray
from mpsx.includes.kernels.neuron cimport NeuronDescriptor
from mpsx.includes.kernels.normalization cimport CNormalizationGammaAndBetaState, CNormalizationMeanAndVarianceState
from mpsx.includes.kernels.optimizer cimport CKeptOptimizerVectors, CNNOptimizer
from mpsx.includes.state cimport CGradientState

cdef extern from "mpsx/kernels/batch_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CBatchNormalizationDataSource "mpsx::BatchNormalizationDataSource":
        pass

    cdef cppclass CBatchNormalizationWeights "mpsx::BatchNormalizationWeights"(CBatchNormalizationDataSource):
        CBatchNormalizationWeights(vector[float] gamma, vector[float] beta, vector[float] mean,
                                   vector[float] variance, float epsilon, float momentum,
                                   string label, shared_ptr[CNNOptimizer] optimizer) except +raise_py_error
        int64_t number_of_feature_channels()
        HostArray gamma() except +raise_py_error
        HostArray beta() except +raise_py_error
        HostArray mean() except +raise_py_error
        HostArray variance() except +raise_py_error
        float epsilon()
        float momentum()
        string label()
        void set_gamma_and_beta(vector[float] gamma, vector[float] beta) except +raise_py_error
        void set_mean_and_variance(vector[float] mean, vector[float] variance) except +raise_py_error
        CKeptOptimizerVectors& optimizer_vectors()
        shared_ptr[CNormalizationMeanAndVarianceState] update_mean_and_variance_on_command_buffer(
            CCommandBuffer& command_buffer, const shared_ptr[CBatchNormalizationState]& state) except +raise_py_error
        shared_ptr[CNormalizationGammaAndBetaState] update_gamma_and_beta_on_command_buffer(
            CCommandBuffer& command_buffer, const shared_ptr[CBatchNormalizationState]& state) except +raise_py_error

    cdef cppclass CBatchNormalizationState "mpsx::BatchNormalizationState"(CGradientState):
        const shared_ptr[const CCNNBatchNormalization]& batch_normalization()
        int64_t channels()
        const shared_ptr[CBuffer]& gamma()
        const shared_ptr[CBuffer]& beta()
        const shared_ptr[CBuffer]& mean()
        const shared_ptr[CBuffer]& variance()
        const shared_ptr[CBuffer]& gradient_for_gamma()
        const shared_ptr[CBuffer]& gradient_for_beta()
        void reset() except +raise_py_error

    cdef cppclass CCNNBatchNormalization "mpsx::CNNBatchNormalization"(CUnaryKernel):
        CCNNBatchNormalization(shared_ptr[CDevice] device, shared_ptr[CBatchNormalizationDataSource] data_source,
                               NeuronDescriptor fused_neuron) except +raise_py_error
        int64_t number_of_feature_channels()
        float epsilon
        const NeuronDescriptor& fused_neuron()
        void reload_gamma_and_beta_from_data_source() except +raise_py_error
        void reload_mean_and_variance_from_data_source() except +raise_py_error
        void reload_data_source(shared_ptr[CBatchNormalizationDataSource] data_source) except +raise_py_error
        void reload_gamma_and_beta(CCommandBuffer& command_buffer,
                                   const CNormalizationGammaAndBetaState& state) except +raise_py_error
        void reload_mean_and_variance(CCommandBuffer& command_buffer,
                                      const CNormalizationMeanAndVarianceState& state) except +raise_py_error
        void encode_gamma_and_beta_update(CCommandBuffer& command_buffer,
                                          const shared_ptr[CBatchNormalizationState]& state) except +raise_py_error
        void encode_mean_and_variance_update(CCommandBuffer& command_buffer,
                                             const shared_ptr[CBatchNormalizationState]& state) except +raise_py_error

    cdef cppclass CCNNBatchNormalizationStatistics "mpsx::CNNBatchNormalizationStatistics"(CKernel):
        CCNNBatchNormalizationStatistics(shared_ptr[CDevice] device) except +raise_py_error
        void encode_batch(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source,
                          const shared_ptr[CState]& state) except +raise_py_error

    cdef cppclass CBatchNormalizationGradientKernel "mpsx::BatchNormalizationGradientKernel"(CGradientKernel):
        const NeuronDescriptor& fused_neuron()

    cdef cppclass CCNNBatchNormalizationStatisticsGradient "mpsx::CNNBatchNormalizationStatisticsGradient"(
            CBatchNormalizationGradientKernel):
        CCNNBatchNormalizationStatisticsGradient(shared_ptr[CDevice] device,
                                                 NeuronDescriptor fused_neuron) except +raise_py_error
        void encode_batch(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source_gradient,
                          const shared_ptr[CImage]& source_image,
                          const shared_ptr[CState]& state) except +raise_py_error

    cdef cppclass CCNNBatchNormalizationGradient "mpsx::CNNBatchNormalizationGradient"(
            CBatchNormalizationGradientKernel):
        CCNNBatchNormalizationGradient(shared_ptr[CDevice] device, NeuronDescriptor fused_neuron) except +raise_py_error

cdef extern from "_data_sources.h" namespace "mpsx::python":
    cdef cppclass BatchNormalizationDataSourceCalls:
        bool (*load)(object) except *
        void (*purge)(object) except *
        int64_t (*number_of_feature_channels)(object) except *
        HostArray (*array)(object, const char*) except *
        float (*epsilon)(object) except *
        string (*label)(object) except *
        bool (*has)(object, const char*) except *
        bool (*update)(object, const char*, shared_ptr[CBatchNormalizationState]) except *
        shared_ptr[CNormalizationGammaAndBetaState] (*update_gamma_and_beta_on_command_buffer)(
            object, CCommandBuffer&, shared_ptr[CBatchNormalizationState]) except *
        shared_ptr[CNormalizationMeanAndVarianceState] (*update_mean_and_variance_on_command_buffer)(
            object, CCommandBuffer&, shared_ptr[CBatchNormalizationState]) except *

    BatchNormalizationDataSourceCalls& batch_normalization_data_source_calls()

    cdef cppclass CPythonBatchNormalizationDataSource "mpsx::python::PythonBatchNormalizationDataSource"(
            CBatchNormalizationDataSource):
        CPythonBatchNormalizationDataSource(PyObject* source)


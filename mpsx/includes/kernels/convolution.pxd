# cdef extern declarations of native/include/mpsx/kernels/convolution.h
from mpsx.includes.kernel cimport *
from mpsx.includes.buffer cimport CBuffer
from mpsx.includes.data_source cimport HostArray
from mpsx.includes.kernels.neuron cimport NeuronDescriptor
from mpsx.includes.kernels.optimizer cimport CKeptOptimizerVectors, CNNOptimizer
from mpsx.includes.state cimport CGradientState

cdef extern from "mpsx/kernels/convolution.h" namespace "mpsx" nogil:
    cdef cppclass ConvolutionDescriptor "mpsx::ConvolutionDescriptor":
        int64_t kernel_width, kernel_height, input_feature_channels, output_feature_channels
        int64_t stride_x, stride_y, dilation_x, dilation_y, groups
        bint depthwise
        int64_t sub_pixel_scale_factor
        NeuronDescriptor fused_neuron
        bint batch_normalization
        vector[float] batch_normalization_mean, batch_normalization_variance, batch_normalization_gamma
        vector[float] batch_normalization_beta
        float batch_normalization_epsilon
        void validate() except +raise_py_error

    cdef enum class WeightsQuantization "mpsx::WeightsQuantization"(uint32_t):
        pass

    cdef cppclass CConvolutionDataSource "mpsx::ConvolutionDataSource":
        pass

    cdef cppclass CConvolutionWeights "mpsx::ConvolutionWeights"(CConvolutionDataSource):
        CConvolutionWeights(ConvolutionDescriptor descriptor, vector[float] weights,
                            const vector[int64_t]& weights_shape, optional[vector[float]] biases, string label,
                            shared_ptr[CNNOptimizer] optimizer) except +raise_py_error
        ConvolutionDescriptor descriptor()
        string label()
        void set_weights_and_biases(vector[float] weights, const vector[int64_t]& weights_shape,
                                    optional[vector[float]] biases) except +raise_py_error
        const vector[float]& weight_values() except +raise_py_error
        const vector[float]& bias_values() except +raise_py_error
        CKeptOptimizerVectors& optimizer_vectors() except +raise_py_error

    cdef cppclass CConvolutionWeightsAndBiasesState "mpsx::ConvolutionWeightsAndBiasesState"(CState):
        CConvolutionWeightsAndBiasesState(shared_ptr[CBuffer] weights, shared_ptr[CBuffer] biases,
                                          size_t weights_offset, size_t biases_offset) except +raise_py_error
        CConvolutionWeightsAndBiasesState(shared_ptr[CBuffer] weights, shared_ptr[CBuffer] biases,
                                          size_t weights_offset, size_t biases_offset,
                                          const ConvolutionDescriptor& descriptor) except +raise_py_error
        CConvolutionWeightsAndBiasesState(shared_ptr[CDevice] device,
                                          const ConvolutionDescriptor& descriptor) except +raise_py_error
        const shared_ptr[CBuffer]& weights()
        const shared_ptr[CBuffer]& biases()
        size_t weights_offset()
        size_t biases_offset()

    cdef cppclass CConvolutionGradientState "mpsx::ConvolutionGradientState"(CGradientState):
        const shared_ptr[const CCNNConvolution]& convolution()
        const shared_ptr[CBuffer]& gradient_for_weights()
        const shared_ptr[CBuffer]& gradient_for_biases()
        shared_ptr[CBuffer] weights, biases

    cdef enum class AccumulatorPrecision "mpsx::AccumulatorPrecision"(uint32_t):
        Half "mpsx::AccumulatorPrecision::Half"
        Float "mpsx::AccumulatorPrecision::Float"

    cdef cppclass CCNNConvolution "mpsx::CNNConvolution"(CUnaryKernel):
        CCNNConvolution(shared_ptr[CDevice] device, shared_ptr[CConvolutionDataSource] data_source) except +raise_py_error
        const ConvolutionDescriptor& descriptor()
        const shared_ptr[CConvolutionDataSource]& data_source()
        AccumulatorPrecision accumulator_precision
        void reload_weights_and_biases_from_data_source() except +raise_py_error
        void reload_weights_and_biases(CCommandBuffer& command_buffer,
                                       const CConvolutionWeightsAndBiasesState& state) except +raise_py_error
        shared_ptr[CConvolutionWeightsAndBiasesState] export_weights_and_biases(
            CCommandBuffer& command_buffer) except +raise_py_error
        void encode_weights_and_bias_update(CCommandBuffer& command_buffer,
                                            const shared_ptr[CConvolutionGradientState]& gradient_state) except +raise_py_error

    cdef cppclass CCNNFullyConnected "mpsx::CNNFullyConnected"(CCNNConvolution):
        CCNNFullyConnected(shared_ptr[CDevice] device,
                           shared_ptr[CConvolutionDataSource] data_source) except +raise_py_error

    cdef enum class ConvolutionGradientOption "mpsx::ConvolutionGradientOption"(uint32_t):
        pass

    cdef cppclass CCNNConvolutionGradient "mpsx::CNNConvolutionGradient"(CGradientKernel):
        CCNNConvolutionGradient(shared_ptr[CDevice] device,
                                shared_ptr[CConvolutionDataSource] data_source) except +raise_py_error
        const ConvolutionDescriptor& descriptor()
        ConvolutionGradientOption gradient_option

    cdef cppclass CCNNFullyConnectedGradient "mpsx::CNNFullyConnectedGradient"(CCNNConvolutionGradient):
        CCNNFullyConnectedGradient(shared_ptr[CDevice] device,
                                   shared_ptr[CConvolutionDataSource] data_source) except +raise_py_error

cdef extern from "_data_sources.h" namespace "mpsx::python":
    cdef cppclass ConvolutionDataSourceCalls:
        bool (*load)(object) except *
        void (*purge)(object) except *
        ConvolutionDescriptor (*descriptor)(object) except *
        DataType (*data_type)(object, const char*) except *
        HostArray (*array)(object, const char*, DataType) except *
        string (*label)(object) except *
        WeightsQuantization (*weights_quantization_type)(object) except *
        bool (*has)(object, const char*) except *
        bool (*update)(object, shared_ptr[CConvolutionGradientState],
                       shared_ptr[CConvolutionWeightsAndBiasesState]) except *
        shared_ptr[CConvolutionWeightsAndBiasesState] (*update_on_command_buffer)(
            object, CCommandBuffer&, shared_ptr[CConvolutionGradientState],
            shared_ptr[CConvolutionWeightsAndBiasesState]) except *

    ConvolutionDataSourceCalls& convolution_data_source_calls()

    cdef cppclass CPythonConvolutionDataSource "mpsx::python::PythonConvolutionDataSource"(CConvolutionDataSource):
        CPythonConvolutionDataSource(PyObject* source)

    PyObject* python_object_of(const shared_ptr[CConvolutionDataSource]& source)

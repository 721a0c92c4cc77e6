# cdef extern declarations of native/include/mpsx/kernels/group_normalization.h
# and instance_normalization.h (one native model serves both families).
from mpsx.includes.kernel cimport *
from mpsx.includes.buffer cimport CBuffer
from mpsx.includes.data_source cimport HostArray
from mpsx.includes.kernels.normalization cimport CNormalizationGammaAndBetaState
from mpsx.includes.kernels.optimizer cimport CKeptOptimizerVectors, CNNOptimizer
from mpsx.includes.state cimport CGradientState

cdef extern from "mpsx/kernels/group_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CGroupNormalizationDataSource "mpsx::GroupNormalizationDataSource":
        pass

    cdef cppclass CGroupNormalizationWeights "mpsx::GroupNormalizationWeights"(CGroupNormalizationDataSource):
        CGroupNormalizationWeights(vector[float] gamma, vector[float] beta, int64_t groups, float epsilon,
                                   string label, shared_ptr[CNNOptimizer] optimizer) except +raise_py_error
        int64_t number_of_feature_channels()
        int64_t number_of_groups()
        void set_number_of_groups(int64_t groups) except +raise_py_error
        void set_gamma_and_beta(vector[float] gamma, vector[float] beta) except +raise_py_error
        CKeptOptimizerVectors& optimizer_vectors()
        HostArray gamma() except +raise_py_error
        HostArray beta() except +raise_py_error
        float epsilon()
        string label()
        shared_ptr[CNormalizationGammaAndBetaState] update_gamma_and_beta_on_command_buffer(
            CCommandBuffer& command_buffer,
            const vector[shared_ptr[CGroupNormalizationGradientState]]& states) except +raise_py_error

    cdef cppclass CGroupNormalizationGradientState "mpsx::GroupNormalizationGradientState"(CGradientState):
        const shared_ptr[const CGroupNormalizationKernel]& kernel()
        int64_t channels()
        const shared_ptr[CBuffer]& gamma()
        const shared_ptr[CBuffer]& beta()
        const shared_ptr[CBuffer]& gradient_for_gamma()
        const shared_ptr[CBuffer]& gradient_for_beta()

    cdef cppclass CGroupNormalizationKernel "mpsx::GroupNormalizationKernel"(CUnaryKernel):
        int64_t number_of_feature_channels()
        int64_t number_of_groups()
        float epsilon
        void reload_gamma_and_beta_from_data_source() except +raise_py_error
        void reload_data_source(shared_ptr[CGroupNormalizationDataSource] data_source) except +raise_py_error
        void reload_gamma_and_beta(CCommandBuffer& command_buffer,
                                   const CNormalizationGammaAndBetaState& state) except +raise_py_error
        void encode_gamma_and_beta_update(CCommandBuffer& command_buffer,
                                          const shared_ptr[CGroupNormalizationGradientState]& state) except +raise_py_error

    cdef cppclass CCNNGroupNormalization "mpsx::CNNGroupNormalization"(CGroupNormalizationKernel):
        CCNNGroupNormalization(shared_ptr[CDevice] device,
                               shared_ptr[CGroupNormalizationDataSource] data_source) except +raise_py_error

    cdef cppclass CCNNGroupNormalizationGradient "mpsx::CNNGroupNormalizationGradient"(CGradientKernel):
        CCNNGroupNormalizationGradient(shared_ptr[CDevice] device) except +raise_py_error

cdef extern from "mpsx/kernels/instance_normalization.h" namespace "mpsx" nogil:
    cdef cppclass CCNNInstanceNormalization "mpsx::CNNInstanceNormalization"(CGroupNormalizationKernel):
        CCNNInstanceNormalization(shared_ptr[CDevice] device,
                                  shared_ptr[CGroupNormalizationDataSource] data_source) except +raise_py_error

    cdef cppclass CCNNInstanceNormalizationGradient "mpsx::CNNInstanceNormalizationGradient"(CGradientKernel):
        CCNNInstanceNormalizationGradient(shared_ptr[CDevice] device) except +raise_py_error

cdef extern from "_data_sources.h" namespace "mpsx::python":
    cdef cppclass GroupNormalizationDataSourceCalls:
        int64_t (*integer)(object, const char*) except *
        bool (*update)(object, bool, const vector[shared_ptr[CGroupNormalizationGradientState]]&) except *
        shared_ptr[CNormalizationGammaAndBetaState] (*update_on_command_buffer)(
            object, bool, CCommandBuffer&, const vector[shared_ptr[CGroupNormalizationGradientState]]&) except *

    GroupNormalizationDataSourceCalls& group_normalization_data_source_calls()

    cdef cppclass CPythonGroupNormalizationDataSource "mpsx::python::PythonGroupNormalizationDataSource"(
            CGroupNormalizationDataSource):
        CPythonGroupNormalizationDataSource(PyObject* source, bool instance)

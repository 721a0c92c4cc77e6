# cdef extern declarations of native/include/mpsx/kernels/normalization.h
from mpsx.includes.common cimport *
from mpsx.includes.buffer cimport CBuffer
from mpsx.includes.state cimport CState

cdef extern from "mpsx/kernels/normalization.h" namespace "mpsx" nogil:
    const float kNormalizationDefaultEpsilon
    float checked_normalization_epsilon(float value, const char* owner) except +raise_py_error

    cdef cppclass ResponseNormalizationParameters "mpsx::ResponseNormalizationParameters":
        float alpha, beta, delta

    cdef cppclass CResponseNormalizationSettings "mpsx::ResponseNormalizationSettings":
        float alpha()
        float beta()
        float delta()
        void set_alpha(float value) except +raise_py_error
        void set_beta(float value) except +raise_py_error
        void set_delta(float value) except +raise_py_error
        const ResponseNormalizationParameters& parameters()

    cdef cppclass CResponseNormalizationProperties "mpsx::ResponseNormalizationProperties"(
            CResponseNormalizationSettings):
        int64_t kernel_size()

    cdef cppclass CNormalizationGammaAndBetaState "mpsx::NormalizationGammaAndBetaState"(CState):
        CNormalizationGammaAndBetaState(shared_ptr[CBuffer] gamma, shared_ptr[CBuffer] beta) except +raise_py_error
        CNormalizationGammaAndBetaState(shared_ptr[CDevice] device, int64_t channels) except +raise_py_error
        const shared_ptr[CBuffer]& gamma()
        const shared_ptr[CBuffer]& beta()

    cdef cppclass CNormalizationMeanAndVarianceState "mpsx::NormalizationMeanAndVarianceState"(CState):
        CNormalizationMeanAndVarianceState(shared_ptr[CBuffer] mean, shared_ptr[CBuffer] variance) except +raise_py_error
        CNormalizationMeanAndVarianceState(shared_ptr[CDevice] device, int64_t channels) except +raise_py_error
        const shared_ptr[CBuffer]& mean()
        const shared_ptr[CBuffer]& variance()

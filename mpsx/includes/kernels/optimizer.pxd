# cdef extern declarations of native/include/mpsx/kernels/optimizer.h
from mpsx.includes.common cimport *
from mpsx.includes.buffer cimport CVector
from mpsx.includes.state cimport CState

cdef extern from "mpsx/kernels/optimizer.h" namespace "mpsx" nogil:
    cdef enum class RegularizationType "mpsx::RegularizationType"(uint32_t):
        pass

    cdef cppclass OptimizerDescriptor "mpsx::OptimizerDescriptor":
        float learning_rate
        float gradient_rescale
        bool apply_gradient_clipping
        float gradient_clip_max
        float gradient_clip_min
        float regularization_scale
        RegularizationType regularization_type
        void validate() except +raise_py_error
        bool operator==(const OptimizerDescriptor&)

    cdef cppclass OptimizerVectors "mpsx::OptimizerVectors":
        shared_ptr[CVector] momentum, velocity, maximum_velocity, sum_of_squares

    cdef cppclass OptimizerVectorLists "mpsx::OptimizerVectorLists":
        vector[shared_ptr[CVector]] momentum, velocity, maximum_velocity, sum_of_squares

    cdef enum class OptimizerVectorKind "mpsx::OptimizerVectorKind"(uint32_t):
        pass

    cdef cppclass CKeptOptimizerVectors "mpsx::KeptOptimizerVectors":
        size_t count(OptimizerVectorKind kind) except +raise_py_error
        size_t length(OptimizerVectorKind kind, size_t index) except +raise_py_error
        void read(OptimizerVectorKind kind, size_t index, float* destination, size_t count,
                  const char* owner) except +raise_py_error
        void write(OptimizerVectorKind kind, size_t index, const float* source, size_t count,
                   const char* owner) except +raise_py_error

    cdef cppclass CNNOptimizer "mpsx::NNOptimizer":
        CDevice& device()
        const shared_ptr[CDevice]& device_ptr()
        const char* class_name()
        const OptimizerDescriptor& descriptor()
        void set_learning_rate(float learning_rate) except +raise_py_error
        void set_apply_gradient_clipping(bool apply)
        string label
        void encode(CCommandBuffer& command_buffer, const shared_ptr[CVector]& gradient,
                    const shared_ptr[CVector]& values, const OptimizerVectors& vectors,
                    const shared_ptr[CVector]& result) except +raise_py_error
        void encode(CCommandBuffer& command_buffer, const shared_ptr[CState]& convolution_gradient_state,
                    const shared_ptr[CState]& convolution_source_state, const OptimizerVectorLists& vectors,
                    const shared_ptr[CState]& result_state) except +raise_py_error
        void encode_batch_normalization(CCommandBuffer& command_buffer, const shared_ptr[CState]& gradient_state,
                                        const shared_ptr[CState]& source_state, const OptimizerVectorLists& vectors,
                                        const shared_ptr[CState]& result_state) except +raise_py_error

    cdef cppclass CNNOptimizerStochasticGradientDescent "mpsx::NNOptimizerStochasticGradientDescent"(CNNOptimizer):
        CNNOptimizerStochasticGradientDescent(shared_ptr[CDevice] device, float momentum_scale,
                                              bool use_nesterov_momentum,
                                              const OptimizerDescriptor& descriptor) except +raise_py_error
        float momentum_scale()
        bool use_nesterov_momentum()

    cdef cppclass CNNOptimizerAdam "mpsx::NNOptimizerAdam"(CNNOptimizer):
        CNNOptimizerAdam(shared_ptr[CDevice] device, double beta1, double beta2, float epsilon, uint64_t time_step,
                         const OptimizerDescriptor& descriptor) except +raise_py_error
        double beta1()
        double beta2()
        float epsilon()
        uint64_t time_step

    cdef cppclass CNNOptimizerRMSProp "mpsx::NNOptimizerRMSProp"(CNNOptimizer):
        CNNOptimizerRMSProp(shared_ptr[CDevice] device, double decay, float epsilon,
                            const OptimizerDescriptor& descriptor) except +raise_py_error
        double decay()
        float epsilon()

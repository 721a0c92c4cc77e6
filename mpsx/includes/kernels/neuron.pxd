# cdef extern declarations of native/include/mpsx/kernels/neuron.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/neuron.h" namespace "mpsx" nogil:
    cdef enum class NeuronType "mpsx::NeuronType"(int32_t):
        pass

    cdef cppclass NeuronDescriptor "mpsx::NeuronDescriptor":
        NeuronType type
        float a, b, c
        vector[float] a_per_channel
        void validate() except +raise_py_error

    cdef cppclass CCNNNeuron "mpsx::CNNNeuron"(CUnaryKernel):
        CCNNNeuron(shared_ptr[CDevice] device, NeuronDescriptor descriptor) except +raise_py_error
        const NeuronDescriptor& neuron_descriptor()

    cdef cppclass CCNNNeuronGradient "mpsx::CNNNeuronGradient"(CGradientKernel):
        CCNNNeuronGradient(shared_ptr[CDevice] device, NeuronDescriptor descriptor) except +raise_py_error
        const NeuronDescriptor& neuron_descriptor()

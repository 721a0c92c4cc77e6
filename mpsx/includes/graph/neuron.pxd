# cdef extern declarations of native/include/mpsx/graph/neuron.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.neuron cimport NeuronDescriptor

cdef extern from "mpsx/graph/neuron.h" namespace "mpsx" nogil:
    cdef cppclass CCNNNeuronNode "mpsx::CNNNeuronNode"(CFilterNode):
        CCNNNeuronNode(shared_ptr[CImageNode] source, NeuronDescriptor descriptor) except +raise_py_error
        const NeuronDescriptor& descriptor()

    cdef cppclass CCNNNeuronGradientNode "mpsx::CNNNeuronGradientNode"(CFilterNode):
        CCNNNeuronGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                               shared_ptr[CStateNode] gradient_state, NeuronDescriptor descriptor) except +raise_py_error
        const NeuronDescriptor& descriptor()

# MPSCNNNeuronNode and MPSCNNNeuronGradientNode (native/include/mpsx/graph/neuron.h).

from mpsx.includes.graph.neuron cimport CCNNNeuronNode, CCNNNeuronGradientNode

__all__ += ["CNNNeuronNode", "CNNNeuronGradientNode"]


cdef class CNNNeuronNode(NNFilterNode):
    """MPSCNNNeuronNode(source, descriptor): descriptor an NNNeuronDescriptor."""

    def __init__(self, source, NNNeuronDescriptor descriptor not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNNeuronNode](_image_node_argument(source, "source").c,
                                                                      descriptor.desc), (source, descriptor))

    @classmethod
    def node_with_source(cls, source, descriptor):
        return cls(source, descriptor)

    @property
    def descriptor(self):
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuronNode*>self.native()).descriptor()
        return d


cdef class CNNNeuronGradientNode(NNGradientFilterNode):
    """MPSCNNNeuronGradientNode(source_gradient, source_image, gradient_state, descriptor)."""

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None,
                 NNNeuronDescriptor descriptor not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNNeuronGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c, descriptor.desc),
            (source_gradient, source_image, gradient_state, descriptor))

    @property
    def descriptor(self):
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuronGradientNode*>self.native()).descriptor()
        return d

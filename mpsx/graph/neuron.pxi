# MPSCNNNeuronNode and MPSCNNNeuronGradientNode (native/include/mpsx/graph/neuron.h).

from mpsx.includes.graph.neuron cimport CCNNNeuronNode, CCNNNeuronGradientNode

__all__ += ["CNNNeuronNode", "CNNNeuronGradientNode"]


cdef class CNNNeuronNode(NNFilterNode):
    """CNNNeuronNode(source, descriptor)
--

    A neuron of a graph: the activation function of ``descriptor`` (an NNNeuronDescriptor) on ``source``. As
    ``+[MPSCNNNeuronNode nodeWithSource:descriptor:]``.

    MPS: MPSCNNNeuronNode
    """

    def __init__(self, source, NNNeuronDescriptor descriptor not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNNeuronNode](_image_node_argument(source, "source").c,
                                                                      descriptor.desc), (source, descriptor))

    @classmethod
    def node_with_source(cls, source, descriptor):
        """The same as ``CNNNeuronNode(...)``: a new node.

        MPS: +[MPSCNNNeuronNode nodeWithSource:descriptor:]
        """
        return cls(source, descriptor)

    @property
    def descriptor(self):
        """A copy of the node's neuron descriptor.

        MPS: none (mpsx)
        """
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuronNode*>self.native()).descriptor()
        return d


cdef class CNNNeuronGradientNode(NNGradientFilterNode):
    """CNNNeuronGradientNode(source_gradient, source_image, gradient_state, descriptor)
--

    The gradient node of a CNNNeuronNode. As
    ``-[MPSCNNNeuronGradientNode initWithSourceGradient:sourceImage:gradientState:descriptor:]``.

    MPS: MPSCNNNeuronGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None,
                 NNNeuronDescriptor descriptor not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNNeuronGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c, descriptor.desc),
            (source_gradient, source_image, gradient_state, descriptor))

    @property
    def descriptor(self):
        """A copy of the node's neuron descriptor.

        MPS: MPSCNNNeuronGradientNode.descriptor
        """
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuronGradientNode*>self.native()).descriptor()
        return d

# MPSCNNSoftMaxNode, MPSCNNLogSoftMaxNode and their gradient nodes
# (native/include/mpsx/graph/softmax.h). The gradient nodes read the forward
# result: their source_image is the forward node's result_image.

from mpsx.includes.graph.softmax cimport CCNNSoftMaxGradientNode, CCNNSoftMaxNode

__all__ += ["CNNSoftMaxNode", "CNNLogSoftMaxNode", "CNNSoftMaxGradientNode", "CNNLogSoftMaxGradientNode"]


cdef class CNNSoftMaxNode(NNFilterNode):
    """CNNSoftMaxNode(source)
--

    Softmax over the feature channels of each pixel (CNNSoftMax).

    MPS: MPSCNNSoftMaxNode
    """
    def __init__(self, source):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNSoftMaxNode](_image_node_argument(source, "source").c,
                                                                       <cbool>False), (source,))

    @classmethod
    def node_with_source(cls, source):
        """The same as ``CNNSoftMaxNode(...)``: a new node.

        MPS: +[MPSCNNSoftMaxNode nodeWithSource:]
        """
        return cls(source)


cdef class CNNLogSoftMaxNode(NNFilterNode):
    """CNNLogSoftMaxNode(source)
--

    Log-softmax over the feature channels of each pixel (CNNLogSoftMax).

    MPS: MPSCNNLogSoftMaxNode
    """

    def __init__(self, source):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNSoftMaxNode](_image_node_argument(source, "source").c,
                                                                       <cbool>True), (source,))

    @classmethod
    def node_with_source(cls, source):
        """The same as ``CNNLogSoftMaxNode(...)``: a new node.

        MPS: +[MPSCNNLogSoftMaxNode nodeWithSource:]
        """
        return cls(source)


cdef _make_softmax_gradient_node(NNFilterNode node, source_gradient, source_image, NNStateNode gradient_state,
                                 cbool log):
    arguments = (source_gradient, source_image, gradient_state)
    gradient_state.native()
    node._made(<shared_ptr[CFilterNode]>make_native[CCNNSoftMaxGradientNode](
        _image_node_argument(source_gradient, "source_gradient").c,
        _image_node_argument(source_image, "source_image").c, gradient_state.c, log), arguments)


cdef class CNNSoftMaxGradientNode(NNGradientFilterNode):
    """CNNSoftMaxGradientNode(source_gradient, source_image, gradient_state)
--

    The gradient node of a CNNSoftMaxNode: ``source_image`` is the forward node's result image (the gradient reads
    the forward result), ``gradient_state`` its result state.

    MPS: MPSCNNSoftMaxGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        _make_softmax_gradient_node(self, source_gradient, source_image, gradient_state, False)

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``CNNSoftMaxGradientNode(...)``: a new node.

        MPS: +[MPSCNNSoftMaxGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)


cdef class CNNLogSoftMaxGradientNode(NNGradientFilterNode):
    """CNNLogSoftMaxGradientNode(source_gradient, source_image, gradient_state)
--

    The gradient node of a CNNLogSoftMaxNode: ``source_image`` is the forward node's result image (the gradient
    reads the forward result), ``gradient_state`` its result state.

    MPS: MPSCNNLogSoftMaxGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        _make_softmax_gradient_node(self, source_gradient, source_image, gradient_state, True)

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``CNNLogSoftMaxGradientNode(...)``: a new node.

        MPS: +[MPSCNNLogSoftMaxGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)

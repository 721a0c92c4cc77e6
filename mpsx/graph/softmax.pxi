# MPSCNNSoftMaxNode, MPSCNNLogSoftMaxNode and their gradient nodes
# (native/include/mpsx/graph/softmax.h). The gradient nodes read the forward
# result: their source_image is the forward node's result_image.

from mpsx.includes.graph.softmax cimport CCNNSoftMaxGradientNode, CCNNSoftMaxNode

__all__ += ["CNNSoftMaxNode", "CNNLogSoftMaxNode", "CNNSoftMaxGradientNode", "CNNLogSoftMaxGradientNode"]


cdef class CNNSoftMaxNode(NNFilterNode):
    """MPSCNNSoftMaxNode(source): softmax over the feature channels of each pixel."""
    def __init__(self, source):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNSoftMaxNode](_image_node_argument(source, "source").c,
                                                                       <cbool>False), (source,))

    @classmethod
    def node_with_source(cls, source):
        return cls(source)


cdef class CNNLogSoftMaxNode(NNFilterNode):
    """MPSCNNLogSoftMaxNode(source): log-softmax over the feature channels of each pixel."""

    def __init__(self, source):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNSoftMaxNode](_image_node_argument(source, "source").c,
                                                                       <cbool>True), (source,))

    @classmethod
    def node_with_source(cls, source):
        return cls(source)


cdef _make_softmax_gradient_node(NNFilterNode node, source_gradient, source_image, NNStateNode gradient_state,
                                 cbool log):
    arguments = (source_gradient, source_image, gradient_state)
    gradient_state.native()
    node._made(<shared_ptr[CFilterNode]>make_native[CCNNSoftMaxGradientNode](
        _image_node_argument(source_gradient, "source_gradient").c,
        _image_node_argument(source_image, "source_image").c, gradient_state.c, log), arguments)


cdef class CNNSoftMaxGradientNode(NNGradientFilterNode):
    """MPSCNNSoftMaxGradientNode(source_gradient, source_image, gradient_state): source_image is the forward
    node's result image (the gradient reads the forward result), gradient_state its result_state."""

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        _make_softmax_gradient_node(self, source_gradient, source_image, gradient_state, False)


cdef class CNNLogSoftMaxGradientNode(NNGradientFilterNode):
    """MPSCNNLogSoftMaxGradientNode(source_gradient, source_image, gradient_state): source_image is the
    forward node's result image (the gradient reads the forward result), gradient_state its result_state."""

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        _make_softmax_gradient_node(self, source_gradient, source_image, gradient_state, True)

# MPSCNNCrossChannelNormalizationNode and its gradient node
# (native/include/mpsx/graph/cross_channel_normalization.h).

from mpsx.includes.graph.cross_channel_normalization cimport (
    CCNNCrossChannelNormalizationGradientNode, CCNNCrossChannelNormalizationNode)

__all__ += ["CNNCrossChannelNormalizationNode", "CNNCrossChannelNormalizationGradientNode"]


cdef class CNNCrossChannelNormalizationNode(CNNNormalizationNode):
    """CNNCrossChannelNormalizationNode(source, kernel_size)
--

    Local response normalization over ``kernel_size`` feature channels in a graph (CNNCrossChannelNormalization).
    alpha 1.0, beta 5.0, delta 1.0 by default; the gradient node takes them when it is made. As
    ``-[MPSCNNCrossChannelNormalizationNode initWithSource:kernelSize:]``.

    MPS: MPSCNNCrossChannelNormalizationNode
    """
    _mpsx_properties = ("kernel_size_in_feature_channels",)

    def __init__(self, source, kernel_size):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNCrossChannelNormalizationNode](
            _image_node_argument(source, "source").c, integer_argument(kernel_size, "kernel_size")),
            (source, kernel_size))

    @classmethod
    def node_with_source(cls, source, kernel_size):
        """The same as ``CNNCrossChannelNormalizationNode(...)``: a new node.

        MPS: +[MPSCNNCrossChannelNormalizationNode nodeWithSource:kernelSize:]
        """
        return cls(source, kernel_size)

    cdef CCNNCrossChannelNormalizationNode* node(self) except NULL:
        return <CCNNCrossChannelNormalizationNode*>self.native()

    @property
    def kernel_size_in_feature_channels(self):
        """The number of feature channels of the window.

        MPS: MPSCNNCrossChannelNormalizationNode.kernelSizeInFeatureChannels
        """
        return self.node().kernel_size()

    @kernel_size_in_feature_channels.setter
    def kernel_size_in_feature_channels(self, value):
        self.node().set_kernel_size(integer_argument(value, "kernel_size_in_feature_channels"))

    cdef float _parameter(self, int which) except? -1:
        return _response_parameter(self.node(), which)

    cdef int _set_parameter(self, int which, str name, float value) except -1:
        return _set_response_parameter(self.node(), which, value)


cdef class CNNCrossChannelNormalizationGradientNode(NNGradientFilterNode):
    """CNNCrossChannelNormalizationGradientNode(source_gradient, source_image, gradient_state, kernel_size)
--

    The gradient node of a CNNCrossChannelNormalizationNode (``gradient_state`` its result state), whose alpha, beta
    and delta it takes when made (read-only here; MPS's gradient node has none). The graph refuses to compile it if
    its forward node's kernel size or parameters changed since. As
    ``-[MPSCNNCrossChannelNormalizationGradientNode initWithSourceGradient:sourceImage:gradientState:kernelSize:]``.

    MPS: MPSCNNCrossChannelNormalizationGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, kernel_size):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNCrossChannelNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c,
            integer_argument(kernel_size, "kernel_size")), (source_gradient, source_image, gradient_state, kernel_size))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, kernel_size):
        """The same as ``CNNCrossChannelNormalizationGradientNode(...)``: a new node.

        MPS: +[MPSCNNCrossChannelNormalizationGradientNode nodeWithSourceGradient:sourceImage:gradientState:kernelSize:]
        """
        return cls(source_gradient, source_image, gradient_state, kernel_size)

    cdef CCNNCrossChannelNormalizationGradientNode* node(self) except NULL:
        return <CCNNCrossChannelNormalizationGradientNode*>self.native()

    @property
    def kernel_size(self):
        """The number of feature channels of the forward window.

        MPS: MPSCNNCrossChannelNormalizationGradientNode.kernelSize
        """
        return self.node().kernel_size()

    @property
    def alpha(self):
        """The forward node's alpha.

        MPS: none (mpsx)
        """
        return self.node().parameters().alpha

    @property
    def beta(self):
        """The forward node's beta.

        MPS: none (mpsx)
        """
        return self.node().parameters().beta

    @property
    def delta(self):
        """The forward node's delta.

        MPS: none (mpsx)
        """
        return self.node().parameters().delta

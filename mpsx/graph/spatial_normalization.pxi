# MPSCNNSpatialNormalizationNode and its gradient node
# (native/include/mpsx/graph/spatial_normalization.h).

from mpsx.includes.graph.spatial_normalization cimport (
    CCNNSpatialNormalizationGradientNode, CCNNSpatialNormalizationNode, CSpatialNormalizationNodeSettings)

__all__ += ["CNNSpatialNormalizationNode", "CNNSpatialNormalizationGradientNode"]


cdef class CNNSpatialNormalizationNode(CNNNormalizationNode):
    """CNNSpatialNormalizationNode(source, kernel_size)
--

    Spatial normalization in a graph (CNNSpatialNormalization) over a ``kernel_size`` x ``kernel_size`` window, edge
    mode ZERO. alpha 1.0, beta 5.0, delta 1.0 by default; the gradient node copies the sizes and parameters when it
    is made. As ``-[MPSCNNSpatialNormalizationNode initWithSource:kernelSize:]``.

    MPS: MPSCNNSpatialNormalizationNode
    """
    _mpsx_properties = ("kernel_width", "kernel_height")

    def __init__(self, source, kernel_size):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNSpatialNormalizationNode](
            _image_node_argument(source, "source").c, integer_argument(kernel_size, "kernel_size")),
            (source, kernel_size))

    @classmethod
    def node_with_source(cls, source, kernel_size):
        """The same as ``CNNSpatialNormalizationNode(...)``: a new node.

        MPS: +[MPSCNNSpatialNormalizationNode nodeWithSource:kernelSize:]
        """
        return cls(source, kernel_size)

    cdef CSpatialNormalizationNodeSettings* settings(self) except NULL:
        return <CSpatialNormalizationNodeSettings*><CCNNSpatialNormalizationNode*>self.native()

    @property
    def kernel_width(self):
        """The width of the window; it must equal ``kernel_height`` when the graph compiles.

        MPS: MPSCNNSpatialNormalizationNode.kernelWidth
        """
        return self.settings().kernel_width()

    @kernel_width.setter
    def kernel_width(self, value):
        self.settings().set_kernel_width(integer_argument(value, "kernel_width"))

    @property
    def kernel_height(self):
        """The height of the window.

        MPS: MPSCNNSpatialNormalizationNode.kernelHeight
        """
        return self.settings().kernel_height()

    @kernel_height.setter
    def kernel_height(self, value):
        self.settings().set_kernel_height(integer_argument(value, "kernel_height"))

    cdef float _parameter(self, int which) except? -1:
        return _response_parameter(self.settings(), which)

    cdef int _set_parameter(self, int which, str name, float value) except -1:
        return _set_response_parameter(self.settings(), which, value)


cdef class CNNSpatialNormalizationGradientNode(NNGradientFilterNode):
    """CNNSpatialNormalizationGradientNode(source_gradient, source_image, gradient_state, kernel_size)
--

    The gradient node of a CNNSpatialNormalizationNode (``gradient_state`` its result state). Made by hand it has
    the header's defaults; made by ``gradient_filter_with_source`` it copies the forward node's sizes and
    parameters. The graph refuses to compile it unless they are its forward node's. As
    ``-[MPSCNNSpatialNormalizationGradientNode initWithSourceGradient:sourceImage:gradientState:kernelSize:]``.

    MPS: MPSCNNSpatialNormalizationGradientNode
    """
    _mpsx_properties = ("kernel_width", "kernel_height", "alpha", "beta", "delta")

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, kernel_size):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNSpatialNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c,
            integer_argument(kernel_size, "kernel_size")), (source_gradient, source_image, gradient_state, kernel_size))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, kernel_size):
        """The same as ``CNNSpatialNormalizationGradientNode(...)``: a new node.

        MPS: +[MPSCNNSpatialNormalizationGradientNode nodeWithSourceGradient:sourceImage:gradientState:kernelSize:]
        """
        return cls(source_gradient, source_image, gradient_state, kernel_size)

    cdef CSpatialNormalizationNodeSettings* settings(self) except NULL:
        return <CSpatialNormalizationNodeSettings*><CCNNSpatialNormalizationGradientNode*>self.native()

    @property
    def kernel_width(self):
        """The width of the window; it must be the forward node's when the graph compiles.

        MPS: MPSCNNSpatialNormalizationGradientNode.kernelWidth
        """
        return self.settings().kernel_width()

    @kernel_width.setter
    def kernel_width(self, value):
        self.settings().set_kernel_width(integer_argument(value, "kernel_width"))

    @property
    def kernel_height(self):
        """The height of the window; it must be the forward node's when the graph compiles.

        MPS: MPSCNNSpatialNormalizationGradientNode.kernelHeight
        """
        return self.settings().kernel_height()

    @kernel_height.setter
    def kernel_height(self, value):
        self.settings().set_kernel_height(integer_argument(value, "kernel_height"))

    @property
    def alpha(self):
        """The scale of the window's sum of squares (default 1.0; finite, not negative).

        MPS: MPSCNNSpatialNormalizationGradientNode.alpha
        """
        return self.settings().parameters().alpha

    @alpha.setter
    def alpha(self, value):
        self.settings().set_alpha(float_argument(value, "alpha"))

    @property
    def beta(self):
        """The exponent of the denominator (default 5.0).

        MPS: MPSCNNSpatialNormalizationGradientNode.beta
        """
        return self.settings().parameters().beta

    @beta.setter
    def beta(self, value):
        self.settings().set_beta(float_argument(value, "beta"))

    @property
    def delta(self):
        """The offset of the denominator (default 1.0).

        MPS: MPSCNNSpatialNormalizationGradientNode.delta
        """
        return self.settings().parameters().delta

    @delta.setter
    def delta(self, value):
        self.settings().set_delta(float_argument(value, "delta"))

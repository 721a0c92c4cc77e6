# MPSCNNLocalContrastNormalizationNode and its gradient node
# (native/include/mpsx/graph/local_contrast_normalization.h).

from mpsx.includes.kernels.local_contrast_normalization cimport LocalContrastNormalizationParameters
from mpsx.includes.graph.local_contrast_normalization cimport (
    CCNNLocalContrastNormalizationGradientNode, CCNNLocalContrastNormalizationNode)

__all__ += ["CNNLocalContrastNormalizationNode", "CNNLocalContrastNormalizationGradientNode"]


cdef class CNNLocalContrastNormalizationNode(CNNNormalizationNode):
    """CNNLocalContrastNormalizationNode(source, kernel_size)
--

    Local contrast normalization in a graph (CNNLocalContrastNormalization):
    ``y = pm + ps * (x - p0 * M) / (delta + alpha * VAR)^beta`` over a ``kernel_size`` x ``kernel_size`` window,
    edge mode ZERO. The node's defaults are the header's for the node: alpha 1.0 (the kernel's is 0.0), beta 0.5,
    delta 1/1024, p0 1, pm 0, ps 1. The gradient node copies the sizes and parameters when it is made. As
    ``-[MPSCNNLocalContrastNormalizationNode initWithSource:kernelSize:]``.

    MPS: MPSCNNLocalContrastNormalizationNode
    """
    _mpsx_properties = ("kernel_width", "kernel_height", "p0", "pm", "ps")

    def __init__(self, source, kernel_size):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNLocalContrastNormalizationNode](
            _image_node_argument(source, "source").c, integer_argument(kernel_size, "kernel_size")),
            (source, kernel_size))

    @classmethod
    def node_with_source(cls, source, kernel_size):
        """The same as ``CNNLocalContrastNormalizationNode(...)``: a new node.

        MPS: +[MPSCNNLocalContrastNormalizationNode nodeWithSource:kernelSize:]
        """
        return cls(source, kernel_size)

    cdef CCNNLocalContrastNormalizationNode* node(self) except NULL:
        return <CCNNLocalContrastNormalizationNode*>self.native()

    @property
    def kernel_width(self):
        """The width of the window; it must equal ``kernel_height`` when the graph compiles.

        MPS: MPSCNNLocalContrastNormalizationNode.kernelWidth
        """
        return self.node().kernel_width()

    @kernel_width.setter
    def kernel_width(self, value):
        self.node().set_kernel_width(integer_argument(value, "kernel_width"))

    @property
    def kernel_height(self):
        """The height of the window.

        MPS: MPSCNNLocalContrastNormalizationNode.kernelHeight
        """
        return self.node().kernel_height()

    @kernel_height.setter
    def kernel_height(self, value):
        self.node().set_kernel_height(integer_argument(value, "kernel_height"))

    cdef float _parameter(self, int which) except? -1:
        cdef LocalContrastNormalizationParameters* p = &self.node().parameters
        return p.alpha if which == 0 else p.beta if which == 1 else p.delta

    cdef int _set_parameter(self, int which, str name, float value) except -1:
        value = parameter(self.native().class_name(), value, name)
        cdef LocalContrastNormalizationParameters* p = &self.node().parameters
        if which == 0:
            p.alpha = value
        elif which == 1:
            p.beta = value
        else:
            p.delta = value
        return 0

    @property
    def p0(self):
        """The factor of the mean subtracted (default 1.0).

        MPS: MPSCNNLocalContrastNormalizationNode.p0
        """
        return self.node().parameters.p0

    @p0.setter
    def p0(self, value):
        self.node().parameters.p0 = parameter(self.native().class_name(), value, "p0")

    @property
    def pm(self):
        """The offset of the result (default 0.0).

        MPS: MPSCNNLocalContrastNormalizationNode.pm
        """
        return self.node().parameters.pm

    @pm.setter
    def pm(self, value):
        self.node().parameters.pm = parameter(self.native().class_name(), value, "pm")

    @property
    def ps(self):
        """The scale of the result (default 1.0).

        MPS: MPSCNNLocalContrastNormalizationNode.ps
        """
        return self.node().parameters.ps

    @ps.setter
    def ps(self, value):
        self.node().parameters.ps = parameter(self.native().class_name(), value, "ps")


cdef class CNNLocalContrastNormalizationGradientNode(NNGradientFilterNode):
    """CNNLocalContrastNormalizationGradientNode(source_gradient, source_image, gradient_state, kernel_width,
        kernel_height)
--

    The gradient node of a CNNLocalContrastNormalizationNode (``gradient_state`` its result state). Made by hand it
    has the header's defaults for this node (alpha 0.0, as the kernel); made by ``gradient_filter_with_source`` it
    copies the forward node's sizes and parameters. The graph refuses to compile it unless they are its forward
    node's. As
    ``-[MPSCNNLocalContrastNormalizationGradientNode initWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:]``.

    MPS: MPSCNNLocalContrastNormalizationGradientNode
    """
    _mpsx_properties = ("alpha", "beta", "delta", "p0", "pm", "ps")

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, kernel_width,
                 kernel_height):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNLocalContrastNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c,
            integer_argument(kernel_width, "kernel_width"), integer_argument(kernel_height, "kernel_height")),
            (source_gradient, source_image, gradient_state, kernel_width, kernel_height))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, kernel_width, kernel_height):
        """The same as ``CNNLocalContrastNormalizationGradientNode(...)``: a new node.

        MPS: +[MPSCNNLocalContrastNormalizationGradientNode nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:]
        """
        return cls(source_gradient, source_image, gradient_state, kernel_width, kernel_height)

    cdef CCNNLocalContrastNormalizationGradientNode* node(self) except NULL:
        return <CCNNLocalContrastNormalizationGradientNode*>self.native()

    @property
    def kernel_width(self):
        """The width of the window.

        MPS: MPSCNNLocalContrastNormalizationGradientNode.kernelWidth
        """
        return self.node().kernel_width()

    @property
    def kernel_height(self):
        """The height of the window.

        MPS: MPSCNNLocalContrastNormalizationGradientNode.kernelHeight
        """
        return self.node().kernel_height()

    @property
    def alpha(self):
        """The scale of the window's variance (default 0.0 made by hand; ``gradient_filter_with_source`` copies the
        forward node's).

        MPS: MPSCNNLocalContrastNormalizationGradientNode.alpha
        """
        return self.node().parameters.alpha

    @alpha.setter
    def alpha(self, value):
        self.node().parameters.alpha = parameter(self.native().class_name(), value, "alpha")

    @property
    def beta(self):
        """The exponent of the denominator (default 0.5).

        MPS: MPSCNNLocalContrastNormalizationGradientNode.beta
        """
        return self.node().parameters.beta

    @beta.setter
    def beta(self, value):
        self.node().parameters.beta = parameter(self.native().class_name(), value, "beta")

    @property
    def delta(self):
        """The offset of the denominator (default 1/1024).

        MPS: MPSCNNLocalContrastNormalizationGradientNode.delta
        """
        return self.node().parameters.delta

    @delta.setter
    def delta(self, value):
        self.node().parameters.delta = parameter(self.native().class_name(), value, "delta")

    @property
    def p0(self):
        """The factor of the mean subtracted (default 1.0).

        MPS: MPSCNNLocalContrastNormalizationGradientNode.p0
        """
        return self.node().parameters.p0

    @p0.setter
    def p0(self, value):
        self.node().parameters.p0 = parameter(self.native().class_name(), value, "p0")

    @property
    def pm(self):
        """The offset of the result (default 0.0).

        MPS: MPSCNNLocalContrastNormalizationGradientNode.pm
        """
        return self.node().parameters.pm

    @pm.setter
    def pm(self, value):
        self.node().parameters.pm = parameter(self.native().class_name(), value, "pm")

    @property
    def ps(self):
        """The scale of the result (default 1.0).

        MPS: MPSCNNLocalContrastNormalizationGradientNode.ps
        """
        return self.node().parameters.ps

    @ps.setter
    def ps(self, value):
        self.node().parameters.ps = parameter(self.native().class_name(), value, "ps")

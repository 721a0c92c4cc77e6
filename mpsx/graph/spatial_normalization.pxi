# MPSCNNSpatialNormalizationNode and its gradient node
# (native/include/mpsx/graph/spatial_normalization.h).

from mpsx.includes.graph.spatial_normalization cimport (
    CCNNSpatialNormalizationGradientNode, CCNNSpatialNormalizationNode, CSpatialNormalizationNodeSettings)

__all__ += ["CNNSpatialNormalizationNode", "CNNSpatialNormalizationGradientNode"]


cdef class CNNSpatialNormalizationNode(NNFilterNode):
    """MPSCNNSpatialNormalizationNode(source, kernel_size): per feature channel over a kernel_size x
    kernel_size window (CNNSpatialNormalization), edge mode ZERO. alpha 1.0, beta 5.0, delta 1.0 by default;
    the gradient node copies the sizes and parameters when it is made."""
    _mpsx_properties = ("kernel_width", "kernel_height", "alpha", "beta", "delta")

    def __init__(self, source, kernel_size):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNSpatialNormalizationNode](
            _image_node_argument(source, "source").c, integer_argument(kernel_size, "kernel_size")),
            (source, kernel_size))

    @classmethod
    def node_with_source(cls, source, kernel_size):
        return cls(source, kernel_size)

    cdef CSpatialNormalizationNodeSettings* settings(self) except NULL:
        return <CSpatialNormalizationNodeSettings*><CCNNSpatialNormalizationNode*>self.native()

    @property
    def kernel_width(self):
        """Read-write; must equal kernel_height when the graph compiles."""
        return self.settings().kernel_width()

    @kernel_width.setter
    def kernel_width(self, value):
        self.settings().set_kernel_width(integer_argument(value, "kernel_width"))

    @property
    def kernel_height(self):
        return self.settings().kernel_height()

    @kernel_height.setter
    def kernel_height(self, value):
        self.settings().set_kernel_height(integer_argument(value, "kernel_height"))

    @property
    def alpha(self):
        """Default 1.0; finite and non-negative."""
        return self.settings().parameters().alpha

    @alpha.setter
    def alpha(self, value):
        self.settings().set_alpha(float_argument(value, "alpha"))

    @property
    def beta(self):
        """Default 5.0."""
        return self.settings().parameters().beta

    @beta.setter
    def beta(self, value):
        self.settings().set_beta(float_argument(value, "beta"))

    @property
    def delta(self):
        """Default 1.0."""
        return self.settings().parameters().delta

    @delta.setter
    def delta(self, value):
        self.settings().set_delta(float_argument(value, "delta"))


cdef class CNNSpatialNormalizationGradientNode(NNGradientFilterNode):
    """MPSCNNSpatialNormalizationGradientNode(source_gradient, source_image, gradient_state, kernel_size):
    gradient_state the result state of a CNNSpatialNormalizationNode. Made by hand it has the header's
    defaults; made by gradient_filter_with_source it copies the forward node's sizes and parameters. The
    graph refuses to compile it unless they are its forward node's."""
    _mpsx_properties = ("kernel_width", "kernel_height", "alpha", "beta", "delta")

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, kernel_size):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNSpatialNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c,
            integer_argument(kernel_size, "kernel_size")), (source_gradient, source_image, gradient_state, kernel_size))

    cdef CSpatialNormalizationNodeSettings* settings(self) except NULL:
        return <CSpatialNormalizationNodeSettings*><CCNNSpatialNormalizationGradientNode*>self.native()

    @property
    def kernel_width(self):
        """Read-write; must be the forward node's when the graph compiles."""
        return self.settings().kernel_width()

    @kernel_width.setter
    def kernel_width(self, value):
        self.settings().set_kernel_width(integer_argument(value, "kernel_width"))

    @property
    def kernel_height(self):
        return self.settings().kernel_height()

    @kernel_height.setter
    def kernel_height(self, value):
        self.settings().set_kernel_height(integer_argument(value, "kernel_height"))

    @property
    def alpha(self):
        """Default 1.0; finite and non-negative."""
        return self.settings().parameters().alpha

    @alpha.setter
    def alpha(self, value):
        self.settings().set_alpha(float_argument(value, "alpha"))

    @property
    def beta(self):
        """Default 5.0."""
        return self.settings().parameters().beta

    @beta.setter
    def beta(self, value):
        self.settings().set_beta(float_argument(value, "beta"))

    @property
    def delta(self):
        """Default 1.0."""
        return self.settings().parameters().delta

    @delta.setter
    def delta(self, value):
        self.settings().set_delta(float_argument(value, "delta"))

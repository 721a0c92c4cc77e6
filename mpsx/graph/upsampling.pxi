# MPSCNNUpsampling{Nearest,Bilinear}Node and their gradient nodes
# (native/include/mpsx/graph/upsampling.h).

from mpsx.includes.graph.upsampling cimport CCNNUpsamplingGradientNode, CCNNUpsamplingNode

__all__ += ["CNNUpsamplingNearestNode", "CNNUpsamplingBilinearNode", "CNNUpsamplingNearestGradientNode",
            "CNNUpsamplingBilinearGradientNode"]


cdef _make_upsampling_node(NNFilterNode node, source, UpsamplingKind kind, integer_scale_factor_x,
                           integer_scale_factor_y, cbool align_corners):
    arguments = (source, integer_scale_factor_x, integer_scale_factor_y)
    if kind == UpsamplingKind.Bilinear:
        arguments += (align_corners,)
    node._made(<shared_ptr[CFilterNode]>make_native[CCNNUpsamplingNode](
        _image_node_argument(source, "source").c, kind,
        _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
        _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), align_corners), arguments)


cdef class CNNUpsamplingNearestNode(NNFilterNode):
    """CNNUpsamplingNearestNode(source, integer_scale_factor_x, integer_scale_factor_y)
--

    Nearest-neighbour upsampling in a graph (CNNUpsamplingNearest): each source pixel repeated over a block. As
    ``-[MPSCNNUpsamplingNearestNode initWithSource:integerScaleFactorX:integerScaleFactorY:]``.

    MPS: MPSCNNUpsamplingNearestNode
    """

    def __init__(self, source, integer_scale_factor_x, integer_scale_factor_y):
        _make_upsampling_node(self, source, UpsamplingKind.Nearest, integer_scale_factor_x, integer_scale_factor_y,
                              False)

    @classmethod
    def node_with_source(cls, source, integer_scale_factor_x, integer_scale_factor_y):
        """The same as ``CNNUpsamplingNearestNode(...)``: a new node.

        MPS: +[MPSCNNUpsamplingNearestNode nodeWithSource:integerScaleFactorX:integerScaleFactorY:]
        """
        return cls(source, integer_scale_factor_x, integer_scale_factor_y)

    @property
    def scale_factor_x(self):
        """The factor in x (an integer, as a float).

        MPS: MPSCNNUpsamplingNearestNode.scaleFactorX
        """
        return float((<CCNNUpsamplingNode*>self.native()).scale_factor_x())

    @property
    def scale_factor_y(self):
        """The factor in y (an integer, as a float).

        MPS: MPSCNNUpsamplingNearestNode.scaleFactorY
        """
        return float((<CCNNUpsamplingNode*>self.native()).scale_factor_y())


cdef class CNNUpsamplingBilinearNode(NNFilterNode):
    """CNNUpsamplingBilinearNode(source, integer_scale_factor_x, integer_scale_factor_y, align_corners=False)
--

    Bilinear upsampling in a graph (CNNUpsamplingBilinear). As
    ``-[MPSCNNUpsamplingBilinearNode initWithSource:integerScaleFactorX:integerScaleFactorY:alignCorners:]``.

    MPS: MPSCNNUpsamplingBilinearNode
    """

    def __init__(self, source, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
        _make_upsampling_node(self, source, UpsamplingKind.Bilinear, integer_scale_factor_x, integer_scale_factor_y,
                              _align_corners(align_corners))

    @classmethod
    def node_with_source(cls, source, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
        """The same as ``CNNUpsamplingBilinearNode(...)``: a new node.

        MPS: +[MPSCNNUpsamplingBilinearNode nodeWithSource:integerScaleFactorX:integerScaleFactorY:alignCorners:]
        """
        return cls(source, integer_scale_factor_x, integer_scale_factor_y, align_corners)

    @property
    def scale_factor_x(self):
        """The factor in x (an integer, as a float).

        MPS: MPSCNNUpsamplingBilinearNode.scaleFactorX
        """
        return float((<CCNNUpsamplingNode*>self.native()).scale_factor_x())

    @property
    def scale_factor_y(self):
        """The factor in y (an integer, as a float).

        MPS: MPSCNNUpsamplingBilinearNode.scaleFactorY
        """
        return float((<CCNNUpsamplingNode*>self.native()).scale_factor_y())

    @property
    def align_corners(self):
        """Whether the corner pixel centres of source and result align.

        MPS: MPSCNNUpsamplingBilinearNode.alignCorners
        """
        return (<CCNNUpsamplingNode*>self.native()).align_corners()


cdef _make_upsampling_gradient_node(NNFilterNode node, source_gradient, source_image, NNStateNode gradient_state,
                                    UpsamplingKind kind, scale_factor_x, scale_factor_y):
    arguments = (source_gradient, source_image, gradient_state, scale_factor_x, scale_factor_y)
    gradient_state.native()
    node._made(<shared_ptr[CFilterNode]>make_native[CCNNUpsamplingGradientNode](
        _image_node_argument(source_gradient, "source_gradient").c,
        _image_node_argument(source_image, "source_image").c, gradient_state.c, kind,
        float_argument(scale_factor_x, "scale_factor_x"), float_argument(scale_factor_y, "scale_factor_y")), arguments)


cdef class CNNUpsamplingNearestGradientNode(NNGradientFilterNode):
    """CNNUpsamplingNearestGradientNode(source_gradient, source_image, gradient_state, scale_factor_x,
        scale_factor_y)
--

    The gradient node of a CNNUpsamplingNearestNode: the scale factors (numbers, as MPS's doubles) must be the
    forward node's.

    MPS: MPSCNNUpsamplingNearestGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, scale_factor_x,
                 scale_factor_y):
        _make_upsampling_gradient_node(self, source_gradient, source_image, gradient_state, UpsamplingKind.Nearest,
                                       scale_factor_x, scale_factor_y)

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, scale_factor_x, scale_factor_y):
        """The same as ``CNNUpsamplingNearestGradientNode(...)``: a new node.

        MPS: +[MPSCNNUpsamplingNearestGradientNode nodeWithSourceGradient:sourceImage:gradientState:scaleFactorX:scaleFactorY:]
        """
        return cls(source_gradient, source_image, gradient_state, scale_factor_x, scale_factor_y)

    @property
    def scale_factor_x(self):
        """The factor in x (an integer, as a float).

        MPS: MPSCNNUpsamplingNearestGradientNode.scaleFactorX
        """
        return float((<CCNNUpsamplingGradientNode*>self.native()).scale_factor_x())

    @property
    def scale_factor_y(self):
        """The factor in y (an integer, as a float).

        MPS: MPSCNNUpsamplingNearestGradientNode.scaleFactorY
        """
        return float((<CCNNUpsamplingGradientNode*>self.native()).scale_factor_y())


cdef class CNNUpsamplingBilinearGradientNode(NNGradientFilterNode):
    """CNNUpsamplingBilinearGradientNode(source_gradient, source_image, gradient_state, scale_factor_x,
        scale_factor_y)
--

    The gradient node of a CNNUpsamplingBilinearNode: the scale factors must be the forward node's;
    ``align_corners`` (which MPS's node does not take) is the forward node's.

    MPS: MPSCNNUpsamplingBilinearGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, scale_factor_x,
                 scale_factor_y):
        _make_upsampling_gradient_node(self, source_gradient, source_image, gradient_state, UpsamplingKind.Bilinear,
                                       scale_factor_x, scale_factor_y)

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, scale_factor_x, scale_factor_y):
        """The same as ``CNNUpsamplingBilinearGradientNode(...)``: a new node.

        MPS: +[MPSCNNUpsamplingBilinearGradientNode nodeWithSourceGradient:sourceImage:gradientState:scaleFactorX:scaleFactorY:]
        """
        return cls(source_gradient, source_image, gradient_state, scale_factor_x, scale_factor_y)

    @property
    def scale_factor_x(self):
        """The factor in x (an integer, as a float).

        MPS: MPSCNNUpsamplingBilinearGradientNode.scaleFactorX
        """
        return float((<CCNNUpsamplingGradientNode*>self.native()).scale_factor_x())

    @property
    def scale_factor_y(self):
        """The factor in y (an integer, as a float).

        MPS: MPSCNNUpsamplingBilinearGradientNode.scaleFactorY
        """
        return float((<CCNNUpsamplingGradientNode*>self.native()).scale_factor_y())

    @property
    def align_corners(self):
        """Whether the forward node aligned the corners (MPS's gradient node has no such property).

        MPS: none (mpsx)
        """
        return (<CCNNUpsamplingGradientNode*>self.native()).align_corners()

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
    """MPSCNNUpsamplingNearestNode(source, integer_scale_factor_x, integer_scale_factor_y): each source
    pixel repeated over a block, as CNNUpsamplingNearest."""

    def __init__(self, source, integer_scale_factor_x, integer_scale_factor_y):
        _make_upsampling_node(self, source, UpsamplingKind.Nearest, integer_scale_factor_x, integer_scale_factor_y,
                              False)

    @classmethod
    def node_with_source(cls, source, integer_scale_factor_x, integer_scale_factor_y):
        return cls(source, integer_scale_factor_x, integer_scale_factor_y)

    @property
    def scale_factor_x(self):
        return float((<CCNNUpsamplingNode*>self.native()).scale_factor_x())

    @property
    def scale_factor_y(self):
        return float((<CCNNUpsamplingNode*>self.native()).scale_factor_y())


cdef class CNNUpsamplingBilinearNode(NNFilterNode):
    """MPSCNNUpsamplingBilinearNode(source, integer_scale_factor_x, integer_scale_factor_y,
    align_corners=False): bilinear interpolation, as CNNUpsamplingBilinear."""

    def __init__(self, source, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
        _make_upsampling_node(self, source, UpsamplingKind.Bilinear, integer_scale_factor_x, integer_scale_factor_y,
                              _align_corners(align_corners))

    @classmethod
    def node_with_source(cls, source, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
        return cls(source, integer_scale_factor_x, integer_scale_factor_y, align_corners)

    @property
    def scale_factor_x(self):
        return float((<CCNNUpsamplingNode*>self.native()).scale_factor_x())

    @property
    def scale_factor_y(self):
        return float((<CCNNUpsamplingNode*>self.native()).scale_factor_y())

    @property
    def align_corners(self):
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
    """MPSCNNUpsamplingNearestGradientNode(source_gradient, source_image, gradient_state, scale_factor_x,
    scale_factor_y): the scale factors (numbers, as MPS's doubles) must be the forward node's."""

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, scale_factor_x,
                 scale_factor_y):
        _make_upsampling_gradient_node(self, source_gradient, source_image, gradient_state, UpsamplingKind.Nearest,
                                       scale_factor_x, scale_factor_y)

    @property
    def scale_factor_x(self):
        return float((<CCNNUpsamplingGradientNode*>self.native()).scale_factor_x())

    @property
    def scale_factor_y(self):
        return float((<CCNNUpsamplingGradientNode*>self.native()).scale_factor_y())


cdef class CNNUpsamplingBilinearGradientNode(NNGradientFilterNode):
    """MPSCNNUpsamplingBilinearGradientNode(source_gradient, source_image, gradient_state, scale_factor_x,
    scale_factor_y): the scale factors must be the forward node's; align_corners (which MPS's node does not
    take) is the forward node's."""

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, scale_factor_x,
                 scale_factor_y):
        _make_upsampling_gradient_node(self, source_gradient, source_image, gradient_state, UpsamplingKind.Bilinear,
                                       scale_factor_x, scale_factor_y)

    @property
    def scale_factor_x(self):
        return float((<CCNNUpsamplingGradientNode*>self.native()).scale_factor_x())

    @property
    def scale_factor_y(self):
        return float((<CCNNUpsamplingGradientNode*>self.native()).scale_factor_y())

    @property
    def align_corners(self):
        return (<CCNNUpsamplingGradientNode*>self.native()).align_corners()

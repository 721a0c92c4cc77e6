# MPSNNPadNode, MPSNNReshapeNode and their gradient nodes (native/include/mpsx/graph/reshape.h).

from mpsx.includes.graph.reshape cimport CNNPadGradientNode, CNNPadNode, CNNReshapeGradientNode, CNNReshapeNode

__all__ += ["NNPadNode", "NNPadGradientNode", "NNReshapeNode", "NNReshapeGradientNode"]


cdef class NNPadNode(NNFilterNode):
    """NNPadNode(source, padding_size_before, padding_size_after, edge_mode)
--

    Padding in a graph (NNPad): the result is ``padding_size_before + source + padding_size_after`` in x, y and
    feature channels, the padding filled as ``edge_mode`` (an ImageEdgeMode) says; ``fill_value`` for CONSTANT. As
    ``-[MPSNNPadNode initWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode:]``.

    MPS: MPSNNPadNode
    """

    _mpsx_properties = ("fill_value",)

    def __init__(self, source, padding_size_before, padding_size_after, edge_mode):
        mode = ImageEdgeMode(edge_mode)
        self._made(<shared_ptr[CFilterNode]>make_native[CNNPadNode](
            _image_node_argument(source, "source").c, _coordinate_argument(padding_size_before, "padding_size_before"),
            _coordinate_argument(padding_size_after, "padding_size_after"), <EdgeMode><int>mode),
            (source, tuple(padding_size_before), tuple(padding_size_after), mode))

    @classmethod
    def node_with_source(cls, source, padding_size_before, padding_size_after, edge_mode):
        """The same as ``NNPadNode(...)``: a new node.

        MPS: +[MPSNNPadNode nodeWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode:]
        """
        return cls(source, padding_size_before, padding_size_after, edge_mode)

    @property
    def padding_size_before(self):
        """The padding before the source in x, y and channels (an ImageCoordinate).

        MPS: none (the paddingSizeBefore: of -initWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode:)
        """
        return _coordinate((<CNNPadNode*>self.native()).padding_size_before())

    @property
    def padding_size_after(self):
        """The padding after the source in x, y and channels (an ImageCoordinate).

        MPS: none (the paddingSizeAfter: of -initWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode:)
        """
        return _coordinate((<CNNPadNode*>self.native()).padding_size_after())

    @property
    def edge_mode(self):
        """How the padding is filled (an ImageEdgeMode).

        MPS: none (the edgeMode: of -initWithSource:paddingSizeBefore:paddingSizeAfter:edgeMode:)
        """
        return ImageEdgeMode(<int>(<CNNPadNode*>self.native()).edge_mode())

    @property
    def fill_value(self):
        """The value of the padding with edge_mode CONSTANT (default 0.0), read when a graph is made of the node.

        MPS: MPSNNPadNode.fillValue
        """
        return (<CNNPadNode*>self.native()).fill_value

    @fill_value.setter
    def fill_value(self, value):
        (<CNNPadNode*>self.native()).fill_value = float_argument(value, "fill_value")


cdef class NNPadGradientNode(NNGradientFilterNode):
    """NNPadGradientNode(source_gradient, source_image, gradient_state)
--

    The gradient node of an NNPadNode (NNPadGradient): ``source_image`` is the forward node's source,
    ``gradient_state`` its result state. As
    ``-[MPSNNPadGradientNode initWithSourceGradient:sourceImage:gradientState:]``.

    MPS: MPSNNPadGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        gradient_state.native()
        self._made(<shared_ptr[CFilterNode]>make_native[CNNPadGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``NNPadGradientNode(...)``: a new node.

        MPS: +[MPSNNPadGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)


cdef class NNReshapeNode(NNFilterNode):
    """NNReshapeNode(source, result_width, result_height, result_feature_channels)
--

    A reshape in a graph (NNReshape) to ``result_width`` x ``result_height`` x ``result_feature_channels``, which
    must hold the source's elements (ValueError when the graph encodes otherwise). As
    ``-[MPSNNReshapeNode initWithSource:resultWidth:resultHeight:resultFeatureChannels:]``.

    MPS: MPSNNReshapeNode
    """

    def __init__(self, source, result_width, result_height, result_feature_channels):
        self._made(<shared_ptr[CFilterNode]>make_native[CNNReshapeNode](
            _image_node_argument(source, "source").c, integer_argument(result_width, "result_width"),
            integer_argument(result_height, "result_height"),
            integer_argument(result_feature_channels, "result_feature_channels")),
            (source, result_width, result_height, result_feature_channels))

    @classmethod
    def node_with_source(cls, source, result_width, result_height, result_feature_channels):
        """The same as ``NNReshapeNode(...)``: a new node.

        MPS: +[MPSNNReshapeNode nodeWithSource:resultWidth:resultHeight:resultFeatureChannels:]
        """
        return cls(source, result_width, result_height, result_feature_channels)

    @property
    def result_width(self):
        """The width of the result.

        MPS: none (the resultWidth: of -initWithSource:resultWidth:resultHeight:resultFeatureChannels:)
        """
        return (<CNNReshapeNode*>self.native()).result_size().x

    @property
    def result_height(self):
        """The height of the result.

        MPS: none (the resultHeight: of -initWithSource:resultWidth:resultHeight:resultFeatureChannels:)
        """
        return (<CNNReshapeNode*>self.native()).result_size().y

    @property
    def result_feature_channels(self):
        """The feature channels of the result.

        MPS: none (the resultFeatureChannels: of -initWithSource:resultWidth:resultHeight:resultFeatureChannels:)
        """
        return (<CNNReshapeNode*>self.native()).result_size().channel


cdef class NNReshapeGradientNode(NNGradientFilterNode):
    """NNReshapeGradientNode(source_gradient, source_image, gradient_state)
--

    The gradient node of an NNReshapeNode (NNReshapeGradient): ``source_image`` is the forward node's source,
    ``gradient_state`` its result state. As
    ``-[MPSNNReshapeGradientNode initWithSourceGradient:sourceImage:gradientState:]``.

    MPS: MPSNNReshapeGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        gradient_state.native()
        self._made(<shared_ptr[CFilterNode]>make_native[CNNReshapeGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``NNReshapeGradientNode(...)``: a new node.

        MPS: +[MPSNNReshapeGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)

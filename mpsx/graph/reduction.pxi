# MPSNNUnaryReductionNode's spatial mean and feature channel sum nodes, and
# MPSNNReductionSpatialMeanGradientNode (native/include/mpsx/graph/reduction.h).

from mpsx.includes.graph.reduction cimport CNNReductionSpatialMeanGradientNode, CNNUnaryReductionNode
from mpsx.includes.kernels.reduction cimport ReductionKind

__all__ += ["NNUnaryReductionNode", "NNReductionSpatialMeanNode", "NNReductionFeatureChannelsSumNode",
            "NNReductionSpatialMeanGradientNode"]


cdef class NNUnaryReductionNode(NNFilterNode):
    """NNUnaryReductionNode(source)
--

    The base of the reduction nodes: a reduction of the part of ``clip_rect_source`` inside the source. Abstract
    (TypeError): make an NNReductionSpatialMeanNode or an NNReductionFeatureChannelsSumNode.

    MPS: MPSNNUnaryReductionNode
    """
    _mpsx_properties = ("clip_rect_source",)
    _kind = None

    def __init__(self, source):
        if type(self)._kind is None:
            raise TypeError("NNUnaryReductionNode is abstract; make an NNReductionSpatialMeanNode or an "
                            "NNReductionFeatureChannelsSumNode")
        self._made(<shared_ptr[CFilterNode]>make_native[CNNUnaryReductionNode](
            _image_node_argument(source, "source").c, <ReductionKind><int>type(self)._kind), (source,))

    @classmethod
    def node_with_source(cls, source):
        """The same as ``cls(source)``: a new node.

        MPS: +[MPSNNUnaryReductionNode nodeWithSource:]
        """
        return cls(source)

    cdef CNNUnaryReductionNode* _reduction(self) except NULL:
        return <CNNUnaryReductionNode*>self.native()

    @property
    def clip_rect_source(self):
        """The part of the source read, a Region (x, y, z, width, height, depth; x, y, width and height are read,
        clipped to the source), or None (the default) for all of it. ValueError for a negative size; it replaces
        the kernel's offset.

        MPS: MPSNNUnaryReductionNode.clipRectSource
        """
        return _region_object(self._reduction().clip_rect_source())

    @clip_rect_source.setter
    def clip_rect_source(self, value):
        self._reduction().set_clip_rect_source(_region_argument(value, "clip_rect_source"))


cdef class NNReductionSpatialMeanNode(NNUnaryReductionNode):
    """The mean over the pixels of ``clip_rect_source`` of each image and feature channel: a 1x1 result (global average
    pooling). Its gradient node is an NNReductionSpatialMeanGradientNode. As
    ``-[MPSNNReductionSpatialMeanNode initWithSource:]``.

    MPS: MPSNNReductionSpatialMeanNode
    """
    _kind = <int>ReductionKind.SpatialMean


cdef class NNReductionFeatureChannelsSumNode(NNUnaryReductionNode):
    """``weight`` times the sum over the feature channels of each pixel of ``clip_rect_source``: a one-channel result.
    MPS has no gradient node of it: ``training_graph`` through it raises TypeError. As
    ``-[MPSNNReductionFeatureChannelsSumNode initWithSource:]``.

    MPS: MPSNNReductionFeatureChannelsSumNode
    """
    _mpsx_properties = ("weight",)
    _kind = <int>ReductionKind.FeatureChannelsSum

    @property
    def weight(self):
        """The factor each feature channel is multiplied by before the sum (default 1.0; finite).

        MPS: MPSNNReductionFeatureChannelsSumNode.weight
        """
        return self._reduction().weight

    @weight.setter
    def weight(self, value):
        self._reduction().weight = parameter(b"MPSNNReductionFeatureChannelsSumNode", value, "weight")


cdef class NNReductionSpatialMeanGradientNode(NNGradientFilterNode):
    """NNReductionSpatialMeanGradientNode(source_gradient, source_image, gradient_state)
--

    The gradient node of an NNReductionSpatialMeanNode: the incoming 1x1 gradient divided by the pixel count, over
    the pixels the mean read, zero elsewhere. ``gradient_state`` must be the spatial mean node's result state and
    ``source_image`` its source.

    MPS: MPSNNReductionSpatialMeanGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        gradient_state.native()
        self._made(<shared_ptr[CFilterNode]>make_native[CNNReductionSpatialMeanGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``NNReductionSpatialMeanGradientNode(...)``: a new node.

        MPS: +[MPSNNReductionSpatialMeanGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)

# MPSCNNGroupNormalizationNode and MPSCNNGroupNormalizationGradientNode
# (native/include/mpsx/graph/group_normalization.h): trainable. The instance
# normalization nodes (graph/instance_normalization.pxi) derive from what
# this file's _NormalizationNode and _NormalizationGradientNode share.

from mpsx.includes.graph.group_normalization cimport CCNNGroupNormalizationGradientNode, CCNNGroupNormalizationNode

__all__ += ["CNNGroupNormalizationNode", "CNNGroupNormalizationGradientNode"]


cdef class _NormalizationNode(NNFilterNode, NNTrainableNode):
    """What the group and instance normalization nodes share.

    MPS: MPSCNNGroupNormalizationNode
    """

    @property
    def data_source(self):
        """The data source given.

        MPS: none (mpsx)
        """
        return self._constructor_arguments()[0][1]


cdef class _NormalizationGradientNode(NNGradientFilterNode, NNTrainableNode):
    """What the group and instance normalization gradient nodes share.

    MPS: MPSCNNGroupNormalizationGradientNode
    """


cdef class CNNGroupNormalizationNode(_NormalizationNode):
    """CNNGroupNormalizationNode(source, data_source)
--

    Group normalization in a graph (CNNGroupNormalization): ``data_source`` a GroupNormalizationWeights or any
    object implementing the CNNGroupNormalizationDataSource protocol. Trainable. As
    ``-[MPSCNNGroupNormalizationNode initWithSource:dataSource:]``.

    MPS: MPSCNNGroupNormalizationNode
    """

    def __init__(self, source, data_source):
        cdef shared_ptr[CImageNode] image = _image_node_argument(source, "source").c
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNGroupNormalizationNode](
            image, group_normalization_data_source_of(data_source, False)), (source, data_source))

    @classmethod
    def node_with_source(cls, source, data_source):
        """The same as ``CNNGroupNormalizationNode(...)``: a new node.

        MPS: +[MPSCNNGroupNormalizationNode nodeWithSource:dataSource:]
        """
        return cls(source, data_source)


cdef class CNNGroupNormalizationGradientNode(_NormalizationGradientNode):
    """CNNGroupNormalizationGradientNode(source_gradient, source_image, gradient_state)
--

    The gradient node of a CNNGroupNormalizationNode (``gradient_state`` its result state); updates its gamma and
    beta as the training style says. As
    ``-[MPSCNNGroupNormalizationGradientNode initWithSourceGradient:sourceImage:gradientState:]``.

    MPS: MPSCNNGroupNormalizationGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNGroupNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``CNNGroupNormalizationGradientNode(...)``: a new node.

        MPS: +[MPSCNNGroupNormalizationGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)

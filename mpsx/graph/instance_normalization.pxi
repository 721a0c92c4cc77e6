# MPSCNNInstanceNormalizationNode and MPSCNNInstanceNormalizationGradientNode
# (native/include/mpsx/graph/instance_normalization.h): the group
# normalization nodes with one channel per group (graph/group_normalization.pxi).

from mpsx.includes.graph.instance_normalization cimport (
    CCNNInstanceNormalizationGradientNode, CCNNInstanceNormalizationNode)

__all__ += ["CNNInstanceNormalizationNode", "CNNInstanceNormalizationGradientNode"]


cdef class CNNInstanceNormalizationNode(_NormalizationNode):
    """CNNInstanceNormalizationNode(source, data_source)
--

    Instance normalization in a graph (CNNInstanceNormalization): ``data_source`` an InstanceNormalizationWeights or
    any object implementing the CNNInstanceNormalizationDataSource protocol. Trainable. As
    ``-[MPSCNNInstanceNormalizationNode initWithSource:dataSource:]``.

    MPS: MPSCNNInstanceNormalizationNode
    """

    def __init__(self, source, data_source):
        cdef shared_ptr[CImageNode] image = _image_node_argument(source, "source").c
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNInstanceNormalizationNode](
            image, group_normalization_data_source_of(data_source, True)), (source, data_source))

    @classmethod
    def node_with_source(cls, source, data_source):
        """The same as ``CNNInstanceNormalizationNode(...)``: a new node.

        MPS: +[MPSCNNInstanceNormalizationNode nodeWithSource:dataSource:]
        """
        return cls(source, data_source)


cdef class CNNInstanceNormalizationGradientNode(_NormalizationGradientNode):
    """CNNInstanceNormalizationGradientNode(source_gradient, source_image, gradient_state)
--

    The gradient node of a CNNInstanceNormalizationNode (``gradient_state`` its result state); updates its gamma and
    beta as the training style says. As
    ``-[MPSCNNInstanceNormalizationGradientNode initWithSourceGradient:sourceImage:gradientState:]``.

    MPS: MPSCNNInstanceNormalizationGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNInstanceNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``CNNInstanceNormalizationGradientNode(...)``: a new node.

        MPS: +[MPSCNNInstanceNormalizationGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)

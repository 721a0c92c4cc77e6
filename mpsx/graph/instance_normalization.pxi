# MPSCNNInstanceNormalizationNode and MPSCNNInstanceNormalizationGradientNode
# (native/include/mpsx/graph/instance_normalization.h): the group
# normalization nodes with one channel per group (graph/group_normalization.pxi).

from mpsx.includes.graph.instance_normalization cimport (
    CCNNInstanceNormalizationGradientNode, CCNNInstanceNormalizationNode)

__all__ += ["CNNInstanceNormalizationNode", "CNNInstanceNormalizationGradientNode"]


cdef class CNNInstanceNormalizationNode(_NormalizationNode):
    """MPSCNNInstanceNormalizationNode(source, data_source): data_source an InstanceNormalizationWeights or any
    object implementing the CNNInstanceNormalizationDataSource protocol."""

    def __init__(self, source, data_source):
        cdef shared_ptr[CImageNode] image = _image_node_argument(source, "source").c
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNInstanceNormalizationNode](
            image, group_normalization_data_source_of(data_source, True)), (source, data_source))

    @classmethod
    def node_with_source(cls, source, data_source):
        return cls(source, data_source)


cdef class CNNInstanceNormalizationGradientNode(_NormalizationGradientNode):
    """MPSCNNInstanceNormalizationGradientNode(source_gradient, source_image, gradient_state): gradient_state the
    result state of a CNNInstanceNormalizationNode; updates its gamma and beta as the training style says."""

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNInstanceNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        return cls(source_gradient, source_image, gradient_state)

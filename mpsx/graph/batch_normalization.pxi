# MPSCNNBatchNormalizationNode and MPSCNNBatchNormalizationGradientNode
# (native/include/mpsx/graph/batch_normalization.h): trainable.

from mpsx.includes.graph.batch_normalization cimport (
    BatchNormalizationFlags, CCNNBatchNormalizationGradientNode, CCNNBatchNormalizationNode)

__all__ += ["CNNBatchNormalizationFlags", "CNNBatchNormalizationNode", "CNNBatchNormalizationGradientNode"]


class CNNBatchNormalizationFlags(enum.IntEnum):
    """When a CNNBatchNormalizationNode computes batch statistics: CALCULATE_STATISTICS_AUTOMATIC (DEFAULT) where the
    graph uses its result state (training), CALCULATE_STATISTICS_ALWAYS, or CALCULATE_STATISTICS_NEVER (the data
    source's mean and variance).

    MPS: MPSCNNBatchNormalizationFlags
    """
    CALCULATE_STATISTICS_AUTOMATIC = 0  # where the graph uses the result state (training)
    DEFAULT = 0
    CALCULATE_STATISTICS_ALWAYS = 1
    CALCULATE_STATISTICS_NEVER = 2  # the data source's mean and variance


cdef class CNNBatchNormalizationNode(NNFilterNode, NNTrainableNode):
    """CNNBatchNormalizationNode(source, data_source)
--

    Batch normalization in a graph (CNNBatchNormalization): ``data_source`` a BatchNormalizationWeights or any
    object implementing the CNNBatchNormalizationDataSource protocol. With ``flags`` CALCULATE_STATISTICS_AUTOMATIC
    (the default) the node normalizes with the statistics of the batch where the graph uses its result state
    (training), and with the data source's mean and variance otherwise. Trainable. As
    ``-[MPSCNNBatchNormalizationNode initWithSource:dataSource:]``.

    MPS: MPSCNNBatchNormalizationNode
    """
    _mpsx_properties = ("flags",)
    def __init__(self, source, data_source):
        cdef shared_ptr[CImageNode] image = _image_node_argument(source, "source").c
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNBatchNormalizationNode](
            image, batch_normalization_data_source_of(data_source)), (source, data_source))

    @classmethod
    def node_with_source(cls, source, data_source):
        """The same as ``CNNBatchNormalizationNode(...)``: a new node.

        MPS: +[MPSCNNBatchNormalizationNode nodeWithSource:dataSource:]
        """
        return cls(source, data_source)

    @property
    def data_source(self):
        """The data source given.

        MPS: none (mpsx)
        """
        return self._constructor_arguments()[0][1]

    @property
    def flags(self):
        """When the node computes batch statistics, a CNNBatchNormalizationFlags (default
        CALCULATE_STATISTICS_AUTOMATIC); ValueError for another value.

        MPS: MPSCNNBatchNormalizationNode.flags
        """
        return CNNBatchNormalizationFlags(<uint32_t>(<CCNNBatchNormalizationNode*>self.native()).flags)

    @flags.setter
    def flags(self, value):
        cdef int64_t v = integer_argument(value, "flags")
        if v not in (0, 1, 2):
            raise ValueError(f"flags must be a CNNBatchNormalizationFlags (0, 1 or 2), given {v}")
        (<CCNNBatchNormalizationNode*>self.native()).flags = <BatchNormalizationFlags><uint32_t>v


cdef class CNNBatchNormalizationGradientNode(NNGradientFilterNode, NNTrainableNode):
    """CNNBatchNormalizationGradientNode(source_gradient, source_image, gradient_state)
--

    The gradient node of a CNNBatchNormalizationNode (``gradient_state`` its result state). Runs the statistics
    gradient over the whole batch, then the gradient, and updates the forward node's values as its training style
    says. As ``-[MPSCNNBatchNormalizationGradientNode initWithSourceGradient:sourceImage:gradientState:]``.

    MPS: MPSCNNBatchNormalizationGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNBatchNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``CNNBatchNormalizationGradientNode(...)``: a new node.

        MPS: +[MPSCNNBatchNormalizationGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)

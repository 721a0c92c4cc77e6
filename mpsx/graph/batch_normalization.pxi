# MPSCNNBatchNormalizationNode and MPSCNNBatchNormalizationGradientNode
# (native/include/mpsx/graph/batch_normalization.h): trainable.

from mpsx.includes.graph.batch_normalization cimport (
    BatchNormalizationFlags, CCNNBatchNormalizationGradientNode, CCNNBatchNormalizationNode)

__all__ += ["CNNBatchNormalizationFlags", "CNNBatchNormalizationNode", "CNNBatchNormalizationGradientNode"]


class CNNBatchNormalizationFlags(enum.IntEnum):
    """MPSCNNBatchNormalizationFlags: when a CNNBatchNormalizationNode computes batch statistics."""
    CALCULATE_STATISTICS_AUTOMATIC = 0  # where the graph uses the result state (training)
    DEFAULT = 0
    CALCULATE_STATISTICS_ALWAYS = 1
    CALCULATE_STATISTICS_NEVER = 2  # the data source's mean and variance


cdef class CNNBatchNormalizationNode(NNFilterNode):
    """MPSCNNBatchNormalizationNode(source, data_source): data_source a BatchNormalizationWeights or any object
    implementing the CNNBatchNormalizationDataSource protocol. With flags CALCULATE_STATISTICS_AUTOMATIC (the
    default) the node normalizes with the statistics of the batch where the graph uses its result state
    (training), and with the data source's mean and variance otherwise."""
    _mpsx_properties = ("flags", "training_style")
    def __init__(self, source, data_source):
        cdef shared_ptr[CImageNode] image = _image_node_argument(source, "source").c
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNBatchNormalizationNode](
            image, batch_normalization_data_source_of(data_source)), (source, data_source))

    @classmethod
    def node_with_source(cls, source, data_source):
        return cls(source, data_source)

    @property
    def data_source(self):
        """The data source given."""
        return self._made_with()[0][1]

    @property
    def flags(self):
        """CNNBatchNormalizationFlags (default CALCULATE_STATISTICS_AUTOMATIC)."""
        return CNNBatchNormalizationFlags(<uint32_t>(<CCNNBatchNormalizationNode*>self.native()).flags)

    @flags.setter
    def flags(self, value):
        cdef int64_t v = integer_argument(value, "flags")
        if v not in (0, 1, 2):
            raise ValueError(f"flags must be a CNNBatchNormalizationFlags (0, 1 or 2), given {v}")
        (<CCNNBatchNormalizationNode*>self.native()).flags = <BatchNormalizationFlags><uint32_t>v

    @property
    def training_style(self):
        """MPSNNTrainingStyle: GPU (default) runs each of the data source's updates (gamma and beta, mean and
        variance) on the command buffer where it can and on the host otherwise, CPU its host updates, NONE
        none; the gradient nodes made from this node take it."""
        return _get_training_style(self)

    @training_style.setter
    def training_style(self, value):
        _set_training_style(self, value)


cdef class CNNBatchNormalizationGradientNode(NNGradientFilterNode):
    """MPSCNNBatchNormalizationGradientNode(source_gradient, source_image, gradient_state): gradient_state the
    result state of a CNNBatchNormalizationNode. Runs the statistics gradient over the whole batch, then the
    gradient, and updates the forward node's values as its training style says."""
    _mpsx_properties = ("training_style",)

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNBatchNormalizationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        return cls(source_gradient, source_image, gradient_state)

    @property
    def training_style(self):
        """MPSNNTrainingStyle, taken from the forward node when made from it."""
        return _get_training_style(self)

    @training_style.setter
    def training_style(self, value):
        _set_training_style(self, value)

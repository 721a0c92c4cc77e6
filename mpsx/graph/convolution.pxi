# MPSCNNConvolutionNode, MPSCNNFullyConnectedNode and their gradient nodes
# (native/include/mpsx/graph/convolution.h): trainable.

from mpsx.includes.graph.convolution cimport CCNNConvolutionGradientNode, CCNNConvolutionNode

__all__ += ["CNNConvolutionNode", "CNNFullyConnectedNode", "CNNConvolutionGradientNode",
            "CNNFullyConnectedGradientNode"]


cdef class CNNConvolutionNode(NNFilterNode):
    """MPSCNNConvolutionNode(source, weights): weights a ConvolutionWeights or any object implementing
    the CNNConvolutionDataSource protocol."""
    _mpsx_properties = ("training_style", "accumulator_precision")
    _fully_connected = False

    def __init__(self, source, weights):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNConvolutionNode](
            _image_node_argument(source, "source").c, convolution_data_source_of(weights),
            <cbool>type(self)._fully_connected), (source, weights))

    @property
    def weights(self):
        return self._made_with()[0][1]

    @property
    def training_style(self):
        """MPSNNTrainingStyle: GPU (default) updates the weights on the command buffer where the data source
        can, CPU calls its host update, NONE leaves them; the gradient nodes made from this node take it."""
        return _get_training_style(self)

    @training_style.setter
    def training_style(self, value):
        _set_training_style(self, value)

    @property
    def convolution_gradient_state(self):
        """The result state, a CNNConvolutionGradientStateNode."""
        return self.result_state

    @property
    def accumulator_precision(self):
        return "half" if (<CCNNConvolutionNode*>self.native()).accumulator_precision == AccumulatorPrecision.Half \
            else "float"

    @accumulator_precision.setter
    def accumulator_precision(self, value):
        if value not in ("half", "float"):
            raise ValueError(f"accumulator_precision must be 'half' or 'float', given {value!r}")
        (<CCNNConvolutionNode*>self.native()).accumulator_precision = \
            AccumulatorPrecision.Half if value == "half" else AccumulatorPrecision.Float


cdef class CNNFullyConnectedNode(CNNConvolutionNode):
    """MPSCNNFullyConnectedNode(source, weights)."""
    _fully_connected = True


cdef class CNNConvolutionGradientNode(NNGradientFilterNode):
    """MPSCNNConvolutionGradientNode(source_gradient, source_image, convolution_gradient_state, weights=None):
    weights None takes the forward convolution's."""
    _mpsx_properties = ("training_style",)
    _fully_connected = False

    def __init__(self, source_gradient, source_image, NNStateNode convolution_gradient_state not None,
                 weights=None):
        cdef shared_ptr[CConvolutionDataSource] source
        if weights is not None:
            source = convolution_data_source_of(weights)
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNConvolutionGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, convolution_gradient_state.c, source,
            <cbool>type(self)._fully_connected), (source_gradient, source_image, convolution_gradient_state, weights))

    @property
    def training_style(self):
        """MPSNNTrainingStyle: GPU (default) updates the weights on the command buffer where the data source
        can, CPU calls its host update, NONE leaves them; the gradient nodes made from this node take it."""
        return _get_training_style(self)

    @training_style.setter
    def training_style(self, value):
        _set_training_style(self, value)


cdef class CNNFullyConnectedGradientNode(CNNConvolutionGradientNode):
    """MPSCNNFullyConnectedGradientNode."""
    _fully_connected = True

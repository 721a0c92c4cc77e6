# MPSCNNConvolutionNode, MPSCNNFullyConnectedNode and their gradient nodes
# (native/include/mpsx/graph/convolution.h): trainable.

from mpsx.includes.graph.convolution cimport CCNNConvolutionGradientNode, CCNNConvolutionNode

__all__ += ["CNNConvolutionNode", "CNNFullyConnectedNode", "CNNConvolutionGradientNode",
            "CNNFullyConnectedGradientNode"]


cdef class CNNConvolutionNode(NNFilterNode, NNTrainableNode):
    """CNNConvolutionNode(source, weights)
--

    A convolution of a graph: ``weights`` is a ConvolutionWeights or any object implementing the
    CNNConvolutionDataSource protocol. Trainable. As ``-[MPSCNNConvolutionNode initWithSource:weights:]``.

    MPS: MPSCNNConvolutionNode
    """
    _mpsx_properties = ("accumulator_precision",)
    _fully_connected = False

    def __init__(self, source, weights):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNConvolutionNode](
            _image_node_argument(source, "source").c, convolution_data_source_of(weights),
            <cbool>type(self)._fully_connected), (source, weights))

    @classmethod
    def node_with_source(cls, source, weights):
        """The same as ``CNNConvolutionNode(...)``: a new node.

        MPS: +[MPSCNNConvolutionNode nodeWithSource:weights:]
        """
        return cls(source, weights)

    @property
    def weights(self):
        """The data source given.

        MPS: none (mpsx)
        """
        return self._constructor_arguments()[0][1]

    @property
    def convolution_gradient_state(self):
        """The result state, a CNNConvolutionGradientStateNode.

        MPS: MPSCNNConvolutionNode.convolutionGradientState
        """
        return self.result_state

    @property
    def accumulator_precision(self):
        """The precision of the sums, an NNConvolutionAccumulatorPrecisionOption: FLOAT (default) or HALF (the
        setter also takes ints, "half" and "float"; ValueError otherwise).

        MPS: MPSCNNConvolutionNode.accumulatorPrecision
        """
        return NNConvolutionAccumulatorPrecisionOption(<uint32_t>(<CCNNConvolutionNode*>self.native()).accumulator_precision)

    @accumulator_precision.setter
    def accumulator_precision(self, value):
        (<CCNNConvolutionNode*>self.native()).accumulator_precision = accumulator_precision_of(value, "accumulator_precision")


cdef class CNNFullyConnectedNode(CNNConvolutionNode):
    """A fully connected layer of a graph (CNNFullyConnected), made as CNNConvolutionNode. As
    ``-[MPSCNNFullyConnectedNode initWithSource:weights:]``.

    MPS: MPSCNNFullyConnectedNode
    """
    _fully_connected = True


cdef class CNNConvolutionGradientNode(NNGradientFilterNode, NNTrainableNode):
    """CNNConvolutionGradientNode(source_gradient, source_image, convolution_gradient_state, weights=None)
--

    The gradient node of a CNNConvolutionNode; ``weights`` None takes the forward convolution's. As
    ``-[MPSCNNConvolutionGradientNode initWithSourceGradient:sourceImage:convolutionGradientState:weights:]``.

    MPS: MPSCNNConvolutionGradientNode
    """
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

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, convolution_gradient_state, weights):
        """The same as ``CNNConvolutionGradientNode(...)``: a new node.

        MPS: +[MPSCNNConvolutionGradientNode nodeWithSourceGradient:sourceImage:convolutionGradientState:weights:]
        """
        return cls(source_gradient, source_image, convolution_gradient_state, weights)


cdef class CNNFullyConnectedGradientNode(CNNConvolutionGradientNode):
    """The gradient node of a CNNFullyConnectedNode. As
    ``-[MPSCNNFullyConnectedGradientNode initWithSourceGradient:sourceImage:convolutionGradientState:weights:]``.

    MPS: MPSCNNFullyConnectedGradientNode
    """
    _fully_connected = True

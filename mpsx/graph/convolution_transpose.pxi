# MPSCNNConvolutionTransposeNode, its gradient state node and gradient node
# (native/include/mpsx/graph/convolution_transpose.h): trainable.

from mpsx.includes.graph.convolution_transpose cimport (
    CCNNConvolutionTransposeGradientNode, CCNNConvolutionTransposeNode)

__all__ += ["CNNConvolutionTransposeNode", "CNNConvolutionTransposeGradientNode",
            "CNNConvolutionTransposeGradientStateNode"]


cdef class CNNConvolutionTransposeGradientStateNode(CNNConvolutionGradientStateNode):
    """The result state of a convolution transpose node, read by its gradient node.

    MPS: MPSCNNConvolutionTransposeGradientStateNode
    """


cdef class CNNConvolutionTransposeNode(NNFilterNode, NNTrainableNode):
    """CNNConvolutionTransposeNode(source, convolution_gradient_state, weights)
--

    A convolution transpose of a graph: ``weights`` a ConvolutionWeights or any CNNConvolutionDataSource;
    ``convolution_gradient_state`` None, or the result state of the convolution node this transpose undoes, whose
    source size (and mirrored windows) the result takes. Not a subclass of CNNConvolutionNode here (MPS's is).
    Trainable. As ``-[MPSCNNConvolutionTransposeNode initWithSource:convolutionGradientState:weights:]``.

    MPS: MPSCNNConvolutionTransposeNode
    """
    _mpsx_properties = ("accumulator_precision",)

    def __init__(self, source, convolution_gradient_state, weights):
        cdef shared_ptr[CStateNode] state
        if convolution_gradient_state is not None:
            if not isinstance(convolution_gradient_state, NNStateNode):
                raise TypeError(f"convolution_gradient_state: expected a CNNConvolutionGradientStateNode or None, "
                                f"given {type(convolution_gradient_state).__name__}")
            (<NNStateNode>convolution_gradient_state).native()
            state = (<NNStateNode>convolution_gradient_state).c
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNConvolutionTransposeNode](
            _image_node_argument(source, "source").c, state, convolution_data_source_of(weights)),
            (source, convolution_gradient_state, weights))

    @classmethod
    def node_with_source(cls, source, convolution_gradient_state, weights):
        """The same as ``CNNConvolutionTransposeNode(...)``: a new node.

        MPS: +[MPSCNNConvolutionTransposeNode nodeWithSource:convolutionGradientState:weights:]
        """
        return cls(source, convolution_gradient_state, weights)

    @property
    def weights(self):
        """The data source given.

        MPS: none (mpsx)
        """
        return self._constructor_arguments()[0][2]

    @property
    def accumulator_precision(self):
        """The precision of the sums, an NNConvolutionAccumulatorPrecisionOption: FLOAT (default) or HALF (the
        setter also takes ints, "half" and "float"; ValueError otherwise).

        MPS: MPSCNNConvolutionNode.accumulatorPrecision
        """
        return NNConvolutionAccumulatorPrecisionOption(<uint32_t>(<CCNNConvolutionTransposeNode*>self.native()).accumulator_precision)

    @accumulator_precision.setter
    def accumulator_precision(self, value):
        (<CCNNConvolutionTransposeNode*>self.native()).accumulator_precision = accumulator_precision_of(value, "accumulator_precision")


cdef class CNNConvolutionTransposeGradientNode(NNGradientFilterNode, NNTrainableNode):
    """CNNConvolutionTransposeGradientNode(source_gradient, source_image, convolution_transpose_gradient_state,
        weights=None)
--

    The gradient node of a CNNConvolutionTransposeNode; ``weights`` None takes the forward transpose's. As
    ``-[MPSCNNConvolutionTransposeGradientNode initWithSourceGradient:sourceImage:convolutionTransposeGradientState:weights:]``.

    MPS: MPSCNNConvolutionTransposeGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode convolution_transpose_gradient_state not None,
                 weights=None):
        cdef shared_ptr[CConvolutionDataSource] source
        if weights is not None:
            source = convolution_data_source_of(weights)
        convolution_transpose_gradient_state.native()
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNConvolutionTransposeGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, convolution_transpose_gradient_state.c, source),
            (source_gradient, source_image, convolution_transpose_gradient_state, weights))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, convolution_transpose_gradient_state, weights):
        """The same as ``CNNConvolutionTransposeGradientNode(...)``: a new node.

        MPS: +[MPSCNNConvolutionTransposeGradientNode nodeWithSourceGradient:sourceImage:convolutionTransposeGradientState:weights:]
        """
        return cls(source_gradient, source_image, convolution_transpose_gradient_state, weights)

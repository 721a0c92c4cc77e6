# MPSNNGramMatrixCalculationNode, MPSNNGramMatrixCalculationGradientNode and the MPSNNGramMatrixCallback protocol
# (native/include/mpsx/graph/gram_matrix_calculation.h).

from mpsx.includes.graph.gram_matrix_calculation cimport (
    CGramMatrixCallback, CNNGramMatrixCalculationGradientNode as CGramMatrixGradientNode,
    CNNGramMatrixCalculationNode as CGramMatrixNode, make_python_gram_matrix_callback,
    python_gram_matrix_callback_object)

__all__ += ["NNGramMatrixCalculationNode", "NNGramMatrixCalculationGradientNode", "NNGramMatrixCallback"]


class NNGramMatrixCallback:
    """The alpha callback of an NNGramMatrixCalculationNode: subclass it and implement
    ``alpha_for_source_image(source_image, destination_image)`` -> float, the alpha of the node's kernel at each
    encode of the graph, called with the batch's source image and the destination about to be written. A subclass is
    saved with its graph through its attributes, as data sources are.

    MPS: MPSNNGramMatrixCallback
    """

    def alpha_for_source_image(self, source_image, destination_image):
        """The alpha for this encode; a subclass must implement it (NotImplementedError here).

        MPS: -[MPSNNGramMatrixCallback alphaForSourceImage:destinationImage:]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement alpha_for_source_image()")


cdef shared_ptr[CGramMatrixCallback] _gram_matrix_callback_argument(object value) except *:
    cdef shared_ptr[CGramMatrixCallback] none
    if value is None:
        return none
    if not callable(getattr(value, "alpha_for_source_image", None)):
        raise TypeError(f"property_call_back: expected None or an object with an "
                        f"alpha_for_source_image(source_image, destination_image) method, "
                        f"given {type(value).__name__}")
    return make_python_gram_matrix_callback(value, _wrap_loss_callback_image)


cdef class NNGramMatrixCalculationNode(NNFilterNode):
    """NNGramMatrixCalculationNode(source, alpha=1.0)
--

    The Gram matrix of each source image in a graph (NNGramMatrixCalculation): C x 1 pixels of C feature channels
    for C source channels. A ``property_call_back`` sets its alpha at each encode; the gradient node made from it
    uses the alpha of the forward encode, which the result state carries. ValueError for a NaN or infinite alpha. As
    ``-[MPSNNGramMatrixCalculationNode initWithSource:alpha:]``; ``-initWithSource:`` is ``alpha=1.0``.

    MPS: MPSNNGramMatrixCalculationNode
    """
    _mpsx_properties = ("property_call_back",)

    def __init__(self, source, alpha=1.0):
        self._made(<shared_ptr[CFilterNode]>make_native[CGramMatrixNode](
            _image_node_argument(source, "source").c, parameter(b"MPSNNGramMatrixCalculationNode", alpha, "alpha")),
            (source, alpha))

    @classmethod
    def node_with_source(cls, source, alpha=1.0):
        """The same as ``NNGramMatrixCalculationNode(...)``: a new node. MPS's factories with and without alpha are
        this one method.

        MPS: +[MPSNNGramMatrixCalculationNode nodeWithSource:alpha:], +[MPSNNGramMatrixCalculationNode nodeWithSource:]
        """
        return cls(source, alpha)

    cdef CGramMatrixNode* _gram(self) except NULL:
        return <CGramMatrixNode*>self.native()

    @property
    def alpha(self):
        """The scale of the result (default 1.0) where no ``property_call_back`` sets it.

        MPS: MPSNNGramMatrixCalculationNode.alpha
        """
        return self._gram().alpha()

    @property
    def property_call_back(self):
        """None, or an object whose ``alpha_for_source_image(source_image, destination_image)`` gives the kernel's
        alpha at each encode of the graph (an NNGramMatrixCallback). TypeError for an object without that method; at
        encode, the exception the method raises, TypeError for a result that is not a number and ValueError for NaN
        or an infinity, before the node's kernel is encoded.

        MPS: MPSNNGramMatrixCalculationNode.propertyCallBack
        """
        return <object>python_gram_matrix_callback_object(self._gram().property_call_back)

    @property_call_back.setter
    def property_call_back(self, value):
        self._gram().property_call_back = _gram_matrix_callback_argument(value)
        invalidate_captures()  # read at each encode: graphs record theirs again (NNGraph.capture_encodes)


cdef class NNGramMatrixCalculationGradientNode(NNGradientFilterNode):
    """NNGramMatrixCalculationGradientNode(source_gradient, source_image, gradient_state, alpha=1.0)
--

    The gradient node of an NNGramMatrixCalculationNode (NNGramMatrixCalculationGradient): the gradient of the
    forward source, with the alpha of the forward encode from ``gradient_state``, the forward node's result state;
    ``source_image`` must be the forward node's source. ValueError for a NaN or infinite alpha. As
    ``-[MPSNNGramMatrixCalculationGradientNode initWithSourceGradient:sourceImage:gradientState:alpha:]``;
    ``-initWithSourceGradient:sourceImage:gradientState:`` is ``alpha=1.0``.

    MPS: MPSNNGramMatrixCalculationGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, alpha=1.0):
        gradient_state.native()
        self._made(<shared_ptr[CFilterNode]>make_native[CGramMatrixGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c,
            parameter(b"MPSNNGramMatrixCalculationGradientNode", alpha, "alpha")),
            (source_gradient, source_image, gradient_state, alpha))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, alpha=1.0):
        """The same as ``NNGramMatrixCalculationGradientNode(...)``: a new node. MPS's factories with and without
        alpha are this one method.

        MPS: +[MPSNNGramMatrixCalculationGradientNode nodeWithSourceGradient:sourceImage:gradientState:alpha:], +[MPSNNGramMatrixCalculationGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state, alpha)

    @property
    def alpha(self):
        """The alpha the node was made with; its encodes use the forward encode's, from the gradient state.

        MPS: MPSNNGramMatrixCalculationGradientNode.alpha
        """
        return (<CGramMatrixGradientNode*>self.native()).alpha()

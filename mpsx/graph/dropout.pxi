# MPSCNNDropoutNode and MPSCNNDropoutGradientNode (native/include/mpsx/graph/dropout.h).

from mpsx.includes.graph.dropout cimport CCNNDropoutGradientNode, CCNNDropoutNode

__all__ += ["CNNDropoutNode", "CNNDropoutGradientNode"]


cdef tuple _mask_stride(const CDropoutDescriptor& d):
    return (d.mask_stride_x, d.mask_stride_y, d.mask_stride_z)


cdef class CNNDropoutNode(NNFilterNode):
    """CNNDropoutNode(source, keep_probability=0.5, seed=0, mask_stride_in_pixels=(1, 1, 1))
--

    Dropout in a graph (CNNDropout): ``x / keep_probability`` where the mask keeps the value, else 0, each
    element of each image independently, with new masks at every encode of the graph (drawn as a CNNDropout
    with this seed draws them). The mask is the state's (``result_state``). As
    ``-[MPSCNNDropoutNode initWithSource:keepProbability:seed:maskStrideInPixels:]``.

    MPS: MPSCNNDropoutNode
    """

    def __init__(self, source, keep_probability=0.5, seed=0, mask_stride_in_pixels=(1, 1, 1)):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNDropoutNode](
            _image_node_argument(source, "source").c,
            _dropout_descriptor(keep_probability, seed, mask_stride_in_pixels)),
            (source, keep_probability, seed, mask_stride_in_pixels))

    @classmethod
    def node_with_source(cls, source, keep_probability=0.5, seed=0, mask_stride_in_pixels=(1, 1, 1)):
        """The same as ``CNNDropoutNode(...)``: a new node.

        MPS: +[MPSCNNDropoutNode nodeWithSource:keepProbability:seed:maskStrideInPixels:]
        """
        return cls(source, keep_probability, seed, mask_stride_in_pixels)

    @property
    def keep_probability(self):
        """The probability that a value is kept.

        MPS: MPSCNNDropoutNode.keepProbability
        """
        return (<CCNNDropoutNode*>self.native()).descriptor().keep_probability

    @property
    def seed(self):
        """The seed of the mask's random numbers.

        MPS: MPSCNNDropoutNode.seed
        """
        return (<CCNNDropoutNode*>self.native()).descriptor().seed

    @property
    def mask_stride_in_pixels(self):
        """The mask's strides (x, y, z), each 0 (broadcast) or 1.

        MPS: MPSCNNDropoutNode.maskStrideInPixels
        """
        return _mask_stride((<CCNNDropoutNode*>self.native()).descriptor())


cdef class CNNDropoutGradientNode(NNGradientFilterNode):
    """CNNDropoutGradientNode(source_gradient, source_image, gradient_state, keep_probability, seed,
        mask_stride_in_pixels)
--

    The gradient node of a CNNDropoutNode: the incoming gradient through the forward node's mask, scaled by
    ``1 / keep_probability``. ``keep_probability`` and ``mask_stride_in_pixels`` must be the forward node's.

    MPS: MPSCNNDropoutGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, keep_probability, seed,
                 mask_stride_in_pixels):
        gradient_state.native()
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNDropoutGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c,
            _dropout_descriptor(keep_probability, seed, mask_stride_in_pixels)),
            (source_gradient, source_image, gradient_state, keep_probability, seed, mask_stride_in_pixels))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, keep_probability, seed,
                                  mask_stride_in_pixels):
        """The same as ``CNNDropoutGradientNode(...)``: a new node.

        MPS: +[MPSCNNDropoutGradientNode nodeWithSourceGradient:sourceImage:gradientState:keepProbability:seed:maskStrideInPixels:]
        """
        return cls(source_gradient, source_image, gradient_state, keep_probability, seed, mask_stride_in_pixels)

    @property
    def keep_probability(self):
        """The probability that a value is kept.

        MPS: MPSCNNDropoutGradientNode.keepProbability
        """
        return (<CCNNDropoutGradientNode*>self.native()).descriptor().keep_probability

    @property
    def seed(self):
        """The seed of the mask's random numbers.

        MPS: MPSCNNDropoutGradientNode.seed
        """
        return (<CCNNDropoutGradientNode*>self.native()).descriptor().seed

    @property
    def mask_stride_in_pixels(self):
        """The mask's strides (x, y, z), each 0 (broadcast) or 1.

        MPS: MPSCNNDropoutGradientNode.maskStrideInPixels
        """
        return _mask_stride((<CCNNDropoutGradientNode*>self.native()).descriptor())

# MPSCNNDropoutNode and MPSCNNDropoutGradientNode (native/include/mpsx/graph/dropout.h).

from mpsx.includes.graph.dropout cimport CCNNDropoutGradientNode, CCNNDropoutNode

__all__ += ["CNNDropoutNode", "CNNDropoutGradientNode"]


cdef tuple _mask_stride(const CDropoutDescriptor& d):
    return (d.mask_stride_x, d.mask_stride_y, d.mask_stride_z)


cdef class CNNDropoutNode(NNFilterNode):
    """MPSCNNDropoutNode(source, keep_probability=0.5, seed=0, mask_stride_in_pixels=(1, 1, 1)): x /
    keep_probability where the mask keeps the element, else 0. The mask is the state's (result_state)."""

    def __init__(self, source, keep_probability=0.5, seed=0, mask_stride_in_pixels=(1, 1, 1)):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNDropoutNode](
            _image_node_argument(source, "source").c,
            _dropout_descriptor(keep_probability, seed, mask_stride_in_pixels)),
            (source, keep_probability, seed, mask_stride_in_pixels))

    @classmethod
    def node_with_source(cls, source, keep_probability=0.5, seed=0, mask_stride_in_pixels=(1, 1, 1)):
        return cls(source, keep_probability, seed, mask_stride_in_pixels)

    @property
    def keep_probability(self):
        return (<CCNNDropoutNode*>self.native()).descriptor().keep_probability

    @property
    def seed(self):
        return (<CCNNDropoutNode*>self.native()).descriptor().seed

    @property
    def mask_stride_in_pixels(self):
        return _mask_stride((<CCNNDropoutNode*>self.native()).descriptor())


cdef class CNNDropoutGradientNode(NNGradientFilterNode):
    """MPSCNNDropoutGradientNode(source_gradient, source_image, gradient_state, keep_probability, seed,
    mask_stride_in_pixels): the incoming gradient through the forward node's mask, scaled by 1 /
    keep_probability. keep_probability and mask_stride_in_pixels must be the forward node's."""

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, keep_probability, seed,
                 mask_stride_in_pixels):
        gradient_state.native()
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNDropoutGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c,
            _dropout_descriptor(keep_probability, seed, mask_stride_in_pixels)),
            (source_gradient, source_image, gradient_state, keep_probability, seed, mask_stride_in_pixels))

    @property
    def keep_probability(self):
        return (<CCNNDropoutGradientNode*>self.native()).descriptor().keep_probability

    @property
    def seed(self):
        return (<CCNNDropoutGradientNode*>self.native()).descriptor().seed

    @property
    def mask_stride_in_pixels(self):
        return _mask_stride((<CCNNDropoutGradientNode*>self.native()).descriptor())

# MPSNNScaleNode, MPSNNBilinearScaleNode, MPSNNLanczosScaleNode and the MPSImageTransformProvider protocol
# (native/include/mpsx/graph/scale.h).

from mpsx.includes.graph.scale cimport (
    CImageTransformProvider, CNNScaleNode, make_python_transform_provider, python_transform_provider_object)
from mpsx.includes.kernels.scale cimport ScaleKind

__all__ += ["ScaleTransform", "ImageTransformProvider", "NNScaleNode", "NNBilinearScaleNode", "NNLanczosScaleNode"]


ScaleTransform = namedtuple("ScaleTransform", "scale_x scale_y translate_x translate_y", defaults=(0.0, 0.0),
                            module="mpsx")
ScaleTransform.__doc__ = """How a scale node maps its source to its result: destination position = source position
* scale + translate on each axis, in pixels from the images' top left corners (pixel edges, not centres: pixel i
spans i to i + 1), the translation in destination pixels. Scales are finite and positive, translations finite.

MPS: MPSScaleTransform
"""

for _field, _doc in ((ScaleTransform.scale_x, "The horizontal scale factor.\n\nMPS: MPSScaleTransform.scaleX"),
                     (ScaleTransform.scale_y, "The vertical scale factor.\n\nMPS: MPSScaleTransform.scaleY"),
                     (ScaleTransform.translate_x,
                      "The horizontal translation, in destination pixels.\n\nMPS: MPSScaleTransform.translateX"),
                     (ScaleTransform.translate_y,
                      "The vertical translation, in destination pixels.\n\nMPS: MPSScaleTransform.translateY")):
    _field.__doc__ = _doc


class ImageTransformProvider:
    """The transform provider of a scale node: subclass it and implement
    ``transform_for_source_image(image, handle)`` -> ScaleTransform (or a tuple of four real numbers), the transform
    of the node's kernel at each encode of the graph, called with the batch's source image and the handle of the
    node's source image node (None if it has none). A subclass is saved with its graph through its attributes, as
    data sources are.

    MPS: MPSImageTransformProvider
    """

    def transform_for_source_image(self, image, handle):
        """The transform for this encode; a subclass must implement it (NotImplementedError here).

        MPS: -[MPSImageTransformProvider transformForSourceImage:handle:]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement transform_for_source_image()")


cdef shared_ptr[CImageTransformProvider] _transform_provider_argument(object value) except *:
    cdef shared_ptr[CImageTransformProvider] none
    if value is None:
        return none
    if not callable(getattr(value, "transform_for_source_image", None)):
        raise TypeError(f"transform_provider: expected None or an object with a "
                        f"transform_for_source_image(image, handle) method, given {type(value).__name__}")
    return make_python_transform_provider(value, _wrap_loss_callback_image)


cdef tuple _output_size_argument(object value):
    """An MTLSize (width, height[, depth]) of ints; depth defaults to 1."""
    try:
        size = tuple(value)
    except TypeError:
        raise TypeError(f"output_size must be a tuple (width, height[, depth]) of ints, given "
                        f"{type(value).__name__}") from None
    if len(size) not in (2, 3):
        raise ValueError(f"output_size must be (width, height[, depth]), given {len(size)} values")
    return (integer_argument(size[0], "output_size.width"), integer_argument(size[1], "output_size.height"),
            integer_argument(size[2], "output_size.depth") if len(size) == 3 else 1)


cdef class NNScaleNode(NNFilterNode):
    """NNScaleNode(source, output_size, transform_provider=None)
--

    The base of the resampling nodes: each source image resampled to ``output_size``, an MTLSize (width, height[,
    depth]) whose depth is not used (the result has the source's feature channels). Without a
    ``transform_provider`` the source is scaled to fill the result; with one, its
    ``transform_for_source_image(image, handle)`` gives the ScaleTransform at each encode. ValueError for a size
    below 1; MPS has no gradient node of it, so ``training_graph`` through it raises TypeError (set
    ``stop_gradient`` on its result image). Abstract (TypeError): make an NNBilinearScaleNode or an
    NNLanczosScaleNode. As ``-[MPSNNScaleNode initWithSource:transformProvider:outputSize:]``;
    ``-initWithSource:outputSize:`` is ``transform_provider=None``.

    MPS: MPSNNScaleNode
    """
    _kind = None

    def __init__(self, source, output_size, transform_provider=None):
        if type(self)._kind is None:
            raise TypeError("NNScaleNode is abstract; make an NNBilinearScaleNode or an NNLanczosScaleNode")
        cdef int64_t width, height, depth
        width, height, depth = _output_size_argument(output_size)
        self._made(<shared_ptr[CFilterNode]>make_native[CNNScaleNode](
            _image_node_argument(source, "source").c, <ScaleKind><int>type(self)._kind,
            _transform_provider_argument(transform_provider), width, height, depth),
            (source, output_size, transform_provider))

    @classmethod
    def node_with_source(cls, source, output_size, transform_provider=None):
        """The same as ``cls(source, output_size, transform_provider)``: a new node. MPS's factories with and
        without a transform provider are this one method.

        MPS: +[MPSNNScaleNode nodeWithSource:transformProvider:outputSize:], +[MPSNNScaleNode nodeWithSource:outputSize:]
        """
        return cls(source, output_size, transform_provider)

    cdef CNNScaleNode* _scale(self) except NULL:
        return <CNNScaleNode*>self.native()

    @property
    def output_size(self):
        """The size of the result, (width, height, depth).

        MPS: none (mpsx)
        """
        node = self._scale()
        return (node.output_width(), node.output_height(), node.output_depth())

    @property
    def transform_provider(self):
        """The transform provider the node was made with, or None.

        MPS: none (mpsx)
        """
        return <object>python_transform_provider_object(self._scale().transform_provider())


cdef class NNBilinearScaleNode(NNScaleNode):
    """Bilinear resampling in a graph: each result pixel interpolates the two by two source pixels around its centre
    (torch.nn.functional.interpolate's ``bilinear`` with ``align_corners=False`` when the source fills the result),
    with no low-pass filter when downscaling. As ``-[MPSNNScaleNode initWithSource:transformProvider:outputSize:]``.

    MPS: MPSNNBilinearScaleNode
    """
    _kind = <int>ScaleKind.Bilinear


cdef class NNLanczosScaleNode(NNScaleNode):
    """Lanczos-3 resampling in a graph: the Lanczos window, widened by the downscaling factor when downscaling so that
    it low-passes, weighs the source pixels around each result pixel's centre. As
    ``-[MPSNNScaleNode initWithSource:transformProvider:outputSize:]``.

    MPS: MPSNNLanczosScaleNode
    """
    _kind = <int>ScaleKind.Lanczos

# MPSNNConcatenationNode and MPSNNConcatenationGradientNode (native/include/mpsx/graph/concatenation.h).

from mpsx.includes.graph.concatenation cimport CNNConcatenationGradientNode, CNNConcatenationNode

__all__ += ["NNConcatenationNode", "NNConcatenationGradientNode"]


cdef class NNConcatenationNode(NNFilterNode):
    """NNConcatenationNode(sources)
--

    The feature channels of ``sources`` (a list of image nodes) one after the other, each source's starting at a
    multiple of 4 as in MPS (a source of 3 channels takes 4, the 4th zero). The sources must have the same size and
    number of images. Its gradient is one NNConcatenationGradientNode per source
    (``gradient_filters_with_sources``). As ``-[MPSNNConcatenationNode initWithSources:]``.

    MPS: MPSNNConcatenationNode
    """

    def __init__(self, sources):
        if isinstance(sources, NNImageNode) or not isinstance(sources, (list, tuple)):
            raise TypeError(f"sources: expected a list of NNImageNodes, given {type(sources).__name__}")
        self._made(<shared_ptr[CFilterNode]>make_native[CNNConcatenationNode](_image_nodes(sources, "sources")),
            (list(sources),))

    @classmethod
    def node_with_sources(cls, sources):
        """The same as ``NNConcatenationNode(...)``: a new node.

        MPS: +[MPSNNConcatenationNode nodeWithSources:]
        """
        return cls(sources)

    def gradient_filter_with_source(self, gradient_image):
        """Raises TypeError, as MPS marks it unavailable: a concatenation has one gradient node per source
        (``gradient_filters_with_source``).

        MPS: -[MPSNNFilterNode gradientFilterWithSource:]
        """
        raise TypeError("NNConcatenationNode has one gradient node per source: use gradient_filters_with_source")

    def gradient_filter_with_sources(self, gradient_images):
        """Raises TypeError, as MPS marks it unavailable: a concatenation has one gradient node per source
        (``gradient_filters_with_sources``).

        MPS: -[MPSNNConcatenationNode gradientFilterWithSources:]
        """
        raise TypeError("NNConcatenationNode has one gradient node per source: use gradient_filters_with_sources")


cdef class NNConcatenationGradientNode(NNGradientFilterNode):
    """NNConcatenationGradientNode(source_gradient, source_image, gradient_state)
--

    The channels of the gradient of a concatenation's result that come from ``source_image`` (one of its sources;
    the first occurrence where it is given twice). ``gradient_state`` is the concatenation's result state. As
    ``-[MPSNNConcatenationGradientNode initWithSourceGradient:sourceImage:gradientState:]``.

    MPS: MPSNNConcatenationGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CNNConcatenationGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c, -1),
            (source_gradient, source_image, gradient_state))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state):
        """The same as ``NNConcatenationGradientNode(...)``: a new node.

        MPS: +[MPSNNConcatenationGradientNode nodeWithSourceGradient:sourceImage:gradientState:]
        """
        return cls(source_gradient, source_image, gradient_state)

    @property
    def source_index(self):
        """Which source of the concatenation this node slices out.

        MPS: none (mpsx)
        """
        return (<CNNConcatenationGradientNode*>self.native()).index()

# MPSNNInitialGradientNode (native/include/mpsx/graph/initial_gradient.h).

from mpsx.includes.graph.initial_gradient cimport CNNInitialGradientNode

__all__ += ["NNInitialGradientNode"]


cdef class NNInitialGradientNode(NNFilterNode):
    """NNInitialGradientNode(source)
--

    A gradient of ones shaped as the source, to start ``training_graph`` at any output (the gradient of the sum of
    that output). As ``-[MPSNNInitialGradientNode initWithSource:]``.

    MPS: MPSNNInitialGradientNode
    """

    def __init__(self, source):
        self._made(<shared_ptr[CFilterNode]>make_native[CNNInitialGradientNode](
            _image_node_argument(source, "source").c), (source,))

    @classmethod
    def node_with_source(cls, source):
        """The same as ``NNInitialGradientNode(...)``: a new node.

        MPS: +[MPSNNInitialGradientNode nodeWithSource:]
        """
        return cls(source)

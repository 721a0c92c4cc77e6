# MPSNNAdditionNode (native/include/mpsx/graph/arithmetic.h).

from mpsx.includes.graph.arithmetic cimport CNNAdditionNode

__all__ += ["NNAdditionNode"]


cdef class NNAdditionNode(NNFilterNode):
    """MPSNNAdditionNode(left_source, right_source)."""

    def __init__(self, left_source, right_source):
        self.c = <shared_ptr[CFilterNode]>make_native[CNNAdditionNode](
            _image_node_argument(left_source, "left_source").c, _image_node_argument(right_source, "right_source").c)

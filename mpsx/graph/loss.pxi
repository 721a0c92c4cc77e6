# MPSCNNLossNode (native/include/mpsx/graph/loss.h).

from mpsx.includes.graph.loss cimport CCNNLossNode

__all__ += ["CNNLossNode"]


cdef class CNNLossNode(NNFilterNode):
    """MPSCNNLossNode(source, loss_descriptor): its result image is the gradient of the source; the labels
    (input_labels, an NNLabelsNode) go to the graph as a source state (a CNNLossLabels)."""

    def __init__(self, source, CNNLossDescriptor loss_descriptor not None):
        self.c = <shared_ptr[CFilterNode]>make_native[CCNNLossNode](_image_node_argument(source, "source").c,
                                                                    loss_descriptor.desc)

    @property
    def input_labels(self):
        return _wrap_state_node((<CCNNLossNode*>self.native()).input_labels())

# MPSCNNLossNode, MPSNNForwardLossNode and MPSNNLossGradientNode (native/include/mpsx/graph/loss.h).

from cpython.ref cimport PyObject
from mpsx.includes.graph.loss cimport (
    CCNNLossNode, CLossCallback, CNNForwardLossNode as CForwardLossNode, WrapLossImage, make_python_loss_callback,
    python_loss_callback_object)
from mpsx.includes.graph.loss cimport CNNLossGradientNode as CLossGradientNode

__all__ += ["CNNLossNode", "NNForwardLossNode", "NNLossGradientNode", "NNLossCallback"]

cdef object _wrap_loss_callback_image(const shared_ptr[CImage]& image):
    return wrap_image(image)


class NNLossCallback:
    """MPSNNLossCallback: subclass it and implement scalar_weight_for_source_image(source_image,
    destination_image) -> float, the weight of a loss node's kernel at each encode of the graph. A
    subclass is saved with its graph through its attributes, as data sources are."""

    def scalar_weight_for_source_image(self, source_image, destination_image):
        raise NotImplementedError(f"{type(self).__name__} must implement scalar_weight_for_source_image()")


cdef shared_ptr[CLossCallback] _loss_callback_argument(object value) except *:
    cdef shared_ptr[CLossCallback] none
    if value is None:
        return none
    if not callable(getattr(value, "scalar_weight_for_source_image", None)):
        raise TypeError(f"property_call_back: expected None or an object with a "
                        f"scalar_weight_for_source_image(source_image, destination_image) method, "
                        f"given {type(value).__name__}")
    return make_python_loss_callback(value, _wrap_loss_callback_image)


cdef class CNNLossNode(NNFilterNode):
    """MPSCNNLossNode(source, loss_descriptor): its result image is the gradient of the source; the labels
    (input_labels, an NNLabelsNode) go to the graph as a source state (a CNNLossLabels)."""

    def __init__(self, source, CNNLossDescriptor loss_descriptor not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNLossNode](_image_node_argument(source, "source").c,
                                                                    loss_descriptor.desc), (source, loss_descriptor))

    @property
    def input_labels(self):
        return _wrap_state_node((<CCNNLossNode*>self.native()).input_labels())


cdef CNNLossDescriptor _loss_descriptor_of(const CLossDescriptor& desc):
    cdef CNNLossDescriptor d = CNNLossDescriptor.__new__(CNNLossDescriptor)
    d.desc = desc
    return d


cdef shared_ptr[CImageNode] _optional_image_node(object node, str name) except *:
    cdef shared_ptr[CImageNode] none
    if node is None:
        return none
    return _image_node_argument(node, name).c


cdef CNNLossDescriptor _loss_descriptor_argument(object value):
    if not isinstance(value, CNNLossDescriptor):
        raise TypeError(f"loss_descriptor: expected a CNNLossDescriptor, given {type(value).__name__}")
    return value


cdef class NNForwardLossNode(NNFilterNode):
    """MPSNNForwardLossNode(source, labels, weights=None, loss_descriptor): an NNForwardLoss of source against
    the labels (and per-value weights) image nodes, which are sources of the graph like any image; its result
    image is the loss values. NNForwardLossNode(source, labels, loss_descriptor) is the form without weights.
    Its gradient_filter_with_source(gradient of the loss values) is an NNLossGradientNode of the source;
    gradient_filters_with_source also returns the labels' (is_labels_gradient_filter). training_graph needs
    that gradient: start it at an NNInitialGradientNode on result_image (ones), or pass source_gradient."""
    _mpsx_properties = ("property_call_back",)

    def __init__(self, source, labels, weights=None, loss_descriptor=None):
        if isinstance(weights, CNNLossDescriptor) and loss_descriptor is None:
            weights, loss_descriptor = None, weights
        cdef CNNLossDescriptor d = _loss_descriptor_argument(loss_descriptor)
        self._made(<shared_ptr[CFilterNode]>make_native[CForwardLossNode](
            _image_node_argument(source, "source").c, _image_node_argument(labels, "labels").c,
            _optional_image_node(weights, "weights"), d.desc), (source, labels, weights, d))

    @classmethod
    def node_with_sources(cls, sources, loss_descriptor):
        """MPS +nodeWithSources:lossDescriptor:: sources [source, labels] or [source, labels, weights]."""
        sources = list(sources)
        if len(sources) not in (2, 3):
            raise ValueError(f"NNForwardLossNode: expected 2 or 3 sources (source, labels[, weights]), "
                             f"given {len(sources)}")
        return cls(sources[0], sources[1], sources[2] if len(sources) == 3 else None, loss_descriptor)

    cdef CForwardLossNode* loss_node(self) except NULL:
        return <CForwardLossNode*>self.native()

    @property
    def loss_descriptor(self):
        return _loss_descriptor_of(self.loss_node().descriptor())

    @property
    def loss_type(self):
        return self.loss_descriptor.loss_type

    @property
    def reduction_type(self):
        return self.loss_descriptor.reduction_type

    @property
    def number_of_classes(self):
        return self.loss_descriptor.number_of_classes

    @property
    def reduce_across_batch(self):
        return self.loss_descriptor.reduce_across_batch

    @property
    def weight(self):
        return self.loss_descriptor.weight

    @property
    def label_smoothing(self):
        return self.loss_descriptor.label_smoothing

    @property
    def epsilon(self):
        return self.loss_descriptor.epsilon

    @property
    def delta(self):
        return self.loss_descriptor.delta

    @property
    def property_call_back(self):
        """None, or an object whose scalar_weight_for_source_image(source_image, destination_image) gives the
        kernel's weight at each encode of the graph."""
        return <object>python_loss_callback_object(self.loss_node().property_call_back)

    @property_call_back.setter
    def property_call_back(self, value):
        self.loss_node().property_call_back = _loss_callback_argument(value)


cdef class NNLossGradientNode(NNGradientFilterNode):
    """MPSNNLossGradientNode(source_gradient, source_image, labels, weights=None, gradient_state=None,
    loss_descriptor, is_labels_gradient_filter=False): an NNLossGradient of the loss values' gradient, with
    the forward source, labels and weights image nodes; gradient_state (optional) is the forward loss node's
    result state, whose values (weight, label smoothing, epsilon, delta) it then uses. A property_call_back
    sets its weight at each encode instead."""
    _mpsx_properties = ("property_call_back",)

    def __init__(self, source_gradient, source_image, labels, weights=None, gradient_state=None,
                 loss_descriptor=None, is_labels_gradient_filter=False):
        cdef CNNLossDescriptor d = _loss_descriptor_argument(loss_descriptor)
        cdef shared_ptr[CStateNode] state
        if gradient_state is not None:
            if not isinstance(gradient_state, NNStateNode):
                raise TypeError(f"gradient_state: expected None or an NNGradientStateNode, given "
                                f"{type(gradient_state).__name__}")
            state = (<NNStateNode>gradient_state).c
            if not state:
                raise_uninitialized(gradient_state)
        if not isinstance(is_labels_gradient_filter, (bool, int)):
            raise TypeError(f"is_labels_gradient_filter: expected a bool, given "
                            f"{type(is_labels_gradient_filter).__name__}")
        self._made(<shared_ptr[CFilterNode]>make_native[CLossGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, _image_node_argument(labels, "labels").c,
            _optional_image_node(weights, "weights"), state, d.desc, <cbool>bool(is_labels_gradient_filter)),
            (source_gradient, source_image, labels, weights, gradient_state, d, bool(is_labels_gradient_filter)))

    @classmethod
    def node_with_sources(cls, sources, gradient_state, loss_descriptor, is_labels_gradient_filter=False):
        """MPS -initWithSources:gradientState:lossDescriptor:isLabelsGradientFilter:: sources
        [source gradient, source (logits), labels] or [..., weights]."""
        sources = list(sources)
        if len(sources) not in (3, 4):
            raise ValueError(f"NNLossGradientNode: expected 3 or 4 sources (source gradient, source, labels"
                             f"[, weights]), given {len(sources)}")
        return cls(sources[0], sources[1], sources[2], sources[3] if len(sources) == 4 else None, gradient_state,
                   loss_descriptor, is_labels_gradient_filter)

    cdef CLossGradientNode* gradient_node(self) except NULL:
        return <CLossGradientNode*>self.native()

    @property
    def is_labels_gradient_filter(self):
        return self.gradient_node().is_labels_gradient_filter()

    @property
    def loss_descriptor(self):
        return _loss_descriptor_of(self.gradient_node().descriptor())

    @property
    def loss_type(self):
        return self.loss_descriptor.loss_type

    @property
    def reduction_type(self):
        return self.loss_descriptor.reduction_type

    @property
    def number_of_classes(self):
        return self.loss_descriptor.number_of_classes

    @property
    def reduce_across_batch(self):
        return self.loss_descriptor.reduce_across_batch

    @property
    def weight(self):
        return self.loss_descriptor.weight

    @property
    def label_smoothing(self):
        return self.loss_descriptor.label_smoothing

    @property
    def epsilon(self):
        return self.loss_descriptor.epsilon

    @property
    def delta(self):
        return self.loss_descriptor.delta

    @property
    def property_call_back(self):
        """None, or an object whose scalar_weight_for_source_image(source_image, destination_image) gives the
        kernel's weight at each encode of the graph (in place of the forward state's)."""
        return <object>python_loss_callback_object(self.gradient_node().property_call_back)

    @property_call_back.setter
    def property_call_back(self, value):
        self.gradient_node().property_call_back = _loss_callback_argument(value)

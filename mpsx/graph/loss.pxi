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
    """The weight callback of a loss node: subclass it and implement
    ``scalar_weight_for_source_image(source_image, destination_image)`` -> float, the weight of the node's kernel at
    each encode of the graph. A subclass is saved with its graph through its attributes, as data sources are.

    MPS: MPSNNLossCallback
    """

    def scalar_weight_for_source_image(self, source_image, destination_image):
        """The weight for this encode; a subclass must implement it (NotImplementedError here).

        MPS: -[MPSNNLossCallback scalarWeightForSourceImage:destinationImage:]
        """
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
    """CNNLossNode(source, loss_descriptor)
--

    A loss of a graph (CNNLoss): its result image is the gradient of the source; the labels (``input_labels``, an
    NNLabelsNode) go to the graph as a source state (a list of one CNNLossLabels per image, or one for the batch). As
    ``-[MPSCNNLossNode initWithSource:lossDescriptor:]``.

    MPS: MPSCNNLossNode
    """

    def __init__(self, source, CNNLossDescriptor loss_descriptor not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNLossNode](_image_node_argument(source, "source").c,
                                                                    loss_descriptor.desc), (source, loss_descriptor))

    @classmethod
    def node_with_source(cls, source, loss_descriptor):
        """The same as ``CNNLossNode(...)``: a new node.

        MPS: +[MPSCNNLossNode nodeWithSource:lossDescriptor:]
        """
        return cls(source, loss_descriptor)

    @property
    def input_labels(self):
        """The labels node: set its handle, and give the graph its labels (CNNLossLabels per image, or one for the
        batch).

        MPS: MPSCNNLossNode.inputLabels
        """
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


def _loss_sources(owner, sources, names, given):
    """The image nodes of a loss node's ``sources``: ``names`` in order, the last (weights) optional. TypeError
    where the separate arguments are given too, or for something other than a list; ValueError for its length."""
    if given.count(None) != len(given):
        required = ", ".join(names[:-1])
        raise TypeError(f"{owner}: give {required} (and weights) or sources, not both")
    if not isinstance(sources, (list, tuple)):
        raise TypeError(f"{owner}: sources must be a list of NNImageNodes, given {type(sources).__name__}")
    if len(sources) not in (len(names) - 1, len(names)):
        required = ", ".join(names[:-1])
        raise ValueError(f"{owner}: expected {len(names) - 1} or {len(names)} sources ({required}[, weights]), "
                         f"given {len(sources)}")
    return list(sources) + [None] * (len(names) - len(sources))


cdef class NNForwardLossNode(NNFilterNode):
    """NNForwardLossNode(source=None, labels=None, weights=None, loss_descriptor=None, *, sources=None)
--

    A forward loss of a graph (NNForwardLoss) of ``source`` against the ``labels`` (and per-value ``weights``) image
    nodes, which are sources of the graph like any image; its result image is the loss values.
    ``NNForwardLossNode(source, labels, loss_descriptor)`` is the form without weights.

    Its ``gradient_filter_with_source`` (the gradient of the loss values) is an NNLossGradientNode of the source;
    ``gradient_filters_with_source`` also returns the labels' (``is_labels_gradient_filter``). ``training_graph``
    needs that gradient: start it at an NNInitialGradientNode on ``result_image`` (ones), or pass
    ``source_gradient``. As ``-[MPSNNForwardLossNode initWithSource:labels:weights:lossDescriptor:]``;
    ``NNForwardLossNode(sources=[source, labels(, weights)], loss_descriptor=d)`` is
    ``-[MPSNNForwardLossNode initWithSources:lossDescriptor:]`` (TypeError with the separate images too, ValueError
    for another number of sources).

    MPS: MPSNNForwardLossNode
    """
    _mpsx_properties = ("property_call_back",)

    def __init__(self, source=None, labels=None, weights=None, loss_descriptor=None, *, sources=None):
        if isinstance(weights, CNNLossDescriptor) and loss_descriptor is None:
            weights, loss_descriptor = None, weights
        if sources is not None:
            source, labels, weights = _loss_sources("NNForwardLossNode", sources, ("source", "labels", "weights"),
                                                    (source, labels, weights))
        cdef CNNLossDescriptor d = _loss_descriptor_argument(loss_descriptor)
        self._made(<shared_ptr[CFilterNode]>make_native[CForwardLossNode](
            _image_node_argument(source, "source").c, _image_node_argument(labels, "labels").c,
            _optional_image_node(weights, "weights"), d.desc), (source, labels, weights, d))

    @classmethod
    def node_with_source(cls, source, labels, weights=None, loss_descriptor=None):
        """The same as ``NNForwardLossNode(...)``: a new node. MPS's factories with and
        without the optional arguments are this one method.

        MPS: +[MPSNNForwardLossNode nodeWithSource:labels:weights:lossDescriptor:], +[MPSNNForwardLossNode nodeWithSource:labels:lossDescriptor:]
        """
        return cls(source, labels, weights, loss_descriptor)

    @classmethod
    def node_with_sources(cls, sources, loss_descriptor):
        """A new node of ``sources`` ``[source, labels]`` or ``[source, labels, weights]`` (ValueError otherwise).

        MPS: +[MPSNNForwardLossNode nodeWithSources:lossDescriptor:]
        """
        return cls(sources=sources, loss_descriptor=loss_descriptor)

    cdef CForwardLossNode* loss_node(self) except NULL:
        return <CForwardLossNode*>self.native()

    @property
    def loss_descriptor(self):
        """A copy of the node's loss descriptor.

        MPS: none (mpsx)
        """
        return _loss_descriptor_of(self.loss_node().descriptor())

    @property
    def loss_type(self):
        """The loss function.

        MPS: MPSNNForwardLossNode.lossType
        """
        return self.loss_descriptor.loss_type

    @property
    def reduction_type(self):
        """The reduction.

        MPS: MPSNNForwardLossNode.reductionType
        """
        return self.loss_descriptor.reduction_type

    @property
    def number_of_classes(self):
        """The number of classes label smoothing spreads over.

        MPS: MPSNNForwardLossNode.numberOfClasses
        """
        return self.loss_descriptor.number_of_classes

    @property
    def reduce_across_batch(self):
        """Whether the reduction runs over the whole batch.

        MPS: MPSNNForwardLossNode.reduceAcrossBatch
        """
        return self.loss_descriptor.reduce_across_batch

    @property
    def weight(self):
        """The factor of every loss value.

        MPS: MPSNNForwardLossNode.weight
        """
        return self.loss_descriptor.weight

    @property
    def label_smoothing(self):
        """The label smoothing.

        MPS: MPSNNForwardLossNode.labelSmoothing
        """
        return self.loss_descriptor.label_smoothing

    @property
    def epsilon(self):
        """The epsilon of LOG and the cross entropies.

        MPS: MPSNNForwardLossNode.epsilon
        """
        return self.loss_descriptor.epsilon

    @property
    def delta(self):
        """HUBER's threshold.

        MPS: MPSNNForwardLossNode.delta
        """
        return self.loss_descriptor.delta

    @property
    def property_call_back(self):
        """None, or an object whose ``scalar_weight_for_source_image(source_image, destination_image)`` gives the
        kernel's weight at each encode of the graph (an NNLossCallback). TypeError for an object without that
        method.

        MPS: MPSNNForwardLossNode.propertyCallBack
        """
        return <object>python_loss_callback_object(self.loss_node().property_call_back)

    @property_call_back.setter
    def property_call_back(self, value):
        self.loss_node().property_call_back = _loss_callback_argument(value)
        invalidate_captures()  # read at each encode: graphs record theirs again (NNGraph.capture_encodes)


cdef class NNLossGradientNode(NNGradientFilterNode):
    """NNLossGradientNode(source_gradient=None, source_image=None, labels=None, weights=None, gradient_state=None,
        loss_descriptor=None, is_labels_gradient_filter=False, *, sources=None)
--

    The gradient node of an NNForwardLossNode: an NNLossGradient of the loss values' gradient, with the forward
    source, labels and weights image nodes; ``gradient_state`` (optional) is the forward loss node's result state,
    whose values (weight, label smoothing, epsilon, delta) it then uses. A ``property_call_back`` sets its weight at
    each encode instead. As
    ``-[MPSNNLossGradientNode initWithSourceGradient:sourceImage:labels:weights:gradientState:lossDescriptor:isLabelsGradientFilter:]``;
    ``sources=[source_gradient, source_image, labels(, weights)]`` instead of those images is
    ``-[MPSNNLossGradientNode initWithSources:gradientState:lossDescriptor:isLabelsGradientFilter:]``.

    MPS: MPSNNLossGradientNode
    """
    _mpsx_properties = ("property_call_back",)

    def __init__(self, source_gradient=None, source_image=None, labels=None, weights=None, gradient_state=None,
                 loss_descriptor=None, is_labels_gradient_filter=False, *, sources=None):
        if sources is not None:
            source_gradient, source_image, labels, weights = _loss_sources(
                "NNLossGradientNode", sources, ("source_gradient", "source_image", "labels", "weights"),
                (source_gradient, source_image, labels, weights))
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
    def node_with_source_gradient(cls, source_gradient, source_image, labels, weights=None, gradient_state=None,
                                  loss_descriptor=None, is_labels_gradient_filter=False):
        """The same as ``NNLossGradientNode(...)``: a new node. MPS's factories with and
        without the optional arguments are this one method.

        MPS: +[MPSNNLossGradientNode nodeWithSourceGradient:sourceImage:labels:weights:gradientState:lossDescriptor:isLabelsGradientFilter:], +[MPSNNLossGradientNode nodeWithSourceGradient:sourceImage:labels:gradientState:lossDescriptor:isLabelsGradientFilter:]
        """
        return cls(source_gradient, source_image, labels, weights, gradient_state, loss_descriptor,
                   is_labels_gradient_filter)

    @classmethod
    def node_with_sources(cls, sources, gradient_state, loss_descriptor, is_labels_gradient_filter=False):
        """A new node of ``sources`` ``[source gradient, source (logits), labels]`` or ``[..., weights]`` (ValueError
        otherwise).

        MPS: +[MPSNNLossGradientNode nodeWithSources:gradientState:lossDescriptor:isLabelsGradientFilter:]
        """
        return cls(gradient_state=gradient_state, loss_descriptor=loss_descriptor,
                   is_labels_gradient_filter=is_labels_gradient_filter, sources=sources)

    cdef CLossGradientNode* gradient_node(self) except NULL:
        return <CLossGradientNode*>self.native()

    @property
    def is_labels_gradient_filter(self):
        """Whether the node makes the gradient for the labels instead of the source.

        MPS: MPSNNLossGradientNode.isLabelsGradientFilter
        """
        return self.gradient_node().is_labels_gradient_filter()

    @property
    def loss_descriptor(self):
        """A copy of the node's loss descriptor.

        MPS: none (mpsx)
        """
        return _loss_descriptor_of(self.gradient_node().descriptor())

    @property
    def loss_type(self):
        """The loss function.

        MPS: MPSNNLossGradientNode.lossType
        """
        return self.loss_descriptor.loss_type

    @property
    def reduction_type(self):
        """The reduction.

        MPS: MPSNNLossGradientNode.reductionType
        """
        return self.loss_descriptor.reduction_type

    @property
    def number_of_classes(self):
        """The number of classes label smoothing spreads over.

        MPS: MPSNNLossGradientNode.numberOfClasses
        """
        return self.loss_descriptor.number_of_classes

    @property
    def reduce_across_batch(self):
        """Whether the reduction runs over the whole batch.

        MPS: MPSNNLossGradientNode.reduceAcrossBatch
        """
        return self.loss_descriptor.reduce_across_batch

    @property
    def weight(self):
        """The factor of every loss value.

        MPS: MPSNNLossGradientNode.weight
        """
        return self.loss_descriptor.weight

    @property
    def label_smoothing(self):
        """The label smoothing.

        MPS: MPSNNLossGradientNode.labelSmoothing
        """
        return self.loss_descriptor.label_smoothing

    @property
    def epsilon(self):
        """The epsilon of LOG and the cross entropies.

        MPS: MPSNNLossGradientNode.epsilon
        """
        return self.loss_descriptor.epsilon

    @property
    def delta(self):
        """HUBER's threshold.

        MPS: MPSNNLossGradientNode.delta
        """
        return self.loss_descriptor.delta

    @property
    def property_call_back(self):
        """None, or an object whose ``scalar_weight_for_source_image(source_image, destination_image)`` gives the
        kernel's weight at each encode of the graph (in place of the forward state's).

        MPS: MPSNNLossGradientNode.propertyCallBack
        """
        return <object>python_loss_callback_object(self.gradient_node().property_call_back)

    @property_call_back.setter
    def property_call_back(self, value):
        self.gradient_node().property_call_back = _loss_callback_argument(value)
        invalidate_captures()  # read at each encode: graphs record theirs again (NNGraph.capture_encodes)

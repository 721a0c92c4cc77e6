# MPSNNGraph and its node classes (MPSNNGraph.h, MPSNNGraphNodes.h): thin
# wrappers of native/include/mpsx/graph.h. Nodes have no device; NNGraph
# compiles the nodes it needs once, in native code.

from cpython.ref cimport PyObject
from libcpp cimport bool as cbool

from mpsx.includes.graph cimport (
    CCommunicator, CFilterNode, CGraphEncoded, CImageNode, CNNGraph, CStateNode, StateNodeKind,
    TrainingStyle as CTrainingStyle,
    python_training_graph)
from mpsx.includes.errors cimport hold
from mpsx.includes.kernels.normalization cimport CResponseNormalizationSettings

__all__ += ["NNHandle", "NNImageNode", "NNStateNode", "NNGradientStateNode", "CNNConvolutionGradientStateNode",
            "NNLabelsNode", "NNFilterNode", "NNGradientFilterNode", "NNGraph",
            "NNTrainingStyle", "NNTrainableNode", "CNNNormalizationNode"]


cdef CDataType _graph_format(object value, str what) except *:
    try:
        data_type = DataType(value)
    except (ValueError, TypeError):
        raise TypeError(f"{what}: expected DataType.FLOAT16 or DataType.FLOAT32, given {value!r}") from None
    if data_type not in (DataType.FLOAT16, DataType.FLOAT32):
        raise ValueError(f"{what}: expected DataType.FLOAT16 or DataType.FLOAT32, given {data_type!r}")
    return <CDataType><int>data_type


class NNTrainingStyle(enum.IntEnum):
    """Which update a trainable node's gradient calls: NONE (no update), CPU (the data source's host update, after the
    command buffer completed) or GPU (its update on the command buffer, right after the gradient pass).

    MPS: MPSNNTrainingStyle
    """
    NONE = 0
    CPU = 1
    GPU = 2


class NNHandle:
    """Names an image or state node of a graph by its ``label`` (any object with a ``label`` attribute is a handle). A
    graph saves the handles of its nodes; a handle of a class mpsx cannot save comes back as an NNHandle of its
    label. Handles compare equal by label.

    MPS: MPSHandle
    """
    _label = ""

    def __init__(self, label):
        self._label = str(label)

    @property
    def label(self):
        """The handle's name, a string (read-only: handles hash by it).

        MPS: -[MPSHandle label]
        """
        return self._label

    def __eq__(self, other):
        return type(other) is type(self) and other.label == self.label

    def __hash__(self):
        return hash(self.label)

    def __repr__(self):
        return f"NNHandle({self.label!r})"

    def __mpsx_identity__(self):
        # A value: equal NNHandles save as one (a handle mpsx cannot save becomes an NNHandle at each node
        # it names). A subclass may hold more than its label: itself.
        return ("NNHandle", self.label) if type(self) is NNHandle and len(vars(self)) == 1 else id(self)

    def __mpsx_state__(self):
        state = dict(vars(self))
        state["label"] = state.pop("_label", self._label)
        return state

    @classmethod
    def __mpsx_restore__(cls, state, device):
        if not isinstance(state.get("label"), str):
            raise TypeError(f"expected the label of an NNHandle as a str, given {type(state.get('label')).__name__}")
        handle = cls.__new__(cls)
        handle.__dict__.update(state)
        handle._label = handle.__dict__.pop("label")
        return handle


cdef object _saved_handle(object handle):
    # What a node's handle saves as: itself where mpsx can save it, else its label.
    if handle is None or hasattr(type(handle), "__mpsx_restore__"):
        return handle
    return NNHandle(handle.label)


cdef shared_ptr[void] _handle_of(object handle) except *:
    if handle is None:
        return shared_ptr[void]()
    if not hasattr(handle, "label"):
        raise TypeError(f"a handle is an object with a label (MPSHandle), given {type(handle).__name__}")
    return hold(handle)


cdef object _handle_object(const shared_ptr[void]& handle):
    if not handle:
        return None
    return <object><PyObject*>handle.get()


cdef class NNImageNode:
    """NNImageNode(handle=None)
--

    An image of a graph: a source of the graph unless it is a filter node's ``result_image``. ``handle`` names it
    (None by default): the graph's ``source_image_handles`` say which image an encode takes where. As
    ``-[MPSNNImageNode initWithHandle:]``.

    MPS: MPSNNImageNode
    """
    cdef shared_ptr[CImageNode] c

    def __init__(self, handle=None):
        self.c = shared_ptr[CImageNode](new CImageNode(_handle_of(handle)))

    @classmethod
    def node_with_handle(cls, handle):
        """A new source image node named by ``handle``.

        MPS: +[MPSNNImageNode nodeWithHandle:]
        """
        return cls(handle)

    @classmethod
    def exported_node_with_handle(cls, handle):
        """A new image node with ``export_from_graph`` set: the graph returns it among its intermediate images.

        MPS: +[MPSNNImageNode exportedNodeWithHandle:]
        """
        node = cls(handle)
        node.export_from_graph = True
        return node

    cdef CImageNode* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    @property
    def handle(self):
        """The object that names the image (anything with a ``label``), or None. TypeError for an object without a
        label.

        MPS: MPSNNImageNode.handle
        """
        return _handle_object(self.native().handle)

    @handle.setter
    def handle(self, value):
        self.native().handle = _handle_of(value)

    @property
    def export_from_graph(self):
        """Whether the graph returns this image among its intermediate images (default False).

        MPS: MPSNNImageNode.exportFromGraph
        """
        return self.native().export_from_graph

    @export_from_graph.setter
    def export_from_graph(self, cbool value):
        self.native().export_from_graph = value

    @property
    def synchronize_resource(self):
        """Whether the graph synchronizes the exported image for host reads (default False).

        MPS: MPSNNImageNode.synchronizeResource
        """
        return self.native().synchronize_resource

    @synchronize_resource.setter
    def synchronize_resource(self, cbool value):
        self.native().synchronize_resource = value

    @property
    def stop_gradient(self):
        """Whether ``training_graph`` stops propagating gradients at this image (default False).

        MPS: MPSNNImageNode.stopGradient
        """
        return self.native().stop_gradient

    @stop_gradient.setter
    def stop_gradient(self, cbool value):
        self.native().stop_gradient = value

    @property
    def format(self):
        """The storage of the image the graph makes: DataType.FLOAT16 or FLOAT32; None (the default) takes the graph's
        ``format``. TypeError or ValueError for another value.

        MPS: MPSNNImageNode.format
        """
        cdef CImageNode* node = self.native()
        cdef CDataType value
        if not node.format.has_value():
            return None
        value = node.format.value()
        return DataType(<int>value)

    @format.setter
    def format(self, value):
        cdef CImageNode* node = self.native()
        if value is None:
            node.format.reset()
        else:
            node.format = _graph_format(value, "NNImageNode.format")

    @property
    def image_allocator(self):
        """What makes this image when a graph encodes: ``TemporaryImage.default_allocator()`` (MPS's default: the
        graph's own images, whose storage later steps reuse) unless set; another allocator makes the image each
        encode, and the graph reuses none of its storage. A graph's results take its ``destination_image_allocator``
        instead, as MPS's graph does. None sets the default again.

        MPS: MPSNNImageNode.imageAllocator
        """
        return image_allocator_value(self.native().image_allocator, True)

    @image_allocator.setter
    def image_allocator(self, value):
        set_image_allocator(&self.native().image_allocator, value, "image_allocator", True)

    @property
    def producer(self):
        """The filter node whose result this image is; None for a source of the graph.

        MPS: none (mpsx)
        """
        return _wrap_filter_node(self.native().producer())

    # ---- persistence (mpsx/persistence.py): a source image by its properties, a result by its producer,
    # which saves the properties of its result image.

    def __mpsx_identity__(self):
        return ("node", <size_t>self.native())

    def __mpsx_dependencies__(self):
        producer = self.producer
        return () if producer is None else (producer,)

    def __mpsx_state__(self):
        producer = self.producer
        return {"producer": producer} if producer is not None else _node_properties(self, _IMAGE_NODE_PROPERTIES)

    @classmethod
    def __mpsx_restore__(cls, state, device):
        if "producer" in state:
            if not isinstance(state["producer"], NNFilterNode):
                raise TypeError(f"expected the producer of an image node as an NNFilterNode, given "
                                f"{type(state['producer']).__name__}")
            return state["producer"].result_image
        node = cls()
        restore_properties(node, state, _IMAGE_NODE_PROPERTIES)
        return node

    def __reduce__(self):
        return persistence_reduce(self)

    def __eq__(self, other):
        return isinstance(other, NNImageNode) and (<NNImageNode>other).c.get() == self.c.get()

    def __hash__(self):
        return hash(<size_t>self.c.get())

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.NNImageNode handle={self.handle!r}>"


_IMAGE_NODE_PROPERTIES = ("handle", "export_from_graph", "synchronize_resource", "stop_gradient", "format")
_STATE_NODE_PROPERTIES = ("handle", "export_from_graph", "synchronize_resource")


cdef dict _node_properties(node, tuple names):
    properties = {name: getattr(node, name) for name in names}
    properties["handle"] = _saved_handle(properties["handle"])
    return properties


cdef NNImageNode _wrap_image_node(const shared_ptr[CImageNode]& node):
    if not node:
        return None
    cdef NNImageNode out = NNImageNode.__new__(NNImageNode)
    out.c = node
    return out


cdef NNImageNode _image_node_argument(object node, str name):
    if not isinstance(node, NNImageNode):
        raise TypeError(f"{name}: expected an NNImageNode, given {type(node).__name__}")
    (<NNImageNode>node).native()
    return node


cdef class NNStateNode:
    """NNStateNode(*args, **kwargs)
--

    A state of a graph: a state a filter node makes for its gradient (``result_state``), or the labels of a loss
    node. Made by filter nodes, never directly (TypeError).

    MPS: MPSNNStateNode
    """
    cdef shared_ptr[CStateNode] c

    def __init__(self, *args, **kwargs):
        raise TypeError("state nodes come from filter nodes (result_state)")

    cdef CStateNode* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    @property
    def handle(self):
        """The object that names the state (anything with a ``label``), or None.

        MPS: MPSNNStateNode.handle
        """
        return _handle_object(self.native().handle)

    @handle.setter
    def handle(self, value):
        self.native().handle = _handle_of(value)

    @property
    def export_from_graph(self):
        """Whether the graph returns this state among its result states (default False).

        MPS: MPSNNStateNode.exportFromGraph
        """
        return self.native().export_from_graph

    @export_from_graph.setter
    def export_from_graph(self, cbool value):
        self.native().export_from_graph = value

    @property
    def synchronize_resource(self):
        """Whether the graph synchronizes the exported state for host reads (default False).

        MPS: MPSNNStateNode.synchronizeResource
        """
        return self.native().synchronize_resource

    @synchronize_resource.setter
    def synchronize_resource(self, cbool value):
        self.native().synchronize_resource = value

    @property
    def producer(self):
        """The filter node that makes this state; None for a source state (a loss node's labels).

        MPS: none (mpsx)
        """
        return _wrap_filter_node(self.native().producer())

    # ---- persistence: a result state by its producer and place; the producer saves its properties. A
    # loss node's labels save with the loss node.

    def __mpsx_identity__(self):
        return ("node", <size_t>self.native())

    def __mpsx_dependencies__(self):
        producer = self.producer
        return () if producer is None else (producer,)

    def __mpsx_state__(self):
        producer = self.producer
        if producer is None:
            raise TypeError("mpsx.save: a loss node's labels node saves with its loss node; save that node or the "
                            "graph")
        return {"producer": producer, "index": producer.result_states.index(self)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        producer, index = state["producer"], state["index"]
        if not isinstance(producer, NNFilterNode):
            raise TypeError(f"expected the producer of a state node as an NNFilterNode, given "
                            f"{type(producer).__name__}")
        states = producer.result_states
        if type(index) is not int or not 0 <= index < len(states):
            raise ValueError(f"expected the index of one of the {len(states)} result states of a "
                             f"{type(producer).__name__}, given {index!r}")
        return states[index]

    def __reduce__(self):
        return persistence_reduce(self)

    def __eq__(self, other):
        return isinstance(other, NNStateNode) and (<NNStateNode>other).c.get() == self.c.get()

    def __hash__(self):
        return hash(<size_t>self.c.get())

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.{type(self).__name__} handle={self.handle!r}>"


cdef class NNGradientStateNode(NNStateNode):
    """The result state of a forward filter node that its gradient node reads.

    MPS: MPSNNGradientStateNode
    """


cdef class CNNConvolutionGradientStateNode(NNGradientStateNode):
    """The result state of a convolution or fully connected node, read by its gradient node (and by a convolution
    transpose node that undoes the convolution).

    MPS: MPSCNNConvolutionGradientStateNode
    """


cdef class NNLabelsNode(NNStateNode):
    """The labels of a loss node, given to the graph as a source state (per image a CNNLossLabels, or one for the
    batch).

    MPS: MPSNNLabelsNode
    """


cdef NNStateNode _wrap_state_node(const shared_ptr[CStateNode]& node):
    if not node:
        return None
    cdef StateNodeKind kind = node.get().kind()
    cdef NNStateNode out
    if kind == StateNodeKind.ConvolutionGradient:
        out = CNNConvolutionGradientStateNode.__new__(CNNConvolutionGradientStateNode)
    elif kind == StateNodeKind.ConvolutionTransposeGradient:
        out = CNNConvolutionTransposeGradientStateNode.__new__(CNNConvolutionTransposeGradientStateNode)
    elif kind == StateNodeKind.BinaryGradient:  # made by the arithmetic nodes alone
        out = NNArithmeticGradientStateNode.__new__(NNArithmeticGradientStateNode)
    elif kind == StateNodeKind.Labels:
        out = NNLabelsNode.__new__(NNLabelsNode)
    else:
        out = NNGradientStateNode.__new__(NNGradientStateNode)
    out.c = node
    return out


cdef vector[shared_ptr[CImageNode]] _image_nodes(object nodes, str name) except *:
    cdef vector[shared_ptr[CImageNode]] out
    if isinstance(nodes, NNImageNode):
        nodes = [nodes]
    for node in nodes:
        out.push_back(_image_node_argument(node, name).c)
    return out


cdef class NNFilterNode:
    """NNFilterNode(*args, **kwargs)
--

    A filter of a graph: its sources, results and gradient nodes. Abstract (TypeError): each kernel family's node
    class derives from it.

    MPS: MPSNNFilterNode
    """
    cdef shared_ptr[CFilterNode] c

    def __init__(self, *args, **kwargs):
        raise TypeError("NNFilterNode is abstract; make a node of a kernel family")

    cdef CFilterNode* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef _made(self, shared_ptr[CFilterNode] node, tuple arguments, dict keywords=None):
        """Takes the native node a constructor made, with the arguments it made it from (what saving the
        node describes) and the class that made it (what its wrappers are: one native node serves several
        classes, the per-type neurons'): the node keeps them, as its wrappers come and go."""
        node.get().constructor_arguments = hold((arguments, keywords or {}, type(self)))
        self.c = node

    cdef object _constructor_arguments(self):
        """(arguments, keywords) of the constructor that made this node; None for one made natively."""
        cdef CFilterNode* node = self.native()
        return (<tuple><object><PyObject*>node.constructor_arguments.get())[:2] if node.constructor_arguments else None

    @property
    def result_image(self):
        """The image node this filter writes.

        MPS: MPSNNFilterNode.resultImage
        """
        return _wrap_image_node(self.native().result_image())

    @property
    def result_states(self):
        """The state nodes this filter makes (for its gradient), as a list.

        MPS: MPSNNFilterNode.resultStates
        """
        return [_wrap_state_node(s) for s in self.native().result_states()]

    @property
    def result_state(self):
        """The first of ``result_states``, or None.

        MPS: MPSNNFilterNode.resultState
        """
        states = self.result_states
        return states[0] if states else None

    @property
    def source_images(self):
        """The image nodes this filter reads, as a list.

        MPS: none (mpsx)
        """
        return [_wrap_image_node(s) for s in self.native().sources()]

    @property
    def source_states(self):
        """The state nodes this filter reads (a gradient node's gradient state, a loss node's labels), as a list.

        MPS: none (mpsx)
        """
        return [_wrap_state_node(s) for s in self.native().source_states()]

    @property
    def label(self):
        """A string that names the filter (default ``""``).

        MPS: MPSNNFilterNode.label
        """
        return self.native().label.decode()

    @label.setter
    def label(self, str value not None):
        self.native().label = value.encode()

    @property
    def padding_policy(self):
        """The padding policy of the filter's kernel, the filter's default unless set: NNPaddingMethod bits, or a
        padding object (NNDefaultPadding, NNPadding), read back as it was set. The gradient filters it makes take the
        object's ``inverse()`` where that is not None. A CUSTOM policy keeps the graph from fusing the node with a
        neuron unless its bits include CUSTOM_ALLOW_FOR_NODE_FUSION.

        MPS: MPSNNFilterNode.paddingPolicy
        """
        cdef CFilterNode* node = self.native()
        return padding_value(node.padding_method, node.padding_policy)

    @padding_policy.setter
    def padding_policy(self, value):
        cdef CFilterNode* node = self.native()
        set_padding(&node.padding_method, &node.padding_policy, value, "padding_policy")

    def gradient_filters_with_sources(self, gradient_images):
        """One gradient node per source of this filter that gets a gradient, given the gradient images of its results
        (image nodes), with the forward sources and states wired in; a binary node returns its primary's, then its
        secondary's.

        MPS: -[MPSNNFilterNode gradientFiltersWithSources:]
        """
        return [_wrap_filter_node(f) for f in
                self.native().gradient_filters(_image_nodes(gradient_images, "gradient_images"))]

    def gradient_filters_with_source(self, gradient_image):
        """``gradient_filters_with_sources([gradient_image])``.

        MPS: -[MPSNNFilterNode gradientFiltersWithSource:]
        """
        return self.gradient_filters_with_sources([gradient_image])

    def gradient_filter_with_sources(self, gradient_images):
        """The first of ``gradient_filters_with_sources(gradient_images)``.

        MPS: -[MPSNNFilterNode gradientFilterWithSources:]
        """
        return self.gradient_filters_with_sources(gradient_images)[0]

    def gradient_filter_with_source(self, gradient_image):
        """The gradient node of this filter, given the gradient image of its result (an image node).

        MPS: -[MPSNNFilterNode gradientFilterWithSource:]
        """
        return self.gradient_filters_with_sources([gradient_image])[0]

    def training_graph(self, source_gradient=None, node_handler=None):
        """Builds the gradient nodes of the graph that ends at this node (a loss node, or any node with
        ``source_gradient`` given) back to its sources, and returns the termini of the training graph.

        ``node_handler(gradient_node, inference_node, inference_source, gradient_source)`` is called for each new
        node; without one each gradient result takes its inference source's handle. Where several nodes read one
        image their gradients are summed by NNAdditionNodes.

        MPS: -[MPSNNFilterNode trainingGraphWithSourceGradient:nodeHandler:]
        """
        cdef shared_ptr[CImageNode] gradient
        if source_gradient is not None:
            gradient = _image_node_argument(source_gradient, "source_gradient").c
        if node_handler is not None and not callable(node_handler):
            raise TypeError(f"node_handler must be callable, given {type(node_handler).__name__}")
        return [_wrap_filter_node(f) for f in python_training_graph(self.c, gradient, node_handler,
                                                                       _wrap_filter_object, _wrap_image_object)]

    # ---- persistence (mpsx/persistence.py): a node made by its constructor saves the constructor's
    # arguments, one made by gradient_filters its forward node and gradient images; each saves the
    # properties of its class (_mpsx_properties), its result image and states and the source states it made
    # (a loss node's labels).

    _mpsx_properties = ("label", "padding_policy")

    def __mpsx_identity__(self):
        return ("node", <size_t>self.native())

    def __mpsx_dependencies__(self):
        cdef CFilterNode* node = self.native()
        made_from = [_wrap_image_node(s).producer for s in node.sources()]
        made_from += [_wrap_state_node(s).producer for s in node.source_states()]
        if node.gradient_origin().has_value():
            made_from.append(_wrap_filter_node(node.gradient_origin().value().forward))
            made_from += [_wrap_image_node(g).producer for g in node.gradient_origin().value().gradient_images]
        return [f for f in made_from if f is not None]

    def __mpsx_state__(self):
        cdef CFilterNode* node = self.native()
        state = {"properties": {name: getattr(self, name) for name in property_names(type(self))}}
        constructor_arguments = self._constructor_arguments()
        if constructor_arguments is not None:
            state["arguments"], state["keywords"] = constructor_arguments
        elif node.gradient_origin().has_value():
            state["gradient_of"] = _wrap_filter_node(node.gradient_origin().value().forward)
            state["gradient_images"] = [_wrap_image_node(g) for g in node.gradient_origin().value().gradient_images]
            state["index"] = node.gradient_origin().value().index
        else:
            state["arguments"], state["keywords"] = self._natively_made_arguments(), {}
        state["result_image"] = _node_properties(self.result_image, _IMAGE_NODE_PROPERTIES)
        state["result_states"] = [_node_properties(s, _STATE_NODE_PROPERTIES) for s in self.result_states]
        state["source_states"] = [None if s.producer is not None else _node_properties(s, _STATE_NODE_PROPERTIES)
                                  for s in self.source_states]
        return state

    def _natively_made_arguments(self):
        """The constructor's arguments of a node native code made (training_graph's additions)."""
        raise TypeError(f"mpsx.save: this {type(self).__name__} was made natively; mpsx cannot save it")

    @classmethod
    def __mpsx_restore__(cls, state, device):
        if "gradient_of" in state:
            forward, index = state["gradient_of"], state["index"]
            if not isinstance(forward, NNFilterNode):
                raise TypeError(f"expected the forward node of a gradient node, given {type(forward).__name__}")
            made = forward.gradient_filters_with_sources(state["gradient_images"])
            if type(index) is not int or not 0 <= index < len(made):
                raise ValueError(f"expected the index of one of the {len(made)} gradient nodes of a "
                                 f"{type(forward).__name__}, given {index!r}")
            node = made[index]
            if type(node) is not cls:
                raise TypeError(f"a {type(forward).__name__} makes a {type(node).__name__} there, not a {cls.__name__}")
        else:
            node = cls(*state["arguments"], **state["keywords"])
        restore_properties(node, state["properties"], property_names(cls))
        restore_properties(node.result_image, state["result_image"], _IMAGE_NODE_PROPERTIES)
        for what, states, saved in (("result", node.result_states, state["result_states"]),
                                    ("source", node.source_states, state["source_states"])):
            if not isinstance(saved, list) or len(saved) != len(states):
                raise ValueError(f"expected the properties of the {len(states)} {what} states of a {cls.__name__}, "
                                 f"given {quoted(saved)}")
            for state_node, properties in zip(states, saved):
                if properties is not None:
                    restore_properties(state_node, properties, _STATE_NODE_PROPERTIES)
        return node

    def __reduce__(self):
        return persistence_reduce(self)

    def __eq__(self, other):
        return isinstance(other, NNFilterNode) and (<NNFilterNode>other).c.get() == self.c.get()

    def __hash__(self):
        return hash(<size_t>self.c.get())

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.{type(self).__name__}>"


cdef class NNGradientFilterNode(NNFilterNode):
    """A gradient node: it makes no gradient nodes of its own (its ``gradient_filter*`` methods raise).

    MPS: MPSNNGradientFilterNode
    """


class NNTrainableNode:
    """The base the trainable nodes share with their filter node base: the convolution, fully connected,
    convolution transpose, batch, instance and group normalization nodes and their gradient nodes, whose gradient
    updates weights.

    MPS: MPSNNTrainableNode
    """
    __slots__ = ()  # the node classes keep no __dict__
    _mpsx_properties = ("training_style",)

    @property
    def training_style(self):
        """How the gradient updates the weights (NNTrainingStyle): GPU (default) on the command buffer where the data
        source can and on the host otherwise, CPU through its host update, NONE not at all; the setter also takes
        ``"gpu"``, ``"cpu"`` and ``"none"``. The gradient nodes made from a forward node take its style.

        MPS: MPSNNTrainableNode.trainingStyle
        """
        return NNTrainingStyle(<int>(<NNFilterNode?>self).native().training_style)

    @training_style.setter
    def training_style(self, value):
        (<NNFilterNode?>self).native().training_style = <CTrainingStyle><int>_training_style(value)


def _training_style(value):
    if isinstance(value, str):
        try:
            return NNTrainingStyle[value.upper()]
        except KeyError:
            raise ValueError(f"training_style must be 'none', 'cpu' or 'gpu', given {value!r}") from None
    return NNTrainingStyle(integer_argument(value, "training_style"))


cdef class CNNNormalizationNode(NNFilterNode):
    """CNNNormalizationNode(source)
--

    The base of the cross-channel, spatial and local contrast normalization nodes: their alpha, beta and delta, each
    node's defaults those of its MPS class. Abstract (TypeError).

    MPS: MPSCNNNormalizationNode
    """
    _mpsx_properties = ("alpha", "beta", "delta")

    def __init__(self, source):
        raise TypeError("CNNNormalizationNode is abstract; make a CNNCrossChannelNormalizationNode, "
                        "CNNSpatialNormalizationNode or CNNLocalContrastNormalizationNode")

    @classmethod
    def node_with_source(cls, source):
        """The same as ``cls(source)``; each subclass's takes its own arguments.

        MPS: +[MPSCNNNormalizationNode nodeWithSource:]
        """
        return cls(source)

    # Each subclass reads and sets its parameters (0 alpha, 1 beta, 2 delta), checking a value it refuses.
    cdef float _parameter(self, int which) except? -1:
        raise TypeError("CNNNormalizationNode is abstract")

    cdef int _set_parameter(self, int which, str name, float value) except -1:
        raise TypeError("CNNNormalizationNode is abstract")

    @property
    def alpha(self):
        """The scale of the window's sum of squares (cross-channel, spatial: finite, not negative) or variance (local
        contrast: finite).

        MPS: MPSCNNNormalizationNode.alpha
        """
        self.native()
        return self._parameter(0)

    @alpha.setter
    def alpha(self, value):
        self.native()
        self._set_parameter(0, "alpha", float_argument(value, "alpha"))

    @property
    def beta(self):
        """The exponent of the denominator (finite).

        MPS: MPSCNNNormalizationNode.beta
        """
        self.native()
        return self._parameter(1)

    @beta.setter
    def beta(self, value):
        self.native()
        self._set_parameter(1, "beta", float_argument(value, "beta"))

    @property
    def delta(self):
        """The offset of the denominator (finite).

        MPS: MPSCNNNormalizationNode.delta
        """
        self.native()
        return self._parameter(2)

    @delta.setter
    def delta(self, value):
        self.native()
        self._set_parameter(2, "delta", float_argument(value, "delta"))


cdef float _response_parameter(CResponseNormalizationSettings* settings, int which):
    """Parameter `which` (0 alpha, 1 beta, 2 delta) of the cross-channel and spatial normalization nodes."""
    return settings.alpha() if which == 0 else settings.beta() if which == 1 else settings.delta()


cdef int _set_response_parameter(CResponseNormalizationSettings* settings, int which, float value) except -1:
    if which == 0:
        settings.set_alpha(value)
    elif which == 1:
        settings.set_beta(value)
    else:
        settings.set_delta(value)
    return 0


cdef object _wrap_filter_node(const shared_ptr[CFilterNode]& node):
    if not node:
        return None
    made = node.get().constructor_arguments
    cls = (<tuple><object><PyObject*>made.get())[2] if made else _wrapper_class(node.get().class_name())
    cdef NNFilterNode out = cls.__new__(cls)
    out.c = node
    return out


cdef object _wrap_filter_object(const shared_ptr[CFilterNode]& node):
    return _wrap_filter_node(node)


cdef object _wrap_image_object(const shared_ptr[CImageNode]& node):
    return _wrap_image_node(node)


cdef size_t _source_index(index) except? 0:
    cdef int64_t i = integer_argument(index, "index")
    if i < 0:
        raise ValueError(f"index must be at least 0, given {i}")
    return <size_t>i


cdef class NNGraph:
    """NNGraph(device, result_image=None, result_image_is_needed=True, *, result_images=None,
        results_are_needed=None, format=None, data_parallel=None)
--

    A graph of filter nodes compiled for a device: the filters the needed results and the weight updates require,
    compiled once, encoded in one native call per step.

    ``NNGraph(device, result_image, result_image_is_needed=True)`` or
    ``NNGraph(device, result_images=[...], results_are_needed=[...])``: ``result_image_is_needed=False`` (the usual
    choice for training, where the last gradient only updates weights) makes ``encode`` return None and lets that
    computation be pruned. ``format`` (DataType.FLOAT16, MPS's default, or FLOAT32) sets the storage of the images
    the graph makes; ``data_parallel`` a data-parallel group (see ``data_parallel``). TypeError for both or neither
    of ``result_image`` and ``result_images``. As ``-[MPSNNGraph initWithDevice:resultImage:resultImageIsNeeded:]``
    and ``-[MPSNNGraph initWithDevice:resultImages:resultsAreNeeded:]``.

    MPS: MPSNNGraph
    """
    cdef shared_ptr[CNNGraph] c
    cdef object __weakref__  # ImportedModel reloads the graphs it made while they live

    def __init__(self, Device device not None, result_image=None, result_image_is_needed=True, *,
                 result_images=None, results_are_needed=None, format=None, data_parallel=None):
        cdef vector[cbool] needed
        if (result_image is None) == (result_images is None):
            raise TypeError("NNGraph: give result_image or result_images, not both")
        if result_image is not None:
            results = [result_image]
            flags = [result_image_is_needed]
        else:
            results = list(result_images)
            flags = [True] * len(results) if results_are_needed is None else list(results_are_needed)
        for flag in flags:
            needed.push_back(bool(flag))
        self.c = make_native[CNNGraph](device.shared(), _image_nodes(results, "result_images"), needed)
        if format is not None:
            self.format = format
        if data_parallel is not None:
            self.data_parallel = data_parallel

    @classmethod
    def graph_with_device(cls, device, result_image=None, result_image_is_needed=True, *, result_images=None,
                          results_are_needed=None):
        """The same as ``NNGraph(...)``: a new graph. MPS's three factories are this one method.

        MPS: +[MPSNNGraph graphWithDevice:resultImage:], +[MPSNNGraph graphWithDevice:resultImage:resultImageIsNeeded:], +[MPSNNGraph graphWithDevice:resultImages:resultsAreNeeded:]
        """
        return cls(device, result_image, result_image_is_needed, result_images=result_images,
                   results_are_needed=results_are_needed)

    cdef CNNGraph* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    @property
    def device(self):
        """The device the graph encodes for.

        MPS: MPSKernel.device
        """
        return wrap_device(self.native().device())

    @property
    def source_image_handles(self):
        """The handles of the source images, in the order ``encode`` takes them.

        MPS: MPSNNGraph.sourceImageHandles
        """
        return [_handle_object(n.get().handle) for n in self.native().source_images()]

    @property
    def source_state_handles(self):
        """The handles of the source states (the labels of loss nodes), in the order ``encode`` takes them.

        MPS: MPSNNGraph.sourceStateHandles
        """
        return [_handle_object(n.get().handle) for n in self.native().source_states()]

    def read_count_for_source_image_at_index(self, index):
        """How many times an encode reads source image ``index`` (of ``source_image_handles``): the amount by which
        it lowers a temporary source image's ``read_count``, which must be at least this when it is given.
        ValueError for an index past the source images.

        MPS: -[MPSNNGraph readCountForSourceImageAtIndex:]
        """
        return self.native().read_count_for_source_image(_source_index(index))

    def read_count_for_source_state_at_index(self, index):
        """How many times an encode reads source state ``index`` (of ``source_state_handles``), as
        ``read_count_for_source_image_at_index``. ValueError for an index past the source states.

        MPS: -[MPSNNGraph readCountForSourceStateAtIndex:]
        """
        return self.native().read_count_for_source_state(_source_index(index))

    @property
    def intermediate_image_handles(self):
        """The handles of the exported intermediate images, in the order ``encode`` returns them.

        MPS: MPSNNGraph.intermediateImageHandles
        """
        return [_handle_object(n.get().handle) for n in self.native().intermediate_images()]

    @property
    def result_state_handles(self):
        """The handles of the exported result states, in the order ``encode`` returns them.

        MPS: MPSNNGraph.resultStateHandles
        """
        return [_handle_object(n.get().handle) for n in self.native().result_states()]

    @property
    def result_handle(self):
        """The handle of the result image.

        MPS: MPSNNGraph.resultHandle
        """
        return _handle_object(self.native().result().get().handle)

    @property
    def result_image_is_needed(self):
        """Whether ``encode`` returns the result image.

        MPS: MPSNNGraph.resultImageIsNeeded
        """
        return self.native().result_image_is_needed()

    # ---- persistence: MPSNNGraph's NSSecureCoding and copyWithZone:device:. The nodes the results reach
    # are described first, producers first; then the graph by its constructor's arguments and settings.

    def __mpsx_dependencies__(self):
        return [_wrap_image_node(r).producer for r in self.native().results()]

    def __mpsx_state__(self):
        cdef CNNGraph* graph = self.native()
        return {"device": self.device.name, "results": [_wrap_image_node(r) for r in graph.results()],
                "results_are_needed": [bool(needed) for needed in graph.results_are_needed()],
                "format": int(self.format), "output_state_is_temporary": graph.output_state_is_temporary}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        graph = cls(device_of(state, device), result_images=state["results"],
                    results_are_needed=state["results_are_needed"], format=state["format"])
        graph.output_state_is_temporary = state["output_state_is_temporary"]
        return graph

    def __reduce__(self):
        return persistence_reduce(self)

    def copy(self, device=None):
        """An independent graph on ``device`` (default: this graph's), its nodes and data sources copied, made through
        the graph's saved description.

        MPS: -[MPSNNGraph copyWithZone:device:]
        """
        return persistence_copy(self, device)

    @property
    def number_of_filters(self):
        """How many filters the graph encodes (after pruning and fusion).

        MPS: none (mpsx)
        """
        return self.native().step_count()

    @property
    def number_of_fused_filters(self):
        """How many filters compiled into another's step (a neuron fused into the normalization before it, and its
        gradient into the normalization's gradient).

        MPS: none (mpsx)
        """
        return self.native().fused_count()

    @property
    def output_state_is_temporary(self):
        """Whether the states ``encode`` returns are temporary (default False): valid only on the command buffer of
        that encode, for as many gradient encodes as their ``read_count`` (1) allows. Otherwise they are valid on any
        command buffer of the device.

        MPS: MPSNNGraph.outputStateIsTemporary
        """
        return self.native().output_state_is_temporary

    @output_state_is_temporary.setter
    def output_state_is_temporary(self, cbool value):
        self.native().output_state_is_temporary = value

    @property
    def capture_encodes(self):
        """Whether encodes run a recording of the graph's step once they repeat (default True, or False where the
        environment set ``MPSX_CAPTURE_ENCODES=0`` when the graph was made). An encode onto a command buffer that is not
        replayable, with the source sizes, command queue and settings of the encode before it, records the step once
        onto a replayable command buffer of the graph's own; each later such encode encodes copies of its sources in,
        a run of that recording (one CUDA graph launch on cuda) and copies of its results out, as
        ``torch.compile(mode="reduce-overhead")`` does. Results, states, images returned, completed handlers and
        errors are those of encoding every step. A graph whose encode resolves values anew each time (Adam's time
        step, dropout masks), calls back into Python (data sources, image allocators, padding policies), updates on
        the host, trains data-parallel or exports states encodes every step. See docs/semantics.md, "Graph capture".

        MPS: none (mpsx)
        """
        return self.native().capture_encodes

    @capture_encodes.setter
    def capture_encodes(self, cbool value):
        self.native().capture_encodes = value

    @property
    def captured_encode_count(self):
        """How many encodes of this graph ran its recording instead of encoding every step (see ``capture_encodes``).

        MPS: none (mpsx)
        """
        return self.native().captured_encode_count()

    @property
    def destination_image_allocator(self):
        """What makes the graph's result images (``Image.default_allocator()`` unless set), in place of their nodes'
        ``image_allocator``. None sets the default again.

        MPS: MPSNNGraph.destinationImageAllocator
        """
        return image_allocator_value(self.native().destination_image_allocator, False)

    @destination_image_allocator.setter
    def destination_image_allocator(self, value):
        set_image_allocator(&self.native().destination_image_allocator, value, "destination_image_allocator")

    @property
    def format(self):
        """The storage of the images the graph makes whose node sets none: DataType.FLOAT16 (MPS's default) or
        DataType.FLOAT32. Read at each encode.

        MPS: MPSNNGraph.format
        """
        return DataType(<int>self.native().format())

    @format.setter
    def format(self, value):
        self.native().set_format(_graph_format(value, "NNGraph.format"))

    @property
    def data_parallel(self):
        """None, or the ``mpsx.distributed`` group (a ProcessGroup or its Communicator) the graph trains with: each
        encode all-reduces the mean over the group of every trainable node's gradients, in buckets, and encodes the
        updates after it. Not saved with the graph.

        MPS: none (mpsx)
        """
        cdef Communicator communicator
        if not self.native().data_parallel():
            return None
        communicator = Communicator.__new__(Communicator)
        communicator.c = self.native().data_parallel()
        return communicator

    @data_parallel.setter
    def data_parallel(self, value):
        cdef shared_ptr[CCommunicator] communicator
        if value is not None:
            value = getattr(value, "communicator", value)
            if not isinstance(value, Communicator):
                raise TypeError(f"data_parallel: expected None or an mpsx.distributed group, given "
                                f"{type(value).__name__}")
            (<Communicator>value).native()
            communicator = (<Communicator>value).c
        self.native().set_data_parallel(communicator)

    def reload_from_data_sources(self):
        """Every filter with a data source reloads it now; the caller makes sure no encoded work still runs.

        MPS: -[MPSNNGraph reloadFromDataSources]
        """
        self.native().reload_from_data_sources()

    def execute_async(self, source_images, completion_handler):
        """Encodes the graph on a command buffer of the device's queue and commits it;
        ``completion_handler(result, error)`` is called once it has completed, on any thread (error None on
        success). Returns the result image, whose contents are valid in the handler. A graph with source states
        (loss labels) cannot run this way (ValueError).

        MPS: -[MPSNNGraph executeAsyncWithSourceImages:completionHandler:]
        """
        if not callable(completion_handler):
            raise TypeError(f"expected a callable completion handler, given {type(completion_handler).__name__}")
        if self.native().source_states().size():
            raise ValueError(f"execute_async takes no source states; this graph needs "
                             f"{self.native().source_states().size()} (use encode)")
        command_buffer = self.device.command_queue.command_buffer()
        result = self.encode(command_buffer, source_images)
        if result is not None:
            result.synchronize(command_buffer)
        command_buffer.add_completed_handler(
            lambda cb: completion_handler(result, cb.error if cb.status != "completed" else None))
        command_buffer.commit()
        return result

    def encode_batch(self, CommandBuffer command_buffer not None, source_images, source_states=None,
                     intermediate_images=False, destination_states=False):
        """Encodes the graph over batches: one ImageBatch (or list of Images) per source image handle, one entry per
        source state handle (for loss labels a list of one CNNLossLabels per image, as MPS's MPSStateBatch, or one
        CNNLossLabels holding the batch). Returns the result batch (None unless needed), and
        with ``intermediate_images=True`` / ``destination_states=True`` a tuple with the exported intermediate
        images and result states too.

        MPS: -[MPSNNGraph encodeBatchToCommandBuffer:sourceImages:sourceStates:intermediateImages:destinationStates:]
        """
        return self._encode(command_buffer, source_images, source_states, intermediate_images, destination_states,
                            True)

    def encode(self, CommandBuffer command_buffer not None, source_images, source_states=None,
               intermediate_images=False, destination_states=False):
        """Encodes the graph: one Image per source image handle (an Image is a batch of its images), as
        ``encode_batch``.

        MPS: -[MPSNNGraph encodeToCommandBuffer:sourceImages:sourceStates:intermediateImages:destinationStates:]
        """
        return self._encode(command_buffer, source_images, source_states, intermediate_images, destination_states,
                            False)

    cdef object _encode(self, CommandBuffer command_buffer, source_images, source_states, cbool want_intermediates,
                        cbool want_states, cbool batch):
        cdef CNNGraph* graph = self.native()
        cdef vector[shared_ptr[CImage]] images
        cdef vector[shared_ptr[CState]] states
        cdef CGraphEncoded r
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        for source in source_images:
            images.push_back(image_of(_batch_of(command_buffer, source) if batch else source))
        _source_states(self, source_states, states, batch)
        r = graph.encode(command_buffer.native()[0], images, states)
        encoding.complete()
        result = _wrap_graph_image(r.result, batch) if r.result else None
        if not (want_intermediates or want_states):
            return result
        out = [result]
        if want_intermediates:
            out.append([_wrap_graph_image(i, batch) for i in r.intermediate_images])
        if want_states:
            out.append([_wrap_graph_state(s) for s in r.result_states])
        return tuple(out)

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.NNGraph of {self.number_of_filters} filters on {self.device.name}>"


cdef _source_states(NNGraph graph, object given, vector[shared_ptr[CState]]& states, cbool batch):
    """One state per source state handle: a state, or for a loss node's labels a list of one CNNLossLabels per image
    (an MPSStateBatch)."""
    given = [] if given is None else given
    if not isinstance(given, (list, tuple)):
        raise TypeError(f"source_states: expected a list with one entry per source state handle, given "
                        f"{type(given).__name__}")
    cdef size_t handles = graph.native().source_states().size()
    if len(given) != handles and handles and all(isinstance(s, CNNLossLabels) for s in given) and len(given) > 1:
        raise ValueError(f"source_states: expected {handles} entries, one per source state handle, each a "
                         f"CNNLossLabels for the batch or a list of one CNNLossLabels per image "
                         f"(NSArray<MPSStateBatch*>); given {len(given)} CNNLossLabels: per-image labels go in a "
                         f"list of their own, source_states=[[labels_0, labels_1, ...]]")
    for i, state in enumerate(given):
        if isinstance(state, (list, tuple)):
            if not batch:
                _not_a_batch(state)
            if state and isinstance(state[0], State) and not isinstance(state[0], CNNLossLabels):
                # The StateBatch of another kind of state: its items are the one state of the batch.
                states.push_back(_state_of(state, f"source_states entry {i}"))
                continue
            state = _labels_state(graph.device, state)
        elif not isinstance(state, State):
            raise TypeError(f"source_states: expected, per source state handle, an mpsx state or (for loss labels) "
                            f"a list of one CNNLossLabels per image; entry {i} is {type(state).__name__}")
        states.push_back((<State>state).shared())


cdef object _not_a_batch(object state):
    raise TypeError(f"source_states: encode takes one state per source state handle (MPS: NSArray<MPSState*>); a "
                    f"list of per-image labels (MPSStateBatch) goes to encode_batch")


cdef object _wrap_graph_image(const shared_ptr[CImage]& image, cbool batch):
    return wrap_image_batch(image) if batch else wrap_image(image)


cdef State _wrap_graph_state(const shared_ptr[CState]& state):
    # The class of the state's kernel family where the graph exports one a caller may use.
    cdef bytes name = state.get().class_name()
    cls = _GRAPH_STATE_CLASSES.get(name, State)
    if cls is CNNBatchNormalizationState:
        return wrap_batch_normalization_state(static_pointer_cast[CBatchNormalizationState, CState](state))
    cdef State out = cls.__new__(cls)
    out.c = state
    return out


_GRAPH_STATE_CLASSES = {
    b"MPSNNGradientState": NNGradientState,
    b"MPSCNNConvolutionGradientState": CNNConvolutionGradientState,
    b"MPSCNNBatchNormalizationState": CNNBatchNormalizationState,
}

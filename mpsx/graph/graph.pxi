# MPSNNGraph and its node classes (MPSNNGraph.h, MPSNNGraphNodes.h): thin
# wrappers of native/include/mpsx/graph.h. Nodes have no device; NNGraph
# compiles the nodes it needs once, in native code.

from cpython.ref cimport PyObject
from libcpp cimport bool as cbool

from mpsx.includes.graph cimport (
    CFilterNode, CGraphEncoded, CImageNode, CNNGraph, CStateNode, StateNodeKind, TrainingStyle as CTrainingStyle,
    python_training_graph)
from mpsx.includes.errors cimport hold

__all__ += ["NNImageNode", "NNStateNode", "NNGradientStateNode", "CNNConvolutionGradientStateNode",
            "NNLabelsNode", "NNFilterNode", "NNGradientFilterNode", "NNGraph",
            "NNTrainingStyle"]


cdef CDataType _graph_format(object value, str what) except *:
    try:
        data_type = DataType(value)
    except (ValueError, TypeError):
        raise TypeError(f"{what}: expected DataType.FLOAT16 or DataType.FLOAT32, given {value!r}") from None
    if data_type not in (DataType.FLOAT16, DataType.FLOAT32):
        raise ValueError(f"{what}: expected DataType.FLOAT16 or DataType.FLOAT32, given {data_type!r}")
    return <CDataType><int>data_type


class NNTrainingStyle(enum.IntEnum):
    """MPSNNTrainingStyle: which update a trainable node's gradient calls (training_style)."""
    NONE = 0
    CPU = 1
    GPU = 2


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
    """MPSNNImageNode(handle=None): an image of a graph, a source unless a filter's result_image."""
    cdef shared_ptr[CImageNode] c

    def __init__(self, handle=None):
        self.c = shared_ptr[CImageNode](new CImageNode(_handle_of(handle)))

    @classmethod
    def node_with_handle(cls, handle):
        return cls(handle)

    @classmethod
    def exported_node_with_handle(cls, handle):
        """A node with export_from_graph set: the graph returns it among its intermediate images."""
        node = cls(handle)
        node.export_from_graph = True
        return node

    cdef CImageNode* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    @property
    def handle(self):
        return _handle_object(self.native().handle)

    @handle.setter
    def handle(self, value):
        self.native().handle = _handle_of(value)

    @property
    def export_from_graph(self):
        return self.native().export_from_graph

    @export_from_graph.setter
    def export_from_graph(self, cbool value):
        self.native().export_from_graph = value

    @property
    def synchronize_resource(self):
        return self.native().synchronize_resource

    @synchronize_resource.setter
    def synchronize_resource(self, cbool value):
        self.native().synchronize_resource = value

    @property
    def stop_gradient(self):
        """training_graph does not propagate gradients past this image."""
        return self.native().stop_gradient

    @stop_gradient.setter
    def stop_gradient(self, cbool value):
        self.native().stop_gradient = value

    @property
    def format(self):
        """The storage of the image the graph makes (DataType.FLOAT16 or FLOAT32); None (the default) takes
        the graph's format."""
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
    def producer(self):
        """The filter node that writes this image; None for a source of the graph."""
        return _wrap_filter_node(self.native().producer())

    def __eq__(self, other):
        return isinstance(other, NNImageNode) and (<NNImageNode>other).c.get() == self.c.get()

    def __hash__(self):
        return hash(<size_t>self.c.get())

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.NNImageNode handle={self.handle!r}>"


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
    """MPSNNStateNode: a state a filter makes for its gradient (result_state), or the labels of a loss."""
    cdef shared_ptr[CStateNode] c

    def __init__(self, *args, **kwargs):
        raise TypeError("state nodes come from filter nodes (result_state)")

    cdef CStateNode* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    @property
    def handle(self):
        return _handle_object(self.native().handle)

    @handle.setter
    def handle(self, value):
        self.native().handle = _handle_of(value)

    @property
    def export_from_graph(self):
        return self.native().export_from_graph

    @export_from_graph.setter
    def export_from_graph(self, cbool value):
        self.native().export_from_graph = value

    @property
    def synchronize_resource(self):
        return self.native().synchronize_resource

    @synchronize_resource.setter
    def synchronize_resource(self, cbool value):
        self.native().synchronize_resource = value

    def __eq__(self, other):
        return isinstance(other, NNStateNode) and (<NNStateNode>other).c.get() == self.c.get()

    def __hash__(self):
        return hash(<size_t>self.c.get())

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.{type(self).__name__} handle={self.handle!r}>"


cdef class NNGradientStateNode(NNStateNode):
    """MPSNNGradientStateNode."""


cdef class CNNConvolutionGradientStateNode(NNGradientStateNode):
    """MPSCNNConvolutionGradientStateNode."""


cdef class NNLabelsNode(NNStateNode):
    """MPSNNLabelsNode: the labels of a loss node, given to the graph as a source state."""


cdef NNStateNode _wrap_state_node(const shared_ptr[CStateNode]& node):
    if not node:
        return None
    cdef StateNodeKind kind = node.get().kind()
    cdef NNStateNode out
    if kind == StateNodeKind.ConvolutionGradient:
        out = CNNConvolutionGradientStateNode.__new__(CNNConvolutionGradientStateNode)
    elif kind == StateNodeKind.ConvolutionTransposeGradient:
        out = CNNConvolutionTransposeGradientStateNode.__new__(CNNConvolutionTransposeGradientStateNode)
    elif kind == StateNodeKind.BinaryGradient:
        out = NNBinaryGradientStateNode.__new__(NNBinaryGradientStateNode)
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
    """MPSNNFilterNode: a filter of a graph; each family's node class derives from it."""
    cdef shared_ptr[CFilterNode] c

    def __init__(self, *args, **kwargs):
        raise TypeError("NNFilterNode is abstract; make a node of a kernel family")

    cdef CFilterNode* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    @property
    def result_image(self):
        return _wrap_image_node(self.native().result_image())

    @property
    def result_states(self):
        return [_wrap_state_node(s) for s in self.native().result_states()]

    @property
    def result_state(self):
        states = self.result_states
        return states[0] if states else None

    @property
    def source_images(self):
        return [_wrap_image_node(s) for s in self.native().sources()]

    @property
    def source_states(self):
        return [_wrap_state_node(s) for s in self.native().source_states()]

    @property
    def label(self):
        return self.native().label.decode()

    @label.setter
    def label(self, str value not None):
        self.native().label = value.encode()

    @property
    def padding_policy(self):
        """MPSNNPaddingMethod of the filter's kernel (the filter's default unless set)."""
        return NNPaddingMethod(self.native().padding_policy)

    @padding_policy.setter
    def padding_policy(self, value):
        cdef int64_t method = integer_argument(value, "padding_policy")
        if not 0 <= method <= 0xFFFFFFFF:
            raise ValueError(f"padding_policy must be an NNPaddingMethod (a 32-bit unsigned int), given {method}")
        self.native().padding_policy = <uint32_t>method

    def gradient_filters_with_sources(self, gradient_images):
        """One gradient node per source that gets a gradient, the forward sources and states wired in."""
        return [_wrap_filter_node(f) for f in
                self.native().gradient_filters(_image_nodes(gradient_images, "gradient_images"))]

    def gradient_filters_with_source(self, gradient_image):
        return self.gradient_filters_with_sources([gradient_image])

    def gradient_filter_with_sources(self, gradient_images):
        return self.gradient_filters_with_sources(gradient_images)[0]

    def gradient_filter_with_source(self, gradient_image):
        """MPS -gradientFilterWithSource: the gradient node of this filter."""
        return self.gradient_filters_with_sources([gradient_image])[0]

    def training_graph(self, source_gradient=None, node_handler=None):
        """MPS -trainingGraphWithSourceGradient:nodeHandler: on the last inference node; returns the termini.

        node_handler(gradient_node, inference_node, inference_source, gradient_source) is called for each
        new node; without one each gradient result takes its inference source's handle."""
        cdef shared_ptr[CImageNode] gradient
        if source_gradient is not None:
            gradient = _image_node_argument(source_gradient, "source_gradient").c
        if node_handler is not None and not callable(node_handler):
            raise TypeError(f"node_handler must be callable, given {type(node_handler).__name__}")
        return [_wrap_filter_node(f) for f in python_training_graph(self.c, gradient, node_handler,
                                                                       _wrap_filter_object, _wrap_image_object)]

    def __eq__(self, other):
        return isinstance(other, NNFilterNode) and (<NNFilterNode>other).c.get() == self.c.get()

    def __hash__(self):
        return hash(<size_t>self.c.get())

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.{type(self).__name__}>"


cdef class NNGradientFilterNode(NNFilterNode):
    """MPSNNGradientFilterNode: a gradient node makes no gradient nodes of its own."""


cdef object _get_training_style(NNFilterNode node):
    return NNTrainingStyle(<int>node.native().training_style)


cdef _set_training_style(NNFilterNode node, value):
    """MPSNNTrainableNode's trainingStyle: "none", "cpu", "gpu" or an NNTrainingStyle."""
    node.native().training_style = <CTrainingStyle><int>_training_style(value)


def _training_style(value):
    if isinstance(value, str):
        try:
            return NNTrainingStyle[value.upper()]
        except KeyError:
            raise ValueError(f"training_style must be 'none', 'cpu' or 'gpu', given {value!r}") from None
    return NNTrainingStyle(integer_argument(value, "training_style"))


cdef object _wrap_filter_node(const shared_ptr[CFilterNode]& node):
    if not node:
        return None
    cls = globals()[node.get().class_name().decode()[3:]]
    cdef NNFilterNode out = cls.__new__(cls)
    out.c = node
    return out


cdef object _wrap_filter_object(const shared_ptr[CFilterNode]& node):
    return _wrap_filter_node(node)


cdef object _wrap_image_object(const shared_ptr[CImageNode]& node):
    return _wrap_image_node(node)


cdef class NNGraph:
    """MPSNNGraph(device, result_image, result_image_is_needed=True), or
    NNGraph(device, result_images=[...], results_are_needed=[...]): compiles the filters the needed
    results and the weight updates require, once."""
    cdef shared_ptr[CNNGraph] c

    def __init__(self, Device device not None, result_image=None, result_image_is_needed=True, *,
                 result_images=None, results_are_needed=None, format=None):
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

    cdef CNNGraph* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    @property
    def device(self):
        return wrap_device(self.native().device())

    @property
    def source_image_handles(self):
        """The handles of the source images, in the order encode takes them."""
        return [_handle_object(n.get().handle) for n in self.native().source_images()]

    @property
    def source_state_handles(self):
        """The handles of the source states (the labels of loss nodes), in the order encode takes them."""
        return [_handle_object(n.get().handle) for n in self.native().source_states()]

    @property
    def intermediate_image_handles(self):
        return [_handle_object(n.get().handle) for n in self.native().intermediate_images()]

    @property
    def result_state_handles(self):
        return [_handle_object(n.get().handle) for n in self.native().result_states()]

    @property
    def result_handle(self):
        return _handle_object(self.native().result().get().handle)

    @property
    def result_image_is_needed(self):
        return self.native().result_image_is_needed()

    @property
    def number_of_filters(self):
        """How many filters the graph encodes (after pruning and fusion)."""
        return self.native().step_count()

    @property
    def number_of_fused_filters(self):
        """How many filters compiled into another's step (a neuron fused into the normalization before it,
        and its gradient into the normalization's gradient)."""
        return self.native().fused_count()

    @property
    def output_state_is_temporary(self):
        """MPSNNGraph.outputStateIsTemporary (default False). mpsx states are reference counted, so the
        states encode returns are valid and readable after synchronize either way."""
        return self.native().output_state_is_temporary

    @output_state_is_temporary.setter
    def output_state_is_temporary(self, cbool value):
        self.native().output_state_is_temporary = value

    @property
    def format(self):
        """MPSNNGraph.format: the storage of the images the graph makes whose node sets none:
        DataType.FLOAT16 (MPS's default) or DataType.FLOAT32. Read at each encode."""
        return DataType(<int>self.native().format())

    @format.setter
    def format(self, value):
        self.native().set_format(_graph_format(value, "NNGraph.format"))

    def reload_from_data_sources(self):
        """MPS -reloadFromDataSources: every filter with a data source reloads it now."""
        self.native().reload_from_data_sources()

    def execute_async(self, source_images, completion_handler):
        """MPS -executeAsyncWithSourceImages:completionHandler: encodes the graph on a command buffer of
        the device's queue and commits it; completion_handler(result, error) is called once when it has
        completed, on any thread (error None on success). Returns the result image, whose contents are
        valid in the handler. A graph with source states (loss labels) cannot run this way."""
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
        """Encodes the graph over batches: one ImageBatch (or list of Images) per source handle, one state
        (CNNLossLabels for loss labels) per source state handle. Returns the result batch (None unless
        needed), and the intermediate images and destination states where asked."""
        return self._encode(command_buffer, source_images, source_states, intermediate_images, destination_states,
                            True)

    def encode(self, CommandBuffer command_buffer not None, source_images, source_states=None,
               intermediate_images=False, destination_states=False):
        """Encodes the graph: one Image per source handle (an Image is a batch of its images)."""
        return self._encode(command_buffer, source_images, source_states, intermediate_images, destination_states,
                            False)

    cdef object _encode(self, CommandBuffer command_buffer, source_images, source_states, cbool want_intermediates,
                        cbool want_states, cbool batch):
        cdef CNNGraph* graph = self.native()
        cdef vector[shared_ptr[CImage]] images
        cdef vector[shared_ptr[CState]] states
        cdef CGraphEncoded r
        cdef CommandBufferMark mark = command_buffer.native().mark()
        try:
            for source in source_images:
                images.push_back(image_of(_batch_of(command_buffer, source) if batch else source))
            for state in (source_states or ()):
                if not isinstance(state, State):
                    raise TypeError(f"source_states: expected mpsx states, given {type(state).__name__}")
                states.push_back((<State>state).shared())
            r = graph.encode(command_buffer.native()[0], images, states)
        except BaseException:
            command_buffer.native().discard_since(mark)
            raise
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

# MPSCNNNeuronNode and MPSCNNNeuronGradientNode (native/include/mpsx/graph/neuron.h).

from mpsx.includes.graph.neuron cimport CCNNNeuronNode, CCNNNeuronGradientNode

__all__ += ["CNNNeuronNode", "CNNNeuronGradientNode", "CNNNeuronAbsoluteNode", "CNNNeuronELUNode",
            "CNNNeuronExponentialNode", "CNNNeuronGeLUNode", "CNNNeuronHardSigmoidNode", "CNNNeuronLinearNode",
            "CNNNeuronLogarithmNode", "CNNNeuronPReLUNode", "CNNNeuronPowerNode", "CNNNeuronReLUNode",
            "CNNNeuronReLUNNode", "CNNNeuronSigmoidNode", "CNNNeuronSoftPlusNode", "CNNNeuronSoftSignNode",
            "CNNNeuronTanHNode"]


cdef class CNNNeuronNode(NNFilterNode):
    """CNNNeuronNode(source, descriptor)
--

    A neuron of a graph: the activation function of ``descriptor`` (an NNNeuronDescriptor) on ``source``. The
    per-type neuron nodes (CNNNeuronReLUNode, ...) derive from it. As
    ``+[MPSCNNNeuronNode nodeWithSource:descriptor:]``.

    MPS: MPSCNNNeuronNode
    """

    def __init__(self, source, NNNeuronDescriptor descriptor not None):
        self._make(source, descriptor, (source, descriptor))

    cdef _make(self, source, NNNeuronDescriptor descriptor, tuple arguments):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNNeuronNode](_image_node_argument(source, "source").c,
                                                                      descriptor.desc), arguments)

    @classmethod
    def node_with_source(cls, source, descriptor):
        """A new node of the type ``descriptor`` names, as in MPS: a CNNNeuronReLUNode for NeuronType.RELU, ... (its
        parameters those of the descriptor that the type has); a CNNNeuronNode for NeuronType.NONE.

        MPS: +[MPSCNNNeuronNode nodeWithSource:descriptor:]
        """
        if not isinstance(descriptor, NNNeuronDescriptor):
            raise TypeError(f"descriptor must be an mpsx.NNNeuronDescriptor, given {quoted(descriptor)}")
        typed = _neuron_nodes.get(descriptor.neuron_type) if cls is CNNNeuronNode else None
        if typed is None:
            return cls(source, descriptor)
        return typed(source, *[getattr(descriptor, name) for name in typed._parameters])

    @property
    def descriptor(self):
        """A copy of the node's neuron descriptor.

        MPS: none (mpsx)
        """
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuronNode*>self.native()).descriptor()
        return d

    @property
    def a(self):
        """The neuron's parameter ``a``.

        MPS: MPSCNNNeuronNode.a
        """
        return (<CCNNNeuronNode*>self.native()).descriptor().a

    @property
    def b(self):
        """The neuron's parameter ``b``.

        MPS: MPSCNNNeuronNode.b
        """
        return (<CCNNNeuronNode*>self.native()).descriptor().b

    @property
    def c(self):
        """The neuron's parameter ``c``.

        MPS: MPSCNNNeuronNode.c
        """
        return (<CCNNNeuronNode*>self.native()).descriptor().c


cdef class CNNNeuronGradientNode(NNGradientFilterNode):
    """CNNNeuronGradientNode(source_gradient, source_image, gradient_state, descriptor)
--

    The gradient node of a CNNNeuronNode. As
    ``-[MPSCNNNeuronGradientNode initWithSourceGradient:sourceImage:gradientState:descriptor:]``.

    MPS: MPSCNNNeuronGradientNode
    """

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None,
                 NNNeuronDescriptor descriptor not None):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNNeuronGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c, descriptor.desc),
            (source_gradient, source_image, gradient_state, descriptor))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, descriptor):
        """The same as ``CNNNeuronGradientNode(...)``: a new node.

        MPS: +[MPSCNNNeuronGradientNode nodeWithSourceGradient:sourceImage:gradientState:descriptor:]
        """
        return cls(source_gradient, source_image, gradient_state, descriptor)

    @property
    def descriptor(self):
        """A copy of the node's neuron descriptor.

        MPS: MPSCNNNeuronGradientNode.descriptor
        """
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuronGradientNode*>self.native()).descriptor()
        return d


# ---- MPS's per-type neuron nodes: each a CNNNeuronNode of the descriptor its constructor makes. Where
# MPS's headers give no default (Power, Exponential, Logarithm), the defaults make f(x) = x, e^x, ln x.


cdef class CNNNeuronAbsoluteNode(CNNNeuronNode):
    """CNNNeuronAbsoluteNode(source)
--

    An Absolute neuron of a graph, ``f(x) = |x|``, on ``source``. As ``-initWithSource:``.

    MPS: MPSCNNNeuronAbsoluteNode
    """
    _neuron_type = NeuronType.ABSOLUTE
    _parameters = ()

    def __init__(self, source):
        self._make(source, _typed_neuron(b"MPSCNNNeuronAbsoluteNode", NeuronType.ABSOLUTE), (source,))

    @classmethod
    def node_with_source(cls, source):
        """The same as ``CNNNeuronAbsoluteNode(...)``: a new node.

        MPS: +[MPSCNNNeuronAbsoluteNode nodeWithSource:]
        """
        return cls(source)


cdef class CNNNeuronELUNode(CNNNeuronNode):
    """CNNNeuronELUNode(source, a=1.0)
--

    An ELU neuron of a graph, ``f(x) = x for x >= 0, a * (exp(x) - 1) for x < 0``, on ``source``. As
    ``-initWithSource:a:`` and ``-initWithSource:`` (a = 1.0).

    MPS: MPSCNNNeuronELUNode
    """
    _neuron_type = NeuronType.ELU
    _parameters = ("a",)

    def __init__(self, source, a=1.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronELUNode", NeuronType.ELU, a), (source, a))

    @classmethod
    def node_with_source(cls, source, a=1.0):
        """The same as ``CNNNeuronELUNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronELUNode nodeWithSource:a:]
        """
        return cls(source, a)


cdef class CNNNeuronExponentialNode(CNNNeuronNode):
    """CNNNeuronExponentialNode(source, a=1.0, b=0.0, c=-1.0)
--

    An Exponential neuron of a graph, ``f(x) = c ** (a * x + b)``, on ``source``. c = -1 stands for e. As
    ``-initWithSource:a:b:c:`` and ``-initWithSource:`` (a = 1.0, b = 0.0, c = -1.0).

    MPS: MPSCNNNeuronExponentialNode
    """
    _neuron_type = NeuronType.EXPONENTIAL
    _parameters = ("a", "b", "c")

    def __init__(self, source, a=1.0, b=0.0, c=-1.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronExponentialNode", NeuronType.EXPONENTIAL, a, b, c),
                   (source, a, b, c))

    @classmethod
    def node_with_source(cls, source, a=1.0, b=0.0, c=-1.0):
        """The same as ``CNNNeuronExponentialNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronExponentialNode nodeWithSource:a:b:c:]
        """
        return cls(source, a, b, c)


cdef class CNNNeuronGeLUNode(CNNNeuronNode):
    """CNNNeuronGeLUNode(source)
--

    A GeLU neuron of a graph, ``f(x) = x * (1 + erf(x / sqrt(2))) / 2``, on ``source``. As ``-initWithSource:``.

    MPS: MPSCNNNeuronGeLUNode
    """
    _neuron_type = NeuronType.GELU
    _parameters = ()

    def __init__(self, source):
        self._make(source, _typed_neuron(b"MPSCNNNeuronGeLUNode", NeuronType.GELU), (source,))

    @classmethod
    def node_with_source(cls, source):
        """The same as ``CNNNeuronGeLUNode(...)``: a new node.

        MPS: +[MPSCNNNeuronGeLUNode nodeWithSource:]
        """
        return cls(source)


cdef class CNNNeuronHardSigmoidNode(CNNNeuronNode):
    """CNNNeuronHardSigmoidNode(source, a=0.2, b=0.5)
--

    A HardSigmoid neuron of a graph, ``f(x) = clamp(a * x + b, 0, 1)``, on ``source``. As ``-initWithSource:a:b:``
    and ``-initWithSource:`` (a = 0.2, b = 0.5).

    MPS: MPSCNNNeuronHardSigmoidNode
    """
    _neuron_type = NeuronType.HARD_SIGMOID
    _parameters = ("a", "b")

    def __init__(self, source, a=0.2, b=0.5):
        self._make(source, _typed_neuron(b"MPSCNNNeuronHardSigmoidNode", NeuronType.HARD_SIGMOID, a, b), (source, a, b))

    @classmethod
    def node_with_source(cls, source, a=0.2, b=0.5):
        """The same as ``CNNNeuronHardSigmoidNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronHardSigmoidNode nodeWithSource:a:b:]
        """
        return cls(source, a, b)


cdef class CNNNeuronLinearNode(CNNNeuronNode):
    """CNNNeuronLinearNode(source, a=1.0, b=0.0)
--

    A Linear neuron of a graph, ``f(x) = a * x + b``, on ``source``. As ``-initWithSource:a:b:`` and
    ``-initWithSource:`` (a = 1.0, b = 0.0).

    MPS: MPSCNNNeuronLinearNode
    """
    _neuron_type = NeuronType.LINEAR
    _parameters = ("a", "b")

    def __init__(self, source, a=1.0, b=0.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronLinearNode", NeuronType.LINEAR, a, b), (source, a, b))

    @classmethod
    def node_with_source(cls, source, a=1.0, b=0.0):
        """The same as ``CNNNeuronLinearNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronLinearNode nodeWithSource:a:b:]
        """
        return cls(source, a, b)


cdef class CNNNeuronLogarithmNode(CNNNeuronNode):
    """CNNNeuronLogarithmNode(source, a=1.0, b=0.0, c=-1.0)
--

    A Logarithm neuron of a graph, ``f(x) = log_c(a * x + b)``, on ``source``. c = -1 stands for e. As
    ``-initWithSource:a:b:c:`` and ``-initWithSource:`` (a = 1.0, b = 0.0, c = -1.0).

    MPS: MPSCNNNeuronLogarithmNode
    """
    _neuron_type = NeuronType.LOGARITHM
    _parameters = ("a", "b", "c")

    def __init__(self, source, a=1.0, b=0.0, c=-1.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronLogarithmNode", NeuronType.LOGARITHM, a, b, c),
                   (source, a, b, c))

    @classmethod
    def node_with_source(cls, source, a=1.0, b=0.0, c=-1.0):
        """The same as ``CNNNeuronLogarithmNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronLogarithmNode nodeWithSource:a:b:c:]
        """
        return cls(source, a, b, c)


cdef class CNNNeuronPowerNode(CNNNeuronNode):
    """CNNNeuronPowerNode(source, a=1.0, b=0.0, c=1.0)
--

    A Power neuron of a graph, ``f(x) = (a * x + b) ** c``, on ``source``. As ``-initWithSource:a:b:c:`` and
    ``-initWithSource:`` (a = 1.0, b = 0.0, c = 1.0).

    MPS: MPSCNNNeuronPowerNode
    """
    _neuron_type = NeuronType.POWER
    _parameters = ("a", "b", "c")

    def __init__(self, source, a=1.0, b=0.0, c=1.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronPowerNode", NeuronType.POWER, a, b, c), (source, a, b, c))

    @classmethod
    def node_with_source(cls, source, a=1.0, b=0.0, c=1.0):
        """The same as ``CNNNeuronPowerNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronPowerNode nodeWithSource:a:b:c:]
        """
        return cls(source, a, b, c)


cdef class CNNNeuronReLUNode(CNNNeuronNode):
    """CNNNeuronReLUNode(source, a=0.0)
--

    A ReLU neuron of a graph, ``f(x) = x for x >= 0, a * x for x < 0``, on ``source``. a = 0 gives max(0, x);
    another a, the leaky ReLU. As ``-initWithSource:a:`` and ``-initWithSource:`` (a = 0.0).

    MPS: MPSCNNNeuronReLUNode
    """
    _neuron_type = NeuronType.RELU
    _parameters = ("a",)

    def __init__(self, source, a=0.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronReLUNode", NeuronType.RELU, a), (source, a))

    @classmethod
    def node_with_source(cls, source, a=0.0):
        """The same as ``CNNNeuronReLUNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronReLUNode nodeWithSource:a:]
        """
        return cls(source, a)


cdef class CNNNeuronReLUNNode(CNNNeuronNode):
    """CNNNeuronReLUNNode(source, a=1.0, b=6.0)
--

    A ReLUN neuron of a graph, ``f(x) = min(x for x >= 0 or a * x for x < 0, b)``, on ``source``. As
    ``-initWithSource:a:b:`` and ``-initWithSource:`` (a = 1.0, b = 6.0).

    MPS: MPSCNNNeuronReLUNNode
    """
    _neuron_type = NeuronType.RELUN
    _parameters = ("a", "b")

    def __init__(self, source, a=1.0, b=6.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronReLUNNode", NeuronType.RELUN, a, b), (source, a, b))

    @classmethod
    def node_with_source(cls, source, a=1.0, b=6.0):
        """The same as ``CNNNeuronReLUNNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronReLUNNode nodeWithSource:a:b:]
        """
        return cls(source, a, b)


cdef class CNNNeuronSigmoidNode(CNNNeuronNode):
    """CNNNeuronSigmoidNode(source)
--

    A Sigmoid neuron of a graph, ``f(x) = 1 / (1 + exp(-x))``, on ``source``. As ``-initWithSource:``.

    MPS: MPSCNNNeuronSigmoidNode
    """
    _neuron_type = NeuronType.SIGMOID
    _parameters = ()

    def __init__(self, source):
        self._make(source, _typed_neuron(b"MPSCNNNeuronSigmoidNode", NeuronType.SIGMOID), (source,))

    @classmethod
    def node_with_source(cls, source):
        """The same as ``CNNNeuronSigmoidNode(...)``: a new node.

        MPS: +[MPSCNNNeuronSigmoidNode nodeWithSource:]
        """
        return cls(source)


cdef class CNNNeuronSoftPlusNode(CNNNeuronNode):
    """CNNNeuronSoftPlusNode(source, a=1.0, b=1.0)
--

    A SoftPlus neuron of a graph, ``f(x) = a * log(1 + exp(b * x))``, on ``source``. As ``-initWithSource:a:b:`` and
    ``-initWithSource:`` (a = 1.0, b = 1.0).

    MPS: MPSCNNNeuronSoftPlusNode
    """
    _neuron_type = NeuronType.SOFTPLUS
    _parameters = ("a", "b")

    def __init__(self, source, a=1.0, b=1.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronSoftPlusNode", NeuronType.SOFTPLUS, a, b), (source, a, b))

    @classmethod
    def node_with_source(cls, source, a=1.0, b=1.0):
        """The same as ``CNNNeuronSoftPlusNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronSoftPlusNode nodeWithSource:a:b:]
        """
        return cls(source, a, b)


cdef class CNNNeuronSoftSignNode(CNNNeuronNode):
    """CNNNeuronSoftSignNode(source)
--

    A SoftSign neuron of a graph, ``f(x) = x / (1 + |x|)``, on ``source``. As ``-initWithSource:``.

    MPS: MPSCNNNeuronSoftSignNode
    """
    _neuron_type = NeuronType.SOFTSIGN
    _parameters = ()

    def __init__(self, source):
        self._make(source, _typed_neuron(b"MPSCNNNeuronSoftSignNode", NeuronType.SOFTSIGN), (source,))

    @classmethod
    def node_with_source(cls, source):
        """The same as ``CNNNeuronSoftSignNode(...)``: a new node.

        MPS: +[MPSCNNNeuronSoftSignNode nodeWithSource:]
        """
        return cls(source)


cdef class CNNNeuronTanHNode(CNNNeuronNode):
    """CNNNeuronTanHNode(source, a=1.0, b=1.0)
--

    A TanH neuron of a graph, ``f(x) = a * tanh(b * x)``, on ``source``. As ``-initWithSource:a:b:`` and
    ``-initWithSource:`` (a = 1.0, b = 1.0).

    MPS: MPSCNNNeuronTanHNode
    """
    _neuron_type = NeuronType.TANH
    _parameters = ("a", "b")

    def __init__(self, source, a=1.0, b=1.0):
        self._make(source, _typed_neuron(b"MPSCNNNeuronTanHNode", NeuronType.TANH, a, b), (source, a, b))

    @classmethod
    def node_with_source(cls, source, a=1.0, b=1.0):
        """The same as ``CNNNeuronTanHNode(...)``: a new node. ``+nodeWithSource:`` too.

        MPS: +[MPSCNNNeuronTanHNode nodeWithSource:a:b:]
        """
        return cls(source, a, b)


cdef class CNNNeuronPReLUNode(CNNNeuronNode):
    """CNNNeuronPReLUNode(source, a_data)
--

    A parametric ReLU neuron of a graph, ``f(x) = x for x >= 0, a_data[i] * x for x < 0`` in feature channel ``i``,
    on ``source``: ``a_data`` holds one slope per feature channel (copied as float32). As ``-[MPSCNNNeuronPReLUNode
    initWithSource:aData:]``.

    MPS: MPSCNNNeuronPReLUNode
    """
    _neuron_type = NeuronType.PRELU
    _parameters = ("data",)

    def __init__(self, source, a_data):
        cdef NNNeuronDescriptor descriptor = _prelu_neuron(b"MPSCNNNeuronPReLUNode", a_data, "a_data")
        self._make(source, descriptor, (source, descriptor.data))

    @classmethod
    def node_with_source(cls, source, a_data):
        """The same as ``CNNNeuronPReLUNode(...)``: a new node.

        MPS: +[MPSCNNNeuronPReLUNode nodeWithSource:aData:]
        """
        return cls(source, a_data)


# The per-type node of each NeuronType, for CNNNeuronNode.node_with_source.
_neuron_nodes = {cls._neuron_type: cls for cls in (
    CNNNeuronAbsoluteNode, CNNNeuronELUNode, CNNNeuronExponentialNode, CNNNeuronGeLUNode, CNNNeuronHardSigmoidNode,
    CNNNeuronLinearNode, CNNNeuronLogarithmNode, CNNNeuronPReLUNode, CNNNeuronPowerNode, CNNNeuronReLUNode,
    CNNNeuronReLUNNode, CNNNeuronSigmoidNode, CNNNeuronSoftPlusNode, CNNNeuronSoftSignNode, CNNNeuronTanHNode)}

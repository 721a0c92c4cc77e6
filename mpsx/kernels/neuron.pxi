# MPSCNNNeuron and MPSCNNNeuronGradient (included by _kernels.pyx).

__all__ += ["NNNeuronDescriptor", "CNNNeuron", "CNNNeuronGradient", "CNNNeuronAbsolute", "CNNNeuronELU",
            "CNNNeuronExponential", "CNNNeuronHardSigmoid", "CNNNeuronLinear", "CNNNeuronLogarithm", "CNNNeuronPReLU",
            "CNNNeuronPower", "CNNNeuronReLU", "CNNNeuronReLUN", "CNNNeuronSigmoid", "CNNNeuronSoftPlus",
            "CNNNeuronSoftSign", "CNNNeuronTanH"]

cdef class NNNeuronDescriptor:
    """NNNeuronDescriptor(neuron_type=NeuronType.NONE, a=0.0, b=0.0, c=0.0, data=None)
--

    An activation function: a NeuronType and its parameters ``a``, ``b``, ``c`` (as MPSCNNNeuronType.h defines
    them), for CNNNeuron, its gradient and fused neurons. Every property is settable, as in MPS; a kernel or
    convolution descriptor takes a copy of the descriptor when given it, and checks it then.

    For NeuronType.PRELU, ``data`` holds one slope per feature channel (copied as float32). ValueError for
    parameters the type does not allow. Descriptors compare equal by value. As
    ``+[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:a:b:c:]`` (with data,
    ``+[MPSNNNeuronDescriptor cnnNeuronPReLUDescriptorWithData:noCopy:]``).

    MPS: MPSNNNeuronDescriptor
    """
    cdef CNeuronDescriptor desc

    def __init__(self, neuron_type=NeuronType.NONE, float a=0.0, float b=0.0, float c=0.0, data=None):
        self.desc.type = <CNeuronType><int>NeuronType(neuron_type)
        self.desc.a = a
        self.desc.b = b
        self.desc.c = c
        self._set_data(data)
        self.desc.validate()

    @classmethod
    def cnn_neuron_descriptor_with_type(cls, neuron_type, a=0.0, b=0.0, c=0.0):
        """A new descriptor of ``neuron_type`` with parameters ``a``, ``b`` and ``c`` (0 where not given, as MPS's
        shorter factories): the same as ``NNNeuronDescriptor(neuron_type, a, b, c)``.

        MPS: +[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:], +[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:a:], +[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:a:b:], +[MPSNNNeuronDescriptor cnnNeuronDescriptorWithType:a:b:c:]
        """
        return cls(neuron_type, a, b, c)

    @classmethod
    def cnn_neuron_p_re_lu_descriptor_with_data(cls, data, no_copy=False):
        """A new NeuronType.PRELU descriptor of ``data``, one slope per feature channel. The slopes are copied
        whatever ``no_copy`` says: MPS's ``noCopy`` spares a copy of an NSData the program keeps unchanged, and
        a copy of a Python array costs as little while keeping later changes to it out.

        MPS: +[MPSNNNeuronDescriptor cnnNeuronPReLUDescriptorWithData:noCopy:]
        """
        return cls(NeuronType.PRELU, data=data)

    cdef _set_data(self, data):
        cdef const float[::1] slopes
        self.desc.a_per_channel.clear()
        if data is not None:
            values = np.asarray(data)
            if values.size > kMaxDimension:  # one per feature channel
                raise ValueError(f"PReLU data holds one slope per feature channel, at most {kMaxDimension}; given "
                                 f"{values.size}")
            slopes = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
            if slopes.shape[0]:
                self.desc.a_per_channel.assign(&slopes[0], &slopes[0] + slopes.shape[0])

    @property
    def neuron_type(self):
        """The activation function.

        MPS: MPSNNNeuronDescriptor.neuronType
        """
        return NeuronType(<int>self.desc.type)

    @neuron_type.setter
    def neuron_type(self, value):
        self.desc.type = <CNeuronType><int>NeuronType(value)

    @property
    def a(self):
        """The neuron's parameter ``a``.

        MPS: MPSNNNeuronDescriptor.a
        """
        return self.desc.a

    @a.setter
    def a(self, value):
        self.desc.a = float_argument(value, "a")

    @property
    def b(self):
        """The neuron's parameter ``b``.

        MPS: MPSNNNeuronDescriptor.b
        """
        return self.desc.b

    @b.setter
    def b(self, value):
        self.desc.b = float_argument(value, "b")

    @property
    def c(self):
        """The neuron's parameter ``c``.

        MPS: MPSNNNeuronDescriptor.c
        """
        return self.desc.c

    @c.setter
    def c(self, value):
        self.desc.c = float_argument(value, "c")

    @property
    def data(self):
        """PReLU's slopes, one per feature channel, as a float32 array; None without.

        MPS: MPSNNNeuronDescriptor.data
        """
        return _slopes_of(self.desc)

    @data.setter
    def data(self, value):
        self._set_data(value)

    def __mpsx_state__(self):
        return {"arguments": (self.neuron_type, self.a, self.b, self.c, self.data)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __eq__(self, other):
        return isinstance(other, NNNeuronDescriptor) and self.__mpsx_state__()["arguments"][:4] == other.__mpsx_state__()["arguments"][:4] \
            and np.array_equal(self.data if self.data is not None else [], other.data if other.data is not None else [])

    def __repr__(self):
        return f"mpsx.NNNeuronDescriptor({self.neuron_type!r}, a={self.a}, b={self.b}, c={self.c})"


cdef object _slopes_of(const CNeuronDescriptor& desc):
    """PReLU's slopes as a new float32 array; None without."""
    if desc.a_per_channel.empty():
        return None
    return np.array(<float[:desc.a_per_channel.size()]><float*>desc.a_per_channel.data(), dtype=np.float32)


cdef NNNeuronDescriptor _typed_neuron(const char* owner, neuron_type, a=0.0, b=0.0, c=0.0):
    """The descriptor a per-type neuron class (MPS's ``owner``) makes, its parameters checked in that class's name."""
    cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
    d.desc.type = <CNeuronType><int>neuron_type
    d.desc.a = parameter(owner, a, "a")
    d.desc.b = parameter(owner, b, "b")
    d.desc.c = parameter(owner, c, "c")
    return d


cdef NNNeuronDescriptor _prelu_neuron(const char* owner, slopes, str name, count=None):
    """The descriptor of a PReLU neuron of the slopes ``slopes`` (its parameter ``name``) and, where given, their
    ``count``, which must be theirs."""
    cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
    values = None if isinstance(slopes, (str, bytes, bytearray)) else np.asarray(slopes)
    if values is None or values.dtype.kind not in "iuf":
        raise TypeError(f"{owner.decode()}: {name} must be an array of floats, one slope per feature channel; given "
                        f"{quoted(slopes)}")
    d.desc.type = <CNeuronType><int>NeuronType.PRELU
    d._set_data(values)
    if count is not None and integer_argument(count, "count") != <Py_ssize_t>d.desc.a_per_channel.size():
        raise ValueError(f"{owner.decode()}: count is {count}; {name} holds {d.desc.a_per_channel.size()} slopes")
    d.desc.validate()
    return d


cdef CNeuronDescriptor neuron_descriptor_of(object descriptor) except *:
    cdef CNeuronDescriptor none
    if descriptor is None:
        return none
    if not isinstance(descriptor, NNNeuronDescriptor):
        raise TypeError(f"expected an mpsx.NNNeuronDescriptor, given {type(descriptor).__name__}")
    return (<NNNeuronDescriptor>descriptor).desc


cdef class CNNNeuron(CNNUnaryKernel):
    """CNNNeuron(device, neuron_descriptor)
--

    Applies the activation function of ``neuron_descriptor`` to every value of the source. As
    ``-[MPSCNNNeuron initWithDevice:neuronDescriptor:]``.

    MPS: MPSCNNNeuron
    """

    def __init__(self, Device device not None, NNNeuronDescriptor neuron_descriptor not None):
        self._make(device, neuron_descriptor)

    cdef _make(self, Device device, NNNeuronDescriptor neuron_descriptor):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNNeuron](device.shared(), neuron_descriptor.desc), NNGradientState)

    def _mpsx_arguments(self):
        return (self.neuron_descriptor,)

    @property
    def neuron_descriptor(self):
        """A copy of the kernel's neuron descriptor.

        MPS: none (mpsx)
        """
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuron*>self.unary_kernel()).neuron_descriptor()
        return d

    @property
    def neuron_type(self):
        """The activation function.

        MPS: MPSCNNNeuron.neuronType
        """
        return NeuronType(<int>(<CCNNNeuron*>self.unary_kernel()).neuron_descriptor().type)

    @property
    def a(self):
        """The neuron's parameter ``a``.

        MPS: MPSCNNNeuron.a
        """
        return (<CCNNNeuron*>self.unary_kernel()).neuron_descriptor().a

    @property
    def b(self):
        """The neuron's parameter ``b``.

        MPS: MPSCNNNeuron.b
        """
        return (<CCNNNeuron*>self.unary_kernel()).neuron_descriptor().b

    @property
    def c(self):
        """The neuron's parameter ``c``.

        MPS: MPSCNNNeuron.c
        """
        return (<CCNNNeuron*>self.unary_kernel()).neuron_descriptor().c

    @property
    def data(self):
        """PReLU's slopes, one per feature channel, as a new float32 array; None for another neuron.

        MPS: MPSCNNNeuron.data
        """
        return _slopes_of((<CCNNNeuron*>self.unary_kernel()).neuron_descriptor())


cdef class CNNNeuronGradient(CNNGradientKernel):
    """CNNNeuronGradient(device, neuron_descriptor)
--

    The gradient of CNNNeuron: the incoming gradient times the derivative of the activation function at the forward
    source (the exact derivative, where MPSCNNNeuronType.h prints another formula for ReLUN and GeLU). As
    ``-[MPSCNNNeuronGradient initWithDevice:neuronDescriptor:]``.

    MPS: MPSCNNNeuronGradient
    """

    def __init__(self, Device device not None, NNNeuronDescriptor neuron_descriptor not None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNNeuronGradient](device.shared(), neuron_descriptor.desc))

    def _mpsx_arguments(self):
        return (self.neuron_descriptor,)

    @property
    def neuron_descriptor(self):
        """A copy of the kernel's neuron descriptor.

        MPS: none (mpsx)
        """
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuronGradient*>self.gradient_kernel()).neuron_descriptor()
        return d

    @property
    def neuron_type(self):
        """The activation function.

        MPS: MPSCNNNeuronGradient.neuronType
        """
        return NeuronType(<int>(<CCNNNeuronGradient*>self.gradient_kernel()).neuron_descriptor().type)

    @property
    def a(self):
        """The neuron's parameter ``a``.

        MPS: MPSCNNNeuronGradient.a
        """
        return (<CCNNNeuronGradient*>self.gradient_kernel()).neuron_descriptor().a

    @property
    def b(self):
        """The neuron's parameter ``b``.

        MPS: MPSCNNNeuronGradient.b
        """
        return (<CCNNNeuronGradient*>self.gradient_kernel()).neuron_descriptor().b

    @property
    def c(self):
        """The neuron's parameter ``c``.

        MPS: MPSCNNNeuronGradient.c
        """
        return (<CCNNNeuronGradient*>self.gradient_kernel()).neuron_descriptor().c

    @property
    def data(self):
        """PReLU's slopes, one per feature channel, as a new float32 array; None for another neuron.

        MPS: MPSCNNNeuronGradient.data
        """
        return _slopes_of((<CCNNNeuronGradient*>self.gradient_kernel()).neuron_descriptor())


# ---- MPS's per-type neurons: each a CNNNeuron of the descriptor its constructor makes.


cdef class CNNNeuronAbsolute(CNNNeuron):
    """CNNNeuronAbsolute(device)
--

    The Absolute neuron, ``f(x) = |x|``. As ``-[MPSCNNNeuronAbsolute initWithDevice:]``, which MPS deprecates since
    macOS 10.14 for ``CNNNeuron(device, NNNeuronDescriptor(NeuronType.ABSOLUTE))``: this class makes that CNNNeuron.

    MPS: MPSCNNNeuronAbsolute
    """

    def __init__(self, Device device not None):
        self._make(device, _typed_neuron(b"MPSCNNNeuronAbsolute", NeuronType.ABSOLUTE))

    def _mpsx_arguments(self):
        return ()


cdef class CNNNeuronELU(CNNNeuron):
    """CNNNeuronELU(device, a)
--

    The ELU neuron, ``f(x) = x for x >= 0, a * (exp(x) - 1) for x < 0``. As ``-[MPSCNNNeuronELU
    initWithDevice:a:]``, which MPS deprecates since macOS 10.14 for ``CNNNeuron(device,
    NNNeuronDescriptor(NeuronType.ELU, a))``: this class makes that CNNNeuron.

    MPS: MPSCNNNeuronELU
    """

    def __init__(self, Device device not None, a):
        self._make(device, _typed_neuron(b"MPSCNNNeuronELU", NeuronType.ELU, a))

    def _mpsx_arguments(self):
        return (self.a,)


cdef class CNNNeuronExponential(CNNNeuron):
    """CNNNeuronExponential(device, a, b, c)
--

    The Exponential neuron, ``f(x) = c ** (a * x + b)``. c = -1 stands for e. As ``-[MPSCNNNeuronExponential
    initWithDevice:a:b:c:]``, which MPS deprecates since macOS 10.14 for ``CNNNeuron(device,
    NNNeuronDescriptor(NeuronType.EXPONENTIAL, a, b, c))``: this class makes that CNNNeuron.

    MPS: MPSCNNNeuronExponential
    """

    def __init__(self, Device device not None, a, b, c):
        self._make(device, _typed_neuron(b"MPSCNNNeuronExponential", NeuronType.EXPONENTIAL, a, b, c))

    def _mpsx_arguments(self):
        return (self.a, self.b, self.c)


cdef class CNNNeuronHardSigmoid(CNNNeuron):
    """CNNNeuronHardSigmoid(device, a, b)
--

    The HardSigmoid neuron, ``f(x) = clamp(a * x + b, 0, 1)``. As ``-[MPSCNNNeuronHardSigmoid
    initWithDevice:a:b:]``, which MPS deprecates since macOS 10.14 for ``CNNNeuron(device,
    NNNeuronDescriptor(NeuronType.HARD_SIGMOID, a, b))``: this class makes that CNNNeuron.

    MPS: MPSCNNNeuronHardSigmoid
    """

    def __init__(self, Device device not None, a, b):
        self._make(device, _typed_neuron(b"MPSCNNNeuronHardSigmoid", NeuronType.HARD_SIGMOID, a, b))

    def _mpsx_arguments(self):
        return (self.a, self.b)


cdef class CNNNeuronLinear(CNNNeuron):
    """CNNNeuronLinear(device, a, b)
--

    The Linear neuron, ``f(x) = a * x + b``. As ``-[MPSCNNNeuronLinear initWithDevice:a:b:]``, which MPS deprecates
    since macOS 10.14 for ``CNNNeuron(device, NNNeuronDescriptor(NeuronType.LINEAR, a, b))``: this class makes that
    CNNNeuron.

    MPS: MPSCNNNeuronLinear
    """

    def __init__(self, Device device not None, a, b):
        self._make(device, _typed_neuron(b"MPSCNNNeuronLinear", NeuronType.LINEAR, a, b))

    def _mpsx_arguments(self):
        return (self.a, self.b)


cdef class CNNNeuronLogarithm(CNNNeuron):
    """CNNNeuronLogarithm(device, a, b, c)
--

    The Logarithm neuron, ``f(x) = log_c(a * x + b)``. c = -1 stands for e. As ``-[MPSCNNNeuronLogarithm
    initWithDevice:a:b:c:]``, which MPS deprecates since macOS 10.14 for ``CNNNeuron(device,
    NNNeuronDescriptor(NeuronType.LOGARITHM, a, b, c))``: this class makes that CNNNeuron.

    MPS: MPSCNNNeuronLogarithm
    """

    def __init__(self, Device device not None, a, b, c):
        self._make(device, _typed_neuron(b"MPSCNNNeuronLogarithm", NeuronType.LOGARITHM, a, b, c))

    def _mpsx_arguments(self):
        return (self.a, self.b, self.c)


cdef class CNNNeuronPower(CNNNeuron):
    """CNNNeuronPower(device, a, b, c)
--

    The Power neuron, ``f(x) = (a * x + b) ** c``. As ``-[MPSCNNNeuronPower initWithDevice:a:b:c:]``, which MPS
    deprecates since macOS 10.14 for ``CNNNeuron(device, NNNeuronDescriptor(NeuronType.POWER, a, b, c))``: this
    class makes that CNNNeuron.

    MPS: MPSCNNNeuronPower
    """

    def __init__(self, Device device not None, a, b, c):
        self._make(device, _typed_neuron(b"MPSCNNNeuronPower", NeuronType.POWER, a, b, c))

    def _mpsx_arguments(self):
        return (self.a, self.b, self.c)


cdef class CNNNeuronReLU(CNNNeuron):
    """CNNNeuronReLU(device, a)
--

    The ReLU neuron, ``f(x) = x for x >= 0, a * x for x < 0``. a = 0 gives max(0, x); another a, the leaky ReLU. As
    ``-[MPSCNNNeuronReLU initWithDevice:a:]``, which MPS deprecates since macOS 10.14 for ``CNNNeuron(device,
    NNNeuronDescriptor(NeuronType.RELU, a))``: this class makes that CNNNeuron.

    MPS: MPSCNNNeuronReLU
    """

    def __init__(self, Device device not None, a):
        self._make(device, _typed_neuron(b"MPSCNNNeuronReLU", NeuronType.RELU, a))

    def _mpsx_arguments(self):
        return (self.a,)


cdef class CNNNeuronReLUN(CNNNeuron):
    """CNNNeuronReLUN(device, a, b)
--

    The ReLUN neuron, ``f(x) = min(x for x >= 0 or a * x for x < 0, b)``. b = 6 gives ReLU6. As
    ``-[MPSCNNNeuronReLUN initWithDevice:a:b:]``, which MPS deprecates since macOS 10.14 for ``CNNNeuron(device,
    NNNeuronDescriptor(NeuronType.RELUN, a, b))``: this class makes that CNNNeuron.

    MPS: MPSCNNNeuronReLUN
    """

    def __init__(self, Device device not None, a, b):
        self._make(device, _typed_neuron(b"MPSCNNNeuronReLUN", NeuronType.RELUN, a, b))

    def _mpsx_arguments(self):
        return (self.a, self.b)


cdef class CNNNeuronSigmoid(CNNNeuron):
    """CNNNeuronSigmoid(device)
--

    The Sigmoid neuron, ``f(x) = 1 / (1 + exp(-x))``. As ``-[MPSCNNNeuronSigmoid initWithDevice:]``, which MPS
    deprecates since macOS 10.14 for ``CNNNeuron(device, NNNeuronDescriptor(NeuronType.SIGMOID))``: this class makes
    that CNNNeuron.

    MPS: MPSCNNNeuronSigmoid
    """

    def __init__(self, Device device not None):
        self._make(device, _typed_neuron(b"MPSCNNNeuronSigmoid", NeuronType.SIGMOID))

    def _mpsx_arguments(self):
        return ()


cdef class CNNNeuronSoftPlus(CNNNeuron):
    """CNNNeuronSoftPlus(device, a, b)
--

    The SoftPlus neuron, ``f(x) = a * log(1 + exp(b * x))``. As ``-[MPSCNNNeuronSoftPlus initWithDevice:a:b:]``,
    which MPS deprecates since macOS 10.14 for ``CNNNeuron(device, NNNeuronDescriptor(NeuronType.SOFTPLUS, a, b))``:
    this class makes that CNNNeuron.

    MPS: MPSCNNNeuronSoftPlus
    """

    def __init__(self, Device device not None, a, b):
        self._make(device, _typed_neuron(b"MPSCNNNeuronSoftPlus", NeuronType.SOFTPLUS, a, b))

    def _mpsx_arguments(self):
        return (self.a, self.b)


cdef class CNNNeuronSoftSign(CNNNeuron):
    """CNNNeuronSoftSign(device)
--

    The SoftSign neuron, ``f(x) = x / (1 + |x|)``. As ``-[MPSCNNNeuronSoftSign initWithDevice:]``, which MPS
    deprecates since macOS 10.14 for ``CNNNeuron(device, NNNeuronDescriptor(NeuronType.SOFTSIGN))``: this class
    makes that CNNNeuron.

    MPS: MPSCNNNeuronSoftSign
    """

    def __init__(self, Device device not None):
        self._make(device, _typed_neuron(b"MPSCNNNeuronSoftSign", NeuronType.SOFTSIGN))

    def _mpsx_arguments(self):
        return ()


cdef class CNNNeuronTanH(CNNNeuron):
    """CNNNeuronTanH(device, a, b)
--

    The TanH neuron, ``f(x) = a * tanh(b * x)``. As ``-[MPSCNNNeuronTanH initWithDevice:a:b:]``, which MPS
    deprecates since macOS 10.14 for ``CNNNeuron(device, NNNeuronDescriptor(NeuronType.TANH, a, b))``: this class
    makes that CNNNeuron.

    MPS: MPSCNNNeuronTanH
    """

    def __init__(self, Device device not None, a, b):
        self._make(device, _typed_neuron(b"MPSCNNNeuronTanH", NeuronType.TANH, a, b))

    def _mpsx_arguments(self):
        return (self.a, self.b)


cdef class CNNNeuronPReLU(CNNNeuron):
    """CNNNeuronPReLU(device, a, count=None)
--

    The parametric ReLU neuron, ``f(x) = x for x >= 0, a[i] * x for x < 0`` in feature channel ``i``: ``a`` holds
    one slope per feature channel of the source (copied as float32). ``count`` is optional, as an array knows its
    length; ValueError where it is another. As ``-[MPSCNNNeuronPReLU initWithDevice:a:count:]``, which MPS
    deprecates since macOS 10.14 for ``CNNNeuron(device, NNNeuronDescriptor(NeuronType.PRELU, data=a))``: this class
    makes that CNNNeuron.

    MPS: MPSCNNNeuronPReLU
    """

    def __init__(self, Device device not None, a, count=None):
        self._make(device, _prelu_neuron(b"MPSCNNNeuronPReLU", a, "a", count))

    def _mpsx_arguments(self):
        return (self.data,)

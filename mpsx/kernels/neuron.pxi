# MPSCNNNeuron and MPSCNNNeuronGradient (included by _kernels.pyx).

__all__ += ["NNNeuronDescriptor", "CNNNeuron", "CNNNeuronGradient"]

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
        if self.desc.a_per_channel.empty():
            return None
        return np.array(<const float[:self.desc.a_per_channel.size()]>self.desc.a_per_channel.data(), dtype=np.float32)

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

# MPSCNNNeuron and MPSCNNNeuronGradient (included by _kernels.pyx).

__all__ += ["NNNeuronDescriptor", "CNNNeuron", "CNNNeuronGradient"]

cdef class NNNeuronDescriptor:
    """MPSNNNeuronDescriptor: NNNeuronDescriptor(type, a=0, b=0, c=0, data=None).

    For NeuronType.PRELU, data holds one slope per feature channel.
    """
    cdef CNeuronDescriptor desc

    def __init__(self, neuron_type=NeuronType.NONE, float a=0.0, float b=0.0, float c=0.0, data=None):
        self.desc.type = <CNeuronType><int>NeuronType(neuron_type)
        self.desc.a = a
        self.desc.b = b
        self.desc.c = c
        cdef const float[::1] slopes
        if data is not None:
            values = np.asarray(data)
            if values.size > kMaxDimension:  # one per feature channel
                raise ValueError(f"PReLU data holds one slope per feature channel, at most {kMaxDimension}; given "
                                 f"{values.size}")
            slopes = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
            if slopes.shape[0]:
                self.desc.a_per_channel.assign(&slopes[0], &slopes[0] + slopes.shape[0])
        self.desc.validate()

    @property
    def neuron_type(self):
        return NeuronType(<int>self.desc.type)

    @property
    def a(self):
        return self.desc.a

    @property
    def b(self):
        return self.desc.b

    @property
    def c(self):
        return self.desc.c

    @property
    def data(self):
        if self.desc.a_per_channel.empty():
            return None
        return np.array(<const float[:self.desc.a_per_channel.size()]>self.desc.a_per_channel.data(), dtype=np.float32)

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
    """MPSCNNNeuron: f(x) of a NeuronType per value."""

    def __init__(self, Device device not None, NNNeuronDescriptor neuron_descriptor not None):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNNeuron](device.shared(), neuron_descriptor.desc), NNGradientState)

    def _mpsx_arguments(self):
        return (self.neuron_descriptor,)

    @property
    def neuron_descriptor(self):
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuron*>self.unary_kernel()).neuron_descriptor()
        return d

    @property
    def neuron_type(self):
        return NeuronType(<int>(<CCNNNeuron*>self.unary_kernel()).neuron_descriptor().type)

    @property
    def a(self):
        return (<CCNNNeuron*>self.unary_kernel()).neuron_descriptor().a

    @property
    def b(self):
        return (<CCNNNeuron*>self.unary_kernel()).neuron_descriptor().b

    @property
    def c(self):
        return (<CCNNNeuron*>self.unary_kernel()).neuron_descriptor().c


cdef class CNNNeuronGradient(CNNGradientKernel):
    """MPSCNNNeuronGradient: f'(x) times the incoming gradient."""

    def __init__(self, Device device not None, NNNeuronDescriptor neuron_descriptor not None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNNeuronGradient](device.shared(), neuron_descriptor.desc))

    def _mpsx_arguments(self):
        return (self.neuron_descriptor,)

    @property
    def neuron_descriptor(self):
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = (<CCNNNeuronGradient*>self.gradient_kernel()).neuron_descriptor()
        return d

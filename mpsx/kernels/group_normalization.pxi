# MPSCNNGroupNormalization family and what MPSCNNInstanceNormalization
# (kernels/instance_normalization.pxi) shares with it: one native model
# (native/include/mpsx/kernels/group_normalization.h) serves both. Included
# by _kernels.pyx after batch_normalization.pxi.

from mpsx.includes.kernels.group_normalization cimport (
    CCNNGroupNormalization, CCNNGroupNormalizationGradient, CCNNInstanceNormalization,
    CCNNInstanceNormalizationGradient, CGroupNormalizationDataSource, CGroupNormalizationGradientState,
    CGroupNormalizationKernel, CGroupNormalizationWeights, CPythonGroupNormalizationDataSource,
    GroupNormalizationDataSourceCalls, group_normalization_data_source_calls)
from libcpp.memory cimport dynamic_pointer_cast

__all__ += ["CNNGroupNormalizationDataSource", "GroupNormalizationWeights", "CNNGroupNormalizationGradientState",
            "CNNGroupNormalization", "CNNGroupNormalizationGradient"]


class CNNGroupNormalizationDataSource:
    """The group normalization data source protocol: subclass it and implement ``number_of_feature_channels``,
    ``number_of_groups`` (read-write; it must divide the channels) and ``gamma()`` (the rest have defaults here), or
    write any class with the protocol's required members.

    Required, as in MPS (a class without one is a TypeError naming it when a kernel is made): ``gamma()`` and
    ``beta()``, float32 values per feature channel (a numpy array, a Buffer or a DLPack tensor) or None (gamma ones,
    beta zeros); ``number_of_feature_channels``; ``number_of_groups``; ``label()``.

    Optional, as in MPS: ``epsilon`` (an attribute or a method; FLT_MIN without one);
    ``update_gamma_and_beta_with_group_normalization_state_batch(group_normalization_state_batch)`` -> bool (CPU
    side, after the command buffer completed, with the synchronized states) and
    ``update_gamma_and_beta_with_command_buffer(command_buffer, group_normalization_state_batch)`` ->
    CNNNormalizationGammaAndBetaState or None (GPU side); both receive the batch of states as a list: mpsx gives one
    state per encode, whose gradients are already sums over its images, so summing the list's gradients gives the
    batch's. ``copy(device)``. MPS's protocol has no ``load()`` and ``purge()``; mpsx calls them around every read
    where a data source has them. This class defines the CPU-side update, but the runtime treats it as absent where a
    subclass inherits it, as MPS treats a selector a data source does not implement.

    MPS: MPSCNNGroupNormalizationDataSource
    """
    epsilon = NORMALIZATION_DEFAULT_EPSILON
    number_of_groups = 1

    def number_of_feature_channels(self):
        """The number of feature channels (a method or an attribute); a subclass must provide it (NotImplementedError
        here).

        MPS: MPSCNNGroupNormalizationDataSource.numberOfFeatureChannels
        """
        raise NotImplementedError(f"{type(self).__name__} must implement number_of_feature_channels")

    def gamma(self):
        """The scale per feature channel, float32, or None for ones; a subclass must implement it (NotImplementedError
        here).

        MPS: -[MPSCNNGroupNormalizationDataSource gamma]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement gamma()")

    def beta(self):
        """The shift per feature channel, float32, or None (the default) for zeros.

        MPS: -[MPSCNNGroupNormalizationDataSource beta]
        """
        return None

    def load(self):
        """Called before the values are read; returns whether they are available (default True).

        MPS: none (mpsx)
        """
        return True

    def purge(self):
        """Called once the values were read: the data source may free them (default: nothing).

        MPS: none (mpsx)
        """
        pass

    def label(self):
        """A name for the data source, or None (the default).

        MPS: -[MPSCNNGroupNormalizationDataSource label]
        """
        return None

    def update_gamma_and_beta_with_group_normalization_state_batch(self, group_normalization_state_batch):
        """The CPU-side gamma and beta update: called once the command buffer completed, with the synchronized states
        as a list (their gamma, beta and gradients); write the new values to the data source and return whether the
        update was performed. Optional: a subclass without it gets no CPU-side update; returns False here.

        MPS: -[MPSCNNGroupNormalizationDataSource updateGammaAndBetaWithGroupNormalizationStateBatch:]
        """
        return False

    def copy(self, device):
        """A copy of the data source for ``device`` (default: ``copy.deepcopy``), called when a kernel or graph is
        copied.

        MPS: -[MPSCNNGroupNormalizationDataSource copyWithZone:device:]
        """
        import copy
        return copy.deepcopy(self)


# ---- the calls the runtime makes into Python data sources (_data_sources.h)

_protocol_defaults(CNNGroupNormalizationDataSource, ("update_gamma_and_beta_with_group_normalization_state_batch",))


cdef int64_t _group_normalization_source_integer(object source, const char* attribute) except *:
    name = attribute.decode()
    return integer_argument(_value_of(source, name), f"{type(source).__name__}.{name}")


# Kernels by address, so states handed to data sources know their kernel.
_group_normalizations = weakref.WeakValueDictionary()


cdef object wrap_group_normalization_state(const shared_ptr[CGroupNormalizationGradientState]& state):
    kernel = _group_normalizations.get(<size_t>state.get().kernel().get())
    cls = CNNInstanceNormalizationGradientState if isinstance(kernel, CNNInstanceNormalization) else \
        CNNGroupNormalizationGradientState
    cdef NNGradientState s = cls.__new__(cls)
    s.c = <shared_ptr[CState]>state
    s._kernel = kernel
    return s


cdef list _wrap_states(const vector[shared_ptr[CGroupNormalizationGradientState]]& states):
    return [wrap_group_normalization_state(states[i]) for i in range(states.size())]


cdef str _update_method(bint instance):
    return ("update_gamma_and_beta_with_instance_normalization_state_batch" if instance
            else "update_gamma_and_beta_with_group_normalization_state_batch")


cdef cbool _group_normalization_source_update(object source, cbool instance,
                       const vector[shared_ptr[CGroupNormalizationGradientState]]& states) except *:
    return bool(getattr(source, _update_method(instance))(_wrap_states(states)))


cdef shared_ptr[CNormalizationGammaAndBetaState] _group_normalization_source_update_on_command_buffer(
        object source, cbool instance, CCommandBuffer& command_buffer,
        const vector[shared_ptr[CGroupNormalizationGradientState]]& states) except *:
    cdef shared_ptr[CNormalizationGammaAndBetaState] out
    result = _checked_update(source, "update_gamma_and_beta_with_command_buffer",
                             source.update_gamma_and_beta_with_command_buffer(wrap_command_buffer(command_buffer.shared_from_this()),
                                                                             _wrap_states(states)),
                             CNNNormalizationGammaAndBetaState)
    if result is not None:
        out = static_pointer_cast[CNormalizationGammaAndBetaState, CState]((<State>result).shared())
    return out


cdef GroupNormalizationDataSourceCalls* _group_normalization_calls = &group_normalization_data_source_calls()
_group_normalization_calls.integer = _group_normalization_source_integer
_group_normalization_calls.update = _group_normalization_source_update
_group_normalization_calls.update_on_command_buffer = _group_normalization_source_update_on_command_buffer


cdef shared_ptr[CGroupNormalizationDataSource] group_normalization_data_source_of(object source,
                                                                                  bint instance) except *:
    what = "an instance" if instance else "a group"
    if isinstance(source, _NormalizationWeights):
        if isinstance(source, InstanceNormalizationWeights) != instance:
            raise TypeError(f"{what} normalization takes "
                            f"{'InstanceNormalizationWeights' if instance else 'GroupNormalizationWeights'}, "
                            f"given {type(source).__name__}")
        return <shared_ptr[CGroupNormalizationDataSource]>(<_NormalizationWeights>source).shared()
    if source is None:
        raise TypeError(f"expected {what} normalization data source, given None")
    check_protocol(source,
                   "MPSCNNInstanceNormalizationDataSource" if instance else "MPSCNNGroupNormalizationDataSource")
    return <shared_ptr[CGroupNormalizationDataSource]>make_native[CPythonGroupNormalizationDataSource](
        <PyObject*>source, instance)


# ---- native data sources

cdef class _NormalizationWeights:
    """What InstanceNormalizationWeights and GroupNormalizationWeights share.

    MPS: MPSCNNGroupNormalizationDataSource
    """
    cdef shared_ptr[CGroupNormalizationWeights] c
    cdef object _optimizer

    cdef CGroupNormalizationWeights* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef shared_ptr[CGroupNormalizationWeights] shared(self) except *:
        self.native()
        return self.c

    cdef _make(self, gamma, beta, int64_t groups, float epsilon, optimizer, label):
        cdef string name = ("" if label is None else str(label)).encode()
        self.c = make_native[CGroupNormalizationWeights](channel_values(gamma), channel_values(beta), groups, epsilon,
                                                         name, optimizer_of(optimizer))
        self._optimizer = optimizer

    @property
    def number_of_feature_channels(self):
        """The number of feature channels.

        MPS: MPSCNNGroupNormalizationDataSource.numberOfFeatureChannels
        """
        return self.native().number_of_feature_channels()

    cdef object _values(self, int which):
        cdef HostArray a
        cdef CGroupNormalizationWeights* w = self.native()
        with nogil:
            a = w.gamma() if which == 0 else w.beta()
        return np.array(<const float[:a.count]><const float*>a.data, dtype=np.float32)

    def gamma(self):
        """A copy of the current gamma, float32 per feature channel.

        MPS: -[MPSCNNGroupNormalizationDataSource gamma]
        """
        return self._values(0)

    def beta(self):
        """A copy of the current beta, float32 per feature channel.

        MPS: -[MPSCNNGroupNormalizationDataSource beta]
        """
        return self._values(1)

    @property
    def epsilon(self):
        """The term added to the variance before its square root.

        MPS: -[MPSCNNGroupNormalizationDataSource epsilon], -[MPSCNNInstanceNormalizationDataSource epsilon]
        """
        return self.native().epsilon()

    def load(self):
        """True: the values are always available.

        MPS: -[MPSCNNInstanceNormalizationDataSource load]
        """
        return True

    def purge(self):
        """Nothing to free: the values stay held.

        MPS: -[MPSCNNInstanceNormalizationDataSource purge]
        """
        pass

    def label(self):
        """The label given to the constructor, or None.

        MPS: -[MPSCNNGroupNormalizationDataSource label]
        """
        return self.native().label().decode() or None

    @property
    def optimizer(self):
        """The NNOptimizer that trains gamma and beta, or None.

        MPS: none (mpsx)
        """
        return self._optimizer

    def optimizer_state(self):
        """The vectors the data source keeps for its optimizer, ``{kind: [gamma's, beta's]}`` (kinds ``"momentum"``,
        ``"velocity"``, ``"sum_of_squares"``) as float32 arrays, as the last update left them: read once its command
        buffer has completed. Empty without an optimizer. Adam's time step is the optimizer's.

        MPS: none (mpsx)
        """
        return optimizer_state_of(self.native().optimizer_vectors(), type(self).__name__)

    def set_optimizer_state(self, state):
        """Writes what ``optimizer_state()`` returned (the same kinds and sizes) before the next update; TypeError or
        ValueError for anything else.

        MPS: none (mpsx)
        """
        set_optimizer_state_of(self.native().optimizer_vectors(), state, type(self).__name__)

    def set_gamma_and_beta(self, gamma, beta):
        """New values in place of the current ones and of every update encoded before (whose command buffer may
        still run: it changes nothing here then). A kernel or graph reads them when it reloads from its data sources
        (``reload_from_data_sources``); until then it keeps what it holds. ShapeError for arrays of other sizes.

        MPS: none (mpsx)
        """
        self.native().set_gamma_and_beta(channel_values(gamma), channel_values(beta))

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return _restore_with_optimizer_state(cls, state)

    cdef object _update_gamma_and_beta(self, CommandBuffer command_buffer, states, str name):
        if self._optimizer is None:
            raise TypeError(f"this {type(self).__name__} has no optimizer to update gamma and beta with")
        cdef vector[shared_ptr[CGroupNormalizationGradientState]] batch
        cdef shared_ptr[CState] given = _state_of(states, name)
        batch.push_back(dynamic_pointer_cast[CGroupNormalizationGradientState, CState](given))
        if not batch[0]:
            raise TypeError(f"{type(self).__name__}: {name} must be the gradient state of an instance or group "
                            f"normalization encode, given an {given.get().class_name().decode()}")
        return wrap_gamma_and_beta_state(self.native().update_gamma_and_beta_on_command_buffer(
            command_buffer.native()[0], batch))


cdef class GroupNormalizationWeights(_NormalizationWeights):
    """GroupNormalizationWeights(gamma, beta, number_of_groups, epsilon=1e-5, optimizer=None, label=None)
--

    A group normalization data source held natively (MPS has no such class: a native
    MPSCNNGroupNormalizationDataSource), of gamma and beta per feature channel.

    With an ``optimizer`` (an NNOptimizer) gamma and beta train on the device, as BatchNormalizationWeights does:
    ``gn.encode_gamma_and_beta_update(cb, state)`` encodes the optimizer from the state's gradients and the kernel
    reloads the result on the command buffer; ``gamma()`` and ``beta()`` follow once the command buffer has
    completed without error.

    MPS: none (mpsx)
    """

    def __init__(self, gamma, beta, number_of_groups, float epsilon=1e-5, optimizer=None, label=None):
        self._make(gamma, beta, integer_argument(number_of_groups, "number_of_groups"), epsilon, optimizer, label)

    @property
    def number_of_groups(self):
        """The number of groups the feature channels are split into; it must divide them (ValueError).

        MPS: MPSCNNGroupNormalizationDataSource.numberOfGroups
        """
        return self.native().number_of_groups()

    @number_of_groups.setter
    def number_of_groups(self, value):
        self.native().set_number_of_groups(integer_argument(value, "number_of_groups"))

    def update_gamma_and_beta_with_command_buffer(self, CommandBuffer command_buffer not None,
                                                  group_normalization_state_batch):
        """With an optimizer: a new CNNNormalizationGammaAndBetaState holding gamma and beta after one update from the
        gradients of the batch of states (one encode's state, alone or as its StateBatch), encoded on
        ``command_buffer``. TypeError without an optimizer.

        MPS: -[MPSCNNGroupNormalizationDataSource updateGammaAndBetaWithCommandBuffer:groupNormalizationStateBatch:]
        """
        return self._update_gamma_and_beta(command_buffer, group_normalization_state_batch,
                                           "group_normalization_state_batch")

    def copy(self, device=None):
        """A copy holding the current values, with a copy of the optimizer (on ``device``) and its state, made through
        the data source's saved description.

        MPS: -[MPSCNNGroupNormalizationDataSource copyWithZone:device:]
        """
        return persistence_copy(self, device)

    def __mpsx_state__(self):
        return {"arguments": (self.gamma(), self.beta(), self.number_of_groups, self.epsilon,
                              self._optimizer, self.label()), "optimizer_state": self.optimizer_state()}

    def __reduce__(self):
        return persistence_reduce(self)


# ---- states and kernels

cdef class _NormalizationGradientState(NNGradientState):
    """What the instance and group normalization gradient states share: float32 Buffers of one value per channel;
    ``synchronize(cb)`` before reading them.

    MPS: MPSCNNGroupNormalizationGradientState
    """

    cdef shared_ptr[CGroupNormalizationGradientState] _group_state(self) except *:
        return static_pointer_cast[CGroupNormalizationGradientState, CState](self.shared())

    cdef Buffer _buffer(self, const shared_ptr[CBuffer]& buffer):
        return wrap_buffer(buffer, np.float32, ((<CGroupNormalizationGradientState*>self.native()).channels(),))

    @property
    def gamma(self):
        """The gamma the forward encode used, a float32 Buffer.

        MPS: MPSCNNGroupNormalizationGradientState.gamma, MPSCNNInstanceNormalizationGradientState.gamma
        """
        return self._buffer((<CGroupNormalizationGradientState*>self.native()).gamma())

    @property
    def beta(self):
        """The beta the forward encode used, a float32 Buffer.

        MPS: MPSCNNGroupNormalizationGradientState.beta, MPSCNNInstanceNormalizationGradientState.beta
        """
        return self._buffer((<CGroupNormalizationGradientState*>self.native()).beta())

    @property
    def gradient_for_gamma(self):
        """The gradient for gamma, summed over the images of the encode, after the gradient encode; a float32 Buffer.

        MPS: MPSCNNGroupNormalizationGradientState.gradientForGamma, MPSCNNInstanceNormalizationGradientState.gradientForGamma
        """
        return self._buffer((<CGroupNormalizationGradientState*>self.native()).gradient_for_gamma())

    @property
    def gradient_for_beta(self):
        """The gradient for beta, summed over the images of the encode, after the gradient encode; a float32 Buffer.

        MPS: MPSCNNGroupNormalizationGradientState.gradientForBeta, MPSCNNInstanceNormalizationGradientState.gradientForBeta
        """
        return self._buffer((<CGroupNormalizationGradientState*>self.native()).gradient_for_beta())


cdef class CNNGroupNormalizationGradientState(_NormalizationGradientState):
    """The state of a group normalization's training forward encode, which its gradient fills with the gradients for
    gamma and beta.

    MPS: MPSCNNGroupNormalizationGradientState
    """

    @property
    def group_normalization(self):
        """The CNNGroupNormalization that made this state.

        MPS: MPSCNNGroupNormalizationGradientState.groupNormalization
        """
        self.native()
        return self._kernel


cdef class _NormalizationKernel(CNNUnaryKernel):
    """What CNNInstanceNormalization and CNNGroupNormalization share.

    MPS: MPSCNNGroupNormalization
    """
    cdef object _data_source
    cdef bint _instance
    cdef object __weakref__

    cdef _make(self, Device device, data_source, bint instance):
        self._data_source = data_source
        self._instance = instance
        cdef shared_ptr[CGroupNormalizationDataSource] source = group_normalization_data_source_of(data_source,
                                                                                                  instance)
        if instance:
            self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNInstanceNormalization](device.shared(), source),
                      CNNInstanceNormalizationGradientState)
        else:
            self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNGroupNormalization](device.shared(), source),
                      CNNGroupNormalizationGradientState)
        _group_normalizations[<size_t>self.unary] = self

    cdef CGroupNormalizationKernel* _normalization(self) except NULL:
        return <CGroupNormalizationKernel*>self.unary_kernel()

    _mpsx_properties = ("epsilon",)

    def _mpsx_arguments(self):
        return (_saved_data_source(self),)

    @property
    def data_source(self):
        """The data source the kernel was made with (or last reloaded from).

        MPS: MPSCNNGroupNormalization.dataSource, MPSCNNInstanceNormalization.dataSource
        """
        self.native()
        return self._data_source

    @property
    def number_of_feature_channels(self):
        """The number of feature channels, the data source's.

        MPS: none (mpsx)
        """
        return self._normalization().number_of_feature_channels()

    @property
    def epsilon(self):
        """The term added to the variance before its square root (the data source's at first); ValueError unless
        finite and non-negative.

        MPS: MPSCNNGroupNormalization.epsilon, MPSCNNInstanceNormalization.epsilon
        """
        return self._normalization().epsilon

    @epsilon.setter
    def epsilon(self, float value):
        self._normalization().epsilon = checked_normalization_epsilon(value, self._normalization().class_name())

    def reload_gamma_and_beta_from_data_source(self):
        """Loads the data source's current gamma and beta now (on the host); later encodes use them.

        MPS: -[MPSCNNGroupNormalization reloadGammaAndBetaFromDataSource], -[MPSCNNInstanceNormalization reloadGammaAndBetaFromDataSource]
        """
        self._normalization().reload_gamma_and_beta_from_data_source()

    def reload_data_source(self, data_source):
        """Takes a new data source of the same channel count: its gamma, beta and epsilon.

        MPS: -[MPSCNNInstanceNormalization reloadDataSource:]
        """
        cdef shared_ptr[CGroupNormalizationDataSource] source = group_normalization_data_source_of(
            data_source, self._instance)
        self._normalization().reload_data_source(source)
        self._data_source = data_source

    def reload_gamma_and_beta(self, CommandBuffer command_buffer not None,
                              CNNNormalizationGammaAndBetaState gamma_and_beta_state not None):
        """Copies the state's gamma and beta in, ordered on ``command_buffer``.

        MPS: -[MPSCNNGroupNormalization reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState:], -[MPSCNNInstanceNormalization reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState:]
        """
        self._normalization().reload_gamma_and_beta(
            command_buffer.native()[0], (<CNormalizationGammaAndBetaState*>gamma_and_beta_state.native())[0])

    def encode_gamma_and_beta_update(self, CommandBuffer command_buffer not None, state):
        """The gamma and beta update of MPS's training styles, for training encoded by hand (``state``: the encode's
        state or its StateBatch).

        A data source with ``update_gamma_and_beta_with_command_buffer`` encodes its update now and the kernel reloads
        the state it returns, on the command buffer; one with the host update
        (``update_gamma_and_beta_with_*_state_batch``) is called once the command buffer completed, with ``[state]``
        synchronized, and the kernel reloads from it when it returns True; if it raises, the command buffer ends
        with status ``"error"`` and gamma and beta stay.

        MPS: none (mpsx)
        """
        cdef shared_ptr[CState] s = _state_of(state, "state")
        if not isinstance(state if isinstance(state, State) else state[0], _NormalizationGradientState):
            raise TypeError(f"expected a {self.state_class.__name__}, given {type(state).__name__}")
        self._normalization().encode_gamma_and_beta_update(
            command_buffer.native()[0], static_pointer_cast[CGroupNormalizationGradientState, CState](s))


cdef class CNNGroupNormalization(_NormalizationKernel):
    """CNNGroupNormalization(device, data_source)
--

    Group normalization: per image, the mean and biased variance of each group of
    ``number_of_feature_channels / number_of_groups`` channels over H x W, then
    ``y = (x - mean) * gamma[c] / sqrt(variance + epsilon) + beta[c]``. ``data_source`` is a
    GroupNormalizationWeights or implements CNNGroupNormalizationDataSource. As
    ``-[MPSCNNGroupNormalization initWithDevice:dataSource:]``.

    MPS: MPSCNNGroupNormalization
    """

    def __init__(self, Device device not None, data_source):
        self._make(device, data_source, False)

    @property
    def number_of_groups(self):
        """The data source's ``number_of_groups`` at the last load (creation or reload).

        MPS: none (mpsx)
        """
        return self._normalization().number_of_groups()


cdef class CNNGroupNormalizationGradient(CNNGradientKernel):
    """CNNGroupNormalizationGradient(device)
--

    The gradient of CNNGroupNormalization: the gradient for the source, and ``gradient_for_gamma`` and
    ``gradient_for_beta`` into the state. As ``-[MPSCNNGroupNormalizationGradient initWithDevice:]``.

    MPS: MPSCNNGroupNormalizationGradient
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNGroupNormalizationGradient](device.shared()))

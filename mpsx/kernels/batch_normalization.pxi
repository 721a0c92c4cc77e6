# MPSCNNBatchNormalization family (included by _kernels.pyx): the data source
# protocol, BatchNormalizationWeights, the normalization states, batch
# normalization, its statistics and their gradients.

import weakref

from mpsx.includes.kernels.batch_normalization cimport (
    BatchNormalizationDataSourceCalls, CBatchNormalizationDataSource, CBatchNormalizationGradientKernel,
    CBatchNormalizationState, CBatchNormalizationWeights, CCNNBatchNormalization, CCNNBatchNormalizationGradient,
    CCNNBatchNormalizationStatistics, CCNNBatchNormalizationStatisticsGradient, CPythonBatchNormalizationDataSource,
    batch_normalization_data_source_calls)
from mpsx.includes.kernels.normalization cimport (
    CNormalizationGammaAndBetaState, CNormalizationMeanAndVarianceState, checked_normalization_epsilon,
    kNormalizationDefaultEpsilon)

__all__ += ["CNNBatchNormalizationDataSource", "BatchNormalizationWeights", "CNNNormalizationGammaAndBetaState",
            "CNNNormalizationMeanAndVarianceState", "CNNBatchNormalizationState", "CNNBatchNormalization",
            "CNNBatchNormalizationStatistics", "CNNBatchNormalizationStatisticsGradient",
            "CNNBatchNormalizationGradient"]

# MPS's epsilon for data sources that have none (FLT_MIN), from
# mpsx/kernels/normalization.h.
NORMALIZATION_DEFAULT_EPSILON = float(kNormalizationDefaultEpsilon)


class CNNBatchNormalizationDataSource:
    """The batch normalization data source protocol: subclass it and implement ``number_of_feature_channels()`` and
    ``gamma()`` (the rest have defaults here), or write any class with the protocol's required members.

    Required, as in MPS (a class without one is a TypeError naming it when a kernel is made):
    ``number_of_feature_channels``; ``gamma()``, ``beta()``, ``mean()`` and ``variance()``, float32 values per
    feature channel (a numpy array, a Buffer or a DLPack tensor) or None for the identity (gamma and variance ones,
    beta and mean zeros); ``load()`` and ``purge()``, which bracket every read; ``label()``.

    Optional, as in MPS: ``epsilon`` (an attribute or a method; FLT_MIN without one, as in MPS);
    ``update_gamma_and_beta_with_batch_normalization_state(batch_normalization_state)`` and
    ``update_mean_and_variance_with_batch_normalization_state(batch_normalization_state)`` -> bool (CPU-side updates
    from the synchronized CNNBatchNormalizationState);
    ``update_gamma_and_beta_with_command_buffer(command_buffer, batch_normalization_state)`` ->
    CNNNormalizationGammaAndBetaState or None and
    ``update_mean_and_variance_with_command_buffer(command_buffer, batch_normalization_state)`` ->
    CNNNormalizationMeanAndVarianceState or None (GPU-side updates); ``copy(device)``. This class defines the two
    CPU-side updates, but the runtime treats one a subclass inherits from it as absent, as MPS treats a selector a
    data source does not implement.

    MPS: MPSCNNBatchNormalizationDataSource
    """
    epsilon = NORMALIZATION_DEFAULT_EPSILON

    def number_of_feature_channels(self):
        """The number of feature channels; a subclass must implement it (NotImplementedError here).

        MPS: -[MPSCNNBatchNormalizationDataSource numberOfFeatureChannels]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement number_of_feature_channels()")

    def gamma(self):
        """The scale per feature channel, float32, or None for ones; a subclass must implement it (NotImplementedError
        here).

        MPS: -[MPSCNNBatchNormalizationDataSource gamma]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement gamma()")

    def beta(self):
        """The shift per feature channel, float32, or None (the default) for zeros.

        MPS: -[MPSCNNBatchNormalizationDataSource beta]
        """
        return None

    def mean(self):
        """The running mean per feature channel, float32, or None (the default) for zeros.

        MPS: -[MPSCNNBatchNormalizationDataSource mean]
        """
        return None

    def variance(self):
        """The running variance per feature channel, float32, or None (the default) for ones.

        MPS: -[MPSCNNBatchNormalizationDataSource variance]
        """
        return None

    def load(self):
        """Called before the values are read; returns whether they are available (default True).

        MPS: -[MPSCNNBatchNormalizationDataSource load]
        """
        return True

    def purge(self):
        """Called once the values were read: the data source may free them (default: nothing).

        MPS: -[MPSCNNBatchNormalizationDataSource purge]
        """
        pass

    def label(self):
        """A name for the data source, or None (the default).

        MPS: -[MPSCNNBatchNormalizationDataSource label]
        """
        return None

    def update_gamma_and_beta_with_batch_normalization_state(self, batch_normalization_state):
        """The CPU-side gamma and beta update: called once the command buffer completed, with the synchronized state
        (its gamma, beta and their gradients); write the new values to the data source and return whether the update
        was performed. Optional: a subclass without it gets no CPU-side update; returns False here.

        MPS: -[MPSCNNBatchNormalizationDataSource updateGammaAndBetaWithBatchNormalizationState:]
        """
        return False

    def update_mean_and_variance_with_batch_normalization_state(self, batch_normalization_state):
        """The CPU-side mean and variance update: called once the command buffer completed, with the synchronized
        state (its batch statistics); write the new values to the data source and return whether the update was
        performed. Optional: a subclass without it gets no CPU-side update; returns False here.

        MPS: -[MPSCNNBatchNormalizationDataSource updateMeanAndVarianceWithBatchNormalizationState:]
        """
        return False

    def copy(self, device):
        """A copy of the data source for ``device`` (default: ``copy.deepcopy``), called when a kernel or graph is
        copied.

        MPS: -[MPSCNNBatchNormalizationDataSource copyWithZone:device:]
        """
        import copy
        return copy.deepcopy(self)


# ---- the calls the runtime makes into Python data sources (_data_sources.h)

_protocol_defaults(CNNBatchNormalizationDataSource, ("update_gamma_and_beta_with_batch_normalization_state",
                                                     "update_mean_and_variance_with_batch_normalization_state"))


cdef object _value_of(object source, str attribute):
    value = getattr(source, attribute, None)
    return value() if callable(value) else value


cdef int64_t _batch_normalization_source_number_of_feature_channels(object source) except *:
    return integer_argument(_value_of(source, "number_of_feature_channels"),
                            f"{type(source).__name__}.number_of_feature_channels")


cdef HostArray _batch_normalization_source_array(object source, const char* method) except *:
    cdef HostArray out
    array = getattr(source, method.decode())()
    if array is None:
        return out
    a = np.ascontiguousarray(host_values(array), dtype=np.float32).reshape(-1)
    cdef const unsigned char[::1] raw = a.view(np.uint8)
    if raw.shape[0]:
        out.data = &raw[0]
    out.count = a.shape[0]
    out.type = CDataType.Float32
    out.owner = hold(a)
    return out


cdef float _batch_normalization_source_epsilon(object source) except *:
    value = _value_of(source, "epsilon")
    return kNormalizationDefaultEpsilon if value is None else float(value)


# Kernels by address, so states handed to data sources know their kernel.
_batch_normalizations = weakref.WeakValueDictionary()


cdef extern from *:
    """
    // The batch normalization a state's encode ran, to reload its parameters.
    static std::shared_ptr<mpsx::CNNBatchNormalization> mpsx_forward_batch_normalization(
        const mpsx::BatchNormalizationState& s) {
      return std::const_pointer_cast<mpsx::CNNBatchNormalization>(s.batch_normalization());
    }
    """
    shared_ptr[CCNNBatchNormalization] _forward_batch_normalization "mpsx_forward_batch_normalization"(
        const CBatchNormalizationState&)


cdef object wrap_batch_normalization_state(const shared_ptr[CBatchNormalizationState]& state):
    cdef CNNBatchNormalizationState s = CNNBatchNormalizationState.__new__(CNNBatchNormalizationState)
    s.c = <shared_ptr[CState]>state
    s._kernel = _batch_normalizations.get(<size_t>state.get().batch_normalization().get())
    return s


cdef cbool _batch_normalization_source_update(object source, const char* method, shared_ptr[CBatchNormalizationState] state) except *:
    return bool(getattr(source, method.decode())(wrap_batch_normalization_state(state)))


cdef object _checked_update(object source, str method, object result, type expected):
    if result is not None and not isinstance(result, expected):
        raise TypeError(f"{type(source).__name__}.{method}() must return an mpsx.{expected.__name__} or None, "
                        f"returned {type(result).__name__}")
    return result


cdef shared_ptr[CNormalizationGammaAndBetaState] _batch_normalization_source_update_gamma_and_beta_on_command_buffer(
        object source, CCommandBuffer& command_buffer, shared_ptr[CBatchNormalizationState] state) except *:
    cdef shared_ptr[CNormalizationGammaAndBetaState] out
    result = _checked_update(source, "update_gamma_and_beta_with_command_buffer",
                             source.update_gamma_and_beta_with_command_buffer(
                                 wrap_command_buffer(command_buffer.shared_from_this()), wrap_batch_normalization_state(state)),
                             CNNNormalizationGammaAndBetaState)
    if result is not None:
        out = static_pointer_cast[CNormalizationGammaAndBetaState, CState]((<State>result).shared())
    return out


cdef shared_ptr[CNormalizationMeanAndVarianceState] _batch_normalization_source_update_mean_and_variance_on_command_buffer(
        object source, CCommandBuffer& command_buffer, shared_ptr[CBatchNormalizationState] state) except *:
    cdef shared_ptr[CNormalizationMeanAndVarianceState] out
    result = _checked_update(source, "update_mean_and_variance_with_command_buffer",
                             source.update_mean_and_variance_with_command_buffer(
                                 wrap_command_buffer(command_buffer.shared_from_this()), wrap_batch_normalization_state(state)),
                             CNNNormalizationMeanAndVarianceState)
    if result is not None:
        out = static_pointer_cast[CNormalizationMeanAndVarianceState, CState]((<State>result).shared())
    return out


# load, purge, label and has are the convolution data source's: the same protocol calls.
cdef BatchNormalizationDataSourceCalls* _batch_normalization_calls = &batch_normalization_data_source_calls()
_batch_normalization_calls.load = _convolution_source_load
_batch_normalization_calls.purge = _convolution_source_purge
_batch_normalization_calls.number_of_feature_channels = _batch_normalization_source_number_of_feature_channels
_batch_normalization_calls.array = _batch_normalization_source_array
_batch_normalization_calls.epsilon = _batch_normalization_source_epsilon
_batch_normalization_calls.label = _convolution_source_label
_batch_normalization_calls.has = _convolution_source_has
_batch_normalization_calls.update = _batch_normalization_source_update
_batch_normalization_calls.update_gamma_and_beta_on_command_buffer = _batch_normalization_source_update_gamma_and_beta_on_command_buffer
_batch_normalization_calls.update_mean_and_variance_on_command_buffer = \
    _batch_normalization_source_update_mean_and_variance_on_command_buffer


cdef shared_ptr[CBatchNormalizationDataSource] batch_normalization_data_source_of(object source) except *:
    if isinstance(source, BatchNormalizationWeights):
        return <shared_ptr[CBatchNormalizationDataSource]>(<BatchNormalizationWeights>source).shared()
    if source is None:
        raise TypeError("expected a batch normalization data source, given None")
    check_protocol(source, "MPSCNNBatchNormalizationDataSource")
    return <shared_ptr[CBatchNormalizationDataSource]>make_native[CPythonBatchNormalizationDataSource](
        <PyObject*>source)


# ---- native data source and states

cdef object _values_of(CBatchNormalizationWeights* weights, int which):
    # The read may wait for a replay that rewrites the values, whose completed
    # handlers may need the GIL.
    cdef HostArray a
    with nogil:
        if which == 0:
            a = weights.gamma()
        elif which == 1:
            a = weights.beta()
        elif which == 2:
            a = weights.mean()
        else:
            a = weights.variance()
    return np.array(<const float[:a.count]><const float*>a.data, dtype=np.float32)


cdef vector[float] channel_values(values) except *:
    """Per-feature-channel values of a native normalization data source, as float32."""
    return np.ascontiguousarray(values, dtype=np.float32).reshape(-1)


cdef class BatchNormalizationWeights:
    """BatchNormalizationWeights(gamma, beta, mean, variance, epsilon=1e-5, momentum=0.1, optimizer=None,
        label=None)
--

    A batch normalization data source held natively (MPS has no such class: a native
    MPSCNNBatchNormalizationDataSource), of arrays of one value per feature channel.

    Its ``update_mean_and_variance_with_command_buffer`` (what
    ``CNNBatchNormalization.encode_mean_and_variance_update`` calls) folds the state's batch statistics into the
    kernel's running statistics on the device, as PyTorch does:
    ``running = (1 - momentum) * running + momentum * batch``, the running variance taking the unbiased batch
    variance (n / (n - 1) times the biased variance the statistics hold, n the values per channel). ``mean()`` and
    ``variance()`` follow once the command buffer has completed (read from the device when asked for; a failed
    command buffer leaves them).

    With an ``optimizer`` (an NNOptimizer) gamma and beta train on the device:
    ``bn.encode_gamma_and_beta_update(cb, state)`` encodes the optimizer from the state's gradients, with vectors
    (momentum, ...) this data source keeps on the device, and the kernel reloads the result on the command buffer;
    ``gamma()`` and ``beta()`` follow once the command buffer has completed. Give each data source its own
    NNOptimizerAdam: every update advances its time step.

    MPS: none (mpsx)
    """
    cdef shared_ptr[CBatchNormalizationWeights] c
    cdef object _optimizer

    cdef CBatchNormalizationWeights* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef shared_ptr[CBatchNormalizationWeights] shared(self) except *:
        self.native()
        return self.c

    def __init__(self, gamma, beta, mean, variance, float epsilon=1e-5, float momentum=0.1, optimizer=None,
                 label=None):
        cdef string name = ("" if label is None else str(label)).encode()
        self.c = make_native[CBatchNormalizationWeights](channel_values(gamma), channel_values(beta),
                                                         channel_values(mean), channel_values(variance), epsilon,
                                                         momentum, name, optimizer_of(optimizer))
        self._optimizer = optimizer

    def number_of_feature_channels(self):
        """The number of feature channels.

        MPS: -[MPSCNNBatchNormalizationDataSource numberOfFeatureChannels]
        """
        return self.native().number_of_feature_channels()

    def gamma(self):
        """A copy of the current gamma, float32 per feature channel.

        MPS: -[MPSCNNBatchNormalizationDataSource gamma]
        """
        return _values_of(self.native(), 0)

    def beta(self):
        """A copy of the current beta, float32 per feature channel.

        MPS: -[MPSCNNBatchNormalizationDataSource beta]
        """
        return _values_of(self.native(), 1)

    def mean(self):
        """A copy of the running mean, float32 per feature channel.

        MPS: -[MPSCNNBatchNormalizationDataSource mean]
        """
        return _values_of(self.native(), 2)

    def variance(self):
        """A copy of the running variance, float32 per feature channel.

        MPS: -[MPSCNNBatchNormalizationDataSource variance]
        """
        return _values_of(self.native(), 3)

    @property
    def epsilon(self):
        """The term added to the variance before its square root.

        MPS: -[MPSCNNBatchNormalizationDataSource epsilon]
        """
        return self.native().epsilon()

    @property
    def momentum(self):
        """The weight of a batch's statistics in the running statistics' update (default 0.1, PyTorch's).

        MPS: none (mpsx)
        """
        return self.native().momentum()

    def load(self):
        """True: the values are always available.

        MPS: -[MPSCNNBatchNormalizationDataSource load]
        """
        return True

    def purge(self):
        """Nothing to free: the values stay held.

        MPS: -[MPSCNNBatchNormalizationDataSource purge]
        """
        pass

    def label(self):
        """The label given to the constructor, or None.

        MPS: -[MPSCNNBatchNormalizationDataSource label]
        """
        return self.native().label().decode() or None

    def update_mean_and_variance_with_command_buffer(self, CommandBuffer command_buffer not None,
                                                     CNNBatchNormalizationState batch_normalization_state not None):
        """A new CNNNormalizationMeanAndVarianceState holding the running statistics with this batch's folded in,
        encoded on ``command_buffer``; the data source keeps them too.

        MPS: -[MPSCNNBatchNormalizationDataSource updateMeanAndVarianceWithCommandBuffer:batchNormalizationState:]
        """
        return wrap_mean_and_variance_state(self.native().update_mean_and_variance_on_command_buffer(
            command_buffer.native()[0], batch_normalization_state._batch_state()))

    @property
    def optimizer(self):
        """The NNOptimizer that trains gamma and beta, or None.

        MPS: none (mpsx)
        """
        return self._optimizer

    def update_gamma_and_beta_with_command_buffer(self, CommandBuffer command_buffer not None,
                                                  CNNBatchNormalizationState batch_normalization_state not None):
        """With an optimizer: a new CNNNormalizationGammaAndBetaState holding gamma and beta after one update from the
        state's gradients, encoded on ``command_buffer``. TypeError without an optimizer.

        MPS: -[MPSCNNBatchNormalizationDataSource updateGammaAndBetaWithCommandBuffer:batchNormalizationState:]
        """
        if self._optimizer is None:
            raise TypeError("this BatchNormalizationWeights has no optimizer to update gamma and beta with")
        return wrap_gamma_and_beta_state(self.native().update_gamma_and_beta_on_command_buffer(
            command_buffer.native()[0], batch_normalization_state._batch_state()))

    def optimizer_state(self):
        """The vectors the data source keeps for its optimizer, ``{kind: [gamma's, beta's]}`` (kinds ``"momentum"``,
        ``"velocity"``, ``"sum_of_squares"``) as float32 arrays, as the last update left them: read once its command
        buffer has completed. Empty without an optimizer. Adam's time step is the optimizer's.

        MPS: none (mpsx)
        """
        return optimizer_state_of(self.native().optimizer_vectors(), "BatchNormalizationWeights")

    def set_optimizer_state(self, state):
        """Writes what ``optimizer_state()`` returned (the same kinds and sizes) before the next update; TypeError or
        ValueError for anything else.

        MPS: none (mpsx)
        """
        set_optimizer_state_of(self.native().optimizer_vectors(), state, "BatchNormalizationWeights")

    def set_gamma_and_beta(self, gamma, beta):
        """New values in place of the current ones and of every update encoded before (whose command buffer may
        still run: it changes nothing here then). A kernel or graph reads them when it reloads from its data sources
        (``reload_from_data_sources``); until then it keeps what it holds. ShapeError for arrays of other sizes.

        MPS: none (mpsx)
        """
        self.native().set_gamma_and_beta(channel_values(gamma), channel_values(beta))

    def set_mean_and_variance(self, mean, variance):
        """The running statistics: new values in place of the current ones and of every update encoded before (whose command buffer may
        still run: it changes nothing here then). A kernel or graph reads them when it reloads from its data sources
        (``reload_from_data_sources``); until then it keeps what it holds. ShapeError for arrays of other sizes.

        MPS: none (mpsx)
        """
        self.native().set_mean_and_variance(channel_values(mean), channel_values(variance))

    def copy(self, device=None):
        """A copy holding the current values, with a copy of the optimizer (on ``device``) and its state, made through
        the data source's saved description.

        MPS: -[MPSCNNBatchNormalizationDataSource copyWithZone:device:]
        """
        return persistence_copy(self, device)

    def __mpsx_state__(self):
        return {"arguments": (self.gamma(), self.beta(), self.mean(), self.variance(), self.epsilon,
                              self.momentum, self._optimizer, self.label()),
                "optimizer_state": self.optimizer_state()}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return _restore_with_optimizer_state(cls, state)

    def __reduce__(self):
        return persistence_reduce(self)


cdef object wrap_gamma_and_beta_state(const shared_ptr[CNormalizationGammaAndBetaState]& state):
    cdef CNNNormalizationGammaAndBetaState s = \
        CNNNormalizationGammaAndBetaState.__new__(CNNNormalizationGammaAndBetaState)
    s.c = <shared_ptr[CState]>state
    return s


cdef class CNNNormalizationGammaAndBetaState(State):
    """CNNNormalizationGammaAndBetaState(device, gamma, beta)
--

    Gamma and beta of a normalization on the device: float32 values per feature channel, each a Buffer (used as is)
    or an array (copied). As ``-[MPSCNNNormalizationGammaAndBetaState initWithGamma:beta:]``.

    MPS: MPSCNNNormalizationGammaAndBetaState
    """

    def __init__(self, Device device not None, gamma, beta):
        self.c = <shared_ptr[CState]>make_native[CNormalizationGammaAndBetaState](
            buffer_from_numpy(device, gamma, np.float32, "gamma"),
            buffer_from_numpy(device, beta, np.float32, "beta"))

    @staticmethod
    def temporary_state(CommandBuffer command_buffer not None, number_of_feature_channels):
        """A new zeroed state for ``number_of_feature_channels`` channels on the device of ``command_buffer`` (mpsx
        states are reference counted: it lives as long as it is used).

        MPS: +[MPSCNNNormalizationGammaAndBetaState temporaryStateWithCommandBuffer:numberOfFeatureChannels:]
        """
        cdef CNNNormalizationGammaAndBetaState s = \
            CNNNormalizationGammaAndBetaState.__new__(CNNNormalizationGammaAndBetaState)
        s.c = <shared_ptr[CState]>make_native[CNormalizationGammaAndBetaState](
            command_buffer.native().device_ptr(),
            integer_argument(number_of_feature_channels, "number_of_feature_channels"))
        return s

    @property
    def gamma(self):
        """The scale per feature channel, a float32 Buffer.

        MPS: MPSCNNNormalizationGammaAndBetaState.gamma
        """
        cdef shared_ptr[CBuffer] b = (<CNormalizationGammaAndBetaState*>self.native()).gamma()
        return wrap_buffer(b, np.float32, (b.get().length() // 4,))

    @property
    def beta(self):
        """The shift per feature channel, a float32 Buffer.

        MPS: MPSCNNNormalizationGammaAndBetaState.beta
        """
        cdef shared_ptr[CBuffer] b = (<CNormalizationGammaAndBetaState*>self.native()).beta()
        return wrap_buffer(b, np.float32, (b.get().length() // 4,))

    def _saved_values(self):
        return self.gamma.to_numpy(copy=True), self.beta.to_numpy(copy=True)


cdef object wrap_mean_and_variance_state(const shared_ptr[CNormalizationMeanAndVarianceState]& state):
    cdef CNNNormalizationMeanAndVarianceState s = \
        CNNNormalizationMeanAndVarianceState.__new__(CNNNormalizationMeanAndVarianceState)
    s.c = <shared_ptr[CState]>state
    return s


cdef class CNNNormalizationMeanAndVarianceState(State):
    """CNNNormalizationMeanAndVarianceState(device, mean, variance)
--

    The running mean and variance of a batch normalization on the device: float32 values per feature channel, each a
    Buffer (used as is) or an array (copied). As
    ``-[MPSCNNNormalizationMeanAndVarianceState initWithMean:variance:]``.

    MPS: MPSCNNNormalizationMeanAndVarianceState
    """

    def __init__(self, Device device not None, mean, variance):
        self.c = <shared_ptr[CState]>make_native[CNormalizationMeanAndVarianceState](
            buffer_from_numpy(device, mean, np.float32, "mean"),
            buffer_from_numpy(device, variance, np.float32, "variance"))

    @staticmethod
    def temporary_state(CommandBuffer command_buffer not None, number_of_feature_channels):
        """A new zeroed state for ``number_of_feature_channels`` channels on the device of ``command_buffer`` (mpsx
        states are reference counted: it lives as long as it is used).

        MPS: +[MPSCNNNormalizationMeanAndVarianceState temporaryStateWithCommandBuffer:numberOfFeatureChannels:]
        """
        return wrap_mean_and_variance_state(make_native[CNormalizationMeanAndVarianceState](
            command_buffer.native().device_ptr(),
            integer_argument(number_of_feature_channels, "number_of_feature_channels")))

    @property
    def mean(self):
        """The mean per feature channel, a float32 Buffer.

        MPS: MPSCNNNormalizationMeanAndVarianceState.mean
        """
        cdef shared_ptr[CBuffer] b = (<CNormalizationMeanAndVarianceState*>self.native()).mean()
        return wrap_buffer(b, np.float32, (b.get().length() // 4,))

    @property
    def variance(self):
        """The variance per feature channel, a float32 Buffer.

        MPS: MPSCNNNormalizationMeanAndVarianceState.variance
        """
        cdef shared_ptr[CBuffer] b = (<CNormalizationMeanAndVarianceState*>self.native()).variance()
        return wrap_buffer(b, np.float32, (b.get().length() // 4,))

    def _saved_values(self):
        return self.mean.to_numpy(copy=True), self.variance.to_numpy(copy=True)


cdef class CNNBatchNormalizationState(NNGradientState):
    """One batch's statistics and the gradients of gamma and beta (float32 Buffers of one value per channel, batch
    sums), and the gamma and beta its forward encode used; ``synchronize(cb)`` before reading them on the host.

    It belongs to one batch, which may come as several sub-batches: statistics of each, then forward, statistics
    gradient and gradient of each (docs/semantics.md). ``reset()`` starts a new batch. Made by
    ``CNNBatchNormalization.result_state``.

    MPS: MPSCNNBatchNormalizationState
    """

    cdef shared_ptr[CBatchNormalizationState] _batch_state(self):
        return static_pointer_cast[CBatchNormalizationState, CState](self.shared())

    cdef Buffer _buffer(self, const shared_ptr[CBuffer]& buffer):
        return wrap_buffer(buffer, np.float32, ((<CBatchNormalizationState*>self.native()).channels(),))

    @property
    def gamma(self):
        """The gamma the forward encode used, a float32 Buffer.

        MPS: -[MPSCNNBatchNormalizationState gamma]
        """
        return self._buffer((<CBatchNormalizationState*>self.native()).gamma())

    @property
    def beta(self):
        """The beta the forward encode used, a float32 Buffer.

        MPS: -[MPSCNNBatchNormalizationState beta]
        """
        return self._buffer((<CBatchNormalizationState*>self.native()).beta())

    @property
    def mean(self):
        """The batch mean, from CNNBatchNormalizationStatistics, a float32 Buffer.

        MPS: -[MPSCNNBatchNormalizationState mean]
        """
        return self._buffer((<CBatchNormalizationState*>self.native()).mean())

    @property
    def variance(self):
        """The batch variance (biased: over N x H x W), from CNNBatchNormalizationStatistics, a float32 Buffer.

        MPS: -[MPSCNNBatchNormalizationState variance]
        """
        return self._buffer((<CBatchNormalizationState*>self.native()).variance())

    @property
    def gradient_for_gamma(self):
        """The gradient for gamma, summed over the batch, a float32 Buffer.

        MPS: -[MPSCNNBatchNormalizationState gradientForGamma]
        """
        return self._buffer((<CBatchNormalizationState*>self.native()).gradient_for_gamma())

    @property
    def gradient_for_beta(self):
        """The gradient for beta, summed over the batch, a float32 Buffer.

        MPS: -[MPSCNNBatchNormalizationState gradientForBeta]
        """
        return self._buffer((<CBatchNormalizationState*>self.native()).gradient_for_beta())

    @property
    def batch_normalization(self):
        """The CNNBatchNormalization that made this state: for a state an NNGraph exports, the graph's own kernel (no
        ``data_source``), so that updates encoded by hand can reload it.

        MPS: MPSCNNBatchNormalizationState.batchNormalization
        """
        cdef CNNBatchNormalization kernel
        if self._kernel is None:
            kernel = CNNBatchNormalization.__new__(CNNBatchNormalization)
            kernel._set(<shared_ptr[CUnaryKernel]>_forward_batch_normalization(
                (<CBatchNormalizationState*>self.native())[0]), CNNBatchNormalizationState)
            self._kernel = kernel
        return self._kernel

    def reset(self):
        """Zeroes the statistics and gradients and forgets the sub-batches; encode the statistics again before using
        it.

        MPS: -[MPSCNNBatchNormalizationState reset]
        """
        (<CBatchNormalizationState*>self.native()).reset()


# ---- kernels

cdef class CNNBatchNormalization(CNNUnaryKernel):
    """CNNBatchNormalization(device, data_source, fused_neuron_descriptor=None)
--

    Batch normalization: ``gamma * (x - mean) / sqrt(variance + epsilon) + beta`` per feature channel, then the
    fused neuron. ``data_source`` is a BatchNormalizationWeights or any object implementing the
    CNNBatchNormalizationDataSource protocol.

    Encoded with a CNNBatchNormalizationState it normalizes with the state's batch statistics (training), without
    one with its running mean and variance (inference). As
    ``-[MPSCNNBatchNormalization initWithDevice:dataSource:fusedNeuronDescriptor:]``.

    MPS: MPSCNNBatchNormalization
    """
    cdef object _data_source
    cdef object __weakref__

    def __init__(self, Device device not None, data_source, fused_neuron_descriptor=None):
        self._data_source = data_source
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNBatchNormalization](
            device.shared(), batch_normalization_data_source_of(data_source), neuron_descriptor_of(fused_neuron_descriptor)),
            CNNBatchNormalizationState)
        _batch_normalizations[<size_t>self.unary] = self

    cdef CCNNBatchNormalization* _batch_normalization(self) except NULL:
        return <CCNNBatchNormalization*>self.unary_kernel()

    _mpsx_properties = ("epsilon",)

    def _mpsx_arguments(self):
        return (_saved_data_source(self), self.fused_neuron_descriptor)

    @property
    def data_source(self):
        """The data source the kernel was made with.

        MPS: MPSCNNBatchNormalization.dataSource
        """
        return self._data_source

    @property
    def number_of_feature_channels(self):
        """The number of feature channels.

        MPS: MPSCNNBatchNormalization.numberOfFeatureChannels
        """
        return self._batch_normalization().number_of_feature_channels()

    @property
    def epsilon(self):
        """The term added to the variance before its square root (the data source's at first); ValueError unless
        finite and non-negative.

        MPS: MPSCNNBatchNormalization.epsilon
        """
        return self._batch_normalization().epsilon

    @epsilon.setter
    def epsilon(self, float value):
        self._batch_normalization().epsilon = checked_normalization_epsilon(
            value, self._batch_normalization().class_name())

    @property
    def fused_neuron_descriptor(self):
        """The neuron applied to the result (given to the constructor), or None.

        MPS: none (mpsx)
        """
        return _wrap_neuron_descriptor(self._batch_normalization().fused_neuron())

    def encode(self, CommandBuffer command_buffer not None, Image source_image not None,
               State batch_normalization_state=None, Image destination_image=None):
        """Normalizes ``source_image`` with the batch statistics of ``batch_normalization_state``, or without a state
        with the running ones; returns the destination image.

        MPS: -[MPSCNNBatchNormalization encodeToCommandBuffer:sourceImage:batchNormalizationState:destinationImage:]
        """
        cdef shared_ptr[CImage] destination = _destination_image(destination_image)
        cdef shared_ptr[CState] state
        if batch_normalization_state is not None:
            state = batch_normalization_state.shared()
        return wrap_image(self.unary_kernel().encode(command_buffer.native()[0], source_image.shared(), destination,
                                                     state, False).image)

    def encode_batch(self, CommandBuffer command_buffer not None, source_images, batch_normalization_state=None,
                     destination_images=None):
        """``encode`` over a batch (an ImageBatch or a list of Images); the state is the batch's one state (or its
        StateBatch). Returns an ImageBatch.

        MPS: -[MPSCNNBatchNormalization encodeBatchToCommandBuffer:sourceImages:batchNormalizationState:destinationImages:]
        """
        cdef shared_ptr[CImage] destination = _destination_batch(destination_images, "destination_images")
        cdef shared_ptr[CState] state
        if batch_normalization_state is not None:
            state = _state_of(batch_normalization_state, "batch_normalization_state")
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        cdef Encoded r = self.unary_kernel().encode(command_buffer.native()[0],
                                                    image_of(_batch_of(command_buffer, source_images)), destination,
                                                    state, False)
        encoding.complete()
        return wrap_image_batch(r.image)

    def reload_gamma_and_beta_from_data_source(self):
        """Loads the data source's current gamma and beta now (on the host); later encodes use them.

        MPS: -[MPSCNNBatchNormalization reloadGammaAndBetaFromDataSource]
        """
        self._batch_normalization().reload_gamma_and_beta_from_data_source()

    def reload_mean_and_variance_from_data_source(self):
        """Loads the data source's current mean and variance now (on the host); later encodes use them.

        MPS: -[MPSCNNBatchNormalization reloadMeanAndVarianceFromDataSource]
        """
        self._batch_normalization().reload_mean_and_variance_from_data_source()

    def reload_data_source(self, data_source):
        """Takes a new data source of the same channel count: loads its gamma, beta, mean, variance and epsilon now (on
        the host), and later updates call it. Deprecated, as in MPS (warns with a DeprecationWarning): set the data
        source's values and call ``reload_gamma_and_beta_from_data_source`` and/or
        ``reload_mean_and_variance_from_data_source`` instead.

        MPS: -[MPSCNNBatchNormalization reloadDataSource:]
        """
        warnings.warn("CNNBatchNormalization.reload_data_source is deprecated, as MPSCNNBatchNormalization's "
                      "reloadDataSource: is: use reload_gamma_and_beta_from_data_source and/or "
                      "reload_mean_and_variance_from_data_source instead", DeprecationWarning, stacklevel=2)
        self._batch_normalization().reload_data_source(batch_normalization_data_source_of(data_source))
        self._data_source = data_source

    def reload_gamma_and_beta(self, CommandBuffer command_buffer not None,
                              CNNNormalizationGammaAndBetaState gamma_and_beta_state not None):
        """Copies the state's gamma and beta in, ordered on ``command_buffer``.

        MPS: -[MPSCNNBatchNormalization reloadGammaAndBetaWithCommandBuffer:gammaAndBetaState:]
        """
        self._batch_normalization().reload_gamma_and_beta(
            command_buffer.native()[0], (<CNormalizationGammaAndBetaState*>gamma_and_beta_state.native())[0])

    def reload_mean_and_variance(self, CommandBuffer command_buffer not None,
                                 CNNNormalizationMeanAndVarianceState mean_and_variance_state not None):
        """Copies the state's mean and variance in, ordered on ``command_buffer``.

        MPS: -[MPSCNNBatchNormalization reloadMeanAndVarianceWithCommandBuffer:meanAndVarianceState:]
        """
        self._batch_normalization().reload_mean_and_variance(
            command_buffer.native()[0], (<CNormalizationMeanAndVarianceState*>mean_and_variance_state.native())[0])

    def encode_gamma_and_beta_update(self, CommandBuffer command_buffer not None,
                                     CNNBatchNormalizationState batch_normalization_state not None):
        """The gamma and beta update of MPS's training styles, for training encoded by hand.

        A data source with ``update_gamma_and_beta_with_command_buffer`` encodes its update now and the kernel reloads
        the state it returns, on the command buffer. One with ``update_gamma_and_beta_with_batch_normalization_state``
        is called once the command buffer completed, with the synchronized state, and the kernel then reloads from it;
        if it raises, the command buffer ends with status ``"error"`` and that exception, and gamma and beta stay as
        they were.

        MPS: none (mpsx)
        """
        self._batch_normalization().encode_gamma_and_beta_update(command_buffer.native()[0],
                                                                 batch_normalization_state._batch_state())

    def encode_mean_and_variance_update(self, CommandBuffer command_buffer not None,
                                        CNNBatchNormalizationState batch_normalization_state not None):
        """The running mean and variance update, as ``encode_gamma_and_beta_update`` with the data source's
        ``update_mean_and_variance_with_command_buffer`` or
        ``update_mean_and_variance_with_batch_normalization_state``.

        MPS: none (mpsx)
        """
        self._batch_normalization().encode_mean_and_variance_update(command_buffer.native()[0],
                                                                    batch_normalization_state._batch_state())


cdef object _wrap_neuron_descriptor(const CNeuronDescriptor& desc):
    if desc.type == <CNeuronType>0:
        return None
    cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
    d.desc = desc
    return d


cdef class CNNBatchNormalizationStatistics(CNNKernel):
    """CNNBatchNormalizationStatistics(device)
--

    The batch mean and biased variance of each feature channel over every pixel of every source image, into a
    CNNBatchNormalizationState. Several encodes on one state (sub-batches, before any forward encode) accumulate:
    the statistics of all their pixels together. As ``-[MPSCNNBatchNormalizationStatistics initWithDevice:]``.

    MPS: MPSCNNBatchNormalizationStatistics
    """

    def __init__(self, Device device not None):
        self.kernel = <shared_ptr[CKernel]>make_native[CCNNBatchNormalizationStatistics](device.shared())

    def encode_batch(self, CommandBuffer command_buffer not None, source_images, batch_normalization_state):
        """Encodes the statistics of ``source_images`` (an ImageBatch, an Image or a list of Images) into
        ``batch_normalization_state`` (the state, or its StateBatch); returns None.

        MPS: -[MPSCNNBatchNormalizationStatistics encodeBatchToCommandBuffer:sourceImages:batchNormalizationState:]
        """
        cdef shared_ptr[CState] state = _state_of(batch_normalization_state, "batch_normalization_state")
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        (<CCNNBatchNormalizationStatistics*>self.native()).encode_batch(
            command_buffer.native()[0], image_of(_batch_of(command_buffer, source_images)), state)
        encoding.complete()


cdef class CNNBatchNormalizationStatisticsGradient(CNNGradientKernel):
    """CNNBatchNormalizationStatisticsGradient(device, fused_neuron_descriptor=None)
--

    The gradients for gamma and beta into the state's ``gradient_for_gamma`` and ``gradient_for_beta``, summed over
    the batch (over every sub-batch encoded with the state); with a fused neuron, through its gradient first. As
    ``-[MPSCNNBatchNormalizationStatisticsGradient initWithDevice:fusedNeuronDescriptor:]``.

    MPS: MPSCNNBatchNormalizationStatisticsGradient
    """

    def __init__(self, Device device not None, fused_neuron_descriptor=None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNBatchNormalizationStatisticsGradient](
            device.shared(), neuron_descriptor_of(fused_neuron_descriptor)))

    @property
    def fused_neuron_descriptor(self):
        """The fused neuron of the forward kernel whose gradient this is, or None.

        MPS: none (mpsx)
        """
        return _wrap_neuron_descriptor((<CBatchNormalizationGradientKernel*>self.gradient_kernel()).fused_neuron())

    def _mpsx_arguments(self):
        return (self.fused_neuron_descriptor,)

    def encode(self, *args, **kwargs):
        """Raises TypeError: MPS marks this kernel's single-image encodes unavailable; use ``encode_batch`` (an Image
        is a batch of its images).

        MPS: none (mpsx)
        """
        raise TypeError("MPSCNNBatchNormalizationStatisticsGradient has no single-image encode; "
                        "use encode_batch (an Image is a batch of its images)")

    def encode_batch(self, CommandBuffer command_buffer not None, source_gradients, source_images,
                     batch_normalization_state):
        """Encodes the gradients for gamma and beta from ``source_gradients`` (the gradient of the forward result) and
        ``source_images`` (the forward source) into ``batch_normalization_state``; returns None.

        MPS: -[MPSCNNBatchNormalizationStatisticsGradient encodeBatchToCommandBuffer:sourceGradients:sourceImages:batchNormalizationState:]
        """
        cdef shared_ptr[CState] state = _state_of(batch_normalization_state, "batch_normalization_state")
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        (<CCNNBatchNormalizationStatisticsGradient*>self.gradient_kernel()).encode_batch(
            command_buffer.native()[0], image_of(_batch_of(command_buffer, source_gradients)),
            image_of(_batch_of(command_buffer, source_images)), state)
        encoding.complete()


cdef class CNNBatchNormalizationGradient(CNNGradientKernel):
    """CNNBatchNormalizationGradient(device, fused_neuron_descriptor=None)
--

    The gradient for the source through the batch statistics (and the fused neuron's gradient, if any); encode the
    statistics gradient with the state first. As
    ``-[MPSCNNBatchNormalizationGradient initWithDevice:fusedNeuronDescriptor:]``.

    MPS: MPSCNNBatchNormalizationGradient
    """

    def __init__(self, Device device not None, fused_neuron_descriptor=None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNBatchNormalizationGradient](
            device.shared(), neuron_descriptor_of(fused_neuron_descriptor)))

    @property
    def fused_neuron_descriptor(self):
        """The fused neuron of the forward kernel whose gradient this is, or None.

        MPS: none (mpsx)
        """
        return _wrap_neuron_descriptor((<CBatchNormalizationGradientKernel*>self.gradient_kernel()).fused_neuron())

    def _mpsx_arguments(self):
        return (self.fused_neuron_descriptor,)

    def encode(self, CommandBuffer command_buffer not None, Image source_gradient not None,
               Image source_image not None, State batch_normalization_state not None,
               Image destination_gradient=None):
        """Encodes the gradient for ``source_image`` from ``source_gradient`` and the state the statistics gradient
        filled; returns ``destination_gradient`` or a new image.

        MPS: -[MPSCNNBatchNormalizationGradient encodeToCommandBuffer:sourceGradient:sourceImage:batchNormalizationState:destinationGradient:]
        """
        return CNNGradientKernel.encode(self, command_buffer, source_gradient, source_image,
                                        batch_normalization_state, destination_gradient)

    def encode_batch(self, CommandBuffer command_buffer not None, source_gradients, source_images,
                     batch_normalization_state, destination_gradients=None):
        """``encode`` over batches (ImageBatches or lists of Images); returns an ImageBatch.

        MPS: -[MPSCNNBatchNormalizationGradient encodeBatchToCommandBuffer:sourceGradients:sourceImages:batchNormalizationState:destinationGradients:]
        """
        return CNNGradientKernel.encode_batch(self, command_buffer, source_gradients, source_images,
                                              batch_normalization_state, destination_gradients)

# MPSCNNInstanceNormalization family (included by _kernels.pyx after
# group_normalization.pxi, whose shared pieces it uses: instance
# normalization is group normalization with one channel per group).

from mpsx.includes.kernels.instance_normalization cimport kInstanceNormalizationGroups

__all__ += ["CNNInstanceNormalizationDataSource", "InstanceNormalizationWeights",
            "CNNInstanceNormalizationGradientState", "CNNInstanceNormalization", "CNNInstanceNormalizationGradient"]


class CNNInstanceNormalizationDataSource:
    """The instance normalization data source protocol: subclass it and implement ``number_of_feature_channels`` and
    ``gamma()`` (the rest have defaults here), or write any class with the protocol's required members.

    Required, as in MPS (a class without one is a TypeError naming it when a kernel is made): ``gamma()`` and
    ``beta()``, float32 values per feature channel (a numpy array, a Buffer or a DLPack tensor) or None (gamma ones,
    beta zeros); ``number_of_feature_channels``; ``label()``.

    Optional, as in MPS: ``epsilon`` (an attribute or a method; FLT_MIN without one); ``load()`` and ``purge()``
    around every read; ``update_gamma_and_beta_with_instance_normalization_state_batch(
    instance_normalization_state_batch)`` -> bool (CPU side, after the command buffer completed, with the
    synchronized states) and ``update_gamma_and_beta_with_command_buffer(command_buffer,
    instance_normalization_state_batch)`` -> CNNNormalizationGammaAndBetaState or None (GPU side); both receive the
    batch of states as a list: mpsx gives one state per encode, whose gradients are already sums over its images, so
    summing the list's gradients gives the batch's. ``copy(device)``. This class defines the CPU-side update, but the
    runtime treats it as absent where a subclass inherits it, as MPS treats a selector a data source does not
    implement.

    MPS: MPSCNNInstanceNormalizationDataSource
    """
    epsilon = NORMALIZATION_DEFAULT_EPSILON

    def number_of_feature_channels(self):
        """The number of feature channels (a method or an attribute); a subclass must provide it (NotImplementedError
        here).

        MPS: MPSCNNInstanceNormalizationDataSource.numberOfFeatureChannels
        """
        raise NotImplementedError(f"{type(self).__name__} must implement number_of_feature_channels")

    def gamma(self):
        """The scale per feature channel, float32, or None for ones; a subclass must implement it (NotImplementedError
        here).

        MPS: -[MPSCNNInstanceNormalizationDataSource gamma]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement gamma()")

    def beta(self):
        """The shift per feature channel, float32, or None (the default) for zeros.

        MPS: -[MPSCNNInstanceNormalizationDataSource beta]
        """
        return None

    def load(self):
        """Called before the values are read; returns whether they are available (default True).

        MPS: -[MPSCNNInstanceNormalizationDataSource load]
        """
        return True

    def purge(self):
        """Called once the values were read: the data source may free them (default: nothing).

        MPS: -[MPSCNNInstanceNormalizationDataSource purge]
        """
        pass

    def label(self):
        """A name for the data source, or None (the default).

        MPS: -[MPSCNNInstanceNormalizationDataSource label]
        """
        return None

    def update_gamma_and_beta_with_instance_normalization_state_batch(self, instance_normalization_state_batch):
        """The CPU-side gamma and beta update: called once the command buffer completed, with the synchronized states
        as a list (their gamma, beta and gradients); write the new values to the data source and return whether the
        update was performed. Optional: a subclass without it gets no CPU-side update; returns False here.

        MPS: -[MPSCNNInstanceNormalizationDataSource updateGammaAndBetaWithInstanceNormalizationStateBatch:]
        """
        return False

    def copy(self, device):
        """A copy of the data source for ``device`` (default: ``copy.deepcopy``), called when a kernel or graph is
        copied.

        MPS: -[MPSCNNInstanceNormalizationDataSource copyWithZone:device:]
        """
        import copy
        return copy.deepcopy(self)


_protocol_defaults(CNNInstanceNormalizationDataSource, ("update_gamma_and_beta_with_instance_normalization_state_batch",))


cdef class InstanceNormalizationWeights(_NormalizationWeights):
    """InstanceNormalizationWeights(gamma, beta, epsilon=1e-5, optimizer=None, label=None)
--

    An instance normalization data source held natively (MPS has no such class: a native
    MPSCNNInstanceNormalizationDataSource), of gamma and beta per feature channel.

    With an ``optimizer`` (an NNOptimizer) gamma and beta train on the device, as BatchNormalizationWeights does:
    ``inorm.encode_gamma_and_beta_update(cb, state)`` encodes the optimizer from the state's gradients and the
    kernel reloads the result on the command buffer; ``gamma()`` and ``beta()`` follow once the command buffer has
    completed without error.

    MPS: none (mpsx)
    """

    def __init__(self, gamma, beta, float epsilon=1e-5, optimizer=None, label=None):
        self._make(gamma, beta, kInstanceNormalizationGroups, epsilon, optimizer, label)

    def update_gamma_and_beta_with_command_buffer(self, CommandBuffer command_buffer not None,
                                                  instance_normalization_state_batch):
        """With an optimizer: a new CNNNormalizationGammaAndBetaState holding gamma and beta after one update from the
        gradients of the batch of states (one encode's state, alone or as its StateBatch), encoded on
        ``command_buffer``. TypeError without an optimizer.

        MPS: -[MPSCNNInstanceNormalizationDataSource updateGammaAndBetaWithCommandBuffer:instanceNormalizationStateBatch:]
        """
        return self._update_gamma_and_beta(command_buffer, instance_normalization_state_batch,
                                           "instance_normalization_state_batch")

    def copy(self, device=None):
        """A copy holding the current values, with a copy of the optimizer (on ``device``) and its state, made through
        the data source's saved description.

        MPS: -[MPSCNNInstanceNormalizationDataSource copyWithZone:device:]
        """
        return persistence_copy(self, device)

    def __mpsx_state__(self):
        return {"arguments": (self.gamma(), self.beta(), self.epsilon, self._optimizer,
                              self.label()), "optimizer_state": self.optimizer_state()}

    def __reduce__(self):
        return persistence_reduce(self)


cdef class CNNInstanceNormalizationGradientState(_NormalizationGradientState):
    """The state of an instance normalization's training forward encode, which its gradient fills with the gradients
    for gamma and beta.

    MPS: MPSCNNInstanceNormalizationGradientState
    """

    @property
    def instance_normalization(self):
        """The CNNInstanceNormalization that made this state.

        MPS: MPSCNNInstanceNormalizationGradientState.instanceNormalization
        """
        self.native()
        return self._kernel


cdef class CNNInstanceNormalization(_NormalizationKernel):
    """CNNInstanceNormalization(device, data_source)
--

    Instance normalization: per image and feature channel,
    ``y = (x - mean) * gamma[c] / sqrt(variance + epsilon) + beta[c]``, the mean and biased variance over H x W.
    ``data_source`` is an InstanceNormalizationWeights or implements CNNInstanceNormalizationDataSource. As
    ``-[MPSCNNInstanceNormalization initWithDevice:dataSource:]``.

    MPS: MPSCNNInstanceNormalization
    """

    def __init__(self, Device device not None, data_source):
        self._make(device, data_source, True)


cdef class CNNInstanceNormalizationGradient(CNNGradientKernel):
    """CNNInstanceNormalizationGradient(device)
--

    The gradient of CNNInstanceNormalization: the gradient for the source, and ``gradient_for_gamma`` and
    ``gradient_for_beta`` into the state. As ``-[MPSCNNInstanceNormalizationGradient initWithDevice:]``.

    MPS: MPSCNNInstanceNormalizationGradient
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNInstanceNormalizationGradient](device.shared()))

# MPSNNOptimizer family (included by _kernels.pyx): the descriptor, stochastic
# gradient descent, Adam and RMSProp, encoding updates of plain vectors and of
# convolution states.

from libc.float cimport FLT_MAX
from libc.stdint cimport uint64_t

from mpsx.includes.buffer cimport CVector
from mpsx.includes.kernels.optimizer cimport (
    CKeptOptimizerVectors, CNNOptimizer, CNNOptimizerAdam, OptimizerVectorKind, CNNOptimizerRMSProp,
    CNNOptimizerStochasticGradientDescent,
    OptimizerDescriptor as COptimizerDescriptor, OptimizerVectorLists, OptimizerVectors,
    RegularizationType as CRegularizationType)
from mpsx._runtime cimport Vector
from mpsx._errors import ShapeError

__all__ += ["NNRegularizationType", "NNOptimizerDescriptor", "NNOptimizer", "NNOptimizerStochasticGradientDescent",
            "NNOptimizerAdam", "NNOptimizerRMSProp"]


class NNRegularizationType(enum.IntEnum):
    """The regularization whose gradient an optimizer adds to each value's gradient: NONE, L1
    (``regularization_scale * sign(value)``) or L2 (``regularization_scale * value``, torch's ``weight_decay``).

    MPS: MPSNNRegularizationType
    """
    NONE = 0
    L1 = 1  # adds regularization_scale * sign(value)
    L2 = 2  # adds regularization_scale * value


cdef class NNOptimizerDescriptor:
    """NNOptimizerDescriptor(learning_rate=0.001, gradient_rescale=1.0, apply_gradient_clipping=False,
        gradient_clip_max=3.4028234663852886e+38, gradient_clip_min=-3.4028234663852886e+38,
        regularization_type=NNRegularizationType.NONE, regularization_scale=0.0)
--

    The settings every optimizer shares.

    Before an update uses a gradient g it is clipped to [``gradient_clip_min``, ``gradient_clip_max``] when
    ``apply_gradient_clipping`` (clipping comes before rescaling, as MPS says), multiplied by ``gradient_rescale``,
    then given the gradient of the regularization loss at the value: ``regularization_scale * sign(value)`` for L1,
    ``regularization_scale * value`` for L2 (torch's ``weight_decay``). ValueError for settings out of range. As
    ``-[MPSNNOptimizerDescriptor initWithLearningRate:gradientRescale:applyGradientClipping:gradientClipMax:gradientClipMin:regularizationType:regularizationScale:]``.

    MPS: MPSNNOptimizerDescriptor
    """
    cdef COptimizerDescriptor desc

    def __init__(self, learning_rate=0.001, gradient_rescale=1.0, apply_gradient_clipping=False,
                 gradient_clip_max=FLT_MAX, gradient_clip_min=-FLT_MAX,
                 regularization_type=NNRegularizationType.NONE, regularization_scale=0.0):
        self.desc.learning_rate = learning_rate
        self.desc.gradient_rescale = gradient_rescale
        self.desc.apply_gradient_clipping = apply_gradient_clipping
        self.desc.gradient_clip_max = gradient_clip_max
        self.desc.gradient_clip_min = gradient_clip_min
        self.regularization_type = regularization_type
        self.desc.regularization_scale = regularization_scale
        self.desc.validate()


    @classmethod
    def optimizer_descriptor_with_learning_rate(cls, learning_rate, gradient_rescale, *, regularization_type,
                                                regularization_scale, apply_gradient_clipping=False,
                                                gradient_clip_max=FLT_MAX, gradient_clip_min=-FLT_MAX):
        """A new descriptor; the same as ``NNOptimizerDescriptor(...)`` with these keywords. MPS's two factories
        order their later arguments differently, so those are keywords only: ``regularization_type`` and
        ``regularization_scale`` are required, as both factories take them; the clipping arguments are the second
        factory's (no clipping by default, as the first factory applies none).

        MPS: +[MPSNNOptimizerDescriptor optimizerDescriptorWithLearningRate:gradientRescale:regularizationType:regularizationScale:], +[MPSNNOptimizerDescriptor optimizerDescriptorWithLearningRate:gradientRescale:applyGradientClipping:gradientClipMax:gradientClipMin:regularizationType:regularizationScale:]
        """
        return cls(learning_rate, gradient_rescale, apply_gradient_clipping, gradient_clip_max, gradient_clip_min,
                   regularization_type, regularization_scale)

    @property
    def learning_rate(self):
        """The step size of the updates (default 0.001).

        MPS: MPSNNOptimizerDescriptor.learningRate
        """
        return self.desc.learning_rate

    @learning_rate.setter
    def learning_rate(self, float value):
        self.desc.learning_rate = parameter("MPSNNOptimizerDescriptor", value, "learning_rate")

    @property
    def gradient_rescale(self):
        """The factor every gradient is multiplied by, after clipping (default 1).

        MPS: MPSNNOptimizerDescriptor.gradientRescale
        """
        return self.desc.gradient_rescale

    @gradient_rescale.setter
    def gradient_rescale(self, float value):
        self.desc.gradient_rescale = parameter("MPSNNOptimizerDescriptor", value, "gradient_rescale")

    @property
    def apply_gradient_clipping(self):
        """Whether gradients are clipped to [gradient_clip_min, gradient_clip_max] (default False).

        MPS: MPSNNOptimizerDescriptor.applyGradientClipping
        """
        return self.desc.apply_gradient_clipping

    @apply_gradient_clipping.setter
    def apply_gradient_clipping(self, bint value):
        self.desc.apply_gradient_clipping = value

    @property
    def gradient_clip_max(self):
        """The upper clipping bound (default FLT_MAX).

        MPS: MPSNNOptimizerDescriptor.gradientClipMax
        """
        return self.desc.gradient_clip_max

    @gradient_clip_max.setter
    def gradient_clip_max(self, float value):
        self.desc.gradient_clip_max = parameter("MPSNNOptimizerDescriptor", value, "gradient_clip_max")

    @property
    def gradient_clip_min(self):
        """The lower clipping bound (default -FLT_MAX).

        MPS: MPSNNOptimizerDescriptor.gradientClipMin
        """
        return self.desc.gradient_clip_min

    @gradient_clip_min.setter
    def gradient_clip_min(self, float value):
        self.desc.gradient_clip_min = parameter("MPSNNOptimizerDescriptor", value, "gradient_clip_min")

    @property
    def regularization_type(self):
        """The regularization whose gradient joins each value's: an NNRegularizationType (default NONE).

        MPS: MPSNNOptimizerDescriptor.regularizationType
        """
        return NNRegularizationType(<uint32_t>self.desc.regularization_type)

    @regularization_type.setter
    def regularization_type(self, value):
        self.desc.regularization_type = <CRegularizationType><uint32_t>NNRegularizationType(value)

    @property
    def regularization_scale(self):
        """The factor of the regularization gradient (default 0).

        MPS: MPSNNOptimizerDescriptor.regularizationScale
        """
        return self.desc.regularization_scale

    @regularization_scale.setter
    def regularization_scale(self, float value):
        self.desc.regularization_scale = parameter("MPSNNOptimizerDescriptor", value, "regularization_scale")

    def __mpsx_state__(self):
        return {"arguments": (self.learning_rate, self.gradient_rescale, self.apply_gradient_clipping,
                              self.gradient_clip_max, self.gradient_clip_min, self.regularization_type,
                              self.regularization_scale)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __eq__(self, other):
        return isinstance(other, NNOptimizerDescriptor) and self.desc == (<NNOptimizerDescriptor>other).desc

    def __repr__(self):
        return (f"mpsx.NNOptimizerDescriptor(learning_rate={self.learning_rate}, "
                f"gradient_rescale={self.gradient_rescale}, apply_gradient_clipping={self.apply_gradient_clipping}, "
                f"gradient_clip_max={self.gradient_clip_max}, gradient_clip_min={self.gradient_clip_min}, "
                f"regularization_type={self.regularization_type!r}, "
                f"regularization_scale={self.regularization_scale})")


cdef COptimizerDescriptor _optimizer_descriptor(object descriptor, object learning_rate) except *:
    """The descriptor's settings (MPS's defaults without one); learning_rate, if given, replaces its rate."""
    cdef COptimizerDescriptor d
    if descriptor is not None:
        if not isinstance(descriptor, NNOptimizerDescriptor):
            raise TypeError(f"optimizer_descriptor must be an mpsx.NNOptimizerDescriptor, given "
                            f"{type(descriptor).__name__}")
        d = (<NNOptimizerDescriptor>descriptor).desc
    if learning_rate is not None:
        d.learning_rate = learning_rate
    return d


cdef shared_ptr[CVector] _vector_of(object vector, str name) except *:
    cdef shared_ptr[CVector] none
    if vector is None:
        return none
    if isinstance(vector, Vector):
        return (<Vector>vector).shared()
    raise TypeError(f"{name} must be an mpsx.Vector, given {type(vector).__name__}")


cdef vector[shared_ptr[CVector]] _vector_list(object vectors, str name) except *:
    cdef vector[shared_ptr[CVector]] out
    if vectors is None:
        return out
    if not isinstance(vectors, (list, tuple)):
        raise TypeError(f"{name} must be a list of mpsx.Vector ([weights, biases] or [weights]), given "
                        f"{type(vectors).__name__}")
    for i, item in enumerate(vectors):
        if not isinstance(item, Vector):
            raise TypeError(f"{name}[{i}] must be an mpsx.Vector, given {type(item).__name__}")
        out.push_back((<Vector>item).shared())
    return out


cdef shared_ptr[CState] _state_argument(object state, str name) except *:
    cdef shared_ptr[CState] none
    if state is None:
        return none
    if isinstance(state, State):
        return (<State>state).shared()
    raise TypeError(f"{name} must be an mpsx state, given {type(state).__name__}")


cdef bint _state_form(bint vectors_given, bint states_given) except -1:
    """True for the state form of encode, False for the vector form."""
    if vectors_given and states_given:
        raise TypeError("encode takes either vectors (input_gradient_vector, input_values_vector, ..., "
                        "result_values_vector) or states (convolution_gradient_state, convolution_source_state, "
                        "batch_normalization_state, ..., result_state), not both")
    return states_given


# The kinds of vectors a data source keeps for its optimizer, in native order (OptimizerVectorKind).
_OPTIMIZER_VECTOR_KINDS = ("momentum", "velocity", "maximum_velocity", "sum_of_squares")


cdef dict optimizer_state_of(CKeptOptimizerVectors& kept, str owner):
    """The optimizer vectors a data source keeps, {kind: [weights' (gamma's), biases' (beta's)]}
    as float32 arrays: what the last completed update left (SynchronizationError while one is
    in flight). Empty without an optimizer."""
    cdef bytes name = owner.encode()
    cdef dict state = {}
    cdef float[::1] view
    cdef size_t i, n
    for k, kind in enumerate(_OPTIMIZER_VECTOR_KINDS):
        arrays = []
        for i in range(kept.count(<OptimizerVectorKind><uint32_t>k)):
            n = kept.length(<OptimizerVectorKind><uint32_t>k, i)
            a = np.empty(n, dtype=np.float32)
            if n:
                view = a
                kept.read(<OptimizerVectorKind><uint32_t>k, i, &view[0], n, name)
            arrays.append(a)
        if arrays:
            state[kind] = arrays
    return state


cdef set_optimizer_state_of(CKeptOptimizerVectors& kept, object state, str owner):
    """Writes what optimizer_state_of read into the vectors a data source keeps; the kinds and
    counts must be those its optimizer keeps."""
    cdef bytes name = owner.encode()
    cdef const float[::1] view
    cdef size_t i, n, count
    if not isinstance(state, dict):
        raise TypeError(f"{owner}: the optimizer state must be a dict of lists of arrays, given "
                        f"{type(state).__name__}")
    kept_kinds = {kind: kept.count(<OptimizerVectorKind><uint32_t>k)
                  for k, kind in enumerate(_OPTIMIZER_VECTOR_KINDS)
                  if kept.count(<OptimizerVectorKind><uint32_t>k)}
    if set(state) != set(kept_kinds):
        raise ValueError(f"{owner}: its optimizer keeps {sorted(kept_kinds) or 'no'} vectors, the optimizer state "
                         f"given has {sorted(state, key=str) or 'none'}")
    writes = []
    for k, kind in enumerate(_OPTIMIZER_VECTOR_KINDS):
        if kind not in state:
            continue
        arrays = state[kind]
        if not isinstance(arrays, (list, tuple)) or len(arrays) != kept_kinds[kind]:
            raise ValueError(f"{owner}: its optimizer keeps {kept_kinds[kind]} {kind} vector(s), given "
                             f"{len(arrays) if isinstance(arrays, (list, tuple)) else type(arrays).__name__}")
        for i, array in enumerate(arrays):
            a = np.ascontiguousarray(array, dtype=np.float32).reshape(-1)
            n = kept.length(<OptimizerVectorKind><uint32_t>k, i)
            if a.shape[0] != n:
                raise ShapeError(f"{owner}: {kind} vector {i} of its optimizer holds {n} values, given {a.shape[0]}")
            writes.append((k, i, a))
    # Checked first, so that a bad state changes nothing.
    for k, i, a in writes:
        count = a.shape[0]
        if count:
            view = a
            kept.write(<OptimizerVectorKind><uint32_t>k, i, &view[0], count, name)


def _restore_with_optimizer_state(cls, state):
    """A data source that trains itself from its state: its arguments, then its optimizer's
    vectors (a state saved without them restores them zeroed)."""
    source = cls(*state["arguments"])
    if "optimizer_state" in state:
        source.set_optimizer_state(state["optimizer_state"])
    return source


cdef shared_ptr[CNNOptimizer] optimizer_of(object optimizer) except *:
    """The native optimizer of an NNOptimizer, or null for None."""
    cdef shared_ptr[CNNOptimizer] none
    if optimizer is None:
        return none
    if isinstance(optimizer, NNOptimizer):
        return (<NNOptimizer>optimizer).shared()
    raise TypeError(f"optimizer must be an mpsx.NNOptimizer (NNOptimizerStochasticGradientDescent, NNOptimizerAdam "
                    f"or NNOptimizerRMSProp), given {type(optimizer).__name__}")


cdef class NNOptimizer:
    """NNOptimizer(*args, **kwargs)
--

    What every optimizer has: its settings, learning rate and label. Abstract (TypeError): use
    NNOptimizerStochasticGradientDescent, NNOptimizerAdam or NNOptimizerRMSProp.

    ``encode(...)`` records one update on the command buffer; it reads and writes device memory only. The vectors
    and states it writes follow the buffer rules: ``synchronize(command_buffer)`` and completion before a host read.
    The result may be the values themselves (in place). The state form takes lists of vectors, [weights, biases] or
    [weights] alone (the biases then stay as they are); without lists (SGD without momentum) the biases are updated
    when ``result_state`` has a biases buffer.

    MPS: MPSNNOptimizer
    """
    cdef shared_ptr[CNNOptimizer] c

    def __init__(self, *args, **kwargs):
        raise TypeError("use NNOptimizerStochasticGradientDescent, NNOptimizerAdam or NNOptimizerRMSProp")

    cdef CNNOptimizer* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef shared_ptr[CNNOptimizer] shared(self) except *:
        self.native()
        return self.c

    @property
    def device(self):
        """The device the optimizer encodes for.

        MPS: MPSKernel.device
        """
        return wrap_device(self.native().device_ptr())

    @property
    def learning_rate(self):
        """The step size of later encodes.

        MPS: MPSNNOptimizer.learningRate
        """
        return self.native().descriptor().learning_rate

    @learning_rate.setter
    def learning_rate(self, float value):
        self.native().set_learning_rate(value)

    def set_learning_rate(self, float learning_rate):
        """Sets the learning rate of later encodes.

        MPS: -[MPSNNOptimizer setLearningRate:]
        """
        self.native().set_learning_rate(learning_rate)

    @property
    def gradient_rescale(self):
        """The factor every gradient is multiplied by, after clipping.

        MPS: MPSNNOptimizer.gradientRescale
        """
        return self.native().descriptor().gradient_rescale

    @property
    def apply_gradient_clipping(self):
        """Whether gradients are clipped to [``gradient_clip_min``, ``gradient_clip_max``].

        MPS: MPSNNOptimizer.applyGradientClipping
        """
        return self.native().descriptor().apply_gradient_clipping

    @apply_gradient_clipping.setter
    def apply_gradient_clipping(self, bint value):
        self.native().set_apply_gradient_clipping(value)

    @property
    def gradient_clip_max(self):
        """The upper clipping bound.

        MPS: MPSNNOptimizer.gradientClipMax
        """
        return self.native().descriptor().gradient_clip_max

    @property
    def gradient_clip_min(self):
        """The lower clipping bound.

        MPS: MPSNNOptimizer.gradientClipMin
        """
        return self.native().descriptor().gradient_clip_min

    @property
    def regularization_type(self):
        """The regularization whose gradient joins each value's.

        MPS: MPSNNOptimizer.regularizationType
        """
        return NNRegularizationType(<uint32_t>self.native().descriptor().regularization_type)

    @property
    def regularization_scale(self):
        """The factor of the regularization gradient.

        MPS: MPSNNOptimizer.regularizationScale
        """
        return self.native().descriptor().regularization_scale

    @property
    def optimizer_descriptor(self):
        """A copy of the settings, as an NNOptimizerDescriptor.

        MPS: none (mpsx)
        """
        cdef NNOptimizerDescriptor d = NNOptimizerDescriptor.__new__(NNOptimizerDescriptor)
        d.desc = self.native().descriptor()
        return d

    @property
    def label(self):
        """A string that names the optimizer (default ``""``).

        MPS: MPSKernel.label
        """
        return self.native().label.decode()

    @label.setter
    def label(self, value):
        self.native().label = str(value).encode()

    def copy(self, device=None):
        """A new optimizer with these settings (Adam's time step included) on ``device`` (default: this one's), made
        through its saved description.

        MPS: -[MPSKernel copyWithZone:device:]
        """
        self.native()
        return persistence_copy(self, device)

    cdef _encode_vectors(self, CommandBuffer command_buffer, gradient, values, const OptimizerVectors& vectors,
                         result):
        self.native().encode(command_buffer.native()[0], _vector_of(gradient, "input_gradient_vector"),
                            _vector_of(values, "input_values_vector"), vectors,
                            _vector_of(result, "result_values_vector"))

    cdef _encode_states(self, CommandBuffer command_buffer, dict states, const OptimizerVectorLists& lists,
                        result_state):
        """The state forms: a convolution's gradient and source states, or a batch
        normalization's state (or its gradient and source states)."""
        convolution = states["convolution_gradient_state"] is not None or \
            states["convolution_source_state"] is not None
        normalization = [k for k, v in states.items() if k.startswith("batch") and v is not None]
        if convolution and normalization:
            raise TypeError(f"encode updates a convolution's state or a batch normalization's, not both; given "
                            f"convolution states and {', '.join(normalization)}")
        if not normalization:
            self.native().encode(command_buffer.native()[0],
                                _state_argument(states["convolution_gradient_state"], "convolution_gradient_state"),
                                _state_argument(states["convolution_source_state"], "convolution_source_state"),
                                lists, _state_argument(result_state, "result_state"))
            return
        single = states["batch_normalization_state"]
        if single is not None and len(normalization) > 1:
            raise TypeError("give batch_normalization_state alone, or batch_normalization_gradient_state with "
                            "batch_normalization_source_state")
        gradient = single if single is not None else states["batch_normalization_gradient_state"]
        source = single if single is not None else states["batch_normalization_source_state"]
        self.native().encode_batch_normalization(
            command_buffer.native()[0], _state_argument(gradient, "batch_normalization_gradient_state"),
            _state_argument(source, "batch_normalization_source_state"), lists,
            _state_argument(result_state, "result_state"))

    def __repr__(self):
        return f"<mpsx.{type(self).__name__} learning_rate={self.learning_rate} on {self.device.name}>"


cdef class NNOptimizerStochasticGradientDescent(NNOptimizer):
    """NNOptimizerStochasticGradientDescent(device, learning_rate=None, momentum_scale=0.0,
        use_nesterov_momentum=False, optimizer_descriptor=None, *, use_nestrov_momentum=None)
--

    Stochastic gradient descent, with optional (Nesterov) momentum. ``learning_rate``, if given, replaces the
    descriptor's. With g the prepared gradient (see NNOptimizerDescriptor)::

        no momentum vector:  value -= learning_rate * g
        momentum:            m = momentum_scale * m + learning_rate * g;  value -= m
        Nesterov:            m = momentum_scale * m + g;  value -= learning_rate * (g + momentum_scale * m)

    Unlike ``torch.optim.SGD``, whose buffer is ``momentum * buf + g`` with the step ``learning_rate * buf``, MPS's
    momentum holds the learning rate: the two agree while the rate stays fixed and differ after it changes. Nesterov
    agrees with torch's ``nesterov=True``. ``use_nestrov_momentum`` is MPS's older spelling of
    ``use_nesterov_momentum``; it wins where given (ValueError against ``use_nesterov_momentum=True``). As
    ``-[MPSNNOptimizerStochasticGradientDescent initWithDevice:momentumScale:useNesterovMomentum:optimizerDescriptor:]``
    and ``-[MPSNNOptimizerStochasticGradientDescent initWithDevice:momentumScale:useNestrovMomentum:optimizerDescriptor:]``.

    MPS: MPSNNOptimizerStochasticGradientDescent
    """

    def __init__(self, Device device not None, learning_rate=None, float momentum_scale=0.0,
                 bint use_nesterov_momentum=False, optimizer_descriptor=None, *, use_nestrov_momentum=None):
        if use_nestrov_momentum is not None:
            if use_nesterov_momentum and not use_nestrov_momentum:
                raise ValueError("NNOptimizerStochasticGradientDescent: use_nesterov_momentum and its older spelling "
                                 "use_nestrov_momentum differ; give one")
            use_nesterov_momentum = bool(use_nestrov_momentum)
        self.c = <shared_ptr[CNNOptimizer]>make_native[CNNOptimizerStochasticGradientDescent](
            device.shared(), momentum_scale, use_nesterov_momentum, _optimizer_descriptor(optimizer_descriptor, learning_rate))

    cdef CNNOptimizerStochasticGradientDescent* _sgd(self) except NULL:
        return <CNNOptimizerStochasticGradientDescent*>self.native()

    @property
    def momentum_scale(self):
        """The momentum factor (0: no momentum).

        MPS: MPSNNOptimizerStochasticGradientDescent.momentumScale
        """
        return self._sgd().momentum_scale()

    @property
    def use_nesterov_momentum(self):
        """Whether the momentum is Nesterov's.

        MPS: MPSNNOptimizerStochasticGradientDescent.useNesterovMomentum
        """
        return self._sgd().use_nesterov_momentum()

    @property
    def use_nestrov_momentum(self):
        """``use_nesterov_momentum`` by MPS's older spelling ("Maps to old useNestrovMomentum property").

        MPS: MPSNNOptimizerStochasticGradientDescent.useNestrovMomentum
        """
        return self._sgd().use_nesterov_momentum()

    def encode(self, CommandBuffer command_buffer not None, input_gradient_vector=None, input_values_vector=None,
               input_momentum_vector=None, result_values_vector=None, *, convolution_gradient_state=None,
               convolution_source_state=None, batch_normalization_state=None, batch_normalization_gradient_state=None,
               batch_normalization_source_state=None, input_momentum_vectors=None, result_state=None):
        """Encodes one update on ``command_buffer``. The momentum vectors are optional (updated in place).

        The vector form updates ``result_values_vector`` (which may be ``input_values_vector``, in place) from
        ``input_values_vector`` and ``input_gradient_vector``. The state forms (keywords) update ``result_state``: a
        convolution's CNNConvolutionWeightsAndBiasesState from ``convolution_source_state`` (the weights the forward
        pass used, from ``export_weights_and_biases``) and ``convolution_gradient_state``; or a batch
        normalization's CNNNormalizationGammaAndBetaState from ``batch_normalization_state`` (or
        ``batch_normalization_gradient_state`` and ``batch_normalization_source_state``). Their vector lists hold
        [weights, biases] or [weights] alone (the biases then stay as they are). TypeError for a mix of the forms.

        MPS: -[MPSNNOptimizerStochasticGradientDescent encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputMomentumVectors:resultState:]
        """
        cdef OptimizerVectors vectors
        cdef OptimizerVectorLists lists
        if _state_form(input_gradient_vector is not None or input_values_vector is not None or
                       input_momentum_vector is not None or result_values_vector is not None,
                       convolution_gradient_state is not None or convolution_source_state is not None or
                       batch_normalization_state is not None or batch_normalization_gradient_state is not None or
                       batch_normalization_source_state is not None or
                       input_momentum_vectors is not None or result_state is not None):
            lists.momentum = _vector_list(input_momentum_vectors, "input_momentum_vectors")
            self._encode_states(command_buffer, dict(
                convolution_gradient_state=convolution_gradient_state, convolution_source_state=convolution_source_state,
                batch_normalization_state=batch_normalization_state,
                batch_normalization_gradient_state=batch_normalization_gradient_state,
                batch_normalization_source_state=batch_normalization_source_state), lists, result_state)
        else:
            vectors.momentum = _vector_of(input_momentum_vector, "input_momentum_vector")
            self._encode_vectors(command_buffer, input_gradient_vector, input_values_vector, vectors,
                                 result_values_vector)

    def __mpsx_state__(self):
        return {"arguments": (self.device, None, self.momentum_scale, self.use_nesterov_momentum,
                              self.optimizer_descriptor)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)


cdef uint64_t _time_step(object value) except? 0:
    cdef int64_t step = integer_argument(value, "time_step")
    if step < 0:
        raise ValueError(f"time_step counts updates; it must be non-negative, given {step}")
    return step


cdef class NNOptimizerAdam(NNOptimizer):
    """NNOptimizerAdam(device, learning_rate=None, beta1=0.9, beta2=0.999, epsilon=1e-8, time_step=0,
        optimizer_descriptor=None)
--

    Adam, with optional AMSGrad. ``learning_rate``, if given, replaces the descriptor's. Every encode is one update
    and advances ``time_step`` first, as MPS's::

        t = t + 1;  lr[t] = learning_rate * sqrt(1 - beta2^t) / (1 - beta1^t)
        m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
        value -= lr[t] * m / (sqrt(v) + epsilon)

    With maximum velocity vectors (AMSGrad) ``maxv = max(maxv, v)`` replaces v in the last line. The weights and
    biases of one state encode share one step. So a training step matches ``torch.optim.Adam`` (and
    ``amsgrad=True``) when each parameter set (a convolution's state, a vector) has its own optimizer; one optimizer
    shared by several layers advances once per layer. MPS adds epsilon to sqrt(v) before the bias correction (the
    paper's epsilon-hat), torch after it: torch's step is MPS's with epsilon replaced by
    ``epsilon * sqrt(1 - beta2^t)``. As
    ``-[MPSNNOptimizerAdam initWithDevice:beta1:beta2:epsilon:timeStep:optimizerDescriptor:]``.

    MPS: MPSNNOptimizerAdam
    """

    def __init__(self, Device device not None, learning_rate=None, double beta1=0.9, double beta2=0.999,
                 float epsilon=1e-8, time_step=0, optimizer_descriptor=None):
        self.c = <shared_ptr[CNNOptimizer]>make_native[CNNOptimizerAdam](
            device.shared(), beta1, beta2, epsilon, _time_step(time_step),
            _optimizer_descriptor(optimizer_descriptor, learning_rate))

    cdef CNNOptimizerAdam* _adam(self) except NULL:
        return <CNNOptimizerAdam*>self.native()

    @property
    def beta1(self):
        """The decay of the momentum (first moment).

        MPS: MPSNNOptimizerAdam.beta1
        """
        return self._adam().beta1()

    @property
    def beta2(self):
        """The decay of the velocity (second moment).

        MPS: MPSNNOptimizerAdam.beta2
        """
        return self._adam().beta2()

    @property
    def epsilon(self):
        """The term added to the square root of the velocity.

        MPS: MPSNNOptimizerAdam.epsilon
        """
        return self._adam().epsilon()

    @property
    def time_step(self):
        """The number of updates encoded so far; the next encode uses ``time_step + 1``. ValueError for a negative
        value.

        MPS: MPSNNOptimizerAdam.timeStep
        """
        return self._adam().time_step

    @time_step.setter
    def time_step(self, value):
        self._adam().time_step = _time_step(value)

    def encode(self, CommandBuffer command_buffer not None, input_gradient_vector=None, input_values_vector=None,
               input_momentum_vector=None, input_velocity_vector=None, result_values_vector=None, *,
               maximum_velocity_vector=None, convolution_gradient_state=None, convolution_source_state=None,
               batch_normalization_state=None, batch_normalization_gradient_state=None,
               batch_normalization_source_state=None, input_momentum_vectors=None, input_velocity_vectors=None,
               maximum_velocity_vectors=None, result_state=None):
        """Encodes one update on ``command_buffer``. Momentum and velocity are required, maximum velocity (AMSGrad)
        optional; all are updated in place.

        The vector form updates ``result_values_vector`` (which may be ``input_values_vector``, in place) from
        ``input_values_vector`` and ``input_gradient_vector``. The state forms (keywords) update ``result_state``: a
        convolution's CNNConvolutionWeightsAndBiasesState from ``convolution_source_state`` (the weights the forward
        pass used, from ``export_weights_and_biases``) and ``convolution_gradient_state``; or a batch
        normalization's CNNNormalizationGammaAndBetaState from ``batch_normalization_state`` (or
        ``batch_normalization_gradient_state`` and ``batch_normalization_source_state``). Their vector lists hold
        [weights, biases] or [weights] alone (the biases then stay as they are). TypeError for a mix of the forms.

        MPS: -[MPSNNOptimizerAdam encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputMomentumVectors:inputVelocityVectors:maximumVelocityVectors:resultState:]
        """
        cdef OptimizerVectors vectors
        cdef OptimizerVectorLists lists
        if _state_form(input_gradient_vector is not None or input_values_vector is not None or
                       input_momentum_vector is not None or input_velocity_vector is not None or
                       maximum_velocity_vector is not None or result_values_vector is not None,
                       convolution_gradient_state is not None or convolution_source_state is not None or
                       batch_normalization_state is not None or batch_normalization_gradient_state is not None or
                       batch_normalization_source_state is not None or
                       input_momentum_vectors is not None or input_velocity_vectors is not None or
                       maximum_velocity_vectors is not None or result_state is not None):
            lists.momentum = _vector_list(input_momentum_vectors, "input_momentum_vectors")
            lists.velocity = _vector_list(input_velocity_vectors, "input_velocity_vectors")
            lists.maximum_velocity = _vector_list(maximum_velocity_vectors, "maximum_velocity_vectors")
            self._encode_states(command_buffer, dict(
                convolution_gradient_state=convolution_gradient_state, convolution_source_state=convolution_source_state,
                batch_normalization_state=batch_normalization_state,
                batch_normalization_gradient_state=batch_normalization_gradient_state,
                batch_normalization_source_state=batch_normalization_source_state), lists, result_state)
        else:
            vectors.momentum = _vector_of(input_momentum_vector, "input_momentum_vector")
            vectors.velocity = _vector_of(input_velocity_vector, "input_velocity_vector")
            vectors.maximum_velocity = _vector_of(maximum_velocity_vector, "maximum_velocity_vector")
            self._encode_vectors(command_buffer, input_gradient_vector, input_values_vector, vectors,
                                 result_values_vector)

    def __mpsx_state__(self):
        return {"arguments": (self.device, None, self.beta1, self.beta2, self.epsilon, self.time_step,
                              self.optimizer_descriptor)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)


cdef class NNOptimizerRMSProp(NNOptimizer):
    """NNOptimizerRMSProp(device, learning_rate=None, decay=0.9, epsilon=1e-8, optimizer_descriptor=None)
--

    RMSProp. ``learning_rate``, if given, replaces the descriptor's::

        s = decay * s + (1 - decay) * g^2;  value -= learning_rate * g / (sqrt(s) + epsilon)

    which is ``torch.optim.RMSprop`` with ``alpha=decay`` (not centered, no momentum). As
    ``-[MPSNNOptimizerRMSProp initWithDevice:decay:epsilon:optimizerDescriptor:]``.

    MPS: MPSNNOptimizerRMSProp
    """

    def __init__(self, Device device not None, learning_rate=None, double decay=0.9, float epsilon=1e-8,
                 optimizer_descriptor=None):
        self.c = <shared_ptr[CNNOptimizer]>make_native[CNNOptimizerRMSProp](
            device.shared(), decay, epsilon, _optimizer_descriptor(optimizer_descriptor, learning_rate))

    @property
    def decay(self):
        """The decay of the sum of squares.

        MPS: MPSNNOptimizerRMSProp.decay
        """
        return (<CNNOptimizerRMSProp*>self.native()).decay()

    @property
    def epsilon(self):
        """The term added to the square root of the sum of squares.

        MPS: MPSNNOptimizerRMSProp.epsilon
        """
        return (<CNNOptimizerRMSProp*>self.native()).epsilon()

    def encode(self, CommandBuffer command_buffer not None, input_gradient_vector=None, input_values_vector=None,
               input_sum_of_squares_vector=None, result_values_vector=None, *, convolution_gradient_state=None,
               convolution_source_state=None, batch_normalization_state=None, batch_normalization_gradient_state=None,
               batch_normalization_source_state=None, input_sum_of_squares_vectors=None, result_state=None):
        """Encodes one update on ``command_buffer``. The sum of squares is required (updated in place).

        The vector form updates ``result_values_vector`` (which may be ``input_values_vector``, in place) from
        ``input_values_vector`` and ``input_gradient_vector``. The state forms (keywords) update ``result_state``: a
        convolution's CNNConvolutionWeightsAndBiasesState from ``convolution_source_state`` (the weights the forward
        pass used, from ``export_weights_and_biases``) and ``convolution_gradient_state``; or a batch
        normalization's CNNNormalizationGammaAndBetaState from ``batch_normalization_state`` (or
        ``batch_normalization_gradient_state`` and ``batch_normalization_source_state``). Their vector lists hold
        [weights, biases] or [weights] alone (the biases then stay as they are). TypeError for a mix of the forms.

        MPS: -[MPSNNOptimizerRMSProp encodeToCommandBuffer:convolutionGradientState:convolutionSourceState:inputSumOfSquaresVectors:resultState:]
        """
        cdef OptimizerVectors vectors
        cdef OptimizerVectorLists lists
        if _state_form(input_gradient_vector is not None or input_values_vector is not None or
                       input_sum_of_squares_vector is not None or result_values_vector is not None,
                       convolution_gradient_state is not None or convolution_source_state is not None or
                       batch_normalization_state is not None or batch_normalization_gradient_state is not None or
                       batch_normalization_source_state is not None or
                       input_sum_of_squares_vectors is not None or result_state is not None):
            lists.sum_of_squares = _vector_list(input_sum_of_squares_vectors, "input_sum_of_squares_vectors")
            self._encode_states(command_buffer, dict(
                convolution_gradient_state=convolution_gradient_state, convolution_source_state=convolution_source_state,
                batch_normalization_state=batch_normalization_state,
                batch_normalization_gradient_state=batch_normalization_gradient_state,
                batch_normalization_source_state=batch_normalization_source_state), lists, result_state)
        else:
            vectors.sum_of_squares = _vector_of(input_sum_of_squares_vector, "input_sum_of_squares_vector")
            self._encode_vectors(command_buffer, input_gradient_vector, input_values_vector, vectors,
                                 result_values_vector)

    def __mpsx_state__(self):
        return {"arguments": (self.device, None, self.decay, self.epsilon, self.optimizer_descriptor)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

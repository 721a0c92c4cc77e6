# MPSCNNConvolutionTranspose family (included by _kernels.pyx): the transpose,
# its gradient state and its gradient, on the convolution family's descriptor,
# data sources and weight states.

from mpsx.includes.kernels.convolution_transpose cimport (
    CCNNConvolutionTranspose, CCNNConvolutionTransposeGradient, CConvolutionTransposeGradientState)

__all__ += ["CNNConvolutionTranspose", "CNNConvolutionTransposeGradient", "CNNConvolutionTransposeGradientState"]


cdef object _convolution_state(object states):
    """The CNNConvolutionGradientState given as MPS gives it: a state, a StateBatch,
    sourceStates ([state] or [StateBatch]) or None."""
    while isinstance(states, (list, tuple)) and states:
        states = states[0]  # the items of a convolution's StateBatch are one state
    if isinstance(states, (list, tuple)):
        return None
    if states is not None and not isinstance(states, State):
        raise TypeError(f"expected an mpsx.CNNConvolutionGradientState, given {type(states).__name__}")
    return states


cdef shared_ptr[CState] _state_pointer(object state):
    cdef shared_ptr[CState] none
    return none if state is None else (<State>state).shared()


cdef class CNNConvolutionTransposeGradientState(CNNConvolutionGradientState):
    """The state of a convolution transpose's training forward encode, which its gradient fills with the gradients of
    the loss for the transpose's weights (OHWI, as its data source gives them) and biases, summed over the batch;
    ``synchronize(cb)`` before reading them on the host.

    MPS: MPSCNNConvolutionTransposeGradientState
    """
    cdef object _convolution_gradient_state

    @property
    def convolution_transpose(self):
        """The CNNConvolutionTranspose whose encode made this state.

        MPS: MPSCNNConvolutionTransposeGradientState.convolutionTranspose
        """
        return self._kernel

    @property
    def convolution(self):
        """The CNNConvolution whose gradient state the transpose's encode was given, or None.

        MPS: MPSCNNConvolutionGradientState.convolution
        """
        s = self._convolution_gradient_state
        return None if s is None else s.convolution


cdef class CNNConvolutionTranspose(_ConvolutionKernel):
    """CNNConvolutionTranspose(device, data_source)
--

    A convolution transpose: the source expanded with stride - 1 zeros between its pixels, then convolved at stride
    1 with the data source's OHWI weights as given (no 180-degree rotation, unlike torch's ``conv_transpose2d``).

    The window of the destination pixel at the clip origin is centred on the expanded-image position
    ``offset * stride + kernel_offset``. Without a destination the padding policy of reverse filters sizes it
    (``(source - 1) * stride + 1 + style * (extent - 1)``, style -1, 0, 1 for valid, same, full) and sets ``offset``
    and ``kernel_offset_x``/``kernel_offset_y`` (the latter in [0, stride)) to centre the windows. A
    CNNConvolutionGradientState of the convolution this transpose undoes mirrors that convolution's windows instead,
    and sizes the destination as the convolution's source. As
    ``-[MPSCNNConvolutionTranspose initWithDevice:weights:]``.

    MPS: MPSCNNConvolutionTranspose
    """

    def __init__(self, Device device not None, data_source):
        self._data_source = data_source
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNConvolutionTranspose](
            device.shared(), convolution_data_source_of(data_source)), CNNConvolutionTransposeGradientState)

    cdef CCNNConvolutionTranspose* _transpose(self) except NULL:
        return <CCNNConvolutionTranspose*>self.unary_kernel()

    cdef object _state_with(self, const shared_ptr[CState]& state, object convolution_state, object given):
        if convolution_state is None and isinstance(given, CNNConvolutionTransposeGradientState):
            convolution_state = (<CNNConvolutionTransposeGradientState>given)._convolution_gradient_state
        cdef CNNConvolutionTransposeGradientState s = self._wrap_state(state)
        s._convolution_gradient_state = convolution_state
        return s

    _mpsx_properties = ("kernel_offset_x", "kernel_offset_y")

    @property
    def kernel_offset_x(self):
        """An offset in x added to where each window is centred in the expanded source (default 0; set by the padding
        policy on encodes that make their destination).

        MPS: MPSCNNConvolutionTranspose.kernelOffsetX
        """
        return self._transpose().kernel_offset_x

    @kernel_offset_x.setter
    def kernel_offset_x(self, value):
        self._transpose().kernel_offset_x = integer_argument(value, "kernel_offset_x")

    @property
    def kernel_offset_y(self):
        """An offset in y added to where each window is centred in the expanded source, as ``kernel_offset_x``.

        MPS: MPSCNNConvolutionTranspose.kernelOffsetY
        """
        return self._transpose().kernel_offset_y

    @kernel_offset_y.setter
    def kernel_offset_y(self, value):
        self._transpose().kernel_offset_y = integer_argument(value, "kernel_offset_y")

    def encode(self, CommandBuffer command_buffer not None, Image source_image not None,
               convolution_gradient_state=None, Image destination_image=None, destination_state=False,
               destination_state_is_temporary=False):
        """Encodes the transpose; returns the destination image, and with ``destination_state=True`` also its
        CNNConvolutionTransposeGradientState (temporary for ``command_buffer`` with
        ``destination_state_is_temporary=True``).

        ``convolution_gradient_state``: the CNNConvolutionGradientState of the convolution this transpose undoes (an
        auto-encoder's), or None.

        MPS: -[MPSCNNConvolutionTranspose encodeToCommandBuffer:sourceImage:convolutionGradientState:destinationState:destinationStateIsTemporary:]
        """
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_state, destination_state_is_temporary, &want)
        coupled = _convolution_state(convolution_gradient_state)
        cdef shared_ptr[CImage] destination = _destination_image(destination_image)
        cdef Encoded r = self._transpose().encode(command_buffer.native()[0], source_image.shared(), _state_pointer(coupled),
                                                  destination, given, want)
        out = wrap_image(r.image)
        if not _returns_state(command_buffer, r.state.get(), want, destination_state_is_temporary):
            return out
        return out, self._state_with(r.state, coupled, destination_state)

    def encode_batch(self, CommandBuffer command_buffer not None, source_images, convolution_gradient_states=None,
                     destination_images=None, destination_states=False, destination_state_is_temporary=False):
        """Encodes the transpose over a batch; returns an ImageBatch, and with ``destination_states=True`` also a
        StateBatch (temporary with ``destination_state_is_temporary=True``). ``convolution_gradient_states``: the undone convolution's StateBatch or state, or None.

        MPS: -[MPSCNNConvolutionTranspose encodeBatchToCommandBuffer:sourceImages:convolutionGradientStates:destinationStates:destinationStateIsTemporary:]
        """
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_states, destination_state_is_temporary, &want)
        coupled = _convolution_state(convolution_gradient_states)
        cdef shared_ptr[CImage] destination = _destination_batch(destination_images, "destination_images")
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        cdef Encoded r = self._transpose().encode(command_buffer.native()[0],
                                                  image_of(_batch_of(command_buffer, source_images)),
                                                  _state_pointer(coupled), destination, given, want)
        encoding.complete()
        out = wrap_image_batch(r.image)
        if not _returns_state(command_buffer, r.state.get(), want, destination_state_is_temporary):
            return out
        states = destination_states[0] if isinstance(destination_states, tuple) else destination_states
        return out, StateBatch(self._state_with(r.state, coupled, states), r.image.get().number_of_images())

    def result_state(self, source_image, source_states=None, destination_image=None):
        """A new state for ``encode(..., destination_state=state)``; ``source_states`` may hold the
        CNNConvolutionGradientState of the convolution this transpose undoes.

        MPS: -[MPSCNNConvolutionTranspose resultStateForSourceImage:sourceStates:destinationImage:]
        """
        coupled = _convolution_state(source_states)
        cdef shared_ptr[CConvolutionTransposeGradientState] state = self._transpose().result_state(
            image_of(source_image).get()[0], _state_pointer(coupled))
        return self._state_with(<shared_ptr[CState]>state, coupled, None)

    def destination_image_descriptor(self, source_images, source_states=None):
        """The descriptor of the destination the padding policy, or the convolution gradient state in
        ``source_states``, implies; ``offset`` and the kernel offsets are left as they were.

        MPS: -[MPSCNNKernel destinationImageDescriptorForSourceImages:sourceStates:]
        """
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = self._transpose().destination_image_descriptor(image_of(_first_image(source_images)).get()[0],
                                                             _state_pointer(_convolution_state(source_states)))
        return d


cdef class CNNConvolutionTransposeGradient(_ConvolutionGradientKernel):
    """CNNConvolutionTransposeGradient(device, data_source)
--

    The gradient of CNNConvolutionTranspose: the gradient of the transpose's source, and of its weights and biases
    into the CNNConvolutionTransposeGradientState, as ``gradient_option`` selects. As
    ``-[MPSCNNConvolutionTransposeGradient initWithDevice:weights:]``.

    MPS: MPSCNNConvolutionTransposeGradient
    """

    def __init__(self, Device device not None, data_source):
        self._data_source = data_source
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNConvolutionTransposeGradient](
            device.shared(), convolution_data_source_of(data_source)))

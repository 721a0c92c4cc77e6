# MPSNNPad, MPSNNReshape and their gradients (included by _kernels.pyx).

from mpsx.includes.kernels.reshape cimport (
    CNNPad, CNNPadGradient, CNNReshape, CNNReshapeGradient, ImageCoordinate as CImageCoordinate)

__all__ += ["ImageCoordinate", "NNPad", "NNPadGradient", "NNReshape", "NNReshapeGradient"]


ImageCoordinate = namedtuple("ImageCoordinate", "x y channel", defaults=(0, 0, 0), module="mpsx")
ImageCoordinate.__doc__ = """A position or an extent in an image: x and y in pixels, channel in feature channels.

MPS: MPSImageCoordinate
"""
for _field, _doc in ((ImageCoordinate.x, "The position or extent in x, in pixels.\n\nMPS: MPSImageCoordinate.x"),
                     (ImageCoordinate.y, "The position or extent in y, in pixels.\n\nMPS: MPSImageCoordinate.y"),
                     (ImageCoordinate.channel,
                      "The position or extent in feature channels.\n\nMPS: MPSImageCoordinate.channel")):
    _field.__doc__ = _doc


cdef CImageCoordinate _coordinate_argument(object value, str name) except *:
    """An MPSImageCoordinate from (x, y, channel) of ints, each from 0 up (ValueError below, as MPS's NSUInteger)."""
    try:
        x, y, channel = value
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be (x, y, channel), given {value!r}") from None
    cdef CImageCoordinate c
    c.x = integer_argument(x, f"{name}.x")
    c.y = integer_argument(y, f"{name}.y")
    c.channel = integer_argument(channel, f"{name}.channel")
    for v, axis in ((c.x, "x"), (c.y, "y"), (c.channel, "channel")):
        if v < 0:
            raise ValueError(f"{name}.{axis} must be at least 0, given {v}")
    return c


cdef object _coordinate(const CImageCoordinate& c):
    return ImageCoordinate(c.x, c.y, c.channel)


cdef class NNPad(CNNUnaryKernel):
    """NNPad(device, padding_size_before=(0, 0, 0), padding_size_after=(0, 0, 0), fill_value_array=None)
--

    Copies each source image into a larger (or equal) destination, padding x, y and the feature channels as
    ``edge_mode`` says: ZERO (0), CLAMP (the edge repeated), MIRROR (mirrored about the edge element), MIRROR_WITH_EDGE
    (mirrored about the border) or CONSTANT (``fill_value``, or ``fill_value_array[j]`` for the j-th channel written).
    Without a destination image it is ``padding_size_before + source + padding_size_after`` in each of x, y and
    channels, and ``offset`` is set to ``-padding_size_before``; with one, ``offset`` and ``clip_rect`` place it and
    only the channel paddings are read. Channels are padded around the slice that ``source_feature_channel_offset``
    and ``source_feature_channel_max_count`` leave. ValueError for a negative padding. As
    ``-[MPSNNPad initWithDevice:paddingSizeBefore:paddingSizeAfter:fillValueArray:]`` (and its shorter forms).

    MPS: MPSNNPad
    """

    _mpsx_properties = ("padding_size_before", "padding_size_after", "fill_value")

    def __init__(self, Device device not None, padding_size_before=(0, 0, 0), padding_size_after=(0, 0, 0),
                 fill_value_array=None):
        cdef vector[float] fill
        if fill_value_array is not None:
            values = np.ascontiguousarray(fill_value_array, dtype=np.float32)
            if values.ndim != 1:
                raise ValueError(f"fill_value_array must be one-dimensional, given shape {values.shape}")
            for v in values:
                fill.push_back(v)
        self._set(<shared_ptr[CUnaryKernel]>make_native[CNNPad](
            device.shared(), _coordinate_argument(padding_size_before, "padding_size_before"),
            _coordinate_argument(padding_size_after, "padding_size_after"), fill), NNGradientState)

    cdef CNNPad* _pad(self) except NULL:
        return <CNNPad*>self.unary_kernel()

    def _mpsx_arguments(self):
        return (self.padding_size_before, self.padding_size_after, self.fill_value_array)

    @property
    def padding_size_before(self):
        """The padding before the source in x, y and channels (an ImageCoordinate; default (0, 0, 0)). x and y size
        the destination an encode makes; channel is read at every encode.

        MPS: MPSNNPad.paddingSizeBefore
        """
        return _coordinate(self._pad().padding_size_before)

    @padding_size_before.setter
    def padding_size_before(self, value):
        self._pad().padding_size_before = _coordinate_argument(value, "padding_size_before")

    @property
    def padding_size_after(self):
        """The padding after the source in x, y and channels (an ImageCoordinate; default (0, 0, 0)).

        MPS: MPSNNPad.paddingSizeAfter
        """
        return _coordinate(self._pad().padding_size_after)

    @padding_size_after.setter
    def padding_size_after(self, value):
        self._pad().padding_size_after = _coordinate_argument(value, "padding_size_after")

    @property
    def fill_value(self):
        """The value of the padding with edge_mode CONSTANT (default 0.0); not read where a fill_value_array was given.

        MPS: MPSNNPad.fillValue
        """
        return self._pad().fill_value

    @fill_value.setter
    def fill_value(self, value):
        self._pad().fill_value = float_argument(value, "fill_value")

    @property
    def fill_value_array(self):
        """The per-channel fill values the kernel was made with (float32, one per channel written), or None.

        MPS: none (the fillValueArray: of -initWithDevice:paddingSizeBefore:paddingSizeAfter:fillValueArray:)
        """
        cdef shared_ptr[const vector[float]] values = self._pad().fill_value_array()
        if not values:
            return None
        return np.array([values.get()[0][i] for i in range(values.get().size())], dtype=np.float32)


cdef class NNPadGradient(CNNGradientKernel):
    """NNPadGradient(device)
--

    The gradient of NNPad: each source element receives the sum of the incoming gradient over the destination
    elements that read it (the crop of the incoming gradient for ZERO and CONSTANT; padded copies folded back for
    CLAMP and the mirror modes). Channels outside the forward slice get 0. The edge mode and geometry come from the
    gradient state. As ``-[MPSNNPadGradient initWithDevice:]``.

    MPS: MPSNNPadGradient
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CNNPadGradient](device.shared()))


cdef int64_t _reshaped_size(object value, str name) except? -1:
    # None: 0, sized as the kernel says; else an int of at least 1.
    if value is None:
        return 0
    cdef int64_t size = integer_argument(value, name)
    if size < 1:
        raise ValueError(f"{name} must be at least 1, given {size}")
    return size


cdef tuple _reshaped_sizes(reshaped_width, reshaped_height, reshaped_feature_channels):
    given = [s is not None for s in (reshaped_width, reshaped_height, reshaped_feature_channels)]
    if any(given) and not all(given):
        raise TypeError("give reshaped_width, reshaped_height and reshaped_feature_channels together, or none")
    return (_reshaped_size(reshaped_width, "reshaped_width"), _reshaped_size(reshaped_height, "reshaped_height"),
            _reshaped_size(reshaped_feature_channels, "reshaped_feature_channels"))


cdef class NNReshape(CNNUnaryKernel):
    """NNReshape(device)
--

    Copies the elements of each source image (the feature channel slice that ``source_feature_channel_offset`` and
    ``source_feature_channel_max_count`` leave) into a destination of another width, height and feature channel
    count holding as many, in height x width x channels order (docs/semantics.md, "Reshape"). The sizes are the
    encode's ``reshaped_width``, ``reshaped_height`` and ``reshaped_feature_channels``, else the destination image's,
    else the source's. ``offset.x``/``.y`` and ``clip_rect``'s x, y, width and height must keep their defaults. As
    ``-[MPSNNReshape initWithDevice:]``.

    MPS: MPSNNReshape
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CNNReshape](device.shared(), 0, 0, 0), NNGradientState)

    cdef CNNReshape* _reshape(self) except NULL:
        return <CNNReshape*>self.unary_kernel()

    def encode(self, CommandBuffer command_buffer not None, Image source_image not None,
               Image destination_image=None, destination_state=False, destination_state_is_temporary=False,
               reshaped_width=None, reshaped_height=None, reshaped_feature_channels=None):
        """Encodes the reshape of ``source_image`` to ``reshaped_width`` x ``reshaped_height`` x
        ``reshaped_feature_channels`` (all three or none); returns the destination image, and with
        ``destination_state=True`` the state NNReshapeGradient needs, as CNNUnaryKernel.encode. ValueError unless the
        sizes hold the source's elements.

        MPS: -[MPSNNReshape encodeToCommandBuffer:sourceImage:destinationState:destinationStateIsTemporary:reshapedWidth:reshapedHeight:reshapedFeatureChannels:]
        """
        w, h, c = _reshaped_sizes(reshaped_width, reshaped_height, reshaped_feature_channels)
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_state, destination_state_is_temporary, &want)
        cdef shared_ptr[CImage] destination = _destination_image(destination_image)
        cdef Encoded r = self._reshape().encode(command_buffer.native()[0], source_image.shared(), destination, given,
                                                want, w, h, c)
        return _encoded(self, command_buffer, r, want, destination_state_is_temporary)

    def encode_batch(self, CommandBuffer command_buffer not None, source_images, destination_images=None,
                     destination_states=False, destination_state_is_temporary=False, reshaped_width=None,
                     reshaped_height=None, reshaped_feature_channels=None):
        """Encodes the reshape over a batch (an ImageBatch or a list of Images); returns an ImageBatch, and with
        ``destination_states=True`` also a StateBatch, as CNNUnaryKernel.encode_batch.

        MPS: -[MPSNNReshape encodeBatchToCommandBuffer:sourceImages:destinationStates:destinationStateIsTemporary:reshapedWidth:reshapedHeight:reshapedFeatureChannels:]
        """
        w, h, c = _reshaped_sizes(reshaped_width, reshaped_height, reshaped_feature_channels)
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_states, destination_state_is_temporary, &want)
        cdef shared_ptr[CImage] destination = _destination_batch(destination_images, "destination_images")
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        cdef Encoded r = self._reshape().encode(
            command_buffer.native()[0], image_of(_batch_of(command_buffer, source_images)), destination, given, want,
            w, h, c)
        encoding.complete()
        return _encoded_batch(self, command_buffer, r, want, destination_state_is_temporary)

    def destination_image_descriptor(self, source_images, source_states=None, reshaped_width=None,
                                     reshaped_height=None, reshaped_feature_channels=None):
        """The descriptor of the destination an encode with these reshaped sizes (none: the source's) would make.

        MPS: -[MPSCNNKernel destinationImageDescriptorForSourceImages:sourceStates:]
        """
        w, h, c = _reshaped_sizes(reshaped_width, reshaped_height, reshaped_feature_channels)
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = self._reshape().destination_image_descriptor(image_of(_first_image(source_images)).get()[0], w, h, c)
        return d


cdef class NNReshapeGradient(CNNGradientKernel):
    """NNReshapeGradient(device)
--

    The gradient of NNReshape: the incoming gradient reshaped back to the forward source's sizes (channels outside
    the forward slice get 0). As ``-[MPSNNReshapeGradient initWithDevice:]``.

    MPS: MPSNNReshapeGradient
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CNNReshapeGradient](device.shared()))

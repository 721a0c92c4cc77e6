# MPSCNNLoss, MPSCNNLossDescriptor, MPSCNNLossDataDescriptor and MPSCNNLossLabels (included by _kernels.pyx).

from mpsx.includes.kernels.loss cimport (
    CCNNLoss, CCNNLossLabels, CCNNLossLabelsBatch, CForwardLossEncoded, CLossGradientState,
    CNNForwardLoss as CNNForwardLossKernel, CNNLossGradient as CNNLossGradientKernel, CSeparatedLoss,
    LossDescriptor as CLossDescriptor, LossImageSize, LossType as CLossType, ReductionType as CReductionType)

__all__ += ["CNNLossType", "CNNReductionType", "CNNLossDescriptor", "DataLayout", "CNNLossDataDescriptor",
            "CNNLossLabels", "CNNLoss", "NNForwardLoss", "NNLossGradient", "NNLossGradientState"]


class CNNLossType(enum.IntEnum):
    """The loss functions of CNNLoss, NNForwardLoss and NNLossGradient (CNNLoss's docstring says where mpsx settles
    what MPSCNNLoss.h leaves loose).

    MPS: MPSCNNLossType
    """
    MEAN_ABSOLUTE_ERROR = 0
    MEAN_SQUARED_ERROR = 1
    SOFTMAX_CROSS_ENTROPY = 2
    SIGMOID_CROSS_ENTROPY = 3
    CATEGORICAL_CROSS_ENTROPY = 4
    HINGE = 5
    HUBER = 6
    COSINE_DISTANCE = 7
    LOG = 8
    KULLBACK_LEIBLER_DIVERGENCE = 9


class CNNReductionType(enum.IntEnum):
    """How the losses of an image (or, with ``reduce_across_batch``, of the batch) are reduced: NONE (one per value),
    SUM, MEAN or SUM_BY_NON_ZERO_WEIGHTS.

    MPS: MPSCNNReductionType
    """
    NONE = 0
    SUM = 1
    MEAN = 2
    SUM_BY_NON_ZERO_WEIGHTS = 3


cdef class CNNLossDescriptor:
    """CNNLossDescriptor(loss_type, reduction_type, *, weight=1.0, label_smoothing=0.0, number_of_classes=1,
        epsilon=1e-7, delta=1.0, reduce_across_batch=False)
--

    The loss function and reduction of a loss kernel, with MPS's defaults for the other properties, settable as
    keywords or afterwards. As ``+[MPSCNNLossDescriptor cnnLossDescriptorWithType:reductionType:]``.

    MPS: MPSCNNLossDescriptor
    """
    cdef CLossDescriptor desc

    def __init__(self, loss_type, reduction_type, *, weight=1.0, label_smoothing=0.0, number_of_classes=1,
                 epsilon=1e-7, delta=1.0, reduce_across_batch=False):
        self.loss_type = loss_type
        self.reduction_type = reduction_type
        self.weight = weight
        self.label_smoothing = label_smoothing
        self.number_of_classes = number_of_classes
        self.epsilon = epsilon
        self.delta = delta
        self.reduce_across_batch = reduce_across_batch


    @classmethod
    def cnn_loss_descriptor_with_type(cls, loss_type, reduction_type):
        """A new descriptor of ``loss_type`` (a CNNLossType) and ``reduction_type`` (a CNNReductionType), MPS's
        defaults for the rest: the same as ``CNNLossDescriptor(loss_type, reduction_type)``.

        MPS: +[MPSCNNLossDescriptor cnnLossDescriptorWithType:reductionType:]
        """
        return cls(loss_type, reduction_type)

    @property
    def loss_type(self):
        """The loss function, a CNNLossType.

        MPS: MPSCNNLossDescriptor.lossType
        """
        return CNNLossType(<uint32_t>self.desc.loss_type)

    @loss_type.setter
    def loss_type(self, value):
        self.desc.loss_type = <CLossType><uint32_t>CNNLossType(value)

    @property
    def reduction_type(self):
        """How the losses are reduced, a CNNReductionType.

        MPS: MPSCNNLossDescriptor.reductionType
        """
        return CNNReductionType(<int>self.desc.reduction_type)

    @reduction_type.setter
    def reduction_type(self, value):
        self.desc.reduction_type = <CReductionType><int>CNNReductionType(value)

    @property
    def reduce_across_batch(self):
        """Whether the reduction runs over the whole batch (the first loss image holds it, the others 0) instead of per
        image (default False).

        MPS: MPSCNNLossDescriptor.reduceAcrossBatch
        """
        return self.desc.reduce_across_batch

    @reduce_across_batch.setter
    def reduce_across_batch(self, bint value):
        self.desc.reduce_across_batch = value

    @property
    def weight(self):
        """The factor of every loss value (default 1).

        MPS: MPSCNNLossDescriptor.weight
        """
        return self.desc.weight

    @weight.setter
    def weight(self, float value):
        self.desc.weight = parameter("MPSCNNLossDescriptor", value, "weight")

    @property
    def label_smoothing(self):
        """The label smoothing of the cross entropies (default 0).

        MPS: MPSCNNLossDescriptor.labelSmoothing
        """
        return self.desc.label_smoothing

    @label_smoothing.setter
    def label_smoothing(self, float value):
        self.desc.label_smoothing = parameter("MPSCNNLossDescriptor", value, "label_smoothing")

    @property
    def number_of_classes(self):
        """The number of classes label smoothing spreads over (default 1).

        MPS: MPSCNNLossDescriptor.numberOfClasses
        """
        return self.desc.number_of_classes

    @number_of_classes.setter
    def number_of_classes(self, value):
        n = integer_argument(value, "number_of_classes")
        if n < 0:  # the native field is unsigned, as NSUInteger
            raise ValueError(f"number_of_classes must be at least 1; given {n}")
        cdef CLossDescriptor d = self.desc
        d.number_of_classes = n
        d.validate()
        self.desc = d

    @property
    def epsilon(self):
        """The term that keeps LOG's and the cross entropies' logarithms finite (default 1e-7).

        MPS: MPSCNNLossDescriptor.epsilon
        """
        return self.desc.epsilon

    @epsilon.setter
    def epsilon(self, float value):
        self.desc.epsilon = parameter("MPSCNNLossDescriptor", value, "epsilon")

    @property
    def delta(self):
        """HUBER's threshold between its quadratic and linear parts (default 1).

        MPS: MPSCNNLossDescriptor.delta
        """
        return self.desc.delta

    @delta.setter
    def delta(self, float value):
        self.desc.delta = parameter("MPSCNNLossDescriptor", value, "delta")

    def __mpsx_state__(self):
        return {"arguments": (int(self.loss_type), int(self.reduction_type), self.weight, self.label_smoothing,
                              self.number_of_classes, self.epsilon, self.delta, self.reduce_across_batch)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return _loss_descriptor(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __eq__(self, other):
        return isinstance(other, CNNLossDescriptor) and self.desc == (<CNNLossDescriptor>other).desc

    def __repr__(self):
        return (f"mpsx.CNNLossDescriptor({self.loss_type!r}, {self.reduction_type!r}, weight={self.weight}, "
                f"label_smoothing={self.label_smoothing}, number_of_classes={self.number_of_classes}, "
                f"epsilon={self.epsilon}, delta={self.delta}, reduce_across_batch={self.reduce_across_batch})")


def _loss_descriptor(loss_type, reduction_type, weight, label_smoothing, number_of_classes, epsilon, delta,
                     reduce_across_batch):
    return CNNLossDescriptor(loss_type, reduction_type, weight=weight, label_smoothing=label_smoothing,
                             number_of_classes=number_of_classes, epsilon=epsilon, delta=delta,
                             reduce_across_batch=reduce_across_batch)


class DataLayout(enum.IntEnum):
    """The order of the values of an image in memory: HEIGHT_X_WIDTH_X_FEATURE_CHANNELS (channels innermost) or
    FEATURE_CHANNELS_X_HEIGHT_X_WIDTH (one plane per feature channel).

    MPS: MPSDataLayout
    """
    HEIGHT_X_WIDTH_X_FEATURE_CHANNELS = 0
    FEATURE_CHANNELS_X_HEIGHT_X_WIDTH = 1


cdef object _size3(object size, str name):
    try:
        values = tuple(size)
    except TypeError:
        raise TypeError(f"{name}: expected (width, height, feature_channels), given {type(size).__name__}") from None
    if len(values) != 3:
        raise ValueError(f"{name}: expected 3 values (width, height, feature_channels), given {len(values)}")
    out = tuple(integer_argument(v, name) for v in values)
    if any(v < 1 or v > 1 << 30 for v in out):
        raise ValueError(f"{name}: expected sizes of 1 to 2**30, given {out} (width, height, feature_channels)")
    return out


cdef class CNNLossDataDescriptor:
    """CNNLossDataDescriptor(data, layout, size)
--

    The labels or weights of one image for CNNLossLabels: ``data`` float32 values (a float32 array or any bytes-like
    object, copied), their ``layout`` (a DataLayout) and ``size`` (width, height, feature_channels). bytes_per_row
    and bytes_per_image start dense and may be set for padded data: with HEIGHT_X_WIDTH_X_FEATURE_CHANNELS value
    (x, y, c) is at byte ``y * bytes_per_row + (x * C + c) * 4`` (bytes_per_image is not read: one image); with
    FEATURE_CHANNELS_X_HEIGHT_X_WIDTH at ``c * bytes_per_image + y * bytes_per_row + x * 4``. As
    ``+[MPSCNNLossDataDescriptor cnnLossDataDescriptorWithData:layout:size:]``.

    MPS: MPSCNNLossDataDescriptor
    """
    cdef bytes _data
    cdef object _layout
    cdef object _size
    cdef Py_ssize_t _bytes_per_row
    cdef Py_ssize_t _bytes_per_image

    def __init__(self, data, layout, size):
        if isinstance(data, np.ndarray):
            if data.dtype != np.float32:
                raise TypeError(f"CNNLossDataDescriptor: expected float32 data, given an array of {data.dtype}")
            data = np.ascontiguousarray(data).tobytes()
        else:
            try:
                data = memoryview(data).cast("B").tobytes()
            except TypeError:
                raise TypeError(f"CNNLossDataDescriptor: expected float32 data (an array or a bytes-like object), "
                                f"given {type(data).__name__}") from None
        self._layout = DataLayout(layout)
        self._size = _size3(size, "CNNLossDataDescriptor size")
        width, height, channels = self._size
        self._data = data
        if self._layout == DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS:
            self._bytes_per_row = width * channels * 4
        else:
            self._bytes_per_row = width * 4
        self._bytes_per_image = self._bytes_per_row * height

    @classmethod
    def cnn_loss_data_descriptor_with_data(cls, data, layout, size):
        """A new descriptor of ``data``, its ``layout`` and ``size`` (width, height, feature_channels): the same as
        ``CNNLossDataDescriptor(data, layout, size)``.

        MPS: +[MPSCNNLossDataDescriptor cnnLossDataDescriptorWithData:layout:size:]
        """
        return cls(data, layout, size)

    @property
    def data(self):
        """A copy of the values given, as bytes.

        MPS: none (the data: of +cnnLossDataDescriptorWithData:layout:size:)
        """
        return self._data

    @property
    def layout(self):
        """The order of the values in ``data``, a DataLayout.

        MPS: MPSCNNLossDataDescriptor.layout
        """
        return self._layout

    @property
    def size(self):
        """(width, height, feature_channels) of the data.

        MPS: MPSCNNLossDataDescriptor.size
        """
        return self._size

    @property
    def bytes_per_row(self):
        """The stride from one row to the next, in bytes (dense by default).

        MPS: MPSCNNLossDataDescriptor.bytesPerRow
        """
        return self._bytes_per_row

    @bytes_per_row.setter
    def bytes_per_row(self, value):
        self._bytes_per_row = _stride(value, "bytes_per_row")

    @property
    def bytes_per_image(self):
        """The stride from one feature channel plane to the next with FEATURE_CHANNELS_X_HEIGHT_X_WIDTH, in bytes
        (dense by default); not read with HEIGHT_X_WIDTH_X_FEATURE_CHANNELS, whose one image is one slice.

        MPS: MPSCNNLossDataDescriptor.bytesPerImage
        """
        return self._bytes_per_image

    @bytes_per_image.setter
    def bytes_per_image(self, value):
        self._bytes_per_image = _stride(value, "bytes_per_image")

    def to_numpy(self):
        """The values as a (1, C, H, W) float32 array, as CNNLossLabels reads them; ValueError where the strides
        overlap or ``data`` is too short for them.

        MPS: none (mpsx)
        """
        if self._size is None:
            raise TypeError("CNNLossDataDescriptor was made without __init__")
        width, height, channels = self._size
        row, plane = self._bytes_per_row, self._bytes_per_image
        if self._layout == DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS:
            minimum_row = width * channels * 4
            strides = (4, row, channels * 4)
            need = (height - 1) * row + minimum_row
            if row < minimum_row:
                raise ValueError(f"CNNLossDataDescriptor: bytes_per_row must be at least width * feature_channels * 4"
                                 f" = {minimum_row} (HEIGHT_X_WIDTH_X_FEATURE_CHANNELS), given {row}")
        else:
            strides = (plane, row, 4)
            need = (channels - 1) * plane + (height - 1) * row + width * 4
            if row < width * 4:
                raise ValueError(f"CNNLossDataDescriptor: bytes_per_row must be at least width * 4 = {width * 4} "
                                 f"(FEATURE_CHANNELS_X_HEIGHT_X_WIDTH), given {row}")
            if plane < height * row:
                raise ValueError(f"CNNLossDataDescriptor: bytes_per_image must be at least height * bytes_per_row = "
                                 f"{height * row} (FEATURE_CHANNELS_X_HEIGHT_X_WIDTH: one plane per feature "
                                 f"channel), given {plane}")
        if len(self._data) < need:
            raise ValueError(f"CNNLossDataDescriptor: data of {len(self._data)} bytes is too short for a "
                             f"{width}x{height}x{channels} (width x height x feature channels) "
                             f"{self._layout.name} image with bytes_per_row {row} and bytes_per_image {plane}: "
                             f"expected at least {need} bytes")
        values = np.ndarray((channels, height, width), dtype="<f4", buffer=self._data, strides=strides)
        return np.ascontiguousarray(values, dtype=np.float32)[None]

    def __copy__(self):
        cdef CNNLossDataDescriptor out = CNNLossDataDescriptor.__new__(CNNLossDataDescriptor)
        out._data, out._layout, out._size = self._data, self._layout, self._size
        out._bytes_per_row, out._bytes_per_image = self._bytes_per_row, self._bytes_per_image
        return out

    def __deepcopy__(self, memo):
        return self.__copy__()

    def __repr__(self):
        if self._size is None:
            return uninitialized_repr(self)
        return (f"mpsx.CNNLossDataDescriptor(<{len(self._data)} bytes>, {self._layout!r}, {self._size}, "
                f"bytes_per_row={self._bytes_per_row}, bytes_per_image={self._bytes_per_image})")


cdef Py_ssize_t _stride(object value, str name) except -1:
    v = integer_argument(value, name)
    if v < 1:
        raise ValueError(f"CNNLossDataDescriptor: {name} must be positive, given {v}")
    return v


cdef shared_ptr[CImage] _loss_data(Device device, object data) except *:
    """An image given as is (retained, as MPS's labelsImage:), a copy of a CNNLossDataDescriptor's values (as MPS's
    labelsDescriptor:), or a copy of an array as float32."""
    cdef shared_ptr[CImage] none
    if data is None:
        return none
    if isinstance(data, (Image, ImageBatch)):
        return image_of(data)
    if isinstance(data, CNNLossDataDescriptor):
        data = (<CNNLossDataDescriptor>data).to_numpy()
    return image_of(Image.from_numpy(device, np.asarray(data, dtype=np.float32)))


cdef object _one_of(object value, str name, object alias, str alias_name):
    if alias is None:
        return value
    if value is not None:
        raise TypeError(f"CNNLossLabels: give {name} or {alias_name}, not both")
    return alias


cdef class CNNLossLabels(State):
    """CNNLossLabels(device, labels=None, weights=None, *, loss_image_size=None, labels_descriptor=None,
        weights_descriptor=None, labels_image=None, weights_image=None)
--

    The labels of a CNNLoss encode, and the loss it writes: for one image (as MPS makes them; a list of them is an
    MPSCNNLossLabelsBatch) or, as mpsx allows, for the consecutive images of a batch.

    ``labels``: a CNNLossDataDescriptor (its values are copied, as
    ``-[MPSCNNLossLabels initWithDevice:labelsDescriptor:]``), an mpsx.Image / ImageBatch (retained, as
    ``initWithDevice:lossImageSize:labelsImage:weightsImage:``) or an (N, C, H, W) or (C, H, W) array (copied as
    float32), of the source's width and height and at least its feature channels: a loss over C channels reads the
    first C of the labels (labels padded to a multiple of 4, as MPS's samples make them, work). ``weights``:
    per-value weights given the same ways (and read the same way), or None (the descriptor's weight alone).
    ``labels_descriptor``/``labels_image`` and ``weights_descriptor``/``weights_image`` are MPS's names for them.
    ``loss_image_size`` (width, height, feature_channels): (1, 1, 1) for a reduced loss, the source's size for
    reduction NONE (a loss encode checks it); None lets the loss size it. After the encode,
    ``synchronize(command_buffer)`` and completion, ``loss_image()`` holds this object's loss.

    MPS: MPSCNNLossLabels
    """
    cdef shared_ptr[CCNNLossLabels] labels

    def __init__(self, Device device not None, labels=None, weights=None, *, loss_image_size=None,
                 labels_descriptor=None, weights_descriptor=None, labels_image=None, weights_image=None):
        labels = _one_of(_one_of(labels, "labels", labels_descriptor, "labels_descriptor"), "labels", labels_image,
                         "labels_image")
        weights = _one_of(_one_of(weights, "weights", weights_descriptor, "weights_descriptor"), "weights",
                          weights_image, "weights_image")
        if labels is None:
            raise TypeError("CNNLossLabels: expected labels (a CNNLossDataDescriptor, an Image or an array), given "
                            "None")
        cdef LossImageSize size
        if loss_image_size is not None:
            size.width, size.height, size.feature_channels = _size3(loss_image_size, "loss_image_size")
        self.labels = make_native[CCNNLossLabels](device.shared(), _loss_data(device, labels),
                                                  _loss_data(device, weights), size)
        self.c = <shared_ptr[CState]>self.labels

    cdef CCNNLossLabels* loss_labels(self) except NULL:
        self.native()
        return self.labels.get()

    cdef shared_ptr[CCNNLossLabels] shared_labels(self) except *:
        self.native()
        return self.labels

    @property
    def loss_image_size(self):
        """The loss image size given when made, (width, height, feature_channels), or None.

        MPS: none (the lossImageSize: of -initWithDevice:lossImageSize:...)
        """
        cdef const LossImageSize* size = &self.loss_labels().loss_image_size()
        return (size.width, size.height, size.feature_channels) if size.given() else None

    def loss_image(self):
        """The loss image of this object's images: one value per image (1x1x1) or, for reduction NONE, one per
        value of the source. Read it after ``synchronize(command_buffer)`` and completion.

        MPS: -[MPSCNNLossLabels lossImage]
        """
        return wrap_image(self.loss_labels().loss_image())

    def labels_image(self):
        """The labels, as an Image.

        MPS: -[MPSCNNLossLabels labelsImage]
        """
        return wrap_image(self.loss_labels().labels_image())

    def weights_image(self):
        """The per-value weights, as an Image, or None without.

        MPS: -[MPSCNNLossLabels weightsImage]
        """
        if self.loss_labels().weights_image().get() == NULL:
            return None
        return wrap_image(self.loss_labels().weights_image())


cdef _labels_batch(object labels, vector[shared_ptr[CCNNLossLabels]]& out, str name):
    """One CNNLossLabels holding the batch, or a list or tuple of them (an MPSCNNLossLabelsBatch, one per image)."""
    out.clear()
    if isinstance(labels, CNNLossLabels):
        out.push_back((<CNNLossLabels>labels).shared_labels())
        return
    if isinstance(labels, (list, tuple)):
        for i, item in enumerate(labels):
            if not isinstance(item, CNNLossLabels):
                raise TypeError(f"{name}: expected a list of mpsx.CNNLossLabels, one per image "
                                f"(MPSCNNLossLabelsBatch); item {i} is {type(item).__name__}")
            out.push_back((<CNNLossLabels>item).shared_labels())
        return
    raise TypeError(f"{name}: expected one mpsx.CNNLossLabels holding the labels of every source image, or a list "
                    f"of one per image (MPSCNNLossLabelsBatch), given {type(labels).__name__}")


cdef State _labels_state(Device device, object labels):
    """A graph's source state for a loss node: a CNNLossLabels, or a native MPSCNNLossLabelsBatch of a list."""
    cdef vector[shared_ptr[CCNNLossLabels]] items
    if isinstance(labels, State):
        return labels
    _labels_batch(labels, items, "source_states")
    cdef State out = State.__new__(State)
    out.c = <shared_ptr[CState]>make_native[CCNNLossLabelsBatch](device.shared(), items)
    return out


cdef class CNNLoss(CNNKernel):
    """CNNLoss(device, loss_descriptor)
--

    A loss: ``encode`` writes the loss into ``labels.loss_image()`` and returns its gradient with respect to the
    source, the first gradient of the backward pass. As ``-[MPSCNNLoss initWithDevice:lossDescriptor:]``.

    Losses are MPSCNNLoss.h's, each value weighted by ``weight`` times its per-value weight (values of weight 0 add
    nothing). Where the header is loose:

    - HUBER: ``0.5 (y - t)^2`` within delta (the header's ``0.5 y^2`` is a typo).
    - HINGE: labels 0 and 1 stand for -1 and +1, ``max(1 - (2t - 1) y, 0)``, as the header's gradient and its
      expected labels say.
    - SOFTMAX_CROSS_ENTROPY (softmax over the feature channels of each pixel) and COSINE_DISTANCE (``1 - sum_c y t``
      per pixel, each value holding ``w (1/C - y t)``) have one loss per pixel; the other types one per value.
    - Reductions per image, or over the batch with ``reduce_across_batch`` (the first loss image holds it, the
      others 0): SUM; MEAN divides by W*H*C (W*H for the per-pixel types) times N across the batch;
      SUM_BY_NON_ZERO_WEIGHTS divides by the number of losses of non-zero weight (a pixel counts if any of its
      values has one), 0 if none.
    - The gradient is the exact derivative of the loss reported (the sum of the loss image): the reduction's divisor
      scales it; for softmax cross entropy it is ``SoftMax(y) * sum_c w t - w t`` (the header's ``y - t`` for equal
      weights and labels summing to 1); KULLBACK_LEIBLER_DIVERGENCE's is ``-w t``; MEAN_ABSOLUTE_ERROR's
      ``sign(y - t)``, 0 where ``y == t``.

    MPS: MPSCNNLoss
    """
    cdef CCNNLoss* loss
    cdef vector[shared_ptr[CCNNLossLabels]] _items  # encode_batch's, kept to reuse its memory

    def __init__(self, Device device not None, CNNLossDescriptor loss_descriptor not None):
        cdef shared_ptr[CCNNLoss] kernel = make_native[CCNNLoss](device.shared(), loss_descriptor.desc)
        self.kernel = <shared_ptr[CKernel]>kernel
        self.loss = kernel.get()

    cdef CCNNLoss* loss_kernel(self) except NULL:
        self.native()
        return self.loss

    def encode(self, CommandBuffer command_buffer not None, Image source_image not None, labels,
               Image destination_image=None):
        """Encodes the loss of ``source_image`` against ``labels`` (a CNNLossLabels holding as many images), writing
        the loss into its loss image; returns the gradient image (``destination_image`` or a new one the size of the
        source).

        MPS: -[MPSCNNLoss encodeToCommandBuffer:sourceImage:labels:destinationImage:]
        """
        if not isinstance(labels, CNNLossLabels):
            raise TypeError(f"labels: expected one mpsx.CNNLossLabels (MPSCNNLossLabels), given "
                            f"{type(labels).__name__}" + ("; a list of per-image labels goes to encode_batch"
                                                          if isinstance(labels, (list, tuple)) else ""))
        cdef shared_ptr[CCNNLossLabels] one = (<CNNLossLabels>labels).shared_labels()
        cdef shared_ptr[CImage] destination = _destination_image(destination_image)
        return wrap_image(self.loss_kernel().encode(command_buffer.native()[0], source_image.shared(), &one, 1,
                                                    destination))

    def encode_batch(self, CommandBuffer command_buffer not None, source_images, labels, destination_images=None):
        """The same over a batch (an ImageBatch or a list of Images) with ``labels`` a list of one CNNLossLabels per
        image (an MPSCNNLossLabelsBatch; each object's loss image gets its image's loss) or one CNNLossLabels holding
        the whole batch; returns the gradient ImageBatch.

        MPS: -[MPSCNNLoss encodeBatchToCommandBuffer:sourceImages:labels:destinationImages:]
        """
        cdef CCNNLoss* kernel = self.loss_kernel()
        cdef shared_ptr[CImage] destination = _destination_batch(destination_images, "destination_images")
        cdef shared_ptr[CImage] gradient
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        try:
            _labels_batch(labels, self._items, "labels")
            gradient = kernel.encode(command_buffer.native()[0], image_of(_batch_of(command_buffer, source_images)),
                                     self._items.data(), self._items.size(), destination)
            encoding.complete()
        finally:
            self._items.clear()
        return wrap_image_batch(gradient)

    def destination_image_descriptor(self, source_images, source_states=None):
        """The descriptor of the gradient image (the source's size); the kernel is left as it was.

        MPS: -[MPSCNNKernel destinationImageDescriptorForSourceImages:sourceStates:]
        """
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = self.loss_kernel().destination_image_descriptor(image_of(_first_image(source_images)).get()[0])
        return d

    @property
    def loss_descriptor(self):
        """A copy of the kernel's loss descriptor.

        MPS: none (mpsx)
        """
        cdef CNNLossDescriptor d = CNNLossDescriptor.__new__(CNNLossDescriptor)
        d.desc = self.loss_kernel().loss_descriptor()
        return d

    @property
    def loss_type(self):
        """The loss function, a CNNLossType.

        MPS: MPSCNNLoss.lossType
        """
        return CNNLossType(<uint32_t>self.loss_kernel().loss_descriptor().loss_type)

    @property
    def reduction_type(self):
        """How the losses are reduced, a CNNReductionType.

        MPS: MPSCNNLoss.reductionType
        """
        return CNNReductionType(<int>self.loss_kernel().loss_descriptor().reduction_type)

    @property
    def reduce_across_batch(self):
        """Whether the reduction runs over the whole batch (the first loss image holds it, the others 0) instead of per
        image.

        MPS: MPSCNNLoss.reduceAcrossBatch
        """
        return self.loss_kernel().loss_descriptor().reduce_across_batch

    @property
    def weight(self):
        """The factor of every loss value.

        MPS: MPSCNNLoss.weight
        """
        return self.loss_kernel().loss_descriptor().weight

    @property
    def label_smoothing(self):
        """The label smoothing of the cross entropies.

        MPS: MPSCNNLoss.labelSmoothing
        """
        return self.loss_kernel().loss_descriptor().label_smoothing

    @property
    def number_of_classes(self):
        """The number of classes label smoothing spreads over.

        MPS: MPSCNNLoss.numberOfClasses
        """
        return self.loss_kernel().loss_descriptor().number_of_classes

    @property
    def epsilon(self):
        """The term that keeps LOG's and the cross entropies' logarithms finite.

        MPS: MPSCNNLoss.epsilon
        """
        return self.loss_kernel().loss_descriptor().epsilon

    @property
    def delta(self):
        """HUBER's threshold between its quadratic and linear parts.

        MPS: MPSCNNLoss.delta
        """
        return self.loss_kernel().loss_descriptor().delta

    def _mpsx_arguments(self):
        return (self.loss_descriptor,)


# ---------------------------------------------------------------- separated losses


cdef class NNLossGradientState(NNGradientState):
    """The result state of NNForwardLoss (an MPSNNGradientState in MPS): the weight, label smoothing, epsilon and delta
    of the forward encode, which NNLossGradient uses in place of its own when given it.

    MPS: MPSNNGradientState
    """

    cdef CLossGradientState* loss_state(self) except NULL:
        return <CLossGradientState*>self.native()

    @property
    def weight(self):
        """The forward encode's weight.

        MPS: none (mpsx)
        """
        return self.loss_state().weight

    @property
    def label_smoothing(self):
        """The forward encode's label smoothing.

        MPS: none (mpsx)
        """
        return self.loss_state().label_smoothing

    @property
    def epsilon(self):
        """The forward encode's epsilon.

        MPS: none (mpsx)
        """
        return self.loss_state().epsilon

    @property
    def delta(self):
        """The forward encode's delta.

        MPS: none (mpsx)
        """
        return self.loss_state().delta


cdef shared_ptr[CImage] _loss_images(CommandBuffer command_buffer, object images, str name, bint optional) except *:
    """The native batch of an ImageBatch, an Image or a list of Images (None where optional)."""
    cdef shared_ptr[CImage] none
    if images is None:
        if optional:
            return none
        raise TypeError(f"{name}: expected an mpsx.ImageBatch, an mpsx.Image or a list of mpsx.Image, given None")
    return image_of(_batch_of(command_buffer, images))


cdef shared_ptr[CImage] _loss_destination(object image, str name) except *:
    cdef shared_ptr[CImage] none
    if image is None:
        return none
    return image_of(image)


cdef class _SeparatedLoss(CNNKernel):
    """The properties NNForwardLoss and NNLossGradient share (MPSCNNLoss.h).

    MPS: MPSNNForwardLoss
    """
    cdef CSeparatedLoss* separated

    cdef CSeparatedLoss* separated_loss(self) except NULL:
        self.native()
        return self.separated

    def _mpsx_arguments(self):
        return (self.loss_descriptor,)

    @property
    def loss_descriptor(self):
        """A copy of the loss descriptor, with the current weight, label smoothing, epsilon and delta.

        MPS: none (mpsx)
        """
        cdef CNNLossDescriptor d = CNNLossDescriptor.__new__(CNNLossDescriptor)
        d.desc = self.separated_loss().loss_descriptor()
        return d

    @property
    def loss_type(self):
        """The loss function, a CNNLossType.

        MPS: MPSNNForwardLoss.lossType, MPSNNLossGradient.lossType
        """
        return CNNLossType(<uint32_t>self.separated_loss().loss_descriptor().loss_type)

    @property
    def reduction_type(self):
        """How the losses are reduced, a CNNReductionType.

        MPS: MPSNNForwardLoss.reductionType, MPSNNLossGradient.reductionType
        """
        return CNNReductionType(<int>self.separated_loss().loss_descriptor().reduction_type)

    @property
    def reduce_across_batch(self):
        """Whether the reduction runs over the whole batch (the first loss image holds it, the others 0) instead of per
        image.

        MPS: MPSNNForwardLoss.reduceAcrossBatch, MPSNNLossGradient.reduceAcrossBatch
        """
        return self.separated_loss().loss_descriptor().reduce_across_batch

    @property
    def number_of_classes(self):
        """The number of classes label smoothing spreads over.

        MPS: MPSNNForwardLoss.numberOfClasses, MPSNNLossGradient.numberOfClasses
        """
        return self.separated_loss().loss_descriptor().number_of_classes

    @property
    def weight(self):
        """The factor of every loss value; settable, and carried to the gradient by the result state.

        MPS: MPSNNForwardLoss.weight, MPSNNLossGradient.weight
        """
        return self.separated_loss().weight

    @weight.setter
    def weight(self, float value):
        self.separated_loss().weight = parameter(self.separated_loss().class_name(), value, "weight")

    @property
    def label_smoothing(self):
        """The label smoothing of the cross entropies; settable, and carried to the gradient by the result state.

        MPS: MPSNNForwardLoss.labelSmoothing, MPSNNLossGradient.labelSmoothing
        """
        return self.separated_loss().label_smoothing

    @label_smoothing.setter
    def label_smoothing(self, float value):
        self.separated_loss().label_smoothing = parameter(self.separated_loss().class_name(), value, "label_smoothing")

    @property
    def epsilon(self):
        """The term that keeps LOG's and the cross entropies' logarithms finite; settable, and carried to the gradient
        by the result state.

        MPS: MPSNNForwardLoss.epsilon, MPSNNLossGradient.epsilon
        """
        return self.separated_loss().epsilon

    @epsilon.setter
    def epsilon(self, float value):
        self.separated_loss().epsilon = parameter(self.separated_loss().class_name(), value, "epsilon")

    @property
    def delta(self):
        """HUBER's threshold between its quadratic and linear parts; settable, and carried to the gradient by the
        result state.

        MPS: MPSNNForwardLoss.delta, MPSNNLossGradient.delta
        """
        return self.separated_loss().delta

    @delta.setter
    def delta(self, float value):
        self.separated_loss().delta = parameter(self.separated_loss().class_name(), value, "delta")


cdef NNLossGradientState _wrap_loss_state(const shared_ptr[CLossGradientState]& state, object kernel):
    cdef NNLossGradientState s = NNLossGradientState.__new__(NNLossGradientState)
    s.c = <shared_ptr[CState]>state
    s._kernel = kernel
    return s


cdef class NNForwardLoss(_SeparatedLoss):
    """NNForwardLoss(device, loss_descriptor)
--

    The loss values of a batch against labels (and optional per-value weights) given as images, as CNNLoss computes
    them, without a gradient: one value per image (1x1x1; the batch's in the first image, the others 0, with
    ``reduce_across_batch``), or for reduction NONE the weighted loss of every value.

    Its result state carries weight, label smoothing, epsilon and delta to NNLossGradient. ``offset`` and
    ``clip_rect`` must keep their defaults. As ``-[MPSNNForwardLoss initWithDevice:lossDescriptor:]``.

    MPS: MPSNNForwardLoss
    """
    cdef CNNForwardLossKernel* forward

    def __init__(self, Device device not None, CNNLossDescriptor loss_descriptor not None):
        cdef shared_ptr[CNNForwardLossKernel] kernel = make_native[CNNForwardLossKernel](device.shared(),
                                                                                         loss_descriptor.desc)
        self.kernel = <shared_ptr[CKernel]>kernel
        self.separated = <CSeparatedLoss*>kernel.get()
        self.forward = kernel.get()

    cdef CNNForwardLossKernel* forward_loss(self) except NULL:
        self.native()
        return self.forward

    cdef object _encode(self, CommandBuffer command_buffer, source_images, labels, weights, destination_states,
                        destination_images, bint batch, bint temporary):
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_states, temporary, &want)
        cdef CForwardLossEncoded r
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        r = self.forward_loss().encode(
            command_buffer.native()[0], _loss_images(command_buffer, source_images, "source_images", False),
            _loss_images(command_buffer, labels, "labels", False),
            _loss_images(command_buffer, weights, "weights", True),
            _loss_destination(destination_images, "destination_images"), given, want)
        encoding.complete()
        out = wrap_image_batch(r.image) if batch else wrap_image(r.image)
        if not _returns_state(command_buffer, r.state.get(), want, temporary):
            return out
        state = _wrap_loss_state(r.state, self)
        return out, (StateBatch(state, r.image.get().number_of_images()) if batch else state)

    def encode_batch(self, CommandBuffer command_buffer not None, source_images, labels, weights=None,
                     destination_states=False, destination_images=None, destination_state_is_temporary=False):
        """Encodes the loss of ``source_images`` (an ImageBatch or a list of Images) against ``labels`` (and
        ``weights``) of the same size; returns the loss ImageBatch, and with ``destination_states=True`` also the
        StateBatch (or pass a state made by ``result_state``), temporary for ``command_buffer`` with
        ``destination_state_is_temporary=True``.

        MPS: -[MPSNNForwardLoss encodeBatchToCommandBuffer:sourceImages:labels:weights:destinationStates:destinationImages:]
        """
        return self._encode(command_buffer, source_images, labels, weights, destination_states, destination_images,
                            True, destination_state_is_temporary)

    def encode(self, CommandBuffer command_buffer not None, Image source_image not None, labels, weights=None,
               destination_state=False, Image destination_image=None, destination_state_is_temporary=False):
        """``encode_batch`` for an Image (a batch of its images); returns the loss Image (and the state). MPS has the
        batch form only.

        MPS: -[MPSNNForwardLoss encodeBatchToCommandBuffer:sourceImages:labels:weights:destinationStates:destinationImages:]
        """
        return self._encode(command_buffer, source_image, labels, weights, destination_state, destination_image,
                            False, destination_state_is_temporary)

    def result_state(self, source_image, source_states=None, destination_image=None):
        """A new NNLossGradientState for ``encode_batch(..., destination_states=state)``.

        MPS: -[MPSCNNKernel resultStateBatchForSourceImage:sourceStates:destinationImage:]
        """
        return _wrap_loss_state(self.forward_loss().result_state(image_of(_first_image(source_image)).get()[0]), self)

    def destination_image_descriptor(self, source_images, source_states=None):
        """The loss image's descriptor: 1x1x1 per image, or the source's size for reduction NONE.

        MPS: -[MPSCNNKernel destinationImageDescriptorForSourceImages:sourceStates:]
        """
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = self.forward_loss().destination_image_descriptor(image_of(_first_image(source_images)).get()[0])
        return d


cdef class NNLossGradient(_SeparatedLoss):
    """NNLossGradient(device, loss_descriptor)
--

    The gradient of NNForwardLoss's loss values with respect to its source (or its labels, with
    ``compute_label_gradients``), given the gradient of those values: one per loss value for reduction NONE, else a
    1x1x1 gradient per image (with ``reduce_across_batch`` the first image's applies to every image, the first loss
    image holding the batch's loss).

    With a source state (NNForwardLoss's result state) its weight, label smoothing, epsilon and delta are used in
    place of the kernel's. An MPSCNNBinaryKernel in MPS; here its primary and secondary properties are not offered
    (``offset`` and ``clip_rect`` must keep their defaults). As
    ``-[MPSNNLossGradient initWithDevice:lossDescriptor:]``.

    MPS: MPSNNLossGradient
    """
    cdef CNNLossGradientKernel* gradient

    def __init__(self, Device device not None, CNNLossDescriptor loss_descriptor not None):
        cdef shared_ptr[CNNLossGradientKernel] kernel = make_native[CNNLossGradientKernel](device.shared(),
                                                                                           loss_descriptor.desc)
        self.kernel = <shared_ptr[CKernel]>kernel
        self.separated = <CSeparatedLoss*>kernel.get()
        self.gradient = kernel.get()

    cdef CNNLossGradientKernel* loss_gradient(self) except NULL:
        self.native()
        return self.gradient

    _mpsx_properties = ("compute_label_gradients",)

    @property
    def compute_label_gradients(self):
        """Whether the kernel computes the gradient for the labels instead of the source (default False).

        MPS: MPSNNLossGradient.computeLabelGradients
        """
        return self.loss_gradient().compute_label_gradients

    @compute_label_gradients.setter
    def compute_label_gradients(self, bint value):
        self.loss_gradient().compute_label_gradients = value

    cdef object _encode(self, CommandBuffer command_buffer, source_gradients, source_images, labels, weights,
                        source_states, destination_gradients, bint batch):
        cdef shared_ptr[CState] state
        cdef shared_ptr[CImage] result
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        if source_states is not None:
            state = _state_of(source_states, "source_states")
        result = self.loss_gradient().encode(
            command_buffer.native()[0],
            _loss_images(command_buffer, source_gradients, "source_gradients", False),
            _loss_images(command_buffer, source_images, "source_images", False),
            _loss_images(command_buffer, labels, "labels", False),
            _loss_images(command_buffer, weights, "weights", True), state,
            _loss_destination(destination_gradients, "destination_gradients"))
        encoding.complete()
        return wrap_image_batch(result) if batch else wrap_image(result)

    def encode_batch(self, CommandBuffer command_buffer not None, source_gradients, source_images, labels,
                     weights=None, source_states=None, destination_gradients=None):
        """Encodes the gradient from ``source_gradients`` (the gradient of the loss values), ``source_images``,
        ``labels``, ``weights`` and optional ``source_states``; returns the gradient ImageBatch (``source_images``'
        size).

        MPS: -[MPSNNLossGradient encodeBatchToCommandBuffer:sourceGradients:sourceImages:labels:weights:sourceStates:destinationGradients:]
        """
        return self._encode(command_buffer, source_gradients, source_images, labels, weights, source_states,
                            destination_gradients, True)

    def encode(self, CommandBuffer command_buffer not None, Image source_gradient not None,
               Image source_image not None, labels, weights=None, source_state=None,
               Image destination_gradient=None):
        """``encode_batch`` for Images (each a batch of its images); returns the gradient Image. MPS has the batch form
        only.

        MPS: -[MPSNNLossGradient encodeBatchToCommandBuffer:sourceGradients:sourceImages:labels:weights:sourceStates:destinationGradients:]
        """
        return self._encode(command_buffer, source_gradient, source_image, labels, weights, source_state,
                            destination_gradient, False)

    def destination_image_descriptor(self, source_gradients, source_images):
        """The gradient's descriptor: the source's size in the source gradient's data type.

        MPS: -[MPSCNNBinaryKernel destinationImageDescriptorForSourceImages:sourceStates:]
        """
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = self.loss_gradient().destination_image_descriptor(
            image_of(_first_image(source_gradients)).get()[0], image_of(_first_image(source_images)).get()[0])
        return d

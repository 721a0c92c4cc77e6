# Image descriptors, images and image batches (included by _runtime.pyx).

cdef class ImageDescriptor:
    """ImageDescriptor(channel_format=DataType.FLOAT32, width=None, height=None, feature_channels=None,
        number_of_images=1)
--

    The format and size of an image: ``number_of_images`` images of ``feature_channels`` x ``height`` x ``width``
    values of ``channel_format``.

    ``width``, ``height`` and ``feature_channels`` are required (keywords allowed, as in MPS's factory); ValueError
    for sizes out of the limits of docs/semantics.md. Descriptors compare equal by format and shape. As
    ``+[MPSImageDescriptor imageDescriptorWithChannelFormat:width:height:featureChannels:numberOfImages:usage:]``.

    MPS: MPSImageDescriptor
    """

    def __init__(self, channel_format=DataType.FLOAT32, width=None, height=None, feature_channels=None,
                 number_of_images=1):
        if width is None or height is None or feature_channels is None:
            raise TypeError("ImageDescriptor needs width, height and feature_channels")
        self.c.channel_format = <CDataType><int>DataType(channel_format)
        self.c.width = integer_argument(width, "width")
        self.c.height = integer_argument(height, "height")
        self.c.feature_channels = integer_argument(feature_channels, "feature_channels")
        self.c.number_of_images = integer_argument(number_of_images, "number_of_images")
        self.c.validate()


    @classmethod
    def image_descriptor_with_channel_format(cls, channel_format, width, height, feature_channels, number_of_images=1,
                                             usage=None):
        """A new descriptor: the same as ``ImageDescriptor(channel_format, width, height, feature_channels,
        number_of_images)``. ``usage`` (MTLTextureUsage bits, a non-negative int) is accepted and has no effect:
        every mpsx image is readable and writable by every kernel, as MPS's default usage makes them
        (docs/semantics.md).

        MPS: +[MPSImageDescriptor imageDescriptorWithChannelFormat:width:height:featureChannels:], +[MPSImageDescriptor imageDescriptorWithChannelFormat:width:height:featureChannels:numberOfImages:usage:]
        """
        if usage is not None and integer_argument(usage, "usage") < 0:
            raise ValueError(f"usage must be MTLTextureUsage bits (a non-negative int), given {usage}")
        return cls(channel_format, width, height, feature_channels, number_of_images)

    @property
    def channel_format(self):
        """The data type of the values.

        MPS: MPSImageDescriptor.channelFormat
        """
        return DataType(<int>self.c.channel_format)

    @property
    def width(self):
        """The width in pixels.

        MPS: MPSImageDescriptor.width
        """
        return self.c.width

    @property
    def height(self):
        """The height in pixels.

        MPS: MPSImageDescriptor.height
        """
        return self.c.height

    @property
    def feature_channels(self):
        """The number of feature channels per pixel.

        MPS: MPSImageDescriptor.featureChannels
        """
        return self.c.feature_channels

    @property
    def number_of_images(self):
        """The number of images.

        MPS: MPSImageDescriptor.numberOfImages
        """
        return self.c.number_of_images

    @property
    def shape(self):
        """``(number_of_images, feature_channels, height, width)``: the shape of the image as a numpy array.

        MPS: none (mpsx)
        """
        return (self.c.number_of_images, self.c.feature_channels, self.c.height, self.c.width)

    def copy(self):
        """A new descriptor equal to this one (of the same class).

        MPS: -[MPSImageDescriptor copyWithZone:]
        """
        cdef ImageDescriptor d = type(self).__new__(type(self))
        d.c = self.c
        return d

    def __eq__(self, other):
        if not isinstance(other, ImageDescriptor):
            return NotImplemented
        return (self.channel_format, self.shape) == (other.channel_format, other.shape)

    def __hash__(self):
        return hash((self.channel_format, self.shape))

    def __mpsx_state__(self):
        return {"arguments": (self.channel_format, self.width, self.height, self.feature_channels,
                              self.number_of_images)}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __repr__(self):
        return (f"mpsx.ImageDescriptor({self.channel_format!r}, width={self.width}, height={self.height}, "
                f"feature_channels={self.feature_channels}, number_of_images={self.number_of_images})")


cdef ImageDescriptor wrap_descriptor(const CImageDescriptor& d):
    cdef ImageDescriptor out = ImageDescriptor.__new__(ImageDescriptor)
    out.c = d
    return out


cdef Image wrap_image(const shared_ptr[CImage]& image):
    """An Image of a native image; a TemporaryImage where it is temporary (one an allocator made, say)."""
    cdef Image out = TemporaryImage.__new__(TemporaryImage) if image.get().is_temporary() else Image.__new__(Image)
    out.c = image
    return out


cdef ImageBatch wrap_image_batch(const shared_ptr[CImage]& image):
    cdef ImageBatch out = ImageBatch.__new__(ImageBatch)
    out.c = image
    return out


cdef shared_ptr[CImage] image_of(object images) except *:
    """The native image of an Image or ImageBatch."""
    if isinstance(images, Images):
        return (<Images>images).shared()
    raise TypeError(f"expected an mpsx.Image or mpsx.ImageBatch, given {type(images).__name__}")


def _batch_of(CommandBuffer command_buffer, images):
    """The native batch of an ImageBatch, an Image or a list of Images."""
    cdef vector[shared_ptr[CImage]] items
    if isinstance(images, Images):
        return images
    if isinstance(images, (list, tuple)):
        for i, item in enumerate(images):
            if not isinstance(item, Image):
                raise TypeError(f"expected a list of mpsx.Image, item {i} is {type(item).__name__}")
            items.push_back((<Image>item).shared())
        return wrap_image_batch(CImage.gather(command_buffer.native()[0], items))
    raise TypeError(f"expected an mpsx.ImageBatch or a list of mpsx.Image, given {type(images).__name__}")


cdef _from_numpy(shared_ptr[CImage]* out, Device device, array, bint batch):
    a = np.asarray(array)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if a.ndim == 3 and not batch:
        a = a[None]
    if a.ndim != 4:
        raise ValueError(f"expected an (N, C, H, W) array{'' if batch else ' or (C, H, W)'}, given shape {a.shape}")
    a = np.ascontiguousarray(a)
    cdef CImageDescriptor d
    d.channel_format = data_type_of_numpy(a.dtype)
    d.number_of_images, d.feature_channels, d.height, d.width = a.shape
    d.validate()
    out[0] = make_native[CImage](device.shared(), d)
    cdef const unsigned char[::1] raw = a.reshape(-1).view(np.uint8)
    out[0].get().write(&raw[0], raw.shape[0], d.channel_format)


cdef _to_numpy(const shared_ptr[CImage]& image):
    cdef const CImageDescriptor* d = &image.get().descriptor()
    out = np.empty((d.number_of_images, d.feature_channels, d.height, d.width), dtype=numpy_of(d.channel_format))
    cdef unsigned char[::1] raw = out.reshape(-1).view(np.uint8)
    image.get().read(&raw[0], raw.shape[0], d.channel_format)
    return out


cdef _write(const shared_ptr[CImage]& image, array):
    cdef const CImageDescriptor* d = &image.get().descriptor()
    shape = (d.number_of_images, d.feature_channels, d.height, d.width)
    a = np.asarray(array)
    if a.shape != shape and not (d.number_of_images == 1 and a.shape == shape[1:]):
        raise ValueError(f"expected an array of shape {shape}"
                         f"{' or ' + str(shape[1:]) if d.number_of_images == 1 else ''}, given {a.shape}")
    # Float32 and float16 go between each other in native code (cuda: on the device), not through numpy's slow
    # float16 casts on the host.
    cdef CDataType host_type = d.channel_format
    if a.dtype in (np.float32, np.float16) and host_type in (CDataType.Float32, CDataType.Float16):
        host_type = data_type_of_numpy(a.dtype)
    a = np.ascontiguousarray(a, dtype=numpy_of(host_type))
    cdef const unsigned char[::1] raw = a.reshape(-1).view(np.uint8)
    image.get().write(&raw[0], raw.shape[0], host_type)


class PurgeableState(enum.IntEnum):
    """The purgeability of an image's storage, as ``Images.set_purgeable_state`` takes and returns it. mpsx never
    purges storage: an image always reports NON_VOLATILE (docs/semantics.md).

    MPS: MPSPurgeableState
    """
    ALLOCATION_DEFERRED = 0
    KEEP_CURRENT = 1
    NON_VOLATILE = 2
    VOLATILE = 3
    EMPTY = 4


_PRECISION = {DataType.FLOAT32: 24, DataType.FLOAT16: 11, DataType.BFLOAT16: 8, DataType.UINT8: 8}


cdef object _range_argument(object value, str name):
    """(location, length) of an NSRange given as a pair of non-negative ints."""
    try:
        values = tuple(value)
    except TypeError:
        raise TypeError(f"{name}: expected (location, length), given {type(value).__name__}") from None
    if len(values) != 2:
        raise ValueError(f"{name}: expected 2 values (location, length), given {len(values)}")
    location, length = (integer_argument(v, name) for v in values)
    if location < 0 or length < 0:
        raise ValueError(f"{name}: expected a non-negative location and length, given {(location, length)}")
    return location, length


cdef ImageBatch _view_batch(Images parent, int64_t first, int64_t count):
    """A batch of images [first, first + count) of ``parent``, sharing its storage, its parent ``parent``."""
    cdef ImageBatch out = wrap_image_batch(make_native[CImage](parent.native()[0], first, count))
    out.parent_ = parent
    return out


cdef object _nonnegative(object value, str name):
    cdef int64_t v = integer_argument(value, name)
    if v < 0:
        raise ValueError(f"{name}: expected a non-negative int, given {v}")
    return v


cdef object _ints(object value, str name, int count, str what):
    try:
        values = tuple(value)
    except TypeError:
        raise TypeError(f"{name}: expected {what}, given {type(value).__name__}") from None
    if len(values) != count:
        raise ValueError(f"{name}: expected {what}, given {len(values)} values")
    return tuple(_nonnegative(v, name) for v in values)


cdef object _host_access(Images images, object data_bytes, bint writable, object data_layout, object bytes_per_row,
                         object region, object feature_channel_info, object image_index, object bytes_per_image,
                         object bytes_per_column, ImageBlock* block, ImageLayout* stride):
    """Checks a readBytes:/writeBytes: call and fills the image block and host element strides it names; returns the
    host memory as a byte memoryview."""
    cdef CImage* image = images.native()
    cdef int64_t size = size_of(image.data_type())
    layout = integer_argument(data_layout, "data_layout")
    if layout not in (0, 1):
        raise ValueError(f"data_layout: expected DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS (0) or "
                         f"FEATURE_CHANNELS_X_HEIGHT_X_WIDTH (1), given {data_layout!r}")
    try:
        origin, extent = region
    except (TypeError, ValueError):
        raise TypeError(f"region: expected ((x, y, z), (width, height, depth)), as MTLRegion, given {region!r}") \
            from None
    x, y, z = _ints(origin, "region", 3, "an origin (x, y, z)")
    w, h, d = _ints(extent, "region", 3, "a size (width, height, depth)")
    offset, channels = _ints(feature_channel_info, "feature_channel_info", 2,
                             "(feature_channel_offset, number_of_feature_channels_to_read_write)")
    block.image, block.channel, block.y, block.x = _nonnegative(image_index, "image_index") + z, offset, y, x
    block.n, block.c, block.h, block.w = d, channels, h, w
    if not (d and channels and h and w):
        raise ValueError(f"region and feature_channel_info: expected at least 1 image, channel, row and column, given "
                         f"size {(w, h, d)} and {channels} channels")
    hwc = layout == 0
    column = (channels * size if hwc else size) if bytes_per_column is None else _nonnegative(bytes_per_column,
                                                                                             "bytes_per_column")
    row = _nonnegative(bytes_per_row, "bytes_per_row")
    plane = row * h
    whole = plane if hwc else plane * channels
    per_image = whole if bytes_per_image is None else _nonnegative(bytes_per_image, "bytes_per_image")
    pixel = channels * size if hwc else size
    for name, value, least in (("bytes_per_column", column, pixel), ("bytes_per_row", row, column * w),
                               ("bytes_per_image", per_image, whole)):
        if value % size or value < least:
            raise ValueError(f"{name}: expected a multiple of the {size} bytes of a value, at least {least} (the "
                             f"region's), given {value}")
    stride.w, stride.h, stride.n = column // size, row // size, per_image // size
    stride.c = 1 if hwc else plane // size
    try:
        memory = memoryview(data_bytes)
        # Bytes written over Python objects' pointers would crash.
        if "O" in memory.format:
            raise TypeError(f"a buffer of Python objects (format {memory.format!r})")
        memory = memory.cast("B")
    except TypeError as e:
        raise TypeError(f"data_bytes: expected a C-contiguous buffer of values (numpy array, bytearray, "
                        f"memoryview), given {type(data_bytes).__name__}: {e}") from None
    if writable and memory.readonly:
        raise TypeError("data_bytes: expected a writable buffer, given a read-only one")
    span = ((block.n - 1) * stride.n + (block.c - 1) * stride.c + (block.h - 1) * stride.h +
            (block.w - 1) * stride.w + 1) * size
    if memory.nbytes < span:
        raise ValueError(f"data_bytes: the region needs {span} bytes, given {memory.nbytes}")
    return memory


# Images are made per encode: a freelist spares their allocation.
@cython.freelist(256)
cdef class Images:
    """Images(*args)
--

    What Image and ImageBatch share: N images of one size and format in one allocation, read and written on the host
    as (N, C, H, W) arrays. Not made directly (TypeError).

    MPS: MPSImage
    """

    def __init__(self, *args):
        raise TypeError("make an mpsx.Image or an mpsx.ImageBatch")

    def to_numpy(self):
        """A copy of the values as an (N, C, H, W) array of the image's data type.

        Raises SynchronizationError for values a command buffer wrote that were not synchronized, or whose command
        buffer has not completed.

        MPS: -[MPSImage readBytes:dataLayout:imageIndex:]
        """
        return _to_numpy(self.shared())

    def __array__(self, dtype=None, copy=None):
        a = _to_numpy(self.shared())
        return a if dtype is None else a.astype(dtype, copy=False)

    def write(self, array):
        """Copies an array of the images' shape (N, C, H, W; (C, H, W) for one image) in, converted to their data type
        (a host write). ValueError for another shape; SynchronizationError while a committed command buffer that reads
        or writes the images has not completed (``wait_until_completed()`` first).

        MPS: -[MPSImage writeBytes:dataLayout:imageIndex:]
        """
        _write(self.shared(), array)

    def read_bytes(self, data_bytes, data_layout, bytes_per_row, region, feature_channel_info, image_index,
                   bytes_per_image=None):
        """Copies ``region`` of the images into ``data_bytes``, a writable C-contiguous buffer (numpy array,
        bytearray, memoryview) of values of the image's data type, laid out as ``data_layout`` (a DataLayout) says.

        ``region`` is ``((x, y, z), (width, height, depth))`` as MTLRegion: ``depth`` images from image
        ``image_index + z``; ``feature_channel_info`` is ``(feature_channel_offset,
        number_of_feature_channels_to_read_write)``. Strides are in bytes, multiples of a value's size:
        ``bytes_per_row`` from row to row, ``bytes_per_image`` from image to image (default: the region's, without
        padding); feature channels and pixels of a row are dense. Only the region's bytes of ``data_bytes`` are
        written. ValueError for a region or channels outside the image, strides too small and a buffer too small;
        SynchronizationError as ``to_numpy``.

        MPS: -[MPSImage readBytes:dataLayout:bytesPerRow:region:featureChannelInfo:imageIndex:], -[MPSImage readBytes:dataLayout:bytesPerRow:bytesPerImage:region:featureChannelInfo:imageIndex:]
        """
        cdef ImageBlock block
        cdef ImageLayout stride
        memory = _host_access(self, data_bytes, True, data_layout, bytes_per_row, region, feature_channel_info,
                              image_index, bytes_per_image, None, &block, &stride)
        cdef unsigned char[::1] raw = memory
        self.native().read(block, &raw[0], stride)

    def write_bytes(self, data_bytes, data_layout, bytes_per_row, region, feature_channel_info, image_index,
                    bytes_per_image=None, bytes_per_column=None):
        """Copies ``data_bytes``, a C-contiguous buffer of values of the image's data type laid out as
        ``read_bytes`` describes, into ``region`` of the images (a host write); the values outside the region are
        kept. ``bytes_per_column`` is the stride from pixel to pixel of a row, in both layouts (default: dense).
        Errors as ``read_bytes``; SynchronizationError as ``write``.

        MPS: -[MPSImage writeBytes:dataLayout:bytesPerRow:region:featureChannelInfo:imageIndex:], -[MPSImage writeBytes:dataLayout:bytesPerRow:bytesPerImage:region:featureChannelInfo:imageIndex:], -[MPSImage writeBytes:dataLayout:bytesPerColumn:bytesPerRow:bytesPerImage:region:featureChannelInfo:imageIndex:]
        """
        cdef ImageBlock block
        cdef ImageLayout stride
        memory = _host_access(self, data_bytes, False, data_layout, bytes_per_row, region, feature_channel_info,
                              image_index, bytes_per_image, bytes_per_column, &block, &stride)
        cdef const unsigned char[::1] raw = memory
        self.native().write(block, &raw[0], stride)

    def synchronize(self, CommandBuffer command_buffer not None):
        """Makes what ``command_buffer`` writes into the images readable on the host once it has completed.

        MPS: -[MPSImage synchronizeOnCommandBuffer:]
        """
        self.native().synchronize(command_buffer.native()[0])

    @property
    def label(self):
        """A string to help identify the images (None at first), kept on this Python object: another wrapper of
        the same storage (``batch[0]`` made twice, an encode's result) has its own.

        MPS: MPSImage.label
        """
        return self.label_

    @label.setter
    def label(self, value):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"label: expected a str or None, given {type(value).__name__}")
        self.label_ = value

    @property
    def parent(self):
        """The images this one was derived from (``batch_representation``, ``with_parent_image``, a batch's
        item or slice), sharing their storage; None otherwise.

        MPS: MPSImage.parent
        """
        self.native()
        return self.parent_

    @property
    def precision(self):
        """The bits of numeric precision of each feature channel, not its size: 24 for float32, 11 for float16,
        8 for bfloat16 and for uint8 (unorm8).

        MPS: MPSImage.precision
        """
        return _PRECISION[DataType(<int>self.native().data_type())]

    @property
    def pixel_size(self):
        """Bytes from the first byte of one pixel to the first byte of the next in storage order: mpsx keeps a
        pixel's feature channels dense, without padding, so ``feature_channels`` x the bytes of one value
        (docs/semantics.md).

        MPS: MPSImage.pixelSize
        """
        return self.native().feature_channels() * size_of(self.native().data_type())

    def resource_size(self):
        """The bytes of storage of the images' values (``pixel_size`` x width x height x number of images); 0
        for images derived from another (``parent`` is not None), whose storage is the parent's.

        MPS: -[MPSImage resourceSize]
        """
        cdef CImage* image = self.native()
        if self.parent_ is not None:
            return 0
        return image.number_of_images() * image.height() * image.width() * self.pixel_size

    def set_purgeable_state(self, state):
        """Returns the purgeability of the storage, which mpsx never purges: always
        ``PurgeableState.NON_VOLATILE``. ``state`` (a PurgeableState) is checked and has no effect, as MPS ignores
        it for storage it has not allocated (docs/semantics.md).

        MPS: -[MPSImage setPurgeableState:]
        """
        self.native()
        PurgeableState(state)
        return PurgeableState.NON_VOLATILE

    def batch_representation(self):
        """An ImageBatch of this image's images, sharing its storage (``parent`` is this image). Of a temporary
        image, it counts against the image's read count (docs/semantics.md).

        MPS: -[MPSImage batchRepresentation]
        """
        return _view_batch(self, 0, self.native().number_of_images())

    def batch_representation_with_sub_range(self, sub_range):
        """An ImageBatch of images [location, location + length) of this image, ``sub_range`` being
        ``(location, length)``, sharing its storage (``parent`` is this image). ValueError for a range of no images
        or past the last image.

        MPS: -[MPSImage batchRepresentationWithSubRange:]
        """
        cdef int64_t n = self.native().number_of_images()
        location, length = _range_argument(sub_range, "sub_range")
        if length < 1 or location + length > n:
            raise ValueError(f"sub_range: expected 1 or more images within the {n} of the image, given "
                             f"(location={location}, length={length})")
        return _view_batch(self, location, length)

    @property
    def width(self):
        """The width in pixels.

        MPS: MPSImage.width
        """
        return self.native().width()

    @property
    def height(self):
        """The height in pixels.

        MPS: MPSImage.height
        """
        return self.native().height()

    @property
    def feature_channels(self):
        """The number of feature channels per pixel.

        MPS: MPSImage.featureChannels
        """
        return self.native().feature_channels()

    @property
    def data_type(self):
        """The data type of the values.

        MPS: MPSImage.featureChannelFormat
        """
        return DataType(<int>self.native().data_type())

    @property
    def shape(self):
        """``(number_of_images, feature_channels, height, width)``.

        MPS: none (mpsx)
        """
        return (self.native().number_of_images(), self.native().feature_channels(),
                self.native().height(), self.native().width())

    @property
    def device(self):
        """The device that holds the images.

        MPS: MPSImage.device
        """
        return wrap_device(self.native().device_ptr())

    def __dlpack_device__(self):
        """(device type, device id) of the images for DLPack: (1, 0), the CPU, on cpu and metal (where
        ``__dlpack__(copy=True)`` copies them to), (2, ordinal), CUDA, on cuda.

        MPS: none (mpsx)
        """
        cdef DLDevice d = dlpack_device_of(self.native().device())
        return (d.device_type, d.device_id)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the images as an (N, C, H, W) tensor, as ``to_numpy()`` shapes them, for
        ``torch.from_dlpack``, ``numpy.from_dlpack``, cupy and jax.

        On cpu and cuda it shares the images' memory, whose NHWC layout its strides describe (in PyTorch, an
        NCHW tensor in the channels_last memory format): the consumer sees what later command buffers write,
        and they see what it writes. ``copy=True`` gives a dense (N, C, H, W) copy on the device. Metal keeps
        pixels in textures, which DLPack cannot describe: there ``copy=True`` (or ``to_numpy()``) copies them
        to host memory, and anything else raises ``BufferError``.

        As the DLPack protocol defines the arguments: ``stream`` is the consumer's stream on cuda, made to wait
        for the command buffer that last writes the images (committed, not necessarily completed; ``-1``: no
        ordering); on the host this waits for it instead. No ``synchronize`` is needed. ``max_version`` of
        (1, 0) or later gives a versioned capsule. ``dl_device=(1, 0)`` on cuda gives a host copy, read as
        ``to_numpy()`` reads.

        MPS: none (mpsx)
        """
        cdef shared_ptr[CImage] image = self.shared()
        cdef ExportRequest request = _export_request(image.get().device(), stream, max_version, dl_device, copy)
        cdef Exported exported
        with nogil:
            exported = export_image(image, request)
        return _capsule(exported)

    def __mpsx_state__(self):
        return {"arguments": (self.device, self.to_numpy())}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return cls.from_numpy(*state["arguments"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        n, c, h, w = self.shape
        return f"<mpsx.{type(self).__name__} {n}x{c}x{h}x{w} {self.data_type.name.lower()} on {self.device.name}>"


cdef class Image(Images):
    """Image(device, descriptor)
--

    An image: ``number_of_images`` x ``feature_channels`` x ``height`` x ``width`` values, allocated on ``device``
    as ``descriptor`` says (zero at first).

    ``Image.from_numpy(device, array)`` copies an (N, C, H, W) or (C, H, W) float32, float16 or uint8 array in. An
    image of several images is one MPSImage with ``numberOfImages`` > 1, which kernels treat as a batch. As
    ``-[MPSImage initWithDevice:imageDescriptor:]``; ``Image.with_parent_image(parent, slice_range,
    feature_channels)`` is ``-[MPSImage initWithParentImage:sliceRange:featureChannels:]``.

    MPS: MPSImage
    """

    def __init__(self, Device device not None, ImageDescriptor descriptor not None):
        self.c = make_native[CImage](device.shared(), descriptor.c)

    @staticmethod
    def from_numpy(Device device not None, array):
        """A new image on ``device`` holding a copy of an (N, C, H, W) or (C, H, W) array (float32, float16 or uint8;
        float64 is converted to float32). ValueError for another number of dimensions.

        MPS: -[MPSImage writeBytes:dataLayout:imageIndex:]
        """
        cdef Image image = Image.__new__(Image)
        _from_numpy(&image.c, device, array, False)
        return image

    @staticmethod
    def from_dlpack(Device device not None, tensor, *, copy=None):
        """An image of a DLPack tensor (torch, numpy >= 1.23, cupy or jax; or a DLPack capsule) of shape
        (N, C, H, W) or (C, H, W), float32, float16, bfloat16 or uint8, on ``device``, which the tensor must be on.

        A tensor laid out as the device lays out images is shared without a copy (``copy=None``, the default):
        on cpu and cuda an NHWC one, in PyTorch ``x.contiguous(memory_format=torch.channels_last)``. The image
        keeps the tensor alive, and each side sees what the other writes. Other strides, a read-only tensor or
        ``copy=True`` give a copy on the device (metal: always); ``copy=False`` raises ``BufferError`` where
        sharing is impossible. On cuda the producer's pending work is ordered before mpsx's through the DLPack
        stream protocol, never through the host.

        MPS: none (mpsx)
        """
        return _import_dlpack(device, tensor, ImportAs.Image, copy)

    @property
    def descriptor(self):
        """The image's descriptor.

        MPS: none (mpsx)
        """
        return wrap_descriptor(self.native().descriptor())

    @property
    def number_of_images(self):
        """The number of images.

        MPS: MPSImage.numberOfImages
        """
        return self.native().number_of_images()

    @staticmethod
    def with_parent_image(Images parent not None, slice_range, feature_channels):
        """An image of texture-array slices ``slice_range`` = ``(location, length)`` of ``parent``, sharing its
        storage (``parent`` is ``parent``). MPS keeps 4 feature channels a slice, ceil(C / 4) slices an image, and
        infers the number of images from ``feature_channels``. mpsx keeps images channel-dense, so the range must
        cover whole images with the parent's feature channels, or lie within one image and hold
        ``feature_channels`` (ceil(feature_channels / 4) slices: an image of those channels, as
        ``sub_image_with_feature_channel_range``); other ranges would make images of other images' channels
        (ValueError; docs/semantics.md). ``batch_representation_with_sub_range`` and
        ``sub_image_with_feature_channel_range`` are the safer forms MPS recommends.

        MPS: -[MPSImage initWithParentImage:sliceRange:featureChannels:]
        """
        cdef int64_t c = parent.native().feature_channels()
        cdef int64_t n = parent.native().number_of_images()
        cdef int64_t slices = (c + 3) // 4
        cdef FeatureChannelRange channel_range
        cdef Image out
        location, length = _range_argument(slice_range, "slice_range")
        channels = integer_argument(feature_channels, "feature_channels")
        if 1 <= length and location + length <= n * slices:
            if channels == c and location % slices == 0 and length % slices == 0:
                out = wrap_image(make_native[CImage](parent.native()[0], <int64_t>(location // slices),
                                                     <int64_t>(length // slices)))
                out.parent_ = parent
                return out
            first = location % slices
            if first + length <= slices and 1 <= channels and (channels + 3) // 4 == length and \
                    4 * first + channels <= c:
                channel_range.first = 4 * first
                channel_range.count = channels
                out = wrap_image(make_native[CImage](
                    make_native[CImage](parent.native()[0], <int64_t>(location // slices), <int64_t>1).get()[0],
                    channel_range))
                out.parent_ = parent
                return out
        raise ValueError(f"slice_range and feature_channels: expected whole images of {slices} slices each "
                         f"(ceil({c} / 4)) with the parent's {c} feature channels, or slices within one image "
                         f"holding feature_channels (ceil(feature_channels / 4) slices), within the parent's "
                         f"{n * slices}; given (location={location}, length={length}) and {channels} feature "
                         f"channels (mpsx keeps images channel-dense: slices of several images make no image)")

    def sub_image_with_feature_channel_range(self, range):
        """An image of feature channels [location, location + length) of each of this image's images, ``range``
        being ``(location, length)``, sharing its storage (``parent`` is this image): kernels read and write those
        channels through it, as the slice MPS says it is cheaper than. As in MPS, location and length must be
        multiples of 4 (ValueError otherwise, or for a location past the last channel), and a length past the last
        channel is reduced to fit. Of a temporary image, it is temporary and counts against the image's read count
        (docs/semantics.md).

        MPS: -[MPSImage subImageWithFeatureChannelRange:]
        """
        cdef int64_t c = self.native().feature_channels()
        cdef FeatureChannelRange channels
        location, length = _range_argument(range, "range")
        if location % 4 or length % 4 or length < 1 or location >= c:
            raise ValueError(f"range: expected a location and length that are multiples of 4 (MPS), the location "
                             f"within the image's {c} feature channels, given (location={location}, "
                             f"length={length})")
        channels.first = location
        channels.count = min(length, c - location)
        cdef Image out = wrap_image(make_native[CImage](self.native()[0], channels))
        out.parent_ = self
        return out

    @classmethod
    def default_allocator(cls):
        """The allocator that makes new images: what kernels and graphs make their results with unless given
        another.

        MPS: +[MPSImage defaultAllocator]
        """
        return wrap_image_allocator(CDefaultImageAllocator.for_images())


cdef class TemporaryImage(Image):
    """TemporaryImage(command_buffer, image_descriptor)
--

    An image only kernels encoding onto ``command_buffer`` read and write, while its ``read_count`` (1 at first) is
    above 0: each encode that reads it lowers the count by 1 (a batch gathered from temporary images counts for each
    of them), and reading or writing it at 0 raises StateError, as does using it on another command buffer. The
    host never reads or writes it (SynchronizationError; DLPack too). As
    ``+[MPSTemporaryImage temporaryImageWithCommandBuffer:imageDescriptor:]``.

    MPS: MPSTemporaryImage
    """

    def __init__(self, CommandBuffer command_buffer not None, ImageDescriptor image_descriptor not None):
        self.c = CImage.temporary(command_buffer.native()[0], image_descriptor.c)

    @classmethod
    def temporary_image_with_command_buffer(cls, command_buffer, image_descriptor):
        """The same as ``TemporaryImage(command_buffer, image_descriptor)``: a new temporary image.

        MPS: +[MPSTemporaryImage temporaryImageWithCommandBuffer:imageDescriptor:]
        """
        return cls(command_buffer, image_descriptor)

    @classmethod
    def prefetch_storage_with_command_buffer(cls, CommandBuffer command_buffer not None, image_descriptor_list):
        """A hint of the temporary images ``command_buffer`` will use, which MPS says is never necessary: mpsx
        checks the arguments and does nothing else (its device pool reuses storage across command buffers).

        MPS: +[MPSTemporaryImage prefetchStorageWithCommandBuffer:imageDescriptorList:]
        """
        for i, d in enumerate(image_descriptor_list):
            if not isinstance(d, ImageDescriptor):
                raise TypeError(f"expected a list of mpsx.ImageDescriptor, item {i} is {type(d).__name__}")

    @property
    def read_count(self):
        """The reads left before the contents become undefined (1 at first); each encode that reads the image
        lowers it by 1. Setting it raises StateError once it is 0, and ValueError below 0.

        MPS: MPSTemporaryImage.readCount
        """
        return self.native().read_count()

    @read_count.setter
    def read_count(self, value):
        self.native().set_read_count(integer_argument(value, "read_count"))

    @staticmethod
    def from_numpy(Device device not None, array):
        """Refused (TypeError): the host never writes a temporary image; ``Image.from_numpy`` makes an image of an
        array.

        MPS: none (mpsx)
        """
        raise TypeError("a TemporaryImage is never written by the host; make an mpsx.Image.from_numpy")

    @staticmethod
    def from_dlpack(Device device not None, tensor, *, copy=None):
        """Refused (TypeError): a temporary image never shares memory with the host or another library;
        ``Image.from_dlpack`` imports a tensor.

        MPS: none (mpsx)
        """
        raise TypeError("a TemporaryImage never imports a tensor; make an mpsx.Image.from_dlpack")

    @classmethod
    def default_allocator(cls):
        """The allocator that makes temporary images of the command buffer an encode is on, read count 1.

        MPS: +[MPSTemporaryImage defaultAllocator]
        """
        return wrap_image_allocator(CDefaultImageAllocator.for_temporary_images())


cdef class ImageBatch(Images):
    """ImageBatch(device, descriptor)
--

    N images in one allocation, as ``descriptor`` says (``descriptor.number_of_images`` is the batch size).

    ``len(batch)`` is N; ``batch[i]`` is image i and ``batch[i:j]`` a batch of images i to j - 1, each sharing the
    batch's memory; iterating yields the images. ``ImageBatch.from_numpy(device, array)`` copies an (N, C, H, W)
    array in.

    MPS: MPSImageBatch
    """

    def __init__(self, Device device not None, ImageDescriptor descriptor not None):
        self.c = make_native[CImage](device.shared(), descriptor.c)

    @staticmethod
    def from_numpy(Device device not None, array):
        """A new batch on ``device`` holding a copy of an (N, C, H, W) array (float32, float16 or uint8; float64 is
        converted to float32). ValueError for another number of dimensions.

        MPS: -[MPSImage writeBytes:dataLayout:imageIndex:]
        """
        cdef ImageBatch batch = ImageBatch.__new__(ImageBatch)
        _from_numpy(&batch.c, device, array, True)
        return batch

    @staticmethod
    def from_dlpack(Device device not None, tensor, *, copy=None):
        """A batch of the N images of an (N, C, H, W) DLPack tensor, shared or copied as ``Image.from_dlpack``
        does.

        MPS: none (mpsx)
        """
        return _import_dlpack(device, tensor, ImportAs.ImageBatch, copy)

    def __len__(self):
        return self.native().number_of_images()

    def __getitem__(self, index):
        cdef int64_t n = self.native().number_of_images()
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError("image batches slice with step 1 only")
            return _view_batch(self, start, stop - start)
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"image batch indices must be ints or slices, given {type(index).__name__}") from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"image {index} of a batch of {n}")
        cdef Image item = wrap_image(make_native[CImage](self.native()[0], <int64_t>i, <int64_t>1))
        item.parent_ = self
        return item

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    @property
    def descriptor(self):
        """The descriptor of one image of the batch (``number_of_images`` 1).

        MPS: none (mpsx)
        """
        cdef ImageDescriptor d = wrap_descriptor(self.native().descriptor())
        d.c.number_of_images = 1
        return d


cdef class ImageAllocator:
    """ImageAllocator()
--

    The image allocator protocol: what makes the destination of an encode that returns an image (a kernel's
    ``destination_image_allocator``, a graph's ``destination_image_allocator``, an image node's ``image_allocator``).
    Subclass it, or write any class with ``image_for_command_buffer``; ``Image.default_allocator()`` and
    ``TemporaryImage.default_allocator()`` are MPS's two. An image it returns must be of the descriptor's size and
    images, float32 or float16, on the command buffer's device (else the encode raises, before anything is
    encoded); a temporary one must be of that command buffer.

    MPS: MPSImageAllocator
    """

    def image_for_command_buffer(self, CommandBuffer command_buffer not None, ImageDescriptor image_descriptor not None,
                                 kernel):
        """An Image (or ImageBatch) of ``image_descriptor`` (all its ``number_of_images``) for ``kernel`` to write on
        ``command_buffer``; a subclass must implement it (NotImplementedError here, except for the defaults).

        MPS: -[MPSImageAllocator imageForCommandBuffer:imageDescriptor:kernel:]
        """
        if not self.c:
            raise NotImplementedError(f"{type(self).__name__} must implement image_for_command_buffer()")
        return _wrap_images(self.c.get().make(command_buffer.native()[0], image_descriptor.c))

    def image_batch_for_command_buffer(self, CommandBuffer command_buffer not None,
                                       ImageDescriptor image_descriptor not None, kernel, count):
        """An ImageBatch of ``count`` images of ``image_descriptor``'s size (optional: where a class has it, an
        encode over several images calls it instead of ``image_for_command_buffer``). Here:
        ``image_for_command_buffer`` of the descriptor with ``count`` images.

        MPS: -[MPSImageAllocator imageBatchForCommandBuffer:imageDescriptor:kernel:count:]
        """
        cdef int64_t n = integer_argument(count, "count")
        if n < 1:
            raise ValueError(f"count must be 1 or more, given {n}")
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = image_descriptor.c
        d.c.number_of_images = n
        return self.image_for_command_buffer(command_buffer, d, kernel)

    def __eq__(self, other):
        if not isinstance(other, ImageAllocator) or not self.c or not (<ImageAllocator>other).c:
            return NotImplemented
        return self.c.get() == (<ImageAllocator>other).c.get()

    def __hash__(self):
        return hash(<size_t>self.c.get()) if self.c else object.__hash__(self)

    def __reduce__(self):
        return persistence_reduce(self)

    def __repr__(self):
        if not self.c:
            return object.__repr__(self)
        return f"<mpsx.{'TemporaryImage' if self.c.get().temporary() else 'Image'}.default_allocator()>"


cdef ImageAllocator wrap_image_allocator(const shared_ptr[CDefaultImageAllocator]& allocator):
    cdef ImageAllocator a = ImageAllocator.__new__(ImageAllocator)
    a.c = allocator
    return a


cdef object _wrap_images(const shared_ptr[CImage]& image):
    """An ImageBatch of a native image of several images, an Image (a TemporaryImage) of one."""
    if image.get().number_of_images() > 1:
        return wrap_image_batch(image)
    return wrap_image(image)

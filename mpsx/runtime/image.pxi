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

    def synchronize(self, CommandBuffer command_buffer not None):
        """Makes what ``command_buffer`` writes into the images readable on the host once it has completed.

        MPS: -[MPSImage synchronizeOnCommandBuffer:]
        """
        self.native().synchronize(command_buffer.native()[0])

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
    ``-[MPSImage initWithDevice:imageDescriptor:]``.

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
            return wrap_image_batch(make_native[CImage](self.native()[0], <int64_t>start, <int64_t>(stop - start)))
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"image batch indices must be ints or slices, given {type(index).__name__}") from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"image {index} of a batch of {n}")
        return wrap_image(make_native[CImage](self.native()[0], <int64_t>i, <int64_t>1))

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

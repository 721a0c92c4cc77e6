# cython: language_level=3, boundscheck=False, wraparound=False, binding=True
# binding=True: functions and methods are introspectable (inspect.signature). An extension class declares its
# constructor's signature as its docstring's first line, "Name(parameters)" then a "--" line (CPython's
# __text_signature__), for help() and inspect.signature; tests/test_typing.py checks it against __init__.
"""Kernel classes: MPSCNNKernel and MPSCNNGradientKernel families."""

import enum
import warnings
from collections import namedtuple

import numpy as np

from libc.stdint cimport int64_t, uint32_t
from libcpp.memory cimport dynamic_pointer_cast, shared_ptr
from mpsx.includes.errors cimport make_native
from libcpp.vector cimport vector

from mpsx.includes.capture cimport invalidate_captures
from mpsx.includes.checked cimport checked_parameter
from mpsx.includes.command_buffer cimport Encoding
from mpsx.includes.image cimport CImage
from mpsx.includes.kernel cimport BinarySource, CBinaryKernel, CGradientKernel, CKernel, CUnaryKernel, Encoded
from mpsx.includes.kernels.neuron cimport (
    CCNNNeuron, CCNNNeuronGradient, NeuronDescriptor as CNeuronDescriptor, NeuronType as CNeuronType)
from mpsx.includes.state cimport CGradientState, CState
from mpsx.includes.types cimport EdgeMode, Offset as COffset, Region as CRegion, kMaxDimension, kRectNoClip
from mpsx._runtime cimport (
    CommandBuffer, Communicator, Device, Image, ImageBatch, ImageDescriptor, State, float_argument, image_of, integer_argument, quoted, raise_uninitialized,
    uninitialized_repr, wrap_command_buffer, wrap_device, wrap_image, wrap_image_batch)

from mpsx._errors import DeviceMismatchError
from mpsx._runtime import StateBatch, _batch_of
from mpsx.persistence import (
    copy as persistence_copy, device_of, property_names, reduce as persistence_reduce, restore_properties)

cdef float parameter(const char* owner, object value, str name) except? -1:
    """``value`` as the floating-point parameter ``name`` of ``owner`` (an MPS class name): ValueError for NaN, and
    for an infinity except where it means something (native checked_parameter decides)."""
    cdef bytes name_bytes = name.encode()
    return checked_parameter(float_argument(value, name), owner, name_bytes)


# The public names of this module; each family's .pxi adds its own.
__all__ = ["CNNKernel", "CNNUnaryKernel", "CNNBinaryKernel", "CNNGradientKernel", "NNGradientState",
           "NNBinaryGradientState", "NNMultiaryGradientState", "ImageEdgeMode", "KernelOptions", "NNPaddingMethod",
           "NeuronType", "Offset", "Region"]


Offset = namedtuple("Offset", "x y z", defaults=(0, 0, 0), module="mpsx")
Offset.__doc__ = """Where a kernel's ``clip_rect.origin`` lands in a source image, in pixels; z is the first source
image read.

MPS: MPSOffset
"""

Region = namedtuple("Region", "x y z width height depth", module="mpsx")
Region.__doc__ = """A kernel's ``clip_rect``: the region of the destination written, x, y and width, height in pixels;
z is the first destination image and depth the number of images.

MPS: MTLRegion
"""

for _field, _doc in ((Offset.x, "The offset in x.\n\nMPS: MPSOffset.x"),
                     (Offset.y, "The offset in y.\n\nMPS: MPSOffset.y"),
                     (Offset.z, "The offset in images.\n\nMPS: MPSOffset.z"),
                     (Region.x, "The first column written.\n\nMPS: MTLRegion.origin.x"),
                     (Region.y, "The first row written.\n\nMPS: MTLRegion.origin.y"),
                     (Region.z, "The first image written.\n\nMPS: MTLRegion.origin.z"),
                     (Region.width, "The number of columns written.\n\nMPS: MTLRegion.size.width"),
                     (Region.height, "The number of rows written.\n\nMPS: MTLRegion.size.height"),
                     (Region.depth, "The number of images written.\n\nMPS: MTLRegion.size.depth")):
    _field.__doc__ = _doc


class ImageEdgeMode(enum.IntEnum):
    """What reads past the edge of a source image return: ZERO gives 0, CLAMP the nearest edge pixel. NNPad alone
    (other kernels raise ValueError) also takes MIRROR (mirrored about the edge pixel, which is not repeated),
    MIRROR_WITH_EDGE (mirrored about the image border, the edge pixel repeated) and CONSTANT (its fill value).

    MPS: MPSImageEdgeMode
    """
    ZERO = 0
    CLAMP = 1
    MIRROR = 2
    MIRROR_WITH_EDGE = 3
    CONSTANT = 4


class KernelOptions(enum.IntFlag):
    """The options of a kernel (``CNNKernel.options``). mpsx keeps them and applies none: docs/semantics.md says why
    for each.

    MPS: MPSKernelOptions
    """
    NONE = 0
    SKIP_API_VALIDATION = 1 << 0
    ALLOW_REDUCED_PRECISION = 1 << 1
    DISABLE_INTERNAL_TILING = 1 << 2
    INSERT_DEBUG_GROUPS = 1 << 3
    VERBOSE = 1 << 4


class NNPaddingMethod(enum.IntFlag):
    """The bits of a padding policy: how a kernel that makes its destination sizes it and places its windows.

    ALIGN_* and ADD_REMAINDER_TO_* place the windows, SIZE_* sizes the destination (valid only, same, full), CUSTOM
    has a padding object's own method (NNPadding) give the destination last (bits set alone: nothing more),
    CUSTOM_ALLOW_FOR_NODE_FUSION lets a graph fuse such a node all the same, and EXCLUDE_EDGES makes average pooling
    divide by the taps inside the source (Caffe). Values combine with ``|``.

    MPS: MPSNNPaddingMethod
    """
    ALIGN_CENTERED = 0
    ALIGN_TOP_LEFT = 1
    ALIGN_BOTTOM_RIGHT = 2
    ADD_REMAINDER_TO_TOP_LEFT = 0
    ADD_REMAINDER_TO_TOP_RIGHT = 1 << 2
    ADD_REMAINDER_TO_BOTTOM_LEFT = 2 << 2
    ADD_REMAINDER_TO_BOTTOM_RIGHT = 3 << 2
    SIZE_VALID_ONLY = 0
    SIZE_SAME = 1 << 4
    SIZE_FULL = 2 << 4
    CUSTOM_ALLOW_FOR_NODE_FUSION = 1 << 13
    CUSTOM = 1 << 14
    EXCLUDE_EDGES = 1 << 15


class NeuronType(enum.IntEnum):
    """The activation functions of CNNNeuron and fused neurons; ``a``, ``b`` and ``c`` of an NNNeuronDescriptor are
    their parameters as MPSCNNNeuronType.h defines them.

    MPS: MPSCNNNeuronType
    """
    NONE = 0
    RELU = 1
    LINEAR = 2
    SIGMOID = 3
    HARD_SIGMOID = 4
    TANH = 5
    ABSOLUTE = 6
    SOFTPLUS = 7
    SOFTSIGN = 8
    ELU = 9
    PRELU = 10
    RELUN = 11
    POWER = 12
    EXPONENTIAL = 13
    LOGARITHM = 14
    GELU = 15


cdef object _edge_mode_argument(object value, bint extended, const char* kernel, str name):
    """An ImageEdgeMode a kernel takes: ValueError for MIRROR, MIRROR_WITH_EDGE and CONSTANT unless ``extended``
    (MPSCoreTypes.h: "The only filter that currently supports this mode is MPSNNPad")."""
    mode = ImageEdgeMode(value)
    if mode > ImageEdgeMode.CLAMP and not extended:
        raise ValueError(f"{kernel.decode()}: {name} must be ZERO or CLAMP, given {mode.name}; MIRROR, "
                         f"MIRROR_WITH_EDGE and CONSTANT are NNPad's alone")
    return mode


cdef COffset _offset_argument(object value, str name) except *:
    """An MPSOffset from (x, y[, z]) of ints."""
    o = Offset(*value)
    cdef COffset offset
    offset.x = integer_argument(o.x, f"{name}.x")
    offset.y = integer_argument(o.y, f"{name}.y")
    offset.z = integer_argument(o.z, f"{name}.z")
    return offset


cdef shared_ptr[CState] _given_state(object destination_state, bint temporary, bint* want) except *:
    """The state an encode fills (null for a new one) and whether it returns one (``want``). Refuses
    destination_state_is_temporary (``temporary``) for a state the caller gave: it applies to a state the encode
    makes."""
    cdef shared_ptr[CState] given
    if destination_state is True:
        want[0] = True
    elif destination_state is False or destination_state is None:
        want[0] = False
    elif isinstance(destination_state, State):
        want[0] = True
        given = (<State>destination_state).shared()
    elif isinstance(destination_state, tuple) and destination_state and isinstance(destination_state[0], State):
        want[0] = True
        given = (<State>destination_state[0]).shared()
    else:
        raise TypeError(f"destination_state must be True, False or a state, given {type(destination_state).__name__}")
    if temporary and destination_state is not True:
        raise ValueError("destination_state_is_temporary=True applies to a state the encode makes "
                         "(destination_state=True); a given state stays as it was made")
    return given


cdef bint _returns_state(CommandBuffer command_buffer, CState* made, bint want, bint temporary):
    """Whether an encode returns the state it ``made`` (``want``); first makes that state temporary for
    ``command_buffer`` where ``temporary``."""
    if want and temporary:
        made.make_temporary(command_buffer.native()[0])
    return want


cdef object _temporary(CommandBuffer command_buffer, object state):
    """Makes ``state`` (a State or a StateBatch of one state), just made by a kernel, temporary for
    ``command_buffer``; returns it."""
    if state is None:
        return None
    cdef State one = state[0] if isinstance(state, tuple) else state
    command_buffer.native()[0].check_encodable()
    if &command_buffer.native()[0].device() != &one.native().device():
        raise DeviceMismatchError(f"the command buffer is on device {command_buffer.device.name}, the state on "
                                  f"device {one.device.name}")
    one.native().make_temporary(command_buffer.native()[0])
    return state


cdef object _one_of_batch(object images):
    """The image a result state is sized by, and the batch's length: a list's first Image, or the batch itself."""
    if isinstance(images, (list, tuple)):
        if not images:
            raise ValueError("expected source images, given an empty list")
        return images[0], len(images)
    if isinstance(images, (Image, ImageBatch)):
        return images, image_of(images).get().number_of_images()
    raise TypeError(f"expected an mpsx.ImageBatch or a list of mpsx.Image, given {type(images).__name__}")


cdef shared_ptr[CImage] _destination_image(Image image) except *:
    """The native image of an Image given as a destination, or null for None."""
    cdef shared_ptr[CImage] none
    if image is None:
        return none
    return image.shared()


cdef shared_ptr[CImage] _destination_batch(object images, str name) except *:
    """The native image of an ImageBatch given as a destination, or null for None."""
    cdef shared_ptr[CImage] none
    if images is None:
        return none
    if not isinstance(images, ImageBatch):
        raise TypeError(f"{name} must be an mpsx.ImageBatch, given {type(images).__name__}")
    return (<ImageBatch>images).shared()


cdef object _first_image(object source_images):
    """The image a destination descriptor query reads: the first of a list, or the batch."""
    if isinstance(source_images, (list, tuple)):
        if not source_images:
            raise ValueError("expected source images, given an empty list")
        return source_images[0]
    return source_images


cdef shared_ptr[CState] _state_of(object states, str name) except *:
    """The one state of a State or a StateBatch whose items are all that state."""
    if isinstance(states, State):
        return (<State>states).shared()
    if isinstance(states, (tuple, list)) and states:
        first = states[0]
        if not isinstance(first, State):
            raise TypeError(f"{name} must hold mpsx states, given {type(first).__name__}")
        for s in states:
            if s is not first:
                raise ValueError(f"the items of {name} must be the one state of the batch's forward encode")
        return (<State>first).shared()
    raise TypeError(f"expected a state or a StateBatch for {name}, given {type(states).__name__}")


cdef class _KernelState(State):
    """A state a kernel's encode made, which knows that kernel: the base of the gradient states."""
    cdef object _kernel  # the forward kernel that made it

    @property
    def kernel(self):
        """The forward kernel whose encode made this state.

        MPS: none (mpsx)
        """
        return self._kernel


cdef class NNGradientState(_KernelState):
    """The state a forward encode of a CNNUnaryKernel leaves for its gradient kernel: the forward geometry, and where
    the family needs it, what the forward pass computed. Made by kernels, never directly.

    MPS: MPSNNGradientState
    """


cdef class NNBinaryGradientState(_KernelState):
    """The state a forward encode of a CNNBinaryKernel leaves for its gradient kernels: the forward geometry and the
    shapes of both source images. Made by kernels, never directly; as in MPS it is not an NNGradientState.

    MPS: MPSNNBinaryGradientState
    """


cdef class NNMultiaryGradientState(_KernelState):
    """The state of a kernel of several source images (MPS's MPSCNNMultiaryKernel, which mpsx's kernels do not
    derive from): no mpsx kernel makes one yet; it is here for the class tree MPS has.

    MPS: MPSNNMultiaryGradientState
    """


cdef object _region_object(const CRegion& r):
    # A Region, or None for MPSRectNoClip.
    if r.width == kRectNoClip.width and r.height == kRectNoClip.height and r.depth == kRectNoClip.depth \
            and r.x == 0 and r.y == 0 and r.z == 0:
        return None
    return Region(r.x, r.y, r.z, r.width, r.height, r.depth)


cdef CRegion _region_argument(object value, str name) except *:
    # (x, y, z, width, height, depth) of ints, or None for MPSRectNoClip.
    if value is None:
        return kRectNoClip
    r = Region(*value) if len(value) == 6 else None
    if r is None:
        raise ValueError(f"{name} is (x, y, z, width, height, depth) or None")
    cdef CRegion region
    region.x = integer_argument(r.x, name + ".x")
    region.y = integer_argument(r.y, name + ".y")
    region.z = integer_argument(r.z, name + ".z")
    region.width = integer_argument(r.width, name + ".width")
    region.height = integer_argument(r.height, name + ".height")
    region.depth = integer_argument(r.depth, name + ".depth")
    return region


cdef class CNNKernel:
    """CNNKernel(*args, **kwargs)
--

    The base of every mpsx kernel: its device, label, and the geometry properties of MPSCNNKernel (offset,
    clip_rect, edge mode, padding policy, feature channel offsets). Abstract (TypeError).

    Kernels are saved, pickled and copied through ``mpsx.save``, ``pickle`` and ``copy(device)``.

    MPS: MPSKernel
    """
    cdef shared_ptr[CKernel] kernel
    cdef object state_class  # the NNGradientState subclass of the states its encodes make

    def __init__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} cannot be made directly")

    # The native kernel; raises for a kernel made without __init__. Each
    # subclass's typed accessor (unary_kernel(), ...) goes through it.
    cdef CKernel* native(self) except NULL:
        if not self.kernel:
            raise_uninitialized(self)
        return self.kernel.get()

    cdef object _wrap_state(self, const shared_ptr[CState]& state):
        cdef _KernelState s = self.state_class.__new__(self.state_class)
        s.c = state
        s._kernel = self
        return s

    def is_result_state_reused_across_batch(self):
        """True: an encode over a batch makes one state, and its StateBatch holds that state once per image (read
        counts change once per distinct state, as MPS's convention for shared states says).

        MPS: -[MPSCNNKernel isResultStateReusedAcrossBatch], -[MPSCNNBinaryKernel isResultStateReusedAcrossBatch]
        """
        self.native()
        return True

    def result_state_batch(self, *source_images, source_states=None, destination_images=None):
        """``result_state`` for an encode over batches (ImageBatches or lists of Images, as that encode takes them:
        a binary kernel's primary, then secondary): a StateBatch of one new state per image, all the same state, or
        None where the kernel makes no state.

        MPS: -[MPSCNNKernel resultStateBatchForSourceImage:sourceStates:destinationImage:], -[MPSCNNBinaryKernel resultStateBatchForPrimaryImage:secondaryImage:sourceStates:destinationImage:]
        """
        self.native()
        result_state = getattr(self, "result_state", None)
        if result_state is None:
            return None
        if not source_images:
            raise TypeError("result_state_batch needs the source images of the encode")
        firsts = [_one_of_batch(images) for images in source_images]
        state = result_state(*[first for first, _ in firsts], source_states=source_states)
        return None if state is None else StateBatch(state, firsts[0][1])

    def temporary_result_state(self, CommandBuffer command_buffer not None, *source_images, source_states=None,
                               destination_image=None):
        """``result_state`` made temporary for ``command_buffer``: valid only on it, until its ``read_count``
        (1; raise it for more reads) reaches 0. None where the kernel makes no state.

        MPS: -[MPSCNNKernel temporaryResultStateForCommandBuffer:sourceImage:sourceStates:destinationImage:], -[MPSCNNBinaryKernel temporaryResultStateForCommandBuffer:primaryImage:secondaryImage:sourceStates:destinationImage:]
        """
        self.native()
        result_state = getattr(self, "result_state", None)
        if result_state is None:
            return None
        return _temporary(command_buffer, result_state(*source_images, source_states=source_states))

    def temporary_result_state_batch(self, CommandBuffer command_buffer not None, *source_images, source_states=None,
                                     destination_images=None):
        """``result_state_batch`` made temporary for ``command_buffer``: one temporary state, once per image.

        MPS: -[MPSCNNKernel temporaryResultStateBatchForCommandBuffer:sourceImage:sourceStates:destinationImage:], -[MPSCNNBinaryKernel temporaryResultStateBatchForCommandBuffer:primaryImage:secondaryImage:sourceStates:destinationImage:]
        """
        return _temporary(command_buffer, self.result_state_batch(*source_images, source_states=source_states))

    _source_count = 1  # the source images of an encode

    cdef _check_sources(self, tuple source_images, destination, bint batch):
        """TypeError unless ``source_images`` are the encode's sources (Images, or for a batch ImageBatches or lists
        of Images) and ``destination`` None or of the same kind."""
        self.native()
        if len(source_images) != self._source_count:
            raise TypeError(f"{type(self).__name__} encodes {self._source_count} source image(s), given "
                            f"{len(source_images)}")
        for image in source_images + (() if destination is None else (destination,)):
            if batch:
                _one_of_batch(image)
            elif not isinstance(image, Image):
                raise TypeError(f"expected an mpsx.Image, given {type(image).__name__}")

    def encoding_storage_size(self, *source_images, source_states=None, destination_image=None):
        """The bytes of temporary heap storage an encode on ``source_images`` (a binary kernel's primary, then
        secondary image) allocates besides its destination and state: always 0, since no backend allocates per
        encode (docs/semantics.md). TypeError for the wrong number or kind of images.

        MPS: -[MPSCNNKernel encodingStorageSizeForSourceImage:sourceStates:destinationImage:], -[MPSCNNBinaryKernel encodingStorageSizeForPrimaryImage:secondaryImage:sourceStates:destinationImage:]
        """
        self._check_sources(source_images, destination_image, False)
        return 0

    def batch_encoding_storage_size(self, *source_images, source_states=None, destination_images=None):
        """``encoding_storage_size`` of an encode over batches (ImageBatches or lists of Images): always 0.

        MPS: -[MPSCNNKernel batchEncodingStorageSizeForSourceImage:sourceStates:destinationImage:], -[MPSCNNBinaryKernel batchEncodingStorageSizeForPrimaryImage:secondaryImage:sourceStates:destinationImage:]
        """
        self._check_sources(source_images, destination_images, True)
        return 0

    def append_batch_barrier(self):
        """Whether the kernel must see the whole batch before its results may be used: True for batch statistics
        (CNNBatchNormalizationStatistics and its gradient), else False. mpsx encodes a batch in one call and never
        splits it, so this changes nothing mpsx does.

        MPS: -[MPSCNNKernel appendBatchBarrier], -[MPSCNNBinaryKernel appendBatchBarrier]
        """
        return self.native().append_batch_barrier()

    @property
    def is_backwards(self):
        """Whether the kernel undoes a forward kernel's reduction, its strides being in the destination's frame:
        True for gradient kernels and CNNConvolutionTranspose, else False.

        MPS: MPSCNNKernel.isBackwards, MPSCNNBinaryKernel.isBackwards
        """
        return self.native().is_backwards()

    @property
    def is_state_modified(self):
        """Whether the encode writes the state it accepts: True for forward kernels (they fill their result state)
        and for the gradients that write their gradients there (convolution, fully connected and convolution
        transpose; batch, instance and group normalization); False for the other gradient kernels, which only read
        it.

        MPS: MPSCNNKernel.isStateModified, MPSCNNBinaryKernel.isStateModified
        """
        return self.native().is_state_modified()

    @property
    def options(self):
        """The kernel's KernelOptions (default NONE): kept, saved and copied, and applied to nothing
        (docs/semantics.md says why for each). ValueError for bits KernelOptions lacks.

        MPS: MPSKernel.options
        """
        return KernelOptions(self.native().options)

    @options.setter
    def options(self, value):
        cdef CKernel* kernel = self.native()
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"options must be KernelOptions, given {type(value).__name__}")
        all_options = 0
        for flag in KernelOptions:
            all_options |= int(flag)
        if value < 0 or value & ~all_options:
            raise ValueError(f"options must be KernelOptions bits (0 to {all_options}), given {value}")
        kernel.options = value

    @property
    def device(self):
        """The device the kernel encodes for.

        MPS: MPSKernel.device
        """
        return wrap_device(self.native().device_ptr())

    @property
    def offset(self):
        """Where ``clip_rect.origin`` lands in the source image: an Offset (x, y, z), z being the first source image
        read. Set it as a tuple of ints; an encode that returns a new image sets it from the padding policy.

        MPS: MPSCNNKernel.offset
        """
        o = self.native().offset
        return Offset(o.x, o.y, o.z)

    @offset.setter
    def offset(self, value):
        self.native().offset = _offset_argument(value, "offset")

    @property
    def clip_rect(self):
        """The region of the destination the kernel writes, a Region (x, y, z, width, height, depth: z is the first
        destination image and depth the number of images), or None for the whole destination.

        MPS: MPSCNNKernel.clipRect, MPSCNNBinaryKernel.clipRect
        """
        return _region_object(self.native().clip_rect)

    @clip_rect.setter
    def clip_rect(self, value):
        self.native().clip_rect = _region_argument(value, "clip_rect")

    @property
    def edge_mode(self):
        """What reads past the edge of the source return (an ImageEdgeMode; default ZERO).

        MPS: MPSCNNKernel.edgeMode
        """
        return ImageEdgeMode(<int>self.native().edge_mode)

    @edge_mode.setter
    def edge_mode(self, value):
        self.native().edge_mode = <EdgeMode><int>_edge_mode_argument(value, self.native().extended_edge_modes(),
                                                                     self.native().class_name(), "edge_mode")

    @property
    def destination_image_allocator(self):
        """What makes the destination of an encode that returns an image: ``Image.default_allocator()`` unless set
        (MPS's default is TemporaryImage's: mpsx's results are images the host may read, usable wherever a temporary
        one is), or an ImageAllocator of your own. None sets the default again.

        MPS: MPSCNNKernel.destinationImageAllocator, MPSCNNBinaryKernel.destinationImageAllocator
        """
        return image_allocator_value(self.native().destination_image_allocator, False)

    @destination_image_allocator.setter
    def destination_image_allocator(self, value):
        set_image_allocator(&self.native().destination_image_allocator, value, "destination_image_allocator")

    @property
    def padding(self):
        """The padding policy the encodes that return a new image use to size it and set ``offset``: NNPaddingMethod
        bits, or a padding object (an NNDefaultPadding, or an NNPadding of your own), read back as it was set.

        MPS: MPSCNNKernel.padding, MPSCNNBinaryKernel.padding
        """
        cdef CKernel* kernel = self.native()
        return padding_value(kernel.padding_method, kernel.padding_policy)

    @padding.setter
    def padding(self, value):
        cdef CKernel* kernel = self.native()
        set_padding(&kernel.padding_method, &kernel.padding_policy, value, "padding")

    @property
    def destination_feature_channel_offset(self):
        """The first feature channel of the destination the kernel writes (default 0): how concatenation writes its
        inputs side by side.

        MPS: MPSCNNKernel.destinationFeatureChannelOffset, MPSCNNBinaryKernel.destinationFeatureChannelOffset
        """
        return self.native().destination_feature_channel_offset

    @destination_feature_channel_offset.setter
    def destination_feature_channel_offset(self, value):
        self.native().destination_feature_channel_offset = integer_argument(value, "destination_feature_channel_offset")

    @property
    def source_feature_channel_offset(self):
        """The first feature channel of the source the kernel reads (default 0).

        MPS: MPSCNNKernel.sourceFeatureChannelOffset
        """
        return self.native().source_feature_channel_offset

    @source_feature_channel_offset.setter
    def source_feature_channel_offset(self, value):
        self.native().source_feature_channel_offset = integer_argument(value, "source_feature_channel_offset")

    @property
    def source_feature_channel_max_count(self):
        """The most feature channels of the source read from ``source_feature_channel_offset`` on; a larger value is
        truncated to the channels left there. Default all (2**63 - 1). Kernels whose result has a channel per channel
        read (neurons, pooling, normalizations, softmax, dropout, upsampling) give that many result channels; kernels
        of a fixed channel count (convolution, batch, instance and group normalization) need it to hold their count.

        MPS: MPSCNNKernel.sourceFeatureChannelMaxCount
        """
        return self.native().source_feature_channel_max_count

    @source_feature_channel_max_count.setter
    def source_feature_channel_max_count(self, value):
        # A count, never a flag: True would read one channel.
        if isinstance(value, bool):
            raise TypeError(f"source_feature_channel_max_count must be an int, given bool {value}")
        self.native().source_feature_channel_max_count = integer_argument(value, "source_feature_channel_max_count")

    @property
    def label(self):
        """A string that names the kernel (default ``""``).

        MPS: MPSKernel.label
        """
        return self.native().label.decode()

    @label.setter
    def label(self, value):
        self.native().label = str(value).encode()

    # ---- persistence: MPS's NSSecureCoding and copyWithZone:device: (mpsx/persistence.py)
    #
    # A kernel's state is its device, the rest of its constructor's arguments
    # (each class's _mpsx_arguments()) and the properties a user can set: each
    # class names its own in _mpsx_properties, and a kernel saves those of its
    # class and of every base class.

    _mpsx_properties = ("offset", "clip_rect", "edge_mode", "padding", "source_feature_channel_offset",
                        "source_feature_channel_max_count", "destination_feature_channel_offset", "label", "options")

    def _mpsx_arguments(self):
        """The constructor's arguments after the device: none unless a class says otherwise."""
        return ()

    def __mpsx_state__(self):
        self.native()
        return {"arguments": (self.device,) + tuple(self._mpsx_arguments()),
                "properties": {name: getattr(self, name) for name in property_names(type(self))}}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        kernel = cls(*state["arguments"])
        restore_properties(kernel, state["properties"], property_names(cls))
        kernel._mpsx_restored(state)
        return kernel

    def _mpsx_restored(self, state):
        """What a class restores after its properties (a convolution's current weights)."""
        pass

    def __reduce__(self):
        return persistence_reduce(self)

    def copy(self, device=None):
        """An independent copy of the kernel on ``device`` (default: this kernel's device, else the best one), made
        through its saved description: the data source and current weights are copied too.

        MPS: -[MPSKernel copyWithZone:device:]
        """
        return persistence_copy(self, device)

    def gradient_kernels(self):
        """The gradient kernels of this forward kernel, one per source image it reads (a binary kernel's primary, then
        its secondary), made with its parameters and data source, as the graph's ``gradient_filters_with_sources``
        makes them; ``[]`` where MPS has no gradient (comparison, division, loss).

        MPS: none (mpsx)
        """
        cdef vector[shared_ptr[CGradientKernel]] made = self.native().make_gradient_kernels()
        return [_wrap_gradient_kernel(made[i], self) for i in range(made.size())]

    def __repr__(self):
        if not self.kernel:
            return uninitialized_repr(self)
        return f"<mpsx.{type(self).__name__} on {self.device.name}>"


cdef object _encoded(CNNKernel kernel, CommandBuffer command_buffer, Encoded& r, bint want, bint temporary):
    """What encode returns: the destination image, with the state made where ``want`` (temporary for
    ``command_buffer`` where ``temporary``)."""
    out = wrap_image(r.image)
    if not _returns_state(command_buffer, r.state.get(), want, temporary):
        return out
    return out, kernel._wrap_state(r.state)


cdef object _encoded_batch(CNNKernel kernel, CommandBuffer command_buffer, Encoded& r, bint want, bint temporary):
    """What encode_batch returns: the destination ImageBatch, with a StateBatch of the state made where ``want``."""
    out = wrap_image_batch(r.image)
    if not _returns_state(command_buffer, r.state.get(), want, temporary):
        return out
    return out, StateBatch(kernel._wrap_state(r.state), r.image.get().number_of_images())


cdef class CNNUnaryKernel(CNNKernel):
    """A forward kernel of one source image: its encodes, result state and destination descriptor. Abstract
    (TypeError): each family's kernel derives from it.

    MPS: MPSCNNKernel
    """
    cdef CUnaryKernel* unary

    cdef _set(self, shared_ptr[CUnaryKernel] kernel, state_class):
        self.kernel = <shared_ptr[CKernel]>kernel
        self.unary = kernel.get()
        self.state_class = state_class

    cdef CUnaryKernel* unary_kernel(self) except NULL:
        self.native()
        return self.unary

    def encode(self, CommandBuffer command_buffer not None, Image source_image not None,
               Image destination_image=None, destination_state=False, destination_state_is_temporary=False):
        """Encodes the kernel on ``command_buffer`` for ``source_image``; returns the destination image, and with
        ``destination_state=True`` also the state its gradient needs (or pass a state made by ``result_state`` to
        fill that one), temporary for ``command_buffer`` with ``destination_state_is_temporary=True``.

        Without ``destination_image`` the padding policy sizes a new image and sets ``offset``, as MPS's encode that
        returns an image; with one the kernel writes into it. Raises before encoding anything for bad arguments.

        MPS: -[MPSCNNKernel encodeToCommandBuffer:sourceImage:destinationState:destinationStateIsTemporary:]
        """
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_state, destination_state_is_temporary, &want)
        cdef shared_ptr[CImage] destination = _destination_image(destination_image)
        cdef Encoded r = self.unary_kernel().encode(command_buffer.native()[0], source_image.shared(), destination, given, want)
        return _encoded(self, command_buffer, r, want, destination_state_is_temporary)

    def encode_batch(self, CommandBuffer command_buffer not None, source_images, destination_images=None,
                     destination_states=False, destination_state_is_temporary=False):
        """Encodes the kernel over a batch (an ImageBatch or a list of Images); returns an ImageBatch, and with
        ``destination_states=True`` also a StateBatch (one state, once per image), temporary for ``command_buffer``
        with ``destination_state_is_temporary=True``.

        MPS: -[MPSCNNKernel encodeBatchToCommandBuffer:sourceImages:destinationStates:destinationStateIsTemporary:]
        """
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_states, destination_state_is_temporary, &want)
        cdef shared_ptr[CImage] destination = _destination_batch(destination_images, "destination_images")
        # A list of images is gathered into a batch on the command buffer first.
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        cdef Encoded r = self.unary_kernel().encode(
            command_buffer.native()[0], image_of(_batch_of(command_buffer, source_images)), destination, given, want)
        encoding.complete()
        return _encoded_batch(self, command_buffer, r, want, destination_state_is_temporary)

    def result_state(self, source_image, source_states=None, destination_image=None):
        """A new state for ``encode(..., destination_state=state)`` on images like ``source_image``. ``source_states``
        and ``destination_image`` are accepted as in MPS and not needed.

        MPS: -[MPSCNNKernel resultStateForSourceImage:sourceStates:destinationImage:]
        """
        return self._wrap_state(self.unary_kernel().result_state(image_of(source_image).get()[0]))

    def destination_image_descriptor(self, source_images, source_states=None):
        """The descriptor of the destination an encode without one would make for ``source_images`` (an image, a batch
        or a list of images); unlike that encode, it leaves ``offset`` as it was.

        MPS: -[MPSCNNKernel destinationImageDescriptorForSourceImages:sourceStates:]
        """
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = self.unary_kernel().destination_image_descriptor(image_of(_first_image(source_images)).get()[0])
        return d


# MPSCNNBinaryKernel's properties of each source image, primary<Name> and secondary<Name>: each pair is one getter
# (and setter) over the BinarySource that CNNBinaryKernel.source(secondary) returns, the setter naming the property it
# sets in its errors.
ctypedef object (*SourceGetter)(CNNBinaryKernel kernel, bint secondary)
ctypedef int (*SourceSetter)(CNNBinaryKernel kernel, bint secondary, object value, str name) except -1


cdef class _SourceAccessor:
    """The fget and fset of one property of a binary kernel's primary or secondary source."""
    cdef SourceGetter getter
    cdef SourceSetter setter
    cdef bint secondary
    cdef str name

    def get(self, CNNBinaryKernel kernel):
        if self.getter is NULL:
            raise TypeError("this _SourceAccessor was not made by _source_properties")
        return self.getter(kernel, self.secondary)

    def set(self, CNNBinaryKernel kernel, value):
        if self.setter is NULL:
            raise AttributeError("this _SourceAccessor sets nothing (it is a read-only property's, or was not made by "
                                 "_source_properties)")
        self.setter(kernel, self.secondary, value, self.name)


cdef tuple _source_properties(str name, str doc, SourceGetter getter, SourceSetter setter=NULL):
    """(primary_<name>, secondary_<name>); ``{side}`` in ``doc`` names the image."""
    mps_name = "".join(word.capitalize() for word in name.split("_"))
    made = []
    cdef _SourceAccessor accessor
    for side in ("primary", "secondary"):
        accessor = _SourceAccessor.__new__(_SourceAccessor)
        accessor.getter = getter
        accessor.setter = setter
        accessor.secondary = side == "secondary"
        accessor.name = f"{side}_{name}"
        made.append(property(accessor.get, None if setter is NULL else accessor.set,
                             doc=doc.format(side=side) + f"\n\nMPS: MPSCNNBinaryKernel.{side}{mps_name}"))
    return tuple(made)


cdef object _offset(CNNBinaryKernel kernel, bint secondary):
    o = kernel.source(secondary).offset
    return Offset(o.x, o.y, o.z)


cdef int _set_offset(CNNBinaryKernel kernel, bint secondary, value, str name) except -1:
    kernel.source(secondary).offset = _offset_argument(value, name)


cdef object _edge_mode(CNNBinaryKernel kernel, bint secondary):
    return ImageEdgeMode(<int>kernel.source(secondary).edge_mode)


cdef int _set_edge_mode(CNNBinaryKernel kernel, bint secondary, value, str name) except -1:
    kernel.source(secondary).edge_mode = <EdgeMode><int>_edge_mode_argument(value, False, kernel.native().class_name(),
                                                                            name)


cdef object _stride_x(CNNBinaryKernel kernel, bint secondary):
    return kernel.source(secondary).stride_x


cdef int _set_stride_x(CNNBinaryKernel kernel, bint secondary, value, str name) except -1:
    kernel.source(secondary).stride_x = integer_argument(value, name)


cdef object _stride_y(CNNBinaryKernel kernel, bint secondary):
    return kernel.source(secondary).stride_y


cdef int _set_stride_y(CNNBinaryKernel kernel, bint secondary, value, str name) except -1:
    kernel.source(secondary).stride_y = integer_argument(value, name)


cdef object _feature_channel_offset(CNNBinaryKernel kernel, bint secondary):
    return kernel.source(secondary).feature_channel_offset


cdef int _set_feature_channel_offset(CNNBinaryKernel kernel, bint secondary, value, str name) except -1:
    kernel.source(secondary).feature_channel_offset = integer_argument(value, name)


cdef object _feature_channel_max_count(CNNBinaryKernel kernel, bint secondary):
    return kernel.source(secondary).feature_channel_max_count


cdef int _set_feature_channel_max_count(CNNBinaryKernel kernel, bint secondary, value, str name) except -1:
    kernel.source(secondary).feature_channel_max_count = integer_argument(value, name)


cdef object _kernel_width(CNNBinaryKernel kernel, bint secondary):
    return kernel.binary_kernel().kernel_width(secondary)


cdef object _kernel_height(CNNBinaryKernel kernel, bint secondary):
    return kernel.binary_kernel().kernel_height(secondary)


cdef object _dilation_rate_x(CNNBinaryKernel kernel, bint secondary):
    return kernel.binary_kernel().dilation_rate_x(secondary)


cdef object _dilation_rate_y(CNNBinaryKernel kernel, bint secondary):
    return kernel.binary_kernel().dilation_rate_y(secondary)


cdef class CNNBinaryKernel(CNNKernel):
    """A forward kernel of a primary and a secondary image, each with its own offset, edge mode, strides and feature
    channel slice. Abstract (TypeError): arithmetic and the gradient kernels derive from it.

    MPS: MPSCNNBinaryKernel
    """
    cdef CBinaryKernel* binary

    _source_count = 2

    cdef _set_binary(self, shared_ptr[CBinaryKernel] kernel, state_class):
        self.kernel = <shared_ptr[CKernel]>kernel
        self.binary = kernel.get()
        self.state_class = state_class

    cdef CBinaryKernel* binary_kernel(self) except NULL:
        self.native()
        return self.binary

    cdef BinarySource* source(self, bint secondary) except NULL:
        cdef CBinaryKernel* k = self.binary_kernel()
        return &k.secondary if secondary else &k.primary

    def encode(self, CommandBuffer command_buffer not None, Image primary_image not None,
               Image secondary_image not None, Image destination_image=None, destination_state=False,
               destination_state_is_temporary=False):
        """Encodes the kernel for ``primary_image`` and ``secondary_image``; returns the destination image, and with
        ``destination_state=True`` also the state its gradients need (or pass a state made by ``result_state``).

        Without ``destination_image`` a new one is made as ``destination_image_descriptor`` says; the offsets are
        used as set.

        MPS: -[MPSCNNBinaryKernel encodeToCommandBuffer:primaryImage:secondaryImage:destinationState:destinationStateIsTemporary:]
        """
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_state, destination_state_is_temporary, &want)
        cdef shared_ptr[CImage] destination = _destination_image(destination_image)
        cdef Encoded r = self.binary_kernel().encode(command_buffer.native()[0], primary_image.shared(),
                                                     secondary_image.shared(), destination, given, want)
        return _encoded(self, command_buffer, r, want, destination_state_is_temporary)

    def encode_batch(self, CommandBuffer command_buffer not None, primary_images, secondary_images,
                     destination_images=None, destination_states=False, destination_state_is_temporary=False):
        """Encodes the kernel over batches (ImageBatches or lists of Images); returns an ImageBatch, and with
        ``destination_states=True`` also a StateBatch, temporary with ``destination_state_is_temporary=True``.

        MPS: -[MPSCNNBinaryKernel encodeBatchToCommandBuffer:primaryImages:secondaryImages:destinationStates:destinationStateIsTemporary:]
        """
        cdef bint want = False
        cdef shared_ptr[CState] given = _given_state(destination_states, destination_state_is_temporary, &want)
        cdef shared_ptr[CImage] destination = _destination_batch(destination_images, "destination_images")
        # Lists of images are gathered into batches on the command buffer first.
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        cdef Encoded r = self.binary_kernel().encode(command_buffer.native()[0],
                                                     image_of(_batch_of(command_buffer, primary_images)),
                                                     image_of(_batch_of(command_buffer, secondary_images)),
                                                     destination, given, want)
        encoding.complete()
        return _encoded_batch(self, command_buffer, r, want, destination_state_is_temporary)

    def result_state(self, primary_image, secondary_image, source_states=None, destination_image=None):
        """A new state for ``encode(..., destination_state=state)`` on images like ``primary_image`` and
        ``secondary_image``. ``source_states`` and ``destination_image`` are accepted as in MPS and not needed.

        MPS: -[MPSCNNBinaryKernel resultStateForPrimaryImage:secondaryImage:sourceStates:destinationImage:]
        """
        return self._wrap_state(self.binary_kernel().result_state(image_of(primary_image).get()[0],
                                                                  image_of(secondary_image).get()[0]))

    def destination_image_descriptor(self, source_images, source_states=None):
        """The descriptor of the destination an encode without one would make; ``source_images`` is
        ``[primary, secondary]`` (Images or ImageBatches). ValueError for another length; no side effects.

        MPS: -[MPSCNNBinaryKernel destinationImageDescriptorForSourceImages:sourceStates:]
        """
        if not isinstance(source_images, (list, tuple)) or len(source_images) != 2:
            raise ValueError("source_images must be [primary_image, secondary_image]")
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = self.binary_kernel().destination_image_descriptor(image_of(source_images[0]).get()[0],
                                                                image_of(source_images[1]).get()[0])
        return d

    _mpsx_properties = (
        "primary_offset", "primary_edge_mode", "primary_stride_in_pixels_x", "primary_stride_in_pixels_y",
        "primary_source_feature_channel_offset", "primary_source_feature_channel_max_count",
        "secondary_offset", "secondary_edge_mode", "secondary_stride_in_pixels_x", "secondary_stride_in_pixels_y",
        "secondary_source_feature_channel_offset", "secondary_source_feature_channel_max_count")

    primary_offset, secondary_offset = _source_properties(
        "offset", "Where ``clip_rect.origin`` lands in the {side} image: an Offset (x, y, z), z being its first image. "
        "Set it as a tuple of ints.", _offset, _set_offset)
    primary_edge_mode, secondary_edge_mode = _source_properties(
        "edge_mode", "What reads past the edge of the {side} image return (an ImageEdgeMode; default ZERO).",
        _edge_mode, _set_edge_mode)
    primary_stride_in_pixels_x, secondary_stride_in_pixels_x = _source_properties(
        "stride_in_pixels_x", "The {side} image's stride in x (default 1); 0 broadcasts one column of it over the "
        "destination.", _stride_x, _set_stride_x)
    primary_stride_in_pixels_y, secondary_stride_in_pixels_y = _source_properties(
        "stride_in_pixels_y", "The {side} image's stride in y (default 1); 0 broadcasts one row of it over the "
        "destination.", _stride_y, _set_stride_y)
    primary_source_feature_channel_offset, secondary_source_feature_channel_offset = _source_properties(
        "source_feature_channel_offset", "The first feature channel of the {side} image the kernel reads (default 0).",
        _feature_channel_offset, _set_feature_channel_offset)
    primary_source_feature_channel_max_count, secondary_source_feature_channel_max_count = _source_properties(
        "source_feature_channel_max_count", "The most feature channels of the {side} image read from "
        "``{side}_source_feature_channel_offset`` on; default all (2**63 - 1).",
        _feature_channel_max_count, _set_feature_channel_max_count)
    primary_kernel_width, secondary_kernel_width = _source_properties(
        "kernel_width", "The width of the window the kernel reads of the {side} image per destination pixel: a "
        "gradient kernel's forward window for its secondary image, else 1.", _kernel_width)
    primary_kernel_height, secondary_kernel_height = _source_properties(
        "kernel_height", "The height of the window the kernel reads of the {side} image per destination pixel: a "
        "gradient kernel's forward window for its secondary image, else 1.", _kernel_height)
    primary_dilation_rate_x, secondary_dilation_rate_x = _source_properties(
        "dilation_rate_x", "The dilation in x of the window the kernel reads of the {side} image: a gradient kernel's "
        "forward dilation for its secondary image, else 1.", _dilation_rate_x)
    primary_dilation_rate_y, secondary_dilation_rate_y = _source_properties(
        "dilation_rate_y", "The dilation in y of the window the kernel reads of the {side} image: a gradient kernel's "
        "forward dilation for its secondary image, else 1.", _dilation_rate_y)

cdef class CNNGradientKernel(CNNBinaryKernel):
    """The backward pass of a forward kernel: a binary kernel whose primary image is the gradient of the forward result
    and whose secondary image is the forward source (for softmax and log-softmax, the forward result).

    The forward geometry comes from the gradient state at every encode; the primary and secondary properties,
    ``clip_rect`` and the kernel offsets keep their defaults. Abstract (TypeError).

    MPS: MPSCNNGradientKernel
    """
    cdef CGradientKernel* gradient

    cdef _set(self, shared_ptr[CGradientKernel] kernel):
        self.kernel = <shared_ptr[CKernel]>kernel
        self.binary = <CBinaryKernel*>kernel.get()
        self.gradient = kernel.get()

    cdef CGradientKernel* gradient_kernel(self) except NULL:
        self.native()
        return self.gradient

    # What a gradient kernel made by its forward kernel's gradient_kernels() keeps of it.
    cdef _made_from(self, CNNKernel forward):
        pass

    def result_state(self, *args, **kwargs):
        """None: gradient kernels make no result state (MPS returns nil).

        MPS: -[MPSCNNBinaryKernel resultStateForPrimaryImage:secondaryImage:sourceStates:destinationImage:]
        """
        self.native()
        return None

    def encode(self, CommandBuffer command_buffer not None, Image source_gradient not None,
               Image source_image not None, State gradient_state not None, Image destination_gradient=None):
        """Encodes the gradient with respect to the forward source: ``source_gradient`` is the gradient of the forward
        result, ``source_image`` the forward source and ``gradient_state`` the state the forward encode made.
        Returns ``destination_gradient``, or a new image the size of the forward source.

        MPS: -[MPSCNNGradientKernel encodeToCommandBuffer:sourceGradient:sourceImage:gradientState:destinationGradient:]
        """
        cdef shared_ptr[CImage] destination
        if destination_gradient is not None:
            destination = destination_gradient.shared()
        return wrap_image(self.gradient_kernel().encode(command_buffer.native()[0], source_gradient.shared(),
                                                        source_image.shared(), gradient_state.shared(), destination))

    def encode_batch(self, CommandBuffer command_buffer not None, source_gradients, source_images,
                     gradient_states, destination_gradients=None):
        """The same over batches (ImageBatches or lists of Images); ``gradient_states`` is the forward encode's
        StateBatch or its state. Returns an ImageBatch.

        MPS: -[MPSCNNGradientKernel encodeBatchToCommandBuffer:sourceGradients:sourceImages:gradientStates:destinationGradients:]
        """
        cdef shared_ptr[CState] state = _state_of(gradient_states, "gradient_states")
        cdef shared_ptr[CImage] destination = _destination_batch(destination_gradients, "destination_gradients")
        cdef shared_ptr[CImage] result
        cdef Encoding encoding
        encoding.begin(command_buffer.native()[0])
        result = self.gradient_kernel().encode(
            command_buffer.native()[0], image_of(_batch_of(command_buffer, source_gradients)),
            image_of(_batch_of(command_buffer, source_images)), state, destination)
        encoding.complete()
        return wrap_image_batch(result)

    def destination_image_descriptor(self, source_images, source_states):
        """The descriptor of the gradient of the forward source: its size, in the data type of the source gradient.
        ``source_images`` is ``[source_gradient, source_image]`` as MPS passes them, or the source gradient;
        ``source_states`` the gradient state.

        MPS: -[MPSCNNBinaryKernel destinationImageDescriptorForSourceImages:sourceStates:]
        """
        cdef shared_ptr[CImage] gradient = image_of(_first_image(source_images))
        cdef ImageDescriptor d = ImageDescriptor.__new__(ImageDescriptor)
        d.c = self.gradient_kernel().destination_image_descriptor(gradient.get()[0],
                                                                  _state_of(source_states, "source_states").get()[0])
        return d

    _mpsx_properties = ("kernel_offset_x", "kernel_offset_y")

    @property
    def kernel_offset_x(self):
        """An offset in x added to where each window is read (default 0): the effective offset is the source offset
        times the stride plus the kernel offset.

        MPS: MPSCNNGradientKernel.kernelOffsetX
        """
        return self.gradient_kernel().kernel_offset_x

    @kernel_offset_x.setter
    def kernel_offset_x(self, value):
        self.gradient_kernel().kernel_offset_x = integer_argument(value, "kernel_offset_x")

    @property
    def kernel_offset_y(self):
        """An offset in y added to where each window is read (default 0), as ``kernel_offset_x``.

        MPS: MPSCNNGradientKernel.kernelOffsetY
        """
        return self.gradient_kernel().kernel_offset_y

    @kernel_offset_y.setter
    def kernel_offset_y(self, value):
        self.gradient_kernel().kernel_offset_y = integer_argument(value, "kernel_offset_y")




cdef object _saved_data_source(kernel):
    """The data source a kernel's saved state names."""
    source = kernel.data_source
    if source is None:
        raise TypeError(f"mpsx.save: this {type(kernel).__name__} has no data source (an NNGraph's own kernel); "
                        f"save the graph instead")
    return source


# The Python class of each native kernel and filter node, by the MPS class name its class_name() returns; filled
# once, at the end of this module, from the public classes (each is its MPS class without "MPS"). A filter node a
# constructor made keeps the class that made it (NNFilterNode._made): the per-type neuron nodes share one native
# node.
cdef dict _wrapper_classes = {}


cdef object _wrapper_class(const char* class_name):
    cls = _wrapper_classes.get(class_name)
    if cls is None:
        name = class_name.decode()
        raise NotImplementedError(f"mpsx has no Python class for the native {name}")
    return cls


cdef object _wrap_kernel(const shared_ptr[CKernel]& made):
    """A new Python object of a native kernel's class for it (a graph's own kernel, say), made without __init__:
    its geometry, padding and family properties work; it holds no Python data source."""
    cls = _wrapper_class(made.get().class_name())
    cdef CNNKernel kernel = cls.__new__(cls)
    if isinstance(kernel, CNNGradientKernel):
        (<CNNGradientKernel>kernel)._set(dynamic_pointer_cast[CGradientKernel, CKernel](made))
    elif isinstance(kernel, CNNBinaryKernel):
        (<CNNBinaryKernel>kernel)._set_binary(dynamic_pointer_cast[CBinaryKernel, CKernel](made), NNBinaryGradientState)
    elif isinstance(kernel, CNNUnaryKernel):
        (<CNNUnaryKernel>kernel)._set(dynamic_pointer_cast[CUnaryKernel, CKernel](made), NNGradientState)
    else:
        kernel.kernel = made
    return kernel


# The Python class of each native state, by its MPS class name; filled with _wrapper_classes.
cdef dict _state_classes = {}


cdef object _wrap_any_state(const shared_ptr[CState]& state):
    """A new Python object of a native state's class (State where mpsx has none) for it."""
    cls = _state_classes.get(state.get().class_name(), State)
    cdef State s = cls.__new__(cls)
    s.c = state
    return s


cdef object _wrap_gradient_kernel(const shared_ptr[CGradientKernel]& made, CNNKernel forward):
    cls = _wrapper_class(made.get().class_name())
    cdef CNNGradientKernel kernel = cls.__new__(cls)
    kernel._set(made)
    kernel._made_from(forward)
    return kernel


# ---------------------------------------------------------------- families

include "kernels/padding.pxi"
include "kernels/image_allocator.pxi"
include "kernels/neuron.pxi"
include "kernels/convolution.pxi"
include "kernels/loss.pxi"
include "kernels/pooling.pxi"
include "kernels/optimizer.pxi"
include "kernels/convolution_transpose.pxi"
include "kernels/batch_normalization.pxi"
include "kernels/softmax.pxi"
include "kernels/dropout.pxi"
include "kernels/upsampling.pxi"
include "kernels/gram_matrix_calculation.pxi"
include "kernels/reshape.pxi"
include "kernels/arithmetic.pxi"
include "kernels/local_contrast_normalization.pxi"
include "kernels/cross_channel_normalization.pxi"
include "kernels/spatial_normalization.pxi"
include "kernels/group_normalization.pxi"
include "kernels/instance_normalization.pxi"
include "kernels/initial_gradient.pxi"

# ---------------------------------------------------------------- the graph

include "graph/graph.pxi"
include "graph/neuron.pxi"
include "graph/pooling.pxi"
include "graph/convolution.pxi"
include "graph/loss.pxi"
include "graph/arithmetic.pxi"
include "graph/softmax.pxi"
include "graph/dropout.pxi"
include "graph/upsampling.pxi"
include "graph/gram_matrix_calculation.pxi"
include "graph/reshape.pxi"
include "graph/cross_channel_normalization.pxi"
include "graph/spatial_normalization.pxi"
include "graph/local_contrast_normalization.pxi"
include "graph/batch_normalization.pxi"
include "graph/group_normalization.pxi"
include "graph/instance_normalization.pxi"
include "graph/concatenation.pxi"
include "graph/convolution_transpose.pxi"
include "graph/initial_gradient.pxi"
include "graph/reduction.pxi"
include "graph/scale.pxi"

for _name in __all__:
    _class = globals()[_name]
    if isinstance(_class, type) and issubclass(_class, (CNNKernel, NNFilterNode)):
        _wrapper_classes[("MPS" + _name).encode()] = _class
    elif isinstance(_class, type) and issubclass(_class, State):
        _state_classes[("MPS" + _name).encode()] = _class
del _name, _class

# MPSCNNDropout, MPSCNNDropoutGradient and MPSCNNDropoutGradientState (included by _kernels.pyx).

import operator

from libc.stdint cimport uint64_t
from mpsx.includes.kernels.dropout cimport (
    CCNNDropout, CCNNDropoutGradient, CDropoutGradientState, DropoutDescriptor as CDropoutDescriptor)

__all__ += ["CNNDropout", "CNNDropoutGradient", "CNNDropoutGradientState"]


cdef CDropoutDescriptor _dropout_descriptor(keep_probability, seed, mask_stride_in_pixels) except *:
    cdef CDropoutDescriptor d
    keep = float_argument(keep_probability, "keep_probability")
    d.keep_probability = keep
    if not (0.0 < keep <= 1.0) or not (0.0 < d.keep_probability <= 1.0):
        raise ValueError(f"keep_probability must be in (0, 1], given {keep_probability!r}")
    try:
        s = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be an int, given {type(seed).__name__} {seed!r}") from None
    if not 0 <= s < 2**64:
        raise ValueError(f"seed must be between 0 and 2**64 - 1, given {s}")
    d.seed = <uint64_t>s
    try:
        strides = tuple(mask_stride_in_pixels)
    except TypeError:
        raise TypeError(f"mask_stride_in_pixels must be a tuple (x, y, z) of 0 or 1, given "
                        f"{type(mask_stride_in_pixels).__name__}") from None
    if len(strides) != 3:
        raise ValueError(f"mask_stride_in_pixels must be (x, y, z), given {len(strides)} values")
    d.mask_stride_x = integer_argument(strides[0], "mask_stride_in_pixels.x")
    d.mask_stride_y = integer_argument(strides[1], "mask_stride_in_pixels.y")
    d.mask_stride_z = integer_argument(strides[2], "mask_stride_in_pixels.z")
    return d


cdef class CNNDropoutGradientState(NNGradientState):
    """The mask of one dropout forward encode, one state for its whole batch, with a mask for every element of
    every image; ``mask_data()`` after ``synchronize(cb)`` and completion.

    MPS: MPSCNNDropoutGradientState
    """

    def mask_data(self):
        """The mask as a uint8 array (images, feature channels, height, width) of the forward source, 1 where kept;
        ``mask_data()[i]`` is image i's. A dimension the mask broadcasts along has size 1. Raises
        SynchronizationError unless ``synchronize(cb)`` was encoded after the forward pass and the command buffer
        completed.

        MPS: -[MPSCNNDropoutGradientState maskData]
        """
        cdef CDropoutGradientState* s = <CDropoutGradientState*>self.native()
        out = np.empty((s.mask_images(), s.mask_channels(), s.mask_height(), s.mask_width()), dtype=np.uint8)
        cdef unsigned char[::1] raw = out.reshape(-1)
        s.read_mask(&raw[0])
        return out


cdef class CNNDropout(CNNUnaryKernel):
    """CNNDropout(device, keep_probability, seed, mask_stride_in_pixels=(1, 1, 1))
--

    Dropout: each value becomes ``x / keep_probability`` with probability ``keep_probability``, else 0, each
    element of each image kept or dropped independently, with new masks at every encode (Philox4x32-10 keyed by
    ``seed`` and the kernel's encode count: docs/semantics.md, "Dropout"). ``mask_stride_in_pixels`` is (x, y, z), each 0 or 1: 0 broadcasts the mask along x, y or
    the feature channels. ValueError for a keep probability outside (0, 1]. As
    ``-[MPSCNNDropout initWithDevice:keepProbability:seed:maskStrideInPixels:]``.

    MPS: MPSCNNDropout
    """

    def __init__(self, Device device not None, keep_probability, seed, mask_stride_in_pixels=(1, 1, 1)):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNDropout](
            device.shared(), _dropout_descriptor(keep_probability, seed, mask_stride_in_pixels)),
            CNNDropoutGradientState)

    def _mpsx_arguments(self):
        return (self.keep_probability, self.seed, self.mask_stride_in_pixels)

    @property
    def keep_probability(self):
        """The probability that a value is kept.

        MPS: MPSCNNDropout.keepProbability
        """
        return (<CCNNDropout*>self.unary_kernel()).dropout_descriptor().keep_probability

    @property
    def seed(self):
        """The seed of the mask's random numbers.

        MPS: MPSCNNDropout.seed
        """
        return (<CCNNDropout*>self.unary_kernel()).dropout_descriptor().seed

    @property
    def mask_stride_in_pixels(self):
        """The mask's strides (x, y, z), each 0 (broadcast) or 1.

        MPS: MPSCNNDropout.maskStrideInPixels
        """
        d = (<CCNNDropout*>self.unary_kernel()).dropout_descriptor()
        return (d.mask_stride_x, d.mask_stride_y, d.mask_stride_z)


cdef class CNNDropoutGradient(CNNGradientKernel):
    """CNNDropoutGradient(device, keep_probability, seed, mask_stride_in_pixels=(1, 1, 1))
--

    The gradient of CNNDropout: the incoming gradient through the forward pass's mask (from the gradient state),
    scaled by ``1 / keep_probability``. Takes the forward kernel's arguments. As
    ``-[MPSCNNDropoutGradient initWithDevice:keepProbability:seed:maskStrideInPixels:]``.

    MPS: MPSCNNDropoutGradient
    """

    def __init__(self, Device device not None, keep_probability, seed, mask_stride_in_pixels=(1, 1, 1)):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNDropoutGradient](
            device.shared(), _dropout_descriptor(keep_probability, seed, mask_stride_in_pixels)))

    def _mpsx_arguments(self):
        return (self.keep_probability, self.seed, self.mask_stride_in_pixels)

    @property
    def keep_probability(self):
        """The probability that a value is kept.

        MPS: MPSCNNDropoutGradient.keepProbability
        """
        return (<CCNNDropoutGradient*>self.gradient_kernel()).dropout_descriptor().keep_probability

    @property
    def seed(self):
        """The seed of the mask's random numbers.

        MPS: MPSCNNDropoutGradient.seed
        """
        return (<CCNNDropoutGradient*>self.gradient_kernel()).dropout_descriptor().seed

    @property
    def mask_stride_in_pixels(self):
        """The mask's strides (x, y, z), each 0 (broadcast) or 1.

        MPS: MPSCNNDropoutGradient.maskStrideInPixels
        """
        d = (<CCNNDropoutGradient*>self.gradient_kernel()).dropout_descriptor()
        return (d.mask_stride_x, d.mask_stride_y, d.mask_stride_z)

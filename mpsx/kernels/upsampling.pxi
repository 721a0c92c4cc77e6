# MPSCNNUpsamplingNearest / Bilinear and their gradients (included by _kernels.pyx).

from mpsx.includes.kernels.upsampling cimport (
    CCNNUpsampling, CCNNUpsamplingGradient, UpsamplingKind)

__all__ += ["CNNUpsampling", "CNNUpsamplingNearest", "CNNUpsamplingBilinear", "CNNUpsamplingGradient",
            "CNNUpsamplingNearestGradient", "CNNUpsamplingBilinearGradient"]


cdef int64_t _scale_factor(object value, str name) except? -1:
    # An int of at least 1: TypeError for anything not an int (2.0 included),
    # ValueError below 1.
    cdef int64_t scale = integer_argument(value, name)
    if scale < 1:
        raise ValueError(f"{name} must be an int of at least 1, given {scale}")
    return scale


cdef bint _align_corners(object value) except -1:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"align_corners must be a bool, given {type(value).__name__} {value!r}")
    return bool(value)


cdef tuple _upsampling_arguments(kernel):
    # The integer scale factors, and align_corners where the constructor takes it (bilinear).
    scales = (int(kernel.scale_factor_x), int(kernel.scale_factor_y))
    if isinstance(kernel, (CNNUpsamplingBilinear, CNNUpsamplingBilinearGradient)):
        return scales + (kernel.align_corners,)
    return scales


cdef class CNNUpsampling(CNNUnaryKernel):
    """The base of the upsampling kernels: each source image scaled up by integer factors. Abstract (TypeError).

    MPS: MPSCNNUpsampling
    """

    cdef CCNNUpsampling* _upsampling(self) except NULL:
        return <CCNNUpsampling*>self.unary_kernel()

    def _mpsx_arguments(self):
        return _upsampling_arguments(self)

    @property
    def scale_factor_x(self):
        """The factor the width is scaled by (an integer, as a float).

        MPS: MPSCNNUpsampling.scaleFactorX
        """
        return float(self._upsampling().scale_factor_x())

    @property
    def scale_factor_y(self):
        """The factor the height is scaled by (an integer, as a float).

        MPS: MPSCNNUpsampling.scaleFactorY
        """
        return float(self._upsampling().scale_factor_y())

    @property
    def align_corners(self):
        """Whether the corner pixel centres of source and destination align (bilinear only; False for nearest).

        MPS: MPSCNNUpsampling.alignCorners
        """
        return self._upsampling().align_corners()


cdef class CNNUpsamplingNearest(CNNUpsampling):
    """CNNUpsamplingNearest(device, integer_scale_factor_x, integer_scale_factor_y)
--

    Nearest-neighbour upsampling: each source pixel repeated over an ``integer_scale_factor_x`` x
    ``integer_scale_factor_y`` block. TypeError for factors that are not ints, ValueError below 1. As
    ``-[MPSCNNUpsamplingNearest initWithDevice:integerScaleFactorX:integerScaleFactorY:]``.

    MPS: MPSCNNUpsamplingNearest
    """

    def __init__(self, Device device not None, integer_scale_factor_x, integer_scale_factor_y):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNUpsampling](
            device.shared(), UpsamplingKind.Nearest, _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
            _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), False), NNGradientState)


cdef class CNNUpsamplingBilinear(CNNUpsampling):
    """CNNUpsamplingBilinear(device, integer_scale_factor_x, integer_scale_factor_y, align_corners=False)
--

    Bilinear upsampling by integer factors, as ``torch.nn.functional.interpolate(mode="bilinear")``; with
    ``align_corners`` the corner pixel centres of source and destination align. TypeError for factors that are not
    ints, ValueError below 1. As
    ``-[MPSCNNUpsamplingBilinear initWithDevice:integerScaleFactorX:integerScaleFactorY:alignCorners:]``.

    MPS: MPSCNNUpsamplingBilinear
    """

    def __init__(self, Device device not None, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNUpsampling](
            device.shared(), UpsamplingKind.Bilinear, _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
            _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), _align_corners(align_corners)),
            NNGradientState)


cdef class CNNUpsamplingGradient(CNNGradientKernel):
    """The base of the upsampling gradients: the transpose of the forward interpolation. Abstract (TypeError).

    MPS: MPSCNNUpsamplingGradient
    """

    cdef CCNNUpsamplingGradient* _upsampling(self) except NULL:
        return <CCNNUpsamplingGradient*>self.gradient_kernel()

    def _mpsx_arguments(self):
        return _upsampling_arguments(self)

    @property
    def scale_factor_x(self):
        """The forward factor in x (an integer, as a float).

        MPS: MPSCNNUpsamplingGradient.scaleFactorX
        """
        return float(self._upsampling().scale_factor_x())

    @property
    def scale_factor_y(self):
        """The forward factor in y (an integer, as a float).

        MPS: MPSCNNUpsamplingGradient.scaleFactorY
        """
        return float(self._upsampling().scale_factor_y())

    @property
    def align_corners(self):
        """Whether the forward interpolation aligned the corners (bilinear only; MPS's gradient has no such property).

        MPS: none (mpsx)
        """
        return self._upsampling().align_corners()


cdef class CNNUpsamplingNearestGradient(CNNUpsamplingGradient):
    """CNNUpsamplingNearestGradient(device, integer_scale_factor_x, integer_scale_factor_y)
--

    The gradient of CNNUpsamplingNearest: the sum of the incoming gradient over each block. As
    ``-[MPSCNNUpsamplingNearestGradient initWithDevice:integerScaleFactorX:integerScaleFactorY:]``.

    MPS: MPSCNNUpsamplingNearestGradient
    """

    def __init__(self, Device device not None, integer_scale_factor_x, integer_scale_factor_y):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNUpsamplingGradient](
            device.shared(), UpsamplingKind.Nearest, _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
            _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), False))


cdef class CNNUpsamplingBilinearGradient(CNNUpsamplingGradient):
    """CNNUpsamplingBilinearGradient(device, integer_scale_factor_x, integer_scale_factor_y, align_corners=False)
--

    The gradient of CNNUpsamplingBilinear: the transpose of the bilinear interpolation. MPS's class has no
    ``align_corners``; mpsx adds it, default False (docs/semantics.md). As
    ``-[MPSCNNUpsamplingBilinearGradient initWithDevice:integerScaleFactorX:integerScaleFactorY:]``.

    MPS: MPSCNNUpsamplingBilinearGradient
    """

    def __init__(self, Device device not None, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNUpsamplingGradient](
            device.shared(), UpsamplingKind.Bilinear, _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
            _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), _align_corners(align_corners)))

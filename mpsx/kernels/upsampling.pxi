# MPSCNNUpsamplingNearest / Bilinear and their gradients (included by _kernels.pyx).

from mpsx.includes.kernels.upsampling cimport (
    CCNNUpsampling, CCNNUpsamplingGradient, UpsamplingKind, make_cnn_upsampling, make_cnn_upsampling_gradient)

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
    """MPSCNNUpsampling: each source image scaled up by integer factors."""

    cdef CCNNUpsampling* _upsampling(self) except NULL:
        return <CCNNUpsampling*>self.unary_kernel()

    def _mpsx_arguments(self):
        return _upsampling_arguments(self)

    @property
    def scale_factor_x(self):
        return float(self._upsampling().scale_factor_x())

    @property
    def scale_factor_y(self):
        return float(self._upsampling().scale_factor_y())

    @property
    def align_corners(self):
        return self._upsampling().align_corners()


cdef class CNNUpsamplingNearest(CNNUpsampling):
    """MPSCNNUpsamplingNearest(device, integer_scale_factor_x, integer_scale_factor_y):
    each source pixel repeated over a scale_x x scale_y block."""

    def __init__(self, Device device not None, integer_scale_factor_x, integer_scale_factor_y):
        self._set(<shared_ptr[CUnaryKernel]>make_cnn_upsampling(
            device.shared(), UpsamplingKind.Nearest, _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
            _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), False), NNGradientState)


cdef class CNNUpsamplingBilinear(CNNUpsampling):
    """MPSCNNUpsamplingBilinear(device, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
    bilinear interpolation, as torch.nn.functional.interpolate(mode="bilinear")."""

    def __init__(self, Device device not None, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
        self._set(<shared_ptr[CUnaryKernel]>make_cnn_upsampling(
            device.shared(), UpsamplingKind.Bilinear, _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
            _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), _align_corners(align_corners)),
            NNGradientState)


cdef class CNNUpsamplingGradient(CNNGradientKernel):
    """MPSCNNUpsamplingGradient: the transpose of the forward interpolation."""

    cdef CCNNUpsamplingGradient* _upsampling(self) except NULL:
        return <CCNNUpsamplingGradient*>self.gradient_kernel()

    def _mpsx_arguments(self):
        return _upsampling_arguments(self)

    @property
    def scale_factor_x(self):
        return float(self._upsampling().scale_factor_x())

    @property
    def scale_factor_y(self):
        return float(self._upsampling().scale_factor_y())

    @property
    def align_corners(self):
        return self._upsampling().align_corners()


cdef class CNNUpsamplingNearestGradient(CNNUpsamplingGradient):
    """MPSCNNUpsamplingNearestGradient(device, integer_scale_factor_x, integer_scale_factor_y):
    the sum of the incoming gradient over each block."""

    def __init__(self, Device device not None, integer_scale_factor_x, integer_scale_factor_y):
        self._set(<shared_ptr[CGradientKernel]>make_cnn_upsampling_gradient(
            device.shared(), UpsamplingKind.Nearest, _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
            _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), False))


cdef class CNNUpsamplingBilinearGradient(CNNUpsamplingGradient):
    """MPSCNNUpsamplingBilinearGradient(device, integer_scale_factor_x, integer_scale_factor_y,
    align_corners=False): the transpose of the bilinear interpolation. MPS's class has no
    align_corners; mpsx adds it, defaulting to False (docs/semantics.md)."""

    def __init__(self, Device device not None, integer_scale_factor_x, integer_scale_factor_y, align_corners=False):
        self._set(<shared_ptr[CGradientKernel]>make_cnn_upsampling_gradient(
            device.shared(), UpsamplingKind.Bilinear, _scale_factor(integer_scale_factor_x, "integer_scale_factor_x"),
            _scale_factor(integer_scale_factor_y, "integer_scale_factor_y"), _align_corners(align_corners)))

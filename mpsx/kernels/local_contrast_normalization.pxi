# MPSCNNLocalContrastNormalization and its gradient (included by _kernels.pyx).

from mpsx.includes.kernels.local_contrast_normalization cimport (
    CCNNLocalContrastNormalization, CCNNLocalContrastNormalizationGradient, LocalContrastNormalizationParameters)

__all__ += ["CNNLocalContrastNormalization", "CNNLocalContrastNormalizationGradient"]


cdef class CNNLocalContrastNormalization(CNNUnaryKernel):
    """MPSCNNLocalContrastNormalization(device, kernel_width, kernel_height), width == height.

    Per feature channel, with the mean M and variance VAR of the kernel_width x kernel_height window
    around each pixel (pixels off the source read 0 with edge_mode ZERO, the nearest pixel of the
    source image with CLAMP; both divide by kernel_width * kernel_height):
    y = pm + ps * (x - p0 * M) / (delta + alpha * VAR)^beta. Kernel defaults: alpha 0, beta 0.5,
    delta 1/1024, p0 1, pm 0, ps 1.
    """

    def __init__(self, Device device not None, kernel_width, kernel_height):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNLocalContrastNormalization](
            device.shared(), integer_argument(kernel_width, "kernel_width"),
            integer_argument(kernel_height, "kernel_height")), NNGradientState)

    _mpsx_properties = ("alpha", "beta", "delta", "p0", "pm", "ps")

    def _mpsx_arguments(self):
        return (self.kernel_width, self.kernel_height)

    cdef CCNNLocalContrastNormalization* lcn(self) except NULL:
        return <CCNNLocalContrastNormalization*>self.unary_kernel()

    @property
    def kernel_width(self):
        return self.lcn().lcn_kernel_width()

    @property
    def kernel_height(self):
        return self.lcn().lcn_kernel_height()

    @property
    def alpha(self):
        return self.lcn().parameters.alpha

    @alpha.setter
    def alpha(self, float value):
        self.lcn().parameters.alpha = value

    @property
    def beta(self):
        return self.lcn().parameters.beta

    @beta.setter
    def beta(self, float value):
        self.lcn().parameters.beta = value

    @property
    def delta(self):
        return self.lcn().parameters.delta

    @delta.setter
    def delta(self, float value):
        self.lcn().parameters.delta = value

    @property
    def p0(self):
        return self.lcn().parameters.p0

    @p0.setter
    def p0(self, float value):
        self.lcn().parameters.p0 = value

    @property
    def pm(self):
        return self.lcn().parameters.pm

    @pm.setter
    def pm(self, float value):
        self.lcn().parameters.pm = value

    @property
    def ps(self):
        return self.lcn().parameters.ps

    @ps.setter
    def ps(self, float value):
        self.lcn().parameters.ps = value


cdef class CNNLocalContrastNormalizationGradient(CNNGradientKernel):
    """MPSCNNLocalContrastNormalizationGradient(device, kernel_width, kernel_height): the exact
    derivative of CNNLocalContrastNormalization's formula, computed with this kernel's properties
    and edge_mode (set them as on the forward kernel; gradient_kernels() does); the state must come
    from a forward kernel of the same size.
    """

    def __init__(self, Device device not None, kernel_width, kernel_height):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNLocalContrastNormalizationGradient](
            device.shared(), integer_argument(kernel_width, "kernel_width"),
            integer_argument(kernel_height, "kernel_height")))

    _mpsx_properties = ("alpha", "beta", "delta", "p0", "pm", "ps")

    def _mpsx_arguments(self):
        return (self.kernel_width, self.kernel_height)

    cdef CCNNLocalContrastNormalizationGradient* lcn(self) except NULL:
        return <CCNNLocalContrastNormalizationGradient*>self.gradient_kernel()

    @property
    def kernel_width(self):
        return self.lcn().lcn_kernel_width()

    @property
    def kernel_height(self):
        return self.lcn().lcn_kernel_height()

    @property
    def alpha(self):
        return self.lcn().parameters.alpha

    @alpha.setter
    def alpha(self, float value):
        self.lcn().parameters.alpha = value

    @property
    def beta(self):
        return self.lcn().parameters.beta

    @beta.setter
    def beta(self, float value):
        self.lcn().parameters.beta = value

    @property
    def delta(self):
        return self.lcn().parameters.delta

    @delta.setter
    def delta(self, float value):
        self.lcn().parameters.delta = value

    @property
    def p0(self):
        return self.lcn().parameters.p0

    @p0.setter
    def p0(self, float value):
        self.lcn().parameters.p0 = value

    @property
    def pm(self):
        return self.lcn().parameters.pm

    @pm.setter
    def pm(self, float value):
        self.lcn().parameters.pm = value

    @property
    def ps(self):
        return self.lcn().parameters.ps

    @ps.setter
    def ps(self, float value):
        self.lcn().parameters.ps = value

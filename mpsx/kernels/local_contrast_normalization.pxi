# MPSCNNLocalContrastNormalization and its gradient (included by _kernels.pyx).

from mpsx.includes.kernels.local_contrast_normalization cimport (
    CCNNLocalContrastNormalization, CCNNLocalContrastNormalizationGradient, LocalContrastNormalizationParameters)

__all__ += ["CNNLocalContrastNormalization", "CNNLocalContrastNormalizationGradient"]


cdef class CNNLocalContrastNormalization(CNNUnaryKernel):
    """CNNLocalContrastNormalization(device, kernel_width, kernel_height)
--

    Local contrast normalization, per feature channel: with the mean M and variance VAR of the ``kernel_width`` x
    ``kernel_height`` window around each pixel (pixels off the source read 0 with edge_mode ZERO, the nearest pixel
    of the source image with CLAMP; both divide by ``kernel_width * kernel_height``),
    ``y = pm + ps * (x - p0 * M) / (delta + alpha * VAR)^beta``. ``kernel_width`` must equal ``kernel_height``. As
    ``-[MPSCNNLocalContrastNormalization initWithDevice:kernelWidth:kernelHeight:]``.

    MPS: MPSCNNLocalContrastNormalization
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
        """The width of the window.

        MPS: MPSCNNKernel.kernelWidth
        """
        return self.lcn().lcn_kernel_width()

    @property
    def kernel_height(self):
        """The height of the window.

        MPS: MPSCNNKernel.kernelHeight
        """
        return self.lcn().lcn_kernel_height()

    @property
    def alpha(self):
        """The scale of the window's variance (default 0).

        MPS: MPSCNNLocalContrastNormalization.alpha
        """
        return self.lcn().parameters.alpha

    @alpha.setter
    def alpha(self, float value):
        self.lcn().parameters.alpha = parameter(self.lcn().class_name(), value, "alpha")

    @property
    def beta(self):
        """The exponent of the denominator (default 0.5).

        MPS: MPSCNNLocalContrastNormalization.beta
        """
        return self.lcn().parameters.beta

    @beta.setter
    def beta(self, float value):
        self.lcn().parameters.beta = parameter(self.lcn().class_name(), value, "beta")

    @property
    def delta(self):
        """The offset of the denominator (default 1/1024).

        MPS: MPSCNNLocalContrastNormalization.delta
        """
        return self.lcn().parameters.delta

    @delta.setter
    def delta(self, float value):
        self.lcn().parameters.delta = parameter(self.lcn().class_name(), value, "delta")

    @property
    def p0(self):
        """The factor of the mean subtracted (default 1).

        MPS: MPSCNNLocalContrastNormalization.p0
        """
        return self.lcn().parameters.p0

    @p0.setter
    def p0(self, float value):
        self.lcn().parameters.p0 = parameter(self.lcn().class_name(), value, "p0")

    @property
    def pm(self):
        """The offset of the result (default 0).

        MPS: MPSCNNLocalContrastNormalization.pm
        """
        return self.lcn().parameters.pm

    @pm.setter
    def pm(self, float value):
        self.lcn().parameters.pm = parameter(self.lcn().class_name(), value, "pm")

    @property
    def ps(self):
        """The scale of the result (default 1).

        MPS: MPSCNNLocalContrastNormalization.ps
        """
        return self.lcn().parameters.ps

    @ps.setter
    def ps(self, float value):
        self.lcn().parameters.ps = parameter(self.lcn().class_name(), value, "ps")


cdef class CNNLocalContrastNormalizationGradient(CNNGradientKernel):
    """CNNLocalContrastNormalizationGradient(device, kernel_width, kernel_height)
--

    The gradient of CNNLocalContrastNormalization: the exact derivative of its formula (the header's has a typo),
    computed with this kernel's properties and edge_mode (set them as on the forward kernel; ``gradient_kernels()``
    does); the state must come from a forward kernel of the same size. As
    ``-[MPSCNNLocalContrastNormalizationGradient initWithDevice:kernelWidth:kernelHeight:]``.

    MPS: MPSCNNLocalContrastNormalizationGradient
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
        """The width of the forward window.

        MPS: MPSCNNBinaryKernel.secondaryKernelWidth
        """
        return self.lcn().lcn_kernel_width()

    @property
    def kernel_height(self):
        """The height of the forward window.

        MPS: MPSCNNBinaryKernel.secondaryKernelHeight
        """
        return self.lcn().lcn_kernel_height()

    @property
    def alpha(self):
        """The scale of the window's variance (default 0); set it as on the forward kernel.

        MPS: MPSCNNLocalContrastNormalizationGradient.alpha
        """
        return self.lcn().parameters.alpha

    @alpha.setter
    def alpha(self, float value):
        self.lcn().parameters.alpha = parameter(self.lcn().class_name(), value, "alpha")

    @property
    def beta(self):
        """The exponent of the denominator (default 0.5); set it as on the forward kernel.

        MPS: MPSCNNLocalContrastNormalizationGradient.beta
        """
        return self.lcn().parameters.beta

    @beta.setter
    def beta(self, float value):
        self.lcn().parameters.beta = parameter(self.lcn().class_name(), value, "beta")

    @property
    def delta(self):
        """The offset of the denominator (default 1/1024); set it as on the forward kernel.

        MPS: MPSCNNLocalContrastNormalizationGradient.delta
        """
        return self.lcn().parameters.delta

    @delta.setter
    def delta(self, float value):
        self.lcn().parameters.delta = parameter(self.lcn().class_name(), value, "delta")

    @property
    def p0(self):
        """The factor of the mean subtracted (default 1); set it as on the forward kernel.

        MPS: MPSCNNLocalContrastNormalizationGradient.p0
        """
        return self.lcn().parameters.p0

    @p0.setter
    def p0(self, float value):
        self.lcn().parameters.p0 = parameter(self.lcn().class_name(), value, "p0")

    @property
    def pm(self):
        """The offset of the result (default 0); set it as on the forward kernel.

        MPS: MPSCNNLocalContrastNormalizationGradient.pm
        """
        return self.lcn().parameters.pm

    @pm.setter
    def pm(self, float value):
        self.lcn().parameters.pm = parameter(self.lcn().class_name(), value, "pm")

    @property
    def ps(self):
        """The scale of the result (default 1); set it as on the forward kernel.

        MPS: MPSCNNLocalContrastNormalizationGradient.ps
        """
        return self.lcn().parameters.ps

    @ps.setter
    def ps(self, float value):
        self.lcn().parameters.ps = parameter(self.lcn().class_name(), value, "ps")

# MPSCNNSpatialNormalization and its gradient (included by _kernels.pyx).

from mpsx.includes.kernels.spatial_normalization cimport (
    CCNNSpatialNormalization, CCNNSpatialNormalizationGradient, CSpatialNormalizationProperties)

__all__ += ["CNNSpatialNormalization", "CNNSpatialNormalizationGradient"]


cdef class CNNSpatialNormalization(CNNUnaryKernel):
    """CNNSpatialNormalization(device, kernel_width, kernel_height)
--

    Spatial normalization, per feature channel: ``y = x / T^beta`` with ``T = delta + alpha/(k*k)`` times the sum of
    ``x^2`` over the k x k window (rows and columns ``[i - k//2, i + (k-1)//2]``); pixels off the source read 0
    (edge_mode ZERO) or the nearest pixel of the source image (CLAMP). ``kernel_width`` must equal
    ``kernel_height``. As ``-[MPSCNNSpatialNormalization initWithDevice:kernelWidth:kernelHeight:]``.

    MPS: MPSCNNSpatialNormalization
    """

    def __init__(self, Device device not None, kernel_width, kernel_height):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNSpatialNormalization](
            device.shared(), integer_argument(kernel_width, "kernel_width"),
            integer_argument(kernel_height, "kernel_height")), NNGradientState)

    _mpsx_properties = ("alpha", "beta", "delta")

    def _mpsx_arguments(self):
        return (self.kernel_width, self.kernel_height)

    cdef CSpatialNormalizationProperties* properties(self) except NULL:
        return <CSpatialNormalizationProperties*><CCNNSpatialNormalization*>self.unary_kernel()

    @property
    def kernel_width(self):
        """The width of the window.

        MPS: MPSCNNKernel.kernelWidth
        """
        return self.properties().kernel_size()

    @property
    def kernel_height(self):
        """The height of the window.

        MPS: MPSCNNKernel.kernelHeight
        """
        return self.properties().kernel_size()

    @property
    def alpha(self):
        """The scale of the window's sum of squares (default 1; it must not be negative).

        MPS: MPSCNNSpatialNormalization.alpha
        """
        return self.properties().alpha()

    @alpha.setter
    def alpha(self, value):
        self.properties().set_alpha(float_argument(value, "alpha"))

    @property
    def beta(self):
        """The exponent of the denominator (default 5).

        MPS: MPSCNNSpatialNormalization.beta
        """
        return self.properties().beta()

    @beta.setter
    def beta(self, value):
        self.properties().set_beta(float_argument(value, "beta"))

    @property
    def delta(self):
        """The offset of the denominator (default 1).

        MPS: MPSCNNSpatialNormalization.delta
        """
        return self.properties().delta()

    @delta.setter
    def delta(self, value):
        self.properties().set_delta(float_argument(value, "delta"))


cdef class CNNSpatialNormalizationGradient(CNNGradientKernel):
    """CNNSpatialNormalizationGradient(device, kernel_width, kernel_height)
--

    The gradient of CNNSpatialNormalization, the exact derivative of the forward formula:
    ``dx(p) = [p written] dy(p) T(p)^-beta - (2 alpha beta / (k*k)) x(p)`` times the sum, over the written o whose
    window reads p (once per read: with CLAMP an edge pixel is read by the taps beyond its edge too), of
    ``dy(o) x(o) T(o)^(-beta-1)`` (the header prints it without the 1/(k*k) and with T(p) for each T(o)). The source
    image (secondary) is the forward source; set alpha, beta, delta and edge_mode as on the forward kernel
    (``gradient_kernels()`` does). As
    ``-[MPSCNNSpatialNormalizationGradient initWithDevice:kernelWidth:kernelHeight:]``.

    MPS: MPSCNNSpatialNormalizationGradient
    """

    def __init__(self, Device device not None, kernel_width, kernel_height):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNSpatialNormalizationGradient](
            device.shared(), integer_argument(kernel_width, "kernel_width"),
            integer_argument(kernel_height, "kernel_height")))

    _mpsx_properties = ("alpha", "beta", "delta")

    def _mpsx_arguments(self):
        return (self.kernel_width, self.kernel_height)

    cdef CSpatialNormalizationProperties* properties(self) except NULL:
        return <CSpatialNormalizationProperties*><CCNNSpatialNormalizationGradient*>self.gradient_kernel()

    @property
    def kernel_width(self):
        """The width of the forward window.

        MPS: MPSCNNBinaryKernel.secondaryKernelWidth
        """
        return self.properties().kernel_size()

    @property
    def kernel_height(self):
        """The height of the forward window.

        MPS: MPSCNNBinaryKernel.secondaryKernelHeight
        """
        return self.properties().kernel_size()

    @property
    def alpha(self):
        """The scale of the window's sum of squares (default 1; it must not be negative); set it as on the forward
        kernel.

        MPS: MPSCNNSpatialNormalizationGradient.alpha
        """
        return self.properties().alpha()

    @alpha.setter
    def alpha(self, value):
        self.properties().set_alpha(float_argument(value, "alpha"))

    @property
    def beta(self):
        """The exponent of the denominator (default 5); set it as on the forward kernel.

        MPS: MPSCNNSpatialNormalizationGradient.beta
        """
        return self.properties().beta()

    @beta.setter
    def beta(self, value):
        self.properties().set_beta(float_argument(value, "beta"))

    @property
    def delta(self):
        """The offset of the denominator (default 1); set it as on the forward kernel.

        MPS: MPSCNNSpatialNormalizationGradient.delta
        """
        return self.properties().delta()

    @delta.setter
    def delta(self, value):
        self.properties().set_delta(float_argument(value, "delta"))

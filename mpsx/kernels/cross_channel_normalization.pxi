# MPSCNNCrossChannelNormalization and its gradient (included by _kernels.pyx).

from mpsx.includes.kernels.cross_channel_normalization cimport (
    CCNNCrossChannelNormalization, CCNNCrossChannelNormalizationGradient)
from mpsx.includes.kernels.normalization cimport CResponseNormalizationProperties

__all__ += ["CNNCrossChannelNormalization", "CNNCrossChannelNormalizationGradient"]


cdef class CNNCrossChannelNormalization(CNNUnaryKernel):
    """CNNCrossChannelNormalization(device, kernel_size)
--

    Local response normalization over ``kernel_size`` feature channels: ``y_k = x_k / L_k^beta`` with
    ``L_k = delta + alpha/N * sum_{q in Q(k)} x_q^2``, ``Q(k) = [max(0, k - N//2), min(D-1, k + (N-1)//2)]`` over
    the D channels from ``source_feature_channel_offset`` (at most ``source_feature_channel_max_count``;
    ``torch.nn.functional.local_response_norm``'s window and scaling). As
    ``-[MPSCNNCrossChannelNormalization initWithDevice:kernelSize:]``.

    MPS: MPSCNNCrossChannelNormalization
    """

    def __init__(self, Device device not None, kernel_size):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNCrossChannelNormalization](
            device.shared(), integer_argument(kernel_size, "kernel_size")), NNGradientState)

    _mpsx_properties = ("alpha", "beta", "delta")

    def _mpsx_arguments(self):
        return (self.kernel_size,)

    cdef CResponseNormalizationProperties* properties(self) except NULL:
        return <CResponseNormalizationProperties*><CCNNCrossChannelNormalization*>self.unary_kernel()

    @property
    def kernel_size(self):
        """The number of feature channels N of the window.

        MPS: MPSCNNCrossChannelNormalization.kernelSize
        """
        return self.properties().kernel_size()

    @property
    def alpha(self):
        """The scale of the window's sum of squares (default 1; it must not be negative).

        MPS: MPSCNNCrossChannelNormalization.alpha
        """
        return self.properties().alpha()

    @alpha.setter
    def alpha(self, value):
        self.properties().set_alpha(float_argument(value, "alpha"))

    @property
    def beta(self):
        """The exponent of the denominator (default 5).

        MPS: MPSCNNCrossChannelNormalization.beta
        """
        return self.properties().beta()

    @beta.setter
    def beta(self, value):
        self.properties().set_beta(float_argument(value, "beta"))

    @property
    def delta(self):
        """The offset of the denominator (default 1).

        MPS: MPSCNNCrossChannelNormalization.delta
        """
        return self.properties().delta()

    @delta.setter
    def delta(self, value):
        self.properties().set_delta(float_argument(value, "delta"))


cdef class CNNCrossChannelNormalizationGradient(CNNGradientKernel):
    """CNNCrossChannelNormalizationGradient(device, kernel_size)
--

    The gradient of CNNCrossChannelNormalization, the exact derivative of the forward formula:
    ``dx_j = dy_j L_j^-beta - (2 alpha beta / N) x_j sum_{k in R(j)} dy_k x_k L_k^(-beta-1)``,
    ``R(j) = [j - (N-1)//2, j + N//2]`` (the header prints it without the 1/N). The source image (secondary) is the
    forward source; set alpha, beta and delta as on the forward kernel. As
    ``-[MPSCNNCrossChannelNormalizationGradient initWithDevice:kernelSize:]``.

    MPS: MPSCNNCrossChannelNormalizationGradient
    """

    def __init__(self, Device device not None, kernel_size):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNCrossChannelNormalizationGradient](
            device.shared(), integer_argument(kernel_size, "kernel_size")))

    _mpsx_properties = ("alpha", "beta", "delta")

    def _mpsx_arguments(self):
        return (self.kernel_size,)

    cdef CResponseNormalizationProperties* properties(self) except NULL:
        return <CResponseNormalizationProperties*><CCNNCrossChannelNormalizationGradient*>self.gradient_kernel()

    @property
    def kernel_size(self):
        """The number of feature channels N of the forward window.

        MPS: MPSCNNCrossChannelNormalizationGradient.kernelSize
        """
        return self.properties().kernel_size()

    @property
    def alpha(self):
        """The scale of the window's sum of squares (default 1; it must not be negative); set it as on the forward
        kernel.

        MPS: MPSCNNCrossChannelNormalizationGradient.alpha
        """
        return self.properties().alpha()

    @alpha.setter
    def alpha(self, value):
        self.properties().set_alpha(float_argument(value, "alpha"))

    @property
    def beta(self):
        """The exponent of the denominator (default 5); set it as on the forward kernel.

        MPS: MPSCNNCrossChannelNormalizationGradient.beta
        """
        return self.properties().beta()

    @beta.setter
    def beta(self, value):
        self.properties().set_beta(float_argument(value, "beta"))

    @property
    def delta(self):
        """The offset of the denominator (default 1); set it as on the forward kernel.

        MPS: MPSCNNCrossChannelNormalizationGradient.delta
        """
        return self.properties().delta()

    @delta.setter
    def delta(self, value):
        self.properties().set_delta(float_argument(value, "delta"))

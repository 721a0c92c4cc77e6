# MPSCNNSoftMax, MPSCNNLogSoftMax and their gradients (included by _kernels.pyx).

from mpsx.includes.kernels.softmax cimport CCNNSoftMax, CCNNSoftMaxGradient

__all__ += ["CNNSoftMax", "CNNLogSoftMax", "CNNSoftMaxGradient", "CNNLogSoftMaxGradient"]


cdef class CNNSoftMax(CNNUnaryKernel):
    """CNNSoftMax(device)
--

    Softmax over the feature channels of each pixel (from ``source_feature_channel_offset``, at most
    ``source_feature_channel_max_count``): ``y_k = exp(x_k) / sum_c exp(x_c)``. As
    ``-[MPSCNNSoftMax initWithDevice:]``.

    MPS: MPSCNNSoftMax
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNSoftMax](device.shared(), False), NNGradientState)


cdef class CNNLogSoftMax(CNNUnaryKernel):
    """CNNLogSoftMax(device)
--

    Log-softmax over the feature channels of each pixel (from ``source_feature_channel_offset``, at most
    ``source_feature_channel_max_count``): ``y_k = x_k - ln sum_c exp(x_c)``. As
    ``-[MPSCNNLogSoftMax initWithDevice:]``.

    MPS: MPSCNNLogSoftMax
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNSoftMax](device.shared(), True), NNGradientState)


cdef class CNNSoftMaxGradient(CNNGradientKernel):
    """CNNSoftMaxGradient(device)
--

    The gradient of CNNSoftMax: ``dx_k = y_k (dy_k - sum_c dy_c y_c)``. The source image (secondary) is the forward
    *result* y, not the forward source. As ``-[MPSCNNSoftMaxGradient initWithDevice:]``.

    MPS: MPSCNNSoftMaxGradient
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNSoftMaxGradient](device.shared(), False))


cdef class CNNLogSoftMaxGradient(CNNGradientKernel):
    """CNNLogSoftMaxGradient(device)
--

    The gradient of CNNLogSoftMax: ``dx_k = dy_k - exp(y_k) sum_c dy_c``. The source image (secondary) is the
    forward *result* y, not the forward source. As ``-[MPSCNNLogSoftMaxGradient initWithDevice:]``.

    MPS: MPSCNNLogSoftMaxGradient
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNSoftMaxGradient](device.shared(), True))

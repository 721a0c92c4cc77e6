# MPSCNNPooling, its subclasses and their gradients (included by _kernels.pyx).

from mpsx.includes.kernels.pooling cimport (
    CCNNPooling, CCNNPoolingGradient, PoolingKind, PoolingWindow, kAllSourceSize, make_cnn_pooling, make_cnn_pooling_gradient)

__all__ += ["CNNPooling", "CNNPoolingMax", "CNNPoolingAverage", "CNNPoolingL2Norm", "CNNDilatedPoolingMax",
            "CNNPoolingGradient", "CNNPoolingMaxGradient", "CNNPoolingAverageGradient", "CNNPoolingL2NormGradient",
            "CNNDilatedPoolingMaxGradient"]


cdef struct PoolingWindowArguments:
    int64_t kernel_width, kernel_height, stride_x, stride_y, dilation_x, dilation_y


cdef PoolingWindowArguments _pooling_window(kernel_width, kernel_height, stride_x, stride_y, dilation_x,
                                            dilation_y) except *:
    # initWithDevice:kernelWidth:kernelHeight: strides by the kernel size.
    cdef PoolingWindowArguments w
    w.kernel_width = integer_argument(kernel_width, "kernel_width")
    w.kernel_height = integer_argument(kernel_height, "kernel_height")
    w.stride_x = w.kernel_width if stride_x is None else integer_argument(stride_x, "stride_in_pixels_x")
    w.stride_y = w.kernel_height if stride_y is None else integer_argument(stride_y, "stride_in_pixels_y")
    w.dilation_x = integer_argument(dilation_x, "dilation_rate_x")
    w.dilation_y = integer_argument(dilation_y, "dilation_rate_y")
    return w


cdef class CNNPooling(CNNUnaryKernel):
    """MPSCNNPooling: a window of kernel_width x kernel_height source pixels per
    destination pixel, moved by the strides; edge_mode decides what reads off
    the source return (ZERO: 0; CLAMP: the window shrinks to the source, and
    one wholly off it gives 0)."""
    cdef CCNNPooling* pooling

    cdef _make(self, Device device, PoolingKind kind, kernel_width, kernel_height, stride_x, stride_y,
               dilation_x=1, dilation_y=1):
        cdef PoolingWindowArguments w = _pooling_window(kernel_width, kernel_height, stride_x, stride_y, dilation_x,
                                                        dilation_y)
        cdef shared_ptr[CCNNPooling] k = make_cnn_pooling(device.shared(), kind, w.kernel_width, w.kernel_height,
                                                          w.stride_x, w.stride_y, w.dilation_x, w.dilation_y)
        self.pooling = k.get()
        self._set(<shared_ptr[CUnaryKernel]>k, NNGradientState)

    cdef CCNNPooling* pooling_kernel(self) except NULL:
        self.native()
        return self.pooling

    @property
    def kernel_width(self):
        return self.pooling_kernel().pooling_window().kernel_width

    @property
    def kernel_height(self):
        return self.pooling_kernel().pooling_window().kernel_height

    @property
    def stride_in_pixels_x(self):
        return self.pooling_kernel().pooling_window().stride_x

    @property
    def stride_in_pixels_y(self):
        return self.pooling_kernel().pooling_window().stride_y

    def _mpsx_arguments(self):
        cdef PoolingWindow w = self.pooling_kernel().pooling_window()
        if isinstance(self, (CNNDilatedPoolingMax, CNNDilatedPoolingMaxGradient)):
            return (w.kernel_width, w.kernel_height, w.dilation_x, w.dilation_y, w.stride_x, w.stride_y)
        return (w.kernel_width, w.kernel_height, w.stride_x, w.stride_y)


cdef class CNNPoolingMax(CNNPooling):
    """MPSCNNPoolingMax: the maximum of each window (with edge_mode ZERO, reads
    off the source are 0 and take part)."""

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.Max, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)


cdef class CNNPoolingAverage(CNNPooling):
    """MPSCNNPoolingAverage: the mean of each window. edge_mode ZERO divides by
    the window area; CLAMP by the taps inside the source grown by zero_pad_size
    on each side. padding with NNPaddingMethod.EXCLUDE_EDGES (edge_mode ZERO)
    divides by the taps inside the source grown by the padding the first
    window reads before it (Caffe)."""

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.Average, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)

    _mpsx_properties = ("zero_pad_size_x", "zero_pad_size_y")

    @property
    def zero_pad_size_x(self):
        return self.pooling_kernel().zero_pad_size_x()

    @zero_pad_size_x.setter
    def zero_pad_size_x(self, value):
        self.pooling_kernel().set_zero_pad_size_x(integer_argument(value, "zero_pad_size_x"))

    @property
    def zero_pad_size_y(self):
        return self.pooling_kernel().zero_pad_size_y()

    @zero_pad_size_y.setter
    def zero_pad_size_y(self, value):
        self.pooling_kernel().set_zero_pad_size_y(integer_argument(value, "zero_pad_size_y"))


cdef class CNNPoolingL2Norm(CNNPooling):
    """MPSCNNPoolingL2Norm: sqrt of the sum of squares of each window."""

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.L2Norm, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)


cdef class CNNDilatedPoolingMax(CNNPooling):
    """MPSCNNDilatedPoolingMax: max pooling over taps dilation_rate pixels apart."""

    def __init__(self, Device device not None, kernel_width, kernel_height, dilation_rate_x,
                 dilation_rate_y, stride_in_pixels_x, stride_in_pixels_y):
        self._make(device, PoolingKind.DilatedMax, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y,
                   dilation_rate_x, dilation_rate_y)

    @property
    def dilation_rate_x(self):
        return self.pooling_kernel().pooling_window().dilation_x

    @property
    def dilation_rate_y(self):
        return self.pooling_kernel().pooling_window().dilation_y


cdef class CNNPoolingGradient(CNNGradientKernel):
    """MPSCNNPoolingGradient: the gradient of a pooling with the same window,
    over the windows of the forward encode that made the gradient state. Set
    edge_mode (and zero_pad_size, padding) as on the forward kernel."""
    cdef CCNNPoolingGradient* pooling

    cdef _make(self, Device device, PoolingKind kind, kernel_width, kernel_height, stride_x, stride_y,
               dilation_x=1, dilation_y=1):
        cdef PoolingWindowArguments w = _pooling_window(kernel_width, kernel_height, stride_x, stride_y, dilation_x,
                                                        dilation_y)
        cdef shared_ptr[CCNNPoolingGradient] k = make_cnn_pooling_gradient(
            device.shared(), kind, w.kernel_width, w.kernel_height, w.stride_x, w.stride_y, w.dilation_x, w.dilation_y)
        self.pooling = k.get()
        self._set(<shared_ptr[CGradientKernel]>k)

    cdef CCNNPoolingGradient* pooling_kernel(self) except NULL:
        self.native()
        return self.pooling

    @property
    def kernel_width(self):
        return self.pooling_kernel().pooling_window().kernel_width

    @property
    def kernel_height(self):
        return self.pooling_kernel().pooling_window().kernel_height

    @property
    def stride_in_pixels_x(self):
        return self.pooling_kernel().pooling_window().stride_x

    @property
    def stride_in_pixels_y(self):
        return self.pooling_kernel().pooling_window().stride_y

    def _mpsx_arguments(self):
        cdef PoolingWindow w = self.pooling_kernel().pooling_window()
        if isinstance(self, (CNNDilatedPoolingMax, CNNDilatedPoolingMaxGradient)):
            return (w.kernel_width, w.kernel_height, w.dilation_x, w.dilation_y, w.stride_x, w.stride_y)
        return (w.kernel_width, w.kernel_height, w.stride_x, w.stride_y)

    _mpsx_properties = ("source_size",)

    @property
    def source_size(self):
        """MPS sourceSize: (width, height, depth) of the source gradient pixels and
        images, from the forward clip origin on, that contribute; None: all."""
        p = self.pooling_kernel()
        if p.source_size_width() == kAllSourceSize and p.source_size_height() == kAllSourceSize \
                and p.source_size_depth() == kAllSourceSize:
            return None
        return (p.source_size_width(), p.source_size_height(), p.source_size_depth())

    @source_size.setter
    def source_size(self, value):
        if value is None:
            self.pooling_kernel().set_source_size(kAllSourceSize, kAllSourceSize, kAllSourceSize)
            return
        width, height, depth = value
        self.pooling_kernel().set_source_size(integer_argument(width, "source_size width"),
                                              integer_argument(height, "source_size height"),
                                              integer_argument(depth, "source_size depth"))


cdef class CNNPoolingMaxGradient(CNNPoolingGradient):
    """MPSCNNPoolingMaxGradient: each gradient goes to the first maximum of its window."""

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.Max, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)


cdef class CNNPoolingAverageGradient(CNNPoolingGradient):
    """MPSCNNPoolingAverageGradient: each gradient spread over its window, with
    CNNPoolingAverage's normalization."""

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.Average, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)

    _mpsx_properties = ("zero_pad_size_x", "zero_pad_size_y")

    @property
    def zero_pad_size_x(self):
        return self.pooling_kernel().zero_pad_size_x()

    @zero_pad_size_x.setter
    def zero_pad_size_x(self, value):
        self.pooling_kernel().set_zero_pad_size_x(integer_argument(value, "zero_pad_size_x"))

    @property
    def zero_pad_size_y(self):
        return self.pooling_kernel().zero_pad_size_y()

    @zero_pad_size_y.setter
    def zero_pad_size_y(self, value):
        self.pooling_kernel().set_zero_pad_size_y(integer_argument(value, "zero_pad_size_y"))


cdef class CNNPoolingL2NormGradient(CNNPoolingGradient):
    """MPSCNNPoolingL2NormGradient: in / out times the gradient, over each window."""

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.L2Norm, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)


cdef class CNNDilatedPoolingMaxGradient(CNNPoolingGradient):
    """MPSCNNDilatedPoolingMaxGradient."""

    def __init__(self, Device device not None, kernel_width, kernel_height, dilation_rate_x,
                 dilation_rate_y, stride_in_pixels_x, stride_in_pixels_y):
        self._make(device, PoolingKind.DilatedMax, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y,
                   dilation_rate_x, dilation_rate_y)

    @property
    def dilation_rate_x(self):
        return self.pooling_kernel().pooling_window().dilation_x

    @property
    def dilation_rate_y(self):
        return self.pooling_kernel().pooling_window().dilation_y

# MPSCNNPooling, its subclasses and their gradients (included by _kernels.pyx).

from mpsx.includes.kernels.pooling cimport (
    CCNNPooling, CCNNPoolingGradient, PoolingKind, PoolingWindow, kAllSourceSize)

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
    """CNNPooling(device, kernel_width, kernel_height, stride_in_pixels_x=None, stride_in_pixels_y=None)
--

    The base of the pooling kernels: one value per window of ``kernel_width`` x ``kernel_height`` source pixels,
    moved by the strides. Abstract: its constructor, MPS's initializer that every pooling kernel shares, raises
    TypeError naming the subclasses, which take its arguments.

    ``edge_mode`` decides what reads off the source return (ZERO: 0; CLAMP: the window shrinks to the source, and
    one wholly off it gives 0).

    MPS: MPSCNNPooling
    """
    cdef CCNNPooling* pooling

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        raise TypeError("CNNPooling is abstract: make a CNNPoolingMax, CNNPoolingAverage, CNNPoolingL2Norm or "
                        "CNNDilatedPoolingMax")

    cdef _make(self, Device device, PoolingKind kind, kernel_width, kernel_height, stride_x, stride_y,
               dilation_x=1, dilation_y=1):
        cdef PoolingWindowArguments w = _pooling_window(kernel_width, kernel_height, stride_x, stride_y, dilation_x,
                                                        dilation_y)
        cdef shared_ptr[CCNNPooling] k = make_native[CCNNPooling](
            device.shared(), kind, w.kernel_width, w.kernel_height, w.stride_x, w.stride_y, w.dilation_x, w.dilation_y)
        self.pooling = k.get()
        self._set(<shared_ptr[CUnaryKernel]>k, NNGradientState)

    cdef CCNNPooling* pooling_kernel(self) except NULL:
        self.native()
        return self.pooling

    @property
    def kernel_width(self):
        """The width of the window.

        MPS: MPSCNNKernel.kernelWidth
        """
        return self.pooling_kernel().pooling_window().kernel_width

    @property
    def kernel_height(self):
        """The height of the window.

        MPS: MPSCNNKernel.kernelHeight
        """
        return self.pooling_kernel().pooling_window().kernel_height

    @property
    def stride_in_pixels_x(self):
        """The stride in x: how far the window moves per destination pixel.

        MPS: MPSCNNKernel.strideInPixelsX
        """
        return self.pooling_kernel().pooling_window().stride_x

    @property
    def stride_in_pixels_y(self):
        """The stride in y: how far the window moves per destination pixel.

        MPS: MPSCNNKernel.strideInPixelsY
        """
        return self.pooling_kernel().pooling_window().stride_y

    def _mpsx_arguments(self):
        cdef PoolingWindow w = self.pooling_kernel().pooling_window()
        if isinstance(self, (CNNDilatedPoolingMax, CNNDilatedPoolingMaxGradient)):
            return (w.kernel_width, w.kernel_height, w.dilation_x, w.dilation_y, w.stride_x, w.stride_y)
        return (w.kernel_width, w.kernel_height, w.stride_x, w.stride_y)


cdef class CNNPoolingMax(CNNPooling):
    """CNNPoolingMax(device, kernel_width, kernel_height, stride_in_pixels_x=None, stride_in_pixels_y=None)
--

    The maximum of each window (with edge_mode ZERO, reads off the source are 0 and take part). The strides default
    to the window's size. ValueError for sizes that are not positive. As
    ``-[MPSCNNPoolingMax initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]``.

    MPS: MPSCNNPoolingMax
    """

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.Max, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)


cdef class CNNPoolingAverage(CNNPooling):
    """CNNPoolingAverage(device, kernel_width, kernel_height, stride_in_pixels_x=None, stride_in_pixels_y=None)
--

    The mean of each window. The strides default to the window's size. ValueError for sizes that are not positive.
    As ``-[MPSCNNPoolingAverage initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]``.

    edge_mode ZERO divides by the window's area; CLAMP by the taps inside the source grown by ``zero_pad_size`` on
    each side. ``padding`` with NNPaddingMethod.EXCLUDE_EDGES (edge_mode ZERO) divides by the taps inside the source
    grown by the padding the first window reads before it (Caffe).

    MPS: MPSCNNPoolingAverage
    """

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.Average, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)

    _mpsx_properties = ("zero_pad_size_x", "zero_pad_size_y")

    @property
    def zero_pad_size_x(self):
        """With edge_mode CLAMP, how many columns off each side of the source count as zeros in the divisor (default
        0).

        MPS: MPSCNNPoolingAverage.zeroPadSizeX
        """
        return self.pooling_kernel().zero_pad_size_x()

    @zero_pad_size_x.setter
    def zero_pad_size_x(self, value):
        self.pooling_kernel().set_zero_pad_size_x(integer_argument(value, "zero_pad_size_x"))

    @property
    def zero_pad_size_y(self):
        """With edge_mode CLAMP, how many rows off each side of the source count as zeros in the divisor (default 0).

        MPS: MPSCNNPoolingAverage.zeroPadSizeY
        """
        return self.pooling_kernel().zero_pad_size_y()

    @zero_pad_size_y.setter
    def zero_pad_size_y(self, value):
        self.pooling_kernel().set_zero_pad_size_y(integer_argument(value, "zero_pad_size_y"))


cdef class CNNPoolingL2Norm(CNNPooling):
    """CNNPoolingL2Norm(device, kernel_width, kernel_height, stride_in_pixels_x=None, stride_in_pixels_y=None)
--

    The square root of the sum of squares of each window. The strides default to the window's size. ValueError for
    sizes that are not positive. As
    ``-[MPSCNNPoolingL2Norm initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]``.

    MPS: MPSCNNPoolingL2Norm
    """

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.L2Norm, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)


cdef class CNNDilatedPoolingMax(CNNPooling):
    """CNNDilatedPoolingMax(device, kernel_width, kernel_height, dilation_rate_x, dilation_rate_y,
        stride_in_pixels_x, stride_in_pixels_y)
--

    Max pooling over taps ``dilation_rate`` pixels apart: the window spans ``(kernel - 1) * dilation_rate + 1``
    pixels. As
    ``-[MPSCNNDilatedPoolingMax initWithDevice:kernelWidth:kernelHeight:dilationRateX:dilationRateY:strideInPixelsX:strideInPixelsY:]``.

    MPS: MPSCNNDilatedPoolingMax
    """

    def __init__(self, Device device not None, kernel_width, kernel_height, dilation_rate_x,
                 dilation_rate_y, stride_in_pixels_x, stride_in_pixels_y):
        self._make(device, PoolingKind.DilatedMax, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y,
                   dilation_rate_x, dilation_rate_y)

    @property
    def dilation_rate_x(self):
        """The distance in x between the window's taps.

        MPS: MPSCNNDilatedPoolingMax.dilationRateX
        """
        return self.pooling_kernel().pooling_window().dilation_x

    @property
    def dilation_rate_y(self):
        """The distance in y between the window's taps.

        MPS: MPSCNNDilatedPoolingMax.dilationRateY
        """
        return self.pooling_kernel().pooling_window().dilation_y


cdef class CNNPoolingGradient(CNNGradientKernel):
    """CNNPoolingGradient(device, kernel_width, kernel_height, stride_in_pixels_x=None, stride_in_pixels_y=None)
--

    The base of the pooling gradients: the gradient of a pooling with the same window, over the windows of the
    forward encode that made the gradient state. Set ``edge_mode`` (and ``zero_pad_size``, ``padding``) as on the
    forward kernel. Abstract: its constructor, MPS's initializer that every pooling gradient shares, raises TypeError
    naming the subclasses, which take its arguments.

    MPS: MPSCNNPoolingGradient
    """
    cdef CCNNPoolingGradient* pooling

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        raise TypeError("CNNPoolingGradient is abstract: make a CNNPoolingMaxGradient, CNNPoolingAverageGradient, "
                        "CNNPoolingL2NormGradient or CNNDilatedPoolingMaxGradient")

    cdef _make(self, Device device, PoolingKind kind, kernel_width, kernel_height, stride_x, stride_y,
               dilation_x=1, dilation_y=1):
        cdef PoolingWindowArguments w = _pooling_window(kernel_width, kernel_height, stride_x, stride_y, dilation_x,
                                                        dilation_y)
        cdef shared_ptr[CCNNPoolingGradient] k = make_native[CCNNPoolingGradient](
            device.shared(), kind, w.kernel_width, w.kernel_height, w.stride_x, w.stride_y, w.dilation_x, w.dilation_y)
        self.pooling = k.get()
        self._set(<shared_ptr[CGradientKernel]>k)

    cdef CCNNPoolingGradient* pooling_kernel(self) except NULL:
        self.native()
        return self.pooling

    @property
    def kernel_width(self):
        """The width of the forward window.

        MPS: MPSCNNBinaryKernel.secondaryKernelWidth
        """
        return self.pooling_kernel().pooling_window().kernel_width

    @property
    def kernel_height(self):
        """The height of the forward window.

        MPS: MPSCNNBinaryKernel.secondaryKernelHeight
        """
        return self.pooling_kernel().pooling_window().kernel_height

    @property
    def stride_in_pixels_x(self):
        """The forward stride in x.

        MPS: MPSCNNBinaryKernel.secondaryStrideInPixelsX
        """
        return self.pooling_kernel().pooling_window().stride_x

    @property
    def stride_in_pixels_y(self):
        """The forward stride in y.

        MPS: MPSCNNBinaryKernel.secondaryStrideInPixelsY
        """
        return self.pooling_kernel().pooling_window().stride_y

    def _mpsx_arguments(self):
        cdef PoolingWindow w = self.pooling_kernel().pooling_window()
        if isinstance(self, (CNNDilatedPoolingMax, CNNDilatedPoolingMaxGradient)):
            return (w.kernel_width, w.kernel_height, w.dilation_x, w.dilation_y, w.stride_x, w.stride_y)
        return (w.kernel_width, w.kernel_height, w.stride_x, w.stride_y)

    _mpsx_properties = ("source_size",)

    @property
    def source_size(self):
        """``(width, height, depth)``: the source gradient pixels and images, from the forward clip origin on, that
        contribute; None (the default) for all.

        MPS: MPSCNNPoolingGradient.sourceSize
        """
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
    """CNNPoolingMaxGradient(device, kernel_width, kernel_height, stride_in_pixels_x=None, stride_in_pixels_y=None)
--

    The gradient of CNNPoolingMax: each gradient goes to the first maximum of its window. The strides default to the
    window's size. ValueError for sizes that are not positive. As
    ``-[MPSCNNPoolingMaxGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]``.

    MPS: MPSCNNPoolingMaxGradient
    """

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.Max, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)


cdef class CNNPoolingAverageGradient(CNNPoolingGradient):
    """CNNPoolingAverageGradient(device, kernel_width, kernel_height, stride_in_pixels_x=None,
        stride_in_pixels_y=None)
--

    The gradient of CNNPoolingAverage: each gradient spread over its window, with the forward kernel's divisor. The
    strides default to the window's size. ValueError for sizes that are not positive. As
    ``-[MPSCNNPoolingAverageGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]``.

    MPS: MPSCNNPoolingAverageGradient
    """

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.Average, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)

    _mpsx_properties = ("zero_pad_size_x", "zero_pad_size_y")

    @property
    def zero_pad_size_x(self):
        """As CNNPoolingAverage's: set it as on the forward kernel.

        MPS: MPSCNNPoolingAverageGradient.zeroPadSizeX
        """
        return self.pooling_kernel().zero_pad_size_x()

    @zero_pad_size_x.setter
    def zero_pad_size_x(self, value):
        self.pooling_kernel().set_zero_pad_size_x(integer_argument(value, "zero_pad_size_x"))

    @property
    def zero_pad_size_y(self):
        """As CNNPoolingAverage's: set it as on the forward kernel.

        MPS: MPSCNNPoolingAverageGradient.zeroPadSizeY
        """
        return self.pooling_kernel().zero_pad_size_y()

    @zero_pad_size_y.setter
    def zero_pad_size_y(self, value):
        self.pooling_kernel().set_zero_pad_size_y(integer_argument(value, "zero_pad_size_y"))


cdef class CNNPoolingL2NormGradient(CNNPoolingGradient):
    """CNNPoolingL2NormGradient(device, kernel_width, kernel_height, stride_in_pixels_x=None,
        stride_in_pixels_y=None)
--

    The gradient of CNNPoolingL2Norm: the incoming gradient times source / result, over each window. The strides
    default to the window's size. ValueError for sizes that are not positive. As
    ``-[MPSCNNPoolingL2NormGradient initWithDevice:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:]``.

    MPS: MPSCNNPoolingL2NormGradient
    """

    def __init__(self, Device device not None, kernel_width, kernel_height, stride_in_pixels_x=None,
                 stride_in_pixels_y=None):
        self._make(device, PoolingKind.L2Norm, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)


cdef class CNNDilatedPoolingMaxGradient(CNNPoolingGradient):
    """CNNDilatedPoolingMaxGradient(device, kernel_width, kernel_height, dilation_rate_x, dilation_rate_y,
        stride_in_pixels_x, stride_in_pixels_y)
--

    The gradient of CNNDilatedPoolingMax: each gradient goes to the first maximum of its dilated window. As
    ``-[MPSCNNDilatedPoolingMaxGradient initWithDevice:kernelWidth:kernelHeight:dilationRateX:dilationRateY:strideInPixelsX:strideInPixelsY:]``.

    MPS: MPSCNNDilatedPoolingMaxGradient
    """

    def __init__(self, Device device not None, kernel_width, kernel_height, dilation_rate_x,
                 dilation_rate_y, stride_in_pixels_x, stride_in_pixels_y):
        self._make(device, PoolingKind.DilatedMax, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y,
                   dilation_rate_x, dilation_rate_y)

    @property
    def dilation_rate_x(self):
        """The forward distance in x between the window's taps.

        MPS: MPSCNNBinaryKernel.secondaryDilationRateX
        """
        return self.pooling_kernel().pooling_window().dilation_x

    @property
    def dilation_rate_y(self):
        """The forward distance in y between the window's taps.

        MPS: MPSCNNBinaryKernel.secondaryDilationRateY
        """
        return self.pooling_kernel().pooling_window().dilation_y

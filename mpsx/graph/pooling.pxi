# MPSCNNPooling{Max,Average,L2Norm}Node, MPSCNNDilatedPoolingMaxNode and their
# gradient nodes (native/include/mpsx/graph/pooling.h). The nodes clamp at
# the edges, as MPS's pooling nodes do.

from mpsx.includes.graph.pooling cimport CCNNPoolingGradientNode, CCNNPoolingNode, PoolingNodeWindow
from mpsx.includes.kernels.pooling cimport PoolingKind as CPoolingKind

__all__ += ["CNNPoolingNode", "CNNPoolingMaxNode", "CNNPoolingAverageNode", "CNNPoolingL2NormNode",
            "CNNDilatedPoolingMaxNode", "CNNPoolingGradientNode", "CNNPoolingMaxGradientNode",
            "CNNPoolingAverageGradientNode", "CNNPoolingL2NormGradientNode", "CNNDilatedPoolingMaxGradientNode"]


cdef PoolingNodeWindow _pooling_node_window(int kind, kernel_width, kernel_height, stride_x, stride_y,
                                            dilation_x=1, dilation_y=1) except *:
    cdef PoolingNodeWindow w
    w.kind = <CPoolingKind>kind
    w.kernel_width = integer_argument(kernel_width, "kernel_width")
    w.kernel_height = integer_argument(kernel_height, "kernel_height")
    w.stride_x = integer_argument(stride_x, "stride_in_pixels_x")
    w.stride_y = integer_argument(stride_y, "stride_in_pixels_y")
    w.dilation_x = integer_argument(dilation_x, "dilation_rate_x")
    w.dilation_y = integer_argument(dilation_y, "dilation_rate_y")
    return w


cdef class CNNPoolingNode(NNFilterNode):
    """CNNPoolingNode(source, filter_size=None, stride=None, *, kernel_width=None, kernel_height=None,
        stride_in_pixels_x=None, stride_in_pixels_y=None)
--

    The base of the pooling nodes: ``(source, filter_size, stride=filter_size)``, or
    ``(source, kernel_width=..., kernel_height=..., stride_in_pixels_x=..., stride_in_pixels_y=...)`` (strides
    default to the window). Their edge mode is CLAMP, as MPS's pooling nodes'. Abstract (TypeError).

    MPS: MPSCNNPoolingNode
    """
    _kind = -1

    def __init__(self, source, filter_size=None, stride=None, *, kernel_width=None, kernel_height=None,
                 stride_in_pixels_x=None, stride_in_pixels_y=None):
        if type(self)._kind < 0:
            raise TypeError("CNNPoolingNode is abstract; make a CNNPoolingMaxNode, ...AverageNode or ...L2NormNode")
        kw, kh, sx, sy = _pooling_sizes(filter_size, stride, kernel_width, kernel_height, stride_in_pixels_x,
                                        stride_in_pixels_y)
        self._make(source, _pooling_node_window(type(self)._kind, kw, kh, sx, sy),
                   {"kernel_width": kw, "kernel_height": kh, "stride_in_pixels_x": sx, "stride_in_pixels_y": sy})

    @classmethod
    def node_with_source(cls, source, filter_size, stride=None):
        """The same as ``CNNPoolingNode(...)``: a new node. MPS's factories with and
        without the optional arguments are this one method.

        MPS: +[MPSCNNPoolingNode nodeWithSource:filterSize:], +[MPSCNNPoolingNode nodeWithSource:filterSize:stride:]
        """
        return cls(source, filter_size, stride)

    cdef _make(self, source, PoolingNodeWindow window, dict keywords):
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNPoolingNode](
            _image_node_argument(source, "source").c, window), (source,), keywords)

    cdef const PoolingNodeWindow* window(self) except NULL:
        return &(<CCNNPoolingNode*>self.native()).window()

    @property
    def kernel_width(self):
        """The width of the window.

        MPS: MPSCNNPoolingNode.kernelWidth
        """
        return self.window().kernel_width

    @property
    def kernel_height(self):
        """The height of the window.

        MPS: MPSCNNPoolingNode.kernelHeight
        """
        return self.window().kernel_height

    @property
    def stride_in_pixels_x(self):
        """The stride in x.

        MPS: MPSCNNPoolingNode.strideInPixelsX
        """
        return self.window().stride_x

    @property
    def stride_in_pixels_y(self):
        """The stride in y.

        MPS: MPSCNNPoolingNode.strideInPixelsY
        """
        return self.window().stride_y


def _pooling_sizes(filter_size, stride, kernel_width, kernel_height, stride_x, stride_y):
    if filter_size is not None:
        if kernel_width is not None or kernel_height is not None:
            raise TypeError("give filter_size or kernel_width/kernel_height, not both")
        stride = filter_size if stride is None else stride
        return filter_size, filter_size, stride, stride
    if kernel_width is None or kernel_height is None:
        raise TypeError("expected filter_size, or kernel_width and kernel_height")
    return (kernel_width, kernel_height, kernel_width if stride_x is None else stride_x,
            kernel_height if stride_y is None else stride_y)


cdef class CNNPoolingMaxNode(CNNPoolingNode):
    """Max pooling of a graph (CNNPoolingMax), made as CNNPoolingNode says. As
    ``-[MPSCNNPoolingMaxNode initWithSource:filterSize:stride:]``.

    MPS: MPSCNNPoolingMaxNode
    """
    _kind = 0


cdef class CNNPoolingAverageNode(CNNPoolingNode):
    """Average pooling of a graph (CNNPoolingAverage), made as CNNPoolingNode says. As
    ``-[MPSCNNPoolingAverageNode initWithSource:filterSize:stride:]``.

    MPS: MPSCNNPoolingAverageNode
    """
    _kind = 1


cdef class CNNPoolingL2NormNode(CNNPoolingNode):
    """L2-norm pooling of a graph (CNNPoolingL2Norm), made as CNNPoolingNode says. As
    ``-[MPSCNNPoolingL2NormNode initWithSource:filterSize:stride:]``.

    MPS: MPSCNNPoolingL2NormNode
    """
    _kind = 2


cdef class CNNDilatedPoolingMaxNode(CNNPoolingNode):
    """CNNDilatedPoolingMaxNode(source, filter_size=None, stride=None, dilation_rate=None, *, kernel_width=None,
        kernel_height=None, stride_in_pixels_x=None, stride_in_pixels_y=None, dilation_rate_x=None,
        dilation_rate_y=None)
--

    Dilated max pooling of a graph (CNNDilatedPoolingMax), in MPS's three forms: ``(source, filter_size)``
    (stride ``filter_size``, dilation 1), ``(source, filter_size, stride, dilation_rate)``, or keywords
    ``kernel_width``, ``kernel_height``, ``stride_in_pixels_x``, ``stride_in_pixels_y``, ``dilation_rate_x`` and
    ``dilation_rate_y``; a form with a stride takes its dilation rates too. As
    ``-[MPSCNNDilatedPoolingMaxNode initWithSource:filterSize:stride:dilationRate:]``.

    MPS: MPSCNNDilatedPoolingMaxNode
    """
    _kind = 3

    def __init__(self, source, filter_size=None, stride=None, dilation_rate=None, *, kernel_width=None,
                 kernel_height=None, stride_in_pixels_x=None, stride_in_pixels_y=None, dilation_rate_x=None,
                 dilation_rate_y=None):
        sizes = _pooling_sizes(filter_size, stride, kernel_width, kernel_height, stride_in_pixels_x,
                               stride_in_pixels_y)
        if filter_size is not None and stride is None and dilation_rate is None:
            dx = dy = 1
        elif filter_size is not None:
            if dilation_rate_x is not None or dilation_rate_y is not None:
                raise TypeError("give dilation_rate with filter_size, or dilation_rate_x/dilation_rate_y with "
                                "kernel_width/kernel_height, not both")
            if dilation_rate is None:
                raise TypeError("CNNDilatedPoolingMaxNode(source, filter_size, stride, dilation_rate): expected an "
                                "int dilation_rate, given None")
            dx = dy = dilation_rate
        else:
            if dilation_rate is not None:
                raise TypeError("give dilation_rate with filter_size, or dilation_rate_x/dilation_rate_y with "
                                "kernel_width/kernel_height, not both")
            if dilation_rate_x is None or dilation_rate_y is None:
                raise TypeError("CNNDilatedPoolingMaxNode with kernel_width/kernel_height: expected int "
                                f"dilation_rate_x and dilation_rate_y, given {dilation_rate_x!r} and "
                                f"{dilation_rate_y!r}")
            dx, dy = dilation_rate_x, dilation_rate_y
        kw, kh, sx, sy = sizes
        self._make(source, _pooling_node_window(3, kw, kh, sx, sy, dx, dy),
                   {"kernel_width": kw, "kernel_height": kh, "stride_in_pixels_x": sx, "stride_in_pixels_y": sy,
                    "dilation_rate_x": dx, "dilation_rate_y": dy})

    @classmethod
    def node_with_source(cls, source, filter_size, stride=None, dilation_rate=None):
        """The same as ``CNNDilatedPoolingMaxNode(...)``: a new node. MPS's factories with and
        without the optional arguments are this one method.

        MPS: +[MPSCNNDilatedPoolingMaxNode nodeWithSource:filterSize:], +[MPSCNNDilatedPoolingMaxNode nodeWithSource:filterSize:stride:dilationRate:]
        """
        return cls(source, filter_size, stride, dilation_rate)

    @property
    def dilation_rate_x(self):
        """The distance in x between the window's taps.

        MPS: MPSCNNDilatedPoolingMaxNode.dilationRateX
        """
        return self.window().dilation_x

    @property
    def dilation_rate_y(self):
        """The distance in y between the window's taps.

        MPS: MPSCNNDilatedPoolingMaxNode.dilationRateY
        """
        return self.window().dilation_y


cdef class CNNPoolingGradientNode(NNGradientFilterNode):
    """CNNPoolingGradientNode(source_gradient, source_image, gradient_state, kernel_width, kernel_height,
        stride_in_pixels_x, stride_in_pixels_y, padding_policy=None, *, dilation_rate_x=1, dilation_rate_y=1)
--

    The base of the pooling gradient nodes: the forward window and strides, and the padding policy (default
    NNPaddingMethod.SIZE_SAME); the dilated gradient takes ``dilation_rate_x`` / ``dilation_rate_y``. Abstract
    (TypeError). As
    ``-[MPSCNNPoolingGradientNode initWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:paddingPolicy:]``.

    MPS: MPSCNNPoolingGradientNode
    """
    _kind = -1

    def __init__(self, source_gradient, source_image, NNStateNode gradient_state not None, kernel_width,
                 kernel_height, stride_in_pixels_x, stride_in_pixels_y, padding_policy=None, *, dilation_rate_x=1,
                 dilation_rate_y=1):
        if type(self)._kind < 0:
            raise TypeError("CNNPoolingGradientNode is abstract; make a CNNPoolingMaxGradientNode, ...")
        cdef PoolingNodeWindow w = _pooling_node_window(type(self)._kind, kernel_width, kernel_height,
                                                        stride_in_pixels_x, stride_in_pixels_y, dilation_rate_x,
                                                        dilation_rate_y)
        cdef uint32_t method = NNPaddingMethod.SIZE_SAME
        cdef shared_ptr[const CPaddingPolicy] policy
        if padding_policy is not None:
            set_padding(&method, &policy, padding_policy, "padding_policy")
        self._made(<shared_ptr[CFilterNode]>make_native[CCNNPoolingGradientNode](
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, gradient_state.c, w, method),
            (source_gradient, source_image, gradient_state, kernel_width, kernel_height, stride_in_pixels_x,
             stride_in_pixels_y, padding_policy),
            {"dilation_rate_x": dilation_rate_x, "dilation_rate_y": dilation_rate_y})
        self.native().padding_policy = policy

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, kernel_width, kernel_height,
                                  stride_in_pixels_x, stride_in_pixels_y, padding_policy):
        """The same as ``CNNPoolingGradientNode(...)``: a new node.

        MPS: +[MPSCNNPoolingGradientNode nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:paddingPolicy:]
        """
        return cls(source_gradient, source_image, gradient_state, kernel_width, kernel_height, stride_in_pixels_x,
                   stride_in_pixels_y, padding_policy)

    cdef const PoolingNodeWindow* window(self) except NULL:
        return &(<CCNNPoolingGradientNode*>self.native()).window()

    @property
    def kernel_width(self):
        """The width of the window.

        MPS: MPSCNNPoolingGradientNode.kernelWidth
        """
        return self.window().kernel_width

    @property
    def kernel_height(self):
        """The height of the window.

        MPS: MPSCNNPoolingGradientNode.kernelHeight
        """
        return self.window().kernel_height

    @property
    def stride_in_pixels_x(self):
        """The stride in x.

        MPS: MPSCNNPoolingGradientNode.strideInPixelsX
        """
        return self.window().stride_x

    @property
    def stride_in_pixels_y(self):
        """The stride in y.

        MPS: MPSCNNPoolingGradientNode.strideInPixelsY
        """
        return self.window().stride_y


cdef class CNNPoolingMaxGradientNode(CNNPoolingGradientNode):
    """The gradient node of a CNNPoolingMaxNode.

    MPS: MPSCNNPoolingMaxGradientNode
    """
    _kind = 0


cdef class CNNPoolingAverageGradientNode(CNNPoolingGradientNode):
    """The gradient node of a CNNPoolingAverageNode.

    MPS: MPSCNNPoolingAverageGradientNode
    """
    _kind = 1


cdef class CNNPoolingL2NormGradientNode(CNNPoolingGradientNode):
    """The gradient node of a CNNPoolingL2NormNode.

    MPS: MPSCNNPoolingL2NormGradientNode
    """
    _kind = 2


cdef class CNNDilatedPoolingMaxGradientNode(CNNPoolingGradientNode):
    """The gradient node of a CNNDilatedPoolingMaxNode (give ``dilation_rate_x`` and ``dilation_rate_y``).

    MPS: MPSCNNDilatedPoolingMaxGradientNode
    """
    _kind = 3

    @property
    def dilation_rate_x(self):
        """The distance in x between the window's taps.

        MPS: MPSCNNDilatedPoolingMaxGradientNode.dilationRateX
        """
        return self.window().dilation_x

    @property
    def dilation_rate_y(self):
        """The distance in y between the window's taps.

        MPS: MPSCNNDilatedPoolingMaxGradientNode.dilationRateY
        """
        return self.window().dilation_y

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, kernel_width, kernel_height,
                                  stride_in_pixels_x, stride_in_pixels_y, dilation_rate_x, dilation_rate_y):
        """The same as ``CNNDilatedPoolingMaxGradientNode(...)``: a new node.

        MPS: +[MPSCNNDilatedPoolingMaxGradientNode nodeWithSourceGradient:sourceImage:gradientState:kernelWidth:kernelHeight:strideInPixelsX:strideInPixelsY:dilationRateX:dilationRateY:]
        """
        return cls(source_gradient, source_image, gradient_state, kernel_width, kernel_height, stride_in_pixels_x,
                   stride_in_pixels_y, dilation_rate_x=dilation_rate_x, dilation_rate_y=dilation_rate_y)

# MPSNNBinaryArithmeticNode (MPSNNAdditionNode, MPSNNSubtractionNode, MPSNNMultiplicationNode,
# MPSNNDivisionNode, MPSNNComparisonNode), MPSNNBinaryGradientStateNode and MPSNNArithmeticGradientNode
# (Addition, Subtraction, Multiplication) (native/include/mpsx/graph/arithmetic.h).

from mpsx.includes.graph.arithmetic cimport CNNArithmeticGradientNode, CNNBinaryArithmeticNode

__all__ += ["NNBinaryGradientStateNode", "NNArithmeticGradientStateNode", "NNMultiaryGradientStateNode",
            "NNBinaryArithmeticNode", "NNAdditionNode", "NNSubtractionNode",
            "NNMultiplicationNode", "NNDivisionNode", "NNComparisonNode", "NNArithmeticGradientNode",
            "NNAdditionGradientNode", "NNSubtractionGradientNode", "NNMultiplicationGradientNode"]


cdef class NNBinaryGradientStateNode(NNStateNode):
    """The result state of a node of two sources, read by its two gradient nodes.

    MPS: MPSNNBinaryGradientStateNode
    """


cdef class NNArithmeticGradientStateNode(NNBinaryGradientStateNode):
    """The result state of an addition, subtraction or multiplication node, read by its two gradient nodes: what
    their ``result_state`` is.

    MPS: MPSNNArithmeticGradientStateNode
    """


cdef class NNMultiaryGradientStateNode(NNStateNode):
    """The result state of a node of several sources. No mpsx node has more than two sources, so none makes one;
    the class keeps MPS's hierarchy.

    MPS: MPSNNMultiaryGradientStateNode
    """


cdef int64_t _stride_argument(object value, str name) except? -1:
    cdef int64_t stride = integer_argument(value, name)
    if stride not in (0, 1):
        raise ValueError(f"{name} must be 0 (broadcast) or 1, given {stride}")
    return stride


cdef class NNBinaryArithmeticNode(NNFilterNode):
    """NNBinaryArithmeticNode(left_source=None, right_source=None, *, sources=None)
--

    Arithmetic of two sources in a graph (CNNArithmetic):
    ``clamp((primary_scale * left) op (secondary_scale * right) + bias, minimum_value, maximum_value)``; strides of
    0 broadcast a source along x, y or feature channels. Abstract (TypeError): make a subclass with
    ``(left_source, right_source)`` or ``(sources=[left, right])``. As
    ``-[MPSNNBinaryArithmeticNode initWithLeftSource:rightSource:]``.

    MPS: MPSNNBinaryArithmeticNode
    """
    _mpsx_properties = ("primary_scale", "secondary_scale", "bias", "minimum_value", "maximum_value",
                        "primary_stride_in_pixels_x", "primary_stride_in_pixels_y", "primary_stride_in_feature_channels",
                        "secondary_stride_in_pixels_x", "secondary_stride_in_pixels_y",
                        "secondary_stride_in_feature_channels")
    _operation = None

    def __init__(self, left_source=None, right_source=None, *, sources=None):
        if type(self)._operation is None:
            raise TypeError("NNBinaryArithmeticNode is abstract; make an NNAdditionNode, NNSubtractionNode, "
                            "NNMultiplicationNode, NNDivisionNode or NNComparisonNode")
        if sources is not None:
            if left_source is not None or right_source is not None:
                raise TypeError(f"{type(self).__name__}: give left_source and right_source, or sources, not both")
            sources = list(sources) if isinstance(sources, (list, tuple)) else sources
            if not isinstance(sources, list) or len(sources) != 2:
                raise ValueError(f"{type(self).__name__}: sources must be a list of two NNImageNodes, given "
                                 f"{sources!r}")
            left_source, right_source = sources
        self._made(<shared_ptr[CFilterNode]>make_native[CNNBinaryArithmeticNode](
            <ArithmeticOperation><int>type(self)._operation, _image_node_argument(left_source, "left_source").c,
            _image_node_argument(right_source, "right_source").c), (left_source, right_source))

    @classmethod
    def node_with_left_source(cls, left_source, right_source):
        """The same as ``NNBinaryArithmeticNode(...)``: a new node.

        MPS: +[MPSNNBinaryArithmeticNode nodeWithLeftSource:rightSource:]
        """
        return cls(left_source, right_source)

    @classmethod
    def node_with_sources(cls, sources):
        """A new node of ``sources`` ``[left, right]``.

        MPS: +[MPSNNBinaryArithmeticNode nodeWithSources:]
        """
        return cls(sources=sources)

    def gradient_class(self):
        """The class of the gradient nodes of this node's sources (NNAdditionGradientNode, NNSubtractionGradientNode,
        NNMultiplicationGradientNode), or None for division and comparison, which have no gradient node.

        MPS: -[MPSNNBinaryArithmeticNode gradientClass]
        """
        for cls in (NNAdditionGradientNode, NNSubtractionGradientNode, NNMultiplicationGradientNode):
            if cls._operation == type(self)._operation:
                return cls
        return None

    def _natively_made_arguments(self):
        return tuple(self.source_images)

    cdef CNNBinaryArithmeticNode* arithmetic(self) except NULL:
        return <CNNBinaryArithmeticNode*>self.native()

    @property
    def binary_gradient_state(self):
        """The result state, an NNBinaryGradientStateNode (None for division and comparison).

        MPS: MPSNNFilterNode.resultState
        """
        return self.result_state

    @property
    def primary_scale(self):
        """The factor of the primary (left) source (default 1).

        MPS: MPSNNBinaryArithmeticNode.primaryScale
        """
        return self.arithmetic().parameters.primary_scale

    @primary_scale.setter
    def primary_scale(self, value):
        self.arithmetic().parameters.primary_scale = parameter(self.native().class_name(), value, "primary_scale")

    @property
    def secondary_scale(self):
        """The factor of the secondary (right) source (default 1).

        MPS: MPSNNBinaryArithmeticNode.secondaryScale
        """
        return self.arithmetic().parameters.secondary_scale

    @secondary_scale.setter
    def secondary_scale(self, value):
        self.arithmetic().parameters.secondary_scale = parameter(self.native().class_name(), value, "secondary_scale")

    @property
    def bias(self):
        """The term added after the operation (default 0).

        MPS: MPSNNBinaryArithmeticNode.bias
        """
        return self.arithmetic().parameters.bias

    @bias.setter
    def bias(self, value):
        self.arithmetic().parameters.bias = parameter(self.native().class_name(), value, "bias")

    @property
    def minimum_value(self):
        """The lower clamp of the result (default -FLT_MAX).

        MPS: MPSNNBinaryArithmeticNode.minimumValue
        """
        return self.arithmetic().parameters.minimum

    @minimum_value.setter
    def minimum_value(self, value):
        self.arithmetic().parameters.minimum = parameter(self.native().class_name(), value, "minimum_value")

    @property
    def maximum_value(self):
        """The upper clamp of the result (default FLT_MAX).

        MPS: MPSNNBinaryArithmeticNode.maximumValue
        """
        return self.arithmetic().parameters.maximum

    @maximum_value.setter
    def maximum_value(self, value):
        self.arithmetic().parameters.maximum = parameter(self.native().class_name(), value, "maximum_value")

    @property
    def primary_stride_in_pixels_x(self):
        """The primary source's stride in x, 0 (broadcast) or 1 (default).

        MPS: MPSNNBinaryArithmeticNode.primaryStrideInPixelsX
        """
        return self.arithmetic().primary_stride_in_pixels_x

    @primary_stride_in_pixels_x.setter
    def primary_stride_in_pixels_x(self, value):
        self.arithmetic().primary_stride_in_pixels_x = _stride_argument(value, "primary_stride_in_pixels_x")

    @property
    def primary_stride_in_pixels_y(self):
        """The primary source's stride in y, 0 (broadcast) or 1 (default).

        MPS: MPSNNBinaryArithmeticNode.primaryStrideInPixelsY
        """
        return self.arithmetic().primary_stride_in_pixels_y

    @primary_stride_in_pixels_y.setter
    def primary_stride_in_pixels_y(self, value):
        self.arithmetic().primary_stride_in_pixels_y = _stride_argument(value, "primary_stride_in_pixels_y")

    @property
    def primary_stride_in_feature_channels(self):
        """The primary source's stride over feature channels, 0 (broadcast) or 1 (default).

        MPS: MPSNNBinaryArithmeticNode.primaryStrideInFeatureChannels
        """
        return self.arithmetic().primary_stride_in_feature_channels

    @primary_stride_in_feature_channels.setter
    def primary_stride_in_feature_channels(self, value):
        self.arithmetic().primary_stride_in_feature_channels = _stride_argument(value, "primary_stride_in_feature_channels")

    @property
    def secondary_stride_in_pixels_x(self):
        """The secondary source's stride in x, 0 (broadcast) or 1 (default).

        MPS: MPSNNBinaryArithmeticNode.secondaryStrideInPixelsX
        """
        return self.arithmetic().secondary_stride_in_pixels_x

    @secondary_stride_in_pixels_x.setter
    def secondary_stride_in_pixels_x(self, value):
        self.arithmetic().secondary_stride_in_pixels_x = _stride_argument(value, "secondary_stride_in_pixels_x")

    @property
    def secondary_stride_in_pixels_y(self):
        """The secondary source's stride in y, 0 (broadcast) or 1 (default).

        MPS: MPSNNBinaryArithmeticNode.secondaryStrideInPixelsY
        """
        return self.arithmetic().secondary_stride_in_pixels_y

    @secondary_stride_in_pixels_y.setter
    def secondary_stride_in_pixels_y(self, value):
        self.arithmetic().secondary_stride_in_pixels_y = _stride_argument(value, "secondary_stride_in_pixels_y")

    @property
    def secondary_stride_in_feature_channels(self):
        """The secondary source's stride over feature channels, 0 (broadcast) or 1 (default).

        MPS: MPSNNBinaryArithmeticNode.secondaryStrideInFeatureChannels
        """
        return self.arithmetic().secondary_stride_in_feature_channels

    @secondary_stride_in_feature_channels.setter
    def secondary_stride_in_feature_channels(self, value):
        self.arithmetic().secondary_stride_in_feature_channels = _stride_argument(value, "secondary_stride_in_feature_channels")


cdef class NNAdditionNode(NNBinaryArithmeticNode):
    """``left + right`` (CNNAdd).

    MPS: MPSNNAdditionNode
    """
    _operation = 0


cdef class NNSubtractionNode(NNBinaryArithmeticNode):
    """``left - right`` (CNNSubtract).

    MPS: MPSNNSubtractionNode
    """
    _operation = 1


cdef class NNMultiplicationNode(NNBinaryArithmeticNode):
    """``left * right`` (CNNMultiply).

    MPS: MPSNNMultiplicationNode
    """
    _operation = 2


cdef class NNDivisionNode(NNBinaryArithmeticNode):
    """``left / right`` (CNNDivide); it has no gradient.

    MPS: MPSNNDivisionNode
    """
    _operation = 3


cdef class NNComparisonNode(NNBinaryArithmeticNode):
    """1 where ``left comparison_type right`` holds, else 0 (NNCompare); it has no gradient.

    MPS: MPSNNComparisonNode
    """
    _mpsx_properties = ("comparison_type",)
    _operation = 4

    @property
    def comparison_type(self):
        """The comparison, an NNComparisonType (default EQUAL); ValueError for another value.

        MPS: MPSNNComparisonNode.comparisonType
        """
        return NNComparisonType(<int>self.arithmetic().parameters.comparison)

    @comparison_type.setter
    def comparison_type(self, value):
        cdef int64_t t = integer_argument(value, "comparison_type")
        if not 0 <= t <= 5:
            raise ValueError(f"comparison_type must be an NNComparisonType (0 to 5), given {t}")
        self.arithmetic().parameters.comparison = <CComparisonType><int>t


cdef class NNArithmeticGradientNode(NNGradientFilterNode):
    """NNArithmeticGradientNode(source_gradient=None, source_image=None, gradient_state=None,
        is_secondary_source_filter=False, *, gradient_images=None, forward_filter=None)
--

    The gradient node of the primary or secondary source of an arithmetic node. ``source_image`` is the forward
    image the gradient reads: for addition and subtraction the image whose gradient it computes, for multiplication
    the other one. Abstract (TypeError): use a subclass; the forward node's ``gradient_filters_with_sources`` makes
    both, wired. As
    ``-[MPSNNArithmeticGradientNode initWithSourceGradient:sourceImage:gradientState:isSecondarySourceFilter:]``.
    ``(gradient_images=[gradient], forward_filter=node, is_secondary_source_filter=...)`` instead of the images and
    the state is ``-[MPSNNArithmeticGradientNode initWithGradientImages:forwardFilter:isSecondarySourceFilter:]``:
    the node ``with_gradient_images`` returns.

    MPS: MPSNNArithmeticGradientNode
    """
    _mpsx_properties = ("primary_scale", "secondary_scale", "bias", "minimum_value", "maximum_value",
                        "secondary_stride_in_pixels_x", "secondary_stride_in_pixels_y",
                        "secondary_stride_in_feature_channels")
    _operation = None

    def __init__(self, source_gradient=None, source_image=None, gradient_state=None,
                 is_secondary_source_filter=False, *, gradient_images=None, forward_filter=None):
        if type(self)._operation is None:
            raise TypeError("NNArithmeticGradientNode is abstract; make an NNAdditionGradientNode, "
                            "NNSubtractionGradientNode or NNMultiplicationGradientNode")
        if not isinstance(is_secondary_source_filter, (bool, int)):
            raise TypeError(f"is_secondary_source_filter: expected a bool, given "
                            f"{type(is_secondary_source_filter).__name__}")
        if (gradient_images is None) != (forward_filter is None):
            raise TypeError(f"{type(self).__name__}: gradient_images and forward_filter go together")
        if forward_filter is not None:
            if source_gradient is not None or source_image is not None or gradient_state is not None:
                raise TypeError(f"{type(self).__name__}: give source_gradient, source_image and gradient_state, "
                                f"or gradient_images and forward_filter, not both")
            self.c = (<NNFilterNode>type(self).with_gradient_images(gradient_images, forward_filter,
                                                                    is_secondary_source_filter)).c
            return
        if not isinstance(gradient_state, NNStateNode):
            raise TypeError(f"gradient_state: expected an NNBinaryGradientStateNode, given "
                            f"{type(gradient_state).__name__}")
        self._made(<shared_ptr[CFilterNode]>make_native[CNNArithmeticGradientNode](
            <ArithmeticOperation><int>type(self)._operation,
            _image_node_argument(source_gradient, "source_gradient").c,
            _image_node_argument(source_image, "source_image").c, (<NNStateNode>gradient_state).c,
            <cbool>bool(is_secondary_source_filter)),
            (source_gradient, source_image, gradient_state, bool(is_secondary_source_filter)))

    @classmethod
    def node_with_source_gradient(cls, source_gradient, source_image, gradient_state, is_secondary_source_filter):
        """The same as ``NNArithmeticGradientNode(...)``: a new node.

        MPS: +[MPSNNArithmeticGradientNode nodeWithSourceGradient:sourceImage:gradientState:isSecondarySourceFilter:]
        """
        return cls(source_gradient, source_image, gradient_state, is_secondary_source_filter)

    @classmethod
    def with_gradient_images(cls, gradient_images, forward_filter, is_secondary_source_filter):
        """The gradient node of ``forward_filter``'s primary or secondary source, its source image and state wired in.
        TypeError for a forward node whose gradient is not of this class.

        MPS: -[MPSNNArithmeticGradientNode initWithGradientImages:forwardFilter:isSecondarySourceFilter:]
        """
        if not isinstance(forward_filter, NNBinaryArithmeticNode):
            raise TypeError(f"forward_filter: expected an arithmetic node, given {type(forward_filter).__name__}")
        node = forward_filter.gradient_filters_with_sources(gradient_images)[1 if is_secondary_source_filter else 0]
        if type(node) is not cls:
            raise TypeError(f"{cls.__name__}: forward_filter is a {type(forward_filter).__name__}, whose gradient "
                            f"is a {type(node).__name__}")
        return node

    cdef CNNArithmeticGradientNode* gradient(self) except NULL:
        return <CNNArithmeticGradientNode*>self.native()

    @property
    def is_secondary_source_filter(self):
        """Whether this node makes the gradient for the secondary (right) source.

        MPS: MPSNNArithmeticGradientNode.isSecondarySourceFilter
        """
        return self.gradient().is_secondary_source_filter()

    @property
    def primary_scale(self):
        """The factor of the primary (left) source in the forward node (default 1).

        MPS: MPSNNArithmeticGradientNode.primaryScale
        """
        return self.gradient().primary_scale

    @primary_scale.setter
    def primary_scale(self, value):
        self.gradient().primary_scale = parameter(self.native().class_name(), value, "primary_scale")

    @property
    def secondary_scale(self):
        """The factor of the secondary (right) source in the forward node (default 1).

        MPS: MPSNNArithmeticGradientNode.secondaryScale
        """
        return self.gradient().secondary_scale

    @secondary_scale.setter
    def secondary_scale(self, value):
        self.gradient().secondary_scale = parameter(self.native().class_name(), value, "secondary_scale")

    @property
    def bias(self):
        """The term added after the operation in the forward node (default 0).

        MPS: MPSNNArithmeticGradientNode.bias
        """
        return self.gradient().bias

    @bias.setter
    def bias(self, value):
        self.gradient().bias = parameter(self.native().class_name(), value, "bias")

    @property
    def minimum_value(self):
        """The lower clamp of the result in the forward node (default -FLT_MAX).

        MPS: MPSNNArithmeticGradientNode.minimumValue
        """
        return self.gradient().minimum_value

    @minimum_value.setter
    def minimum_value(self, value):
        self.gradient().minimum_value = parameter(self.native().class_name(), value, "minimum_value")

    @property
    def maximum_value(self):
        """The upper clamp of the result in the forward node (default FLT_MAX).

        MPS: MPSNNArithmeticGradientNode.maximumValue
        """
        return self.gradient().maximum_value

    @maximum_value.setter
    def maximum_value(self, value):
        self.gradient().maximum_value = parameter(self.native().class_name(), value, "maximum_value")

    @property
    def secondary_stride_in_pixels_x(self):
        """The secondary source's stride in x, 0 (broadcast) or 1 (default), the forward node's.

        MPS: MPSNNArithmeticGradientNode.secondaryStrideInPixelsX
        """
        return self.gradient().secondary_stride_in_pixels_x

    @secondary_stride_in_pixels_x.setter
    def secondary_stride_in_pixels_x(self, value):
        self.gradient().secondary_stride_in_pixels_x = _stride_argument(value, "secondary_stride_in_pixels_x")

    @property
    def secondary_stride_in_pixels_y(self):
        """The secondary source's stride in y, 0 (broadcast) or 1 (default), the forward node's.

        MPS: MPSNNArithmeticGradientNode.secondaryStrideInPixelsY
        """
        return self.gradient().secondary_stride_in_pixels_y

    @secondary_stride_in_pixels_y.setter
    def secondary_stride_in_pixels_y(self, value):
        self.gradient().secondary_stride_in_pixels_y = _stride_argument(value, "secondary_stride_in_pixels_y")

    @property
    def secondary_stride_in_feature_channels(self):
        """The secondary source's stride over feature channels, 0 (broadcast) or 1 (default), the forward node's.

        MPS: MPSNNArithmeticGradientNode.secondaryStrideInFeatureChannels
        """
        return self.gradient().secondary_stride_in_feature_channels

    @secondary_stride_in_feature_channels.setter
    def secondary_stride_in_feature_channels(self, value):
        self.gradient().secondary_stride_in_feature_channels = _stride_argument(value, "secondary_stride_in_feature_channels")


cdef class NNAdditionGradientNode(NNArithmeticGradientNode):
    """The gradient node of an NNAdditionNode.

    MPS: MPSNNAdditionGradientNode
    """
    _operation = 0


cdef class NNSubtractionGradientNode(NNArithmeticGradientNode):
    """The gradient node of an NNSubtractionNode.

    MPS: MPSNNSubtractionGradientNode
    """
    _operation = 1


cdef class NNMultiplicationGradientNode(NNArithmeticGradientNode):
    """The gradient node of an NNMultiplicationNode.

    MPS: MPSNNMultiplicationGradientNode
    """
    _operation = 2

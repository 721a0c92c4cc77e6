# MPSCNNArithmetic (Add, Subtract, Multiply, Divide, MPSNNCompare), its
# gradient state and gradients (included by _kernels.pyx).

from mpsx.includes.kernels.arithmetic cimport (
    ArithmeticOperation, CCNNArithmetic, CCNNArithmeticGradient, ComparisonType as CComparisonType)

__all__ += ["NNComparisonType", "CNNArithmetic", "CNNAdd", "CNNSubtract", "CNNMultiply", "CNNDivide", "NNCompare",
            "CNNArithmeticGradientState", "CNNArithmeticGradient", "CNNAddGradient", "CNNSubtractGradient",
            "CNNMultiplyGradient"]


class NNComparisonType(enum.IntEnum):
    """The comparisons of NNCompare: EQUAL and NOT_EQUAL within ``threshold``, LESS, LESS_OR_EQUAL, GREATER,
    GREATER_OR_EQUAL.

    MPS: MPSNNComparisonType
    """
    EQUAL = 0
    NOT_EQUAL = 1
    LESS = 2
    LESS_OR_EQUAL = 3
    GREATER = 4
    GREATER_OR_EQUAL = 5


cdef class CNNArithmeticGradientState(NNBinaryGradientState):
    """What the arithmetic gradients need of a forward encode (both source shapes, the broadcasting and the geometry).
    Made by ``result_state`` or ``encode(..., destination_state=True)``.

    MPS: MPSCNNArithmeticGradientState
    """


cdef class CNNArithmetic(CNNBinaryKernel):
    """Arithmetic of two images, per value:
    ``clamp((primary_scale * x) op (secondary_scale * y) + bias, minimum_value, maximum_value)``. Strides of 0
    broadcast the primary (x) or secondary (y) image along x, y or the feature channels. Abstract (TypeError): use a
    subclass.

    MPS: MPSCNNArithmetic
    """

    cdef _make(self, Device device, ArithmeticOperation operation):
        self._set_binary(<shared_ptr[CBinaryKernel]>make_native[CCNNArithmetic](device.shared(), operation),
                         CNNArithmeticGradientState)

    cdef CCNNArithmetic* arithmetic(self) except NULL:
        return <CCNNArithmetic*>self.binary_kernel()

    _mpsx_properties = ("primary_scale", "secondary_scale", "bias", "minimum_value", "maximum_value",
                        "primary_stride_in_feature_channels", "secondary_stride_in_feature_channels")

    @property
    def primary_scale(self):
        """The factor of the primary image (default 1).

        MPS: MPSCNNArithmetic.primaryScale
        """
        return self.arithmetic().parameters.primary_scale

    @primary_scale.setter
    def primary_scale(self, float value):
        self.arithmetic().parameters.primary_scale = parameter(self.arithmetic().class_name(), value, "primary_scale")

    @property
    def secondary_scale(self):
        """The factor of the secondary image (default 1).

        MPS: MPSCNNArithmetic.secondaryScale
        """
        return self.arithmetic().parameters.secondary_scale

    @secondary_scale.setter
    def secondary_scale(self, float value):
        self.arithmetic().parameters.secondary_scale = parameter(self.arithmetic().class_name(), value, "secondary_scale")

    @property
    def bias(self):
        """The term added after the operation (default 0).

        MPS: MPSCNNArithmetic.bias
        """
        return self.arithmetic().parameters.bias

    @bias.setter
    def bias(self, float value):
        self.arithmetic().parameters.bias = parameter(self.arithmetic().class_name(), value, "bias")

    @property
    def minimum_value(self):
        """The lower clamp of the result (default -FLT_MAX).

        MPS: MPSCNNArithmetic.minimumValue
        """
        return self.arithmetic().parameters.minimum

    @minimum_value.setter
    def minimum_value(self, float value):
        self.arithmetic().parameters.minimum = parameter(self.arithmetic().class_name(), value, "minimum_value")

    @property
    def maximum_value(self):
        """The upper clamp of the result (default FLT_MAX).

        MPS: MPSCNNArithmetic.maximumValue
        """
        return self.arithmetic().parameters.maximum

    @maximum_value.setter
    def maximum_value(self, float value):
        self.arithmetic().parameters.maximum = parameter(self.arithmetic().class_name(), value, "maximum_value")

    @property
    def primary_stride_in_feature_channels(self):
        """The primary image's stride over feature channels (default 1); 0 broadcasts one channel of it over all.

        MPS: MPSCNNArithmetic.primaryStrideInFeatureChannels
        """
        return self.arithmetic().primary_stride_in_feature_channels

    @primary_stride_in_feature_channels.setter
    def primary_stride_in_feature_channels(self, value):
        self.arithmetic().primary_stride_in_feature_channels = integer_argument(
            value, "primary_stride_in_feature_channels")

    @property
    def secondary_stride_in_feature_channels(self):
        """The secondary image's stride over feature channels (default 1); 0 broadcasts one channel of it over all.

        MPS: MPSCNNArithmetic.secondaryStrideInFeatureChannels
        """
        return self.arithmetic().secondary_stride_in_feature_channels

    @secondary_stride_in_feature_channels.setter
    def secondary_stride_in_feature_channels(self, value):
        self.arithmetic().secondary_stride_in_feature_channels = integer_argument(
            value, "secondary_stride_in_feature_channels")


cdef class CNNAdd(CNNArithmetic):
    """CNNAdd(device)
--

    ``(primary_scale * x) + (secondary_scale * y) + bias``, clamped. As ``-[MPSCNNAdd initWithDevice:]``.

    MPS: MPSCNNAdd
    """

    def __init__(self, Device device not None):
        self._make(device, ArithmeticOperation.Add)


cdef class CNNSubtract(CNNArithmetic):
    """CNNSubtract(device)
--

    ``(primary_scale * x) - (secondary_scale * y) + bias``, clamped. As ``-[MPSCNNSubtract initWithDevice:]``.

    MPS: MPSCNNSubtract
    """

    def __init__(self, Device device not None):
        self._make(device, ArithmeticOperation.Subtract)


cdef class CNNMultiply(CNNArithmetic):
    """CNNMultiply(device)
--

    ``(primary_scale * x) * (secondary_scale * y) + bias``, clamped. As ``-[MPSCNNMultiply initWithDevice:]``.

    MPS: MPSCNNMultiply
    """

    def __init__(self, Device device not None):
        self._make(device, ArithmeticOperation.Multiply)


cdef class CNNDivide(CNNArithmetic):
    """CNNDivide(device)
--

    ``(primary_scale * x) / (secondary_scale * y) + bias``, clamped. MPS has no gradient of it. As
    ``-[MPSCNNDivide initWithDevice:]``.

    MPS: MPSCNNDivide
    """

    def __init__(self, Device device not None):
        self._make(device, ArithmeticOperation.Divide)


cdef class NNCompare(CNNArithmetic):
    """NNCompare(device)
--

    1.0 where ``x comparison_type y`` holds, else 0.0 (EQUAL: ``|x - y| <= threshold``, NOT_EQUAL:
    ``|x - y| > threshold``); the scales and bias are not used, the clamp is. MPS has no gradient of it. As
    ``-[MPSNNCompare initWithDevice:]``.

    MPS: MPSNNCompare
    """

    def __init__(self, Device device not None):
        self._make(device, ArithmeticOperation.Compare)

    _mpsx_properties = ("comparison_type", "threshold")

    @property
    def comparison_type(self):
        """The comparison, an NNComparisonType (default EQUAL).

        MPS: MPSNNCompare.comparisonType
        """
        return NNComparisonType(<int>self.arithmetic().parameters.comparison)

    @comparison_type.setter
    def comparison_type(self, value):
        self.arithmetic().parameters.comparison = <CComparisonType><int>NNComparisonType(value)

    @property
    def threshold(self):
        """The tolerance of EQUAL and NOT_EQUAL (default 0).

        MPS: MPSNNCompare.threshold
        """
        return self.arithmetic().parameters.threshold

    @threshold.setter
    def threshold(self, float value):
        self.arithmetic().parameters.threshold = parameter(self.arithmetic().class_name(), value, "threshold")


cdef class CNNArithmeticGradient(CNNGradientKernel):
    """The gradient for the primary (``is_secondary_source_filter`` False) or the secondary forward image.

    ``primary_scale`` and ``secondary_scale`` are the forward's; ``bias`` is ignored and the clamp is not
    differentiated. ``source_image`` is the forward image this filter reads: for Add and Subtract the image whose
    gradient it makes, for Multiply the other one. Gradients are summed over the dimensions the forward image
    broadcast along. Abstract (TypeError): use a subclass.

    MPS: MPSCNNArithmeticGradient
    """

    cdef _make(self, Device device, ArithmeticOperation operation, is_secondary_source_filter):
        if not isinstance(is_secondary_source_filter, (bool, np.bool_)):
            raise TypeError(f"is_secondary_source_filter must be a bool, given "
                            f"{type(is_secondary_source_filter).__name__}")
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNArithmeticGradient](
            device.shared(), operation, <bint>is_secondary_source_filter))

    cdef CCNNArithmeticGradient* arithmetic(self) except NULL:
        return <CCNNArithmeticGradient*>self.gradient_kernel()

    _mpsx_properties = ("primary_scale", "secondary_scale", "bias", "minimum_value", "maximum_value",
                        "secondary_stride_in_feature_channels")

    def _mpsx_arguments(self):
        return (self.is_secondary_source_filter,)

    @property
    def is_secondary_source_filter(self):
        """Whether this filter makes the gradient for the secondary forward image.

        MPS: MPSCNNArithmeticGradient.isSecondarySourceFilter
        """
        return self.arithmetic().is_secondary_source_filter()

    @property
    def primary_scale(self):
        """The factor of the primary image in the forward kernel (default 1).

        MPS: MPSCNNArithmeticGradient.primaryScale
        """
        return self.arithmetic().primary_scale

    @primary_scale.setter
    def primary_scale(self, float value):
        self.arithmetic().primary_scale = parameter(self.arithmetic().class_name(), value, "primary_scale")

    @property
    def secondary_scale(self):
        """The factor of the secondary image in the forward kernel (default 1).

        MPS: MPSCNNArithmeticGradient.secondaryScale
        """
        return self.arithmetic().secondary_scale

    @secondary_scale.setter
    def secondary_scale(self, float value):
        self.arithmetic().secondary_scale = parameter(self.arithmetic().class_name(), value, "secondary_scale")

    @property
    def bias(self):
        """The term added after the operation in the forward kernel (default 0).

        MPS: MPSCNNArithmeticGradient.bias
        """
        return self.arithmetic().bias

    @bias.setter
    def bias(self, float value):
        self.arithmetic().bias = parameter(self.arithmetic().class_name(), value, "bias")

    @property
    def minimum_value(self):
        """The lower clamp of the result in the forward kernel (default -FLT_MAX).

        MPS: MPSCNNArithmeticGradient.minimumValue
        """
        return self.arithmetic().minimum_value

    @minimum_value.setter
    def minimum_value(self, float value):
        self.arithmetic().minimum_value = parameter(self.arithmetic().class_name(), value, "minimum_value")

    @property
    def maximum_value(self):
        """The upper clamp of the result in the forward kernel (default FLT_MAX).

        MPS: MPSCNNArithmeticGradient.maximumValue
        """
        return self.arithmetic().maximum_value

    @maximum_value.setter
    def maximum_value(self, float value):
        self.arithmetic().maximum_value = parameter(self.arithmetic().class_name(), value, "maximum_value")

    @property
    def secondary_stride_in_feature_channels(self):
        """The secondary image's stride over feature channels (default 1); 0 broadcasts one channel of it over all in
        the forward kernel.

        MPS: MPSCNNArithmeticGradient.secondaryStrideInFeatureChannels
        """
        return self.arithmetic().secondary_stride_in_feature_channels

    @secondary_stride_in_feature_channels.setter
    def secondary_stride_in_feature_channels(self, value):
        self.arithmetic().secondary_stride_in_feature_channels = integer_argument(
            value, "secondary_stride_in_feature_channels")


cdef class CNNAddGradient(CNNArithmeticGradient):
    """CNNAddGradient(device, is_secondary_source_filter)
--

    The gradient of CNNAdd: ``primary_scale`` (or ``secondary_scale``) times the incoming gradient, summed over the
    dimensions the forward image broadcast along. TypeError for an ``is_secondary_source_filter`` that is not a
    bool. As ``-[MPSCNNAddGradient initWithDevice:isSecondarySourceFilter:]``.

    MPS: MPSCNNAddGradient
    """

    def __init__(self, Device device not None, is_secondary_source_filter):
        self._make(device, ArithmeticOperation.Add, is_secondary_source_filter)


cdef class CNNSubtractGradient(CNNArithmeticGradient):
    """CNNSubtractGradient(device, is_secondary_source_filter)
--

    The gradient of CNNSubtract: ``primary_scale`` times the incoming gradient for the primary image,
    ``-secondary_scale`` times it for the secondary, summed over broadcast dimensions. As
    ``-[MPSCNNSubtractGradient initWithDevice:isSecondarySourceFilter:]``.

    MPS: MPSCNNSubtractGradient
    """

    def __init__(self, Device device not None, is_secondary_source_filter):
        self._make(device, ArithmeticOperation.Subtract, is_secondary_source_filter)


cdef class CNNMultiplyGradient(CNNArithmeticGradient):
    """CNNMultiplyGradient(device, is_secondary_source_filter)
--

    The gradient of CNNMultiply: ``primary_scale * secondary_scale`` times the other forward image (passed as
    ``source_image``) times the incoming gradient, summed over broadcast dimensions. As
    ``-[MPSCNNMultiplyGradient initWithDevice:isSecondarySourceFilter:]``.

    MPS: MPSCNNMultiplyGradient
    """

    def __init__(self, Device device not None, is_secondary_source_filter):
        self._make(device, ArithmeticOperation.Multiply, is_secondary_source_filter)

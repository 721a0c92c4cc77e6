# MPSCNNConvolution family (included by _kernels.pyx): descriptor, data source
# protocol, weights and gradient states, convolution, fully connected and
# their gradients.

from mpsx.includes.kernels.convolution cimport (
    AccumulatorPrecision, CCNNConvolution, CCNNConvolutionGradient, CCNNFullyConnected, CCNNFullyConnectedGradient,
    CConvolutionDataSource, CConvolutionGradientState, CConvolutionWeights, CConvolutionWeightsAndBiasesState,
    CPythonConvolutionDataSource, ConvolutionDataSourceCalls, ConvolutionDescriptor as CConvolutionDescriptor,
    ConvolutionGradientOption, WeightsQuantization, convolution_data_source_calls, python_object_of)
from mpsx.includes.buffer cimport CBuffer
from mpsx.includes.data_source cimport HostArray
from mpsx.includes.device cimport CDevice
from mpsx.includes.command_buffer cimport CCommandBuffer
from mpsx.includes.errors cimport hold
from cpython.ref cimport PyObject
from mpsx.includes.types cimport DataType as CDataType
from mpsx._runtime cimport Buffer, buffer_from_numpy, wrap_buffer

from libcpp cimport bool as cbool
from libcpp.memory cimport static_pointer_cast
from libcpp.optional cimport optional
from libcpp.string cimport string

from mpsx._errors import DeviceMismatchError
from mpsx._runtime import DataType

__all__ += ["ImageSizeEncodingState", "CNNConvolutionDescriptor", "CNNDepthWiseConvolutionDescriptor",
            "CNNSubPixelConvolutionDescriptor",
            "CNNConvolutionDataSource", "ConvolutionWeights", "CNNConvolutionWeightsAndBiasesState",
            "CNNConvolutionGradientState", "CNNConvolutionGradientOption", "NNConvolutionAccumulatorPrecisionOption",
            "CNNConvolutionWeightsLayout", "CNNConvolution", "CNNConvolutionGradient", "CNNFullyConnected",
            "CNNFullyConnectedGradient"]


def _cpu_runs_float16_convolutions():
    """For tests: whether the cpu backend runs convolutions of float16 images in float16 (oneDNN on a processor with
    AVX-512 FP16) rather than on float32 copies of them."""
    return CDevice.named(b"cpu").get().backend().runs_float16_convolutions()


class CNNConvolutionGradientOption(enum.IntFlag):
    """Which gradients CNNConvolutionGradient computes: GRADIENT_WITH_DATA (the source's),
    GRADIENT_WITH_WEIGHTS_AND_BIAS (into the gradient state) or ALL.

    MPS: MPSCNNConvolutionGradientOption
    """
    GRADIENT_WITH_DATA = 1
    GRADIENT_WITH_WEIGHTS_AND_BIAS = 2
    ALL = 3


class CNNConvolutionWeightsLayout(enum.IntEnum):
    """The layout of a convolution's weights: OHWI, [out][kernel_height][kernel_width][in / groups], the only one MPS
    has.

    MPS: MPSCNNConvolutionWeightsLayout
    """
    OHWI = 0


class NNConvolutionAccumulatorPrecisionOption(enum.IntFlag):
    """The precision a convolution sums in: FLOAT (the default) or HALF, which lets a backend sum in less than float32
    (TF32 tensor cores on cuda; the cpu backend always sums in float32).

    MPS: MPSNNConvolutionAccumulatorPrecisionOption
    """
    HALF = 0
    FLOAT = 1


cdef AccumulatorPrecision accumulator_precision_of(value, str name) except *:
    """An NNConvolutionAccumulatorPrecisionOption, its int value, or mpsx's earlier form "half" or "float"."""
    if isinstance(value, str) and value in ("half", "float"):
        return AccumulatorPrecision.Half if value == "half" else AccumulatorPrecision.Float
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return AccumulatorPrecision.Half if value == 0 else AccumulatorPrecision.Float
    raise ValueError(f"{name} must be NNConvolutionAccumulatorPrecisionOption.HALF or FLOAT (or 'half', 'float'), "
                     f"given {value!r}")


cdef class CNNConvolutionDescriptor:
    """CNNConvolutionDescriptor(kernel_width, kernel_height, input_feature_channels, output_feature_channels,
        stride_in_pixels_x=1, stride_in_pixels_y=1, dilation_rate_x=1, dilation_rate_y=1, groups=1,
        fused_neuron_descriptor=None)
--

    The shape of a convolution: window, feature channels, strides, dilation, groups and an optional fused neuron (an
    NNNeuronDescriptor applied to the result).

    The channel counts must divide by ``groups``; ValueError for sizes that are not positive. Every property is
    settable, as in MPS: a size that is not positive raises at once, and the whole descriptor is checked again when a
    convolution is made from it (a convolution keeps the descriptor it was made with).

    MPS: MPSCNNConvolutionDescriptor
    """
    cdef CConvolutionDescriptor desc
    cdef object _neuron

    def __init__(self, kernel_width, kernel_height, input_feature_channels, output_feature_channels,
                 stride_in_pixels_x=1, stride_in_pixels_y=1, dilation_rate_x=1, dilation_rate_y=1, groups=1,
                 fused_neuron_descriptor=None):
        self.desc.kernel_width = integer_argument(kernel_width, "kernel_width")
        self.desc.kernel_height = integer_argument(kernel_height, "kernel_height")
        self.desc.input_feature_channels = integer_argument(input_feature_channels, "input_feature_channels")
        self.desc.output_feature_channels = integer_argument(output_feature_channels, "output_feature_channels")
        self.desc.stride_x = integer_argument(stride_in_pixels_x, "stride_in_pixels_x")
        self.desc.stride_y = integer_argument(stride_in_pixels_y, "stride_in_pixels_y")
        self.desc.dilation_x = integer_argument(dilation_rate_x, "dilation_rate_x")
        self.desc.dilation_y = integer_argument(dilation_rate_y, "dilation_rate_y")
        self.desc.groups = integer_argument(groups, "groups")
        self.desc.fused_neuron = neuron_descriptor_of(fused_neuron_descriptor)
        self.desc.validate()


    @classmethod
    def cnn_convolution_descriptor_with_kernel_width(cls, kernel_width, kernel_height, input_feature_channels,
                                                     output_feature_channels):
        """A new descriptor of a ``kernel_width`` x ``kernel_height`` window from ``input_feature_channels`` to
        ``output_feature_channels``, with stride, dilation and groups 1 and no fused neuron: the same as
        ``CNNConvolutionDescriptor(kernel_width, kernel_height, input_feature_channels, output_feature_channels)``.

        MPS: +[MPSCNNConvolutionDescriptor cnnConvolutionDescriptorWithKernelWidth:kernelHeight:inputFeatureChannels:outputFeatureChannels:]
        """
        return cls(kernel_width, kernel_height, input_feature_channels, output_feature_channels)

    @property
    def kernel_width(self):
        """The width of the kernel window.

        MPS: MPSCNNConvolutionDescriptor.kernelWidth
        """
        return self.desc.kernel_width

    @kernel_width.setter
    def kernel_width(self, value):
        self.desc.kernel_width = _descriptor_size(value, "kernel_width")

    @property
    def kernel_height(self):
        """The height of the kernel window.

        MPS: MPSCNNConvolutionDescriptor.kernelHeight
        """
        return self.desc.kernel_height

    @kernel_height.setter
    def kernel_height(self, value):
        self.desc.kernel_height = _descriptor_size(value, "kernel_height")

    @property
    def input_feature_channels(self):
        """The number of feature channels of the source.

        MPS: MPSCNNConvolutionDescriptor.inputFeatureChannels
        """
        return self.desc.input_feature_channels

    @input_feature_channels.setter
    def input_feature_channels(self, value):
        self.desc.input_feature_channels = _descriptor_size(value, "input_feature_channels")

    @property
    def output_feature_channels(self):
        """The number of feature channels of the destination.

        MPS: MPSCNNConvolutionDescriptor.outputFeatureChannels
        """
        return self.desc.output_feature_channels

    @output_feature_channels.setter
    def output_feature_channels(self, value):
        self.desc.output_feature_channels = _descriptor_size(value, "output_feature_channels")

    @property
    def stride_in_pixels_x(self):
        """The stride in x: how far the window moves per destination pixel.

        MPS: MPSCNNConvolutionDescriptor.strideInPixelsX
        """
        return self.desc.stride_x

    @stride_in_pixels_x.setter
    def stride_in_pixels_x(self, value):
        self.desc.stride_x = _descriptor_size(value, "stride_in_pixels_x")

    @property
    def stride_in_pixels_y(self):
        """The stride in y: how far the window moves per destination pixel.

        MPS: MPSCNNConvolutionDescriptor.strideInPixelsY
        """
        return self.desc.stride_y

    @stride_in_pixels_y.setter
    def stride_in_pixels_y(self, value):
        self.desc.stride_y = _descriptor_size(value, "stride_in_pixels_y")

    @property
    def dilation_rate_x(self):
        """The distance in x between the window's taps.

        MPS: MPSCNNConvolutionDescriptor.dilationRateX
        """
        return self.desc.dilation_x

    @dilation_rate_x.setter
    def dilation_rate_x(self, value):
        self.desc.dilation_x = _descriptor_size(value, "dilation_rate_x")

    @property
    def dilation_rate_y(self):
        """The distance in y between the window's taps.

        MPS: MPSCNNConvolutionDescriptor.dilationRateY
        """
        return self.desc.dilation_y

    @dilation_rate_y.setter
    def dilation_rate_y(self, value):
        self.desc.dilation_y = _descriptor_size(value, "dilation_rate_y")

    @property
    def groups(self):
        """The number of groups the feature channels are split into; each output group sees one input group.

        MPS: MPSCNNConvolutionDescriptor.groups
        """
        return self.desc.groups

    @groups.setter
    def groups(self, value):
        self.desc.groups = _descriptor_size(value, "groups")

    @property
    def fused_neuron_descriptor(self):
        """The neuron applied to the result, or None.

        MPS: MPSCNNConvolutionDescriptor.fusedNeuronDescriptor
        """
        if self.desc.fused_neuron.type == <CNeuronType>0:
            return None
        cdef NNNeuronDescriptor d = NNNeuronDescriptor.__new__(NNNeuronDescriptor)
        d.desc = self.desc.fused_neuron
        return d

    @fused_neuron_descriptor.setter
    def fused_neuron_descriptor(self, value):
        cdef CNeuronDescriptor neuron = neuron_descriptor_of(value)
        neuron.validate()
        self.desc.fused_neuron = neuron
        self._neuron = None

    def set_neuron_type(self, neuron_type, parameter_a=0.0, parameter_b=0.0):
        """Fuses a neuron of ``neuron_type`` with ``a`` = ``parameter_a`` and ``b`` = ``parameter_b`` (a NeuronType.NONE
        fuses none): sets ``fused_neuron_descriptor``. Deprecated, as in MPS ("set fusedNeuronDescriptor property
        instead"): warns with a DeprecationWarning.

        MPS: -[MPSCNNConvolutionDescriptor setNeuronType:parameterA:parameterB:]
        """
        warnings.warn("CNNConvolutionDescriptor.set_neuron_type is deprecated, as MPS's setNeuronType:parameterA:"
                      "parameterB: is: set fused_neuron_descriptor instead", DeprecationWarning, stacklevel=2)
        self.fused_neuron_descriptor = NNNeuronDescriptor(neuron_type, parameter_a, parameter_b)

    def set_neuron_to_p_re_lu_with_parameters_a(self, parameters_a):
        """Fuses a PReLU neuron of slopes ``parameters_a``, one per output feature channel: sets
        ``fused_neuron_descriptor``. Deprecated, as in MPS ("use fusedNeuronDescriptor property instead"): warns with
        a DeprecationWarning.

        MPS: -[MPSCNNConvolutionDescriptor setNeuronToPReLUWithParametersA:]
        """
        warnings.warn("CNNConvolutionDescriptor.set_neuron_to_p_re_lu_with_parameters_a is deprecated, as MPS's "
                      "setNeuronToPReLUWithParametersA: is: set fused_neuron_descriptor instead", DeprecationWarning,
                      stacklevel=2)
        self.fused_neuron_descriptor = NNNeuronDescriptor(NeuronType.PRELU, data=parameters_a)

    def neuron_type(self):
        """The fused neuron's type, NeuronType.NONE without one (MPS's deprecated getter of ``set_neuron_type``).

        MPS: -[MPSCNNConvolutionDescriptor neuronType]
        """
        return NeuronType(<int>self.desc.fused_neuron.type)

    def neuron_parameter_a(self):
        """The fused neuron's ``a`` (MPS's deprecated getter of ``set_neuron_type``).

        MPS: -[MPSCNNConvolutionDescriptor neuronParameterA]
        """
        return self.desc.fused_neuron.a

    def neuron_parameter_b(self):
        """The fused neuron's ``b`` (MPS's deprecated getter of ``set_neuron_type``).

        MPS: -[MPSCNNConvolutionDescriptor neuronParameterB]
        """
        return self.desc.fused_neuron.b

    @property
    def neuron(self):
        """The CNNNeuron last set here whose function is fused, or None (also once ``fused_neuron_descriptor`` is set
        after it). Deprecated, as in MPS: setting it sets ``fused_neuron_descriptor`` to the neuron's descriptor
        (None: no neuron) and warns with a DeprecationWarning.

        MPS: MPSCNNConvolutionDescriptor.neuron
        """
        return self._neuron

    @neuron.setter
    def neuron(self, value):
        if value is not None and not isinstance(value, CNNNeuron):
            raise TypeError(f"neuron must be an mpsx.CNNNeuron or None, given {type(value).__name__}")
        warnings.warn("CNNConvolutionDescriptor.neuron is deprecated, as MPSCNNConvolutionDescriptor.neuron is: set "
                      "fused_neuron_descriptor instead", DeprecationWarning, stacklevel=2)
        self.fused_neuron_descriptor = None if value is None else value.neuron_descriptor
        self._neuron = value

    def set_batch_normalization_parameters_for_inference_with_mean(self, mean, variance, gamma, beta, epsilon):
        """Folds batch normalization for inference into the convolution: with ``I = gamma / sqrt(variance +
        epsilon)`` and ``J = beta - I * mean`` per output feature channel, a convolution made from this descriptor
        computes with weights ``w * I`` and biases ``b * I + J`` (b zero without bias terms). Each of ``mean``,
        ``variance``, ``gamma``, ``beta`` has one value per output feature channel, or is None for 0, 1, 1, 0.
        ValueError for another count.

        MPS: -[MPSCNNConvolutionDescriptor setBatchNormalizationParametersForInferenceWithMean:variance:gamma:beta:epsilon:]
        """
        cdef int64_t n = self.desc.output_feature_channels
        values = []
        for name, value, default in (("mean", mean, 0.0), ("variance", variance, 1.0), ("gamma", gamma, 1.0),
                                     ("beta", beta, 0.0)):
            a = np.full(n, default, np.float32) if value is None else \
                np.ascontiguousarray(host_values(value), dtype=np.float32).reshape(-1)
            if a.shape[0] != n:
                raise ValueError(f"{name} must hold one value per output feature channel ({n}), given {a.shape[0]}")
            values.append(a)
        e = float_argument(epsilon, "epsilon")
        self.desc.batch_normalization_mean = values[0]
        self.desc.batch_normalization_variance = values[1]
        self.desc.batch_normalization_gamma = values[2]
        self.desc.batch_normalization_beta = values[3]
        self.desc.batch_normalization_epsilon = e
        self.desc.batch_normalization = True

    cdef object _batch_normalization(self):
        if not self.desc.batch_normalization:
            return None
        return ([float(v) for v in self.desc.batch_normalization_mean],
                [float(v) for v in self.desc.batch_normalization_variance],
                [float(v) for v in self.desc.batch_normalization_gamma],
                [float(v) for v in self.desc.batch_normalization_beta], self.desc.batch_normalization_epsilon)

    @property
    def weights_shape(self):
        """The shape of the weights, OHWI:
        ``(output_feature_channels, kernel_height, kernel_width, input_feature_channels / groups)``.

        MPS: none (mpsx)
        """
        return (self.desc.output_feature_channels, self.desc.kernel_height, self.desc.kernel_width,
                self.desc.input_feature_channels // self.desc.groups)

    def __mpsx_state__(self):
        state = {"arguments": (self.kernel_width, self.kernel_height, self.input_feature_channels,
                               self.output_feature_channels, self.stride_in_pixels_x,
                               self.stride_in_pixels_y, self.dilation_rate_x, self.dilation_rate_y,
                               self.groups, self.fused_neuron_descriptor)}
        if self.desc.batch_normalization:
            state["batch_normalization"] = self._batch_normalization()
        return state

    @classmethod
    def __mpsx_restore__(cls, state, device):
        d = cls(*state["arguments"])
        if state.get("batch_normalization") is not None:
            d.set_batch_normalization_parameters_for_inference_with_mean(*state["batch_normalization"])
        return d

    def __reduce__(self):
        return persistence_reduce(self)

    def __eq__(self, other):
        if not isinstance(other, CNNConvolutionDescriptor):
            return NotImplemented
        return self.desc.depthwise == (<CNNConvolutionDescriptor>other).desc.depthwise and \
            self.desc.sub_pixel_scale_factor == (<CNNConvolutionDescriptor>other).desc.sub_pixel_scale_factor and \
            self.__mpsx_state__()["arguments"][:8] == other.__mpsx_state__()["arguments"][:8] and \
            self.groups == other.groups and self.fused_neuron_descriptor == other.fused_neuron_descriptor and \
            self._batch_normalization() == (<CNNConvolutionDescriptor>other)._batch_normalization()

    def __repr__(self):
        return (f"mpsx.CNNConvolutionDescriptor(kernel {self.kernel_width}x{self.kernel_height}, "
                f"{self.input_feature_channels} -> {self.output_feature_channels}, "
                f"stride {self.stride_in_pixels_x}x{self.stride_in_pixels_y}, "
                f"dilation {self.dilation_rate_x}x{self.dilation_rate_y}, groups {self.groups})")


cdef class CNNDepthWiseConvolutionDescriptor(CNNConvolutionDescriptor):
    """CNNDepthWiseConvolutionDescriptor(kernel_width, kernel_height, input_feature_channels, output_feature_channels,
        stride_in_pixels_x=1, stride_in_pixels_y=1, dilation_rate_x=1, dilation_rate_y=1,
        fused_neuron_descriptor=None)
--

    A depthwise convolution: each input feature channel k is convolved with ``channel_multiplier`` filters of its own,
    into output channels ``k * channel_multiplier + q``; no channel mixes with another. The output channels must be a
    multiple of the input channels. The weights are [input][channel_multiplier][kernel_height][kernel_width], which is
    [output][kernel_height][kernel_width], the OHWI layout with one input channel (``weights_shape``).

    ``groups`` is 1, as MPS requires of this descriptor; the convolution is computed as one group per input channel.

    MPS: MPSCNNDepthWiseConvolutionDescriptor
    """

    def __init__(self, kernel_width, kernel_height, input_feature_channels, output_feature_channels,
                 stride_in_pixels_x=1, stride_in_pixels_y=1, dilation_rate_x=1, dilation_rate_y=1,
                 fused_neuron_descriptor=None):
        CNNConvolutionDescriptor.__init__(self, kernel_width, kernel_height, input_feature_channels,
                                          output_feature_channels, stride_in_pixels_x, stride_in_pixels_y,
                                          dilation_rate_x, dilation_rate_y, input_feature_channels,
                                          fused_neuron_descriptor)

    def __cinit__(self):
        # Also when made without __init__: a depthwise descriptor of one channel.
        self.desc.depthwise = True

    @property
    def channel_multiplier(self):
        """How many output feature channels each input feature channel produces: output / input feature channels.

        MPS: MPSCNNDepthWiseConvolutionDescriptor.channelMultiplier
        """
        return self.desc.output_feature_channels // self.desc.input_feature_channels

    @property
    def input_feature_channels(self):
        """The number of feature channels of the source; each is one group.

        MPS: MPSCNNConvolutionDescriptor.inputFeatureChannels
        """
        return self.desc.input_feature_channels

    @input_feature_channels.setter
    def input_feature_channels(self, value):
        self.desc.input_feature_channels = _descriptor_size(value, "input_feature_channels")
        self.desc.groups = self.desc.input_feature_channels

    @property
    def groups(self):
        """1: MPS's depthwise descriptor has no groups ("group must be 1"); setting another value raises ValueError.

        MPS: MPSCNNConvolutionDescriptor.groups
        """
        return 1

    @groups.setter
    def groups(self, value):
        if _descriptor_size(value, "groups") != 1:
            raise ValueError(f"CNNDepthWiseConvolutionDescriptor.groups must be 1, as in MPS; given {value!r}")

    def __mpsx_state__(self):
        state = CNNConvolutionDescriptor.__mpsx_state__(self)
        state["arguments"] = state["arguments"][:8] + state["arguments"][9:]
        return state

    def __repr__(self):
        return (f"mpsx.CNNDepthWiseConvolutionDescriptor(kernel {self.kernel_width}x{self.kernel_height}, "
                f"{self.input_feature_channels} -> {self.output_feature_channels}, "
                f"stride {self.stride_in_pixels_x}x{self.stride_in_pixels_y}, "
                f"dilation {self.dilation_rate_x}x{self.dilation_rate_y})")


cdef class CNNSubPixelConvolutionDescriptor(CNNConvolutionDescriptor):
    """CNNSubPixelConvolutionDescriptor(kernel_width, kernel_height, input_feature_channels, output_feature_channels,
        stride_in_pixels_x=1, stride_in_pixels_y=1, dilation_rate_x=1, dilation_rate_y=1, groups=1,
        fused_neuron_descriptor=None, sub_pixel_scale_factor=1)
--

    A sub-pixel convolution: the convolution's N = ``output_feature_channels`` channels at each pixel of an
    intermediate result become an r x r block (r = ``sub_pixel_scale_factor``) of N / r^2 channels in the
    destination, in MPS's order: destination[x][y][c] = intermediate[x // r][y // r][(N / r^2) * (r * (y % r) +
    x % r) + c]. N must be a multiple of r^2. The intermediate result covers the clip region with
    ((width + r - 1) // r) x ((height + r - 1) // r) pixels; the destination an encode makes is r times the
    padding policy's size. MPS has no gradient of it.

    MPS: MPSCNNSubPixelConvolutionDescriptor
    """

    def __init__(self, kernel_width, kernel_height, input_feature_channels, output_feature_channels,
                 stride_in_pixels_x=1, stride_in_pixels_y=1, dilation_rate_x=1, dilation_rate_y=1, groups=1,
                 fused_neuron_descriptor=None, sub_pixel_scale_factor=1):
        self.desc.sub_pixel_scale_factor = _descriptor_size(sub_pixel_scale_factor, "sub_pixel_scale_factor")
        CNNConvolutionDescriptor.__init__(self, kernel_width, kernel_height, input_feature_channels,
                                          output_feature_channels, stride_in_pixels_x, stride_in_pixels_y,
                                          dilation_rate_x, dilation_rate_y, groups, fused_neuron_descriptor)

    @property
    def sub_pixel_scale_factor(self):
        """r: each intermediate pixel becomes an r x r block of the destination (default 1); the output feature
        channels must be a multiple of r^2, checked when a convolution is made from the descriptor.

        MPS: MPSCNNSubPixelConvolutionDescriptor.subPixelScaleFactor
        """
        return self.desc.sub_pixel_scale_factor

    @sub_pixel_scale_factor.setter
    def sub_pixel_scale_factor(self, value):
        self.desc.sub_pixel_scale_factor = _descriptor_size(value, "sub_pixel_scale_factor")

    def __mpsx_state__(self):
        state = CNNConvolutionDescriptor.__mpsx_state__(self)
        state["arguments"] = state["arguments"] + (self.sub_pixel_scale_factor,)
        return state

    def __repr__(self):
        return (f"mpsx.CNNSubPixelConvolutionDescriptor(kernel {self.kernel_width}x{self.kernel_height}, "
                f"{self.input_feature_channels} -> {self.output_feature_channels}, "
                f"stride {self.stride_in_pixels_x}x{self.stride_in_pixels_y}, "
                f"dilation {self.dilation_rate_x}x{self.dilation_rate_y}, groups {self.groups}, "
                f"sub_pixel_scale_factor {self.sub_pixel_scale_factor})")


cdef int64_t _descriptor_size(object value, str name) except? -1:
    cdef int64_t size = integer_argument(value, name)
    if size < 1:
        raise ValueError(f"CNNConvolutionDescriptor.{name} must be positive, given {size}")
    return size


cdef int64_t _mps_groups(const CConvolutionDescriptor& d):
    """A descriptor's groups as MPS reports them: 1 for a depthwise convolution."""
    return 1 if d.depthwise else d.groups


cdef int64_t _channel_multiplier(const CConvolutionDescriptor& d):
    """MPS's channelMultiplier: output per input channel of a depthwise convolution, 0 for any other."""
    return d.output_feature_channels // d.input_feature_channels if d.depthwise else 0


cdef CNNConvolutionDescriptor wrap_convolution_descriptor(const CConvolutionDescriptor& desc):
    cdef CNNConvolutionDescriptor d
    if desc.depthwise:
        d = CNNDepthWiseConvolutionDescriptor.__new__(CNNDepthWiseConvolutionDescriptor)
    elif desc.sub_pixel_scale_factor != 1:
        d = CNNSubPixelConvolutionDescriptor.__new__(CNNSubPixelConvolutionDescriptor)
    else:
        d = CNNConvolutionDescriptor.__new__(CNNConvolutionDescriptor)
    d.desc = desc
    return d


class CNNConvolutionDataSource:
    """The convolution data source protocol: subclass it and implement ``descriptor()`` and ``weights()`` (the rest
    have defaults here), or write any class with the protocol's required members.

    Required, as in MPS (a class without one is a TypeError naming it when a kernel is made): ``data_type`` (an
    attribute or a method: FLOAT32, the default here, FLOAT16 or UINT8); ``descriptor()``, a CNNConvolutionDescriptor;
    ``weights()``, the weights in OHWI order ([out][kernel_height][kernel_width][in / groups]) of ``data_type``'s
    dtype, as a numpy array, a Buffer or a DLPack tensor on any device; ``bias_terms()``, float32 [out] or None;
    ``load()`` and ``purge()`` around every read; ``label()``.

    Optional, as in MPS: ``kernel_weights_data_type`` (FLOAT16 rounds the weights to half precision); for uint8
    weights ``weights_quantization_type`` (``"linear"`` or ``"lookup_table"``) with ``ranges_for_uint8_kernel()``
    ([out][2] minimum, maximum) or ``lookup_table_for_uint8_kernel()`` ([256]); ``weights_layout`` (OHWI only);
    ``update_with_gradient_state(gradient_state, source_state)`` -> bool (the CPU-side update) and
    ``update_with_command_buffer(command_buffer, gradient_state, source_state)`` ->
    CNNConvolutionWeightsAndBiasesState or None (the GPU-side update); ``copy(device)``. This class defines each
    optional member, but the runtime treats a member a subclass inherits from it as absent, as MPS treats a selector
    a data source does not implement: which update a convolution runs depends on which one the subclass defines.

    MPS: MPSCNNConvolutionDataSource
    """
    data_type = DataType.FLOAT32

    def descriptor(self):
        """The convolution's descriptor; a subclass must implement it (NotImplementedError here).

        MPS: -[MPSCNNConvolutionDataSource descriptor]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement descriptor()")

    def weights(self):
        """The weights as an OHWI array of the data type's dtype; a subclass must implement it (NotImplementedError
        here).

        MPS: -[MPSCNNConvolutionDataSource weights]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement weights()")

    def bias_terms(self):
        """The biases, float32 [out], or None for none (the default).

        MPS: -[MPSCNNConvolutionDataSource biasTerms]
        """
        return None

    def load(self):
        """Called before the weights are read; returns whether they are available (default True).

        MPS: -[MPSCNNConvolutionDataSource load]
        """
        return True

    def purge(self):
        """Called once the weights were read: the data source may free them (default: nothing).

        MPS: -[MPSCNNConvolutionDataSource purge]
        """
        pass

    def label(self):
        """A name for the data source, or None (the default).

        MPS: -[MPSCNNConvolutionDataSource label]
        """
        return None

    def kernel_weights_data_type(self):
        """The precision the kernel computes with: FLOAT16 rounds the weights to half precision. Optional: here,
        ``data_type``'s value, what a data source without it gets.

        MPS: -[MPSCNNConvolutionDataSource kernelWeightsDataType]
        """
        return DataType(self.data_type() if callable(self.data_type) else self.data_type)

    def weights_layout(self):
        """The layout of ``weights()``: CNNConvolutionWeightsLayout.OHWI, the only one (optional; OHWI here).

        MPS: -[MPSCNNConvolutionDataSource weightsLayout]
        """
        return CNNConvolutionWeightsLayout.OHWI

    def weights_quantization_type(self):
        """How uint8 weights map to values: ``"linear"`` (``ranges_for_uint8_kernel()``) or ``"lookup_table"``
        (``lookup_table_for_uint8_kernel()``). Optional: ``"none"`` here.

        MPS: -[MPSCNNConvolutionDataSource weightsQuantizationType]
        """
        return "none"

    def ranges_for_uint8_kernel(self):
        """For ``weights_quantization_type`` ``"linear"``: float32 [out][2], each output channel's minimum and maximum;
        a uint8 weight w is ``w / 255 * (max - min) + min``. Optional: None here (no ranges).

        MPS: -[MPSCNNConvolutionDataSource rangesForUInt8Kernel]
        """
        return None

    def lookup_table_for_uint8_kernel(self):
        """For ``weights_quantization_type`` ``"lookup_table"``: float32 [256], the value of each uint8 weight.
        Optional: None here (no table).

        MPS: -[MPSCNNConvolutionDataSource lookupTableForUInt8Kernel]
        """
        return None

    def update_with_gradient_state(self, gradient_state, source_state):
        """The CPU-side update: called once the command buffer completed, with the synchronized gradients and the
        weights the forward pass used; write the new weights to the data source and return True (success) or False.
        Optional: a subclass without it gets no CPU-side update; returns False here.

        MPS: -[MPSCNNConvolutionDataSource updateWithGradientState:sourceState:]
        """
        return False

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        """The GPU-side update: encode it on ``command_buffer`` and return the CNNConvolutionWeightsAndBiasesState of
        the new weights, which the convolution reloads, or None for no update. Optional: a subclass without it gets
        no GPU-side update; returns None here.

        MPS: -[MPSCNNConvolutionDataSource updateWithCommandBuffer:gradientState:sourceState:]
        """
        return None

    def copy(self, device):
        """A copy of the data source for ``device`` (default: ``copy.deepcopy``), called when a kernel or graph is
        copied.

        MPS: -[MPSCNNConvolutionDataSource copyWithZone:device:]
        """
        import copy
        return copy.deepcopy(self)


# ---- the calls the runtime makes into Python data sources (_data_sources.h)

# The optional members each protocol class (CNNConvolutionDataSource, ...)
# defines, by name; one a data source inherits from it stands for the
# member's absence, as a selector a data source does not implement in MPS.
cdef dict _PROTOCOL_DEFAULTS = {}


cdef _protocol_defaults(type protocol, tuple names):
    for name in names:
        _PROTOCOL_DEFAULTS[name] = _PROTOCOL_DEFAULTS.get(name, ()) + (protocol.__dict__[name],)


_protocol_defaults(CNNConvolutionDataSource, (
    "kernel_weights_data_type", "weights_layout", "weights_quantization_type", "ranges_for_uint8_kernel",
    "lookup_table_for_uint8_kernel", "update_with_gradient_state", "update_with_command_buffer"))


cdef object _ABSENT = object()


cdef bint _implements(object source, str name):
    """Whether the data source has the member ``name`` other than as a protocol class's default."""
    value = getattr(source, name, _ABSENT)
    if value is _ABSENT:
        return False
    func = getattr(value, "__func__", None)
    return not any(func is default for default in _PROTOCOL_DEFAULTS.get(name, ()))


cdef object _data_source_member(object source, str name):
    """The data source's member ``name``, None where it lacks it or has only a protocol class's default."""
    return getattr(source, name, None) if _implements(source, name) else None

# The members of each data source protocol, @required ones first, by their
# selectors in the MPS headers; mpsx's names follow from them.
_REQUIRED = {
    "MPSCNNConvolutionDataSource": ("dataType", "descriptor", "weights", "biasTerms", "load", "purge", "label"),
    "MPSCNNBatchNormalizationDataSource": ("numberOfFeatureChannels", "gamma", "beta", "mean", "variance", "load",
                                           "purge", "label"),
    "MPSCNNInstanceNormalizationDataSource": ("gamma", "beta", "numberOfFeatureChannels", "label"),
    "MPSCNNGroupNormalizationDataSource": ("gamma", "beta", "numberOfFeatureChannels", "numberOfGroups", "label"),
    "MPSNNPadding": ("paddingMethod",),
}
_OPTIONAL = {
    "MPSCNNConvolutionDataSource": (
        "rangesForUInt8Kernel", "lookupTableForUInt8Kernel", "weightsQuantizationType", "kernelWeightsDataType",
        "updateWithCommandBuffer:gradientState:sourceState:", "updateWithGradientState:sourceState:", "weightsLayout"),
    "MPSCNNBatchNormalizationDataSource": (
        "epsilon", "updateGammaAndBetaWithCommandBuffer:batchNormalizationState:",
        "updateMeanAndVarianceWithCommandBuffer:batchNormalizationState:",
        "updateGammaAndBetaWithBatchNormalizationState:", "updateMeanAndVarianceWithBatchNormalizationState:"),
    "MPSCNNInstanceNormalizationDataSource": (
        "epsilon", "load", "purge", "updateGammaAndBetaWithCommandBuffer:instanceNormalizationStateBatch:",
        "updateGammaAndBetaWithInstanceNormalizationStateBatch:"),
    "MPSCNNGroupNormalizationDataSource": (
        "epsilon", "updateGammaAndBetaWithCommandBuffer:groupNormalizationStateBatch:",
        "updateGammaAndBetaWithGroupNormalizationStateBatch:"),
    "MPSNNPadding": ("label", "destinationImageDescriptorForSourceImages:sourceStates:forKernel:suggestedDescriptor:",
                     "inverse"),
}
# What mpsx named some update methods before it followed the naming rule.
_FORMER_NAMES = {
    "update_with_command_buffer": ("update_on_command_buffer",),
    "update_gamma_and_beta_with_command_buffer": ("update_gamma_and_beta_on_command_buffer",),
    "update_mean_and_variance_with_command_buffer": ("update_mean_and_variance_on_command_buffer",),
    "update_gamma_and_beta_with_batch_normalization_state": ("update_gamma_and_beta",),
    "update_mean_and_variance_with_batch_normalization_state": ("update_mean_and_variance",),
}


cdef str _snake_case(str name):
    return "".join("_" + c.lower() if c.isupper() and i and not name[i - 1].isupper() else c.lower()
                   for i, c in enumerate(name)).replace("u_int8", "uint8")


cdef tuple _mpsx_form(str selector):
    """(name, the Python form) of a protocol selector by the naming rule: the first part names the method, the
    later parts (and the first part's object, after its last "With") the arguments."""
    parts = selector.split(":")
    name = _snake_case(parts[0])
    if len(parts) == 1:
        return name, name
    arguments = [_snake_case(parts[0].rpartition("With")[2])] + [_snake_case(p) for p in parts[1:len(parts) - 1]]
    return name, f"{name}({', '.join(arguments)})"


cdef check_protocol(object source, str protocol):
    """Raises TypeError where ``source`` implements a member of the protocol under another name than mpsx's (MPS's
    camelCase, PyObjC's selector form, a former mpsx name), naming mpsx's form; then for the members of the
    protocol's @required list it lacks (mpsx's protocol classes give defaults for most)."""
    for selector in _REQUIRED[protocol] + _OPTIONAL[protocol]:
        name, form = _mpsx_form(selector)
        if _implements(source, name):
            continue
        for other in (selector.split(":")[0], selector.replace(":", "_")) + _FORMER_NAMES.get(name, ()):
            if other != name and hasattr(source, other):
                raise TypeError(f"{type(source).__name__} implements {other}, which mpsx does not call: {protocol}'s "
                                f"{selector} is {form} in mpsx")
    missing = [_mpsx_form(s)[0] for s in _REQUIRED[protocol] if not hasattr(source, _mpsx_form(s)[0])]
    if missing:
        raise TypeError(f"{type(source).__name__} does not implement {', '.join(missing)}, required by {protocol} "
                        f"(mpsx.{protocol[3:]} gives defaults to subclass)")


cdef dict _NUMPY_TYPES = {0: np.float32, 1: np.float16, 3: np.uint8}


# load and purge are required by the convolution and batch normalization
# protocols, optional in instance normalization's and absent from group
# normalization's: one a data source lacks is not called.
cdef cbool _convolution_source_load(object source) except *:
    load = getattr(source, "load", None)
    return True if load is None else bool(load())


cdef void _convolution_source_purge(object source) except *:
    purge = getattr(source, "purge", None)
    if purge is not None:
        purge()


cdef CConvolutionDescriptor _convolution_source_descriptor(object source) except *:
    d = source.descriptor()
    if not isinstance(d, CNNConvolutionDescriptor):
        raise TypeError(f"{type(source).__name__}.descriptor() must return an mpsx.CNNConvolutionDescriptor, "
                        f"returned {type(d).__name__}")
    return (<CNNConvolutionDescriptor>d).desc


cdef CDataType _convolution_source_data_type(object source, const char* attribute) except *:
    value = _data_source_member(source, attribute.decode())
    if value is None:
        if attribute == b"kernel_weights_data_type":
            return _convolution_source_data_type(source, b"data_type")
        return CDataType.Float32
    if callable(value):
        value = value()
    data_type = DataType(value)
    if data_type == DataType.BFLOAT16:
        raise TypeError(f"{type(source).__name__}.{attribute.decode()} is {data_type!r}; convolution weights are "
                        f"FLOAT32, FLOAT16 or UINT8")
    return <CDataType><int>data_type


cdef object host_values(object values):
    """A data source's values as a numpy array: an array (or anything numpy takes), a Buffer on any device, or a DLPack
    tensor on any device (one on a GPU through a Buffer of the mpsx device it is on)."""
    if isinstance(values, (np.ndarray, Buffer)) or not hasattr(values, "__dlpack_device__"):
        return np.asarray(values)
    device_type, device_id = values.__dlpack_device__()
    if device_type == 2:  # kDLCUDA
        return Buffer.from_dlpack(Device(f"cuda:{device_id}"), values).to_numpy()
    return np.from_dlpack(values)


cdef _check_weights_layout(object source):
    layout = _data_source_member(source, "weights_layout")
    if callable(layout):
        layout = layout()
    if layout is not None and not (isinstance(layout, int) and not isinstance(layout, bool) and layout == 0):
        raise ValueError(f"{type(source).__name__}.weights_layout is {layout!r}; the weights layout is "
                         f"CNNConvolutionWeightsLayout.OHWI, MPS's only one")


cdef HostArray _convolution_source_array(object source, const char* method, CDataType data_type) except *:
    cdef HostArray out
    if method == b"weights":
        _check_weights_layout(source)
    fn = _data_source_member(source, method.decode())
    if fn is None:
        return out
    array = fn()
    if array is None:
        return out
    a = host_values(array)
    dtype = np.dtype(_NUMPY_TYPES[<int>data_type])
    if (dtype == np.uint8) != (a.dtype == np.uint8):
        raise TypeError(f"{type(source).__name__}.{method.decode()}() returned {a.dtype} values; "
                        f"its data_type asks for {dtype}")
    if a.ndim > 1:
        out.shape = a.shape
    a = np.ascontiguousarray(a, dtype=dtype).reshape(-1)
    cdef const unsigned char[::1] raw = a.view(np.uint8)
    if raw.shape[0]:
        out.data = &raw[0]
    out.count = a.shape[0]
    out.type = data_type
    out.owner = hold(a)
    return out


cdef string _convolution_source_label(object source) except *:
    value = getattr(source, "label", None)
    if callable(value):
        value = value()
    return b"" if value is None else str(value).encode()


cdef dict _QUANTIZATION = {None: 0, "none": 0, "linear": 1, "lookup_table": 2}


cdef WeightsQuantization _convolution_source_quantization(object source) except *:
    value = _data_source_member(source, "weights_quantization_type")
    if callable(value):
        value = value()
    try:
        return <WeightsQuantization><int>_QUANTIZATION[value]
    except (KeyError, TypeError):
        raise ValueError(f"weights_quantization_type must be 'none', 'linear' or 'lookup_table', given {value!r}")


cdef cbool _convolution_source_has(object source, const char* attribute) except *:
    return callable(_data_source_member(source, attribute.decode()))


cdef extern from *:
    """
    // The convolution a state's encode ran, to reload its weights (MPS's state.convolution).
    static std::shared_ptr<mpsx::CNNConvolution> mpsx_forward_convolution(const mpsx::ConvolutionGradientState& s) {
      return std::const_pointer_cast<mpsx::CNNConvolution>(s.convolution());
    }
    """
    shared_ptr[CCNNConvolution] _forward_convolution "mpsx_forward_convolution"(const CConvolutionGradientState&)


cdef object wrap_convolution_gradient_state(shared_ptr[CConvolutionGradientState] state):
    cdef CNNConvolutionGradientState s = CNNConvolutionGradientState.__new__(CNNConvolutionGradientState)
    s.c = <shared_ptr[CState]>state
    return s


cdef object wrap_weights_and_biases_state(shared_ptr[CConvolutionWeightsAndBiasesState] state):
    cdef CNNConvolutionWeightsAndBiasesState s = \
        CNNConvolutionWeightsAndBiasesState.__new__(CNNConvolutionWeightsAndBiasesState)
    s.c = <shared_ptr[CState]>state
    return s


cdef cbool _convolution_source_update(object source, shared_ptr[CConvolutionGradientState] gradient_state,
                       shared_ptr[CConvolutionWeightsAndBiasesState] source_state) except *:
    return bool(source.update_with_gradient_state(wrap_convolution_gradient_state(gradient_state),
                                                  wrap_weights_and_biases_state(source_state)))


cdef shared_ptr[CConvolutionWeightsAndBiasesState] _convolution_source_update_on_command_buffer(
        object source, CCommandBuffer& command_buffer, shared_ptr[CConvolutionGradientState] gradient_state,
        shared_ptr[CConvolutionWeightsAndBiasesState] source_state) except *:
    result = source.update_with_command_buffer(wrap_command_buffer(command_buffer.shared_from_this()), wrap_convolution_gradient_state(gradient_state),
                                               wrap_weights_and_biases_state(source_state))
    cdef shared_ptr[CConvolutionWeightsAndBiasesState] out
    if result is None:
        return out
    if not isinstance(result, CNNConvolutionWeightsAndBiasesState):
        raise TypeError(f"{type(source).__name__}.update_with_command_buffer() must return an "
                        f"mpsx.CNNConvolutionWeightsAndBiasesState or None, returned {type(result).__name__}")
    return (<CNNConvolutionWeightsAndBiasesState>result)._state()


cdef ConvolutionDataSourceCalls* _convolution_calls = &convolution_data_source_calls()
_convolution_calls.load = _convolution_source_load
_convolution_calls.purge = _convolution_source_purge
_convolution_calls.descriptor = _convolution_source_descriptor
_convolution_calls.data_type = _convolution_source_data_type
_convolution_calls.array = _convolution_source_array
_convolution_calls.label = _convolution_source_label
_convolution_calls.weights_quantization_type = _convolution_source_quantization
_convolution_calls.has = _convolution_source_has
_convolution_calls.update = _convolution_source_update
_convolution_calls.update_on_command_buffer = _convolution_source_update_on_command_buffer


cdef shared_ptr[CConvolutionDataSource] convolution_data_source_of(object source) except *:
    if isinstance(source, ConvolutionWeights):
        return <shared_ptr[CConvolutionDataSource]>(<ConvolutionWeights>source).shared()
    if source is None:
        raise TypeError("expected a convolution data source, given None")
    check_protocol(source, "MPSCNNConvolutionDataSource")
    return <shared_ptr[CConvolutionDataSource]>make_native[CPythonConvolutionDataSource](<PyObject*>source)


# ---- native data source and states

cdef class ConvolutionWeights:
    """ConvolutionWeights(descriptor, weights, biases=None, optimizer=None, label=None)
--

    A convolution data source held natively (MPS has no such class: a native MPSCNNConvolutionDataSource).

    ``weights``: an OHWI array of ``descriptor.weights_shape``; ``biases``: [out] or None. With an ``optimizer`` (an
    NNOptimizer) it trains itself on the optimizer's device, all natively:
    ``conv.encode_weights_and_bias_update(cb, gradient_state)`` encodes the optimizer on the weights the forward
    pass used, with the optimizer's vectors (momentum, velocity, sum of squares) the data source keeps on the
    device, zero at first. The convolution's weights are updated in place and are the data source's from then on
    (a reload of other weights into the convolution leaves the data source a copy of its own); where the
    convolution holds other weights than its forward pass used by then, the update writes weights the data source
    keeps, which the convolution reloads, on the command buffer. Without bias terms only the weights train.

    ``weights()`` and ``bias_terms()`` return the latest values once the command buffer of the last update (or
    its last replay) has completed; before that they raise SynchronizationError (no synchronize call is needed:
    the data source synchronizes its own weights). Give each ConvolutionWeights its own NNOptimizerAdam: every
    update advances the optimizer's time step.

    MPS: none (mpsx)
    """
    cdef shared_ptr[CConvolutionWeights] c
    cdef object _optimizer

    cdef CConvolutionWeights* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    cdef shared_ptr[CConvolutionWeights] shared(self) except *:
        self.native()
        return self.c

    def __init__(self, CNNConvolutionDescriptor descriptor not None, weights, biases=None, optimizer=None,
                 label=None):
        cdef vector[int64_t] shape = np.shape(weights) if np.ndim(weights) > 1 else ()
        cdef vector[float] w = np.ascontiguousarray(weights, dtype=np.float32).reshape(-1)
        cdef optional[vector[float]] b
        if biases is not None:
            b = <vector[float]>np.ascontiguousarray(biases, dtype=np.float32).reshape(-1)
        cdef string name = ("" if label is None else str(label)).encode()
        self.c = make_native[CConvolutionWeights](descriptor.desc, w, shape, b, name, optimizer_of(optimizer))
        self._optimizer = optimizer

    def descriptor(self):
        """The convolution's descriptor.

        MPS: -[MPSCNNConvolutionDataSource descriptor]
        """
        return wrap_convolution_descriptor(self.native().descriptor())

    @property
    def data_type(self):
        """DataType.FLOAT32: the weights are float32.

        MPS: -[MPSCNNConvolutionDataSource dataType]
        """
        return DataType.FLOAT32

    def weights(self):
        """A copy of the current weights, OHWI float32.

        MPS: -[MPSCNNConvolutionDataSource weights]
        """
        return np.array(self.native().weight_values(), dtype=np.float32).reshape(self.descriptor().weights_shape)

    def bias_terms(self):
        """A copy of the current biases, float32 [out], or None without biases.

        MPS: -[MPSCNNConvolutionDataSource biasTerms]
        """
        b = self.native().bias_values()
        return np.array(b, dtype=np.float32) if b.size() else None

    def set_weights_and_biases(self, weights, biases=None):
        """New values in place of the current ones and of every update encoded before (whose command buffer may
        still run: it changes nothing here then). A kernel or graph reads them when it reloads from its data sources
        (``reload_from_data_sources``); until then it keeps what it holds. ShapeError for weights of another shape, or biases given to a source
        without bias terms or missing from one with them.

        MPS: none (mpsx)
        """
        self.native()
        cdef vector[int64_t] shape = np.shape(weights) if np.ndim(weights) > 1 else ()
        cdef vector[float] w = np.ascontiguousarray(weights, dtype=np.float32).reshape(-1)
        cdef optional[vector[float]] b
        if biases is not None:
            b = <vector[float]>np.ascontiguousarray(biases, dtype=np.float32).reshape(-1)
        self.c.get().set_weights_and_biases(w, shape, b)

    def load(self):
        """True: the weights are always available.

        MPS: -[MPSCNNConvolutionDataSource load]
        """
        return True

    def purge(self):
        """Nothing to free: the weights stay held.

        MPS: -[MPSCNNConvolutionDataSource purge]
        """
        pass

    def label(self):
        """The label given to the constructor, or None.

        MPS: -[MPSCNNConvolutionDataSource label]
        """
        return self.native().label().decode() or None

    @property
    def optimizer(self):
        """The NNOptimizer that trains the weights, or None.

        MPS: none (mpsx)
        """
        return self._optimizer

    def optimizer_state(self):
        """The vectors the data source keeps for its optimizer, ``{kind: [weights', biases']}`` (kinds ``"momentum"``,
        ``"velocity"``, ``"sum_of_squares"``) as float32 arrays, as the last update left them: read once its command
        buffer has completed. Empty without an optimizer. Adam's time step is the optimizer's.

        MPS: none (mpsx)
        """
        return optimizer_state_of(self.native().optimizer_vectors(), "ConvolutionWeights")

    def set_optimizer_state(self, state):
        """Writes what ``optimizer_state()`` returned (the same kinds and sizes) before the next update; TypeError or
        ValueError for anything else.

        MPS: none (mpsx)
        """
        set_optimizer_state_of(self.native().optimizer_vectors(), state, "ConvolutionWeights")

    def copy(self, device=None):
        """A copy holding the current values, with a copy of the optimizer (on ``device``) and its state, made through
        the data source's saved description.

        MPS: -[MPSCNNConvolutionDataSource copyWithZone:device:]
        """
        return persistence_copy(self, device)

    def __mpsx_state__(self):
        return {"arguments": (self.descriptor(), self.weights(), self.bias_terms(), self._optimizer,
                              self.label()), "optimizer_state": self.optimizer_state()}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        return _restore_with_optimizer_state(cls, state)

    def __reduce__(self):
        return persistence_reduce(self)


cdef class CNNConvolutionWeightsAndBiasesState(State):
    """CNNConvolutionWeightsAndBiasesState(device=None, weights=None, biases=None, weights_offset=0, biases_offset=0,
        cnn_convolution_descriptor=None)
--

    Convolution weights and biases on the device: float32 OHWI ``weights`` and [out] ``biases``, each a Buffer (used
    as is) or an array (copied); ``device`` may be left out where ``weights`` is a Buffer. Without a
    ``cnn_convolution_descriptor`` the buffers past the offsets hold exactly a filter's values. With one, the filter
    is the descriptor's, read from ``weights_offset`` and ``biases_offset`` (multiples of 4) in buffers that may hold
    more; without ``weights``, new zeroed buffers sized for it.

    What ``export_weights_and_biases`` returns, ``reload_weights_and_biases`` loads and the optimizers update. As
    ``-[MPSCNNConvolutionWeightsAndBiasesState initWithWeights:biases:]``,
    ``-[MPSCNNConvolutionWeightsAndBiasesState initWithWeights:weightsOffset:biases:biasesOffset:cnnConvolutionDescriptor:]``
    and ``-[MPSCNNConvolutionWeightsAndBiasesState initWithDevice:cnnConvolutionDescriptor:]``.

    MPS: MPSCNNConvolutionWeightsAndBiasesState
    """

    def __init__(self, Device device=None, weights=None, biases=None, weights_offset=0, biases_offset=0,
                 CNNConvolutionDescriptor cnn_convolution_descriptor=None):
        if weights is None:
            if cnn_convolution_descriptor is None:
                raise TypeError("weights must be an mpsx.Buffer or an array, given None; or give a "
                                "cnn_convolution_descriptor (and device) for zeroed buffers sized for it")
            if device is None:
                raise TypeError("zeroed buffers for the cnn_convolution_descriptor need a device, given None")
            if biases is not None or weights_offset or biases_offset:
                raise TypeError("biases and offsets go with weights; given no weights")
            self.c = <shared_ptr[CState]>make_native[CConvolutionWeightsAndBiasesState](
                device.shared(), cnn_convolution_descriptor.desc)
            # Zeroes rather than what the pool's buffers held.
            (<CConvolutionWeightsAndBiasesState*>self.c.get()).weights().get().fill_zero()
            (<CConvolutionWeightsAndBiasesState*>self.c.get()).biases().get().fill_zero()
            return
        if device is None:
            if not isinstance(weights, Buffer):
                raise TypeError(f"weights must be an mpsx.Buffer when no device is given, given "
                                f"{type(weights).__name__}")
            device = weights.device
        cdef int64_t wo = integer_argument(weights_offset, "weights_offset")
        cdef int64_t bo = integer_argument(biases_offset, "biases_offset")
        if wo < 0 or bo < 0:
            raise ValueError(f"offsets must not be negative, given weights_offset {wo}, biases_offset {bo}")
        cdef shared_ptr[CBuffer] w = buffer_from_numpy(device, weights, np.float32, "weights")
        cdef shared_ptr[CBuffer] b
        if biases is not None:
            b = buffer_from_numpy(device, biases, np.float32, "biases")
        if cnn_convolution_descriptor is None:
            self.c = <shared_ptr[CState]>make_native[CConvolutionWeightsAndBiasesState](w, b, <size_t>wo, <size_t>bo)
        else:
            self.c = <shared_ptr[CState]>make_native[CConvolutionWeightsAndBiasesState](
                w, b, <size_t>wo, <size_t>bo, cnn_convolution_descriptor.desc)

    @classmethod
    def temporary_cnn_convolution_weights_and_biases_state_with_command_buffer(
            cls, CommandBuffer command_buffer not None, CNNConvolutionDescriptor cnn_convolution_descriptor not None):
        """A state of zeroed weights and biases sized for ``cnn_convolution_descriptor``, temporary for
        ``command_buffer``: valid only on it, until its ``read_count`` (1) reaches 0.

        MPS: +[MPSCNNConvolutionWeightsAndBiasesState temporaryCNNConvolutionWeightsAndBiasesStateWithCommandBuffer:cnnConvolutionDescriptor:]
        """
        return _temporary(command_buffer, cls(command_buffer.device, cnn_convolution_descriptor=cnn_convolution_descriptor))

    cdef shared_ptr[CConvolutionWeightsAndBiasesState] _state(self):
        return static_pointer_cast[CConvolutionWeightsAndBiasesState, CState](self.shared())

    @property
    def weights(self):
        """The weights, a float32 Buffer (OHWI values from ``weights_offset`` on).

        MPS: MPSCNNConvolutionWeightsAndBiasesState.weights
        """
        cdef CConvolutionWeightsAndBiasesState* s = <CConvolutionWeightsAndBiasesState*>self.native()
        return wrap_buffer(s.weights(), np.float32, (s.weights().get().length() // 4,))

    @property
    def biases(self):
        """The biases, a float32 Buffer, or None.

        MPS: MPSCNNConvolutionWeightsAndBiasesState.biases
        """
        cdef CConvolutionWeightsAndBiasesState* s = <CConvolutionWeightsAndBiasesState*>self.native()
        if s.biases().get() == NULL:
            return None
        return wrap_buffer(s.biases(), np.float32, (s.biases().get().length() // 4,))

    @property
    def weights_offset(self):
        """The byte offset of the weights in ``weights``.

        MPS: MPSCNNConvolutionWeightsAndBiasesState.weightsOffset
        """
        return (<CConvolutionWeightsAndBiasesState*>self.native()).weights_offset()

    @property
    def biases_offset(self):
        """The byte offset of the biases in ``biases``.

        MPS: MPSCNNConvolutionWeightsAndBiasesState.biasesOffset
        """
        return (<CConvolutionWeightsAndBiasesState*>self.native()).biases_offset()

    def _saved_values(self):
        """The weights and biases past the offsets (saved as a state with offsets 0)."""
        biases = self.biases
        return (self.weights.to_numpy(copy=True)[self.weights_offset // 4:],
                None if biases is None else biases.to_numpy(copy=True)[self.biases_offset // 4:])


class ImageSizeEncodingState:
    """The base of the states that know the size of the source image of the encode that made them (a convolution's
    gradient state, for a convolution transpose to undo it).

    MPS: MPSImageSizeEncodingState
    """
    __slots__ = ()  # the state classes keep no __dict__

    @property
    def source_width(self):
        """The width of the source image of the forward encode that filled the state; 0 before one did.

        MPS: MPSImageSizeEncodingState.sourceWidth
        """
        cdef CGradientState* state = <CGradientState*>(<State?>self).native()
        return state.source_descriptor.width if state.encoded else 0

    @property
    def source_height(self):
        """The height of the source image of the forward encode that filled the state; 0 before one did.

        MPS: MPSImageSizeEncodingState.sourceHeight
        """
        cdef CGradientState* state = <CGradientState*>(<State?>self).native()
        return state.source_descriptor.height if state.encoded else 0


cdef class CNNConvolutionGradientState(NNGradientState, ImageSizeEncodingState):
    """The state of a convolution's training forward encode, which its gradient fills with the gradients of the loss
    for the weights and biases, summed over the batch; ``synchronize(cb)`` before reading them on the host.

    MPS: MPSCNNConvolutionGradientState
    """

    cdef CConvolutionGradientState* _gradient_state(self) except NULL:
        return <CConvolutionGradientState*>self.native()

    @property
    def gradient_for_weights(self):
        """The gradient for the weights: a float32 Buffer, OHWI ([out][kernel_height][kernel_width][in / groups]).

        MPS: MPSCNNConvolutionGradientState.gradientForWeights
        """
        cdef const CConvolutionDescriptor* d = &self._gradient_state().convolution().get().descriptor()
        return wrap_buffer(self._gradient_state().gradient_for_weights(), np.float32,
                           (d.output_feature_channels, d.kernel_height, d.kernel_width,
                            d.input_feature_channels // d.groups))

    @property
    def gradient_for_biases(self):
        """The gradient for the biases: a float32 Buffer [out].

        MPS: MPSCNNConvolutionGradientState.gradientForBiases
        """
        cdef const CConvolutionDescriptor* d = &self._gradient_state().convolution().get().descriptor()
        return wrap_buffer(self._gradient_state().gradient_for_biases(), np.float32, (d.output_feature_channels,))

    @property
    def gradient_for_weights_layout(self):
        """The layout of ``gradient_for_weights``: CNNConvolutionWeightsLayout.OHWI, the weights' own.

        MPS: MPSCNNConvolutionGradientState.gradientForWeightsLayout
        """
        return CNNConvolutionWeightsLayout.OHWI

    @property
    def convolution(self):
        """The CNNConvolution whose encode made this state: for a state an NNGraph exports, the graph's own kernel (no
        ``data_source``), so that updates encoded by hand can reload it.

        MPS: MPSCNNConvolutionGradientState.convolution
        """
        cdef CNNConvolution kernel
        if self._kernel is None:
            kernel_class = CNNFullyConnected if self._gradient_state().convolution().get().class_name() == \
                b"MPSCNNFullyConnected" else CNNConvolution
            kernel = kernel_class.__new__(kernel_class)
            kernel._set(<shared_ptr[CUnaryKernel]>_forward_convolution(self._gradient_state()[0]),
                        CNNConvolutionGradientState)
            self._kernel = kernel
        return self._kernel


# ---- kernels

cdef class _ConvolutionKernel(CNNUnaryKernel):
    """What CNNConvolution and CNNConvolutionTranspose share: descriptor, data source, weights and their updates.

    MPS: MPSCNNConvolution
    """
    cdef object _data_source

    cdef CCNNConvolution* _convolution(self) except NULL:
        return <CCNNConvolution*>self.unary_kernel()

    @property
    def data_source(self):
        """The data source the kernel was made with.

        MPS: MPSCNNConvolution.dataSource, MPSCNNConvolutionTranspose.dataSource
        """
        return self._data_source

    @property
    def descriptor(self):
        """The kernel's convolution descriptor.

        MPS: none (mpsx)
        """
        return wrap_convolution_descriptor(self._convolution().descriptor())

    @property
    def input_feature_channels(self):
        """The number of feature channels of the source.

        MPS: MPSCNNConvolution.inputFeatureChannels, MPSCNNConvolutionTranspose.inputFeatureChannels
        """
        return self._convolution().descriptor().input_feature_channels

    @property
    def output_feature_channels(self):
        """The number of feature channels of the destination.

        MPS: MPSCNNConvolution.outputFeatureChannels, MPSCNNConvolutionTranspose.outputFeatureChannels
        """
        return self._convolution().descriptor().output_feature_channels

    @property
    def groups(self):
        """The number of groups the feature channels are split into.

        MPS: MPSCNNConvolution.groups, MPSCNNConvolutionTranspose.groups
        """
        return _mps_groups(self._convolution().descriptor())

    @property
    def kernel_width(self):
        """The width of the kernel window.

        MPS: MPSCNNKernel.kernelWidth
        """
        return self._convolution().descriptor().kernel_width

    @property
    def kernel_height(self):
        """The height of the kernel window.

        MPS: MPSCNNKernel.kernelHeight
        """
        return self._convolution().descriptor().kernel_height

    @property
    def stride_in_pixels_x(self):
        """The stride in x.

        MPS: MPSCNNKernel.strideInPixelsX
        """
        return self._convolution().descriptor().stride_x

    @property
    def stride_in_pixels_y(self):
        """The stride in y.

        MPS: MPSCNNKernel.strideInPixelsY
        """
        return self._convolution().descriptor().stride_y

    @property
    def dilation_rate_x(self):
        """The distance in x between the window's taps.

        MPS: MPSCNNKernel.dilationRateX
        """
        return self._convolution().descriptor().dilation_x

    @property
    def dilation_rate_y(self):
        """The distance in y between the window's taps.

        MPS: MPSCNNKernel.dilationRateY
        """
        return self._convolution().descriptor().dilation_y

    @property
    def fused_neuron_descriptor(self):
        """The neuron applied to the result, or None.

        MPS: MPSCNNConvolution.fusedNeuronDescriptor
        """
        return self.descriptor.fused_neuron_descriptor

    @property
    def neuron_type(self):
        """The fused neuron's type: NeuronType.NONE without one. Deprecated in MPS for ``fused_neuron_descriptor``.

        MPS: MPSCNNConvolution.neuronType
        """
        neuron = self.fused_neuron_descriptor
        return NeuronType.NONE if neuron is None else neuron.neuron_type

    @property
    def neuron_parameter_a(self):
        """The fused neuron's ``a``; 1.0 without one ("Default: 1.0f"). Deprecated in MPS for
        ``fused_neuron_descriptor``.

        MPS: MPSCNNConvolution.neuronParameterA
        """
        neuron = self.fused_neuron_descriptor
        return 1.0 if neuron is None else neuron.a

    @property
    def neuron_parameter_b(self):
        """The fused neuron's ``b``; 1.0 without one ("Default: 1.0f"). Deprecated in MPS for
        ``fused_neuron_descriptor``.

        MPS: MPSCNNConvolution.neuronParameterB
        """
        neuron = self.fused_neuron_descriptor
        return 1.0 if neuron is None else neuron.b

    @property
    def neuron_parameter_c(self):
        """The fused neuron's ``c``; 1.0 without one ("Default: 1.0f"). Deprecated in MPS for
        ``fused_neuron_descriptor``.

        MPS: MPSCNNConvolution.neuronParameterC
        """
        neuron = self.fused_neuron_descriptor
        return 1.0 if neuron is None else neuron.c

    @property
    def accumulator_precision_option(self):
        """The precision of the sums, an NNConvolutionAccumulatorPrecisionOption: FLOAT (default) or HALF. The
        setter also takes the values as ints, or "half" and "float"; ValueError otherwise. The cpu backend always
        sums in float32.

        MPS: MPSCNNConvolution.accumulatorPrecisionOption, MPSCNNConvolutionTranspose.accumulatorPrecisionOption
        """
        return NNConvolutionAccumulatorPrecisionOption(<uint32_t>self._convolution().accumulator_precision)

    @accumulator_precision_option.setter
    def accumulator_precision_option(self, value):
        self._convolution().accumulator_precision = accumulator_precision_of(value, "accumulator_precision_option")

    # Saved: the data source, by its own description, and the weights and biases
    # the kernel holds now (a reload or a training update may have changed them),
    # which the restored kernel reloads.
    _mpsx_properties = ("accumulator_precision_option",)

    def _mpsx_arguments(self):
        return (_saved_data_source(self),)

    def __mpsx_state__(self):
        state = CNNUnaryKernel.__mpsx_state__(self)
        command_buffer = self.device.command_queue.command_buffer()
        exported = self.export_weights_and_biases(command_buffer)
        exported.synchronize(command_buffer)
        command_buffer.commit()
        command_buffer.wait_until_completed()
        if command_buffer.error is not None:
            raise command_buffer.error
        state["weights"] = exported.weights.to_numpy(copy=True)
        state["biases"] = None if exported.biases is None else exported.biases.to_numpy(copy=True)
        return state

    def _mpsx_restored(self, state):
        weights = CNNConvolutionWeightsAndBiasesState(self.device, state["weights"], state["biases"])
        command_buffer = self.device.command_queue.command_buffer()
        self.reload_weights_and_biases(command_buffer, weights)
        command_buffer.commit()
        command_buffer.wait_until_completed()
        if command_buffer.error is not None:
            raise command_buffer.error

    def reload_weights_and_biases_from_data_source(self):
        """Loads the data source's current weights and biases now (on the host); later encodes use them.

        MPS: -[MPSCNNConvolution reloadWeightsAndBiasesFromDataSource], -[MPSCNNConvolutionTranspose reloadWeightsAndBiasesFromDataSource]
        """
        self._convolution().reload_weights_and_biases_from_data_source()

    def reload_weights_and_biases(self, CommandBuffer command_buffer not None,
                                  CNNConvolutionWeightsAndBiasesState state not None):
        """Copies the weights and biases of ``state`` in, ordered on ``command_buffer``: the encodes after it on the
        device use them.

        MPS: -[MPSCNNConvolution reloadWeightsAndBiasesWithCommandBuffer:state:], -[MPSCNNConvolutionTranspose reloadWeightsAndBiasesWithCommandBuffer:state:]
        """
        self._convolution().reload_weights_and_biases(
            command_buffer.native()[0], (<CConvolutionWeightsAndBiasesState*>state.native())[0])

    def export_weights_and_biases(self, CommandBuffer command_buffer not None, result_state_can_be_temporary=False):
        """A new CNNConvolutionWeightsAndBiasesState holding a copy of the current weights and biases, made on
        ``command_buffer``. ``result_state_can_be_temporary`` is accepted as in MPS (mpsx states are reference
        counted).

        MPS: -[MPSCNNConvolution exportWeightsAndBiasesWithCommandBuffer:resultStateCanBeTemporary:], -[MPSCNNConvolutionTranspose exportWeightsAndBiasesWithCommandBuffer:resultStateCanBeTemporary:]
        """
        return wrap_weights_and_biases_state(self._convolution().export_weights_and_biases(command_buffer.native()[0]))

    def encode_weights_and_bias_update(self, CommandBuffer command_buffer not None,
                                       CNNConvolutionGradientState gradient_state not None):
        """The weight update of MPS's training styles, for training encoded by hand.

        A data source with ``update_with_command_buffer`` encodes its update now and the convolution reloads the state
        it returns, on the command buffer. One with ``update_with_gradient_state`` is called once the command buffer
        completed, with the synchronized gradients, and the convolution then reloads from it; if it raises, the
        command buffer ends with status ``"error"`` and that exception, and the weights stay as they were.

        MPS: none (mpsx)
        """
        self._convolution().encode_weights_and_bias_update(
            command_buffer.native()[0], static_pointer_cast[CConvolutionGradientState, CState](gradient_state.shared()))


cdef class CNNConvolution(_ConvolutionKernel):
    """CNNConvolution(device, data_source)
--

    A convolution: each destination pixel is the weights times the source window under it, plus the bias, then the
    fused neuron. ``data_source`` is a ConvolutionWeights or any object implementing the CNNConvolutionDataSource
    protocol. As ``-[MPSCNNConvolution initWithDevice:weights:]``.

    MPS: MPSCNNConvolution
    """

    def __init__(self, Device device not None, data_source):
        self._data_source = data_source
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNConvolution](device.shared(), convolution_data_source_of(data_source)),
                  CNNConvolutionGradientState)

    def reload_weights_and_biases_with_data_source(self, data_source):
        """Deprecated, as in MPS ("dataSource will be ignored"; "Please use -reloadWeightsAndBiasesFromDataSource
        instead"): ignores ``data_source``, warns with a DeprecationWarning and reloads from the kernel's own data
        source, as ``reload_weights_and_biases_from_data_source``.

        MPS: -[MPSCNNConvolution reloadWeightsAndBiasesWithDataSource:]
        """
        warnings.warn("CNNConvolution.reload_weights_and_biases_with_data_source is deprecated, as MPS's "
                      "reloadWeightsAndBiasesWithDataSource: is, and ignores its data source: call "
                      "reload_weights_and_biases_from_data_source instead", DeprecationWarning, stacklevel=2)
        self.reload_weights_and_biases_from_data_source()

    @property
    def channel_multiplier(self):
        """For a convolution of a CNNDepthWiseConvolutionDescriptor, the output feature channels each input feature
        channel produces; 0 for any other convolution.

        MPS: MPSCNNConvolution.channelMultiplier
        """
        return _channel_multiplier(self._convolution().descriptor())

    @property
    def sub_pixel_scale_factor(self):
        """The descriptor's ``sub_pixel_scale_factor`` (a CNNSubPixelConvolutionDescriptor's); 1 for any other
        convolution.

        MPS: MPSCNNConvolution.subPixelScaleFactor
        """
        return self._convolution().descriptor().sub_pixel_scale_factor


cdef class CNNFullyConnected(CNNConvolution):
    """CNNFullyConnected(device, data_source)
--

    A convolution whose window covers the whole source image: results are 1x1. Weights are OHWI like a
    convolution's. As ``-[MPSCNNFullyConnected initWithDevice:weights:]``.

    MPS: MPSCNNFullyConnected
    """

    def __init__(self, Device device not None, data_source):
        self._data_source = data_source
        self._set(<shared_ptr[CUnaryKernel]>make_native[CCNNFullyConnected](device.shared(),
                                                                            convolution_data_source_of(data_source)),
                  CNNConvolutionGradientState)


cdef class _ConvolutionGradientKernel(CNNGradientKernel):
    """What CNNConvolutionGradient and CNNConvolutionTransposeGradient share.

    They compute with the weights their forward encode used, which the gradient state carries, so reloading them is
    never needed; the reload methods exist for code written against MPS and only check their arguments.

    MPS: MPSCNNConvolutionGradient
    """
    cdef object _data_source
    cdef bint _serialize_weights_and_biases

    cdef CCNNConvolutionGradient* _gradient(self) except NULL:
        return <CCNNConvolutionGradient*>self.gradient_kernel()

    cdef _made_from(self, CNNKernel forward):
        self._data_source = forward.data_source

    _mpsx_properties = ("gradient_option", "serialize_weights_and_biases")

    @property
    def serialize_weights_and_biases(self):
        """Whether a saved copy of the kernel holds its weights and biases (default False). Kept and saved, and
        otherwise without effect: the kernel holds no weights of its own (it computes with those of the forward
        encode, which the gradient state carries), so what is saved is always its data source, and a restored kernel
        needs no reload.

        MPS: MPSCNNConvolutionGradient.serializeWeightsAndBiases
        """
        return self._serialize_weights_and_biases

    @serialize_weights_and_biases.setter
    def serialize_weights_and_biases(self, bint value):
        self._serialize_weights_and_biases = value

    def _mpsx_arguments(self):
        return (_saved_data_source(self),)

    @property
    def data_source(self):
        """The data source the kernel was made with.

        MPS: MPSCNNConvolutionGradient.dataSource, MPSCNNConvolutionTransposeGradient.dataSource
        """
        return self._data_source

    @property
    def descriptor(self):
        """The convolution descriptor of the kernel.

        MPS: none (mpsx)
        """
        return wrap_convolution_descriptor(self._gradient().descriptor())

    @property
    def source_gradient_feature_channels(self):
        """The number of feature channels of the source gradient (the forward output feature channels).

        MPS: MPSCNNConvolutionGradient.sourceGradientFeatureChannels, MPSCNNConvolutionTransposeGradient.sourceGradientFeatureChannels
        """
        return self._gradient().descriptor().output_feature_channels

    @property
    def source_image_feature_channels(self):
        """The number of feature channels of the forward source (the forward input feature channels).

        MPS: MPSCNNConvolutionGradient.sourceImageFeatureChannels, MPSCNNConvolutionTransposeGradient.sourceImageFeatureChannels
        """
        return self._gradient().descriptor().input_feature_channels

    @property
    def groups(self):
        """The number of groups the feature channels are split into.

        MPS: MPSCNNConvolutionGradient.groups, MPSCNNConvolutionTransposeGradient.groups
        """
        return _mps_groups(self._gradient().descriptor())

    @property
    def gradient_option(self):
        """Which gradients an encode computes: a CNNConvolutionGradientOption (default ALL). Without
        GRADIENT_WITH_WEIGHTS_AND_BIAS the gradient state's buffers are not written.

        MPS: MPSCNNConvolutionGradient.gradientOption, MPSCNNConvolutionTransposeGradient.gradientOption
        """
        return CNNConvolutionGradientOption(<int>self._gradient().gradient_option)

    @gradient_option.setter
    def gradient_option(self, value):
        cdef int64_t option = integer_argument(value, "gradient_option")
        if option not in (1, 2, 3):
            raise ValueError(f"gradient_option must be CNNConvolutionGradientOption.GRADIENT_WITH_DATA, "
                             f"GRADIENT_WITH_WEIGHTS_AND_BIAS or ALL, given {value!r}")
        self._gradient().gradient_option = <ConvolutionGradientOption>option

    def reload_weights_and_biases_from_data_source(self):
        """Does nothing: the gradient uses the weights of the forward encode, which its gradient state carries.

        MPS: -[MPSCNNConvolutionGradient reloadWeightsAndBiasesFromDataSource], -[MPSCNNConvolutionTransposeGradient reloadWeightsAndBiasesFromDataSource]
        """
        pass

    def reload_weights_and_biases(self, CommandBuffer command_buffer not None,
                                  CNNConvolutionWeightsAndBiasesState state not None):
        """Checks its arguments (DeviceMismatchError, StateError for a committed command buffer) and does nothing else:
        the gradient uses the weights of the forward encode, which its gradient state carries.

        MPS: -[MPSCNNConvolutionGradient reloadWeightsAndBiasesWithCommandBuffer:state:], -[MPSCNNConvolutionTransposeGradient reloadWeightsAndBiasesWithCommandBuffer:state:]
        """
        if state.device != self.device:
            raise DeviceMismatchError(f"the state is on device {state.device.name}, the kernel on {self.device.name}")
        command_buffer.native().check_encodable()


cdef class CNNConvolutionGradient(_ConvolutionGradientKernel):
    """CNNConvolutionGradient(device, data_source)
--

    The gradient of CNNConvolution: the gradient of its source, and of its weights and biases into the
    CNNConvolutionGradientState, as ``gradient_option`` selects. As
    ``-[MPSCNNConvolutionGradient initWithDevice:weights:]``.

    MPS: MPSCNNConvolutionGradient
    """

    def __init__(self, Device device not None, data_source):
        self._data_source = data_source
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNConvolutionGradient](
            device.shared(), convolution_data_source_of(data_source)))

    @property
    def channel_multiplier(self):
        """For the gradient of a convolution of a CNNDepthWiseConvolutionDescriptor, the output feature channels each
        input feature channel produces; 0 for any other.

        MPS: MPSCNNConvolutionGradient.channelMultiplier
        """
        return _channel_multiplier(self._gradient().descriptor())


cdef class CNNFullyConnectedGradient(CNNConvolutionGradient):
    """CNNFullyConnectedGradient(device, data_source)
--

    The gradient of CNNFullyConnected, as CNNConvolutionGradient's. As
    ``-[MPSCNNFullyConnectedGradient initWithDevice:weights:]``.

    MPS: MPSCNNFullyConnectedGradient
    """

    def __init__(self, Device device not None, data_source):
        self._data_source = data_source
        self._set(<shared_ptr[CGradientKernel]>make_native[CCNNFullyConnectedGradient](
            device.shared(), convolution_data_source_of(data_source)))

"""Type stubs of mpsx._kernels: the kernel families (MPSCNNKernel and MPSCNNGradientKernel), their data sources,
states and optimizers, and the graph (MPSNNGraph and its nodes)."""

# Written by tools/generate_stubs.py from the built package: change the tool, not this file.

import enum
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar, overload

import numpy as np
import numpy.typing as npt
from typing_extensions import Self, disjoint_base

from mpsx._runtime import (
    Buffer,
    CommandBuffer,
    Communicator,
    DataType,
    Device,
    Image,
    ImageAllocator,
    ImageBatch,
    ImageDescriptor,
    State,
    StateBatch,
    Vector,
)

__all__ = [
    "CNNKernel",
    "CNNUnaryKernel",
    "CNNBinaryKernel",
    "CNNGradientKernel",
    "NNGradientState",
    "NNBinaryGradientState",
    "NNMultiaryGradientState",
    "ImageEdgeMode",
    "KernelOptions",
    "NNPaddingMethod",
    "NeuronType",
    "Offset",
    "Region",
    "NNPadding",
    "NNDefaultPadding",
    "NNNeuronDescriptor",
    "CNNNeuron",
    "CNNNeuronGradient",
    "CNNNeuronAbsolute",
    "CNNNeuronELU",
    "CNNNeuronExponential",
    "CNNNeuronHardSigmoid",
    "CNNNeuronLinear",
    "CNNNeuronLogarithm",
    "CNNNeuronPReLU",
    "CNNNeuronPower",
    "CNNNeuronReLU",
    "CNNNeuronReLUN",
    "CNNNeuronSigmoid",
    "CNNNeuronSoftPlus",
    "CNNNeuronSoftSign",
    "CNNNeuronTanH",
    "ImageSizeEncodingState",
    "CNNConvolutionDescriptor",
    "CNNDepthWiseConvolutionDescriptor",
    "CNNSubPixelConvolutionDescriptor",
    "CNNConvolutionDataSource",
    "ConvolutionWeights",
    "CNNConvolutionWeightsAndBiasesState",
    "CNNConvolutionGradientState",
    "CNNConvolutionGradientOption",
    "NNConvolutionAccumulatorPrecisionOption",
    "CNNConvolutionWeightsLayout",
    "CNNConvolution",
    "CNNConvolutionGradient",
    "CNNFullyConnected",
    "CNNFullyConnectedGradient",
    "CNNLossType",
    "CNNReductionType",
    "CNNLossDescriptor",
    "DataLayout",
    "CNNLossDataDescriptor",
    "CNNLossLabels",
    "CNNLoss",
    "NNForwardLoss",
    "NNLossGradient",
    "NNLossGradientState",
    "CNNPooling",
    "CNNPoolingMax",
    "CNNPoolingAverage",
    "CNNPoolingL2Norm",
    "CNNDilatedPoolingMax",
    "CNNPoolingGradient",
    "CNNPoolingMaxGradient",
    "CNNPoolingAverageGradient",
    "CNNPoolingL2NormGradient",
    "CNNDilatedPoolingMaxGradient",
    "NNRegularizationType",
    "NNOptimizerDescriptor",
    "NNOptimizer",
    "NNOptimizerStochasticGradientDescent",
    "NNOptimizerAdam",
    "NNOptimizerRMSProp",
    "CNNConvolutionTranspose",
    "CNNConvolutionTransposeGradient",
    "CNNConvolutionTransposeGradientState",
    "CNNBatchNormalizationDataSource",
    "BatchNormalizationWeights",
    "CNNNormalizationGammaAndBetaState",
    "CNNNormalizationMeanAndVarianceState",
    "CNNBatchNormalizationState",
    "CNNBatchNormalization",
    "CNNBatchNormalizationStatistics",
    "CNNBatchNormalizationStatisticsGradient",
    "CNNBatchNormalizationGradient",
    "CNNSoftMax",
    "CNNLogSoftMax",
    "CNNSoftMaxGradient",
    "CNNLogSoftMaxGradient",
    "CNNDropout",
    "CNNDropoutGradient",
    "CNNDropoutGradientState",
    "CNNUpsampling",
    "CNNUpsamplingNearest",
    "CNNUpsamplingBilinear",
    "CNNUpsamplingGradient",
    "CNNUpsamplingNearestGradient",
    "CNNUpsamplingBilinearGradient",
    "NNGramMatrixCalculation",
    "NNGramMatrixCalculationGradient",
    "ImageCoordinate",
    "NNPad",
    "NNPadGradient",
    "NNReshape",
    "NNReshapeGradient",
    "NNComparisonType",
    "CNNArithmetic",
    "CNNAdd",
    "CNNSubtract",
    "CNNMultiply",
    "CNNDivide",
    "NNCompare",
    "CNNArithmeticGradientState",
    "CNNArithmeticGradient",
    "CNNAddGradient",
    "CNNSubtractGradient",
    "CNNMultiplyGradient",
    "CNNLocalContrastNormalization",
    "CNNLocalContrastNormalizationGradient",
    "CNNCrossChannelNormalization",
    "CNNCrossChannelNormalizationGradient",
    "CNNSpatialNormalization",
    "CNNSpatialNormalizationGradient",
    "CNNGroupNormalizationDataSource",
    "GroupNormalizationWeights",
    "CNNGroupNormalizationGradientState",
    "CNNGroupNormalization",
    "CNNGroupNormalizationGradient",
    "CNNInstanceNormalizationDataSource",
    "InstanceNormalizationWeights",
    "CNNInstanceNormalizationGradientState",
    "CNNInstanceNormalization",
    "CNNInstanceNormalizationGradient",
    "NNInitialGradient",
    "NNHandle",
    "NNImageNode",
    "NNStateNode",
    "NNGradientStateNode",
    "CNNConvolutionGradientStateNode",
    "NNLabelsNode",
    "NNFilterNode",
    "NNGradientFilterNode",
    "NNGraph",
    "NNTrainingStyle",
    "NNTrainableNode",
    "CNNNormalizationNode",
    "CNNNeuronNode",
    "CNNNeuronGradientNode",
    "CNNNeuronAbsoluteNode",
    "CNNNeuronELUNode",
    "CNNNeuronExponentialNode",
    "CNNNeuronGeLUNode",
    "CNNNeuronHardSigmoidNode",
    "CNNNeuronLinearNode",
    "CNNNeuronLogarithmNode",
    "CNNNeuronPReLUNode",
    "CNNNeuronPowerNode",
    "CNNNeuronReLUNode",
    "CNNNeuronReLUNNode",
    "CNNNeuronSigmoidNode",
    "CNNNeuronSoftPlusNode",
    "CNNNeuronSoftSignNode",
    "CNNNeuronTanHNode",
    "CNNPoolingNode",
    "CNNPoolingMaxNode",
    "CNNPoolingAverageNode",
    "CNNPoolingL2NormNode",
    "CNNDilatedPoolingMaxNode",
    "CNNPoolingGradientNode",
    "CNNPoolingMaxGradientNode",
    "CNNPoolingAverageGradientNode",
    "CNNPoolingL2NormGradientNode",
    "CNNDilatedPoolingMaxGradientNode",
    "CNNConvolutionNode",
    "CNNFullyConnectedNode",
    "CNNConvolutionGradientNode",
    "CNNFullyConnectedGradientNode",
    "CNNLossNode",
    "NNForwardLossNode",
    "NNLossGradientNode",
    "NNLossCallback",
    "NNBinaryGradientStateNode",
    "NNArithmeticGradientStateNode",
    "NNMultiaryGradientStateNode",
    "NNBinaryArithmeticNode",
    "NNAdditionNode",
    "NNSubtractionNode",
    "NNMultiplicationNode",
    "NNDivisionNode",
    "NNComparisonNode",
    "NNArithmeticGradientNode",
    "NNAdditionGradientNode",
    "NNSubtractionGradientNode",
    "NNMultiplicationGradientNode",
    "CNNSoftMaxNode",
    "CNNLogSoftMaxNode",
    "CNNSoftMaxGradientNode",
    "CNNLogSoftMaxGradientNode",
    "CNNDropoutNode",
    "CNNDropoutGradientNode",
    "CNNUpsamplingNearestNode",
    "CNNUpsamplingBilinearNode",
    "CNNUpsamplingNearestGradientNode",
    "CNNUpsamplingBilinearGradientNode",
    "NNGramMatrixCalculationNode",
    "NNGramMatrixCalculationGradientNode",
    "NNGramMatrixCallback",
    "NNPadNode",
    "NNPadGradientNode",
    "NNReshapeNode",
    "NNReshapeGradientNode",
    "CNNCrossChannelNormalizationNode",
    "CNNCrossChannelNormalizationGradientNode",
    "CNNSpatialNormalizationNode",
    "CNNSpatialNormalizationGradientNode",
    "CNNLocalContrastNormalizationNode",
    "CNNLocalContrastNormalizationGradientNode",
    "CNNBatchNormalizationFlags",
    "CNNBatchNormalizationNode",
    "CNNBatchNormalizationGradientNode",
    "CNNGroupNormalizationNode",
    "CNNGroupNormalizationGradientNode",
    "CNNInstanceNormalizationNode",
    "CNNInstanceNormalizationGradientNode",
    "NNConcatenationNode",
    "NNConcatenationGradientNode",
    "CNNConvolutionTransposeNode",
    "CNNConvolutionTransposeGradientNode",
    "CNNConvolutionTransposeGradientStateNode",
    "NNInitialGradientNode",
    "NNUnaryReductionNode",
    "NNReductionSpatialMeanNode",
    "NNReductionFeatureChannelsSumNode",
    "NNReductionSpatialMeanGradientNode",
    "ScaleTransform",
    "ImageTransformProvider",
    "NNScaleNode",
    "NNBilinearScaleNode",
    "NNLanczosScaleNode",
]

# What the encodes over a batch take: an ImageBatch, an Image (a batch of its images) or a list of Images.
_ImageSource = ImageBatch | Image | Sequence[Image]
# A forward encode's state: the state, or its StateBatch (whose items are that state).
_StateSource = State | Sequence[State]
# The state type parameter is the family's gradient state class: what destination_state=True returns.
_S = TypeVar("_S", bound=State)
_LossData = npt.ArrayLike | Image | ImageBatch | CNNLossDataDescriptor
_NodeHandler = Callable[[NNFilterNode, NNFilterNode, NNImageNode, NNImageNode], object]

class _Handle(Protocol):
    """An MPSHandle: anything with a label."""

    @property
    def label(self) -> str: ...

class _LossCallback(Protocol):
    def scalar_weight_for_source_image(self, source_image: Image, destination_image: Image) -> float: ...

class _GramMatrixCallback(Protocol):
    def alpha_for_source_image(self, source_image: Image, destination_image: Image) -> float: ...

class _TransformProvider(Protocol):
    def transform_for_source_image(
        self, image: Image, handle: _Handle | None
    ) -> ScaleTransform | tuple[float, float, float, float]: ...

class _ConvolutionDataSource(Protocol):
    """What a convolution data source needs (CNNConvolutionDataSource lists the optional members)."""

    def descriptor(self) -> CNNConvolutionDescriptor: ...
    def weights(self) -> npt.ArrayLike: ...

class _ProcessGroup(Protocol):
    """An mpsx.distributed.ProcessGroup: what NNGraph's data_parallel takes besides a Communicator."""

    @property
    def communicator(self) -> Communicator: ...

@disjoint_base
class CNNKernel:
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def is_result_state_reused_across_batch(self) -> bool: ...
    def result_state_batch(
        self,
        *source_images: _ImageSource,
        source_states: _StateSource | None = None,
        destination_images: ImageBatch | None = None,
    ) -> StateBatch | None: ...
    def temporary_result_state(
        self,
        command_buffer: CommandBuffer,
        *source_images: Image | ImageBatch,
        source_states: _StateSource | None = None,
        destination_image: Image | ImageBatch | None = None,
    ) -> State | None: ...
    def temporary_result_state_batch(
        self,
        command_buffer: CommandBuffer,
        *source_images: _ImageSource,
        source_states: _StateSource | None = None,
        destination_images: ImageBatch | None = None,
    ) -> StateBatch | None: ...
    def encoding_storage_size(
        self,
        *source_images: Image,
        source_states: _StateSource | None = None,
        destination_image: Image | ImageBatch | None = None,
    ) -> int: ...
    def batch_encoding_storage_size(
        self,
        *source_images: _ImageSource,
        source_states: _StateSource | None = None,
        destination_images: ImageBatch | None = None,
    ) -> int: ...
    def append_batch_barrier(self) -> bool: ...
    def copy(self, device: Device | None = None) -> Self: ...
    def gradient_kernels(self) -> list[CNNGradientKernel]: ...
    @property
    def is_backwards(self) -> bool: ...
    @property
    def is_state_modified(self) -> bool: ...
    @property
    def options(self) -> KernelOptions: ...
    @options.setter
    def options(self, value: KernelOptions | int) -> None: ...
    @property
    def device(self) -> Device: ...
    @property
    def offset(self) -> Offset: ...
    @offset.setter
    def offset(self, value: tuple[int, int] | tuple[int, int, int]) -> None: ...
    @property
    def clip_rect(self) -> Region | None: ...
    @clip_rect.setter
    def clip_rect(self, value: tuple[int, int, int, int, int, int] | None) -> None: ...
    @property
    def edge_mode(self) -> ImageEdgeMode: ...
    @edge_mode.setter
    def edge_mode(self, value: ImageEdgeMode | int) -> None: ...
    @property
    def destination_image_allocator(self) -> ImageAllocator: ...
    @destination_image_allocator.setter
    def destination_image_allocator(self, value: ImageAllocator | None) -> None: ...
    @property
    def padding(self) -> NNPaddingMethod | NNPadding: ...
    @padding.setter
    def padding(self, value: NNPaddingMethod | int | NNPadding) -> None: ...
    destination_feature_channel_offset: int
    source_feature_channel_offset: int
    source_feature_channel_max_count: int
    label: str

@disjoint_base
class CNNUnaryKernel(CNNKernel, Generic[_S]):
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        destination_image: Image | None = None,
        destination_state: Literal[False] | None = False,
        destination_state_is_temporary: bool = False,
    ) -> Image: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        destination_image: Image | None = None,
        *,
        destination_state: Literal[True] | _S,
        destination_state_is_temporary: bool = False,
    ) -> tuple[Image, _S]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        destination_image: Image | None,
        destination_state: Literal[True] | _S,
        destination_state_is_temporary: bool = False,
    ) -> tuple[Image, _S]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        destination_images: ImageBatch | None = None,
        destination_states: Literal[False] | None = False,
        destination_state_is_temporary: bool = False,
    ) -> ImageBatch: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        destination_images: ImageBatch | None = None,
        *,
        destination_states: Literal[True] | _S | StateBatch,
        destination_state_is_temporary: bool = False,
    ) -> tuple[ImageBatch, StateBatch]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        destination_images: ImageBatch | None,
        destination_states: Literal[True] | _S | StateBatch,
        destination_state_is_temporary: bool = False,
    ) -> tuple[ImageBatch, StateBatch]: ...
    def result_state(
        self,
        source_image: Image | ImageBatch,
        source_states: _StateSource | None = None,
        destination_image: Image | ImageBatch | None = None,
    ) -> _S: ...
    def destination_image_descriptor(
        self, source_images: _ImageSource, source_states: _StateSource | None = None
    ) -> ImageDescriptor: ...

@disjoint_base
class CNNBinaryKernel(CNNKernel, Generic[_S]):
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        primary_image: Image,
        secondary_image: Image,
        destination_image: Image | None = None,
        destination_state: Literal[False] | None = False,
        destination_state_is_temporary: bool = False,
    ) -> Image: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        primary_image: Image,
        secondary_image: Image,
        destination_image: Image | None = None,
        *,
        destination_state: Literal[True] | _S,
        destination_state_is_temporary: bool = False,
    ) -> tuple[Image, _S]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        primary_image: Image,
        secondary_image: Image,
        destination_image: Image | None,
        destination_state: Literal[True] | _S,
        destination_state_is_temporary: bool = False,
    ) -> tuple[Image, _S]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        primary_images: _ImageSource,
        secondary_images: _ImageSource,
        destination_images: ImageBatch | None = None,
        destination_states: Literal[False] | None = False,
        destination_state_is_temporary: bool = False,
    ) -> ImageBatch: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        primary_images: _ImageSource,
        secondary_images: _ImageSource,
        destination_images: ImageBatch | None = None,
        *,
        destination_states: Literal[True] | _S | StateBatch,
        destination_state_is_temporary: bool = False,
    ) -> tuple[ImageBatch, StateBatch]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        primary_images: _ImageSource,
        secondary_images: _ImageSource,
        destination_images: ImageBatch | None,
        destination_states: Literal[True] | _S | StateBatch,
        destination_state_is_temporary: bool = False,
    ) -> tuple[ImageBatch, StateBatch]: ...
    def result_state(
        self,
        primary_image: Image | ImageBatch,
        secondary_image: Image | ImageBatch,
        source_states: _StateSource | None = None,
        destination_image: Image | ImageBatch | None = None,
    ) -> _S: ...
    def destination_image_descriptor(
        self, source_images: Sequence[Image | ImageBatch], source_states: _StateSource | None = None
    ) -> ImageDescriptor: ...
    @property
    def primary_offset(self) -> Offset: ...
    @primary_offset.setter
    def primary_offset(self, value: tuple[int, int] | tuple[int, int, int]) -> None: ...
    @property
    def secondary_offset(self) -> Offset: ...
    @secondary_offset.setter
    def secondary_offset(self, value: tuple[int, int] | tuple[int, int, int]) -> None: ...
    @property
    def primary_edge_mode(self) -> ImageEdgeMode: ...
    @primary_edge_mode.setter
    def primary_edge_mode(self, value: ImageEdgeMode | int) -> None: ...
    @property
    def secondary_edge_mode(self) -> ImageEdgeMode: ...
    @secondary_edge_mode.setter
    def secondary_edge_mode(self, value: ImageEdgeMode | int) -> None: ...
    primary_stride_in_pixels_x: int
    secondary_stride_in_pixels_x: int
    primary_stride_in_pixels_y: int
    secondary_stride_in_pixels_y: int
    primary_source_feature_channel_offset: int
    secondary_source_feature_channel_offset: int
    primary_source_feature_channel_max_count: int
    secondary_source_feature_channel_max_count: int
    @property
    def primary_kernel_width(self) -> int: ...
    @property
    def secondary_kernel_width(self) -> int: ...
    @property
    def primary_kernel_height(self) -> int: ...
    @property
    def secondary_kernel_height(self) -> int: ...
    @property
    def primary_dilation_rate_x(self) -> int: ...
    @property
    def secondary_dilation_rate_x(self) -> int: ...
    @property
    def primary_dilation_rate_y(self) -> int: ...
    @property
    def secondary_dilation_rate_y(self) -> int: ...

@disjoint_base
class CNNGradientKernel(CNNBinaryKernel[NNGradientState]):
    def result_state(self, *args: Any, **kwargs: Any) -> None: ...  # type: ignore[override]
    def encode(  # type: ignore[override]
        self,
        command_buffer: CommandBuffer,
        source_gradient: Image,
        source_image: Image,
        gradient_state: State,
        destination_gradient: Image | None = None,
    ) -> Image: ...
    def encode_batch(  # type: ignore[override]
        self,
        command_buffer: CommandBuffer,
        source_gradients: _ImageSource,
        source_images: _ImageSource,
        gradient_states: _StateSource,
        destination_gradients: ImageBatch | None = None,
    ) -> ImageBatch: ...
    def destination_image_descriptor(  # type: ignore[override]
        self, source_images: _ImageSource | Sequence[Image | ImageBatch], source_states: _StateSource
    ) -> ImageDescriptor: ...
    kernel_offset_x: int
    kernel_offset_y: int

@disjoint_base
class _KernelState(State):
    @property
    def kernel(self) -> CNNKernel | None: ...

class NNGradientState(_KernelState): ...

class NNBinaryGradientState(_KernelState): ...

class NNMultiaryGradientState(_KernelState): ...

class ImageEdgeMode(enum.IntEnum):
    ZERO = 0
    CLAMP = 1
    MIRROR = 2
    MIRROR_WITH_EDGE = 3
    CONSTANT = 4

class KernelOptions(enum.IntFlag):
    NONE = 0
    SKIP_API_VALIDATION = 1
    ALLOW_REDUCED_PRECISION = 2
    DISABLE_INTERNAL_TILING = 4
    INSERT_DEBUG_GROUPS = 8
    VERBOSE = 16

class NNPaddingMethod(enum.IntFlag):
    ALIGN_CENTERED = 0
    ALIGN_TOP_LEFT = 1
    ALIGN_BOTTOM_RIGHT = 2
    ADD_REMAINDER_TO_TOP_LEFT = 0
    ADD_REMAINDER_TO_TOP_RIGHT = 4
    ADD_REMAINDER_TO_BOTTOM_LEFT = 8
    ADD_REMAINDER_TO_BOTTOM_RIGHT = 12
    SIZE_VALID_ONLY = 0
    SIZE_SAME = 16
    SIZE_FULL = 32
    CUSTOM_ALLOW_FOR_NODE_FUSION = 8192
    CUSTOM = 16384
    EXCLUDE_EDGES = 32768

class NeuronType(enum.IntEnum):
    NONE = 0
    RELU = 1
    LINEAR = 2
    SIGMOID = 3
    HARD_SIGMOID = 4
    TANH = 5
    ABSOLUTE = 6
    SOFTPLUS = 7
    SOFTSIGN = 8
    ELU = 9
    PRELU = 10
    RELUN = 11
    POWER = 12
    EXPONENTIAL = 13
    LOGARITHM = 14
    GELU = 15

class Offset(NamedTuple):
    x: int = 0
    y: int = 0
    z: int = 0

class Region(NamedTuple):
    x: int
    y: int
    z: int
    width: int
    height: int
    depth: int

class NNPadding:
    def padding_method(self) -> NNPaddingMethod: ...
    def label(self) -> str | None: ...
    def destination_image_descriptor_for_source_images(
        self,
        source_images: _ImageSource,
        source_states: _StateSource,
        for_kernel: CNNKernel,
        suggested_descriptor: ImageDescriptor,
    ) -> ImageDescriptor: ...
    def inverse(self) -> NNPadding | None: ...

@disjoint_base
class NNDefaultPadding(NNPadding):
    def __init__(self, method: NNPaddingMethod | int) -> None: ...
    @classmethod
    def padding_with_method(cls, method: NNPaddingMethod | int) -> Self: ...
    @classmethod
    def padding_for_tensorflow_average_pooling(cls) -> Self: ...
    @classmethod
    def padding_for_tensorflow_average_pooling_valid_only(cls) -> Self: ...
    def padding_method(self) -> NNPaddingMethod: ...
    def label(self) -> str | None: ...
    def destination_image_descriptor_for_source_images(
        self,
        source_images: _ImageSource,
        source_states: _StateSource,
        for_kernel: CNNKernel,
        suggested_descriptor: ImageDescriptor,
    ) -> ImageDescriptor: ...
    def inverse(self) -> NNPadding | None: ...

@disjoint_base
class NNNeuronDescriptor:
    def __init__(
        self,
        neuron_type: NeuronType | int = NeuronType.NONE,
        a: float = 0.0,
        b: float = 0.0,
        c: float = 0.0,
        data: npt.ArrayLike | None = None,
    ) -> None: ...
    @classmethod
    def cnn_neuron_descriptor_with_type(
        cls, neuron_type: NeuronType | int, a: float = 0.0, b: float = 0.0, c: float = 0.0
    ) -> Self: ...
    @classmethod
    def cnn_neuron_p_re_lu_descriptor_with_data(cls, data: npt.ArrayLike, no_copy: bool = False) -> Self: ...
    @property
    def neuron_type(self) -> NeuronType: ...
    @neuron_type.setter
    def neuron_type(self, value: NeuronType | int) -> None: ...
    a: float
    b: float
    c: float
    @property
    def data(self) -> npt.NDArray[np.float32] | None: ...
    @data.setter
    def data(self, value: npt.ArrayLike | None) -> None: ...

class CNNNeuron(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device, neuron_descriptor: NNNeuronDescriptor) -> None: ...
    @property
    def neuron_descriptor(self) -> NNNeuronDescriptor: ...
    @property
    def neuron_type(self) -> NeuronType: ...
    @property
    def a(self) -> float: ...
    @property
    def b(self) -> float: ...
    @property
    def c(self) -> float: ...
    @property
    def data(self) -> npt.NDArray[np.float32] | None: ...

class CNNNeuronGradient(CNNGradientKernel):
    def __init__(self, device: Device, neuron_descriptor: NNNeuronDescriptor) -> None: ...
    @property
    def neuron_descriptor(self) -> NNNeuronDescriptor: ...
    @property
    def neuron_type(self) -> NeuronType: ...
    @property
    def a(self) -> float: ...
    @property
    def b(self) -> float: ...
    @property
    def c(self) -> float: ...
    @property
    def data(self) -> npt.NDArray[np.float32] | None: ...

class CNNNeuronAbsolute(CNNNeuron):
    def __init__(self, device: Device) -> None: ...

class CNNNeuronELU(CNNNeuron):
    def __init__(self, device: Device, a: float) -> None: ...

class CNNNeuronExponential(CNNNeuron):
    def __init__(self, device: Device, a: float, b: float, c: float) -> None: ...

class CNNNeuronHardSigmoid(CNNNeuron):
    def __init__(self, device: Device, a: float, b: float) -> None: ...

class CNNNeuronLinear(CNNNeuron):
    def __init__(self, device: Device, a: float, b: float) -> None: ...

class CNNNeuronLogarithm(CNNNeuron):
    def __init__(self, device: Device, a: float, b: float, c: float) -> None: ...

class CNNNeuronPReLU(CNNNeuron):
    def __init__(self, device: Device, a: npt.ArrayLike, count: int | None = None) -> None: ...

class CNNNeuronPower(CNNNeuron):
    def __init__(self, device: Device, a: float, b: float, c: float) -> None: ...

class CNNNeuronReLU(CNNNeuron):
    def __init__(self, device: Device, a: float) -> None: ...

class CNNNeuronReLUN(CNNNeuron):
    def __init__(self, device: Device, a: float, b: float) -> None: ...

class CNNNeuronSigmoid(CNNNeuron):
    def __init__(self, device: Device) -> None: ...

class CNNNeuronSoftPlus(CNNNeuron):
    def __init__(self, device: Device, a: float, b: float) -> None: ...

class CNNNeuronSoftSign(CNNNeuron):
    def __init__(self, device: Device) -> None: ...

class CNNNeuronTanH(CNNNeuron):
    def __init__(self, device: Device, a: float, b: float) -> None: ...

class ImageSizeEncodingState:
    @property
    def source_width(self) -> int: ...
    @property
    def source_height(self) -> int: ...

@disjoint_base
class CNNConvolutionDescriptor:
    def __init__(
        self,
        kernel_width: int,
        kernel_height: int,
        input_feature_channels: int,
        output_feature_channels: int,
        stride_in_pixels_x: int = 1,
        stride_in_pixels_y: int = 1,
        dilation_rate_x: int = 1,
        dilation_rate_y: int = 1,
        groups: int = 1,
        fused_neuron_descriptor: NNNeuronDescriptor | None = None,
    ) -> None: ...
    @classmethod
    def cnn_convolution_descriptor_with_kernel_width(
        cls, kernel_width: int, kernel_height: int, input_feature_channels: int, output_feature_channels: int
    ) -> Self: ...
    def set_neuron_type(
        self, neuron_type: NeuronType | int, parameter_a: float = 0.0, parameter_b: float = 0.0
    ) -> None: ...
    def set_neuron_to_p_re_lu_with_parameters_a(self, parameters_a: npt.ArrayLike) -> None: ...
    def neuron_type(self) -> NeuronType: ...
    def neuron_parameter_a(self) -> float: ...
    def neuron_parameter_b(self) -> float: ...
    def set_batch_normalization_parameters_for_inference_with_mean(
        self,
        mean: npt.ArrayLike | None,
        variance: npt.ArrayLike | None,
        gamma: npt.ArrayLike | None,
        beta: npt.ArrayLike | None,
        epsilon: float,
    ) -> None: ...
    kernel_width: int
    kernel_height: int
    input_feature_channels: int
    output_feature_channels: int
    stride_in_pixels_x: int
    stride_in_pixels_y: int
    dilation_rate_x: int
    dilation_rate_y: int
    groups: int
    fused_neuron_descriptor: NNNeuronDescriptor | None
    neuron: CNNNeuron | None
    @property
    def weights_shape(self) -> tuple[int, int, int, int]: ...

class CNNDepthWiseConvolutionDescriptor(CNNConvolutionDescriptor):
    def __init__(
        self,
        kernel_width: int,
        kernel_height: int,
        input_feature_channels: int,
        output_feature_channels: int,
        stride_in_pixels_x: int = 1,
        stride_in_pixels_y: int = 1,
        dilation_rate_x: int = 1,
        dilation_rate_y: int = 1,
        fused_neuron_descriptor: NNNeuronDescriptor | None = None,
    ) -> None: ...
    @property
    def channel_multiplier(self) -> int: ...
    input_feature_channels: int
    groups: int

class CNNSubPixelConvolutionDescriptor(CNNConvolutionDescriptor):
    def __init__(
        self,
        kernel_width: int,
        kernel_height: int,
        input_feature_channels: int,
        output_feature_channels: int,
        stride_in_pixels_x: int = 1,
        stride_in_pixels_y: int = 1,
        dilation_rate_x: int = 1,
        dilation_rate_y: int = 1,
        groups: int = 1,
        fused_neuron_descriptor: NNNeuronDescriptor | None = None,
        sub_pixel_scale_factor: int = 1,
    ) -> None: ...
    sub_pixel_scale_factor: int

class CNNConvolutionDataSource:
    data_type: DataType
    def descriptor(self) -> CNNConvolutionDescriptor: ...
    def weights(self) -> npt.NDArray[Any]: ...
    def bias_terms(self) -> npt.NDArray[np.float32] | None: ...
    def load(self) -> bool: ...
    def purge(self) -> None: ...
    def label(self) -> str | None: ...
    def kernel_weights_data_type(self) -> DataType: ...
    def weights_layout(self) -> CNNConvolutionWeightsLayout: ...
    def weights_quantization_type(self) -> Literal["none", "linear", "lookup_table"]: ...
    def ranges_for_uint8_kernel(self) -> npt.ArrayLike | None: ...
    def lookup_table_for_uint8_kernel(self) -> npt.ArrayLike | None: ...
    def update_with_gradient_state(
        self, gradient_state: CNNConvolutionGradientState, source_state: CNNConvolutionWeightsAndBiasesState
    ) -> bool: ...
    def update_with_command_buffer(
        self,
        command_buffer: CommandBuffer,
        gradient_state: CNNConvolutionGradientState,
        source_state: CNNConvolutionWeightsAndBiasesState,
    ) -> CNNConvolutionWeightsAndBiasesState | None: ...
    def copy(self, device: Device) -> Self: ...

@disjoint_base
class ConvolutionWeights:
    def __init__(
        self,
        descriptor: CNNConvolutionDescriptor,
        weights: npt.ArrayLike,
        biases: npt.ArrayLike | None = None,
        optimizer: NNOptimizer | None = None,
        label: str | None = None,
    ) -> None: ...
    def descriptor(self) -> CNNConvolutionDescriptor: ...
    def weights(self) -> npt.NDArray[np.float32]: ...
    def bias_terms(self) -> npt.NDArray[np.float32] | None: ...
    def set_weights_and_biases(self, weights: npt.ArrayLike, biases: npt.ArrayLike | None = None) -> None: ...
    def load(self) -> bool: ...
    def purge(self) -> None: ...
    def label(self) -> str | None: ...
    def optimizer_state(self) -> dict[str, list[npt.NDArray[np.float32]]]: ...
    def set_optimizer_state(self, state: dict[str, Sequence[npt.ArrayLike]]) -> None: ...
    def copy(self, device: Device | None = None) -> Self: ...
    @property
    def data_type(self) -> DataType: ...
    @property
    def optimizer(self) -> NNOptimizer | None: ...

class CNNConvolutionWeightsAndBiasesState(State):
    def __init__(
        self,
        device: Device | None = None,
        weights: Buffer | npt.ArrayLike | None = None,
        biases: Buffer | npt.ArrayLike | None = None,
        weights_offset: int = 0,
        biases_offset: int = 0,
        cnn_convolution_descriptor: CNNConvolutionDescriptor | None = None,
    ) -> None: ...
    @classmethod
    def temporary_cnn_convolution_weights_and_biases_state_with_command_buffer(
        cls, command_buffer: CommandBuffer, cnn_convolution_descriptor: CNNConvolutionDescriptor
    ) -> Self: ...
    @property
    def weights(self) -> Buffer: ...
    @property
    def biases(self) -> Buffer | None: ...
    @property
    def weights_offset(self) -> int: ...
    @property
    def biases_offset(self) -> int: ...

class CNNConvolutionGradientState(NNGradientState, ImageSizeEncodingState):
    @property
    def gradient_for_weights(self) -> Buffer: ...
    @property
    def gradient_for_biases(self) -> Buffer: ...
    @property
    def gradient_for_weights_layout(self) -> CNNConvolutionWeightsLayout: ...
    @property
    def convolution(self) -> CNNConvolution: ...

class CNNConvolutionGradientOption(enum.IntFlag):
    GRADIENT_WITH_DATA = 1
    GRADIENT_WITH_WEIGHTS_AND_BIAS = 2
    ALL = 3

class NNConvolutionAccumulatorPrecisionOption(enum.IntFlag):
    HALF = 0
    FLOAT = 1

class CNNConvolutionWeightsLayout(enum.IntEnum):
    OHWI = 0

@disjoint_base
class _ConvolutionKernel(CNNUnaryKernel[_S]):
    def reload_weights_and_biases_from_data_source(self) -> None: ...
    def reload_weights_and_biases(
        self, command_buffer: CommandBuffer, state: CNNConvolutionWeightsAndBiasesState
    ) -> None: ...
    def export_weights_and_biases(
        self, command_buffer: CommandBuffer, result_state_can_be_temporary: bool = False
    ) -> CNNConvolutionWeightsAndBiasesState: ...
    def encode_weights_and_bias_update(
        self, command_buffer: CommandBuffer, gradient_state: CNNConvolutionGradientState
    ) -> None: ...
    @property
    def data_source(self) -> _ConvolutionDataSource: ...
    @property
    def descriptor(self) -> CNNConvolutionDescriptor: ...
    @property
    def input_feature_channels(self) -> int: ...
    @property
    def output_feature_channels(self) -> int: ...
    @property
    def groups(self) -> int: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    @property
    def stride_in_pixels_x(self) -> int: ...
    @property
    def stride_in_pixels_y(self) -> int: ...
    @property
    def dilation_rate_x(self) -> int: ...
    @property
    def dilation_rate_y(self) -> int: ...
    @property
    def fused_neuron_descriptor(self) -> NNNeuronDescriptor | None: ...
    @property
    def neuron_type(self) -> NeuronType: ...
    @property
    def neuron_parameter_a(self) -> float: ...
    @property
    def neuron_parameter_b(self) -> float: ...
    @property
    def neuron_parameter_c(self) -> float: ...
    @property
    def accumulator_precision_option(self) -> NNConvolutionAccumulatorPrecisionOption: ...
    @accumulator_precision_option.setter
    def accumulator_precision_option(
        self, value: NNConvolutionAccumulatorPrecisionOption | int | Literal["float", "half"]
    ) -> None: ...

class CNNConvolution(_ConvolutionKernel[CNNConvolutionGradientState]):
    def __init__(self, device: Device, data_source: _ConvolutionDataSource) -> None: ...
    def reload_weights_and_biases_with_data_source(self, data_source: _ConvolutionDataSource) -> None: ...
    @property
    def channel_multiplier(self) -> int: ...
    @property
    def sub_pixel_scale_factor(self) -> int: ...

@disjoint_base
class _ConvolutionGradientKernel(CNNGradientKernel):
    def reload_weights_and_biases_from_data_source(self) -> None: ...
    def reload_weights_and_biases(
        self, command_buffer: CommandBuffer, state: CNNConvolutionWeightsAndBiasesState
    ) -> None: ...
    serialize_weights_and_biases: bool
    @property
    def data_source(self) -> _ConvolutionDataSource: ...
    @property
    def descriptor(self) -> CNNConvolutionDescriptor: ...
    @property
    def source_gradient_feature_channels(self) -> int: ...
    @property
    def source_image_feature_channels(self) -> int: ...
    @property
    def groups(self) -> int: ...
    @property
    def gradient_option(self) -> CNNConvolutionGradientOption: ...
    @gradient_option.setter
    def gradient_option(self, value: CNNConvolutionGradientOption | int) -> None: ...

class CNNConvolutionGradient(_ConvolutionGradientKernel):
    def __init__(self, device: Device, data_source: _ConvolutionDataSource) -> None: ...
    @property
    def channel_multiplier(self) -> int: ...

class CNNFullyConnected(CNNConvolution):
    def __init__(self, device: Device, data_source: _ConvolutionDataSource) -> None: ...

class CNNFullyConnectedGradient(CNNConvolutionGradient):
    def __init__(self, device: Device, data_source: _ConvolutionDataSource) -> None: ...

class CNNLossType(enum.IntEnum):
    MEAN_ABSOLUTE_ERROR = 0
    MEAN_SQUARED_ERROR = 1
    SOFTMAX_CROSS_ENTROPY = 2
    SIGMOID_CROSS_ENTROPY = 3
    CATEGORICAL_CROSS_ENTROPY = 4
    HINGE = 5
    HUBER = 6
    COSINE_DISTANCE = 7
    LOG = 8
    KULLBACK_LEIBLER_DIVERGENCE = 9

class CNNReductionType(enum.IntEnum):
    NONE = 0
    SUM = 1
    MEAN = 2
    SUM_BY_NON_ZERO_WEIGHTS = 3

@disjoint_base
class CNNLossDescriptor:
    def __init__(
        self,
        loss_type: CNNLossType | int,
        reduction_type: CNNReductionType | int,
        *,
        weight: float = 1.0,
        label_smoothing: float = 0.0,
        number_of_classes: int = 1,
        epsilon: float = 1e-07,
        delta: float = 1.0,
        reduce_across_batch: bool = False,
    ) -> None: ...
    @classmethod
    def cnn_loss_descriptor_with_type(
        cls, loss_type: CNNLossType | int, reduction_type: CNNReductionType | int
    ) -> Self: ...
    @property
    def loss_type(self) -> CNNLossType: ...
    @loss_type.setter
    def loss_type(self, value: CNNLossType | int) -> None: ...
    @property
    def reduction_type(self) -> CNNReductionType: ...
    @reduction_type.setter
    def reduction_type(self, value: CNNReductionType | int) -> None: ...
    reduce_across_batch: bool
    weight: float
    label_smoothing: float
    number_of_classes: int
    epsilon: float
    delta: float

class DataLayout(enum.IntEnum):
    HEIGHT_X_WIDTH_X_FEATURE_CHANNELS = 0
    FEATURE_CHANNELS_X_HEIGHT_X_WIDTH = 1

@disjoint_base
class CNNLossDataDescriptor:
    def __init__(
        self,
        data: npt.NDArray[np.float32] | bytes | bytearray | memoryview,
        layout: DataLayout | int,
        size: tuple[int, int, int],
    ) -> None: ...
    @classmethod
    def cnn_loss_data_descriptor_with_data(
        cls,
        data: npt.NDArray[np.float32] | bytes | bytearray | memoryview,
        layout: DataLayout | int,
        size: tuple[int, int, int],
    ) -> Self: ...
    def to_numpy(self) -> npt.NDArray[np.float32]: ...
    def __copy__(self) -> Self: ...
    def __deepcopy__(self, memo: Any) -> Self: ...
    @property
    def data(self) -> bytes: ...
    @property
    def layout(self) -> DataLayout: ...
    @property
    def size(self) -> tuple[int, int, int]: ...
    bytes_per_row: int
    bytes_per_image: int

@disjoint_base
class CNNLossLabels(State):
    def __init__(
        self,
        device: Device,
        labels: _LossData | None = None,
        weights: _LossData | None = None,
        *,
        loss_image_size: tuple[int, int, int] | None = None,
        labels_descriptor: CNNLossDataDescriptor | None = None,
        weights_descriptor: CNNLossDataDescriptor | None = None,
        labels_image: Image | ImageBatch | None = None,
        weights_image: Image | ImageBatch | None = None,
    ) -> None: ...
    def loss_image(self) -> Image: ...
    def labels_image(self) -> Image: ...
    def weights_image(self) -> Image | None: ...
    @property
    def loss_image_size(self) -> tuple[int, int, int] | None: ...

@disjoint_base
class CNNLoss(CNNKernel):
    def __init__(self, device: Device, loss_descriptor: CNNLossDescriptor) -> None: ...
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        labels: CNNLossLabels,
        destination_image: Image | None = None,
    ) -> Image: ...
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        labels: CNNLossLabels | Sequence[CNNLossLabels],
        destination_images: ImageBatch | None = None,
    ) -> ImageBatch: ...
    def destination_image_descriptor(
        self, source_images: _ImageSource, source_states: State | Sequence[State] | None = None
    ) -> ImageDescriptor: ...
    @property
    def loss_descriptor(self) -> CNNLossDescriptor: ...
    @property
    def loss_type(self) -> CNNLossType: ...
    @property
    def reduction_type(self) -> CNNReductionType: ...
    @property
    def reduce_across_batch(self) -> bool: ...
    @property
    def weight(self) -> float: ...
    @property
    def label_smoothing(self) -> float: ...
    @property
    def number_of_classes(self) -> int: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def delta(self) -> float: ...

@disjoint_base
class _SeparatedLoss(CNNKernel):
    @property
    def loss_descriptor(self) -> CNNLossDescriptor: ...
    @property
    def loss_type(self) -> CNNLossType: ...
    @property
    def reduction_type(self) -> CNNReductionType: ...
    @property
    def reduce_across_batch(self) -> bool: ...
    @property
    def number_of_classes(self) -> int: ...
    weight: float
    label_smoothing: float
    epsilon: float
    delta: float

@disjoint_base
class NNForwardLoss(_SeparatedLoss):
    def __init__(self, device: Device, loss_descriptor: CNNLossDescriptor) -> None: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        labels: _ImageSource,
        weights: _ImageSource | None = None,
        destination_states: Literal[False] | None = False,
        destination_images: ImageBatch | Image | None = None,
        destination_state_is_temporary: bool = False,
    ) -> ImageBatch: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        labels: _ImageSource,
        weights: _ImageSource | None = None,
        *,
        destination_states: Literal[True] | NNLossGradientState | StateBatch,
        destination_images: ImageBatch | Image | None = None,
        destination_state_is_temporary: bool = False,
    ) -> tuple[ImageBatch, StateBatch]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        labels: _ImageSource,
        weights: _ImageSource | None,
        destination_states: Literal[True] | NNLossGradientState | StateBatch,
        destination_images: ImageBatch | Image | None = None,
        destination_state_is_temporary: bool = False,
    ) -> tuple[ImageBatch, StateBatch]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        labels: _ImageSource,
        weights: _ImageSource | None = None,
        destination_state: Literal[False] | None = False,
        destination_image: Image | None = None,
        destination_state_is_temporary: bool = False,
    ) -> Image: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        labels: _ImageSource,
        weights: _ImageSource | None = None,
        *,
        destination_state: Literal[True] | NNLossGradientState,
        destination_image: Image | None = None,
        destination_state_is_temporary: bool = False,
    ) -> tuple[Image, NNLossGradientState]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        labels: _ImageSource,
        weights: _ImageSource | None,
        destination_state: Literal[True] | NNLossGradientState,
        destination_image: Image | None = None,
        destination_state_is_temporary: bool = False,
    ) -> tuple[Image, NNLossGradientState]: ...
    def result_state(
        self,
        source_image: _ImageSource,
        source_states: _StateSource | None = None,
        destination_image: Image | ImageBatch | None = None,
    ) -> NNLossGradientState: ...
    def destination_image_descriptor(
        self, source_images: _ImageSource, source_states: State | Sequence[State] | None = None
    ) -> ImageDescriptor: ...

@disjoint_base
class NNLossGradient(_SeparatedLoss):
    def __init__(self, device: Device, loss_descriptor: CNNLossDescriptor) -> None: ...
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_gradients: _ImageSource,
        source_images: _ImageSource,
        labels: _ImageSource,
        weights: _ImageSource | None = None,
        source_states: _StateSource | None = None,
        destination_gradients: ImageBatch | Image | None = None,
    ) -> ImageBatch: ...
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_gradient: Image,
        source_image: Image,
        labels: _ImageSource,
        weights: _ImageSource | None = None,
        source_state: _StateSource | None = None,
        destination_gradient: Image | None = None,
    ) -> Image: ...
    def destination_image_descriptor(
        self, source_gradients: _ImageSource, source_images: _ImageSource
    ) -> ImageDescriptor: ...
    compute_label_gradients: bool

class NNLossGradientState(NNGradientState):
    @property
    def weight(self) -> float: ...
    @property
    def label_smoothing(self) -> float: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def delta(self) -> float: ...

@disjoint_base
class CNNPooling(CNNUnaryKernel[NNGradientState]):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    @property
    def stride_in_pixels_x(self) -> int: ...
    @property
    def stride_in_pixels_y(self) -> int: ...

class CNNPoolingMax(CNNPooling):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...

class CNNPoolingAverage(CNNPooling):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...
    zero_pad_size_x: int
    zero_pad_size_y: int

class CNNPoolingL2Norm(CNNPooling):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...

class CNNDilatedPoolingMax(CNNPooling):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        dilation_rate_x: int,
        dilation_rate_y: int,
        stride_in_pixels_x: int | None,
        stride_in_pixels_y: int | None,
    ) -> None: ...
    @property
    def dilation_rate_x(self) -> int: ...
    @property
    def dilation_rate_y(self) -> int: ...

@disjoint_base
class CNNPoolingGradient(CNNGradientKernel):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    @property
    def stride_in_pixels_x(self) -> int: ...
    @property
    def stride_in_pixels_y(self) -> int: ...
    source_size: tuple[int, int, int] | None

class CNNPoolingMaxGradient(CNNPoolingGradient):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...

class CNNPoolingAverageGradient(CNNPoolingGradient):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...
    zero_pad_size_x: int
    zero_pad_size_y: int

class CNNPoolingL2NormGradient(CNNPoolingGradient):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...

class CNNDilatedPoolingMaxGradient(CNNPoolingGradient):
    def __init__(
        self,
        device: Device,
        kernel_width: int,
        kernel_height: int,
        dilation_rate_x: int,
        dilation_rate_y: int,
        stride_in_pixels_x: int | None,
        stride_in_pixels_y: int | None,
    ) -> None: ...
    @property
    def dilation_rate_x(self) -> int: ...
    @property
    def dilation_rate_y(self) -> int: ...

class NNRegularizationType(enum.IntEnum):
    NONE = 0
    L1 = 1
    L2 = 2

@disjoint_base
class NNOptimizerDescriptor:
    def __init__(
        self,
        learning_rate: float = 0.001,
        gradient_rescale: float = 1.0,
        apply_gradient_clipping: bool = False,
        gradient_clip_max: float = ...,
        gradient_clip_min: float = ...,
        regularization_type: NNRegularizationType | int = NNRegularizationType.NONE,
        regularization_scale: float = 0.0,
    ) -> None: ...
    @classmethod
    def optimizer_descriptor_with_learning_rate(
        cls,
        learning_rate: float,
        gradient_rescale: float,
        *,
        regularization_type: NNRegularizationType | int,
        regularization_scale: float,
        apply_gradient_clipping: bool = False,
        gradient_clip_max: float = ...,
        gradient_clip_min: float = ...,
    ) -> Self: ...
    learning_rate: float
    gradient_rescale: float
    apply_gradient_clipping: bool
    gradient_clip_max: float
    gradient_clip_min: float
    @property
    def regularization_type(self) -> NNRegularizationType: ...
    @regularization_type.setter
    def regularization_type(self, value: NNRegularizationType | int) -> None: ...
    regularization_scale: float

@disjoint_base
class NNOptimizer:
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def set_learning_rate(self, learning_rate: float | None) -> None: ...
    def copy(self, device: Device | None = None) -> Self: ...
    @property
    def device(self) -> Device: ...
    learning_rate: float
    @property
    def gradient_rescale(self) -> float: ...
    apply_gradient_clipping: bool
    @property
    def gradient_clip_max(self) -> float: ...
    @property
    def gradient_clip_min(self) -> float: ...
    @property
    def regularization_type(self) -> NNRegularizationType: ...
    @property
    def regularization_scale(self) -> float: ...
    @property
    def optimizer_descriptor(self) -> NNOptimizerDescriptor: ...
    label: str

class NNOptimizerStochasticGradientDescent(NNOptimizer):
    def __init__(
        self,
        device: Device,
        learning_rate: float | None = None,
        momentum_scale: float = 0.0,
        use_nesterov_momentum: bool = False,
        optimizer_descriptor: NNOptimizerDescriptor | None = None,
        *,
        use_nestrov_momentum: bool | None = None,
    ) -> None: ...
    def encode(
        self,
        command_buffer: CommandBuffer,
        input_gradient_vector: Vector | None = None,
        input_values_vector: Vector | None = None,
        input_momentum_vector: Vector | None = None,
        result_values_vector: Vector | None = None,
        *,
        convolution_gradient_state: CNNConvolutionGradientState | None = None,
        convolution_source_state: CNNConvolutionWeightsAndBiasesState | None = None,
        batch_normalization_state: CNNBatchNormalizationState | StateBatch | None = None,
        batch_normalization_gradient_state: CNNBatchNormalizationState | None = None,
        batch_normalization_source_state: CNNBatchNormalizationState | None = None,
        input_momentum_vectors: Sequence[Vector] | None = None,
        result_state: State | None = None,
    ) -> None: ...
    @property
    def momentum_scale(self) -> float: ...
    @property
    def use_nesterov_momentum(self) -> bool: ...
    @property
    def use_nestrov_momentum(self) -> bool: ...

class NNOptimizerAdam(NNOptimizer):
    def __init__(
        self,
        device: Device,
        learning_rate: float | None = None,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-08,
        time_step: int = 0,
        optimizer_descriptor: NNOptimizerDescriptor | None = None,
    ) -> None: ...
    def encode(
        self,
        command_buffer: CommandBuffer,
        input_gradient_vector: Vector | None = None,
        input_values_vector: Vector | None = None,
        input_momentum_vector: Vector | None = None,
        input_velocity_vector: Vector | None = None,
        result_values_vector: Vector | None = None,
        *,
        maximum_velocity_vector: Vector | None = None,
        convolution_gradient_state: CNNConvolutionGradientState | None = None,
        convolution_source_state: CNNConvolutionWeightsAndBiasesState | None = None,
        batch_normalization_state: CNNBatchNormalizationState | StateBatch | None = None,
        batch_normalization_gradient_state: CNNBatchNormalizationState | None = None,
        batch_normalization_source_state: CNNBatchNormalizationState | None = None,
        input_momentum_vectors: Sequence[Vector] | None = None,
        input_velocity_vectors: Sequence[Vector] | None = None,
        maximum_velocity_vectors: Sequence[Vector] | None = None,
        result_state: State | None = None,
    ) -> None: ...
    @property
    def beta1(self) -> float: ...
    @property
    def beta2(self) -> float: ...
    @property
    def epsilon(self) -> float: ...
    time_step: int

class NNOptimizerRMSProp(NNOptimizer):
    def __init__(
        self,
        device: Device,
        learning_rate: float | None = None,
        decay: float = 0.9,
        epsilon: float = 1e-08,
        optimizer_descriptor: NNOptimizerDescriptor | None = None,
    ) -> None: ...
    def encode(
        self,
        command_buffer: CommandBuffer,
        input_gradient_vector: Vector | None = None,
        input_values_vector: Vector | None = None,
        input_sum_of_squares_vector: Vector | None = None,
        result_values_vector: Vector | None = None,
        *,
        convolution_gradient_state: CNNConvolutionGradientState | None = None,
        convolution_source_state: CNNConvolutionWeightsAndBiasesState | None = None,
        batch_normalization_state: CNNBatchNormalizationState | StateBatch | None = None,
        batch_normalization_gradient_state: CNNBatchNormalizationState | None = None,
        batch_normalization_source_state: CNNBatchNormalizationState | None = None,
        input_sum_of_squares_vectors: Sequence[Vector] | None = None,
        result_state: State | None = None,
    ) -> None: ...
    @property
    def decay(self) -> float: ...
    @property
    def epsilon(self) -> float: ...

class CNNConvolutionTranspose(_ConvolutionKernel[CNNConvolutionTransposeGradientState]):
    def __init__(self, device: Device, data_source: _ConvolutionDataSource) -> None: ...
    @overload  # type: ignore[override]
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        convolution_gradient_state: _StateSource | None = None,
        destination_image: Image | None = None,
        destination_state: Literal[False] | None = False,
        destination_state_is_temporary: bool = False,
    ) -> Image: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        convolution_gradient_state: _StateSource | None = None,
        destination_image: Image | None = None,
        *,
        destination_state: Literal[True] | CNNConvolutionTransposeGradientState,
        destination_state_is_temporary: bool = False,
    ) -> tuple[Image, CNNConvolutionTransposeGradientState]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        convolution_gradient_state: _StateSource | None,
        destination_image: Image | None,
        destination_state: Literal[True] | CNNConvolutionTransposeGradientState,
        destination_state_is_temporary: bool = False,
    ) -> tuple[Image, CNNConvolutionTransposeGradientState]: ...
    @overload  # type: ignore[override]
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        convolution_gradient_states: _StateSource | None = None,
        destination_images: ImageBatch | None = None,
        destination_states: Literal[False] | None = False,
        destination_state_is_temporary: bool = False,
    ) -> ImageBatch: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        convolution_gradient_states: _StateSource | None = None,
        destination_images: ImageBatch | None = None,
        *,
        destination_states: Literal[True] | CNNConvolutionTransposeGradientState | StateBatch,
        destination_state_is_temporary: bool = False,
    ) -> tuple[ImageBatch, StateBatch]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        convolution_gradient_states: _StateSource | None,
        destination_images: ImageBatch | None,
        destination_states: Literal[True] | CNNConvolutionTransposeGradientState | StateBatch,
        destination_state_is_temporary: bool = False,
    ) -> tuple[ImageBatch, StateBatch]: ...
    def result_state(  # type: ignore[override]
        self,
        source_image: Image | ImageBatch,
        source_states: _StateSource | None = None,
        destination_image: Image | ImageBatch | None = None,
    ) -> CNNConvolutionTransposeGradientState: ...
    def destination_image_descriptor(  # type: ignore[override]
        self, source_images: _ImageSource, source_states: State | Sequence[State] | None = None
    ) -> ImageDescriptor: ...
    kernel_offset_x: int
    kernel_offset_y: int

class CNNConvolutionTransposeGradient(_ConvolutionGradientKernel):
    def __init__(self, device: Device, data_source: _ConvolutionDataSource) -> None: ...

@disjoint_base
class CNNConvolutionTransposeGradientState(CNNConvolutionGradientState):
    @property
    def convolution_transpose(self) -> CNNConvolutionTranspose: ...
    @property
    def convolution(self) -> CNNConvolution | None: ...  # type: ignore[override]

class CNNBatchNormalizationDataSource:
    epsilon: float
    def number_of_feature_channels(self) -> int: ...
    def gamma(self) -> npt.NDArray[np.float32] | None: ...
    def beta(self) -> npt.NDArray[np.float32] | None: ...
    def mean(self) -> npt.NDArray[np.float32] | None: ...
    def variance(self) -> npt.NDArray[np.float32] | None: ...
    def load(self) -> bool: ...
    def purge(self) -> None: ...
    def label(self) -> str | None: ...
    def update_gamma_and_beta_with_batch_normalization_state(
        self, batch_normalization_state: CNNBatchNormalizationState
    ) -> bool: ...
    def update_mean_and_variance_with_batch_normalization_state(
        self, batch_normalization_state: CNNBatchNormalizationState
    ) -> bool: ...
    def copy(self, device: Device) -> Self: ...

@disjoint_base
class BatchNormalizationWeights:
    def __init__(
        self,
        gamma: npt.ArrayLike,
        beta: npt.ArrayLike,
        mean: npt.ArrayLike,
        variance: npt.ArrayLike,
        epsilon: float = 1e-05,
        momentum: float = 0.1,
        optimizer: NNOptimizer | None = None,
        label: str | None = None,
    ) -> None: ...
    def number_of_feature_channels(self) -> int: ...
    def gamma(self) -> npt.NDArray[np.float32] | None: ...
    def beta(self) -> npt.NDArray[np.float32] | None: ...
    def mean(self) -> npt.NDArray[np.float32] | None: ...
    def variance(self) -> npt.NDArray[np.float32] | None: ...
    def load(self) -> bool: ...
    def purge(self) -> None: ...
    def label(self) -> str | None: ...
    def update_mean_and_variance_with_command_buffer(
        self, command_buffer: CommandBuffer, batch_normalization_state: CNNBatchNormalizationState | StateBatch
    ) -> CNNNormalizationMeanAndVarianceState: ...
    def update_gamma_and_beta_with_command_buffer(
        self, command_buffer: CommandBuffer, batch_normalization_state: CNNBatchNormalizationState | StateBatch
    ) -> CNNNormalizationGammaAndBetaState: ...
    def optimizer_state(self) -> dict[str, list[npt.NDArray[np.float32]]]: ...
    def set_optimizer_state(self, state: dict[str, Sequence[npt.ArrayLike]]) -> None: ...
    def set_gamma_and_beta(self, gamma: npt.ArrayLike, beta: npt.ArrayLike) -> None: ...
    def set_mean_and_variance(self, mean: npt.ArrayLike, variance: npt.ArrayLike) -> None: ...
    def copy(self, device: Device | None = None) -> Self: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def momentum(self) -> float: ...
    @property
    def optimizer(self) -> NNOptimizer | None: ...

class CNNNormalizationGammaAndBetaState(State):
    def __init__(self, device: Device, gamma: Buffer | npt.ArrayLike, beta: Buffer | npt.ArrayLike) -> None: ...
    @staticmethod
    def temporary_state(
        command_buffer: CommandBuffer, number_of_feature_channels: int
    ) -> CNNNormalizationGammaAndBetaState: ...
    @property
    def gamma(self) -> Buffer: ...
    @property
    def beta(self) -> Buffer: ...

class CNNNormalizationMeanAndVarianceState(State):
    def __init__(self, device: Device, mean: Buffer | npt.ArrayLike, variance: Buffer | npt.ArrayLike) -> None: ...
    @staticmethod
    def temporary_state(
        command_buffer: CommandBuffer, number_of_feature_channels: int
    ) -> CNNNormalizationMeanAndVarianceState: ...
    @property
    def mean(self) -> Buffer: ...
    @property
    def variance(self) -> Buffer: ...

class CNNBatchNormalizationState(NNGradientState):
    def reset(self) -> None: ...
    @property
    def gamma(self) -> Buffer: ...
    @property
    def beta(self) -> Buffer: ...
    @property
    def mean(self) -> Buffer: ...
    @property
    def variance(self) -> Buffer: ...
    @property
    def gradient_for_gamma(self) -> Buffer: ...
    @property
    def gradient_for_beta(self) -> Buffer: ...
    @property
    def batch_normalization(self) -> CNNBatchNormalization: ...

@disjoint_base
class CNNBatchNormalization(CNNUnaryKernel[CNNBatchNormalizationState]):
    def __init__(
        self, device: Device, data_source: Any, fused_neuron_descriptor: NNNeuronDescriptor | None = None
    ) -> None: ...
    def encode(  # type: ignore[override]
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        batch_normalization_state: CNNBatchNormalizationState | None = None,
        destination_image: Image | None = None,
    ) -> Image: ...
    def encode_batch(  # type: ignore[override]
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        batch_normalization_state: CNNBatchNormalizationState | StateBatch | None = None,
        destination_images: ImageBatch | None = None,
    ) -> ImageBatch: ...
    def reload_gamma_and_beta_from_data_source(self) -> None: ...
    def reload_mean_and_variance_from_data_source(self) -> None: ...
    def reload_data_source(self, data_source: Any) -> None: ...
    def reload_gamma_and_beta(
        self, command_buffer: CommandBuffer, gamma_and_beta_state: CNNNormalizationGammaAndBetaState
    ) -> None: ...
    def reload_mean_and_variance(
        self, command_buffer: CommandBuffer, mean_and_variance_state: CNNNormalizationMeanAndVarianceState
    ) -> None: ...
    def encode_gamma_and_beta_update(
        self, command_buffer: CommandBuffer, batch_normalization_state: CNNBatchNormalizationState | StateBatch
    ) -> None: ...
    def encode_mean_and_variance_update(
        self, command_buffer: CommandBuffer, batch_normalization_state: CNNBatchNormalizationState | StateBatch
    ) -> None: ...
    @property
    def data_source(self) -> Any: ...
    @property
    def number_of_feature_channels(self) -> int: ...
    epsilon: float
    @property
    def fused_neuron_descriptor(self) -> NNNeuronDescriptor | None: ...

class CNNBatchNormalizationStatistics(CNNKernel):
    def __init__(self, device: Device) -> None: ...
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        batch_normalization_state: CNNBatchNormalizationState | StateBatch,
    ) -> None: ...

class CNNBatchNormalizationStatisticsGradient(CNNGradientKernel):
    def __init__(self, device: Device, fused_neuron_descriptor: NNNeuronDescriptor | None = None) -> None: ...
    def encode(self, *args: Any, **kwargs: Any) -> Any: ...  # type: ignore[override]
    def encode_batch(  # type: ignore[override]
        self,
        command_buffer: CommandBuffer,
        source_gradients: _ImageSource,
        source_images: _ImageSource,
        batch_normalization_state: CNNBatchNormalizationState | StateBatch,
    ) -> None: ...
    @property
    def fused_neuron_descriptor(self) -> NNNeuronDescriptor | None: ...

class CNNBatchNormalizationGradient(CNNGradientKernel):
    def __init__(self, device: Device, fused_neuron_descriptor: NNNeuronDescriptor | None = None) -> None: ...
    def encode(  # type: ignore[override]
        self,
        command_buffer: CommandBuffer,
        source_gradient: Image,
        source_image: Image,
        batch_normalization_state: CNNBatchNormalizationState,
        destination_gradient: Image | None = None,
    ) -> Image: ...
    def encode_batch(  # type: ignore[override]
        self,
        command_buffer: CommandBuffer,
        source_gradients: _ImageSource,
        source_images: _ImageSource,
        batch_normalization_state: CNNBatchNormalizationState | StateBatch,
        destination_gradients: ImageBatch | None = None,
    ) -> ImageBatch: ...
    @property
    def fused_neuron_descriptor(self) -> NNNeuronDescriptor | None: ...

class CNNSoftMax(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device) -> None: ...

class CNNLogSoftMax(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device) -> None: ...

class CNNSoftMaxGradient(CNNGradientKernel):
    def __init__(self, device: Device) -> None: ...

class CNNLogSoftMaxGradient(CNNGradientKernel):
    def __init__(self, device: Device) -> None: ...

class CNNDropout(CNNUnaryKernel[CNNDropoutGradientState]):
    def __init__(
        self,
        device: Device,
        keep_probability: float,
        seed: int,
        mask_stride_in_pixels: tuple[int, int, int] = (1, 1, 1),
    ) -> None: ...
    @property
    def keep_probability(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def mask_stride_in_pixels(self) -> tuple[int, int, int]: ...

class CNNDropoutGradient(CNNGradientKernel):
    def __init__(
        self,
        device: Device,
        keep_probability: float,
        seed: int,
        mask_stride_in_pixels: tuple[int, int, int] = (1, 1, 1),
    ) -> None: ...
    @property
    def keep_probability(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def mask_stride_in_pixels(self) -> tuple[int, int, int]: ...

class CNNDropoutGradientState(NNGradientState):
    def mask_data(self) -> npt.NDArray[np.uint8]: ...

class CNNUpsampling(CNNUnaryKernel[NNGradientState]):
    @property
    def scale_factor_x(self) -> float: ...
    @property
    def scale_factor_y(self) -> float: ...
    @property
    def align_corners(self) -> bool: ...

class CNNUpsamplingNearest(CNNUpsampling):
    def __init__(self, device: Device, integer_scale_factor_x: int, integer_scale_factor_y: int) -> None: ...

class CNNUpsamplingBilinear(CNNUpsampling):
    def __init__(
        self, device: Device, integer_scale_factor_x: int, integer_scale_factor_y: int, align_corners: bool = False
    ) -> None: ...

class CNNUpsamplingGradient(CNNGradientKernel):
    @property
    def scale_factor_x(self) -> float: ...
    @property
    def scale_factor_y(self) -> float: ...
    @property
    def align_corners(self) -> bool: ...

class CNNUpsamplingNearestGradient(CNNUpsamplingGradient):
    def __init__(self, device: Device, integer_scale_factor_x: int, integer_scale_factor_y: int) -> None: ...

class CNNUpsamplingBilinearGradient(CNNUpsamplingGradient):
    def __init__(
        self, device: Device, integer_scale_factor_x: int, integer_scale_factor_y: int, align_corners: bool = False
    ) -> None: ...

class NNGramMatrixCalculation(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device, alpha: float = 1.0) -> None: ...
    alpha: float

class NNGramMatrixCalculationGradient(CNNGradientKernel):
    def __init__(self, device: Device, alpha: float = 1.0) -> None: ...
    alpha: float

class ImageCoordinate(NamedTuple):
    x: int = 0
    y: int = 0
    channel: int = 0

class NNPad(CNNUnaryKernel[NNGradientState]):
    def __init__(
        self,
        device: Device,
        padding_size_before: ImageCoordinate | tuple[int, int, int] = (0, 0, 0),
        padding_size_after: ImageCoordinate | tuple[int, int, int] = (0, 0, 0),
        fill_value_array: npt.ArrayLike | None = None,
    ) -> None: ...
    padding_size_before: ImageCoordinate
    padding_size_after: ImageCoordinate
    fill_value: float
    @property
    def fill_value_array(self) -> npt.NDArray[np.float32] | None: ...

class NNPadGradient(CNNGradientKernel):
    def __init__(self, device: Device) -> None: ...

class NNReshape(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device) -> None: ...
    @overload  # type: ignore[override]
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        destination_image: Image | ImageBatch | None = None,
        destination_state: Literal[False] | None = False,
        destination_state_is_temporary: bool = False,
        reshaped_width: int | None = None,
        reshaped_height: int | None = None,
        reshaped_feature_channels: int | None = None,
    ) -> Image: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        destination_image: Image | ImageBatch | None = None,
        *,
        destination_state: Literal[True] | NNGradientState,
        destination_state_is_temporary: bool = False,
        reshaped_width: int | None = None,
        reshaped_height: int | None = None,
        reshaped_feature_channels: int | None = None,
    ) -> tuple[Image, NNGradientState]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_image: Image,
        destination_image: Image | ImageBatch | None,
        destination_state: Literal[True] | NNGradientState,
        destination_state_is_temporary: bool = False,
        reshaped_width: int | None = None,
        reshaped_height: int | None = None,
        reshaped_feature_channels: int | None = None,
    ) -> tuple[Image, NNGradientState]: ...
    @overload  # type: ignore[override]
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        destination_images: ImageBatch | None = None,
        destination_states: Literal[False] | None = False,
        destination_state_is_temporary: bool = False,
        reshaped_width: int | None = None,
        reshaped_height: int | None = None,
        reshaped_feature_channels: int | None = None,
    ) -> ImageBatch: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        destination_images: ImageBatch | None = None,
        *,
        destination_states: Literal[True] | NNGradientState | StateBatch,
        destination_state_is_temporary: bool = False,
        reshaped_width: int | None = None,
        reshaped_height: int | None = None,
        reshaped_feature_channels: int | None = None,
    ) -> tuple[ImageBatch, StateBatch]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: _ImageSource,
        destination_images: ImageBatch | None,
        destination_states: Literal[True] | NNGradientState | StateBatch,
        destination_state_is_temporary: bool = False,
        reshaped_width: int | None = None,
        reshaped_height: int | None = None,
        reshaped_feature_channels: int | None = None,
    ) -> tuple[ImageBatch, StateBatch]: ...
    def destination_image_descriptor(  # type: ignore[override]
        self,
        source_images: _ImageSource,
        source_states: _StateSource | None = None,
        reshaped_width: int | None = None,
        reshaped_height: int | None = None,
        reshaped_feature_channels: int | None = None,
    ) -> ImageDescriptor: ...

class NNReshapeGradient(CNNGradientKernel):
    def __init__(self, device: Device) -> None: ...

class NNComparisonType(enum.IntEnum):
    EQUAL = 0
    NOT_EQUAL = 1
    LESS = 2
    LESS_OR_EQUAL = 3
    GREATER = 4
    GREATER_OR_EQUAL = 5

class CNNArithmetic(CNNBinaryKernel[CNNArithmeticGradientState]):
    primary_scale: float
    secondary_scale: float
    bias: float
    minimum_value: float
    maximum_value: float
    primary_stride_in_feature_channels: int
    secondary_stride_in_feature_channels: int

class CNNAdd(CNNArithmetic):
    def __init__(self, device: Device) -> None: ...

class CNNSubtract(CNNArithmetic):
    def __init__(self, device: Device) -> None: ...

class CNNMultiply(CNNArithmetic):
    def __init__(self, device: Device) -> None: ...

class CNNDivide(CNNArithmetic):
    def __init__(self, device: Device) -> None: ...

class NNCompare(CNNArithmetic):
    def __init__(self, device: Device) -> None: ...
    @property
    def comparison_type(self) -> NNComparisonType: ...
    @comparison_type.setter
    def comparison_type(self, value: NNComparisonType | int) -> None: ...
    threshold: float

class CNNArithmeticGradientState(NNBinaryGradientState): ...

class CNNArithmeticGradient(CNNGradientKernel):
    @property
    def is_secondary_source_filter(self) -> bool: ...
    primary_scale: float
    secondary_scale: float
    bias: float
    minimum_value: float
    maximum_value: float
    secondary_stride_in_feature_channels: int

class CNNAddGradient(CNNArithmeticGradient):
    def __init__(self, device: Device, is_secondary_source_filter: bool) -> None: ...

class CNNSubtractGradient(CNNArithmeticGradient):
    def __init__(self, device: Device, is_secondary_source_filter: bool) -> None: ...

class CNNMultiplyGradient(CNNArithmeticGradient):
    def __init__(self, device: Device, is_secondary_source_filter: bool) -> None: ...

class CNNLocalContrastNormalization(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device, kernel_width: int, kernel_height: int) -> None: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    alpha: float
    beta: Buffer
    delta: float
    p0: float
    pm: float
    ps: float

class CNNLocalContrastNormalizationGradient(CNNGradientKernel):
    def __init__(self, device: Device, kernel_width: int, kernel_height: int) -> None: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    alpha: float
    beta: Buffer
    delta: float
    p0: float
    pm: float
    ps: float

class CNNCrossChannelNormalization(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device, kernel_size: int) -> None: ...
    @property
    def kernel_size(self) -> int: ...
    alpha: float
    beta: Buffer
    delta: float

class CNNCrossChannelNormalizationGradient(CNNGradientKernel):
    def __init__(self, device: Device, kernel_size: int) -> None: ...
    @property
    def kernel_size(self) -> int: ...
    alpha: float
    beta: Buffer
    delta: float

class CNNSpatialNormalization(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device, kernel_width: int, kernel_height: int) -> None: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    alpha: float
    beta: Buffer
    delta: float

class CNNSpatialNormalizationGradient(CNNGradientKernel):
    def __init__(self, device: Device, kernel_width: int, kernel_height: int) -> None: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    alpha: float
    beta: Buffer
    delta: float

class CNNGroupNormalizationDataSource:
    epsilon: float
    number_of_groups: int
    def number_of_feature_channels(self) -> int: ...
    def gamma(self) -> npt.NDArray[np.float32] | None: ...
    def beta(self) -> npt.NDArray[np.float32] | None: ...
    def load(self) -> bool: ...
    def purge(self) -> None: ...
    def label(self) -> str | None: ...
    def update_gamma_and_beta_with_group_normalization_state_batch(
        self, group_normalization_state_batch: list[CNNGroupNormalizationGradientState]
    ) -> bool: ...
    def copy(self, device: Device) -> Self: ...

@disjoint_base
class _NormalizationWeights:
    def gamma(self) -> npt.NDArray[np.float32] | None: ...
    def beta(self) -> npt.NDArray[np.float32] | None: ...
    def load(self) -> bool: ...
    def purge(self) -> None: ...
    def label(self) -> str | None: ...
    def optimizer_state(self) -> dict[str, list[npt.NDArray[np.float32]]]: ...
    def set_optimizer_state(self, state: dict[str, Sequence[npt.ArrayLike]]) -> None: ...
    def set_gamma_and_beta(self, gamma: npt.ArrayLike, beta: npt.ArrayLike) -> None: ...
    @property
    def number_of_feature_channels(self) -> int: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def optimizer(self) -> NNOptimizer | None: ...

class GroupNormalizationWeights(_NormalizationWeights):
    def __init__(
        self,
        gamma: npt.ArrayLike,
        beta: npt.ArrayLike,
        number_of_groups: int,
        epsilon: float = 1e-05,
        optimizer: NNOptimizer | None = None,
        label: str | None = None,
    ) -> None: ...
    def update_gamma_and_beta_with_command_buffer(
        self, command_buffer: CommandBuffer, group_normalization_state_batch: _StateSource
    ) -> CNNNormalizationGammaAndBetaState: ...
    def copy(self, device: Device | None = None) -> Self: ...
    number_of_groups: int

class _NormalizationGradientState(NNGradientState):
    @property
    def gamma(self) -> Buffer: ...
    @property
    def beta(self) -> Buffer: ...
    @property
    def gradient_for_gamma(self) -> Buffer: ...
    @property
    def gradient_for_beta(self) -> Buffer: ...

class CNNGroupNormalizationGradientState(_NormalizationGradientState):
    @property
    def group_normalization(self) -> CNNGroupNormalization | None: ...

@disjoint_base
class _NormalizationKernel(CNNUnaryKernel[_S]):
    def reload_gamma_and_beta_from_data_source(self) -> None: ...
    def reload_data_source(self, data_source: Any) -> None: ...
    def reload_gamma_and_beta(
        self, command_buffer: CommandBuffer, gamma_and_beta_state: CNNNormalizationGammaAndBetaState
    ) -> None: ...
    def encode_gamma_and_beta_update(self, command_buffer: CommandBuffer, state: _StateSource) -> None: ...
    @property
    def data_source(self) -> Any: ...
    @property
    def number_of_feature_channels(self) -> int: ...
    epsilon: float

class CNNGroupNormalization(_NormalizationKernel[CNNGroupNormalizationGradientState]):
    def __init__(self, device: Device, data_source: Any) -> None: ...
    @property
    def number_of_groups(self) -> int: ...

class CNNGroupNormalizationGradient(CNNGradientKernel):
    def __init__(self, device: Device) -> None: ...

class CNNInstanceNormalizationDataSource:
    epsilon: float
    def number_of_feature_channels(self) -> int: ...
    def gamma(self) -> npt.NDArray[np.float32] | None: ...
    def beta(self) -> npt.NDArray[np.float32] | None: ...
    def load(self) -> bool: ...
    def purge(self) -> None: ...
    def label(self) -> str | None: ...
    def update_gamma_and_beta_with_instance_normalization_state_batch(
        self, instance_normalization_state_batch: list[CNNInstanceNormalizationGradientState]
    ) -> bool: ...
    def copy(self, device: Device) -> Self: ...

class InstanceNormalizationWeights(_NormalizationWeights):
    def __init__(
        self,
        gamma: npt.ArrayLike,
        beta: npt.ArrayLike,
        epsilon: float = 1e-05,
        optimizer: NNOptimizer | None = None,
        label: str | None = None,
    ) -> None: ...
    def update_gamma_and_beta_with_command_buffer(
        self, command_buffer: CommandBuffer, instance_normalization_state_batch: _StateSource
    ) -> CNNNormalizationGammaAndBetaState: ...
    def copy(self, device: Device | None = None) -> Self: ...

class CNNInstanceNormalizationGradientState(_NormalizationGradientState):
    @property
    def instance_normalization(self) -> CNNInstanceNormalization | None: ...

class CNNInstanceNormalization(_NormalizationKernel[CNNInstanceNormalizationGradientState]):
    def __init__(self, device: Device, data_source: Any) -> None: ...

class CNNInstanceNormalizationGradient(CNNGradientKernel):
    def __init__(self, device: Device) -> None: ...

class NNInitialGradient(CNNUnaryKernel[NNGradientState]):
    def __init__(self, device: Device) -> None: ...

class NNHandle:
    def __init__(self, label: str | None) -> None: ...
    @property
    def label(self) -> str: ...

@disjoint_base
class NNImageNode:
    def __init__(self, handle: _Handle | None = None) -> None: ...
    @classmethod
    def node_with_handle(cls, handle: _Handle | None) -> Self: ...
    @classmethod
    def exported_node_with_handle(cls, handle: _Handle | None) -> Self: ...
    handle: _Handle | None
    export_from_graph: bool
    synchronize_resource: bool
    stop_gradient: bool
    format: DataType | None
    @property
    def image_allocator(self) -> ImageAllocator: ...
    @image_allocator.setter
    def image_allocator(self, value: ImageAllocator | None) -> None: ...
    @property
    def producer(self) -> NNFilterNode | None: ...

@disjoint_base
class NNStateNode:
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    handle: _Handle | None
    export_from_graph: bool
    synchronize_resource: bool
    @property
    def producer(self) -> NNFilterNode | None: ...

class NNGradientStateNode(NNStateNode): ...

class CNNConvolutionGradientStateNode(NNGradientStateNode): ...

class NNLabelsNode(NNStateNode): ...

@disjoint_base
class NNFilterNode:
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def gradient_filters_with_sources(self, gradient_images: Sequence[NNImageNode]) -> list[NNGradientFilterNode]: ...
    def gradient_filters_with_source(self, gradient_image: NNImageNode) -> list[NNGradientFilterNode]: ...
    def gradient_filter_with_sources(self, gradient_images: Sequence[NNImageNode]) -> NNGradientFilterNode: ...
    def gradient_filter_with_source(self, gradient_image: NNImageNode) -> NNGradientFilterNode: ...
    def training_graph(
        self, source_gradient: NNImageNode | None = None, node_handler: _NodeHandler | None = None
    ) -> list[NNFilterNode]: ...
    @property
    def result_image(self) -> NNImageNode: ...
    @property
    def result_states(self) -> list[NNStateNode]: ...
    @property
    def result_state(self) -> NNStateNode | None: ...
    @property
    def source_images(self) -> list[NNImageNode]: ...
    @property
    def source_states(self) -> list[NNStateNode]: ...
    label: str
    @property
    def padding_policy(self) -> NNPaddingMethod | NNPadding: ...
    @padding_policy.setter
    def padding_policy(self, value: NNPaddingMethod | int | NNPadding) -> None: ...

class NNGradientFilterNode(NNFilterNode): ...

@disjoint_base
class NNGraph:
    def __init__(
        self,
        device: Device,
        result_image: NNImageNode | None = None,
        result_image_is_needed: bool = True,
        *,
        result_images: Sequence[NNImageNode] | None = None,
        results_are_needed: Sequence[bool] | None = None,
        format: DataType | None = None,
        data_parallel: Communicator | _ProcessGroup | None = None,
    ) -> None: ...
    @classmethod
    def graph_with_device(
        cls,
        device: Device,
        result_image: NNImageNode | None = None,
        result_image_is_needed: bool = True,
        *,
        result_images: Sequence[NNImageNode] | None = None,
        results_are_needed: Sequence[bool] | None = None,
    ) -> Self: ...
    def read_count_for_source_image_at_index(self, index: int) -> int: ...
    def read_count_for_source_state_at_index(self, index: int) -> int: ...
    def copy(self, device: Device | None = None) -> Self: ...
    def reload_from_data_sources(self) -> None: ...
    def execute_async(
        self, source_images: Sequence[Image], completion_handler: Callable[[Image | None, BaseException | None], object]
    ) -> Image | None: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[_ImageSource],
        source_states: Sequence[State | Sequence[CNNLossLabels]] | None = None,
        intermediate_images: Literal[False] = False,
        destination_states: Literal[False] = False,
    ) -> ImageBatch | None: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[_ImageSource],
        source_states: Sequence[State | Sequence[CNNLossLabels]] | None = None,
        *,
        intermediate_images: Literal[True],
        destination_states: Literal[False] = False,
    ) -> tuple[ImageBatch | None, list[ImageBatch]]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[_ImageSource],
        source_states: Sequence[State | Sequence[CNNLossLabels]] | None = None,
        intermediate_images: Literal[False] = False,
        *,
        destination_states: Literal[True],
    ) -> tuple[ImageBatch | None, list[State]]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[_ImageSource],
        source_states: Sequence[State | Sequence[CNNLossLabels]] | None = None,
        *,
        intermediate_images: Literal[True],
        destination_states: Literal[True],
    ) -> tuple[ImageBatch | None, list[ImageBatch], list[State]]: ...
    @overload
    def encode_batch(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[_ImageSource],
        source_states: Sequence[State | Sequence[CNNLossLabels]] | None = None,
        intermediate_images: bool = False,
        destination_states: bool = False,
    ) -> ImageBatch | None | tuple[Any, ...]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[Image],
        source_states: Sequence[State] | None = None,
        intermediate_images: Literal[False] = False,
        destination_states: Literal[False] = False,
    ) -> Image | None: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[Image],
        source_states: Sequence[State] | None = None,
        *,
        intermediate_images: Literal[True],
        destination_states: Literal[False] = False,
    ) -> tuple[Image | None, list[Image]]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[Image],
        source_states: Sequence[State] | None = None,
        intermediate_images: Literal[False] = False,
        *,
        destination_states: Literal[True],
    ) -> tuple[Image | None, list[State]]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[Image],
        source_states: Sequence[State] | None = None,
        *,
        intermediate_images: Literal[True],
        destination_states: Literal[True],
    ) -> tuple[Image | None, list[Image], list[State]]: ...
    @overload
    def encode(
        self,
        command_buffer: CommandBuffer,
        source_images: Sequence[Image],
        source_states: Sequence[State] | None = None,
        intermediate_images: bool = False,
        destination_states: bool = False,
    ) -> Image | None | tuple[Any, ...]: ...
    @property
    def device(self) -> Device: ...
    @property
    def source_image_handles(self) -> list[Any]: ...
    @property
    def source_state_handles(self) -> list[Any]: ...
    @property
    def intermediate_image_handles(self) -> list[Any]: ...
    @property
    def result_state_handles(self) -> list[Any]: ...
    @property
    def result_handle(self) -> Any: ...
    @property
    def result_image_is_needed(self) -> bool: ...
    @property
    def number_of_filters(self) -> int: ...
    @property
    def number_of_fused_filters(self) -> int: ...
    output_state_is_temporary: bool
    capture_encodes: bool
    @property
    def captured_encode_count(self) -> int: ...
    @property
    def destination_image_allocator(self) -> ImageAllocator: ...
    @destination_image_allocator.setter
    def destination_image_allocator(self, value: ImageAllocator | None) -> None: ...
    format: DataType
    data_parallel: Communicator | None

class NNTrainingStyle(enum.IntEnum):
    NONE = 0
    CPU = 1
    GPU = 2

class NNTrainableNode:
    @property
    def training_style(self) -> NNTrainingStyle: ...
    @training_style.setter
    def training_style(self, value: NNTrainingStyle | int | Literal["none", "cpu", "gpu"]) -> None: ...

class CNNNormalizationNode(NNFilterNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...
    alpha: float
    beta: Buffer
    delta: float

class CNNNeuronNode(NNFilterNode):
    def __init__(self, source: NNImageNode, descriptor: NNNeuronDescriptor) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, descriptor: NNNeuronDescriptor) -> Self: ...
    @property
    def descriptor(self) -> NNNeuronDescriptor: ...
    @property
    def a(self) -> float: ...
    @property
    def b(self) -> float: ...
    @property
    def c(self) -> float: ...

class CNNNeuronGradientNode(NNGradientFilterNode):
    def __init__(
        self,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        descriptor: NNNeuronDescriptor,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        descriptor: NNNeuronDescriptor,
    ) -> Self: ...
    @property
    def descriptor(self) -> NNNeuronDescriptor: ...

class CNNNeuronAbsoluteNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...  # type: ignore[override]

class CNNNeuronELUNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 1.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 1.0) -> Self: ...  # type: ignore[override]

class CNNNeuronExponentialNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 1.0, b: float = 0.0, c: float = -1.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 1.0, b: float = 0.0, c: float = -1.0) -> Self: ...  # type: ignore[override]

class CNNNeuronGeLUNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...  # type: ignore[override]

class CNNNeuronHardSigmoidNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 0.2, b: float = 0.5) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 0.2, b: float = 0.5) -> Self: ...  # type: ignore[override]

class CNNNeuronLinearNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 1.0, b: float = 0.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 1.0, b: float = 0.0) -> Self: ...  # type: ignore[override]

class CNNNeuronLogarithmNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 1.0, b: float = 0.0, c: float = -1.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 1.0, b: float = 0.0, c: float = -1.0) -> Self: ...  # type: ignore[override]

class CNNNeuronPReLUNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a_data: npt.ArrayLike) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a_data: npt.ArrayLike) -> Self: ...  # type: ignore[override]

class CNNNeuronPowerNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 1.0, b: float = 0.0, c: float = 1.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 1.0, b: float = 0.0, c: float = 1.0) -> Self: ...  # type: ignore[override]

class CNNNeuronReLUNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 0.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 0.0) -> Self: ...  # type: ignore[override]

class CNNNeuronReLUNNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 1.0, b: float = 6.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 1.0, b: float = 6.0) -> Self: ...  # type: ignore[override]

class CNNNeuronSigmoidNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...  # type: ignore[override]

class CNNNeuronSoftPlusNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 1.0, b: float = 1.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 1.0, b: float = 1.0) -> Self: ...  # type: ignore[override]

class CNNNeuronSoftSignNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...  # type: ignore[override]

class CNNNeuronTanHNode(CNNNeuronNode):
    def __init__(self, source: NNImageNode, a: float = 1.0, b: float = 1.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, a: float = 1.0, b: float = 1.0) -> Self: ...  # type: ignore[override]

class CNNPoolingNode(NNFilterNode):
    def __init__(
        self,
        source: NNImageNode,
        filter_size: int | None = None,
        stride: int | None = None,
        *,
        kernel_width: int | None = None,
        kernel_height: int | None = None,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
    ) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, filter_size: int, stride: int | None = None) -> Self: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    @property
    def stride_in_pixels_x(self) -> int: ...
    @property
    def stride_in_pixels_y(self) -> int: ...

class CNNPoolingMaxNode(CNNPoolingNode): ...

class CNNPoolingAverageNode(CNNPoolingNode): ...

class CNNPoolingL2NormNode(CNNPoolingNode): ...

class CNNDilatedPoolingMaxNode(CNNPoolingNode):
    def __init__(
        self,
        source: NNImageNode,
        filter_size: int | None = None,
        stride: int | None = None,
        dilation_rate: int | None = None,
        *,
        kernel_width: int | None = None,
        kernel_height: int | None = None,
        stride_in_pixels_x: int | None = None,
        stride_in_pixels_y: int | None = None,
        dilation_rate_x: int | None = None,
        dilation_rate_y: int | None = None,
    ) -> None: ...
    @classmethod
    def node_with_source(  # type: ignore[override]
        cls, source: NNImageNode, filter_size: int, stride: int | None = None, dilation_rate: int | None = None
    ) -> Self: ...
    @property
    def dilation_rate_x(self) -> int: ...
    @property
    def dilation_rate_y(self) -> int: ...

class CNNPoolingGradientNode(NNGradientFilterNode):
    def __init__(
        self,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int,
        stride_in_pixels_y: int,
        padding_policy: NNPaddingMethod | int | NNPadding | None = None,
        *,
        dilation_rate_x: int = 1,
        dilation_rate_y: int = 1,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int,
        stride_in_pixels_y: int,
        padding_policy: NNPaddingMethod | int | NNPadding,
    ) -> Self: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    @property
    def stride_in_pixels_x(self) -> int: ...
    @property
    def stride_in_pixels_y(self) -> int: ...

class CNNPoolingMaxGradientNode(CNNPoolingGradientNode): ...

class CNNPoolingAverageGradientNode(CNNPoolingGradientNode): ...

class CNNPoolingL2NormGradientNode(CNNPoolingGradientNode): ...

class CNNDilatedPoolingMaxGradientNode(CNNPoolingGradientNode):
    @classmethod
    def node_with_source_gradient(  # type: ignore[override]
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        kernel_width: int,
        kernel_height: int,
        stride_in_pixels_x: int,
        stride_in_pixels_y: int,
        dilation_rate_x: int,
        dilation_rate_y: int,
    ) -> Self: ...
    @property
    def dilation_rate_x(self) -> int: ...
    @property
    def dilation_rate_y(self) -> int: ...

class CNNConvolutionNode(NNFilterNode, NNTrainableNode):
    def __init__(self, source: NNImageNode, weights: _ConvolutionDataSource) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, weights: _ConvolutionDataSource) -> Self: ...
    @property
    def weights(self) -> _ConvolutionDataSource: ...
    @property
    def convolution_gradient_state(self) -> CNNConvolutionGradientStateNode: ...
    @property
    def accumulator_precision(self) -> NNConvolutionAccumulatorPrecisionOption: ...
    @accumulator_precision.setter
    def accumulator_precision(
        self, value: NNConvolutionAccumulatorPrecisionOption | int | Literal["float", "half"]
    ) -> None: ...

class CNNFullyConnectedNode(CNNConvolutionNode): ...

class CNNConvolutionGradientNode(NNGradientFilterNode, NNTrainableNode):
    def __init__(
        self,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        convolution_gradient_state: NNStateNode | None,
        weights: _ConvolutionDataSource | None = None,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        convolution_gradient_state: NNStateNode | None,
        weights: _ConvolutionDataSource,
    ) -> Self: ...

class CNNFullyConnectedGradientNode(CNNConvolutionGradientNode): ...

class CNNLossNode(NNFilterNode):
    def __init__(self, source: NNImageNode, loss_descriptor: CNNLossDescriptor) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, loss_descriptor: CNNLossDescriptor) -> Self: ...
    @property
    def input_labels(self) -> NNLabelsNode: ...

class NNForwardLossNode(NNFilterNode):
    def __init__(
        self,
        source: NNImageNode | None = None,
        labels: NNImageNode | None = None,
        weights: NNImageNode | None = None,
        loss_descriptor: CNNLossDescriptor | None = None,
        *,
        sources: Sequence[NNImageNode] | None = None,
    ) -> None: ...
    @classmethod
    def node_with_source(
        cls,
        source: NNImageNode,
        labels: NNImageNode,
        weights: _ConvolutionDataSource | None = None,
        loss_descriptor: CNNLossDescriptor | None = None,
    ) -> Self: ...
    @classmethod
    def node_with_sources(cls, sources: Sequence[NNImageNode], loss_descriptor: CNNLossDescriptor) -> Self: ...
    @property
    def loss_descriptor(self) -> CNNLossDescriptor: ...
    @property
    def loss_type(self) -> CNNLossType: ...
    @property
    def reduction_type(self) -> CNNReductionType: ...
    @property
    def number_of_classes(self) -> int: ...
    @property
    def reduce_across_batch(self) -> bool: ...
    @property
    def weight(self) -> float: ...
    @property
    def label_smoothing(self) -> float: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def delta(self) -> float: ...
    property_call_back: _LossCallback | None

class NNLossGradientNode(NNGradientFilterNode):
    def __init__(
        self,
        source_gradient: NNImageNode | None = None,
        source_image: NNImageNode | None = None,
        labels: NNImageNode | None = None,
        weights: NNImageNode | None = None,
        gradient_state: NNStateNode | None = None,
        loss_descriptor: CNNLossDescriptor | None = None,
        is_labels_gradient_filter: bool = False,
        *,
        sources: Sequence[NNImageNode] | None = None,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        labels: NNImageNode,
        weights: _ConvolutionDataSource | None = None,
        gradient_state: NNStateNode | None = None,
        loss_descriptor: CNNLossDescriptor | None = None,
        is_labels_gradient_filter: bool = False,
    ) -> Self: ...
    @classmethod
    def node_with_sources(
        cls,
        sources: Sequence[NNImageNode],
        gradient_state: NNStateNode,
        loss_descriptor: CNNLossDescriptor,
        is_labels_gradient_filter: bool = False,
    ) -> Self: ...
    @property
    def is_labels_gradient_filter(self) -> bool: ...
    @property
    def loss_descriptor(self) -> CNNLossDescriptor: ...
    @property
    def loss_type(self) -> CNNLossType: ...
    @property
    def reduction_type(self) -> CNNReductionType: ...
    @property
    def number_of_classes(self) -> int: ...
    @property
    def reduce_across_batch(self) -> bool: ...
    @property
    def weight(self) -> float: ...
    @property
    def label_smoothing(self) -> float: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def delta(self) -> float: ...
    property_call_back: _LossCallback | None

class NNLossCallback:
    def scalar_weight_for_source_image(self, source_image: Image, destination_image: Image | None) -> float: ...

class NNBinaryGradientStateNode(NNStateNode): ...

class NNArithmeticGradientStateNode(NNBinaryGradientStateNode): ...

class NNMultiaryGradientStateNode(NNStateNode): ...

class NNBinaryArithmeticNode(NNFilterNode):
    def __init__(
        self,
        left_source: NNImageNode | None = None,
        right_source: NNImageNode | None = None,
        *,
        sources: Sequence[NNImageNode] | None = None,
    ) -> None: ...
    @classmethod
    def node_with_left_source(cls, left_source: NNImageNode, right_source: NNImageNode) -> Self: ...
    @classmethod
    def node_with_sources(cls, sources: Sequence[NNImageNode]) -> Self: ...
    def gradient_class(self) -> type[NNArithmeticGradientNode] | None: ...
    @property
    def binary_gradient_state(self) -> NNBinaryGradientStateNode | None: ...
    primary_scale: float
    secondary_scale: float
    bias: float
    minimum_value: float
    maximum_value: float
    primary_stride_in_pixels_x: int
    primary_stride_in_pixels_y: int
    primary_stride_in_feature_channels: int
    secondary_stride_in_pixels_x: int
    secondary_stride_in_pixels_y: int
    secondary_stride_in_feature_channels: int

class NNAdditionNode(NNBinaryArithmeticNode): ...

class NNSubtractionNode(NNBinaryArithmeticNode): ...

class NNMultiplicationNode(NNBinaryArithmeticNode): ...

class NNDivisionNode(NNBinaryArithmeticNode): ...

class NNComparisonNode(NNBinaryArithmeticNode):
    @property
    def comparison_type(self) -> NNComparisonType: ...
    @comparison_type.setter
    def comparison_type(self, value: NNComparisonType | int) -> None: ...

class NNArithmeticGradientNode(NNGradientFilterNode):
    def __init__(
        self,
        source_gradient: NNImageNode | None = None,
        source_image: NNImageNode | None = None,
        gradient_state: NNStateNode | None = None,
        is_secondary_source_filter: bool = False,
        *,
        gradient_images: Sequence[NNImageNode] | None = None,
        forward_filter: NNBinaryArithmeticNode | None = None,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        is_secondary_source_filter: bool,
    ) -> Self: ...
    @classmethod
    def with_gradient_images(
        cls,
        gradient_images: Sequence[NNImageNode],
        forward_filter: NNBinaryArithmeticNode,
        is_secondary_source_filter: bool,
    ) -> Self: ...
    @property
    def is_secondary_source_filter(self) -> bool: ...
    primary_scale: float
    secondary_scale: float
    bias: float
    minimum_value: float
    maximum_value: float
    secondary_stride_in_pixels_x: int
    secondary_stride_in_pixels_y: int
    secondary_stride_in_feature_channels: int

class NNAdditionGradientNode(NNArithmeticGradientNode): ...

class NNSubtractionGradientNode(NNArithmeticGradientNode): ...

class NNMultiplicationGradientNode(NNArithmeticGradientNode): ...

class CNNSoftMaxNode(NNFilterNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...

class CNNLogSoftMaxNode(NNFilterNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...

class CNNSoftMaxGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...

class CNNLogSoftMaxGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...

class CNNDropoutNode(NNFilterNode):
    def __init__(
        self,
        source: NNImageNode,
        keep_probability: float = 0.5,
        seed: int = 0,
        mask_stride_in_pixels: tuple[int, int, int] = (1, 1, 1),
    ) -> None: ...
    @classmethod
    def node_with_source(
        cls,
        source: NNImageNode,
        keep_probability: float = 0.5,
        seed: int = 0,
        mask_stride_in_pixels: tuple[int, int, int] = (1, 1, 1),
    ) -> Self: ...
    @property
    def keep_probability(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def mask_stride_in_pixels(self) -> tuple[int, int, int]: ...

class CNNDropoutGradientNode(NNGradientFilterNode):
    def __init__(
        self,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        keep_probability: float,
        seed: int,
        mask_stride_in_pixels: tuple[int, int, int],
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        keep_probability: float,
        seed: int,
        mask_stride_in_pixels: tuple[int, int, int],
    ) -> Self: ...
    @property
    def keep_probability(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def mask_stride_in_pixels(self) -> tuple[int, int, int]: ...

class CNNUpsamplingNearestNode(NNFilterNode):
    def __init__(self, source: NNImageNode, integer_scale_factor_x: int, integer_scale_factor_y: int) -> None: ...
    @classmethod
    def node_with_source(
        cls, source: NNImageNode, integer_scale_factor_x: int, integer_scale_factor_y: int
    ) -> Self: ...
    @property
    def scale_factor_x(self) -> float: ...
    @property
    def scale_factor_y(self) -> float: ...

class CNNUpsamplingBilinearNode(NNFilterNode):
    def __init__(
        self, source: NNImageNode, integer_scale_factor_x: int, integer_scale_factor_y: int, align_corners: bool = False
    ) -> None: ...
    @classmethod
    def node_with_source(
        cls, source: NNImageNode, integer_scale_factor_x: int, integer_scale_factor_y: int, align_corners: bool = False
    ) -> Self: ...
    @property
    def scale_factor_x(self) -> float: ...
    @property
    def scale_factor_y(self) -> float: ...
    @property
    def align_corners(self) -> bool: ...

class CNNUpsamplingNearestGradientNode(NNGradientFilterNode):
    def __init__(
        self,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        scale_factor_x: float,
        scale_factor_y: float,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        scale_factor_x: float,
        scale_factor_y: float,
    ) -> Self: ...
    @property
    def scale_factor_x(self) -> float: ...
    @property
    def scale_factor_y(self) -> float: ...

class CNNUpsamplingBilinearGradientNode(NNGradientFilterNode):
    def __init__(
        self,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        scale_factor_x: float,
        scale_factor_y: float,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        scale_factor_x: float,
        scale_factor_y: float,
    ) -> Self: ...
    @property
    def scale_factor_x(self) -> float: ...
    @property
    def scale_factor_y(self) -> float: ...
    @property
    def align_corners(self) -> bool: ...

class NNGramMatrixCalculationNode(NNFilterNode):
    def __init__(self, source: NNImageNode, alpha: float = 1.0) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, alpha: float = 1.0) -> Self: ...
    @property
    def alpha(self) -> float: ...
    property_call_back: _GramMatrixCallback | None

class NNGramMatrixCalculationGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, alpha: float = 1.0
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, alpha: float = 1.0
    ) -> Self: ...
    @property
    def alpha(self) -> float: ...

class NNGramMatrixCallback:
    def alpha_for_source_image(self, source_image: Image, destination_image: Image) -> float: ...

class NNPadNode(NNFilterNode):
    def __init__(
        self,
        source: NNImageNode,
        padding_size_before: ImageCoordinate | tuple[int, int, int],
        padding_size_after: ImageCoordinate | tuple[int, int, int],
        edge_mode: ImageEdgeMode | int,
    ) -> None: ...
    @classmethod
    def node_with_source(
        cls,
        source: NNImageNode,
        padding_size_before: ImageCoordinate,
        padding_size_after: ImageCoordinate,
        edge_mode: ImageEdgeMode | int,
    ) -> Self: ...
    @property
    def padding_size_before(self) -> ImageCoordinate: ...
    @property
    def padding_size_after(self) -> ImageCoordinate: ...
    @property
    def edge_mode(self) -> ImageEdgeMode: ...
    fill_value: float

class NNPadGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...

class NNReshapeNode(NNFilterNode):
    def __init__(
        self, source: NNImageNode, result_width: int, result_height: int, result_feature_channels: int
    ) -> None: ...
    @classmethod
    def node_with_source(
        cls, source: NNImageNode, result_width: int, result_height: int, result_feature_channels: int
    ) -> Self: ...
    @property
    def result_width(self) -> int: ...
    @property
    def result_height(self) -> int: ...
    @property
    def result_feature_channels(self) -> int: ...

class NNReshapeGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...

class CNNCrossChannelNormalizationNode(CNNNormalizationNode):
    def __init__(self, source: NNImageNode, kernel_size: int) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, kernel_size: int) -> Self: ...  # type: ignore[override]
    kernel_size_in_feature_channels: int

class CNNCrossChannelNormalizationGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_size: int
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_size: int
    ) -> Self: ...
    @property
    def kernel_size(self) -> int: ...
    @property
    def alpha(self) -> float: ...
    @property
    def beta(self) -> Buffer: ...
    @property
    def delta(self) -> float: ...

class CNNSpatialNormalizationNode(CNNNormalizationNode):
    def __init__(self, source: NNImageNode, kernel_size: int) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, kernel_size: int) -> Self: ...  # type: ignore[override]
    kernel_width: int
    kernel_height: int

class CNNSpatialNormalizationGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_size: int
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode, kernel_size: int
    ) -> Self: ...
    kernel_width: int
    kernel_height: int
    alpha: float
    beta: Buffer
    delta: float

class CNNLocalContrastNormalizationNode(CNNNormalizationNode):
    def __init__(self, source: NNImageNode, kernel_size: int) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, kernel_size: int) -> Self: ...  # type: ignore[override]
    kernel_width: int
    kernel_height: int
    p0: float
    pm: float
    ps: float

class CNNLocalContrastNormalizationGradientNode(NNGradientFilterNode):
    def __init__(
        self,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        kernel_width: int,
        kernel_height: int,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        gradient_state: NNStateNode,
        kernel_width: int,
        kernel_height: int,
    ) -> Self: ...
    @property
    def kernel_width(self) -> int: ...
    @property
    def kernel_height(self) -> int: ...
    alpha: float
    beta: Buffer
    delta: float
    p0: float
    pm: float
    ps: float

class CNNBatchNormalizationFlags(enum.IntEnum):
    CALCULATE_STATISTICS_AUTOMATIC = 0
    DEFAULT = 0
    CALCULATE_STATISTICS_ALWAYS = 1
    CALCULATE_STATISTICS_NEVER = 2

class CNNBatchNormalizationNode(NNFilterNode, NNTrainableNode):
    def __init__(self, source: NNImageNode, data_source: Any) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, data_source: Any) -> Self: ...
    @property
    def data_source(self) -> Any: ...
    @property
    def flags(self) -> CNNBatchNormalizationFlags: ...
    @flags.setter
    def flags(self, value: CNNBatchNormalizationFlags | int) -> None: ...

class CNNBatchNormalizationGradientNode(NNGradientFilterNode, NNTrainableNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...

class _NormalizationNode(NNFilterNode, NNTrainableNode):
    @property
    def data_source(self) -> Any: ...

class CNNGroupNormalizationNode(_NormalizationNode):
    def __init__(self, source: NNImageNode, data_source: Any) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, data_source: Any) -> Self: ...

class _NormalizationGradientNode(NNGradientFilterNode, NNTrainableNode): ...

class CNNGroupNormalizationGradientNode(_NormalizationGradientNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...

class CNNInstanceNormalizationNode(_NormalizationNode):
    def __init__(self, source: NNImageNode, data_source: Any) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode, data_source: Any) -> Self: ...

class CNNInstanceNormalizationGradientNode(_NormalizationGradientNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...

class NNConcatenationNode(NNFilterNode):
    def __init__(self, sources: Sequence[NNImageNode]) -> None: ...
    @classmethod
    def node_with_sources(cls, sources: Sequence[NNImageNode]) -> Self: ...
    def gradient_filter_with_source(self, gradient_image: NNImageNode) -> NNGradientFilterNode: ...
    def gradient_filter_with_sources(self, gradient_images: Sequence[NNImageNode]) -> NNGradientFilterNode: ...

class NNConcatenationGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...
    @property
    def source_index(self) -> int: ...

class CNNConvolutionTransposeNode(NNFilterNode, NNTrainableNode):
    def __init__(
        self, source: NNImageNode, convolution_gradient_state: NNStateNode | None, weights: _ConvolutionDataSource
    ) -> None: ...
    @classmethod
    def node_with_source(
        cls, source: NNImageNode, convolution_gradient_state: NNStateNode | None, weights: _ConvolutionDataSource
    ) -> Self: ...
    @property
    def weights(self) -> _ConvolutionDataSource: ...
    @property
    def accumulator_precision(self) -> NNConvolutionAccumulatorPrecisionOption: ...
    @accumulator_precision.setter
    def accumulator_precision(
        self, value: NNConvolutionAccumulatorPrecisionOption | int | Literal["float", "half"]
    ) -> None: ...

class CNNConvolutionTransposeGradientNode(NNGradientFilterNode, NNTrainableNode):
    def __init__(
        self,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        convolution_transpose_gradient_state: NNStateNode,
        weights: _ConvolutionDataSource | None = None,
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls,
        source_gradient: NNImageNode,
        source_image: NNImageNode,
        convolution_transpose_gradient_state: NNStateNode,
        weights: _ConvolutionDataSource,
    ) -> Self: ...

class CNNConvolutionTransposeGradientStateNode(CNNConvolutionGradientStateNode): ...

class NNInitialGradientNode(NNFilterNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...

class NNUnaryReductionNode(NNFilterNode):
    def __init__(self, source: NNImageNode) -> None: ...
    @classmethod
    def node_with_source(cls, source: NNImageNode) -> Self: ...
    @property
    def clip_rect_source(self) -> Region | None: ...
    @clip_rect_source.setter
    def clip_rect_source(self, value: tuple[int, int, int, int, int, int] | None) -> None: ...

class NNReductionSpatialMeanNode(NNUnaryReductionNode): ...

class NNReductionFeatureChannelsSumNode(NNUnaryReductionNode):
    weight: float

class NNReductionSpatialMeanGradientNode(NNGradientFilterNode):
    def __init__(
        self, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> None: ...
    @classmethod
    def node_with_source_gradient(
        cls, source_gradient: NNImageNode, source_image: NNImageNode, gradient_state: NNStateNode
    ) -> Self: ...

class ScaleTransform(NamedTuple):
    scale_x: float
    scale_y: float
    translate_x: float = 0.0
    translate_y: float = 0.0

class ImageTransformProvider:
    def transform_for_source_image(
        self, image: Image, handle: _Handle | None
    ) -> ScaleTransform | tuple[float, float, float, float]: ...

class NNScaleNode(NNFilterNode):
    def __init__(
        self,
        source: NNImageNode,
        output_size: tuple[int, int] | tuple[int, int, int],
        transform_provider: _TransformProvider | None = None,
    ) -> None: ...
    @classmethod
    def node_with_source(
        cls,
        source: NNImageNode,
        output_size: tuple[int, int] | tuple[int, int, int],
        transform_provider: _TransformProvider | None = None,
    ) -> Self: ...
    @property
    def output_size(self) -> tuple[int, int, int]: ...
    @property
    def transform_provider(self) -> _TransformProvider | None: ...

class NNBilinearScaleNode(NNScaleNode): ...

class NNLanczosScaleNode(NNScaleNode): ...

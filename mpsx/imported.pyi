"""Type stubs of mpsx.imported: PyTorch modules as NNGraphs (mpsx.from_torch)."""

# Written by tools/generate_stubs.py from the built package: change the tool, not this file.

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from mpsx._errors import MPSXError
from mpsx._kernels import (
    BatchNormalizationWeights,
    CNNLossDescriptor,
    ConvolutionWeights,
    GroupNormalizationWeights,
    InstanceNormalizationWeights,
    NNConvolutionAccumulatorPrecisionOption,
    NNGraph,
    NNHandle,
    NNImageNode,
    NNOptimizer,
)
from mpsx._runtime import DataType, Device


def from_torch(
    module: Any, example_input: Any, device: Device | None = None, optimizer: NNOptimizer | None = None
) -> ImportedModel: ...
def from_onnx(
    model_or_path: Any, device: Device | None = None, optimizer: NNOptimizer | None = None
) -> ImportedModel: ...
def to_onnx(model: ImportedModel, path: str | None = None) -> Any: ...
def loss_from_torch(loss: Any, number_of_classes: int = 1) -> CNNLossDescriptor: ...

class UnsupportedOperationError(MPSXError, ValueError): ...

class ImportedModel:
    def __init__(
        self, description: Any, device: Device | None = None, optimizer: NNOptimizer | None = None
    ) -> None: ...
    @property
    def device(self) -> Device: ...
    @property
    def result_image(self) -> NNImageNode: ...
    @property
    def source_handles(self) -> list[NNHandle]: ...
    @property
    def data_sources(
        self
    ) -> dict[str, ConvolutionWeights | BatchNormalizationWeights | GroupNormalizationWeights | InstanceNormalizationWeights]: ...
    def inference_graph(
        self,
        format: DataType = DataType.FLOAT32,
        accumulator_precision: NNConvolutionAccumulatorPrecisionOption = NNConvolutionAccumulatorPrecisionOption.FLOAT,
    ) -> NNGraph: ...
    def training_graph(
        self,
        loss_descriptor: CNNLossDescriptor | Any,
        optimizer: NNOptimizer | None = None,
        format: DataType = DataType.FLOAT32,
        accumulator_precision: NNConvolutionAccumulatorPrecisionOption = NNConvolutionAccumulatorPrecisionOption.FLOAT,
    ) -> NNGraph: ...
    def state_dict(self) -> dict[str, npt.NDArray[np.float32] | npt.NDArray[np.int64]]: ...
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None: ...

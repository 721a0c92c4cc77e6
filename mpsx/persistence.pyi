"""Type stubs of mpsx.persistence: mpsx.save, mpsx.load and copies, and PyTorch weights."""

# Written by tools/generate_stubs.py from the built package: change the tool, not this file.

from collections.abc import Iterable, Mapping
from os import PathLike
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from mpsx._kernels import BatchNormalizationWeights, CNNConvolutionDescriptor, ConvolutionWeights, NNOptimizer
from mpsx._runtime import Device

_T = TypeVar("_T")

FORMAT_VERSION: int

def save(obj: object, path: str | PathLike[str]) -> None: ...
def load(path: str | PathLike[str], device: Device | None = None) -> Any: ...
def copy(obj: _T, device: Device | None = None) -> _T: ...
def property_names(cls: type) -> list[str]: ...
def restore_properties(obj: object, properties: Mapping[str, object], names: Iterable[str]) -> None: ...
def reduce(obj: object) -> tuple[Any, tuple[Any, ...]]: ...
def device_of(state: Mapping[str, object], device: Device | None) -> Device: ...
def weights_from_torch(descriptor: CNNConvolutionDescriptor, weight: npt.ArrayLike) -> npt.NDArray[np.float32]: ...
def weights_to_torch(weight: npt.ArrayLike, linear: bool = False) -> npt.NDArray[np.float32]: ...
def torch_state_dict(data_sources: Mapping[str, object]) -> dict[str, npt.NDArray[np.float32]]: ...
def convolution_weights_from_torch(
    descriptor: CNNConvolutionDescriptor,
    state_dict: Mapping[str, npt.ArrayLike],
    name: str,
    optimizer: NNOptimizer | None = None,
) -> ConvolutionWeights: ...
def batch_normalization_weights_from_torch(
    state_dict: Mapping[str, npt.ArrayLike],
    name: str,
    epsilon: float = 1e-05,
    momentum: float = 0.1,
    optimizer: NNOptimizer | None = None,
) -> BatchNormalizationWeights: ...

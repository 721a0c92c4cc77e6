"""Type stubs of the mpsx package: the names of mpsx._runtime, mpsx._kernels and mpsx._errors it exports."""

# Written by tools/generate_stubs.py from the built package: change the tool, not this file.

from mpsx import distributed as distributed, imported as imported, persistence as persistence
from mpsx._errors import (
    DeviceMismatchError as DeviceMismatchError,
    DistributedError as DistributedError,
    MPSXError as MPSXError,
    OutOfMemoryError as OutOfMemoryError,
    PersistenceError as PersistenceError,
    ShapeError as ShapeError,
    StateError as StateError,
    SynchronizationError as SynchronizationError,
    UnsavableError as UnsavableError,
)
from mpsx._kernels import *
from mpsx._runtime import (
    Buffer as Buffer,
    CommandBuffer as CommandBuffer,
    CommandQueue as CommandQueue,
    Communicator as Communicator,
    DataType as DataType,
    Device as Device,
    Image as Image,
    ImageAllocator as ImageAllocator,
    ImageBatch as ImageBatch,
    ImageDescriptor as ImageDescriptor,
    Predicate as Predicate,
    PurgeableState as PurgeableState,
    State as State,
    StateBatch as StateBatch,
    StateResourceList as StateResourceList,
    StateResourceType as StateResourceType,
    TemporaryImage as TemporaryImage,
    TemporaryVector as TemporaryVector,
    Vector as Vector,
    VectorDescriptor as VectorDescriptor,
    devices as devices,
    state_batch_increment_read_count as state_batch_increment_read_count,
)
from mpsx.imported import (
    ImportedModel as ImportedModel,
    UnsupportedOperationError as UnsupportedOperationError,
    from_onnx as from_onnx,
    from_torch as from_torch,
    loss_from_torch as loss_from_torch,
    to_onnx as to_onnx,
)
from mpsx.persistence import load as load, save as save

__version__: str

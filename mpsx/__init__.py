"""mpsx: the MetalPerformanceShaders CNN training model for Python.

Runs on Apple GPUs through MPS, on NVIDIA GPUs through cuDNN and on any CPU
through oneDNN. The documentation (docs/ in the source distribution) has a
page per kernel family, the graph, persistence and the backends;
docs/semantics.md says what mpsx decided where MPS leaves a choice.
"""

from mpsx import _libraries

_libraries.load()  # before the extension modules, which need them

from mpsx._version import __version__  # noqa: E402
from mpsx._errors import (  # noqa: E402
    DeviceMismatchError,
    DistributedError,
    MPSXError,
    OutOfMemoryError,
    PersistenceError,
    ShapeError,
    StateError,
    SynchronizationError,
    UnsavableError,
)
from mpsx._runtime import (  # noqa: E402
    Buffer,
    CommandBuffer,
    CommandQueue,
    Communicator,
    DataType,
    Device,
    Image,
    ImageAllocator,
    ImageBatch,
    ImageDescriptor,
    Predicate,
    PurgeableState,
    State,
    StateBatch,
    StateResourceList,
    StateResourceType,
    TemporaryImage,
    TemporaryVector,
    Vector,
    VectorDescriptor,
    devices,
    state_batch_increment_read_count,
)
from mpsx._kernels import *  # noqa: E402,F401,F403 (each kernel family lists its names in __all__)
from mpsx._kernels import __all__ as _kernel_names  # noqa: E402
from mpsx.persistence import load, save  # noqa: E402
from mpsx import distributed  # noqa: E402 (mpsx.distributed.init and all_reduce)

from mpsx.imported import (  # noqa: E402
    ImportedModel, UnsupportedOperationError, from_onnx, from_torch, loss_from_torch, to_onnx)

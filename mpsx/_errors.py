"""The exceptions mpsx raises. Every one derives from MPSXError; ShapeError is also a ValueError."""


class MPSXError(Exception):
    """The base of every mpsx error (MPS reports errors through NSError and ``MTLCommandBuffer.error``).

    MPS: none (mpsx)
    """


class ShapeError(MPSXError, ValueError):
    """An image, weight or buffer whose shape or size does not fit; also a ValueError.

    MPS: none (mpsx)
    """


class SynchronizationError(MPSXError):
    """Host access to memory a command buffer writes, without ``synchronize`` and completion.

    MPS: none (mpsx)
    """


class StateError(MPSXError):
    """A state used with another batch, a command buffer used after commit, and the like.

    MPS: none (mpsx)
    """


class DeviceMismatchError(MPSXError):
    """Objects of different devices mixed in one call.

    MPS: none (mpsx)
    """


class OutOfMemoryError(MPSXError, MemoryError):
    """The device could not provide the memory asked for; also a MemoryError.

    MPS: none (mpsx)
    """


class DistributedError(MPSXError):
    """A data-parallel group that cannot be joined, or a collective that failed or timed out (a peer died).

    MPS: none (mpsx)
    """


class PersistenceError(MPSXError):
    """A file or pickle that ``mpsx.load`` or unpickling cannot read (damaged, foreign, crafted, or of values the
    constructors refuse), or a file ``mpsx.save`` cannot write.

    MPS: none (mpsx)
    """


class UnsavableError(PersistenceError, TypeError):
    """An object ``mpsx.save``, pickle or a copy cannot describe (a function, a kernel made without ``__init__``, the
    state of one encode); also a TypeError.

    MPS: none (mpsx)
    """

"""The exceptions mpsx raises. Every one derives from MPSXError; ShapeError is also a ValueError."""


class MPSXError(Exception):
    """Base of every mpsx error."""


class ShapeError(MPSXError, ValueError):
    """An image, weight or buffer whose shape or size does not fit."""


class SynchronizationError(MPSXError):
    """Host access to memory a command buffer writes, without synchronize and completion."""


class StateError(MPSXError):
    """A state used with another batch, a command buffer used after commit, and the like."""


class DeviceMismatchError(MPSXError):
    """Objects of different devices mixed in one call."""


class OutOfMemoryError(MPSXError, MemoryError):
    """The device could not provide the memory asked for."""


class DistributedError(MPSXError):
    """A data-parallel group that cannot be joined, or a collective that failed or timed out (a peer died)."""

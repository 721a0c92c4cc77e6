"""What a front end of mpsx.imported reads a model into: operations over named values in PyTorch's NCHW
convention, with the parameters in PyTorch's layouts."""

from dataclasses import dataclass, field


@dataclass
class Operation:
    """One operation of an imported model: ``kind`` (below), the model's node ``name`` (for errors), the values it
    reads and the value it makes, and its attributes. Parameters are named in ``attributes`` ("weight", "bias",
    ...) by their names in the model's parameters.

    Kinds: conv, conv_transpose, batch_norm, group_norm (groups None: instance normalization), lrn, neuron, max_pool, avg_pool, global_avg_pool, flatten, linear, add, sub, mul, concat,
    upsample, dropout, softmax, log_softmax.
    """

    kind: str
    name: str
    inputs: list
    output: str
    attributes: dict = field(default_factory=dict)


@dataclass
class ModelDescription:
    """What a front end reads: the model's inputs (value, the model's name for it, NCHW shape), operations in
    order, its output value, each value's shape (NCHW, or (N, F) once flattened), and its parameters and buffers
    as float32 arrays in PyTorch's layouts."""

    inputs: list
    operations: list
    output: str
    shapes: dict
    parameters: dict

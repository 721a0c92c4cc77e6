"""mpsx.from_onnx's front end: an ONNX model (the onnx package, the ``[onnx]`` extra), its shapes inferred by
onnx.shape_inference, as a ModelDescription (mpsx._model_description) in the same operations as from_torch's."""

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from mpsx._model_description import ModelDescription, Operation
from mpsx.imported import UnsupportedOperationError

# ONNX activations as mpsx.imported's names; their attributes as PyTorch's parameters.
ACTIVATIONS = {
    "Relu": ("relu", lambda a: {}),
    "Sigmoid": ("sigmoid", lambda a: {}),
    "Tanh": ("tanh", lambda a: {}),
    "Abs": ("abs", lambda a: {}),
    "Exp": ("exp", lambda a: {}),
    "Softsign": ("softsign", lambda a: {}),
    "Softplus": ("softplus", lambda a: {"beta": 1.0, "threshold": float("inf")}),
    "LeakyRelu": ("leaky_relu", lambda a: {"negative_slope": a.get("alpha", 0.01)}),
    "Elu": ("elu", lambda a: {"alpha": a.get("alpha", 1.0)}),
    "HardSigmoid": ("hardsigmoid", lambda a: {"alpha": a.get("alpha", 0.2), "beta": a.get("beta", 0.5)}),
}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul"}


def describe(model_or_path):
    """The ModelDescription of an ONNX ModelProto, or of the file at a path."""
    if isinstance(model_or_path, (str, bytes)) or hasattr(model_or_path, "__fspath__"):
        model = onnx.load(model_or_path)
    elif isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    else:
        raise TypeError(f"from_onnx: expected an onnx.ModelProto or a path, given {type(model_or_path).__name__}")
    try:
        model = shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as error:  # onnx's InferenceError and checker errors
        raise ValueError(f"from_onnx: the model's shapes cannot be inferred: {error}") from error
    return _Reader(model.graph).read()


def _shape(value_info):
    dims = value_info.type.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


class _Reader:
    def __init__(self, graph):
        self.graph = graph
        self.parameters = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        self.constants = {}  # Constant nodes' values
        self.shapes = {}
        for info in list(graph.input) + list(graph.value_info) + list(graph.output):
            if info.name not in self.parameters:
                self.shapes[info.name] = _shape(info)
        self.operations, self.alias, self.image_chw = [], {}, {}

    def read(self):
        inputs = [(i.name, i.name, self.shapes[i.name]) for i in self.graph.input if i.name not in self.parameters]
        for name, _, shape in inputs:
            if shape is None or len(shape) != 4:
                raise UnsupportedOperationError(f"input {name}: expected N x C x H x W of fixed sizes, given {shape}")
            self.image_chw[name] = shape[1:]
        for node in self.graph.node:
            self.node(node)
        if len(self.graph.output) != 1:
            raise UnsupportedOperationError(f"the model returns {len(self.graph.output)} values; expected one tensor")
        parameters = {k: v.astype(np.float32) for k, v in self.parameters.items() if v.dtype.kind == "f"}
        return ModelDescription(inputs, self.operations, self.value(self.graph.output[0].name),
                                {k: v for k, v in self.shapes.items() if v is not None}, parameters)

    # -- helpers ---------------------------------------------------------------------------------------------

    def value(self, name):
        while name in self.alias:
            name = self.alias[name]
        return name

    def refuse(self, node, why):
        raise UnsupportedOperationError(f"{node.name or node.output[0]} ({node.op_type}): {why}")

    def constant(self, node, name):
        if name in self.parameters:
            return self.parameters[name]
        if name in self.constants:
            return self.constants[name]
        self.refuse(node, f"input {name} is computed; expected a constant")

    def emit(self, node, kind, inputs, name=None, **attributes):
        values = [self.value(i) for i in inputs]
        output = node.output[0]
        if self.shapes.get(output) is None or any(self.shapes.get(v) is None for v in values):
            self.refuse(node, "a tensor of unknown shape")
        for v in values + [output]:
            if len(self.shapes[v]) not in (2, 4):
                self.refuse(node, f"expected N x C x H x W or N x F tensors, given one of shape {self.shapes[v]}")
        self.operations.append(Operation(kind, name or node.name or output, values, output, attributes))
        self.image_chw[output] = (self.shapes[output][1:] if len(self.shapes[output]) == 4 else
                                  self.image_chw[values[0]])

    def layer(self, node, weight):
        """A layer's name: its weight's name less ".weight" (PyTorch's exporter names them so), else the node's."""
        return weight[:-len(".weight")] if weight.endswith(".weight") else (node.name or node.output[0])

    def symmetric(self, node, pads):
        top, left, bottom, right = pads
        if (top, left) != (bottom, right):
            self.refuse(node, f"pads {list(pads)}: only the same padding at both ends of an axis")
        return (top, left)

    # -- nodes -------------------------------------------------------------------------------------------------

    def node(self, node):
        a = {attribute.name: onnx.helper.get_attribute_value(attribute) for attribute in node.attribute}
        op, inputs = node.op_type, [i for i in node.input if i]
        if op == "Constant":
            self.constants[node.output[0]] = numpy_helper.to_array(a["value"])
        elif op in ("Conv", "ConvTranspose"):
            if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or "output_shape" in a:
                self.refuse(node, "auto_pad or output_shape: give pads")
            weight = inputs[1]
            self.constant(node, weight)
            kernel = tuple(a.get("kernel_shape", self.parameters[weight].shape[2:]))
            extra = {"output_padding": tuple(a.get("output_padding", (0, 0)))} if op == "ConvTranspose" else {}
            self.emit(node, "conv" if op == "Conv" else "conv_transpose", inputs[:1], self.layer(node, weight),
                      weight=weight, bias=inputs[2] if len(inputs) > 2 else None, kernel=kernel,
                      stride=tuple(a.get("strides", (1, 1))), padding=self.symmetric(node, a.get("pads", (0,) * 4)),
                      dilation=tuple(a.get("dilations", (1, 1))), groups=a.get("group", 1), **extra)
        elif op == "BatchNormalization":
            scale, bias, mean, var = inputs[1:5]
            for name in inputs[1:5]:
                self.constant(node, name)
            # ONNX's running average keeps momentum of the old value; PyTorch's takes momentum of the new.
            self.emit(node, "batch_norm", inputs[:1], self.layer(node, scale), weight=scale, bias=bias,
                      running_mean=mean, running_var=var, epsilon=a.get("epsilon", 1e-5),
                      momentum=1 - a.get("momentum", 0.9), batches_tracked=None)
        elif op == "InstanceNormalization":
            self.emit(node, "group_norm", inputs[:1], self.layer(node, inputs[1]), groups=None,
                      epsilon=a.get("epsilon", 1e-5), weight=inputs[1], bias=inputs[2])
        elif op == "LRN":
            self.emit(node, "lrn", inputs[:1], size=a["size"], alpha=a.get("alpha", 1e-4), beta=a.get("beta", 0.75),
                      k=a.get("bias", 1.0))
        elif op in ACTIVATIONS:
            activation, parameters = ACTIVATIONS[op]
            self.emit(node, "neuron", inputs[:1], activation=activation, parameters=parameters(a))
        elif op == "Clip":
            low, high = (float(self.constant(node, n)) if n else None for n in (inputs + [None, None])[1:3])
            if (low, high) != (0.0, 6.0):
                self.refuse(node, f"clip to [{low}, {high}]: only to [0, 6] (ReLU6)")
            self.emit(node, "neuron", inputs[:1], activation="relu6", parameters={})
        elif op in ("MaxPool", "AveragePool"):
            if a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", (1, 1))) or len(node.output) > 1:
                self.refuse(node, "ceil_mode, dilations or indices")
            kind = "max_pool" if op == "MaxPool" else "avg_pool"
            extra = {} if op == "MaxPool" else {"count_include_pad": bool(a.get("count_include_pad", 0))}
            self.emit(node, kind, inputs[:1], kernel=tuple(a["kernel_shape"]), stride=tuple(a.get("strides", (1, 1))),
                      padding=self.symmetric(node, a.get("pads", (0,) * 4)), **extra)
        elif op == "GlobalAveragePool":
            self.emit(node, "global_avg_pool", inputs[:1])
        elif op == "ReduceMean":
            axes = a.get("axes", self.constant(node, inputs[1]) if len(inputs) > 1 else None)
            source = self.value(inputs[0])
            if axes is None or sorted(int(x) % 4 for x in axes) != [2, 3] or len(self.shapes[source]) != 4:
                self.refuse(node, f"a mean over axes {axes}: only over H and W (global average pooling)")
            self.emit(node, "global_avg_pool", inputs[:1])
            self.image_chw[node.output[0]] = (self.shapes[source][1], 1, 1)
        elif op in ("Flatten", "Reshape"):
            before, after = self.shapes[self.value(inputs[0])], self.shapes.get(node.output[0])
            if after == before:
                self.alias[node.output[0]] = self.value(inputs[0])
            elif len(before) == 4 and after == (before[0], int(np.prod(before[1:]))):
                self.emit(node, "flatten", inputs[:1])
            else:
                self.refuse(node, f"from {before} to {after}: only flattening N x C x H x W to N x CHW")
        elif op == "Gemm":
            if a.get("transB", 0) != 1 or a.get("transA", 0) or a.get("alpha", 1.0) != 1 or a.get("beta", 1.0) != 1:
                self.refuse(node, "only A B^T + C (transB 1, alpha and beta 1), as a linear layer")
            source = self.value(inputs[0])
            weight = inputs[1]
            self.constant(node, weight)
            self.emit(node, "linear", inputs[:1], self.layer(node, weight), weight=weight,
                      bias=inputs[2] if len(inputs) > 2 else None, source_chw=self.image_chw[source])
            self.image_chw[node.output[0]] = (self.shapes[node.output[0]][1], 1, 1)
        elif op in BINARY:
            shapes = [self.shapes.get(self.value(i)) for i in inputs]
            if any(i in self.parameters or i in self.constants for i in inputs) or shapes[0] != shapes[1]:
                self.refuse(node, f"{op} of tensors of shapes {shapes}: only of two computed tensors of equal shapes")
            self.emit(node, BINARY[op], inputs)
        elif op == "Concat":
            if a["axis"] not in (1, -3) or any(len(self.shapes[self.value(i)]) != 4 for i in inputs):
                self.refuse(node, f"concatenation along axis {a['axis']}: only the channels of N x C x H x W tensors")
            self.emit(node, "concat", inputs)
        elif op == "Resize":
            self.resize(node, a, inputs)
        elif op == "Dropout":
            ratio = float(self.constant(node, inputs[1])) if len(inputs) > 1 else a.get("ratio", 0.5)
            self.emit(node, "dropout", inputs[:1], p=ratio)
        elif op in ("Softmax", "LogSoftmax"):
            rank = len(self.shapes[self.value(inputs[0])])
            if a.get("axis", -1) % rank != 1:
                self.refuse(node, f"along axis {a.get('axis', -1)}: only along the channels (axis 1)")
            self.emit(node, "softmax" if op == "Softmax" else "log_softmax", inputs[:1])
        elif op == "Identity":
            self.alias[node.output[0]] = self.value(inputs[0])
        else:
            self.refuse(node, "no NNGraph node for this operation")

    def resize(self, node, a, inputs):
        before, after = self.shapes[self.value(inputs[0])], self.shapes.get(node.output[0])
        if after is None or len(before) != 4 or after[:2] != before[:2] or any(o % i for o, i in zip(after[2:], before[2:])):
            self.refuse(node, f"from {before} to {after}: only by whole factors of H and W")
        mode = a.get("mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        transform = a.get("coordinate_transformation_mode", b"half_pixel")
        transform = transform.decode() if isinstance(transform, bytes) else transform
        if mode == "nearest" and transform == "asymmetric" and a.get("nearest_mode", b"floor") in (b"floor", "floor"):
            attributes = {"mode": "nearest", "align_corners": False}
        elif mode == "linear" and transform in ("pytorch_half_pixel", "half_pixel", "align_corners"):
            attributes = {"mode": "bilinear", "align_corners": transform == "align_corners"}
        else:
            self.refuse(node, f"mode {mode!r} with coordinate_transformation_mode {transform!r}: only PyTorch's "
                              f"nearest and bilinear")
        self.emit(node, "upsample", inputs[:1], scale=(after[2] // before[2], after[3] // before[3]), **attributes)

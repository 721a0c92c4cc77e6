"""mpsx.to_onnx: an ImportedModel's forward pass, as its eval() runs it, as an ONNX model (opset 17) with the data
sources' current values as initializers under the model's parameter names."""

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mpsx.imported import UnsupportedOperationError

OPSET = 17
ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "abs": "Abs", "exp": "Exp",
               "softsign": "Softsign", "leaky_relu": "LeakyRelu", "elu": "Elu", "hardsigmoid": "HardSigmoid"}
BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul"}


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


def model_proto(description, state):
    """The ModelProto of a ModelDescription with `state` (ImportedModel.state_dict()) as its initializers."""
    nodes, initializers = [], {name: value for name, value in state.items() if value.dtype == np.float32}
    shapes = description.shapes

    def constant(name, value):
        initializers[name] = np.asarray(value, np.float32)
        return name

    for op in description.operations:
        a, out, inputs = op.attributes, op.output, list(op.inputs)

        def add(op_type, node_inputs=inputs, **attributes):
            nodes.append(helper.make_node(op_type, node_inputs, [out], name=op.name, **attributes))

        if op.kind in ("conv", "conv_transpose"):
            padding = _pair(a["padding"])
            extra = {"output_padding": list(_pair(a["output_padding"]))} if op.kind == "conv_transpose" else {}
            add("Conv" if op.kind == "conv" else "ConvTranspose", inputs + [a["weight"]] + ([a["bias"]] if a["bias"] else []),
                kernel_shape=list(_pair(a["kernel"])), strides=list(_pair(a["stride"])),
                pads=list(padding + padding), dilations=list(_pair(a["dilation"])), group=a["groups"], **extra)
        elif op.kind == "linear":
            add("Gemm", inputs + [a["weight"]] + ([a["bias"]] if a["bias"] else []), transB=1)
        elif op.kind == "batch_norm":
            channels = shapes[inputs[0]][1]
            scale = a["weight"] or constant(f"{op.name}.scale", np.ones(channels))
            bias = a["bias"] or constant(f"{op.name}.shift", np.zeros(channels))
            add("BatchNormalization", inputs + [scale, bias, a["running_mean"], a["running_var"]],
                epsilon=a["epsilon"], momentum=1 - a["momentum"])
        elif op.kind == "group_norm":
            if a["groups"] is not None:
                raise UnsupportedOperationError(f"to_onnx: {op.name}: group normalization (ONNX's GroupNormalization "
                                                f"of opset {OPSET} has per-group scales)")
            channels = shapes[inputs[0]][1]
            scale = a["weight"] or constant(f"{op.name}.scale", np.ones(channels))
            bias = a["bias"] or constant(f"{op.name}.shift", np.zeros(channels))
            add("InstanceNormalization", inputs + [scale, bias], epsilon=a["epsilon"])
        elif op.kind == "lrn":
            add("LRN", size=a["size"], alpha=a["alpha"], beta=a["beta"], bias=a["k"])
        elif op.kind == "neuron":
            activation, p = a["activation"], a["parameters"]
            if activation == "relu6":
                add("Clip", inputs + [constant(f"{op.name}.min", 0.0), constant(f"{op.name}.max", 6.0)])
            elif activation == "softplus" and p["beta"] == 1:
                add("Softplus")
            elif activation in ACTIVATIONS:
                attributes = {"leaky_relu": {"alpha": p.get("negative_slope")}, "elu": {"alpha": p.get("alpha")},
                              "hardsigmoid": {"alpha": p.get("alpha", 1 / 6), "beta": p.get("beta", 0.5)}}
                add(ACTIVATIONS[activation], **attributes.get(activation, {}))
            else:
                raise UnsupportedOperationError(f"to_onnx: {op.name}: the activation {activation!r} with {p}")
        elif op.kind in ("max_pool", "avg_pool"):
            padding = _pair(a["padding"])
            extra = {"count_include_pad": int(a["count_include_pad"])} if op.kind == "avg_pool" else {}
            add("MaxPool" if op.kind == "max_pool" else "AveragePool", kernel_shape=list(_pair(a["kernel"])),
                strides=list(_pair(a["stride"])), pads=list(padding + padding), **extra)
        elif op.kind == "global_avg_pool":
            if len(shapes[out]) == 2:  # a mean over H and W without keepdim
                nodes.append(helper.make_node("GlobalAveragePool", inputs, [out + ".pooled"], name=op.name))
                nodes.append(helper.make_node("Flatten", [out + ".pooled"], [out], name=op.name + ".flatten"))
            else:
                add("GlobalAveragePool")
        elif op.kind == "flatten":
            add("Flatten", axis=1)
        elif op.kind in BINARY:
            add(BINARY[op.kind])
        elif op.kind == "concat":
            add("Concat", axis=1)
        elif op.kind == "upsample":
            sy, sx = a["scale"]
            scales = constant(f"{op.name}.scales", [1, 1, sy, sx])
            if a["mode"] == "nearest":
                add("Resize", inputs + ["", scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor")
            else:
                add("Resize", inputs + ["", scales], mode="linear",
                    coordinate_transformation_mode="align_corners" if a["align_corners"] else "pytorch_half_pixel")
        elif op.kind == "dropout":  # the forward pass as eval() runs it
            add("Identity")
        elif op.kind in ("softmax", "log_softmax"):
            add("Softmax" if op.kind == "softmax" else "LogSoftmax", axis=1)
        else:
            raise UnsupportedOperationError(f"to_onnx: {op.name}: no ONNX operation for {op.kind!r}")

    def info(name):  # any batch size, as an MPS graph takes
        return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, ["N"] + list(shapes[name][1:]))

    graph = helper.make_graph(nodes, "mpsx", [info(value) for value, _, _ in description.inputs],
                              [info(description.output)],
                              [numpy_helper.from_array(value, name) for name, value in initializers.items()])
    opset = helper.make_opsetid("", OPSET)
    # The IR version opset 17 came with, not the onnx package's newest, which older runtimes refuse.
    model = helper.make_model(graph, opset_imports=[opset], producer_name="mpsx",
                              ir_version=helper.find_min_ir_version_for([opset]))
    onnx.checker.check_model(model)
    return model

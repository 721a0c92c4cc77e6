"""mpsx.from_torch's front end: a torch.nn.Module, traced by torch.fx and its shapes propagated from an example
input, as a ModelDescription (mpsx._model_description)."""

import operator

import numpy as np
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.passes.shape_prop import ShapeProp

import mpsx
from mpsx._model_description import ModelDescription, Operation
from mpsx.imported import UnsupportedOperationError

# Activation modules and functions, as mpsx.imported.neuron_descriptor's names, with their PyTorch parameters.
ACTIVATION_MODULES = {
    nn.ReLU: ("relu", lambda m: {}),
    nn.LeakyReLU: ("leaky_relu", lambda m: {"negative_slope": m.negative_slope}),
    nn.ReLU6: ("relu6", lambda m: {}),
    nn.ELU: ("elu", lambda m: {"alpha": m.alpha}),
    nn.Sigmoid: ("sigmoid", lambda m: {}),
    nn.Tanh: ("tanh", lambda m: {}),
    nn.Hardsigmoid: ("hardsigmoid", lambda m: {}),
    nn.Softsign: ("softsign", lambda m: {}),
    nn.Softplus: ("softplus", lambda m: {"beta": float(m.beta), "threshold": float(m.threshold)}),
    nn.GELU: ("gelu", lambda m: {"approximate": m.approximate}),
}
ACTIVATION_FUNCTIONS = {
    F.relu: "relu", torch.relu: "relu", F.relu6: "relu6", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid",
    torch.tanh: "tanh", F.tanh: "tanh", F.gelu: "gelu", F.elu: "elu", F.leaky_relu: "leaky_relu", torch.abs: "abs",
    torch.exp: "exp", F.hardsigmoid: "hardsigmoid", F.softsign: "softsign",
}
ACTIVATION_METHODS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "abs": "abs", "exp": "exp"}
BINARY = {operator.add: "add", operator.iadd: "add", torch.add: "add", operator.sub: "sub", operator.isub: "sub",
          torch.sub: "sub", operator.mul: "mul", operator.imul: "mul", torch.mul: "mul"}
BINARY_METHODS = {"add": "add", "add_": "add", "sub": "sub", "sub_": "sub", "mul": "mul", "mul_": "mul"}
ALIAS_METHODS = {"contiguous", "clone", "detach"}


def loss_descriptor(loss):
    """The CNNLossDescriptor computing what the PyTorch loss module `loss` computes, over the model's N x C x H x W
    (or N x C) result and labels of its shape: class indices become one-hot labels (CNNLossLabels)."""
    reduction = getattr(loss, "reduction", None)
    reductions = {"mean": mpsx.CNNReductionType.MEAN, "sum": mpsx.CNNReductionType.SUM,
                  "none": mpsx.CNNReductionType.NONE}
    if reduction not in reductions:
        raise UnsupportedOperationError(f"loss_from_torch: {type(loss).__name__} with reduction {reduction!r}")

    def refuse(why):
        raise UnsupportedOperationError(f"loss_from_torch: {type(loss).__name__} {why}")

    # MPS's weights are per label value (CNNLossLabels); PyTorch's class weights also rescale the mean.
    if getattr(loss, "weight", None) is not None or getattr(loss, "pos_weight", None) is not None:
        refuse("with class weights: give them per value as CNNLossLabels weights, with reduction 'sum'")
    settings = {}
    if type(loss) is nn.CrossEntropyLoss:
        kind = mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY
        settings["label_smoothing"] = float(loss.label_smoothing)
    elif type(loss) is nn.BCEWithLogitsLoss:
        kind = mpsx.CNNLossType.SIGMOID_CROSS_ENTROPY
    elif type(loss) is nn.MSELoss:
        kind = mpsx.CNNLossType.MEAN_SQUARED_ERROR
    elif type(loss) is nn.L1Loss:
        kind = mpsx.CNNLossType.MEAN_ABSOLUTE_ERROR
    elif type(loss) is nn.HuberLoss:
        kind = mpsx.CNNLossType.HUBER
        settings["delta"] = float(loss.delta)
    elif type(loss) is nn.SmoothL1Loss:  # Huber with delta beta, over beta
        if loss.beta <= 0:
            refuse(f"with beta {loss.beta}: L1 loss (nn.L1Loss) is MPS's mean absolute error")
        kind = mpsx.CNNLossType.HUBER
        settings.update(delta=float(loss.beta), weight=1 / float(loss.beta))
    else:
        refuse("has no CNNLossType that computes it; mapped are CrossEntropyLoss, BCEWithLogitsLoss, MSELoss, "
               "L1Loss, HuberLoss and SmoothL1Loss")
    return mpsx.CNNLossDescriptor(kind, reductions[reduction], reduce_across_batch=reduction != "none", **settings)


def describe(module, example_input):
    """The ModelDescription of `module` (eval() or train(): batch normalization and dropout are built for both)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"from_torch: expected a torch.nn.Module, given {type(module).__name__}")
    examples = example_input if isinstance(example_input, tuple) else (example_input,)
    if not examples or not all(isinstance(e, torch.Tensor) for e in examples):
        raise TypeError(f"from_torch: expected example_input a tensor or a tuple of tensors, given "
                        f"{type(example_input).__name__}")
    try:
        traced = torch.fx.symbolic_trace(module)
    except Exception as error:  # torch.fx's TraceError and what the module's code raises while traced
        raise UnsupportedOperationError(f"from_torch: torch.fx cannot trace the module: {error}") from error
    was_training = module.training
    try:
        module.eval()  # the run for the shapes changes no running statistics
        ShapeProp(traced).propagate(*examples)
    except Exception as error:
        raise ValueError(f"from_torch: the module does not run on example_input of shapes "
                         f"{[tuple(e.shape) for e in examples]}: {error}") from error
    finally:
        module.train(was_training)
    parameters = {name: value.detach().cpu().numpy().astype(np.float32)
                  for name, value in module.state_dict().items() if value.is_floating_point()}
    return _Reader(traced, parameters).read()


class _Reader:
    def __init__(self, traced, parameters):
        self.traced, self.parameters = traced, parameters
        self.inputs, self.operations, self.shapes = [], [], {}
        self.alias = {}  # value -> the value it is (identity operations)
        self.image_chw = {}  # value -> (C, H, W) of its image: a flattened value keeps its image's

    def read(self):
        output = None
        for node in self.traced.graph.nodes:
            if node.op == "output":
                if not isinstance(node.args[0], torch.fx.Node):
                    raise UnsupportedOperationError(f"{node.name}: the model returns {type(node.args[0]).__name__}; "
                                                    f"expected one tensor")
                output = self.value(node.args[0])
                continue
            meta = node.meta.get("tensor_meta")
            if node.op == "placeholder":
                self.inputs.append((node.name, node.target, tuple(meta.shape)))
                self.record_shape(node.name, tuple(meta.shape))
                continue
            if node.op == "call_method" and node.target == "size":
                continue  # an int, read only by view/reshape, whose result shape is what counts
            if meta is None or not hasattr(meta, "shape"):
                raise UnsupportedOperationError(f"{node.name} ({self.what(node)}): it makes no tensor")
            self.record_shape(node.name, tuple(meta.shape))
            if node.op == "call_module":
                self.module(node, self.traced.get_submodule(node.target))
            elif node.op == "call_function":
                self.function(node)
            elif node.op == "call_method":
                self.method(node)
            else:
                raise UnsupportedOperationError(f"{node.name} ({self.what(node)}): a {node.op} operation")
        return ModelDescription(self.inputs, self.operations, output, self.shapes, self.parameters)

    # -- helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    def what(node):
        target = node.target
        return target if isinstance(target, str) else getattr(target, "__name__", repr(target))

    def value(self, node):
        name = node.name
        while name in self.alias:
            name = self.alias[name]
        return name

    def record_shape(self, name, shape):
        self.shapes[name] = shape
        if len(shape) == 4:
            self.image_chw[name] = shape[1:]

    def emit(self, kind, node, inputs, name=None, **attributes):
        values = [self.value(i) for i in inputs]
        for v in values:
            if len(self.shapes[v]) not in (2, 4):
                raise UnsupportedOperationError(f"{node.name} ({self.what(node)}): expected N x C x H x W or N x F "
                                                f"tensors, given one of shape {self.shapes[v]}")
        self.operations.append(Operation(kind, name or node.name, values, node.name, attributes))
        if node.name not in self.image_chw:
            self.image_chw[node.name] = self.image_chw[values[0]]

    def same_as(self, node, source):
        self.alias[node.name] = self.value(source)
        self.image_chw[node.name] = self.image_chw[self.value(source)]

    def refuse(self, node, why):
        raise UnsupportedOperationError(f"{node.name} ({self.what(node)}): {why}")

    def tensor_args(self, node):
        return [a for a in node.args if isinstance(a, torch.fx.Node)]

    # -- modules ---------------------------------------------------------------------------------------------

    def module(self, node, m):
        source = node.args[0]
        name = node.target
        if isinstance(m, nn.Conv2d):
            if m.padding_mode != "zeros":
                self.refuse(node, f"padding_mode {m.padding_mode!r}; only 'zeros' is expressible")
            padding = m.padding
            if isinstance(padding, str):
                padding = self.string_padding(node, padding, m.kernel_size, m.dilation)
            self.emit("conv", node, [source], name, weight=f"{name}.weight",
                     bias=f"{name}.bias" if m.bias is not None else None, kernel=m.kernel_size, stride=m.stride,
                     padding=padding, dilation=m.dilation, groups=m.groups)
        elif isinstance(m, nn.ConvTranspose2d):
            if m.padding_mode != "zeros":
                self.refuse(node, f"padding_mode {m.padding_mode!r}; only 'zeros' is expressible")
            self.emit("conv_transpose", node, [source], name, weight=f"{name}.weight",
                      bias=f"{name}.bias" if m.bias is not None else None, kernel=m.kernel_size, stride=m.stride,
                      padding=m.padding, output_padding=m.output_padding, dilation=m.dilation, groups=m.groups)
        elif isinstance(m, nn.BatchNorm2d):
            if m.momentum is None or not m.track_running_stats:
                self.refuse(node, "batch normalization without running statistics, or with a cumulative average "
                                  "(momentum None): MPS's data source keeps an exponential running average")
            self.emit("batch_norm", node, [source], name, weight=f"{name}.weight" if m.affine else None,
                     bias=f"{name}.bias" if m.affine else None, running_mean=f"{name}.running_mean",
                     running_var=f"{name}.running_var", epsilon=m.eps, momentum=m.momentum,
                     batches_tracked=(f"{name}.num_batches_tracked", int(m.num_batches_tracked)))
        elif isinstance(m, (nn.GroupNorm, nn.InstanceNorm2d)):
            if isinstance(m, nn.InstanceNorm2d) and m.track_running_stats:
                self.refuse(node, "instance normalization with running statistics: MPS's normalizes each image "
                                  "by its own statistics, in training and inference alike")
            groups = m.num_groups if isinstance(m, nn.GroupNorm) else None
            self.emit("group_norm", node, [source], name, groups=groups, epsilon=m.eps,
                      weight=f"{name}.weight" if m.affine else None, bias=f"{name}.bias" if m.affine else None)
        elif isinstance(m, nn.LocalResponseNorm):
            self.emit("lrn", node, [source], size=m.size, alpha=m.alpha, beta=m.beta, k=m.k)
        elif type(m) in ACTIVATION_MODULES:
            activation, parameters = ACTIVATION_MODULES[type(m)]
            self.activation(node, source, activation, parameters(m))
        elif isinstance(m, nn.MaxPool2d):
            if m.ceil_mode or m.return_indices or m.dilation not in (1, (1, 1)):
                self.refuse(node, "max pooling with ceil_mode, return_indices or dilation")
            self.emit("max_pool", node, [source], kernel=m.kernel_size, stride=m.stride or m.kernel_size,
                     padding=m.padding)
        elif isinstance(m, nn.AvgPool2d):
            if m.ceil_mode or m.divisor_override:
                self.refuse(node, "average pooling with ceil_mode or divisor_override")
            self.emit("avg_pool", node, [source], kernel=m.kernel_size, stride=m.stride or m.kernel_size,
                     padding=m.padding, count_include_pad=m.count_include_pad)
        elif isinstance(m, nn.AdaptiveAvgPool2d):
            self.adaptive_average(node, source, m.output_size)
        elif isinstance(m, nn.Flatten):
            self.flatten(node, source, m.start_dim, m.end_dim)
        elif isinstance(m, nn.Linear):
            self.linear(node, source, name, m.bias is not None)
        elif isinstance(m, (nn.Dropout, nn.Dropout2d)):
            if isinstance(m, nn.Dropout2d):
                self.refuse(node, "channel dropout (Dropout2d): MPS's dropout masks values, not channels")
            self.emit("dropout", node, [source], p=m.p)
        elif isinstance(m, (nn.Softmax, nn.LogSoftmax)):
            self.softmax(node, source, "softmax" if isinstance(m, nn.Softmax) else "log_softmax", m.dim)
        elif isinstance(m, nn.Upsample):
            self.upsample(node, source, m.scale_factor, m.mode, m.align_corners)
        elif isinstance(m, nn.Identity):
            self.same_as(node, source)
        else:
            self.refuse(node, f"no NNGraph node for {type(m).__name__}")

    def string_padding(self, node, padding, kernel, dilation):
        if padding == "valid":
            return (0, 0)
        extents = [d * (k - 1) for k, d in zip(kernel, dilation)]
        if any(e % 2 for e in extents):
            self.refuse(node, "padding 'same' with an even dilated kernel, which PyTorch pads unevenly")
        return tuple(e // 2 for e in extents)

    # -- functions and methods ----------------------------------------------------------------------------------

    def function(self, node):
        f = node.target
        args, kwargs = node.args, node.kwargs
        if f in ACTIVATION_FUNCTIONS:
            activation = ACTIVATION_FUNCTIONS[f]
            parameters = {}
            if activation == "leaky_relu":
                parameters["negative_slope"] = args[1] if len(args) > 1 else kwargs.get("negative_slope", 0.01)
            elif activation == "elu":
                parameters["alpha"] = args[1] if len(args) > 1 else kwargs.get("alpha", 1.0)
            elif activation == "gelu":
                parameters["approximate"] = kwargs.get("approximate", "none")
            self.activation(node, args[0], activation, parameters)
        elif f in BINARY:
            self.binary(node, BINARY[f], args, kwargs)
        elif f is torch.cat:
            dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
            sources = list(args[0])
            if dim not in (1, -3) or any(len(self.shapes[self.value(s)]) != 4 for s in sources):
                self.refuse(node, f"concatenation along dim {dim}: only the channels of N x C x H x W tensors")
            self.emit("concat", node, sources)
        elif f is torch.flatten:
            self.flatten(node, args[0], args[1] if len(args) > 1 else kwargs.get("start_dim", 0),
                         args[2] if len(args) > 2 else kwargs.get("end_dim", -1))
        elif f is F.adaptive_avg_pool2d:
            self.adaptive_average(node, args[0], args[1] if len(args) > 1 else kwargs["output_size"])
        elif f is F.max_pool2d or f is F.avg_pool2d:
            self.refuse(node, "pooling as a function; use nn.MaxPool2d or nn.AvgPool2d")
        elif f is F.interpolate:
            self.upsample(node, args[0], kwargs.get("scale_factor"), kwargs.get("mode", "nearest"),
                          kwargs.get("align_corners"))
        elif f is F.dropout:
            self.emit("dropout", node, [args[0]], p=args[1] if len(args) > 1 else kwargs.get("p", 0.5))
        elif f in (F.softmax, torch.softmax, F.log_softmax, torch.log_softmax):
            kind = "softmax" if f in (F.softmax, torch.softmax) else "log_softmax"
            self.softmax(node, args[0], kind, args[1] if len(args) > 1 else kwargs.get("dim"))
        else:
            self.refuse(node, "no NNGraph node for this function")

    def method(self, node):
        name, args = node.target, node.args
        if name in ACTIVATION_METHODS:
            self.activation(node, args[0], ACTIVATION_METHODS[name], {})
        elif name in BINARY_METHODS:
            self.binary(node, BINARY_METHODS[name], args, node.kwargs)
        elif name in ALIAS_METHODS:
            self.same_as(node, args[0])
        elif name == "flatten":
            self.flatten(node, args[0], args[1] if len(args) > 1 else node.kwargs.get("start_dim", 0),
                         args[2] if len(args) > 2 else node.kwargs.get("end_dim", -1))
        elif name in ("view", "reshape"):
            source = self.value(args[0])
            before, after = self.shapes[source], self.shapes[node.name]
            if len(before) == 4 and after == (before[0], int(np.prod(before[1:]))):
                self.emit("flatten", node, [args[0]])
            elif before == after:
                self.same_as(node, args[0])
            else:
                self.refuse(node, f"a reshape from {before} to {after}: only flattening N x C x H x W to N x CHW")
        elif name == "mean":
            dims = args[1] if len(args) > 1 else node.kwargs.get("dim")
            dims = tuple(sorted(d % 4 for d in (dims if isinstance(dims, (tuple, list)) else (dims,))))
            if len(self.shapes[self.value(args[0])]) != 4 or dims != (2, 3):
                self.refuse(node, f"a mean over dims {dims}: only over H and W (global average pooling)")
            self.emit("global_avg_pool", node, [args[0]])
            if len(self.shapes[node.name]) == 2:  # keepdim False: the image stays 1 x 1 x C
                self.image_chw[node.name] = self.shapes[self.value(args[0])][1:2] + (1, 1)
        else:
            self.refuse(node, "no NNGraph node for this method")

    # -- the operations -----------------------------------------------------------------------------------------

    def activation(self, node, source, activation, parameters):
        if activation == "gelu" and parameters.get("approximate", "none") != "none":
            self.refuse(node, "GELU's tanh approximation: MPS's GELU neuron is the exact erf form")
        if activation == "softplus" and parameters["threshold"] < 60:
            self.refuse(node, f"softplus with threshold {parameters['threshold']} (PyTorch's linear region above "
                              f"it): MPS's SoftPlus neuron has none; give threshold >= 60")
        self.emit("neuron", node, [source], activation=activation,
                 parameters={k: v for k, v in parameters.items() if k not in ("approximate", "threshold")})

    def binary(self, node, kind, args, kwargs):
        sources = [a for a in args[:2]]
        if not all(isinstance(s, torch.fx.Node) for s in sources) or kwargs.get("alpha", 1) != 1:
            self.refuse(node, f"{kind} of a tensor and a number (or alpha): only of two tensors")
        shapes = [self.shapes[self.value(s)] for s in sources]
        if shapes[0] != shapes[1]:
            self.refuse(node, f"{kind} of tensors of shapes {shapes[0]} and {shapes[1]}: only of equal shapes")
        self.emit(kind, node, sources)

    def flatten(self, node, source, start, end):
        shape = self.shapes[self.value(source)]
        if len(shape) == 2 and start in (1, -1):
            self.same_as(node, source)
            return
        if len(shape) != 4 or start != 1 or end not in (-1, 3):
            self.refuse(node, f"flatten of a {shape} tensor from dim {start} to {end}: only N x C x H x W to N x CHW")
        self.emit("flatten", node, [source])

    def linear(self, node, source, name, bias):
        value = self.value(source)
        if len(self.shapes[value]) != 2:
            self.refuse(node, f"a linear layer over a {self.shapes[value]} tensor: only over N x F (flatten first)")
        c, h, w = self.image_chw[value]
        self.emit("linear", node, [source], name, weight=f"{name}.weight", bias=f"{name}.bias" if bias else None,
                 source_chw=(c, h, w))
        self.image_chw[node.name] = (self.shapes[node.name][1], 1, 1)

    def adaptive_average(self, node, source, output_size):
        size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
        shape = self.shapes[self.value(source)]
        if size == tuple(shape[2:]):
            self.same_as(node, source)
        elif size == (1, 1):
            self.emit("global_avg_pool", node, [source])
        else:
            self.refuse(node, f"adaptive average pooling from {shape[2:]} to {size}: only to 1 x 1")

    def softmax(self, node, source, kind, dim):
        rank = len(self.shapes[self.value(source)])
        if dim is None or dim % rank != 1:
            self.refuse(node, f"{kind} along dim {dim}: only along the channels (dim 1)")
        self.emit(kind, node, [source])

    def upsample(self, node, source, scale, mode, align_corners):
        scale = (scale, scale) if not isinstance(scale, (tuple, list)) else tuple(scale)
        if scale[0] is None or any(float(s) != int(s) or s < 1 for s in scale):
            self.refuse(node, f"upsampling by {scale}: only by whole scale factors")
        if mode not in ("nearest", "bilinear"):
            self.refuse(node, f"upsampling mode {mode!r}: only 'nearest' and 'bilinear'")
        self.emit("upsample", node, [source], scale=tuple(int(s) for s in scale), mode=mode,
                 align_corners=bool(align_corners))

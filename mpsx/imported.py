"""Bringing a model: a PyTorch module (``mpsx.from_torch``) as an NNGraph of the nodes an MPS program would write,
with data sources filled from its parameters in MPS's layouts.

A front end reads the model into operations over named values in PyTorch's NCHW convention, with the parameters
in PyTorch's layouts (mpsx._model_description); ``ImportedModel`` builds the NNGraph nodes from them. An operation
mpsx cannot express raises ``UnsupportedOperationError`` naming the operation and the model's node.
docs/importing.rst ("Bringing a model") lists the operations, the layout conversions and the refusals.
"""

import weakref

import numpy as np

import mpsx
from mpsx import _model_description
from mpsx.persistence import weights_from_torch, weights_to_torch


class UnsupportedOperationError(mpsx.MPSXError, ValueError):
    """An operation of an imported model that mpsx cannot express, with the model's node that holds it.

    MPS: none (mpsx)
    """


# MPS neuron types of the activations, with their parameters (MPSNNNeuronDescriptor's a, b, c).
_NEURONS = {
    "relu": (mpsx.NeuronType.RELU, 0.0, 0.0),
    "sigmoid": (mpsx.NeuronType.SIGMOID, 0.0, 0.0),
    "tanh": (mpsx.NeuronType.TANH, 1.0, 1.0),
    "abs": (mpsx.NeuronType.ABSOLUTE, 0.0, 0.0),
    "softsign": (mpsx.NeuronType.SOFTSIGN, 0.0, 0.0),
    "gelu": (mpsx.NeuronType.GELU, 0.0, 0.0),
    "exp": (mpsx.NeuronType.EXPONENTIAL, 1.0, 0.0),
}


def _neuron_descriptor(activation, **parameters):
    """The NNNeuronDescriptor of an activation and its PyTorch parameters."""
    if activation in _NEURONS:
        kind, a, b = _NEURONS[activation]
        if activation == "exp":  # MPS: c^(a x + b), c = e
            return mpsx.NNNeuronDescriptor(kind, a, b, float(np.e))
        return mpsx.NNNeuronDescriptor(kind, a, b)
    if activation == "leaky_relu":  # MPS ReLU: x >= 0 ? x : a x
        return mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU, parameters["negative_slope"])
    if activation == "relu6":  # MPS ReLUN: min(x >= 0 ? x : a x, b)
        return mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELUN, 0.0, 6.0)
    if activation == "elu":  # MPS ELU: x >= 0 ? x : a (e^x - 1)
        return mpsx.NNNeuronDescriptor(mpsx.NeuronType.ELU, parameters["alpha"])
    if activation == "hardsigmoid":  # MPS: clamp(a x + b, 0, 1); PyTorch: clamp(x / 6 + 1 / 2, 0, 1)
        return mpsx.NNNeuronDescriptor(mpsx.NeuronType.HARD_SIGMOID, parameters.get("alpha", 1 / 6),
                                       parameters.get("beta", 0.5))
    if activation == "softplus":  # MPS: a log(1 + e^(b x)); PyTorch: log(1 + e^(beta x)) / beta
        beta = parameters["beta"]
        return mpsx.NNNeuronDescriptor(mpsx.NeuronType.SOFTPLUS, 1 / beta, beta)
    raise KeyError(activation)


def _host_array(value):
    """A numpy array of a torch tensor (on any device) or of anything numpy takes."""
    return np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)


_FLOAT = mpsx.NNConvolutionAccumulatorPrecisionOption.FLOAT


def _check_precision(accumulator_precision):
    if not isinstance(accumulator_precision, mpsx.NNConvolutionAccumulatorPrecisionOption):
        raise TypeError(f"expected accumulator_precision an NNConvolutionAccumulatorPrecisionOption, given "
                        f"{type(accumulator_precision).__name__}")


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


def _policy(kernel, stride, padding, dilation):
    """The MPSNNPaddingMethod that sizes and places a window as PyTorch's symmetric ``padding`` does, for one
    axis pair, or None where none does (then an NNPadNode pads first): no padding is ValidOnly; half the
    dilated kernel less one is Same (centered, the remainder to the top left), up to stride 2; the dilated
    kernel less one is Full at stride 1."""
    policies = set()
    for k, s, p, d in zip(kernel, stride, padding, dilation):
        extent = d * (k - 1) + 1
        if p == 0:
            policies.add(mpsx.NNPaddingMethod.SIZE_VALID_ONLY)
        elif 2 * p == extent - 1 and s <= 2:
            policies.add(mpsx.NNPaddingMethod.SIZE_SAME)
        elif p == extent - 1 and s == 1:
            policies.add(mpsx.NNPaddingMethod.SIZE_FULL)
        else:
            return None
    if len(policies) != 1:
        return None
    return policies.pop() | mpsx.NNPaddingMethod.ALIGN_CENTERED | mpsx.NNPaddingMethod.ADD_REMAINDER_TO_TOP_LEFT


def _transpose_policy(kernel, padding, output_padding, dilation):
    """The MPSNNPaddingMethod that sizes and places a transposed convolution as PyTorch's ``padding`` and
    ``output_padding`` do, or else a _TransposePadding: no padding is Full (the whole reach of every source pixel);
    half the dilated kernel less one, without output padding, is Same (the expanded source's size)."""
    policies = {mpsx.NNPaddingMethod.SIZE_FULL, mpsx.NNPaddingMethod.SIZE_SAME}
    for k, p, o, d in zip(kernel, padding, output_padding, dilation):
        extent = d * (k - 1) + 1  # of 1: Full and Same alike
        policies &= {policy for policy, fits in ((mpsx.NNPaddingMethod.SIZE_FULL, p == 0 and o == 0),
                                                 (mpsx.NNPaddingMethod.SIZE_SAME, 2 * p == extent - 1 and o == 0))
                     if fits}
    return min(policies) if policies else _TransposePadding(padding, output_padding)


class _TransposePadding(mpsx.NNPadding):
    """A transposed convolution's result as PyTorch's ``padding`` and ``output_padding`` size and place it, which no
    padding method names, as an MPS program would write it: a custom policy over Full that leaves ``padding`` of
    the full result out at the top left, and ``padding - output_padding`` at the bottom right (more where
    output_padding exceeds padding, the window reaching past the source). A graph with one encodes every step
    (its encode calls back into Python)."""

    def __init__(self, padding, output_padding):
        self.padding, self.output_padding = tuple(padding), tuple(output_padding)

    def padding_method(self):
        return mpsx.NNPaddingMethod.CUSTOM | mpsx.NNPaddingMethod.SIZE_FULL

    def label(self):
        return f"PyTorch's transposed convolution padding {self.padding}, output_padding {self.output_padding}"

    def destination_image_descriptor_for_source_images(self, source_images, source_states, for_kernel,
                                                       suggested_descriptor):
        (top, left), (extra_y, extra_x) = self.padding, self.output_padding
        # Full's window centre, offset * stride + kernel offset in the expanded source, moved by the padding.
        x = for_kernel.offset.x * for_kernel.stride_in_pixels_x + for_kernel.kernel_offset_x + left
        y = for_kernel.offset.y * for_kernel.stride_in_pixels_y + for_kernel.kernel_offset_y + top
        for_kernel.offset = mpsx.Offset(x // for_kernel.stride_in_pixels_x, y // for_kernel.stride_in_pixels_y, 0)
        for_kernel.kernel_offset_x = x % for_kernel.stride_in_pixels_x
        for_kernel.kernel_offset_y = y % for_kernel.stride_in_pixels_y
        d = suggested_descriptor
        width, height = d.width - 2 * left + extra_x, d.height - 2 * top + extra_y
        if width < 1 or height < 1:
            source = source_images[0]
            raise ValueError(f"{self.label()}: a {source.width}x{source.height} source leaves a {width}x{height} "
                             f"result")
        return mpsx.ImageDescriptor(d.channel_format, width, height, d.feature_channels, d.number_of_images)


def _transpose_weights_from_torch(weight, groups):
    """A ConvTranspose2d's [in, out / groups, kh, kw] as the OHWI weights MPS's transpose convolves the expanded
    source with (no rotation): [out, kh, kw, in / groups], the window turned half round."""
    cin, per_group, kh, kw = weight.shape
    weight = weight.reshape(groups, cin // groups, per_group, kh, kw).transpose(0, 2, 3, 4, 1)
    return np.ascontiguousarray(weight.reshape(groups * per_group, kh, kw, cin // groups)[:, ::-1, ::-1, :])


def _transpose_weights_to_torch(weight, groups):
    """The inverse of _transpose_weights_from_torch."""
    cout, kh, kw, per_group = weight.shape
    weight = weight[:, ::-1, ::-1, :].reshape(groups, cout // groups, kh, kw, per_group).transpose(0, 4, 1, 2, 3)
    return np.ascontiguousarray(weight.reshape(groups * per_group, cout // groups, kh, kw))


class ImportedModel:
    """A model brought from PyTorch (``mpsx.from_torch``), built of the NNGraph nodes an MPS program would write.

    ``result_image``: the forward result's NNImageNode (dropout included); ``source_handles``: the input handles,
    labelled with the model's input names; ``data_sources``: a dict from the model's layer names (the prefix of
    their parameters' names, e.g. ``"layer1.0.conv1"``) to mpsx data sources filled from its parameters and
    buffers in MPS's layouts. ``inference_graph()`` is an NNGraph of the forward pass as the model's eval() runs
    it; ``state_dict()`` the parameters and buffers under PyTorch's names and layouts.

    MPS: none (mpsx)
    """

    _description = None  # set by __init__; a bare instance (__new__ alone) has none

    def __init__(self, description, device=None, optimizer=None):
        if not isinstance(description, _model_description.ModelDescription):
            raise TypeError(f"ImportedModel: expected a model description (mpsx.from_torch reads one), given "
                            f"{type(description).__name__}")
        if device is not None and not isinstance(device, mpsx.Device):
            raise TypeError(f"ImportedModel: expected a Device or None, given {type(device).__name__}")
        if optimizer is not None and not isinstance(optimizer, mpsx.NNOptimizer):
            raise TypeError(f"ImportedModel: expected an NNOptimizer or None, given {type(optimizer).__name__}")
        self._device = mpsx.Device() if device is None else device
        self._description = description
        self._source_handles = [mpsx.NNHandle(label) for _, label, _ in description.inputs]
        self._torch_names = {}  # data source name -> the PyTorch parameter and buffer names it holds
        # PyTorch's num_batches_tracked by name, carried: MPS's running averages count no batches.
        self._batches_tracked = dict(op.attributes["batches_tracked"] for op in description.operations
                                     if op.kind == "batch_norm" and op.attributes.get("batches_tracked"))
        self._make_data_sources(description.parameters, optimizer)

    @property
    def device(self):
        """The device of the data sources and graphs.

        MPS: none (mpsx)
        """
        return self._built()._device

    @property
    def result_image(self):
        """The forward result's NNImageNode, dropout included: what a loss node reads.

        MPS: none (mpsx)
        """
        return self._built()._result_image

    @property
    def source_handles(self):
        """The input handles, labelled with the model's input names, in the order of its inputs.

        MPS: none (mpsx)
        """
        return list(self._built()._source_handles)

    @property
    def data_sources(self):
        """The data sources by the model's layer names: ConvolutionWeights (convolutions and linear layers),
        BatchNormalizationWeights, GroupNormalizationWeights and InstanceNormalizationWeights, in MPS's layouts.

        MPS: none (mpsx)
        """
        return dict(self._built()._data_sources)

    def _built(self):
        if self._description is None:
            raise mpsx.StateError("ImportedModel: made without __init__; mpsx.from_torch makes one")
        return self

    def inference_graph(self, format=mpsx.DataType.FLOAT32, accumulator_precision=_FLOAT):
        """An NNGraph of the forward pass as the model's eval() runs it: batch normalization with the running
        statistics, no dropout. Its one source image is the model's input. ``accumulator_precision``: every
        convolution's and fully connected layer's (HALF lets cuda run them on TF32 tensor cores).

        MPS: none (mpsx)
        """
        self._built()
        _check_precision(accumulator_precision)
        result, products = self._build(training=False)
        for node in products:
            node.accumulator_precision = accumulator_precision
        graph = mpsx.NNGraph(self._device, result, True, format=format)
        self._graphs.add(graph)
        return graph

    def training_graph(self, loss_descriptor, optimizer=None, format=mpsx.DataType.FLOAT32,
                       accumulator_precision=_FLOAT):
        """A training NNGraph: the forward pass (batch statistics, dropout), a CNNLossNode of ``loss_descriptor``
        (a CNNLossDescriptor, or a PyTorch loss module: ``loss_from_torch``) whose labels have the handle "labels", the gradient nodes, and the updates of the trainable data sources on
        the command buffer. ``optimizer``: the data sources are made again from their current values, each with a
        copy of it (their optimizer state starts over), and ``result_image`` with them; None keeps them and their
        optimizers (from_torch's). ``accumulator_precision``: every convolution's and fully connected layer's
        (HALF lets cuda run them and their gradients on TF32 tensor cores). Encode it with
        ``encode_batch(cb, [images], [labels])``.

        MPS: none (mpsx)
        """
        self._built()
        _check_precision(accumulator_precision)
        if not isinstance(loss_descriptor, mpsx.CNNLossDescriptor):
            loss_descriptor = loss_from_torch(loss_descriptor, self._description.shapes[self._description.output][1])
        if optimizer is not None:
            if not isinstance(optimizer, mpsx.NNOptimizer):
                raise TypeError(f"training_graph: expected an NNOptimizer or None, given {type(optimizer).__name__}")
            self._make_data_sources({**self._description.parameters, **self.state_dict()}, optimizer)
        for node in self._products:
            node.accumulator_precision = accumulator_precision
        loss = mpsx.CNNLossNode(self._result_image, loss_descriptor)
        loss.input_labels.handle = mpsx.NNHandle("labels")
        # Every terminal gradient filter: a source image read by two filters leaves two (nothing sums them).
        termini = [node.result_image for node in loss.training_graph()]
        graph = mpsx.NNGraph(self._device, result_images=termini, results_are_needed=[False] * len(termini),
                             format=format)
        self._graphs.add(graph)
        return graph

    def state_dict(self):
        """The data sources' current values as numpy arrays under the model's parameter and buffer names, in
        PyTorch's layouts (OIHW convolution weights, [in, out / groups, kh, kw] transposed convolution weights,
        [out, C * H * W] linear weights). Batch normalization's ``num_batches_tracked`` is carried as read or
        loaded, not counted: MPS's running averages count no batches (PyTorch reads it only with momentum None,
        which from_torch refuses).

        MPS: none (mpsx)
        """
        out = {}
        for name, source in self._built()._data_sources.items():
            names = self._torch_names[name]
            if isinstance(source, mpsx.ConvolutionWeights):
                out[names["weight"]] = names["to_torch"](source.weights())
                if "bias" in names:
                    out[names["bias"]] = np.asarray(source.bias_terms(), np.float32).copy()
            elif isinstance(source, mpsx.BatchNormalizationWeights):
                for key, value in (("weight", source.gamma()), ("bias", source.beta()),
                                   ("running_mean", source.mean()), ("running_var", source.variance())):
                    if names[key]:  # affine=False: no weight and bias
                        out[names[key]] = np.asarray(value, np.float32).copy()
            else:
                for key, value in (("weight", source.gamma()), ("bias", source.beta())):
                    if names[key]:
                        out[names[key]] = np.asarray(value, np.float32).copy()
        out.update((name, np.array(count, np.int64)) for name, count in self._batches_tracked.items())
        return out

    def load_state_dict(self, state_dict):
        """Loads ``state_dict`` (what ``state_dict()`` returns, or the PyTorch module's: numpy arrays or tensors under
        the model's names and PyTorch's layouts) into the data sources, and reloads the graphs made over them
        (``reload_from_data_sources``), which use the values from their next encode: the graphs made since the
        data sources were (by from_torch, or by ``training_graph`` given an optimizer). Every name of ``state_dict()``
        must be there but ``num_batches_tracked`` (kept as it is where not given), and no other; the values keep
        their shapes. Checked whole before anything is loaded. The optimizers' vectors
        stay, as PyTorch's module.load_state_dict leaves its optimizer's.

        MPS: none (mpsx)
        """
        current = self._built().state_dict()
        if not hasattr(state_dict, "items"):
            raise TypeError(f"load_state_dict: expected a dict of arrays, given {type(state_dict).__name__}")
        given = {name: value for name, value in state_dict.items() if name not in self._batches_tracked}
        missing = sorted(set(current) - set(given) - set(self._batches_tracked))
        unexpected = sorted(set(given) - set(current))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        values = {}
        for name, value in given.items():
            value = _host_array(value).astype(np.float32, copy=False)
            if value.shape != current[name].shape:
                raise ValueError(f"load_state_dict: expected {name} of shape {current[name].shape}, given "
                                 f"{value.shape}")
            values[name] = value
        counts = {}
        for name in self._batches_tracked.keys() & state_dict.keys():
            count = _host_array(state_dict[name])
            if count.size != 1 or not np.issubdtype(count.dtype, np.integer):
                raise ValueError(f"load_state_dict: expected {name} one integer, given {count.dtype} of shape "
                                 f"{count.shape}")
            counts[name] = int(count)
        self._batches_tracked.update(counts)
        for name, source in self._data_sources.items():
            names = self._torch_names[name]
            if isinstance(source, mpsx.ConvolutionWeights):
                weights = names["from_torch"](values[names["weight"]])
                source.set_weights_and_biases(weights, values[names["bias"]] if "bias" in names else None)
                continue
            if names["weight"]:  # affine=False: gamma and beta stay 1 and 0
                source.set_gamma_and_beta(values[names["weight"]], values[names["bias"]])
            if isinstance(source, mpsx.BatchNormalizationWeights):
                source.set_mean_and_variance(values[names["running_mean"]], values[names["running_var"]])
        for graph in list(self._graphs):
            graph.reload_from_data_sources()

    def _make_data_sources(self, parameters, optimizer):
        """The data sources from `parameters` (PyTorch's names and layouts), each trainable one with a copy of
        `optimizer` (Adam counts its steps per optimizer), and the forward nodes over them."""
        self._data_sources = {}
        self._graphs = weakref.WeakSet()  # the graphs over these data sources, which load_state_dict reloads
        for op in self._description.operations:
            copy = None if optimizer is None else optimizer.copy()
            if op.kind in ("conv", "conv_transpose", "linear"):
                self._convolution_weights(op, parameters, copy)
            elif op.kind == "batch_norm":
                self._batch_normalization_weights(op, parameters, copy)
            elif op.kind == "group_norm":
                self._group_normalization_weights(op, parameters, copy)
        self._result_image, self._products = self._build(training=True)

    def _convolution_weights(self, op, parameters, optimizer):
        a = op.attributes
        weight = parameters[a["weight"]]
        if op.kind == "linear":
            c, h, w = a["source_chw"]
            descriptor = mpsx.CNNConvolutionDescriptor(w, h, c, weight.shape[0])
            to_torch = lambda weights: weights_to_torch(weights, linear=True)  # noqa: E731
        else:
            kh, kw = weight.shape[2:]
            (sy, sx), (dy, dx), groups = a["stride"], a["dilation"], a["groups"]
            # A Conv2d's weight is [out, in / groups, ...], a ConvTranspose2d's [in, out / groups, ...].
            cin, cout = ((weight.shape[1] * groups, weight.shape[0]) if op.kind == "conv" else
                         (weight.shape[0], weight.shape[1] * groups))
            descriptor = mpsx.CNNConvolutionDescriptor(kw, kh, cin, cout, sx, sy, dx, dy, groups)
            to_torch = weights_to_torch
        if op.kind == "conv_transpose":
            from_torch = lambda weights: _transpose_weights_from_torch(weights, groups)  # noqa: E731
            to_torch = lambda weights: _transpose_weights_to_torch(weights, groups)  # noqa: E731
        else:
            from_torch = lambda weights: weights_from_torch(descriptor, weights)  # noqa: E731
        bias = parameters.get(a.get("bias"))
        self._data_sources[op.name] = mpsx.ConvolutionWeights(descriptor, from_torch(weight), bias,
                                                              optimizer=optimizer, label=op.name)
        self._torch_names[op.name] = {"weight": a["weight"], "from_torch": from_torch, "to_torch": to_torch,
                                      **({"bias": a["bias"]} if bias is not None else {})}

    def _batch_normalization_weights(self, op, p, optimizer):
        a = op.attributes
        channels = self._description.shapes[op.inputs[0]][1]
        gamma = p[a["weight"]] if a.get("weight") else np.ones(channels, np.float32)
        beta = p[a["bias"]] if a.get("bias") else np.zeros(channels, np.float32)
        optimizer = optimizer if a.get("weight") else None  # affine=False: gamma and beta stay 1 and 0
        self._data_sources[op.name] = mpsx.BatchNormalizationWeights(
            gamma, beta, p[a["running_mean"]], p[a["running_var"]], a["epsilon"], a["momentum"],
            optimizer, label=op.name)
        self._torch_names[op.name] = {key: a[key] for key in ("weight", "bias", "running_mean", "running_var")}

    def _group_normalization_weights(self, op, p, optimizer):
        a = op.attributes
        channels = self._description.shapes[op.inputs[0]][1]
        gamma = p[a["weight"]] if a["weight"] else np.ones(channels, np.float32)
        beta = p[a["bias"]] if a["bias"] else np.zeros(channels, np.float32)
        optimizer = optimizer if a["weight"] else None  # affine=False: gamma and beta stay 1 and 0
        if a["groups"] is None:
            source = mpsx.InstanceNormalizationWeights(gamma, beta, a["epsilon"], optimizer, label=op.name)
        else:
            source = mpsx.GroupNormalizationWeights(gamma, beta, a["groups"], a["epsilon"], optimizer, label=op.name)
        self._data_sources[op.name] = source
        self._torch_names[op.name] = {key: a[key] for key in ("weight", "bias")}

    def _build(self, training):
        """The nodes of the forward pass: its result image, and its convolution, transposed convolution and fully
        connected nodes."""
        images = {value: mpsx.NNImageNode(handle) for (value, _, _), handle in zip(self._description.inputs,
                                                                                   self._source_handles)}
        products = []
        for op in self._description.operations:
            sources = [images[v] for v in op.inputs]
            images[op.output] = self._node(op, sources, training, products)
        return images[self._description.output], products

    def _node(self, op, sources, training, products):
        """The result image of the node (or nodes) of one operation; a node of products appended to them."""
        a, shapes = op.attributes, self._description.shapes
        kind = op.kind
        if kind in ("conv", "max_pool", "avg_pool"):
            kernel, stride = _pair(a["kernel"]), _pair(a["stride"])
            padding, dilation = _pair(a.get("padding", 0)), _pair(a.get("dilation", 1))
            source = sources[0]
            policy = _policy(kernel, stride, padding, dilation)
            # PyTorch's average pooling divides by the taps in the padding too (count_include_pad), MPS's by
            # the taps inside the image: zeros padded first make them the same.
            pad_first = policy is None or (kind == "avg_pool" and a["count_include_pad"] and any(padding))
            if pad_first and any(padding):
                if kind == "max_pool":  # a tap in the padding never wins: MPS's max skips taps outside the image
                    raise UnsupportedOperationError(
                        f"{op.name}: max pooling with padding {padding} over a {kernel} window at stride {stride}: "
                        f"only no padding, or half the window, is expressible")
                source = mpsx.NNPadNode(source, (padding[1], padding[0], 0), (padding[1], padding[0], 0),
                                        mpsx.ImageEdgeMode.ZERO).result_image
            if pad_first:
                policy = mpsx.NNPaddingMethod.SIZE_VALID_ONLY
            if kind == "conv":
                node = mpsx.CNNConvolutionNode(source, self._data_sources[op.name])
                products.append(node)
            else:
                cls = mpsx.CNNPoolingMaxNode if kind == "max_pool" else mpsx.CNNPoolingAverageNode
                node = cls(source, kernel_width=kernel[1], kernel_height=kernel[0], stride_in_pixels_x=stride[1],
                           stride_in_pixels_y=stride[0])
            node.padding_policy = policy
            return node.result_image
        if kind == "conv_transpose":
            policy = _transpose_policy(_pair(a["kernel"]), _pair(a["padding"]), _pair(a["output_padding"]),
                                       _pair(a["dilation"]))
            node = mpsx.CNNConvolutionTransposeNode(sources[0], None, self._data_sources[op.name])
            node.padding_policy = policy
            products.append(node)
            return node.result_image
        if kind == "linear":
            node = mpsx.CNNFullyConnectedNode(sources[0], self._data_sources[op.name])
            node.padding_policy = mpsx.NNPaddingMethod.SIZE_VALID_ONLY
            products.append(node)
            return node.result_image
        if kind == "batch_norm":
            return mpsx.CNNBatchNormalizationNode(sources[0], self._data_sources[op.name]).result_image
        if kind == "group_norm":
            source = self._data_sources[op.name]
            cls = mpsx.CNNInstanceNormalizationNode if a["groups"] is None else mpsx.CNNGroupNormalizationNode
            node = cls(sources[0], source)
            if source.optimizer is None:  # affine=False, or no optimizer: nothing to update
                node.training_style = mpsx.NNTrainingStyle.NONE
            return node.result_image
        if kind == "lrn":  # MPS's cross-channel normalization is PyTorch's local_response_norm, k as delta
            node = mpsx.CNNCrossChannelNormalizationNode(sources[0], a["size"])
            node.alpha, node.beta, node.delta = a["alpha"], a["beta"], a["k"]
            return node.result_image
        if kind == "neuron":
            return mpsx.CNNNeuronNode(sources[0], _neuron_descriptor(a["activation"], **a["parameters"])).result_image
        if kind == "global_avg_pool":
            _, _, h, w = shapes[op.inputs[0]]
            node = mpsx.CNNPoolingAverageNode(sources[0], kernel_width=w, kernel_height=h, stride_in_pixels_x=w,
                                              stride_in_pixels_y=h)
            node.padding_policy = mpsx.NNPaddingMethod.SIZE_VALID_ONLY
            return node.result_image
        if kind == "flatten":  # the fully connected node reads the image as PyTorch's flattened (C, H, W)
            return sources[0]
        if kind in ("add", "sub", "mul"):
            cls = {"add": mpsx.NNAdditionNode, "sub": mpsx.NNSubtractionNode, "mul": mpsx.NNMultiplicationNode}[kind]
            return cls(sources[0], sources[1]).result_image
        if kind == "concat":
            return mpsx.NNConcatenationNode(sources).result_image
        if kind == "upsample":
            sy, sx = a["scale"]
            if a["mode"] == "nearest":
                return mpsx.CNNUpsamplingNearestNode(sources[0], sx, sy).result_image
            return mpsx.CNNUpsamplingBilinearNode(sources[0], sx, sy, a["align_corners"]).result_image
        if kind == "dropout":
            if not training or a["p"] == 0:
                return sources[0]
            return mpsx.CNNDropoutNode(sources[0], 1 - a["p"]).result_image
        if kind == "softmax":
            return mpsx.CNNSoftMaxNode(sources[0]).result_image
        if kind == "log_softmax":
            return mpsx.CNNLogSoftMaxNode(sources[0]).result_image
        raise UnsupportedOperationError(f"{op.name}: no NNGraph node for the operation {kind!r}")


def from_torch(module, example_input, device=None, optimizer=None):
    """An ImportedModel of a ``torch.nn.Module``, read through ``torch.fx`` with ``example_input`` (one tensor, or a
    tuple of them, N x C x H x W) for the shapes. ``optimizer``: the NNOptimizer of its trainable layers' data
    sources (None: no updates). UnsupportedOperationError names an operation mpsx cannot express and its node.

    MPS: none (mpsx)
    """
    from mpsx._torch_import import describe
    return ImportedModel(describe(module, example_input), device, optimizer)


def from_onnx(model_or_path, device=None, optimizer=None):
    """An ImportedModel of an ONNX model (an ``onnx.ModelProto`` or a path; needs the ``onnx`` package, the
    ``[onnx]`` extra), of fixed input sizes, its shapes inferred by onnx. Parameters keep the model's initializer
    names; a layer's data source is named by its weight's name less ".weight" (PyTorch's exporter names them so),
    else by its node. ``optimizer``: as from_torch's. UnsupportedOperationError names an operation mpsx cannot
    express and its node.

    MPS: none (mpsx)
    """
    from mpsx._onnx_import import describe
    return ImportedModel(describe(model_or_path), device, optimizer)


def to_onnx(model, path=None):
    """The forward pass of an ImportedModel, as its eval() runs it (running statistics, no dropout), as an ONNX
    model (opset 17; the onnx package) whose initializers are the data sources' current values under the model's
    parameter names; written to ``path`` too where given. UnsupportedOperationError for what ONNX's operations
    cannot say (group normalization, Softplus with beta other than 1, GELU).

    MPS: none (mpsx)
    """
    if not isinstance(model, ImportedModel):
        raise TypeError(f"to_onnx: expected an ImportedModel, given {type(model).__name__}")
    from mpsx._onnx_export import model_proto
    proto = model_proto(model._built()._description, model.state_dict())
    if path is not None:
        import onnx
        onnx.save(proto, path)
    return proto


def loss_from_torch(loss, number_of_classes=1):
    """The CNNLossDescriptor of a PyTorch loss module: ``CrossEntropyLoss`` as softmax cross entropy (its
    label_smoothing spread over ``number_of_classes``, the result's feature channels), ``BCEWithLogitsLoss`` as
    sigmoid cross entropy, ``MSELoss``, ``L1Loss``, ``HuberLoss`` (delta) and ``SmoothL1Loss`` (Huber of delta
    beta, weight 1 / beta); reduction "mean" and "sum" over the whole batch (``reduce_across_batch``), "none" per
    value. Labels are CNNLossLabels of the result's shape (one-hot for the cross entropy's class indices).
    UnsupportedOperationError for other losses, class weights and reductions.

    MPS: none (mpsx)
    """
    try:
        import torch
    except ImportError:  # then it is no torch module
        torch = None
    if torch is None or not isinstance(loss, torch.nn.Module):
        raise TypeError(f"loss_from_torch: expected a CNNLossDescriptor or a torch.nn loss module, given {type(loss).__name__}")
    from mpsx._torch_import import loss_descriptor
    descriptor = loss_descriptor(loss)
    descriptor.number_of_classes = number_of_classes
    return descriptor

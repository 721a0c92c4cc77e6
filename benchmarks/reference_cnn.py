"""The reference CNN, hand-encoded MPS style, through an NNGraph, and the same
model in PyTorch. Every performance figure and the examples use it.

Input N x 3 x 32 x 32; four 3x3 convolutions (3->32, 32->32, 32->64, 64->64,
"same" padding, bias), each followed by batch normalization with training
statistics and ReLU; 2x2 max pooling after the second and the fourth; a fully
connected layer 64*8*8 -> 10; softmax cross-entropy, mean over the batch; SGD
with momentum 0.9 on every weight, bias, gamma and beta (or Adam, one
optimizer per layer's weights and biases and per gamma and beta).
"""

import time

import numpy as np

import mpsx

CHANNELS = [(3, 32), (32, 32), (32, 64), (64, 64)]
CLASSES = 10
EPSILON = 1e-5


def initial_parameters(seed=0):
    """PyTorch's default initialization, drawn with numpy: convolution and
    fully connected weights (OHWI) and biases uniform in +-1/sqrt(fan_in),
    gamma 1, beta 0."""
    rng = np.random.default_rng(seed)
    p = {}
    for i, (cin, cout) in enumerate(CHANNELS):
        bound = 1 / np.sqrt(cin * 9)
        p[f"conv{i}.weight"] = rng.uniform(-bound, bound, (cout, 3, 3, cin)).astype(np.float32)
        p[f"conv{i}.bias"] = rng.uniform(-bound, bound, cout).astype(np.float32)
        p[f"bn{i}.gamma"] = np.ones(cout, np.float32)
        p[f"bn{i}.beta"] = np.zeros(cout, np.float32)
    bound = 1 / np.sqrt(64 * 8 * 8)
    p["fc.weight"] = rng.uniform(-bound, bound, (CLASSES, 8, 8, 64)).astype(np.float32)
    p["fc.bias"] = rng.uniform(-bound, bound, CLASSES).astype(np.float32)
    return p


def random_batch(batch_size, seed=1):
    """Random images and one-hot labels (N, 10, 1, 1), as numpy arrays."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch_size, 3, 32, 32)).astype(np.float32)
    labels = np.zeros((batch_size, CLASSES, 1, 1), np.float32)
    labels[np.arange(batch_size), rng.integers(0, CLASSES, batch_size)] = 1
    return images, labels


class TrainingSteps:
    """The step plumbing both mpsx models share: two input slots, so that
    the host writes one while the last step still reads the other; a
    recorded replayable step per slot; and the loss of the last step. A
    model sets self.device and self.batch_size (and may set
    self.image_format, float32 by default), calls _inputs() and has
    encode_step(cb, images, labels)."""

    image_format = mpsx.DataType.FLOAT32

    def _inputs(self):
        self.inputs = [mpsx.ImageBatch(self.device, mpsx.ImageDescriptor(
            channel_format=self.image_format, width=32, height=32, feature_channels=3,
            number_of_images=self.batch_size)) for _ in range(2)]
        self.slot = 0
        self.pending = [None, None]
        self.last = None

    def train_step(self, images, labels):
        """One step on numpy images (N, 3, 32, 32) and one-hot labels (N, 10, 1, 1).
        Returns without waiting; loss() waits and reads the step's loss."""
        slot = self.inputs[self.slot]
        if self.pending[self.slot] is not None:
            self.pending[self.slot].wait_until_completed()
        slot.write(images)
        cb = self.device.command_queue.command_buffer()
        loss_labels = mpsx.CNNLossLabels(self.device, labels)
        self.encode_step(cb, slot, loss_labels)
        loss_labels.synchronize(cb)
        cb.commit()
        self.pending[self.slot] = cb
        self.slot ^= 1
        self.last = (cb, loss_labels)

    def record_step(self):
        """Encodes one training step per input slot onto a replayable command
        buffer, over that slot's image batch and labels, which replay_step()
        writes in place."""
        self.recorded = []
        for images in self.inputs:
            labels = mpsx.ImageBatch(self.device, mpsx.ImageDescriptor(width=1, height=1, feature_channels=CLASSES,
                                                                       number_of_images=self.batch_size))
            loss_labels = mpsx.CNNLossLabels(self.device, labels)
            cb = self.device.command_queue.command_buffer(replayable=True)
            self.encode_step(cb, images, loss_labels)
            loss_labels.synchronize(cb)
            self.recorded.append((cb, loss_labels, labels))
        self.slot = 0

    def replay_step(self, images, labels):
        """One step of a recorded command buffer on new numpy images and
        labels, the slots taking turns: the host writes one slot's inputs
        while the last step, on the other slot, still runs. Returns without
        waiting; loss() waits and reads the loss."""
        images_batch = self.inputs[self.slot]
        cb, loss_labels, labels_batch = self.recorded[self.slot]
        first = cb.status == "not_enqueued"
        if not first:
            cb.wait_until_completed()  # its last replay still reads the slot's inputs
        images_batch.write(images)
        labels_batch.write(labels)
        cb.commit() if first else cb.replay()
        self.slot ^= 1
        self.last = (cb, loss_labels)

    def wait(self):
        if self.last:
            self.last[0].wait_until_completed()

    def loss(self):
        """The loss of the last step."""
        cb, labels = self.last
        cb.wait_until_completed()
        if cb.status != "completed":
            raise cb.error
        return float(labels.loss_image().to_numpy()[0, 0, 0, 0])


def optimizer_factory(device, optimizer, learning_rate, momentum):
    """What makes the optimizer of one set of trained values: SGD with momentum, or Adam."""
    if optimizer == "sgd":
        return lambda: mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=learning_rate,
                                                                 momentum_scale=momentum)
    if optimizer == "adam":
        return lambda: mpsx.NNOptimizerAdam(device, learning_rate=learning_rate)
    raise ValueError(f"optimizer must be 'sgd' or 'adam', given {optimizer!r}")


class ReferenceCNN(TrainingSteps):
    """The reference CNN trained by hand-encoded kernels: one command buffer
    per step holds the forward pass, the loss, the backward pass and the SGD
    (or Adam) updates, which reload the kernels' weights on the command
    buffer. state_dict() / load_state_dict() checkpoint what training
    changes, as a dict of mpsx objects (mpsx.save(model.state_dict(), path)).
    image_format: the input images' format, which every image of the step
    follows (float16: MPS's fast path)."""

    def __init__(self, device, batch_size, learning_rate=0.001, momentum=0.9, seed=0, accumulator_precision="float",
                 optimizer="sgd", process_group=None, image_format=mpsx.DataType.FLOAT32):
        self.device, self.process_group, self.image_format = device, process_group, image_format
        self.batch_size = batch_size
        self.initial_parameters = p = initial_parameters(seed)
        self.learning_rate, self.momentum = learning_rate, momentum
        relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
        make_optimizer = optimizer_factory(device, optimizer, learning_rate, momentum)
        # SGD keeps nothing between steps, so one serves every update; each Adam counts its own steps.
        self.sgd = make_optimizer()
        self.optimizers = {}
        for name in [f"{kind}{i}" for i in range(len(CHANNELS)) for kind in ("conv", "bn")] + ["fc"]:
            self.optimizers[name] = self.sgd if optimizer == "sgd" else make_optimizer()
        # The optimizer's vectors of each update, [weights, biases] or [gamma, beta], by kind.
        self.vector_kinds = ("momentum",) if optimizer == "sgd" else ("momentum", "velocity")
        self.vectors = {}
        self.layers = []
        cb = device.command_queue.command_buffer()
        for i, (cin, cout) in enumerate(CHANNELS):
            source = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, cin, cout), p[f"conv{i}.weight"],
                                             p[f"conv{i}.bias"])
            bn_source = mpsx.BatchNormalizationWeights(p[f"bn{i}.gamma"], p[f"bn{i}.beta"], np.zeros(cout, np.float32),
                                                       np.ones(cout, np.float32), EPSILON)
            conv = mpsx.CNNConvolution(device, source)
            conv.accumulator_precision_option = accumulator_precision
            bn = mpsx.CNNBatchNormalization(device, bn_source, fused_neuron_descriptor=relu)
            self.layers.append(dict(
                conv=conv, conv_gradient=mpsx.CNNConvolutionGradient(device, source), bn=bn,
                statistics=mpsx.CNNBatchNormalizationStatistics(device),
                statistics_gradient=mpsx.CNNBatchNormalizationStatisticsGradient(device, relu),
                bn_gradient=mpsx.CNNBatchNormalizationGradient(device, relu),
                weights=conv.export_weights_and_biases(cb),
                gamma_and_beta=mpsx.CNNNormalizationGammaAndBetaState(device, p[f"bn{i}.gamma"], p[f"bn{i}.beta"])))
            self._add_vectors(f"conv{i}", cout * 9 * cin, cout)
            self._add_vectors(f"bn{i}", cout, cout)
        fc_source = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(8, 8, 64, CLASSES), p["fc.weight"],
                                            p["fc.bias"])
        self.layers[0]["conv_gradient"].gradient_option = \
            mpsx.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS
        self.fc = mpsx.CNNFullyConnected(device, fc_source)
        self.fc.accumulator_precision_option = accumulator_precision
        self.fc_gradient = mpsx.CNNFullyConnectedGradient(device, fc_source)
        self.fc_weights = self.fc.export_weights_and_biases(cb)
        self._add_vectors("fc", CLASSES * 64 * 64, CLASSES)
        cb.commit()
        cb.wait_until_completed()
        self.pool = mpsx.CNNPoolingMax(device, 2, 2)
        self.pool_gradient = mpsx.CNNPoolingMaxGradient(device, 2, 2)
        descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
        descriptor.reduce_across_batch = True
        self.cross_entropy = mpsx.CNNLoss(device, descriptor)
        self._inputs()

    def _add_vectors(self, name, *counts):
        self.vectors[name] = {kind: [mpsx.Vector(self.device, n) for n in counts] for kind in self.vector_kinds}

    def _encode_update(self, cb, name, **states):
        vectors = {f"input_{kind}_vectors": v for kind, v in self.vectors[name].items()}
        self.optimizers[name].encode(cb, **states, **vectors)

    def state_dict(self):
        """What training changes, by name, once the last step has completed: the weights,
        gamma and beta and running statistics the kernels use, the optimizers (Adam's time
        step) and their vectors: what a checkpoint saves."""
        self.wait()
        state = {"optimizers": self.optimizers, "vectors": self.vectors, "fc.weights": self.fc_weights}
        cb = self.device.command_queue.command_buffer()
        for i, layer in enumerate(self.layers):
            source = layer["bn"].data_source  # its host mean and variance follow the kernel's updates
            state[f"conv{i}.weights"] = layer["weights"]
            state[f"bn{i}.gamma_and_beta"] = layer["gamma_and_beta"]
            state[f"bn{i}.mean_and_variance"] = mpsx.CNNNormalizationMeanAndVarianceState(
                self.device, source.mean(), source.variance())
        # The updates wrote them in place without synchronize; a later command buffer makes them readable.
        for vectors in self.vectors.values():
            for vector in sum(vectors.values(), []):
                vector.synchronize(cb)
        for name in state:
            if name.endswith(("weights", "gamma_and_beta")):
                state[name].synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        return state

    def load_state_dict(self, state):
        """Continues from what state_dict() returned (or mpsx.load of it on this model's device):
        the kernels reload its values and the updates use its optimizers and vectors."""
        self.wait()
        cb = self.device.command_queue.command_buffer()
        self.optimizers, self.vectors = dict(state["optimizers"]), dict(state["vectors"])
        self.fc_weights = state["fc.weights"]
        self.fc.reload_weights_and_biases(cb, self.fc_weights)
        for i, layer in enumerate(self.layers):
            layer["weights"] = state[f"conv{i}.weights"]
            layer["conv"].reload_weights_and_biases(cb, layer["weights"])
            layer["gamma_and_beta"] = state[f"bn{i}.gamma_and_beta"]
            layer["bn"].reload_gamma_and_beta(cb, layer["gamma_and_beta"])
            layer["bn"].reload_mean_and_variance(cb, state[f"bn{i}.mean_and_variance"])
        cb.commit()
        cb.wait_until_completed()
        if cb.status != "completed":
            raise cb.error

    def encode_step(self, cb, images, labels):
        """Encodes one training step onto cb."""
        records, x = [], images
        for i, layer in enumerate(self.layers):
            conv_input = x
            y, conv_states = layer["conv"].encode_batch(cb, x, destination_states=True)
            bn_state = layer["bn"].result_state(y)
            layer["statistics"].encode_batch(cb, y, bn_state)
            x = layer["bn"].encode_batch(cb, y, batch_normalization_state=bn_state)  # with the fused ReLU
            pooling = None
            if i % 2 == 1:
                pooling = (x,)
                x, pool_states = self.pool.encode_batch(cb, x, destination_states=True)
                pooling += (pool_states,)
            records.append((conv_input, conv_states, y, bn_state, pooling))
        logits, fc_states = self.fc.encode_batch(cb, x, destination_states=True)
        gradient = self.cross_entropy.encode_batch(cb, logits, labels)
        gradient = self.fc_gradient.encode_batch(cb, gradient, x, fc_states)
        # Each update follows its gradient; with a process group they wait for one all-reduce of them all.
        updates = []
        update = updates.append if self.process_group else lambda u: u[1]()
        update(([fc_states[0]], lambda: self._update_convolution(cb, "fc", self.fc, fc_states, self.fc_weights)))
        for i, layer, (conv_input, conv_states, y, bn_state, pooling) in reversed(list(zip(
                range(len(self.layers)), self.layers, records))):
            if pooling:
                gradient = self.pool_gradient.encode_batch(cb, gradient, pooling[0], pooling[1])
            layer["statistics_gradient"].encode_batch(cb, gradient, y, bn_state)
            gradient = layer["bn_gradient"].encode_batch(cb, gradient, y, bn_state)
            # The first convolution's source needs no gradient (weights and bias only).
            gradient = layer["conv_gradient"].encode_batch(cb, gradient, conv_input, conv_states)
            update(([conv_states[0], bn_state], lambda i=i, layer=layer, conv_states=conv_states, bn_state=bn_state:
                    self._update_layer(cb, i, layer, conv_states, bn_state)))
        if updates:
            self.process_group.all_reduce(cb, [s for states, _ in updates for s in states], op="mean")
            for _, run in updates:
                run()

    def _update_layer(self, cb, i, layer, conv_states, bn_state):
        self._update_convolution(cb, f"conv{i}", layer["conv"], conv_states, layer["weights"])
        self._encode_update(cb, f"bn{i}", batch_normalization_state=bn_state, result_state=layer["gamma_and_beta"])
        layer["bn"].reload_gamma_and_beta(cb, layer["gamma_and_beta"])
        layer["bn"].encode_mean_and_variance_update(cb, bn_state)

    def _update_convolution(self, cb, name, conv, states, weights):
        self._encode_update(cb, name, convolution_gradient_state=states[0], convolution_source_state=weights,
                            result_state=weights)
        conv.reload_weights_and_biases(cb, weights)

class HostSGD(mpsx.CNNConvolutionDataSource):
    """Convolution weights in numpy, trained by SGD (with momentum) in the
    data source's host update: training style CPU."""

    def __init__(self, descriptor, weights, biases, learning_rate=0.001, momentum=0.0):
        self._descriptor, self.w, self.b = descriptor, weights.copy(), biases.copy()
        self.learning_rate, self.momentum = learning_rate, momentum
        self.mw, self.mb = np.zeros_like(self.w), np.zeros_like(self.b)

    def descriptor(self):
        return self._descriptor

    def weights(self):
        return self.w

    def bias_terms(self):
        return self.b

    def update_with_gradient_state(self, gradient_state, source_state):
        # MPS's momentum: m = momentum * m + learning_rate * g; value -= m
        self.mw = self.momentum * self.mw + self.learning_rate * \
            gradient_state.gradient_for_weights.to_numpy().reshape(self.w.shape)
        self.mb = self.momentum * self.mb + self.learning_rate * gradient_state.gradient_for_biases.to_numpy()
        self.w = source_state.weights.to_numpy().reshape(self.w.shape) - self.mw
        self.b = source_state.biases.to_numpy() - self.mb
        return True


class GraphReferenceCNN(TrainingSteps):
    """The reference CNN as an NNGraph made with training_graph: each step is
    one native call. Convolution weights are ConvolutionWeights training on
    the device with SGD momentum (training style GPU), or what
    data_source(descriptor, weights, biases) makes (with `style`);
    normalization weights train on the device. `format` is the graph's
    image format (float32 here; MPS's default is float16).

    style "none": every trainable node has training style NONE, so the graph
    updates nothing. It exports the states its gradient nodes fill (each
    convolution's and the fully connected layer's convolution_gradient_state,
    each batch normalization's result state), and encode_step encodes the SGD
    momentum updates from them by hand on the same command buffer after the
    graph, reloading the graph's kernels (state.convolution,
    state.batch_normalization) on the command buffer, as ReferenceCNN does:
    the step replays like the others.

    optimizer: "sgd" (with momentum) or "adam", one per data source. The data
    sources (ConvolutionWeights and BatchNormalizationWeights, with their
    optimizers and optimizer state) checkpoint the model: state_dict() gives
    them by name once the last step has completed, and
    GraphReferenceCNN(..., sources=mpsx.load(path, device)) continues from
    them."""

    def __init__(self, device, batch_size, learning_rate=0.001, momentum=0.9, seed=0, accumulator_precision="float",
                 data_source=None, style="gpu", format=mpsx.DataType.FLOAT32, optimizer="sgd", sources=None,
                 process_group=None):
        if style not in ("gpu", "cpu", "none"):
            raise ValueError(f"style must be 'gpu', 'cpu' or 'none', given {style!r}")
        if style == "none" and (data_source is not None or sources is not None):
            raise ValueError("style 'none' updates the weights by hand from the states the graph exports; "
                             f"given data_source={data_source!r}, sources={sources!r}")
        self.device, self.batch_size, self.style = device, batch_size, style
        self.initial_parameters = p = initial_parameters(seed)
        sgd = optimizer_factory(device, optimizer, learning_rate, momentum)
        if style == "none" and optimizer != "sgd":
            raise ValueError(f"style 'none' trains with SGD, given optimizer={optimizer!r}")
        if style == "none":
            data_source = lambda descriptor, w, b: mpsx.ConvolutionWeights(descriptor, w, b)
            bn_source = lambda g, b: mpsx.BatchNormalizationWeights(g, b, np.zeros(len(g), np.float32),
                                                                    np.ones(len(g), np.float32), EPSILON)
        else:
            if data_source is None:
                data_source = lambda descriptor, w, b: mpsx.ConvolutionWeights(descriptor, w, b, optimizer=sgd())
            bn_source = lambda g, b: mpsx.BatchNormalizationWeights(g, b, np.zeros(len(g), np.float32),
                                                                    np.ones(len(g), np.float32), EPSILON,
                                                                    optimizer=sgd())
        self.sources = {}

        def source(name, make, *arguments):
            self.sources[name] = sources[name] if sources is not None else make(*arguments)
            return self.sources[name]

        relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
        x = mpsx.NNImageNode(mpsx.NNHandle("images"))
        trainable, exported = [], {}
        for i, (cin, cout) in enumerate(CHANNELS):
            conv = mpsx.CNNConvolutionNode(x, source(f"conv{i}", data_source,
                                                     mpsx.CNNConvolutionDescriptor(3, 3, cin, cout),
                                                     p[f"conv{i}.weight"], p[f"conv{i}.bias"]))
            bn = mpsx.CNNBatchNormalizationNode(conv.result_image,
                                                source(f"bn{i}", bn_source, p[f"bn{i}.gamma"], p[f"bn{i}.beta"]))
            x = mpsx.CNNNeuronNode(bn.result_image, relu).result_image
            if i % 2 == 1:
                x = mpsx.CNNPoolingMaxNode(x, 2).result_image
            trainable.append(conv)
            exported[f"conv{i}"] = (conv.convolution_gradient_state, (p[f"conv{i}.weight"], p[f"conv{i}.bias"]))
            exported[f"bn{i}"] = (bn.result_state, (p[f"bn{i}.gamma"], p[f"bn{i}.beta"]))
            if style == "none":
                bn.training_style = "none"
        fc = mpsx.CNNFullyConnectedNode(x, source("fc", data_source, mpsx.CNNConvolutionDescriptor(8, 8, 64, CLASSES),
                                                  p["fc.weight"], p["fc.bias"]))
        exported["fc"] = (fc.convolution_gradient_state, (p["fc.weight"], p["fc.bias"]))
        for node in trainable + [fc]:
            node.training_style = style
            node.accumulator_precision = accumulator_precision
        descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
        descriptor.reduce_across_batch = True
        loss = mpsx.CNNLossNode(fc.result_image, descriptor)
        loss.input_labels.handle = mpsx.NNHandle("labels")
        if style == "none":
            for label, (state, _) in exported.items():
                state.export_from_graph = True
                state.handle = mpsx.NNHandle(label)
            self.sgd = sgd()
        self.graph = mpsx.NNGraph(device, loss.training_graph()[0].result_image, False, format=format,
                                  data_parallel=process_group)
        if style == "none":
            # What the hand updates write and read, in result_state_handles order.
            self.updated = []
            for h in self.graph.result_state_handles:
                first, second = exported[h.label][1]
                if h.label.startswith("bn"):
                    state = mpsx.CNNNormalizationGammaAndBetaState(device, first, second)
                else:
                    state = mpsx.CNNConvolutionWeightsAndBiasesState(device, first, second)
                self.updated.append((state, [mpsx.Vector(device, first.size), mpsx.Vector(device, second.size)]))
        self._inputs()

    def state_dict(self):
        """The data sources by name, once the last step has completed: what a checkpoint saves
        (styles "gpu" and "cpu" with native data sources)."""
        self.wait()
        return dict(self.sources)

    def checkpoint(self):
        """The graph itself with its data sources by name, once the last step has completed (styles "gpu"
        and "cpu"): mpsx.save writes it whole, and from_checkpoint continues from what mpsx.load reads."""
        if self.style == "none":
            raise ValueError("style 'none' keeps its updates outside the graph; checkpoint state_dict() instead")
        self.wait()
        return {"graph": self.graph, "sources": dict(self.sources)}

    @classmethod
    def from_checkpoint(cls, device, batch_size, checkpoint):
        """The model of a loaded checkpoint(): its graph trains on, its data sources are the graph's."""
        model = cls.__new__(cls)
        model.device, model.batch_size, model.style = device, batch_size, "gpu"
        model.graph, model.sources = checkpoint["graph"], checkpoint["sources"]
        model._inputs()
        return model

    def encode_step(self, cb, images, labels):
        if self.style != "none":
            self.graph.encode_batch(cb, [images], [labels])
            return
        _, states = self.graph.encode_batch(cb, [images], [labels], destination_states=True)
        for state, (updated, momenta) in zip(states, self.updated):
            if isinstance(state, mpsx.CNNConvolutionGradientState):
                self.sgd.encode(cb, convolution_gradient_state=state, convolution_source_state=updated,
                                input_momentum_vectors=momenta, result_state=updated)
                state.convolution.reload_weights_and_biases(cb, updated)
            else:
                self.sgd.encode(cb, batch_normalization_state=state, input_momentum_vectors=momenta,
                                result_state=updated)
                state.batch_normalization.reload_gamma_and_beta(cb, updated)
                state.batch_normalization.encode_mean_and_variance_update(cb, state)


class TorchTraining:
    """A module's training step in PyTorch eager: cross-entropy, mean over the
    batch, and SGD with momentum; with `autocast` (a dtype) the forward pass
    and its gradient run in it under torch.autocast, the weights staying
    float32 (PyTorch's mixed precision); with `compile_mode` the module runs
    torch.compile'd in that mode."""

    def __init__(self, model, device="cpu", learning_rate=0.001, momentum=0.9, autocast=None, compile_mode=None):
        import torch
        self.torch, self.autocast = torch, autocast
        self.model = model.to(device)
        self.forward = self.model if compile_mode is None else torch.compile(self.model, mode=compile_mode)
        self.device = device
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=learning_rate, momentum=momentum)
        self.criterion = torch.nn.CrossEntropyLoss()

    def train_step(self, images, labels):
        x = self.torch.as_tensor(images, device=self.device)
        target = self.torch.as_tensor(labels.reshape(len(labels), -1).argmax(1), device=self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._loss(x, target)
        loss.backward()
        self.optimizer.step()
        return loss

    def _loss(self, x, target):
        if self.autocast is None:
            return self.criterion(self.forward(x), target)
        with self.torch.autocast(self.torch.device(self.device).type, dtype=self.autocast):
            return self.criterion(self.forward(x), target)

    def synchronize(self):
        """Waits for the work PyTorch has launched on the model's device."""
        if str(self.device).startswith("cuda"):
            self.torch.cuda.synchronize()
        elif str(self.device) == "mps":
            self.torch.mps.synchronize()

    def graph_step(self, images, labels):
        """The training step captured once as a CUDA graph (PyTorch's
        whole-network capture recipe): returns a function that copies a batch
        from host memory into the graph's static inputs and replays it."""
        torch = self.torch
        static_x = torch.as_tensor(images, device=self.device).clone()
        static_target = torch.as_tensor(labels.reshape(len(labels), -1).argmax(1), device=self.device).clone()

        def eager():
            self.optimizer.zero_grad(set_to_none=True)
            self._loss(static_x, static_target).backward()
            self.optimizer.step()

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            self._loss(static_x, static_target).backward()
            self.optimizer.step()

        def replay(images, labels):
            static_x.copy_(torch.from_numpy(images))
            static_target.copy_(torch.from_numpy(labels.reshape(len(labels), -1).argmax(1)))
            graph.replay()

        return replay


class TorchReferenceCNN(TorchTraining):
    """The reference CNN and its update in PyTorch eager (TorchTraining)."""

    def __init__(self, parameters, device="cpu", learning_rate=0.001, momentum=0.9, autocast=None):
        import torch
        t = lambda a: torch.tensor(a)
        modules = []
        for i, (cin, cout) in enumerate(CHANNELS):
            conv = torch.nn.Conv2d(cin, cout, 3, padding=1)
            conv.weight.data = t(parameters[f"conv{i}.weight"]).permute(0, 3, 1, 2).contiguous()
            conv.bias.data = t(parameters[f"conv{i}.bias"])
            bn = torch.nn.BatchNorm2d(cout, eps=EPSILON)
            modules += [conv, bn, torch.nn.ReLU()]
            if i % 2 == 1:
                modules.append(torch.nn.MaxPool2d(2))
        fc = torch.nn.Linear(64 * 8 * 8, CLASSES)
        # mpsx flattens channels last (HWC); torch's Flatten is CHW.
        fc.weight.data = t(parameters["fc.weight"]).permute(0, 3, 1, 2).reshape(CLASSES, -1).contiguous()
        fc.bias.data = t(parameters["fc.bias"])
        modules += [torch.nn.Flatten(), fc]
        super().__init__(torch.nn.Sequential(*modules), device, learning_rate, momentum, autocast)


class JaxReferenceCNN:
    """The same model and update in JAX, one jit-compiled function per step
    (forward, loss, gradient, SGD momentum as MPS updates: m = momentum * m +
    learning_rate * g, value -= m), NHWC as mpsx on cuda. precision:
    "float32" (convolutions and products at Precision.HIGHEST), "tf32" (JAX's
    default on a GPU with TF32 tensor cores) or "bfloat16" (images, weights
    and products in bfloat16, batch statistics, loss and weights float32:
    mixed precision). Each step copies its batch from host memory."""

    def __init__(self, parameters, device=None, precision="float32", learning_rate=0.001, momentum=0.9):
        import jax  # type: ignore[import-not-found]  # optional, as in mpsx.bench
        import jax.numpy as jnp  # type: ignore[import-not-found]
        from jax import lax  # type: ignore[import-not-found]
        if precision not in ("float32", "tf32", "bfloat16"):
            raise ValueError(f"precision must be 'float32', 'tf32' or 'bfloat16', given {precision!r}")
        self.jax, self.device = jax, device or jax.devices()[0]
        compute = jnp.bfloat16 if precision == "bfloat16" else jnp.float32
        matmul = lax.Precision.HIGHEST if precision == "float32" else lax.Precision.DEFAULT

        def forward(p, x):
            x = x.transpose(0, 2, 3, 1).astype(compute)  # the batch comes NCHW, as mpsx's write takes it
            for i in range(len(CHANNELS)):
                y = lax.conv_general_dilated(x, p[f"conv{i}.weight"].astype(compute), (1, 1), "SAME",
                                             dimension_numbers=("NHWC", "OHWI", "NHWC"), precision=matmul)
                y = y.astype(jnp.float32) + p[f"conv{i}.bias"]
                mean = y.mean((0, 1, 2))
                variance = jnp.square(y - mean).mean((0, 1, 2))
                y = (y - mean) * lax.rsqrt(variance + EPSILON) * p[f"bn{i}.gamma"] + p[f"bn{i}.beta"]
                x = jax.nn.relu(y).astype(compute)
                if i % 2 == 1:
                    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            w = p["fc.weight"].reshape(CLASSES, -1).astype(compute)
            logits = jnp.dot(x.reshape(len(x), -1), w.T, precision=matmul).astype(jnp.float32) + p["fc.bias"]
            return logits

        def loss(p, x, y):
            return -(jax.nn.log_softmax(forward(p, x)) * y).sum(-1).mean()

        def step(p, m, x, y):
            value, g = jax.value_and_grad(loss)(p, x, y)
            m = {k: momentum * m[k] + learning_rate * g[k] for k in p}
            return {k: p[k] - m[k] for k in p}, m, value

        self._step = jax.jit(step, donate_argnums=(0, 1))
        put = lambda a: jax.device_put(jnp.asarray(a), self.device)
        self.parameters = {k: put(v) for k, v in parameters.items()}
        self.momenta = {k: put(np.zeros_like(v)) for k, v in parameters.items()}
        self.last = None

    def train_step(self, images, labels):
        """One step on numpy images (N, 3, 32, 32) and one-hot labels (N, 10, 1, 1), copied
        from host memory; returns without waiting."""
        x = self.jax.device_put(images, self.device)
        y = self.jax.device_put(labels.reshape(len(labels), -1), self.device)
        self.parameters, self.momenta, self.last = self._step(self.parameters, self.momenta, x, y)

    def synchronize(self):
        if self.last is not None:
            self.last.block_until_ready()

"""NNGraph's self-capture (capture_encodes): an encode repeating the sizes of the one before records the step,
later ones run the recording. Everything a program sees is what encoding every step gives: each test runs the
same MPS-style program with capture on and off (the steps encoded each time, which the graph tests check against
PyTorch and numpy) and compares what it reads, and checks with captured_encode_count which of the encodes ran
the recording."""

import numpy as np
import pytest

import mpsx
from helpers import ArrayConvolutionSource, RecordedLoads, gpu_only, run_isolated
from test_host_writes import IN_FLIGHT
from test_signals import long_convolutions

N, CLASSES = 4, 5


def optimizer(device, kind, learning_rate=0.05):
    if kind == "adam":
        return mpsx.NNOptimizerAdam(device, learning_rate=learning_rate)
    return mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=learning_rate, momentum_scale=0.9)


class Model:
    """conv 3x3 (3 -> 4) -> batch normalization -> relu [-> dropout] -> 2x2 max pooling -> fully connected ->
    softmax cross entropy, trained through the graph by data sources that train on the device (SGD with momentum,
    or Adam), or by a Python data source updating on the command buffer."""

    def __init__(self, device, kind="sgd", dropout=False, python_source=False):
        rng = np.random.default_rng(0)
        self.device = device
        self.optimizers = [optimizer(device, kind) for _ in range(3)]
        weights = rng.uniform(-0.3, 0.3, (4, 3, 3, 3)).astype(np.float32)
        biases = rng.uniform(-0.1, 0.1, 4).astype(np.float32)
        conv_descriptor = mpsx.CNNConvolutionDescriptor(3, 3, 3, 4)
        if python_source:
            self.conv_source = UpdatingSource(conv_descriptor, weights, biases)
        else:
            self.conv_source = mpsx.ConvolutionWeights(conv_descriptor, weights, biases,
                                                       optimizer=self.optimizers[0])
        self.bn_source = mpsx.BatchNormalizationWeights(np.ones(4, np.float32), np.zeros(4, np.float32),
                                                        np.zeros(4, np.float32), np.ones(4, np.float32),
                                                        optimizer=self.optimizers[1])
        self.fc_source = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(4, 4, 4, CLASSES),
                                                 rng.uniform(-0.2, 0.2, (CLASSES, 4, 4, 4)).astype(np.float32),
                                                 np.zeros(CLASSES, np.float32), optimizer=self.optimizers[2])
        x = mpsx.NNImageNode(mpsx.NNHandle("x"))
        conv = mpsx.CNNConvolutionNode(x, self.conv_source)
        bn = mpsx.CNNBatchNormalizationNode(conv.result_image, self.bn_source)
        y = mpsx.CNNNeuronNode(bn.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).result_image
        if dropout:
            y = mpsx.CNNDropoutNode(y, keep_probability=0.5, seed=3).result_image
        y = mpsx.CNNPoolingMaxNode(y, 2).result_image
        fc = mpsx.CNNFullyConnectedNode(y, self.fc_source)
        for node in (conv, fc):
            node.training_style = "gpu"
        descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
        descriptor.reduce_across_batch = True
        loss = mpsx.CNNLossNode(fc.result_image, descriptor)
        self.graph = mpsx.NNGraph(device, loss.training_graph()[0].result_image, False, format=mpsx.DataType.FLOAT32)
        self.graph.capture_encodes = True  # whatever MPSX_CAPTURE_ENCODES says

    def step(self, x, labels, per_image=True):
        """One step as MPS code encodes it: a new command buffer, the images and one CNNLossLabels per image,
        the loss read back once it completed."""
        cb = self.device.command_queue.command_buffer()
        images = mpsx.ImageBatch.from_numpy(self.device, x)
        if per_image:
            states = [mpsx.CNNLossLabels(self.device, labels[i:i + 1]) for i in range(len(labels))]
        else:
            states = mpsx.CNNLossLabels(self.device, labels)
        self.graph.encode_batch(cb, [images], [states])
        for state in states if per_image else [states]:
            state.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        first = states[0] if per_image else states
        return float(first.loss_image().to_numpy()[0, 0, 0, 0])

    def values(self):
        return [self.conv_source.weights(), self.conv_source.bias_terms(), self.fc_source.weights(),
                self.bn_source.gamma(), self.bn_source.beta(), self.bn_source.mean(), self.bn_source.variance()]


class UpdatingSource(ArrayConvolutionSource, RecordedLoads):
    """A Python data source that trains by plain SGD on the command buffer, counting its updates."""

    def __init__(self, descriptor, weights, biases):
        ArrayConvolutionSource.__init__(self, descriptor, weights, biases)
        RecordedLoads.__init__(self)
        self.updates = 0
        self.sgd = None

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        self.updates += 1
        if self.sgd is None:
            self.sgd = mpsx.NNOptimizerStochasticGradientDescent(command_buffer.device, learning_rate=0.05)
        self.sgd.encode(command_buffer, convolution_gradient_state=gradient_state,
                        convolution_source_state=source_state, result_state=source_state)
        return source_state


def batches(steps, n=N, size=8, seed=5):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        labels = np.zeros((n, CLASSES, 1, 1), np.float32)
        labels[np.arange(n), rng.integers(0, CLASSES, n)] = 1
        yield rng.standard_normal((n, 3, size, size)).astype(np.float32), labels


def train(device, capture, steps=5, **model):
    m = Model(device, **model)
    m.graph.capture_encodes = capture
    losses = [m.step(x, labels) for x, labels in batches(steps)]
    return m, losses


@pytest.mark.parametrize("per_image", [True, False])
def test_a_training_loop_trains_as_when_every_step_is_encoded(repeatable, per_image):
    """Forward, gradient and updates of native data sources (SGD momentum, batch normalization's statistics):
    the second encode records, it and each later one run the recording; losses and every trained value equal
    those of the steps encoded each time."""
    runs = {}
    for capture in (True, False):
        m = Model(repeatable)
        m.graph.capture_encodes = capture
        losses = [m.step(x, labels, per_image) for x, labels in batches(5)]
        runs[capture] = (losses, m.values(), m.graph.captured_encode_count)
    assert runs[True][2] == 4 and runs[False][2] == 0
    np.testing.assert_array_equal(runs[True][0], runs[False][0])
    for got, expected in zip(runs[True][1], runs[False][1]):
        np.testing.assert_array_equal(got, expected)
    assert runs[True][0][-1] != runs[True][0][0]


def test_values_read_after_each_step_are_those_of_steps_encoded_each_time(repeatable):
    """A checkpoint after every step (every data source's values read on the host): after the steps that ran the
    recording too, the values equal those of the steps encoded each time."""
    runs = {}
    for capture in (True, False):
        m = Model(repeatable)
        m.graph.capture_encodes = capture
        runs[capture] = []
        for x, labels in batches(4):
            m.step(x, labels)
            runs[capture].append(m.values())
    for got, expected in zip(runs[True], runs[False]):
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(runs[True][-1][0], runs[True][-2][0])


def test_capture_is_on_by_default_and_the_environment_turns_it_off(device):
    program = ("x = mpsx.NNImageNode(mpsx.NNHandle('x'))\n"
               "node = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))\n"
               "print(mpsx.NNGraph(device, node.result_image).capture_encodes)")
    for setting, expected in ((None, "True"), ("1", "True"), ("0", "False")):
        printed = run_isolated(device, program, environment={"MPSX_CAPTURE_ENCODES": setting})
        assert printed.strip() == expected
    graph = Model(device).graph
    graph.capture_encodes = False
    assert graph.capture_encodes is False


def inference_graph(device):
    """sigmoid -> relu -> sigmoid, the relu's result exported, the result needed."""
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    first = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID))
    middle = mpsx.CNNNeuronNode(first.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, a=2.0, b=-1.0))
    middle.result_image.export_from_graph = True
    last = mpsx.CNNNeuronNode(middle.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID))
    graph = mpsx.NNGraph(device, last.result_image, True, format=mpsx.DataType.FLOAT32)
    graph.capture_encodes = True  # whatever MPSX_CAPTURE_ENCODES says
    return graph


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_results_and_exported_images_are_new_images_of_each_encode(device, rng):
    """Four encodes of new inputs on one command buffer: each returns its own result and intermediate image,
    which hold that encode's values after the later encodes ran (numpy's values)."""
    graph = inference_graph(device)
    cb = device.command_queue.command_buffer()
    inputs = [rng.standard_normal((2, 3, 5, 6)).astype(np.float32) for _ in range(4)]
    outputs = [graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], intermediate_images=True)
               for x in inputs]
    assert graph.captured_encode_count == 3
    for result, (middle,) in outputs:
        result.synchronize(cb)
        middle.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    images = [id(r) for r, _ in outputs] + [id(m[0]) for _, m in outputs]
    assert len(set(images)) == 8
    for x, (result, (middle,)) in zip(inputs, outputs):
        expected_middle = 2 * sigmoid(x) - 1
        np.testing.assert_allclose(middle.to_numpy(), expected_middle, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result.to_numpy(), sigmoid(expected_middle), rtol=1e-5, atol=1e-6)


def test_new_sizes_record_again_and_the_old_recording_serves_its_sizes(device, rng):
    graph = inference_graph(device)

    def run(shape):
        x = rng.standard_normal(shape).astype(np.float32)
        cb = device.command_queue.command_buffer()
        result = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)])
        result.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_allclose(result.to_numpy(), sigmoid(2 * sigmoid(x) - 1), rtol=1e-5, atol=1e-6)

    counts = []
    for shape in [(2, 3, 4, 4)] * 3 + [(3, 3, 4, 4)] + [(2, 3, 4, 4)] * 2 + [(3, 3, 4, 4)] * 3:
        run(shape)
        counts.append(graph.captured_encode_count)
    # 2x3x4x4 records on its 2nd encode; one 3x3x4x4 between leaves that recording to the next two; the 3x3x4x4
    # encodes record on their 2nd in a row.
    assert counts == [0, 1, 2, 2, 3, 4, 4, 5, 6]


def test_a_learning_rate_set_between_steps_is_the_next_steps(repeatable):
    runs = {}
    for capture in (True, False):
        m = Model(repeatable)
        m.graph.capture_encodes = capture
        losses = []
        for i, (x, labels) in enumerate(batches(6)):
            if i == 3:
                for o in m.optimizers:
                    o.learning_rate = 0.2
            losses.append(m.step(x, labels))
        runs[capture] = (losses, m.values(), m.graph.captured_encode_count)
    # Steps 2 and 3 run the first recording; step 4 has a new learning rate and is encoded, 5 and 6 record and run.
    assert runs[True][2] == 4
    np.testing.assert_array_equal(runs[True][0], runs[False][0])
    for got, expected in zip(runs[True][1], runs[False][1]):
        np.testing.assert_array_equal(got, expected)


def test_adam_and_dropout_steps_are_encoded_each_time(repeatable):
    """Adam's time step and dropout's masks are new at each encode: the graph encodes those steps each time, so
    Adam's bias correction advances and the masks change, as without capture."""
    for model in ({"kind": "adam"}, {"dropout": True}):
        runs = {capture: train(repeatable, capture, **model) for capture in (True, False)}
        assert runs[True][0].graph.captured_encode_count == 0
        np.testing.assert_array_equal(runs[True][1], runs[False][1])
        for got, expected in zip(runs[True][0].values(), runs[False][0].values()):
            np.testing.assert_array_equal(got, expected)


def test_dropout_masks_change_at_each_encode(device):
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    node = mpsx.CNNDropoutNode(x, keep_probability=0.5, seed=7)
    graph = mpsx.NNGraph(device, node.result_image, True, format=mpsx.DataType.FLOAT32)
    ones = np.ones((1, 4, 8, 8), np.float32)
    masks = []
    for _ in range(4):
        cb = device.command_queue.command_buffer()
        result = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, ones)])
        result.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        masks.append(result.to_numpy() != 0)
    assert graph.captured_encode_count == 0
    assert all(not np.array_equal(masks[i], masks[i + 1]) for i in range(3))


def test_a_python_data_source_is_called_at_every_encode(repeatable):
    runs = {capture: train(repeatable, capture, python_source=True) for capture in (True, False)}
    model, losses = runs[True]
    assert model.graph.captured_encode_count == 0
    assert model.conv_source.updates == 5
    np.testing.assert_array_equal(losses, runs[False][1])


def test_reload_from_data_sources_records_again(device, rng):
    """A graph's kernels read new weights after reload_from_data_sources: the encodes after it see them."""
    weights = np.full((2, 1, 1, 3), 0.5, np.float32)
    source = ArrayConvolutionSource(mpsx.CNNConvolutionDescriptor(1, 1, 3, 2), weights, np.zeros(2, np.float32))
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    graph = mpsx.NNGraph(device, mpsx.CNNConvolutionNode(x, source).result_image, True, format=mpsx.DataType.FLOAT32)
    graph.capture_encodes = True
    image = rng.standard_normal((1, 3, 2, 2)).astype(np.float32)

    def run():
        cb = device.command_queue.command_buffer()
        result = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, image)])
        result.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        return result.to_numpy()

    for _ in range(3):
        np.testing.assert_allclose(run(), np.repeat(0.5 * image.sum(1, keepdims=True), 2, 1), rtol=1e-5)
    assert graph.captured_encode_count == 2
    source._weights = np.full((2, 1, 1, 3), -1.0, np.float32)
    graph.reload_from_data_sources()
    for _ in range(3):
        np.testing.assert_allclose(run(), np.repeat(-image.sum(1, keepdims=True), 2, 1), rtol=1e-5)
    assert graph.captured_encode_count == 4


def test_a_property_callback_set_after_the_recording_is_called_at_each_encode(device, rng):
    """A gram matrix node's alpha comes from its property callback, set after the graph recorded: the encodes
    after it call the callback (in Python, so each is encoded) and take its alpha; without it again, the node's
    alpha, recorded again."""
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    node = mpsx.NNGramMatrixCalculationNode(x, alpha=1.0)
    graph = mpsx.NNGraph(device, node.result_image, True, format=mpsx.DataType.FLOAT32)
    graph.capture_encodes = True
    image = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    flat = image.reshape(3, 16)

    class Quarter(mpsx.NNGramMatrixCallback):
        calls = 0

        def alpha_for_source_image(self, source_image, destination_image):
            Quarter.calls += 1
            return 0.25

    counts = []
    for callback in (None,) * 3 + (Quarter(),) * 3 + (None,) * 3:
        if node.property_call_back is not callback:
            node.property_call_back = callback
        cb = device.command_queue.command_buffer()
        result = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, image)])
        result.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        alpha = 0.25 if callback else 1.0
        np.testing.assert_allclose(result.to_numpy().reshape(3, 3), alpha * flat @ flat.T, rtol=1e-4, atol=1e-5)
        counts.append(graph.captured_encode_count)
    assert Quarter.calls == 3
    assert counts == [0, 1, 2, 2, 2, 2, 2, 3, 4]


def test_temporary_sources_are_read_and_counted_as_by_the_steps(device, rng):
    """A temporary source image read once by the graph: each encode lowers its read count to 0; one whose read
    count is already 0 raises the steps' StateError, capture on or off."""
    graph = inference_graph(device)
    for _ in range(4):
        x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
        cb = device.command_queue.command_buffer()
        temporary = mpsx.TemporaryImage(cb, mpsx.ImageDescriptor(channel_format=mpsx.DataType.FLOAT32, width=4,
                                                                 height=4, feature_channels=3))
        mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, a=1.0)).encode(
            cb, mpsx.Image.from_numpy(device, x[0]), temporary)
        temporary.read_count = graph.read_count_for_source_image_at_index(0)
        result = graph.encode(cb, [temporary])
        assert temporary.read_count == 0
        result.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_allclose(result.to_numpy(), sigmoid(2 * sigmoid(x) - 1), rtol=1e-5, atol=1e-6)
        with pytest.raises(mpsx.StateError):
            graph.encode(device.command_queue.command_buffer(), [temporary])
    assert graph.captured_encode_count == 3


def test_errors_after_a_recording_are_those_of_the_steps(device, rng):
    graph = inference_graph(device)
    image = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
    for _ in range(3):
        graph.encode_batch(device.command_queue.command_buffer(), [image])
    assert graph.captured_encode_count == 2
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match="expected 1 source images"):
        graph.encode_batch(cb, [image, image])
    assert cb.command_count == 0
    cb.commit()
    with pytest.raises(mpsx.StateError, match="encode onto a new command buffer"):
        graph.encode_batch(cb, [image])


def test_a_replayable_command_buffer_records_the_steps_themselves(device, rng):
    """On a replayable command buffer the graph encodes its steps, which replays run on the images written."""
    graph = inference_graph(device)
    image = mpsx.ImageBatch.from_numpy(device, np.zeros((2, 3, 4, 4), np.float32))
    cbs = [device.command_queue.command_buffer(replayable=True) for _ in range(3)]
    results = [graph.encode_batch(cb, [image]) for cb in cbs]
    assert graph.captured_encode_count == 0
    for x_seed in range(2):
        x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
        image.write(x)
        for cb, result in zip(cbs, results):
            result.synchronize(cb) if x_seed == 0 else None
            cb.commit() if x_seed == 0 else cb.replay()
            cb.wait_until_completed()
            np.testing.assert_allclose(result.to_numpy(), sigmoid(2 * sigmoid(x) - 1), rtol=1e-5, atol=1e-6)


def test_two_queues_take_turns(device, rng):
    """Encodes alternating between two command queues: each is encoded as it comes (the recording belongs to one
    queue), with the right values."""
    graph = inference_graph(device)
    queues = [device.command_queue, device.new_command_queue()]
    for i in range(6):
        x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
        cb = queues[i % 2].command_buffer()
        result = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)])
        result.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_allclose(result.to_numpy(), sigmoid(2 * sigmoid(x) - 1), rtol=1e-5, atol=1e-6)


def test_host_access_waits_for_the_command_buffer_that_ran_the_recording(device, rng):
    """The source image is read, and the result written, by the command buffer that runs the recording: while it
    waits behind long work, a host write into the source and a read of the result are refused, as for the
    steps' encode; once it completed both go through."""
    graph = inference_graph(device)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    image = mpsx.ImageBatch.from_numpy(device, x)
    for _ in range(2):
        cb = device.command_queue.command_buffer()
        graph.encode_batch(cb, [image])
        cb.commit()
    long_convolutions(device, rng, seconds=0.5)
    cb = device.command_queue.command_buffer()
    result = graph.encode_batch(cb, [image])
    result.synchronize(cb)
    cb.commit()
    assert graph.captured_encode_count == 2 and cb.status == "committed"
    with pytest.raises(mpsx.SynchronizationError, match=IN_FLIGHT):
        image.write(np.zeros_like(x))
    with pytest.raises(mpsx.SynchronizationError):
        result.to_numpy()
    cb.wait_until_completed()
    np.testing.assert_allclose(result.to_numpy(), sigmoid(2 * sigmoid(x) - 1), rtol=1e-5, atol=1e-6)
    image.write(np.zeros_like(x))


def test_a_result_named_twice_is_one_image_in_each_encode(device, rng):
    """result_images [y, y]: the result and the second result share their storage, as the steps' encode returns
    one image for both (a host write into one is read from the other)."""
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    y = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).result_image
    graph = mpsx.NNGraph(device, result_images=[y, y], results_are_needed=[True, True], format=mpsx.DataType.FLOAT32)
    graph.capture_encodes = True
    for _ in range(4):
        a = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
        cb = device.command_queue.command_buffer()
        result, (second,) = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, a)], intermediate_images=True)
        result.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_array_equal(second.to_numpy(), np.maximum(a, 0))
        result.write(np.zeros_like(a))
        np.testing.assert_array_equal(second.to_numpy(), np.zeros_like(a))
    assert graph.captured_encode_count == 3


def test_a_source_on_another_device_raises_as_the_steps_do(device, rng):
    """After the graph recorded on a GPU, a source image of the cpu device: the steps' DeviceMismatchError, with
    nothing copied across devices."""
    gpu_only(device)
    graph = inference_graph(device)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    for _ in range(3):
        graph.encode_batch(device.command_queue.command_buffer(), [mpsx.ImageBatch.from_numpy(device, x)])
    assert graph.captured_encode_count == 2
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.DeviceMismatchError):
        graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(mpsx.Device("cpu"), x)])
    assert cb.command_count == 0

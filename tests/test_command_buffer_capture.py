"""Command buffers that capture themselves (CommandQueue.capture_command_buffers): on cuda, a command buffer whose
commands equal an earlier commit's runs as that commit's CUDA graph. Everything a program sees is what running the
commands gives: the tests run MPS-style programs on fresh inputs each step and compare what they read with numpy,
or with the same program run with capture off (the commands run each time, which the family tests check against
PyTorch and numpy), and check with captured_command_buffer_count which command buffers ran as graphs."""

import numpy as np
import pytest

import mpsx
from helpers import Handle, float32_graph, run_isolated
from mpsx.benchmarks import reference_cnn

BATCH = 8


def test_the_setting_is_on_where_the_backend_captures_and_the_environment_turns_it_off(device):
    can = str(device.backend == "cuda")
    for setting, expected in ((None, can), ("1", can), ("0", "False")):
        printed = run_isolated(device, "print(device.command_queue.capture_command_buffers)",
                               environment={"MPSX_CAPTURE_ENCODES": setting})
        assert printed.strip() == expected
    queue = device.new_command_queue()
    queue.capture_command_buffers = True
    assert queue.capture_command_buffers is (device.backend == "cuda")
    queue.capture_command_buffers = False
    assert queue.capture_command_buffers is False
    assert queue.captured_command_buffer_count == 0
    with pytest.raises(TypeError):
        mpsx.CommandQueue()
    with pytest.raises(TypeError, match="without __init__"):
        mpsx.CommandQueue.__new__(mpsx.CommandQueue).capture_command_buffers


def batches(steps, seed):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        images = rng.standard_normal((BATCH, 3, 32, 32)).astype(np.float32)
        labels = np.zeros((BATCH, reference_cnn.CLASSES, 1, 1), np.float32)
        labels[np.arange(BATCH), rng.integers(0, reference_cnn.CLASSES, BATCH)] = 1
        yield images, labels


def trained(device, capture, steps=20, **options):
    """The hand-encoded reference CNN (conv, batch normalization with its statistics and running-statistics
    update, max pooling, fully connected, softmax cross entropy, every gradient, SGD or Adam updates that reload
    the kernels) after `steps` steps on new inputs each step, two command buffers in flight as in a training loop;
    its weights and the last step's loss, and how many of its command buffers ran as graphs."""
    queue = device.command_queue
    queue.capture_command_buffers = capture
    try:
        before = queue.captured_command_buffer_count
        model = reference_cnn.ReferenceCNN(device, BATCH, **options)
        for images, labels in batches(steps, 1):
            model.train_step(images, labels)
        loss = model.loss()
        state = model.state_dict()
        weights = {name: value.weights.to_numpy() for name, value in state.items() if name.endswith("weights")}
        return loss, weights, queue.captured_command_buffer_count - before
    finally:
        queue.capture_command_buffers = True


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_hand_encoded_training_loop_runs_as_graphs_and_computes_what_its_commands_compute(repeatable, optimizer):
    device = repeatable  # the same cuDNN engines in both runs
    loss, weights, captured = trained(device, True, optimizer=optimizer)
    expected_loss, expected_weights, none = trained(device, False, optimizer=optimizer)
    assert none == 0
    if device.backend != "cuda":
        assert captured == 0
    elif optimizer == "sgd":
        # The steps' memory repeats every few steps (the running statistics live three steps), so most run as
        # graphs once each has been seen twice.
        assert captured >= 4, captured
    else:
        # Adam's time step is part of every update's key: no two steps are alike.
        assert captured == 0
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
    for name in expected_weights:
        np.testing.assert_allclose(weights[name], expected_weights[name], rtol=1e-6, atol=1e-8, err_msg=name)


def convolution(device):
    rng = np.random.default_rng(2)
    weights = rng.uniform(-0.5, 0.5, (4, 3, 3, 3)).astype(np.float32)
    biases = rng.uniform(-0.1, 0.1, 4).astype(np.float32)
    source = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 3, 4), weights, biases)
    return mpsx.CNNConvolution(device, source), weights, biases


def numpy_convolution(x, weights, biases):
    """3x3, stride 1, MPS's default padding (the destination the size of the source, zeros outside)."""
    n, _, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.empty((n, weights.shape[0], h, w), np.float32)
    for y in range(h):
        for x_ in range(w):
            window = padded[:, :, y:y + 3, x_:x_ + 3]  # n, c, 3, 3
            out[:, :, y, x_] = np.einsum("nchw,ohwc->no", window, weights) + biases
    return out


def test_a_command_buffer_on_other_memory_or_with_other_values_is_not_run_as_another_ones_graph(device):
    """The same kernel on three sources in turn, each step a new command buffer: each source's command buffer
    runs as its own graph from its second time, and each result is its own source's convolution; then the
    sources change (host writes) and the graphs run what the new sources give."""
    conv, weights, biases = convolution(device)
    rng = np.random.default_rng(3)
    sources = [rng.standard_normal((2, 3, 6, 6)).astype(np.float32) for _ in range(3)]
    images = [mpsx.ImageBatch.from_numpy(device, x) for x in sources]
    destination = mpsx.ImageBatch(device, mpsx.ImageDescriptor(width=6, height=6, feature_channels=4,
                                                               number_of_images=2))
    queue = device.new_command_queue()
    queue.capture_command_buffers = True
    for step in range(9):
        cb = queue.command_buffer()
        conv.encode_batch(cb, images[step % 3], destination)
        destination.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_allclose(destination.to_numpy(), numpy_convolution(sources[step % 3], weights, biases),
                                   rtol=1e-4, atol=1e-5)
        # Host writes into the sources between steps: a graph reads the memory when it runs.
        sources[step % 3] = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
        images[step % 3].write(sources[step % 3])
    # Steps 3..8: each source's second time on.
    assert queue.captured_command_buffer_count == (6 if device.backend == "cuda" else 0)


def sgd_on_a_capturing_queue(device):
    """A queue of its own that captures, an SGD optimizer, values 0 and gradients 1 (16 each)."""
    queue = device.new_command_queue()
    queue.capture_command_buffers = True
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    values = mpsx.Vector.from_numpy(device, np.zeros(16, np.float32))
    gradient = mpsx.Vector.from_numpy(device, np.ones(16, np.float32))
    return queue, sgd, values, gradient


def test_a_command_buffer_keyed_by_a_changed_scalar_records_again(device):
    """SGD updates with the learning rate changed between steps: the rate is part of the update's key."""
    queue, sgd, values, gradient = sgd_on_a_capturing_queue(device)
    expected = np.zeros(16, np.float32)
    for step, rate in enumerate([0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.5]):
        sgd.learning_rate = rate
        cb = queue.command_buffer()
        sgd.encode(cb, gradient, values, result_values_vector=values)
        values.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        expected -= rate
        np.testing.assert_array_equal(values.to_numpy(), expected)
    # Each rate from its second time on: the second (captured) and third 0.5, the same of 0.25, the last 0.5.
    assert queue.captured_command_buffer_count == (5 if device.backend == "cuda" else 0)


def softmax_over_channels(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_per_image_forward_and_gradient_command_buffers_run_as_graphs(device):
    """MPS style: per-image sources and incoming gradients (lists of images, new each step, states per image), the
    forward pass on one command buffer and the gradient pass on another, in a function per step: multiply -> relu
    -> softmax, then the gradient back through softmax, relu and both sides of the multiply, and an initial
    gradient. Each step's results are numpy's."""
    multiply, relu = mpsx.CNNMultiply(device), mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    softmax, initial = mpsx.CNNSoftMax(device), mpsx.NNInitialGradient(device)
    softmax_gradient = mpsx.CNNSoftMaxGradient(device)
    relu_gradient = mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    primary_gradient = mpsx.CNNMultiplyGradient(device, False)
    secondary_gradient = mpsx.CNNMultiplyGradient(device, True)
    queue = device.new_command_queue()
    queue.capture_command_buffers = True

    def step(x, y, dp):
        X, Y, DP = ([mpsx.Image.from_numpy(device, a[None]) for a in v] for v in (x, y, dp))
        forward = queue.command_buffer()
        product, product_states = multiply.encode_batch(forward, X, Y, destination_states=True)
        rectified, relu_states = relu.encode_batch(forward, product, destination_states=True)
        probabilities, softmax_states = softmax.encode_batch(forward, rectified, destination_states=True)
        forward.commit()
        backward = queue.command_buffer()
        ones = initial.encode_batch(backward, probabilities)
        g = softmax_gradient.encode_batch(backward, DP, probabilities, softmax_states)
        g = relu_gradient.encode_batch(backward, g, product, relu_states)
        dx = primary_gradient.encode_batch(backward, g, Y, product_states)
        dy = secondary_gradient.encode_batch(backward, g, X, product_states)
        for out in (ones, dx, dy):
            out.synchronize(backward)
        backward.commit()
        backward.wait_until_completed()
        assert backward.status == "completed", backward.error
        return ones.to_numpy(), dx.to_numpy(), dy.to_numpy()

    rng = np.random.default_rng(4)
    for _ in range(10):
        x, y, dp = (rng.standard_normal((3, 4, 2, 2)).astype(np.float32) for _ in range(3))
        ones, dx, dy = step(x, y, dp)
        p = softmax_over_channels(np.maximum(x * y, 0))
        dz = p * (dp - (dp * p).sum(axis=1, keepdims=True)) * (x * y > 0)
        np.testing.assert_array_equal(ones, np.ones_like(x))
        np.testing.assert_allclose(dx, dz * y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(dy, dz * x, rtol=1e-5, atol=1e-6)
    # Each step's objects die with its function: every step gets the same memory, and both command buffers run
    # as graphs from their second step on.
    assert queue.captured_command_buffer_count == (18 if device.backend == "cuda" else 0)


def test_a_graph_encoded_each_step_without_its_own_capture_runs_as_graphs(device):
    """An NNGraph with capture_encodes off, encoded each step onto a command buffer of a capturing queue: nearest
    upsampling, its spatial mean and their gradients, results read each step, against numpy."""
    x, dy = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    upsampling = mpsx.CNNUpsamplingNearestNode(x, 2, 2)
    mean = mpsx.NNReductionSpatialMeanNode(upsampling.result_image)
    mean_gradient = mean.gradient_filter_with_source(dy)
    gradient = upsampling.gradient_filter_with_source(mean_gradient.result_image)
    results = [mean.result_image, gradient.result_image]
    for r in results:
        r.synchronize_resource = True
    graph = float32_graph(device, result_images=results)
    graph.capture_encodes = False
    queue = device.new_command_queue()
    queue.capture_command_buffers = True

    def step(inputs):
        sources = [mpsx.Image.from_numpy(device, inputs[h.label]) for h in graph.source_image_handles]
        cb = queue.command_buffer()
        first, rest = graph.encode(cb, sources, intermediate_images=True)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        return [first.to_numpy()] + [r.to_numpy() for r in rest]

    rng = np.random.default_rng(5)
    for _ in range(6):
        inputs = dict(x=rng.standard_normal((1, 3, 2, 2)).astype(np.float32),
                      dy=rng.standard_normal((1, 3, 1, 1)).astype(np.float32))
        y, dx = step(inputs)
        np.testing.assert_allclose(y, inputs["x"].mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
        # Each source pixel is 4 of the 16 upsampled pixels the mean reads.
        np.testing.assert_allclose(dx, np.broadcast_to(inputs["dy"] / 4, dx.shape), rtol=1e-5, atol=1e-6)
    assert queue.captured_command_buffer_count == (5 if device.backend == "cuda" else 0)  # from the second step


def test_a_queue_whose_command_buffers_never_repeat_stops_keying_them_and_finds_a_loop_that_does(device):
    """SGD updates with a new learning rate each step (never repeating) for longer than the back-off's 64 keyed
    commits, then a fixed rate: the queue probes one command buffer in 16, finds the repeat and captures again."""
    queue, sgd, values, gradient = sgd_on_a_capturing_queue(device)
    expected = np.zeros(16, np.float32)

    def step(rate):
        nonlocal expected
        sgd.learning_rate = rate
        cb = queue.command_buffer()
        sgd.encode(cb, gradient, values, result_values_vector=values)
        values.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        expected = expected - np.float32(rate)
        np.testing.assert_allclose(values.to_numpy(), expected, rtol=1e-5)

    for i in range(80):
        step(1.0 / (i + 2))
    assert queue.captured_command_buffer_count == 0
    for _ in range(64):
        step(0.25)
    # Probed every 16th command buffer: the second probe of the fixed rate sees its keys again and captures;
    # from then on every command buffer records keys and runs as the graph.
    assert queue.captured_command_buffer_count >= (30 if device.backend == "cuda" else 0)

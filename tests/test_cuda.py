"""The cuda backend against the cpu backend and against PyTorch on the same
GPU: every kernel family run on both devices from the same inputs, the
reference CNN trained on both and in PyTorch, DLPack export to PyTorch
without a copy, and CUDA failures surfacing as mpsx errors."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import mpsx
from helpers import read
import test_convolution
import test_convolution_transpose
import test_loss
import test_neuron
import test_pooling
from mpsx.benchmarks.reference_cnn import ReferenceCNN, TorchReferenceCNN, random_batch

GPUS = [d for d in mpsx.devices() if d.backend == "cuda"]
CPU = mpsx.Device("cpu")
pytestmark = pytest.mark.skipif(not GPUS, reason="no cuda device: mpsx found " +
                                ", ".join(d.name for d in mpsx.devices()))


@pytest.fixture(params=GPUS, ids=[d.name for d in GPUS])
def gpu(request):
    return request.param


def on_both(gpu, case, rtol=1e-4, atol=1e-5):
    """Runs case(device, rng) on the GPU and on the cpu from the same random
    inputs and compares every array it returns."""
    ours = case(gpu, np.random.default_rng(7))
    theirs = case(CPU, np.random.default_rng(7))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape", [
    # kw, kh, cin, cout, stride, dilation, groups, (n, h, w), padding
    (3, 3, 3, 8, (1, 1), (1, 1), 1, (2, 9, 11), mpsx.NNPaddingMethod.SIZE_SAME),
    (5, 3, 4, 6, (2, 1), (1, 2), 2, (3, 12, 10), mpsx.NNPaddingMethod.SIZE_VALID_ONLY),
    (2, 2, 6, 4, (2, 2), (1, 1), 1, (1, 7, 8), mpsx.NNPaddingMethod.SIZE_SAME),  # asymmetric padding
    (4, 4, 16, 10, (1, 1), (1, 1), 1, (5, 4, 4), mpsx.NNPaddingMethod.SIZE_VALID_ONLY),  # fully connected shape
])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_convolution_forward_and_gradient(gpu, shape, dtype):
    kw, kh, cin, cout, stride, dilation, groups, (n, h, w), padding = shape

    def case(device, rng):
        source, _, _ = test_convolution.make(device, rng, kw, kh, cin, cout, stride, dilation, groups,
                                             neuron=mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID))
        conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
        conv.padding = gradient.padding = padding
        image = mpsx.Image.from_numpy(device, rng.standard_normal((n, cin, h, w)).astype(dtype))
        y = read(device, lambda cb: conv.encode(cb, image))
        dy = mpsx.Image.from_numpy(device, rng.standard_normal(y.shape).astype(dtype))

        def encode(cb):
            _, state = conv.encode(cb, image, destination_state=True)
            return gradient.encode(cb, dy, image, state), state

        dx, state = test_convolution_transpose.synchronized(device, encode)
        return y, dx.to_numpy(), state.gradient_for_weights.to_numpy(), state.gradient_for_biases.to_numpy()

    tolerance = 1e-4 if dtype == np.float32 else 1e-2
    on_both(gpu, case, tolerance, tolerance)


@pytest.mark.parametrize("stride, groups", [((1, 1), 1), ((2, 2), 2), ((3, 2), 1)])
def test_convolution_transpose_forward_and_gradient(gpu, stride, groups):
    def case(device, rng):
        source, _, _ = test_convolution_transpose.make(rng, 3, 3, 4, 6, stride, (1, 1), groups)
        transpose = mpsx.CNNConvolutionTranspose(device, source)
        gradient = mpsx.CNNConvolutionTransposeGradient(device, source)
        image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 4, 5, 7)).astype(np.float32))
        y = read(device, lambda cb: transpose.encode(cb, image))
        dy = mpsx.Image.from_numpy(device, rng.standard_normal(y.shape).astype(np.float32))

        def encode(cb):
            _, state = transpose.encode(cb, image, destination_state=True)
            return gradient.encode(cb, dy, image, state), state

        dx, state = test_convolution_transpose.synchronized(device, encode)
        return y, dx.to_numpy(), state.gradient_for_weights.to_numpy(), state.gradient_for_biases.to_numpy()

    on_both(gpu, case)


@pytest.mark.parametrize("kind", list(test_pooling.KINDS))
@pytest.mark.parametrize("edge", [mpsx.ImageEdgeMode.ZERO, mpsx.ImageEdgeMode.CLAMP])
def test_pooling_forward_and_gradient(gpu, kind, edge):
    def case(device, rng):
        pooling = test_pooling.make(test_pooling.KINDS, device, kind, (3, 2), (2, 2), (2, 1), edge, "same")
        gradient = test_pooling.make(test_pooling.GRADIENTS, device, kind, (3, 2), (2, 2), (2, 1), edge, "same")
        image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 5, 9, 11)).astype(np.float32))

        def encode(cb):
            y, state = pooling.encode(cb, image, destination_state=True)
            dy = mpsx.Image.from_numpy(device, rng.standard_normal((2, 5, y.height, y.width)).astype(np.float32))
            return y, gradient.encode(cb, dy, image, state)

        return read(device, encode)

    on_both(gpu, case)


@pytest.mark.parametrize("neuron", list(test_neuron.CASES))
def test_neuron_forward_and_gradient(gpu, neuron):
    def case(device, rng):
        d, _ = test_neuron.descriptor(neuron, 6)
        forward, gradient = mpsx.CNNNeuron(device, d), mpsx.CNNNeuronGradient(device, d)
        image = mpsx.Image.from_numpy(device, test_neuron.sample(rng, (2, 6, 5, 3), neuron))
        dy = mpsx.Image.from_numpy(device, rng.standard_normal((2, 6, 5, 3)).astype(np.float32))

        def encode(cb):
            y, state = forward.encode(cb, image, destination_state=True)
            return y, gradient.encode(cb, dy, image, state)

        return read(device, encode)

    on_both(gpu, case)


@pytest.mark.parametrize("loss_type", list(mpsx.CNNLossType))
@pytest.mark.parametrize("reduction", [mpsx.CNNReductionType.NONE, mpsx.CNNReductionType.MEAN,
                                       mpsx.CNNReductionType.SUM_BY_NON_ZERO_WEIGHTS])
def test_loss_and_gradient(gpu, loss_type, reduction):
    def case(device, rng):
        x, labels = test_loss.sample(rng, loss_type, (3, 5, 3, 2))
        weights = test_loss.sample_weights(rng, x.shape)
        d = test_loss.descriptor(loss_type, reduction, True, weight=0.75, label_smoothing=0.1)
        return test_loss.encode_loss(device, d, x, labels, weights)

    on_both(gpu, case)


def test_batch_normalization_training_sequence(gpu):
    """The reference CNN trained for three steps on the GPU and on the cpu:
    every convolution's weights, gamma, beta and running statistics agree."""
    images, labels = random_batch(16)

    def case(device, rng):
        model = ReferenceCNN(device, 16)
        for _ in range(3):
            model.train_step(images, labels)
            model.loss()
        out = []
        for layer in model.layers:
            cb = device.command_queue.command_buffer()
            state = layer["conv"].export_weights_and_biases(cb)
            state.synchronize(cb)
            layer["gamma_and_beta"].synchronize(cb)
            cb.commit()
            cb.wait_until_completed()
            out += [state.weights.to_numpy(), state.biases.to_numpy(), layer["gamma_and_beta"].gamma.to_numpy(),
                    layer["gamma_and_beta"].beta.to_numpy()]
        return out

    on_both(gpu, case, rtol=1e-3, atol=1e-4)


def test_reference_cnn_matches_cpu_and_pytorch_on_the_gpu(gpu):
    images, labels = random_batch(32)
    ours = ReferenceCNN(gpu, 32)
    cpu = ReferenceCNN(CPU, 32)
    torch.backends.cudnn.allow_tf32 = False  # float32 arithmetic, as mpsx's default accumulator precision
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = TorchReferenceCNN(ours.initial_parameters, "cuda:" + gpu.name.split(":")[1])
    losses, cpu_losses, expected = [], [], []
    for _ in range(5):
        ours.train_step(images, labels)
        cpu.train_step(images, labels)
        losses.append(ours.loss())
        cpu_losses.append(cpu.loss())
        expected.append(reference.train_step(images, labels).item())
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-4)
    assert losses[-1] < losses[0]


def test_replayed_step_is_one_graph_launch_with_the_same_result(gpu):
    images, labels = random_batch(8)
    eager, replayed = ReferenceCNN(gpu, 8), ReferenceCNN(gpu, 8)
    replayed.record_step()
    for _ in range(3):
        eager.train_step(images, labels)
        replayed.replay_step(images, labels)
        np.testing.assert_allclose(replayed.loss(), eager.loss(), rtol=1e-5)


def test_dlpack_shares_gradients_with_pytorch_without_a_copy(gpu, rng):
    source, w, _ = test_convolution.make(gpu, rng, 3, 3, 2, 4)
    conv, gradient = mpsx.CNNConvolution(gpu, source), mpsx.CNNConvolutionGradient(gpu, source)
    image = mpsx.Image.from_numpy(gpu, rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    cb = gpu.command_queue.command_buffer()
    y, state = conv.encode(cb, image, destination_state=True)
    gradient.encode(cb, y, image, state)
    with pytest.raises(mpsx.SynchronizationError):
        torch.from_dlpack(state.gradient_for_weights)
    state.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    buffer = state.gradient_for_weights
    assert buffer.__dlpack_device__() == (2, int(gpu.name.split(":")[1]))
    t = torch.from_dlpack(buffer)
    assert t.is_cuda and t.shape == w.shape and t.dtype == torch.float32
    np.testing.assert_array_equal(t.cpu().numpy(), buffer.to_numpy())
    t.mul_(2)  # the same memory: mpsx reads what PyTorch wrote
    torch.cuda.synchronize()
    np.testing.assert_array_equal(buffer.to_numpy(), t.cpu().numpy())
    assert torch.from_dlpack(buffer).data_ptr() == t.data_ptr()


def test_host_writes_are_done_before_queues_and_other_libraries_read(gpu, rng):
    # Fills and image writes return before the device has done them.
    n = 1 << 24  # 64 MiB: a fill the device takes a while over
    for _ in range(3):
        ones = mpsx.Vector.from_numpy(gpu, np.ones(n, np.float32))
        del ones  # its memory goes back to the pool, likely for the vector below
        zeros = mpsx.Vector(gpu, n)
        assert torch.from_dlpack(zeros.buffer).count_nonzero().item() == 0
    relu = mpsx.CNNNeuron(gpu, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    x = rng.standard_normal((16, 32, 64, 64)).astype(np.float32)
    image = mpsx.ImageBatch.from_numpy(gpu, x)
    for sign in (-1, 1, -1):
        image.write(x * sign)
        cb = gpu.command_queue.command_buffer()
        y = relu.encode_batch(cb, image)
        y.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_array_equal(y.to_numpy(), np.maximum(x * sign, 0))
        np.testing.assert_array_equal(image.to_numpy(), x * sign)


def test_out_of_memory_is_reported_as_such(gpu):
    free, total = torch.cuda.mem_get_info(int(gpu.name.split(":")[1]))
    channels = 4 * (total // (4 * 4 * 1024 * 1024)) + 4  # more float32 values than the GPU holds
    descriptor = mpsx.ImageDescriptor(width=1024, height=1024, feature_channels=int(channels))
    with pytest.raises(mpsx.OutOfMemoryError, match="out of memory"):
        mpsx.Image(gpu, descriptor)
    # and the device goes on working
    relu = mpsx.CNNNeuron(gpu, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 2, 2, 2)
    y = read(gpu, lambda cb: relu.encode(cb, mpsx.Image.from_numpy(gpu, x)))
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_half_accumulator_precision(gpu):
    """"half" lets the GPU use TF32 tensor cores (about 1e-3 relative); "float"
    stays exact float32 like the cpu."""
    def case(precision):
        def run(device, rng):
            source, _, _ = test_convolution.make(device, rng, 3, 3, 64, 64)
            conv = mpsx.CNNConvolution(device, source)
            conv.accumulator_precision_option = precision
            image = mpsx.Image.from_numpy(device, rng.standard_normal((4, 64, 8, 8)).astype(np.float32))
            return (read(device, lambda cb: conv.encode(cb, image)),)
        return run

    on_both(gpu, case("float"))
    on_both(gpu, case("half"), rtol=2e-2, atol=2e-2)


def test_half_accumulator_precision_reaches_the_gradient(gpu):
    """The gradient kernel computes as the forward kernel that made its state
    allows: "half" gives TF32 data and weights gradients (rounded visibly
    apart from float32's), "float" exact float32 like the cpu."""
    def case(precision):
        def run(device, rng):
            source, _, _ = test_convolution.make(device, rng, 3, 3, 64, 64)
            conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
            conv.accumulator_precision_option = precision
            image = mpsx.Image.from_numpy(device, rng.standard_normal((16, 64, 16, 16)).astype(np.float32))
            dy = mpsx.Image.from_numpy(device, rng.standard_normal((16, 64, 16, 16)).astype(np.float32))

            def encode(cb):
                _, state = conv.encode(cb, image, destination_state=True)
                return gradient.encode(cb, dy, image, state), state

            dx, state = test_convolution_transpose.synchronized(device, encode)
            return dx.to_numpy(), state.gradient_for_weights.to_numpy()
        return run

    on_both(gpu, case("float"), atol=1e-4)  # sums of 9*64 and 16*16*16 products, in float32
    on_both(gpu, case("half"), rtol=2e-2, atol=5e-1)  # the same in TF32
    exact, tf32 = case("float")(gpu, np.random.default_rng(7)), case("half")(gpu, np.random.default_rng(7))
    for name, a, b in zip(("data", "weights"), exact, tf32):
        assert np.abs(a - b).max() > 1e-4 * np.abs(a).max(), f"the {name} gradient did not use TF32"


def device_kernels(run):
    """The names of the kernels run() launches on the GPU, read with CUPTI through torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    run()  # primitives built outside the profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiled:
        run()
        torch.cuda.synchronize()
    return [e.name for e in profiled.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("cin, cout", [(3, 32), (32, 64)])
def test_float16_convolution_sums_in_float32_on_the_images_as_they_are(gpu, cin, cout):
    """Float16 images go to cuDNN in float16 (the filter converted to it):
    forward and both gradients land within float16 rounding of a float64
    reference on the same float16 values (sums of hundreds of products in
    float16 would not), and no image is converted or transposed around the
    convolution."""
    rng = np.random.default_rng(3)
    source, w, b = test_convolution.make(gpu, rng, 3, 3, cin, cout)
    conv, gradient = mpsx.CNNConvolution(gpu, source), mpsx.CNNConvolutionGradient(gpu, source)
    x16 = rng.standard_normal((8, cin, 16, 16)).astype(np.float16)
    dy16 = rng.standard_normal((8, cout, 16, 16)).astype(np.float16)
    image, dy = mpsx.Image.from_numpy(gpu, x16), mpsx.Image.from_numpy(gpu, dy16)

    def encode(cb):
        y, state = conv.encode(cb, image, destination_state=True)
        return y, gradient.encode(cb, dy, image, state), state

    y, dx, state = test_convolution_transpose.synchronized(gpu, encode)
    xt = torch.tensor(x16.astype(np.float64), requires_grad=True)
    wt = torch.tensor(w.astype(np.float16).astype(np.float64).transpose(0, 3, 1, 2), requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, wt, torch.tensor(b, dtype=torch.float64), padding=1)
    yt.backward(torch.tensor(dy16.astype(np.float64)))
    weights_gradient = wt.grad.numpy().transpose(0, 2, 3, 1)
    for name, got, expected in (("result", y.to_numpy(), yt.detach().numpy()),
                                ("source gradient", dx.to_numpy(), xt.grad.numpy()),
                                ("weights gradient", state.gradient_for_weights.to_numpy().reshape(w.shape),
                                 weights_gradient)):
        error = np.linalg.norm(got.astype(np.float64) - expected) / np.linalg.norm(expected)
        assert error < 2e-3, f"{name}: relative error {error:.2e}"
    assert y.to_numpy().dtype == np.float16 and dx.to_numpy().dtype == np.float16

    def step():
        cb = gpu.command_queue.command_buffer()
        encode(cb)
        cb.commit()
        cb.wait_until_completed()

    names = device_kernels(step)
    assert not [n for n in names if any(t in n.lower() for t in ("nchwtonhwc", "nhwctonchw", "transpose"))], names
    # One conversion per pass: the forward's and the backward data's filter into float16 (and the weights
    # gradient into float32 where cuDNN writes it in float16), never an image.
    conversions = [n for n in names if "copy_kernel" in n]
    assert len(conversions) <= 3, names


def test_float16_fully_connected_sums_in_float32(gpu):
    """A fully connected layer over float16 images multiplies them as they
    are on tensor cores with float32 sums: result and gradients within
    float16 rounding of a float64 reference on the same float16 values."""
    rng = np.random.default_rng(5)
    descriptor = mpsx.CNNConvolutionDescriptor(8, 8, 64, 10)
    w = (rng.standard_normal(descriptor.weights_shape) * 0.05).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    source = mpsx.ConvolutionWeights(descriptor, w, b)
    fc, gradient = mpsx.CNNFullyConnected(gpu, source), mpsx.CNNFullyConnectedGradient(gpu, source)
    x16 = rng.standard_normal((32, 64, 8, 8)).astype(np.float16)
    dy16 = rng.standard_normal((32, 10, 1, 1)).astype(np.float16)
    image, dy = mpsx.Image.from_numpy(gpu, x16), mpsx.Image.from_numpy(gpu, dy16)

    def encode(cb):
        y, state = fc.encode(cb, image, destination_state=True)
        return y, gradient.encode(cb, dy, image, state), state

    y, dx, state = test_convolution_transpose.synchronized(gpu, encode)
    x = x16.astype(np.float64).transpose(0, 2, 3, 1).reshape(32, -1)  # an image's NHWC values, as OHWI weights
    w64 = w.astype(np.float16).astype(np.float64).reshape(10, -1)
    g = dy16.astype(np.float64).reshape(32, 10)
    expected = {"result": x @ w64.T + b, "source gradient": (g @ w64).reshape(32, 8, 8, 64).transpose(0, 3, 1, 2),
                "weights gradient": (g.T @ x).reshape(w.shape)}
    got = {"result": y.to_numpy().reshape(32, 10), "source gradient": dx.to_numpy(),
           "weights gradient": state.gradient_for_weights.to_numpy().reshape(w.shape)}
    for name in expected:
        error = np.linalg.norm(got[name].astype(np.float64) - expected[name]) / np.linalg.norm(expected[name])
        assert error < 2e-3, f"{name}: relative error {error:.2e}"


def test_half_accumulator_precision_reaches_the_transpose(gpu):
    """CNNConvolutionTranspose.accumulator_precision_option "half" allows TF32 in its
    passes and its gradient's, as the convolution's does."""
    def case(precision):
        def run(device, rng):
            source, _, _ = test_convolution_transpose.make(rng, 3, 3, 64, 64, (2, 2))
            transpose = mpsx.CNNConvolutionTranspose(device, source)
            gradient = mpsx.CNNConvolutionTransposeGradient(device, source)
            transpose.accumulator_precision_option = precision
            image = mpsx.Image.from_numpy(device, rng.standard_normal((8, 64, 16, 16)).astype(np.float32))

            def encode(cb):
                y, state = transpose.encode(cb, image, destination_state=True)
                dy = mpsx.Image.from_numpy(device, rng.standard_normal((8, 64, y.height, y.width)).astype(np.float32))
                return y, gradient.encode(cb, dy, image, state), state

            y, dx, state = test_convolution_transpose.synchronized(device, encode)
            return y.to_numpy(), dx.to_numpy(), state.gradient_for_weights.to_numpy()
        return run

    on_both(gpu, case("float"), atol=1e-4)
    on_both(gpu, case("half"), rtol=2e-2, atol=5e-1)
    exact, tf32 = case("float")(gpu, np.random.default_rng(7)), case("half")(gpu, np.random.default_rng(7))
    for name, a, b in zip(("result", "data", "weights"), exact, tf32):
        assert np.abs(a - b).max() > 1e-4 * np.abs(a).max(), f"the {name} did not use TF32"


@pytest.mark.parametrize("dtype, channels", [(np.float32, 12), (np.float16, 12), (np.float32, 6), (np.float16, 6)])
def test_batch_normalization_and_biases_on_dense_images(gpu, dtype, channels):
    """Dense NHWC images whose channels come in fours (12) take the vectorized
    kernels, the others (6) the general ones: statistics, normalization with
    its fused neuron, statistics gradient and gradient, a convolution's bias
    and bias gradient, all as on the cpu. Float32 fuses ReLU (compiled into
    the kernels); float16 a sigmoid (read at run time), which has no kink for
    the two devices' float16 roundings to fall on either side of."""
    neuron = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU if dtype == np.float32 else mpsx.NeuronType.SIGMOID)

    def case(device, rng):
        source, _, _ = test_convolution.make(device, rng, 3, 3, channels, channels)
        conv, conv_gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
        gamma = rng.uniform(0.5, 1.5, channels).astype(np.float32)
        beta = rng.standard_normal(channels).astype(np.float32)
        weights = mpsx.BatchNormalizationWeights(gamma, beta, np.zeros(channels, np.float32),
                                                 np.ones(channels, np.float32), 1e-5)
        bn = mpsx.CNNBatchNormalization(device, weights, fused_neuron_descriptor=neuron)
        statistics = mpsx.CNNBatchNormalizationStatistics(device)
        statistics_gradient = mpsx.CNNBatchNormalizationStatisticsGradient(device, neuron)
        bn_gradient = mpsx.CNNBatchNormalizationGradient(device, neuron)
        x = mpsx.ImageBatch.from_numpy(device, (rng.standard_normal((6, channels, 9, 7)) + 3).astype(dtype))
        dz = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((6, channels, 9, 7)).astype(dtype))

        def encode(cb):
            y, conv_states = conv.encode_batch(cb, x, destination_states=True)
            state = bn.result_state(y)
            statistics.encode_batch(cb, y, state)
            z = bn.encode_batch(cb, y, batch_normalization_state=state)
            statistics_gradient.encode_batch(cb, dz, y, state)
            dy = bn_gradient.encode_batch(cb, dz, y, state)
            dx = conv_gradient.encode_batch(cb, dy, x, conv_states)
            return y, z, dy, dx, state, conv_states[0]

        y, z, dy, dx, state, conv_state = test_convolution_transpose.synchronized(device, encode)
        return (y.to_numpy(), z.to_numpy(), dy.to_numpy(), dx.to_numpy(), state.mean.to_numpy(),
                state.variance.to_numpy(), state.gradient_for_gamma.to_numpy(), state.gradient_for_beta.to_numpy(),
                conv_state.gradient_for_biases.to_numpy())

    tolerance = 1e-4 if dtype == np.float32 else 3e-2
    on_both(gpu, case, tolerance, tolerance)


def test_image_writes_are_copied_before_they_return(gpu, rng):
    """Image.write returns once the host memory is copied (page-locked
    staging, several writes in flight): the array may change at once, and
    each image gets what it was given."""
    arrays = [rng.standard_normal((4, 8, 16, 16)).astype(np.float32) for _ in range(7)]
    images = [mpsx.ImageBatch(gpu, mpsx.ImageDescriptor(width=16, height=16, feature_channels=8, number_of_images=4))
              for _ in arrays]
    scratch = np.empty_like(arrays[0])
    for image, array in zip(images, arrays):
        scratch[...] = array
        image.write(scratch)
        scratch[...] = np.nan  # too late to reach the image
    for image, array in zip(images, arrays):
        np.testing.assert_array_equal(image.to_numpy(), array)


PLANNED_CONVOLUTION = """
import sys
import numpy as np
import mpsx
device = mpsx.Device(sys.argv[1])
rng = np.random.default_rng(0)
weights = rng.standard_normal((16, 3, 3, 8)).astype(np.float32)
conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 8, 16), weights))
x = mpsx.Image.from_numpy(device, rng.standard_normal((4, 8, 12, 12)).astype(np.float32))
cb = device.command_queue.command_buffer()
y = conv.encode(cb, x)
y.synchronize(cb)
cb.commit()
cb.wait_until_completed()
np.save(sys.argv[2], y.to_numpy())
"""


def test_engine_choices_are_kept_across_processes(gpu, tmp_path):
    """The engine timing chose for a convolution's pass is kept in the plan
    cache file: another process takes it without timing (it adds no line),
    a stale or unreadable entry is timed again, MPSX_PLAN_CACHE="" keeps no
    file and one that cannot be written is passed over; by default it is
    under XDG_CACHE_HOME."""
    environment = {k: v for k, v in os.environ.items() if k not in ("MPSX_PLAN_CACHE", "XDG_CACHE_HOME")}

    def run(name, **settings):
        # From tmp_path, where no checkout's mpsx/ comes before the one under test.
        done = subprocess.run([sys.executable, "-c", PLANNED_CONVOLUTION, gpu.name, str(tmp_path / name)],
                              env=dict(environment, HOME=str(tmp_path / "home"), **settings), timeout=300,
                              capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return np.load(tmp_path / f"{name}.npy")

    cache = tmp_path / "plans.txt"
    first = run("first", MPSX_PLAN_CACHE=str(cache))
    lines = cache.read_text().splitlines()
    assert len(lines) == 1, lines  # the forward pass, timed once
    key, choice = lines[0].split("\t")
    assert torch.cuda.get_device_name(0) in key and len(choice.split()) == 3
    np.testing.assert_allclose(run("again", MPSX_PLAN_CACHE=str(cache)), first, rtol=1e-5, atol=1e-5)
    assert cache.read_text().splitlines() == lines
    cache.write_text(f"not a choice\n{key}\tmany words here\n{key}\t0 0 987654321\n")
    np.testing.assert_allclose(run("stale", MPSX_PLAN_CACHE=str(cache)), first, rtol=1e-5, atol=1e-5)
    last = cache.read_text().splitlines()[-1]
    assert last.startswith(key + "\t") and not last.endswith("987654321")
    run("none", MPSX_PLAN_CACHE="")
    assert not (tmp_path / "home" / ".cache" / "mpsx").exists()
    # A file that cannot be written (a directory there) costs the choices, not the run.
    np.testing.assert_allclose(run("unwritable", MPSX_PLAN_CACHE=str(tmp_path)), first, rtol=1e-5, atol=1e-5)
    run("default", XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert (tmp_path / "xdg" / "mpsx" / "cudnn-plans.txt").read_text().startswith(key + "\t")


def test_a_process_under_compute_sanitizer_adds_no_engine_choices(gpu, tmp_path):
    """compute-sanitizer (a tool injected through CUDA_INJECTION64_PATH) slows kernels unevenly: a process run
    under it reads the plan cache but appends nothing to it."""
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("needs compute-sanitizer on PATH")
    environment = {k: v for k, v in os.environ.items() if k not in ("MPSX_PLAN_CACHE", "XDG_CACHE_HOME")}
    cache = tmp_path / "plans.txt"
    done = subprocess.run([sanitizer, "--tool", "memcheck", sys.executable, "-c", PLANNED_CONVOLUTION, gpu.name,
                           str(tmp_path / "sanitized")], env=dict(environment, MPSX_PLAN_CACHE=str(cache)),
                          timeout=600, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert not cache.exists() or cache.read_text() == ""
    # Without the tool the same convolution is timed and kept.
    done = subprocess.run([sys.executable, "-c", PLANNED_CONVOLUTION, gpu.name, str(tmp_path / "plain")],
                          env=dict(environment, MPSX_PLAN_CACHE=str(cache)), timeout=300, capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(cache.read_text().splitlines()) == 1
    np.testing.assert_allclose(np.load(tmp_path / "sanitized.npy"), np.load(tmp_path / "plain.npy"), rtol=1e-5,
                               atol=1e-5)

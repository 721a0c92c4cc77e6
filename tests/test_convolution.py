"""CNNConvolution, CNNFullyConnected and their gradients against torch on the
CPU and finite differences; data sources, weight states and updates."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import (ArrayConvolutionSource, RecordedLoads, assert_same_run, committed_training_step,
                     encode_training_step, finite_difference_gradient, read, run, tolerance)

P = mpsx.NNPaddingMethod


def mps_padding(size, kernel, stride, dilation, method):
    """(before, after, destination) of one dimension, from the MPSNNPadding
    sample code in MPSNeuralNetworkTypes.h."""
    extent = (kernel - 1) * dilation + 1
    style = {P.SIZE_VALID_ONLY: -1, P.SIZE_SAME: 0, P.SIZE_FULL: 1}[method & (P.SIZE_SAME | P.SIZE_FULL)]
    destination = -(-(size + style * (extent - 1)) // stride)
    extra = (destination - 1) * stride + extent - size
    before = int((extra + 1) / 2)  # centered, remainder to the top left (the default)
    return before, extra - before, destination


def reference_forward(x, w, b, stride=(1, 1), dilation=(1, 1), groups=1, method=P.SIZE_SAME):
    """MPS convolution via torch: explicit zero padding, OHWI weights."""
    n, c, h, width = x.shape
    kh, kw = w.shape[1:3]
    top, bottom, _ = mps_padding(h, kh, stride[1], dilation[1], method)
    left, right, _ = mps_padding(width, kw, stride[0], dilation[0], method)
    xt = torch.as_tensor(x, dtype=torch.float64)
    xt = F.pad(xt, (max(left, 0), max(right, 0), max(top, 0), max(bottom, 0)))
    xt = xt[:, :, max(-top, 0):xt.shape[2] - max(-bottom, 0), max(-left, 0):xt.shape[3] - max(-right, 0)]
    wt = torch.as_tensor(w, dtype=torch.float64).permute(0, 3, 1, 2)
    bt = None if b is None else torch.as_tensor(b, dtype=torch.float64)
    return F.conv2d(xt, wt, bt, stride=(stride[1], stride[0]), dilation=(dilation[1], dilation[0]), groups=groups)


def make(device, rng, kw, kh, cin, cout, stride=(1, 1), dilation=(1, 1), groups=1, neuron=None, bias=True):
    d = mpsx.CNNConvolutionDescriptor(kw, kh, cin, cout, stride[0], stride[1], dilation[0], dilation[1], groups,
                                      fused_neuron_descriptor=neuron)
    w = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    return mpsx.ConvolutionWeights(d, w, b), w, b


CASES = [
    # kw, kh, cin, cout, stride, dilation, groups, image (n, h, w)
    (3, 3, 3, 8, (1, 1), (1, 1), 1, (2, 9, 11)),
    (3, 3, 4, 4, (2, 2), (1, 1), 1, (1, 8, 7)),
    (5, 3, 6, 4, (1, 2), (1, 1), 2, (3, 10, 9)),
    (3, 3, 8, 8, (1, 1), (2, 2), 8, (2, 9, 9)),
    (2, 2, 3, 5, (1, 1), (1, 1), 1, (2, 6, 5)),
    (1, 1, 5, 7, (1, 1), (1, 1), 1, (4, 3, 3)),
    (4, 1, 2, 3, (3, 1), (1, 3), 1, (1, 7, 13)),
    # SAME pads a stride-2 window on even sizes on the top and left only.
    (3, 3, 8, 8, (2, 2), (1, 1), 1, (2, 10, 8)),
    (3, 3, 4, 4, (2, 2), (2, 2), 1, (1, 12, 10)),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c[:7]) for c in CASES])
@pytest.mark.parametrize("method", [P.SIZE_SAME, P.SIZE_VALID_ONLY, P.SIZE_FULL], ids=["same", "valid", "full"])
def test_forward_matches_torch(device, rng, case, method):
    kw, kh, cin, cout, stride, dilation, groups, (n, h, w) = case
    source, weights, biases = make(device, rng, kw, kh, cin, cout, stride, dilation, groups)
    conv = mpsx.CNNConvolution(device, source)
    conv.padding = method
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    expected = reference_forward(x, weights, biases, stride, dilation, groups, method).numpy()
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_forward_float16_and_fused_neuron(device, rng):
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU, 0.1)
    source, weights, biases = make(device, rng, 3, 3, 4, 6, neuron=relu)
    conv = mpsx.CNNConvolution(device, source)
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float16)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    assert y.dtype == np.float16
    z = reference_forward(x.astype(np.float32), weights, biases).numpy()
    np.testing.assert_allclose(y, np.where(z >= 0, z, 0.1 * z), *tolerance(np.float16))


def test_offset_clip_and_channel_offsets(device, rng):
    source, weights, biases = make(device, rng, 3, 3, 4, 4)
    conv = mpsx.CNNConvolution(device, source)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    destination = mpsx.Image.from_numpy(device, np.zeros((1, 8, 4, 5), np.float32))
    conv.source_feature_channel_offset = 4
    conv.destination_feature_channel_offset = 4
    conv.offset = (2, 3)
    conv.clip_rect = (1, 1, 0, 3, 2, 1)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x), destination))
    full = reference_forward(x[:, 4:], weights, biases, method=P.SIZE_SAME).numpy()  # centre (i, j) at output (i, j)
    expected = np.zeros((1, 8, 4, 5), np.float32)
    # clip origin (1, 1) reads with its window centred on source (2, 3).
    expected[0, 4:, 1:3, 1:4] = full[0, :, 3:5, 2:5]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=[str(c[:7]) for c in CASES])
def test_gradients_match_torch(device, rng, case):
    kw, kh, cin, cout, stride, dilation, groups, (n, h, w) = case
    source, weights, biases = make(device, rng, kw, kh, cin, cout, stride, dilation, groups)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(weights, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(biases, dtype=torch.float64, requires_grad=True)
    yt = reference_forward(xt, wt, bt, stride, dilation, groups)
    dy = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
    yt.backward(torch.as_tensor(dy, dtype=torch.float64))

    def encode(cb):
        _, state = conv.encode(cb, image, destination_state=True)
        dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy), image, state)
        return dx, state

    cb = device.command_queue.command_buffer()
    dx, state = encode(cb)
    dx.synchronize(cb)
    state.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(state.gradient_for_biases.to_numpy(), bt.grad.numpy(), rtol=1e-4, atol=1e-3)
    assert state.gradient_for_weights.shape == weights.shape
    assert state.convolution is conv


def forward_then_gradient(device, conv, gradient, x, dy):
    """As MPS code runs them: the forward pass and the gradient on command buffers of their own. Returns the
    result, the source gradient and the gradient state, synchronized."""
    image = mpsx.Image.from_numpy(device, x)
    forward, backward = device.command_queue.command_buffer(), device.command_queue.command_buffer()
    y, state = conv.encode(forward, image, destination_state=True)
    y.synchronize(forward)
    forward.commit()
    dx = gradient.encode(backward, mpsx.Image.from_numpy(device, dy), image, state)
    dx.synchronize(backward)
    state.synchronize(backward)
    backward.commit()
    backward.wait_until_completed()
    return y, dx, state


def test_float16_strided_gradients_padded_on_one_side(device, rng):
    """SAME padding of a stride-2 window on even sizes pads the top and left only: float16 images, with
    filters converted to float16 and weights gradients back to float32, against float64 torch."""
    source, weights, biases = make(device, rng, 3, 3, 8, 16, stride=(2, 2))
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = rng.standard_normal((2, 8, 10, 8)).astype(np.float16)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(weights, dtype=torch.float64, requires_grad=True)
    yt = reference_forward(xt, wt, torch.as_tensor(biases, dtype=torch.float64), (2, 2))
    dy = rng.standard_normal(tuple(yt.shape)).astype(np.float16)
    yt.backward(torch.as_tensor(dy, dtype=torch.float64))
    y, dx, state = forward_then_gradient(device, conv, gradient, x, dy)
    assert y.to_numpy().dtype == dx.to_numpy().dtype == np.float16
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y.to_numpy(), yt.detach().numpy(), rtol=rtol, atol=atol * 4)
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=rtol, atol=atol * 4)
    # Sums of 40 products each, of values stored in float16.
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy(), wt.grad.numpy(), rtol=rtol, atol=0.1)
    np.testing.assert_allclose(state.gradient_for_biases.to_numpy(), dy.astype(np.float64).sum(axis=(0, 2, 3)),
                               rtol=rtol, atol=0.05)


MATRIX_PRODUCT_CASES = [
    # kw, kh, cin, cout, stride, dilation, groups, image (n, h, w); SAME padding.
    # One result per image (a ResNet's last stage on small images):
    (3, 3, 16, 8, (1, 1), (1, 1), 1, (5, 1, 1)),  # only the centre tap on the source
    (3, 3, 8, 16, (2, 2), (1, 1), 1, (3, 2, 2)),  # padded on the top and left: a 2x2 block of taps
    (3, 3, 4, 8, (1, 1), (2, 2), 1, (3, 1, 1)),  # dilated
    (3, 3, 4, 8, (3, 2), (1, 1), 1, (2, 2, 3)),  # two whole kernel rows
    (3, 3, 4, 8, (1, 1), (1, 1), 2, (2, 1, 1)),  # grouped
    # 1x1 windows with a stride (a ResNet's downsampling shortcut):
    (1, 1, 8, 8, (2, 2), (1, 1), 1, (2, 2, 2)),  # one result, three source values left out
    (1, 1, 8, 16, (2, 2), (1, 1), 1, (3, 8, 6)),
    (1, 1, 4, 8, (3, 2), (1, 1), 1, (2, 7, 9)),  # the last row and column not sampled
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", MATRIX_PRODUCT_CASES, ids=[str(c) for c in MATRIX_PRODUCT_CASES])
def test_windows_that_are_matrix_products_match_torch(device, rng, case, dtype):
    """Convolutions whose windows make them matrix products (cuda runs them on cuBLAS), forward and gradients
    on command buffers of their own, against float64 torch."""
    kw, kh, cin, cout, stride, dilation, groups, (n, h, w) = case
    source, weights, biases = make(device, rng, kw, kh, cin, cout, stride, dilation, groups)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = rng.standard_normal((n, cin, h, w)).astype(dtype)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(weights, dtype=torch.float64, requires_grad=True)
    yt = reference_forward(xt, wt, torch.as_tensor(biases, dtype=torch.float64), stride, dilation, groups)
    dy = rng.standard_normal(tuple(yt.shape)).astype(dtype)
    yt.backward(torch.as_tensor(dy, dtype=torch.float64))
    y, dx, state = forward_then_gradient(device, conv, gradient, x, dy)
    rtol, atol = (1e-4, 1e-4) if dtype == np.float32 else (2e-2, 8e-2)
    np.testing.assert_allclose(y.to_numpy(), yt.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy(), wt.grad.numpy(), rtol=rtol,
                               atol=1e-3 if dtype == np.float32 else 0.1)
    np.testing.assert_allclose(state.gradient_for_biases.to_numpy(), dy.astype(np.float64).sum(axis=(0, 2, 3)),
                               rtol=rtol, atol=1e-3 if dtype == np.float32 else 0.05)


def test_gradient_written_over_its_source_takes_the_source_as_encoded(device, rng):
    # The weights gradient reads the source, which a data gradient written
    # over it changes: it comes first (on cuda the two otherwise run side by
    # side).
    n, c, h, w = 2, 4, 6, 5
    source, weights, biases = make(device, rng, 3, 3, c, c)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    dy = rng.standard_normal((n, c, h, w)).astype(np.float32)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(weights, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(biases, dtype=torch.float64, requires_grad=True)
    reference_forward(xt, wt, bt).backward(torch.as_tensor(dy, dtype=torch.float64))
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    _, state = conv.encode(cb, image, destination_state=True)
    dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy), image, state, destination_gradient=image)
    dx.synchronize(cb)
    state.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(state.gradient_for_biases.to_numpy(), bt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_gradient_written_over_the_source_gradient_is_refused(device, rng):
    n, c, h, w = 2, 4, 6, 5
    source, _, _ = make(device, rng, 3, 3, c, c)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((n, c, h, w)).astype(np.float32))
    dy = rng.standard_normal((n, c, h, w)).astype(np.float32)
    dy_image = mpsx.Image.from_numpy(device, dy)
    cb = device.command_queue.command_buffer()
    _, state = conv.encode(cb, image, destination_state=True)
    with pytest.raises(ValueError, match="destination gradient shares memory with the source gradient"):
        gradient.encode(cb, dy_image, image, state, destination_gradient=dy_image)
    # Refused before anything was enqueued: the state is not spent, dy is unchanged.
    dx = gradient.encode(cb, dy_image, image, state)
    dx.synchronize(cb)
    dy_image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    np.testing.assert_array_equal(dy_image.to_numpy(), dy)


def test_gradient_finite_differences(device, rng):
    neuron = mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH, 1.0, 1.0)
    source, weights, biases = make(device, rng, 3, 2, 2, 3, stride=(2, 1), neuron=neuron)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = rng.standard_normal((1, 2, 4, 5))
    dy = None

    def loss(values, w=weights):
        c = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(source.descriptor(), w, biases))
        y = read(device, lambda cb: c.encode(cb, mpsx.Image.from_numpy(device, values.astype(np.float32))))
        return float(np.sum(y.astype(np.float64) * dy))

    image = mpsx.Image.from_numpy(device, x.astype(np.float32))
    y0 = read(device, lambda cb: conv.encode(cb, image))
    dy = rng.standard_normal(y0.shape)
    cb = device.command_queue.command_buffer()
    _, state = conv.encode(cb, image, destination_state=True)
    dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy.astype(np.float32)), image, state)
    dx.synchronize(cb)
    state.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    numeric = finite_difference_gradient(loss, x, 1e-2)
    np.testing.assert_allclose(dx.to_numpy(), numeric, rtol=2e-2, atol=2e-3)
    every_third = range(0, weights.size, 3)
    numeric_w = finite_difference_gradient(lambda w: loss(x, w), weights, 1e-2, every_third).reshape(-1)
    for i in every_third:
        assert state.gradient_for_weights.to_numpy().flat[i] == pytest.approx(numeric_w[i], rel=2e-2, abs=2e-3)


def test_fully_connected_matches_torch(device, rng):
    d = mpsx.CNNConvolutionDescriptor(4, 3, 5, 7)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    source = mpsx.ConvolutionWeights(d, w, b)
    fc, gradient = mpsx.CNNFullyConnected(device, source), mpsx.CNNFullyConnectedGradient(device, source)
    x = rng.standard_normal((6, 5, 3, 4)).astype(np.float32)
    image = mpsx.ImageBatch.from_numpy(device, x)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    yt = xt.permute(0, 2, 3, 1).reshape(6, -1) @ wt.reshape(7, -1).T + torch.as_tensor(b, dtype=torch.float64)
    dy = rng.standard_normal((6, 7)).astype(np.float32)
    yt.backward(torch.as_tensor(dy, dtype=torch.float64))
    cb = device.command_queue.command_buffer()
    y, states = fc.encode_batch(cb, image, destination_states=True)
    dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy.reshape(6, 7, 1, 1)), image, states)
    for item in (y, dx, states[0]):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert y.shape == (6, 7, 1, 1)
    np.testing.assert_allclose(y.to_numpy().reshape(6, 7), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(states[0].gradient_for_weights.to_numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)
    with pytest.raises(mpsx.ShapeError, match="expected a 4x3 source image"):
        fc.encode(device.command_queue.command_buffer(), mpsx.Image.from_numpy(device, x[:1, :, :2]))


class ArraySource(RecordedLoads, ArrayConvolutionSource):
    """A Python data source, as users write them."""

    def __init__(self, descriptor, weights, biases=None, data_type=mpsx.DataType.FLOAT32, **extra):
        ArrayConvolutionSource.__init__(self, descriptor, weights, biases)
        self.data_type = data_type
        RecordedLoads.__init__(self, **extra)

    def weights(self):
        self.calls.append("weights")
        return self._weights


def test_python_data_sources(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    src = ArraySource(d, w, b)
    conv = mpsx.CNNConvolution(device, src)
    assert src.calls == ["load", "weights", "purge"]
    assert conv.label == "array source" and conv.data_source is src
    y = read(device, lambda cb: conv.encode(cb, image))
    np.testing.assert_allclose(y, reference_forward(x, w, b).numpy(), rtol=1e-4, atol=1e-4)

    half = ArraySource(d, w.astype(np.float16), b, mpsx.DataType.FLOAT16)
    y16 = read(device, lambda cb: mpsx.CNNConvolution(device, half).encode(cb, image))
    np.testing.assert_allclose(y16, reference_forward(x, w.astype(np.float16).astype(np.float32), b).numpy(),
                               rtol=1e-4, atol=1e-4)

    rounded = ArraySource(d, w, b, kernel_weights_data_type=mpsx.DataType.FLOAT16)
    y_rounded = read(device, lambda cb: mpsx.CNNConvolution(device, rounded).encode(cb, image))
    np.testing.assert_allclose(y_rounded, y16, rtol=1e-6, atol=1e-6)

    q = rng.integers(0, 256, d.weights_shape).astype(np.uint8)
    table = np.linspace(-1, 1, 256).astype(np.float32)
    lut = ArraySource(d, q, None, mpsx.DataType.UINT8, weights_quantization_type="lookup_table",
                      lookup_table_for_uint8_kernel=lambda: table)
    y_lut = read(device, lambda cb: mpsx.CNNConvolution(device, lut).encode(cb, image))
    np.testing.assert_allclose(y_lut, reference_forward(x, table[q], None).numpy(), rtol=1e-4, atol=1e-4)

    ranges = np.array([[-1, 1], [0, 2], [-3, 0.5]], np.float32)
    linear = ArraySource(d, q, None, mpsx.DataType.UINT8, weights_quantization_type="linear",
                         ranges_for_uint8_kernel=lambda: ranges)
    y_linear = read(device, lambda cb: mpsx.CNNConvolution(device, linear).encode(cb, image))
    dequantized = q / 255.0 * (ranges[:, 1] - ranges[:, 0])[:, None, None, None] + ranges[:, 0][:, None, None, None]
    np.testing.assert_allclose(y_linear, reference_forward(x, dequantized, None).numpy(), rtol=1e-4, atol=1e-4)


def test_data_source_errors(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    w = np.zeros(d.weights_shape, np.float32)
    with pytest.raises(mpsx.ShapeError, match="hold 53 values; a 3x3x3x2 \\(OHWI\\) filter needs 54"):
        mpsx.CNNConvolution(device, ArraySource(d, w.reshape(-1)[:53]))
    with pytest.raises(mpsx.ShapeError, match="bias_terms hold 2"):
        mpsx.CNNConvolution(device, ArraySource(d, w, np.zeros(2, np.float32)))
    with pytest.raises(TypeError, match="object does not implement data_type, descriptor, weights, bias_terms, "
                                        "load, purge, label, required by MPSCNNConvolutionDataSource"):
        mpsx.CNNConvolution(device, object())
    with pytest.raises(TypeError, match="given None"):
        mpsx.CNNConvolution(device, None)

    class Failing(ArraySource):
        def weights(self):
            raise RuntimeError("weights are gone")

    failing = Failing(d, w)
    with pytest.raises(RuntimeError, match="weights are gone"):
        mpsx.CNNConvolution(device, failing)
    assert failing.calls == ["load", "purge"]  # load balanced by purge
    with pytest.raises(TypeError, match="uint8"):
        mpsx.CNNConvolution(device, ArraySource(d, w, None, mpsx.DataType.UINT8))
    with pytest.raises(ValueError, match="weights_quantization_type"):
        mpsx.CNNConvolution(device, ArraySource(d, w.astype(np.uint8), None, mpsx.DataType.UINT8))
    with pytest.raises(ValueError, match="groups \\(3\\) must divide"):
        mpsx.CNNConvolutionDescriptor(3, 3, 4, 6, groups=3)
    with pytest.raises(ValueError, match="must be positive"):
        mpsx.CNNConvolutionDescriptor(0, 3, 4, 6)
    with pytest.raises(mpsx.ShapeError, match="expected 54 weights"):
        mpsx.ConvolutionWeights(d, np.zeros(10, np.float32))


@pytest.mark.parametrize("kernel", ["CNNConvolution", "CNNFullyConnected", "CNNConvolutionTranspose"])
def test_empty_biases_are_refused(device, rng, kernel):
    """MPS's biasTerms are nil or one float per output feature channel (MPSCNNConvolution.h): an empty array, given
    to ConvolutionWeights or by a data source, is neither, and is refused rather than taken for none."""
    d = mpsx.CNNConvolutionDescriptor(1, 1, 2, 4)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    cls = getattr(mpsx, kernel)
    for empty in (np.zeros((0,), np.float32), np.zeros((4, 0), np.float32), []):
        with pytest.raises(mpsx.ShapeError, match=r"^ConvolutionWeights: expected 4 biases or None, given 0$"):
            mpsx.ConvolutionWeights(d, w, biases=empty)
        with pytest.raises(mpsx.ShapeError, match="the data source's bias_terms hold 0 float32 values; expected 4 "):
            cls(device, ArraySource(d, w, empty))
    source = ArraySource(d, w, None)
    with_none = cls(device, source)
    source._biases = np.zeros(0, np.float32)
    with pytest.raises(mpsx.ShapeError, match="bias_terms hold 0 float32 values"):
        with_none.reload_weights_and_biases_from_data_source()
    # None is no biases: as zeros, on the weights the kernel kept.
    x = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 1, 1)).astype(np.float32))
    zeros = cls(device, mpsx.ConvolutionWeights(d, w, np.zeros(4, np.float32)))
    for kernel in (with_none, cls(device, mpsx.ConvolutionWeights(d, w, None))):
        np.testing.assert_array_equal(read(device, lambda cb: kernel.encode(cb, x)),
                                      read(device, lambda cb: zeros.encode(cb, x)))


def test_descriptor_sizes_are_ints(device):
    arguments = dict(kernel_width=3, kernel_height=3, input_feature_channels=2, output_feature_channels=4,
                     stride_in_pixels_x=1, stride_in_pixels_y=1, dilation_rate_x=1, dilation_rate_y=1, groups=2)
    for name in arguments:
        bad = dict(arguments, **{name: 2.0})
        with pytest.raises(TypeError, match=f"{name} must be an int, given float 2.0"):
            mpsx.CNNConvolutionDescriptor(**bad)


def test_gradient_option_is_one_of_the_options(device, rng):
    source, _, _ = make(device, rng, 3, 3, 2, 2)
    gradient = mpsx.CNNConvolutionGradient(device, source)
    for value in (0, 4, 2**62):
        with pytest.raises(ValueError, match="gradient_option must be CNNConvolutionGradientOption"):
            gradient.gradient_option = value
    with pytest.raises(TypeError, match="gradient_option must be an int, given float"):
        gradient.gradient_option = 1.0
    assert gradient.gradient_option == mpsx.CNNConvolutionGradientOption.ALL


def test_weights_of_another_shape_or_size_are_refused(device, rng):
    d = mpsx.CNNConvolutionDescriptor(5, 5, 3, 4)
    oihw = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    # As many values as OHWI (4, 5, 5, 3): only the shape tells PyTorch's layout apart.
    for make in (lambda: mpsx.ConvolutionWeights(d, oihw), lambda: mpsx.CNNConvolution(device, ArraySource(d, oihw))):
        with pytest.raises(mpsx.ShapeError, match=r"expected weights of shape \(4, 5, 5, 3\) \(OHWI.*given shape "
                                                  r"\(4, 3, 5, 5\); that is PyTorch's OIHW layout: pass "
                                                  r"weight.transpose\(0, 2, 3, 1\)"):
            make()
    with pytest.raises(mpsx.ShapeError, match=r"given shape \(20, 5, 3\)$"):
        mpsx.ConvolutionWeights(d, oihw.reshape(20, 5, 3))
    ohwi = oihw.transpose(0, 2, 3, 1)
    assert np.array_equal(mpsx.ConvolutionWeights(d, ohwi).weights(), ohwi)
    assert np.array_equal(mpsx.ConvolutionWeights(d, ohwi.reshape(-1)).weights(), ohwi)  # flat OHWI

    with pytest.raises(TypeError, match="weights must be an mpsx.Buffer or an array, given None"):
        mpsx.CNNConvolutionWeightsAndBiasesState(device, None)
    slopes = mpsx.NNNeuronDescriptor(mpsx.NeuronType.PRELU, data=np.ones(5, np.float32))
    with pytest.raises(ValueError, match="the fused PReLU neuron has 5 slopes; the convolution has 4 output"):
        mpsx.CNNConvolutionDescriptor(5, 5, 3, 4, fused_neuron_descriptor=slopes)

    with pytest.raises(TypeError, match="ArraySource.data_type is <DataType.BFLOAT16: 2>; convolution weights are "
                                        "FLOAT32, FLOAT16 or UINT8"):
        mpsx.CNNConvolution(device, ArraySource(d, ohwi, None, mpsx.DataType.BFLOAT16))


def test_weight_states_must_hold_exactly_the_filter(device, rng):
    source, weights, biases = make(device, rng, 3, 3, 4, 2)
    conv = mpsx.CNNConvolution(device, source)
    cb = device.command_queue.command_buffer()
    for count in (weights.size * 4, weights.size - 1):  # another layer's weights, or too few
        state = mpsx.CNNConvolutionWeightsAndBiasesState(device, np.zeros(count, np.float32))
        with pytest.raises(mpsx.ShapeError, match=f"the weights buffer holds {count * 4} bytes past its offset; the "
                                                  f"filter needs exactly {weights.size * 4}"):
            conv.reload_weights_and_biases(cb, state)
    state = mpsx.CNNConvolutionWeightsAndBiasesState(device, weights, np.zeros(3, np.float32))
    with pytest.raises(mpsx.ShapeError, match="the biases buffer holds 12 bytes past its offset; the filter needs "
                                              "exactly 8"):
        conv.reload_weights_and_biases(cb, state)
    assert cb.command_count == 0

    class Returning(ArraySource):
        # A GPU-side update that returns another layer's weights.
        def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
            return mpsx.CNNConvolutionWeightsAndBiasesState(device, np.zeros(weights.size * 4, np.float32))

    returning = Returning(mpsx.CNNConvolutionDescriptor(3, 3, 4, 2), weights)
    conv = mpsx.CNNConvolution(device, returning)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 5, 5)).astype(np.float32))
    y, state = conv.encode(cb, image, destination_state=True)
    mpsx.CNNConvolutionGradient(device, returning).encode(cb, y, image, state)
    count = cb.command_count
    with pytest.raises(mpsx.ShapeError, match="the filter needs exactly"):
        conv.encode_weights_and_bias_update(cb, state)
    assert cb.command_count == count


def test_gradient_states_outlive_their_command_buffer(device, rng):
    # MPSState.h: "Non-temporary MPSState objects are valid on any MTLCommandBuffer on the same device until they
    # are released." A gradient after the forward's command buffer completed equals one encoded beside it.
    source, _, _ = make(device, rng, 3, 3, 2, 2)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    first = device.command_queue.command_buffer()
    y, state = conv.encode(first, image, destination_state=True)
    beside = gradient.encode(first, dy, image, state)
    beside.synchronize(first)
    first.commit()
    first.wait_until_completed()
    expected = beside.to_numpy()
    cb = device.command_queue.command_buffer()
    later = gradient.encode(cb, dy, image, state)
    later.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    assert_same_run(device, later.to_numpy(), expected)
    cb = device.command_queue.command_buffer()
    other = mpsx.Image.from_numpy(device, image.to_numpy())
    with pytest.raises(mpsx.StateError, match="made for another batch of source images"):
        gradient.encode(cb, dy, other, state)
    assert cb.command_count == 0


def test_encode_errors(device, rng):
    source, _, _ = make(device, rng, 3, 3, 3, 4)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    other, _, _ = make(device, rng, 3, 3, 4, 4)
    other_gradient = mpsx.CNNConvolutionGradient(device, other)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 3, 6, 6)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match="expected a source image of 3 feature channels, given 4"):
        conv.encode(cb, mpsx.Image.from_numpy(device, np.zeros((1, 4, 6, 6), np.float32)))
    y, state = conv.encode(cb, image, destination_state=True)
    with pytest.raises(ValueError, match="another descriptor"):
        other_gradient.encode(cb, y, image, state)
    with pytest.raises(mpsx.StateError, match="another batch"):
        gradient.encode(cb, y, mpsx.Image.from_numpy(device, np.zeros((2, 3, 6, 6), np.float32)), state)
    neuron_state = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode(
        cb, image, destination_state=True)[1]
    with pytest.raises(TypeError, match="expected an MPSCNNConvolutionGradientState"):
        gradient.encode(cb, y, image, neuron_state)
    with pytest.raises(mpsx.ShapeError, match="source gradient shaped as the forward result"):
        gradient.encode(cb, image, image, state)
    count = cb.command_count
    with pytest.raises(mpsx.SynchronizationError, match="without synchronize"):
        gradient.encode(cb, y, image, state)
        state.gradient_for_weights.to_numpy()
    assert cb.command_count == count + 1
    state.synchronize(cb)
    with pytest.raises(mpsx.SynchronizationError, match="not committed"):
        state.gradient_for_biases.to_numpy()
    cb.commit()
    cb.wait_until_completed()
    assert state.gradient_for_biases.to_numpy().shape == (4,)


def test_sizes_are_checked(device, rng):
    with pytest.raises(ValueError, match="MPSCNNConvolutionDescriptor: input_feature_channels must be at most "
                                         "1073741824, given 4611686018427387904"):
        mpsx.CNNConvolutionDescriptor(3, 3, 2**62, 2**62)
    with pytest.raises(ValueError, match="MPSCNNConvolutionDescriptor: dilation_rate_y must be at most 1073741824, "
                                         "given 4611686018427387904"):
        mpsx.CNNConvolutionDescriptor(3, 3, 1, 1, dilation_rate_y=2**62)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNConvolutionDescriptor: the window extent \(kernel - 1\) \* "
                                              r"dilation_rate \+ 1 must be at most 1073741824, given 3x2147483649"):
        mpsx.CNNConvolutionDescriptor(3, 3, 1, 1, dilation_rate_y=2**30)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNConvolutionDescriptor: the weight count \(OHWI\) overflows: "
                                              r"1048576 \* 1048576 \* 1048576 \* 1048576 is above "
                                              r"9223372036854775807"):
        mpsx.CNNConvolutionDescriptor(2**20, 2**20, 2**20, 2**20)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNConvolutionDescriptor: the byte count of 2305843009213693952 "
                                              r"float32 weights overflows: 2305843009213693952 \* 4"):
        mpsx.CNNConvolutionDescriptor(2**21, 2**20, 2**20, 1)

    source, _, _ = make(device, rng, 3, 3, 4, 4)
    conv = mpsx.CNNConvolution(device, source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 5, 5)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    conv.offset = (-2**62, 0, 0)
    with pytest.raises(ValueError, match="MPSCNNConvolution: offset.x must be between -2147483648 and 2147483648, "
                                         "given -4611686018427387904"):
        conv.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=5, height=5, feature_channels=4)))
    conv.offset = (0, 0, 0)
    conv.source_feature_channel_offset = 2**62
    with pytest.raises(ValueError, match="MPSCNNConvolution: source_feature_channel_offset must be at most "
                                         "1073741824, given 4611686018427387904"):
        conv.encode(cb, image, destination_state=True)
    assert cb.command_count == 0
    # Offsets and clip origins at their limits leave the windows off the image.
    conv.source_feature_channel_offset = 0
    conv.offset = (2**31, -2**31, 0)
    conv.clip_rect = (-2**31, 0, 0, 2**63 - 1, 2**63 - 1, 1)
    with pytest.raises(mpsx.ShapeError, match=r"the windows read nothing of the 5x5 source image"):
        conv.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=5, height=5, feature_channels=4)))
    assert cb.command_count == 0


def test_bias_gradient_channels_within_the_backend_limit(device):
    # cuda sums each channel's bias gradient in one of 65535 tiles of 32 channels.
    d = mpsx.CNNConvolutionDescriptor(1, 1, 1, 65535 * 32 + 1)
    source = mpsx.ConvolutionWeights(d, np.zeros(65535 * 32 + 1, np.float32))
    if device.backend != "cuda":
        mpsx.CNNConvolutionGradient(device, source)
        return
    with pytest.raises(mpsx.ShapeError, match=f"MPSCNNConvolutionGradient: the descriptor has 2097121 output "
                                              f"feature channels; the gradient of the biases on device {device.name} "
                                              f"takes at most 2097120"):
        mpsx.CNNConvolutionGradient(device, source)


def sgd_step(w, b, state, lr):
    return w - lr * state.gradient_for_weights.to_numpy(), b - lr * state.gradient_for_biases.to_numpy()


def test_weights_state_export_and_reload(device, rng):
    source, w, b = make(device, rng, 3, 3, 2, 3)
    conv = mpsx.CNNConvolution(device, source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    exported = conv.export_weights_and_biases(cb)
    exported.synchronize(cb)
    new_w = rng.standard_normal(w.shape).astype(np.float32)
    state = mpsx.CNNConvolutionWeightsAndBiasesState(device, new_w, np.zeros(3, np.float32))
    before = conv.encode(cb, image)
    conv.reload_weights_and_biases(cb, state)
    after = conv.encode(cb, image)
    for item in (before, after):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(exported.weights.to_numpy(), w.reshape(-1))
    np.testing.assert_array_equal(exported.biases.to_numpy(), b)
    x = image.to_numpy()
    np.testing.assert_allclose(before.to_numpy(), reference_forward(x, w, b).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(after.to_numpy(), reference_forward(x, new_w, None).numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(mpsx.ShapeError, match="weights buffer holds 8 bytes"):
        conv.reload_weights_and_biases(device.command_queue.command_buffer(),
                                       mpsx.CNNConvolutionWeightsAndBiasesState(device, np.zeros(2, np.float32)))


def test_reload_then_export_in_one_command_buffer(device, rng):
    # Copies with no kernel between them still happen in order: the export
    # reads what the reload wrote, and a second reload overwrites the first.
    source, w, b = make(device, rng, 3, 3, 2, 3)
    conv = mpsx.CNNConvolution(device, source)
    states = [mpsx.CNNConvolutionWeightsAndBiasesState(device, rng.standard_normal(w.shape).astype(np.float32),
                                                       rng.standard_normal(3).astype(np.float32)) for _ in range(2)]
    cb = device.command_queue.command_buffer()
    conv.reload_weights_and_biases(cb, states[0])
    first = conv.export_weights_and_biases(cb)
    conv.reload_weights_and_biases(cb, states[1])
    second = conv.export_weights_and_biases(cb)
    for state in (first, second):
        state.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    for exported, state in zip((first, second), states):
        np.testing.assert_array_equal(exported.weights.to_numpy(), state.weights.to_numpy())
        np.testing.assert_array_equal(exported.biases.to_numpy(), state.biases.to_numpy())


@pytest.mark.parametrize("shape", [(3, 3, 8, 16, (2, 2), (2, 10, 8)), (3, 3, 16, 16, (1, 1), (2, 1, 1))],
                         ids=["cudnn", "matrix-product"])
def test_float16_passes_read_the_weights_each_write_left(device, rng, shape):
    """Float16 images with the weights as every kind of write left them (on cuda the passes read a float16 copy
    of the weights that each write brings up to date): a reload between two forward passes, a reload on a
    command buffer committed after a later-encoded forward pass, and an in-place SGD update, each against
    float64 torch with the weights of that moment; the data gradient too."""
    kw, kh, cin, cout, stride, (n, h, w) = shape
    d = mpsx.CNNConvolutionDescriptor(kw, kh, cin, cout, stride[0], stride[1])
    w0 = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    source = mpsx.ConvolutionWeights(d, w0, None, optimizer=mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=0.5))
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float16)
    image = mpsx.Image.from_numpy(device, x)
    xt = x.astype(np.float64)
    check = lambda y, weights: np.testing.assert_allclose(  # noqa: E731
        y.to_numpy(), reference_forward(xt, weights.astype(np.float64), None, stride).numpy(), *tolerance(np.float16))

    # A reload between two forward passes of one command buffer, and the data gradient after it.
    w1 = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    cb = device.command_queue.command_buffer()
    before = conv.encode(cb, image)
    conv.reload_weights_and_biases(cb, mpsx.CNNConvolutionWeightsAndBiasesState(device, w1))
    after, state = conv.encode(cb, image, destination_state=True)
    dy = rng.standard_normal(after.shape).astype(np.float16)
    dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy), image, state)
    for item in (before, after, dx):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    check(before, w0)
    check(after, w1)
    xg = torch.tensor(xt, requires_grad=True)
    reference_forward(xg, torch.as_tensor(w1, dtype=torch.float64), None, stride).backward(
        torch.as_tensor(dy, dtype=torch.float64))
    np.testing.assert_allclose(dx.to_numpy(), xg.grad.numpy(), *tolerance(np.float16))

    # Encoded first, committed last: the forward pass committed before the reload reads w1.
    w2 = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    reloading, reading = device.command_queue.command_buffer(), device.command_queue.command_buffer()
    conv.reload_weights_and_biases(reloading, mpsx.CNNConvolutionWeightsAndBiasesState(device, w2))
    early = conv.encode(reading, image)
    early.synchronize(reading)
    reading.commit()
    reading.wait_until_completed()
    reloading.commit()
    late = read(device, lambda c: conv.encode(c, image))
    check(early, w1)
    np.testing.assert_allclose(late, reference_forward(xt, w2.astype(np.float64), None, stride).numpy(),
                               *tolerance(np.float16))

    # An in-place update (the kernel holds the weights its forward pass used), then a forward pass.
    committed_training_step(device, conv, gradient, image, mpsx.Image.from_numpy(device, dy))
    trained = np.asarray(source.weights(), np.float32)
    assert not np.allclose(trained, w2)
    updated = read(device, lambda c: conv.encode(c, image))
    np.testing.assert_allclose(updated, reference_forward(xt, trained.astype(np.float64), None, stride).numpy(),
                               *tolerance(np.float16))


def test_float16_passes_read_updates_replayed_from_before_the_float16_copy(device, rng):
    """A float32 training step on a replayable command buffer, run twice before any float16 pass (on cuda the
    second run captures the CUDA graph that later replays run, whose update brings no float16 copy of the weights
    up to date, there being none then), then float16 forward passes between replays: each reads the weights the
    last replay left, as the kernel exports them."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 8, 16)
    w0 = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    source = mpsx.ConvolutionWeights(d, w0, None, optimizer=mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=0.05))
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = rng.standard_normal((2, 8, 10, 8)).astype(np.float16)
    image, half = mpsx.Image.from_numpy(device, x.astype(np.float32)), mpsx.Image.from_numpy(device, x)
    dy = mpsx.Image.from_numpy(device, (rng.standard_normal((2, 16, 10, 8)) * 0.1).astype(np.float32))
    step = device.command_queue.command_buffer(replayable=True)
    encode_training_step(step, conv, gradient, image, dy)
    before = w0
    for run in range(5):
        step.commit() if run == 0 else step.replay()
        step.wait_until_completed()
        assert step.status == "completed", step.error
        if run == 0:
            continue
        cb = device.command_queue.command_buffer()
        y, exported = conv.encode(cb, half), conv.export_weights_and_biases(cb)
        y.synchronize(cb)
        exported.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        trained = exported.weights.to_numpy().astype(np.float64).reshape(w0.shape)
        assert not np.allclose(trained, before)
        before = trained
        np.testing.assert_allclose(y.to_numpy(), reference_forward(x.astype(np.float64), trained, None).numpy(),
                                   *tolerance(np.float16))


def test_convolution_weights_give_what_each_replay_trained(device, rng):
    """A ConvolutionWeights' weights() and bias_terms() after each replay of a recorded training step, read
    between replays: the previous values less the learning rate times the gradients that replay computed."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    lr = 0.1
    source = mpsx.ConvolutionWeights(d, (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32),
                                     np.zeros(4, np.float32),
                                     optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=lr))
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 2, 6, 6)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((2, 4, 6, 6)).astype(np.float32))
    w, b = np.asarray(source.weights(), np.float64), np.asarray(source.bias_terms(), np.float64)
    step = device.command_queue.command_buffer(replayable=True)
    _, state = encode_training_step(step, conv, gradient, image, dy)
    state.synchronize(step)
    for run in range(3):
        step.commit() if run == 0 else step.replay()
        step.wait_until_completed()
        assert step.status == "completed", step.error
        w = w - lr * state.gradient_for_weights.to_numpy().reshape(w.shape)
        b = b - lr * state.gradient_for_biases.to_numpy()
        np.testing.assert_allclose(source.weights(), w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(source.bias_terms(), b, rtol=1e-5, atol=1e-6)


class UpdatingSource(ArraySource):
    def __init__(self, *args, fail=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail, self.updates = fail, 0

    def update_with_gradient_state(self, gradient_state, source_state):
        if self.fail:
            self._weights = self._weights * 0  # a half-done update the kernel must not see
            raise ValueError("update failed")
        self.updates += 1
        np.testing.assert_array_equal(source_state.weights.to_numpy(), self._weights.reshape(-1))
        self._weights = self._weights - 0.1 * gradient_state.gradient_for_weights.to_numpy()
        self._biases = self._biases - 0.1 * gradient_state.gradient_for_biases.to_numpy()
        return True


def test_encode_weights_and_bias_update_cpu_style(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    src = UpdatingSource(d, w, b)
    conv, gradient = mpsx.CNNConvolution(device, src), mpsx.CNNConvolutionGradient(device, src)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 2, 5, 5)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((2, 3, 5, 5)).astype(np.float32))
    cb, _, state = committed_training_step(device, conv, gradient, image, dy)
    assert cb.status == "completed" and src.updates == 1
    expected_w, expected_b = sgd_step(w, b, state, 0.1)
    np.testing.assert_allclose(src._weights, expected_w, rtol=1e-6)
    y = read(device, lambda c: conv.encode(c, image))
    np.testing.assert_allclose(y, reference_forward(image.to_numpy(), expected_w, expected_b).numpy(),
                               rtol=1e-4, atol=1e-4)


def failing_update(device, rng):
    """A convolution (and its gradient kernel) whose data source's host update raises ValueError, and an image
    for it."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    src = UpdatingSource(d, w, np.zeros(3, np.float32), fail=True)
    conv, gradient = mpsx.CNNConvolution(device, src), mpsx.CNNConvolutionGradient(device, src)
    return conv, gradient, mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 5, 5)).astype(np.float32))


def test_update_that_raises_fails_the_command_buffer(device, rng):
    conv, gradient, image = failing_update(device, rng)
    before = read(device, lambda c: conv.encode(c, image))
    cb, _, _ = committed_training_step(device, conv, gradient, image)
    assert cb.status == "error"
    assert isinstance(cb.error, ValueError) and str(cb.error) == "update failed"
    after = read(device, lambda c: conv.encode(c, image))
    np.testing.assert_array_equal(after, before)


def test_encode_weights_and_bias_update_gpu_style(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)

    class GpuSource(ArraySource):
        def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
            # The update a GPU kernel would encode; here numpy on the host
            # after the commands ran would be too late, so the source
            # precomputes it from the state's synchronized weights.
            self.seen = (command_buffer, gradient_state, source_state)
            return mpsx.CNNConvolutionWeightsAndBiasesState(device, np.full(d.weights_shape, 0.5, np.float32),
                                                           np.ones(3, np.float32))

    src = GpuSource(d, w, b)
    conv, gradient = mpsx.CNNConvolution(device, src), mpsx.CNNConvolutionGradient(device, src)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    encode_training_step(cb, conv, gradient, image)
    assert src.seen[0] is not None and src.seen[1] is not None
    after = conv.encode(cb, image)
    after.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(after.to_numpy(), reference_forward(image.to_numpy(), np.full(d.weights_shape, 0.5),
                                                                   np.ones(3)).numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(TypeError, match="neither update_with_command_buffer nor update_with_gradient_state"):
        plain = mpsx.CNNConvolution(device, ArraySource(d, w, b))
        cb = device.command_queue.command_buffer()
        _, s = plain.encode(cb, image, destination_state=True)
        plain.encode_weights_and_bias_update(cb, s)


def test_a_forward_encode_takes_only_a_gradient_state_it_made(device, rng):
    # MPSCNNConvolution's destinationState is the state resultStateForSourceImage made for that kernel.
    source, _, _ = make(device, rng, 3, 3, 2, 2)
    conv = mpsx.CNNConvolution(device, source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    others = mpsx.CNNConvolution(device, source).result_state(image)
    with pytest.raises(mpsx.StateError, match="MPSCNNConvolution: the MPSCNNConvolutionGradientState was made by "
                                              "another kernel"):
        conv.encode(cb, image, destination_state=others)
    dropouts = mpsx.CNNDropout(device, 0.5, 1, (1, 1, 1)).result_state(image)
    with pytest.raises(TypeError, match="CNNConvolutionGradientState"):
        conv.encode(cb, image, destination_state=dropouts)
    assert cb.command_count == 0

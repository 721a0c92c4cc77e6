"""CNNConvolutionTranspose and its gradient against a reference written from
MPS's definition (zero insertion, then a convolution with the weights as
given), torch's conv_transpose2d with rotated weights, the convolution's own
data gradient, torch autograd and finite differences; the padding policy of
reverse filters, auto-encoder coupling, weight states and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import ArrayConvolutionSource, encode_training_step, finite_difference_gradient, read, run, tolerance

P = mpsx.NNPaddingMethod


def reverse_padding(size, kernel, stride, dilation, method):
    """(destination size, centre) of one dimension for reverse filters: DestSizeReverse
    of MPSNeuralNetworkTypes.h, and the expanded-image position the first window is
    centred on when the windows are centred on the expanded source."""
    extent = (kernel - 1) * dilation + 1
    expanded = (size - 1) * stride + 1
    style = {P.SIZE_VALID_ONLY: -1, P.SIZE_SAME: 0, P.SIZE_FULL: 1}[method & (P.SIZE_SAME | P.SIZE_FULL)]
    destination = expanded + style * (extent - 1)
    extra = destination - 1 + extent - expanded
    remainder_first = (method & P.ADD_REMAINDER_TO_BOTTOM_RIGHT) == P.ADD_REMAINDER_TO_TOP_LEFT
    before = (extra + remainder_first) // 2
    return destination, extent // 2 - before


def reference(x, w, b, stride, dilation, groups, centre, size):
    """MPS's transpose in float64 torch: the source expanded with stride - 1 zeros, then
    conv2d with the OHWI weights as given; the window of destination pixel 0 centred on
    expanded position `centre` (x, y); `size` (width, height) destination pixels."""
    x = torch.as_tensor(x, dtype=torch.float64)
    w = torch.as_tensor(w, dtype=torch.float64)
    n, c, h, width = x.shape
    kh, kw = w.shape[1:3]
    extent = ((kw - 1) * dilation[0] + 1, (kh - 1) * dilation[1] + 1)
    expanded = torch.zeros(n, c, (h - 1) * stride[1] + 1, (width - 1) * stride[0] + 1, dtype=torch.float64)
    expanded[:, :, ::stride[1], ::stride[0]] = x
    first = (centre[0] - extent[0] // 2, centre[1] - extent[1] // 2)
    read_area = F.pad(expanded, (-first[0], first[0] + size[0] + extent[0] - 1 - expanded.shape[3],
                                 -first[1], first[1] + size[1] + extent[1] - 1 - expanded.shape[2]))
    bias = None if b is None else torch.as_tensor(b, dtype=torch.float64)
    return F.conv2d(read_area, w.permute(0, 3, 1, 2), bias, dilation=(dilation[1], dilation[0]), groups=groups)


def centre_of(kernel):
    d = kernel.descriptor
    return (kernel.offset.x * d.stride_in_pixels_x + kernel.kernel_offset_x,
            kernel.offset.y * d.stride_in_pixels_y + kernel.kernel_offset_y)


def rotated(w):
    return w[:, ::-1, ::-1, :].copy()


def make(rng, kw, kh, cin, cout, stride=(1, 1), dilation=(1, 1), groups=1, neuron=None, bias=True):
    d = mpsx.CNNConvolutionDescriptor(kw, kh, cin, cout, stride[0], stride[1], dilation[0], dilation[1], groups,
                                      fused_neuron_descriptor=neuron)
    w = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    return mpsx.ConvolutionWeights(d, w, b), w, b


def synchronized(device, encode):
    """Runs encode(cb) and returns what it returned, synchronized and completed."""
    cb = device.command_queue.command_buffer()
    result = encode(cb)
    for item in result if isinstance(result, tuple) else (result,):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return result


CASES = [
    # kw, kh, cin, cout, stride, dilation, groups, source (n, h, w)
    (3, 3, 3, 5, (2, 2), (1, 1), 1, (2, 5, 6)),
    (4, 4, 4, 6, (2, 2), (1, 1), 2, (1, 4, 5)),
    (2, 3, 2, 3, (3, 1), (1, 1), 1, (3, 3, 4)),
    (5, 3, 6, 4, (1, 2), (1, 1), 2, (2, 4, 6)),
    (3, 3, 4, 4, (2, 2), (2, 2), 4, (2, 4, 4)),
    (1, 1, 3, 2, (2, 3), (1, 1), 1, (2, 3, 5)),
    (4, 1, 2, 2, (1, 1), (1, 1), 1, (1, 6, 5)),
]
METHODS = [P.SIZE_SAME, P.SIZE_VALID_ONLY, P.SIZE_FULL, P.SIZE_SAME | P.ADD_REMAINDER_TO_BOTTOM_RIGHT]
METHOD_IDS = ["same", "valid", "full", "same-remainder-bottom-right"]


@pytest.mark.parametrize("case", CASES, ids=[str(c[:7]) for c in CASES])
@pytest.mark.parametrize("method", METHODS, ids=METHOD_IDS)
def test_forward_matches_reference(device, rng, case, method):
    kw, kh, cin, cout, stride, dilation, groups, (n, h, w) = case
    source, weights, biases = make(rng, kw, kh, cin, cout, stride, dilation, groups)
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    transpose.padding = method
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    y = read(device, lambda cb: transpose.encode(cb, mpsx.Image.from_numpy(device, x)))
    width, centre_x = reverse_padding(w, kw, stride[0], dilation[0], method)
    height, centre_y = reverse_padding(h, kh, stride[1], dilation[1], method)
    assert y.shape == (n, cout, height, width)
    assert centre_of(transpose) == (centre_x, centre_y)
    assert 0 <= transpose.kernel_offset_x < stride[0] and 0 <= transpose.kernel_offset_y < stride[1]
    expected = reference(x, weights, biases, stride, dilation, groups, (centre_x, centre_y), (width, height))
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=[str(c[:7]) for c in CASES])
def test_matches_torch_conv_transpose2d_with_rotated_weights(device, rng, case):
    # Full padding is torch's padding 0; same padding with odd kernels its (kernel - 1) / 2.
    kw, kh, cin, cout, stride, dilation, groups, (n, h, w) = case
    source, weights, biases = make(rng, kw, kh, cin, cout, stride, dilation, groups)
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    torch_weights = torch.as_tensor(rotated(weights)).reshape(groups, cout // groups, kh, kw, cin // groups)
    torch_weights = torch_weights.permute(0, 4, 1, 2, 3).reshape(cin, cout // groups, kh, kw)
    paddings = [(P.SIZE_FULL, (0, 0))]
    if kw % 2 and kh % 2:
        paddings.append((P.SIZE_SAME, ((kh - 1) // 2 * dilation[1], (kw - 1) // 2 * dilation[0])))
    for method, padding in paddings:
        transpose.padding = method
        y = read(device, lambda cb: transpose.encode(cb, image))
        expected = F.conv_transpose2d(torch.as_tensor(x), torch_weights, torch.as_tensor(biases),
                                      stride=(stride[1], stride[0]), padding=padding, groups=groups,
                                      dilation=(dilation[1], dilation[0]))
        np.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-4)


def test_offsets_kernel_offsets_and_reach(device, rng):
    source, weights, biases = make(rng, 3, 2, 2, 3, stride=(2, 3))
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    x = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    # MPS's example: offset 2, kernel offset 0 puts the window on expanded pixel 4.
    for offset, kernel_offset, size in [((2, 1), (0, 0), (6, 5)), ((0, 0), (-1, -2), (9, 9)),
                                        ((1, 0), (1, 2), (12, 11)), ((-1, 1), (0, -1), (4, 3))]:
        transpose.offset = offset
        transpose.kernel_offset_x, transpose.kernel_offset_y = kernel_offset
        destination = mpsx.Image.from_numpy(device, np.zeros((2, 3) + size[::-1], np.float32))
        y = read(device, lambda cb: transpose.encode(cb, image, destination_image=destination))
        assert transpose.offset == (*offset, 0)  # used as set when given a destination
        centre = (offset[0] * 2 + kernel_offset[0], offset[1] * 3 + kernel_offset[1])
        expected = reference(x, weights, biases, (2, 3), (1, 1), 1, centre, size).numpy()
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    # Windows that fall between source pixels see the biases only.
    source, _, biases = make(rng, 1, 1, 2, 3, stride=(4, 4))
    gap = mpsx.CNNConvolutionTranspose(device, source)
    gap.kernel_offset_x = gap.kernel_offset_y = 2
    destination = mpsx.Image.from_numpy(device, np.zeros((2, 3, 1, 1), np.float32))
    y = read(device, lambda cb: gap.encode(cb, image, destination_image=destination))
    np.testing.assert_allclose(y, np.broadcast_to(biases[None, :, None, None], y.shape), rtol=1e-6)


@pytest.mark.parametrize("data_type", [np.float32, np.float16])
def test_destination_larger_than_the_result(device, rng, data_type):
    # Once, oneDNN's reference deconvolution (chosen for a destination that is not one
    # dense block) wrote past it: heap corruption after a few encodes, or a hang.
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    for kernel, stride, cin, cout, size, sizes in [(5, 3, 8, 3, 6, (20, 35)), (3, 1, 1, 3, 8, (17, 33)),
                                                   (3, 2, 2, 2, 4, (17, 33))]:
        source, weights, biases = make(rng, kernel, kernel, cin, cout, stride=(stride, stride), neuron=relu)
        transpose = mpsx.CNNConvolutionTranspose(device, source)
        x = rng.standard_normal((2, cin, size, size)).astype(data_type)
        image = mpsx.Image.from_numpy(device, x)
        for width in sizes:
            destination = mpsx.Image.from_numpy(device, np.zeros((2, cout, width, width), data_type))
            for _ in range(4):
                y = read(device, lambda cb: transpose.encode(cb, image, destination_image=destination))
            z = reference(x.astype(np.float32), weights, biases, (stride, stride), (1, 1), 1, centre_of(transpose),
                          (width, width)).numpy()
            np.testing.assert_allclose(y, np.maximum(z, 0), *tolerance(data_type))


def test_clip_rect_and_channel_offsets(device, rng):
    source, weights, biases = make(rng, 3, 3, 4, 4, stride=(2, 2))
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    x = rng.standard_normal((1, 8, 4, 5)).astype(np.float32)
    destination = mpsx.Image.from_numpy(device, np.zeros((1, 8, 7, 9), np.float32))
    transpose.source_feature_channel_offset = 4
    transpose.destination_feature_channel_offset = 4
    transpose.offset = (1, 0)
    transpose.kernel_offset_x, transpose.kernel_offset_y = -1, 1
    transpose.clip_rect = (2, 1, 0, 5, 4, 1)
    y = read(device, lambda cb: transpose.encode(cb, mpsx.Image.from_numpy(device, x), destination_image=destination))
    expected = np.zeros((1, 8, 7, 9), np.float32)
    # clip origin (2, 1) centred on expanded (1 * 2 - 1, 0 * 2 + 1)
    expected[0, 4:, 1:5, 2:7] = reference(x[:, 4:], weights, biases, (2, 2), (1, 1), 1, (1, 1), (5, 4)).numpy()[0]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_float16(device, rng):
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU, 0.1)
    source, weights, biases = make(rng, 4, 3, 4, 6, stride=(2, 2), neuron=relu)
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    x = rng.standard_normal((2, 4, 5, 3)).astype(np.float16)
    for method in (P.SIZE_SAME, P.SIZE_FULL):
        transpose.padding = method
        y = read(device, lambda cb: transpose.encode(cb, mpsx.Image.from_numpy(device, x)))
        assert y.dtype == np.float16
        (width, cx), (height, cy) = reverse_padding(3, 4, 2, 1, method), reverse_padding(5, 3, 2, 1, method)
        z = reference(x.astype(np.float32), weights, biases, (2, 2), (1, 1), 1, (cx, cy), (width, height)).numpy()
        np.testing.assert_allclose(y, np.where(z >= 0, z, 0.1 * z), *tolerance(np.float16))


def transposed_for(weights, groups):
    """The transpose's weights that make it the data gradient of a convolution with
    `weights`: input and output channels exchanged within each group, rotated."""
    cout, kh, kw, per_group = weights.shape
    w = rotated(weights).reshape(groups, cout // groups, kh, kw, per_group)
    return np.ascontiguousarray(w.transpose(0, 4, 2, 3, 1).reshape(groups * per_group, kh, kw, cout // groups))


AUTOENCODER = [
    # kernel (w, h), cin, cout, stride, dilation, groups, source (h, w), forward padding
    ((3, 3), 3, 4, (2, 2), (1, 1), 1, (7, 9), P.SIZE_SAME),
    ((2, 2), 2, 3, (2, 2), (1, 1), 1, (9, 8), P.SIZE_SAME),
    ((4, 3), 4, 6, (3, 2), (1, 1), 2, (10, 11), P.SIZE_VALID_ONLY),
    ((3, 3), 2, 2, (2, 2), (2, 1), 2, (9, 7), P.SIZE_FULL),
    ((1, 1), 3, 2, (2, 2), (1, 1), 1, (8, 6), P.SIZE_SAME),
]


@pytest.mark.parametrize("case", AUTOENCODER, ids=[str(c) for c in range(len(AUTOENCODER))])
def test_undoing_a_convolution_is_its_data_gradient(device, rng, case):
    (kw, kh), cin, cout, stride, dilation, groups, (h, w), method = case
    source, weights, _ = make(rng, kw, kh, cin, cout, stride, dilation, groups)
    conv = mpsx.CNNConvolution(device, source)
    conv.padding = method
    gradient = mpsx.CNNConvolutionGradient(device, source)
    d = mpsx.CNNConvolutionDescriptor(kw, kh, cout, cin, stride[0], stride[1], dilation[0], dilation[1], groups)
    transpose = mpsx.CNNConvolutionTranspose(device, mpsx.ConvolutionWeights(d, transposed_for(weights, groups)))
    image = mpsx.Image.from_numpy(device, rng.standard_normal((2, cin, h, w)).astype(np.float32))

    def encode(cb):
        y, state = conv.encode(cb, image, destination_state=True)
        dy = mpsx.Image.from_numpy(device, rng.standard_normal((2, cout, y.height, y.width)).astype(np.float32))
        restored = transpose.encode(cb, dy, state)
        return restored, gradient.encode(cb, dy, image, state)

    restored, dx = synchronized(device, encode)
    assert (restored.height, restored.width) == (h, w)  # the convolution's source size, odd sizes included
    np.testing.assert_allclose(restored.to_numpy(), dx.to_numpy(), rtol=1e-4, atol=1e-4)


def test_autoencoder_batches_and_result_states(device, rng):
    source, weights, biases = make(rng, 3, 3, 2, 4, stride=(2, 2))
    conv = mpsx.CNNConvolution(device, source)
    up_source, up_weights, up_biases = make(rng, 3, 3, 4, 2, stride=(2, 2))
    up = mpsx.CNNConvolutionTranspose(device, up_source)
    x = rng.standard_normal((3, 2, 7, 5)).astype(np.float32)
    batch = mpsx.ImageBatch.from_numpy(device, x)

    def encode(cb):
        y, states = conv.encode_batch(cb, batch, destination_states=True)
        offsets = (tuple(up.offset), up.kernel_offset_x, up.kernel_offset_y)
        assert up.destination_image_descriptor(y, [states]).width == 5
        assert (tuple(up.offset), up.kernel_offset_x, up.kernel_offset_y) == offsets  # a query changes nothing
        restored, up_states = up.encode_batch(cb, y, states, destination_states=True)
        # a state made with the convolution's state undoes the convolution too
        again, _ = up.encode_batch(cb, y, destination_states=up.result_state(y, [states[0]]))
        return restored, again, up_states[0], y

    restored, again, up_state, y = synchronized(device, encode)
    assert restored.to_numpy().shape == (3, 2, 7, 5)
    np.testing.assert_array_equal(again.to_numpy(), restored.to_numpy())
    # A 3x3 stride-2 "same" convolution of a 7x5 source centres its windows on
    # source pixels 0, 2, ...: undone, the transpose centres its windows on them too.
    assert centre_of(up) == (0, 0)
    expected = reference(y.to_numpy(), up_weights, up_biases, (2, 2), (1, 1), 1, (0, 0), (5, 7)).numpy()
    np.testing.assert_allclose(restored.to_numpy(), expected, rtol=1e-4, atol=1e-4)
    assert isinstance(up_state, mpsx.CNNConvolutionTransposeGradientState)
    assert up_state.convolution_transpose is up and up_state.convolution is conv


GRADIENT_CASES = [
    # kw, kh, cin, cout, stride, groups, source (n, h, w), destination (w, h) or None, centre
    (3, 3, 3, 4, (2, 2), 1, (2, 4, 5), None, None),
    (4, 2, 4, 6, (2, 3), 2, (3, 3, 3), None, None),
    (2, 2, 2, 3, (1, 1), 1, (1, 5, 4), None, None),
    (3, 3, 2, 2, (2, 2), 2, (2, 3, 3), (9, 8), (-2, 1)),  # windows reaching past the source: bias only
]


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=[str(i) for i in range(len(GRADIENT_CASES))])
def test_gradients_match_torch_autograd(device, rng, case):
    kw, kh, cin, cout, stride, groups, (n, h, w), size, centre = case
    source, weights, biases = make(rng, kw, kh, cin, cout, stride, (1, 1), groups)
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    gradient = mpsx.CNNConvolutionTransposeGradient(device, source)
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    destination = None
    if size is not None:
        transpose.offset = (0, 0)
        transpose.kernel_offset_x, transpose.kernel_offset_y = centre
        destination = mpsx.Image.from_numpy(device, np.zeros((n, cout, size[1], size[0]), np.float32))
    y = read(device, lambda cb: transpose.encode(cb, image, destination_image=destination))
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(weights, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(biases, dtype=torch.float64, requires_grad=True)
    yt = reference(xt, wt, bt, stride, (1, 1), groups, centre_of(transpose), (y.shape[3], y.shape[2]))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    yt.backward(torch.as_tensor(dy, dtype=torch.float64))

    def encode(cb):
        _, state = transpose.encode(cb, image, destination_image=destination, destination_state=True)
        return gradient.encode(cb, mpsx.Image.from_numpy(device, dy), image, state), state

    dx, state = synchronized(device, encode)
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(state.gradient_for_biases.to_numpy(), bt.grad.numpy(), rtol=1e-4, atol=1e-3)
    assert state.gradient_for_weights.shape == weights.shape

    # The gradient options compute their part only.
    gradient.gradient_option = mpsx.CNNConvolutionGradientOption.GRADIENT_WITH_DATA
    dx_only, data_state = synchronized(device, encode)
    np.testing.assert_array_equal(dx_only.to_numpy(), dx.to_numpy())
    gradient.gradient_option = mpsx.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS
    _, weights_state = synchronized(device, encode)
    np.testing.assert_array_equal(weights_state.gradient_for_weights.to_numpy(), state.gradient_for_weights.to_numpy())


def test_float16_gradients(device, rng):
    source, weights, biases = make(rng, 3, 3, 2, 3, stride=(2, 2))
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    gradient = mpsx.CNNConvolutionTransposeGradient(device, source)
    x = rng.standard_normal((2, 2, 3, 4)).astype(np.float16)
    image = mpsx.Image.from_numpy(device, x)
    dy = rng.standard_normal((2, 3, 5, 7)).astype(np.float16)

    def encode(cb):
        _, state = transpose.encode(cb, image, destination_state=True)
        return gradient.encode(cb, mpsx.Image.from_numpy(device, dy), image, state), state

    dx, state = synchronized(device, encode)
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    wt = torch.tensor(weights, dtype=torch.float64, requires_grad=True)
    reference(xt, wt, biases, (2, 2), (1, 1), 1, (0, 0), (7, 5)).backward(torch.as_tensor(dy, dtype=torch.float64))
    assert dx.to_numpy().dtype == np.float16
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), *tolerance(np.float16))
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy(), wt.grad.numpy(), rtol=2e-2, atol=5e-2)


def test_gradient_finite_differences(device, rng):
    neuron = mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH, 1.0, 1.0)
    source, weights, biases = make(rng, 2, 3, 2, 3, stride=(2, 1), neuron=neuron)
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    gradient = mpsx.CNNConvolutionTransposeGradient(device, source)
    x = rng.standard_normal((1, 2, 3, 3))
    image = mpsx.Image.from_numpy(device, x.astype(np.float32))
    dy = rng.standard_normal(read(device, lambda cb: transpose.encode(cb, image)).shape)

    def loss(values, w=weights, b=biases):
        t = mpsx.CNNConvolutionTranspose(device, mpsx.ConvolutionWeights(source.descriptor(), w, b))
        y = read(device, lambda cb: t.encode(cb, mpsx.Image.from_numpy(device, values.astype(np.float32))))
        return float(np.sum(y.astype(np.float64) * dy))

    def encode(cb):
        _, state = transpose.encode(cb, image, destination_state=True)
        return gradient.encode(cb, mpsx.Image.from_numpy(device, dy.astype(np.float32)), image, state), state

    dx, state = synchronized(device, encode)
    expected = finite_difference_gradient(loss, x, 1e-2)
    np.testing.assert_allclose(dx.to_numpy(), expected, rtol=2e-2, atol=2e-3)
    every_third = range(0, weights.size, 3)
    numeric_w = finite_difference_gradient(lambda w: loss(x, w), weights, 1e-2, every_third).reshape(-1)
    for i in every_third:
        assert state.gradient_for_weights.to_numpy().flat[i] == pytest.approx(numeric_w[i], rel=2e-2, abs=2e-3)
    numeric_b = finite_difference_gradient(lambda b: loss(x, weights, b), biases, 1e-2, range(3))
    for i in range(3):
        assert state.gradient_for_biases.to_numpy()[i] == pytest.approx(numeric_b[i], rel=2e-2, abs=2e-3)


class ArraySource(ArrayConvolutionSource):
    """A Python data source whose update is a host SGD step."""

    def __init__(self, descriptor, weights, biases):
        super().__init__(descriptor, weights, biases)
        self.updates = []

    def update_with_gradient_state(self, gradient_state, source_state):
        self.updates.append((gradient_state, source_state))
        self._weights = self._weights - 0.1 * gradient_state.gradient_for_weights.to_numpy()
        self._biases = self._biases - 0.1 * gradient_state.gradient_for_biases.to_numpy()
        return True


def test_weights_and_biases_states(device, rng):
    source, w, b = make(rng, 3, 3, 2, 3, stride=(2, 2))
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    new_w = rng.standard_normal(w.shape).astype(np.float32)

    def encode(cb):
        exported = transpose.export_weights_and_biases(cb)
        before = transpose.encode(cb, image)
        transpose.reload_weights_and_biases(cb, mpsx.CNNConvolutionWeightsAndBiasesState(device, new_w))
        return exported, before, transpose.encode(cb, image)

    exported, before, after = synchronized(device, encode)
    np.testing.assert_array_equal(exported.weights.to_numpy(), w.reshape(-1))
    np.testing.assert_array_equal(exported.biases.to_numpy(), b)
    np.testing.assert_allclose(before.to_numpy(), reference(x, w, b, (2, 2), (1, 1), 1, (0, 0), (5, 5)).numpy(),
                               rtol=1e-4, atol=1e-4)
    # biases stay when the state has none
    np.testing.assert_allclose(after.to_numpy(), reference(x, new_w, b, (2, 2), (1, 1), 1, (0, 0), (5, 5)).numpy(),
                               rtol=1e-4, atol=1e-4)
    transpose.reload_weights_and_biases_from_data_source()  # back to the data source's weights
    y = read(device, lambda cb: transpose.encode(cb, image))
    np.testing.assert_allclose(y, before.to_numpy(), rtol=1e-6)


def test_encode_weights_and_bias_update(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 2, 2, 3, 2, 2)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    src = ArraySource(d, w, b)
    transpose, gradient = mpsx.CNNConvolutionTranspose(device, src), mpsx.CNNConvolutionTransposeGradient(device, src)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 2, 3, 4)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((2, 3, 5, 7)).astype(np.float32))

    _, state = run(device, lambda cb: encode_training_step(cb, transpose, gradient, image, dy))
    assert len(src.updates) == 1
    np.testing.assert_array_equal(src.updates[0][1].weights.to_numpy(), w.reshape(-1))  # the weights used
    expected_w = w - 0.1 * state.gradient_for_weights.to_numpy()
    expected_b = b - 0.1 * state.gradient_for_biases.to_numpy()
    y = read(device, lambda cb: transpose.encode(cb, image))
    np.testing.assert_allclose(y, reference(image.to_numpy(), expected_w, expected_b, (2, 2), (1, 1), 1, (0, 0),
                                            (7, 5)).numpy(), rtol=1e-4, atol=1e-4)

    class GpuSource(ArraySource):
        def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
            return mpsx.CNNConvolutionWeightsAndBiasesState(device, np.full(d.weights_shape, 0.5, np.float32),
                                                           np.ones(3, np.float32))

    gpu = mpsx.CNNConvolutionTranspose(device, GpuSource(d, w, b))

    def update(cb):
        _, gpu_state = gpu.encode(cb, image, destination_state=True)
        gpu.encode_weights_and_bias_update(cb, gpu_state)
        return gpu.encode(cb, image)

    after = read(device, update)
    np.testing.assert_allclose(after, reference(image.to_numpy(), np.full(d.weights_shape, 0.5), np.ones(3), (2, 2),
                                                (1, 1), 1, (0, 0), (7, 5)).numpy(), rtol=1e-4, atol=1e-4)


def test_bad_input(device, rng):
    source, _, _ = make(rng, 3, 3, 3, 4, stride=(2, 2))
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    gradient = mpsx.CNNConvolutionTransposeGradient(device, source)
    conv_source, _, _ = make(rng, 3, 3, 4, 3, stride=(2, 2))
    conv = mpsx.CNNConvolution(device, conv_source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
    other = mpsx.Image.from_numpy(device, np.zeros((2, 3, 4, 4), np.float32))
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match="MPSCNNConvolutionTranspose: expected a source image of 3 feature "
                                              "channels, given 4"):
        transpose.encode(cb, mpsx.Image.from_numpy(device, np.zeros((1, 4, 4, 4), np.float32)))
    y, state = transpose.encode(cb, image, destination_state=True)
    _, conv_state = conv.encode(cb, mpsx.Image.from_numpy(device, np.zeros((2, 4, 9, 9), np.float32)),
                                destination_state=True)
    neuron_state = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode(
        cb, image, destination_state=True)[1]
    with pytest.raises(TypeError, match="MPSCNNConvolutionTranspose: expected an "
                                        "MPSCNNConvolutionTransposeGradientState, given an "
                                        "MPSCNNConvolutionGradientState"):
        transpose.encode(cb, image, destination_state=conv_state)
    with pytest.raises(TypeError, match="expected the MPSCNNConvolutionGradientState of a convolution, given an "
                                        "MPSNNGradientState"):
        transpose.encode(cb, image, neuron_state)
    with pytest.raises(TypeError, match="given an MPSCNNConvolutionTransposeGradientState"):
        transpose.encode(cb, image, state)
    with pytest.raises(TypeError, match="MPSCNNConvolutionTransposeGradient: expected an "
                                        "MPSCNNConvolutionTransposeGradientState, given an "
                                        "MPSCNNConvolutionGradientState"):
        gradient.encode(cb, y, image, conv_state)
    with pytest.raises(TypeError, match="expected an mpsx.CNNConvolutionGradientState, given int"):
        transpose.encode(cb, image, 3)
    with pytest.raises(mpsx.StateError, match="MPSCNNConvolutionTranspose: this MPSCNNConvolutionTransposeGradient"
                                              "State was filled for source images of 2x3x4x4 .*, given 1x3x4x4"):
        transpose.encode(cb, mpsx.Image.from_numpy(device, np.zeros((1, 3, 4, 4), np.float32)), destination_state=state)
    with pytest.raises(mpsx.StateError, match="MPSCNNConvolutionTransposeGradient: this "
                                              "MPSCNNConvolutionTransposeGradientState was made for another batch"):
        gradient.encode(cb, y, other, state)
    with pytest.raises(mpsx.StateError, match="made by another kernel"):
        mpsx.CNNConvolutionTranspose(device, source).encode(cb, image, destination_state=state)
    with pytest.raises(mpsx.ShapeError, match="comes from a convolution of 5x5 results; given a 4x4 source image"):
        transpose.encode(cb, image, conv_state)
    with pytest.raises(mpsx.ShapeError, match="source gradient shaped as the forward result, 2x4x7x7"):
        gradient.encode(cb, image, image, state)
    transpose.padding = P.SIZE_VALID_ONLY
    small = mpsx.Image.from_numpy(device, np.zeros((1, 3, 1, 2), np.float32))
    with pytest.raises(mpsx.ShapeError, match="a 2x1 source image expands to 3x1, smaller than the 3x3 window"):
        transpose.encode(cb, small)
    transpose.kernel_offset_x = 40
    with pytest.raises(mpsx.ShapeError, match=r"offset \* stride \+ kernel offset \(40, 0\) the windows read "
                                              r"nothing of the 7x7 expanded source image"):
        transpose.encode(cb, image, destination_image=mpsx.Image.from_numpy(device, np.zeros((2, 4, 3, 3),
                                                                                              np.float32)))
    cb.commit()
    cb.wait_until_completed()
    with pytest.raises(mpsx.ShapeError, match="MPSCNNConvolutionTranspose: the data source's weights hold 10 "
                                              "values; a 4x3x3x3 \\(OHWI\\) filter needs 108"):
        mpsx.CNNConvolutionTranspose(device, ArraySource(source.descriptor(), np.zeros(10, np.float32), None))
    assert not isinstance(transpose, mpsx.CNNConvolution)


def test_sizes_are_checked(device, rng):
    source, _, _ = make(rng, 3, 3, 3, 4, stride=(2, 2))
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 3, 4, 4)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    transpose.kernel_offset_x = 2**62
    with pytest.raises(ValueError, match="MPSCNNConvolutionTranspose: kernel_offset_x must be between -2147483648 "
                                         "and 2147483648, given 4611686018427387904"):
        transpose.encode(cb, image, destination_image=mpsx.Image(device, mpsx.ImageDescriptor(
            width=7, height=7, feature_channels=4)))
    transpose.kernel_offset_x = 0
    transpose.clip_rect = (2**63 - 1, 0, 0, 1, 1, 1)
    for encode in (lambda: transpose.encode(cb, image), lambda: transpose.destination_image_descriptor(image)):
        with pytest.raises(ValueError, match="MPSCNNConvolutionTranspose: clip_rect.x must be between -2147483648 "
                                             "and 2147483648, given 9223372036854775807"):
            encode()
    # The expanded source is 3 * 2^30 + 1 pixels wide: the destination of the
    # padding policy would be too.
    wide, _, _ = make(rng, 3, 3, 3, 4, stride=(2**30, 1))
    with pytest.raises(mpsx.ShapeError, match="MPSCNNConvolutionTranspose: the padding policy makes a 3221225473x4 "
                                              "destination of a 3221225473x4 source; image sizes must be at most "
                                              "1073741824"):
        mpsx.CNNConvolutionTranspose(device, wide).encode(cb, image)
    assert cb.command_count == 0


@pytest.mark.parametrize("channels", [3, 8])
def test_destination_descriptor_of_a_source_of_other_channels_is_refused(device, channels):
    # The transpose reads input_feature_channels (4) from its source, as its encode does.
    descriptor = mpsx.CNNConvolutionDescriptor(3, 3, 4, 8)
    transpose = mpsx.CNNConvolutionTranspose(
        device, mpsx.ConvolutionWeights(descriptor, np.zeros(descriptor.weights_shape, np.float32)))
    source = mpsx.Image(device, mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 5, 5, channels))
    with pytest.raises(mpsx.ShapeError, match=f"expected a source image of 4 feature channels, given {channels}"):
        transpose.destination_image_descriptor(source)
    right = mpsx.Image(device, mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 5, 5, 4))
    assert transpose.destination_image_descriptor(right).feature_channels == 8

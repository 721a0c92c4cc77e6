"""Float16 images through the convolution families (convolution, fully connected, convolution transpose and
their gradients) against float64 numpy references. On cpu they run on oneDNN's float16 kernels where
mpsx._kernels._cpu_runs_float16_convolutions() says so (AVX-512 FP16) and on float32 copies elsewhere; both
must pass these tests, and the two tests at the end check which one ran."""

import numpy as np
import pytest

import mpsx
from helpers import tolerance
from test_convolution import mps_padding
from test_convolution_transpose import centre_of

P = mpsx.NNPaddingMethod
NATIVE = mpsx._kernels._cpu_runs_float16_convolutions()


def correlation(x, w, first, stride, size, groups=1, dy=None):
    """y[n, o, i, j] = sum of x[n, c, first_y + i * stride_y + ky, first_x + j * stride_x + kx] * w[o, ky, kx, c]
    over the taps and the channels of o's group, x read as 0 outside, in float64; `size` (height, width) of y.
    With `dy`, the gradients (dx, dw) of sum(y * dy) instead."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, c, h, width = x.shape
    cout, kh, kw, per_group = w.shape
    (fy, fx), (sy, sx), (oh, ow) = first, stride, size
    top, left = max(0, -fy), max(0, -fx)
    bottom, right = max(0, fy + (oh - 1) * sy + kh - h), max(0, fx + (ow - 1) * sx + kw - width)
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    dpadded, dw = np.zeros_like(padded), np.zeros_like(w)
    y = np.zeros((n, cout, oh, ow))
    out_per_group = cout // groups
    for g in range(groups):
        channels, outputs = slice(g * per_group, (g + 1) * per_group), slice(g * out_per_group, (g + 1) * out_per_group)
        for ky in range(kh):
            for kx in range(kw):
                rows = slice(fy + top + ky, fy + top + ky + (oh - 1) * sy + 1, sy)
                columns = slice(fx + left + kx, fx + left + kx + (ow - 1) * sx + 1, sx)
                window, tap = padded[:, channels, rows, columns], w[outputs, ky, kx, :]
                if dy is None:
                    y[:, outputs] += np.einsum("nchw,oc->nohw", window, tap)
                else:
                    dpadded[:, channels, rows, columns] += np.einsum("nohw,oc->nchw", dy[:, outputs], tap)
                    dw[outputs, ky, kx, :] += np.einsum("nchw,nohw->oc", window, dy[:, outputs])
    if dy is None:
        return y
    return dpadded[:, :, top:top + h, left:left + width], dw


def make(rng, kw, kh, cin, cout, stride=(1, 1), groups=1):
    d = mpsx.CNNConvolutionDescriptor(kw, kh, cin, cout, stride[0], stride[1], groups=groups)
    w = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    return mpsx.ConvolutionWeights(d, w, b), w, b


def half(rng, shape):
    return rng.standard_normal(shape).astype(np.float16)


def forward_and_gradients(device, forward, gradient, x, dy_shape_of, rng, destination=None):
    """`forward` on float16 x, then `gradient` on a random float16 dy shaped dy_shape_of(y): y, dy and dx as numpy
    and the gradient state."""
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    if destination is None:
        y, state = forward.encode(cb, image, destination_state=True)
    else:
        y, state = forward.encode(cb, image, destination_image=destination, destination_state=True)
    dy = half(rng, dy_shape_of(y))
    dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy), image, state)
    for item in (y, dx, state):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return y.to_numpy(), dy, dx.to_numpy(), state


def assert_gradients(device, state, dw, db):
    # Weight and bias gradients are float32 sums of products of float16 values, exact in float32 on cpu.
    rtol, atol = (1e-4, 1e-4) if device.backend == "cpu" else (2e-2, 5e-2)
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy(), dw, rtol=rtol, atol=atol)
    np.testing.assert_allclose(state.gradient_for_biases.to_numpy(), db, rtol=rtol, atol=atol)


CASES = [
    # kw, kh, cin, cout, stride, groups, source (n, h, w)
    (3, 3, 4, 8, (1, 1), 1, (2, 9, 11)),
    (3, 3, 16, 16, (2, 2), 1, (2, 8, 7)),
    (1, 1, 8, 16, (1, 1), 1, (3, 5, 5)),
    (5, 3, 6, 4, (1, 2), 2, (2, 10, 9)),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c[:6]) for c in CASES])
def test_convolution(device, rng, case):
    kw, kh, cin, cout, stride, groups, (n, h, w) = case
    source, weights, biases = make(rng, kw, kh, cin, cout, stride, groups)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = half(rng, (n, cin, h, w))
    y, dy, dx, state = forward_and_gradients(device, conv, gradient, x, lambda y: (n, cout, y.height, y.width), rng)
    top, _, height = mps_padding(h, kh, stride[1], 1, P.SIZE_SAME)
    left, _, width = mps_padding(w, kw, stride[0], 1, P.SIZE_SAME)
    args = ((-top, -left), (stride[1], stride[0]), (height, width), groups)
    expected = correlation(x, weights, *args) + biases[None, :, None, None]
    assert y.dtype == dx.dtype == np.float16
    np.testing.assert_allclose(y, expected, *tolerance(np.float16))
    expected_dx, expected_dw = correlation(x, weights, *args, dy=dy.astype(np.float64))
    np.testing.assert_allclose(dx, expected_dx, *tolerance(np.float16))
    assert_gradients(device, state, expected_dw, dy.astype(np.float64).sum((0, 2, 3)))


def test_convolution_into_channels_of_a_wider_image(device, rng):
    # Regions that are not one dense block: the destination's strides are those of 12 channels.
    source, weights, biases = make(rng, 3, 3, 4, 8)
    conv = mpsx.CNNConvolution(device, source)
    conv.destination_feature_channel_offset = 4
    x = half(rng, (2, 4, 6, 5))
    destination = mpsx.Image.from_numpy(device, np.zeros((2, 12, 6, 5), np.float16))
    cb = device.command_queue.command_buffer()
    conv.encode(cb, mpsx.Image.from_numpy(device, x), destination).synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    expected = np.zeros((2, 12, 6, 5))
    expected[:, 4:] = correlation(x, weights, (-1, -1), (1, 1), (6, 5)) + biases[None, :, None, None]
    np.testing.assert_allclose(destination.to_numpy(), expected, *tolerance(np.float16))


def test_fully_connected(device, rng):
    source, weights, biases = make(rng, 4, 3, 5, 7)
    fc, gradient = mpsx.CNNFullyConnected(device, source), mpsx.CNNFullyConnectedGradient(device, source)
    x = half(rng, (6, 5, 3, 4))
    y, dy, dx, state = forward_and_gradients(device, fc, gradient, x, lambda y: (6, 7, 1, 1), rng)
    expected = correlation(x, weights, (0, 0), (1, 1), (1, 1)) + biases[None, :, None, None]
    np.testing.assert_allclose(y, expected, *tolerance(np.float16))
    expected_dx, expected_dw = correlation(x, weights, (0, 0), (1, 1), (1, 1), dy=dy.astype(np.float64))
    np.testing.assert_allclose(dx, expected_dx, *tolerance(np.float16))
    assert_gradients(device, state, expected_dw, dy.astype(np.float64).sum((0, 2, 3)))


@pytest.mark.parametrize("larger", [False, True], ids=["result", "larger-destination"])
def test_convolution_transpose(device, rng, larger):
    # MPS's transpose: the source expanded with stride - 1 zeros, then convolved with the weights as given.
    # A destination larger than the result gets the biases where the source reaches nothing.
    cin, cout, stride, (n, h, w) = 4, 6, (2, 2), (2, 3, 4)
    source, weights, biases = make(rng, 3, 3, cin, cout, stride)
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    gradient = mpsx.CNNConvolutionTransposeGradient(device, source)
    x = half(rng, (n, cin, h, w))
    destination = mpsx.Image.from_numpy(device, np.zeros((n, cout, 8, 11), np.float16)) if larger else None
    y, dy, dx, state = forward_and_gradients(device, transpose, gradient, x, lambda y: (n, cout, y.height, y.width), rng,
                                         destination)
    assert y.shape == ((n, cout, 8, 11) if larger else (n, cout, 5, 7))
    expanded = np.zeros((n, cin, (h - 1) * stride[1] + 1, (w - 1) * stride[0] + 1))
    expanded[:, :, ::stride[1], ::stride[0]] = x
    centre_x, centre_y = centre_of(transpose)
    args = ((centre_y - 1, centre_x - 1), (1, 1), y.shape[2:])
    expected = correlation(expanded, weights, *args) + biases[None, :, None, None]
    np.testing.assert_allclose(y, expected, *tolerance(np.float16))
    dexpanded, expected_dw = correlation(expanded, weights, *args, dy=dy.astype(np.float64))
    np.testing.assert_allclose(dx, dexpanded[:, :, ::stride[1], ::stride[0]], *tolerance(np.float16))
    assert_gradients(device, state, expected_dw, dy.astype(np.float64).sum((0, 2, 3)))


def test_float16_accumulates_in_float32(device):
    # 4096 products of ones: a float16 sum would stop at 2048 (2048 + 1 rounds back to 2048).
    for cin, cout in [(4096, 1), (1, 4096)]:
        d = mpsx.CNNConvolutionDescriptor(1, 1, cin, cout)
        source = mpsx.ConvolutionWeights(d, np.ones(d.weights_shape, np.float32), np.zeros(cout, np.float32))
        conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
        image = mpsx.Image.from_numpy(device, np.ones((1, cin, 2, 2), np.float16))
        cb = device.command_queue.command_buffer()
        y, state = conv.encode(cb, image, destination_state=True)
        dx = gradient.encode(cb, mpsx.Image.from_numpy(device, np.ones((1, cout, 2, 2), np.float16)), image, state)
        y.synchronize(cb)
        dx.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_array_equal(y.to_numpy(), np.full((1, cout, 2, 2), cin, np.float16))
        np.testing.assert_array_equal(dx.to_numpy(), np.full((1, cin, 2, 2), cout, np.float16))


def cancelled_weight(device):
    """y[0] of a 1x1 convolution and dx[0] of its gradient, both (1 + 2**-12) - 1 over float16 ones: 2**-12 with
    float32 weights, 0 with weights rounded to float16 (1 + 2**-12 rounds to 1), as the float16 kernels take them."""
    w = np.zeros((16, 1, 1, 16), np.float32)
    w[0, 0, 0, 0], w[0, 0, 0, 1], w[1, 0, 0, 0] = 1 + 2**-12, -1, -1
    source = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(1, 1, 16, 16), w, np.zeros(16, np.float32))
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    image = mpsx.Image.from_numpy(device, np.ones((2, 16, 4, 4), np.float16))
    cb = device.command_queue.command_buffer()
    y, state = conv.encode(cb, image, destination_state=True)
    dx = gradient.encode(cb, mpsx.Image.from_numpy(device, np.ones((2, 16, 4, 4), np.float16)), image, state)
    y.synchronize(cb)
    dx.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    return y.to_numpy()[:, 0], dx.to_numpy()[:, 0]


def test_native_float16_path_when_the_query_says_so(device):
    if device.backend != "cpu":
        pytest.skip("a rule of the cpu backend")
    if not NATIVE:
        pytest.skip("the cpu backend runs float16 convolutions natively only on a processor with AVX-512 FP16 "
                    "(oneDNN's avx512_core_fp16 or above); this one runs them on float32 copies")
    y, dx = cancelled_weight(device)
    np.testing.assert_array_equal(y, 0)
    np.testing.assert_array_equal(dx, 0)


def test_float32_copies_elsewhere(device):
    if device.backend != "cpu":
        pytest.skip("a rule of the cpu backend")
    if NATIVE:
        pytest.skip("this processor has AVX-512 FP16: the cpu backend runs float16 convolutions natively")
    y, dx = cancelled_weight(device)
    np.testing.assert_array_equal(y, 2**-12)
    np.testing.assert_array_equal(dx, 2**-12)


@pytest.mark.parametrize("exported", [False, True])
def test_float16_graph_keeps_what_no_caller_sees_in_float32_where_kernels_convert(device, exported):
    """A float16 graph on a backend whose kernels compute float16 images on float32 copies (cpu without AVX-512
    FP16) keeps the images no caller sees in float32: x + 2^-12 - 1 at x = 1 is 2^-12, which float16 storage of the
    sum (spacing 2^-10 at 1) would round to 0. An exported intermediate stays float16, as the result does; so does
    everything on a backend with float16 kernels."""
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    first = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, 2.0 ** -12))
    first.result_image.export_from_graph = exported
    second = mpsx.CNNNeuronNode(first.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, -1.0))
    graph = mpsx.NNGraph(device, second.result_image, format=mpsx.DataType.FLOAT16)
    source = mpsx.ImageBatch.from_numpy(device, np.ones((2, 3, 4, 4), np.float32))
    cb = device.command_queue.command_buffer()
    result, intermediates = graph.encode_batch(cb, [source], intermediate_images=True)
    for image in [result, *intermediates]:
        image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert result.data_type == mpsx.DataType.FLOAT16
    converts = device.backend == "cpu" and not NATIVE
    np.testing.assert_array_equal(result.to_numpy(), 2.0 ** -12 if converts and not exported else 0.0)
    if exported:
        assert intermediates[0].data_type == mpsx.DataType.FLOAT16
        np.testing.assert_array_equal(intermediates[0].to_numpy(), 1.0)

"""CNNBinaryKernel through the arithmetic family (CNNAdd, CNNSubtract,
CNNMultiply, CNNDivide, NNCompare) and its gradients, against formulas
written here in float64 numpy, torch autograd and finite differences."""

import itertools

import numpy as np
import pytest
import torch

import mpsx
from helpers import finite_difference_gradient, read, tolerance

FLT_MAX = np.finfo(np.float32).max
CT = mpsx.NNComparisonType

OPS = {
    "add": (mpsx.CNNAdd, lambda x, y: x + y),
    "subtract": (mpsx.CNNSubtract, lambda x, y: x - y),
    "multiply": (mpsx.CNNMultiply, lambda x, y: x * y),
    "divide": (mpsx.CNNDivide, lambda x, y: x / y),
}
GRADIENTS = {"add": mpsx.CNNAddGradient, "subtract": mpsx.CNNSubtractGradient,
             "multiply": mpsx.CNNMultiplyGradient}


def sample(rng, shape, dtype=np.float32, away_from_zero=False):
    x = rng.standard_normal(shape)
    if away_from_zero:
        x = np.where(np.abs(x) < 0.3, 0.5, x)
    return x.astype(dtype)


def broadcast_shape(full, strides):
    """The shape of a source broadcast with (stride_x, stride_y, stride_c)."""
    n, c, h, w = full
    sx, sy, sc = strides
    return (n, c if sc else 1, h if sy else 1, w if sx else 1)


def set_strides(kernel, side, strides):
    sx, sy, sc = strides
    setattr(kernel, f"{side}_stride_in_pixels_x", sx)
    setattr(kernel, f"{side}_stride_in_pixels_y", sy)
    setattr(kernel, f"{side}_stride_in_feature_channels", sc)


STRIDES = list(itertools.product((0, 1), repeat=3))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_forward_every_broadcast(device, rng, op, dtype):
    make, f = OPS[op]
    kernel = make(device)
    # 8 channels: images of one shape take the dense path on cuda (channels in fours).
    for full, (primary, secondary) in itertools.product(((2, 5, 3, 7), (2, 8, 3, 7)), itertools.product(STRIDES, STRIDES)):
        if primary != (1, 1, 1) and secondary != (1, 1, 1) and primary != secondary[::-1]:
            continue  # every pattern on each side, and mixed ones
        set_strides(kernel, "primary", primary)
        set_strides(kernel, "secondary", secondary)
        x = sample(rng, broadcast_shape(full, primary), dtype)
        y = sample(rng, broadcast_shape(full, secondary), dtype, away_from_zero=op == "divide")
        got = read(device, lambda cb: kernel.encode(cb, mpsx.Image.from_numpy(device, x),
                                                    mpsx.Image.from_numpy(device, y)))
        expected = f(x.astype(np.float64), y.astype(np.float64))  # numpy broadcasts the extents of 1
        assert got.shape == expected.shape, (primary, secondary)
        rtol, atol = tolerance(dtype)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol if op != "divide" else 5 * atol,
                                   err_msg=f"{op} {full} {primary} {secondary}")


@pytest.mark.parametrize("op", list(OPS))
def test_scales_bias_clamp(device, rng, op):
    make, f = OPS[op]
    kernel = make(device)
    assert (kernel.primary_scale, kernel.secondary_scale, kernel.bias) == (1, 1, 0)
    assert kernel.minimum_value == -FLT_MAX and kernel.maximum_value == FLT_MAX
    kernel.primary_scale, kernel.secondary_scale, kernel.bias = 1.5, -0.75, 0.25
    kernel.minimum_value, kernel.maximum_value = -0.8, 0.9
    for shape in ((3, 6, 5, 3), (3, 8, 5, 3)):
        x = sample(rng, shape)
        y = sample(rng, shape, away_from_zero=True)
        got = read(device, lambda cb: kernel.encode(cb, mpsx.Image.from_numpy(device, x),
                                                    mpsx.Image.from_numpy(device, y)))
        expected = np.clip(f(1.5 * x.astype(np.float64), -0.75 * y.astype(np.float64)) + 0.25, -0.8, 0.9)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert (np.abs(got) > 0.5).any() and (got == np.float32(0.9)).any()  # the clamp took effect


@pytest.mark.parametrize("comparison", list(CT))
@pytest.mark.parametrize("threshold", [0.0, 0.3])
def test_compare(device, rng, comparison, threshold):
    kernel = mpsx.NNCompare(device)
    assert kernel.comparison_type == CT.EQUAL and kernel.threshold == 0
    kernel.comparison_type = comparison
    kernel.threshold = threshold
    kernel.primary_scale = 7.0  # unused by the comparison
    x = np.round(sample(rng, (2, 3, 4, 5)), 1)
    y = np.round(sample(rng, (2, 3, 4, 5)), 1)
    y[:, :, 0] = x[:, :, 0]  # equal values
    y[:, :, 1] = x[:, :, 1] + np.float32(0.25)  # within 0.3
    got = read(device, lambda cb: kernel.encode(cb, mpsx.Image.from_numpy(device, x), mpsx.Image.from_numpy(device, y)))
    d = np.abs(x - y)
    expected = {CT.EQUAL: d <= threshold, CT.NOT_EQUAL: d > threshold, CT.LESS: x < y, CT.LESS_OR_EQUAL: x <= y,
                CT.GREATER: x > y, CT.GREATER_OR_EQUAL: x >= y}[comparison]
    np.testing.assert_array_equal(got, expected.astype(np.float32))


def test_compare_broadcast_and_clamp(device, rng):
    kernel = mpsx.NNCompare(device)
    kernel.comparison_type = CT.GREATER
    set_strides(kernel, "secondary", (0, 0, 0))
    kernel.maximum_value = 0.5
    x = sample(rng, (2, 3, 4, 5))
    y = np.full((2, 1, 1, 1), 0.1, np.float32)
    got = read(device, lambda cb: kernel.encode(cb, mpsx.Image.from_numpy(device, x), mpsx.Image.from_numpy(device, y)))
    np.testing.assert_array_equal(got, np.where(x > np.float32(0.1), 0.5, 0.0).astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_offsets_clip_rect_and_channel_slices(device, rng, dtype):
    kernel = mpsx.CNNSubtract(device)
    x = sample(rng, (3, 9, 8, 9), dtype)
    y = sample(rng, (2, 6, 7, 7), dtype)
    out0 = sample(rng, (2, 8, 6, 6), np.float32)
    kernel.primary_offset = (2, 1, 1)  # images 1..2 of the primary
    kernel.secondary_offset = (1, 3, 0)
    kernel.primary_source_feature_channel_offset = 4
    kernel.primary_source_feature_channel_max_count = 3
    kernel.secondary_source_feature_channel_max_count = 3
    kernel.destination_feature_channel_offset = 4
    kernel.clip_rect = (1, 2, 0, 4, 3, 2)
    destination = mpsx.Image.from_numpy(device, out0)
    got = read(device, lambda cb: kernel.encode(cb, mpsx.Image.from_numpy(device, x), mpsx.Image.from_numpy(device, y),
                                                destination))
    expected = out0.copy()
    # destination pixel (1 + i, 2 + j) reads primary (2 + i, 1 + j), secondary (1 + i, 3 + j)
    expected[:, 4:7, 2:5, 1:5] = (x[1:3, 4:7, 1:4, 2:6].astype(np.float64) - y[:, 0:3, 3:6, 1:5])
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    # the properties read back as set
    assert kernel.primary_offset == (2, 1, 1) and kernel.secondary_offset == (1, 3, 0)
    assert kernel.primary_source_feature_channel_max_count == 3
    assert kernel.secondary_source_feature_channel_offset == 0
    assert kernel.primary_kernel_width == kernel.secondary_kernel_height == 1
    assert kernel.primary_dilation_rate_x == kernel.secondary_dilation_rate_y == 1
    assert kernel.primary_edge_mode == mpsx.ImageEdgeMode.ZERO
    kernel.secondary_edge_mode = mpsx.ImageEdgeMode.CLAMP
    assert kernel.secondary_edge_mode == mpsx.ImageEdgeMode.CLAMP


def test_defaults_and_destination_descriptor(device, rng):
    kernel = mpsx.CNNAdd(device)
    assert kernel.primary_source_feature_channel_max_count == 2**63 - 1
    assert (kernel.primary_stride_in_pixels_x, kernel.secondary_stride_in_pixels_y) == (1, 1)
    assert kernel.primary_stride_in_feature_channels == kernel.secondary_stride_in_feature_channels == 1
    x = mpsx.Image.from_numpy(device, sample(rng, (2, 3, 1, 5)))
    y = mpsx.Image.from_numpy(device, sample(rng, (2, 1, 4, 1), np.float16))
    set_strides(kernel, "primary", (1, 0, 1))
    set_strides(kernel, "secondary", (0, 1, 0))
    kernel.primary_offset = (0, 0, 0)
    d = kernel.destination_image_descriptor([x, y])
    assert (d.number_of_images, d.feature_channels, d.height, d.width) == (2, 3, 4, 5)
    assert d.channel_format == mpsx.DataType.FLOAT32  # the primary's
    assert kernel.primary_offset == (0, 0, 0) and kernel.secondary_offset == (0, 0, 0)  # no side effects


@pytest.mark.parametrize("op", ["add", "multiply"])
def test_encode_batch(device, rng, op):
    make, f = OPS[op]
    kernel = make(device)
    set_strides(kernel, "secondary", (0, 1, 1))
    xs = [sample(rng, (1, 3, 4, 5)) for _ in range(3)]
    ys = [sample(rng, (1, 3, 4, 1)) for _ in range(3)]
    out, states = read_batch(device, kernel, xs, ys)
    for i in range(3):
        np.testing.assert_allclose(out[i:i + 1], f(xs[i].astype(np.float64), ys[i]), rtol=1e-5, atol=1e-6)
    assert len(states) == 3 and isinstance(states[0], mpsx.CNNArithmeticGradientState)
    assert states[0].kernel is kernel


def read_batch(device, kernel, xs, ys):
    cb = device.command_queue.command_buffer()
    out, states = kernel.encode_batch(cb, [mpsx.Image.from_numpy(device, x) for x in xs],
                                      mpsx.ImageBatch.from_numpy(device, np.concatenate(ys)), destination_states=True)
    out.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return out.to_numpy(), states


# ----------------------------------------------------------------- gradients

def torch_gradients(op, x, y, dy, ps, ss):
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ty = torch.tensor(y, dtype=torch.float64, requires_grad=True)
    r = OPS[op][1](ps * tx, ss * ty) + 0.5  # bias: no gradient
    r.backward(torch.tensor(dy, dtype=torch.float64))  # torch sums over the broadcast extents of 1
    return tx.grad.numpy(), ty.grad.numpy()


def encode_gradients(device, op, x, y, dy, ps, ss, primary, secondary, dtype=np.float32):
    forward = OPS[op][0](device)
    set_strides(forward, "primary", primary)
    set_strides(forward, "secondary", secondary)
    forward.primary_scale, forward.secondary_scale, forward.bias = ps, ss, 0.5
    results = []
    for is_secondary in (False, True):
        g = GRADIENTS[op](device, is_secondary)
        assert g.is_secondary_source_filter == is_secondary
        g.primary_scale, g.secondary_scale, g.bias = ps, ss, 123.0  # bias is ignored
        # the forward stride of the image passed as source_image
        reads_secondary = (op == "multiply") != is_secondary
        g.secondary_stride_in_feature_channels = (secondary if reads_secondary else primary)[2]

        def encode(cb, g=g, reads_secondary=reads_secondary):
            X = mpsx.Image.from_numpy(device, x.astype(dtype))
            Y = mpsx.Image.from_numpy(device, y.astype(dtype))
            _, state = forward.encode(cb, X, Y, destination_state=True)
            return g.encode(cb, mpsx.Image.from_numpy(device, dy.astype(dtype)), Y if reads_secondary else X, state)
        results.append(read(device, encode))
    return results


@pytest.mark.parametrize("op", list(GRADIENTS))
def test_gradients_every_broadcast(device, rng, op):
    patterns = [((1, 1, 1), s) for s in STRIDES] + [(p, (1, 1, 1)) for p in STRIDES[:-1]] + \
        [((0, 1, 1), (1, 0, 0)), ((1, 0, 0), (0, 0, 1))]
    for full, (primary, secondary) in [((2, 3, 4, 5), pattern) for pattern in patterns] + \
            [((2, 4, 4, 5), ((1, 1, 1), (1, 1, 1)))]:  # dense on cuda
        x = sample(rng, broadcast_shape(full, primary))
        y = sample(rng, broadcast_shape(full, secondary))
        out_shape = np.broadcast_shapes(x.shape, y.shape)
        dy = sample(rng, out_shape)
        ps, ss = 1.5, -0.5
        got_x, got_y = encode_gradients(device, op, x, y, dy, ps, ss, primary, secondary)
        want_x, want_y = torch_gradients(op, x, y, dy, ps, ss)
        assert got_x.shape == x.shape and got_y.shape == y.shape
        np.testing.assert_allclose(got_x, want_x, rtol=1e-4, atol=1e-4, err_msg=f"{op} {primary} {secondary}")
        np.testing.assert_allclose(got_y, want_y, rtol=1e-4, atol=1e-4, err_msg=f"{op} {primary} {secondary}")


@pytest.mark.parametrize("op", list(GRADIENTS))
def test_gradients_float16(device, rng, op):
    x = sample(rng, (3, 5, 3, 3)).astype(np.float16).astype(np.float64)
    y = sample(rng, (3, 1, 3, 1)).astype(np.float16).astype(np.float64)
    dy = sample(rng, (3, 5, 3, 3)).astype(np.float16).astype(np.float64)
    got_x, got_y = encode_gradients(device, op, x, y, dy, 1.0, 2.0, (1, 1, 1), (0, 1, 0), np.float16)
    want_x, want_y = torch_gradients(op, x, y, dy, 1.0, 2.0)
    np.testing.assert_allclose(got_x, want_x, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(got_y, want_y, rtol=2e-2, atol=5e-2)
    # Of one shape, channels in fours: dense on cuda.
    x, y, dy = (sample(rng, (3, 8, 3, 3)).astype(np.float16).astype(np.float64) for _ in range(3))
    got_x, got_y = encode_gradients(device, op, x, y, dy, 1.0, 2.0, (1, 1, 1), (1, 1, 1), np.float16)
    want_x, want_y = torch_gradients(op, x, y, dy, 1.0, 2.0)
    np.testing.assert_allclose(got_x, want_x, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(got_y, want_y, rtol=2e-2, atol=2e-2)


def test_multiply_gradient_finite_differences(device, rng):
    """Multiply's primary filter reads the forward secondary image and vice versa."""
    x = sample(rng, (1, 2, 3, 3)).astype(np.float64)
    y = sample(rng, (1, 2, 1, 3)).astype(np.float64)
    dy = sample(rng, (1, 2, 3, 3)).astype(np.float64)
    got_x, got_y = encode_gradients(device, "multiply", x, y, dy, 2.0, 0.5, (1, 1, 1), (1, 0, 1))
    loss = lambda a, b: float(np.sum(dy * ((2.0 * a) * (0.5 * b))))
    for got, numeric in ((got_x, finite_difference_gradient(lambda a: loss(a, y), x, 1e-3)),
                         (got_y, finite_difference_gradient(lambda b: loss(x, b), y, 1e-3))):
        np.testing.assert_allclose(got, numeric, rtol=1e-3, atol=1e-3)


def test_gradient_of_offsets_and_clip_rect(device, rng):
    """Pixels the forward encode did not read get a zero gradient."""
    x = sample(rng, (2, 3, 5, 6))
    y = sample(rng, (2, 3, 4, 4))
    forward = mpsx.CNNAdd(device)
    forward.primary_offset = (1, 1, 0)
    forward.clip_rect = (0, 0, 0, 3, 2, 2)
    dy = sample(rng, (2, 3, 4, 4))
    for is_secondary in (False, True):
        g = mpsx.CNNAddGradient(device, is_secondary)

        def encode(cb):
            X, Y = mpsx.Image.from_numpy(device, x), mpsx.Image.from_numpy(device, y)
            _, state = forward.encode(cb, X, Y, mpsx.Image.from_numpy(device, np.zeros((2, 3, 4, 4), np.float32)),
                                      destination_state=True)
            return g.encode(cb, mpsx.Image.from_numpy(device, dy), Y if is_secondary else X, state)
        got = read(device, encode)
        expected = np.zeros_like(y if is_secondary else x)
        if is_secondary:
            expected[:, :, 0:2, 0:3] = dy[:, :, 0:2, 0:3]
        else:
            expected[:, :, 1:3, 1:4] = dy[:, :, 0:2, 0:3]
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_gradient_encode_batch(device, rng):
    forward = mpsx.CNNMultiply(device)
    g = mpsx.CNNMultiplyGradient(device, False)
    xs = [sample(rng, (1, 2, 3, 3)) for _ in range(2)]
    ys = [sample(rng, (1, 2, 3, 3)) for _ in range(2)]
    dys = [sample(rng, (1, 2, 3, 3)) for _ in range(2)]
    cb = device.command_queue.command_buffer()
    X = [mpsx.Image.from_numpy(device, a) for a in xs]
    Y = [mpsx.Image.from_numpy(device, a) for a in ys]
    _, states = forward.encode_batch(cb, X, Y, destination_states=True)
    out = g.encode_batch(cb, [mpsx.Image.from_numpy(device, a) for a in dys], Y, states)
    out.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(out.to_numpy(), np.concatenate(dys) * np.concatenate(ys), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------- bad input

def test_bad_input(device, rng):
    x = mpsx.Image.from_numpy(device, sample(rng, (2, 3, 4, 5)))
    y = mpsx.Image.from_numpy(device, sample(rng, (2, 3, 4, 5)))
    kernel = mpsx.CNNAdd(device)
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match=r"secondary_offset \(0, 0\) with strides \(1, 1\) reads pixels x 0 to 4, "
                                              r"y 0 to 3 .* the secondary image is 5x3"):
        kernel.encode(cb, x, mpsx.Image.from_numpy(device, sample(rng, (2, 3, 3, 5))))
    with pytest.raises(mpsx.ShapeError, match="the primary image gives 3 feature channels and the secondary image 2"):
        kernel.encode(cb, x, mpsx.Image.from_numpy(device, sample(rng, (2, 2, 4, 5))))
    with pytest.raises(mpsx.ShapeError, match=r"expected 2 destination images for the 2 primary images .*given 1 \(destination 2, primary 2, secondary 1\)"):
        kernel.encode(cb, x, mpsx.Image.from_numpy(device, sample(rng, (1, 3, 4, 5))))
    for name in ("primary_stride_in_pixels_x", "secondary_stride_in_pixels_y", "secondary_stride_in_feature_channels"):
        setattr(kernel, name, 2)
        with pytest.raises(ValueError, match=f"{name} must be 0 \\(broadcast\\) or 1, given 2"):
            kernel.encode(cb, x, y)
        setattr(kernel, name, 1)
    kernel.primary_stride_in_pixels_x = -1
    with pytest.raises(ValueError, match="primary_stride_in_pixels_x must be between 0 and"):
        kernel.destination_image_descriptor([x, y])
    kernel.primary_stride_in_pixels_x = 1
    kernel.secondary_offset = (2**40, 0, 0)
    with pytest.raises(ValueError, match=r"secondary_offset.x must be between -2147483648 and 2147483648, given 1099511627776"):
        kernel.encode(cb, x, y)
    kernel.secondary_offset = (0, 0, 0)
    kernel.primary_source_feature_channel_offset = 3
    with pytest.raises(ValueError, match="primary_source_feature_channel_offset must be a multiple of 4"):
        kernel.encode(cb, x, y)
    kernel.primary_source_feature_channel_offset = 4
    with pytest.raises(mpsx.ShapeError, match="primary_source_feature_channel_offset 4 is past the primary image's 3"):
        kernel.encode(cb, x, y)
    kernel.primary_source_feature_channel_offset = 0
    kernel.secondary_source_feature_channel_max_count = 0
    with pytest.raises(ValueError, match="secondary_source_feature_channel_max_count must be positive, given 0"):
        kernel.result_state(x, y)
    kernel.secondary_source_feature_channel_max_count = 2**63 - 1
    with pytest.raises(ValueError, match=r"primary_offset.x must be between -2\*\*63 and 2\*\*63 - 1"):
        kernel.primary_offset = (2**70, 0, 0)
    with pytest.raises(TypeError):
        kernel.primary_stride_in_pixels_x = 1.5
    kernel.minimum_value, kernel.maximum_value = 1.0, 0.0
    with pytest.raises(ValueError, match="minimum_value 1 must be at most maximum_value 0"):
        kernel.encode(cb, x, y)
    kernel.minimum_value, kernel.maximum_value = -FLT_MAX, FLT_MAX
    compare = mpsx.NNCompare(device)
    with pytest.raises(ValueError):
        compare.comparison_type = 9
    bf16 = mpsx.Image(device, mpsx.ImageDescriptor(mpsx.DataType.BFLOAT16, 5, 4, 3, 2))
    with pytest.raises(TypeError, match="bfloat16 secondary images are not supported"):
        kernel.encode(cb, x, bf16)
    with pytest.raises(TypeError, match="the destination must be float32 or float16, given bfloat16"):
        kernel.encode(cb, x, y, bf16)
    with pytest.raises(ValueError, match="the destination image shares memory with the primary image"):
        kernel.encode(cb, x, y, x)
    with pytest.raises(ValueError, match="source_images must be"):
        kernel.destination_image_descriptor([x])
    neuron_state = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).result_state(x)
    with pytest.raises(TypeError, match="expected an MPSCNNArithmeticGradientState, given an MPSNNGradientState"):
        kernel.encode(cb, x, y, destination_state=neuron_state)
    with pytest.raises(mpsx.ShapeError):  # a refused batch encode takes back its gather
        kernel.encode_batch(cb, [x, x], [mpsx.Image.from_numpy(device, sample(rng, (2, 3, 1, 5)))] * 2)
    assert cb.command_count == 0  # refused before anything was enqueued


def test_gradient_bad_input(device, rng):
    x = mpsx.Image.from_numpy(device, sample(rng, (2, 3, 4, 5)))
    y = mpsx.Image.from_numpy(device, sample(rng, (2, 3, 4, 5)))
    dy = mpsx.Image.from_numpy(device, sample(rng, (2, 3, 4, 5)))
    cb = device.command_queue.command_buffer()
    _, add_state = mpsx.CNNAdd(device).encode(cb, x, y, destination_state=True)
    _, divide_state = mpsx.CNNDivide(device).encode(cb, x, y, destination_state=True)
    _, multiply_state = mpsx.CNNMultiply(device).encode(cb, x, y, destination_state=True)
    count = cb.command_count
    g = mpsx.CNNMultiplyGradient(device, False)
    with pytest.raises(TypeError, match="expected the state of an MPSCNNMultiply forward encode, given one of an "
                                        "MPSCNNAdd"):
        g.encode(cb, dy, y, add_state)
    with pytest.raises(TypeError, match="given one of an MPSCNNDivide"):
        g.encode(cb, dy, y, divide_state)
    _, neuron_state = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode(
        cb, x, destination_state=True)
    count = cb.command_count
    with pytest.raises(TypeError, match="expected an MPSCNNArithmeticGradientState, given an MPSNNGradientState"):
        g.encode(cb, dy, y, neuron_state)
    with pytest.raises(mpsx.StateError, match="source_image must be the forward secondary image .*\\(the primary filter "
                                              "of MPSCNNMultiply reads the forward secondary image"):
        g.encode(cb, dy, x, multiply_state)
    with pytest.raises(mpsx.StateError, match="source_image must be the forward primary image"):
        mpsx.CNNAddGradient(device, False).encode(cb, dy, y, add_state)
    with pytest.raises(mpsx.ShapeError, match="expected a source gradient shaped as the forward result, 2x3x4x5"):
        g.encode(cb, mpsx.Image.from_numpy(device, sample(rng, (2, 3, 4, 4))), y, multiply_state)
    g.secondary_stride_in_feature_channels = 0
    with pytest.raises(ValueError, match="secondary_stride_in_feature_channels 0 must equal the forward encode's "
                                         "stride_in_feature_channels of the secondary image"):
        g.encode(cb, dy, y, multiply_state)
    g.secondary_stride_in_feature_channels = 3
    with pytest.raises(ValueError, match="must be 0 \\(broadcast\\) or 1, given 3"):
        g.encode(cb, dy, y, multiply_state)
    with pytest.raises(TypeError, match="is_secondary_source_filter must be a bool"):
        mpsx.CNNAddGradient(device, 1)
    assert not hasattr(mpsx, "CNNDivideGradient")
    assert cb.command_count == count
    fresh = mpsx.CNNAdd(device).result_state(x, y)
    with pytest.raises(mpsx.StateError, match="not produced by a forward encode"):
        mpsx.CNNAddGradient(device, False).encode(cb, dy, x, fresh)


def test_uninitialized(device):
    for cls in (mpsx.CNNAdd, mpsx.NNCompare, mpsx.CNNMultiplyGradient):
        k = cls.__new__(cls)
        with pytest.raises(TypeError):
            k.primary_scale
    with pytest.raises(TypeError):
        mpsx.CNNAdd.__new__(mpsx.CNNAdd).primary_offset

"""CNNLocalContrastNormalization and its gradient against MPSCNNNormalization.h's
forward formula written here twice, independently: in torch (float64, average
pooling over the zero-padded source, VAR = E[x^2] - M^2, gradients by
autograd) and in numpy loops (two-pass variance, gradients by central finite
differences). Window of destination pixel i: source [c - k/2, c + (k-1)/2]
around its centre c = offset + i; pixels off the image read 0 (edge_mode
ZERO) or the nearest pixel of the image (CLAMP: replicate padding in torch,
clipped indices in numpy); M and VAR divide by kernel_width * kernel_height."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import batch_forward_and_gradient, finite_difference_gradient, read, tolerance

PARAMETERS = ("alpha", "beta", "delta", "p0", "pm", "ps")
DEFAULTS = {"alpha": 0.0, "beta": 0.5, "delta": 1.0 / 1024, "p0": 1.0, "pm": 0.0, "ps": 1.0}
# Parameter sets: the header's unit-variance example (with a delta), and general values.
UNIT = {"alpha": 1.0, "beta": 0.5, "delta": 1.0 / 1024, "p0": 1.0, "pm": 0.0, "ps": 1.0}
GENERAL = {"alpha": 0.8, "beta": 0.75, "delta": 0.5, "p0": 0.6, "pm": 0.25, "ps": 1.5}


def torch_lcn(x, k, p, first=None, out=None, clamp=False):
    """The header's formula in torch. x: (N, C, H, W) float64 tensor; first:
    (row, column) of the top-left tap of destination (0, 0)'s window (default:
    windows centred on each pixel, the encode that makes its destination);
    out: destination (height, width); clamp: replicate padding, else zeros."""
    n, c, h, w = x.shape
    fy, fx = first if first is not None else (-(k // 2), -(k // 2))
    oh, ow = out if out is not None else (h, w)
    pt, pl = max(0, -fy), max(0, -fx)
    pb, pr = max(0, fy + oh + k - 1 - h), max(0, fx + ow + k - 1 - w)
    xp = F.pad(x, (pl, pr, pt, pb), mode="replicate" if clamp else "constant")
    region = xp[:, :, fy + pt:fy + pt + oh + k - 1, fx + pl:fx + pl + ow + k - 1]
    mean = F.avg_pool2d(region, k, stride=1)  # divides by k * k, zeros included
    variance = F.avg_pool2d(region * region, k, stride=1) - mean * mean
    centre = region[:, :, k // 2:k // 2 + oh, k // 2:k // 2 + ow]
    return p["pm"] + p["ps"] * (centre - p["p0"] * mean) * (p["delta"] + p["alpha"] * variance) ** (-p["beta"])


def numpy_lcn(x, k, p, first, out, clamp=False):
    """The same formula in plain numpy loops, float64, two-pass variance."""
    n, c, h, w = x.shape
    (fy, fx), (oh, ow) = first, out
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            window = np.zeros((n, c, k, k))
            for a in range(k):
                for b in range(k):
                    r, s = fy + i + a, fx + j + b
                    if clamp:
                        r, s = min(max(r, 0), h - 1), min(max(s, 0), w - 1)
                    if 0 <= r < h and 0 <= s < w:
                        window[:, :, a, b] = x[:, :, r, s]
            m = window.mean(axis=(2, 3))
            var = ((window - m[:, :, None, None]) ** 2).mean(axis=(2, 3))
            centre = x[:, :, fy + i + k // 2, fx + j + k // 2]
            y[:, :, i, j] = p["pm"] + p["ps"] * (centre - p["p0"] * m) / (p["delta"] + p["alpha"] * var) ** p["beta"]
    return y


def make(device, k, p, gradient=False, clamp=False):
    kernel = (mpsx.CNNLocalContrastNormalizationGradient if gradient else mpsx.CNNLocalContrastNormalization)(
        device, k, k)
    for name, value in p.items():
        setattr(kernel, name, value)
    kernel.edge_mode = mpsx.ImageEdgeMode.CLAMP if clamp else mpsx.ImageEdgeMode.ZERO
    return kernel


def forward_and_gradient(device, x, dy, k, p, data_type=np.float32, clamp=False):
    forward, gradient = make(device, k, p, clamp=clamp), make(device, k, p, gradient=True, clamp=clamp)
    return batch_forward_and_gradient(device, x.astype(data_type), dy.astype(data_type), forward, gradient)


def torch_reference(x, dy, k, p, clamp=False):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = torch_lcn(xt, k, p, clamp=clamp)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return y.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("clamp", [False, True], ids=["zero", "clamp"])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("p", [UNIT, GENERAL], ids=["unit", "general"])
def test_forward_and_gradient_match_torch(device, rng, k, p, clamp):
    x = rng.standard_normal((2, 3, 7, 6))
    dy = rng.standard_normal((2, 3, 7, 6))
    y, dx = forward_and_gradient(device, x, dy, k, p, clamp=clamp)
    expected_y, expected_dx = torch_reference(x, dy, k, p, clamp)
    np.testing.assert_allclose(y, expected_y, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(dx, expected_dx, rtol=2e-4, atol=2e-4)
    if clamp and k > 1:  # CLAMP changes the results near the edges
        zero_y, zero_dx = torch_reference(x, dy, k, p)
        assert not np.allclose(expected_y, zero_y, rtol=1e-3) and not np.allclose(expected_dx, zero_dx, rtol=1e-3)


@pytest.mark.parametrize("clamp", [False, True], ids=["zero", "clamp"])
def test_numpy_and_torch_references_agree(rng, clamp):
    # The two references are written independently; they must agree before either is trusted.
    x = rng.standard_normal((1, 2, 5, 6))
    for k, first, out in [(3, (-1, -1), (5, 6)), (4, (-2, -2), (5, 6)), (3, (0, 1), (2, 3)), (2, (-1, 2), (4, 2)),
                          (5, (-2, -2), (5, 6))]:
        expected = torch_lcn(torch.tensor(x), k, GENERAL, first, out, clamp).numpy()
        np.testing.assert_allclose(numpy_lcn(x, k, GENERAL, first, out, clamp), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k, p, clamp", [(3, GENERAL, False), (2, UNIT, False), (4, GENERAL, False), (3, GENERAL, True),
                                         (2, UNIT, True), (4, GENERAL, True), (5, GENERAL, True)])
def test_gradient_finite_differences(device, rng, k, p, clamp):
    x = rng.standard_normal((1, 2, 4, 5))
    dy = rng.standard_normal((1, 2, 4, 5))
    _, dx = forward_and_gradient(device, x, dy, k, p, clamp=clamp)
    first, out = (-(k // 2), -(k // 2)), (4, 5)
    numeric = finite_difference_gradient(lambda v: (numpy_lcn(v, k, p, first, out, clamp) * dy).sum(), x, 1e-6)
    np.testing.assert_allclose(dx, numeric, rtol=1e-3, atol=1e-3)


def test_defaults(device, rng):
    for cls in (mpsx.CNNLocalContrastNormalization, mpsx.CNNLocalContrastNormalizationGradient):
        kernel = cls(device, 3, 3)
        assert (kernel.kernel_width, kernel.kernel_height) == (3, 3)
        for name, value in DEFAULTS.items():
            assert getattr(kernel, name) == np.float32(value), name
        assert kernel.edge_mode == mpsx.ImageEdgeMode.ZERO
    # With the defaults (alpha 0) it subtracts the local mean and scales by delta^-0.5.
    x = rng.standard_normal((1, 2, 5, 5))
    y = read(device, lambda cb: mpsx.CNNLocalContrastNormalization(device, 3, 3).encode(
        cb, mpsx.Image.from_numpy(device, x.astype(np.float32))))
    mean = F.avg_pool2d(torch.tensor(x), 3, stride=1, padding=1, count_include_pad=True).numpy()
    np.testing.assert_allclose(y, (x - mean) * 32, rtol=1e-4, atol=1e-4)


def test_properties_read_back_as_float32(device):
    for cls in (mpsx.CNNLocalContrastNormalization, mpsx.CNNLocalContrastNormalizationGradient):
        kernel = cls(device, 5, 5)
        for i, name in enumerate(PARAMETERS):
            setattr(kernel, name, 0.1 * (i + 1))
        assert [getattr(kernel, name) for name in PARAMETERS] == [np.float32(0.1 * (i + 1)) for i in range(6)]
        with pytest.raises(TypeError):
            kernel.alpha = "1"


@pytest.mark.parametrize("k, clamp", [(3, False), (3, True), (4, True)])
def test_float16(device, rng, k, clamp):
    x = rng.standard_normal((2, 4, 6, 5))
    dy = rng.standard_normal((2, 4, 6, 5))
    x16, dy16 = x.astype(np.float16).astype(np.float64), dy.astype(np.float16).astype(np.float64)
    y, dx = forward_and_gradient(device, x16, dy16, k, GENERAL, np.float16, clamp)
    assert y.dtype == np.float16 and dx.dtype == np.float16
    expected_y, expected_dx = torch_reference(x16, dy16, k, GENERAL, clamp)
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y, expected_y, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, expected_dx, rtol=rtol, atol=atol)


def test_offset_clip_rect_and_channel_offsets(device, rng):
    k, p = 3, GENERAL
    x = rng.standard_normal((2, 8, 7, 9))
    dy_values = rng.standard_normal((2, 8, 6, 7))
    forward, gradient = make(device, k, p), make(device, k, p, gradient=True)
    forward.offset = (2, 1)
    forward.clip_rect = (1, 2, 0, 5, 3, 2)
    forward.source_feature_channel_offset = 4
    forward.destination_feature_channel_offset = 4
    source = mpsx.ImageBatch.from_numpy(device, x.astype(np.float32))
    destination = mpsx.ImageBatch.from_numpy(device, np.full((2, 8, 6, 7), 7.0, np.float32))

    def encode(cb):
        _, states = forward.encode_batch(cb, source, destination, destination_states=True)
        dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy_values.astype(np.float32)), source,
                                   states)
        return destination, dx

    y, dx = read(device, encode)
    # clip_rect origin (1, 2) is centred on source (offset.x, offset.y) = (2, 1): windows start at (1, 0).
    xt = torch.tensor(x[:, 4:], requires_grad=True)
    expected = torch_lcn(xt, k, p, first=(0, 1), out=(3, 5))
    expected_y = np.full((2, 8, 6, 7), 7.0)
    expected_y[:, 4:, 2:5, 1:6] = expected.detach().numpy()
    np.testing.assert_allclose(y, expected_y, rtol=2e-4, atol=2e-4)
    # The gradient reads the source gradient where the forward wrote; channels before 4 get zero.
    expected.backward(torch.tensor(dy_values[:, 4:, 2:5, 1:6]))
    expected_dx = np.zeros_like(x)
    expected_dx[:, 4:] = xt.grad.numpy()
    np.testing.assert_allclose(dx, expected_dx, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("data_type", [np.float32, np.float16])
@pytest.mark.parametrize("k", [3, 4])
def test_clamp_offset_clip_rect_at_the_edges(device, rng, data_type, k):
    # Centres on the bottom rows and the left columns of the source: the
    # windows reach off it (clamped reads) and, inside it, past the region.
    p = GENERAL
    x = rng.standard_normal((2, 8, 7, 9)).astype(data_type).astype(np.float64)
    dy_values = rng.standard_normal((2, 8, 6, 7)).astype(data_type).astype(np.float64)
    forward, gradient = make(device, k, p, clamp=True), make(device, k, p, gradient=True, clamp=True)
    forward.offset = (0, 4)
    forward.clip_rect = (1, 2, 0, 5, 3, 2)
    forward.source_feature_channel_offset = 4
    forward.destination_feature_channel_offset = 4
    source = mpsx.ImageBatch.from_numpy(device, x.astype(data_type))
    destination = mpsx.ImageBatch.from_numpy(device, np.full((2, 8, 6, 7), 7.0, data_type))

    def encode(cb):
        _, states = forward.encode_batch(cb, source, destination, destination_states=True)
        dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy_values.astype(data_type)), source,
                                   states)
        return destination, dx

    y, dx = read(device, encode)
    # clip_rect origin (1, 2) is centred on source (0, 4): windows start at (-(k // 2), 4 - k // 2).
    xt = torch.tensor(x[:, 4:], requires_grad=True)
    expected = torch_lcn(xt, k, p, first=(4 - k // 2, -(k // 2)), out=(3, 5), clamp=True)
    expected_y = np.full((2, 8, 6, 7), 7.0)
    expected_y[:, 4:, 2:5, 1:6] = expected.detach().numpy()
    rtol, atol = (2e-4, 2e-4) if data_type == np.float32 else tolerance(data_type)
    np.testing.assert_allclose(y, expected_y, rtol=rtol, atol=atol)
    expected.backward(torch.tensor(dy_values[:, 4:, 2:5, 1:6]))
    expected_dx = np.zeros_like(x)
    expected_dx[:, 4:] = xt.grad.numpy()
    np.testing.assert_allclose(dx, expected_dx, rtol=rtol, atol=atol)


def test_windows_near_the_edges_read_the_edge_with_clamp(device, rng):
    # The corner's 3x3 window with CLAMP: x00 four times, x01 and x10 twice, x11 once.
    x = rng.uniform(1.0, 2.0, (1, 1, 3, 3))
    kernel = make(device, 3, UNIT, clamp=True)
    y = read(device, lambda cb: kernel.encode(cb, mpsx.Image.from_numpy(device, x.astype(np.float32))))
    x32 = x.astype(np.float32).astype(np.float64)[0, 0]
    window = np.array([[x32[0, 0], x32[0, 0], x32[0, 1]], [x32[0, 0], x32[0, 0], x32[0, 1]],
                       [x32[1, 0], x32[1, 0], x32[1, 1]]])
    m, var = window.mean(), window.var()
    np.testing.assert_allclose(y[0, 0, 0, 0], (x32[0, 0] - m) / np.sqrt(1.0 / 1024 + var), rtol=1e-4)


def test_windows_near_the_edges_read_zeros(device, rng):
    # Centres on the edge pixels: half the window is off the image, and still counts in N.
    x = rng.uniform(1.0, 2.0, (1, 1, 3, 3))
    y = read(device, lambda cb: make(device, 3, UNIT).encode(cb, mpsx.Image.from_numpy(device, x.astype(np.float32))))
    window = np.zeros((3, 3))
    window[1:, 1:] = x[0, 0, :2, :2]
    m, var = window.mean(), window.var()
    np.testing.assert_allclose(y[0, 0, 0, 0], (x[0, 0, 0, 0] - m) / np.sqrt(1.0 / 1024 + var), rtol=1e-4)


@pytest.mark.parametrize("clamp", [False, True], ids=["zero", "clamp"])
def test_gradient_is_zero_for_images_before_offset_z(device, rng, clamp):
    x = rng.standard_normal((3, 4, 4, 5))
    dy = rng.standard_normal((2, 4, 4, 5))
    forward, gradient = make(device, 3, GENERAL, clamp=clamp), make(device, 3, GENERAL, gradient=True, clamp=clamp)
    forward.offset = (0, 0, 1)
    source = mpsx.ImageBatch.from_numpy(device, x.astype(np.float32))

    def encode(cb):
        y, states = forward.encode_batch(cb, source, destination_states=True)
        return y, gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy.astype(np.float32)), source, states)

    y, dx = read(device, encode)
    expected_y, expected_dx = torch_reference(x[1:], dy, 3, GENERAL, clamp)
    np.testing.assert_allclose(y, expected_y, rtol=2e-4, atol=2e-4)
    np.testing.assert_array_equal(dx[0], 0)
    np.testing.assert_allclose(dx[1:], expected_dx, rtol=2e-4, atol=2e-4)


def test_single_images_and_result_state(device, rng):
    x = rng.standard_normal((1, 3, 5, 4))
    dy = rng.standard_normal((1, 3, 5, 4))
    forward, gradient = make(device, 3, UNIT), make(device, 3, UNIT, gradient=True)
    image = mpsx.Image.from_numpy(device, x.astype(np.float32))

    def encode(cb):
        state = forward.result_state(image)
        y = mpsx.Image(device, forward.destination_image_descriptor(image))
        forward.encode(cb, image, y, destination_state=state)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy.astype(np.float32)), image, state)

    y, dx = read(device, encode)
    expected_y, expected_dx = torch_reference(x, dy, 3, UNIT)
    np.testing.assert_allclose(y, expected_y, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(dx, expected_dx, rtol=2e-4, atol=2e-4)


def test_gradient_kernels_keep_the_parameters(device, rng):
    forward = make(device, 5, GENERAL)
    made = forward.gradient_kernels()
    assert [type(g) for g in made] == [mpsx.CNNLocalContrastNormalizationGradient]
    assert (made[0].kernel_width, made[0].kernel_height) == (5, 5)
    assert [getattr(made[0], name) for name in PARAMETERS] == [np.float32(GENERAL[name]) for name in PARAMETERS]
    assert (made[0].secondary_kernel_width, made[0].secondary_kernel_height) == (5, 5)
    assert made[0].edge_mode == mpsx.ImageEdgeMode.ZERO
    # The forward edge mode reaches the gradient through the gradient
    # kernel's own edge_mode, which gradient_kernels() copies.
    forward.edge_mode = mpsx.ImageEdgeMode.CLAMP
    (gradient,) = forward.gradient_kernels()
    assert gradient.edge_mode == mpsx.ImageEdgeMode.CLAMP
    x = rng.standard_normal((2, 2, 6, 5))
    dy = rng.standard_normal(x.shape)
    source = mpsx.ImageBatch.from_numpy(device, x.astype(np.float32))

    def encode(cb):
        y, states = forward.encode_batch(cb, source, destination_states=True)
        return y, gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy.astype(np.float32)), source, states)

    y, dx = read(device, encode)
    expected_y, expected_dx = torch_reference(x, dy, 5, GENERAL, clamp=True)
    np.testing.assert_allclose(y, expected_y, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(dx, expected_dx, rtol=2e-4, atol=2e-4)


def test_errors(device, rng):
    with pytest.raises(ValueError, match=r"MPSCNNLocalContrastNormalization: kernel_width must equal kernel_height "
                                         r"\(MPS\); given 3 and 5"):
        mpsx.CNNLocalContrastNormalization(device, 3, 5)
    with pytest.raises(ValueError, match="MPSCNNLocalContrastNormalizationGradient: kernel_width must equal "
                                         "kernel_height"):
        mpsx.CNNLocalContrastNormalizationGradient(device, 4, 2)
    with pytest.raises(ValueError, match="kernel_width"):
        mpsx.CNNLocalContrastNormalization(device, 0, 0)
    with pytest.raises(TypeError, match="kernel_width must be an int, given float 1.5"):
        mpsx.CNNLocalContrastNormalization(device, 1.5, 1.5)
    for cls in (mpsx.CNNLocalContrastNormalization, mpsx.CNNLocalContrastNormalizationGradient):
        with pytest.raises(TypeError):
            cls.__new__(cls).alpha

    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    forward = mpsx.CNNLocalContrastNormalization(device, 3, 3)
    cb = device.command_queue.command_buffer()
    # Centres outside the source.
    forward.offset = (3, 0)
    with pytest.raises(mpsx.ShapeError, match=r"offset \(3, 0\) with a 5x5 region centres windows outside the 5x5 "
                                              r"source image"):
        forward.encode(cb, image, mpsx.Image.from_numpy(device, x))
    forward.offset = (0, 0)
    _, state = forward.encode(cb, image, destination_state=True)
    dy = mpsx.Image.from_numpy(device, x)
    with pytest.raises(ValueError, match="MPSCNNLocalContrastNormalizationGradient: the state comes from a 3x3 forward "
                                         "kernel; this gradient kernel is 5x5"):
        mpsx.CNNLocalContrastNormalizationGradient(device, 5, 5).encode(cb, dy, image, state)
    # A state of another kernel.
    _, neuron_state = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode(
        cb, image, destination_state=True)
    with pytest.raises(TypeError, match="MPSCNNLocalContrastNormalizationGradient: expected the state of an "
                                        "MPSCNNLocalContrastNormalization forward encode, given one of an MPSCNNNeuron"):
        mpsx.CNNLocalContrastNormalizationGradient(device, 3, 3).encode(cb, dy, image, neuron_state)
    with pytest.raises(TypeError, match="MPSCNNLocalContrastNormalization: expected a state made by result_state"):
        forward.encode(cb, image, destination_state=neuron_state)
    with pytest.raises(mpsx.ShapeError, match="source gradient"):
        mpsx.CNNLocalContrastNormalizationGradient(device, 3, 3).encode(
            cb, mpsx.Image.from_numpy(device, x[:, :2]), image, state)
    refused = mpsx.CNNLocalContrastNormalizationGradient(device, 3, 3)
    refused.secondary_edge_mode = mpsx.ImageEdgeMode.CLAMP
    with pytest.raises(ValueError, match="MPSCNNLocalContrastNormalizationGradient: secondary_edge_mode must keep its "
                                         "default ZERO, given CLAMP; a gradient kernel takes the forward geometry"):
        refused.encode(cb, dy, image, state)
    with pytest.raises(ValueError):
        forward.edge_mode = 2
    count = cb.command_count
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed" and count == 2  # the two forward encodes; nothing of the failed calls

"""CNNPooling{Max,Average,L2Norm}, CNNDilatedPoolingMax and their gradients
against MPS's definitions written here in torch (float64, differentiable),
against torch's own pooling where it means the same, and against finite
differences."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import (batch_and_items_forward_and_gradient, forward_finite_differences, kernel_forward_and_gradient,
                     read, run_isolated, tolerance)

EM = mpsx.ImageEdgeMode
PM = mpsx.NNPaddingMethod
STYLE = {"valid": (PM.SIZE_VALID_ONLY, -1), "same": (PM.SIZE_SAME, 0), "full": (PM.SIZE_FULL, 1)}


def mps_policy(size, kernel, stride, dilation, style, remainder_first=True):
    """MPSNNPaddingMethod, centered: (destination size, position of the first
    window's top-left tap)."""
    extent = (kernel - 1) * dilation + 1
    readable = size + style * (extent - 1)
    out = -(-readable // stride)
    extra = (out - 1) * stride + extent - size
    before = (extra + (1 if remainder_first else 0)) // 2
    return out, -before


def mps_pool(kind, x, kernel, stride, dilation, first, out, edge, count_pad=None):
    """MPS pooling in torch ops. Destination (i, j) pools the taps at
    (first_y + i*stride_y + a*dilation_y, first_x + j*stride_x + b*dilation_x).
    ZERO: taps off the image read 0; CLAMP: they are left out (a window with
    none inside gives 0). Average divides by the taps within count_pad pixels
    of the image (None: the whole window)."""
    (kh, kw), (sy, sx), (dy, dx), (fy, fx), (oh, ow) = kernel, stride, dilation, first, out
    n, c, h, w = x.shape
    ys = fy + sy * np.arange(oh)[:, None] + dy * np.arange(kh)[None, :]  # (oh, kh)
    xs = fx + sx * np.arange(ow)[:, None] + dx * np.arange(kw)[None, :]  # (ow, kw)
    pad = int(max(0, -ys.min(), -xs.min(), ys.max() - h + 1, xs.max() - w + 1))
    padded = F.pad(x, (pad, pad, pad, pad))
    taps = padded[:, :, torch.as_tensor(ys + pad)[:, :, None, None], torch.as_tensor(xs + pad)[None, None, :, :]]
    taps = taps.permute(0, 1, 2, 4, 3, 5).reshape(n, c, oh, ow, kh * kw)  # scan order: rows, then columns
    inside_y, inside_x = (ys >= 0) & (ys < h), (xs >= 0) & (xs < w)
    inside = torch.as_tensor(inside_y[:, None, :, None] & inside_x[None, :, None, :]).reshape(oh, ow, kh * kw)
    empty = ~inside.any(-1)
    if kind == "average":
        if count_pad is None:
            count = np.full((oh, ow), kh * kw)
        else:
            cy = ((ys >= -count_pad[0]) & (ys < h + count_pad[0])).sum(1)
            cx = ((xs >= -count_pad[1]) & (xs < w + count_pad[1])).sum(1)
            count = cy[:, None] * cx[None, :]
        result = taps.sum(-1) / torch.as_tensor(np.maximum(count, 1), dtype=x.dtype)
    elif kind == "l2":
        result = torch.sqrt((taps * taps).sum(-1))
    else:
        if edge == EM.CLAMP:
            taps = taps.masked_fill(~inside, -np.inf)
        result = taps.max(-1).values
    return result.masked_fill(empty, 0.0)


KINDS = {
    "max": lambda d, kw, kh, sx, sy, dx, dy: mpsx.CNNPoolingMax(d, kw, kh, sx, sy),
    "average": lambda d, kw, kh, sx, sy, dx, dy: mpsx.CNNPoolingAverage(d, kw, kh, sx, sy),
    "l2": lambda d, kw, kh, sx, sy, dx, dy: mpsx.CNNPoolingL2Norm(d, kw, kh, sx, sy),
    "dilated": lambda d, kw, kh, sx, sy, dx, dy: mpsx.CNNDilatedPoolingMax(d, kw, kh, dx, dy, sx, sy),
}
GRADIENTS = {
    "max": lambda d, kw, kh, sx, sy, dx, dy: mpsx.CNNPoolingMaxGradient(d, kw, kh, sx, sy),
    "average": lambda d, kw, kh, sx, sy, dx, dy: mpsx.CNNPoolingAverageGradient(d, kw, kh, sx, sy),
    "l2": lambda d, kw, kh, sx, sy, dx, dy: mpsx.CNNPoolingL2NormGradient(d, kw, kh, sx, sy),
    "dilated": lambda d, kw, kh, sx, sy, dx, dy: mpsx.CNNDilatedPoolingMaxGradient(d, kw, kh, dx, dy, sx, sy),
}

# kind, (kernel w, h), (stride x, y), (dilation x, y), source shape (N, C, H, W)
CASES = [
    ("max", (2, 2), (2, 2), (1, 1), (2, 3, 7, 9)),
    ("max", (3, 3), (2, 2), (1, 1), (1, 5, 6, 5)),
    ("max", (3, 2), (1, 2), (1, 1), (2, 4, 5, 7)),
    ("average", (3, 3), (2, 2), (1, 1), (2, 3, 7, 9)),
    ("average", (2, 3), (2, 1), (1, 1), (1, 5, 6, 5)),
    ("l2", (3, 3), (2, 2), (1, 1), (2, 3, 7, 9)),
    ("l2", (2, 2), (1, 3), (1, 1), (1, 2, 8, 5)),
    ("dilated", (2, 3), (1, 2), (2, 3), (2, 3, 9, 8)),
    ("dilated", (3, 3), (1, 1), (2, 2), (1, 4, 7, 7)),
]
CASE_IDS = [f"{k}-k{a[0]}x{a[1]}-s{b[0]}x{b[1]}-d{c[0]}x{c[1]}" for k, a, b, c, _ in CASES]


def make(table, device, kind, kernel, stride, dilation, edge, style):
    k = table[kind](device, kernel[0], kernel[1], stride[0], stride[1], dilation[0], dilation[1])
    k.edge_mode = edge
    k.padding = STYLE[style][0]
    return k


def expected_geometry(shape, kernel, stride, dilation, style):
    oh, fy = mps_policy(shape[2], kernel[1], stride[1], dilation[1], STYLE[style][1])
    ow, fx = mps_policy(shape[3], kernel[0], stride[0], dilation[0], STYLE[style][1])
    return (oh, ow), (fy, fx)


def reference(kind, x, kernel, stride, dilation, edge, style):
    out, first = expected_geometry(x.shape, kernel, stride, dilation, style)
    # CLAMP with zero_pad_size 0: average pooling divides by the taps inside the image
    count_pad = (0, 0) if edge == EM.CLAMP else None
    return mps_pool(kind, x, kernel[::-1], stride[::-1], dilation[::-1], first, out, edge, count_pad)


def sample(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("style", ["valid", "same", "full"])
@pytest.mark.parametrize("edge", [EM.ZERO, EM.CLAMP], ids=["zero", "clamp"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_matches_reference(device, rng, case, edge, style):
    kind, kernel, stride, dilation, shape = case
    x = sample(rng, shape)
    pooling = make(KINDS, device, kind, kernel, stride, dilation, edge, style)
    y = read(device, lambda cb: pooling.encode(cb, mpsx.Image.from_numpy(device, x)))
    expected = reference(kind, torch.from_numpy(x.astype(np.float64)), kernel, stride, dilation, edge, style)
    assert y.shape == tuple(expected.shape)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5, atol=1e-5)
    extent_x, extent_y = (kernel[0] - 1) * dilation[0] + 1, (kernel[1] - 1) * dilation[1] + 1
    _, (fy, fx) = expected_geometry(shape, kernel, stride, dilation, style)
    assert tuple(pooling.offset) == (fx + extent_x // 2, fy + extent_y // 2, 0)


@pytest.mark.parametrize("style", ["valid", "same", "full"])
@pytest.mark.parametrize("edge", [EM.ZERO, EM.CLAMP], ids=["zero", "clamp"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradient_matches_autograd(device, rng, case, edge, style):
    kind, kernel, stride, dilation, shape = case
    x = sample(rng, shape)
    pooling = make(KINDS, device, kind, kernel, stride, dilation, edge, style)
    gradient = make(GRADIENTS, device, kind, kernel, stride, dilation, edge, style)
    source = mpsx.Image.from_numpy(device, x)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    expected = reference(kind, xt, kernel, stride, dilation, edge, style)
    dy = sample(rng, tuple(expected.shape))

    def encode(cb):
        _, state = pooling.encode(cb, source, destination_state=True)
        return gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)

    dx = read(device, encode)
    expected.backward(torch.from_numpy(dy.astype(np.float64)))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)


# Torch's pooling where it means what MPS means.
def test_max_matches_torch(device, rng):
    x = sample(rng, (2, 6, 11, 10))
    xt = torch.from_numpy(x).requires_grad_()
    dy = sample(rng, (2, 6, 5, 4))
    pooling, gradient = mpsx.CNNPoolingMax(device, 3, 3, 2, 2), mpsx.CNNPoolingMaxGradient(device, 3, 3, 2, 2)
    pooling.padding = gradient.padding = PM.SIZE_VALID_ONLY
    source = mpsx.Image.from_numpy(device, x)

    def encode(cb):
        y, state = pooling.encode(cb, source, destination_state=True)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)

    y, dx = read(device, encode)
    expected = F.max_pool2d(xt, 3, 2)
    expected.backward(torch.from_numpy(dy))
    np.testing.assert_array_equal(y, expected.detach().numpy())
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6)  # overlapping windows sum in another order


def test_clamped_max_matches_torch_padding(device, rng):
    # torch pads max pooling with -inf: MPSImageEdgeModeClamp.
    x = sample(rng, (1, 3, 7, 8)) - 3.0
    pooling = mpsx.CNNPoolingMax(device, 3, 3, 1, 1)
    pooling.edge_mode = EM.CLAMP
    y = read(device, lambda cb: pooling.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_array_equal(y, F.max_pool2d(torch.from_numpy(x), 3, 1, padding=1).numpy())
    pooling.edge_mode = EM.ZERO  # the zeros off the edge win over the negative border
    y = read(device, lambda cb: pooling.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_array_equal(y, F.max_pool2d(F.pad(torch.from_numpy(x), (1, 1, 1, 1)), 3, 1).numpy())


@pytest.mark.parametrize("edge", [EM.ZERO, EM.CLAMP], ids=["zero", "clamp"])
def test_average_matches_torch(device, rng, edge):
    x = sample(rng, (2, 5, 7, 6))
    xt = torch.from_numpy(x).requires_grad_()
    dy = sample(rng, x.shape)
    pooling, gradient = mpsx.CNNPoolingAverage(device, 3, 3, 1, 1), mpsx.CNNPoolingAverageGradient(device, 3, 3, 1, 1)
    pooling.edge_mode = gradient.edge_mode = edge
    source = mpsx.Image.from_numpy(device, x)

    def encode(cb):
        y, state = pooling.encode(cb, source, destination_state=True)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)

    y, dx = read(device, encode)
    # ZERO divides by the whole window, CLAMP by the pixels inside the image
    expected = F.avg_pool2d(xt, 3, 1, padding=1, count_include_pad=edge == EM.ZERO)
    expected.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(y, expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", ["zero_pad_size", "exclude_edges"])
def test_average_caffe_normalization(device, rng, how):
    # Caffe (and torch with ceil_mode) divide by the window clipped to the
    # padded image: CLAMP with zero_pad_size, or ZERO with EXCLUDE_EDGES.
    x = sample(rng, (2, 3, 6, 6))
    xt = torch.from_numpy(x).requires_grad_()
    dy = sample(rng, (2, 3, 4, 4))
    pooling, gradient = mpsx.CNNPoolingAverage(device, 3, 3, 2, 2), mpsx.CNNPoolingAverageGradient(device, 3, 3, 2, 2)
    method = PM.SIZE_FULL | PM.ADD_REMAINDER_TO_BOTTOM_RIGHT
    for k in (pooling, gradient):
        if how == "zero_pad_size":
            k.edge_mode, k.padding = EM.CLAMP, method
            k.zero_pad_size_x = k.zero_pad_size_y = 1
        else:
            k.padding = method | PM.EXCLUDE_EDGES
    source = mpsx.Image.from_numpy(device, x)

    def encode(cb):
        y, state = pooling.encode(cb, source, destination_state=True)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)

    y, dx = read(device, encode)
    expected = F.avg_pool2d(xt, 3, 2, padding=1, ceil_mode=True, count_include_pad=True)
    expected.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(y, expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_zero_pad_size_partial(device, rng):
    # zero padding narrower than what the windows read: some taps count, the rest do not
    x = sample(rng, (1, 4, 7, 8))
    pooling = mpsx.CNNPoolingAverage(device, 5, 4, 2, 3)
    pooling.edge_mode = EM.CLAMP
    pooling.zero_pad_size_x, pooling.zero_pad_size_y = 1, 2
    assert (pooling.zero_pad_size_x, pooling.zero_pad_size_y) == (1, 2)
    pooling.padding = PM.SIZE_FULL
    y = read(device, lambda cb: pooling.encode(cb, mpsx.Image.from_numpy(device, x)))
    out, first = expected_geometry(x.shape, (5, 4), (2, 3), (1, 1), "full")
    expected = mps_pool("average", torch.from_numpy(x.astype(np.float64)), (4, 5), (3, 2), (1, 1), first, out,
                        EM.CLAMP, count_pad=(2, 1))
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5, atol=1e-6)


def test_dilated_max_and_l2_match_torch(device, rng):
    x = sample(rng, (2, 3, 10, 9))
    xt = torch.from_numpy(x)
    dilated = mpsx.CNNDilatedPoolingMax(device, 2, 3, 3, 2, 1, 2)
    assert (dilated.dilation_rate_x, dilated.dilation_rate_y) == (3, 2)
    l2 = mpsx.CNNPoolingL2Norm(device, 2, 2)
    for k in (dilated, l2):
        k.padding = PM.SIZE_VALID_ONLY
    image = mpsx.Image.from_numpy(device, x)
    y1, y2 = read(device, lambda cb: (dilated.encode(cb, image), l2.encode(cb, image)))
    np.testing.assert_array_equal(y1, F.max_pool2d(xt, (3, 2), (2, 1), dilation=(2, 3)).numpy())
    np.testing.assert_allclose(y2, F.lp_pool2d(xt, 2, 2).numpy(), rtol=1e-5, atol=1e-6)


def test_properties_and_default_strides(device):
    p = mpsx.CNNPoolingAverage(device, 3, 2)
    assert (p.kernel_width, p.kernel_height, p.stride_in_pixels_x, p.stride_in_pixels_y) == (3, 2, 3, 2)
    assert (p.zero_pad_size_x, p.zero_pad_size_y) == (0, 0)
    g = mpsx.CNNDilatedPoolingMaxGradient(device, 3, 2, 2, 4, 1, 5)
    assert (g.kernel_width, g.kernel_height, g.stride_in_pixels_x, g.stride_in_pixels_y) == (3, 2, 1, 5)
    assert (g.dilation_rate_x, g.dilation_rate_y) == (2, 4)
    assert g.source_size is None
    g.source_size = (2, 3, 1)
    assert g.source_size == (2, 3, 1)
    g.source_size = None
    assert g.source_size is None
    assert isinstance(p, mpsx.CNNPooling) and isinstance(g, mpsx.CNNPoolingGradient)


@pytest.mark.parametrize("style", ["valid", "same"])
@pytest.mark.parametrize("kind", ["max", "average", "l2", "dilated"])
def test_float16(device, rng, kind, style):
    x = sample(rng, (2, 4, 9, 7), np.float16)
    kernel, stride, dilation = (3, 3), (2, 2), ((2, 2) if kind == "dilated" else (1, 1))
    pooling = make(KINDS, device, kind, kernel, stride, dilation, EM.ZERO, style)
    gradient = make(GRADIENTS, device, kind, kernel, stride, dilation, EM.ZERO, style)
    source = mpsx.Image.from_numpy(device, x)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    expected = reference(kind, xt, kernel, stride, dilation, EM.ZERO, style)
    dy = sample(rng, tuple(expected.shape), np.float16)

    def encode(cb):
        y, state = pooling.encode(cb, source, destination_state=True)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)

    y, dx = read(device, encode)
    assert y.dtype == np.float16 and dx.dtype == np.float16
    expected.backward(torch.from_numpy(dy.astype(np.float64)))
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y, expected.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("edge", [EM.ZERO, EM.CLAMP], ids=["zero", "clamp"])
@pytest.mark.parametrize("kind", ["max", "average", "l2"])
def test_clip_rect_offset_and_channel_offsets(device, rng, kind, edge):
    x = sample(rng, (1, 8, 9, 10))
    pooling = make(KINDS, device, kind, (3, 2), (2, 2), (1, 1), edge, "same")
    gradient = make(GRADIENTS, device, kind, (3, 2), (2, 2), (1, 1), edge, "same")
    fill = np.full((1, 8, 6, 7), 7.0, np.float32)
    destination = mpsx.Image.from_numpy(device, fill)
    pooling.offset = (3, 2)
    pooling.clip_rect = (1, 2, 0, 4, 3, 1)
    pooling.source_feature_channel_offset = 4
    pooling.destination_feature_channel_offset = 4
    source = mpsx.Image.from_numpy(device, x)
    dy_full = sample(rng, fill.shape)

    def encode(cb):
        y, state = pooling.encode(cb, source, destination, destination_state=True)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy_full), source, state)

    y, dx = read(device, encode)
    # clip_rect.origin (1, 2) has its window centre at offset (3, 2): top-left tap (3 - 1, 2 - 1).
    xt = torch.from_numpy(x[:, 4:].astype(np.float64)).requires_grad_()
    count_pad = (0, 0) if edge == EM.CLAMP else None
    expected_region = mps_pool(kind, xt, (2, 3), (2, 2), (1, 1), (1, 2), (3, 4), edge, count_pad)
    expected = fill.copy()
    expected[:, 4:, 2:5, 1:5] = expected_region.detach().numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    expected_region.backward(torch.from_numpy(dy_full[:, 4:, 2:5, 1:5].astype(np.float64)))
    expected_dx = np.zeros_like(x)
    expected_dx[:, 4:] = xt.grad.numpy()  # channels the forward did not read get no gradient
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("edge", [EM.ZERO, EM.CLAMP], ids=["zero", "clamp"])
@pytest.mark.parametrize("kind", ["max", "average", "l2", "dilated"])
def test_windows_off_the_image(device, rng, kind, edge):
    # offset puts the first windows wholly left of the source: they give 0 and take no gradient
    x = sample(rng, (2, 3, 5, 6))
    dilation = (2, 1) if kind == "dilated" else (1, 1)
    pooling = make(KINDS, device, kind, (2, 2), (2, 1), dilation, edge, "valid")
    gradient = make(GRADIENTS, device, kind, (2, 2), (2, 1), dilation, edge, "valid")
    extent_x = (2 - 1) * dilation[0] + 1
    pooling.offset = (-5 + extent_x // 2, 1, 0)
    destination = mpsx.Image(device, mpsx.ImageDescriptor(width=7, height=5, feature_channels=3, number_of_images=2))
    source = mpsx.Image.from_numpy(device, x)
    dy = sample(rng, (2, 3, 5, 7))

    def encode(cb):
        y, state = pooling.encode(cb, source, destination, destination_state=True)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)

    y, dx = read(device, encode)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    count_pad = (0, 0) if edge == EM.CLAMP else None
    expected = mps_pool(kind, xt, (2, 2), (1, 2), dilation[::-1], (0, -5), (5, 7), edge, count_pad)
    assert np.all(y[..., :2] == 0)
    np.testing.assert_allclose(y, expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    expected.backward(torch.from_numpy(dy.astype(np.float64)))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gradient_source_size(device, rng):
    x = sample(rng, (3, 2, 8, 8))
    pooling, gradient = mpsx.CNNPoolingAverage(device, 2, 2), mpsx.CNNPoolingAverageGradient(device, 2, 2)
    dy = sample(rng, (3, 2, 4, 4))
    source = mpsx.Image.from_numpy(device, x)
    gradient.source_size = (3, 2, 2)  # columns 0-2, rows 0-1 of the first two images contribute

    def encode(cb):
        _, state = pooling.encode(cb, source, destination_state=True)
        return gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)

    dx = read(device, encode)
    kept = np.zeros_like(dy)
    kept[:2, :, :2, :3] = dy[:2, :, :2, :3]
    expected = np.repeat(np.repeat(kept, 2, axis=2), 2, axis=3) / 4
    np.testing.assert_allclose(dx, expected, rtol=1e-6)


def test_encode_batch(device, rng):
    x = sample(rng, (4, 3, 6, 7))
    pooling, gradient = mpsx.CNNPoolingMax(device, 3, 3, 2, 2), mpsx.CNNPoolingMaxGradient(device, 3, 3, 2, 2)
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    expected = reference("max", xt, (3, 3), (2, 2), (1, 1), EM.ZERO, "same")
    dy = sample(rng, tuple(expected.shape))
    y1, y2, dx = batch_and_items_forward_and_gradient(device, x, dy, pooling, gradient)
    expected.backward(torch.from_numpy(dy.astype(np.float64)))
    np.testing.assert_allclose(y1, expected.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(y2, expected.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6)


def test_repeated_encodes_reuse_kernels(device, rng):
    # one kernel over several shapes and back: each configuration is its own primitive
    pooling = mpsx.CNNPoolingAverage(device, 2, 2)
    for shape in [(1, 3, 8, 8), (2, 3, 6, 4), (1, 3, 8, 8)]:
        x = sample(rng, shape)
        y = read(device, lambda cb: pooling.encode(cb, mpsx.Image.from_numpy(device, x)))
        expected = F.avg_pool2d(torch.from_numpy(x), 2).numpy()
        np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind,edge", [("max", EM.ZERO), ("max", EM.CLAMP), ("average", EM.CLAMP), ("l2", EM.ZERO),
                                       ("dilated", EM.ZERO)])
def test_gradient_finite_differences(device, rng, kind, edge):
    shape = (1, 2, 5, 5)
    # distinct values 0.1 apart and none near 0, so no step moves a maximum
    x = (rng.permutation(50).reshape(shape) - 24.5) * 0.1
    kernel, stride, dilation = (3, 2), (2, 1), ((2, 2) if kind == "dilated" else (1, 1))
    pooling = make(KINDS, device, kind, kernel, stride, dilation, edge, "same")
    gradient = make(GRADIENTS, device, kind, kernel, stride, dilation, edge, "same")
    if kind == "average":
        pooling.zero_pad_size_x = gradient.zero_pad_size_x = 1
    source = mpsx.Image.from_numpy(device, x.astype(np.float32))
    d = pooling.destination_image_descriptor(source)
    dy = rng.standard_normal((1, 2, d.height, d.width))
    numeric = forward_finite_differences(device, pooling, x, dy, 1e-3)
    _, dx = kernel_forward_and_gradient(device, x.astype(np.float32), dy.astype(np.float32), pooling, gradient)
    np.testing.assert_allclose(dx, numeric, rtol=1e-2, atol=1e-3)


def test_errors(device, rng):
    with pytest.raises(ValueError, match="MPSCNNPoolingMax: kernel_width must be positive, given 0"):
        mpsx.CNNPoolingMax(device, 0, 2)
    with pytest.raises(ValueError, match="MPSCNNPoolingAverage: kernel_height must be positive, given -1"):
        mpsx.CNNPoolingAverage(device, 2, -1)
    with pytest.raises(ValueError, match="MPSCNNPoolingL2NormGradient: stride_in_pixels_y must be positive, given 0"):
        mpsx.CNNPoolingL2NormGradient(device, 2, 2, 1, 0)
    with pytest.raises(ValueError, match="MPSCNNDilatedPoolingMax: dilation_rate_x must be positive, given 0"):
        mpsx.CNNDilatedPoolingMax(device, 2, 2, 0, 1, 1, 1)
    with pytest.raises(TypeError, match="CNNPooling is abstract: make a CNNPoolingMax"):
        mpsx.CNNPooling(device, 2, 2)
    average = mpsx.CNNPoolingAverage(device, 2, 2)
    with pytest.raises(ValueError, match="zero_pad_size_x must be between 0 and 1073741824, given -1"):
        average.zero_pad_size_x = -1
    with pytest.raises(ValueError, match="source_size.width must be at least 1, given 0"):
        mpsx.CNNPoolingMaxGradient(device, 2, 2).source_size = (0, 1, 1)

    x = sample(rng, (1, 3, 4, 4))
    pooling, gradient = mpsx.CNNPoolingMax(device, 3, 3), mpsx.CNNPoolingMaxGradient(device, 3, 3)
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    pooling.padding = PM.SIZE_VALID_ONLY
    small = mpsx.Image.from_numpy(device, sample(rng, (1, 3, 2, 5)))
    with pytest.raises(mpsx.ShapeError, match="a 5x2 source image is smaller than the 3x3 window"):
        pooling.encode(cb, small)
    y, state = pooling.encode(cb, image, destination_state=True)
    assert (y.width, y.height) == (1, 1)
    other = mpsx.Image.from_numpy(device, x)
    with pytest.raises(mpsx.StateError, match="another batch"):
        gradient.encode(cb, y, other, state)
    with pytest.raises(mpsx.StateError, match="was filled for source images of 1x3x4x4 .*, given 2x3x4x4"):
        pooling.encode(cb, mpsx.Image.from_numpy(device, np.concatenate([x, x])), destination_state=state)
    with pytest.raises(mpsx.ShapeError, match=r"expected a source gradient shaped as the forward result, "
                                              r"1x3x1x1 \(NxCxHxW\), given 1x3x2x2"):
        gradient.encode(cb, mpsx.Image.from_numpy(device, sample(rng, (1, 3, 2, 2))), image, state)
    assert cb.command_count == 1  # nothing of the failed calls was enqueued
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"


def test_sizes_are_ints(device):
    for make, name, arguments in [
            (mpsx.CNNPoolingMax, "kernel_width", (2.5, 2)), (mpsx.CNNPoolingAverage, "kernel_height", (2, 2.0)),
            (mpsx.CNNPoolingL2NormGradient, "stride_in_pixels_x", (2, 2, 1.5, 1)),
            (mpsx.CNNDilatedPoolingMax, "dilation_rate_y", (2, 2, 1, 1.5, 1, 1))]:
        with pytest.raises(TypeError, match=f"{name} must be an int, given float"):
            make(device, *arguments)
    average = mpsx.CNNPoolingAverageGradient(device, 2, 2)
    with pytest.raises(TypeError, match="zero_pad_size_y must be an int, given float 1.5"):
        average.zero_pad_size_y = 1.5
    with pytest.raises(TypeError, match="source_size depth must be an int, given float 1.5"):
        average.source_size = (1, 1, 1.5)
    assert (average.zero_pad_size_y, average.source_size) == (0, None)  # left as they were


def test_sizes_are_checked(device, rng):
    with pytest.raises(ValueError, match="MPSCNNPoolingMax: kernel_width must be at most 1073741824, "
                                         "given 4611686018427387904"):
        mpsx.CNNPoolingMax(device, 2**62, 2**62)
    with pytest.raises(ValueError, match="MPSCNNDilatedPoolingMax: dilation_rate_x must be at most 1073741824, "
                                         "given 4611686018427387904"):
        mpsx.CNNDilatedPoolingMax(device, 3, 3, 2**62, 2**62, 1, 1)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNDilatedPoolingMaxGradient: the window extent \(kernel - 1\) "
                                              r"\* dilation_rate \+ 1 must be at most 1073741824, given 2147483649x3"):
        mpsx.CNNDilatedPoolingMaxGradient(device, 3, 3, 2**30, 1, 1, 1)
    with pytest.raises(ValueError, match="MPSCNNPoolingL2Norm: stride_in_pixels_y must be at most 1073741824, "
                                         "given 2147483648"):
        mpsx.CNNPoolingL2Norm(device, 2, 2, 1, 2**31)
    with pytest.raises(ValueError, match="zero_pad_size_y must be between 0 and 1073741824, given 4611686018427387904"):
        mpsx.CNNPoolingAverage(device, 2, 2).zero_pad_size_y = 2**62

    image = mpsx.Image.from_numpy(device, sample(rng, (1, 4, 4, 4)))
    destination = mpsx.Image(device, mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 2, 2, 4))
    cb = device.command_queue.command_buffer()
    for name, value, message in [
            ("offset", (2**62, 0, 0), "offset.x must be between -2147483648 and 2147483648, given 4611686018427387904"),
            ("offset", (0, 0, -2**63), "offset.z must be between -2147483648 and 2147483648, given -9223372036854775808"),
            ("clip_rect", (0, -2**63, 0, 1, 1, 1), "clip_rect.y must be between -2147483648 and 2147483648, given "
                                                   "-9223372036854775808"),
            ("clip_rect", (0, 0, 0, 1, -1, 1), "clip_rect sizes must be non-negative; given width 1, height -1"),
            ("source_feature_channel_offset", -2**63, "source_feature_channel_offset must be a non-negative multiple "
                                                      "of 4; given -9223372036854775808"),
            ("destination_feature_channel_offset", 2**62, "destination_feature_channel_offset must be at most "
                                                          "1073741824, given 4611686018427387904")]:
        pooling = mpsx.CNNPoolingMax(device, 2, 2)
        setattr(pooling, name, value)
        for given in (destination, None):
            with pytest.raises(ValueError, match=f"MPSCNNPoolingMax: {message}"):
                pooling.encode(cb, image, given)
        with pytest.raises(ValueError, match=f"MPSCNNPoolingMax: {message}"):
            pooling.destination_image_descriptor(image)
    assert cb.command_count == 0  # refused before anything was enqueued
    # Any clip_rect size from 0 up clips to the destination.
    pooling = mpsx.CNNPoolingMax(device, 2, 2)
    pooling.clip_rect = (1, 0, 0, 2**63 - 1, 2**63 - 1, 2**63 - 1)
    pooling.encode(cb, image, destination)
    assert cb.command_count == 1
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


def test_windows_at_the_size_limit(device, rng):
    # 2^30 x 2^30 windows 2^30 apart over a 3x3 image, clamped: one window,
    # all of the image in it, 2^60 taps off it.
    x = sample(rng, (1, 4, 3, 3))
    pooling = make(KINDS, device, "max", (2**30, 2**30), (2**30, 2**30), (1, 1), EM.CLAMP, "same")
    if device.backend == "cuda":  # its max pooling gradients keep a window's chosen tap in an int32_t
        with pytest.raises(mpsx.ShapeError, match="MPSCNNPoolingMaxGradient: a 1073741824x1073741824 window has "
                                                  f"1152921504606846976 taps; max pooling gradients on device "
                                                  f"{device.name} take at most 2147483647"):
            mpsx.CNNPoolingMaxGradient(device, 2**30, 2**30, 2**30, 2**30)
        gradient = None
    else:
        gradient = make(GRADIENTS, device, "max", (2**30, 2**30), (2**30, 2**30), (1, 1), EM.CLAMP, "same")
    image = mpsx.Image.from_numpy(device, x)

    def encode(cb):
        y, state = pooling.encode(cb, image, destination_state=True)
        if gradient is None:
            return y
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, np.ones((1, 4, 1, 1), np.float32)), image, state)

    result = read(device, encode)
    y = result if gradient is None else result[0]
    np.testing.assert_array_equal(y, x.max(axis=(2, 3), keepdims=True))
    if gradient is not None:
        np.testing.assert_array_equal(result[1], (x == y).astype(np.float32))
    # Average pooling of such windows once killed the process (SIGFPE in oneDNN).
    printed = run_isolated(device, """
        import numpy as np
        x = np.arange(36, dtype=np.float32).reshape(1, 4, 3, 3)
        kernels = [getattr(mpsx, name)(device, 2**30, 2**30, 2**30, 2**30)
                   for name in ("CNNPoolingAverage", "CNNPoolingAverageGradient")]
        for kernel in kernels:
            kernel.edge_mode = mpsx.ImageEdgeMode.CLAMP
        image = mpsx.Image.from_numpy(device, x)
        with device.command_queue.command_buffer() as cb:
            y, state = kernels[0].encode(cb, image, destination_state=True)
            dx = kernels[1].encode(cb, mpsx.Image.from_numpy(device, np.full((1, 4, 1, 1), 9, np.float32)), image,
                                   state)
            y.synchronize(cb)
            dx.synchronize(cb)
        print(y.to_numpy().ravel().tolist(), float(dx.to_numpy().min()), float(dx.to_numpy().max()))
    """)
    assert printed == "[4.0, 13.0, 22.0, 31.0] 1.0 1.0\n"

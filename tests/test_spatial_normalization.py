"""CNNSpatialNormalization and its gradient against a float64 numpy reference
of the header's forward formula, torch autograd through the same formula
(pad + avg_pool2d) for the gradient, and finite differences; edge_mode ZERO
(zero padding) and CLAMP (replicate padding: the windows reach at most k//2
pixels off the image)."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import (assert_kernel_classes, assert_offset_z_and_batches, assert_parameter_sets_used, encode_in_place,
                     finite_difference_gradient, forward_finite_differences, kernel_forward_and_gradient, read,
                     tolerance)

PARAMETERS = [(3, 1.0, 0.75, 1.0), (5, 1.0, 5.0, 1.0), (1, 0.5, 1.0, 2.0), (2, 2.0, 0.5, 1.5), (4, 3.0, 0.75, 0.5)]


def reference(x, k, alpha, beta, delta, clamp=False):
    """y = x / (delta + alpha/(k*k) * N2)^beta, N2 over rows and columns
    [i - k//2, i + (k-1)//2], pixels off the image 0, or with clamp the
    nearest pixel of the image; float64 numpy."""
    x = np.asarray(x, np.float64)
    n, c, h, w = x.shape
    pads = ((0, 0), (0, 0), (k // 2, (k - 1) // 2), (k // 2, (k - 1) // 2))
    padded = np.pad(x ** 2, pads, mode="edge" if clamp else "constant")
    sums = np.zeros_like(x)
    for dr in range(k):
        for dc in range(k):
            sums += padded[:, :, dr:dr + h, dc:dc + w]
    return x / (delta + alpha / (k * k) * sums) ** beta


def torch_forward(xt, k, alpha, beta, delta, clamp=False):
    squares = torch.nn.functional.pad(xt * xt, (k // 2, (k - 1) // 2, k // 2, (k - 1) // 2),
                                      mode="replicate" if clamp else "constant")
    mean = torch.nn.functional.avg_pool2d(squares, k, stride=1)
    return xt / (delta + alpha * mean) ** beta


def reference_gradient(x, dy, k, alpha, beta, delta, rows=None, columns=None, clamp=False):
    """d sum(y[rows, columns] * dy) / dx by torch autograd (float64), y over
    the whole image; dx shaped as x."""
    xt = torch.from_numpy(np.asarray(x, np.float64)).requires_grad_()
    y = torch_forward(xt, k, alpha, beta, delta, clamp)
    if rows is not None:
        y = y[:, :, rows, columns]
    y.backward(torch.from_numpy(np.asarray(dy, np.float64)))
    return xt.grad.numpy()


def kernels(device, k, alpha, beta, delta, clamp=False):
    forward = mpsx.CNNSpatialNormalization(device, k, k)
    gradient = mpsx.CNNSpatialNormalizationGradient(device, k, k)
    for kernel in (forward, gradient):
        kernel.alpha, kernel.beta, kernel.delta = alpha, beta, delta
        kernel.edge_mode = mpsx.ImageEdgeMode.CLAMP if clamp else mpsx.ImageEdgeMode.ZERO
    return forward, gradient


@pytest.mark.parametrize("clamp", [False, True])
def test_torch_formula_is_the_numpy_reference(rng, clamp):
    for k, alpha, beta, delta in PARAMETERS:
        x = rng.standard_normal((2, 3, 5, 4))
        np.testing.assert_allclose(torch_forward(torch.from_numpy(x), k, alpha, beta, delta, clamp).numpy(),
                                   reference(x, k, alpha, beta, delta, clamp), rtol=1e-12)


def test_clamp_reference_by_hand():
    # Replicate padding is the clamped read: a 1x1 image's windows read its
    # one pixel k*k times; a 1x2 row's 2x2 windows read x0 at the first
    # column (taps at columns -1 and 0) and x0, x1 at the second, twice each.
    x = np.array([[[[2.0]]]])
    np.testing.assert_allclose(reference(x, 3, 1.0, 0.5, 1.0, clamp=True), 2.0 / (1.0 + 4.0) ** 0.5)
    np.testing.assert_allclose(reference(x, 3, 1.0, 0.5, 1.0), 2.0 / (1.0 + 4.0 / 9) ** 0.5)
    x = np.array([[[[1.0, 3.0]]]])
    t0, t1 = 1.0 + (4 * 1.0) / 4, 1.0 + (2 * 1.0 + 2 * 9.0) / 4
    np.testing.assert_allclose(reference(x, 2, 1.0, 1.0, 1.0, clamp=True), [[[[1.0 / t0, 3.0 / t1]]]])


@pytest.mark.parametrize("clamp", [False, True])
def test_reference_gradient_finite_differences(rng, clamp):
    # Central differences of the float64 numpy forward check the autograd
    # reference (and so the exact derivative the header's formula is not).
    for k, alpha, beta, delta in PARAMETERS:
        x = rng.standard_normal((1, 2, 4, 3))
        dy = rng.standard_normal(x.shape)
        numeric = finite_difference_gradient(
            lambda v: np.sum(reference(v, k, alpha, beta, delta, clamp=clamp) * dy), x, 1e-6)
        np.testing.assert_allclose(reference_gradient(x, dy, k, alpha, beta, delta, clamp=clamp), numeric,
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("clamp", [False, True])
@pytest.mark.parametrize("parameters", PARAMETERS)
@pytest.mark.parametrize("shape", [(1, 3, 7, 5), (3, 2, 4, 6), (2, 5, 1, 3), (1, 1, 9, 2)])
def test_forward_and_gradient(device, rng, parameters, shape, clamp):
    k, alpha, beta, delta = parameters
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    y, dx = kernel_forward_and_gradient(device, x, dy, *kernels(device, *parameters, clamp=clamp))
    assert y.shape == shape and dx.shape == shape and y.dtype == np.float32
    np.testing.assert_allclose(y, reference(x, *parameters, clamp=clamp), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, *parameters, clamp=clamp), rtol=1e-4, atol=1e-5)
    if clamp and k > 1:  # CLAMP changes the results near the edges
        assert not np.allclose(reference(x, *parameters), reference(x, *parameters, clamp=True), rtol=1e-3)


def test_defaults(device, rng):
    forward = mpsx.CNNSpatialNormalization(device, 3, 3)
    gradient = mpsx.CNNSpatialNormalizationGradient(device, 3, 3)
    for kernel in (forward, gradient):
        assert (kernel.kernel_width, kernel.kernel_height, kernel.alpha, kernel.beta, kernel.delta) == \
            (3, 3, 1.0, 5.0, 1.0)
        assert kernel.edge_mode == mpsx.ImageEdgeMode.ZERO
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient)
    np.testing.assert_allclose(y, reference(x, 3, 1.0, 5.0, 1.0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, 3, 1.0, 5.0, 1.0), rtol=1e-4, atol=1e-5)


def test_parameters_set_between_encodes_are_used(device, rng):
    # One kernel of one shape, its parameters changed between encodes (cuda: divisive normalization's range).
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    forward, gradient = kernels(device, 3, 1.0, 0.75, 1.0)
    assert_parameter_sets_used(device, x, dy, forward, gradient, 3, reference, reference_gradient)


def test_properties(device):
    for kernel in (mpsx.CNNSpatialNormalization(device, 4, 4), mpsx.CNNSpatialNormalizationGradient(device, 4, 4)):
        kernel.alpha, kernel.beta, kernel.delta = 0.0, -0.5, 0.25
        assert (kernel.alpha, kernel.beta, kernel.delta) == (0.0, -0.5, 0.25)
        for name in ("kernel_width", "kernel_height"):
            with pytest.raises(AttributeError):
                setattr(kernel, name, 3)


@pytest.mark.parametrize("k, clamp", [(3, False), (3, True), (2, True)])
def test_gradient_finite_differences(device, rng, k, clamp):
    shape = (1, 2, 3, 4)
    alpha, beta, delta = 1.5, 0.75, 1.0
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    forward, gradient = kernels(device, k, alpha, beta, delta, clamp)
    numeric = forward_finite_differences(device, forward, x, dy)
    _, dx = kernel_forward_and_gradient(device, x.astype(np.float32), dy.astype(np.float32), forward, gradient)
    np.testing.assert_allclose(dx, numeric, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("k, clamp", [(3, False), (3, True), (4, True)])
def test_float16(device, rng, k, clamp):
    alpha, beta, delta = 1.0, 0.75, 1.0
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float16)
    dy = rng.standard_normal(x.shape).astype(np.float16)
    y, dx = kernel_forward_and_gradient(device, x, dy, *kernels(device, k, alpha, beta, delta, clamp))
    assert y.dtype == np.float16 and dx.dtype == np.float16
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y, reference(x, k, alpha, beta, delta, clamp), rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, k, alpha, beta, delta, clamp=clamp), rtol=rtol,
                               atol=atol)


def encode_region(device, rng, data_type, forward, gradient, offset, clip_rect):
    """x (2x8x6x7 of data_type, from rng) through forward, its offset and clip_rect as given and channel offsets
    4, into a destination image of 7s (2x12x5x5), and the gradient for dy drawn next; returns x, dy, y and dx."""
    x = rng.standard_normal((2, 8, 6, 7)).astype(data_type)
    forward.offset, forward.clip_rect = offset, clip_rect
    forward.source_feature_channel_offset = forward.destination_feature_channel_offset = 4
    destination = mpsx.Image.from_numpy(device, np.full((2, 12, 5, 5), 7.0, data_type))
    dy = rng.standard_normal((2, 12, 5, 5)).astype(data_type)
    return (x, dy) + kernel_forward_and_gradient(device, x, dy, forward, gradient, destination=destination)


@pytest.mark.parametrize("data_type", [np.float32, np.float16])
def test_clip_rect_offset_and_channel_offsets(device, rng, data_type):
    # The windows of the written region read source pixels around it (off the
    # region, inside the image), so those get gradient too.
    k, alpha, beta, delta = 3, 2.0, 0.75, 0.5
    forward, gradient = kernels(device, k, alpha, beta, delta)
    x, dy, y, dx = encode_region(device, rng, data_type, forward, gradient, (1, 2, 0), (1, 0, 0, 3, 2, 2))
    rtol, atol = tolerance(data_type)
    # clipRect.origin (1, 0) reads source (offset.x, offset.y) = (1, 2): rows 2:4, columns 1:4.
    expected = np.full((2, 12, 5, 5), 7.0)
    expected[:, 4:8, 0:2, 1:4] = reference(x[:, 4:], k, alpha, beta, delta)[:, :, 2:4, 1:4]
    np.testing.assert_allclose(y, expected, rtol=rtol, atol=atol)
    expected_dx = np.zeros(x.shape)
    expected_dx[:, 4:] = reference_gradient(x[:, 4:], dy[:, 4:8, 0:2, 1:4], k, alpha, beta, delta, slice(2, 4),
                                            slice(1, 4))
    assert dx.shape == x.shape
    assert np.any(expected_dx[:, 2:, 1, 1:4] != 0)  # a row off the region that the windows read
    np.testing.assert_allclose(dx, expected_dx, rtol=rtol, atol=atol)


@pytest.mark.parametrize("data_type", [np.float32, np.float16])
@pytest.mark.parametrize("k", [3, 4])
def test_clamp_clip_rect_at_the_edges(device, rng, data_type, k):
    # A region in the bottom-left corner of the source: its windows reach off
    # the image (clamped) and, inside it, past the region (read as they are).
    alpha, beta, delta = 2.0, 0.75, 0.5
    forward, gradient = kernels(device, k, alpha, beta, delta, clamp=True)
    x, dy, y, dx = encode_region(device, rng, data_type, forward, gradient, (0, 4, 0), (1, 2, 0, 3, 2, 2))
    rtol, atol = tolerance(data_type)
    # clipRect.origin (1, 2) reads source (0, 4): rows 4:6, columns 0:3.
    expected = np.full((2, 12, 5, 5), 7.0)
    expected[:, 4:8, 2:4, 1:4] = reference(x[:, 4:], k, alpha, beta, delta, clamp=True)[:, :, 4:6, 0:3]
    np.testing.assert_allclose(y, expected, rtol=rtol, atol=atol)
    expected_dx = np.zeros(x.shape)
    expected_dx[:, 4:] = reference_gradient(x[:, 4:], dy[:, 4:8, 2:4, 1:4], k, alpha, beta, delta, slice(4, 6),
                                            slice(0, 3), clamp=True)
    np.testing.assert_allclose(dx, expected_dx, rtol=rtol, atol=atol)
    zero_padded = reference_gradient(x[:, 4:], dy[:, 4:8, 2:4, 1:4], k, alpha, beta, delta, slice(4, 6), slice(0, 3))
    assert not np.allclose(expected_dx[:, 4:], zero_padded, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("clamp", [False, True])
def test_offset_z_and_batches(device, rng, clamp):
    k, alpha, beta, delta = 3, 1.0, 0.75, 2.0
    x = rng.standard_normal((4, 3, 3, 4)).astype(np.float32)
    dy = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    assert_offset_z_and_batches(device, x, dy, lambda: kernels(device, k, alpha, beta, delta, clamp),
                                lambda x: reference(x, k, alpha, beta, delta, clamp),
                                lambda x, dy: reference_gradient(x, dy, k, alpha, beta, delta, clamp=clamp))


@pytest.mark.parametrize("clamp", [False, True])
def test_in_place(device, rng, clamp):
    if device.backend == "metal":
        pytest.skip("MPS kernels may not write the images they read")
    k, alpha, beta, delta = 3, 1.0, 0.75, 1.0
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    forward, _ = kernels(device, k, alpha, beta, delta, clamp)
    y = encode_in_place(device, forward, x)
    np.testing.assert_allclose(y, reference(x, k, alpha, beta, delta, clamp), rtol=1e-4, atol=1e-5)


def test_gradient_kernels_keep_the_parameters(device, rng):
    forward = mpsx.CNNSpatialNormalization(device, 2, 2)
    forward.alpha, forward.beta, forward.delta = 2.5, 0.5, 3.0
    made = forward.gradient_kernels()
    assert [type(g) for g in made] == [mpsx.CNNSpatialNormalizationGradient]
    g = made[0]
    assert (g.kernel_width, g.kernel_height, g.alpha, g.beta, g.delta) == (2, 2, 2.5, 0.5, 3.0)
    assert g.edge_mode == mpsx.ImageEdgeMode.ZERO
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    _, dx = kernel_forward_and_gradient(device, x, dy, forward, g)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, 2, 2.5, 0.5, 3.0), rtol=1e-4, atol=1e-5)
    # The forward edge mode reaches the gradient through the gradient
    # kernel's own edge_mode, which gradient_kernels() copies.
    forward.edge_mode = mpsx.ImageEdgeMode.CLAMP
    (g,) = forward.gradient_kernels()
    assert g.edge_mode == mpsx.ImageEdgeMode.CLAMP
    y, dx = kernel_forward_and_gradient(device, x, dy, forward, g)
    np.testing.assert_allclose(y, reference(x, 2, 2.5, 0.5, 3.0, clamp=True), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, 2, 2.5, 0.5, 3.0, clamp=True), rtol=1e-4, atol=1e-5)


def test_errors(device, rng):
    for cls in (mpsx.CNNSpatialNormalization, mpsx.CNNSpatialNormalizationGradient):
        name = "MPS" + cls.__name__
        with pytest.raises(ValueError, match=f"{name}: kernel_width must equal kernel_height \\(MPS requires a "
                                             f"square window\\), given 3 and 5"):
            cls(device, 3, 5)
        with pytest.raises(ValueError, match=f"{name}: kernel_width must be positive, given 0"):
            cls(device, 0, 0)
        with pytest.raises(ValueError, match=f"{name}: kernel_height must be positive, given -1"):
            cls(device, 3, -1)
        with pytest.raises(TypeError):
            cls(device, 3.5, 3)
        kernel = cls(device, 3, 3)
        with pytest.raises(ValueError, match=f"{name}: alpha must be finite and non-negative, given -1"):
            kernel.alpha = -1
        with pytest.raises(ValueError, match=f"{name}: beta must be finite, given nan"):
            kernel.beta = float("nan")
        with pytest.raises(ValueError, match=f"{name}: delta must be finite, given -inf"):
            kernel.delta = float("-inf")
        with pytest.raises(TypeError, match="delta must be a float, given NoneType None"):
            kernel.delta = None
        assert (kernel.alpha, kernel.beta, kernel.delta) == (1.0, 5.0, 1.0)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    forward = mpsx.CNNSpatialNormalization(device, 3, 3)
    gradient = mpsx.CNNSpatialNormalizationGradient(device, 3, 3)
    cb = device.command_queue.command_buffer()
    y, state = forward.encode(cb, image, destination_state=True)
    _, lrn_state = mpsx.CNNCrossChannelNormalization(device, 3).encode(cb, image, destination_state=True)
    recorded = cb.command_count
    dy = mpsx.Image.from_numpy(device, np.ones(x.shape, np.float32))
    with pytest.raises(TypeError, match="MPSCNNSpatialNormalizationGradient: expected the state of an "
                                        "MPSCNNSpatialNormalization forward encode, given one of an "
                                        "MPSCNNCrossChannelNormalization"):
        gradient.encode(cb, dy, image, lrn_state)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNSpatialNormalizationGradient: expected a source gradient "
                                              r"shaped as the forward result, 1x3x4x4 \(NxCxHxW\), given 1x3x3x4"):
        gradient.encode(cb, mpsx.Image.from_numpy(device, x[:, :, :3]), image, state)
    with pytest.raises(ValueError, match="MPSCNNSpatialNormalizationGradient: secondary_edge_mode must keep its "
                                         "default ZERO, given CLAMP; a gradient kernel takes the forward geometry"):
        refused = mpsx.CNNSpatialNormalizationGradient(device, 3, 3)
        refused.secondary_edge_mode = mpsx.ImageEdgeMode.CLAMP
        refused.encode(cb, dy, image, state)
    with pytest.raises(ValueError):
        forward.edge_mode = 2
    shifted = mpsx.CNNSpatialNormalization(device, 3, 3)
    shifted.offset = (0, 1, 0)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNSpatialNormalization: offset \(0, 1\) with a 4x4 region reads "
                                              r"outside the 4x4 source image"):
        shifted.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=3)))
    assert cb.command_count == recorded  # nothing of the refused calls was enqueued
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


def test_classes(device):
    assert_kernel_classes(device, mpsx.CNNSpatialNormalization, mpsx.CNNSpatialNormalizationGradient, "kernel_width",
                          3, 3)


# Whole source images, odd k, edge mode ZERO: on cpu oneDNN's
# lrn_within_channel runs those of these where it has a jit kernel (k <= 5,
# beta 0.75, channels a multiple of 8 or 16; its backward pass reads a
# workspace), the loops the rest.
@pytest.mark.parametrize("data_type", [np.float32, np.float16])
@pytest.mark.parametrize("k, shape", [(1, (2, 3, 5, 4)), (5, (3, 4, 9, 7)), (7, (2, 1, 3, 2)), (3, (1, 17, 1, 6)),
                                      (3, (2, 8, 6, 7)), (5, (2, 16, 3, 2)), (5, (2, 64, 9, 10)),
                                      (1, (2, 48, 5, 3)), (7, (1, 24, 11, 6))])
def test_whole_images_odd_windows(device, rng, data_type, k, shape):
    alpha, beta, delta = 2.5, 0.75, 0.6  # oneDNN's jit kernels take beta 0.75 only
    x = rng.standard_normal(shape).astype(data_type)
    dy = rng.standard_normal(shape).astype(data_type)
    y, dx = kernel_forward_and_gradient(device, x, dy, *kernels(device, k, alpha, beta, delta))
    assert y.dtype == data_type and dx.dtype == data_type
    rtol, atol = tolerance(data_type)
    np.testing.assert_allclose(y, reference(x, k, alpha, beta, delta), rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, k, alpha, beta, delta), rtol=rtol, atol=atol)


@pytest.mark.parametrize("channels", [3, 16, 32])
def test_forward_in_place_whole_images(device, rng, channels):
    if device.backend == "metal":
        pytest.skip("MPS kernels may not write the images they read")
    k, alpha, beta, delta = 5, 1.5, 0.75, 1.0
    x = rng.standard_normal((2, channels, 6, 5)).astype(np.float32)
    forward, _ = kernels(device, k, alpha, beta, delta)
    y = encode_in_place(device, forward, x)
    np.testing.assert_allclose(y, reference(x, k, alpha, beta, delta), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("channels", [3, 16, 32])
@pytest.mark.parametrize("into", ["source_gradient", "source"])
def test_gradient_in_place(device, rng, into, channels):
    # The destination gradient written over the source gradient or over the
    # forward source (both shaped as the forward source here).
    if device.backend == "metal":
        pytest.skip("MPS kernels may not write the images they read")
    k, alpha, beta, delta = 5, 1.5, 0.75, 1.0
    x = rng.standard_normal((2, channels, 6, 5)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    forward, gradient = kernels(device, k, alpha, beta, delta)
    source = mpsx.Image.from_numpy(device, x)
    dy_image = mpsx.Image.from_numpy(device, dy)

    def encode(cb):
        y, state = forward.encode(cb, source, destination_state=True)
        return y, gradient.encode(cb, dy_image, source, state, dy_image if into == "source_gradient" else source)

    y, dx = read(device, encode)
    np.testing.assert_allclose(y, reference(x, k, alpha, beta, delta), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, k, alpha, beta, delta), rtol=1e-4, atol=1e-5)


def test_channels_of_the_source_image_as_destination(device, rng):
    # Channels 4:8 of an image normalized into its channels 0:4: the regions
    # interleave in memory without sharing an element.
    if device.backend == "metal":
        pytest.skip("MPS kernels may not write the images they read")
    k, alpha, beta, delta = 3, 2.0, 0.75, 0.5
    x = rng.standard_normal((2, 8, 5, 4)).astype(np.float32)
    forward, _ = kernels(device, k, alpha, beta, delta)
    forward.source_feature_channel_offset = 4
    y = encode_in_place(device, forward, x)
    expected = x.astype(np.float64)
    expected[:, 0:4] = reference(x[:, 4:8], k, alpha, beta, delta)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_many_parameter_sets(device, rng):
    # More parameter sets than a kernel keeps primitives for (cpu: 4), each
    # set twice, images of several types and channel counts through the same
    # kernels (cpu: oneDNN's jit kernels for 16 channels and beta 0.75, with
    # three sets of alpha and delta; the loops the rest).
    forward, gradient = kernels(device, 3, 1.0, 0.75, 1.0)
    sets = [(0.5 + i, 0.75 if i % 2 else 0.25 + 0.1 * i, 1.0 + 0.5 * i) for i in range(6)]
    for data_type, channels in ((np.float32, 3), (np.float16, 3), (np.float32, 16)):
        x = rng.standard_normal((2, channels, 5, 4)).astype(data_type)
        dy = rng.standard_normal(x.shape).astype(data_type)
        rtol, atol = tolerance(data_type)
        for alpha, beta, delta in sets + sets[::-1]:
            for kernel in (forward, gradient):
                kernel.alpha, kernel.beta, kernel.delta = alpha, beta, delta
            y, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient)
            np.testing.assert_allclose(y, reference(x, 3, alpha, beta, delta), rtol=rtol, atol=atol)
            np.testing.assert_allclose(dx, reference_gradient(x, dy, 3, alpha, beta, delta), rtol=rtol,
                                       atol=max(atol, 1e-4))

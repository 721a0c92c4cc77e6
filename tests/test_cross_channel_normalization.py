"""CNNCrossChannelNormalization and its gradient against a float64 numpy
reference of the header's formula, torch.nn.functional.local_response_norm
(same window and alpha/N scaling) with autograd, and finite differences."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import (assert_kernel_classes, assert_offset_z_and_batches, assert_parameter_sets_used, encode_in_place,
                     finite_difference_gradient, forward_finite_differences, kernel_forward_and_gradient, read,
                     tolerance)

PARAMETERS = [(5, 1.0, 5.0, 1.0), (3, 0.5, 0.75, 2.0), (4, 2.0, 0.5, 1.5), (1, 1.5, 1.0, 0.5), (2, 0.25, 2.0, 1.0),
              (9, 3.0, 0.75, 1.0)]


def window(k, n, channels):
    """Q(k) = [max(0, k - n//2), min(D-1, k + (n-1)//2)]."""
    return range(max(0, k - n // 2), min(channels - 1, k + (n - 1) // 2) + 1)


def denominators(x, n, alpha, delta):
    x = np.asarray(x, np.float64)
    sums = np.zeros_like(x)
    for k in range(x.shape[1]):
        for q in window(k, n, x.shape[1]):
            sums[:, k] += x[:, q] ** 2
    return delta + alpha / n * sums


def reference(x, n, alpha, beta, delta):
    """y_k = x_k / L_k^beta from the header, in float64 (NCHW)."""
    return np.asarray(x, np.float64) / denominators(x, n, alpha, delta) ** beta


def reference_gradient(x, dy, n, alpha, beta, delta):
    """The exact derivative of `reference`, written out:
    dx_j = dy_j L_j^-b - (2 a b / n) x_j sum_{k: j in Q(k)} dy_k x_k L_k^(-b-1)."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    l = denominators(x, n, alpha, delta)
    t = dy * x * l ** (-beta - 1)
    dx = dy * l ** -beta
    for k in range(x.shape[1]):
        for j in window(k, n, x.shape[1]):
            dx[:, j] -= 2 * alpha * beta / n * x[:, j] * t[:, k]
    return dx


def torch_forward_and_gradient(x, dy, n, alpha, beta, delta):
    xt = torch.from_numpy(np.asarray(x, np.float64)).requires_grad_()
    y = torch.nn.functional.local_response_norm(xt, n, alpha=alpha, beta=beta, k=delta)
    y.backward(torch.from_numpy(np.asarray(dy, np.float64)))
    return y.detach().numpy(), xt.grad.numpy()


def kernels(device, n, alpha, beta, delta):
    forward = mpsx.CNNCrossChannelNormalization(device, n)
    gradient = mpsx.CNNCrossChannelNormalizationGradient(device, n)
    for k in (forward, gradient):
        k.alpha, k.beta, k.delta = alpha, beta, delta
    return forward, gradient


def test_reference_gradient_is_the_derivative_of_the_forward_formula(rng):
    # Central differences of the float64 forward reference check the written-out
    # gradient (and so the 1/N the header's printed gradient lacks).
    for n, alpha, beta, delta in PARAMETERS:
        x = rng.standard_normal((2, 6, 2, 3))
        dy = rng.standard_normal(x.shape)
        numeric = finite_difference_gradient(lambda v: np.sum(reference(v, n, alpha, beta, delta) * dy), x, 1e-6)
        np.testing.assert_allclose(reference_gradient(x, dy, n, alpha, beta, delta), numeric, rtol=1e-6, atol=1e-8)


def test_torch_agrees_with_the_header_formula(rng):
    # local_response_norm pads n//2 channels before and (n-1)//2 after and
    # divides the sum by n: the header's Q(k) and alpha/N, for even n too.
    for n, alpha, beta, delta in PARAMETERS:
        x = rng.standard_normal((2, 7, 3, 2))
        dy = rng.standard_normal(x.shape)
        y, dx = torch_forward_and_gradient(x, dy, n, alpha, beta, delta)
        np.testing.assert_allclose(y, reference(x, n, alpha, beta, delta), rtol=1e-12)
        np.testing.assert_allclose(dx, reference_gradient(x, dy, n, alpha, beta, delta), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("parameters", PARAMETERS)
@pytest.mark.parametrize("shape", [(1, 7, 5, 3), (3, 4, 2, 5), (2, 1, 3, 3), (1, 16, 1, 2)])
def test_forward_and_gradient_match_torch(device, rng, parameters, shape):
    n, alpha, beta, delta = parameters
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    y, dx = kernel_forward_and_gradient(device, x, dy, *kernels(device, *parameters))
    assert y.shape == shape and dx.shape == shape and y.dtype == np.float32
    expected_y, expected_dx = torch_forward_and_gradient(x, dy, n, alpha, beta, delta)
    np.testing.assert_allclose(y, expected_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)


def test_defaults(device, rng):
    forward = mpsx.CNNCrossChannelNormalization(device, 5)
    gradient = mpsx.CNNCrossChannelNormalizationGradient(device, 3)
    assert (forward.kernel_size, forward.alpha, forward.beta, forward.delta) == (5, 1.0, 5.0, 1.0)
    assert (gradient.kernel_size, gradient.alpha, gradient.beta, gradient.delta) == (3, 1.0, 5.0, 1.0)
    # The defaults are what runs.
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y, dx = kernel_forward_and_gradient(device, x, dy, forward, mpsx.CNNCrossChannelNormalizationGradient(device, 5))
    np.testing.assert_allclose(y, reference(x, 5, 1.0, 5.0, 1.0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, 5, 1.0, 5.0, 1.0), rtol=1e-4, atol=1e-5)


def test_properties_are_read_write_and_kernel_size_read_only(device):
    for kernel in (mpsx.CNNCrossChannelNormalization(device, 4), mpsx.CNNCrossChannelNormalizationGradient(device, 4)):
        kernel.alpha, kernel.beta, kernel.delta = 0.0, -0.5, 0.25
        assert (kernel.alpha, kernel.beta, kernel.delta) == (0.0, -0.5, 0.25)
        with pytest.raises(AttributeError):
            kernel.kernel_size = 3
        assert kernel.kernel_size == 4


def test_parameters_set_between_encodes_are_used(device, rng):
    # One kernel of one shape, its parameters changed between encodes (cuda: LRN's range).
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    forward, gradient = kernels(device, 3, 1.0, 0.75, 1.0)
    assert_parameter_sets_used(device, x, dy, forward, gradient, 3, reference, reference_gradient)


def test_gradient_finite_differences(device, rng):
    # Central differences of the device's own forward pass.
    shape = (1, 5, 2, 2)
    n, alpha, beta, delta = 3, 1.5, 0.75, 1.0
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    forward, gradient = kernels(device, n, alpha, beta, delta)
    numeric = forward_finite_differences(device, forward, x, dy)
    _, dx = kernel_forward_and_gradient(device, x.astype(np.float32), dy.astype(np.float32), forward, gradient)
    np.testing.assert_allclose(dx, numeric, rtol=2e-2, atol=2e-3)


def test_float16(device, rng):
    n, alpha, beta, delta = 5, 1.0, 0.75, 1.0
    x = rng.standard_normal((2, 6, 3, 5)).astype(np.float16)
    dy = rng.standard_normal(x.shape).astype(np.float16)
    y, dx = kernel_forward_and_gradient(device, x, dy, *kernels(device, n, alpha, beta, delta))
    assert y.dtype == np.float16 and dx.dtype == np.float16
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y, reference(x, n, alpha, beta, delta), rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, n, alpha, beta, delta), rtol=rtol, atol=atol)


@pytest.mark.parametrize("data_type", [np.float32, np.float16])
def test_source_feature_channel_offset(device, rng, data_type):
    # The window runs over the channels from the offset on (D = 6 here), and
    # only they get a gradient.
    n, alpha, beta, delta = 3, 2.0, 0.75, 1.0
    x = rng.standard_normal((2, 10, 3, 3)).astype(data_type)
    dy = rng.standard_normal((2, 6, 3, 3)).astype(data_type)
    forward, gradient = kernels(device, n, alpha, beta, delta)
    forward.source_feature_channel_offset = 4
    y, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient)
    rtol, atol = tolerance(data_type)
    assert y.shape == (2, 6, 3, 3) and dx.shape == x.shape
    np.testing.assert_allclose(y, reference(x[:, 4:], n, alpha, beta, delta), rtol=rtol, atol=atol)
    np.testing.assert_array_equal(dx[:, :4], 0)
    np.testing.assert_allclose(dx[:, 4:], reference_gradient(x[:, 4:], dy, n, alpha, beta, delta), rtol=rtol,
                               atol=atol)


@pytest.mark.parametrize("data_type", [np.float32, np.float16])
def test_clip_rect_offset_and_destination_channel_offset(device, rng, data_type):
    n, alpha, beta, delta = 4, 1.0, 0.75, 0.5
    x = rng.standard_normal((2, 5, 6, 7)).astype(data_type)
    forward, gradient = kernels(device, n, alpha, beta, delta)
    forward.offset = (1, 2, 0)
    forward.clip_rect = (1, 0, 0, 3, 2, 2)
    forward.destination_feature_channel_offset = 4
    destination = mpsx.Image.from_numpy(device, np.full((2, 12, 5, 5), 7.0, data_type))
    dy = rng.standard_normal((2, 12, 5, 5)).astype(data_type)
    y, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient, destination=destination)
    rtol, atol = tolerance(data_type)
    # clipRect.origin (1, 0) reads source (offset.x, offset.y) = (1, 2).
    read_x = x[:, :, 2:4, 1:4]
    expected = np.full((2, 12, 5, 5), 7.0)
    expected[:, 4:9, 0:2, 1:4] = reference(read_x, n, alpha, beta, delta)
    np.testing.assert_allclose(y, expected, rtol=rtol, atol=atol)
    expected_dx = np.zeros(x.shape)
    expected_dx[:, :, 2:4, 1:4] = reference_gradient(read_x, dy[:, 4:9, 0:2, 1:4], n, alpha, beta, delta)
    assert dx.shape == x.shape
    np.testing.assert_allclose(dx, expected_dx, rtol=rtol, atol=atol)


def test_offset_z_and_batches(device, rng):
    n, alpha, beta, delta = 5, 1.0, 0.75, 2.0
    x = rng.standard_normal((4, 6, 2, 3)).astype(np.float32)
    dy = rng.standard_normal((3, 6, 2, 3)).astype(np.float32)
    assert_offset_z_and_batches(device, x, dy, lambda: kernels(device, n, alpha, beta, delta),
                                lambda x: reference(x, n, alpha, beta, delta),
                                lambda x, dy: reference_gradient(x, dy, n, alpha, beta, delta))


@pytest.mark.parametrize("offset", [0, 4])
def test_in_place(device, rng, offset):
    if device.backend == "metal":
        pytest.skip("MPS kernels may not write the images they read")
    n, alpha, beta, delta = 3, 1.0, 0.75, 1.0
    x = rng.standard_normal((2, 9, 3, 4)).astype(np.float32)
    forward, _ = kernels(device, n, alpha, beta, delta)
    forward.source_feature_channel_offset = offset
    forward.destination_feature_channel_offset = offset
    y = encode_in_place(device, forward, x)
    expected = x.astype(np.float64)
    expected[:, offset:] = reference(x[:, offset:], n, alpha, beta, delta)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def test_gradient_kernels_keep_the_parameters(device, rng):
    forward = mpsx.CNNCrossChannelNormalization(device, 4)
    forward.alpha, forward.beta, forward.delta = 2.5, 0.5, 3.0
    made = forward.gradient_kernels()
    assert [type(g) for g in made] == [mpsx.CNNCrossChannelNormalizationGradient]
    g = made[0]
    assert (g.kernel_size, g.alpha, g.beta, g.delta) == (4, 2.5, 0.5, 3.0)
    x = rng.standard_normal((1, 6, 2, 3)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    _, dx = kernel_forward_and_gradient(device, x, dy, forward, g)
    np.testing.assert_allclose(dx, reference_gradient(x, dy, 4, 2.5, 0.5, 3.0), rtol=1e-4, atol=1e-5)


def test_errors(device, rng):
    for cls in (mpsx.CNNCrossChannelNormalization, mpsx.CNNCrossChannelNormalizationGradient):
        name = "MPS" + cls.__name__
        with pytest.raises(ValueError, match=f"{name}: kernel_size must be positive, given 0"):
            cls(device, 0)
        with pytest.raises(ValueError, match=f"{name}: kernel_size must be at most"):
            cls(device, 1 << 40)
        with pytest.raises(TypeError):
            cls(device, 2.5)
        with pytest.raises(TypeError):
            cls(None, 3)
        kernel = cls(device, 3)
        with pytest.raises(ValueError, match=f"{name}: alpha must be finite and non-negative, given -0.5"):
            kernel.alpha = -0.5
        with pytest.raises(ValueError, match=f"{name}: alpha must be finite and non-negative, given nan"):
            kernel.alpha = float("nan")
        with pytest.raises(ValueError, match=f"{name}: beta must be finite, given inf"):
            kernel.beta = float("inf")
        with pytest.raises(ValueError, match=f"{name}: delta must be finite, given nan"):
            kernel.delta = float("nan")
        with pytest.raises(TypeError, match="alpha must be a float, given str 'x'"):
            kernel.alpha = "x"
        assert (kernel.alpha, kernel.beta, kernel.delta) == (1.0, 5.0, 1.0)  # unchanged
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    forward = mpsx.CNNCrossChannelNormalization(device, 3)
    gradient = mpsx.CNNCrossChannelNormalizationGradient(device, 3)
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    cb = device.command_queue.command_buffer()
    y, state = forward.encode(cb, image, destination_state=True)
    _, neuron_state = neuron.encode(cb, image, destination_state=True)
    recorded = cb.command_count
    dy = mpsx.Image.from_numpy(device, np.ones(x.shape, np.float32))
    with pytest.raises(TypeError, match="MPSCNNCrossChannelNormalizationGradient: expected the state of an "
                                        "MPSCNNCrossChannelNormalization forward encode, given one of an MPSCNNNeuron"):
        gradient.encode(cb, dy, image, neuron_state)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNCrossChannelNormalizationGradient: expected a source gradient "
                                              r"shaped as the forward result, 1x3x4x4 \(NxCxHxW\), given 1x2x4x4"):
        gradient.encode(cb, mpsx.Image.from_numpy(device, x[:, :2]), image, state)
    shifted = mpsx.CNNCrossChannelNormalization(device, 3)
    shifted.offset = (1, 0, 0)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNCrossChannelNormalization: offset \(1, 0\) with a 4x4 region "
                                              r"reads outside the 4x4 source image"):
        shifted.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=3)))
    past = mpsx.CNNCrossChannelNormalization(device, 3)
    past.source_feature_channel_offset = 4
    with pytest.raises(mpsx.ShapeError, match="MPSCNNCrossChannelNormalization: source_feature_channel_offset 4 is "
                                              "past the source image's 3 feature channels"):
        past.encode(cb, image)
    assert cb.command_count == recorded  # nothing of the refused calls was enqueued
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


def test_classes(device):
    image = assert_kernel_classes(device, mpsx.CNNCrossChannelNormalization, mpsx.CNNCrossChannelNormalizationGradient,
                                  "alpha", 3)
    assert repr(mpsx.CNNCrossChannelNormalization(device, 3)).startswith("<mpsx.CNNCrossChannelNormalization on ")
    cls = mpsx.CNNCrossChannelNormalizationGradient
    with pytest.raises(TypeError, match=f"this mpsx.{cls.__name__} was made without __init__"):
        cls.__new__(cls).destination_image_descriptor(image, [])

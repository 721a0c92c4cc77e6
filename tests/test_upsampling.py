"""CNNUpsamplingNearest / Bilinear and their gradients against
torch.nn.functional.interpolate (float64) with integer scale factors, and the
gradients against finite differences."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import batch_forward_and_gradient, forward_finite_differences, kernel_forward_and_gradient, read, tolerance

SCALES = [(1, 1), (2, 2), (3, 2), (1, 3)]
SHAPES = [(1, 3, 5, 7), (2, 4, 3, 1)]


def kernels(device, mode, sx, sy, align_corners=False):
    if mode == "nearest":
        return mpsx.CNNUpsamplingNearest(device, sx, sy), mpsx.CNNUpsamplingNearestGradient(device, sx, sy)
    return (mpsx.CNNUpsamplingBilinear(device, sx, sy, align_corners=align_corners),
            mpsx.CNNUpsamplingBilinearGradient(device, sx, sy, align_corners=align_corners))


def torch_upsample(x, mode, sx, sy, align_corners):
    kwargs = {} if mode == "nearest" else {"align_corners": align_corners}
    return F.interpolate(x, scale_factor=(sy, sx), mode=mode, **kwargs)


def reference(x, mode, sx, sy, align_corners=False, dy=None):
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    y = torch_upsample(xt, mode, sx, sy, align_corners)
    if dy is None:
        return y.detach().numpy()
    y.backward(torch.from_numpy(dy.astype(np.float64)))
    return y.detach().numpy(), xt.grad.numpy()


MODES = [("nearest", False), ("bilinear", False), ("bilinear", True)]
MODE_IDS = ["nearest", "bilinear", "bilinear-align-corners"]


@pytest.mark.parametrize("mode,align", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("sx,sy", SCALES)
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_and_gradient_match_torch(device, rng, mode, align, sx, sy, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    n, c, h, w = shape
    dy = rng.standard_normal((n, c, h * sy, w * sx)).astype(np.float32)
    forward, gradient = kernels(device, mode, sx, sy, align)
    y, dx = batch_forward_and_gradient(device, x, dy, forward, gradient)
    expected_y, expected_dx = reference(x, mode, sx, sy, align, dy)
    assert y.shape == expected_y.shape
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)


def test_nearest_gradient_is_the_block_sum(device, rng):
    x = rng.standard_normal((1, 2, 3, 5)).astype(np.float32)
    dy = rng.standard_normal((1, 2, 6, 15)).astype(np.float32)
    forward, gradient = kernels(device, "nearest", 3, 2)
    _, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient)
    np.testing.assert_allclose(dx, dy.reshape(1, 2, 3, 2, 5, 3).sum(axis=(3, 5)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,align", MODES, ids=MODE_IDS)
def test_float16(device, rng, mode, align):
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float16)
    dy = rng.standard_normal((2, 3, 10, 12)).astype(np.float16)
    forward, gradient = kernels(device, mode, 3, 2, align)
    y, dx = batch_forward_and_gradient(device, x, dy, forward, gradient)
    assert y.dtype == np.float16 and dx.dtype == np.float16
    expected_y, expected_dx = reference(x.astype(np.float32), mode, 3, 2, align, dy.astype(np.float32))
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y.astype(np.float32), expected_y, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx.astype(np.float32), expected_dx, rtol=rtol, atol=4 * atol)


@pytest.mark.parametrize("mode,align", MODES, ids=MODE_IDS)
def test_gradient_finite_differences(device, rng, mode, align):
    shape = (1, 1, 3, 2)
    x = rng.standard_normal(shape)
    dy = rng.standard_normal((1, 1, 6, 6))
    forward, gradient = kernels(device, mode, 3, 2, align)
    numeric = forward_finite_differences(device, forward, x, dy)
    _, dx = kernel_forward_and_gradient(device, x.astype(np.float32), dy.astype(np.float32), forward, gradient)
    np.testing.assert_allclose(dx, numeric, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode,align", MODES, ids=MODE_IDS)
def test_clip_rect_offset_and_channel_offsets(device, rng, mode, align):
    # Destination pixel (x, y) is upsampled pixel offset + (x, y) - clip_rect.origin.
    x = rng.standard_normal((1, 8, 3, 4)).astype(np.float32)
    forward, gradient = kernels(device, mode, 2, 2, align)
    destination = mpsx.Image.from_numpy(device, np.full((1, 8, 5, 5), 7.0, np.float32))
    forward.offset = (3, 1)
    forward.clip_rect = (1, 2, 0, 3, 2, 1)
    forward.source_feature_channel_offset = 4
    forward.destination_feature_channel_offset = 4
    source = mpsx.Image.from_numpy(device, x)
    dy = rng.standard_normal((1, 8, 5, 5)).astype(np.float32)

    def encode(cb):
        y, state = forward.encode(cb, source, destination, destination_state=True)
        dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)
        return y, dx

    y, dx = read(device, encode)
    upsampled = reference(x[:, 4:8], mode, 2, 2, align)
    expected = np.full((1, 8, 5, 5), 7.0, np.float32)
    expected[0, 4:8, 2:4, 1:4] = upsampled[0, :, 1:3, 3:6]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    # The gradient flows from the region written only; other channels get none.
    g = np.zeros((1, 4, 6, 8))
    g[0, :, 1:3, 3:6] = dy[0, 4:8, 2:4, 1:4]
    _, expected_dx = reference(x[:, 4:8], mode, 2, 2, align, g)
    np.testing.assert_allclose(dx[:, 4:8], expected_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(dx[:, 0:4], 0)


def test_properties(device):
    up = mpsx.CNNUpsamplingBilinear(device, 3, 2, align_corners=True)
    assert up.scale_factor_x == 3.0 and up.scale_factor_y == 2.0 and up.align_corners is True
    assert isinstance(up.scale_factor_x, float)
    near = mpsx.CNNUpsamplingNearestGradient(device, 2, 4)
    assert (near.scale_factor_x, near.scale_factor_y, near.align_corners) == (2.0, 4.0, False)
    assert mpsx.CNNUpsamplingBilinearGradient(device, 1, 1).align_corners is False
    d = mpsx.CNNUpsamplingNearest(device, 2, 3).destination_image_descriptor(
        mpsx.Image.from_numpy(device, np.zeros((2, 5, 4, 7), np.float32)))
    assert (d.number_of_images, d.feature_channels, d.height, d.width) == (2, 5, 12, 14)


@pytest.mark.parametrize("cls", [mpsx.CNNUpsamplingNearest, mpsx.CNNUpsamplingBilinear,
                                 mpsx.CNNUpsamplingNearestGradient, mpsx.CNNUpsamplingBilinearGradient])
def test_bad_scale_factors(device, cls):
    with pytest.raises(TypeError, match="integer_scale_factor_x must be an int, given float 2.0"):
        cls(device, 2.0, 2)
    with pytest.raises(TypeError, match="integer_scale_factor_y must be an int, given float 1.5"):
        cls(device, 2, 1.5)
    with pytest.raises(ValueError, match="integer_scale_factor_x must be an int of at least 1, given 0"):
        cls(device, 0, 2)
    with pytest.raises(ValueError, match="integer_scale_factor_y must be an int of at least 1, given -3"):
        cls(device, 1, -3)
    with pytest.raises(ValueError, match="integer_scale_factor_x must be at most 1073741824, given 1073741825"):
        cls(device, 2**30 + 1, 1)


def test_bad_align_corners_and_sizes(device, rng):
    with pytest.raises(TypeError, match="align_corners must be a bool, given int 1"):
        mpsx.CNNUpsamplingBilinear(device, 2, 2, align_corners=1)
    up = mpsx.CNNUpsamplingNearest(device, 2**15, 2**15)
    big = mpsx.Image.from_numpy(device, np.zeros((1, 1, 2**15 + 1, 1), np.float32))
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match="makes a 32768x1073774592 image; image sizes must be at most 1073741824"):
        up.encode(cb, big)
    source = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))
    forward = mpsx.CNNUpsamplingNearest(device, 2, 2)
    forward.offset = (2, 0)
    with pytest.raises(ValueError, match="reads outside the 6x6 upsampled image of the 3x3 source"):
        forward.encode(cb, source, mpsx.Image.from_numpy(device, np.zeros((1, 2, 6, 6), np.float32)))


def test_gradient_refuses_other_states(device, rng):
    source = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 6, 6)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    _, state = mpsx.CNNUpsamplingBilinear(device, 2, 2).encode(cb, source, destination_state=True)
    with pytest.raises(ValueError, match="upsampled by 2x2 with align_corners False; this kernel has 2x2 with "
                                         "align_corners True"):
        mpsx.CNNUpsamplingBilinearGradient(device, 2, 2, align_corners=True).encode(cb, dy, source, state)
    with pytest.raises(TypeError, match="expected the state of an MPSCNNUpsamplingNearest forward encode, given one "
                                        "of an MPSCNNUpsamplingBilinear"):
        mpsx.CNNUpsamplingNearestGradient(device, 2, 2).encode(cb, dy, source, state)
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    _, neuron_state = neuron.encode(cb, source, destination_state=True)
    with pytest.raises(TypeError, match="expected the state of an upsampling forward encode, given an "
                                        "MPSNNGradientState"):
        mpsx.CNNUpsamplingBilinearGradient(device, 2, 2).encode(cb, dy, source, neuron_state)
    bad = mpsx.Image.from_numpy(device, np.zeros((1, 2, 6, 5), np.float32))
    with pytest.raises(ValueError, match="expected a source gradient shaped as the forward result, 1x2x6x6"):
        mpsx.CNNUpsamplingBilinearGradient(device, 2, 2).encode(cb, bad, source, state)
    cb.commit()
    cb.wait_until_completed()


def test_uninitialized_objects_raise(device):
    for cls in (mpsx.CNNUpsamplingNearest, mpsx.CNNUpsamplingBilinear, mpsx.CNNUpsamplingNearestGradient,
                mpsx.CNNUpsamplingBilinearGradient):
        with pytest.raises(TypeError):
            cls.__new__(cls).scale_factor_x

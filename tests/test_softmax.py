"""CNNSoftMax, CNNLogSoftMax and their gradients against torch (float64 on
the CPU: torch.softmax / log_softmax and autograd) and finite differences."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import encode_in_place, forward_finite_differences, read, tolerance

KINDS = {
    "softmax": (mpsx.CNNSoftMax, mpsx.CNNSoftMaxGradient, torch.softmax),
    "log_softmax": (mpsx.CNNLogSoftMax, mpsx.CNNLogSoftMaxGradient, torch.log_softmax),
}


def reference(kind, x):
    """The forward result over axis 1 (feature channels), in float64."""
    return KINDS[kind][2](torch.from_numpy(np.asarray(x, np.float64)), 1).numpy()


def reference_gradient(kind, x, dy):
    """d(sum(f(x) * dy)) / dx by torch autograd, in float64."""
    xt = torch.from_numpy(np.asarray(x, np.float64)).requires_grad_()
    KINDS[kind][2](xt, 1).backward(torch.from_numpy(np.asarray(dy, np.float64)))
    return xt.grad.numpy()


def forward_and_gradient(device, kind, x, dy, forward=None, gradient=None, destination=None):
    """Encodes the forward pass of x and the gradient of dy on one command
    buffer; returns (y, dx) as numpy."""
    forward = forward or KINDS[kind][0](device)
    gradient = gradient or KINDS[kind][1](device)
    source = mpsx.Image.from_numpy(device, x)

    def encode(cb):
        y, state = forward.encode(cb, source, destination, destination_state=True)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy), y, state)

    return read(device, encode)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (3, 8, 4, 1), (2, 1, 3, 3), (1, 37, 2, 3), (2, 4, 1, 1)])
def test_forward_matches_torch(device, rng, kind, shape):
    x = (2 * rng.standard_normal(shape)).astype(np.float32)
    y = read(device, lambda cb: KINDS[kind][0](device).encode(cb, mpsx.Image.from_numpy(device, x)))
    assert y.shape == shape and y.dtype == np.float32
    np.testing.assert_allclose(y, reference(kind, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_forward_is_stable_for_large_values(device, rng, kind):
    # exp(1000) overflows float32: the max must be taken out first.
    x = (rng.standard_normal((2, 6, 3, 4)) * 30 + np.array([1000, -1000])[:, None, None, None]).astype(np.float32)
    x[0, 2] = 1000 + 200  # dominates the others of image 0 entirely
    y = read(device, lambda cb: KINDS[kind][0](device).encode(cb, mpsx.Image.from_numpy(device, x)))
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, reference(kind, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_float16(device, rng, kind):
    x = (2 * rng.standard_normal((2, 5, 3, 6))).astype(np.float16)
    dy = rng.standard_normal(x.shape).astype(np.float16)
    y, dx = forward_and_gradient(device, kind, x, dy)
    assert y.dtype == np.float16 and dx.dtype == np.float16
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y, reference(kind, x.astype(np.float32)), rtol=rtol, atol=atol)
    # The gradient reads the float16 result: compare with the formula on it.
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    if kind == "softmax":
        expected = y64 * (dy64 - np.sum(dy64 * y64, axis=1, keepdims=True))
    else:
        expected = dy64 - np.exp(y64) * np.sum(dy64, axis=1, keepdims=True)
    np.testing.assert_allclose(dx, expected, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, reference_gradient(kind, x.astype(np.float32), dy), rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 9, 1, 2), (3, 1, 2, 2)])
def test_gradient_matches_autograd(device, rng, kind, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    y, dx = forward_and_gradient(device, kind, x, dy)
    np.testing.assert_allclose(y, reference(kind, x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, reference_gradient(kind, x, dy), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_finite_differences(device, rng, kind):
    shape = (1, 3, 2, 2)
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    forward = KINDS[kind][0](device)
    numeric = forward_finite_differences(device, forward, x, dy)
    _, dx = forward_and_gradient(device, kind, x.astype(np.float32), dy.astype(np.float32))
    np.testing.assert_allclose(dx, numeric, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("data_type", [np.float32, np.float16])
def test_source_feature_channel_offset(device, rng, kind, data_type):
    # The reduction runs over the channels from the offset on, and only they
    # get a gradient.
    x = rng.standard_normal((2, 10, 3, 3)).astype(data_type)
    dy = rng.standard_normal((2, 6, 3, 3)).astype(data_type)
    forward = KINDS[kind][0](device)
    forward.source_feature_channel_offset = 4
    y, dx = forward_and_gradient(device, kind, x, dy, forward=forward)
    rtol, atol = tolerance(data_type)
    x32 = x.astype(np.float32)
    assert y.shape == (2, 6, 3, 3)
    np.testing.assert_allclose(y, reference(kind, x32[:, 4:]), rtol=rtol, atol=atol)
    assert dx.shape == x.shape
    np.testing.assert_array_equal(dx[:, :4], 0)
    np.testing.assert_allclose(dx[:, 4:], reference_gradient(kind, x32[:, 4:], dy.astype(np.float32)), rtol=rtol,
                               atol=atol)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("data_type", [np.float32, np.float16])
def test_clip_rect_offset_and_destination_channel_offset(device, rng, kind, data_type):
    x = rng.standard_normal((2, 5, 6, 7)).astype(data_type)
    forward = KINDS[kind][0](device)
    forward.offset = (1, 2, 0)
    forward.clip_rect = (1, 0, 0, 3, 2, 2)
    forward.destination_feature_channel_offset = 4
    destination = mpsx.Image.from_numpy(device, np.full((2, 12, 5, 5), 7.0, data_type))
    dy = rng.standard_normal((2, 12, 5, 5)).astype(data_type)
    y, dx = forward_and_gradient(device, kind, x, dy, forward=forward, destination=destination)
    rtol, atol = tolerance(data_type)
    x32, dy32 = x.astype(np.float32), dy.astype(np.float32)
    # clipRect.origin (1, 0) reads source (offset.x, offset.y) = (1, 2).
    read_x = x32[:, :, 2:4, 1:4]
    expected = np.full((2, 12, 5, 5), 7.0)
    expected[:, 4:9, 0:2, 1:4] = reference(kind, read_x)
    np.testing.assert_allclose(y, expected, rtol=rtol, atol=atol)
    # The gradient is shaped as the forward source; what the forward pass did
    # not read gets zeros, the rest the gradient of the region written.
    expected_dx = np.zeros(x.shape)
    expected_dx[:, :, 2:4, 1:4] = reference_gradient(kind, read_x, dy32[:, 4:9, 0:2, 1:4])
    assert dx.shape == x.shape
    np.testing.assert_allclose(dx, expected_dx, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind", KINDS)
def test_offset_z_skips_source_images(device, rng, kind):
    x = rng.standard_normal((3, 4, 2, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 4, 2, 3)).astype(np.float32)
    forward = KINDS[kind][0](device)
    forward.offset = (0, 0, 1)
    y, dx = forward_and_gradient(device, kind, x, dy, forward=forward)
    assert y.shape == (2, 4, 2, 3)
    np.testing.assert_allclose(y, reference(kind, x[1:]), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(dx[0], 0)
    np.testing.assert_allclose(dx[1:], reference_gradient(kind, x[1:], dy), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_batch_of_images_and_states(device, rng, kind):
    x = rng.standard_normal((4, 6, 3, 5)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    forward, gradient = KINDS[kind][0](device), KINDS[kind][1](device)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    items = [mpsx.Image.from_numpy(device, x[i]) for i in range(4)]  # separate allocations

    def encode(cb):
        y1, states = forward.encode_batch(cb, batch, destination_states=True)
        y2, states2 = forward.encode_batch(cb, items, destination_states=True)
        assert isinstance(y1, mpsx.ImageBatch) and len(y1) == 4
        assert len(states) == 4 and all(s is states[0] for s in states)
        dx1 = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), y1, states)
        dx2 = gradient.encode_batch(cb, [mpsx.Image.from_numpy(device, dy[i]) for i in range(4)], y2, states2)
        return y1, y2, dx1, dx2

    y1, y2, dx1, dx2 = read(device, encode)
    for y in (y1, y2):
        np.testing.assert_allclose(y, reference(kind, x), rtol=1e-4, atol=1e-5)
    for dx in (dx1, dx2):
        np.testing.assert_allclose(dx, reference_gradient(kind, x, dy), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_destination_descriptor_follows_the_source_gradient(device, rng, kind):
    forward, gradient = KINDS[kind][0](device), KINDS[kind][1](device)
    forward.source_feature_channel_offset = 4
    x = rng.standard_normal((2, 7, 3, 5)).astype(np.float16)
    cb = device.command_queue.command_buffer()
    y, state = forward.encode(cb, mpsx.Image.from_numpy(device, x), destination_state=True)
    assert y.data_type == mpsx.DataType.FLOAT16 and y.feature_channels == 3
    for dtype, expected in [(np.float16, mpsx.DataType.FLOAT16), (np.float32, mpsx.DataType.FLOAT32)]:
        dy = mpsx.Image.from_numpy(device, np.ones((2, 3, 3, 5), dtype))
        d = gradient.destination_image_descriptor([dy, y], state)
        # Sized as the forward source, in the source gradient's data type.
        assert (d.number_of_images, d.feature_channels, d.height, d.width) == (2, 7, 3, 5)
        assert d.channel_format == expected
        dx = gradient.encode(cb, dy, y, state)
        assert dx.data_type == expected
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


def test_errors(device, rng):
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    softmax, gradient = mpsx.CNNSoftMax(device), mpsx.CNNSoftMaxGradient(device)
    log_gradient = mpsx.CNNLogSoftMaxGradient(device)
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    cb = device.command_queue.command_buffer()
    y, state = softmax.encode(cb, image, destination_state=True)
    _, neuron_state = neuron.encode(cb, image, destination_state=True)
    _, log_state = mpsx.CNNLogSoftMax(device).encode(cb, image, destination_state=True)
    recorded = cb.command_count
    dy = mpsx.Image.from_numpy(device, np.ones(x.shape, np.float32))
    # A state of another forward kernel.
    with pytest.raises(TypeError, match="MPSCNNSoftMaxGradient: expected the state of an MPSCNNSoftMax forward "
                                        "encode, given one of an MPSCNNNeuron"):
        gradient.encode(cb, dy, y, neuron_state)
    with pytest.raises(TypeError, match="MPSCNNSoftMaxGradient: expected the state of an MPSCNNSoftMax forward "
                                        "encode, given one of an MPSCNNLogSoftMax"):
        gradient.encode(cb, dy, y, log_state)
    with pytest.raises(TypeError, match="MPSCNNLogSoftMaxGradient: expected the state of an MPSCNNLogSoftMax "
                                        "forward encode, given one of an MPSCNNSoftMax"):
        log_gradient.encode(cb, dy, y, state)
    # The forward source where the forward result belongs.
    with pytest.raises(mpsx.StateError, match="MPSCNNSoftMaxGradient: .*pass the result images of the forward "
                                              "encode that produced it as the source images"):
        gradient.encode(cb, dy, image, state)
    # Wrong shapes.
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNSoftMaxGradient: expected a source gradient shaped as the "
                                              r"forward result, 1x3x4x4 \(NxCxHxW\), given 1x2x4x4"):
        gradient.encode(cb, mpsx.Image.from_numpy(device, x[:, :2]), y, state)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNSoftMaxGradient: expected a destination gradient of 1x3x4x4 "
                                              r"\(NxCxHxW\), given 1x3x4x5"):
        gradient.encode(cb, dy, y, state, mpsx.Image(device, mpsx.ImageDescriptor(width=5, height=4,
                                                                                  feature_channels=3)))
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNSoftMax: expected a destination image of at least 3 feature "
                                              r"channels, given 2"):
        softmax.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=2)))
    # A pixel the clip region maps to outside the source: nothing to pad.
    shifted = mpsx.CNNSoftMax(device)
    shifted.offset = (1, 0, 0)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNSoftMax: offset \(1, 0\) with a 4x4 region reads outside the "
                                              r"4x4 source image"):
        shifted.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=3)))
    past = mpsx.CNNLogSoftMax(device)
    past.source_feature_channel_offset = 4
    with pytest.raises(mpsx.ShapeError, match="MPSCNNLogSoftMax: source_feature_channel_offset 4 is past the source "
                                              "image's 3 feature channels"):
        past.encode(cb, image)
    with pytest.raises(TypeError):
        gradient.encode(cb, dy, y, None)
    assert cb.command_count == recorded  # nothing of the refused calls was enqueued
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


def test_classes(device):
    for kernel, name in [(mpsx.CNNSoftMax(device), "CNNSoftMax"), (mpsx.CNNLogSoftMax(device), "CNNLogSoftMax")]:
        assert isinstance(kernel, mpsx.CNNUnaryKernel) and repr(kernel).startswith(f"<mpsx.{name} on ")
    for kernel in (mpsx.CNNSoftMaxGradient(device), mpsx.CNNLogSoftMaxGradient(device)):
        assert isinstance(kernel, mpsx.CNNGradientKernel)
    assert not isinstance(mpsx.CNNLogSoftMax(device), mpsx.CNNSoftMax)  # siblings in MPS too
    with pytest.raises(TypeError):
        mpsx.CNNSoftMax(None)
    image = mpsx.Image.from_numpy(device, np.zeros((1, 2, 1, 1), np.float32))
    for cls in (mpsx.CNNSoftMax, mpsx.CNNLogSoftMax):
        with pytest.raises(TypeError, match=f"this mpsx.{cls.__name__} was made without __init__"):
            cls.__new__(cls).encode(device.command_queue.command_buffer(), image)
    for cls in (mpsx.CNNSoftMaxGradient, mpsx.CNNLogSoftMaxGradient):
        with pytest.raises(TypeError, match=f"this mpsx.{cls.__name__} was made without __init__"):
            cls.__new__(cls).destination_image_descriptor(image, [])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("offset", [0, 4])
def test_in_place(device, rng, kind, offset):
    if device.backend == "metal":
        pytest.skip("MPS kernels may not write the images they read")
    x = rng.standard_normal((2, 7, 3, 4)).astype(np.float32)
    forward = KINDS[kind][0](device)
    # offset 4: channels 4..6 in place; the others stay as they were.
    forward.source_feature_channel_offset = offset
    forward.destination_feature_channel_offset = offset
    y = encode_in_place(device, forward, x)
    expected = x.astype(np.float64)
    expected[:, offset:] = reference(kind, x[:, offset:])
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)

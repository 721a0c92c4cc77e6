"""CNNNeuron and CNNNeuronGradient against formulas written here (float64
numpy and torch autograd) and against finite differences."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import (batch_and_items_forward_and_gradient, forward_finite_differences, kernel_forward_and_gradient,
                     read, tolerance)

NT = mpsx.NeuronType

# type: (a, b, c, sampler of valid inputs)
CASES = {
    NT.NONE: (0, 0, 0, None),
    NT.RELU: (0.1, 0, 0, None),
    NT.LINEAR: (2.0, -0.5, 0, None),
    NT.SIGMOID: (0, 0, 0, None),
    NT.HARD_SIGMOID: (0.2, 0.5, 0, None),
    NT.TANH: (1.5, 0.7, 0, None),
    NT.ABSOLUTE: (0, 0, 0, None),
    NT.SOFTPLUS: (1.2, 0.8, 0, None),
    NT.SOFTSIGN: (0, 0, 0, None),
    NT.ELU: (0.9, 0, 0, None),
    NT.PRELU: (0, 0, 0, None),
    NT.RELUN: (0.1, 1.0, 0, None),
    NT.POWER: (0.5, 2.0, 3.0, "positive"),
    NT.EXPONENTIAL: (0.5, 0.1, 2.0, None),
    NT.LOGARITHM: (0.5, 3.0, 10.0, "positive"),
    NT.GELU: (0, 0, 0, None),
}


def torch_neuron(t, x, a, b, c, slopes):
    """f(x) of MPSCNNNeuron.h, in torch ops (float64, differentiable)."""
    if t == NT.NONE:
        return x
    if t == NT.RELU:
        return torch.where(x >= 0, x, a * x)
    if t == NT.LINEAR:
        return a * x + b
    if t == NT.SIGMOID:
        return 1 / (1 + torch.exp(-x))
    if t == NT.HARD_SIGMOID:
        return torch.clamp(a * x + b, 0, 1)
    if t == NT.TANH:
        return a * torch.tanh(b * x)
    if t == NT.ABSOLUTE:
        return torch.abs(x)
    if t == NT.SOFTPLUS:
        return a * torch.log1p(torch.exp(b * x))
    if t == NT.SOFTSIGN:
        return x / (1 + torch.abs(x))
    if t == NT.ELU:
        return torch.where(x >= 0, x, a * (torch.exp(x) - 1))
    if t == NT.PRELU:
        s = torch.as_tensor(slopes, dtype=x.dtype).reshape(1, -1, 1, 1)
        return torch.where(x >= 0, x, s * x)
    if t == NT.RELUN:
        return torch.clamp(torch.where(x >= 0, x, a * x), max=b)
    if t == NT.POWER:
        return (a * x + b) ** c
    if t == NT.EXPONENTIAL:
        return c ** (a * x + b)
    if t == NT.LOGARITHM:
        return torch.log(a * x + b) / np.log(c)
    if t == NT.GELU:
        return 0.5 * x * (1 + torch.erf(x / np.sqrt(2.0)))
    raise AssertionError(t)


def sample(rng, shape, kind, dtype=np.float32):
    x = rng.standard_normal(shape)
    if kind == "positive":
        x = np.abs(x) + 0.1
    # Keep values away from the kinks of relu-like functions so finite
    # differences stay on one side.
    x = np.where(np.abs(x) < 0.05, 0.3, x)
    return x.astype(dtype)


def descriptor(t, channels):
    a, b, c, _ = CASES[t]
    data = np.linspace(0.05, 0.3, channels).astype(np.float32) if t == NT.PRELU else None
    return mpsx.NNNeuronDescriptor(t, a, b, c, data=data), data


def reference(t, x, slopes):
    a, b, c, _ = CASES[t]
    return torch_neuron(t, torch.from_numpy(x.astype(np.float64)), a, b, c, slopes).numpy()


@pytest.mark.parametrize("t", list(NT), ids=lambda t: t.name)
@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (3, 8, 4, 1)])
def test_forward_matches_formula(device, rng, t, shape):
    x = sample(rng, shape, CASES[t][3])
    d, slopes = descriptor(t, shape[1])
    neuron = mpsx.CNNNeuron(device, d)
    y = read(device, lambda cb: neuron.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, reference(t, x, slopes), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("t", [NT.RELU, NT.SIGMOID, NT.GELU, NT.PRELU, NT.TANH])
def test_forward_float16(device, rng, t):
    x = sample(rng, (2, 4, 6, 5), None, np.float16)
    d, slopes = descriptor(t, 4)
    neuron = mpsx.CNNNeuron(device, d)
    image = mpsx.Image.from_numpy(device, x)
    assert image.data_type == mpsx.DataType.FLOAT16
    y = read(device, lambda cb: neuron.encode(cb, image))
    assert y.dtype == np.float16
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y, reference(t, x.astype(np.float32), slopes), rtol=rtol, atol=atol)


@pytest.mark.parametrize("t", list(NT), ids=lambda t: t.name)
def test_gradient_matches_autograd(device, rng, t):
    shape = (2, 3, 4, 5)
    x = sample(rng, shape, CASES[t][3])
    dy = rng.standard_normal(shape).astype(np.float32)
    d, slopes = descriptor(t, shape[1])
    neuron, gradient = mpsx.CNNNeuron(device, d), mpsx.CNNNeuronGradient(device, d)
    _, dx = kernel_forward_and_gradient(device, x, dy, neuron, gradient)
    a, b, c, _ = CASES[t]
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    torch_neuron(t, xt, a, b, c, slopes).backward(torch.from_numpy(dy.astype(np.float64)))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("t", [NT.SIGMOID, NT.SOFTPLUS, NT.ELU, NT.GELU, NT.POWER, NT.LOGARITHM, NT.EXPONENTIAL])
def test_gradient_finite_differences(device, rng, t):
    shape = (1, 2, 3, 3)
    x = sample(rng, shape, CASES[t][3]).astype(np.float64)
    dy = rng.standard_normal(shape)
    d, _ = descriptor(t, shape[1])
    neuron, gradient = mpsx.CNNNeuron(device, d), mpsx.CNNNeuronGradient(device, d)
    numeric = forward_finite_differences(device, neuron, x, dy)
    _, dx = kernel_forward_and_gradient(device, x.astype(np.float32), dy.astype(np.float32), neuron, gradient)
    np.testing.assert_allclose(dx, numeric, rtol=2e-2, atol=2e-3)


def test_batch_of_images_and_states(device, rng):
    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    relu = mpsx.NNNeuronDescriptor(NT.RELU)
    neuron, gradient = mpsx.CNNNeuron(device, relu), mpsx.CNNNeuronGradient(device, relu)
    y1, y2, dx = batch_and_items_forward_and_gradient(device, x, dy, neuron, gradient)
    np.testing.assert_array_equal(y1, np.maximum(x, 0))
    np.testing.assert_array_equal(y2, np.maximum(x, 0))
    np.testing.assert_array_equal(dx, np.where(x >= 0, dy, 0))


def test_clip_rect_offset_and_channel_offset(device, rng):
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(NT.ABSOLUTE))
    destination = mpsx.Image.from_numpy(device, np.full((1, 8, 5, 5), 7.0, np.float32))
    neuron.offset = (1, 2)
    neuron.clip_rect = (1, 0, 0, 3, 2, 1)
    neuron.destination_feature_channel_offset = 4
    y = read(device, lambda cb: neuron.encode(cb, mpsx.Image.from_numpy(device, x), destination))
    expected = np.full((1, 8, 5, 5), 7.0, np.float32)
    # clipRect.origin (1, 0) reads source (offset.x, offset.y) = (1, 2).
    expected[0, 4:8, 0:2, 1:4] = np.abs(x[0, :, 2:4, 1:4])
    np.testing.assert_array_equal(y, expected)


def test_source_feature_channel_offset(device, rng):
    x = rng.standard_normal((2, 8, 3, 3)).astype(np.float32)
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(NT.LINEAR, 2.0, 1.0))
    neuron.source_feature_channel_offset = 4
    y = read(device, lambda cb: neuron.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, 2 * x[:, 4:] + 1, rtol=1e-6)


def test_padding_policy_sets_offset_and_size(device, rng):
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(NT.RELU))
    image = mpsx.Image.from_numpy(device, rng.standard_normal((2, 3, 7, 9)).astype(np.float32))
    neuron.offset = (5, 5)
    d = neuron.destination_image_descriptor(image)
    assert (d.number_of_images, d.feature_channels, d.height, d.width) == (2, 3, 7, 9)
    assert tuple(neuron.offset) == (5, 5, 0)  # a query changes nothing
    y = read(device, lambda cb: neuron.encode(cb, image))  # the encode that returns an image applies the policy
    assert tuple(neuron.offset) == (0, 0, 0) and y.shape == (2, 3, 7, 9)


def test_errors(device, rng):
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    relu = mpsx.NNNeuronDescriptor(NT.RELU)
    neuron, gradient = mpsx.CNNNeuron(device, relu), mpsx.CNNNeuronGradient(device, relu)
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    with pytest.raises(TypeError):
        neuron.encode(cb, None)
    with pytest.raises(TypeError):
        neuron.encode(cb, x)
    with pytest.raises(mpsx.ShapeError, match="at least 3 feature channels, given 2"):
        neuron.destination_feature_channel_offset = 0
        neuron.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=2)))
    neuron.destination_feature_channel_offset = 2
    with pytest.raises(ValueError, match="multiple of 4; given 2"):
        neuron.encode(cb, image)
    neuron.destination_feature_channel_offset = 0
    with pytest.raises(ValueError, match="PReLU"):
        mpsx.NNNeuronDescriptor(NT.PRELU)
    with pytest.raises(ValueError):
        mpsx.NNNeuronDescriptor(99)
    with pytest.raises(ValueError, match=r"PReLU data holds one slope per feature channel, at most 1073741824; given "
                                         r"1073741825"):  # refused before a copy of 4 GiB is made
        mpsx.NNNeuronDescriptor(NT.PRELU, data=np.broadcast_to(np.float32(0.1), (2**30 + 1,)))
    slopes = np.linspace(0.1, 0.3, 3, dtype=np.float32)
    np.testing.assert_array_equal(mpsx.NNNeuronDescriptor(NT.PRELU, data=slopes).data, slopes)
    uint8 = mpsx.Image.from_numpy(device, np.zeros((1, 3, 4, 4), np.uint8))
    with pytest.raises(TypeError, match="float32 or float16"):
        neuron.encode(cb, image, uint8)
    _, state = neuron.encode(cb, image, destination_state=True)
    other = mpsx.Image.from_numpy(device, x)
    with pytest.raises(mpsx.StateError, match="another batch"):
        gradient.encode(cb, other, other, state)
    with pytest.raises(mpsx.StateError, match="was filled for source images of 1x3x4x4 .*, given 2x3x4x4"):
        neuron.encode(cb, mpsx.Image.from_numpy(device, np.concatenate([x, x])), destination_state=state)
    with pytest.raises(mpsx.ShapeError, match="source gradient"):
        gradient.encode(cb, mpsx.Image.from_numpy(device, x[:, :2]), image, state)
    for count in (2, 4):  # slopes are one per channel exactly
        slopes = mpsx.NNNeuronDescriptor(NT.PRELU, data=np.full(count, 0.1, np.float32))
        for kernel in (mpsx.CNNNeuron(device, slopes), mpsx.CNNNeuronGradient(device, slopes)):
            with pytest.raises(mpsx.ShapeError, match=f"has {count} slopes; the source image has 3 feature channels"):
                kernel.encode(cb, image) if isinstance(kernel, mpsx.CNNNeuron) else kernel.encode(cb, image, image,
                                                                                                   state)
    assert cb.command_count == 1  # nothing of the failed calls was enqueued
    cb.commit()
    with pytest.raises(mpsx.StateError, match="encode onto a new command buffer"):
        neuron.encode(cb, image)
    cb.wait_until_completed()
    assert cb.status == "completed"


def test_kernel_properties_are_ints(device):
    # Cython's own conversion to a C integer truncated floats (1.5 became 1).
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(NT.RELU))
    gradient = mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(NT.RELU))
    for kernel, name, value in [(neuron, "destination_feature_channel_offset", 4.0),
                                (neuron, "source_feature_channel_offset", 0.5),
                                (gradient, "kernel_offset_x", 1.5), (gradient, "kernel_offset_y", "1")]:
        with pytest.raises(TypeError, match=f"{name} must be an int, given"):
            setattr(kernel, name, value)
        assert getattr(kernel, name) == 0
    with pytest.raises(TypeError, match="offset.y must be an int, given float 1.5"):
        neuron.offset = (1, 1.5, 0)
    with pytest.raises(TypeError, match="clip_rect.depth must be an int, given float 1.0"):
        neuron.clip_rect = (0, 0, 0, 2, 2, 1.0)
    with pytest.raises(ValueError, match=r"clip_rect.width must be between -2\*\*63 and 2\*\*63 - 1"):
        neuron.clip_rect = (0, 0, 0, 2**64, 2, 1)
    with pytest.raises(ValueError, match="padding must be an NNPaddingMethod .*, given -1"):
        neuron.padding = -1
    with pytest.raises(TypeError, match="padding must be an NNPaddingMethod or a padding policy .*given float"):
        neuron.padding = 16.0
    assert neuron.offset == (0, 0, 0) and neuron.clip_rect is None and neuron.padding == mpsx.NNPaddingMethod.SIZE_SAME


def test_properties_are_checked(device, rng):
    relu = mpsx.NNNeuronDescriptor(NT.RELU)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 4, 4)).astype(np.float32))
    destination = mpsx.Image(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=4))
    cb = device.command_queue.command_buffer()
    for name, value, error, message in [
            ("source_feature_channel_offset", -2**63, ValueError, "source_feature_channel_offset must be a "
                                                                  "non-negative multiple of 4; given -9223372036854775808"),
            ("source_feature_channel_offset", 4, mpsx.ShapeError, "source_feature_channel_offset 4 is past the source "
                                                                  "image's 4 feature channels"),
            ("clip_rect", (2**62, 0, 0, 2**62, 1, 1), ValueError, "clip_rect.x must be between -2147483648 and "
                                                                  "2147483648, given 4611686018427387904"),
            ("offset", (-2**31 - 1, 0, 0), ValueError, "offset.x must be between -2147483648 and 2147483648, given "
                                                       "-2147483649")]:
        neuron = mpsx.CNNNeuron(device, relu)
        setattr(neuron, name, value)
        for given in (destination, None):
            with pytest.raises(error, match=f"MPSCNNNeuron: {message}"):
                neuron.encode(cb, image, given)
    assert cb.command_count == 0  # refused before anything was enqueued
    # Offsets at their limits read nothing of the image.
    neuron = mpsx.CNNNeuron(device, relu)
    neuron.offset = (-2**31, 2**31, 0)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNNeuron: offset \(-2147483648, 2147483648\) with a 4x4 region "
                                              r"reads outside the 4x4 source image"):
        neuron.encode(cb, image, destination)
    # Any clip_rect size from 0 up clips to the destination; the clip origin reads offset (0, 0).
    neuron.offset = (0, 0, 0)
    neuron.clip_rect = (2, 0, 0, 2**63 - 1, 2**63 - 1, 2**63 - 1)
    y = read(device, lambda cb: neuron.encode(cb, image, destination))
    np.testing.assert_array_equal(y[..., 2:], np.maximum(image.to_numpy(), 0)[..., :2])


def test_gradient_kernels_refuse_states_of_other_kernels(device, rng):
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 6, 6)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 3, 3)).astype(np.float32))
    pooling = mpsx.CNNPoolingMax(device, 2, 2, 2, 2)
    gradient = mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(NT.RELU))
    cb = device.command_queue.command_buffer()
    _, state = pooling.encode(cb, image, destination_state=True)
    with pytest.raises(TypeError, match="MPSCNNNeuronGradient: expected the state of an MPSCNNNeuron forward encode, "
                                        "given one of an MPSCNNPoolingMax"):
        gradient.encode(cb, dy, image, state)
    with pytest.raises(TypeError, match="MPSCNNPoolingAverageGradient: expected the state of an MPSCNNPoolingAverage "
                                        "forward encode, given one of an MPSCNNPoolingMax"):
        mpsx.CNNPoolingAverageGradient(device, 2, 2, 2, 2).encode(cb, dy, image, state)
    cb.commit()
    cb.wait_until_completed()


@pytest.mark.parametrize("data_type", [mpsx.DataType.FLOAT32, mpsx.DataType.FLOAT16])
def test_gradient_destination_descriptor_has_the_gradient_data_type(device, rng, data_type):
    descriptor = mpsx.NNNeuronDescriptor(NT.SIGMOID)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    source = mpsx.ImageBatch.from_numpy(device, x)  # float32 forward source
    dy = x.astype(np.float16 if data_type == mpsx.DataType.FLOAT16 else np.float32)
    cb = device.command_queue.command_buffer()
    _, states = mpsx.CNNNeuron(device, descriptor).encode_batch(cb, source, destination_states=True)
    gradient = mpsx.CNNNeuronGradient(device, descriptor)
    d = gradient.destination_image_descriptor([mpsx.ImageBatch.from_numpy(device, dy), source], states)
    assert d.channel_format == data_type
    assert (d.number_of_images, d.feature_channels, d.height, d.width) == (2, 3, 5, 4)
    cb.commit()
    cb.wait_until_completed()


def test_gradient_is_zero_for_images_before_offset_z(device, rng):
    # The forward reads images 1.. only (offset.z 1): image 0 gets no gradient.
    x = rng.standard_normal((3, 4, 2, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 4, 2, 3)).astype(np.float32)
    descriptor = mpsx.NNNeuronDescriptor(NT.TANH, 1.0, 1.0)
    neuron, gradient = mpsx.CNNNeuron(device, descriptor), mpsx.CNNNeuronGradient(device, descriptor)
    neuron.offset = (0, 0, 1)
    source = mpsx.ImageBatch.from_numpy(device, x)
    destination = mpsx.ImageBatch.from_numpy(device, np.ones_like(x))  # ones where nothing is written
    cb = device.command_queue.command_buffer()
    _, state = neuron.encode_batch(cb, source, destination_states=True)
    dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), source, state,
                               destination_gradients=destination)
    dx.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    result = dx.to_numpy()
    np.testing.assert_array_equal(result[0], 0)
    np.testing.assert_allclose(result[1:], dy / np.cosh(x[1:]) ** 2, rtol=1e-5, atol=1e-6)

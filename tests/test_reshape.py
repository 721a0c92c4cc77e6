"""NNPad, NNReshape and their gradients: the pad against numpy.pad and torch.nn.functional.pad autograd (MIRROR is
torch's and numpy's "reflect", CLAMP "replicate"/"edge", MIRROR_WITH_EDGE numpy's "symmetric"), the channel padding of
the header's example, the reshape against numpy in height x width x channels order, gradients against finite
differences with forward and gradient on separate command buffers, and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import assert_uninitialized_raise, finite_difference_gradient, read, tolerance

E = mpsx.ImageEdgeMode
NUMPY_MODES = {E.ZERO: "constant", E.CONSTANT: "constant", E.CLAMP: "edge", E.MIRROR: "reflect",
               E.MIRROR_WITH_EDGE: "symmetric"}


def numpy_pad(x, before, after, mode, fill=0.0):
    """x (N, C, H, W) padded by before/after = (x, y, channel)."""
    widths = ((0, 0), (before[2], after[2]), (before[1], after[1]), (before[0], after[0]))
    if mode in (E.ZERO, E.CONSTANT):
        return np.pad(x, widths, mode="constant", constant_values=fill if mode == E.CONSTANT else 0.0)
    return np.pad(x, widths, mode=NUMPY_MODES[mode])


def numpy_pad_gradient(dy, shape, before, after, mode):
    """The transpose of numpy_pad, from the source index numpy_pad puts at each padded element."""
    n, c, h, w = shape
    index = np.arange(1, c * h * w + 1, dtype=np.float64).reshape(1, c, h, w)
    source = numpy_pad(index, before, after, E.ZERO if mode == E.CONSTANT else mode).astype(np.int64).reshape(-1) - 1
    keep = source >= 0
    dx = np.zeros((n, c * h * w))
    for i in range(n):
        np.add.at(dx[i], source[keep], dy[i].reshape(-1)[keep])
    return dx.reshape(shape)


def hwc_reshape(x, w, h, c):
    """Each image's elements in height x width x channels order, laid into (c, h, w) in the same order."""
    n = x.shape[0]
    return x.transpose(0, 2, 3, 1).reshape(n, h, w, c).transpose(0, 3, 1, 2)


def run_on_separate_buffers(device, x, dy, forward_encode, gradient):
    """y and dx: the forward encode committed and completed on one command buffer, the gradient on another with the
    state the forward returned."""
    source = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    y, state = forward_encode(cb, source)
    y.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    dx = read(device, lambda cb2: gradient.encode(cb2, mpsx.Image.from_numpy(device, dy), source, state))
    return np.asarray(y), dx


MODES = [E.ZERO, E.CONSTANT, E.CLAMP, E.MIRROR, E.MIRROR_WITH_EDGE]
PADDINGS = [((0, 0, 0), (0, 0, 0)), ((2, 1, 0), (1, 3, 0)), ((1, 0, 2), (0, 2, 1)), ((3, 4, 3), (5, 2, 2))]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("before,after", PADDINGS)
def test_pad_forward_and_gradient_match_numpy(device, rng, mode, before, after):
    shape = (2, 3, 4, 5)
    x = rng.standard_normal(shape).astype(np.float32)
    pad = mpsx.NNPad(device, before, after)
    pad.edge_mode = mode
    pad.fill_value = 1.5
    expected = numpy_pad(x, before, after, mode, 1.5)
    dy = rng.standard_normal(expected.shape).astype(np.float32)
    y, dx = run_on_separate_buffers(device, x, dy, lambda cb, s: pad.encode(cb, s, destination_state=True),
                                    mpsx.NNPadGradient(device))
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_allclose(dx, numpy_pad_gradient(dy.astype(np.float64), shape, before, after, mode), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("mode,torch_mode", [(E.ZERO, "constant"), (E.CLAMP, "replicate"), (E.MIRROR, "reflect")],
                         ids=["constant", "replicate", "reflect"])
def test_pad_matches_torch_autograd(device, rng, mode, torch_mode):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    before, after = (2, 1, 0), (3, 4, 0)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = F.pad(xt, (before[0], after[0], before[1], after[1]), mode=torch_mode)
    dy = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
    yt.backward(torch.tensor(dy, dtype=torch.float64))
    pad = mpsx.NNPad(device, before, after)
    pad.edge_mode = mode
    y, dx = run_on_separate_buffers(device, x, dy, lambda cb, s: pad.encode(cb, s, destination_state=True),
                                    pad.gradient_kernels()[0])
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_pad_header_examples(device):
    """MPSNNPadGradient's examples: CLAMP and MIRROR over 3 pixels in x, and MPSNNPad's channel example (slice from
    channel 1 of 3 channels, 2 before, 3 after, into the destination from channel 4)."""
    x = np.array([[[[1.0, 2.0, 3.0]]]], np.float32)
    dy = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 1, 8)
    for mode, before, after, expected_y, expected_dx in (
            (E.CLAMP, (2, 0, 0), (3, 0, 0), [1, 1, 1, 2, 3, 3, 3, 3], [1 + 2 + 3, 4, 5 + 6 + 7 + 8]),
            (E.MIRROR, (4, 0, 0), (1, 0, 0), [1, 2, 3, 2, 1, 2, 3, 2], [1 + 5, 2 + 4 + 6 + 8, 3 + 7])):
        pad = mpsx.NNPad(device, before, after)
        pad.edge_mode = mode
        y, dx = run_on_separate_buffers(device, x, dy, lambda cb, s: pad.encode(cb, s, destination_state=True),
                                        mpsx.NNPadGradient(device))
        np.testing.assert_array_equal(y.reshape(-1), expected_y)
        np.testing.assert_array_equal(dx.reshape(-1), expected_dx)
    source = np.arange(6, dtype=np.float32).reshape(1, 6, 1, 1) + 10  # x0..x5 = 10..15
    for mode, expected in ((E.ZERO, [0, 0, 11, 12, 13, 0, 0, 0]),
                           (E.MIRROR_WITH_EDGE, [12, 11, 11, 12, 13, 13, 12, 11])):
        pad = mpsx.NNPad(device, (0, 0, 2), (0, 0, 3))
        pad.edge_mode = mode
        pad.source_feature_channel_offset = 0  # MPS's offset 1 is not a multiple of 4: slice 1..3 by hand below
        destination = mpsx.Image.from_numpy(device, np.full((1, 13, 1, 1), -1.0, np.float32))
        pad.destination_feature_channel_offset = 4
        y = read(device, lambda cb: pad.encode(cb, mpsx.Image.from_numpy(device, source[:, 1:4]), destination))
        np.testing.assert_array_equal(y.reshape(-1), [-1] * 4 + expected + [-1])


def test_pad_channel_slice_and_fill_value_array(device, rng):
    x = rng.standard_normal((2, 7, 3, 2)).astype(np.float32)
    fill = np.arange(1, 10, dtype=np.float32)
    pad = mpsx.NNPad(device, (1, 0, 2), (0, 1, 1), fill_value_array=fill)
    pad.edge_mode = E.CONSTANT
    pad.fill_value = 99.0  # ignored where an array was given
    pad.source_feature_channel_offset = 4
    pad.source_feature_channel_max_count = 2  # channels 4 and 5
    dy = rng.standard_normal((2, 5, 4, 3)).astype(np.float32)
    y, dx = run_on_separate_buffers(device, x, dy, lambda cb, s: pad.encode(cb, s, destination_state=True),
                                    mpsx.NNPadGradient(device))
    expected = np.broadcast_to(fill[:5].reshape(1, 5, 1, 1), (2, 5, 4, 3)).copy()
    expected[:, 2:4, 0:3, 1:3] = x[:, 4:6]
    np.testing.assert_array_equal(y, expected)
    expected_dx = np.zeros_like(x)  # channels the forward pass did not read get 0
    expected_dx[:, 4:6] = dy[:, 2:4, 0:3, 1:3]
    np.testing.assert_array_equal(dx, expected_dx)
    np.testing.assert_array_equal(pad.fill_value_array, fill)


def test_pad_into_destination_with_offset_and_clip_rect(device, rng):
    # Destination pixel (x, y) of the clip rect reads source pixel offset + (x, y) - clip_rect.origin.
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    pad = mpsx.NNPad(device)
    pad.edge_mode = E.MIRROR
    pad.offset = (-2, -1)
    pad.clip_rect = (1, 1, 0, 6, 4, 1)
    destination = mpsx.Image.from_numpy(device, np.full((1, 2, 6, 8), 5.0, np.float32))
    y = read(device, lambda cb: pad.encode(cb, mpsx.Image.from_numpy(device, x), destination))
    expected = np.full((1, 2, 6, 8), 5.0, np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 4), (2, 4)), mode="reflect")  # rows -1.., columns -2..
    expected[:, :, 1:5, 1:7] = padded[:, :, 0:4, 0:6]
    np.testing.assert_array_equal(y, expected)


def test_pad_batch_and_float16(device, rng):
    x = rng.standard_normal((3, 2, 4, 3)).astype(np.float16)
    pad = mpsx.NNPad(device, (1, 2, 1), (2, 1, 0))
    pad.edge_mode = E.MIRROR_WITH_EDGE
    source = mpsx.ImageBatch.from_numpy(device, x)
    expected = numpy_pad(x.astype(np.float32), (1, 2, 1), (2, 1, 0), E.MIRROR_WITH_EDGE)
    dy = rng.standard_normal(expected.shape).astype(np.float16)

    def encode(cb):
        y, states = pad.encode_batch(cb, source, destination_states=True)
        return y, mpsx.NNPadGradient(device).encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), source, states)

    y, dx = read(device, encode)
    assert y.dtype == np.float16 and y.shape == expected.shape
    np.testing.assert_array_equal(y.astype(np.float32), expected)
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(dx.astype(np.float32),
                               numpy_pad_gradient(dy.astype(np.float64), x.shape, (1, 2, 1), (2, 1, 0),
                                                  E.MIRROR_WITH_EDGE),
                               rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode", [E.CLAMP, E.MIRROR, E.MIRROR_WITH_EDGE], ids=lambda m: m.name)
def test_pad_gradient_finite_differences(device, rng, mode):
    x = rng.standard_normal((1, 2, 3, 2))
    before, after = (3, 1, 1), (2, 2, 2)
    pad = mpsx.NNPad(device, before, after)
    pad.edge_mode = mode
    dy = rng.standard_normal((1, 5, 6, 7))

    def loss(values):
        y = read(device, lambda cb: pad.encode(cb, mpsx.Image.from_numpy(device, values.astype(np.float32))))
        return float(np.sum(y.astype(np.float64) * dy))

    numeric = finite_difference_gradient(loss, x, 1e-2)
    _, dx = run_on_separate_buffers(device, x.astype(np.float32), dy.astype(np.float32),
                                    lambda cb, s: pad.encode(cb, s, destination_state=True), mpsx.NNPadGradient(device))
    np.testing.assert_allclose(dx, numeric, rtol=1e-3, atol=1e-3)


def test_pad_destination_descriptor_and_properties(device):
    pad = mpsx.NNPad(device, mpsx.ImageCoordinate(1, 2, 3), (4, 5, 6))
    source = mpsx.Image.from_numpy(device, np.zeros((2, 3, 7, 8), np.float32))
    d = pad.destination_image_descriptor(source)
    assert (d.width, d.height, d.feature_channels, d.number_of_images) == (8 + 5, 7 + 7, 3 + 9, 2)
    assert pad.offset == (0, 0, 0)  # the query leaves offset as it was
    assert pad.padding_size_before == mpsx.ImageCoordinate(1, 2, 3)
    assert pad.padding_size_after == (4, 5, 6)
    assert (pad.fill_value, pad.fill_value_array, pad.edge_mode) == (0.0, None, E.ZERO)
    pad.padding_size_before = (0, 1, 0)
    pad.fill_value = -2.5
    assert pad.padding_size_before == (0, 1, 0) and pad.fill_value == -2.5
    y = read(device, lambda cb: pad.encode(cb, source))
    assert y.shape == (2, 9, 7 + 1 + 5, 8 + 4)
    assert pad.offset == (0, -1, 0)  # the encode that makes its destination sets it
    assert mpsx.NNPad(device).destination_image_descriptor(source).width == 8


def test_pad_bad_input(device):
    with pytest.raises(ValueError, match="padding_size_before.x must be at least 0, given -1"):
        mpsx.NNPad(device, (-1, 0, 0))
    with pytest.raises(ValueError, match="padding_size_after.channel must be at least 0"):
        mpsx.NNPad(device, (0, 0, 0), (0, 0, -3))
    with pytest.raises(TypeError, match="must be \\(x, y, channel\\)"):
        mpsx.NNPad(device, (1, 2))
    pad = mpsx.NNPad(device)
    with pytest.raises(ValueError, match="at least 0"):
        pad.padding_size_after = (0, -2, 0)
    # A padding above kMaxDimension, and a padded size above it.
    with pytest.raises(ValueError, match="padding_size_before.x must be between 0 and 1073741824"):
        mpsx.NNPad(device, (2**30 + 1, 0, 0))
    source = mpsx.Image.from_numpy(device, np.zeros((1, 1, 2, 2), np.float32))
    big = mpsx.NNPad(device, (2**30, 0, 0), (2**30, 0, 0))
    with pytest.raises(ValueError, match="sizes must be at most 1073741824"):
        big.destination_image_descriptor(source)
    # A fill value array shorter than the channels written, with CONSTANT only.
    short = mpsx.NNPad(device, (0, 0, 1), (0, 0, 1), fill_value_array=[1.0, 2.0])
    destination = mpsx.Image.from_numpy(device, np.full((1, 3, 2, 2), 7.0, np.float32))
    cb = device.command_queue.command_buffer()
    short.encode(cb, source, destination)  # ZERO: the array is not read
    short.edge_mode = E.CONSTANT
    with pytest.raises(ValueError, match="fill value array holds 2 values; this encode writes 3"):
        short.encode(cb, source, destination)
    cb.commit()
    cb.wait_until_completed()
    # The extended edge modes are NNPad's alone.
    pooling = mpsx.CNNPoolingMax(device, 2, 2)
    with pytest.raises(ValueError, match="MPSCNNPoolingMax: edge_mode must be ZERO or CLAMP, given MIRROR"):
        pooling.edge_mode = E.MIRROR
    with pytest.raises(ValueError, match="secondary_edge_mode must be ZERO or CLAMP, given CONSTANT"):
        mpsx.CNNAdd(device).secondary_edge_mode = E.CONSTANT
    assert pooling.edge_mode == E.ZERO
    # A state of another family, and a destination too small.
    with pytest.raises(ValueError, match="expected a destination image of at least 3 feature channels"):
        read(device, lambda cb: mpsx.NNPad(device, (0, 0, 1), (0, 0, 1)).encode(
            cb, source, mpsx.Image.from_numpy(device, np.zeros((1, 2, 2, 2), np.float32))))
    _, reshape_state = read_state(device, mpsx.NNReshape(device), source)
    with pytest.raises(TypeError, match="expected the state of an MPSNNPad forward encode"):
        mpsx.NNPadGradient(device).encode(device.command_queue.command_buffer(), source, source, reshape_state)


def read_state(device, kernel, source, **kwargs):
    cb = device.command_queue.command_buffer()
    y, state = kernel.encode(cb, source, destination_state=True, **kwargs)
    y.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    return np.asarray(y), state


RESHAPES = [((2, 3, 4, 5), (10, 6, 1)), ((1, 6, 2, 2), (3, 2, 4)), ((3, 5, 1, 1), (1, 1, 5)), ((2, 4, 3, 2), (1, 8, 3))]


@pytest.mark.parametrize("shape,target", RESHAPES)
def test_reshape_forward_and_gradient_match_numpy(device, rng, shape, target):
    x = rng.standard_normal(shape).astype(np.float32)
    w, h, c = target
    dy = rng.standard_normal((shape[0], c, h, w)).astype(np.float32)
    reshape = mpsx.NNReshape(device)
    y, dx = run_on_separate_buffers(
        device, x, dy, lambda cb, s: reshape.encode(cb, s, destination_state=True, reshaped_width=w,
                                                    reshaped_height=h, reshaped_feature_channels=c),
        mpsx.NNReshapeGradient(device))
    np.testing.assert_array_equal(y, hwc_reshape(x, w, h, c))
    # The gradient is the reshape back, checked against autograd of the same permutation in torch.
    xt = torch.tensor(x, requires_grad=True)
    yt = xt.permute(0, 2, 3, 1).reshape(shape[0], h, w, c).permute(0, 3, 1, 2)
    yt.backward(torch.tensor(dy))
    np.testing.assert_array_equal(dx, xt.grad.numpy())


def test_reshape_gradient_finite_differences(device, rng):
    x = rng.standard_normal((1, 3, 2, 2))
    dy = rng.standard_normal((1, 2, 3, 2))
    reshape = mpsx.NNReshape(device)
    sizes = dict(reshaped_width=2, reshaped_height=3, reshaped_feature_channels=2)

    def loss(values):
        y = read(device, lambda cb: reshape.encode(cb, mpsx.Image.from_numpy(device, values.astype(np.float32)),
                                                   **sizes))
        return float(np.sum(y.astype(np.float64) * dy))

    numeric = finite_difference_gradient(loss, x, 1e-2)
    _, dx = run_on_separate_buffers(device, x.astype(np.float32), dy.astype(np.float32),
                                    lambda cb, s: reshape.encode(cb, s, destination_state=True, **sizes),
                                    mpsx.NNReshapeGradient(device))
    np.testing.assert_allclose(dx, numeric, rtol=1e-3, atol=1e-3)


def test_reshape_batch_destination_slice_and_descriptor(device, rng):
    x = rng.standard_normal((2, 6, 2, 3)).astype(np.float16)
    reshape = mpsx.NNReshape(device)
    d = reshape.destination_image_descriptor(mpsx.Image.from_numpy(device, x), reshaped_width=1,
                                             reshaped_height=4, reshaped_feature_channels=9)
    assert (d.width, d.height, d.feature_channels, d.number_of_images) == (1, 4, 9, 2)
    assert reshape.destination_image_descriptor(mpsx.Image.from_numpy(device, x)).feature_channels == 6
    # encode_batch with sizes; then into a given destination, which sizes the reshape, from a channel slice.
    source = mpsx.ImageBatch.from_numpy(device, x)
    y = read(device, lambda cb: reshape.encode_batch(cb, source, reshaped_width=3, reshaped_height=12,
                                                     reshaped_feature_channels=1))
    np.testing.assert_array_equal(y, hwc_reshape(x, 3, 12, 1))
    reshape.source_feature_channel_offset = 4  # channels 4 and 5
    destination = mpsx.Image.from_numpy(device, np.full((2, 3, 2, 2), 9.0, np.float16))
    reshape.destination_feature_channel_offset = 0
    dy = rng.standard_normal((2, 3, 2, 2)).astype(np.float16)

    def encode(cb):
        image = mpsx.Image.from_numpy(device, x)
        out, state = reshape.encode(cb, image, destination, destination_state=True)
        return out, mpsx.NNReshapeGradient(device).encode(cb, mpsx.Image.from_numpy(device, dy), image, state)

    y, dx = read(device, encode)
    np.testing.assert_array_equal(y, hwc_reshape(x[:, 4:6], 2, 2, 3))
    expected_dx = np.zeros_like(x)
    expected_dx[:, 4:6] = hwc_reshape(dy, 3, 2, 2)
    np.testing.assert_array_equal(dx, expected_dx)


def test_reshape_bad_input(device):
    source = mpsx.Image.from_numpy(device, np.zeros((1, 3, 2, 2), np.float32))
    reshape = mpsx.NNReshape(device)
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match="holds 12 elements per image; the reshaped 5x1x2 holds 10"):
        reshape.encode(cb, source, reshaped_width=5, reshaped_height=1, reshaped_feature_channels=2)
    with pytest.raises(TypeError, match="together, or none"):
        reshape.encode(cb, source, reshaped_width=12)
    with pytest.raises(ValueError, match="reshaped_height must be at least 1, given 0"):
        reshape.encode(cb, source, reshaped_width=12, reshaped_height=0, reshaped_feature_channels=1)
    with pytest.raises(ValueError, match="reshaped_feature_channels must be at most 1073741824"):
        reshape.encode(cb, source, reshaped_width=1, reshaped_height=1, reshaped_feature_channels=2**31)
    # Sizes whose element count overflows int64.
    with pytest.raises(ValueError, match="overflows"):
        reshape.encode(cb, source, reshaped_width=2**30, reshaped_height=2**30, reshaped_feature_channels=2**30)
    # A destination whose element count differs, or whose size differs from the sizes given.
    with pytest.raises(ValueError, match="holds 12 elements per image; the reshaped 2x2x2 holds 8"):
        reshape.encode(cb, source, mpsx.Image.from_numpy(device, np.zeros((1, 2, 2, 2), np.float32)))
    with pytest.raises(ValueError, match="expected a 3x4 destination"):
        reshape.encode(cb, source, mpsx.Image.from_numpy(device, np.zeros((1, 1, 3, 4), np.float32)),
                       reshaped_width=3, reshaped_height=4, reshaped_feature_channels=1)
    reshape.offset = (1, 0)
    with pytest.raises(ValueError, match="offset.x and offset.y must be 0"):
        reshape.encode(cb, source)
    reshape.offset = (0, 0)
    reshape.clip_rect = (0, 0, 0, 1, 1, 1)
    with pytest.raises(ValueError, match="clip_rect's x, y, width and height must keep their defaults"):
        reshape.encode(cb, source)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    _, pad_state = read_state(device, mpsx.NNPad(device), source)
    with pytest.raises(TypeError, match="expected the state of an MPSNNReshape forward encode"):
        mpsx.NNReshapeGradient(device).encode(device.command_queue.command_buffer(), source, source, pad_state)


def test_gradient_kernels_and_persistence(device, tmp_path):
    pad = mpsx.NNPad(device, (1, 2, 0), (0, 1, 4), fill_value_array=np.ones(7))
    pad.edge_mode = E.CONSTANT
    pad.fill_value = 3.0
    assert [type(k) for k in pad.gradient_kernels()] == [mpsx.NNPadGradient]
    assert [type(k) for k in mpsx.NNReshape(device).gradient_kernels()] == [mpsx.NNReshapeGradient]
    path = tmp_path / "pad.mpsx"
    mpsx.save(pad, path)
    loaded = mpsx.load(path, device)
    assert (loaded.padding_size_before, loaded.padding_size_after) == ((1, 2, 0), (0, 1, 4))
    assert (loaded.edge_mode, loaded.fill_value) == (E.CONSTANT, 3.0)
    np.testing.assert_array_equal(loaded.fill_value_array, np.ones(7))


@pytest.mark.parametrize("cls", [mpsx.NNPad, mpsx.NNPadGradient, mpsx.NNReshape, mpsx.NNReshapeGradient])
def test_made_without_init(device, cls):
    obj = assert_uninitialized_raise(cls, ("padding_size_before", "padding_size_after", "fill_value",
                                           "fill_value_array", "edge_mode", "device"), only_those_it_has=True)
    source = mpsx.Image.from_numpy(device, np.zeros((1, 1, 2, 2), np.float32))
    with pytest.raises(TypeError):
        obj.destination_image_descriptor(source)
    with pytest.raises(TypeError):
        obj.encode(device.command_queue.command_buffer(), source)


def test_gradients_refuse_wrong_shapes(device, rng):
    x = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 4)).astype(np.float32))
    for forward, gradient, result_shape in (
            (mpsx.NNPad(device, (1, 1, 1), (1, 0, 2)), mpsx.NNPadGradient(device), (1, 5, 4, 6)),
            (mpsx.NNReshape(device), mpsx.NNReshapeGradient(device), (1, 4, 2, 3))):
        cb = device.command_queue.command_buffer()
        kwargs = {} if isinstance(forward, mpsx.NNPad) else dict(reshaped_width=3, reshaped_height=2,
                                                                 reshaped_feature_channels=4)
        y, state = forward.encode(cb, x, destination_state=True, **kwargs)
        assert y.shape == result_shape
        count = cb.command_count
        wrong = mpsx.Image.from_numpy(device, np.zeros((1, 2, 3, 4), np.float32))
        with pytest.raises(ValueError, match="expected a source gradient shaped as the forward result, "
                                             + "x".join(map(str, result_shape))):
            gradient.encode(cb, wrong, x, state)
        with pytest.raises(ValueError, match="expected a destination gradient of 1x2x3x4"):
            gradient.encode(cb, mpsx.Image.from_numpy(device, np.zeros(result_shape, np.float32)), x, state,
                            mpsx.Image.from_numpy(device, np.zeros((1, 2, 4, 3), np.float32)))
        assert cb.command_count == count  # nothing of the refused calls was encoded
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed"

"""NNGramMatrixCalculation and its gradient against torch.einsum and autograd
(float64) and central finite differences: batches, per-image states on
separate command buffers, the alpha the state carries, channel slices,
float16, and bad input."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import (assert_uninitialized_raise, batch_forward_and_gradient, forward_finite_differences,
                     kernel_forward_and_gradient, read, round_trips, run, tolerance)


def reference(x, alpha, dy=None):
    """G (N, C, 1, C), G[n, c, 0, f] = alpha * sum x[n, f] x[n, c], and with dy its source gradient (float64)."""
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    n, c = x.shape[:2]
    g = (alpha * torch.einsum("nfyx,ncyx->ncf", xt, xt)).reshape(n, c, 1, c)
    if dy is None:
        return g.detach().numpy()
    g.backward(torch.from_numpy(dy.astype(np.float64)))
    return g.detach().numpy(), xt.grad.numpy()


def kernels(device, alpha):
    return mpsx.NNGramMatrixCalculation(device, alpha), mpsx.NNGramMatrixCalculationGradient(device, alpha)


@pytest.mark.parametrize("alpha", [1.0, 0.25, -2.0])
@pytest.mark.parametrize("shape", [(1, 3, 4, 5), (2, 5, 3, 2), (3, 1, 1, 1), (2, 6, 1, 7), (2, 40, 5, 3), (1, 33, 3, 6)])
def test_forward_and_gradient_match_torch(device, rng, alpha, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    n, c = shape[:2]
    dy = rng.standard_normal((n, c, 1, c)).astype(np.float32)
    y, dx = batch_forward_and_gradient(device, x, dy, *kernels(device, alpha))
    expected_y, expected_dx = reference(x, alpha, dy)
    assert y.shape == (n, c, 1, c)
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)
    # One Image of the batch: the same.
    y1, dx1 = kernel_forward_and_gradient(device, x, dy, *kernels(device, alpha))
    np.testing.assert_allclose(y1, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx1, expected_dx, rtol=1e-4, atol=1e-5)


def test_result_is_symmetric_and_alpha_defaults_to_one(device, rng):
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    forward = mpsx.NNGramMatrixCalculation(device)
    assert forward.alpha == 1.0 and mpsx.NNGramMatrixCalculationGradient(device).alpha == 1.0
    d = forward.destination_image_descriptor(mpsx.Image.from_numpy(device, x))
    assert (d.number_of_images, d.feature_channels, d.height, d.width) == (2, 4, 1, 4)
    y = read(device, lambda cb: forward.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, reference(x, 1.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y[:, :, 0, :], y[:, :, 0, :].transpose(0, 2, 1), rtol=1e-6)


def test_gradient_matches_finite_differences(device, rng):
    x = rng.standard_normal((1, 2, 2, 3)).astype(np.float32)
    dy = rng.standard_normal((1, 2, 1, 2)).astype(np.float32)
    forward, gradient = kernels(device, 0.5)
    _, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient)
    np.testing.assert_allclose(dx, forward_finite_differences(device, forward, x, dy), rtol=1e-3, atol=1e-3)


def test_per_image_states_on_separate_command_buffers(device, rng):
    """Forward encodes of separate images, a state each, on one command buffer; later the gradients of each, in reverse order, on
    another, after the kernels' alphas changed: each uses the alpha of the forward encode that made its state,
    and the gradient kernel's alpha then reads it."""
    xs = [rng.standard_normal((1, 3, 2, 4)).astype(np.float32) for _ in range(3)]
    dys = [rng.standard_normal((1, 3, 1, 3)).astype(np.float32) for _ in range(3)]
    forward, gradient = mpsx.NNGramMatrixCalculation(device, 0.5), mpsx.NNGramMatrixCalculationGradient(device, 7.0)
    images = [mpsx.Image.from_numpy(device, x) for x in xs]

    def encode_forward(cb, image):
        y, state = forward.encode(cb, image, destination_state=True)
        y.synchronize(cb)
        return y, state

    ys, states = zip(*run(device, lambda cb: [encode_forward(cb, image) for image in images]))
    assert len({id(s) for s in states}) == 3
    forward.alpha = 3.0
    y_last, state_last = run(device, lambda cb: encode_forward(cb, images[2]))
    dxs = read(device, lambda cb: tuple(gradient.encode(cb, mpsx.Image.from_numpy(device, dys[i]), images[i],
                                                        states[i]) for i in (2, 1, 0)))[::-1]
    assert gradient.alpha == 0.5
    for x, dy, y, dx in zip(xs, dys, ys, dxs):
        expected_y, expected_dx = reference(x, 0.5, dy)
        np.testing.assert_allclose(y.to_numpy(), expected_y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)
    dx_last = read(device, lambda cb: gradient.encode(cb, mpsx.Image.from_numpy(device, dys[2]), images[2],
                                                      state_last))
    assert gradient.alpha == 3.0
    np.testing.assert_allclose(y_last.to_numpy(), reference(xs[2], 3.0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx_last, reference(xs[2], 3.0, dys[2])[1], rtol=1e-4, atol=1e-5)


def test_float16(device, rng):
    x = (rng.standard_normal((2, 3, 3, 3)) / 2).astype(np.float16)
    dy = rng.standard_normal((2, 3, 1, 3)).astype(np.float16)
    y, dx = batch_forward_and_gradient(device, x, dy, *kernels(device, 0.5))
    assert y.dtype == np.float16 and dx.dtype == np.float16
    expected_y, expected_dx = reference(x.astype(np.float32), 0.5, dy.astype(np.float32))
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y.astype(np.float32), expected_y, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx.astype(np.float32), expected_dx, rtol=rtol, atol=2 * atol)


def test_channel_slices(device, rng):
    """Channels 4..6 of 8 read (source offset 4, max count 3), the 3x3 matrices written from channel 4 of a
    given 8-channel destination 5 pixels wide; the gradient is zero outside the channels read."""
    x = rng.standard_normal((2, 8, 3, 2)).astype(np.float32)
    dy = rng.standard_normal((2, 8, 1, 5)).astype(np.float32)
    forward, gradient = kernels(device, 1.5)
    forward.source_feature_channel_offset = 4
    forward.source_feature_channel_max_count = 3
    forward.destination_feature_channel_offset = 4
    destination = mpsx.Image.from_numpy(device, np.full((2, 8, 1, 5), 9.0, np.float32))
    y, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient, destination)
    expected_y, expected_dx = reference(x[:, 4:7], 1.5, dy[:, 4:7, :, :3])
    np.testing.assert_allclose(y[:, 4:7, :, :3], expected_y, rtol=1e-5, atol=1e-5)
    assert (y[:, :4] == 9).all() and (y[:, 7:] == 9).all() and (y[:, :, :, 3:] == 9).all()
    np.testing.assert_allclose(dx[:, 4:7], expected_dx, rtol=1e-4, atol=1e-5)
    assert (dx[:, :4] == 0).all() and (dx[:, 7:] == 0).all()


def test_bad_input_enqueues_nothing(device, rng):
    forward, gradient = kernels(device, 1.0)
    x = mpsx.Image.from_numpy(device, rng.standard_normal((2, 3, 2, 2)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    forward.offset = (1, 0, 0)
    with pytest.raises(ValueError, match=r"offset and clip_rect must keep their defaults .*given offset \(1, 0, 0\)"):
        forward.encode(cb, x)
    with pytest.raises(ValueError, match="offset and clip_rect must keep their defaults"):
        forward.destination_image_descriptor(x)
    forward.offset = (0, 0, 0)
    forward.clip_rect = (0, 0, 0, 2, 1, 1)
    with pytest.raises(ValueError, match="offset and clip_rect must keep their defaults"):
        forward.encode(cb, x)
    forward.clip_rect = None
    narrow = mpsx.Image.from_numpy(device, np.zeros((2, 3, 1, 2), np.float32))
    with pytest.raises(mpsx.ShapeError, match="at least 3 pixels wide .* given 2"):
        forward.encode(cb, x, narrow)
    with pytest.raises(mpsx.ShapeError, match="expected a destination image of at least 3 feature channels"):
        forward.encode(cb, x, mpsx.Image.from_numpy(device, np.zeros((2, 2, 1, 3), np.float32)))
    y, state = forward.encode(cb, x, destination_state=True)
    count = cb.command_count
    with pytest.raises(mpsx.ShapeError, match=r"expected a source gradient shaped as the forward result, 2x3x1x3"):
        gradient.encode(cb, x, x, state)
    assert cb.command_count == count
    up_state = mpsx.CNNUpsamplingNearest(device, 2, 2).encode(cb, x, destination_state=True)[1]
    count = cb.command_count
    with pytest.raises(TypeError, match="expected the state of an MPSNNGramMatrixCalculation forward encode"):
        gradient.encode(cb, y, x, up_state)
    with pytest.raises(TypeError, match="expected a state made by an MPSNNGramMatrixCalculation's result_state"):
        forward.encode(cb, x, destination_state=up_state)
    assert cb.command_count == count
    for cls in (mpsx.NNGramMatrixCalculation, mpsx.NNGramMatrixCalculationGradient):
        with pytest.raises(ValueError, match="alpha must be finite, given nan"):
            cls(device, float("nan"))
        with pytest.raises(ValueError, match="alpha must be finite, given inf"):
            cls(device, 1e39)
        with pytest.raises(TypeError, match="alpha must be a float, given"):
            cls(device, "2")
        kernel = cls(device, 2.0)
        with pytest.raises(ValueError, match="alpha must be finite, given -inf"):
            kernel.alpha = float("-inf")
        assert kernel.alpha == 2.0
    cb.commit()
    cb.wait_until_completed()


def test_destinations_over_what_is_read_are_refused(device, rng):
    """The result is a sum over every pixel: no destination may share memory with the source, nor the destination
    gradient with the source (ValueError, nothing enqueued)."""
    forward, gradient = kernels(device, 1.0)
    x = mpsx.Image.from_numpy(device, rng.standard_normal((2, 3, 3, 3)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match="the destination image shares memory with the source image"):
        forward.encode(cb, x, x)
    y, state = forward.encode(cb, x, destination_state=True)
    count = cb.command_count
    with pytest.raises(ValueError, match="the destination gradient shares memory with the source image"):
        gradient.encode(cb, y, x, state, x)
    assert cb.command_count == count
    cb.commit()
    cb.wait_until_completed()


def test_a_destination_too_large_to_allocate(device):
    """2^24 source channels make a 2^24 x 2^24 matrix of 2^50 bytes: OutOfMemoryError (a MemoryError) before
    anything is enqueued."""
    channels = 1 << 24
    x = mpsx.Image.from_numpy(device, np.zeros((1, channels, 1, 1), np.float16))
    forward = mpsx.NNGramMatrixCalculation(device)
    d = forward.destination_image_descriptor(x)
    assert (d.feature_channels, d.height, d.width) == (channels, 1, channels)
    cb = device.command_queue.command_buffer()
    with pytest.raises(MemoryError):
        forward.encode(cb, x)
    assert cb.command_count == 0


def test_safe_without_init():
    for cls in (mpsx.NNGramMatrixCalculation, mpsx.NNGramMatrixCalculationGradient):
        assert_uninitialized_raise(cls, ["alpha", "device"])
        with pytest.raises(TypeError):
            cls.__new__(cls).alpha = 1.0


def test_saved_with_alpha(device, rng, tmp_path):
    x = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    for cls in (mpsx.NNGramMatrixCalculation, mpsx.NNGramMatrixCalculationGradient):
        kernel = cls(device, 0.75)
        kernel.alpha = -1.25
        for how, copied in round_trips(kernel, device, tmp_path / f"{cls.__name__}.mpsx").items():
            assert type(copied) is cls and copied.alpha == -1.25, how
    loaded = mpsx.persistence.copy(mpsx.NNGramMatrixCalculation(device, 0.5), device)
    y = read(device, lambda cb: loaded.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, reference(x, 0.5), rtol=1e-5, atol=1e-6)

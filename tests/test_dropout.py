"""CNNDropout, CNNDropoutGradient and CNNDropoutGradientState: the kept
fraction against a binomial bound, the 1/keep scaling exactly, forward and
gradient agreement with the mask, seeds, broadcast strides and bad input."""

import numpy as np
import pytest

import mpsx
from helpers import read, run, tolerance


def nonzero_input(rng, shape, dtype=np.float32):
    x = rng.standard_normal(shape)
    x = np.where(np.abs(x) < 0.1, 0.5, x)  # no zeros: y == 0 only where dropped
    return x.astype(dtype)


def forward(device, dropout, x, batch=False):
    """(y, mask) of one forward encode with its state synchronized."""
    image = (mpsx.ImageBatch if batch else mpsx.Image).from_numpy(device, x)

    def encode(cb):
        if batch:
            y, states = dropout.encode_batch(cb, image, destination_states=True)
            state = states[0]
        else:
            y, state = dropout.encode(cb, image, destination_state=True)
        y.synchronize(cb)
        state.synchronize(cb)
        return y, state

    y, state = run(device, encode)
    return np.asarray(y), state.mask_data()


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.8])
def test_kept_fraction_within_binomial_bound(device, rng, keep):
    shape = (1, 8, 40, 50)  # 16,000 independent elements
    x = nonzero_input(rng, shape)
    y, mask = forward(device, mpsx.CNNDropout(device, keep, 7), x)
    n = x.size
    kept = np.count_nonzero(y)
    # 5 standard deviations of a binomial(n, keep) count.
    assert abs(kept - n * keep) <= 5 * np.sqrt(n * keep * (1 - keep)), (kept, n * keep)
    assert mask.shape == (8, 40, 50) and mask.dtype == np.uint8
    assert set(np.unique(mask)) <= {0, 1}


@pytest.mark.parametrize("keep", [0.3, 0.7, 1.0])
def test_scaling_is_division_by_keep(device, rng, keep):
    x = nonzero_input(rng, (2, 5, 7, 9))
    y, mask = forward(device, mpsx.CNNDropout(device, keep, 11), x)
    kept = mask[None].astype(bool)
    expected = np.where(kept, x / np.float32(keep), np.float32(0))
    np.testing.assert_array_equal(y, expected)
    if keep == 1.0:
        np.testing.assert_array_equal(y, x)


def test_float16(device, rng):
    x = nonzero_input(rng, (2, 4, 6, 5), np.float16)
    y, mask = forward(device, mpsx.CNNDropout(device, 0.6, 3), x)
    assert y.dtype == np.float16
    expected = np.where(mask[None].astype(bool), x.astype(np.float32) / np.float32(0.6), 0)
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(y != 0, np.broadcast_to(mask[None].astype(bool), x.shape))


def test_one_mask_for_the_whole_batch(device, rng):
    x = nonzero_input(rng, (4, 3, 5, 6))
    dropout = mpsx.CNNDropout(device, 0.5, 5)
    image = mpsx.ImageBatch.from_numpy(device, x)

    def encode(cb):
        y, states = dropout.encode_batch(cb, image, destination_states=True)
        assert isinstance(states, mpsx.StateBatch) and len(states) == 4
        assert all(s is states[0] for s in states)
        assert isinstance(states[0], mpsx.CNNDropoutGradientState)
        states[0].synchronize(cb)
        y.synchronize(cb)
        return y, states

    y, states = run(device, encode)
    y = np.asarray(y)
    mask = states[0].mask_data().astype(bool)
    for i in range(4):
        np.testing.assert_array_equal(y[i] != 0, mask)


@pytest.mark.parametrize("keep", [0.4, 0.9])
def test_gradient_uses_the_forward_mask(device, rng, keep):
    shape = (3, 5, 6, 7)
    x = nonzero_input(rng, shape)
    dy = nonzero_input(rng, shape)
    dropout = mpsx.CNNDropout(device, keep, 99)
    gradient = mpsx.CNNDropoutGradient(device, keep, 99)
    source = mpsx.ImageBatch.from_numpy(device, x)

    def encode(cb):
        y, states = dropout.encode_batch(cb, source, destination_states=True)
        dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), source, states)
        for item in (y, dx, states[0]):
            item.synchronize(cb)
        return y, dx, states[0]

    y, dx, state = run(device, encode)
    y, dx, mask = np.asarray(y), np.asarray(dx), state.mask_data()
    np.testing.assert_array_equal(dx != 0, y != 0)
    np.testing.assert_array_equal(dx, np.where(mask[None].astype(bool), dy / np.float32(keep), np.float32(0)))


def test_gradient_is_the_derivative(device, rng):
    # The forward pass is linear in x for a fixed mask: d(sum(y * dy))/dx = dx.
    shape = (1, 2, 3, 4)
    x = nonzero_input(rng, shape).astype(np.float64)
    dy = rng.standard_normal(shape)
    dropout, gradient = mpsx.CNNDropout(device, 0.5, 1), mpsx.CNNDropoutGradient(device, 0.5, 1)

    def loss(values):
        y = read(device, lambda cb: dropout.encode(cb, mpsx.Image.from_numpy(device, values.astype(np.float32))))
        return float(np.sum(y.astype(np.float64) * dy))

    eps = 1e-2
    numeric = np.zeros_like(x)
    for i in np.ndindex(*shape):
        plus, minus = x.copy(), x.copy()
        plus[i] += eps
        minus[i] -= eps
        numeric[i] = (loss(plus) - loss(minus)) / (2 * eps)
    source = mpsx.Image.from_numpy(device, x.astype(np.float32))

    def encode(cb):
        _, state = dropout.encode(cb, source, destination_state=True)
        return gradient.encode(cb, mpsx.Image.from_numpy(device, dy.astype(np.float32)), source, state)

    np.testing.assert_allclose(read(device, encode), numeric, rtol=1e-3, atol=1e-4)


def test_same_seed_same_mask_other_seed_other_mask(device, rng):
    x = nonzero_input(rng, (1, 4, 16, 16))
    _, a = forward(device, mpsx.CNNDropout(device, 0.5, 1234), x)
    _, b = forward(device, mpsx.CNNDropout(device, 0.5, 1234), x)
    _, c = forward(device, mpsx.CNNDropout(device, 0.5, 1235), x)
    np.testing.assert_array_equal(a, b)
    assert np.mean(a != c) > 0.3  # independent masks differ in about half the elements
    # The same kernel encoded twice repeats its mask too.
    dropout = mpsx.CNNDropout(device, 0.5, 2**64 - 1)
    _, d = forward(device, dropout, x)
    _, e = forward(device, dropout, x)
    np.testing.assert_array_equal(d, e)


@pytest.mark.parametrize("stride", [(0, 1, 1), (1, 0, 1), (1, 1, 0), (0, 0, 1), (0, 0, 0)])
def test_broadcast_mask_strides(device, rng, stride):
    shape = (2, 6, 5, 7)
    x = nonzero_input(rng, shape)
    dropout = mpsx.CNNDropout(device, 0.5, 21, mask_stride_in_pixels=stride)
    assert dropout.mask_stride_in_pixels == stride
    y, mask = forward(device, dropout, x, batch=True)
    sx, sy, sz = stride
    assert mask.shape == (6 if sz else 1, 5 if sy else 1, 7 if sx else 1)
    full = np.broadcast_to(mask.astype(bool)[None], shape)
    np.testing.assert_array_equal(y, np.where(full, x / np.float32(0.5), np.float32(0)))
    # A broadcast dimension holds one value along it.
    if stride != (0, 0, 0):
        assert 0 < np.count_nonzero(mask) < mask.size or mask.size < 8


def test_clip_rect_offset_and_channel_offsets(device, rng):
    x = nonzero_input(rng, (1, 8, 6, 6))
    dropout = mpsx.CNNDropout(device, 0.5, 8)
    gradient = mpsx.CNNDropoutGradient(device, 0.5, 8)
    destination = mpsx.Image.from_numpy(device, np.full((1, 8, 5, 5), 7.0, np.float32))
    dropout.offset = (1, 2)
    dropout.clip_rect = (1, 0, 0, 3, 2, 1)
    dropout.source_feature_channel_offset = 4
    source = mpsx.Image.from_numpy(device, x)
    dy = nonzero_input(rng, (1, 8, 5, 5))

    def encode(cb):
        y, state = dropout.encode(cb, source, destination, destination_state=True)
        dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)
        for item in (y, dx, state):
            item.synchronize(cb)
        return y, dx, state

    y, dx, state = run(device, encode)
    y, dx, mask = np.asarray(y), np.asarray(dx), state.mask_data().astype(bool)
    assert mask.shape == (8, 6, 6)  # the whole forward source
    expected = np.full((1, 8, 5, 5), 7.0, np.float32)
    # clipRect.origin (1, 0) reads source (offset.x, offset.y) = (1, 2), channels 4..7.
    region = x[0, 4:8, 2:4, 1:4]
    expected[0, 0:4, 0:2, 1:4] = np.where(mask[4:8, 2:4, 1:4], region / np.float32(0.5), 0)
    np.testing.assert_array_equal(y, expected)
    expected_dx = np.zeros_like(x)
    expected_dx[0, 4:8, 2:4, 1:4] = np.where(mask[4:8, 2:4, 1:4], dy[0, 0:4, 0:2, 1:4] / np.float32(0.5), 0)
    np.testing.assert_array_equal(dx, expected_dx)


def test_mask_data_needs_synchronization(device, rng):
    dropout = mpsx.CNNDropout(device, 0.5, 1)
    source = mpsx.Image.from_numpy(device, nonzero_input(rng, (1, 2, 3, 3)))
    cb = device.command_queue.command_buffer()
    _, state = dropout.encode(cb, source, destination_state=True)
    with pytest.raises(mpsx.SynchronizationError, match="dropout mask"):
        state.mask_data()
    cb.commit()
    cb.wait_until_completed()
    with pytest.raises(mpsx.SynchronizationError, match="dropout mask"):
        state.mask_data()  # completed, but never synchronized


def test_properties(device):
    dropout = mpsx.CNNDropout(device, 0.25, 42, (0, 1, 1))
    assert dropout.keep_probability == 0.25 and dropout.seed == 42
    assert dropout.mask_stride_in_pixels == (0, 1, 1)
    gradient = mpsx.CNNDropoutGradient(device, 0.25, 42)
    assert gradient.keep_probability == 0.25 and gradient.seed == 42
    assert gradient.mask_stride_in_pixels == (1, 1, 1)


@pytest.mark.parametrize("cls", [mpsx.CNNDropout, mpsx.CNNDropoutGradient])
def test_bad_arguments(device, cls):
    for keep in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match=f"keep_probability must be in \\(0, 1\\], given {keep}"):
            cls(device, keep, 1)
    for text in ("half", "0.5"):  # a string is refused even where float() would parse it
        with pytest.raises(TypeError, match="keep_probability must be a float, given str"):
            cls(device, text, 1)
    with pytest.raises(ValueError, match="seed must be between 0 and 2\\*\\*64 - 1, given -1"):
        cls(device, 0.5, -1)
    with pytest.raises(TypeError, match="seed must be an int, given float"):
        cls(device, 0.5, 1.5)
    with pytest.raises(ValueError, match="mask_stride_in_pixels.y must be 0 or 1, given 2"):
        cls(device, 0.5, 1, (1, 2, 1))
    with pytest.raises(ValueError, match="mask_stride_in_pixels must be \\(x, y, z\\), given 2 values"):
        cls(device, 0.5, 1, (1, 1))
    with pytest.raises(TypeError, match="mask_stride_in_pixels.z must be an int"):
        cls(device, 0.5, 1, (1, 1, 0.5))


def test_gradient_refuses_other_states(device, rng):
    x = nonzero_input(rng, (1, 2, 3, 3))
    source = mpsx.Image.from_numpy(device, x)
    dy = mpsx.Image.from_numpy(device, x)
    dropout = mpsx.CNNDropout(device, 0.5, 1)
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    cb = device.command_queue.command_buffer()
    _, state = dropout.encode(cb, source, destination_state=True)
    with pytest.raises(ValueError, match="made with keep_probability 0.5 .* this kernel has keep_probability 0.25"):
        mpsx.CNNDropoutGradient(device, 0.25, 1).encode(cb, dy, source, state)
    with pytest.raises(ValueError, match="mask_stride_in_pixels \\(1, 1, 1\\); this kernel .* \\(0, 1, 1\\)"):
        mpsx.CNNDropoutGradient(device, 0.5, 1, (0, 1, 1)).encode(cb, dy, source, state)
    _, neuron_state = neuron.encode(cb, source, destination_state=True)
    with pytest.raises(TypeError, match="expected an MPSCNNDropoutGradientState, given an MPSNNGradientState"):
        mpsx.CNNDropoutGradient(device, 0.5, 1).encode(cb, dy, source, neuron_state)
    with pytest.raises(TypeError, match="expected an MPSCNNDropoutGradientState"):
        dropout.encode(cb, source, destination_state=neuron_state)
    with pytest.raises(ValueError, match="made by another MPSCNNDropout"):
        mpsx.CNNDropout(device, 0.5, 2).encode(cb, source, destination_state=state)
    bad = mpsx.Image.from_numpy(device, np.zeros((1, 2, 4, 3), np.float32))
    with pytest.raises(ValueError, match="expected a source gradient shaped as the forward result"):
        mpsx.CNNDropoutGradient(device, 0.5, 1).encode(cb, bad, source, state)
    cb.commit()
    cb.wait_until_completed()


def test_uninitialized_objects_raise(device):
    for cls in (mpsx.CNNDropout, mpsx.CNNDropoutGradient):
        with pytest.raises(TypeError):
            cls.__new__(cls).keep_probability
    with pytest.raises(TypeError):
        mpsx.CNNDropoutGradientState.__new__(mpsx.CNNDropoutGradientState).mask_data()

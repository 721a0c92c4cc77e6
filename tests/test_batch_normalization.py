"""CNNBatchNormalization, its statistics and gradients against torch's
batch_norm and autograd on the CPU and finite differences; data sources,
running statistics, updates, reloads and bad input."""

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import RecordedLoads, finite_difference_gradient, read, run, run_isolated, tolerance

N = mpsx.NeuronType


def reference(x, gamma, beta, dy, eps, activation=None, region=None):
    """y, dx, dgamma, dbeta of torch's training batch norm (float64), the
    activation applied after it, the loss sum(y * dy) over `region` (the
    (y0, y1, x0, x1) pixels the forward wrote; all when None)."""
    xt = torch.tensor(np.asarray(x, np.float64), requires_grad=True)
    gt = torch.tensor(np.asarray(gamma, np.float64), requires_grad=True)
    bt = torch.tensor(np.asarray(beta, np.float64), requires_grad=True)
    y = F.batch_norm(xt, None, None, gt, bt, training=True, eps=eps)
    if activation is not None:
        y = activation(y)
    if region is not None:
        y0, y1, x0, x1 = region
        y = y[:, :, y0:y1, x0:x1]
    y.backward(torch.as_tensor(np.asarray(dy, np.float64)))
    return y.detach().numpy(), xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


def kernels(device, data_source, neuron=None):
    return (mpsx.CNNBatchNormalization(device, data_source, neuron), mpsx.CNNBatchNormalizationStatistics(device),
            mpsx.CNNBatchNormalizationStatisticsGradient(device, neuron),
            mpsx.CNNBatchNormalizationGradient(device, neuron))


def train(device, data_source, x, dy, neuron=None, as_list=False):
    """The MPS training sequence on one command buffer: result_state,
    statistics, forward with the state, statistics gradient, gradient.
    Returns (y, dx, state) after completion."""
    bn, statistics, statistics_gradient, gradient = kernels(device, data_source, neuron)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    gradients = mpsx.ImageBatch.from_numpy(device, dy)
    if as_list:
        batch, gradients = list(batch), list(gradients)
    cb = device.command_queue.command_buffer()
    state = bn.result_state(batch[0] if as_list else batch)
    statistics.encode_batch(cb, batch, batch_normalization_state=state)
    y = bn.encode_batch(cb, batch, batch_normalization_state=state)
    statistics_gradient.encode_batch(cb, source_gradients=gradients, source_images=batch,
                                     batch_normalization_state=state)
    dx = gradient.encode_batch(cb, source_gradients=gradients, source_images=batch,
                               batch_normalization_state=state)
    for item in (y, dx, state):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return y.to_numpy(), dx.to_numpy(), state


def weights(rng, channels, epsilon=1e-5, momentum=0.1):
    gamma = (rng.random(channels) + 0.5).astype(np.float32)
    beta = rng.standard_normal(channels).astype(np.float32)
    mean = rng.standard_normal(channels).astype(np.float32)
    variance = (rng.random(channels) + 0.5).astype(np.float32)
    return mpsx.BatchNormalizationWeights(gamma, beta, mean, variance, epsilon=epsilon, momentum=momentum)


SHAPES = [  # n, c, h, w, dtype
    (2, 3, 5, 7, np.float32),
    (4, 8, 3, 3, np.float32),
    (3, 5, 1, 1, np.float32),
    (1, 6, 4, 5, np.float32),
    (2, 37, 6, 5, np.float32),
    (5, 16, 8, 8, np.float16),
    (3, 7, 9, 11, np.float16),
    # Channels in several tiles of a block (cuda: 32 channels strided, 128 dense), the last one partial.
    (3, 70, 9, 7, np.float32),
    (2, 164, 12, 11, np.float32),
    (2, 300, 9, 9, np.float16),
]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[:4]}-{np.dtype(s[4]).name}" for s in SHAPES])
def test_training_sequence_matches_torch(device, rng, shape):
    n, c, h, w, dtype = shape
    source = weights(rng, c)
    x = (rng.standard_normal((n, c, h, w)) * 2 + 3).astype(dtype)
    dy = rng.standard_normal((n, c, h, w)).astype(dtype)
    y, dx, state = train(device, source, x, dy)
    ry, rdx, rgamma, rbeta = reference(x, source.gamma(), source.beta(), dy, 1e-5)
    rtol, atol = tolerance(dtype)
    assert y.dtype == dtype and dx.dtype == dtype
    np.testing.assert_allclose(y, ry, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, rdx, rtol=rtol, atol=max(atol, 1e-4))
    np.testing.assert_allclose(state.gradient_for_gamma.to_numpy(), rgamma, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(state.gradient_for_beta.to_numpy(), rbeta, rtol=1e-3, atol=1e-3)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(state.mean.to_numpy(), xd.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.variance.to_numpy(), xd.var(axis=(0, 2, 3)), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(state.gamma.to_numpy(), source.gamma())
    np.testing.assert_array_equal(state.beta.to_numpy(), source.beta())
    assert state.gamma.shape == (c,) and state.gradient_for_beta.dtype == np.float32
    # The per-channel sums are deterministic: a second run gives the same bits.
    y2, dx2, again = train(device, source, x, dy)
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_array_equal(dx2, dx)
    for name in ("mean", "variance", "gradient_for_gamma", "gradient_for_beta"):
        np.testing.assert_array_equal(getattr(again, name).to_numpy(), getattr(state, name).to_numpy(), err_msg=name)


def test_list_of_images_and_state_batch(device, rng):
    source = weights(rng, 4)
    x = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    y, dx, _ = train(device, source, x, dy, as_list=True)
    ry, rdx, _, _ = reference(x, source.gamma(), source.beta(), dy, 1e-5)
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-4)


def test_single_image_encodes(device, rng):
    source = weights(rng, 3)
    bn, statistics, statistics_gradient, gradient = kernels(device, source, mpsx.NNNeuronDescriptor(N.RELU))
    x = rng.standard_normal((1, 3, 4, 5)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    image, dy_image = mpsx.Image.from_numpy(device, x), mpsx.Image.from_numpy(device, dy)
    cb = device.command_queue.command_buffer()
    state = bn.result_state(image)
    statistics.encode_batch(cb, image, state)
    y = bn.encode(cb, image, state)
    statistics_gradient.encode_batch(cb, dy_image, image, state)
    dx = gradient.encode(cb, dy_image, image, state)
    for item in (y, dx, state):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    ry, rdx, rgamma, _ = reference(x, source.gamma(), source.beta(), dy, 1e-5, torch.relu)
    np.testing.assert_allclose(y.to_numpy(), ry, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx.to_numpy(), rdx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.gradient_for_gamma.to_numpy(), rgamma, rtol=1e-4, atol=1e-4)


def test_statistics_are_exact_far_from_zero(device, rng):
    # Large means against small spreads: sums about a shift keep the variance.
    x = (rng.standard_normal((8, 5, 16, 16)) * 0.01 + 1000).astype(np.float32)
    bn = mpsx.CNNBatchNormalization(device, weights(rng, 5))
    batch = mpsx.ImageBatch.from_numpy(device, x)
    state = bn.result_state(batch)
    run(device, lambda cb: (mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, batch, state),
                            state.synchronize(cb)))
    np.testing.assert_allclose(state.variance.to_numpy(), x.astype(np.float64).var(axis=(0, 2, 3)), rtol=2e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_inference_uses_running_statistics(device, rng, dtype):
    source = weights(rng, 6, epsilon=1e-3)
    bn = mpsx.CNNBatchNormalization(device, source)
    assert bn.number_of_feature_channels == 6 and bn.epsilon == pytest.approx(1e-3)
    x = rng.standard_normal((3, 6, 5, 4)).astype(dtype)
    expected = F.batch_norm(torch.tensor(x.astype(np.float64)), torch.tensor(source.mean(), dtype=torch.float64),
                            torch.tensor(source.variance(), dtype=torch.float64),
                            torch.tensor(source.gamma(), dtype=torch.float64),
                            torch.tensor(source.beta(), dtype=torch.float64), training=False, eps=1e-3).numpy()
    y = read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_allclose(y, expected, *tolerance(dtype))
    single = read(device, lambda cb: bn.encode(cb, mpsx.Image.from_numpy(device, x[1])))
    np.testing.assert_allclose(single, expected[1:2], *tolerance(dtype))
    bn.epsilon = 0.5
    y = read(device, lambda cb: bn.encode(cb, mpsx.Image.from_numpy(device, x[1])))
    scale = source.gamma() / np.sqrt(source.variance() + 0.5)
    np.testing.assert_allclose(y, (x[1:2] - source.mean()[:, None, None]) * scale[:, None, None] +
                               source.beta()[:, None, None], *tolerance(dtype))


def test_clip_rect_and_channel_offsets(device, rng):
    # The forward normalizes a block of channels 4-7 into a clipped region;
    # the statistics cover every pixel, so the gradient reaches every pixel.
    source = weights(rng, 4)
    bn, statistics, statistics_gradient, gradient = kernels(device, source)
    x = rng.standard_normal((2, 8, 5, 6)).astype(np.float32)
    image = mpsx.ImageBatch.from_numpy(device, x)
    destination = mpsx.ImageBatch.from_numpy(device, np.zeros((2, 4, 5, 6), np.float32))
    dy = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    for k in (bn, statistics):
        k.source_feature_channel_offset = 4
    bn.offset = (1, 2, 0)
    bn.clip_rect = (1, 2, 0, 3, 2, 2)  # x 1-3, y 2-3
    cb = device.command_queue.command_buffer()
    state = bn.result_state(image)
    statistics.encode_batch(cb, image, state)
    y = bn.encode_batch(cb, image, state, destination_images=destination)
    statistics_gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), image, state)
    dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), image, state)
    for item in (y, dx, state):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    ry, rdx, rgamma, rbeta = reference(x[:, 4:], source.gamma(), source.beta(), dy[:, :, 2:4, 1:4], 1e-5,
                                       region=(2, 4, 1, 4))
    expected = np.zeros((2, 4, 5, 6), np.float32)
    expected[:, :, 2:4, 1:4] = ry
    np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-4, atol=1e-4)
    assert dx.shape == (2, 8, 5, 6)
    np.testing.assert_array_equal(dx.to_numpy()[:, :4], 0)
    np.testing.assert_allclose(dx.to_numpy()[:, 4:], rdx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.gradient_for_gamma.to_numpy(), rgamma, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.gradient_for_beta.to_numpy(), rbeta, rtol=1e-4, atol=1e-4)


NEURONS = [
    (mpsx.NNNeuronDescriptor(N.RELU, 0.1), lambda z: torch.where(z >= 0, z, 0.1 * z)),
    (mpsx.NNNeuronDescriptor(N.RELU), torch.relu),
    (mpsx.NNNeuronDescriptor(N.TANH, 1.5, 0.5), lambda z: 1.5 * torch.tanh(0.5 * z)),
    (mpsx.NNNeuronDescriptor(N.SIGMOID), torch.sigmoid),
    (mpsx.NNNeuronDescriptor(N.PRELU, data=[0.1, 0.2, 0.3, 0.4, 0.5]),
     lambda z: torch.where(z >= 0, z, z * torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5], dtype=z.dtype)[:, None, None])),
]


@pytest.mark.parametrize("neuron", NEURONS, ids=["leaky-relu", "relu", "tanh", "sigmoid", "prelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fused_neuron_forward_and_gradients(device, rng, neuron, dtype):
    descriptor, activation = neuron
    source = weights(rng, 5)
    x = rng.standard_normal((3, 5, 6, 7)).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    y, dx, state = train(device, source, x, dy, descriptor)
    ry, rdx, rgamma, rbeta = reference(x, source.gamma(), source.beta(), dy, 1e-5, activation)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(y, ry, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, rdx, rtol=rtol, atol=max(atol, 1e-4))
    np.testing.assert_allclose(state.gradient_for_gamma.to_numpy(), rgamma, rtol=1e-3, atol=2e-3)
    np.testing.assert_allclose(state.gradient_for_beta.to_numpy(), rbeta, rtol=1e-3, atol=2e-3)
    assert mpsx.CNNBatchNormalizationGradient(device, descriptor).fused_neuron_descriptor == descriptor


def test_gradients_by_finite_differences(device, rng):
    neuron = mpsx.NNNeuronDescriptor(N.TANH, 1.0, 1.0)
    c = 3
    gamma = (rng.random(c) + 0.5).astype(np.float32)
    beta = rng.standard_normal(c).astype(np.float32)
    x = rng.standard_normal((2, c, 3, 2))
    dy = rng.standard_normal(x.shape)

    def loss(values, g=gamma, b=beta):
        source = mpsx.BatchNormalizationWeights(g, b, np.zeros(c), np.ones(c))
        y, _, _ = train(device, source, values.astype(np.float32), dy.astype(np.float32), neuron)
        return float(np.sum(y.astype(np.float64) * dy))

    source = mpsx.BatchNormalizationWeights(gamma, beta, np.zeros(c), np.ones(c))
    _, dx, state = train(device, source, x.astype(np.float32), dy.astype(np.float32), neuron)
    numeric = finite_difference_gradient(loss, x, 1e-2)
    np.testing.assert_allclose(dx, numeric, rtol=2e-2, atol=2e-3)
    d_gamma = finite_difference_gradient(lambda g: loss(x, g), gamma, 1e-2)
    d_beta = finite_difference_gradient(lambda b: loss(x, gamma, b), beta, 1e-2)
    for k in range(c):
        assert state.gradient_for_gamma.to_numpy()[k] == pytest.approx(d_gamma[k], rel=2e-2, abs=2e-3)
        assert state.gradient_for_beta.to_numpy()[k] == pytest.approx(d_beta[k], rel=2e-2, abs=2e-3)


@pytest.mark.parametrize("momentum", [0.1, 0.3])
def test_running_statistics_follow_torch(device, rng, momentum):
    c = 6
    source = weights(rng, c, epsilon=1e-3, momentum=momentum)
    bn = mpsx.CNNBatchNormalization(device, source)
    statistics = mpsx.CNNBatchNormalizationStatistics(device)
    running_mean = torch.tensor(source.mean(), dtype=torch.float64)
    running_variance = torch.tensor(source.variance(), dtype=torch.float64)
    for step in range(3):
        x = (rng.standard_normal((4, c, 5, 3)) * (step + 1) + step).astype(np.float32)
        batch = mpsx.ImageBatch.from_numpy(device, x)
        cb = device.command_queue.command_buffer()
        state = bn.result_state(batch)
        statistics.encode_batch(cb, batch, state)
        bn.encode_batch(cb, batch, batch_normalization_state=state)
        bn.encode_mean_and_variance_update(cb, state)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        F.batch_norm(torch.tensor(x, dtype=torch.float64), running_mean, running_variance, training=True,
                     momentum=momentum, eps=1e-3)
    np.testing.assert_allclose(source.mean(), running_mean.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(source.variance(), running_variance.numpy(), rtol=1e-5, atol=1e-5)
    # The kernel normalizes with them at inference, as the reloaded source would.
    x = rng.standard_normal((2, c, 3, 3)).astype(np.float32)
    expected = F.batch_norm(torch.tensor(x, dtype=torch.float64), running_mean, running_variance,
                            torch.tensor(source.gamma(), dtype=torch.float64),
                            torch.tensor(source.beta(), dtype=torch.float64), training=False, eps=1e-3).numpy()
    y = read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    restored = pickle.loads(pickle.dumps(source))
    np.testing.assert_array_equal(restored.variance(), source.variance())
    assert restored.momentum == pytest.approx(momentum) and restored.epsilon == pytest.approx(1e-3)


def test_update_on_command_buffer_of_batch_normalization_weights(device, rng):
    source = weights(rng, 3, momentum=0.5)
    mean0, variance0 = source.mean(), source.variance()
    bn = mpsx.CNNBatchNormalization(device, source)
    x = rng.standard_normal((1, 3, 1, 2)).astype(np.float32)  # n = 2 values per channel
    batch = mpsx.ImageBatch.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    state = bn.result_state(batch)
    mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, batch, state)
    updated = source.update_mean_and_variance_with_command_buffer(cb, state)
    cb.commit()
    cb.wait_until_completed()
    assert isinstance(updated, mpsx.CNNNormalizationMeanAndVarianceState)
    np.testing.assert_allclose(updated.mean.to_numpy(), 0.5 * mean0 + 0.5 * x.mean(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(updated.variance.to_numpy(), 0.5 * variance0 + 0.5 * x.var(axis=(0, 2, 3), ddof=1),
                               rtol=1e-5)
    np.testing.assert_allclose(source.mean(), updated.mean.to_numpy())


class ArraySource(RecordedLoads, mpsx.CNNBatchNormalizationDataSource):
    """A Python data source, as users write them."""

    def __init__(self, gamma, beta=None, mean=None, variance=None, **extra):
        self._gamma, self._beta, self._mean, self._variance = gamma, beta, mean, variance
        super().__init__(**extra)

    def number_of_feature_channels(self):
        return len(self._gamma)

    def gamma(self):
        self.calls.append("gamma")
        return self._gamma

    def beta(self):
        return self._beta

    def mean(self):
        self.calls.append("mean")
        return self._mean

    def variance(self):
        return self._variance


def inference(x, gamma, beta, mean, variance, eps):
    shape = (1, -1, 1, 1)
    return ((x - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + eps) * gamma.reshape(shape) +
            beta.reshape(shape))


def test_python_data_source(device, rng):
    gamma = (rng.random(4) + 0.5).astype(np.float32)
    src = ArraySource(gamma)
    bn = mpsx.CNNBatchNormalization(device, src)
    assert src.calls == ["load", "gamma", "mean", "purge"]
    assert bn.label == "array source" and bn.data_source is src
    assert bn.epsilon == np.finfo(np.float32).tiny  # MPS's default: FLT_MIN
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    y = read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_allclose(y, x * gamma[None, :, None, None], rtol=1e-6)  # beta, mean 0; variance 1

    class WithEpsilon(ArraySource):
        def epsilon(self):
            return 0.25

    bn = mpsx.CNNBatchNormalization(device, WithEpsilon(gamma, np.ones(4), np.ones(4), np.full(4, 0.75)))
    assert bn.epsilon == 0.25
    y = read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_allclose(y, inference(x, gamma, np.ones(4), np.ones(4), np.full(4, 0.75), 0.25), rtol=1e-5,
                               atol=1e-6)


class UpdatingSource(ArraySource):
    """CPU-style updates: SGD on gamma and beta, the batch statistics as the new running ones."""

    def __init__(self, *args, fail=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail, self.updates = fail, []

    def update_gamma_and_beta_with_batch_normalization_state(self, state):
        if self.fail:
            self._gamma = self._gamma * 0  # a half-done update the kernel must not see
            raise ValueError("update failed")
        self.updates.append(("gamma and beta", state.batch_normalization))
        self._gamma = self._gamma - 0.1 * state.gradient_for_gamma.to_numpy()
        self._beta = self._beta - 0.1 * state.gradient_for_beta.to_numpy()
        return True

    def update_mean_and_variance_with_batch_normalization_state(self, state):
        self.updates.append(("mean and variance", state.batch_normalization))
        self._mean, self._variance = state.mean.to_numpy().copy(), state.variance.to_numpy().copy()
        return True


def encode_step_with_updates(device, cb, bn, statistics, statistics_gradient, x, dy):
    """Statistics, normalization, gradients and both data source updates of
    one batch, encoded onto cb. Returns the batch and its state."""
    batch = mpsx.ImageBatch.from_numpy(device, x)
    state = bn.result_state(batch)
    statistics.encode_batch(cb, batch, state)
    bn.encode_batch(cb, batch, state)
    statistics_gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), batch, state)
    bn.encode_gamma_and_beta_update(cb, state)
    bn.encode_mean_and_variance_update(cb, state)
    return batch, state


def training_step_with_updates(device, bn, x, dy):
    statistics, statistics_gradient = kernels(device, bn.data_source)[1:3]
    cb = device.command_queue.command_buffer()
    _, state = encode_step_with_updates(device, cb, bn, statistics, statistics_gradient, x, dy)
    cb.commit()
    cb.wait_until_completed()
    return cb, state


def test_batch_normalization_weights_host_values_follow_completed_updates(device, rng):
    c = 3
    gamma, beta = (rng.random(c) + 0.5).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean, variance = rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)
    source = mpsx.BatchNormalizationWeights(gamma, beta, mean, variance, momentum=0.5,
                                            optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5))
    bn, statistics, statistics_gradient, _ = kernels(device, source)

    class FailingSource(ArraySource):
        def update_mean_and_variance_with_batch_normalization_state(self, state):
            raise ValueError("update failed")

    failing = mpsx.CNNBatchNormalization(device, FailingSource(np.ones(c, np.float32)))

    def step(x, dy, fail=False):
        cb = device.command_queue.command_buffer()
        batch, _ = encode_step_with_updates(device, cb, bn, statistics, statistics_gradient, x, dy)
        if fail:  # a later host step fails the command buffer
            other = failing.result_state(batch)
            statistics.encode_batch(cb, batch, other)
            failing.encode_mean_and_variance_update(cb, other)
        return cb

    def expected(x, dy, gamma, beta, mean, variance):
        _, _, rgamma, rbeta = reference(x, gamma, beta, dy, source.epsilon)
        return (gamma - 0.5 * rgamma, beta - 0.5 * rbeta, 0.5 * mean + 0.5 * x.mean(axis=(0, 2, 3)),
                0.5 * variance + 0.5 * x.var(axis=(0, 2, 3), ddof=1))

    def values():
        return source.gamma(), source.beta(), source.mean(), source.variance()

    def check(actual, wanted):
        for a, w in zip(actual, wanted):
            np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-5)

    x, dy = rng.standard_normal((2, c, 3, 3)).astype(np.float32), rng.standard_normal((2, c, 3, 3)).astype(np.float32)
    cb = step(x, dy)
    check(values(), (gamma, beta, mean, variance))  # not committed: the values before
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    after_one = expected(x, dy, gamma, beta, mean, variance)
    check(values(), after_one)
    cb = step(x * 2, dy, fail=True)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "error"
    check(values(), after_one)  # a failed update leaves them
    check([pickle.loads(pickle.dumps(source)).mean()], after_one[2:3])

    # Steps without host reads hold no more device memory than one step does.
    def steps(count):
        buffers = [step(x, dy) for _ in range(count)]
        for cb in buffers:
            cb.commit()
        for cb in buffers:
            cb.wait_until_completed()
        return device.bytes_in_use

    in_use = steps(2)
    assert steps(10) == in_use


def test_cpu_style_updates(device, rng):
    c = 4
    gamma, beta = (rng.random(c) + 0.5).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    src = UpdatingSource(gamma, beta, np.zeros(c, np.float32), np.ones(c, np.float32))
    bn = mpsx.CNNBatchNormalization(device, src)
    x = rng.standard_normal((3, c, 4, 4)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    cb, state = training_step_with_updates(device, bn, x, dy)
    assert cb.status == "completed", cb.error
    assert src.updates == [("gamma and beta", bn), ("mean and variance", bn)]
    _, _, rgamma, rbeta = reference(x, gamma, beta, dy, bn.epsilon)
    np.testing.assert_allclose(src._gamma, gamma - 0.1 * rgamma, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(src._beta, beta - 0.1 * rbeta, rtol=1e-4, atol=1e-5)
    # The kernel reloaded both from the data source.
    y = read(device, lambda c_: bn.encode_batch(c_, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_allclose(y, inference(x, src._gamma, src._beta, x.mean(axis=(0, 2, 3)),
                                            x.var(axis=(0, 2, 3)), bn.epsilon), rtol=1e-4, atol=1e-4)


def test_update_that_raises_fails_the_command_buffer(device, rng):
    c = 4
    src = UpdatingSource((rng.random(c) + 0.5).astype(np.float32), fail=True)
    bn = mpsx.CNNBatchNormalization(device, src)
    x = rng.standard_normal((2, c, 3, 3)).astype(np.float32)
    before = read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    cb, _ = training_step_with_updates(device, bn, x, x)
    assert cb.status == "error"
    assert isinstance(cb.error, ValueError) and str(cb.error) == "update failed"
    assert src.updates == []  # the later update did not run
    after = read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_array_equal(after, before)


def test_gpu_style_updates(device, rng):
    c = 3
    gamma = (rng.random(c) + 0.5).astype(np.float32)

    class GpuSource(ArraySource):
        def update_gamma_and_beta_with_command_buffer(self, command_buffer, state):
            self.seen = (command_buffer, state.batch_normalization)
            return mpsx.CNNNormalizationGammaAndBetaState(device, np.full(c, 2.0), np.full(c, 0.5))

        def update_mean_and_variance_with_command_buffer(self, command_buffer, state):
            # The state's own buffers: the reload copies them on the command buffer.
            return mpsx.CNNNormalizationMeanAndVarianceState(device, state.mean, state.variance)

    src = GpuSource(gamma)
    bn = mpsx.CNNBatchNormalization(device, src)
    x = rng.standard_normal((2, c, 4, 3)).astype(np.float32)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    statistics, statistics_gradient = kernels(device, src)[1:3]
    cb = device.command_queue.command_buffer()
    state = bn.result_state(batch)
    statistics.encode_batch(cb, batch, state)
    bn.encode_batch(cb, batch, state)
    statistics_gradient.encode_batch(cb, batch, batch, state)
    bn.encode_gamma_and_beta_update(cb, state)
    bn.encode_mean_and_variance_update(cb, state)
    assert src.seen[0] is not None and src.seen[1] is bn
    after = bn.encode_batch(cb, batch)
    after.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    np.testing.assert_allclose(after.to_numpy(), inference(x, np.full(c, 2.0), np.full(c, 0.5), x.mean(axis=(0, 2, 3)),
                                                           x.var(axis=(0, 2, 3)), bn.epsilon), rtol=1e-4, atol=1e-4)

    class Raising(ArraySource):
        def update_gamma_and_beta_with_command_buffer(self, command_buffer, state):
            raise RuntimeError("no device update")

    class Wrong(ArraySource):
        def update_mean_and_variance_with_command_buffer(self, command_buffer, state):
            return np.zeros(c)

    for source, method, error, message in [
            (Raising(gamma), "encode_gamma_and_beta_update", RuntimeError, "no device update"),
            (Wrong(gamma), "encode_mean_and_variance_update", TypeError,
             "must return an mpsx.CNNNormalizationMeanAndVarianceState or None, returned ndarray"),
            (ArraySource(gamma), "encode_gamma_and_beta_update", TypeError,
             "neither update_gamma_and_beta_with_command_buffer nor "
             "update_gamma_and_beta_with_batch_normalization_state")]:
        kernel = mpsx.CNNBatchNormalization(device, source)
        cb = device.command_queue.command_buffer()
        s = kernel.result_state(batch)
        statistics.encode_batch(cb, batch, s)
        kernel.encode_batch(cb, batch, s)
        statistics_gradient.encode_batch(cb, batch, batch, s)
        with pytest.raises(error, match=message):
            getattr(kernel, method)(cb, s)


def test_state_keeps_gamma_and_beta_of_its_forward_pass(device, rng):
    # A reload between the forward pass and the gradients changes the kernel,
    # not the state the gradients read.
    c = 5
    source = weights(rng, c)
    bn, statistics, statistics_gradient, gradient = kernels(device, source)
    x = rng.standard_normal((3, c, 4, 4)).astype(np.float32)
    dy = rng.standard_normal((3, c, 4, 4)).astype(np.float32)
    batch, gradients = mpsx.ImageBatch.from_numpy(device, x), mpsx.ImageBatch.from_numpy(device, dy)
    cb = device.command_queue.command_buffer()
    state = bn.result_state(batch)
    statistics.encode_batch(cb, batch, state)
    bn.encode_batch(cb, batch, state)
    bn.reload_gamma_and_beta(cb, mpsx.CNNNormalizationGammaAndBetaState(device, np.full(c, 3.0), np.full(c, -1.0)))
    statistics_gradient.encode_batch(cb, gradients, batch, state)
    dx = gradient.encode_batch(cb, gradients, batch, state)
    for item in (dx, state):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    _, rdx, rgamma, rbeta = reference(x, source.gamma(), source.beta(), dy, 1e-5)
    np.testing.assert_array_equal(state.gamma.to_numpy(), source.gamma())
    np.testing.assert_array_equal(state.beta.to_numpy(), source.beta())
    np.testing.assert_allclose(dx.to_numpy(), rdx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.gradient_for_gamma.to_numpy(), rgamma, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(state.gradient_for_beta.to_numpy(), rbeta, rtol=1e-3, atol=1e-3)


def test_reloads(device, rng):
    c = 4
    values = [(rng.random(c) + 0.5).astype(np.float32) for _ in range(8)]
    src = ArraySource(*values[:4])
    bn = mpsx.CNNBatchNormalization(device, src)
    x = rng.standard_normal((2, c, 3, 3)).astype(np.float32)
    image = mpsx.ImageBatch.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    before = bn.encode_batch(cb, image)
    bn.reload_gamma_and_beta(cb, mpsx.CNNNormalizationGammaAndBetaState(device, values[4], values[5]))
    middle = bn.encode_batch(cb, image)
    bn.reload_mean_and_variance(cb, mpsx.CNNNormalizationMeanAndVarianceState(device, values[6], values[7]))
    after = bn.encode_batch(cb, image)
    for item in (before, middle, after):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    eps = bn.epsilon
    np.testing.assert_allclose(before.to_numpy(), inference(x, *values[:4], eps), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(middle.to_numpy(), inference(x, *values[4:6], *values[2:4], eps), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(after.to_numpy(), inference(x, *values[4:8], eps), rtol=1e-5, atol=1e-5)

    src._gamma, src._mean = values[7], values[5]
    bn.reload_gamma_and_beta_from_data_source()
    y = read(device, lambda cb: bn.encode_batch(cb, image))
    np.testing.assert_allclose(y, inference(x, values[7], values[1], values[6], values[7], eps), rtol=1e-5, atol=1e-5)
    bn.reload_mean_and_variance_from_data_source()
    y = read(device, lambda cb: bn.encode_batch(cb, image))
    np.testing.assert_allclose(y, inference(x, values[7], values[1], values[5], values[3], eps), rtol=1e-5, atol=1e-5)

    consistent = src._gamma, src._beta, src._mean, src._variance
    src._gamma, src._beta, src._mean, src._variance = (v[:3] for v in consistent)
    with pytest.raises(mpsx.ShapeError, match="the data source now has 3 feature channels; the kernel was made for 4"):
        bn.reload_gamma_and_beta_from_data_source()
    src._gamma, src._beta, src._mean, src._variance = consistent
    src._variance = values[0][:2]
    with pytest.raises(mpsx.ShapeError, match="the data source's variance holds 2 values; expected 4"):
        bn.reload_mean_and_variance_from_data_source()
    np.testing.assert_array_equal(read(device, lambda cb: bn.encode_batch(cb, image)), y)  # unchanged
    with pytest.raises(mpsx.ShapeError, match="the gamma buffer holds 3 float32 values; the kernel has 4"):
        bn.reload_gamma_and_beta(device.command_queue.command_buffer(),
                                 mpsx.CNNNormalizationGammaAndBetaState(device, np.ones(3), np.ones(3)))
    with pytest.raises(mpsx.ShapeError, match="the mean buffer holds 2 float32 values"):
        bn.reload_mean_and_variance(device.command_queue.command_buffer(),
                                    mpsx.CNNNormalizationMeanAndVarianceState(device, np.ones(2), np.ones(2)))


def test_normalization_states(device, rng):
    s = mpsx.CNNNormalizationGammaAndBetaState(device, np.arange(3), np.ones(3))
    np.testing.assert_array_equal(s.gamma.to_numpy(), [0, 1, 2])
    assert s.beta.dtype == np.float32 and s.beta.shape == (3,)
    shared = mpsx.CNNNormalizationMeanAndVarianceState(device, s.gamma, s.beta)  # Buffers pass through
    assert torch.from_dlpack(shared.mean).data_ptr() == torch.from_dlpack(s.gamma).data_ptr()
    temporary = mpsx.CNNNormalizationMeanAndVarianceState.temporary_state(device.command_queue.command_buffer(), 5)
    np.testing.assert_array_equal(temporary.variance.to_numpy(), np.zeros(5))
    assert mpsx.CNNNormalizationGammaAndBetaState.temporary_state(device.command_queue.command_buffer(), 2) \
        .gamma.shape == (2,)
    with pytest.raises(mpsx.ShapeError, match="the gamma buffer holds 3 float32 values, the beta buffer 4"):
        mpsx.CNNNormalizationGammaAndBetaState(device, np.ones(3), np.ones(4))
    with pytest.raises(mpsx.ShapeError, match="the mean buffer holds 1 float32 values, the variance buffer 2"):
        mpsx.CNNNormalizationMeanAndVarianceState(device, np.ones(1), np.ones(2))


def test_state_reset(device, rng):
    bn = mpsx.CNNBatchNormalization(device, weights(rng, 3))
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    state = bn.result_state(batch)
    mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, batch, state)
    with pytest.raises(mpsx.StateError, match="reset while a command buffer that writes the state is pending"):
        state.reset()
    state.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(state.mean.to_numpy(), x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-6)
    state.reset()
    np.testing.assert_array_equal(state.mean.to_numpy(), 0)
    with pytest.raises(mpsx.StateError, match="has no batch statistics"):
        bn.encode_batch(device.command_queue.command_buffer(), batch, state)


def test_data_source_errors(device, rng):
    with pytest.raises(TypeError, match="expected a batch normalization data source, given None"):
        mpsx.CNNBatchNormalization(device, None)
    with pytest.raises(TypeError, match="object does not implement number_of_feature_channels, gamma, beta, mean, "
                                        "variance, load, purge, label, required by "
                                        "MPSCNNBatchNormalizationDataSource"):
        mpsx.CNNBatchNormalization(device, object())
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNBatchNormalization: the data source's mean holds 3 values; "
                                              r"expected 4 \(number_of_feature_channels\)"):
        mpsx.CNNBatchNormalization(device, ArraySource(np.ones(4), None, np.zeros(3)))
    with pytest.raises(mpsx.ShapeError, match="the data source's beta holds 0 values; expected 4"):
        mpsx.CNNBatchNormalization(device, ArraySource(np.ones(4), np.zeros(0)))
    with pytest.raises(ValueError, match="number_of_feature_channels must be positive, given 0"):
        mpsx.CNNBatchNormalization(device, ArraySource([]))

    class Failing(ArraySource):
        def variance(self):
            raise RuntimeError("variance is gone")

    failing = Failing(np.ones(4))
    with pytest.raises(RuntimeError, match="variance is gone"):
        mpsx.CNNBatchNormalization(device, failing)
    assert failing.calls[0] == "load" and failing.calls[-1] == "purge"  # load balanced by purge
    with pytest.raises(mpsx.ShapeError, match=r"BatchNormalizationWeights: expected 2 beta values \(as gamma\), given 1"):
        mpsx.BatchNormalizationWeights([1, 1], [0], [0, 0], [1, 1])
    with pytest.raises(mpsx.ShapeError, match="expected 2 variance values"):
        mpsx.BatchNormalizationWeights([1, 1], [0, 0], [0, 0], [1, 1, 1])
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\], given 1.5"):
        mpsx.BatchNormalizationWeights([1], [0], [0], [1], momentum=1.5)
    with pytest.raises(ValueError, match="epsilon must be non-negative"):
        mpsx.BatchNormalizationWeights([1], [0], [0], [1], epsilon=-1)
    with pytest.raises(ValueError, match="the fused PReLU neuron has 2 slopes; the kernel has 4 feature channels"):
        mpsx.CNNBatchNormalization(device, ArraySource(np.ones(4)), mpsx.NNNeuronDescriptor(N.PRELU, data=[1, 2]))


def test_channel_counts_are_ints(device):
    cb = device.command_queue.command_buffer()
    for state in (mpsx.CNNNormalizationGammaAndBetaState, mpsx.CNNNormalizationMeanAndVarianceState):
        with pytest.raises(TypeError, match="number_of_feature_channels must be an int, given float 2.5"):
            state.temporary_state(cb, 2.5)

    class Channels(mpsx.CNNBatchNormalizationDataSource):
        def number_of_feature_channels(self):
            return 2.5

        def gamma(self):
            return None

    with pytest.raises(TypeError, match="Channels.number_of_feature_channels must be an int, given float 2.5"):
        mpsx.CNNBatchNormalization(device, Channels())
    assert cb.command_count == 0


def test_states_of_another_channel_count_are_refused(device, rng):
    bn = mpsx.CNNBatchNormalization(device, weights(rng, 4))
    cb = device.command_queue.command_buffer()
    for count in (8, 2):
        values = np.ones(count, np.float32)
        with pytest.raises(mpsx.ShapeError, match=f"MPSCNNBatchNormalization: the gamma buffer holds {count} float32 "
                                                  f"values; the kernel has 4 feature channels"):
            bn.reload_gamma_and_beta(cb, mpsx.CNNNormalizationGammaAndBetaState(device, values, values))
        with pytest.raises(mpsx.ShapeError, match=f"the mean buffer holds {count} float32 values; the kernel has 4"):
            bn.reload_mean_and_variance(cb, mpsx.CNNNormalizationMeanAndVarianceState(device, values, values))
    eight = mpsx.ImageBatch.from_numpy(device, np.zeros((2, 8, 3, 3), np.float32))
    with pytest.raises(mpsx.ShapeError, match="expected a source image of 4 feature channels, given 8"):
        bn.result_state(eight)
    with pytest.raises(mpsx.ShapeError, match="expected a source image of 4 feature channels, given 8"):
        bn.destination_image_descriptor(eight)
    relu = mpsx.NNNeuronDescriptor(N.PRELU, data=np.ones(5, np.float32))
    with pytest.raises(ValueError, match="the fused PReLU neuron has 5 slopes; the kernel has 4 feature channels"):
        mpsx.CNNBatchNormalization(device, weights(rng, 4), relu)
    assert cb.command_count == 0


def test_encode_errors(device, rng):
    source = weights(rng, 4)
    bn, statistics, statistics_gradient, gradient = kernels(device, source)
    other_bn = mpsx.CNNBatchNormalization(device, source)
    batch = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 4, 3, 3)).astype(np.float32))
    other = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 4, 3, 3)).astype(np.float32))
    five = mpsx.ImageBatch.from_numpy(device, np.zeros((2, 5, 3, 3), np.float32))
    cb = device.command_queue.command_buffer()
    state = bn.result_state(batch)
    with pytest.raises(mpsx.ShapeError, match="MPSCNNBatchNormalization: expected a source image of 4 feature "
                                              "channels, given 5"):
        bn.encode_batch(cb, five)
    with pytest.raises(mpsx.ShapeError, match="MPSCNNBatchNormalizationStatistics: expected source images of 4 "
                                              "feature channels"):
        statistics.encode_batch(cb, five, state)
    with pytest.raises(mpsx.StateError, match="has no batch statistics; encode MPSCNNBatchNormalizationStatistics"):
        bn.encode_batch(cb, batch, state)
    neuron_state = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(N.RELU)).encode_batch(
        cb, batch, destination_states=True)[1]
    for encode in (lambda: statistics.encode_batch(cb, batch, neuron_state),
                   lambda: bn.encode_batch(cb, batch, neuron_state),
                   lambda: gradient.encode_batch(cb, batch, batch, neuron_state),
                   lambda: statistics_gradient.encode_batch(cb, batch, batch, neuron_state)):
        with pytest.raises(TypeError, match="expected an MPSCNNBatchNormalizationState, given an MPSNNGradientState"):
            encode()
    with pytest.raises(TypeError, match="batch_normalization_state"):
        statistics.encode_batch(cb, batch, None)
    statistics.encode_batch(cb, batch, state)
    with pytest.raises(mpsx.StateError, match="belongs to another batch: its statistics cover 1 sub-batch"):
        bn.encode_batch(cb, other, state)
    with pytest.raises(mpsx.StateError, match="was made by another batch normalization"):
        other_bn.encode_batch(cb, batch, state)
    with pytest.raises(mpsx.StateError, match="was not produced by a forward encode"):
        statistics_gradient.encode_batch(cb, batch, batch, state)
    y = bn.encode_batch(cb, batch, state)
    with pytest.raises(mpsx.StateError, match="made for another batch"):
        statistics_gradient.encode_batch(cb, y, other, state)
    with pytest.raises(mpsx.StateError, match="no gradients for gamma and beta; encode "
                                              "MPSCNNBatchNormalizationStatisticsGradient with it first"):
        gradient.encode_batch(cb, y, batch, state)
    with pytest.raises(mpsx.StateError, match="no gradients for gamma and beta"):
        bn.encode_gamma_and_beta_update(cb, state)
    with pytest.raises(ValueError, match="the state's batch normalization fuses neuron type 0"):
        mpsx.CNNBatchNormalizationGradient(device, mpsx.NNNeuronDescriptor(N.RELU)).encode_batch(cb, y, batch, state)
    with pytest.raises(mpsx.ShapeError, match="source gradient shaped as the forward result"):
        statistics_gradient.encode_batch(cb, five, batch, state)
    with pytest.raises(TypeError, match="no single-image encode"):
        statistics_gradient.encode(cb, y[0], batch[0], state)
    statistics_gradient.encode_batch(cb, y, batch, state)
    with pytest.raises(mpsx.SynchronizationError):
        state.gradient_for_gamma.to_numpy()
    with pytest.raises(TypeError, match="neither update_gamma_and_beta_with_command_buffer nor"):
        bn.encode_gamma_and_beta_update(cb, state)
    with pytest.raises(TypeError, match="CNNBatchNormalizationState"):
        bn.encode_mean_and_variance_update(cb, neuron_state)
    with pytest.raises(mpsx.StateError, match="was made by another batch normalization"):
        other_bn.encode_mean_and_variance_update(cb, state)
    with pytest.raises(mpsx.StateError, match="has no batch statistics"):
        source.update_mean_and_variance_with_command_buffer(cb, other_bn.result_state(batch))
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


def test_channel_counts_are_checked(device, rng):
    # Negative counts once wrapped to allocations the allocator never returned from.
    printed = run_isolated(device, """
        cb = device.command_queue.command_buffer()
        for state in (mpsx.CNNNormalizationGammaAndBetaState, mpsx.CNNNormalizationMeanAndVarianceState):
            for channels in (-1, 2**62):
                try:
                    state.temporary_state(cb, channels)
                except ValueError as e:
                    print(e)
        print(cb.command_count)
    """)
    assert printed.splitlines() == [
        "MPSCNNNormalizationGammaAndBetaState: number_of_feature_channels must be positive, given -1",
        "MPSCNNNormalizationGammaAndBetaState: number_of_feature_channels must be at most 1073741824, given "
        "4611686018427387904",
        "MPSCNNNormalizationMeanAndVarianceState: number_of_feature_channels must be positive, given -1",
        "MPSCNNNormalizationMeanAndVarianceState: number_of_feature_channels must be at most 1073741824, given "
        "4611686018427387904",
        "0"]

    class Huge(ArraySource):
        def number_of_feature_channels(self):
            return 2**62

    with pytest.raises(ValueError, match="MPSCNNBatchNormalization: the data source's number_of_feature_channels "
                                         "must be at most 1073741824, given 4611686018427387904"):
        mpsx.CNNBatchNormalization(device, Huge(np.ones(4)))

    bn, statistics, _, _ = kernels(device, weights(rng, 4))
    batch = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 4, 3, 3)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    state = bn.result_state(batch)
    statistics.source_feature_channel_offset = 2**62
    with pytest.raises(ValueError, match="MPSCNNBatchNormalizationStatistics: source_feature_channel_offset must be "
                                         "at most 1073741824, given 4611686018427387904"):
        statistics.encode_batch(cb, batch, state)
    bn.offset = (0, 2**62, 0)
    with pytest.raises(ValueError, match="MPSCNNBatchNormalization: offset.y must be between -2147483648 and "
                                         "2147483648, given 4611686018427387904"):
        bn.encode_batch(cb, batch, destination_images=mpsx.ImageBatch.from_numpy(
            device, np.zeros((2, 4, 3, 3), np.float32)))
    assert cb.command_count == 0


def test_channels_within_the_backend_limit(device):
    # cuda tiles the channels of its per-channel sums: at most 65535 tiles of 32.
    if device.backend != "cuda":
        pytest.skip("the other backends take any channel count up to 2^30")
    channels = 65535 * 32 + 1
    source = mpsx.BatchNormalizationWeights(np.ones(channels, np.float32), np.zeros(channels, np.float32),
                                            np.zeros(channels, np.float32), np.ones(channels, np.float32))
    with pytest.raises(mpsx.ShapeError, match=f"MPSCNNBatchNormalization: the data source has 2097121 feature "
                                              f"channels; batch normalization on device {device.name} takes at most "
                                              f"2097120"):
        mpsx.CNNBatchNormalization(device, source)


# ---- sub-batches: several statistics encodes accumulate into one state

def train_sub_batches(device, data_source, parts, gradients, update=True):
    """The training sequence over sub-batches sharing one state, as the
    graph runs it: statistics of every part, then the forward, statistics
    gradient and gradient of each part, then the running-statistics update.
    Returns ([y], [dx], state) after completion."""
    bn, statistics, statistics_gradient, gradient = kernels(device, data_source)
    images = [mpsx.ImageBatch.from_numpy(device, p) for p in parts]
    dys = [mpsx.ImageBatch.from_numpy(device, g) for g in gradients]
    cb = device.command_queue.command_buffer()
    state = bn.result_state(images[0])
    for image in images:
        statistics.encode_batch(cb, image, state)
    ys = [bn.encode_batch(cb, image, batch_normalization_state=state) for image in images]
    for image, dy in zip(images, dys):
        statistics_gradient.encode_batch(cb, source_gradients=dy, source_images=image, batch_normalization_state=state)
    dxs = [gradient.encode_batch(cb, source_gradients=dy, source_images=image, batch_normalization_state=state)
           for image, dy in zip(images, dys)]
    if update:
        bn.encode_mean_and_variance_update(cb, state)
    for item in ys + dxs + [state]:
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return [y.to_numpy() for y in ys], [dx.to_numpy() for dx in dxs], state


SPLITS = [(2, 4), (3, 3), (1, 2, 3)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("split", SPLITS, ids=["+".join(map(str, s)) for s in SPLITS])
def test_sub_batches_match_torch_over_the_whole_batch(device, rng, split, dtype):
    n, c, h, w = 6, 5, 3, 7
    momentum = 0.25
    source = weights(rng, c, epsilon=1e-3, momentum=momentum)
    # Far from zero with distinct sub-batch means, so a plain average of the
    # sub-batches' variances (no merge term) would be visibly wrong.
    x = (rng.standard_normal((n, c, h, w)) * 2 + 40 + np.arange(n)[:, None, None, None] * 3).astype(dtype)
    dy = rng.standard_normal((n, c, h, w)).astype(dtype)
    bounds = np.cumsum((0,) + split)
    parts = [x[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    grads = [dy[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    running_mean = torch.tensor(source.mean(), dtype=torch.float64)
    running_variance = torch.tensor(source.variance(), dtype=torch.float64)
    gamma, beta = source.gamma(), source.beta()
    ys, dxs, state = train_sub_batches(device, source, parts, grads)
    ry, rdx, rgamma, rbeta = reference(x, gamma, beta, dy, 1e-3)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(np.concatenate(ys), ry, rtol=rtol, atol=atol)
    np.testing.assert_allclose(np.concatenate(dxs), rdx, rtol=rtol, atol=max(atol, 1e-4))
    np.testing.assert_allclose(state.gradient_for_gamma.to_numpy(), rgamma, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(state.gradient_for_beta.to_numpy(), rbeta, rtol=1e-3, atol=1e-3)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(state.mean.to_numpy(), xd.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.variance.to_numpy(), xd.var(axis=(0, 2, 3)), rtol=1e-4, atol=1e-4)
    F.batch_norm(torch.tensor(xd), running_mean, running_variance, training=True, momentum=momentum, eps=1e-3)
    np.testing.assert_allclose(source.mean(), running_mean.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(source.variance(), running_variance.numpy(), rtol=1e-4, atol=1e-4)


def test_sub_batch_gradients_by_finite_differences(device, rng):
    c = 2
    gamma = (rng.random(c) + 0.5).astype(np.float32)
    beta = rng.standard_normal(c).astype(np.float32)
    x = rng.standard_normal((3, c, 2, 3))
    dy = rng.standard_normal(x.shape)

    def loss(values):
        source = mpsx.BatchNormalizationWeights(gamma, beta, np.zeros(c), np.ones(c))
        ys, _, _ = train_sub_batches(device, source, [values[:1].astype(np.float32), values[1:].astype(np.float32)],
                                     [dy[:1].astype(np.float32), dy[1:].astype(np.float32)], update=False)
        return float(np.sum(np.concatenate(ys).astype(np.float64) * dy))

    source = mpsx.BatchNormalizationWeights(gamma, beta, np.zeros(c), np.ones(c))
    _, dxs, _ = train_sub_batches(device, source, [x[:1].astype(np.float32), x[1:].astype(np.float32)],
                                  [dy[:1].astype(np.float32), dy[1:].astype(np.float32)], update=False)
    numeric = finite_difference_gradient(loss, x, 1e-2)
    np.testing.assert_allclose(np.concatenate(dxs), numeric, rtol=2e-2, atol=2e-3)


def test_sub_batches_with_offset_and_clip_rect(device, rng):
    """Each sub-batch's forward has its own geometry (clip rect, offset);
    its gradient uses that one, through the statistics of every pixel."""
    c = 3
    source = weights(rng, c)
    bn, statistics, statistics_gradient, gradient = kernels(device, source)
    x = rng.standard_normal((5, c, 4, 5)).astype(np.float32)
    parts = [x[:2], x[2:]]
    images = [mpsx.ImageBatch.from_numpy(device, p) for p in parts]
    cb = device.command_queue.command_buffer()
    state = bn.result_state(images[0])
    for image in images:
        statistics.encode_batch(cb, image, state)
    bn.clip_rect = (1, 1, 0, 3, 2, 2)  # x 1-3, y 1-2, both images
    bn.offset = (1, 1, 0)  # read where it writes
    y0 = bn.encode_batch(cb, images[0], batch_normalization_state=state,
                         destination_images=mpsx.ImageBatch.from_numpy(device, np.zeros((2, c, 4, 5), np.float32)))
    bn.clip_rect = None
    bn.offset = (0, 0, 0)
    y1 = bn.encode_batch(cb, images[1], batch_normalization_state=state)
    dys = [mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, c, 4, 5)).astype(np.float32)),
           mpsx.ImageBatch.from_numpy(device, rng.standard_normal((3, c, 4, 5)).astype(np.float32))]
    for image, dy in zip(images, dys):
        statistics_gradient.encode_batch(cb, dy, image, state)
    dxs = [gradient.encode_batch(cb, dy, image, state) for image, dy in zip(images, dys)]
    for item in dxs + [y0, y1, state]:
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    # Reference: the loss over the pixels each forward wrote.
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    yt = F.batch_norm(xt, None, None, torch.tensor(source.gamma(), dtype=torch.float64),
                      torch.tensor(source.beta(), dtype=torch.float64), training=True, eps=1e-5)
    d0 = torch.tensor(dys[0].to_numpy().astype(np.float64))
    d1 = torch.tensor(dys[1].to_numpy().astype(np.float64))
    loss = (yt[:2, :, 1:3, 1:4] * d0[:, :, 1:3, 1:4]).sum() + (yt[2:] * d1).sum()
    loss.backward()
    np.testing.assert_allclose(y0.to_numpy()[:, :, 1:3, 1:4], yt[:2, :, 1:3, 1:4].detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(np.concatenate([dx.to_numpy() for dx in dxs]), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_reset_starts_over(device, rng):
    c = 4
    source = weights(rng, c, momentum=0.0)
    bn, statistics, _, _ = kernels(device, source)
    first = rng.standard_normal((3, c, 2, 3)).astype(np.float32) + 5
    second = rng.standard_normal((2, c, 3, 2)).astype(np.float32) * 3 - 1
    state = bn.result_state(mpsx.ImageBatch.from_numpy(device, first))
    for x in (first, second):
        cb = device.command_queue.command_buffer()
        image = mpsx.ImageBatch.from_numpy(device, x)
        statistics.encode_batch(cb, image, state)
        y = bn.encode_batch(cb, image, batch_normalization_state=state)
        y.synchronize(cb)
        state.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        xd = x.astype(np.float64)
        np.testing.assert_allclose(state.mean.to_numpy(), xd.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(state.variance.to_numpy(), xd.var(axis=(0, 2, 3)), rtol=1e-4, atol=1e-5)
        ry = F.batch_norm(torch.tensor(xd), None, None, torch.tensor(source.gamma(), dtype=torch.float64),
                          torch.tensor(source.beta(), dtype=torch.float64), training=True, eps=1e-5).numpy()
        np.testing.assert_allclose(y.to_numpy(), ry, rtol=1e-4, atol=1e-4)
        state.reset()


def test_sub_batch_errors(device, rng):
    c = 4
    source = weights(rng, c)
    bn, statistics, statistics_gradient, gradient = kernels(device, source)
    a = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, c, 3, 3)).astype(np.float32))
    b = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((3, c, 3, 3)).astype(np.float32))
    five = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 5, 3, 3)).astype(np.float32))
    unseen = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, c, 3, 3)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    state = bn.result_state(a)
    statistics.encode_batch(cb, a, state)
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNBatchNormalizationStatistics: expected source images of 4 "
                                              r"feature channels \(the state's 4 from feature channel 0\), given 5"):
        statistics.encode_batch(cb, five, state)
    statistics.source_feature_channel_offset = 4
    wide = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((1, 8, 3, 3)).astype(np.float32))
    with pytest.raises(mpsx.ShapeError, match="the state's statistics start at feature channel 0, this encode at "
                                              "source_feature_channel_offset 4"):
        statistics.encode_batch(cb, wide, state)
    statistics.source_feature_channel_offset = 0
    statistics.encode_batch(cb, b, state)
    with pytest.raises(mpsx.StateError, match="belongs to another batch: its statistics cover 2 sub-batch"):
        bn.encode_batch(cb, unseen, batch_normalization_state=state)
    ya = bn.encode_batch(cb, a, batch_normalization_state=state)
    with pytest.raises(mpsx.StateError, match="MPSCNNBatchNormalizationStatistics: the MPSCNNBatchNormalizationState "
                                              "was already used by MPSCNNBatchNormalization; statistics accumulate "
                                              "only before any forward or gradient encode"):
        statistics.encode_batch(cb, unseen, state)
    with pytest.raises(mpsx.StateError, match="was made for another batch of source images; pass the source images "
                                              "of one of its forward encodes"):
        statistics_gradient.encode_batch(cb, ya, b, state)  # b has no forward encode yet
    yb = bn.encode_batch(cb, b, batch_normalization_state=state)
    with pytest.raises(mpsx.ShapeError, match=r"expected a source gradient shaped as the forward result, 3x4x3x3 "
                                              r"\(NxCxHxW\), given 2x4x3x3"):
        statistics_gradient.encode_batch(cb, ya, b, state)
    statistics_gradient.encode_batch(cb, ya, a, state)
    statistics_gradient.encode_batch(cb, yb, b, state)
    dx = gradient.encode_batch(cb, yb, b, state)
    assert dx.shape == (3, c, 3, 3)
    with pytest.raises(mpsx.StateError, match="MPSCNNBatchNormalizationStatisticsGradient: the "
                                              "MPSCNNBatchNormalizationState was already used by "
                                              "MPSCNNBatchNormalizationGradient"):
        statistics_gradient.encode_batch(cb, ya, a, state)
    with pytest.raises(mpsx.StateError, match="already used by MPSCNNBatchNormalizationGradient; statistics "
                                              "accumulate only before"):
        statistics.encode_batch(cb, a, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error

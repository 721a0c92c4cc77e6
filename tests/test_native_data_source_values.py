"""Setting the values of mpsx's native data sources (ConvolutionWeights, BatchNormalizationWeights,
GroupNormalizationWeights, InstanceNormalizationWeights): read back as set, the sizes checked, updates encoded
before the set not counting, and a kernel reading them when it reloads; against numpy."""

import numpy as np
import pytest

import mpsx
from test_batch_normalization import inference
from test_normalization_data_source_members import batch_normalization_step


def channels(*values):
    return [np.array(v, np.float32) for v in values]


def test_convolution_weights_set_and_read_back(device):
    rng = np.random.default_rng(0)
    descriptor = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    source = mpsx.ConvolutionWeights(descriptor, np.zeros((4, 3, 3, 2), np.float32), np.zeros(4, np.float32))
    weights, biases = rng.standard_normal((4, 3, 3, 2)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    source.set_weights_and_biases(weights, biases)
    np.testing.assert_array_equal(source.weights(), weights)
    np.testing.assert_array_equal(source.bias_terms(), biases)
    with pytest.raises(mpsx.ShapeError, match="expected biases, given None"):
        source.set_weights_and_biases(weights)
    with pytest.raises(mpsx.ShapeError, match="4 biases or None, given 3"):
        source.set_weights_and_biases(weights, biases[:3])
    with pytest.raises(mpsx.ShapeError):
        source.set_weights_and_biases(weights[:, :2])
    without = mpsx.ConvolutionWeights(descriptor, weights)
    with pytest.raises(mpsx.ShapeError, match=r"expected no biases \(it has no bias terms\), given biases"):
        without.set_weights_and_biases(weights, biases)
    np.testing.assert_array_equal(source.weights(), weights)  # refused: nothing changed
    np.testing.assert_array_equal(source.bias_terms(), biases)
    with pytest.raises(TypeError, match="made without __init__"):
        mpsx.ConvolutionWeights.__new__(mpsx.ConvolutionWeights).set_weights_and_biases(weights, biases)


@pytest.mark.parametrize("make", [
    lambda g, b: mpsx.GroupNormalizationWeights(g, b, 2),
    lambda g, b: mpsx.InstanceNormalizationWeights(g, b),
    lambda g, b: mpsx.BatchNormalizationWeights(g, b, np.zeros(4), np.ones(4)),
])
def test_normalization_weights_set_gamma_and_beta(make):
    source = make(np.ones(4, np.float32), np.zeros(4, np.float32))
    gamma, beta = channels([1, 2, 3, 4], [-1, 0, 1, 2])
    source.set_gamma_and_beta(gamma, beta)
    np.testing.assert_array_equal(source.gamma(), gamma)
    np.testing.assert_array_equal(source.beta(), beta)
    name = type(source).__name__
    with pytest.raises(mpsx.ShapeError, match=f"{name}: expected 4 beta values, one per feature channel, given 3"):
        source.set_gamma_and_beta(beta[::-1], beta[:3])
    np.testing.assert_array_equal(source.gamma(), gamma)  # refused: nothing changed
    with pytest.raises(TypeError, match="made without __init__"):
        type(source).__new__(type(source)).set_gamma_and_beta(gamma, beta)


def test_batch_normalization_weights_set_mean_and_variance():
    source = mpsx.BatchNormalizationWeights(np.ones(3), np.zeros(3), np.zeros(3), np.ones(3))
    mean, variance = channels([0.5, -0.5, 0], [1, 4, 0.25])
    source.set_mean_and_variance(mean, variance)
    np.testing.assert_array_equal(source.mean(), mean)
    np.testing.assert_array_equal(source.variance(), variance)
    with pytest.raises(mpsx.ShapeError, match="expected 3 mean values, one per feature channel, given 2"):
        source.set_mean_and_variance(mean[:2], variance)


def test_a_set_replaces_updates_encoded_before_it_and_a_reload_reads_it(device):
    """Gamma, beta and the running statistics updated on a command buffer, set before it runs: the set values
    stay; the kernel reloaded from the data source normalizes with them."""
    rng = np.random.default_rng(1)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    source = mpsx.BatchNormalizationWeights(np.ones(3), np.zeros(3), np.zeros(3), np.ones(3), optimizer=sgd)
    bn = mpsx.CNNBatchNormalization(device, source)
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    cb, state = batch_normalization_step(device, bn, x, rng.standard_normal((2, 3, 2, 2)).astype(np.float32))
    bn.encode_gamma_and_beta_update(cb, state)
    bn.encode_mean_and_variance_update(cb, state)
    gamma, beta, mean, variance = channels([1, 2, 0.5], [0, 1, -1], [0.5, -0.5, 0], [1, 4, 0.25])
    source.set_gamma_and_beta(gamma, beta)
    source.set_mean_and_variance(mean, variance)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    for got, expected in ((source.gamma(), gamma), (source.beta(), beta), (source.mean(), mean),
                          (source.variance(), variance)):
        np.testing.assert_array_equal(got, expected)
    bn.reload_gamma_and_beta_from_data_source()
    bn.reload_mean_and_variance_from_data_source()
    cb = device.command_queue.command_buffer()
    result = bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x))
    result.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(result.to_numpy(), inference(x, gamma, beta, mean, variance, source.epsilon),
                               rtol=1e-5, atol=1e-6)

"""The normalization data source protocols' optional CPU-side updates on the protocol classes (inherited ones count as
absent, as a selector a data source does not implement in MPS), CNNBatchNormalization.reload_data_source, and the
small factory and copy of CNNLossDataDescriptor and ImageDescriptor; against numpy."""

import numpy as np
import pytest

import helpers
import mpsx
import test_instance_normalization as instance
from test_batch_normalization import ArraySource, inference

FLT_MIN = np.finfo(np.float32).tiny


@pytest.mark.parametrize("protocol, name, argument", [
    (mpsx.CNNBatchNormalizationDataSource, "update_gamma_and_beta_with_batch_normalization_state", None),
    (mpsx.CNNBatchNormalizationDataSource, "update_mean_and_variance_with_batch_normalization_state", None),
    (mpsx.CNNGroupNormalizationDataSource, "update_gamma_and_beta_with_group_normalization_state_batch", []),
    (mpsx.CNNInstanceNormalizationDataSource, "update_gamma_and_beta_with_instance_normalization_state_batch", []),
])
def test_defaults_called_directly_perform_no_update(protocol, name, argument):
    """MPS: "A boolean value indicating if the update was performed"; a data source without one updates nothing."""
    assert getattr(protocol(), name)(argument) is False


def batch_normalization_step(device, bn, x, dy):
    """Statistics, gradients and both update encodes of one batch; the command buffer, committed and waited on."""
    statistics, statistics_gradient = mpsx.CNNBatchNormalizationStatistics(device), \
        mpsx.CNNBatchNormalizationStatisticsGradient(device)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    state = bn.result_state(batch)
    cb = device.command_queue.command_buffer()
    statistics.encode_batch(cb, batch, state)
    bn.encode_batch(cb, batch, state)
    statistics_gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), batch, state)
    return cb, state


class MeanAndVarianceOnly(ArraySource):
    """Defines the CPU-side mean and variance update only: the batch statistics become the running ones."""

    def update_mean_and_variance_with_batch_normalization_state(self, state):
        self._mean, self._variance = state.mean.to_numpy().copy(), state.variance.to_numpy().copy()
        return True


def test_batch_normalization_uses_the_updates_a_subclass_defines(device, rng):
    gamma = (rng.random(3) + 0.5).astype(np.float32)
    src = MeanAndVarianceOnly(gamma, np.zeros(3, np.float32), np.zeros(3, np.float32), np.ones(3, np.float32))
    bn = mpsx.CNNBatchNormalization(device, src)
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    cb, state = batch_normalization_step(device, bn, x, np.ones_like(x))
    # The inherited gamma and beta update is absent: no update style, as for a data source without the selector.
    with pytest.raises(Exception, match="update_gamma_and_beta_with_batch_normalization_state"):
        bn.encode_gamma_and_beta_update(cb, state)
    bn.encode_mean_and_variance_update(cb, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    mean, variance = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(src._mean, mean, rtol=1e-5, atol=1e-6)
    # The kernel reloaded the new running statistics after the update.
    y = helpers.read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_allclose(y, inference(x, gamma, np.zeros(3), src._mean, src._variance, FLT_MIN), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(src._variance, variance, rtol=1e-4, atol=1e-6)


def test_an_update_set_on_the_instance_counts(device, rng):
    gamma = np.ones(2, np.float32)
    src = ArraySource(gamma)
    calls = []
    src.update_gamma_and_beta_with_batch_normalization_state = lambda state: calls.append(state) or False
    bn = mpsx.CNNBatchNormalization(device, src)
    x = rng.standard_normal((2, 2, 2, 2)).astype(np.float32)
    cb, state = batch_normalization_step(device, bn, x, np.ones_like(x))
    bn.encode_gamma_and_beta_update(cb, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed" and len(calls) == 1
    assert isinstance(calls[0], mpsx.CNNBatchNormalizationState)


class InstanceSource(instance.Source):
    pass


class GroupSource(helpers.GammaAndBeta, mpsx.CNNGroupNormalizationDataSource):
    def __init__(self, gamma):
        self.g, self.b = gamma, None


@pytest.mark.parametrize("kernel_class, source_class, update", [
    (mpsx.CNNInstanceNormalization, InstanceSource, "update_gamma_and_beta_with_instance_normalization_state_batch"),
    (mpsx.CNNGroupNormalization, GroupSource, "update_gamma_and_beta_with_group_normalization_state_batch"),
])
def test_group_and_instance_normalization_use_the_update_a_subclass_defines(device, kernel_class, source_class,
                                                                            update):
    gamma = np.array([1.0, 2.0], np.float32)
    x = mpsx.ImageBatch.from_numpy(device, np.random.default_rng(1).standard_normal((2, 2, 3, 3))
                                   .astype(np.float32))

    def encode(kernel):
        cb = device.command_queue.command_buffer()
        _, states = kernel.encode_batch(cb, x, destination_states=True)
        kernel.gradient_kernels()[0].encode_batch(cb, x, x, states)
        return cb, states

    without = kernel_class(device, source_class(gamma.copy()))
    cb, states = encode(without)
    with pytest.raises(Exception, match=update):  # the inherited default counts as absent
        without.encode_gamma_and_beta_update(cb, states)
    cb.commit()
    cb.wait_until_completed()

    class Defining(source_class):
        pass

    def step(self, states):  # halves gamma from the state the update receives
        self.g = states[0].gamma.to_numpy() * 0.5
        return True

    setattr(Defining, update, step)
    src = Defining(gamma.copy())
    k = kernel_class(device, src)
    cb, states = encode(k)
    k.encode_gamma_and_beta_update(cb, states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    np.testing.assert_allclose(src.g, gamma * 0.5)


def test_batch_normalization_reload_data_source(device, rng):
    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    bn = mpsx.CNNBatchNormalization(device, ArraySource(np.ones(3, np.float32)))
    gamma, beta = np.array([1.0, 2.0, 0.5], np.float32), np.array([0.0, 1.0, -1.0], np.float32)
    mean, variance = np.array([0.5, -0.5, 0.0], np.float32), np.array([1.0, 4.0, 0.25], np.float32)

    class WithEpsilon(ArraySource):
        epsilon = 0.125

    new = WithEpsilon(gamma, beta, mean, variance)
    with pytest.warns(DeprecationWarning, match="reload_gamma_and_beta_from_data_source"):
        bn.reload_data_source(new)
    assert bn.data_source is new and bn.epsilon == 0.125
    y = helpers.read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_allclose(y, inference(x, gamma, beta, mean, variance, 0.125), rtol=1e-5, atol=1e-6)
    # Bad input: nothing changes.
    with pytest.warns(DeprecationWarning), pytest.raises(Exception, match=r"4 feature channels.*made for 3"):
        bn.reload_data_source(ArraySource(np.ones(4, np.float32)))
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="given None"):
        bn.reload_data_source(None)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="gamma"):
        bn.reload_data_source(object())
    assert bn.data_source is new and bn.epsilon == 0.125
    again = helpers.read(device, lambda cb: bn.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
    np.testing.assert_array_equal(again, y)


def test_loss_data_descriptor_factory():
    values = np.arange(12, dtype=np.float32)
    layout = mpsx.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH
    d = mpsx.CNNLossDataDescriptor.cnn_loss_data_descriptor_with_data(values, layout, (2, 3, 2))
    assert type(d) is mpsx.CNNLossDataDescriptor
    assert (d.layout, tuple(d.size), d.bytes_per_row, d.bytes_per_image) == (layout, (2, 3, 2), 8, 24)
    np.testing.assert_array_equal(np.frombuffer(d.data, np.float32), values)
    with pytest.raises(TypeError, match="expected float32 data, given an array of float64"):
        mpsx.CNNLossDataDescriptor.cnn_loss_data_descriptor_with_data(values.astype(np.float64), layout, (2, 3, 2))


def test_image_descriptor_copy():
    d = mpsx.ImageDescriptor(mpsx.DataType.FLOAT16, 5, 4, 3, 2)
    c = d.copy()
    assert c is not d and c == d and type(c) is mpsx.ImageDescriptor
    assert (c.channel_format, c.width, c.height, c.feature_channels, c.number_of_images) == \
        (mpsx.DataType.FLOAT16, 5, 4, 3, 2)
    bare = mpsx.ImageDescriptor.__new__(mpsx.ImageDescriptor).copy()
    assert bare == mpsx.ImageDescriptor.__new__(mpsx.ImageDescriptor)

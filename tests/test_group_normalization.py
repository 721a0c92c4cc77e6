"""CNNGroupNormalization and its gradient: the checks of
tests/test_instance_normalization.py with groups of several channels, against
torch.nn.functional.group_norm in float64; number_of_groups; bad input; the
three update styles with PyTorch's GroupNorm."""

import numpy as np
import pytest
import torch

import helpers
import mpsx
import test_instance_normalization as shared
import test_update_styles as styles


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape,groups", [((3, 6, 5, 7), 3), ((2, 6, 5, 7), 1), ((2, 6, 1, 9), 6),
                                          ((1, 4, 3, 3), 2)])
def test_forward_and_gradient_against_torch(device, shape, groups, dtype):
    shared.check_against_torch(device, groups, shape, dtype)


def test_finite_differences(device):
    shared.check_finite_differences(device, 2, (2, 4, 3, 3))


def test_clip_rect_and_offset(device):
    shared.check_clip_rect_and_offset(device, 2)


def test_gradient_kernels_and_state(device):
    k = shared.kernel_for(device, 2, *shared.parameters(4))
    (g,) = k.gradient_kernels()
    assert type(g) is mpsx.CNNGroupNormalizationGradient
    x = mpsx.Image.from_numpy(device, np.random.default_rng(0).standard_normal((1, 4, 2, 3)).astype(np.float32))
    state = helpers.run(device, lambda cb: k.encode(cb, x, destination_state=True)[1])
    assert isinstance(state, mpsx.CNNGroupNormalizationGradientState) and state.group_normalization is k
    assert k.number_of_groups == 2


class Source(helpers.GammaAndBeta, mpsx.CNNGroupNormalizationDataSource):
    def __init__(self, gamma, beta, groups):
        self.g, self.b, self.number_of_groups = gamma, beta, groups


def test_number_of_groups_is_read_at_load(device):
    """The kernel reads number_of_groups when made and on reload_gamma_and_beta_from_data_source."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 6, 3, 4)).astype(np.float32)
    gamma, beta = shared.parameters(6)
    src = Source(gamma, beta, 2)
    k = mpsx.CNNGroupNormalization(device, src)
    xs = mpsx.ImageBatch.from_numpy(device, x)
    y = helpers.read(device, lambda cb: k.encode_batch(cb, xs))
    eps = float(np.finfo(np.float32).tiny)
    np.testing.assert_allclose(y, shared.reference(x, x, gamma, beta, 2, eps)[0], rtol=1e-4, atol=1e-4)
    src.number_of_groups = 3
    k.reload_gamma_and_beta_from_data_source()
    assert k.number_of_groups == 3
    y = helpers.read(device, lambda cb: k.encode_batch(cb, xs))
    np.testing.assert_allclose(y, shared.reference(x, x, gamma, beta, 3, eps)[0], rtol=1e-4, atol=1e-4)
    w = mpsx.GroupNormalizationWeights(gamma, beta, 2)
    w.number_of_groups = 6
    assert w.number_of_groups == 6


def test_groups_must_divide_the_channels(device):
    gamma, beta = shared.parameters(6)
    with pytest.raises(ValueError, match="number_of_groups must divide the 6 feature channels, given 4"):
        mpsx.GroupNormalizationWeights(gamma, beta, 4)
    w = mpsx.GroupNormalizationWeights(gamma, beta, 3)
    with pytest.raises(ValueError, match="number_of_groups must divide the 6 feature channels, given 0"):
        w.number_of_groups = 0
    assert w.number_of_groups == 3
    with pytest.raises(ValueError, match="the data source's number_of_groups must divide its 6 feature channels, "
                                         "given 5"):
        mpsx.CNNGroupNormalization(device, Source(gamma, beta, 5))
    src = Source(gamma, beta, 2)
    k = mpsx.CNNGroupNormalization(device, src)
    src.number_of_groups = 7
    with pytest.raises(ValueError, match="given 7"):
        k.reload_gamma_and_beta_from_data_source()
    assert k.number_of_groups == 2


def test_data_source_arrays_of_the_wrong_length(device):
    with pytest.raises(mpsx.ShapeError, match=r"gamma holds 4 values; expected 6"):
        mpsx.CNNGroupNormalization(device, type("S", (Source,), {"number_of_feature_channels": lambda self: 6})(
            np.ones(4, np.float32), None, 2))
    with pytest.raises(mpsx.ShapeError, match=r"beta holds 2 values; expected 4"):
        mpsx.CNNGroupNormalization(device, Source(np.ones(4, np.float32), np.ones(2, np.float32), 2))
    with pytest.raises(mpsx.ShapeError, match=r"expected 4 beta values \(as gamma\), given 3"):
        mpsx.GroupNormalizationWeights(np.ones(4, np.float32), np.ones(3, np.float32), 2)
    with pytest.raises(TypeError, match="does not implement number_of_groups, required by MPSCNNGroupNormalizationDataSource"):
        mpsx.CNNGroupNormalization(device, shared.Source(np.ones(4, np.float32)))


class RaisingSource(Source):
    def update_gamma_and_beta_with_group_normalization_state_batch(self, states):
        raise RuntimeError("update refused")


def test_an_update_that_raises_fails_the_command_buffer(device):
    gamma = np.array([1.0, 2.0, 0.5, 1.5], np.float32)
    src = RaisingSource(gamma.copy(), None, 2)
    k = mpsx.CNNGroupNormalization(device, src)
    shared.check_update_that_raises(device, k, src, gamma)


def torch_trajectory(p, x, labels):
    """The instance normalization trajectory with GroupNorm(2 groups) in its place."""
    return styles.torch_trajectory(p, x, labels, torch.nn.GroupNorm(2, styles.C, eps=styles.EPSILON))


class NormalizationSource(shared.SGDGammaAndBeta, mpsx.CNNGroupNormalizationDataSource):
    number_of_groups = 2

    def update_gamma_and_beta_with_group_normalization_state_batch(self, states):  # style 2
        return self.sgd_step(states)


def test_style_1_host_update_then_reload_from_data_source(device):
    shared.style_1(device, NormalizationSource, mpsx.CNNGroupNormalization, torch_trajectory)


def test_style_2_data_source_update(device):
    shared.style_2(device, NormalizationSource, mpsx.CNNGroupNormalization, torch_trajectory)


def test_style_3_update_encoded_on_the_command_buffer(device):
    shared.style_3(device, lambda g, b, o: mpsx.GroupNormalizationWeights(g, b, 2, styles.EPSILON, optimizer=o),
                   mpsx.CNNGroupNormalization, torch_trajectory)


def test_native_weights_refuse_the_state_of_another_family(device):
    weights = mpsx.GroupNormalizationWeights(np.ones(4, np.float32), np.zeros(4, np.float32), 2,
                                             optimizer=mpsx.NNOptimizerStochasticGradientDescent(device,
                                                                                                 learning_rate=0.1))
    bn = mpsx.CNNBatchNormalization(device, mpsx.BatchNormalizationWeights(
        np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32), np.ones(4, np.float32)))
    x = mpsx.Image.from_numpy(device, np.ones((2, 4, 3, 3), np.float32))
    cb = device.command_queue.command_buffer()
    with pytest.raises(TypeError, match="GroupNormalizationWeights: group_normalization_state_batch must be the gradient state of an instance "
                                        "or group normalization encode, given an MPSCNNBatchNormalizationState"):
        weights.update_gamma_and_beta_with_command_buffer(cb, bn.result_state(x))
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"

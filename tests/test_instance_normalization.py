"""CNNInstanceNormalization and its gradient against torch (float64 on the
CPU) and finite differences; data sources, reloads, the three update styles
with PyTorch's trajectory, and bad input. The functions here without a test_
prefix also serve tests/test_group_normalization.py (instance normalization
is group normalization with one channel per group)."""

import functools

import numpy as np
import pytest
import torch

import helpers
import mpsx
import test_update_styles as styles

FLT_MIN = np.finfo(np.float32).tiny


def parameters(channels, seed=5):
    rng = np.random.default_rng(seed)
    return ((1 + 0.3 * rng.standard_normal(channels)).astype(np.float32),
            (0.2 * rng.standard_normal(channels)).astype(np.float32))


def kernel_for(device, groups, gamma, beta, epsilon=1e-5, **kw):
    """groups None: an instance normalization."""
    if groups is None:
        return mpsx.CNNInstanceNormalization(device, mpsx.InstanceNormalizationWeights(gamma, beta, epsilon, **kw))
    return mpsx.CNNGroupNormalization(device, mpsx.GroupNormalizationWeights(gamma, beta, groups, epsilon, **kw))


def reference(x, dy, gamma, beta, groups, epsilon=1e-5):
    """torch in float64: y, dx, dgamma, dbeta."""
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    g = torch.tensor(gamma, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(beta, dtype=torch.float64, requires_grad=True)
    if groups is None:
        y = torch.nn.functional.instance_norm(t, weight=g, bias=b, eps=epsilon)
    else:
        y = torch.nn.functional.group_norm(t, groups, g, b, epsilon)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return y.detach().numpy(), t.grad.numpy(), g.grad.numpy(), b.grad.numpy()


def forward_and_gradient(device, kernel, x, dy, dtype=np.float32):
    """mpsx's y, dx, dgamma, dbeta over a batch."""
    xs = mpsx.ImageBatch.from_numpy(device, x.astype(dtype))
    dys = mpsx.ImageBatch.from_numpy(device, dy.astype(dtype))
    gradient = kernel.gradient_kernels()[0]

    def encode(cb):
        y, states = kernel.encode_batch(cb, xs, destination_states=True)
        dx = gradient.encode_batch(cb, dys, xs, states)
        return y, dx, states[0].gradient_for_gamma, states[0].gradient_for_beta
    cb = device.command_queue.command_buffer()
    y, dx, dgamma, dbeta = encode(cb)
    for item in (y, dx, dgamma, dbeta):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return y.to_numpy(), dx.to_numpy(), dgamma.to_numpy(copy=True), dbeta.to_numpy(copy=True)


def check_against_torch(device, groups, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype).astype(np.float32)
    dy = rng.standard_normal(shape).astype(dtype).astype(np.float32)
    gamma, beta = parameters(shape[1])
    got = forward_and_gradient(device, kernel_for(device, groups, gamma, beta), x, dy, dtype)
    expected = reference(x, dy, gamma, beta, groups)
    rtol, atol = helpers.tolerance(dtype)
    for name, g, e in zip(("y", "dx", "dgamma", "dbeta"), got, expected):
        scale = 1 if name in ("y", "dx") else shape[0] * shape[2] * shape[3]
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol * scale ** 0.5 * (4 if name == "dx" else 1),
                                   err_msg=name)


def check_finite_differences(device, groups, shape=(2, 2, 3, 3)):
    """dx, dgamma, dbeta of mpsx against central differences of mpsx's own forward."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape).astype(np.float32)  # loss = sum(w * y)
    gamma, beta = parameters(shape[1], 8)
    _, dx, dgamma, dbeta = forward_and_gradient(device, kernel_for(device, groups, gamma, beta, 1e-3), x, w)

    def loss(x, gamma, beta):
        k = kernel_for(device, groups, gamma, beta, 1e-3)
        y = helpers.read(device, lambda cb: k.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x)))
        return float((y.astype(np.float64) * w).sum())
    for f, values, analytic in ((lambda v: loss(v, gamma, beta), x, dx), (lambda v: loss(x, v, beta), gamma, dgamma),
                                (lambda v: loss(x, gamma, v), beta, dbeta)):
        numeric = helpers.finite_difference_gradient(f, values, 1e-2)
        np.testing.assert_allclose(analytic, numeric, rtol=2e-2, atol=2e-2)


def check_clip_rect_and_offset(device, groups):
    """The statistics cover the region the encode reads; the gradient is zero outside it."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 7)).astype(np.float32)
    dy = rng.standard_normal((2, 4, 4, 5)).astype(np.float32)
    gamma, beta = parameters(4)
    k = kernel_for(device, groups, gamma, beta)
    k.offset = (1, 2, 0)
    k.clip_rect = mpsx.Region(0, 0, 0, 4, 3, 2)
    xs = mpsx.ImageBatch.from_numpy(device, x)
    dys = mpsx.ImageBatch.from_numpy(device, dy)

    def encode(cb):
        dst = mpsx.ImageBatch.from_numpy(device, np.full((2, 4, 4, 5), 7, np.float32))
        _, states = k.encode_batch(cb, xs, destination_images=dst, destination_states=True)
        dx = k.gradient_kernels()[0].encode_batch(cb, dys, xs, states)
        return dst, dx
    y, dx = helpers.read(device, encode)
    region = x[:, :, 2:5, 1:5]
    ey, edx, _, _ = reference(region, dy[:, :, :3, :4], gamma, beta, groups)
    np.testing.assert_allclose(y[:, :, :3, :4], ey, rtol=1e-4, atol=1e-5)
    assert (y[:, :, 3:, :] == 7).all() and (y[:, :, :, 4:] == 7).all()  # outside clip_rect: untouched
    np.testing.assert_allclose(dx[:, :, 2:5, 1:5], edx, rtol=1e-4, atol=1e-4)
    mask = np.ones(dx.shape, bool)
    mask[:, :, 2:5, 1:5] = False
    assert (dx[mask] == 0).all()


# ---------------------------------------------------------------- instance normalization


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (3, 5, 7, 9), (2, 4, 1, 13)])
def test_forward_and_gradient_against_torch(device, shape, dtype):
    check_against_torch(device, None, shape, dtype)


def test_finite_differences(device):
    check_finite_differences(device, None)


def test_clip_rect_and_offset(device):
    check_clip_rect_and_offset(device, None)


def test_source_feature_channel_offset(device):
    """A kernel of 3 channels over channels 4..6 of 8; the gradient is zero in the others."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 4, 5)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    gamma, beta = parameters(3)
    k = kernel_for(device, None, gamma, beta)
    k.source_feature_channel_offset = 4
    y, dx = helpers.batch_forward_and_gradient(device, x, dy, k, k.gradient_kernels()[0])
    ey, edx, _, _ = reference(x[:, 4:7], dy, gamma, beta, None)
    np.testing.assert_allclose(y, ey, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx[:, 4:7], edx, rtol=1e-4, atol=1e-4)
    assert (dx[:, :4] == 0).all() and (dx[:, 7:] == 0).all()


def test_single_image_encode_and_state(device):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    dy = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    gamma, beta = parameters(3)
    k = kernel_for(device, None, gamma, beta)
    image, gradient_image = mpsx.Image.from_numpy(device, x), mpsx.Image.from_numpy(device, dy)
    gradient = mpsx.CNNInstanceNormalizationGradient(device)

    def encode(cb):
        y, state = k.encode(cb, image, destination_state=True)
        dx = gradient.encode(cb, gradient_image, image, state)
        return y, dx, state
    cb = device.command_queue.command_buffer()
    y, dx, state = encode(cb)
    for item in (y, dx, state):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    ey, edx, eg, eb = reference(x, dy, gamma, beta, None)
    np.testing.assert_allclose(y.to_numpy(), ey, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx.to_numpy(), edx, rtol=1e-4, atol=1e-4)
    assert isinstance(state, mpsx.CNNInstanceNormalizationGradientState)
    assert state.instance_normalization is k
    np.testing.assert_allclose(state.gradient_for_gamma.to_numpy(), eg, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state.gradient_for_beta.to_numpy(), eb, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(state.gamma.to_numpy(), gamma)
    np.testing.assert_array_equal(state.beta.to_numpy(), beta)


def test_gradient_kernels(device):
    k = kernel_for(device, None, *parameters(2))
    (g,) = k.gradient_kernels()
    assert type(g) is mpsx.CNNInstanceNormalizationGradient


class Source(helpers.GammaAndBeta, mpsx.CNNInstanceNormalizationDataSource):
    def __init__(self, gamma, beta=None, channels=None):
        self.g, self.b, self.loads, self.purges = gamma, beta, 0, 0
        self.channels = len(gamma) if channels is None else channels

    def number_of_feature_channels(self):
        return self.channels

    def load(self):
        self.loads += 1
        return True

    def purge(self):
        self.purges += 1


def test_python_data_source_defaults_and_reloads(device):
    """No beta: zeros; no epsilon: FLT_MIN; reload from the data source and from a gamma-and-beta state."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    gamma = np.array([1.0, 2.0, 0.5], np.float32)
    src = Source(gamma)
    k = mpsx.CNNInstanceNormalization(device, src)
    assert k.epsilon == pytest.approx(FLT_MIN) and k.data_source is src
    assert src.loads == src.purges == 1
    xs = mpsx.ImageBatch.from_numpy(device, x)
    y = helpers.read(device, lambda cb: k.encode_batch(cb, xs))
    np.testing.assert_allclose(y, reference(x, x, gamma, np.zeros(3), None, FLT_MIN)[0], rtol=1e-4, atol=1e-4)
    src.g, src.b = gamma * 2, np.ones(3, np.float32)
    k.reload_gamma_and_beta_from_data_source()
    y = helpers.read(device, lambda cb: k.encode_batch(cb, xs))
    np.testing.assert_allclose(y, reference(x, x, gamma * 2, np.ones(3), None, FLT_MIN)[0], rtol=1e-4, atol=1e-4)
    state = mpsx.CNNNormalizationGammaAndBetaState(device, np.ones(3, np.float32), np.full(3, -1, np.float32))

    def encode(cb):
        k.reload_gamma_and_beta(cb, state)
        return k.encode_batch(cb, xs)
    y = helpers.read(device, encode)
    np.testing.assert_allclose(y, reference(x, x, np.ones(3), -np.ones(3), None, FLT_MIN)[0], rtol=1e-4, atol=1e-4)
    k.epsilon = 0.5
    k.reload_data_source(mpsx.InstanceNormalizationWeights(gamma, np.zeros(3, np.float32), 0.25))
    assert k.epsilon == 0.25
    y = helpers.read(device, lambda cb: k.encode_batch(cb, xs))
    np.testing.assert_allclose(y, reference(x, x, gamma, np.zeros(3), None, 0.25)[0], rtol=1e-4, atol=1e-4)


def test_weights_train_with_an_optimizer(device):
    """InstanceNormalizationWeights with SGD: gamma -= lr * dgamma after the command buffer completed."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 2, 4, 4)).astype(np.float32)
    dy = rng.standard_normal((3, 2, 4, 4)).astype(np.float32)
    gamma, beta = parameters(2)
    w = mpsx.InstanceNormalizationWeights(gamma, beta, optimizer=mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=0.5))
    k = mpsx.CNNInstanceNormalization(device, w)
    xs, dys = mpsx.ImageBatch.from_numpy(device, x), mpsx.ImageBatch.from_numpy(device, dy)

    def encode(cb):
        _, states = k.encode_batch(cb, xs, destination_states=True)
        k.gradient_kernels()[0].encode_batch(cb, dys, xs, states)
        k.encode_gamma_and_beta_update(cb, states)
    helpers.run(device, encode)
    _, _, eg, eb = reference(x, dy, gamma, beta, None)
    np.testing.assert_allclose(w.gamma(), gamma - 0.5 * eg, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.beta(), beta - 0.5 * eb, rtol=1e-4, atol=1e-5)
    # and the kernel uses them
    y = helpers.read(device, lambda cb: k.encode_batch(cb, xs))
    np.testing.assert_allclose(y, reference(x, dy, gamma - 0.5 * eg, beta - 0.5 * eb, None)[0], rtol=1e-4, atol=1e-4)


def test_weights_follow_replayed_updates(device):
    """A recorded step replayed three times leaves the weights of three encoded
    steps; host reads between replays see each replay's completed update."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    gamma, beta = parameters(2)
    w = mpsx.InstanceNormalizationWeights(gamma, beta, optimizer=mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=0.25, momentum_scale=0.5))
    k = mpsx.CNNInstanceNormalization(device, w)
    xs, dys = mpsx.ImageBatch.from_numpy(device, x), mpsx.ImageBatch.from_numpy(device, dy)
    cb = device.command_queue.command_buffer(replayable=True)
    _, states = k.encode_batch(cb, xs, destination_states=True)
    k.gradient_kernels()[0].encode_batch(cb, dys, xs, states)
    k.encode_gamma_and_beta_update(cb, states)
    g, b = gamma.astype(np.float64), beta.astype(np.float64)
    vg, vb = np.zeros(2), np.zeros(2)
    for step in range(3):
        cb.commit() if step == 0 else cb.replay()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        _, _, eg, eb = reference(x, dy, g, b, None)
        vg, vb = 0.5 * vg + eg, 0.5 * vb + eb
        g, b = g - 0.25 * vg, b - 0.25 * vb
        np.testing.assert_allclose(w.gamma(), g, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(w.beta(), b, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- bad input


def test_data_source_arrays_of_the_wrong_length(device):
    with pytest.raises(mpsx.ShapeError, match=r"gamma holds 2 values; expected 3 \(number_of_feature_channels\)"):
        mpsx.CNNInstanceNormalization(device, Source(np.ones(2, np.float32), channels=3))
    with pytest.raises(mpsx.ShapeError, match=r"beta holds 4 values; expected 3"):
        mpsx.CNNInstanceNormalization(device, Source(np.ones(3, np.float32), np.ones(4, np.float32)))
    with pytest.raises(mpsx.ShapeError, match=r"expected 3 beta values \(as gamma\), given 2"):
        mpsx.InstanceNormalizationWeights(np.ones(3, np.float32), np.ones(2, np.float32))
    k = mpsx.CNNInstanceNormalization(device, src := Source(np.ones(3, np.float32)))
    src.g = np.ones(5, np.float32)
    with pytest.raises(mpsx.ShapeError, match="gamma holds 5 values; expected 3"):
        k.reload_gamma_and_beta_from_data_source()
    src.channels = 4
    with pytest.raises(mpsx.ShapeError, match="now has 4 feature channels; the kernel was made for 3"):
        k.reload_gamma_and_beta_from_data_source()


def test_bad_images_and_states(device):
    k = kernel_for(device, None, *parameters(3))
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match="expected source images of at least 3 feature channels"):
        k.encode(cb, mpsx.Image.from_numpy(device, np.zeros((1, 2, 3, 3), np.float32)))
    x = mpsx.Image.from_numpy(device, np.zeros((1, 3, 3, 3), np.float32))
    _, state = k.encode(cb, x, destination_state=True)
    with pytest.raises(TypeError, match="expected an MPSCNNGroupNormalizationGradientState, given an "
                                        "MPSCNNInstanceNormalizationGradientState"):
        mpsx.CNNGroupNormalizationGradient(device).encode(cb, x, x, state)
    other = kernel_for(device, None, *parameters(3))
    with pytest.raises(mpsx.StateError, match="has no gradients for gamma and beta"):
        k.encode_gamma_and_beta_update(cb, state)
    with pytest.raises(mpsx.StateError, match="was made by another MPSCNNInstanceNormalization"):
        other.encode(cb, x, destination_state=state)
    with pytest.raises(TypeError, match="InstanceNormalizationWeights"):
        mpsx.CNNInstanceNormalization(device, mpsx.GroupNormalizationWeights(np.ones(2), np.ones(2), 2))
    with pytest.raises(TypeError, match="does not implement gamma, beta, number_of_feature_channels"):
        mpsx.CNNInstanceNormalization(device, object())
    cb.commit()
    cb.wait_until_completed()


def test_uninitialized_objects_raise(device):
    for cls in (mpsx.CNNInstanceNormalization, mpsx.InstanceNormalizationWeights,
                mpsx.CNNInstanceNormalizationGradientState, mpsx.CNNInstanceNormalizationGradient):
        with pytest.raises(TypeError):
            o = cls.__new__(cls)
            for name in ("number_of_feature_channels", "gamma", "epsilon", "gradient_for_gamma", "kernel_offset_x"):
                if hasattr(cls, name):
                    v = getattr(o, name)
                    v() if callable(v) else None


class RaisingSource(Source):
    def update_gamma_and_beta_with_instance_normalization_state_batch(self, states):
        raise RuntimeError("update refused")


def check_update_that_raises(device, kernel, source, gamma):
    x = mpsx.ImageBatch.from_numpy(device, np.random.default_rng(1).standard_normal((2, len(gamma), 3, 3))
                                   .astype(np.float32))
    cb = device.command_queue.command_buffer()
    _, states = kernel.encode_batch(cb, x, destination_states=True)
    kernel.gradient_kernels()[0].encode_batch(cb, x, x, states)
    kernel.encode_gamma_and_beta_update(cb, states)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "error"
    assert isinstance(cb.error, RuntimeError) and "update refused" in str(cb.error)
    np.testing.assert_array_equal(source.g, gamma)
    y = helpers.read(device, lambda cb: kernel.encode_batch(cb, x))  # the kernel still has the old values
    np.testing.assert_allclose(y, helpers.read(device, lambda cb: kernel.encode_batch(cb, x)))
    return y


def test_an_update_that_raises_fails_the_command_buffer(device):
    gamma = np.array([1.0, 2.0], np.float32)
    src = RaisingSource(gamma.copy())
    k = mpsx.CNNInstanceNormalization(device, src)
    y = check_update_that_raises(device, k, src, gamma)
    x = np.random.default_rng(1).standard_normal((2, 2, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(y, reference(x, x, gamma, np.zeros(2), None, FLT_MIN)[0], rtol=1e-4, atol=1e-4)


def test_a_data_source_without_updates(device):
    k = mpsx.CNNInstanceNormalization(device, Source(np.ones(2, np.float32)))
    x = mpsx.Image.from_numpy(device, np.ones((1, 2, 2, 2), np.float32))
    cb = device.command_queue.command_buffer()
    _, state = k.encode(cb, x, destination_state=True)
    mpsx.CNNInstanceNormalizationGradient(device).encode(cb, x, x, state)
    with pytest.raises(TypeError, match="implements neither update_gamma_and_beta_with_command_buffer nor "
                                        "update_gamma_and_beta_with_instance_normalization_state_batch"):
        k.encode_gamma_and_beta_update(cb, state)
    cb.commit()
    cb.wait_until_completed()


# ---------------------------------------------------------------- the three update styles of MPS


def torch_trajectory(p, x, labels):
    """styles.torch_trajectory with instance normalization in place of batch normalization."""
    return styles.torch_trajectory(p, x, labels, torch.nn.InstanceNorm2d(styles.C, eps=styles.EPSILON, affine=True))


class SGDGammaAndBeta(helpers.GammaAndBeta):
    """gamma and beta of a data source of the three styles' model, updated by a plain SGD step over the batch of
    states (style 2)."""
    epsilon = styles.EPSILON

    def __init__(self, gamma, beta):
        self.g, self.b = gamma.copy(), beta.copy()

    def sgd_step(self, states):
        self.g = states[0].gamma.to_numpy() - styles.LR * sum(s.gradient_for_gamma.to_numpy() for s in states)
        self.b = states[0].beta.to_numpy() - styles.LR * sum(s.gradient_for_beta.to_numpy() for s in states)
        return True


class NormalizationSource(SGDGammaAndBeta, mpsx.CNNInstanceNormalizationDataSource):
    def update_gamma_and_beta_with_instance_normalization_state_batch(self, states):  # style 2
        return self.sgd_step(states)


class Model(styles.Model):
    """styles.Model with instance normalization: `bn` is the normalization kernel."""

    def __init__(self, device, conv_source, norm_source, fc_source, kernel=mpsx.CNNInstanceNormalization):
        super().__init__(device, conv_source, mpsx.BatchNormalizationWeights(
            np.ones(styles.C), np.zeros(styles.C), np.zeros(styles.C), np.ones(styles.C)), fc_source)
        self.bn = kernel(device, norm_source)
        self.norm_gradient = self.bn.gradient_kernels()[0]

    def encode(self, cb, x, labels):
        y, conv_states = self.conv.encode_batch(cb, x, destination_states=True)
        z, norm_states = self.bn.encode_batch(cb, y, destination_states=True)
        h, relu_states = self.relu.encode_batch(cb, z, destination_states=True)
        logits, fc_states = self.fc.encode_batch(cb, h, destination_states=True)
        g = self.loss.encode_batch(cb, logits, labels)
        g = self.fc_gradient.encode_batch(cb, g, h, fc_states)
        g = self.relu_gradient.encode_batch(cb, g, z, relu_states)
        g = self.norm_gradient.encode_batch(cb, g, y, norm_states)
        self.conv_gradient.encode_batch(cb, g, x, conv_states)
        return conv_states[0], norm_states[0], fc_states[0]


def python_sourced_model(device, p, source=NormalizationSource, kernel=mpsx.CNNInstanceNormalization):
    return styles.python_sourced_model(device, p, source, functools.partial(Model, kernel=kernel))


def style_1(device, source, kernel, torch_trajectory):
    """Read the synchronized gradients after completion, update the data
    sources on the host, then reload the kernels from them."""
    p = styles.start()
    x, labels = styles.batch()
    trajectory, losses = styles.train_with_host_updates(device, x, labels,
                                                        *python_sourced_model(device, p, source, kernel))
    styles.check(trajectory, losses, *torch_trajectory(p, x, labels))


def style_2(device, source, kernel, torch_trajectory):
    """The data sources' update methods, called by the runtime once each command buffer has completed."""
    p = styles.start()
    x, labels = styles.batch()
    conv_src, norm_src, fc_src, model = python_sourced_model(device, p, source, kernel)
    trajectory, losses = styles.train_with_update_encodes(device, model, x, labels, lambda: dict(
        conv_w=conv_src.w, conv_b=conv_src.b, gamma=norm_src.g, beta=norm_src.b, fc_w=fc_src.w, fc_b=fc_src.b))
    styles.check(trajectory, losses, *torch_trajectory(p, x, labels))


def style_3(device, weights, kernel, torch_trajectory):
    """An optimizer encoded on the command buffer (native weights with SGD)
    writes gamma and beta into a state the kernel reloads on the same command buffer."""
    p = styles.start()
    x, labels = styles.batch()
    conv_d, fc_d = styles.descriptors()
    sgd = lambda: mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=styles.LR)
    conv_src = mpsx.ConvolutionWeights(conv_d, p["conv_w"], p["conv_b"], optimizer=sgd())
    fc_src = mpsx.ConvolutionWeights(fc_d, p["fc_w"], p["fc_b"], optimizer=sgd())
    norm_src = weights(p["gamma"], p["beta"], sgd())
    model = Model(device, conv_src, norm_src, fc_src, kernel)
    trajectory, losses = styles.train_with_update_encodes(device, model, x, labels, lambda: dict(
        conv_w=conv_src.weights(), conv_b=conv_src.bias_terms(), gamma=norm_src.gamma(), beta=norm_src.beta(),
        fc_w=fc_src.weights(), fc_b=fc_src.bias_terms()))
    styles.check(trajectory, losses, *torch_trajectory(p, x, labels))


def test_style_1_host_update_then_reload_from_data_source(device):
    style_1(device, NormalizationSource, mpsx.CNNInstanceNormalization, torch_trajectory)


def test_style_2_data_source_update(device):
    style_2(device, NormalizationSource, mpsx.CNNInstanceNormalization, torch_trajectory)


def test_style_3_update_encoded_on_the_command_buffer(device):
    style_3(device, lambda g, b, o: mpsx.InstanceNormalizationWeights(g, b, styles.EPSILON, optimizer=o),
            mpsx.CNNInstanceNormalization, torch_trajectory)


# ---------------------------------------------------------------- dense images, sub-regions, in place
# cpu runs instance normalization on oneDNN's batch normalization one image at
# a time where each image of the region is one dense NHWC block, and on loops
# elsewhere: these cases reach both paths (every device runs them).


def quantized(a, dtype):
    """a as the image of `dtype` stores it, in float32."""
    return a.astype(dtype).astype(np.float32)


def check_all(got, expected, dtype, pixels):
    rtol, atol = helpers.tolerance(dtype)
    for name, g, e in zip(("y", "dx", "dgamma", "dbeta"), got, expected):
        scale = 1 if name in ("y", "dx") else pixels
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol * scale ** 0.5 * (4 if name == "dx" else 1),
                                   err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("epsilon", [1e-5, 0.5])
def test_one_encode_over_several_images(device, dtype, epsilon):
    """One Image of 3 images, one encode (one region of 3 images), odd sizes;
    epsilon enters as 1 / sqrt(variance + epsilon), as torch reads it."""
    rng = np.random.default_rng(11)
    x = quantized(rng.standard_normal((3, 5, 7, 9)) * 3 - 1, dtype)
    dy = quantized(rng.standard_normal(x.shape), dtype)
    gamma, beta = parameters(5, 12)
    k = kernel_for(device, None, gamma, beta, epsilon)
    image, gradient_image = mpsx.Image.from_numpy(device, x.astype(dtype)), mpsx.Image.from_numpy(device, dy.astype(dtype))

    def encode(cb):
        y, state = k.encode(cb, image, destination_state=True)
        dx = k.gradient_kernels()[0].encode(cb, gradient_image, image, state)
        return y, dx, state.gradient_for_gamma, state.gradient_for_beta
    got = helpers.read(device, encode)
    check_all(got, reference(x, dy, gamma, beta, None, epsilon), dtype, 3 * 7 * 9)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("region", ["images", "pixels", "channels"])
def test_regions_within_larger_images(device, region, dtype):
    """The normalization of part of a batch of 4 images x 8 channels x 5 x 7:
    images 1..3 whole (dense images at an offset), a 3 x 4 window of every
    image (offset and clip rect), or channels 4..6; the gradient is zero
    outside what was read."""
    rng = np.random.default_rng(13)
    x = quantized(rng.standard_normal((4, 8, 5, 7)) * 2 + 1, dtype)
    images, channels, rows, columns = slice(None), slice(None), slice(None), slice(None)
    if region == "images":
        images = slice(1, 4)
    elif region == "pixels":
        rows, columns = slice(1, 4), slice(2, 6)
    else:
        channels = slice(4, 7)
    read = x[images, channels, rows, columns]
    dy = quantized(rng.standard_normal(read.shape), dtype)
    gamma, beta = parameters(read.shape[1], 14)
    k = kernel_for(device, None, gamma, beta)
    k.offset = (columns.start or 0, rows.start or 0, images.start or 0)
    k.source_feature_channel_offset = channels.start or 0
    if region == "pixels":
        k.clip_rect = mpsx.Region(0, 0, 0, read.shape[3], read.shape[2], read.shape[0])
    source = mpsx.Image.from_numpy(device, x.astype(dtype))
    gradient_image = mpsx.Image.from_numpy(device, dy.astype(dtype))

    def encode(cb):
        destination = mpsx.Image.from_numpy(device, np.zeros(read.shape, dtype))
        _, state = k.encode(cb, source, destination, destination_state=True)
        dx = k.gradient_kernels()[0].encode(cb, gradient_image, source, state)
        return destination, dx, state.gradient_for_gamma, state.gradient_for_beta
    y, dx, dgamma, dbeta = helpers.read(device, encode)
    assert dx.shape == x.shape
    inside = np.zeros(x.shape, bool)
    inside[images, channels, rows, columns] = True
    assert (dx[~inside] == 0).all()
    check_all((y, dx[inside].reshape(read.shape), dgamma, dbeta), reference(read, dy, gamma, beta, None), dtype,
              read.shape[0] * read.shape[2] * read.shape[3])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_forward_in_place(device, dtype):
    if device.backend == "metal":
        pytest.skip("MPS kernels may not write the images they read")
    rng = np.random.default_rng(15)
    x = quantized(rng.standard_normal((3, 4, 5, 6)) * 2 - 0.5, dtype)
    gamma, beta = parameters(4, 16)
    k = kernel_for(device, None, gamma, beta)
    image = mpsx.Image.from_numpy(device, x.astype(dtype))
    y = helpers.read(device, lambda cb: k.encode(cb, image, image))
    np.testing.assert_allclose(y, reference(x, x, gamma, beta, None)[0], *helpers.tolerance(dtype))
    np.testing.assert_allclose(image.to_numpy(), y)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("over", ["source_gradient", "source"])
def test_gradient_in_place(device, over, dtype):
    """dx written over dy (dgamma and dbeta still come from the dy given) or
    over the forward source x (which the gradient reads)."""
    if device.backend == "metal":
        pytest.skip("MPS kernels may not write the images they read")
    rng = np.random.default_rng(17)
    x = quantized(rng.standard_normal((3, 4, 5, 6)) * 2 - 0.5, dtype)
    dy = quantized(rng.standard_normal(x.shape), dtype)
    gamma, beta = parameters(4, 18)
    k = kernel_for(device, None, gamma, beta)
    image, gradient_image = mpsx.Image.from_numpy(device, x.astype(dtype)), mpsx.Image.from_numpy(device, dy.astype(dtype))

    def encode(cb):
        y, state = k.encode(cb, image, destination_state=True)
        target = gradient_image if over == "source_gradient" else image
        dx = k.gradient_kernels()[0].encode(cb, gradient_image, image, state, target)
        return y, dx, state.gradient_for_gamma, state.gradient_for_beta
    got = helpers.read(device, encode)
    check_all(got, reference(x, dy, gamma, beta, None), dtype, 3 * 5 * 6)
    np.testing.assert_allclose((gradient_image if over == "source_gradient" else image).to_numpy(), got[1])


def test_large_images_far_from_zero(device):
    """Statistics over 256 x 257 pixels of values 100 standard deviations
    from zero keep float32 accuracy (float32 running sums lose it)."""
    rng = np.random.default_rng(19)
    x = (100 + rng.standard_normal((2, 3, 256, 257))).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    gamma, beta = parameters(3, 20)
    got = forward_and_gradient(device, kernel_for(device, None, gamma, beta), x, dy)
    check_all(got, reference(x, dy, gamma, beta, None), np.float32, 2 * 256 * 257)

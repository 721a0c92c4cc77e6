"""The data source protocols as MPS declares them: method names by the naming
rule, the @required and @optional members of each protocol, and the values
a data source may hand over (numpy arrays, Buffers, DLPack tensors)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import ArrayConvolutionSource, StateConvolutionSource, read

# The @required members of each protocol (MPSCNNConvolution.h,
# MPSCNNBatchNormalization.h, MPSCNNInstanceNormalization.h,
# MPSCNNGroupNormalization.h), in mpsx's names.
CONVOLUTION_REQUIRED = ["data_type", "descriptor", "weights", "bias_terms", "load", "purge", "label"]
BATCH_NORMALIZATION_REQUIRED = ["number_of_feature_channels", "gamma", "beta", "mean", "variance", "load", "purge",
                                "label"]
INSTANCE_NORMALIZATION_REQUIRED = ["gamma", "beta", "number_of_feature_channels", "label"]
GROUP_NORMALIZATION_REQUIRED = ["gamma", "beta", "number_of_feature_channels", "number_of_groups", "label"]


def plain_convolution_source(descriptor, weights, biases, omit=None):
    """A data source of the required members only, not subclassing mpsx's protocol class."""
    members = {
        "data_type": mpsx.DataType.FLOAT32,
        "descriptor": lambda self: descriptor,
        "weights": lambda self: weights,
        "bias_terms": lambda self: biases,
        "load": lambda self: True,
        "purge": lambda self: None,
        "label": lambda self: "plain",
    }
    members.pop(omit, None)
    return type("PlainConvolutionSource", (), members)()


def plain_normalization_source(required, gamma, beta, omit=None, channels=None, **extra):
    channels = len(gamma) if channels is None else channels
    values = {"gamma": gamma, "beta": beta, "mean": np.zeros(channels, np.float32),
              "variance": np.ones(channels, np.float32)}
    members = {}
    for name in required:
        if name in values:
            members[name] = (lambda v: lambda self: v)(values[name])
        elif name == "number_of_feature_channels":
            members[name] = channels
        elif name == "load":
            members[name] = lambda self: True
        elif name == "purge":
            members[name] = lambda self: None
        elif name == "label":
            members[name] = lambda self: None
    members.update(extra)
    members.pop(omit, None)
    return type("PlainNormalizationSource", (), members)()


def torch_convolution(x, w, b, stride=(1, 1), dilation=(1, 1), groups=1, neuron=None):
    """A 'same'-padded MPS convolution (odd kernels) via torch; w is OHWI."""
    wt = torch.as_tensor(w, dtype=torch.float64).permute(0, 3, 1, 2)
    pad = ((w.shape[1] - 1) * dilation[1] // 2, (w.shape[2] - 1) * dilation[0] // 2)
    y = F.conv2d(torch.as_tensor(x, dtype=torch.float64), wt, torch.as_tensor(b, dtype=torch.float64),
                 stride=(stride[1], stride[0]), padding=pad, dilation=(dilation[1], dilation[0]), groups=groups)
    return y if neuron is None else neuron(y)


def training_step(device, conv, gradient, x, dy):
    """Forward on one command buffer; gradient and weight update on the next, as MPS programs encode them."""
    image = mpsx.Image.from_numpy(device, x)
    forward = device.command_queue.command_buffer()
    _, state = conv.encode(forward, image, destination_state=True)
    backward = device.command_queue.command_buffer()
    gradient.encode(backward, mpsx.Image.from_numpy(device, dy), image, state)
    conv.encode_weights_and_bias_update(backward, state)
    forward.commit()
    backward.commit()
    backward.wait_until_completed()
    assert backward.status == "completed", backward.error


def test_plain_convolution_source_with_the_required_members(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    conv = mpsx.CNNConvolution(device, plain_convolution_source(d, w, b))
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, torch_convolution(x, w, b).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("member", CONVOLUTION_REQUIRED)
def test_convolution_source_without_a_required_member(device, rng, member):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    source = plain_convolution_source(d, np.zeros(d.weights_shape, np.float32), None, omit=member)
    for kernel in (mpsx.CNNConvolution, mpsx.CNNConvolutionGradient, mpsx.CNNFullyConnected):
        with pytest.raises(TypeError, match=f"PlainConvolutionSource does not implement {member}, required by "
                                            f"MPSCNNConvolutionDataSource"):
            kernel(device, source)


@pytest.mark.parametrize("kind, required", [
    ("batch", BATCH_NORMALIZATION_REQUIRED),
    ("instance", INSTANCE_NORMALIZATION_REQUIRED),
    ("group", GROUP_NORMALIZATION_REQUIRED)])
def test_normalization_source_members(device, rng, kind, required):
    """A plain class of exactly the required members works (instance and group normalization without load and
    purge, which their protocols do not require); one without any of them is a TypeError naming it."""
    kernel = {"batch": mpsx.CNNBatchNormalization, "instance": mpsx.CNNInstanceNormalization,
              "group": mpsx.CNNGroupNormalization}[kind]
    protocol = {"batch": "MPSCNNBatchNormalizationDataSource", "instance": "MPSCNNInstanceNormalizationDataSource",
                "group": "MPSCNNGroupNormalizationDataSource"}[kind]
    gamma = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    beta = rng.standard_normal(4).astype(np.float32)
    extra = {"number_of_groups": 2} if kind == "group" else {}
    source = plain_normalization_source(required, gamma, beta, **extra)
    assert not hasattr(source, "epsilon")
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    y = read(device, lambda cb: kernel(device, source).encode(cb, mpsx.Image.from_numpy(device, x)))
    if kind == "batch":  # inference: the running mean 0 and variance 1
        expected = x * gamma[None, :, None, None] + beta[None, :, None, None]
    else:
        groups = 4 if kind == "instance" else 2
        g = x.reshape(2, groups, -1).astype(np.float64)
        normalized = (g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True))
        expected = normalized.reshape(x.shape) * gamma[None, :, None, None] + beta[None, :, None, None]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    for member in required:
        source = plain_normalization_source(required, gamma, beta, omit=member, **extra)
        with pytest.raises(TypeError, match=f"does not implement {member}, required by {protocol}"):
            kernel(device, source)


class Counted(ArrayConvolutionSource):
    def __init__(self, descriptor, weights, biases):
        super().__init__(descriptor, weights, biases)
        self.calls = []


def test_update_methods_have_the_mps_names(device, rng):
    """updateWithGradientState:sourceState: is update_with_gradient_state(gradient_state, source_state); a data
    source with the name mpsx used before for the other update, update_on_command_buffer, is refused, naming mpsx's
    form, and one with a method named update implements no update."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 2)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = np.zeros(2, np.float32)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    dy = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)

    class Host(Counted):
        def update_with_gradient_state(self, gradient_state, source_state):
            self.calls.append((type(gradient_state), type(source_state)))
            self._weights = self._weights - 0.5 * gradient_state.gradient_for_weights.to_numpy()
            return True

    class Old(Counted):
        def update_on_command_buffer(self, command_buffer, gradient_state, source_state):
            raise AssertionError("not a protocol method")

    class Unrelated(Counted):
        def update(self, gradient_state, source_state):
            raise AssertionError("not a protocol method")

    host = Host(d, w, b)
    conv, gradient = mpsx.CNNConvolution(device, host), mpsx.CNNConvolutionGradient(device, host)
    training_step(device, conv, gradient, x, dy)
    assert host.calls == [(mpsx.CNNConvolutionGradientState, mpsx.CNNConvolutionWeightsAndBiasesState)]
    xt = torch.as_tensor(x, dtype=torch.float64)
    wt = torch.as_tensor(w, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_()
    (F.conv2d(xt, wt, padding=1) * torch.as_tensor(dy, dtype=torch.float64)).sum().backward()
    updated = w - 0.5 * wt.grad.permute(0, 2, 3, 1).numpy()
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, torch_convolution(x, updated, b).numpy(), rtol=1e-4, atol=1e-4)

    with pytest.raises(TypeError, match=r"Old implements update_on_command_buffer, which mpsx does not call: "
                                        r"MPSCNNConvolutionDataSource's updateWithCommandBuffer:gradientState:"
                                        r"sourceState: is update_with_command_buffer\(command_buffer, "
                                        r"gradient_state, source_state\) in mpsx"):
        mpsx.CNNConvolution(device, Old(d, w, b))
    unrelated = Unrelated(d, w, b)
    conv = mpsx.CNNConvolution(device, unrelated)
    cb = device.command_queue.command_buffer()
    image = mpsx.Image.from_numpy(device, x)
    y, state = conv.encode(cb, image, destination_state=True)
    mpsx.CNNConvolutionGradient(device, unrelated).encode(cb, y, image, state)
    with pytest.raises(TypeError, match="neither update_with_command_buffer nor update_with_gradient_state"):
        conv.encode_weights_and_bias_update(cb, state)


def encode_training_pass(device, cb, bn, batch):
    """The batch normalization bn's statistics, forward, statistics gradient and gradient over batch (for its own
    result as the gradient), encoded on cb; returns the state that holds the gradients."""
    state = bn.result_state(batch)
    mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, batch, state)
    y = bn.encode_batch(cb, batch, state)
    mpsx.CNNBatchNormalizationStatisticsGradient(device).encode_batch(cb, y, batch, state)
    mpsx.CNNBatchNormalizationGradient(device).encode_batch(cb, y, batch, state)
    return state


def test_batch_normalization_update_names(device, rng):
    """updateGammaAndBetaWithCommandBuffer:batchNormalizationState: is
    update_gamma_and_beta_with_command_buffer(command_buffer, batch_normalization_state), on Python and native data
    sources alike; the old update_gamma_and_beta_on_command_buffer is no protocol method."""
    gamma = np.ones(3, np.float32)

    class Gpu(mpsx.CNNBatchNormalizationDataSource):
        calls = []

        def number_of_feature_channels(self):
            return 3

        def gamma(self):
            return gamma

        def update_gamma_and_beta_with_command_buffer(self, command_buffer, batch_normalization_state):
            self.calls.append((type(command_buffer), type(batch_normalization_state)))
            return mpsx.CNNNormalizationGammaAndBetaState(device, 2 * gamma, np.ones(3, np.float32))

    class Old(Gpu):
        update_gamma_and_beta_with_command_buffer = None

        def update_gamma_and_beta_on_command_buffer(self, command_buffer, batch_normalization_state):
            raise AssertionError("not a protocol method")

    x = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    source = Gpu()
    bn = mpsx.CNNBatchNormalization(device, source)
    cb = device.command_queue.command_buffer()
    state = encode_training_pass(device, cb, bn, batch)
    bn.encode_gamma_and_beta_update(cb, state)
    after = bn.encode_batch(cb, batch)  # inference, with the reloaded gamma 2 and beta 1
    after.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    assert Gpu.calls == [(mpsx.CommandBuffer, mpsx.CNNBatchNormalizationState)]
    np.testing.assert_allclose(np.asarray(after), 2 * x + 1, rtol=1e-5, atol=1e-5)

    bn = mpsx.CNNBatchNormalization(device, Old())
    cb = device.command_queue.command_buffer()
    state = encode_training_pass(device, cb, bn, batch)
    with pytest.raises(TypeError, match="neither update_gamma_and_beta_with_command_buffer nor "
                                        "update_gamma_and_beta_with_batch_normalization_state"):
        bn.encode_gamma_and_beta_update(cb, state)
    for native in (mpsx.BatchNormalizationWeights(gamma, gamma, gamma, gamma),
                   mpsx.GroupNormalizationWeights(gamma, gamma, 3), mpsx.InstanceNormalizationWeights(gamma, gamma)):
        assert hasattr(native, "update_gamma_and_beta_with_command_buffer")
        assert not hasattr(native, "update_gamma_and_beta_on_command_buffer")


class DLPackOnly:
    """A DLPack producer that is nothing else (no __array__, no buffer protocol): a stand-in for a cupy or jax array,
    on whatever device its Buffer is."""

    def __init__(self, buffer):
        self._buffer = buffer

    def __dlpack__(self, **kwargs):
        return self._buffer.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._buffer.__dlpack_device__()


@pytest.mark.parametrize("form", ["buffer", "dlpack", "torch"])
def test_values_as_buffers_and_dlpack_tensors(device, rng, form):
    """weights(), bias_terms() and the normalization values may be Buffers or DLPack tensors on the device."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)

    def given(values):
        if form == "torch":
            return torch.from_numpy(values.copy())
        buffer = mpsx.Vector.from_numpy(device, values.reshape(-1)).buffer
        return buffer if form == "buffer" else DLPackOnly(buffer)

    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    conv = mpsx.CNNConvolution(device, plain_convolution_source(d, given(w), given(b)))
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, torch_convolution(x, w, b).numpy(), rtol=1e-4, atol=1e-4)

    gamma = rng.uniform(0.5, 1.5, 2).astype(np.float32)
    beta = rng.standard_normal(2).astype(np.float32)
    source = plain_normalization_source(BATCH_NORMALIZATION_REQUIRED, given(gamma), given(beta), channels=2)
    bn = mpsx.CNNBatchNormalization(device, source)
    y = read(device, lambda cb: bn.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, x * gamma[None, :, None, None] + beta[None, :, None, None], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, member, given, message", [
    (mpsx.CNNConvolution, "bias_terms", "biasTerms",
     "MPSCNNConvolutionDataSource's biasTerms is bias_terms in mpsx"),
    (mpsx.CNNConvolution, "update_with_command_buffer", "updateWithCommandBuffer_gradientState_sourceState_",
     r"updateWithCommandBuffer:gradientState:sourceState: is update_with_command_buffer\(command_buffer, "
     r"gradient_state, source_state\) in mpsx"),
    (mpsx.CNNConvolution, "update_with_gradient_state", "updateWithGradientState",
     r"updateWithGradientState:sourceState: is update_with_gradient_state\(gradient_state, source_state\)"),
    (mpsx.CNNBatchNormalization, "update_mean_and_variance_with_batch_normalization_state",
     "update_mean_and_variance", r"updateMeanAndVarianceWithBatchNormalizationState: is "
     r"update_mean_and_variance_with_batch_normalization_state\(batch_normalization_state\) in mpsx"),
    (mpsx.CNNBatchNormalization, "update_gamma_and_beta_with_command_buffer",
     "update_gamma_and_beta_on_command_buffer", r"update_gamma_and_beta_with_command_buffer\(command_buffer, "
     r"batch_normalization_state\)"),
    (mpsx.CNNInstanceNormalization, "update_gamma_and_beta_with_command_buffer",
     "updateGammaAndBetaWithCommandBuffer_instanceNormalizationStateBatch_",
     r"update_gamma_and_beta_with_command_buffer\(command_buffer, instance_normalization_state_batch\)"),
    (mpsx.CNNGroupNormalization, "number_of_groups", "numberOfGroups",
     "MPSCNNGroupNormalizationDataSource's numberOfGroups is number_of_groups in mpsx")])
def test_mps_forms_name_the_mpsx_form(device, kernel, member, given, message):
    """A data source that implements a protocol member under MPS's camelCase, PyObjC's selector form or a name mpsx
    used before is refused when the kernel is made, with an error naming mpsx's form."""
    gamma = np.ones(4, np.float32)
    if kernel is mpsx.CNNConvolution:
        source = plain_convolution_source(mpsx.CNNConvolutionDescriptor(1, 1, 4, 4), np.ones((4, 1, 1, 4), np.float32),
                                          None, omit=member)
    else:
        required = {mpsx.CNNBatchNormalization: BATCH_NORMALIZATION_REQUIRED,
                    mpsx.CNNInstanceNormalization: INSTANCE_NORMALIZATION_REQUIRED,
                    mpsx.CNNGroupNormalization: GROUP_NORMALIZATION_REQUIRED}[kernel]
        source = plain_normalization_source(required, gamma, gamma, omit=member, number_of_groups=2)
    setattr(type(source), given, lambda self, *args: None)
    with pytest.raises(TypeError, match=f"implements {given}, which mpsx does not call: .*{message}"):
        kernel(device, source)


def test_self_updating_data_source_as_the_wwdc_sample(device, rng):
    """The WWDC19 training sample's convolution data source: a plain class whose weights() is its weights state's
    buffer and whose update_with_command_buffer encodes an SGD step into that state; forward and gradient on separate
    command buffers, two steps, against torch doing the same."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    w0 = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b0 = rng.standard_normal(3).astype(np.float32)
    lr = 0.05

    class DataSource(StateConvolutionSource):
        _descriptor, name = d, "conv"

        def __init__(self):
            self.state = mpsx.CNNConvolutionWeightsAndBiasesState(device, w0, b0)
            self.optimizer = mpsx.NNOptimizerStochasticGradientDescent(device, lr)
            self.updates = 0

        def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
            self.optimizer.encode(command_buffer, convolution_gradient_state=gradient_state,
                                  convolution_source_state=source_state, result_state=self.state)
            self.state.synchronize(command_buffer)  # weights() is read on the host (MPS's managed storage too)
            self.updates += 1
            return self.state

    source = DataSource()
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    xs = [rng.standard_normal((2, 2, 5, 5)).astype(np.float32) for _ in range(2)]
    dys = [rng.standard_normal((2, 3, 5, 5)).astype(np.float32) for _ in range(2)]
    for x, dy in zip(xs, dys):
        training_step(device, conv, gradient, x, dy)
    assert source.updates == 2

    wt = torch.as_tensor(w0, dtype=torch.float64).permute(0, 3, 1, 2).clone()
    bt = torch.as_tensor(b0, dtype=torch.float64).clone()
    for x, dy in zip(xs, dys):
        wt.requires_grad_(), bt.requires_grad_()
        y = F.conv2d(torch.as_tensor(x, dtype=torch.float64), wt, bt, padding=1)
        (y * torch.as_tensor(dy, dtype=torch.float64)).sum().backward()
        with torch.no_grad():
            wt, bt = wt - lr * wt.grad, bt - lr * bt.grad
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    expected = F.conv2d(torch.as_tensor(x, dtype=torch.float64), wt, bt, padding=1).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    # A kernel made later reads the updated weights through weights(), a Buffer on the device.
    y = read(device, lambda cb: mpsx.CNNConvolution(device, source).encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)

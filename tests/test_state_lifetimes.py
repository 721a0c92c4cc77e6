"""State lifetimes, as MPSState.h has them: "Non-temporary MPSState objects are
valid on any MTLCommandBuffer on the same device until they are released";
"The contents of a temporary MPSState object are only valid from creation to
the time the readCount reaches 0. The data is only valid for the
MTLCommandBuffer on which it was created."

Every gradient family is run as MPS programs run it: the forward pass on one
command buffer, commit, wait, read the result, then the gradient on a new
command buffer with the forward's states; both against PyTorch (float64)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
import test_convolution_transpose as transposes
import test_cross_channel_normalization as cross_channel
import test_local_contrast_normalization as lcn
import test_spatial_normalization as spatial

SHAPE = (2, 4, 6, 8)  # N, C, H, W: even sizes for 2x2 pooling


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, np.float64), requires_grad=grad)


def autograd(f, dy, *inputs):
    """y = f(*inputs) and the gradients of sum(y * dy) for every input, float64."""
    ts = [t64(a, True) for a in inputs]
    y = f(*ts)
    y.backward(t64(dy))
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def unary(forward, gradient, f, secondary="source"):
    """A family whose forward kernel reads one image: the gradient reads the forward source, or its result."""
    def case(device, x, dy):
        def encode_forward(cb, xs):
            return forward.encode_batch(cb, xs, destination_states=True)

        def encode_gradient(cb, dys, xs, y, states):
            return [gradient.encode_batch(cb, dys, y if secondary == "result" else xs, states)]

        def expected(y_host):
            y, grads = autograd(f, dy, x)
            return y, grads
        return encode_forward, encode_gradient, expected
    return case


def weighted(forward, gradient, expected):
    """The case of a forward and gradient kernel pair whose gradient state holds the weight and bias gradients."""
    def encode_forward(cb, xs):
        return forward.encode_batch(cb, xs, destination_states=True)

    def encode_gradient(cb, dys, xs, y, states):
        return [gradient.encode_batch(cb, dys, xs, states), states[0].gradient_for_weights,
                states[0].gradient_for_biases]
    return encode_forward, encode_gradient, expected


def convolution(device, x, dy):
    rng = np.random.default_rng(3)
    w = (0.3 * rng.standard_normal((5, 3, 3, SHAPE[1]))).astype(np.float32)  # OHWI
    b = rng.standard_normal(5).astype(np.float32)
    d = mpsx.CNNConvolutionDescriptor(3, 3, SHAPE[1], 5)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, w, b))
    gradient = mpsx.CNNConvolutionGradient(device, mpsx.ConvolutionWeights(d, w, b))

    def expected(y_host):
        y, (dx, dw, db) = autograd(lambda a, k, c: F.conv2d(a, k.permute(0, 3, 1, 2), c, padding=1), dy, x, w, b)
        return y, [dx, dw, db]
    return weighted(conv, gradient, expected)


def convolution_transpose(device, x, dy):
    source, w, b = transposes.make(np.random.default_rng(10), 3, 3, SHAPE[1], 5)
    transpose = mpsx.CNNConvolutionTranspose(device, source)
    gradient = mpsx.CNNConvolutionTransposeGradient(device, source)

    def expected(y_host):
        centre, size = transposes.centre_of(transpose), (y_host.shape[3], y_host.shape[2])
        return autograd(lambda a, k, c: transposes.reference(a, k, c, (1, 1), (1, 1), 1, centre, size), dy, x, w, b)
    return weighted(transpose, gradient, expected)


def batch_normalization(device, x, dy):
    rng = np.random.default_rng(4)
    gamma, beta = (rng.random(SHAPE[1]) + 0.5).astype(np.float32), rng.standard_normal(SHAPE[1]).astype(np.float32)
    weights = mpsx.BatchNormalizationWeights(gamma, beta, np.zeros(SHAPE[1], np.float32),
                                             np.ones(SHAPE[1], np.float32), epsilon=1e-5)
    bn = mpsx.CNNBatchNormalization(device, weights)

    def encode_forward(cb, xs):
        state = bn.result_state(xs)
        mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, xs, batch_normalization_state=state)
        return bn.encode_batch(cb, xs, batch_normalization_state=state), state

    def encode_gradient(cb, dys, xs, y, state):
        mpsx.CNNBatchNormalizationStatisticsGradient(device).encode_batch(cb, dys, xs, state)
        dx = mpsx.CNNBatchNormalizationGradient(device).encode_batch(cb, dys, xs, state)
        return [dx, state.gradient_for_gamma, state.gradient_for_beta]

    def expected(y_host):
        y, grads = autograd(lambda a, g, b: F.batch_norm(a, None, None, g, b, training=True, eps=1e-5),
                            dy, x, gamma, beta)
        return y, grads
    return encode_forward, encode_gradient, expected


def normalization(groups):
    def case(device, x, dy):
        rng = np.random.default_rng(5)
        gamma = (1 + 0.3 * rng.standard_normal(SHAPE[1])).astype(np.float32)
        beta = (0.2 * rng.standard_normal(SHAPE[1])).astype(np.float32)
        if groups is None:
            kernel = mpsx.CNNInstanceNormalization(device, mpsx.InstanceNormalizationWeights(gamma, beta))
        else:
            kernel = mpsx.CNNGroupNormalization(device, mpsx.GroupNormalizationWeights(gamma, beta, groups))
        gradient = kernel.gradient_kernels()[0]

        def encode_forward(cb, xs):
            return kernel.encode_batch(cb, xs, destination_states=True)

        def encode_gradient(cb, dys, xs, y, states):
            return [gradient.encode_batch(cb, dys, xs, states), states[0].gradient_for_gamma,
                    states[0].gradient_for_beta]

        def expected(y_host):
            if groups is None:
                f = lambda a, g, b: F.instance_norm(a, weight=g, bias=b, eps=1e-5)  # noqa: E731
            else:
                f = lambda a, g, b: F.group_norm(a, groups, g, b, 1e-5)  # noqa: E731
            return autograd(f, dy, x, gamma, beta)
        return encode_forward, encode_gradient, expected
    return case


def arithmetic(device, x, dy):
    z = np.random.default_rng(6).standard_normal(SHAPE).astype(np.float32)
    zs = mpsx.ImageBatch.from_numpy(device, z)
    multiply = mpsx.CNNMultiply(device)

    def encode_forward(cb, xs):
        return multiply.encode_batch(cb, xs, zs, destination_states=True)

    def encode_gradient(cb, dys, xs, y, states):
        # The primary's gradient reads the secondary image, the secondary's the primary.
        return [mpsx.CNNMultiplyGradient(device, False).encode_batch(cb, dys, zs, states),
                mpsx.CNNMultiplyGradient(device, True).encode_batch(cb, dys, xs, states)]

    def expected(y_host):
        return autograd(lambda a, b: a * b, dy, x, z)
    return encode_forward, encode_gradient, expected


def dropout(device, x, dy):
    keep = 0.6
    forward, gradient = mpsx.CNNDropout(device, keep, 7, (1, 1, 1)), mpsx.CNNDropoutGradient(device, keep, 7, (1, 1, 1))

    def encode_forward(cb, xs):
        return forward.encode_batch(cb, xs, destination_states=True)

    def encode_gradient(cb, dys, xs, y, states):
        return [gradient.encode_batch(cb, dys, xs, states)]

    def expected(y_host):
        # The mask the forward pass drew: where it kept a (nonzero) source value.
        mask = (y_host != 0).astype(np.float64)
        assert 0 < mask.mean() < 1
        return autograd(lambda a: a * t64(mask) / keep, dy, x)
    return encode_forward, encode_gradient, expected


def tanh(device):
    return mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH, 1, 1)


CASES = {
    "Arithmetic": arithmetic,
    "BatchNormalization": batch_normalization,  # with BatchNormalizationStatistics and its gradient
    "Convolution": convolution,
    "ConvolutionTranspose": convolution_transpose,
    "CrossChannelNormalization": lambda device, x, dy: unary(
        *cross_channel.kernels(device, 3, 0.5, 0.75, 2.0),
        lambda a: F.local_response_norm(a, 3, alpha=0.5, beta=0.75, k=2.0))(device, x, dy),
    "Dropout": dropout,
    "GroupNormalization": normalization(2),
    "InstanceNormalization": normalization(None),
    "LocalContrastNormalization": lambda device, x, dy: unary(
        lcn.make(device, 3, lcn.GENERAL), lcn.make(device, 3, lcn.GENERAL, gradient=True),
        lambda a: lcn.torch_lcn(a, 3, lcn.GENERAL))(device, x, dy),
    "LogSoftMax": lambda device, x, dy: unary(mpsx.CNNLogSoftMax(device), mpsx.CNNLogSoftMaxGradient(device),
                                              lambda a: torch.log_softmax(a, 1), "result")(device, x, dy),
    "Neuron": lambda device, x, dy: unary(mpsx.CNNNeuron(device, tanh(device)),
                                          mpsx.CNNNeuronGradient(device, tanh(device)), torch.tanh)(device, x, dy),
    "Pooling": lambda device, x, dy: unary(mpsx.CNNPoolingMax(device, 2, 2, 2, 2),
                                           mpsx.CNNPoolingMaxGradient(device, 2, 2, 2, 2),
                                           lambda a: F.max_pool2d(a, 2, 2))(device, x, dy),
    "SoftMax": lambda device, x, dy: unary(mpsx.CNNSoftMax(device), mpsx.CNNSoftMaxGradient(device),
                                           lambda a: torch.softmax(a, 1), "result")(device, x, dy),
    "SpatialNormalization": lambda device, x, dy: unary(
        *spatial.kernels(device, 3, 1.0, 0.75, 1.0),
        lambda a: spatial.torch_forward(a, 3, 1.0, 0.75, 1.0))(device, x, dy),
    "Upsampling": lambda device, x, dy: unary(mpsx.CNNUpsamplingNearest(device, 2, 2),
                                              mpsx.CNNUpsamplingNearestGradient(device, 2, 2),
                                              lambda a: F.interpolate(a, scale_factor=2))(device, x, dy),
    "GramMatrix": lambda device, x, dy: unary(
        mpsx.NNGramMatrixCalculation(device, 0.25), mpsx.NNGramMatrixCalculationGradient(device),
        lambda a: 0.25 * torch.einsum("nfyx,ncyx->ncf", a, a).reshape(2, 4, 1, 4))(device, x, dy),
}

RESULT_SHAPES = {"Convolution": (2, 5, 6, 8), "ConvolutionTranspose": (2, 5, 6, 8), "Pooling": (2, 4, 3, 4), "Upsampling": (2, 4, 12, 16),
                 "GramMatrix": (2, 4, 1, 4)}


def to_numpy(item):
    return item.to_numpy() if isinstance(item, (mpsx.Image, mpsx.ImageBatch)) else item.to_numpy(copy=True)


@pytest.mark.parametrize("family", sorted(CASES))
def test_gradient_on_a_later_command_buffer_matches_torch(device, family):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    dy = rng.standard_normal(RESULT_SHAPES.get(family, SHAPE)).astype(np.float32)
    encode_forward, encode_gradient, expected = CASES[family](device, x, dy)
    xs = mpsx.ImageBatch.from_numpy(device, x)

    first = device.command_queue.command_buffer()
    y, states = encode_forward(first, xs)
    y.synchronize(first)
    first.commit()
    first.wait_until_completed()
    assert first.status == "completed", first.error
    y_host = y.to_numpy()
    y_expected, gradients_expected = expected(y_host)
    np.testing.assert_allclose(y_host, y_expected, rtol=2e-4, atol=2e-4)

    second = device.command_queue.command_buffer()
    gradients = encode_gradient(second, mpsx.ImageBatch.from_numpy(device, dy), xs, y, states)
    for g in gradients:
        g.synchronize(second)
    second.commit()
    second.wait_until_completed()
    assert second.status == "completed", second.error
    for got, want in zip(gradients, gradients_expected):
        np.testing.assert_allclose(to_numpy(got).reshape(np.shape(want)), want, rtol=5e-4, atol=5e-4)


def neuron(device):
    return mpsx.CNNNeuron(device, tanh(device)), mpsx.CNNNeuronGradient(device, tanh(device))


def image(device, seed=0):
    return mpsx.Image.from_numpy(device, np.random.default_rng(seed).standard_normal((1, 4, 3, 5)).astype(np.float32))


def read_back(cb, image):
    image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return image.to_numpy()


def test_a_state_serves_gradients_on_several_later_command_buffers(device):
    # Valid "on any MTLCommandBuffer on the same device until they are released": two gradients of one forward
    # pass, each on its own command buffer after the forward's completed, give the same torch result.
    forward, gradient = neuron(device)
    x, dy = image(device, 1), image(device, 2)
    cb = device.command_queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state=True)
    cb.commit()
    cb.wait_until_completed()
    assert not state.is_temporary and state.read_count == 0
    _, (expected,) = autograd(torch.tanh, dy.to_numpy(), x.to_numpy())
    for _ in range(2):
        cb = device.command_queue.command_buffer()
        got = read_back(cb, gradient.encode(cb, dy, x, state))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert state.read_count == 0  # reads leave a non-temporary state's count as it is


def test_a_state_refilled_on_a_later_command_buffer_gives_the_new_gradient(device):
    # A training loop that writes each batch into one image: the forward encode of the next batch refills the state.
    softmax, gradient = mpsx.CNNSoftMax(device), mpsx.CNNSoftMaxGradient(device)
    x, dy = image(device, 3), image(device, 4)
    cb = device.command_queue.command_buffer()
    _, state = softmax.encode(cb, x, destination_state=True)
    cb.commit()
    cb.wait_until_completed()
    values = np.random.default_rng(5).standard_normal((1, 4, 3, 5)).astype(np.float32)
    x.write(values)
    cb = device.command_queue.command_buffer()
    y, same = softmax.encode(cb, x, destination_state=state)
    assert same is not None
    got = read_back(cb, gradient.encode(cb, dy, y, state))
    _, (expected,) = autograd(lambda a: torch.softmax(a, 1), dy.to_numpy(), values)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_state_refilled_for_other_images_of_its_size_belongs_to_them(device):
    # MPSCNNKernel.h: the destinationState is "A state to be overwritten by additional state information".
    forward, gradient = neuron(device)
    x, z, dy = image(device, 1), image(device, 2), image(device, 3)
    cb = device.command_queue.command_buffer()
    _, state = forward.encode(cb, x, destination_state=True)
    cb.commit()
    cb.wait_until_completed()
    cb = device.command_queue.command_buffer()
    forward.encode(cb, z, destination_state=state)
    with pytest.raises(mpsx.StateError, match="made for another batch of source images"):
        gradient.encode(cb, dy, x, state)  # the images it was filled for before
    got = read_back(cb, gradient.encode(cb, dy, z, state))
    _, (expected,) = autograd(torch.tanh, dy.to_numpy(), z.to_numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    cb = device.command_queue.command_buffer()
    wide = mpsx.Image.from_numpy(device, np.zeros((1, 4, 3, 6), np.float32))
    with pytest.raises(mpsx.StateError, match="MPSCNNNeuron: this MPSNNGradientState was filled for source images of "
                                              "1x4x3x5 \\(NxCxHxW\\), given 1x4x3x6; MPS makes a state for the source "
                                              "images of its encode"):
        forward.encode(cb, wide, destination_state=state)
    assert cb.command_count == 0


def test_a_state_given_other_source_images_on_a_later_command_buffer_is_refused(device):
    forward, gradient = neuron(device)
    x, dy = image(device), image(device, 1)
    cb = device.command_queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state=True)
    cb.commit()
    cb.wait_until_completed()
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.StateError, match="MPSCNNNeuronGradient: this MPSNNGradientState was made for another "
                                              "batch of source images"):
        gradient.encode(cb, dy, image(device), state)  # the same values in another image: another batch
    assert cb.command_count == 0


def test_states_are_not_temporary_by_default(device):
    forward, _ = neuron(device)
    x = image(device)
    cb = device.command_queue.command_buffer()
    for state in (forward.result_state(x), forward.encode(cb, x, destination_state=True)[1],
                  forward.encode_batch(cb, [x], destination_states=True)[1][0]):
        assert state.is_temporary is False and state.read_count == 0
        state.read_count = 3  # MPS: readCount governs temporary storage only
        assert state.read_count == 0
    assert forward.is_result_state_reused_across_batch() is True


def test_a_temporary_state_is_read_as_often_as_its_read_count(device):
    forward, gradient = neuron(device)
    x, dy = image(device, 1), image(device, 2)
    cb = device.command_queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state=True, destination_state_is_temporary=True)
    assert state.is_temporary and state.read_count == 1
    dx = gradient.encode(cb, dy, x, state)
    assert state.read_count == 0
    count = cb.command_count
    with pytest.raises(mpsx.StateError, match="MPSCNNNeuronGradient: this temporary MPSNNGradientState has a "
                                              "read_count of 0"):
        gradient.encode(cb, dy, x, state)
    with pytest.raises(mpsx.StateError, match="MPSCNNNeuron: this temporary .* read_count of 0"):
        forward.encode(cb, x, destination_state=state)  # nor written
    with pytest.raises(mpsx.StateError, match="the temporary object's read_count reached 0"):
        state.read_count = 1
    assert cb.command_count == count
    _, (expected,) = autograd(torch.tanh, dy.to_numpy(), x.to_numpy())
    np.testing.assert_allclose(read_back(cb, dx), expected, rtol=1e-4, atol=1e-5)


def test_a_temporary_state_is_refused_on_another_command_buffer(device):
    forward, gradient = neuron(device)
    x, dy = image(device, 1), image(device, 2)
    first = device.command_queue.command_buffer()
    y, state = forward.encode(first, x, destination_state=True, destination_state_is_temporary=True)
    second = device.command_queue.command_buffer()
    with pytest.raises(mpsx.StateError, match="MPSCNNNeuronGradient: this temporary MPSNNGradientState was made for "
                                              "another command buffer"):
        gradient.encode(second, dy, x, state)  # even while the first is still encoding
    with pytest.raises(mpsx.StateError, match="made for another command buffer"):
        forward.encode(second, x, destination_state=state)
    assert second.command_count == 0 and state.read_count == 1


def test_read_count_raised_for_both_gradients_of_a_binary_kernel(device):
    # Both gradients of CNNMultiply read its one state: a temporary one needs a read count of 2, as on MPS.
    rng = np.random.default_rng(7)
    x, z, dy = (rng.standard_normal((1, 4, 2, 3)).astype(np.float32) for _ in range(3))
    X, Z, DY = (mpsx.Image.from_numpy(device, a) for a in (x, z, dy))
    primary, secondary = mpsx.CNNMultiplyGradient(device, False), mpsx.CNNMultiplyGradient(device, True)
    cb = device.command_queue.command_buffer()
    _, state = mpsx.CNNMultiply(device).encode(cb, X, Z, destination_state=True, destination_state_is_temporary=True)
    primary.encode(cb, DY, Z, state)
    with pytest.raises(mpsx.StateError, match="read_count of 0"):
        secondary.encode(cb, DY, X, state)
    _, state = mpsx.CNNMultiply(device).encode(cb, X, Z, destination_state=True, destination_state_is_temporary=True)
    state.read_count = 2
    dx = primary.encode(cb, DY, Z, state)
    dz = secondary.encode(cb, DY, X, state)
    assert state.read_count == 0
    for g in (dx, dz):
        g.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    _, (ex, ez) = autograd(lambda a, b: a * b, dy, x, z)
    np.testing.assert_allclose(dx.to_numpy(), ex, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dz.to_numpy(), ez, rtol=1e-5, atol=1e-6)


def test_temporary_result_states_and_batch_read_counts(device):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 4, 2, 3)).astype(np.float32)
    dy = rng.standard_normal((3, 4, 2, 3)).astype(np.float32)
    gamma, beta = np.full(4, 1.5, np.float32), np.full(4, 0.25, np.float32)
    bn = mpsx.CNNBatchNormalization(device, mpsx.BatchNormalizationWeights(
        gamma, beta, np.zeros(4, np.float32), np.ones(4, np.float32), epsilon=1e-5))
    xs, dys = mpsx.ImageBatch.from_numpy(device, x), mpsx.ImageBatch.from_numpy(device, dy)
    cb = device.command_queue.command_buffer()
    states = bn.temporary_result_state_batch(cb, xs)
    assert isinstance(states, mpsx.StateBatch) and len(states) == 3
    assert all(s is states[0] for s in states) and states[0].is_temporary and states[0].read_count == 1
    # Two gradient encodes read the state; the batch's one state is counted once.
    assert mpsx.state_batch_increment_read_count(states, 1) == 1
    assert states[0].read_count == 2
    with pytest.raises(ValueError, match="read_count must stay 0 or more"):
        mpsx.state_batch_increment_read_count(states, -3)
    assert states[0].read_count == 2 and mpsx.state_batch_increment_read_count(None, 1) == 0
    mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, xs, batch_normalization_state=states)
    y = bn.encode_batch(cb, xs, batch_normalization_state=states)
    mpsx.CNNBatchNormalizationStatisticsGradient(device).encode_batch(cb, dys, xs, states)
    dx = mpsx.CNNBatchNormalizationGradient(device).encode_batch(cb, dys, xs, states)
    assert states[0].read_count == 0
    for item in (y, dx):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    y_expected, (dx_expected,) = autograd(lambda a: F.batch_norm(a, None, None, t64(gamma), t64(beta), training=True,
                                                                 eps=1e-5), dy, x)
    np.testing.assert_allclose(y.to_numpy(), y_expected, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(dx.to_numpy(), dx_expected, rtol=2e-4, atol=2e-4)


def test_temporary_result_state_of_each_kind_of_kernel(device):
    forward, gradient = neuron(device)
    x = image(device)
    cb = device.command_queue.command_buffer()
    state = forward.temporary_result_state(cb, x)
    assert state.is_temporary and state.read_count == 1
    y, filled = forward.encode(cb, x, destination_state=state)
    assert filled.is_temporary
    other = device.command_queue.command_buffer()
    with pytest.raises(mpsx.StateError, match="made for another command buffer"):
        forward.encode(other, x, destination_state=forward.temporary_result_state(cb, x))
    binary = mpsx.CNNAdd(device).temporary_result_state(cb, x, x)
    assert binary.is_temporary and binary.read_count == 1
    assert gradient.temporary_result_state(cb, y, x) is None  # gradient kernels make no state (MPS: nil)
    assert gradient.result_state_batch([y], [x]) is None
    plain = forward.result_state_batch([x, x])
    assert len(plain) == 2 and plain[0] is plain[1] and not plain[0].is_temporary
    assert mpsx.CNNBatchNormalizationStatistics(device).temporary_result_state(cb, x) is None


def test_bad_temporary_arguments(device):
    forward, _ = neuron(device)
    x = image(device)
    cb = device.command_queue.command_buffer()
    given = forward.result_state(x)
    with pytest.raises(ValueError, match="destination_state_is_temporary=True applies to a state the encode makes"):
        forward.encode(cb, x, destination_state=given, destination_state_is_temporary=True)
    with pytest.raises(ValueError, match="destination_state_is_temporary=True applies"):
        forward.encode_batch(cb, [x], destination_states=False, destination_state_is_temporary=True)
    assert cb.command_count == 0 and not given.is_temporary
    state = forward.temporary_result_state(cb, x)
    with pytest.raises(ValueError, match="read_count must be 0 or more, given -1"):
        state.read_count = -1
    with pytest.raises(TypeError):
        state.read_count = 1.5
    with pytest.raises(TypeError, match="expected a batch of mpsx states"):
        mpsx.state_batch_increment_read_count([state, 3], 1)
    assert state.read_count == 1
    cb.commit()
    with pytest.raises(mpsx.MPSXError):
        forward.temporary_result_state(cb, x)  # a committed command buffer takes no more work


def test_a_temporary_forward_loss_state_is_read_once(device):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 1, 1)).astype(np.float32)
    labels = np.eye(3, dtype=np.float32)[[0, 2]].reshape(2, 3, 1, 1)
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.SUM)
    forward, gradient = mpsx.NNForwardLoss(device, d), mpsx.NNLossGradient(device, d)
    xs, ls = mpsx.ImageBatch.from_numpy(device, x), mpsx.ImageBatch.from_numpy(device, labels)
    cb = device.command_queue.command_buffer()
    loss, states = forward.encode_batch(cb, xs, ls, destination_states=True, destination_state_is_temporary=True)
    assert states[0].is_temporary and states[0].read_count == 1
    ones = mpsx.ImageBatch.from_numpy(device, np.ones((2, 1, 1, 1), np.float32))
    other = device.command_queue.command_buffer()
    with pytest.raises(mpsx.StateError, match="made for another command buffer"):
        gradient.encode_batch(other, ones, xs, ls, None, states)
    dx = gradient.encode_batch(cb, ones, xs, ls, None, states)
    assert states[0].read_count == 0
    with pytest.raises(mpsx.StateError, match="read_count of 0"):
        gradient.encode_batch(cb, ones, xs, ls, None, states)
    dx.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    _, (expected,) = autograd(lambda a: F.cross_entropy(a.reshape(2, 3), t64(labels.reshape(2, 3)), reduction="sum"),
                              np.float64(1), x)
    np.testing.assert_allclose(dx.to_numpy(), expected, rtol=1e-4, atol=1e-5)

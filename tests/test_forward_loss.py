"""NNForwardLoss and NNLossGradient (MPSCNNLoss.h's separated losses) against
the loss formulas written in torch in test_loss.py (float64; torch autograd of
sum(source gradient * loss values) w.r.t. the source or the labels is the
reference gradient), and against finite differences."""

import pickle

import numpy as np
import pytest
import torch

import mpsx
from helpers import finite_difference_gradient, read, run, tolerance
from test_loss import PER_PIXEL, descriptor, every_case, reference, sample, sample_weights

LT = mpsx.CNNLossType
RT = mpsx.CNNReductionType


def loss_shape(d, shape):
    return shape if d.reduction_type == RT.NONE else (shape[0], 1, 1, 1)


def reference_gradients(d, x, labels, weights, dl):
    """The reference loss image and the gradients of sum(dl * loss) w.r.t. the source and the labels."""
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    tt = torch.from_numpy(labels.astype(np.float64)).requires_grad_()
    w = None if weights is None else torch.from_numpy(weights.astype(np.float64))
    loss = reference(d, xt, tt, w)
    (loss * torch.from_numpy(dl.astype(np.float64))).sum().backward()
    return loss.detach().numpy(), xt.grad.numpy(), tt.grad.numpy()


def sample_and_kernels(device, rng, t, reduction, shape):
    """x and labels of `shape` for the loss type t, the descriptor of t and reduction, and its NNForwardLoss and
    NNLossGradient."""
    x, labels = sample(rng, t, shape)
    d = descriptor(t, reduction)
    return x, labels, d, mpsx.NNForwardLoss(device, d), mpsx.NNLossGradient(device, d)


def encode_all(device, d, x, labels, weights, dl, dtype=np.float32):
    """(loss, source gradient, labels gradient) of NNForwardLoss then NNLossGradient with its state."""
    forward = mpsx.NNForwardLoss(device, d)
    gradient = mpsx.NNLossGradient(device, d)
    labels_gradient = mpsx.NNLossGradient(device, d)
    labels_gradient.compute_label_gradients = True
    source = mpsx.ImageBatch.from_numpy(device, x.astype(dtype))
    targets = mpsx.ImageBatch.from_numpy(device, labels)
    w = None if weights is None else mpsx.ImageBatch.from_numpy(device, weights)
    g = mpsx.ImageBatch.from_numpy(device, dl.astype(dtype))

    def encode(cb):
        loss, states = forward.encode_batch(cb, source, targets, w, destination_states=True)
        dx = gradient.encode_batch(cb, g, source, targets, w, source_states=states)
        dt = labels_gradient.encode_batch(cb, g, source, targets, w, source_states=states)
        return loss, dx, dt

    return read(device, encode)


@every_case
def test_loss_and_gradients_match_torch(device, rng, t, reduction, across, weighted):
    shape = (3, 5, 3, 2)
    x, labels = sample(rng, t, shape)
    if t == LT.KULLBACK_LEIBLER_DIVERGENCE:
        labels[labels == 0] = 0.3  # d/dt of t log t is -inf at 0
    weights = sample_weights(rng, shape) if weighted else None
    d = descriptor(t, reduction, across, weight=0.75)
    dl = rng.uniform(-2, 2, loss_shape(d, shape)).astype(np.float32)  # a non-trivial source gradient
    loss, dx, dt = encode_all(device, d, x, labels, weights, dl)
    expected_loss, expected_dx, expected_dt = reference_gradients(d, x, labels, weights, dl)
    assert loss.shape == loss_shape(d, shape)
    assert dx.shape == dt.shape == shape
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dt, expected_dt, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("t", [LT.SOFTMAX_CROSS_ENTROPY, LT.SIGMOID_CROSS_ENTROPY])
@pytest.mark.parametrize("reduction", [RT.NONE, RT.MEAN])
def test_label_smoothing(device, rng, t, reduction):
    shape = (2, 7, 2, 3)
    x, labels = sample(rng, t, shape)
    d = descriptor(t, reduction, label_smoothing=0.2, number_of_classes=4)
    dl = rng.uniform(-2, 2, loss_shape(d, shape)).astype(np.float32)
    loss, dx, dt = encode_all(device, d, x, labels, None, dl)
    expected_loss, expected_dx, expected_dt = reference_gradients(d, x, labels, None, dl)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dt, expected_dt, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("t", list(LT), ids=lambda t: t.name)
def test_finite_differences(device, rng, t):
    """d(sum(dl * loss))/dx and /dt of the kernels against central differences of NNForwardLoss itself."""
    shape = (2, 3, 2, 1)
    x, labels = sample(rng, t, shape)
    if t not in (LT.SOFTMAX_CROSS_ENTROPY, LT.CATEGORICAL_CROSS_ENTROPY, LT.HINGE):
        labels = rng.uniform(0.2, 0.8, shape).astype(np.float32)  # room to move the labels
    weights = sample_weights(rng, shape)
    weights[weights == 0] = 1.5
    d = descriptor(t, RT.NONE if t in PER_PIXEL else RT.MEAN, weight=1.25)
    dl = rng.uniform(0.5, 2, loss_shape(d, shape)).astype(np.float32)
    forward = mpsx.NNForwardLoss(device, d)
    w = mpsx.ImageBatch.from_numpy(device, weights)

    def total(values, targets):
        loss = read(device, lambda cb: forward.encode_batch(
            cb, mpsx.ImageBatch.from_numpy(device, values.astype(np.float32)),
            mpsx.ImageBatch.from_numpy(device, targets.astype(np.float32)), w))
        return float((loss.astype(np.float64) * dl).sum())

    x64, labels64 = x.astype(np.float64), labels.astype(np.float64)
    numeric_x = finite_difference_gradient(lambda v: total(v, labels64), x64, 1e-2)
    _, dx, dt = encode_all(device, d, x, labels, weights, dl)
    np.testing.assert_allclose(dx, numeric_x, rtol=2e-2, atol=5e-4)
    # The other types take labels of 0 and 1: their derivative is checked against torch above.
    if t not in (LT.SOFTMAX_CROSS_ENTROPY, LT.CATEGORICAL_CROSS_ENTROPY, LT.HINGE):
        numeric_t = finite_difference_gradient(lambda v: total(x64, v), labels64, 1e-2)
        np.testing.assert_allclose(dt, numeric_t, rtol=2e-2, atol=5e-4)


@pytest.mark.parametrize("t", [LT.SOFTMAX_CROSS_ENTROPY, LT.MEAN_SQUARED_ERROR, LT.HUBER])
@pytest.mark.parametrize("reduction", [RT.NONE, RT.SUM])
def test_float16(device, rng, t, reduction):
    shape = (2, 4, 3, 5)
    x, labels = sample(rng, t, shape)
    x = x.astype(np.float16).astype(np.float32)
    d = descriptor(t, reduction)
    dl = rng.uniform(-1, 1, loss_shape(d, shape)).astype(np.float16).astype(np.float32)
    loss, dx, dt = encode_all(device, d, x, labels, None, dl, dtype=np.float16)
    expected_loss, expected_dx, expected_dt = reference_gradients(d, x, labels, None, dl)
    rtol, atol = tolerance(np.float16)
    scale = max(1.0, float(np.abs(expected_loss).max()))
    np.testing.assert_allclose(loss, expected_loss, rtol=rtol, atol=atol * scale)
    np.testing.assert_allclose(dx, expected_dx, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dt, expected_dt, rtol=rtol, atol=atol)


def test_state_carries_the_forward_values(device, rng):
    shape = (2, 3, 2, 2)
    t = LT.HUBER
    x, labels, d, forward, gradient = sample_and_kernels(device, rng, t, RT.SUM, shape)
    forward.weight, forward.delta = 2.5, 0.4
    assert (forward.weight, forward.delta) == (2.5, pytest.approx(0.4))
    assert forward.loss_descriptor.weight == 2.5 and d.weight == 1.0
    source = mpsx.ImageBatch.from_numpy(device, x)
    targets = mpsx.ImageBatch.from_numpy(device, labels)
    dl = np.ones((2, 1, 1, 1), np.float32)
    g = mpsx.ImageBatch.from_numpy(device, dl)

    def encode(cb):
        loss, states = forward.encode_batch(cb, source, targets, destination_states=True)
        with_state = gradient.encode_batch(cb, g, source, targets, source_states=states)
        without_state = gradient.encode_batch(cb, g, source, targets)
        return loss, with_state, without_state, states

    cb = device.command_queue.command_buffer()
    loss, with_state, without_state, states = encode(cb)
    for image in (loss, with_state, without_state):
        image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    state = states[0]
    assert isinstance(state, mpsx.NNLossGradientState) and len(states) == 2
    assert (state.weight, state.delta, state.label_smoothing) == (2.5, pytest.approx(0.4), 0.0)
    assert state.epsilon == pytest.approx(d.epsilon)
    assert state.kernel is forward
    dynamic = descriptor(t, RT.SUM, weight=2.5, delta=0.4)
    expected_loss, expected_dx, _ = reference_gradients(dynamic, x, labels, None, dl)
    _, expected_own, _ = reference_gradients(d, x, labels, None, dl)
    np.testing.assert_allclose(loss.to_numpy(), expected_loss, rtol=1e-5)
    np.testing.assert_allclose(with_state.to_numpy(), expected_dx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(without_state.to_numpy(), expected_own, rtol=1e-5, atol=1e-6)


def test_lists_of_images_result_state_and_destinations(device, rng):
    shape = (2, 3, 2, 2)
    x, labels, d, forward, gradient = sample_and_kernels(device, rng, LT.MEAN_ABSOLUTE_ERROR, RT.MEAN, shape)
    images = [mpsx.Image.from_numpy(device, x[i]) for i in range(2)]
    targets = [mpsx.Image.from_numpy(device, labels[i]) for i in range(2)]
    source = mpsx.ImageBatch.from_numpy(device, x)
    desc = forward.destination_image_descriptor(source)
    assert (desc.number_of_images, desc.feature_channels, desc.width, desc.height) == (2, 1, 1, 1)
    gdesc = gradient.destination_image_descriptor(mpsx.ImageBatch.from_numpy(device, np.ones((2, 1, 1, 1))), source)
    assert (gdesc.number_of_images, gdesc.feature_channels, gdesc.width, gdesc.height) == (2, 3, 2, 2)
    destination = mpsx.ImageBatch.from_numpy(device, np.zeros((2, 1, 1, 1), np.float32))
    state = forward.result_state(source)
    dl = np.array([1.5, -0.5], np.float32).reshape(2, 1, 1, 1)
    destination_gradient = mpsx.ImageBatch.from_numpy(device, np.zeros(shape, np.float32))

    def encode(cb):
        loss = forward.encode_batch(cb, images, targets, destination_images=destination)
        loss2, _ = forward.encode_batch(cb, source, mpsx.ImageBatch.from_numpy(device, labels),
                                        destination_states=state)
        dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dl), source,
                                   mpsx.ImageBatch.from_numpy(device, labels), source_states=state,
                                   destination_gradients=destination_gradient)
        return loss, loss2, dx

    loss, loss2, dx = read(device, encode)
    expected_loss, expected_dx, _ = reference_gradients(d, x, labels, None, dl)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(destination.to_numpy(), expected_loss, rtol=1e-5)
    np.testing.assert_allclose(loss2, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(destination_gradient.to_numpy(), expected_dx, rtol=1e-5, atol=1e-7)


def test_single_image_encode(device, rng):
    shape = (1, 4, 2, 3)
    x, labels, d, forward, gradient = sample_and_kernels(device, rng, LT.SIGMOID_CROSS_ENTROPY, RT.NONE, shape)
    source = mpsx.Image.from_numpy(device, x[0])
    targets = mpsx.Image.from_numpy(device, labels[0])
    dl = rng.uniform(-1, 1, shape).astype(np.float32)

    def encode(cb):
        loss, state = forward.encode(cb, source, targets, destination_state=True)
        assert isinstance(loss, mpsx.Image) and isinstance(state, mpsx.NNLossGradientState)
        return loss, gradient.encode(cb, mpsx.Image.from_numpy(device, dl[0]), source, targets, source_state=state)

    loss, dx = read(device, encode)
    expected_loss, expected_dx, _ = reference_gradients(d, x, labels, None, dl)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-5, atol=1e-6)


def test_properties_and_pickle(device):
    d = mpsx.CNNLossDescriptor(LT.SOFTMAX_CROSS_ENTROPY, RT.MEAN, number_of_classes=5, reduce_across_batch=True,
                               label_smoothing=0.1)
    for cls in (mpsx.NNForwardLoss, mpsx.NNLossGradient):
        k = cls(device, d)
        assert k.loss_type == LT.SOFTMAX_CROSS_ENTROPY and k.reduction_type == RT.MEAN
        assert k.reduce_across_batch and k.number_of_classes == 5
        assert (k.weight, k.label_smoothing, k.delta) == (1.0, pytest.approx(0.1), 1.0)
        assert k.epsilon == pytest.approx(1e-7)
        k.weight, k.label_smoothing, k.epsilon, k.delta = 3.0, 0.25, 0.5, 2.0
        assert k.loss_descriptor == mpsx.CNNLossDescriptor(
            LT.SOFTMAX_CROSS_ENTROPY, RT.MEAN, number_of_classes=5, reduce_across_batch=True, weight=3.0,
            label_smoothing=0.25, epsilon=0.5, delta=2.0)
        copy = pickle.loads(pickle.dumps(k))
        assert type(copy) is cls and copy.weight == 3.0 and copy.delta == 2.0
    g = mpsx.NNLossGradient(device, d)
    assert g.compute_label_gradients is False
    g.compute_label_gradients = True
    assert g.compute_label_gradients is True
    for cls in (mpsx.NNForwardLoss, mpsx.NNLossGradient, mpsx.NNLossGradientState):
        with pytest.raises(TypeError):
            cls.__new__(cls).weight


def test_errors(device, rng):
    shape = (2, 3, 4, 5)
    x, labels, d, forward, gradient = sample_and_kernels(device, rng, LT.MEAN_SQUARED_ERROR, RT.MEAN, shape)
    source = mpsx.ImageBatch.from_numpy(device, x)
    targets = mpsx.ImageBatch.from_numpy(device, labels)
    dl = mpsx.ImageBatch.from_numpy(device, np.ones((2, 1, 1, 1), np.float32))
    cb = device.command_queue.command_buffer()

    with pytest.raises(mpsx.ShapeError, match=r"MPSNNForwardLoss: expected labels of 2x3x4x5 \(NxCxHxW; more feature "
                                              r"channels are allowed, .*\), given 2x3x4x4 \(NxCxHxW\)"):
        forward.encode_batch(cb, source, mpsx.ImageBatch.from_numpy(device, labels[..., :4]))
    with pytest.raises(mpsx.ShapeError, match=r"expected weights of 2x3x4x5 \(NxCxHxW; .*\), given 2x1x4x5"):
        forward.encode_batch(cb, source, targets, mpsx.ImageBatch.from_numpy(device, np.ones((2, 1, 4, 5))))
    with pytest.raises(TypeError, match="labels: expected an mpsx.ImageBatch, an mpsx.Image or a list of "
                                        "mpsx.Image, given None"):
        forward.encode_batch(cb, source, None)
    with pytest.raises(TypeError, match="expected an mpsx.ImageBatch or a list of mpsx.Image, given ndarray"):
        forward.encode_batch(cb, source, labels)
    with pytest.raises(TypeError, match="MPSNNForwardLoss: the labels image must be float32 or float16, given uint8"):
        forward.encode_batch(cb, source, mpsx.ImageBatch.from_numpy(device, np.ones(shape, np.uint8)))
    with pytest.raises(TypeError, match="the source image must be float32 or float16, given uint8"):
        forward.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, np.ones(shape, np.uint8)), targets)
    with pytest.raises(mpsx.ShapeError, match=r"expected a destination of the loss image's size 2x1x1x1 "
                                              r"\(NxCxHxW\), given 2x3x4x5"):
        forward.encode_batch(cb, source, targets, destination_images=source)
    forward.offset = (1, 0, 0)
    with pytest.raises(ValueError, match=r"MPSNNForwardLoss: offset, clip_rect and the feature channel offsets "
                                         r"must keep their defaults .* given offset \(1, 0, 0\)"):
        forward.encode_batch(cb, source, targets)
    forward.offset = (0, 0, 0)
    with pytest.raises(mpsx.ShapeError, match=r"MPSNNLossGradient: expected source gradients of the loss image's "
                                              r"size 2x1x1x1 \(NxCxHxW\) \(a reduced loss: one value per image\), "
                                              r"given 2x3x4x5"):
        gradient.encode_batch(cb, source, source, targets)
    with pytest.raises(TypeError, match="source_gradients: expected an mpsx.ImageBatch, an mpsx.Image or a list "
                                        "of mpsx.Image, given None"):
        gradient.encode_batch(cb, None, source, targets)
    with pytest.raises(TypeError, match="MPSNNLossGradient: expected the result state of an MPSNNForwardLoss, "
                                        "given an MPSCNNLossLabels"):
        gradient.encode_batch(cb, dl, source, targets, source_states=mpsx.CNNLossLabels(device, labels))
    state = forward.result_state(source)
    with pytest.raises(mpsx.StateError, match="the source state was not filled by an MPSNNForwardLoss encode"):
        gradient.encode_batch(cb, dl, source, targets, source_states=state)
    other = mpsx.NNForwardLoss(device, d).result_state(mpsx.ImageBatch.from_numpy(device, x[:1]))
    with pytest.raises(mpsx.ShapeError, match=r"the destination state was made for source images of 1x3x4x5 "
                                              r"\(NxCxHxW\), given 2x3x4x5"):
        forward.encode_batch(cb, source, targets, destination_states=other)
    with pytest.raises(mpsx.ShapeError, match=r"expected a destination gradient of the source images' size "
                                              r"2x3x4x5 \(NxCxHxW\), given 2x1x1x1"):
        gradient.encode_batch(cb, dl, source, targets, destination_gradients=dl)
    none = mpsx.NNLossGradient(device, descriptor(LT.MEAN_SQUARED_ERROR, RT.NONE))
    with pytest.raises(mpsx.ShapeError, match=r"expected source gradients of the loss image's size 2x3x4x5 "
                                              r"\(NxCxHxW\) \(reduction NONE: one per loss value\), given 2x1x1x1"):
        none.encode_batch(cb, dl, source, targets)
    assert cb.command_count == 0  # nothing of the failed calls was enqueued
    cb.commit()
    cb.wait_until_completed()

    # A state binds to the batch of its forward encode.
    def encode(cb):
        _, states = forward.encode_batch(cb, source, targets, destination_states=True)
        return states

    states = run(device, encode)
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.StateError, match="made for another batch of source images"):
        gradient.encode_batch(cb, dl, mpsx.ImageBatch.from_numpy(device, x), targets, source_states=states)


def test_a_forward_loss_state_given_to_another_gradient_kernel_is_refused(device):
    # The state has no forward kernel encode behind it: the kernel names the mismatch instead of reading one.
    cb = device.command_queue.command_buffer()
    x = mpsx.Image.from_numpy(device, np.ones((2, 3, 2, 2), np.float32))
    labels = mpsx.ImageBatch.from_numpy(device, np.ones((2, 3, 2, 2), np.float32))
    loss = mpsx.NNForwardLoss(device, mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR,
                                                             mpsx.CNNReductionType.SUM))
    _, state = loss.encode(cb, x, labels, labels, destination_state=True)
    for gradient in [mpsx.CNNSpatialNormalizationGradient(device, 3, 3),
                     mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)),
                     mpsx.CNNPoolingMaxGradient(device, 2, 2, 2, 2)]:
        with pytest.raises(TypeError, match="given one of an MPSNNForwardLoss"):
            gradient.encode(cb, x, x, state)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"


def test_the_loss_gradient_reports_its_descriptors_settings(device):
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.HUBER, mpsx.CNNReductionType.SUM, weight=0.5, label_smoothing=0.25,
                               number_of_classes=3, epsilon=1e-5, delta=2.0, reduce_across_batch=True)
    gradient = mpsx.NNLossGradient(device, d)
    assert (gradient.loss_type, gradient.reduction_type, gradient.reduce_across_batch) == \
        (mpsx.CNNLossType.HUBER, mpsx.CNNReductionType.SUM, True)
    assert (gradient.weight, gradient.label_smoothing, gradient.number_of_classes, gradient.delta) == \
        (0.5, 0.25, 3, 2.0)
    assert gradient.epsilon == pytest.approx(1e-5)

"""CNNLoss against the loss formulas of MPSCNNLoss.h written here in torch
(float64, differentiable: its autograd is the gradient reference), against
PyTorch's CrossEntropyLoss for the reference CNN's loss, and against finite
differences."""

import pickle

import numpy as np
import pytest
import torch

import mpsx
from helpers import finite_difference_gradient, read, run, tolerance

LT = mpsx.CNNLossType
RT = mpsx.CNNReductionType

# Softmax cross entropy and cosine distance have one loss per pixel (over its
# feature channels); the other types one per value.
PER_PIXEL = (LT.SOFTMAX_CROSS_ENTROPY, LT.COSINE_DISTANCE)


def sample(rng, t, shape):
    """(predictions, labels) in each type's domain, away from kinks so that
    finite differences stay on one side."""
    y = rng.standard_normal(shape)
    labels = rng.uniform(0, 1, shape)
    if t in (LT.SOFTMAX_CROSS_ENTROPY, LT.CATEGORICAL_CROSS_ENTROPY):
        labels = np.eye(shape[1])[rng.integers(0, shape[1], (shape[0],) + shape[2:])]
        labels = np.moveaxis(labels, -1, 1)
    if t == LT.CATEGORICAL_CROSS_ENTROPY:
        y = rng.uniform(0.05, 1, shape)
    if t == LT.LOG:
        y = rng.uniform(0.05, 0.95, shape)
    if t == LT.HINGE:
        labels = rng.integers(0, 2, shape).astype(np.float64)
        y = np.where(np.abs(np.abs(y) - 1) < 0.1, y + 0.3, y)
    if t == LT.KULLBACK_LEIBLER_DIVERGENCE:
        y = np.log(rng.uniform(0.05, 1, shape))
        labels = np.where(rng.uniform(0, 1, shape) < 0.2, 0, labels)
    if t in (LT.MEAN_ABSOLUTE_ERROR, LT.HUBER):
        d = y - labels
        y = np.where(np.abs(d) < 0.05, y + 0.2, y)
        y = np.where(np.abs(np.abs(y - labels) - 0.7) < 0.05, y + 0.15, y)
    return y.astype(np.float32), labels.astype(np.float32)


def sample_weights(rng, shape):
    """Weights in [0.5, 2] with single zeros and whole pixels of zeros."""
    w = rng.uniform(0.5, 2, shape)
    w[rng.uniform(0, 1, shape) < 0.2] = 0
    w *= (rng.uniform(0, 1, (shape[0], 1) + shape[2:]) > 0.25)
    return w.astype(np.float32)


def descriptor(t, reduction, across=False, **properties):
    d = mpsx.CNNLossDescriptor(t, reduction, reduce_across_batch=across)
    if t == LT.HUBER:
        d.delta = 0.7
    if t == LT.LOG:
        d.epsilon = 1e-3
    for name, value in properties.items():
        setattr(d, name, value)
    return d


def reference(d, y, t, w):
    """The loss image of MPSCNNLoss.h's formulas for torch float64 tensors
    (N, C, H, W): the weighted per-value losses for NONE, else one value per
    image (the first holding the batch's, the others 0, across the batch)."""
    n, c, h, width = y.shape
    ls = d.label_smoothing
    if d.loss_type == LT.SOFTMAX_CROSS_ENTROPY and ls > 0:
        t = t * (1 - ls) + ls / d.number_of_classes
    if d.loss_type == LT.SIGMOID_CROSS_ENTROPY and ls > 0:
        t = t * (1 - ls) + 0.5 * ls
    losses = {
        LT.MEAN_ABSOLUTE_ERROR: lambda: torch.abs(y - t),
        LT.MEAN_SQUARED_ERROR: lambda: (y - t) ** 2,
        LT.SOFTMAX_CROSS_ENTROPY: lambda: -t * torch.log_softmax(y, dim=1),
        LT.SIGMOID_CROSS_ENTROPY: lambda: torch.clamp(y, min=0) - y * t + torch.log1p(torch.exp(-torch.abs(y))),
        LT.CATEGORICAL_CROSS_ENTROPY: lambda: -t * torch.log(y),
        # labels 0 and 1 stand for -1 and +1
        LT.HINGE: lambda: torch.clamp(1 - (2 * t - 1) * y, min=0),
        LT.HUBER: lambda: torch.where(torch.abs(y - t) <= d.delta, 0.5 * (y - t) ** 2,
                                      0.5 * d.delta ** 2 + d.delta * (torch.abs(y - t) - d.delta)),
        # 1 - sum_c y t per pixel, each value holding its weighted share
        LT.COSINE_DISTANCE: lambda: 1 / c - y * t,
        LT.LOG: lambda: -t * torch.log(y + d.epsilon) - (1 - t) * torch.log(1 - y + d.epsilon),
        LT.KULLBACK_LEIBLER_DIVERGENCE: lambda: torch.xlogy(t, t) - t * y,
    }
    weights = d.weight * (w if w is not None else torch.ones_like(y))
    weighted = weights * losses[d.loss_type]()
    if d.reduction_type == RT.NONE:
        return weighted
    per_pixel = d.loss_type in PER_PIXEL
    sums = weighted.sum(dim=(1, 2, 3))
    if d.reduction_type == RT.SUM:
        divisors = torch.ones(n, dtype=y.dtype)
    elif d.reduction_type == RT.MEAN:
        divisors = torch.full((n,), float(h * width if per_pixel else c * h * width), dtype=y.dtype)
    else:
        nonzero = (weights != 0).any(dim=1) if per_pixel else weights != 0
        divisors = nonzero.flatten(1).sum(dim=1).to(y.dtype)
    if d.reduce_across_batch:
        total = sums.sum()
        divisor = divisors.sum() if d.reduction_type != RT.SUM else 1
        first = total / divisor if divisor > 0 else total * 0
        return torch.cat([first.reshape(1), torch.zeros(n - 1, dtype=y.dtype)]).reshape(n, 1, 1, 1)
    return torch.where(divisors > 0, sums / torch.clamp(divisors, min=1), sums * 0).reshape(n, 1, 1, 1)


def reference_and_gradient(d, x, labels, weights):
    """The reference loss image and d(sum of it)/dx, the gradient CNNLoss returns."""
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    w = None if weights is None else torch.from_numpy(weights.astype(np.float64))
    loss = reference(d, xt, torch.from_numpy(labels.astype(np.float64)), w)
    loss.sum().backward()
    return loss.detach().numpy(), xt.grad.numpy()


def encode_loss(device, d, x, labels, weights=None):
    """(gradient, loss image) of CNNLoss over the batch x, as numpy."""
    loss = mpsx.CNNLoss(device, d)
    state = mpsx.CNNLossLabels(device, labels, weights)

    def encode(cb):
        gradient = loss.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x), state)
        state.synchronize(cb)
        return gradient

    gradient = read(device, encode)
    return gradient, state.loss_image().to_numpy()


def every_case(test):
    """test parametrized over every loss type t, reduction, across-batch setting and weighting."""
    for mark in (pytest.mark.parametrize("t", list(LT), ids=lambda t: t.name),
                 pytest.mark.parametrize("reduction", list(RT), ids=lambda r: r.name),
                 pytest.mark.parametrize("across", [False, True], ids=["per_image", "across_batch"]),
                 pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])):
        test = mark(test)
    return test


@every_case
def test_loss_and_gradient_match_formulas(device, rng, t, reduction, across, weighted):
    shape = (3, 5, 3, 2)
    x, labels = sample(rng, t, shape)
    weights = sample_weights(rng, shape) if weighted else None
    d = descriptor(t, reduction, across, weight=0.75)
    gradient, loss = encode_loss(device, d, x, labels, weights)
    expected_loss, expected_gradient = reference_and_gradient(d, x, labels, weights)
    assert loss.shape == (shape if reduction == RT.NONE else (3, 1, 1, 1))
    assert gradient.shape == shape
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("t", [LT.SOFTMAX_CROSS_ENTROPY, LT.SIGMOID_CROSS_ENTROPY])
@pytest.mark.parametrize("reduction", [RT.NONE, RT.SUM, RT.MEAN])
@pytest.mark.parametrize("classes", [7, 4])  # 4 != C: smoothed labels no longer sum to 1
def test_label_smoothing(device, rng, t, reduction, classes):
    shape = (2, 7, 3, 3)
    x, labels = sample(rng, t, shape)
    d = descriptor(t, reduction, label_smoothing=0.2, number_of_classes=classes)
    gradient, loss = encode_loss(device, d, x, labels)
    expected_loss, expected_gradient = reference_and_gradient(d, x, labels, None)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-4, atol=1e-6)
    if t == LT.SOFTMAX_CROSS_ENTROPY and classes == 7 and reduction == RT.SUM:
        # MPSCNNLoss.h's gradient: SoftMax(y) - smoothed labels
        smoothed = labels * 0.8 + 0.2 / 7
        softmax = torch.softmax(torch.from_numpy(x.astype(np.float64)), dim=1).numpy()
        np.testing.assert_allclose(gradient, softmax - smoothed, rtol=1e-4, atol=1e-6)


def test_reference_cnn_loss_matches_torch_cross_entropy(device, rng):
    # The reference CNN: a 1x1x10 fully connected output, softmax cross
    # entropy, MEAN, reduce_across_batch; PyTorch's CrossEntropyLoss(mean).
    n = 32
    x = rng.standard_normal((n, 10, 1, 1)).astype(np.float32) * 3
    classes = rng.integers(0, 10, n)
    one_hot = np.eye(10, dtype=np.float32)[classes].reshape(n, 10, 1, 1)
    d = mpsx.CNNLossDescriptor(LT.SOFTMAX_CROSS_ENTROPY, RT.MEAN, reduce_across_batch=True)
    loss = mpsx.CNNLoss(device, d)
    labels = mpsx.CNNLossLabels(device, one_hot)
    images = [mpsx.Image.from_numpy(device, x[i]) for i in range(n)]

    def encode(cb):
        gradient = loss.encode_batch(cb, images, labels)
        labels.synchronize(cb)
        return gradient

    gradient = read(device, encode)
    values = labels.loss_image().to_numpy()
    logits = torch.from_numpy(x.reshape(n, 10)).requires_grad_()
    expected = torch.nn.CrossEntropyLoss(reduction="mean")(logits, torch.from_numpy(classes))
    expected.backward()
    assert values.shape == (n, 1, 1, 1)
    np.testing.assert_allclose(values[0, 0, 0, 0], expected.item(), rtol=1e-6)
    np.testing.assert_array_equal(values[1:], 0)
    np.testing.assert_allclose(gradient.reshape(n, 10), logits.grad.numpy(), rtol=1e-5, atol=1e-8)
    softmax = torch.softmax(torch.from_numpy(x.reshape(n, 10).astype(np.float64)), dim=1).numpy()
    np.testing.assert_allclose(gradient.reshape(n, 10), (softmax - one_hot.reshape(n, 10)) / n, atol=1e-8)


@pytest.mark.parametrize("t", list(LT), ids=lambda t: t.name)
def test_gradient_finite_differences(device, rng, t):
    shape = (2, 3, 2, 1)
    x, labels = sample(rng, t, shape)
    weights = sample_weights(rng, shape)
    weights[weights == 0] = 1.5  # every value counts
    reduction = RT.SUM_BY_NON_ZERO_WEIGHTS if t in PER_PIXEL else RT.MEAN
    d = descriptor(t, reduction, across=True, weight=1.25)
    loss = mpsx.CNNLoss(device, d)
    state = mpsx.CNNLossLabels(device, labels, weights)

    def total(values):
        def encode(cb):
            loss.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, values.astype(np.float32)), state)
            state.synchronize(cb)
        run(device, encode)
        return float(state.loss_image().to_numpy().astype(np.float64).sum())

    numeric = finite_difference_gradient(total, x.astype(np.float64), 1e-2)
    gradient, _ = encode_loss(device, d, x, labels, weights)
    np.testing.assert_allclose(gradient, numeric, rtol=2e-2, atol=2e-4)


@pytest.mark.parametrize("t", [LT.SOFTMAX_CROSS_ENTROPY, LT.MEAN_SQUARED_ERROR, LT.SIGMOID_CROSS_ENTROPY,
                               LT.HUBER])
def test_float16_source(device, rng, t):
    shape = (2, 6, 5, 3)
    x, labels = sample(rng, t, shape)
    x16 = x.astype(np.float16)
    d = descriptor(t, RT.MEAN, weight=2.0)
    loss = mpsx.CNNLoss(device, d)
    state = mpsx.CNNLossLabels(device, labels)
    image = mpsx.Image.from_numpy(device, x16)
    assert image.data_type == mpsx.DataType.FLOAT16

    def encode(cb):
        gradient = loss.encode(cb, image, state)
        state.synchronize(cb)
        return gradient

    gradient = read(device, encode)
    assert gradient.dtype == np.float16
    expected_loss, expected_gradient = reference_and_gradient(d, x16.astype(np.float32), labels, None)
    rtol, atol = tolerance(np.float16)
    np.testing.assert_allclose(state.loss_image().to_numpy(), expected_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gradient.astype(np.float32), expected_gradient, rtol=rtol, atol=1e-3)


def test_float16_labels_and_weights_images_are_retained(device, rng):
    shape = (2, 4, 3, 3)
    x, labels = sample(rng, LT.MEAN_SQUARED_ERROR, shape)
    weights = sample_weights(rng, shape)
    labels_image = mpsx.ImageBatch.from_numpy(device, labels.astype(np.float16))
    weights_image = mpsx.ImageBatch.from_numpy(device, weights.astype(np.float16))
    d = descriptor(LT.MEAN_SQUARED_ERROR, RT.SUM_BY_NON_ZERO_WEIGHTS)
    gradient, loss = encode_loss(device, d, x, labels_image, weights_image)
    expected_loss, expected_gradient = reference_and_gradient(
        d, x, labels.astype(np.float16).astype(np.float32), weights.astype(np.float16).astype(np.float32))
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-4, atol=1e-6)
    state = mpsx.CNNLossLabels(device, labels_image, weights_image)
    np.testing.assert_array_equal(state.labels_image().to_numpy(), labels.astype(np.float16))
    np.testing.assert_array_equal(state.weights_image().to_numpy(), weights.astype(np.float16))


def test_single_image_and_chw_labels(device, rng):
    x, labels = sample(rng, LT.SIGMOID_CROSS_ENTROPY, (1, 3, 5, 7))
    d = descriptor(LT.SIGMOID_CROSS_ENTROPY, RT.SUM)
    loss = mpsx.CNNLoss(device, d)
    state = mpsx.CNNLossLabels(device, labels[0])  # (C, H, W)
    assert state.weights_image() is None
    np.testing.assert_array_equal(state.labels_image().to_numpy(), labels)

    def encode(cb):
        gradient = loss.encode(cb, mpsx.Image.from_numpy(device, x[0]), state)
        assert isinstance(gradient, mpsx.Image)
        state.synchronize(cb)
        return gradient

    gradient = read(device, encode)
    expected_loss, expected_gradient = reference_and_gradient(d, x, labels, None)
    np.testing.assert_allclose(state.loss_image().to_numpy(), expected_loss, rtol=1e-5)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-4, atol=1e-6)


def test_large_image_spreads_over_chunks(device, rng):
    # More values than one chunk of work, so that sums span chunks and threads.
    shape = (3, 21, 37, 29)
    x, labels = sample(rng, LT.SOFTMAX_CROSS_ENTROPY, shape)
    weights = sample_weights(rng, shape)
    for reduction in (RT.MEAN, RT.SUM_BY_NON_ZERO_WEIGHTS):
        d = descriptor(LT.SOFTMAX_CROSS_ENTROPY, reduction, across=reduction == RT.MEAN)
        gradient, loss = encode_loss(device, d, x, labels, weights)
        expected_loss, expected_gradient = reference_and_gradient(d, x, labels, weights)
        np.testing.assert_allclose(loss, expected_loss, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-4, atol=1e-8)


def test_zero_weight_gives_zero_loss(device, rng):
    x, labels = sample(rng, LT.MEAN_SQUARED_ERROR, (2, 3, 2, 2))
    d = descriptor(LT.MEAN_SQUARED_ERROR, RT.SUM_BY_NON_ZERO_WEIGHTS, weight=0.0)
    gradient, loss = encode_loss(device, d, x, labels)
    np.testing.assert_array_equal(loss, 0)
    np.testing.assert_array_equal(gradient, 0)


def test_destination_image_and_channel_offset(device, rng):
    shape = (2, 3, 4, 5)
    x, labels = sample(rng, LT.MEAN_SQUARED_ERROR, shape)
    d = descriptor(LT.MEAN_SQUARED_ERROR, RT.SUM)
    loss = mpsx.CNNLoss(device, d)
    state = mpsx.CNNLossLabels(device, labels)
    destination = mpsx.ImageBatch.from_numpy(device, np.full((2, 8, 4, 5), 7.0, np.float32))
    loss.destination_feature_channel_offset = 4

    def encode(cb):
        assert loss.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x), state, destination) is not None
        return destination

    result = read(device, encode)
    expected = np.full((2, 8, 4, 5), 7.0, np.float32)
    expected[:, 4:7] = 2 * (x - labels)
    np.testing.assert_allclose(result, expected, rtol=1e-6)
    descriptor_ = mpsx.CNNLoss(device, d).destination_image_descriptor(mpsx.Image.from_numpy(device, x))
    assert descriptor_.shape == shape


def test_loss_image_size_follows_the_reduction(device, rng):
    x, labels = sample(rng, LT.MEAN_ABSOLUTE_ERROR, (2, 3, 4, 5))
    state = mpsx.CNNLossLabels(device, labels)
    assert state.loss_image().shape == (2, 1, 1, 1)
    source = mpsx.ImageBatch.from_numpy(device, x)
    for reduction, shape in ((RT.NONE, (2, 3, 4, 5)), (RT.SUM, (2, 1, 1, 1)), (RT.NONE, (2, 3, 4, 5))):
        loss = mpsx.CNNLoss(device, descriptor(LT.MEAN_ABSOLUTE_ERROR, reduction))

        def encode(cb):
            loss.encode_batch(cb, source, state)
            state.synchronize(cb)

        run(device, encode)
        values = state.loss_image().to_numpy()
        assert values.shape == shape
        np.testing.assert_allclose(values.sum(), np.abs(x - labels).sum(), rtol=1e-5)


def test_loss_image_needs_synchronize_and_completion(device, rng):
    x, labels = sample(rng, LT.MEAN_SQUARED_ERROR, (2, 3, 2, 2))
    loss = mpsx.CNNLoss(device, descriptor(LT.MEAN_SQUARED_ERROR, RT.SUM))
    state = mpsx.CNNLossLabels(device, labels)
    source = mpsx.ImageBatch.from_numpy(device, x)

    run(device, lambda cb: loss.encode_batch(cb, source, state))
    with pytest.raises(mpsx.SynchronizationError, match="without synchronize"):
        state.loss_image().to_numpy()

    cb = device.command_queue.command_buffer()
    loss.encode_batch(cb, source, state)
    state.synchronize(cb)
    with pytest.raises(mpsx.SynchronizationError, match="not committed"):
        state.loss_image().to_numpy()
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(state.loss_image().to_numpy().ravel(), ((x - labels) ** 2).sum(axis=(1, 2, 3)),
                               rtol=1e-5)


def test_descriptor_properties_and_pickle(device):
    d = mpsx.CNNLossDescriptor(LT.HUBER, RT.MEAN)
    assert (d.loss_type, d.reduction_type) == (LT.HUBER, RT.MEAN)
    assert (d.weight, d.label_smoothing, d.number_of_classes, d.delta, d.reduce_across_batch) == (1, 0, 1, 1, False)
    assert d.epsilon == pytest.approx(1e-7)
    d.loss_type, d.reduction_type = LT.SOFTMAX_CROSS_ENTROPY, RT.SUM_BY_NON_ZERO_WEIGHTS
    d.weight, d.label_smoothing, d.number_of_classes = 0.5, 0.1, 10
    d.epsilon, d.delta, d.reduce_across_batch = 1e-3, 2.0, True
    copy = pickle.loads(pickle.dumps(d))
    assert copy == d and copy is not d
    assert (copy.loss_type, copy.number_of_classes, copy.reduce_across_batch) == (LT.SOFTMAX_CROSS_ENTROPY, 10, True)
    assert copy.label_smoothing == pytest.approx(0.1) and copy.epsilon == pytest.approx(1e-3)
    assert "SOFTMAX_CROSS_ENTROPY" in repr(d)
    loss = mpsx.CNNLoss(device, d)
    assert (loss.loss_type, loss.reduction_type, loss.number_of_classes) == (d.loss_type, d.reduction_type, 10)
    assert (loss.weight, loss.delta, loss.reduce_across_batch) == (0.5, 2.0, True)
    assert loss.label_smoothing == pytest.approx(0.1) and loss.epsilon == pytest.approx(1e-3)
    assert loss.loss_descriptor == d
    with pytest.raises(AttributeError):
        loss.weight = 2.0
    d.weight = 3.0  # the kernel keeps the descriptor it was made with
    assert loss.weight == 0.5
    assert pickle.loads(pickle.dumps(loss)).loss_descriptor == loss.loss_descriptor


def mean_squared_error_case(device, rng):
    """A sampled 2x3x4x5 batch and its labels, a CNNLoss of mean squared error (mean), and the batch and its labels
    as an ImageBatch and a CNNLossLabels."""
    x, labels = sample(rng, LT.MEAN_SQUARED_ERROR, (2, 3, 4, 5))
    loss = mpsx.CNNLoss(device, descriptor(LT.MEAN_SQUARED_ERROR, RT.MEAN))
    return x, labels, loss, mpsx.ImageBatch.from_numpy(device, x), mpsx.CNNLossLabels(device, labels)


def test_errors(device, rng):
    x, labels, loss, source, state = mean_squared_error_case(device, rng)
    cb = device.command_queue.command_buffer()

    with pytest.raises(mpsx.ShapeError, match=r"expected labels of 2x3x4x5 \(NxCxHxW; more feature channels are "
                                              r"allowed, of which the loss reads the first 3\), given 2x3x4x4"):
        loss.encode_batch(cb, source, mpsx.CNNLossLabels(device, labels[..., :4]))
    with pytest.raises(mpsx.ShapeError, match="expected labels of 2x3x4x5 .*, given 2x2x4x5"):
        loss.encode_batch(cb, source, mpsx.CNNLossLabels(device, labels[:, :2]))
    with pytest.raises(mpsx.ShapeError, match="expected labels for the 2 source images .* given 1 MPSCNNLossLabels "
                                              "holding 1 images"):
        loss.encode_batch(cb, source, mpsx.CNNLossLabels(device, labels[:1]))
    with pytest.raises(TypeError, match="labels: expected one mpsx.CNNLossLabels .* or a list of one per image "
                                        r"\(MPSCNNLossLabelsBatch\), given NoneType"):
        loss.encode_batch(cb, source, None)
    with pytest.raises(TypeError, match="labels: expected one mpsx.CNNLossLabels .* given ndarray"):
        loss.encode_batch(cb, source, labels)
    with pytest.raises(TypeError, match="CNNLossLabels: expected labels .* given None"):
        mpsx.CNNLossLabels(device, None)
    with pytest.raises(mpsx.ShapeError, match=r"expected weights of as many images as the labels \(2\), "
                                              r"given 1x3x4x5 \(NxCxHxW\)"):
        mpsx.CNNLossLabels(device, labels, np.ones((1, 3, 4, 5)))
    with pytest.raises(mpsx.ShapeError, match=r"MPSCNNLoss: expected weights of 2x3x4x5 .* given 2x1x4x5"):
        loss.encode_batch(cb, source, mpsx.CNNLossLabels(device, labels, np.ones((2, 1, 4, 5))))
    with pytest.raises(TypeError, match="weights image must be float32 or float16, given uint8"):
        mpsx.CNNLossLabels(device, labels, mpsx.ImageBatch.from_numpy(device, np.ones(x.shape, np.uint8)))
    with pytest.raises(ValueError, match="99 is not a valid CNNLossType"):
        mpsx.CNNLossDescriptor(99, RT.MEAN)
    with pytest.raises(ValueError, match="4 is not a valid CNNReductionType"):
        mpsx.CNNLossDescriptor(LT.LOG, 4)
    with pytest.raises(ValueError, match="number_of_classes must be at least 1; given 0"):
        mpsx.CNNLossDescriptor(LT.LOG, RT.SUM, number_of_classes=0)
    with pytest.raises(ValueError, match="number_of_classes must be at least 1; given -2"):
        mpsx.CNNLossDescriptor(LT.LOG, RT.SUM).number_of_classes = -2
    with pytest.raises(TypeError, match="source image must be float32 or float16, given uint8"):
        loss.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, np.ones(x.shape, np.uint8)), state)
    with pytest.raises(TypeError, match="destination image must be float32 or float16, given uint8"):
        loss.encode_batch(cb, source, state, mpsx.ImageBatch.from_numpy(device, np.ones(x.shape, np.uint8)))
    with pytest.raises(mpsx.ShapeError, match="covers whole source images"):
        loss.encode_batch(cb, source, state, mpsx.ImageBatch.from_numpy(device, np.ones((2, 3, 5, 5), np.float32)))
    loss.clip_rect = (0, 0, 0, 2, 2, 2)
    with pytest.raises(mpsx.ShapeError, match="a 2x2 region at \\(0, 0\\) of a 5x4 source"):
        loss.encode_batch(cb, source, state)
    loss.clip_rect = None
    assert cb.command_count == 0  # nothing of the failed calls was enqueued
    cb.commit()
    with pytest.raises(mpsx.StateError, match="encode onto a new command buffer"):
        loss.encode_batch(cb, source, state)
    cb.wait_until_completed()


def test_number_of_classes_is_an_int():
    with pytest.raises(TypeError, match="number_of_classes must be an int, given float 2.5"):
        mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM, number_of_classes=2.5)


def test_properties_are_checked(device, rng):
    _, _, loss, source, state = mean_squared_error_case(device, rng)
    cb = device.command_queue.command_buffer()
    for name, value, message in [
            ("offset", (0, 0, -2**63), "offset.z must be between -2147483648 and 2147483648, given "
                                       "-9223372036854775808"),
            ("clip_rect", (0, 0, 0, 5, 4, -1), "clip_rect sizes must be non-negative; given width 5, height 4, "
                                               "depth -1"),
            ("destination_feature_channel_offset", 2**62, "destination_feature_channel_offset must be at most "
                                                          "1073741824, given 4611686018427387904")]:
        loss = mpsx.CNNLoss(device, descriptor(LT.MEAN_SQUARED_ERROR, RT.MEAN))
        setattr(loss, name, value)
        for encode in (lambda: loss.encode_batch(cb, source, state), lambda: loss.destination_image_descriptor(source)):
            with pytest.raises(ValueError, match=f"MPSCNNLoss: {message}"):
                encode()
    assert cb.command_count == 0  # refused before anything was enqueued

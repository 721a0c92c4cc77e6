"""Loss labels as MPS programs make them: MPSCNNLossDataDescriptor (both
layouts, padded strides), one MPSCNNLossLabels per image collected into an
MPSCNNLossLabelsBatch for CNNLoss.encode_batch and NNGraph.encode_batch,
labels padded to more feature channels than the logits, loss image sizes;
against the batch form, torch and numpy references; bad input."""

import copy

import numpy as np
import pytest
import torch

import mpsx
from helpers import assert_same_run, float32_graph, read, run
from test_graph import CLASSES, LR, STEPS, assert_trained_as_pytorch, batch, model, parameters, torch_trajectory
from test_loss import descriptor, reference_and_gradient, sample, sample_weights

LT = mpsx.CNNLossType
RT = mpsx.CNNReductionType
HWC = mpsx.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS
CHW = mpsx.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH


def one_hot_labels(device, classes, channels):
    """Apple's sample: per image a buffer of `channels` floats (one-hot over the classes, the padding channels 0)
    in a 1x1xchannels HeightxWidthxFeatureChannels descriptor, one MPSCNNLossLabels each."""
    out = []
    for c in classes:
        values = np.zeros(channels, np.float32)
        values[c] = 1
        out.append(mpsx.CNNLossLabels(device, mpsx.CNNLossDataDescriptor(values, HWC, (1, 1, channels))))
    return out


def per_image_hwc(array):
    """(C, H, W) values as the bytes of a dense HeightxWidthxFeatureChannels descriptor."""
    return mpsx.CNNLossDataDescriptor(np.ascontiguousarray(array.transpose(1, 2, 0)), HWC,
                                      (array.shape[2], array.shape[1], array.shape[0]))


@pytest.mark.parametrize("across", [False, True], ids=["per_image", "across_batch"])
def test_apple_sample_per_image_padded_labels_match_batch_form_and_torch(device, rng, across):
    n, classes = 5, 10
    x = (rng.standard_normal((n, classes, 1, 1)) * 2).astype(np.float32)
    target = rng.integers(0, classes, n)
    d = mpsx.CNNLossDescriptor(LT.SOFTMAX_CROSS_ENTROPY, RT.MEAN, reduce_across_batch=across)
    loss = mpsx.CNNLoss(device, d)
    per_image = one_hot_labels(device, target, 12)  # 10 classes padded to 12 channels
    for labels in per_image:
        np.testing.assert_array_equal(labels.labels_image().to_numpy()[0, :, 0, 0],
                                      np.eye(12, dtype=np.float32)[labels.labels_image().to_numpy().argmax()])
    batch_labels = mpsx.CNNLossLabels(device, np.eye(classes, dtype=np.float32)[target].reshape(n, classes, 1, 1))
    images = [mpsx.Image.from_numpy(device, x[i]) for i in range(n)]

    def encode(labels):
        def body(cb):
            gradient = loss.encode_batch(cb, images, labels)
            for item in labels if isinstance(labels, list) else [labels]:
                item.synchronize(cb)
            return gradient
        return read(device, body)

    gradient = encode(per_image)
    batch_gradient = encode(batch_labels)
    losses = np.concatenate([labels.loss_image().to_numpy() for labels in per_image])
    assert all(labels.loss_image().shape == (1, 1, 1, 1) for labels in per_image)
    np.testing.assert_allclose(gradient, batch_gradient, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(losses, batch_labels.loss_image().to_numpy(), rtol=1e-6)

    logits = torch.from_numpy(x.reshape(n, classes).astype(np.float64)).requires_grad_()
    expected = torch.nn.functional.cross_entropy(logits, torch.from_numpy(target),
                                                 reduction="mean" if across else "none")
    expected.sum().backward()
    if across:
        np.testing.assert_allclose(losses[0, 0, 0, 0], expected.item(), rtol=1e-5)
        np.testing.assert_array_equal(losses[1:], 0)
    else:
        np.testing.assert_allclose(losses.ravel(), expected.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(gradient.reshape(n, classes), logits.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("reduction", [RT.NONE, RT.SUM_BY_NON_ZERO_WEIGHTS])
def test_per_image_labels_with_weights_and_loss_image_size(device, rng, reduction):
    shape = (3, 5, 3, 2)
    x, labels = sample(rng, LT.MEAN_SQUARED_ERROR, shape)
    weights = sample_weights(rng, shape)
    d = descriptor(LT.MEAN_SQUARED_ERROR, reduction, weight=0.75)
    size = (2, 3, 5) if reduction == RT.NONE else (1, 1, 1)
    per_image = [mpsx.CNNLossLabels(device, loss_image_size=size, labels_descriptor=per_image_hwc(labels[i]),
                                    weights_descriptor=per_image_hwc(weights[i])) for i in range(3)]
    for item in per_image:
        assert item.loss_image_size == size
        assert item.loss_image().shape == (1, size[2], size[1], size[0])
    loss = mpsx.CNNLoss(device, d)

    def encode(cb):
        gradient = loss.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, x), per_image)
        for item in per_image:
            item.synchronize(cb)
        return gradient

    gradient = read(device, encode)
    expected_loss, expected_gradient = reference_and_gradient(d, x, labels, weights)
    for i, item in enumerate(per_image):
        np.testing.assert_array_equal(item.weights_image().to_numpy(), weights[i:i + 1])
        np.testing.assert_allclose(item.loss_image().to_numpy(), expected_loss[i:i + 1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("t", [LT.SOFTMAX_CROSS_ENTROPY, LT.MEAN_ABSOLUTE_ERROR, LT.SIGMOID_CROSS_ENTROPY])
def test_padded_labels_and_weights_read_their_first_channels(device, rng, t):
    shape = (2, 10, 3, 2)
    x, labels = sample(rng, t, shape)
    weights = sample_weights(rng, shape)
    # The padding holds what would change the result if it were read.
    padded = np.concatenate([labels, np.full((2, 2, 3, 2), 7, np.float32)], axis=1)
    padded_weights = np.concatenate([weights, np.full((2, 2, 3, 2), 3, np.float32)], axis=1)
    d = descriptor(t, RT.SUM)
    loss = mpsx.CNNLoss(device, d)
    state = mpsx.CNNLossLabels(device, padded, padded_weights)
    source = mpsx.ImageBatch.from_numpy(device, x)

    def encode(cb):
        gradient = loss.encode_batch(cb, source, state)
        state.synchronize(cb)
        return gradient

    gradient = read(device, encode)
    expected_loss, expected_gradient = reference_and_gradient(d, x, labels, weights)
    np.testing.assert_allclose(state.loss_image().to_numpy(), expected_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-4, atol=1e-6)

    # The separated losses read padded labels and weights images the same way.
    forward = mpsx.NNForwardLoss(device, d)
    backward = mpsx.NNLossGradient(device, d)
    labels_image = mpsx.ImageBatch.from_numpy(device, padded)
    weights_image = mpsx.ImageBatch.from_numpy(device, padded_weights)
    values = read(device, lambda cb: forward.encode_batch(cb, source, labels_image, weights_image))
    np.testing.assert_allclose(values, expected_loss, rtol=1e-5, atol=1e-6)
    ones = mpsx.ImageBatch.from_numpy(device, np.ones((2, 1, 1, 1), np.float32))
    dx = read(device, lambda cb: backward.encode_batch(cb, ones, source, labels_image, weights_image))
    np.testing.assert_allclose(dx, expected_gradient, rtol=1e-4, atol=1e-6)


def test_data_descriptor_layouts_and_strides(device, rng):
    width, height, channels = 3, 2, 5
    values = rng.standard_normal((channels, height, width)).astype(np.float32)
    expected = values[None]

    hwc = mpsx.CNNLossDataDescriptor(np.ascontiguousarray(values.transpose(1, 2, 0)), HWC, (width, height, channels))
    assert (hwc.layout, hwc.size, hwc.bytes_per_row, hwc.bytes_per_image) == (HWC, (3, 2, 5), 60, 120)
    chw = mpsx.CNNLossDataDescriptor(values.tobytes(), CHW, (width, height, channels))
    assert (chw.layout, chw.bytes_per_row, chw.bytes_per_image) == (CHW, 12, 24)

    # Rows padded to 80 bytes (HWC); rows padded to 16 bytes and planes to 40 (CHW); the padding is NaN.
    rows = np.full((height, 20), np.nan, np.float32)
    rows[:, :15] = values.transpose(1, 2, 0).reshape(height, 15)
    hwc_padded = mpsx.CNNLossDataDescriptor(rows, HWC, (width, height, channels))
    hwc_padded.bytes_per_row = 80
    planes = np.full((channels, 10), np.nan, np.float32)
    planes[:, :8].reshape(channels, height, 4)[:, :, :3] = values
    planes[:, :8].reshape(channels, height, 4)[:, :, 3] = np.nan
    chw_padded = mpsx.CNNLossDataDescriptor(planes, CHW, (width, height, channels))
    chw_padded.bytes_per_row = 16
    chw_padded.bytes_per_image = 40
    assert (chw_padded.bytes_per_row, chw_padded.bytes_per_image) == (16, 40)
    duplicate = copy.copy(chw_padded)  # NSCopying
    chw_padded.bytes_per_row = 12
    assert (duplicate.bytes_per_row, duplicate.bytes_per_image, duplicate.size) == (16, 40, (3, 2, 5))
    np.testing.assert_array_equal(copy.deepcopy(duplicate).to_numpy(), expected)
    chw_padded.bytes_per_row = 16

    for data in (hwc, chw, hwc_padded, chw_padded):
        np.testing.assert_array_equal(data.to_numpy(), expected)
        labels = mpsx.CNNLossLabels(device, data)
        np.testing.assert_array_equal(labels.labels_image().to_numpy(), expected)
    # The values are copied when the descriptor is made, as MPS copies the NSData.
    source = values.tobytes()
    buffer = bytearray(source)
    copied = mpsx.CNNLossDataDescriptor(buffer, CHW, (width, height, channels))
    buffer[:4] = b"\0\0\0\0"
    assert copied.data == source

    # Both layouts give the same loss through the kernel.
    x = rng.standard_normal((1, channels, height, width)).astype(np.float32)
    d = descriptor(LT.MEAN_SQUARED_ERROR, RT.NONE)
    loss = mpsx.CNNLoss(device, d)
    for data in (hwc_padded, chw_padded):
        labels = mpsx.CNNLossLabels(device, data)

        def encode(cb):
            gradient = loss.encode(cb, mpsx.Image.from_numpy(device, x[0]), labels)
            labels.synchronize(cb)
            return gradient

        gradient = read(device, encode)
        np.testing.assert_allclose(labels.loss_image().to_numpy(), (x - expected) ** 2, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gradient, 2 * (x - expected), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("images_as_list", [False, True], ids=["image_batch", "image_list"])
def test_graph_encode_batch_takes_per_image_labels(device, images_as_list):
    """Apple's trainer: an MPSCNNLossLabels per image (padded to a multiple of 4 channels), their array in
    sourceStates; trains as the batch form and as PyTorch."""
    p = parameters()
    x, labels = batch()
    m = model(p, optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR))
    graph = float32_graph(device, m["loss"].training_graph()[0].result_image, False)
    n = x.shape[0]
    images = [mpsx.Image.from_numpy(device, x[i]) for i in range(n)] if images_as_list else \
        mpsx.ImageBatch.from_numpy(device, x)
    per_image = one_hot_labels(device, labels.reshape(n, CLASSES).argmax(1), 4)  # 3 classes padded to 4
    for _ in range(STEPS):
        cb = device.command_queue.command_buffer()
        assert graph.encode_batch(cb, [images], [per_image]) is None
        for item in per_image:
            item.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
    assert_trained_as_pytorch(m, p, x, labels)
    # The batch form (one CNNLossLabels of the batch) trains alike.
    b = model(p, optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR))
    batch_graph = float32_graph(device, b["loss"].training_graph()[0].result_image, False)
    batch_labels = mpsx.CNNLossLabels(device, labels)
    for _ in range(STEPS):
        run(device, lambda cb: batch_graph.encode_batch(cb, [images], [batch_labels]))
    for name in ("conv_w", "fc_w"):
        assert_same_run(device, m[name].weights(), b[name].weights())
        assert_same_run(device, m[name].bias_terms(), b[name].bias_terms())
    # The last step's loss (of the weights before it), across the batch in the first image's loss image.
    before = torch_trajectory(p, x, labels, steps=STEPS - 1)
    h = torch.nn.functional.max_pool2d(torch.relu(torch.nn.functional.conv2d(
        torch.tensor(x), torch.tensor(before["conv_w"]).permute(0, 3, 1, 2), torch.tensor(before["conv_b"]),
        padding=1)), 2).permute(0, 2, 3, 1).reshape(n, -1)
    logits = h @ torch.tensor(before["fc_w"]).reshape(CLASSES, -1).T + torch.tensor(before["fc_b"])
    expected_loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels.reshape(n, -1).argmax(1)))
    np.testing.assert_allclose(per_image[0].loss_image().to_numpy().item(), expected_loss.item(), rtol=1e-4)
    assert all(item.loss_image().to_numpy().item() == 0 for item in per_image[1:])


def test_graph_source_state_errors_name_the_expected_form(device):
    m = model(parameters())
    graph = float32_graph(device, m["loss"].training_graph()[0].result_image, False)
    x, labels = batch()
    n = x.shape[0]
    images = mpsx.ImageBatch.from_numpy(device, x)
    per_image = one_hot_labels(device, labels.reshape(n, CLASSES).argmax(1), CLASSES)
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match=r"source_states: expected 1 entries, one per source state handle, each a "
                                         r"CNNLossLabels for the batch or a list of one CNNLossLabels per image "
                                         r"\(NSArray<MPSStateBatch\*>\); given 4 CNNLossLabels: per-image labels go "
                                         r"in a list of their own, source_states=\[\[labels_0, labels_1, ...\]\]"):
        graph.encode_batch(cb, [images], per_image)
    with pytest.raises(TypeError, match="source_states: expected a list with one entry per source state handle, "
                                        "given CNNLossLabels"):
        graph.encode_batch(cb, [images], per_image[0])
    with pytest.raises(TypeError, match="entry 0 is ndarray"):
        graph.encode_batch(cb, [images], [labels])
    with pytest.raises(TypeError, match=r"source_states: expected a list of mpsx.CNNLossLabels, one per image "
                                        r"\(MPSCNNLossLabelsBatch\); item 1 is list"):
        graph.encode_batch(cb, [images], [[per_image[0], per_image[1:]]])
    with pytest.raises(mpsx.ShapeError, match="expected labels for the 4 source images .* given 3 MPSCNNLossLabels "
                                              "holding 3 images"):
        graph.encode_batch(cb, [images], [per_image[:3]])
    with pytest.raises(ValueError, match="expected one MPSCNNLossLabels for the batch or an MPSCNNLossLabelsBatch "
                                         r"\(one per source image\), given an empty list"):
        graph.encode_batch(cb, [images], [[]])
    with pytest.raises(TypeError, match=r"encode takes one state per source state handle \(MPS: "
                                        r"NSArray<MPSState\*>\); a list of per-image labels \(MPSStateBatch\) goes "
                                        "to encode_batch"):
        graph.encode(cb, [images], [per_image])
    assert cb.command_count == 0
    cb.commit()
    cb.wait_until_completed()


def test_loss_labels_errors(device, rng):
    x, labels = sample(rng, LT.MEAN_SQUARED_ERROR, (2, 3, 4, 5))
    weights = sample_weights(rng, (2, 3, 4, 5))
    loss = mpsx.CNNLoss(device, descriptor(LT.MEAN_SQUARED_ERROR, RT.MEAN))
    source = mpsx.ImageBatch.from_numpy(device, x)
    one = [mpsx.CNNLossLabels(device, labels[i]) for i in range(2)]
    cb = device.command_queue.command_buffer()

    with pytest.raises(ValueError, match="expected one MPSCNNLossLabels for the batch or an MPSCNNLossLabelsBatch "
                                         r"\(one per source image\), given an empty list"):
        loss.encode_batch(cb, source, [])
    with pytest.raises(TypeError, match=r"labels: expected a list of mpsx.CNNLossLabels, one per image "
                                        r"\(MPSCNNLossLabelsBatch\); item 1 is ndarray"):
        loss.encode_batch(cb, source, [one[0], labels[1]])
    with pytest.raises(mpsx.ShapeError, match="expected labels for the 2 source images .* given 3 MPSCNNLossLabels "
                                              "holding 3 images"):
        loss.encode_batch(cb, source, one + [one[0]])
    with pytest.raises(mpsx.ShapeError, match="expected per-image labels of 1x3x4x5 .* given 1x3x4x4"):
        loss.encode_batch(cb, source, [one[0], mpsx.CNNLossLabels(device, labels[1, :, :, :4])])
    with pytest.raises(mpsx.ShapeError, match="the labels of a batch must match in feature channels and data type; "
                                              r"those of labels 0 are 1x3x4x5 \(NxCxHxW\) float32, of labels 1 "
                                              r"1x4x4x5 \(NxCxHxW\) float32"):
        loss.encode_batch(cb, source, [one[0], mpsx.CNNLossLabels(device, np.ones((4, 4, 5), np.float32))])
    with pytest.raises(ValueError, match="the labels of a batch must all have weights or none; labels 0 has none, "
                                         "labels 1 has"):
        loss.encode_batch(cb, source, [one[0], mpsx.CNNLossLabels(device, labels[1], weights[1])])
    with pytest.raises(mpsx.ShapeError, match=r"the weights of a batch must match .* those of labels 0 are 1x3x4x5 "
                                              r"\(NxCxHxW\) float32, of labels 1 1x4x4x5"):
        loss.encode_batch(cb, source, [mpsx.CNNLossLabels(device, labels[0], weights[0]),
                                       mpsx.CNNLossLabels(device, labels[1], np.ones((4, 4, 5), np.float32))])
    with pytest.raises(mpsx.ShapeError, match=r"labels 0 were made with a loss image size of 5x4x3 \(width x height "
                                              r"x feature channels\), but a reduced loss writes one value per image: "
                                              "1x1x1"):
        loss.encode_batch(cb, source, mpsx.CNNLossLabels(device, labels, loss_image_size=(5, 4, 3)))
    none = mpsx.CNNLoss(device, descriptor(LT.MEAN_SQUARED_ERROR, RT.NONE))
    with pytest.raises(mpsx.ShapeError, match="reduction NONE writes one loss per value: 5x4x3"):
        none.encode_batch(cb, source, [mpsx.CNNLossLabels(device, labels[i], loss_image_size=(1, 1, 1))
                                       for i in range(2)])
    with pytest.raises(TypeError, match=r"labels: expected one mpsx.CNNLossLabels \(MPSCNNLossLabels\), given list; "
                                        "a list of per-image labels goes to encode_batch"):
        loss.encode(cb, mpsx.Image.from_numpy(device, x[0]), [one[0]])
    assert cb.command_count == 0  # nothing of the failed calls was enqueued
    cb.commit()
    cb.wait_until_completed()

    with pytest.raises(ValueError, match=r"loss_image_size: expected sizes of 1 to 2\*\*30, given \(0, 1, 1\)"):
        mpsx.CNNLossLabels(device, labels, loss_image_size=(0, 1, 1))
    with pytest.raises(ValueError, match=r"loss_image_size: expected 3 values \(width, height, feature_channels\), "
                                         "given 2"):
        mpsx.CNNLossLabels(device, labels, loss_image_size=(1, 1))
    with pytest.raises(TypeError, match=r"loss_image_size: expected \(width, height, feature_channels\), given int"):
        mpsx.CNNLossLabels(device, labels, loss_image_size=1)
    with pytest.raises(TypeError, match="give labels or labels_descriptor, not both"):
        mpsx.CNNLossLabels(device, labels, labels_descriptor=per_image_hwc(labels[0]))
    with pytest.raises(TypeError, match="give weights or weights_image, not both"):
        mpsx.CNNLossLabels(device, labels, weights, weights_image=mpsx.ImageBatch.from_numpy(device, weights))


def test_data_descriptor_errors(device):
    values = np.zeros(24, np.float32)
    with pytest.raises(TypeError, match="expected float32 data, given an array of float64"):
        mpsx.CNNLossDataDescriptor(np.zeros(24), HWC, (2, 3, 4))
    with pytest.raises(TypeError, match=r"expected float32 data \(an array or a bytes-like object\), given list"):
        mpsx.CNNLossDataDescriptor([0.0] * 24, HWC, (2, 3, 4))
    with pytest.raises(ValueError, match="2 is not a valid DataLayout"):
        mpsx.CNNLossDataDescriptor(values, 2, (2, 3, 4))
    with pytest.raises(ValueError, match=r"size: expected sizes of 1 to 2\*\*30, given \(2, 0, 4\)"):
        mpsx.CNNLossDataDescriptor(values, HWC, (2, 0, 4))
    with pytest.raises(TypeError, match=r"size: expected \(width, height, feature_channels\), given int"):
        mpsx.CNNLossDataDescriptor(values, HWC, 24)
    with pytest.raises(ValueError, match="data of 92 bytes is too short for a 2x3x4 .* expected at least 96 bytes"):
        mpsx.CNNLossDataDescriptor(values[:23], HWC, (2, 3, 4)).to_numpy()
    d = mpsx.CNNLossDataDescriptor(values, HWC, (2, 3, 4))
    with pytest.raises(ValueError, match="bytes_per_row must be positive, given 0"):
        d.bytes_per_row = 0
    d.bytes_per_row = 16
    with pytest.raises(ValueError, match=r"bytes_per_row must be at least width \* feature_channels \* 4 = 32 "
                                         r"\(HEIGHT_X_WIDTH_X_FEATURE_CHANNELS\), given 16"):
        d.to_numpy()
    d.bytes_per_row = 40  # rows of 40 bytes: 3 rows need 112 bytes
    with pytest.raises(ValueError, match="expected at least 112 bytes"):
        d.to_numpy()
    c = mpsx.CNNLossDataDescriptor(values, CHW, (2, 3, 4))
    c.bytes_per_row = 4
    with pytest.raises(ValueError, match=r"bytes_per_row must be at least width \* 4 = 8 "
                                         r"\(FEATURE_CHANNELS_X_HEIGHT_X_WIDTH\), given 4"):
        c.to_numpy()
    c.bytes_per_row = 8
    c.bytes_per_image = 16
    with pytest.raises(ValueError, match=r"bytes_per_image must be at least height \* bytes_per_row = 24"):
        c.to_numpy()
    with pytest.raises(ValueError, match="too short"):
        mpsx.CNNLossLabels(device, mpsx.CNNLossDataDescriptor(values[:20], CHW, (2, 3, 4)))
    # Made without __init__: safe.
    blank = mpsx.CNNLossDataDescriptor.__new__(mpsx.CNNLossDataDescriptor)
    assert "uninitialized" in repr(blank) or "mpsx.CNNLossDataDescriptor" in repr(blank)
    with pytest.raises(TypeError, match="made without __init__"):
        blank.to_numpy()

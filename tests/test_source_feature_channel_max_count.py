"""MPSCNNKernel.sourceFeatureChannelMaxCount: "The maximum number of channels in the source MPSImage to use ... If
the value is too large, it is truncated to be the remaining size in the image after the sourceFeatureChannelOffset is
taken into account. Default: ULONG_MAX". A kernel with offset 4 and max count 3 reads channels 4-6 of a 10-channel
source: the same as the kernel run on an image of those channels alone, and its gradient gives zeros elsewhere."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import read, round_trips

N, C, H, W = 2, 10, 6, 7
OFFSET, COUNT = 4, 3
DEFAULT = 2**63 - 1


def tanh_descriptor():
    return mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH, 1.0, 1.0)


# family -> (forward kernel maker, gradient kernel maker, whether the gradient reads the forward result)
POOLING = (2, 2, 2, 2)
DILATED = (2, 2, 2, 1, 1, 1)
FAMILIES = {
    "neuron": (lambda d: mpsx.CNNNeuron(d, tanh_descriptor()),
               lambda d: mpsx.CNNNeuronGradient(d, tanh_descriptor()), False),
    "pooling_max": (lambda d: mpsx.CNNPoolingMax(d, *POOLING), lambda d: mpsx.CNNPoolingMaxGradient(d, *POOLING),
                    False),
    "pooling_average": (lambda d: mpsx.CNNPoolingAverage(d, *POOLING),
                        lambda d: mpsx.CNNPoolingAverageGradient(d, *POOLING), False),
    "pooling_l2": (lambda d: mpsx.CNNPoolingL2Norm(d, *POOLING), lambda d: mpsx.CNNPoolingL2NormGradient(d, *POOLING),
                   False),
    "dilated_pooling_max": (lambda d: mpsx.CNNDilatedPoolingMax(d, *DILATED),
                            lambda d: mpsx.CNNDilatedPoolingMaxGradient(d, *DILATED), False),
    "local_contrast_normalization": (lambda d: mpsx.CNNLocalContrastNormalization(d, 3, 3),
                                     lambda d: mpsx.CNNLocalContrastNormalizationGradient(d, 3, 3), False),
    "spatial_normalization": (lambda d: mpsx.CNNSpatialNormalization(d, 3, 3),
                              lambda d: mpsx.CNNSpatialNormalizationGradient(d, 3, 3), False),
    "cross_channel_normalization": (lambda d: mpsx.CNNCrossChannelNormalization(d, 3),
                                    lambda d: mpsx.CNNCrossChannelNormalizationGradient(d, 3), False),
    "softmax": (lambda d: mpsx.CNNSoftMax(d), lambda d: mpsx.CNNSoftMaxGradient(d), True),
    "log_softmax": (lambda d: mpsx.CNNLogSoftMax(d), lambda d: mpsx.CNNLogSoftMaxGradient(d), True),
    "upsampling_nearest": (lambda d: mpsx.CNNUpsamplingNearest(d, 2, 3),
                           lambda d: mpsx.CNNUpsamplingNearestGradient(d, 2, 3), False),
    "upsampling_bilinear": (lambda d: mpsx.CNNUpsamplingBilinear(d, 2, 3, True),
                            lambda d: mpsx.CNNUpsamplingBilinearGradient(d, 2, 3, True), False),
    "gram_matrix": (lambda d: mpsx.NNGramMatrixCalculation(d, 0.5),
                    lambda d: mpsx.NNGramMatrixCalculationGradient(d, 0.5), False),
}


def source(rng):
    return (rng.standard_normal((N, C, H, W)) + 0.1).astype(np.float32)


def forward(device, kernel, x):
    image = mpsx.Image.from_numpy(device, x)
    return read(device, lambda cb: kernel.encode(cb, image))


def forward_and_gradient(device, kernel, gradient_kernel, reads_result, x, dy_of):
    """The forward pass and its gradient on separate command buffers, as MPS programs run them."""
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    result, state = kernel.encode(cb, image, destination_state=True)
    result.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    y = np.asarray(result)
    dy = mpsx.Image.from_numpy(device, dy_of(y.shape))
    dx = read(device, lambda cb: gradient_kernel.encode(cb, dy, result if reads_result else image, state))
    return y, dx


def sliced(kernel, offset=OFFSET, count=COUNT):
    kernel.source_feature_channel_offset = offset
    kernel.source_feature_channel_max_count = count
    return kernel


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_forward_reads_the_slice(device, rng, family):
    make, _, _ = FAMILIES[family]
    x = source(rng)
    expected = forward(device, make(device), np.ascontiguousarray(x[:, OFFSET:OFFSET + COUNT]))
    kernel = sliced(make(device))
    image = mpsx.Image.from_numpy(device, x)
    assert kernel.destination_image_descriptor(image).feature_channels == COUNT
    y = forward(device, kernel, x)
    assert y.shape == expected.shape and y.shape[1] == COUNT
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_too_large_a_count_is_truncated(device, rng, family):
    make, _, _ = FAMILIES[family]
    x = source(rng)
    expected = forward(device, make(device), np.ascontiguousarray(x[:, OFFSET:]))
    y = forward(device, sliced(make(device), count=C), x)  # 4 + 10 > 10: the 6 channels left
    assert y.shape[1] == C - OFFSET
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gradient_covers_the_slice_only(device, rng, family):
    """Gradient kernels take the slice from the forward's state (they are binary kernels whose primary and secondary
    max counts keep their defaults); channels outside it get zeros."""
    make, make_gradient, reads_result = FAMILIES[family]
    x = source(rng)
    dy = rng.standard_normal((N, COUNT) + (H * 4, W * 4)).astype(np.float32)
    dy_of = lambda shape: np.ascontiguousarray(dy[:shape[0], :shape[1], :shape[2], :shape[3]])  # noqa: E731
    _, expected = forward_and_gradient(device, make(device), make_gradient(device), reads_result,
                                       np.ascontiguousarray(x[:, OFFSET:OFFSET + COUNT]), dy_of)
    _, dx = forward_and_gradient(device, sliced(make(device)), make_gradient(device), reads_result, x, dy_of)
    assert dx.shape == x.shape
    np.testing.assert_allclose(dx[:, OFFSET:OFFSET + COUNT], expected, rtol=1e-4, atol=1e-5)
    outside = np.ones(C, bool)
    outside[OFFSET:OFFSET + COUNT] = False
    np.testing.assert_array_equal(dx[:, outside], 0)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_against_torch(device, rng, log):
    x = source(rng)
    kernel = sliced(mpsx.CNNLogSoftMax(device) if log else mpsx.CNNSoftMax(device))
    gradient = mpsx.CNNLogSoftMaxGradient(device) if log else mpsx.CNNSoftMaxGradient(device)
    dy = rng.standard_normal((N, COUNT, H, W)).astype(np.float32)
    y, dx = forward_and_gradient(device, kernel, gradient, True, x, lambda shape: dy)
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    f = F.log_softmax if log else F.softmax
    expected = f(t[:, OFFSET:OFFSET + COUNT], dim=1)
    expected.backward(torch.tensor(dy, dtype=torch.float64))
    np.testing.assert_allclose(y, expected.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_neuron_against_torch(device, rng):
    x = source(rng)
    dy = rng.standard_normal((N, COUNT, H, W)).astype(np.float32)
    y, dx = forward_and_gradient(device, sliced(mpsx.CNNNeuron(device, tanh_descriptor())),
                                 mpsx.CNNNeuronGradient(device, tanh_descriptor()), False, x, lambda shape: dy)
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    expected = torch.tanh(t[:, OFFSET:OFFSET + COUNT])
    expected.backward(torch.tensor(dy, dtype=torch.float64))
    np.testing.assert_allclose(y, expected.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_dropout_keeps_or_drops_each_element_of_the_slice(device, rng):
    """The mask is random: each result element of the slice is 0 or x / keep_probability, and the gradient goes
    through the same elements."""
    x = source(rng)
    dy = rng.standard_normal((N, COUNT, H, W)).astype(np.float32)
    kernel = sliced(mpsx.CNNDropout(device, 0.5, 7, (1, 1, 1)))
    y, dx = forward_and_gradient(device, kernel, mpsx.CNNDropoutGradient(device, 0.5, 7, (1, 1, 1)), False, x,
                                 lambda shape: dy)
    kept = y != 0
    assert y.shape == (N, COUNT, H, W) and 0 < kept.mean() < 1
    np.testing.assert_allclose(y[kept], x[:, OFFSET:OFFSET + COUNT][kept] * 2, rtol=1e-6)
    np.testing.assert_allclose(dx[:, OFFSET:OFFSET + COUNT], np.where(kept, dy * 2, 0), rtol=1e-6)
    np.testing.assert_array_equal(dx[:, :OFFSET], 0)
    np.testing.assert_array_equal(dx[:, OFFSET + COUNT:], 0)


def convolution(device, rng, inputs=3, outputs=5):
    d = mpsx.CNNConvolutionDescriptor(3, 3, inputs, outputs)
    w = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(outputs).astype(np.float32)
    return mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, w, b)), w, b


def test_convolution_reads_its_input_channels_of_the_slice(device, rng):
    """A convolution's input channel count is its descriptor's: the max count must leave it at least that many; with
    offset 0 it picks that many of a wider source, which without it must have exactly that many."""
    x = source(rng)
    conv, w, b = convolution(device, rng)
    wt = torch.as_tensor(w, dtype=torch.float64).permute(0, 3, 1, 2)
    for offset in (0, OFFSET):
        conv.source_feature_channel_offset = offset
        conv.source_feature_channel_max_count = COUNT
        y = forward(device, conv, x)
        expected = F.conv2d(torch.as_tensor(x[:, offset:offset + COUNT], dtype=torch.float64), wt,
                            torch.as_tensor(b, dtype=torch.float64), padding=1).numpy()
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    conv.source_feature_channel_max_count = 2
    with pytest.raises(mpsx.ShapeError, match="source_feature_channel_max_count 2 leaves 2 feature channels; "
                                              "the kernel reads 3"):
        forward(device, conv, x)
    conv.source_feature_channel_offset = 0
    conv.source_feature_channel_max_count = DEFAULT
    with pytest.raises(mpsx.ShapeError, match="expected a source image of 3 feature channels, given 10"):
        forward(device, conv, x)


def test_default_and_persistence(device, tmp_path):
    kernel = mpsx.CNNSoftMax(device)
    assert kernel.source_feature_channel_max_count == DEFAULT
    kernel.source_feature_channel_max_count = 5
    for how, copy in round_trips(kernel, device, tmp_path / "k.mpsx").items():
        assert copy.source_feature_channel_max_count == 5, how


@pytest.mark.parametrize("value, error, message", [
    (0, ValueError, "source_feature_channel_max_count must be positive, given 0"),
    (-3, ValueError, "source_feature_channel_max_count must be positive, given -3"),
])
def test_bad_counts_are_refused_at_encode(device, rng, value, error, message):
    kernel = mpsx.CNNNeuron(device, tanh_descriptor())
    kernel.source_feature_channel_max_count = value
    image = mpsx.Image.from_numpy(device, source(rng))
    cb = device.command_queue.command_buffer()
    with pytest.raises(error, match=message):
        kernel.encode(cb, image)
    with pytest.raises(error, match=message):
        kernel.destination_image_descriptor(image)
    kernel.source_feature_channel_max_count = COUNT  # nothing was enqueued: the buffer still runs
    result = kernel.encode(cb, image)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed" and result.feature_channels == COUNT


@pytest.mark.parametrize("value, message", [(1.5, "given float 1.5"), (True, "given bool True"),
                                            ("3", "given str")])
def test_non_int_counts_are_refused_when_set(device, value, message):
    kernel = mpsx.CNNSoftMax(device)
    with pytest.raises(TypeError, match=f"source_feature_channel_max_count must be an int, {message}"):
        kernel.source_feature_channel_max_count = value
    assert kernel.source_feature_channel_max_count == DEFAULT


def test_gradient_kernels_and_losses_keep_the_default(device, rng):
    """Gradient kernels take the forward geometry from the state; a loss covers whole images."""
    x = source(rng)
    gradient = mpsx.CNNNeuronGradient(device, tanh_descriptor())
    gradient.source_feature_channel_max_count = 3
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    _, state = mpsx.CNNNeuron(device, tanh_descriptor()).encode(cb, image, destination_state=True)
    with pytest.raises(ValueError, match="source_feature_channel_max_count must keep its default"):
        gradient.encode(cb, image, image, state)
    cb.commit()
    cb.wait_until_completed()
    loss = mpsx.NNForwardLoss(device, mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR,
                                                             mpsx.CNNReductionType.SUM))
    loss.source_feature_channel_max_count = 3
    batch = mpsx.ImageBatch.from_numpy(device, x)
    with pytest.raises(ValueError, match="and so must source_feature_channel_max_count"):
        loss.encode_batch(device.command_queue.command_buffer(), batch, batch)


def test_instance_normalization_reads_its_channels_of_the_slice(device, rng):
    """Instance normalization's channel count is its weights': the slice must hold it, as for a convolution."""
    x = source(rng)
    gamma, beta = rng.standard_normal(COUNT).astype(np.float32), rng.standard_normal(COUNT).astype(np.float32)
    kernel = mpsx.CNNInstanceNormalization(device, mpsx.InstanceNormalizationWeights(gamma, beta, 1e-5))
    y = forward(device, sliced(kernel), x)
    expected = F.instance_norm(torch.as_tensor(x[:, OFFSET:OFFSET + COUNT], dtype=torch.float64),
                               weight=torch.as_tensor(gamma, dtype=torch.float64),
                               bias=torch.as_tensor(beta, dtype=torch.float64), eps=1e-5).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    kernel.source_feature_channel_max_count = 2
    with pytest.raises(mpsx.ShapeError, match="source_feature_channel_max_count 2 leaves 2 feature channels"):
        forward(device, kernel, x)


def test_changing_the_count_between_encodes_resizes_the_result(device, rng):
    """Encodes that make their destination repeat the last size only while the slice stays the same."""
    x = source(rng)
    kernel = mpsx.CNNNeuron(device, tanh_descriptor())
    kernel.source_feature_channel_offset = OFFSET
    for count in (DEFAULT, COUNT, 1, DEFAULT):
        kernel.source_feature_channel_max_count = count
        y = forward(device, kernel, x)
        np.testing.assert_allclose(y, np.tanh(x[:, OFFSET:OFFSET + count]), rtol=1e-5, atol=1e-6)


def test_given_destination_gets_the_slice_at_its_channel_offset(device, rng):
    x = source(rng)
    kernel = sliced(mpsx.CNNNeuron(device, tanh_descriptor()))
    kernel.destination_feature_channel_offset = 4
    before = rng.standard_normal((N, 8, H, W)).astype(np.float32)
    destination = mpsx.Image.from_numpy(device, before)
    y = read(device, lambda cb: kernel.encode(cb, mpsx.Image.from_numpy(device, x), destination))
    expected = before.copy()
    expected[:, 4:4 + COUNT] = np.tanh(x[:, OFFSET:OFFSET + COUNT])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("offset", [0, OFFSET])
def test_convolution_gradient_covers_its_channels_only(device, rng, offset):
    x = source(rng)
    conv, w, b = convolution(device, rng)
    sliced(conv, offset=offset)
    dy = rng.standard_normal((N, 5, H, W)).astype(np.float32)
    _, dx = forward_and_gradient(device, conv, mpsx.CNNConvolutionGradient(device, conv.data_source), False, x,
                                 lambda shape: dy)
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.as_tensor(w, dtype=torch.float64).permute(0, 3, 1, 2)
    F.conv2d(t[:, offset:offset + COUNT], wt, torch.as_tensor(b, dtype=torch.float64), padding=1).backward(
        torch.tensor(dy, dtype=torch.float64))
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-4, atol=1e-4)

"""The kernel model shared by every family (docs/kernels/index.rst):
gradient kernels are binary kernels that take the forward geometry from their
state, forward kernels make their gradient kernels, and a family a backend
lacks is a clear error when a kernel of it is made."""

import numpy as np
import pytest

import mpsx
from helpers import run_isolated


def weights(channels_in, channels_out, size=3):
    rng = np.random.default_rng(0)
    d = mpsx.CNNConvolutionDescriptor(size, size, channels_in, channels_out)
    return mpsx.ConvolutionWeights(d, rng.standard_normal((channels_out, size, size, channels_in)).astype(np.float32),
                                   rng.standard_normal(channels_out).astype(np.float32))


def tanh():
    return mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH, 1, 1)


def average_pooling(device):
    pooling = mpsx.CNNPoolingAverage(device, 3, 3, 2, 2)
    pooling.zero_pad_size_x, pooling.zero_pad_size_y = 1, 2
    pooling.edge_mode = mpsx.ImageEdgeMode.CLAMP
    return pooling


# Forward kernels of one source, each with the gradient kernel made by hand
# with the same arguments, and whether the gradient reads the forward result.
UNARY = {
    "neuron": (lambda d: mpsx.CNNNeuron(d, tanh()), lambda d: mpsx.CNNNeuronGradient(d, tanh()), False),
    "max pooling": (lambda d: mpsx.CNNPoolingMax(d, 3, 2, 2, 1), lambda d: mpsx.CNNPoolingMaxGradient(d, 3, 2, 2, 1),
                    False),
    "average pooling": (average_pooling, lambda d: average_pooling_gradient(d), False),
    "dilated max pooling": (lambda d: mpsx.CNNDilatedPoolingMax(d, 2, 2, 2, 1, 1, 1),
                            lambda d: mpsx.CNNDilatedPoolingMaxGradient(d, 2, 2, 2, 1, 1, 1), False),
    "L2 pooling": (lambda d: mpsx.CNNPoolingL2Norm(d, 2, 2, 2, 2), lambda d: mpsx.CNNPoolingL2NormGradient(d, 2, 2, 2, 2),
                   False),
    "convolution": (lambda d: mpsx.CNNConvolution(d, WEIGHTS), lambda d: mpsx.CNNConvolutionGradient(d, WEIGHTS), False),
    "softmax": (lambda d: mpsx.CNNSoftMax(d), lambda d: mpsx.CNNSoftMaxGradient(d), True),
    "log-softmax": (lambda d: mpsx.CNNLogSoftMax(d), lambda d: mpsx.CNNLogSoftMaxGradient(d), True),
    "dropout": (lambda d: mpsx.CNNDropout(d, 0.6, 11, (1, 0, 1)), lambda d: mpsx.CNNDropoutGradient(d, 0.6, 11, (1, 0, 1)),
                False),
    "cross-channel normalization": (lambda d: mpsx.CNNCrossChannelNormalization(d, 4),
                                    lambda d: mpsx.CNNCrossChannelNormalizationGradient(d, 4), False),
    "spatial normalization": (lambda d: mpsx.CNNSpatialNormalization(d, 3, 3),
                              lambda d: mpsx.CNNSpatialNormalizationGradient(d, 3, 3), False),
    "nearest upsampling": (lambda d: mpsx.CNNUpsamplingNearest(d, 2, 3),
                           lambda d: mpsx.CNNUpsamplingNearestGradient(d, 2, 3), False),
    "bilinear upsampling": (lambda d: mpsx.CNNUpsamplingBilinear(d, 3, 2, True),
                            lambda d: mpsx.CNNUpsamplingBilinearGradient(d, 3, 2, True), False),
    "gram matrix": (lambda d: mpsx.NNGramMatrixCalculation(d, 0.5),
                    lambda d: mpsx.NNGramMatrixCalculationGradient(d, 0.5), False),
    "local contrast normalization": (lambda d: lcn(mpsx.CNNLocalContrastNormalization(d, 3, 3)),
                                     lambda d: lcn(mpsx.CNNLocalContrastNormalizationGradient(d, 3, 3)), False),
    "instance normalization": (lambda d: mpsx.CNNInstanceNormalization(d, mpsx.InstanceNormalizationWeights(
        np.linspace(0.5, 2, 4), np.linspace(-1, 1, 4))), lambda d: mpsx.CNNInstanceNormalizationGradient(d), False),
    "group normalization": (lambda d: mpsx.CNNGroupNormalization(d, mpsx.GroupNormalizationWeights(
        np.linspace(0.5, 2, 4), np.linspace(-1, 1, 4), 2)), lambda d: mpsx.CNNGroupNormalizationGradient(d), False),
}
WEIGHTS = weights(4, 8)


def lcn(kernel):
    kernel.alpha, kernel.beta, kernel.delta, kernel.p0, kernel.pm, kernel.ps = 0.7, 0.6, 0.3, 0.8, 0.1, 1.3
    return kernel


def average_pooling_gradient(device):
    gradient = mpsx.CNNPoolingAverageGradient(device, 3, 3, 2, 2)
    gradient.zero_pad_size_x, gradient.zero_pad_size_y = 1, 2
    gradient.edge_mode = mpsx.ImageEdgeMode.CLAMP
    return gradient


def encode_gradient(device, forward, gradient, reads_result, x, dy_seed=5):
    cb = device.command_queue.command_buffer()
    y, state = forward.encode(cb, x, destination_state=True)
    dy = np.random.default_rng(dy_seed).standard_normal((1, y.feature_channels, y.height, y.width)).astype(np.float32)
    dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy), y if reads_result else x, state)
    dx.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    return dx.to_numpy()


@pytest.mark.parametrize("family", sorted(UNARY))
def test_forward_kernels_make_their_gradient_kernels(device, family):
    make_forward, make_gradient, reads_result = UNARY[family]
    forward = make_forward(device)
    made = forward.gradient_kernels()
    by_hand = make_gradient(device)
    assert [type(g) for g in made] == [type(by_hand)]
    gradient = made[0]
    assert isinstance(gradient, mpsx.CNNBinaryKernel) and isinstance(gradient, mpsx.CNNGradientKernel)
    assert gradient.device == device
    x = mpsx.Image.from_numpy(device, np.random.default_rng(3).standard_normal((1, 4, 9, 8)).astype(np.float32))
    # The same gradient as the kernel made by hand with the forward's arguments.
    np.testing.assert_array_equal(encode_gradient(device, forward, gradient, reads_result, x),
                                  encode_gradient(device, make_forward(device), by_hand, reads_result, x))


def test_made_gradient_kernels_keep_the_forward_parameters(device):
    assert mpsx.CNNConvolution(device, WEIGHTS).gradient_kernels()[0].data_source is WEIGHTS
    fully = mpsx.CNNFullyConnected(device, WEIGHTS).gradient_kernels()
    assert [type(g) for g in fully] == [mpsx.CNNFullyConnectedGradient] and fully[0].data_source is WEIGHTS
    transpose = weights(8, 4)
    made = mpsx.CNNConvolutionTranspose(device, transpose).gradient_kernels()
    assert [type(g) for g in made] == [mpsx.CNNConvolutionTransposeGradient] and made[0].data_source is transpose
    dropout = mpsx.CNNDropout(device, 0.25, 99, (0, 1, 1)).gradient_kernels()[0]
    assert (dropout.keep_probability, dropout.seed, tuple(dropout.mask_stride_in_pixels)) == (0.25, 99, (0, 1, 1))
    upsampling = mpsx.CNNUpsamplingBilinear(device, 2, 4, True).gradient_kernels()[0]
    assert (upsampling.scale_factor_x, upsampling.scale_factor_y, upsampling.align_corners) == (2, 4, True)
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 2, 3)).gradient_kernels()[0]
    d = neuron.neuron_descriptor
    assert (d.neuron_type, d.a, d.b) == (mpsx.NeuronType.LINEAR, 2, 3)


@pytest.mark.parametrize("name", ["Add", "Subtract", "Multiply"])
def test_arithmetic_makes_one_gradient_per_source(device, name):
    forward = getattr(mpsx, f"CNN{name}")(device)
    forward.primary_scale, forward.secondary_scale, forward.bias = 2.0, -0.5, 0.25
    forward.secondary_stride_in_feature_channels = 0
    made = forward.gradient_kernels()
    gradient_class = getattr(mpsx, f"CNN{name}Gradient")
    assert [type(g) for g in made] == [gradient_class, gradient_class]
    assert [g.is_secondary_source_filter for g in made] == [False, True]
    for g in made:
        assert (g.primary_scale, g.secondary_scale, g.bias) == (2.0, -0.5, 0.25)
    # Each filter's stride is that of the forward image it reads (Multiply's primary filter reads the secondary).
    strides = [g.secondary_stride_in_feature_channels for g in made]
    assert strides == ([0, 1] if name == "Multiply" else [1, 0])
    rng = np.random.default_rng(4)
    a = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 3, 5)).astype(np.float32))
    b = mpsx.Image.from_numpy(device, rng.standard_normal((1, 1, 3, 5)).astype(np.float32))
    dy_values = rng.standard_normal((1, 4, 3, 5)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    _, state = forward.encode(cb, a, b, destination_state=True)
    dy = mpsx.Image.from_numpy(device, dy_values)
    # Add/Subtract's primary filter and Multiply's secondary filter read the primary image.
    reads = [b, a] if name == "Multiply" else [a, b]
    da, db = (g.encode(cb, dy, image, state) for g, image in zip(made, reads))
    for image in (da, db):
        image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    av, bv = a.to_numpy(), b.to_numpy()
    if name == "Add":
        expected = 2.0 * dy_values, -0.5 * dy_values.sum(axis=1, keepdims=True)
    elif name == "Subtract":
        expected = 2.0 * dy_values, 0.5 * dy_values.sum(axis=1, keepdims=True)
    else:  # d/da (2a * -0.5b) = -b, d/db = -a, summed over the broadcast channels
        expected = -1.0 * bv * dy_values, (-1.0 * av * dy_values).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(da.to_numpy(), expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db.to_numpy(), expected[1], rtol=1e-5, atol=1e-5)


def test_batch_normalization_makes_its_gradient_kernels(device):
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    weights = mpsx.BatchNormalizationWeights(np.ones(4, np.float32), np.zeros(4, np.float32),
                                             np.zeros(4, np.float32), np.ones(4, np.float32))
    made = mpsx.CNNBatchNormalization(device, weights, relu).gradient_kernels()
    assert [type(g) for g in made] == [mpsx.CNNBatchNormalizationGradient]
    assert made[0].fused_neuron_descriptor.neuron_type == mpsx.NeuronType.RELU
    made = mpsx.CNNBatchNormalizationStatistics(device).gradient_kernels()
    assert [type(g) for g in made] == [mpsx.CNNBatchNormalizationStatisticsGradient]
    assert made[0].fused_neuron_descriptor is None


def test_kernels_without_a_gradient_make_none(device):
    assert mpsx.CNNDivide(device).gradient_kernels() == []
    assert mpsx.NNCompare(device).gradient_kernels() == []


def test_gradient_kernels_have_no_gradient_kernels(device):
    with pytest.raises(TypeError, match="MPSCNNNeuronGradient is a gradient kernel; gradient kernels have no gradient"):
        mpsx.CNNNeuronGradient(device, tanh()).gradient_kernels()


def test_gradient_kernels_are_binary_kernels(device):
    pooling = mpsx.CNNPoolingMaxGradient(device, 3, 2, 2, 1)
    assert isinstance(pooling, mpsx.CNNBinaryKernel)
    # The secondary image is the forward source: its window is the forward pooling's.
    assert (pooling.secondary_kernel_width, pooling.secondary_kernel_height) == (3, 2)
    assert (pooling.primary_kernel_width, pooling.primary_kernel_height) == (1, 1)
    dilated = mpsx.CNNConvolutionGradient(device, mpsx.ConvolutionWeights(
        mpsx.CNNConvolutionDescriptor(3, 5, 4, 8, dilation_rate_x=2, dilation_rate_y=3),
        np.zeros((8, 5, 3, 4), np.float32)))
    assert (dilated.secondary_kernel_width, dilated.secondary_kernel_height) == (3, 5)
    assert (dilated.secondary_dilation_rate_x, dilated.secondary_dilation_rate_y) == (2, 3)
    assert pooling.result_state(None, None) is None
    assert pooling.secondary_source_feature_channel_max_count == 2 ** 63 - 1


HAND_SET = [
    ("primary_offset", mpsx.Offset(1, 0, 0), "primary_offset must keep its default (0, 0, 0), given (1, 0, 0)"),
    ("secondary_offset", mpsx.Offset(0, 2, 0), "secondary_offset must keep its default (0, 0, 0), given (0, 2, 0)"),
    ("secondary_edge_mode", mpsx.ImageEdgeMode.CLAMP, "secondary_edge_mode must keep its default ZERO, given CLAMP"),
    ("primary_stride_in_pixels_x", 0, "primary_stride_in_pixels_x must keep its default 1, given 0"),
    ("secondary_stride_in_pixels_y", 2, "secondary_stride_in_pixels_y must keep its default 1, given 2"),
    ("primary_source_feature_channel_offset", 4, "primary_source_feature_channel_offset must keep its default 0, "
                                                 "given 4"),
    ("secondary_source_feature_channel_max_count", 4, "secondary_source_feature_channel_max_count must keep its "
                                                      "default 9223372036854775807, given 4"),
    ("offset", mpsx.Offset(1, 1, 0), "offset must keep its default (0, 0, 0), given (1, 1, 0)"),
    ("clip_rect", mpsx.Region(0, 0, 0, 2, 2, 1), "clip_rect must keep its default"),
    ("destination_feature_channel_offset", 4, "destination_feature_channel_offset must keep its default 0, given 4"),
    ("kernel_offset_x", 1, "kernel_offset_x must keep its default 0, given 1"),
    ("kernel_offset_y", -2, "kernel_offset_y must keep its default 0, given -2"),
]


@pytest.mark.parametrize("prop,value,message", HAND_SET, ids=[p for p, _, _ in HAND_SET])
def test_hand_set_gradient_geometry_is_refused_before_encoding(device, prop, value, message):
    forward, gradient = mpsx.CNNNeuron(device, tanh()), mpsx.CNNNeuronGradient(device, tanh())
    setattr(gradient, prop, value)
    rng = np.random.default_rng(6)
    x = mpsx.Image.from_numpy(device, rng.standard_normal((1, 8, 4, 5)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((1, 8, 4, 5)).astype(np.float32))
    dx = mpsx.Image.from_numpy(device, np.full((1, 8, 4, 5), 7, np.float32))
    cb = device.command_queue.command_buffer()
    _, state = forward.encode(cb, x, destination_state=True)
    with pytest.raises(ValueError, match="MPSCNNNeuronGradient: " + message.replace("(", r"\(").replace(")", r"\)")):
        gradient.encode(cb, dy, x, state, dx)
    with pytest.raises(ValueError, match="takes the forward geometry from its gradient state"):
        gradient.destination_image_descriptor([dy, x], state)
    dx.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    np.testing.assert_array_equal(dx.to_numpy(), 7)  # nothing was encoded


@pytest.mark.parametrize("family,make", [
    ("softmax", "mpsx.CNNSoftMax(device)"),
    ("neuron", "mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))"),
    ("pooling", "mpsx.CNNPoolingMaxGradient(device, 2, 2, 2, 2)"),
    ("arithmetic", "mpsx.CNNAdd(device)"),
])
def test_a_family_the_backend_lacks_is_an_error_naming_both(device, family, make):
    printed = run_isolated(device, f"""
        mpsx._runtime._unregister_primitive({family!r}, device.backend)
        try:
            {make}
        except mpsx.MPSXError as e:
            print(type(e).__name__, e)
    """)
    assert printed.strip() == f"MPSXError the {device.backend} backend (device {device.name}) has no {family} kernels"

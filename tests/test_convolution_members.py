"""MPSCNNConvolution.h's members beyond the plain convolution: the depthwise descriptor and channelMultiplier, the data
source protocol's optional members, the gradient state's weights layout; against torch on the CPU and numpy."""

import pickle

import numpy as np
import pytest
import torch

import mpsx
from helpers import ArrayConvolutionSource, float32_graph, read
from test_convolution import reference_forward

P = mpsx.NNPaddingMethod


class HeaderLayoutSource(mpsx.CNNConvolutionDataSource):
    """A data source as MPS users write it for a depthwise convolution: the weights a flat
    [input][channel_multiplier][kernel_height][kernel_width] array, the header's layout."""

    def __init__(self, descriptor, weights, biases):
        self._descriptor, self._weights, self._biases = descriptor, weights, biases

    def descriptor(self):
        return self._descriptor

    def weights(self):
        return self._weights.reshape(-1)

    def bias_terms(self):
        return self._biases


def test_depthwise_descriptor_members():
    d = mpsx.CNNDepthWiseConvolutionDescriptor(3, 2, 4, 8, stride_in_pixels_x=2)
    assert isinstance(d, mpsx.CNNConvolutionDescriptor)
    assert (d.channel_multiplier, d.groups, d.stride_in_pixels_x) == (2, 1, 2)
    assert d.weights_shape == (8, 2, 3, 1)
    d.groups = 1
    with pytest.raises(ValueError, match=r"CNNDepthWiseConvolutionDescriptor.groups must be 1, as in MPS; given 2"):
        d.groups = 2
    d.input_feature_channels = 2
    assert (d.channel_multiplier, d.weights_shape) == (4, (8, 2, 3, 1))
    with pytest.raises(ValueError, match=r"a depthwise convolution's output feature channels \(7\) must be a "
                                         r"multiple of its input feature channels \(3\)"):
        mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 3, 7)
    grown = mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 2, 4)
    grown.output_feature_channels = 5  # checked again when a kernel is made
    with pytest.raises(ValueError, match=r"output feature channels \(5\) must be a multiple of its input"):
        mpsx.ConvolutionWeights(grown, np.zeros((5, 3, 3, 1), np.float32))
    with pytest.raises(TypeError):
        mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 3, 6, 1, 1, 1, 1, 3)  # no groups argument
    same = mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 4, 8)
    assert same == mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 4, 8)
    assert same != mpsx.CNNConvolutionDescriptor(3, 3, 4, 8, groups=4)
    assert same != mpsx.CNNConvolutionDescriptor(3, 3, 4, 8)
    again = pickle.loads(pickle.dumps(same))
    assert type(again) is mpsx.CNNDepthWiseConvolutionDescriptor and again == same
    bare = mpsx.CNNDepthWiseConvolutionDescriptor.__new__(mpsx.CNNDepthWiseConvolutionDescriptor)
    assert (bare.channel_multiplier, bare.groups, bare.weights_shape) == (1, 1, (1, 1, 1, 1))
    assert "CNNDepthWiseConvolutionDescriptor" in repr(bare)


@pytest.mark.parametrize("multiplier, stride, dilation, native",
                         [(1, (1, 1), (1, 1), False), (3, (2, 1), (1, 1), False), (2, (1, 1), (2, 1), True)])
def test_depthwise_convolution_and_gradient_match_torch(device, rng, multiplier, stride, dilation, native):
    cin, kh, kw, (n, h, w) = 3, 3, 2, (2, 7, 8)
    cout = cin * multiplier
    d = mpsx.CNNDepthWiseConvolutionDescriptor(kw, kh, cin, cout, stride[0], stride[1], dilation[0], dilation[1])
    header = rng.standard_normal((cin, multiplier, kh, kw)).astype(np.float32)  # the header's layout
    biases = rng.standard_normal(cout).astype(np.float32)
    ohwi = header.reshape(cout, kh, kw, 1)
    source = mpsx.ConvolutionWeights(d, ohwi, biases) if native else HeaderLayoutSource(d, header, biases)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    assert (conv.channel_multiplier, gradient.channel_multiplier, conv.groups, gradient.groups) == \
        (multiplier, multiplier, 1, 1)
    assert type(conv.descriptor) is mpsx.CNNDepthWiseConvolutionDescriptor and conv.descriptor == d

    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(ohwi, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(biases, dtype=torch.float64, requires_grad=True)
    yt = reference_forward(xt, wt, bt, stride, dilation, groups=cin)
    dy = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
    yt.backward(torch.as_tensor(dy, dtype=torch.float64))

    cb = device.command_queue.command_buffer()
    image = mpsx.Image.from_numpy(device, x)
    y, state = conv.encode(cb, image, destination_state=True)
    dx = gradient.encode(cb, mpsx.Image.from_numpy(device, dy), image, state)
    for o in (y, dx, state):
        o.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(y.to_numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert state.gradient_for_weights.shape == (cout, kh, kw, 1)
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(state.gradient_for_biases.to_numpy(), bt.grad.numpy(), rtol=1e-4, atol=1e-3)
    assert state.gradient_for_weights_layout is mpsx.CNNConvolutionWeightsLayout.OHWI


def test_depthwise_convolution_node_matches_torch(device, rng):
    d = mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 2, 6)
    header = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    biases = rng.standard_normal(6).astype(np.float32)
    node = mpsx.CNNConvolutionNode(mpsx.NNImageNode(), HeaderLayoutSource(d, header, biases))
    node.result_image.synchronize_resource = True
    graph = float32_graph(device, node.result_image)
    x = rng.standard_normal((2, 2, 5, 6)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    y = graph.encode(cb, [mpsx.Image.from_numpy(device, x)])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    np.testing.assert_allclose(y.to_numpy(), reference_forward(x, header.reshape(6, 3, 3, 1), biases, groups=2).numpy(),
                               rtol=1e-4, atol=1e-4)


def test_other_convolutions_have_no_channel_multiplier(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 4, 4, groups=4)  # the same computation, but not MPS's depthwise class
    source = mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape, np.float32))
    assert mpsx.CNNConvolution(device, source).channel_multiplier == 0
    assert mpsx.CNNConvolutionGradient(device, source).channel_multiplier == 0
    assert mpsx.CNNConvolution(device, source).groups == 4


def test_depthwise_weights_of_another_size_are_refused(device, rng):
    d = mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 2, 4)
    with pytest.raises(ValueError, match="36"):
        mpsx.CNNConvolution(device, HeaderLayoutSource(d, np.zeros((2, 2, 3, 3, 2), np.float32), None))


# ---- the data source protocol's optional members

class Plain(ArrayConvolutionSource):
    pass


def forward(device, source, x):
    conv = mpsx.CNNConvolution(device, source)
    return read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))


def test_inherited_optional_members_stand_for_their_absence(device, rng):
    """CNNConvolutionDataSource defines every optional member of the protocol, and returns MPS's defaults when called;
    the runtime treats the inherited ones as members the data source lacks: no update, no quantization."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 2)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    source = Plain(d, w, None)
    assert source.kernel_weights_data_type() == mpsx.DataType.FLOAT32
    assert source.weights_layout() is mpsx.CNNConvolutionWeightsLayout.OHWI
    assert source.weights_quantization_type() == "none"
    assert source.ranges_for_uint8_kernel() is None and source.lookup_table_for_uint8_kernel() is None
    assert source.update_with_gradient_state(None, None) is False
    assert source.update_with_command_buffer(None, None, None) is None
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(forward(device, source, x), reference_forward(x, w, None).numpy(), rtol=1e-4,
                               atol=1e-4)
    conv = mpsx.CNNConvolution(device, source)
    cb = device.command_queue.command_buffer()
    image = mpsx.Image.from_numpy(device, x)
    y, state = conv.encode(cb, image, destination_state=True)
    mpsx.CNNConvolutionGradient(device, source).encode(cb, y, image, state)
    with pytest.raises(TypeError, match="neither update_with_command_buffer nor update_with_gradient_state"):
        conv.encode_weights_and_bias_update(cb, state)


def test_kernel_weights_data_type_of_a_subclass_is_used(device, rng):
    class Half(ArrayConvolutionSource):
        def kernel_weights_data_type(self):
            return mpsx.DataType.FLOAT16

    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    w = (rng.standard_normal(d.weights_shape) / 3).astype(np.float32)
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    y = forward(device, Half(d, w, None), x)
    rounded = reference_forward(x, w.astype(np.float16).astype(np.float32), None).numpy()
    np.testing.assert_allclose(y, rounded, rtol=1e-5, atol=1e-5)
    assert np.abs(y - reference_forward(x, w, None).numpy()).max() > 1e-4


@pytest.mark.parametrize("kind", ["linear", "lookup_table"])
def test_quantization_members_of_a_subclass_are_used(device, rng, kind):
    d = mpsx.CNNConvolutionDescriptor(2, 2, 2, 3)
    q = rng.integers(0, 256, d.weights_shape).astype(np.uint8)
    ranges = np.array([[-1, 1], [0, 2], [-0.5, 0.25]], np.float32)
    table = np.linspace(-2, 2, 256).astype(np.float32) ** 3

    class Quantized(ArrayConvolutionSource):
        data_type = mpsx.DataType.UINT8

        def weights_quantization_type(self):
            return kind

        def ranges_for_uint8_kernel(self):
            return ranges

        def lookup_table_for_uint8_kernel(self):
            return table

    if kind == "linear":
        w = q / 255.0 * (ranges[:, 1] - ranges[:, 0])[:, None, None, None] + ranges[:, 0][:, None, None, None]
    else:
        w = table[q]
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(forward(device, Quantized(d, q, None), x), reference_forward(x, w, None).numpy(),
                               rtol=1e-4, atol=1e-4)


def test_weights_layout_of_a_subclass_is_checked(device, rng):
    d = mpsx.CNNConvolutionDescriptor(1, 1, 2, 2)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)

    class OHWI(ArrayConvolutionSource):
        def weights_layout(self):
            return mpsx.CNNConvolutionWeightsLayout.OHWI

    class Other(ArrayConvolutionSource):
        def weights_layout(self):
            return 1

    class Camel(ArrayConvolutionSource):
        def weightsLayout(self):
            return 0

    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(forward(device, OHWI(d, w, None), x), reference_forward(x, w, None).numpy(),
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"Other.weights_layout is 1; the weights layout is "
                                         r"CNNConvolutionWeightsLayout.OHWI, MPS's only one"):
        mpsx.CNNConvolution(device, Other(d, w, None))
    with pytest.raises(TypeError, match=r"Camel implements weightsLayout, which mpsx does not call: "
                                        r"MPSCNNConvolutionDataSource's weightsLayout is weights_layout in mpsx"):
        mpsx.CNNConvolution(device, Camel(d, w, None))


def test_update_members_of_a_subclass_are_used(device, rng):
    d = mpsx.CNNConvolutionDescriptor(1, 1, 2, 2)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    calls = []

    class Host(ArrayConvolutionSource):
        def update_with_gradient_state(self, gradient_state, source_state):
            calls.append("host")
            self._weights = self._weights * 2
            return True

    class Encoded(ArrayConvolutionSource):
        def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
            calls.append("encoded")
            return None

    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    for cls, scale in ((Host, 2), (Encoded, 1)):
        source = cls(d, w, None)
        conv = mpsx.CNNConvolution(device, source)
        cb = device.command_queue.command_buffer()
        y, state = conv.encode(cb, image, destination_state=True)
        mpsx.CNNConvolutionGradient(device, source).encode(cb, y, image, state)
        conv.encode_weights_and_bias_update(cb, state)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed"
        np.testing.assert_allclose(read(device, lambda cb: conv.encode(cb, image)),
                                   reference_forward(x, w * scale, None).numpy(), rtol=1e-4, atol=1e-4)
    assert calls == ["host", "encoded"]


# ---- batch normalization folded into the descriptor

@pytest.mark.parametrize("with_biases", [True, False])
def test_batch_normalization_for_inference_matches_torch(device, rng, with_biases):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 3, 4)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32) if with_biases else None
    mean, gamma, beta = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    variance = rng.uniform(0.5, 2, 4).astype(np.float32)
    d.set_batch_normalization_parameters_for_inference_with_mean(mean, variance, gamma, beta, 1e-3)
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    expected = torch.nn.functional.batch_norm(
        reference_forward(x, w, b), torch.as_tensor(mean, dtype=torch.float64),
        torch.as_tensor(variance, dtype=torch.float64), torch.as_tensor(gamma, dtype=torch.float64),
        torch.as_tensor(beta, dtype=torch.float64), training=False, eps=1e-3).numpy()
    for source in (ArrayConvolutionSource(d, w, b), mpsx.ConvolutionWeights(d, w, b)):
        np.testing.assert_allclose(forward(device, source, x), expected, rtol=1e-4, atol=1e-4)
    # None stands for mean 0, variance 1, gamma 1, beta 0.
    plain = mpsx.CNNConvolutionDescriptor(3, 3, 3, 4)
    plain.set_batch_normalization_parameters_for_inference_with_mean(None, None, gamma, None, 0.0)
    np.testing.assert_allclose(forward(device, ArrayConvolutionSource(plain, w, b), x),
                               reference_forward(x, w, b).numpy() * gamma[:, None, None], rtol=1e-4, atol=1e-4)


def test_batch_normalization_parameters_are_checked_and_kept(device, rng):
    d = mpsx.CNNConvolutionDescriptor(1, 1, 2, 3)
    with pytest.raises(ValueError, match=r"variance must hold one value per output feature channel \(3\), given 2"):
        d.set_batch_normalization_parameters_for_inference_with_mean(None, [1, 1], None, None, 0.001)
    with pytest.raises(TypeError):
        d.set_batch_normalization_parameters_for_inference_with_mean(None, None, None, None, "small")
    assert d == mpsx.CNNConvolutionDescriptor(1, 1, 2, 3)
    d.set_batch_normalization_parameters_for_inference_with_mean([1, 2, 3], None, None, None, 0.5)
    assert d != mpsx.CNNConvolutionDescriptor(1, 1, 2, 3)
    again = pickle.loads(pickle.dumps(d))
    assert again == d
    w = np.ones(d.weights_shape, np.float32)
    x = np.ones((1, 2, 2, 2), np.float32)
    expected = (2 - np.array([1, 2, 3], np.float32))[:, None, None] / np.sqrt(1.5)
    np.testing.assert_allclose(forward(device, ArrayConvolutionSource(again, w, None), x)[0], np.broadcast_to(
        expected, (3, 2, 2)), rtol=1e-5)
    d.output_feature_channels = 4  # the parameters no longer fit: refused when a kernel is made
    with pytest.raises(ValueError, match=r"the batch normalization parameters hold 3 values each; the convolution "
                                         r"has 4 output feature channels"):
        mpsx.CNNConvolution(device, ArrayConvolutionSource(d, np.ones(d.weights_shape, np.float32), None))


def test_reload_weights_and_biases_with_data_source_ignores_it(device, rng):
    d = mpsx.CNNConvolutionDescriptor(1, 1, 2, 2)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    source = ArrayConvolutionSource(d, w, None)
    conv = mpsx.CNNConvolution(device, source)
    source._weights = w * 3
    other = ArrayConvolutionSource(d, w * 5, None)
    with pytest.warns(DeprecationWarning, match="reload_weights_and_biases_from_data_source"):
        conv.reload_weights_and_biases_with_data_source(other)
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x))),
                               reference_forward(x, w * 3, None).numpy(), rtol=1e-4, atol=1e-4)


# ---- the weights and biases state's initializers

def test_weights_and_biases_state_for_a_descriptor(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    zeroed = mpsx.CNNConvolutionWeightsAndBiasesState(device, cnn_convolution_descriptor=d)
    cb = device.command_queue.command_buffer()
    zeroed.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert zeroed.weights.shape == (72,) and zeroed.biases.shape == (4,)
    assert not zeroed.weights.to_numpy().any() and not zeroed.biases.to_numpy().any()
    cb = device.command_queue.command_buffer()
    temporary = mpsx.CNNConvolutionWeightsAndBiasesState.\
        temporary_cnn_convolution_weights_and_biases_state_with_command_buffer(cb, d)
    assert temporary.is_temporary and temporary.read_count == 1 and temporary.weights.shape == (72,)
    with pytest.raises(TypeError, match="weights must be an mpsx.Buffer or an array, given None; or give a "
                                        "cnn_convolution_descriptor"):
        mpsx.CNNConvolutionWeightsAndBiasesState(device)
    with pytest.raises(TypeError, match="zeroed buffers for the cnn_convolution_descriptor need a device"):
        mpsx.CNNConvolutionWeightsAndBiasesState(cnn_convolution_descriptor=d)
    with pytest.raises(TypeError, match="biases and offsets go with weights"):
        mpsx.CNNConvolutionWeightsAndBiasesState(device, biases=np.zeros(4, np.float32), cnn_convolution_descriptor=d)


def test_weights_and_biases_state_at_offsets_of_one_buffer(device, rng):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    shared = np.concatenate([np.full(3, 9, np.float32), w.reshape(-1), b, np.full(5, 9, np.float32)])
    buffer = mpsx.Vector.from_numpy(device, shared).buffer
    state = mpsx.CNNConvolutionWeightsAndBiasesState(weights=buffer, weights_offset=12, biases=buffer,
                                                     biases_offset=12 + w.nbytes, cnn_convolution_descriptor=d)
    assert (state.weights_offset, state.biases_offset) == (12, 12 + w.nbytes)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, np.zeros_like(w)))
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)

    def encode(cb):
        conv.reload_weights_and_biases(cb, state)
        return conv.encode(cb, mpsx.Image.from_numpy(device, x))
    np.testing.assert_allclose(read(device, encode), reference_forward(x, w, b).numpy(), rtol=1e-4, atol=1e-4)

    with pytest.raises(ValueError, match="offsets must be multiples of 4; given weights_offset 2"):
        mpsx.CNNConvolutionWeightsAndBiasesState(weights=buffer, weights_offset=2, cnn_convolution_descriptor=d)
    with pytest.raises(ValueError, match=r"the biases buffer holds \d+ bytes; the filter needs 16 from offset"):
        mpsx.CNNConvolutionWeightsAndBiasesState(weights=buffer, biases=buffer, biases_offset=buffer.length - 8,
                                                 cnn_convolution_descriptor=d)
    with pytest.raises(ValueError, match="offsets must not be negative"):
        mpsx.CNNConvolutionWeightsAndBiasesState(weights=buffer, weights_offset=-4, cnn_convolution_descriptor=d)
    with pytest.raises(TypeError, match="weights must be an mpsx.Buffer when no device is given"):
        mpsx.CNNConvolutionWeightsAndBiasesState(weights=w, cnn_convolution_descriptor=d)
    other = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 2, 2),
                                                                np.zeros((2, 3, 3, 2), np.float32)))
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match="the state was made for a filter of 72 weights and 4 biases"):
        other.reload_weights_and_biases(cb, state)


def test_the_convolution_gradient_state_encodes_the_source_size(device, rng):
    """MPSImageSizeEncodingState: the width and height of the source of the forward encode that filled it."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4, stride_in_pixels_x=2, stride_in_pixels_y=2)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, rng.standard_normal((4, 3, 3, 2)).astype(np.float32)))
    source = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 7, 5)).astype(np.float32))
    state = conv.result_state(source)
    assert isinstance(state, mpsx.ImageSizeEncodingState) and (state.source_width, state.source_height) == (0, 0)
    cb = device.command_queue.command_buffer()
    _, state = conv.encode(cb, source, destination_state=True)
    cb.commit()
    cb.wait_until_completed()
    assert (state.source_width, state.source_height) == (5, 7)
    with pytest.raises(TypeError):
        mpsx.CNNConvolutionGradientState.__new__(mpsx.CNNConvolutionGradientState).source_width

"""Every property the MPS headers declare readwrite is settable in mpsx, with
MPS's effect. The lists are read from /tmp-extracted MPS headers by hand
(MPSCNN*.h, MPSNN*.h: every @property not marked readonly), as the SDK is not
part of the repository."""

import pickle
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from fuzz.factories import FACTORIES
from helpers import read

# mpsx class -> the readwrite properties of its MPS class, in mpsx's names.
READWRITE = {
    "CNNArithmetic": ["primary_scale", "secondary_scale", "bias", "primary_stride_in_feature_channels",
                      "secondary_stride_in_feature_channels", "minimum_value", "maximum_value"],
    "CNNArithmeticGradient": ["primary_scale", "secondary_scale", "bias", "secondary_stride_in_feature_channels",
                              "minimum_value", "maximum_value"],
    "CNNBatchNormalization": ["epsilon"],
    "CNNBatchNormalizationNode": ["flags", "training_style"],
    "CNNBinaryKernel": ["destination_image_allocator", "primary_offset", "secondary_offset", "clip_rect",
                        "destination_feature_channel_offset",
                        "primary_source_feature_channel_offset", "secondary_source_feature_channel_offset",
                        "primary_source_feature_channel_max_count", "secondary_source_feature_channel_max_count",
                        "primary_edge_mode", "secondary_edge_mode", "primary_stride_in_pixels_x",
                        "primary_stride_in_pixels_y", "secondary_stride_in_pixels_x", "secondary_stride_in_pixels_y",
                        "padding"],
    "CNNConvolutionDescriptor": ["kernel_width", "kernel_height", "input_feature_channels", "output_feature_channels",
                                 "stride_in_pixels_x", "stride_in_pixels_y", "groups", "dilation_rate_x",
                                 "dilation_rate_y", "fused_neuron_descriptor", "neuron"],
    "CNNConvolutionGradient": ["gradient_option", "serialize_weights_and_biases"],
    "CNNConvolutionNode": ["training_style", "accumulator_precision"],
    "CNNConvolution": ["accumulator_precision_option"],
    "CNNConvolutionTranspose": ["kernel_offset_x", "kernel_offset_y", "accumulator_precision_option"],
    "CNNConvolutionTransposeGradient": ["gradient_option"],
    "CNNCrossChannelNormalization": ["alpha", "beta", "delta"],
    "CNNCrossChannelNormalizationGradient": ["alpha", "beta", "delta"],
    "CNNCrossChannelNormalizationNode": ["kernel_size_in_feature_channels"],
    "CNNGradientKernel": ["kernel_offset_x", "kernel_offset_y"],
    "CNNGroupNormalization": ["epsilon"],
    "CNNGroupNormalizationDataSource": ["number_of_groups"],
    "GroupNormalizationWeights": ["number_of_groups"],
    "CNNGroupNormalizationNode": ["training_style"],
    "CNNInstanceNormalization": ["epsilon"],
    "CNNInstanceNormalizationNode": ["training_style"],
    "CNNKernel": ["destination_image_allocator", "offset", "clip_rect", "destination_feature_channel_offset",
                  "source_feature_channel_offset",
                  "source_feature_channel_max_count", "edge_mode", "padding"],
    "CNNLocalContrastNormalization": ["alpha", "beta", "delta", "p0", "pm", "ps"],
    "CNNLocalContrastNormalizationGradient": ["alpha", "beta", "delta", "p0", "pm", "ps"],
    "CNNLocalContrastNormalizationGradientNode": ["alpha", "beta", "delta", "p0", "pm", "ps"],
    "CNNLocalContrastNormalizationNode": ["pm", "ps", "p0", "kernel_width", "kernel_height"],
    "CNNLossDescriptor": ["loss_type", "reduction_type", "reduce_across_batch", "weight", "label_smoothing",
                          "number_of_classes", "epsilon", "delta"],
    "CNNPoolingAverage": ["zero_pad_size_x", "zero_pad_size_y"],
    "CNNPoolingAverageGradient": ["zero_pad_size_x", "zero_pad_size_y"],
    "CNNPoolingGradient": ["source_size"],
    "CNNSpatialNormalization": ["alpha", "beta", "delta"],
    "CNNSpatialNormalizationGradient": ["alpha", "beta", "delta"],
    "CNNSpatialNormalizationGradientNode": ["kernel_width", "kernel_height", "alpha", "beta", "delta"],
    "CNNSpatialNormalizationNode": ["kernel_width", "kernel_height"],
    "NNArithmeticGradientNode": ["primary_scale", "secondary_scale", "bias", "secondary_stride_in_pixels_x",
                                 "secondary_stride_in_pixels_y", "secondary_stride_in_feature_channels",
                                 "minimum_value", "maximum_value"],
    "NNBinaryArithmeticNode": ["primary_scale", "secondary_scale", "bias", "primary_stride_in_pixels_x",
                               "primary_stride_in_pixels_y", "primary_stride_in_feature_channels",
                               "secondary_stride_in_pixels_x", "secondary_stride_in_pixels_y",
                               "secondary_stride_in_feature_channels", "minimum_value", "maximum_value"],
    "NNCompare": ["comparison_type", "threshold"],
    "NNComparisonNode": ["comparison_type"],
    "NNFilterNode": ["padding_policy", "label"],
    "NNForwardLoss": ["weight", "label_smoothing", "epsilon", "delta"],
    "NNForwardLossNode": ["property_call_back"],
    "NNGramMatrixCalculation": ["alpha"],
    "NNGramMatrixCalculationGradient": ["alpha"],
    "NNGramMatrixCalculationNode": ["property_call_back"],
    "NNGraph": ["output_state_is_temporary", "format", "destination_image_allocator"],
    "NNImageNode": ["handle", "format", "export_from_graph", "synchronize_resource", "stop_gradient",
                    "image_allocator"],
    "NNLossGradient": ["weight", "label_smoothing", "epsilon", "delta", "compute_label_gradients"],
    "NNLossGradientNode": ["property_call_back"],
    "NNNeuronDescriptor": ["neuron_type", "a", "b", "c", "data"],
    "NNOptimizer": ["apply_gradient_clipping"],
    "NNOptimizerAdam": ["time_step"],
    "NNOptimizerDescriptor": ["learning_rate", "gradient_rescale", "apply_gradient_clipping", "gradient_clip_max",
                              "gradient_clip_min", "regularization_scale", "regularization_type"],
    "NNStateNode": ["handle", "export_from_graph", "synchronize_resource"],
}

def make(name, device):
    scope = {"np": np, "mpsx": mpsx, "rng": np.random.default_rng(0)}
    exec("dev = device = mpsx.Device(%r)\nq = dev.command_queue\ncb = command_buffer = q.command_buffer()\n"
         % device.name, scope)
    exec(FACTORIES[name][0], scope)
    return scope["obj"]


@pytest.mark.parametrize("name", sorted(READWRITE))
def test_readwrite_properties_are_settable(device, name):
    obj = make(name, device)
    for prop in READWRITE[name]:
        value = getattr(obj, prop)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # CNNConvolutionDescriptor.neuron
            setattr(obj, prop, value)  # AttributeError for a read-only property
        assert getattr(obj, prop) == value or (value is not None and np.array_equal(getattr(obj, prop), value)), prop


def torch_convolution(x, w, b, stride, dilation, groups):
    wt = torch.as_tensor(w, dtype=torch.float64).permute(0, 3, 1, 2)
    pad = ((w.shape[1] - 1) * dilation[1] // 2, (w.shape[2] - 1) * dilation[0] // 2)
    return F.conv2d(torch.as_tensor(x, dtype=torch.float64), wt, torch.as_tensor(b, dtype=torch.float64),
                    stride=(stride[1], stride[0]), padding=pad, dilation=(dilation[1], dilation[0]), groups=groups)


def test_convolution_descriptor_set_after_init(device, rng):
    """As MPS programs do: a descriptor made with the window and channels, then strides, groups, dilation and the
    fused neuron set one by one; the convolution made from it computes what torch computes."""
    d = mpsx.CNNConvolutionDescriptor(1, 1, 1, 1)
    d.kernel_width, d.kernel_height = 3, 5
    d.input_feature_channels, d.output_feature_channels = 4, 6
    d.stride_in_pixels_x, d.stride_in_pixels_y = 2, 1
    d.groups = 2
    d.dilation_rate_x, d.dilation_rate_y = 2, 1
    d.fused_neuron_descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU, 0.25)
    assert d.weights_shape == (6, 5, 3, 2)
    w = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, w, b))
    x = rng.standard_normal((2, 4, 9, 11)).astype(np.float32)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    expected = F.leaky_relu(torch_convolution(x, w, b, (2, 1), (2, 1), 2), 0.25).numpy()
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    # The convolution keeps the descriptor it was made with.
    d.fused_neuron_descriptor = None
    assert conv.fused_neuron_descriptor.neuron_type == mpsx.NeuronType.RELU
    assert d.fused_neuron_descriptor is None


def test_convolution_descriptor_keyword_is_the_property_name():
    neuron = mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID)
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 2, fused_neuron_descriptor=neuron)
    assert d.fused_neuron_descriptor == neuron
    with pytest.raises(TypeError, match="fused_neuron"):
        mpsx.CNNConvolutionDescriptor(3, 3, 2, 2, fused_neuron=neuron)


def test_convolution_descriptor_bad_values():
    d = mpsx.CNNConvolutionDescriptor(3, 3, 4, 4)
    for prop in set(READWRITE["CNNConvolutionDescriptor"]) - {"fused_neuron_descriptor", "neuron"}:
        with pytest.raises(ValueError, match=f"CNNConvolutionDescriptor.{prop} must be positive, given 0"):
            setattr(d, prop, 0)
        with pytest.raises(TypeError, match=f"{prop} must be an int, given float 1.5"):
            setattr(d, prop, 1.5)
    with pytest.raises(TypeError, match="expected an mpsx.NNNeuronDescriptor, given str"):
        d.fused_neuron_descriptor = "relu"
    assert (d.kernel_width, d.stride_in_pixels_x, d.groups, d.fused_neuron_descriptor) == (3, 1, 1, None)
    d.groups = 3  # checked when a convolution is made from it, as MPS does
    with pytest.raises(ValueError, match=r"groups \(3\) must divide"):
        mpsx.ConvolutionWeights(d, np.zeros((4, 3, 3, 1), np.float32))


def test_neuron_descriptor_set_after_init(device, rng):
    n = mpsx.NNNeuronDescriptor()
    n.neuron_type = mpsx.NeuronType.LINEAR
    n.a, n.b = 2.0, -1.0
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    y = read(device, lambda cb: mpsx.CNNNeuron(device, n).encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, 2 * x - 1, rtol=1e-6, atol=1e-6)
    n.neuron_type = mpsx.NeuronType.PRELU
    n.a = 0.0
    n.data = [0.1, 0.2, 0.3]
    y = read(device, lambda cb: mpsx.CNNNeuron(device, n).encode(cb, mpsx.Image.from_numpy(device, x)))
    slopes = np.array([0.1, 0.2, 0.3], np.float32)[None, :, None, None]
    np.testing.assert_allclose(y, np.where(x > 0, x, slopes * x), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="not a valid NeuronType"):
        n.neuron_type = 1000
    with pytest.raises(TypeError):
        n.a = "x"


@pytest.mark.parametrize("kind", ["CNNConvolution", "CNNConvolutionTranspose", "CNNConvolutionNode",
                                  "CNNConvolutionTransposeNode"])
def test_accumulator_precision_takes_the_mps_enum(device, kind):
    """MPSNNConvolutionAccumulatorPrecisionOption by name (HALF = 0, FLOAT = 1, as in the header), its ints, and the
    strings mpsx took before; the getter gives the enum."""
    obj = make(kind, device)
    prop = "accumulator_precision" if kind.endswith("Node") else "accumulator_precision_option"
    Option = mpsx.NNConvolutionAccumulatorPrecisionOption
    assert (int(Option.HALF), int(Option.FLOAT)) == (0, 1)
    assert getattr(obj, prop) is Option.FLOAT
    for value, expected in ((Option.HALF, Option.HALF), (1, Option.FLOAT), (0, Option.HALF), ("float", Option.FLOAT),
                            ("half", Option.HALF)):
        setattr(obj, prop, value)
        assert getattr(obj, prop) is expected, value
    for bad in ("double", 2, -1, True, None, 1.0, np.array([0, 1])):
        with pytest.raises(ValueError, match=f"{prop} must be NNConvolutionAccumulatorPrecisionOption.HALF or FLOAT"):
            setattr(obj, prop, bad)
        assert getattr(obj, prop) is Option.HALF


def test_deprecated_descriptor_neuron_fuses_the_neuron(device, rng):
    """MPSCNNConvolutionDescriptor.neuron (deprecated): the neuron kernel's function is fused into the convolution."""
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 2.0, -1.0))
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    assert d.neuron is None
    with pytest.warns(DeprecationWarning, match="set fused_neuron_descriptor instead"):
        d.neuron = neuron
    assert d.neuron is neuron
    assert d.fused_neuron_descriptor == neuron.neuron_descriptor
    w = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, w, b))
    x = rng.standard_normal((2, 2, 5, 6)).astype(np.float32)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    np.testing.assert_allclose(y, 2 * torch_convolution(x, w, b, (1, 1), (1, 1), 1).numpy() - 1, rtol=1e-4,
                               atol=1e-4)
    d.fused_neuron_descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    assert d.neuron is None
    with pytest.warns(DeprecationWarning):
        d.neuron = neuron
    with pytest.warns(DeprecationWarning):
        d.neuron = None
    assert d.neuron is None and d.fused_neuron_descriptor is None
    with pytest.raises(TypeError, match="neuron must be an mpsx.CNNNeuron or None, given NNNeuronDescriptor"):
        d.neuron = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    assert d.neuron is None and d.fused_neuron_descriptor is None


def test_serialize_weights_and_biases_is_kept_and_saved(device, rng):
    """MPSCNNConvolutionGradient.serializeWeightsAndBiases (default NO) is kept and saved; the saved gradient holds its
    data source, and the restored one computes what the original computes (docs/semantics.md)."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    weights = mpsx.ConvolutionWeights(d, rng.standard_normal(d.weights_shape).astype(np.float32),
                                      rng.standard_normal(3).astype(np.float32))
    conv, gradient = mpsx.CNNConvolution(device, weights), mpsx.CNNConvolutionGradient(device, weights)
    assert gradient.serialize_weights_and_biases is False
    gradient.serialize_weights_and_biases = True
    restored = pickle.loads(pickle.dumps(gradient))
    assert restored.serialize_weights_and_biases is True
    assert not mpsx.CNNConvolutionGradient.__new__(mpsx.CNNConvolutionGradient).serialize_weights_and_biases
    x = mpsx.Image.from_numpy(device, rng.standard_normal((2, 2, 5, 5)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((2, 3, 5, 5)).astype(np.float32))

    def gradient_of(kernel):
        def encode(cb):
            _, state = conv.encode(cb, x, destination_state=True)
            return kernel.encode(cb, dy, x, state)
        return read(device, encode)
    np.testing.assert_array_equal(gradient_of(restored), gradient_of(gradient))

"""The descriptors' class-method factories (+[MPSCNNConvolutionDescriptor
cnnConvolutionDescriptorWithKernelWidth:...] and its kind): what each makes,
with the defaults the MPS headers state for what it does not set, and their
refusals of bad input."""

import numpy as np
import pytest

import mpsx

FLT_MAX = float(np.finfo(np.float32).max)


def test_convolution_descriptor_factory_has_unit_strides_dilation_and_groups():
    d = mpsx.CNNConvolutionDescriptor.cnn_convolution_descriptor_with_kernel_width(3, 5, 4, 8)
    assert type(d) is mpsx.CNNConvolutionDescriptor
    assert (d.kernel_width, d.kernel_height, d.input_feature_channels, d.output_feature_channels) == (3, 5, 4, 8)
    assert (d.stride_in_pixels_x, d.stride_in_pixels_y, d.dilation_rate_x, d.dilation_rate_y, d.groups) == \
        (1, 1, 1, 1, 1)
    assert d.fused_neuron_descriptor is None
    assert d == mpsx.CNNConvolutionDescriptor(3, 5, 4, 8)


@pytest.mark.parametrize("arguments", [(0, 3, 4, 8), (3, 3, 0, 8), (3, 3, 4, -1)])
def test_convolution_descriptor_factory_refuses_sizes_that_are_not_positive(arguments):
    with pytest.raises(ValueError):
        mpsx.CNNConvolutionDescriptor.cnn_convolution_descriptor_with_kernel_width(*arguments)


def test_convolution_descriptor_factory_refuses_a_size_that_is_not_an_int():
    with pytest.raises(TypeError, match="kernel_width"):
        mpsx.CNNConvolutionDescriptor.cnn_convolution_descriptor_with_kernel_width("3", 3, 4, 8)


def test_optimizer_descriptor_factory_without_clipping():
    d = mpsx.NNOptimizerDescriptor.optimizer_descriptor_with_learning_rate(
        0.5, 2.0, regularization_type=mpsx.NNRegularizationType.L2, regularization_scale=0.25)
    assert (d.learning_rate, d.gradient_rescale, d.regularization_type, d.regularization_scale) == \
        (0.5, 2.0, mpsx.NNRegularizationType.L2, 0.25)
    # The first factory applies no clipping.
    assert d.apply_gradient_clipping is False
    assert (d.gradient_clip_max, d.gradient_clip_min) == (FLT_MAX, -FLT_MAX)


def test_optimizer_descriptor_factory_with_clipping():
    d = mpsx.NNOptimizerDescriptor.optimizer_descriptor_with_learning_rate(
        0.5, 1.0, apply_gradient_clipping=True, gradient_clip_max=2.0, gradient_clip_min=-1.0,
        regularization_type=mpsx.NNRegularizationType.L1, regularization_scale=0.125)
    assert d.apply_gradient_clipping is True
    assert (d.gradient_clip_max, d.gradient_clip_min) == (2.0, -1.0)
    assert (d.regularization_type, d.regularization_scale) == (mpsx.NNRegularizationType.L1, 0.125)
    assert d == mpsx.NNOptimizerDescriptor(0.5, 1.0, True, 2.0, -1.0, mpsx.NNRegularizationType.L1, 0.125)


def test_optimizer_descriptor_factory_takes_its_later_arguments_by_keyword_only():
    # MPS's two factories put the regularization and the clipping arguments in different orders.
    with pytest.raises(TypeError):
        mpsx.NNOptimizerDescriptor.optimizer_descriptor_with_learning_rate(0.5, 1.0, True, 2.0, -1.0,
                                                                           mpsx.NNRegularizationType.NONE, 0.0)
    with pytest.raises(TypeError, match="regularization"):
        mpsx.NNOptimizerDescriptor.optimizer_descriptor_with_learning_rate(0.5, 1.0)


def test_optimizer_descriptor_factory_refuses_bad_values():
    with pytest.raises(ValueError):
        mpsx.NNOptimizerDescriptor.optimizer_descriptor_with_learning_rate(
            float("nan"), 1.0, regularization_type=0, regularization_scale=0.0)
    with pytest.raises(ValueError):
        mpsx.NNOptimizerDescriptor.optimizer_descriptor_with_learning_rate(
            0.1, 1.0, regularization_type=7, regularization_scale=0.0)


def test_loss_descriptor_factory_has_the_headers_defaults():
    d = mpsx.CNNLossDescriptor.cnn_loss_descriptor_with_type(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY,
                                                             mpsx.CNNReductionType.MEAN)
    assert (d.loss_type, d.reduction_type) == (mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    # MPSCNNLoss.h: weight 1, labelSmoothing 0, numberOfClasses 1, epsilon 1e-7, delta 1.
    assert (d.weight, d.label_smoothing, d.number_of_classes, d.delta) == (1.0, 0.0, 1, 1.0)
    assert d.epsilon == pytest.approx(1e-7)
    assert d.reduce_across_batch is False


def test_loss_descriptor_factory_refuses_an_unknown_type():
    with pytest.raises(ValueError):
        mpsx.CNNLossDescriptor.cnn_loss_descriptor_with_type(99, mpsx.CNNReductionType.MEAN)


def test_image_descriptor_factories():
    d = mpsx.ImageDescriptor.image_descriptor_with_channel_format(mpsx.DataType.FLOAT16, 5, 3, 7)
    assert (d.channel_format, d.width, d.height, d.feature_channels, d.number_of_images) == \
        (mpsx.DataType.FLOAT16, 5, 3, 7, 1)
    e = mpsx.ImageDescriptor.image_descriptor_with_channel_format(mpsx.DataType.FLOAT32, 5, 3, 7,
                                                                  number_of_images=4, usage=3)
    assert e == mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, width=5, height=3, feature_channels=7,
                                     number_of_images=4)


def test_image_descriptor_factory_refuses_bad_input():
    with pytest.raises(ValueError, match="usage"):
        mpsx.ImageDescriptor.image_descriptor_with_channel_format(mpsx.DataType.FLOAT32, 5, 3, 7, 1, -1)
    with pytest.raises(TypeError, match="usage"):
        mpsx.ImageDescriptor.image_descriptor_with_channel_format(mpsx.DataType.FLOAT32, 5, 3, 7, 1, "read")
    with pytest.raises(ValueError):
        mpsx.ImageDescriptor.image_descriptor_with_channel_format(mpsx.DataType.FLOAT32, 0, 3, 7)


def test_a_factory_made_image_descriptor_makes_images(device):
    d = mpsx.ImageDescriptor.image_descriptor_with_channel_format(mpsx.DataType.FLOAT32, 4, 2, 3, 2, 0)
    images = mpsx.ImageBatch(device, d)
    assert len(images) == 2
    assert [(i.width, i.height, i.feature_channels, i.number_of_images) for i in images] == [(4, 2, 3, 1)] * 2


@pytest.mark.parametrize("parameters", [(), (0.5,), (0.5, 2.0), (0.5, 2.0, 3.0)])
def test_neuron_descriptor_factories_leave_the_parameters_they_omit_at_zero(parameters):
    d = mpsx.NNNeuronDescriptor.cnn_neuron_descriptor_with_type(mpsx.NeuronType.LINEAR, *parameters)
    expected = tuple(parameters) + (0.0,) * (3 - len(parameters))
    assert (d.neuron_type, d.a, d.b, d.c) == (mpsx.NeuronType.LINEAR,) + expected


def test_neuron_descriptor_factory_refuses_an_unknown_type():
    with pytest.raises(ValueError):
        mpsx.NNNeuronDescriptor.cnn_neuron_descriptor_with_type(99)


@pytest.mark.parametrize("no_copy", [False, True])
def test_prelu_descriptor_factory_copies_the_slopes(no_copy):
    slopes = np.array([0.1, 0.2, 0.3], np.float32)
    d = mpsx.NNNeuronDescriptor.cnn_neuron_p_re_lu_descriptor_with_data(slopes, no_copy)
    slopes[0] = 9.0  # a later change to the array is not the descriptor's
    assert d.neuron_type == mpsx.NeuronType.PRELU
    np.testing.assert_array_equal(d.data, np.array([0.1, 0.2, 0.3], np.float32))


def test_the_deprecated_neuron_setters_of_the_convolution_descriptor():
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    assert (d.neuron_type(), d.neuron_parameter_a(), d.neuron_parameter_b()) == (mpsx.NeuronType.NONE, 0.0, 0.0)
    with pytest.warns(DeprecationWarning, match="fused_neuron_descriptor"):
        d.set_neuron_type(mpsx.NeuronType.LINEAR, 2.0, 0.5)
    assert d.fused_neuron_descriptor == mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 2.0, 0.5)
    assert (d.neuron_type(), d.neuron_parameter_a(), d.neuron_parameter_b()) == (mpsx.NeuronType.LINEAR, 2.0, 0.5)
    with pytest.warns(DeprecationWarning):
        d.set_neuron_to_p_re_lu_with_parameters_a(np.array([0.1, 0.2, 0.3], np.float32))
    assert d.neuron_type() == mpsx.NeuronType.PRELU
    np.testing.assert_array_equal(d.fused_neuron_descriptor.data, np.array([0.1, 0.2, 0.3], np.float32))
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError):
        d.set_neuron_type(99, 0.0, 0.0)


def test_a_convolution_reports_its_fused_neuron_by_the_deprecated_properties(device):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    rng = np.random.default_rng(0)
    plain = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(
        d, rng.standard_normal(d.weights_shape).astype(np.float32), np.zeros(3, np.float32)))
    # MPSCNNConvolution.h: "Default is MPSCNNNeuronTypeNone", parameters "Default: 1.0f".
    assert (plain.neuron_type, plain.neuron_parameter_a, plain.neuron_parameter_b, plain.neuron_parameter_c) == \
        (mpsx.NeuronType.NONE, 1.0, 1.0, 1.0)
    d.fused_neuron_descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELUN, 0.5, 6.0)
    fused = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(
        d, rng.standard_normal(d.weights_shape).astype(np.float32), np.zeros(3, np.float32)))
    assert (fused.neuron_type, fused.neuron_parameter_a, fused.neuron_parameter_b, fused.neuron_parameter_c) == \
        (mpsx.NeuronType.RELUN, 0.5, 6.0, 0.0)


def test_the_stochastic_gradient_descent_takes_mps_older_spelling_of_nesterov(device):
    old = mpsx.NNOptimizerStochasticGradientDescent(device, 0.1, 0.9, use_nestrov_momentum=True)
    assert old.use_nesterov_momentum is True and old.use_nestrov_momentum is True
    plain = mpsx.NNOptimizerStochasticGradientDescent(device, 0.1, 0.9)
    assert plain.use_nestrov_momentum is False
    with pytest.raises(ValueError, match="use_nestrov_momentum"):
        mpsx.NNOptimizerStochasticGradientDescent(device, 0.1, 0.9, True, use_nestrov_momentum=False)

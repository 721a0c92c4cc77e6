"""Persistence of every kernel and gradient kernel: mpsx.save / mpsx.load, pickle,
copy.deepcopy and kernel.copy(device) give a kernel of the same class, with the same
constructor arguments and user-set properties, whose encodes give exactly the
original's results (and whose gradient kernels' do too); the copy is independent."""

import copy
import pickle

import numpy as np
import pytest

import mpsx
from helpers import assert_same_run, run

# ---------------------------------------------------------------- inputs and passes


def image(device, shape, seed=0, dtype=np.float32):
    return mpsx.Image.from_numpy(device, np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def results(device, encode):
    """encode(cb) returns Images; their values, after commit and completion."""
    def encode_and_synchronize(cb):
        images = encode(cb)
        for i in images:
            i.synchronize(cb)
        return images
    return [np.asarray(i) for i in run(device, encode_and_synchronize)]


def unary(shape=(2, 3, 6, 7), gradient_reads_result=False):
    """A forward kernel's result, and its gradient kernel's (made by gradient_kernels())."""
    def run_kernel(kernel):
        d = kernel.device
        x = image(d, shape)

        def encode(cb):
            y, state = kernel.encode(cb, x, destination_state=True)
            out = [y]
            for g in kernel.gradient_kernels():
                out.append(g.encode(cb, image(d, y.shape, 1), y if gradient_reads_result else x, state))
            return out
        return results(d, encode)
    return run_kernel


def gradient(make_forward, shape=(2, 3, 6, 7), gradient_reads_result=False):
    """A gradient kernel's result over a forward encode of make_forward(device)."""
    def run_kernel(kernel):
        d = kernel.device
        forward = make_forward(d)
        x = image(d, shape)

        def encode(cb):
            y, state = forward.encode(cb, x, destination_state=True)
            return [kernel.encode(cb, image(d, y.shape, 1), y if gradient_reads_result else x, state)]
        return results(d, encode)
    return run_kernel


def binary(kernel):
    """An arithmetic kernel's result, and its two gradient kernels' where it has them."""
    d = kernel.device
    x, w = image(d, (2, 3, 5, 4), 0), image(d, (2, 3, 5, 4), 2)
    multiply = isinstance(kernel, mpsx.CNNMultiply)

    def encode(cb):
        y, state = kernel.encode(cb, x, w, destination_state=True)
        out = [y]
        for g in kernel.gradient_kernels():
            # Add and subtract read the image whose gradient they make, multiply the other one.
            reads_secondary = g.is_secondary_source_filter != multiply
            out.append(g.encode(cb, image(d, y.shape, 1), w if reads_secondary else x, state))
        return out
    return results(d, encode)


def arithmetic_gradient(forward_class):
    def run_kernel(kernel):
        d = kernel.device
        x, w = image(d, (2, 3, 5, 4), 0), image(d, (2, 3, 5, 4), 2)

        def encode(cb):
            y, state = forward_class(d).encode(cb, x, w, destination_state=True)
            reads_secondary = kernel.is_secondary_source_filter != (forward_class is mpsx.CNNMultiply)
            return [kernel.encode(cb, image(d, y.shape, 1), w if reads_secondary else x, state)]
        return results(d, encode)
    return run_kernel


FUSED = mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 0.5, 0.25)


def batch_normalization_weights():
    rng = np.random.default_rng(5)
    return mpsx.BatchNormalizationWeights(rng.uniform(0.5, 1.5, 3), rng.standard_normal(3), rng.standard_normal(3),
                                          rng.uniform(0.5, 1.5, 3), epsilon=1e-3, label="bn")


def batch_normalization_pass(normalization=None, statistics=None, statistics_gradient=None, gradient_kernel=None):
    """Statistics, training and inference forward, statistics gradient and gradient of one batch; the kernel
    under test replaces its default."""
    def run_kernel(kernel):
        d = kernel.device
        bn = normalization(kernel) if normalization else mpsx.CNNBatchNormalization(d, batch_normalization_weights(),
                                                                                    FUSED)
        stats = statistics(kernel) if statistics else mpsx.CNNBatchNormalizationStatistics(d)
        stats_gradient = statistics_gradient(kernel) if statistics_gradient else \
            mpsx.CNNBatchNormalizationStatisticsGradient(d, FUSED)
        grad = gradient_kernel(kernel) if gradient_kernel else bn.gradient_kernels()[0]
        x = image(d, (2, 3, 5, 4))

        def encode(cb):
            state = bn.result_state(x)
            stats.encode_batch(cb, x, state)
            y = bn.encode(cb, x, state)
            dy = image(d, y.shape, 1)
            stats_gradient.encode_batch(cb, dy, x, state)
            return [y, bn.encode(cb, x), grad.encode(cb, dy, x, state)]
        return results(d, encode)
    return run_kernel


# ---------------------------------------------------------------- kernels with non-default properties

def convolution_weights(kernel_width=3, kernel_height=3, channels_in=3, channels_out=4, seed=3):
    rng = np.random.default_rng(seed)
    descriptor = mpsx.CNNConvolutionDescriptor(kernel_width, kernel_height, channels_in, channels_out)
    return mpsx.ConvolutionWeights(descriptor, rng.standard_normal(descriptor.weights_shape),
                                   rng.standard_normal(channels_out), label="weights")


class PythonConvolutionSource(mpsx.CNNConvolutionDataSource):
    """A Python data source: saved through its __dict__."""

    def __init__(self, scale):
        self.scale = scale

    def descriptor(self):
        return mpsx.CNNConvolutionDescriptor(3, 3, 3, 2)

    def weights(self):
        return np.linspace(-1, 1, 2 * 3 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 3) * self.scale

    def bias_terms(self):
        return np.array([0.5, -0.25], np.float32)


def with_properties(kernel, **properties):
    for name, value in properties.items():
        setattr(kernel, name, value)
    kernel.label = f"saved {type(kernel).__name__}"
    return kernel


def pooling_pair(name, *arguments, **properties):
    forward = getattr(mpsx, name)
    backward = getattr(mpsx, name + "Gradient")
    return [
        (name, lambda d: with_properties(forward(d, *arguments), edge_mode=mpsx.ImageEdgeMode.CLAMP, **properties),
         unary()),
        (name + "Gradient",
         lambda d: with_properties(backward(d, *arguments), edge_mode=mpsx.ImageEdgeMode.CLAMP, **properties),
         gradient(lambda d: with_properties(forward(d, *arguments), edge_mode=mpsx.ImageEdgeMode.CLAMP,
                                            **properties))),
    ]


LCN = dict(alpha=0.5, beta=0.6, delta=0.1, p0=0.9, pm=0.1, ps=1.1)
NORMALIZATION = dict(alpha=0.5, beta=0.6, delta=1.5)
PRELU = mpsx.NNNeuronDescriptor(mpsx.NeuronType.PRELU, data=[0.1, 0.2, 0.3])
SCALES = dict(primary_scale=1.5, secondary_scale=-0.5, bias=0.25, minimum_value=-1.0, maximum_value=1.25)

CASES = [
    ("CNNNeuron", lambda d: with_properties(mpsx.CNNNeuron(d, PRELU)), unary()),
    ("CNNNeuronGradient", lambda d: with_properties(mpsx.CNNNeuronGradient(d, PRELU)),
     gradient(lambda d: mpsx.CNNNeuron(d, PRELU))),
    # The per-type neurons, with parameters their functions take over any input.
    *[(name, lambda d, name=name, arguments=arguments: with_properties(getattr(mpsx, name)(d, *arguments)), unary())
      for name, arguments in [
          ("CNNNeuronAbsolute", ()), ("CNNNeuronELU", (0.5,)), ("CNNNeuronExponential", (0.5, 0.1, 2.0)),
          ("CNNNeuronHardSigmoid", (0.3, 0.4)), ("CNNNeuronLinear", (2.0, -1.0)),
          ("CNNNeuronLogarithm", (1.0, 10.0, -1.0)), ("CNNNeuronPReLU", ([0.1, 0.2, 0.3],)),
          ("CNNNeuronPower", (1.0, 0.5, 2.0)), ("CNNNeuronReLU", (0.1,)), ("CNNNeuronReLUN", (0.1, 0.5)),
          ("CNNNeuronSigmoid", ()), ("CNNNeuronSoftPlus", (1.5, 0.5)), ("CNNNeuronSoftSign", ()),
          ("CNNNeuronTanH", (1.5, 0.5))]],
    *pooling_pair("CNNPoolingMax", 3, 3, 2, 2),
    *pooling_pair("CNNPoolingAverage", 3, 2, 2, 1, zero_pad_size_x=1, zero_pad_size_y=2),
    *pooling_pair("CNNPoolingL2Norm", 2, 3, 1, 2),
    *pooling_pair("CNNDilatedPoolingMax", 2, 2, 2, 1, 1, 2),
    ("CNNConvolution", lambda d: with_properties(mpsx.CNNConvolution(d, convolution_weights()),
                                                 accumulator_precision_option="half"), unary()),
    ("CNNConvolution", lambda d: with_properties(mpsx.CNNConvolution(d, PythonConvolutionSource(0.5))), unary()),
    ("CNNConvolutionGradient",
     lambda d: with_properties(mpsx.CNNConvolutionGradient(d, convolution_weights()), gradient_option=1),
     gradient(lambda d: mpsx.CNNConvolution(d, convolution_weights()))),
    ("CNNFullyConnected", lambda d: with_properties(mpsx.CNNFullyConnected(d, convolution_weights(7, 6))), unary()),
    ("CNNFullyConnectedGradient", lambda d: with_properties(mpsx.CNNFullyConnectedGradient(d, convolution_weights(7, 6))),
     gradient(lambda d: mpsx.CNNFullyConnected(d, convolution_weights(7, 6)))),
    ("CNNConvolutionTranspose", lambda d: with_properties(mpsx.CNNConvolutionTranspose(d, convolution_weights(3, 3, 3, 3)),
                                                          accumulator_precision_option="half"), unary()),
    ("CNNConvolutionTransposeGradient",
     lambda d: with_properties(mpsx.CNNConvolutionTransposeGradient(d, convolution_weights(3, 3, 3, 3))),
     gradient(lambda d: mpsx.CNNConvolutionTranspose(d, convolution_weights(3, 3, 3, 3)))),
    ("CNNBatchNormalization", lambda d: with_properties(
        mpsx.CNNBatchNormalization(d, batch_normalization_weights(), FUSED), epsilon=0.01),
     batch_normalization_pass(normalization=lambda k: k)),
    ("CNNBatchNormalizationStatistics", lambda d: with_properties(mpsx.CNNBatchNormalizationStatistics(d)),
     batch_normalization_pass(statistics=lambda k: k)),
    ("CNNBatchNormalizationStatisticsGradient",
     lambda d: with_properties(mpsx.CNNBatchNormalizationStatisticsGradient(d, FUSED)),
     batch_normalization_pass(statistics_gradient=lambda k: k)),
    ("CNNBatchNormalizationGradient", lambda d: with_properties(mpsx.CNNBatchNormalizationGradient(d, FUSED)),
     batch_normalization_pass(gradient_kernel=lambda k: k)),
    ("CNNInstanceNormalization", lambda d: with_properties(mpsx.CNNInstanceNormalization(
        d, mpsx.InstanceNormalizationWeights(np.array([1.0, 0.5, 2.0]), np.array([0.1, 0.2, -0.3]))), epsilon=0.01),
     unary()),
    ("CNNInstanceNormalizationGradient", lambda d: with_properties(mpsx.CNNInstanceNormalizationGradient(d)),
     gradient(lambda d: mpsx.CNNInstanceNormalization(
         d, mpsx.InstanceNormalizationWeights(np.array([1.0, 0.5, 2.0]), np.array([0.1, 0.2, -0.3]))))),
    ("CNNGroupNormalization", lambda d: with_properties(mpsx.CNNGroupNormalization(
        d, mpsx.GroupNormalizationWeights(np.linspace(0.5, 1.5, 4), np.linspace(-1, 1, 4), 2)), epsilon=0.01),
     unary((2, 4, 5, 3))),
    ("CNNGroupNormalizationGradient", lambda d: with_properties(mpsx.CNNGroupNormalizationGradient(d)),
     gradient(lambda d: mpsx.CNNGroupNormalization(
         d, mpsx.GroupNormalizationWeights(np.linspace(0.5, 1.5, 4), np.linspace(-1, 1, 4), 2)), (2, 4, 5, 3))),
    ("CNNLocalContrastNormalization",
     lambda d: with_properties(mpsx.CNNLocalContrastNormalization(d, 3, 3), edge_mode=mpsx.ImageEdgeMode.CLAMP,
                               **LCN), unary()),
    ("CNNLocalContrastNormalizationGradient",
     lambda d: with_properties(mpsx.CNNLocalContrastNormalizationGradient(d, 3, 3),
                               edge_mode=mpsx.ImageEdgeMode.CLAMP, **LCN),
     gradient(lambda d: with_properties(mpsx.CNNLocalContrastNormalization(d, 3, 3),
                                        edge_mode=mpsx.ImageEdgeMode.CLAMP, **LCN))),
    ("CNNSpatialNormalization", lambda d: with_properties(mpsx.CNNSpatialNormalization(d, 3, 3), **NORMALIZATION),
     unary()),
    ("CNNSpatialNormalizationGradient",
     lambda d: with_properties(mpsx.CNNSpatialNormalizationGradient(d, 3, 3), **NORMALIZATION),
     gradient(lambda d: with_properties(mpsx.CNNSpatialNormalization(d, 3, 3), **NORMALIZATION))),
    ("CNNCrossChannelNormalization",
     lambda d: with_properties(mpsx.CNNCrossChannelNormalization(d, 2), **NORMALIZATION), unary()),
    ("CNNCrossChannelNormalizationGradient",
     lambda d: with_properties(mpsx.CNNCrossChannelNormalizationGradient(d, 2), **NORMALIZATION),
     gradient(lambda d: with_properties(mpsx.CNNCrossChannelNormalization(d, 2), **NORMALIZATION))),
    ("CNNSoftMax", lambda d: with_properties(mpsx.CNNSoftMax(d)), unary(gradient_reads_result=True)),
    ("CNNLogSoftMax", lambda d: with_properties(mpsx.CNNLogSoftMax(d)), unary(gradient_reads_result=True)),
    ("CNNSoftMaxGradient", lambda d: with_properties(mpsx.CNNSoftMaxGradient(d)),
     gradient(mpsx.CNNSoftMax, gradient_reads_result=True)),
    ("CNNLogSoftMaxGradient", lambda d: with_properties(mpsx.CNNLogSoftMaxGradient(d)),
     gradient(mpsx.CNNLogSoftMax, gradient_reads_result=True)),
    ("CNNDropout", lambda d: with_properties(mpsx.CNNDropout(d, 0.7, 42, (1, 0, 1))), unary()),
    ("CNNDropoutGradient", lambda d: with_properties(mpsx.CNNDropoutGradient(d, 0.7, 42, (1, 0, 1))),
     gradient(lambda d: mpsx.CNNDropout(d, 0.7, 42, (1, 0, 1)))),
    ("NNInitialGradient", lambda d: with_properties(mpsx.NNInitialGradient(d)), unary()),
    ("CNNUpsamplingNearest", lambda d: with_properties(mpsx.CNNUpsamplingNearest(d, 2, 3)), unary()),
    ("CNNUpsamplingBilinear", lambda d: with_properties(mpsx.CNNUpsamplingBilinear(d, 3, 2, True)), unary()),
    ("CNNUpsamplingNearestGradient", lambda d: with_properties(mpsx.CNNUpsamplingNearestGradient(d, 2, 3)),
     gradient(lambda d: mpsx.CNNUpsamplingNearest(d, 2, 3))),
    ("CNNUpsamplingBilinearGradient", lambda d: with_properties(mpsx.CNNUpsamplingBilinearGradient(d, 3, 2, True)),
     gradient(lambda d: mpsx.CNNUpsamplingBilinear(d, 3, 2, True))),
    ("NNGramMatrixCalculation", lambda d: with_properties(mpsx.NNGramMatrixCalculation(d, 0.5), alpha=-0.75,
                                                          source_feature_channel_max_count=2), unary()),
    ("NNGramMatrixCalculationGradient", lambda d: with_properties(mpsx.NNGramMatrixCalculationGradient(d, 2.0)),
     gradient(lambda d: mpsx.NNGramMatrixCalculation(d, 0.25))),
    ("NNPad", lambda d: with_properties(mpsx.NNPad(d, (1, 2, 1), (2, 0, 3), fill_value_array=np.arange(9.0)),
                                        edge_mode=mpsx.ImageEdgeMode.CONSTANT, fill_value=0.5), unary()),
    ("NNPadGradient", lambda d: with_properties(mpsx.NNPadGradient(d)),
     gradient(lambda d: with_properties(mpsx.NNPad(d, (1, 2, 1), (2, 0, 3)),
                                        edge_mode=mpsx.ImageEdgeMode.MIRROR_WITH_EDGE))),
    ("NNReshape", lambda d: with_properties(mpsx.NNReshape(d)), unary()),
    ("NNReshapeGradient", lambda d: with_properties(mpsx.NNReshapeGradient(d)), gradient(mpsx.NNReshape)),
    *[(name, lambda d, name=name: with_properties(getattr(mpsx, name)(d), **SCALES), binary)
      for name in ("CNNAdd", "CNNSubtract", "CNNMultiply", "CNNDivide")],
    ("NNCompare", lambda d: with_properties(mpsx.NNCompare(d), minimum_value=0.5,
                                            comparison_type=mpsx.NNComparisonType.LESS_OR_EQUAL, threshold=0.25),
     binary),
    *[(name + "Gradient", lambda d, name=name: with_properties(getattr(mpsx, name + "Gradient")(d, True), **SCALES),
       arithmetic_gradient(getattr(mpsx, name)))
      for name in ("CNNAdd", "CNNSubtract", "CNNMultiply")],
]

def loss_descriptor():
    return mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM, weight=0.5,
                                  label_smoothing=0.0, delta=2.0)


def loss_inputs(d):
    return image(d, (2, 3, 4, 5), 0), image(d, (2, 3, 4, 5), 2)


def run_loss(kernel):
    d = kernel.device
    x, t = loss_inputs(d)
    labels = mpsx.CNNLossLabels(d, np.asarray(t))

    def encode(cb):
        gradient = kernel.encode(cb, x, labels)
        labels.synchronize(cb)
        return [gradient]
    return results(d, encode) + [labels.loss_image().to_numpy()]


def run_forward_loss(kernel):
    d = kernel.device
    x, t = loss_inputs(d)
    return results(d, lambda cb: [kernel.encode(cb, x, t)])


def run_loss_gradient(kernel):
    d = kernel.device
    x, t = loss_inputs(d)
    forward = mpsx.NNForwardLoss(d, loss_descriptor())

    def encode(cb):
        loss, state = forward.encode(cb, x, t, destination_state=True)
        return [kernel.encode(cb, image(d, loss.shape, 1), x, t, source_state=state)]
    return results(d, encode)


CASES += [
    ("CNNLoss", lambda d: with_properties(mpsx.CNNLoss(d, loss_descriptor())), run_loss),
    ("NNForwardLoss", lambda d: with_properties(mpsx.NNForwardLoss(d, loss_descriptor()), weight=0.25, delta=1.5),
     run_forward_loss),
    ("NNLossGradient", lambda d: with_properties(mpsx.NNLossGradient(d, loss_descriptor()), weight=0.25,
                                                 compute_label_gradients=True), run_loss_gradient),
]
CASE_IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(CASES)]


def kernel_classes():
    """Every public class that is a kernel and can be made."""
    abstract = {"CNNKernel", "CNNUnaryKernel", "CNNBinaryKernel", "CNNGradientKernel", "CNNPooling",
                "CNNPoolingGradient", "CNNUpsampling", "CNNUpsamplingGradient", "CNNArithmetic",
                "CNNArithmeticGradient"}
    return {name for name in dir(mpsx) if isinstance(getattr(mpsx, name), type)
            and issubclass(getattr(mpsx, name), mpsx.CNNKernel) and name not in abstract}


def test_every_kernel_class_has_a_case():
    assert kernel_classes() - {name for name, _, _ in CASES} == set()


# ---------------------------------------------------------------- the ways to copy

def saved_and_loaded(kernel, tmp_path, device):
    path = tmp_path / "kernel.safetensors"
    mpsx.save(kernel, path)
    return mpsx.load(path, device=device)


COPIES = {
    "save_load": saved_and_loaded,
    "pickle": lambda kernel, tmp_path, device: pickle.loads(pickle.dumps(kernel)),
    "deepcopy": lambda kernel, tmp_path, device: copy.deepcopy(kernel),
    "copy": lambda kernel, tmp_path, device: kernel.copy(),
    "copy_to_device": lambda kernel, tmp_path, device: kernel.copy(device),
}


def state_of(kernel):
    """The properties a kernel saves, by name."""
    return {name: getattr(kernel, name) for name in mpsx.persistence.property_names(type(kernel))}


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("name, make, run_kernel", CASES, ids=CASE_IDS)
def test_copy_encodes_exactly_as_the_original(device, tmp_path, name, make, run_kernel, how):
    kernel = make(device)
    made = COPIES[how](kernel, tmp_path, device)
    assert type(made) is type(kernel) and made is not kernel
    assert made.device == device
    assert state_of(made) == state_of(kernel)
    assert made.label == f"saved {name}"
    expected = run_kernel(kernel)
    got = run_kernel(made)
    assert len(got) == len(expected) > 0
    for e, g in zip(expected, got):
        assert_same_run(device, g, e)


# Non-default values of the properties every kernel has; a class sets those it has.
BASE_PROPERTIES = {
    "offset": mpsx.Offset(1, 2, 0), "clip_rect": mpsx.Region(1, 0, 0, 3, 2, 1), "edge_mode": mpsx.ImageEdgeMode.CLAMP,
    "padding": mpsx.NNPaddingMethod.SIZE_FULL | mpsx.NNPaddingMethod.ALIGN_TOP_LEFT,
    "source_feature_channel_offset": 1, "destination_feature_channel_offset": 2, "label": "every property",
    "primary_offset": mpsx.Offset(1, 0, 0), "secondary_offset": mpsx.Offset(0, 1, 0),
    "primary_edge_mode": mpsx.ImageEdgeMode.CLAMP, "secondary_edge_mode": mpsx.ImageEdgeMode.CLAMP,
    "primary_stride_in_pixels_x": 0, "primary_stride_in_pixels_y": 2, "secondary_stride_in_pixels_x": 2,
    "secondary_stride_in_pixels_y": 0, "primary_source_feature_channel_offset": 1,
    "secondary_source_feature_channel_offset": 2, "primary_source_feature_channel_max_count": 3,
    "secondary_source_feature_channel_max_count": 4, "kernel_offset_x": 1, "kernel_offset_y": -1,
}


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("name, make, run_kernel", CASES, ids=CASE_IDS)
def test_every_settable_property_survives(device, tmp_path, name, make, run_kernel, how):
    kernel = make(device)
    names = mpsx.persistence.property_names(type(kernel))
    for property_name, value in BASE_PROPERTIES.items():
        if property_name in names:
            setattr(kernel, property_name, value)
    before = state_of(kernel)
    assert before["label"] == "every property" and before["offset"] == (1, 2, 0)
    made = COPIES[how](kernel, tmp_path, device)
    assert state_of(made) == before
    assert isinstance(made.edge_mode, mpsx.ImageEdgeMode) and isinstance(made.padding, mpsx.NNPaddingMethod)


@pytest.mark.parametrize("name, make, run_kernel", CASES, ids=CASE_IDS)
def test_the_copy_is_independent(device, name, make, run_kernel):
    kernel = make(device)
    made = kernel.copy()
    made.label = "changed"
    made.edge_mode = mpsx.ImageEdgeMode.ZERO if kernel.edge_mode else mpsx.ImageEdgeMode.CLAMP
    assert kernel.label == f"saved {name}" and made.edge_mode != kernel.edge_mode
    if hasattr(kernel, "data_source"):
        assert made.data_source is not kernel.data_source


# ---------------------------------------------------------------- weights the kernel holds

def convolution_result(kernel, x):
    return results(kernel.device, lambda cb: [kernel.encode(cb, x)])[0]


def new_weights(device, weights):
    rng = np.random.default_rng(9)
    return mpsx.CNNConvolutionWeightsAndBiasesState(device, rng.standard_normal(weights.weights().shape),
                                                    rng.standard_normal(weights.descriptor().output_feature_channels))


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("kernel_class", [mpsx.CNNConvolution, mpsx.CNNConvolutionTranspose])
def test_weights_reloaded_into_the_kernel_are_saved(device, tmp_path, kernel_class, how):
    weights = convolution_weights(3, 3, 3, 3)
    kernel = kernel_class(device, weights)
    x = image(device, (2, 3, 6, 5))
    initial = convolution_result(kernel, x)
    run(device, lambda cb: kernel.reload_weights_and_biases(cb, new_weights(device, weights)))
    reloaded = convolution_result(kernel, x)
    assert not np.array_equal(initial, reloaded)
    made = COPIES[how](kernel, tmp_path, device)
    assert_same_run(device, convolution_result(made, x), reloaded)
    # The data source keeps its own weights: a kernel made from it afresh gives the initial result.
    np.testing.assert_array_equal(made.data_source.weights(), weights.weights())
    assert_same_run(device, convolution_result(kernel_class(device, made.data_source), x), initial)


def test_training_the_copy_leaves_the_original(device):
    optimizer = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    kernel = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(
        mpsx.CNNConvolutionDescriptor(3, 3, 3, 4), np.full((4, 3, 3, 3), 0.1, np.float32),
        np.zeros(4, np.float32), optimizer))
    x = image(device, (1, 3, 5, 5))
    before = convolution_result(kernel, x)
    trained = kernel.copy()
    assert trained.data_source is not kernel.data_source
    assert trained.data_source.optimizer is not kernel.data_source.optimizer

    def step(cb):
        y, state = trained.encode(cb, x, destination_state=True)
        trained.gradient_kernels()[0].encode(cb, image(device, y.shape, 1), x, state)
        trained.encode_weights_and_bias_update(cb, state)
        return []
    results(device, step)
    assert not np.array_equal(convolution_result(trained, x), before)
    np.testing.assert_array_equal(convolution_result(kernel, x), before)
    np.testing.assert_array_equal(kernel.data_source.weights(), np.full((4, 3, 3, 3), 0.1, np.float32))


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("name", sorted(kernel_classes()))
def test_a_kernel_made_without_init_raises(name):
    cls = getattr(mpsx, name)
    bare = cls.__new__(cls)
    with pytest.raises(TypeError, match="was made without __init__"):
        bare.__mpsx_state__()
    for action in (bare.copy, lambda: pickle.dumps(bare), lambda: copy.deepcopy(bare)):  # saving it, as save does
        with pytest.raises(mpsx.UnsavableError, match="was made without __init__"):
            action()


def test_unknown_properties_are_refused(device, tmp_path):
    state = mpsx.CNNNeuron(device, PRELU).__mpsx_state__()
    state["properties"]["encode"] = 1
    with pytest.raises(ValueError, match="CNNNeuron has no property 'encode' to restore"):
        mpsx.CNNNeuron.__mpsx_restore__(state, device)



def test_a_copy_to_another_device_and_back(device):
    """copyWithZone:device: across devices: a GPU kernel copied to cpu and back computes what it did
    (within the devices' float32 rounding); on cpu alone, onto cpu."""
    weights = convolution_weights(3, 3, 3, 4)
    kernel = mpsx.CNNConvolution(device, weights)
    kernel.offset = mpsx.Offset(1, 1, 0)
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 5)).astype(np.float32)
    cpu = mpsx.Device("cpu")
    there = kernel.copy(cpu)
    back = there.copy(device)
    assert (there.device, back.device) == (cpu, device) and back.offset == kernel.offset
    expected = convolution_result(kernel, mpsx.Image.from_numpy(device, x))
    np.testing.assert_allclose(convolution_result(there, mpsx.Image.from_numpy(cpu, x)), expected, rtol=1e-4,
                               atol=1e-5)
    assert_same_run(device, convolution_result(back, mpsx.Image.from_numpy(device, x)), expected)

"""Floating-point parameters of optimizers, losses and kernels: NaN is refused
everywhere (a ValueError naming the parameter and the value, the old value
kept), infinities too except where they mean something: the open side of a
clamp's bound and a comparison's threshold (docs/semantics.md,
"Floating-point parameters"). Those infinities are then checked to work as
meant against numpy."""

import math
import re

import numpy as np
import pytest

import mpsx
from helpers import read

NAN, INF = math.nan, math.inf
NT = mpsx.NeuronType
CT = mpsx.NNComparisonType


def loss_descriptor():
    return mpsx.CNNLossDescriptor(mpsx.CNNLossType.HUBER, mpsx.CNNReductionType.MEAN)


def batch_normalization_weights(**kwargs):
    return mpsx.BatchNormalizationWeights(np.ones(2), np.zeros(2), np.zeros(2), np.ones(2), **kwargs)


def gradient_node(node):
    return node.gradient_filter_with_source(mpsx.NNImageNode())


# Settable properties: (what, make(device) -> object, property, infinities it takes).
SETTERS = [("NNOptimizerDescriptor", lambda device: mpsx.NNOptimizerDescriptor(), name, infinities)
           for name, infinities in (("learning_rate", ""), ("gradient_rescale", ""), ("gradient_clip_max", "+"),
                                    ("gradient_clip_min", "-"), ("regularization_scale", ""))]
SETTERS += [(kind.__name__, lambda device, kind=kind: kind(device), "learning_rate", "")
            for kind in (mpsx.NNOptimizerStochasticGradientDescent, mpsx.NNOptimizerAdam, mpsx.NNOptimizerRMSProp)]
SETTERS += [(kind.__name__, make, name, "")
            for kind, make in ((mpsx.CNNLossDescriptor, lambda device: loss_descriptor()),
                               (mpsx.NNForwardLoss, lambda device: mpsx.NNForwardLoss(device, loss_descriptor())),
                               (mpsx.NNLossGradient, lambda device: mpsx.NNLossGradient(device, loss_descriptor())))
            for name in ("weight", "label_smoothing", "epsilon", "delta")]
ARITHMETIC = (("primary_scale", ""), ("secondary_scale", ""), ("bias", ""), ("minimum_value", "-"),
              ("maximum_value", "+"))
SETTERS += [(what, make, name, infinities)
            for what, make in (("CNNAdd", mpsx.CNNAdd),
                               ("CNNAddGradient", lambda device: mpsx.CNNAddGradient(device, False)),
                               ("NNAdditionNode", lambda device: mpsx.NNAdditionNode(mpsx.NNImageNode(),
                                                                                     mpsx.NNImageNode())),
                               ("NNAdditionGradientNode", lambda device: gradient_node(
                                   mpsx.NNAdditionNode(mpsx.NNImageNode(), mpsx.NNImageNode()))))
            for name, infinities in ARITHMETIC]
SETTERS += [("NNCompare", mpsx.NNCompare, "threshold", "+-")]
LOCAL_CONTRAST = ("alpha", "beta", "delta", "p0", "pm", "ps")
NORMALIZATIONS = [
    ("CNNCrossChannelNormalization", lambda device: mpsx.CNNCrossChannelNormalization(device, 3), ("alpha", "beta",
                                                                                                   "delta")),
    ("CNNCrossChannelNormalizationGradient", lambda device: mpsx.CNNCrossChannelNormalizationGradient(device, 3),
     ("alpha", "beta", "delta")),
    ("CNNCrossChannelNormalizationNode", lambda device: mpsx.CNNCrossChannelNormalizationNode(mpsx.NNImageNode(), 3),
     ("alpha", "beta", "delta")),
    ("CNNSpatialNormalization", lambda device: mpsx.CNNSpatialNormalization(device, 3, 3), ("alpha", "beta", "delta")),
    ("CNNSpatialNormalizationGradient", lambda device: mpsx.CNNSpatialNormalizationGradient(device, 3, 3),
     ("alpha", "beta", "delta")),
    ("CNNSpatialNormalizationNode", lambda device: mpsx.CNNSpatialNormalizationNode(mpsx.NNImageNode(), 3),
     ("alpha", "beta", "delta")),
    ("CNNSpatialNormalizationGradientNode", lambda device: gradient_node(
        mpsx.CNNSpatialNormalizationNode(mpsx.NNImageNode(), 3)), ("alpha", "beta", "delta")),
    ("CNNLocalContrastNormalization", lambda device: mpsx.CNNLocalContrastNormalization(device, 3, 3), LOCAL_CONTRAST),
    ("CNNLocalContrastNormalizationGradient",
     lambda device: mpsx.CNNLocalContrastNormalizationGradient(device, 3, 3), LOCAL_CONTRAST),
    ("CNNLocalContrastNormalizationNode",
     lambda device: mpsx.CNNLocalContrastNormalizationNode(mpsx.NNImageNode(), 3), LOCAL_CONTRAST),
    ("CNNLocalContrastNormalizationGradientNode", lambda device: gradient_node(
        mpsx.CNNLocalContrastNormalizationNode(mpsx.NNImageNode(), 3)), LOCAL_CONTRAST),
    ("CNNBatchNormalization", lambda device: mpsx.CNNBatchNormalization(device, batch_normalization_weights()),
     ("epsilon",)),
    ("CNNGroupNormalization", lambda device: mpsx.CNNGroupNormalization(
        device, mpsx.GroupNormalizationWeights(np.ones(2), np.zeros(2), 1)), ("epsilon",)),
    ("CNNInstanceNormalization", lambda device: mpsx.CNNInstanceNormalization(
        device, mpsx.InstanceNormalizationWeights(np.ones(2), np.zeros(2))), ("epsilon",)),
]
SETTERS += [(what, make, name, "") for what, make, names in NORMALIZATIONS for name in names]

# Constructor arguments: (what, make(device, value) -> object, the parameter, infinities it takes).
CONSTRUCTORS = [("NNOptimizerDescriptor", lambda device, v, name=name: mpsx.NNOptimizerDescriptor(**{name: v}), name,
                 infinities)
                for name, infinities in (("learning_rate", ""), ("gradient_rescale", ""), ("gradient_clip_max", "+"),
                                         ("gradient_clip_min", "-"), ("regularization_scale", ""))]
CONSTRUCTORS += [(kind.__name__, lambda device, v, kind=kind, name=name: kind(device, **{name: v}), name, "")
                 for kind, names in ((mpsx.NNOptimizerStochasticGradientDescent, ("learning_rate", "momentum_scale")),
                                     (mpsx.NNOptimizerAdam, ("learning_rate", "beta1", "beta2", "epsilon")),
                                     (mpsx.NNOptimizerRMSProp, ("learning_rate", "decay", "epsilon")))
                 for name in names]
CONSTRUCTORS += [("CNNLossDescriptor", lambda device, v, name=name: mpsx.CNNLossDescriptor(
                     mpsx.CNNLossType.HUBER, mpsx.CNNReductionType.MEAN, **{name: v}), name, "")
                 for name in ("weight", "label_smoothing", "epsilon", "delta")]
CONSTRUCTORS += [("NNNeuronDescriptor", lambda device, v, name=name: mpsx.NNNeuronDescriptor(NT.LINEAR, **{name: v}),
                  name, "") for name in ("a", "b", "c")]
CONSTRUCTORS += [
    ("NNNeuronDescriptor", lambda device, v: mpsx.NNNeuronDescriptor(NT.PRELU, data=[0.5, v]), "data[1]", ""),
    ("BatchNormalizationWeights", lambda device, v: batch_normalization_weights(epsilon=v), "epsilon", ""),
    ("BatchNormalizationWeights", lambda device, v: batch_normalization_weights(momentum=v), "momentum", ""),
    ("GroupNormalizationWeights", lambda device, v: mpsx.GroupNormalizationWeights(np.ones(2), np.zeros(2), 1,
                                                                                   epsilon=v), "epsilon", ""),
    ("InstanceNormalizationWeights", lambda device, v: mpsx.InstanceNormalizationWeights(np.ones(2), np.zeros(2),
                                                                                         epsilon=v), "epsilon", ""),
    ("CNNDropout", lambda device, v: mpsx.CNNDropout(device, v, 0), "keep_probability", ""),
    ("CNNDropoutNode", lambda device, v: mpsx.CNNDropoutNode(mpsx.NNImageNode(), v), "keep_probability", ""),
]


def refused(name, value):
    """pytest.raises for a ValueError naming the parameter and the value."""
    text = "-?nan" if math.isnan(value) else re.escape(str(value))
    return pytest.raises(ValueError, match=rf"(?<!\w){re.escape(name)}(?!\w).*given {text}(?!\w)")


def takes(infinities, value):
    return math.isinf(value) and ("+" if value > 0 else "-") in infinities


@pytest.mark.parametrize("what, make, name, infinities", SETTERS,
                         ids=[f"{what}.{name}" for what, _, name, _ in SETTERS])
def test_setters(device, what, make, name, infinities):
    obj = make(device)
    for value in (NAN, INF, -INF):
        before = getattr(obj, name)
        if takes(infinities, value):
            setattr(obj, name, value)
            assert getattr(obj, name) == value
            setattr(obj, name, before)
        else:
            with refused(name, value):
                setattr(obj, name, value)
            assert getattr(obj, name) == before  # kept


@pytest.mark.parametrize("what, make, name, infinities", CONSTRUCTORS,
                         ids=[f"{what}({name})" for what, _, name, _ in CONSTRUCTORS])
def test_constructors(device, what, make, name, infinities):
    for value in (NAN, INF, -INF):
        if takes(infinities, value):
            assert getattr(make(device, value), name) == value
        else:
            with refused(name, value):
                make(device, value)


def epsilon_source(base, value):
    """A data source of `base` (a Python data source protocol) whose epsilon is `value`."""
    class Epsilon(base):
        epsilon = value

        def number_of_feature_channels(self):
            return 2

        def gamma(self):
            return None
    return Epsilon()


@pytest.mark.parametrize("value", [NAN, INF, -INF])
@pytest.mark.parametrize("base, kernel", [(mpsx.CNNBatchNormalizationDataSource, mpsx.CNNBatchNormalization),
                                          (mpsx.CNNInstanceNormalizationDataSource, mpsx.CNNInstanceNormalization)],
                         ids=["batch", "instance"])
def test_a_data_source_epsilon(device, base, kernel, value):
    with refused("the data source's epsilon", value):
        kernel(device, epsilon_source(base, value))


class Weight:
    """An NNLossCallback whose weight is NaN."""

    def scalar_weight_for_source_image(self, source_image, destination_image):
        return NAN


def test_a_loss_callback_weight(device):
    """The weight a forward loss node's callback gives is refused like a set one, before the loss is encoded."""
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    labels = mpsx.NNImageNode(mpsx.NNHandle("labels"))
    loss = mpsx.NNForwardLossNode(x, labels, loss_descriptor=loss_descriptor())
    loss.property_call_back = Weight()
    graph = mpsx.NNGraph(device, loss.result_image, format=mpsx.DataType.FLOAT32)
    images = [mpsx.Image.from_numpy(device, np.zeros((1, 2, 1, 1), np.float32)) for _ in range(2)]
    cb = device.command_queue.command_buffer()
    with refused("weight (from property_call_back)", NAN):
        graph.encode(cb, images)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


# ---------------------------------------------------------------- the infinities taken, at work

def test_infinite_clip_bounds_clip_nothing(device, rng):
    """SGD with clipping on and bounds -inf and +inf: the plain update values - learning_rate * gradient."""
    d = mpsx.NNOptimizerDescriptor(learning_rate=0.5, apply_gradient_clipping=True, gradient_clip_max=INF,
                                   gradient_clip_min=-INF)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, optimizer_descriptor=d)
    values = rng.standard_normal(64).astype(np.float32)
    g = (rng.standard_normal(64) * 1e30).astype(np.float32)  # far beyond FLT_MAX / 1e8 either way
    v = mpsx.Vector.from_numpy(device, values)
    cb = device.command_queue.command_buffer()
    sgd.encode(cb, input_gradient_vector=mpsx.Vector.from_numpy(device, g), input_values_vector=v,
               result_values_vector=v)
    v.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    np.testing.assert_allclose(v.to_numpy(), values - np.float32(0.5) * g, rtol=1e-6)


def test_infinite_clamp_bounds_clamp_nothing(device, rng):
    add = mpsx.CNNAdd(device)
    add.minimum_value, add.maximum_value = -INF, INF
    x, y = rng.uniform(-3e38, 3e38, (2, 1, 3, 2, 2)).astype(np.float32)
    got = read(device, lambda cb: add.encode(cb, mpsx.Image.from_numpy(device, x), mpsx.Image.from_numpy(device, y)))
    with np.errstate(over="ignore"):
        expected = x + y  # overflows to +-inf where the sum is beyond FLT_MAX: nothing clamps it
    assert np.isinf(expected).any()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("threshold", [INF, -INF])
def test_infinite_thresholds(device, rng, threshold):
    """EQUAL with threshold +inf holds for every finite pair, with -inf for none."""
    compare = mpsx.NNCompare(device)
    compare.comparison_type = CT.EQUAL
    compare.threshold = threshold
    x = rng.standard_normal((1, 3, 2, 2)).astype(np.float32) * 1e3
    y = rng.standard_normal((1, 3, 2, 2)).astype(np.float32)
    y[0, 0] = x[0, 0]
    got = read(device, lambda cb: compare.encode(cb, mpsx.Image.from_numpy(device, x),
                                                 mpsx.Image.from_numpy(device, y)))
    np.testing.assert_array_equal(got, (np.abs(x - y) <= threshold).astype(np.float32))

"""The per-type neurons, MPSCNNNeuronReLU and the rest, and their graph nodes, MPSCNNNeuronReLUNode and the rest:
forward results against numpy formulas written here (MPSCNNNeuronType.h's definitions), gradients (through
CNNNeuronGradient with the forward state, and through the graph's gradient nodes) against central differences of
those formulas, the nodes' defaults and factories, their persistence, and bad input."""

import math

import numpy as np
import pytest

import mpsx
from helpers import (Handle, finite_difference_gradient, forward_and_gradient, kernel_forward_and_gradient, read,
                     round_trips, run_gradient_graph)

NT = mpsx.NeuronType
CHANNELS = 3
SLOPES = [0.05, 0.2, 0.3]  # PReLU's, one per channel
_erf = np.vectorize(math.erf)


def prelu(x, slopes):
    return np.where(x >= 0, x, np.reshape(slopes, (1, -1, 1, 1)) * x)


# f(x, a, b, c) of each NeuronType, as MPSCNNNeuronType.h defines it, in float64 numpy; c = -1 is e for
# Exponential and Logarithm (MPSCNNNeuron.h). PReLU's a is the slopes.
FORMULAS = {
    NT.ABSOLUTE: lambda x, a, b, c: np.abs(x),
    NT.ELU: lambda x, a, b, c: np.where(x >= 0, x, a * (np.exp(x) - 1)),
    NT.EXPONENTIAL: lambda x, a, b, c: (np.e if c == -1 else c) ** (a * x + b),
    NT.GELU: lambda x, a, b, c: (1 + _erf(x * np.sqrt(0.5))) * 0.5 * x,
    NT.HARD_SIGMOID: lambda x, a, b, c: np.clip(x * a + b, 0, 1),
    NT.LINEAR: lambda x, a, b, c: a * x + b,
    NT.LOGARITHM: lambda x, a, b, c: np.log(a * x + b) / (1 if c == -1 else np.log(c)),
    NT.POWER: lambda x, a, b, c: (a * x + b) ** c,
    NT.PRELU: lambda x, a, b, c: prelu(x, a),
    NT.RELU: lambda x, a, b, c: np.where(x >= 0, x, a * x),
    NT.RELUN: lambda x, a, b, c: np.minimum(np.where(x >= 0, x, a * x), b),
    NT.SIGMOID: lambda x, a, b, c: 1 / (1 + np.exp(-x)),
    NT.SOFTPLUS: lambda x, a, b, c: a * np.log(1 + np.exp(b * x)),
    NT.SOFTSIGN: lambda x, a, b, c: x / (1 + np.abs(x)),
    NT.TANH: lambda x, a, b, c: a * np.tanh(b * x),
}

# Per-type kernel: (its NeuronType, its constructor's arguments after the device, (a, b, c) it has). The
# parameters keep a * x + b positive over the samples where the function needs it.
KERNELS = {
    "CNNNeuronAbsolute": (NT.ABSOLUTE, (), (0, 0, 0)),
    "CNNNeuronELU": (NT.ELU, (0.7,), (0.7, 0, 0)),
    "CNNNeuronExponential": (NT.EXPONENTIAL, (0.5, 0.1, 2.0), (0.5, 0.1, 2.0)),
    "CNNNeuronHardSigmoid": (NT.HARD_SIGMOID, (0.3, 0.4), (0.3, 0.4, 0)),
    "CNNNeuronLinear": (NT.LINEAR, (2.0, -0.5), (2.0, -0.5, 0)),
    "CNNNeuronLogarithm": (NT.LOGARITHM, (0.5, 3.0, 10.0), (0.5, 3.0, 10.0)),
    "CNNNeuronPower": (NT.POWER, (0.5, 2.5, 1.5), (0.5, 2.5, 1.5)),
    "CNNNeuronPReLU": (NT.PRELU, (SLOPES,), (0, 0, 0)),
    "CNNNeuronReLU": (NT.RELU, (0.1,), (0.1, 0, 0)),
    "CNNNeuronReLUN": (NT.RELUN, (0.1, 1.0), (0.1, 1.0, 0)),
    "CNNNeuronSigmoid": (NT.SIGMOID, (), (0, 0, 0)),
    "CNNNeuronSoftPlus": (NT.SOFTPLUS, (1.2, 0.8), (1.2, 0.8, 0)),
    "CNNNeuronSoftSign": (NT.SOFTSIGN, (), (0, 0, 0)),
    "CNNNeuronTanH": (NT.TANH, (1.5, 0.7), (1.5, 0.7, 0)),
}
# Base e (c = -1) besides base c.
EXTRA_KERNELS = [("CNNNeuronExponential", (0.5, 0.1, -1.0)), ("CNNNeuronLogarithm", (0.5, 3.0, -1.0))]

# Per-type node: (its NeuronType, the defaults of (a, b, c) of its -initWithSource:, the arguments after the
# source of a node made with others). The defaults are MPSNNNeuronDescriptor's "for default behavior" values
# (MPSCNNNeuron.h); Power, Exponential and Logarithm's, which no header gives, are mpsx's (docs/semantics.md).
NODES = {
    "CNNNeuronAbsoluteNode": (NT.ABSOLUTE, (0, 0, 0), ()),
    "CNNNeuronELUNode": (NT.ELU, (1, 0, 0), (0.7,)),
    "CNNNeuronExponentialNode": (NT.EXPONENTIAL, (1, 0, -1), (0.5, 0.1, 2.0)),
    "CNNNeuronGeLUNode": (NT.GELU, (0, 0, 0), ()),
    "CNNNeuronHardSigmoidNode": (NT.HARD_SIGMOID, (0.2, 0.5, 0), (0.3, 0.4)),
    "CNNNeuronLinearNode": (NT.LINEAR, (1, 0, 0), (2.0, -0.5)),
    "CNNNeuronLogarithmNode": (NT.LOGARITHM, (1, 0, -1), (0.5, 3.0, 10.0)),
    "CNNNeuronPowerNode": (NT.POWER, (1, 0, 1), (0.5, 2.5, 1.5)),
    "CNNNeuronPReLUNode": (NT.PRELU, None, (SLOPES,)),
    "CNNNeuronReLUNode": (NT.RELU, (0, 0, 0), (0.1,)),
    "CNNNeuronReLUNNode": (NT.RELUN, (1, 6, 0), (0.1, 1.0)),
    "CNNNeuronSigmoidNode": (NT.SIGMOID, (0, 0, 0), ()),
    "CNNNeuronSoftPlusNode": (NT.SOFTPLUS, (1, 1, 0), (1.2, 0.8)),
    "CNNNeuronSoftSignNode": (NT.SOFTSIGN, (0, 0, 0), ()),
    "CNNNeuronTanHNode": (NT.TANH, (1, 1, 0), (1.5, 0.7)),
}


def parameters(t, arguments):
    """(a, b, c) of a constructor's arguments after the device or source; PReLU's a is its slopes."""
    if t == NT.PRELU:
        return (np.asarray(arguments[0], np.float64), 0, 0)
    return tuple(np.float64(np.float32(v)) for v in arguments) + (0,) * (3 - len(arguments))


def sample(rng, shape=(2, CHANNELS, 4, 5)):
    """Values in [-4, 4] away from the kinks of the functions above (0; 1, ReLUN's b; the hard sigmoid's ends,
    -4/3 and 2, and -2.5 and 2.5 with its defaults), so that central differences stay on one side."""
    x = np.clip(rng.standard_normal(shape) * 1.5, -4, 4)
    for kink in (0.0, 1.0, -4 / 3, 2.0, -2.5, 2.5):
        x = np.where(np.abs(x - kink) < 0.05, kink + 0.3, x)
    return x.astype(np.float32)


def reference(t, x, dy, a, b, c):
    """f(x) and the gradient of sum(f(x) * dy) by central differences of f, both in float64."""
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    return FORMULAS[t](x64, a, b, c), finite_difference_gradient(lambda v: np.sum(FORMULAS[t](v, a, b, c) * dy64),
                                                                 x64, h=1e-6)


def per_type_kernels():
    return [(name, arguments) for name, (_, arguments, _) in KERNELS.items()] + EXTRA_KERNELS


# ---------------------------------------------------------------- kernels

@pytest.mark.parametrize("name, arguments", per_type_kernels(), ids=lambda v: str(v))
def test_kernel_forward_and_gradient_match_the_formula(device, rng, name, arguments):
    t = KERNELS[name][0]
    kernel = getattr(mpsx, name)(device, *arguments)
    x, dy = sample(rng), rng.standard_normal((2, CHANNELS, 4, 5)).astype(np.float32)
    gradient = mpsx.CNNNeuronGradient(device, kernel.neuron_descriptor)
    y, dx = kernel_forward_and_gradient(device, x, dy, kernel, gradient)
    expected_y, expected_dx = reference(t, x, dy, *parameters(t, arguments))
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)
    # The gradient kernel the kernel makes is the same CNNNeuronGradient.
    (made,) = kernel.gradient_kernels()
    assert type(made) is mpsx.CNNNeuronGradient
    _, dx_made = kernel_forward_and_gradient(device, x, dy, kernel, made)
    np.testing.assert_array_equal(dx_made, dx)


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_is_the_cnn_neuron_of_its_descriptor(device, name):
    t, arguments, (a, b, c) = KERNELS[name]
    cls = getattr(mpsx, name)
    kernel = cls(device, *arguments)
    assert isinstance(kernel, mpsx.CNNNeuron) and type(kernel) is cls
    assert kernel.neuron_type == t
    assert (kernel.a, kernel.b, kernel.c) == (np.float32(a), np.float32(b), np.float32(c))
    d = kernel.neuron_descriptor
    assert (d.neuron_type, d.a, d.b, d.c) == (t, kernel.a, kernel.b, kernel.c)
    if t == NT.PRELU:
        np.testing.assert_array_equal(kernel.data, np.float32(SLOPES))
        np.testing.assert_array_equal(d.data, np.float32(SLOPES))
    else:
        assert kernel.data is None and d.data is None
    gradient = kernel.gradient_kernels()[0]
    assert (gradient.neuron_type, gradient.a, gradient.b, gradient.c) == (t, kernel.a, kernel.b, kernel.c)
    assert (gradient.data is None) == (t != NT.PRELU)
    # The generic kernel of the same descriptor computes the same.
    x = np.linspace(-3, 3, 2 * CHANNELS * 3 * 2, dtype=np.float32).reshape(2, CHANNELS, 3, 2)
    image = mpsx.Image.from_numpy(device, x)
    generic = mpsx.CNNNeuron(device, d)
    np.testing.assert_array_equal(read(device, lambda cb: kernel.encode(cb, image)),
                                  read(device, lambda cb: generic.encode(cb, image)))


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_copies_keep_the_class(device, tmp_path, name):
    t, arguments, _ = KERNELS[name]
    kernel = getattr(mpsx, name)(device, *arguments)
    kernel.label = "typed"
    for how, made in round_trips(kernel, device, tmp_path / "kernel.safetensors").items():
        assert type(made) is type(kernel), how
        assert made.neuron_descriptor == kernel.neuron_descriptor and made.label == "typed", how


def test_prelu_count(device):
    assert mpsx.CNNNeuronPReLU(device, SLOPES, 3).data.tolist() == np.float32(SLOPES).tolist()
    assert mpsx.CNNNeuronPReLU(device, np.float64(SLOPES), count=3).data.dtype == np.float32
    for count in (2, 4, 0):
        with pytest.raises(ValueError, match=f"MPSCNNNeuronPReLU: count is {count}; a holds 3 slopes"):
            mpsx.CNNNeuronPReLU(device, SLOPES, count)
    with pytest.raises(TypeError, match="count must be an int, given float 3.0"):
        mpsx.CNNNeuronPReLU(device, SLOPES, 3.0)


def test_kernel_bad_input(device, rng):
    with pytest.raises(TypeError, match="a must be a float, given str '0.1'"):
        mpsx.CNNNeuronReLU(device, "0.1")
    with pytest.raises(TypeError, match="b must be a float, given NoneType None"):
        mpsx.CNNNeuronLinear(device, 1.0, None)
    with pytest.raises(TypeError, match="c must be a float, given bool True"):
        mpsx.CNNNeuronPower(device, 1.0, 1.0, True)
    with pytest.raises(ValueError, match="MPSCNNNeuronTanH: a must be finite, given nan"):
        mpsx.CNNNeuronTanH(device, float("nan"), 1.0)
    with pytest.raises(ValueError, match="MPSCNNNeuronELU: a must be finite, given inf"):
        mpsx.CNNNeuronELU(device, float("inf"))
    with pytest.raises(TypeError):  # a ReLU takes a
        mpsx.CNNNeuronReLU(device)
    with pytest.raises(TypeError):  # a sigmoid takes nothing
        mpsx.CNNNeuronSigmoid(device, 1.0)
    with pytest.raises(TypeError):
        mpsx.CNNNeuronReLU(None, 0.1)
    with pytest.raises(TypeError):
        mpsx.CNNNeuronAbsolute("cpu")
    with pytest.raises(TypeError, match=r"MPSCNNNeuronPReLU: a must be an array of floats, one slope per feature "
                                        r"channel; given str '0.1'"):
        mpsx.CNNNeuronPReLU(device, "0.1")
    with pytest.raises(TypeError, match="MPSCNNNeuronPReLU: a must be an array of floats"):
        mpsx.CNNNeuronPReLU(device, None)
    with pytest.raises(ValueError, match="a PReLU neuron needs one slope per feature channel; given none"):
        mpsx.CNNNeuronPReLU(device, [])
    with pytest.raises(ValueError, match=r"MPSNNNeuronDescriptor: data\[1\] must be finite, given nan"):
        mpsx.CNNNeuronPReLU(device, [0.1, float("nan")])
    # The slopes are one per feature channel of the source: refused at encode, nothing enqueued.
    prelu = mpsx.CNNNeuronPReLU(device, SLOPES)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 2, 2)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match="has 3 slopes; the source image has 4 feature channels"):
        prelu.encode(cb, image)
    assert cb.command_count == 0


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_made_without_init_refuses_use(device, name):
    cls = getattr(mpsx, name)
    bare = cls.__new__(cls)
    assert "made without __init__" in repr(bare)
    for member in ("a", "b", "c", "data", "neuron_type", "neuron_descriptor", "gradient_kernels"):
        with pytest.raises(TypeError, match=f"this mpsx.{name} was made without __init__"):
            value = getattr(bare, member)
            value() if callable(value) else None
    with pytest.raises(TypeError, match=f"this mpsx.{name} was made without __init__"):
        bare.encode(device.command_queue.command_buffer(), mpsx.Image.from_numpy(device, np.zeros((1, 1, 1, 1),
                                                                                                  np.float32)))


def test_a_per_type_kernel_is_a_convolution_descriptor_neuron(device):
    # Old MPS code fused an MPSCNNNeuronReLU through the deprecated descriptor property.
    descriptor = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    relu = mpsx.CNNNeuronReLU(device, 0.25)
    with pytest.warns(DeprecationWarning):
        descriptor.neuron = relu
    assert descriptor.neuron is relu
    assert descriptor.fused_neuron_descriptor == mpsx.NNNeuronDescriptor(NT.RELU, 0.25)


# ---------------------------------------------------------------- nodes

def node_case(name, defaults):
    """A node of `name` on the source 'x' (its defaults, or its other arguments) and its type and (a, b, c)."""
    t, default_parameters, arguments = NODES[name]
    cls = getattr(mpsx, name)
    source = mpsx.NNImageNode(Handle("x"))
    if defaults:
        return cls(source), t, tuple(np.float64(np.float32(v)) for v in default_parameters)
    return cls(source, *arguments), t, parameters(t, arguments)


NODE_CASES = [(name, defaults) for name, (_, d, _) in NODES.items() for defaults in ((True, False) if d else (False,))]


@pytest.mark.parametrize("name, defaults", NODE_CASES, ids=lambda v: str(v))
def test_node_forward_and_gradient_match_the_formula(device, rng, name, defaults):
    node, t, (a, b, c) = node_case(name, defaults)
    if t == NT.LOGARITHM and defaults:
        x = (np.abs(sample(rng)) + 0.2).astype(np.float32)  # ln x
    else:
        x = sample(rng)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
    assert type(gradient) is mpsx.CNNNeuronGradientNode
    y, dx = forward_and_gradient(device, node, gradient, x, dy)
    expected_y, expected_dx = reference(t, x, dy, a, b, c)
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NODES)
def test_node_training_graph_matches_the_formula(device, rng, name):
    # A linear node before the node under test, so that the training graph's gradient passes through it.
    t, _, arguments = NODES[name]
    source = mpsx.NNImageNode(Handle("x"))
    scale = mpsx.CNNNeuronLinearNode(source, 0.5, 0.25)
    node = getattr(mpsx, name)(scale.result_image, *arguments)
    termini = node.training_graph(mpsx.NNImageNode(Handle("dy")))
    assert [type(n) for n in termini] == [mpsx.CNNNeuronGradientNode]
    x = sample(rng)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    dx = run_gradient_graph(device, termini[0].result_image, x, dy)
    _, expected = reference(t, (0.5 * x.astype(np.float64) + 0.25), dy, *parameters(t, arguments))
    np.testing.assert_allclose(dx, 0.5 * expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NODES)
def test_node_parameters_defaults_and_factories(name):
    t, defaults, arguments = NODES[name]
    cls = getattr(mpsx, name)
    source = mpsx.NNImageNode()
    made = [cls(source, *arguments), cls.node_with_source(source, *arguments)]
    if defaults is not None:
        made += [cls(source), cls.node_with_source(source)]
    for i, node in enumerate(made):
        assert type(node) is cls and isinstance(node, mpsx.CNNNeuronNode)
        assert node.source_images == [source]
        expected = parameters(t, arguments) if i < 2 else defaults
        d = node.descriptor
        assert d.neuron_type == t
        if t == NT.PRELU:
            np.testing.assert_array_equal(d.data, np.float32(SLOPES))
            assert (node.a, node.b, node.c) == (0, 0, 0)
        else:
            assert (node.a, node.b, node.c) == tuple(np.float32(v) for v in expected)
            assert (d.a, d.b, d.c) == (node.a, node.b, node.c) and d.data is None
    # Each factory makes a new node.
    assert made[0] != made[1]
    # Its result image's producer and its gradient node's forward are of its class.
    assert type(made[0].result_image.producer) is cls
    gradient = made[0].gradient_filter_with_source(mpsx.NNImageNode())
    assert gradient.descriptor == made[0].descriptor


@pytest.mark.parametrize("t", list(NT), ids=lambda t: t.name)
def test_cnn_neuron_node_factory_makes_the_node_of_the_type(t):
    # +[MPSCNNNeuronNode nodeWithSource:descriptor:] makes "a neuron node of the appropriate type".
    data = SLOPES if t == NT.PRELU else None
    descriptor = mpsx.NNNeuronDescriptor(t, 0.5, 0.25, 2.0, data=data)
    source = mpsx.NNImageNode()
    node = mpsx.CNNNeuronNode.node_with_source(source, descriptor)
    if t == NT.NONE:
        assert type(node) is mpsx.CNNNeuronNode
        assert node.descriptor == descriptor
        return
    expected = [name for name, (node_type, _, _) in NODES.items() if node_type == t]
    assert type(node).__name__ == expected[0]
    assert node.descriptor.neuron_type == t
    taken = NODES[expected[0]][2]  # the parameters that type takes: as many as its arguments
    assert (node.a, node.b, node.c) == tuple((0.5, 0.25, 2.0)[i] if i < len(taken) and t != NT.PRELU else 0
                                             for i in range(3))
    if t == NT.PRELU:
        np.testing.assert_array_equal(node.descriptor.data, np.float32(SLOPES))
    # A CNNNeuronNode made by its constructor stays one.
    assert type(mpsx.CNNNeuronNode(source, descriptor)) is mpsx.CNNNeuronNode


@pytest.mark.parametrize("name", NODES)
def test_node_copies_keep_the_class(device, tmp_path, name):
    _, _, arguments = NODES[name]
    cls = getattr(mpsx, name)
    node = cls(mpsx.NNImageNode(Handle("x")), *arguments)
    node.label = "typed"
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
    for how, made in round_trips(node, device, tmp_path / "node.safetensors").items():
        assert type(made) is cls and made.descriptor == node.descriptor and made.label == "typed", how
    for how, made in round_trips(gradient, device, tmp_path / "gradient.safetensors").items():
        assert type(made) is mpsx.CNNNeuronGradientNode, how
        assert made.descriptor == node.descriptor, how
        forward = made.source_states[0].producer
        assert type(forward) is cls and forward.label == "typed", how


def test_saved_graph_of_per_type_nodes(device, tmp_path, rng):
    source = mpsx.NNImageNode(Handle("x"))
    relu = mpsx.CNNNeuronReLUNode.node_with_source(source, 0.1)
    tanh = mpsx.CNNNeuronTanHNode(relu.result_image)
    prelu = mpsx.CNNNeuronPReLUNode(tanh.result_image, SLOPES)
    prelu.result_image.synchronize_resource = True
    graph = mpsx.NNGraph(device, prelu.result_image, format=mpsx.DataType.FLOAT32)
    mpsx.save(graph, tmp_path / "graph.safetensors")
    loaded = mpsx.load(tmp_path / "graph.safetensors", device)
    x = sample(rng)
    expected = FORMULAS[NT.PRELU](np.tanh(FORMULAS[NT.RELU](x.astype(np.float64), 0.1, 0, 0)),
                                                  SLOPES, 0, 0)
    for g in (graph, loaded):
        y = read(device, lambda cb: g.encode(cb, [mpsx.Image.from_numpy(device, x)]))
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    (result,) = loaded.__mpsx_state__()["results"]  # the loaded graph's nodes are of the classes saved
    node = result.producer
    assert type(node) is mpsx.CNNNeuronPReLUNode
    assert type(node.source_images[0].producer) is mpsx.CNNNeuronTanHNode
    assert type(node.source_images[0].producer.source_images[0].producer) is mpsx.CNNNeuronReLUNode


def test_node_bad_input(device):
    source = mpsx.NNImageNode()
    with pytest.raises(TypeError, match="source: expected an NNImageNode, given NoneType"):
        mpsx.CNNNeuronReLUNode(None)
    with pytest.raises(TypeError, match="source: expected an NNImageNode, given ndarray"):
        mpsx.CNNNeuronSigmoidNode.node_with_source(np.zeros(3))
    with pytest.raises(TypeError, match="a must be a float, given str 'x'"):
        mpsx.CNNNeuronELUNode(source, "x")
    with pytest.raises(TypeError, match="b must be a float, given NNNeuronDescriptor"):
        mpsx.CNNNeuronLinearNode.node_with_source(source, 1.0, mpsx.NNNeuronDescriptor(NT.RELU))
    with pytest.raises(ValueError, match="MPSCNNNeuronPowerNode: c must be finite, given nan"):
        mpsx.CNNNeuronPowerNode(source, 1.0, 0.0, float("nan"))
    with pytest.raises(TypeError):  # MPS has no -initWithSource: for PReLU
        mpsx.CNNNeuronPReLUNode(source)
    with pytest.raises(TypeError):
        mpsx.CNNNeuronGeLUNode(source, 1.0)
    with pytest.raises(TypeError, match="MPSCNNNeuronPReLUNode: a_data must be an array of floats"):
        mpsx.CNNNeuronPReLUNode(source, b"\x00\x00\x80\x3f")
    with pytest.raises(ValueError, match="a PReLU neuron needs one slope per feature channel; given none"):
        mpsx.CNNNeuronPReLUNode.node_with_source(source, np.zeros(0, np.float32))
    with pytest.raises(TypeError, match="descriptor must be an mpsx.NNNeuronDescriptor, given str 'relu'"):
        mpsx.CNNNeuronNode.node_with_source(source, "relu")
    # PReLU's slopes are one per feature channel of the source: the graph refuses another count.
    prelu = mpsx.CNNNeuronPReLUNode(source, SLOPES)
    graph = mpsx.NNGraph(device, prelu.result_image)
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match="has 3 slopes; the source image has 2 feature channels"):
        graph.encode(cb, [mpsx.Image.from_numpy(device, np.zeros((1, 2, 2, 2), np.float32))])
    assert cb.command_count == 0


@pytest.mark.parametrize("name", NODES)
def test_node_made_without_init_refuses_use(name):
    cls = getattr(mpsx, name)
    bare = cls.__new__(cls)
    assert "made without __init__" in repr(bare)
    for member in ("a", "b", "c", "descriptor", "result_image", "source_images"):
        with pytest.raises(TypeError, match=f"this mpsx.{name} was made without __init__"):
            getattr(bare, member)

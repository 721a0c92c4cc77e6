"""Saving, loading, pickling and copying NNGraphs and their nodes (MPS's
NSSecureCoding and copyWithZone:device: of MPSNNGraph): every node family,
forward and gradient, with its settable properties, handles, data sources
and training styles; a loaded graph computes and trains as the original;
copies are independent; deep graphs save flat; a checkpoint of a training
graph resumes exactly in a new process; crafted graph files are refused."""

import copy
import json
import pickle

import numpy as np
import pytest

import mpsx
from mpsx.benchmarks.reference_cnn import HostSGD
from helpers import Handle, assert_same_run, round_trips, run, same

NT = mpsx.NeuronType
SHAPE = (2, 4, 6, 6)


class Scale(mpsx.NNLossCallback):
    """A loss weight callback mpsx can save: a subclass of NNLossCallback."""

    def __init__(self, weight):
        self.weight = weight

    def scalar_weight_for_source_image(self, source_image, destination_image):
        return self.weight


class Zoom(mpsx.ImageTransformProvider):
    """A transform provider with state, which saves through its attributes."""

    def __init__(self, transform):
        self.transform = transform

    def transform_for_source_image(self, image, handle):
        return mpsx.ScaleTransform(*self.transform)


def weights(rng, descriptor, optimizer=None):
    o, kh, kw, i = descriptor.weights_shape
    return mpsx.ConvolutionWeights(descriptor, (rng.standard_normal((o, kh, kw, i)) * 0.3).astype(np.float32),
                                   (rng.standard_normal(o) * 0.1).astype(np.float32), optimizer=optimizer)


def normalization(rng, kind, device):
    gamma, beta = rng.uniform(0.5, 1.5, 4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.1, momentum_scale=0.5)
    if kind == "batch":
        return mpsx.BatchNormalizationWeights(gamma, beta, np.zeros(4, np.float32), np.ones(4, np.float32), 1e-3,
                                              optimizer=sgd)
    if kind == "instance":
        return mpsx.InstanceNormalizationWeights(gamma, beta, 1e-3, optimizer=sgd)
    return mpsx.GroupNormalizationWeights(gamma, beta, 2, 1e-3, optimizer=sgd)


def with_properties(node, **properties):
    for name, value in properties.items():
        setattr(node, name, value)
    return node


# Each family's forward node over the source images x and y, with properties other than the defaults.
FORWARD = {
    "neuron": lambda x, y, d, r: mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(NT.TANH, a=1.5, b=0.5)),
    "pooling max": lambda x, y, d, r: mpsx.CNNPoolingMaxNode(x, 2),
    "pooling average": lambda x, y, d, r: with_properties(
        mpsx.CNNPoolingAverageNode(x, kernel_width=3, kernel_height=2, stride_in_pixels_x=1, stride_in_pixels_y=2),
        padding_policy=mpsx.NNPaddingMethod.SIZE_VALID_ONLY),
    "pooling l2": lambda x, y, d, r: mpsx.CNNPoolingL2NormNode(x, 2, 1),
    "dilated pooling": lambda x, y, d, r: mpsx.CNNDilatedPoolingMaxNode(x, 2, 1, 2),
    "convolution": lambda x, y, d, r: with_properties(
        mpsx.CNNConvolutionNode(x, weights(r, mpsx.CNNConvolutionDescriptor(3, 3, 4, 5),
                                           mpsx.NNOptimizerAdam(d, learning_rate=0.01))), label="conv"),
    "convolution, a python data source": lambda x, y, d, r: with_properties(
        mpsx.CNNConvolutionNode(x, HostSGD(mpsx.CNNConvolutionDescriptor(3, 3, 4, 5, 2, 2),
                                           r.standard_normal((5, 3, 3, 4)).astype(np.float32),
                                           r.standard_normal(5).astype(np.float32), 0.1, 0.9)),
        training_style="cpu"),
    "fully connected": lambda x, y, d, r: mpsx.CNNFullyConnectedNode(
        x, weights(r, mpsx.CNNConvolutionDescriptor(6, 6, 4, 3),
                   mpsx.NNOptimizerStochasticGradientDescent(d, learning_rate=0.1, momentum_scale=0.9))),
    "convolution transpose": lambda x, y, d, r: mpsx.CNNConvolutionTransposeNode(
        x, None, weights(r, mpsx.CNNConvolutionDescriptor(3, 3, 4, 3, 2, 2),
                         mpsx.NNOptimizerStochasticGradientDescent(d, learning_rate=0.1))),
    "batch normalization": lambda x, y, d, r: mpsx.CNNBatchNormalizationNode(x, normalization(r, "batch", d)),
    "instance normalization": lambda x, y, d, r: mpsx.CNNInstanceNormalizationNode(x, normalization(r, "instance", d)),
    "group normalization": lambda x, y, d, r: with_properties(
        mpsx.CNNGroupNormalizationNode(x, normalization(r, "group", d)), training_style="none"),
    "softmax": lambda x, y, d, r: mpsx.CNNSoftMaxNode(x),
    "log softmax": lambda x, y, d, r: mpsx.CNNLogSoftMaxNode(x),
    "dropout": lambda x, y, d, r: mpsx.CNNDropoutNode(x, 0.75, 3, (1, 1, 1)),
    "upsampling nearest": lambda x, y, d, r: mpsx.CNNUpsamplingNearestNode(x, 2, 1),
    "upsampling bilinear": lambda x, y, d, r: mpsx.CNNUpsamplingBilinearNode(x, 2, 2, True),
    "pad": lambda x, y, d, r: with_properties(
        mpsx.NNPadNode(x, (1, 2, 1), (2, 0, 3), mpsx.ImageEdgeMode.CONSTANT), fill_value=-1.5),
    "reshape": lambda x, y, d, r: mpsx.NNReshapeNode(mpsx.NNPadNode(x, (1, 0, 0), (0, 1, 0),
                                                                    mpsx.ImageEdgeMode.MIRROR).result_image, 14, 2, 7),
    "cross channel normalization": lambda x, y, d, r: with_properties(
        mpsx.CNNCrossChannelNormalizationNode(x, 3), alpha=0.5, beta=0.6, delta=1.5),
    "local contrast normalization": lambda x, y, d, r: with_properties(
        mpsx.CNNLocalContrastNormalizationNode(x, 3), alpha=0.5, p0=0.5, pm=0.1, ps=2.0),
    "spatial normalization": lambda x, y, d, r: with_properties(
        mpsx.CNNSpatialNormalizationNode(x, 3), alpha=0.5, beta=0.6, delta=1.5),
    "addition": lambda x, y, d, r: with_properties(mpsx.NNAdditionNode(x, y), primary_scale=2.0, bias=0.5),
    "subtraction": lambda x, y, d, r: with_properties(mpsx.NNSubtractionNode(sources=[x, y]), secondary_scale=3.0),
    "multiplication": lambda x, y, d, r: with_properties(mpsx.NNMultiplicationNode(x, y), minimum_value=-0.5),
    "division": lambda x, y, d, r: mpsx.NNDivisionNode(x, y),
    "comparison": lambda x, y, d, r: with_properties(mpsx.NNComparisonNode(x, y), comparison_type=2),
    "concatenation": lambda x, y, d, r: mpsx.NNConcatenationNode([x, y]),
    "spatial mean": lambda x, y, d, r: with_properties(mpsx.NNReductionSpatialMeanNode(x),
                                                       clip_rect_source=(1, 0, 0, 3, 2, 1)),
    "feature channels sum": lambda x, y, d, r: with_properties(mpsx.NNReductionFeatureChannelsSumNode(x),
                                                               clip_rect_source=(0, 1, 0, 2, 9, 1), weight=0.5),
    "bilinear scale": lambda x, y, d, r: mpsx.NNBilinearScaleNode(x, (5, 11)),
    "lanczos scale": lambda x, y, d, r: mpsx.NNLanczosScaleNode(x, (9, 4), Zoom((1.5, 0.5, -1.0, 0.25))),
}
NO_GRADIENT = {"division", "comparison", "feature channels sum", "bilinear scale", "lanczos scale"}


def family_graph(device, family, seed=0):
    """The family's forward node over sources "x" and "y" and, where it has one, the gradients
    training_graph makes from the gradient image "dy", as one float32 graph; its inputs by label."""
    rng = np.random.default_rng(seed)
    x, y = mpsx.NNImageNode(mpsx.NNHandle("x")), mpsx.NNImageNode(Handle("y"))  # Handle: not mpsx's
    node = FORWARD[family](x, y, device, rng)
    node.result_image.handle = mpsx.NNHandle("result")
    results = [node.result_image]
    inputs = {"x": rng.standard_normal(SHAPE).astype(np.float32),
              "y": rng.uniform(0.5, 1.5, SHAPE).astype(np.float32)}
    if family not in NO_GRADIENT:
        (y,) = encode(device, mpsx.NNGraph(device, node.result_image, format=mpsx.DataType.FLOAT32), inputs, 1)
        inputs["dy"] = rng.standard_normal(y.shape).astype(np.float32)
        termini = node.training_graph(mpsx.NNImageNode(mpsx.NNHandle("dy")))
        for t in termini:
            t.result_image.export_from_graph = True
        results += [t.result_image for t in termini]
    return mpsx.NNGraph(device, result_images=results, format=mpsx.DataType.FLOAT32), inputs


def encode(device, graph, inputs, steps=2):
    """The result and the exported images of the last of `steps` encodes, as numpy."""
    def step(cb):
        images = [mpsx.ImageBatch.from_numpy(device, inputs[h.label]) for h in graph.source_image_handles]
        result, intermediates = graph.encode_batch(cb, images, intermediate_images=True)
        for image in [result] + intermediates:
            image.synchronize(cb)
        return [result] + intermediates

    for _ in range(steps):
        outputs = run(device, step)
    return [image.to_numpy() for image in outputs]


def labels(handles):
    return [None if h is None else h.label for h in handles]


def assert_same_outputs(device, got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_same_run(device, g, e)


@pytest.mark.parametrize("family", sorted(FORWARD))
def test_every_family_round_trips(device, tmp_path, family):
    """save/load, pickle, deepcopy and copy of a graph of each family: the same description (nodes, their
    properties, handles, data sources with their optimizer state), and the same results over two
    training encodes (the data sources of each copy train on their own)."""
    graph, inputs = family_graph(device, family)
    copies = round_trips(graph, device, tmp_path / "graph.mpsx")
    for how, made in copies.items():
        assert type(made) is mpsx.NNGraph, how
        assert same(made, graph), how
        assert made.number_of_filters == graph.number_of_filters
        # Handle("y") is not mpsx's: it comes back as an NNHandle of its label.
        assert labels(made.source_image_handles) == labels(graph.source_image_handles), how
        assert labels(made.intermediate_image_handles) == labels(graph.intermediate_image_handles)
        assert made.format == graph.format
    expected = encode(device, graph, inputs)
    for how, made in copies.items():
        assert_same_outputs(device, encode(device, made, inputs), expected)


def test_nodes_and_handles_come_back(device, tmp_path):
    """Node classes, constructor values, settable properties of filters, images and states, and handles:
    an NNHandle (or a subclass) as itself, another object with a label as an NNHandle of it."""
    rng = np.random.default_rng(1)
    x = mpsx.NNImageNode(Handle("x"))
    x.stop_gradient = True
    conv = mpsx.CNNConvolutionNode(x, weights(rng, mpsx.CNNConvolutionDescriptor(3, 3, 4, 4)))
    conv.label, conv.accumulator_precision, conv.training_style = "c1", "half", "none"
    conv.padding_policy = mpsx.NNPaddingMethod.SIZE_VALID_ONLY
    conv.result_image.format = mpsx.DataType.FLOAT16
    conv.result_image.export_from_graph = True
    conv.result_image.handle = mpsx.NNHandle("conv")
    conv.convolution_gradient_state.export_from_graph = True
    conv.convolution_gradient_state.handle = mpsx.NNHandle("conv state")
    bn = mpsx.CNNBatchNormalizationNode(conv.result_image, normalization(rng, "batch", device))
    bn.flags = mpsx.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_ALWAYS
    pool = mpsx.CNNDilatedPoolingMaxNode(bn.result_image, 3, 2, 2)
    gradient = pool.gradient_filter_with_source(mpsx.NNImageNode(mpsx.NNHandle("dy")))
    gradient.label = "pool gradient"
    gradient.result_image.synchronize_resource = True
    graph = mpsx.NNGraph(device, result_images=[pool.result_image, gradient.result_image])
    graph.output_state_is_temporary = True
    mpsx.save(graph, tmp_path / "g.mpsx")
    loaded = mpsx.load(tmp_path / "g.mpsx", device)

    assert loaded.format == mpsx.DataType.FLOAT16 and loaded.output_state_is_temporary
    assert loaded.result_image_is_needed
    assert loaded.source_image_handles == [mpsx.NNHandle("x"), mpsx.NNHandle("dy")]
    assert loaded.intermediate_image_handles == [mpsx.NNHandle("conv"), None]
    assert loaded.result_state_handles == [mpsx.NNHandle("conv state")]
    pool2, gradient2 = result_producers(loaded)
    assert type(pool2) is mpsx.CNNDilatedPoolingMaxNode
    assert (pool2.kernel_width, pool2.stride_in_pixels_x, pool2.dilation_rate_x) == (3, 2, 2)
    assert type(gradient2) is mpsx.CNNDilatedPoolingMaxGradientNode and gradient2.label == "pool gradient"
    assert gradient2.result_image.synchronize_resource and gradient2.source_states == pool2.result_states
    bn2 = pool2.source_images[0].producer
    assert type(bn2) is mpsx.CNNBatchNormalizationNode
    assert bn2.flags == mpsx.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_ALWAYS
    assert same(bn2.data_source, bn.data_source) and bn2.data_source is not bn.data_source
    conv2 = bn2.source_images[0].producer
    assert (conv2.label, conv2.accumulator_precision, conv2.training_style, conv2.padding_policy) == \
        ("c1", mpsx.NNConvolutionAccumulatorPrecisionOption.HALF, mpsx.NNTrainingStyle.NONE, mpsx.NNPaddingMethod.SIZE_VALID_ONLY)
    assert conv2.result_image.format == mpsx.DataType.FLOAT16 and conv2.result_image.export_from_graph
    assert conv2.convolution_gradient_state.export_from_graph
    assert conv2.source_images[0].stop_gradient and conv2.source_images[0].handle == mpsx.NNHandle("x")
    assert same(conv2.weights, conv.weights) and conv2.weights is not conv.weights


def result_producers(graph):
    """The filters writing a graph's results, found through its description (an NNGraph, as MPS's, gives
    handles of its images, not its nodes)."""
    return [image.producer for image in graph.__mpsx_state__()["results"]]


class Named(mpsx.NNHandle):
    """A handle of the caller's: saved with its attributes."""


def test_a_handle_subclass_keeps_its_attributes(device, tmp_path):
    handle = Named("x")
    handle.index = 3
    relu = mpsx.CNNNeuronNode(mpsx.NNImageNode(handle), mpsx.NNNeuronDescriptor(NT.RELU))
    node = pickle.loads(pickle.dumps(relu.result_image))
    (source,) = node.producer.source_images
    assert type(source.handle) is Named and source.handle.index == 3 and source.handle.label == "x"


def test_a_node_saves_with_what_it_is_made_from(device, tmp_path):
    """A filter, image or state node alone saves the nodes upstream of it; a gradient node made by its
    constructor saves its arguments, one made by gradient_filters its forward node."""
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    relu = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(NT.RELU))
    sigmoid = mpsx.CNNNeuronNode(relu.result_image, mpsx.NNNeuronDescriptor(NT.SIGMOID))
    by_hand = mpsx.CNNNeuronGradientNode(mpsx.NNImageNode(mpsx.NNHandle("dy")), relu.result_image,
                                         sigmoid.result_state, mpsx.NNNeuronDescriptor(NT.SIGMOID))
    made = sigmoid.gradient_filter_with_source(mpsx.NNImageNode(mpsx.NNHandle("dz")))
    for node in (by_hand, made):
        mpsx.save(node, tmp_path / "node.mpsx")
        for loaded in (mpsx.load(tmp_path / "node.mpsx"), pickle.loads(pickle.dumps(node)), copy.deepcopy(node)):
            assert type(loaded) is mpsx.CNNNeuronGradientNode and loaded is not node
            assert loaded.descriptor.neuron_type == NT.SIGMOID
            state = loaded.source_states[0]
            assert type(state.producer) is mpsx.CNNNeuronNode and state.producer.descriptor.neuron_type == NT.SIGMOID
            assert state.producer.source_images[0].producer.descriptor.neuron_type == NT.RELU
    state = pickle.loads(pickle.dumps(sigmoid.result_state))
    assert type(state.producer) is mpsx.CNNNeuronNode
    image = pickle.loads(pickle.dumps(x))
    assert image.producer is None and image.handle == mpsx.NNHandle("x")


def test_a_deep_graph_saves_flat(device, tmp_path):
    """A chain of 400 filters and its gradient: nodes are described producers first, so the description
    nests no deeper than one node, and loading recurses no deeper either."""
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    image = x
    for i in range(400):
        image = mpsx.CNNNeuronNode(image, mpsx.NNNeuronDescriptor(NT.LINEAR, a=1.001, b=0.001)).result_image
    (terminus,) = image.producer.training_graph()
    graph = mpsx.NNGraph(device, result_images=[image, terminus.result_image], format=mpsx.DataType.FLOAT32)
    mpsx.save(graph, tmp_path / "deep.mpsx")
    loaded = mpsx.load(tmp_path / "deep.mpsx", device)
    assert loaded.number_of_filters == graph.number_of_filters
    inputs = {"x": np.random.default_rng(2).standard_normal((1, 4, 2, 2)).astype(np.float32)}
    assert_same_outputs(device, encode(device, loaded, inputs, 1), encode(device, graph, inputs, 1))


def training_model(device, optimizer):
    """conv -> relu -> fully connected -> NNForwardLossNode with a weight callback, trained from an
    NNInitialGradientNode; its graph and inputs."""
    rng = np.random.default_rng(3)
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    conv = mpsx.CNNConvolutionNode(x, weights(rng, mpsx.CNNConvolutionDescriptor(3, 3, 4, 4), optimizer(device)))
    relu = mpsx.CNNNeuronNode(conv.result_image, mpsx.NNNeuronDescriptor(NT.RELU))
    fc = mpsx.CNNFullyConnectedNode(relu.result_image,
                                    weights(rng, mpsx.CNNConvolutionDescriptor(6, 6, 4, 3), optimizer(device)))
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN,
                               reduce_across_batch=True)
    loss = mpsx.NNForwardLossNode(fc.result_image, mpsx.NNImageNode(mpsx.NNHandle("labels")), d)
    loss.property_call_back = Scale(2.0)
    termini = mpsx.NNInitialGradientNode(loss.result_image).training_graph()
    results = [t.result_image for t in termini if isinstance(t, mpsx.CNNConvolutionGradientNode)]
    labels = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 2)].reshape(2, 3, 1, 1)
    inputs = {"x": rng.standard_normal(SHAPE).astype(np.float32), "labels": labels}
    return mpsx.NNGraph(device, results[0], False, format=mpsx.DataType.FLOAT32), inputs, conv


def train(device, graph, inputs, steps):
    for _ in range(steps):
        images = [mpsx.ImageBatch.from_numpy(device, inputs[h.label]) for h in graph.source_image_handles]
        run(device, lambda cb: graph.encode_batch(cb, images))


def optimizer_kinds():
    return {"sgd": lambda d: mpsx.NNOptimizerStochasticGradientDescent(d, learning_rate=0.1, momentum_scale=0.9),
            "adam": lambda d: mpsx.NNOptimizerAdam(d, learning_rate=0.01)}


@pytest.mark.parametrize("optimizer", sorted(optimizer_kinds()))
def test_a_training_graph_continues_where_it_was_saved(repeatable, tmp_path, optimizer):
    """Trained 2 steps, saved with its data sources in one checkpoint, loaded and trained 2 more: the
    weights of 4 steps without the pause (optimizer state included), and the loaded data sources are
    the graph's own; the loss node's callback came back."""
    device = repeatable
    graph, inputs, conv = training_model(device, optimizer_kinds()[optimizer])
    train(device, graph, inputs, 2)
    mpsx.save({"graph": graph, "conv": conv.weights}, tmp_path / "checkpoint.mpsx")
    checkpoint = mpsx.load(tmp_path / "checkpoint.mpsx", device)
    train(device, graph, inputs, 2)
    train(device, checkpoint["graph"], inputs, 2)
    np.testing.assert_array_equal(checkpoint["conv"].weights(), conv.weights.weights())
    assert not np.array_equal(checkpoint["conv"].weights(), mpsx.load(tmp_path / "checkpoint.mpsx")["conv"].weights())
    (loss,) = result_producers(checkpoint["graph"])
    while not isinstance(loss, mpsx.NNForwardLossNode):
        loss = next(n for n in [s.producer for s in loss.source_images + loss.source_states] if n is not None)
    assert type(loss.property_call_back) is Scale and loss.property_call_back.weight == 2.0


def test_a_copy_trains_on_its_own(device):
    """copy(device): the graph, its nodes and its data sources copied; training the copy leaves the
    original's weights as they were, and the copy trains as the original would."""
    graph, inputs, conv = training_model(device, optimizer_kinds()["sgd"])
    before = conv.weights.weights()
    copied = graph.copy()
    assert copied.device.name == device.name
    train(device, copied, inputs, 2)
    np.testing.assert_array_equal(conv.weights.weights(), before)
    train(device, graph, inputs, 2)
    (gradient,) = result_producers(copied)
    copied_conv = gradient.source_states[0].producer
    assert_same_run(device, copied_conv.weights.weights(), conv.weights.weights())


def test_a_graph_copies_between_cpu_and_gpu(device):
    """copyWithZone:device: from cpu to the GPU and back: each copy computes what the original does."""
    if device.backend == "cpu":
        pytest.skip("needs a GPU device")
    cpu = mpsx.Device("cpu")
    graph, inputs = family_graph(cpu, "convolution")
    on_gpu = graph.copy(device)
    assert on_gpu.device.name == device.name
    back = on_gpu.copy(cpu)
    expected = encode(cpu, graph, inputs)
    for made in (on_gpu, back):
        for g, e in zip(encode(made.device, made, inputs), expected):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- refused

def write(path, description, tensors):
    import safetensors.numpy
    safetensors.numpy.save_file(tensors, str(path), metadata={"mpsx": json.dumps(description), "mpsx.format": "1"})


def objects(value):
    """Every object description in a description."""
    if isinstance(value, dict):
        if set(value) >= {"class", "state"}:
            yield value
        for v in value.values():
            yield from objects(v)
    elif isinstance(value, list):
        for v in value:
            yield from objects(v)


def crafted_graph_files():
    """{what: change}: each change spoils one part of the description of a valid checkpoint of a graph
    (relu and its gradient) and relu's result state. The objects by index: 0 the graph, 1 the relu node,
    2 its source image."""
    def node(cls):
        return lambda d: next(o for o in objects(d) if o["class"] == cls)["state"]["$dict"]

    def set_in(find, key, value):
        def change(d):
            find(d)[key] = value
        return change

    relu, gradient = node("mpsx.CNNNeuronNode"), node("mpsx.CNNNeuronGradientNode")
    graph = node("mpsx.NNGraph")
    return {
        "gradient of a source image": set_in(gradient, "gradient_of", {"$ref": 2}),
        "gradient index out of range": set_in(gradient, "index", 5),
        "gradient index not an int": set_in(gradient, "index", "0"),
        "gradient images not nodes": set_in(gradient, "gradient_images", [1, 2]),
        "arguments not a list": set_in(relu, "arguments", 3),
        "too few arguments": set_in(relu, "arguments", []),
        "unknown keyword": set_in(relu, "keywords", {"$dict": {"evil": 1}}),
        "unknown property": set_in(relu, "properties", {"$dict": {"__class__": 1}}),
        "property of the wrong type": set_in(relu, "properties", {"$dict": {"label": 5}}),
        "image property unknown": set_in(relu, "result_image", {"$dict": {"producer": None}}),
        "result states of the wrong count": set_in(relu, "result_states", []),
        "a node made from itself": set_in(relu, "arguments", [{"$ref": 1}]),
        "handle label not a str": set_in(node("mpsx.NNHandle"), "label", 3),
        "results not image nodes": set_in(graph, "results", [1]),
        "a filter as a result image": set_in(graph, "results", [{"$ref": 1}, {"$ref": 1}]),
        "a source image as a result": set_in(graph, "results", [{"$ref": 2}, {"$ref": 2}]),
        "flags of the wrong count": set_in(graph, "results_are_needed", [True]),
        "format not a format": set_in(graph, "format", 7),
        "state index out of range": set_in(node("mpsx.NNGradientStateNode"), "index", 7),
        "state of a source image": set_in(node("mpsx.NNGradientStateNode"), "producer", {"$ref": 2}),
    }


@pytest.mark.parametrize("what", sorted(crafted_graph_files()))
def test_a_crafted_graph_file_is_refused_clearly(device, tmp_path, what):
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    relu = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(NT.RELU))
    gradient = relu.gradient_filter_with_source(mpsx.NNImageNode(mpsx.NNHandle("dy")))
    graph = mpsx.NNGraph(device, result_images=[relu.result_image, gradient.result_image])
    text, tensors = mpsx.persistence.reduce({"graph": graph, "state": relu.result_state})[1]
    description = json.loads(text)
    crafted_graph_files()[what](description)
    write(tmp_path / "crafted.mpsx", description, tensors)
    with pytest.raises(mpsx.MPSXError, match=r"^mpsx.load: (the state of|expected a reference)") as raised:
        mpsx.load(tmp_path / "crafted.mpsx", device)
    assert len(str(raised.value)) < 500


def test_what_cannot_be_saved(device, tmp_path):
    """A loss node's labels alone, a callback of a class mpsx cannot restore and a data source of a
    plain class are refused when saving, naming what."""
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM)
    loss = mpsx.CNNLossNode(mpsx.NNImageNode(), d)
    with pytest.raises(mpsx.UnsavableError, match="labels node saves with its loss node"):
        mpsx.save(loss.input_labels, tmp_path / "labels.mpsx")

    class Callback:
        def scalar_weight_for_source_image(self, source_image, destination_image):
            return 1.0

    forward = mpsx.NNForwardLossNode(mpsx.NNImageNode(), mpsx.NNImageNode(), d)
    forward.property_call_back = Callback()
    with pytest.raises(mpsx.UnsavableError, match="Callback, which mpsx cannot save"):
        mpsx.save(forward, tmp_path / "callback.mpsx")
    # The labels come back with their loss node.
    loss.input_labels.handle = mpsx.NNHandle("labels")
    assert pickle.loads(pickle.dumps(loss)).input_labels.handle == mpsx.NNHandle("labels")

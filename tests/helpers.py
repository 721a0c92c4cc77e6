"""Helpers the tests share (imported as `helpers`)."""

import copy
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest

import mpsx


def run(device, encode):
    """Encodes `encode(command_buffer)` on a new command buffer, commits and
    waits; returns what encode returned."""
    cb = device.command_queue.command_buffer()
    result = encode(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return result


def read(device, encode):
    """Like run, but synchronizes every Image, ImageBatch, Buffer or state
    encode returns (a single one or a tuple) and returns them as numpy."""
    cb = device.command_queue.command_buffer()
    result = encode(cb)
    items = result if isinstance(result, tuple) else (result,)
    for item in items:
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    out = tuple(np.asarray(item) for item in items)
    return out if isinstance(result, tuple) else out[0]


def tolerance(data_type):
    """(rtol, atol) fitting the storage precision of the result."""
    if data_type in (np.float16, mpsx.DataType.FLOAT16):
        return 2e-2, 2e-2
    return 1e-4, 1e-5


def finite_difference_gradient(f, x, h=1e-3, indices=None):
    """The central-difference gradient (f(x + h) - f(x - h)) / 2h of the scalar function f at x, element by
    element (at the flat `indices` only where given; the rest stays zero), as float64 of x's shape. f gets
    copies of x of x's dtype: the tests' independent reference for a gradient, numpy only."""
    x = np.asarray(x)
    gradient = np.zeros(x.shape)
    for i in range(x.size) if indices is None else indices:
        plus, minus = x.copy(), x.copy()
        plus.flat[i] += h
        minus.flat[i] -= h
        gradient.flat[i] = (f(plus) - f(minus)) / (2 * h)
    return gradient


def encode_training_step(cb, convolution, gradient, image, dy=None):
    """A convolution's (or convolution transpose's) forward over image, its gradient kernel's for dy (for y itself
    where not given) and its weights update, encoded on cb; returns y and the gradient state."""
    y, state = convolution.encode(cb, image, destination_state=True)
    gradient.encode(cb, y if dy is None else dy, image, state)
    convolution.encode_weights_and_bias_update(cb, state)
    return y, state


def committed_training_step(device, convolution, gradient, image, dy=None):
    """encode_training_step on a new command buffer, committed and waited for; returns the command buffer, y and
    the gradient state."""
    cb = device.command_queue.command_buffer()
    y, state = encode_training_step(cb, convolution, gradient, image, dy)
    cb.commit()
    cb.wait_until_completed()
    return cb, y, state


def forward_finite_differences(device, forward, x, dy, h=1e-2):
    """The central-difference gradient of sum(y * dy), y = forward's encode of x as a float32 image on the device:
    the reference for a gradient kernel that does not trust the forward pass's formula."""
    def loss(values):
        y = read(device, lambda cb: forward.encode(cb, mpsx.Image.from_numpy(device, values.astype(np.float32))))
        return float(np.sum(y.astype(np.float64) * dy))

    return finite_difference_gradient(loss, x, h)


def kernel_forward_and_gradient(device, x, dy, forward, gradient, destination=None):
    """y and dx (numpy) of a forward kernel over the image x (into destination where given) and its gradient
    kernel for the image dy, on one command buffer."""
    source = mpsx.Image.from_numpy(device, x)

    def encode(cb):
        y, state = forward.encode(cb, source, destination, destination_state=True)
        return y, gradient.encode(cb, mpsx.Image.from_numpy(device, dy), source, state)

    return read(device, encode)


def batch_forward_and_gradient(device, x, dy, forward, gradient):
    """y and dx (numpy) of encode_batch of a forward kernel over the batch x and of its gradient kernel for the
    batch dy, on one command buffer."""
    source = mpsx.ImageBatch.from_numpy(device, x)

    def encode(cb):
        y, states = forward.encode_batch(cb, source, destination_states=True)
        return y, gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), source, states)

    return read(device, encode)


def batch_and_items_forward_and_gradient(device, x, dy, forward, gradient):
    """forward's encode_batch over x as one ImageBatch (its states one state, shared) and over x as images of
    separate allocations, and gradient's over the batch for the batch dy, on one command buffer: returns both
    results and dx (numpy)."""
    batch = mpsx.ImageBatch.from_numpy(device, x)
    items = [mpsx.Image.from_numpy(device, image) for image in x]

    def encode(cb):
        y1, states = forward.encode_batch(cb, batch, destination_states=True)
        y2 = forward.encode_batch(cb, items)
        assert isinstance(y1, mpsx.ImageBatch) and len(y1) == len(x)
        assert len(states) == len(x) and all(s is states[0] for s in states)
        dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), batch, states)
        return y1, y2, dx

    return read(device, encode)


def kernel_batch_forward_and_gradient(device, xs, dys, forward, gradient):
    """ys and dxs (numpy) of encode_batch of a forward kernel over the images xs (separate allocations) and of its
    gradient kernel for the images dys, on one command buffer."""
    items = [mpsx.Image.from_numpy(device, x) for x in xs]

    def encode(cb):
        ys, states = forward.encode_batch(cb, items, destination_states=True)
        return ys, gradient.encode_batch(cb, [mpsx.Image.from_numpy(device, dy) for dy in dys], items, states)

    return read(device, encode)


def encode_in_place(device, forward, x):
    """forward encoded from the image of x into that same image; returns it as numpy."""
    image = mpsx.Image.from_numpy(device, x)
    return read(device, lambda cb: forward.encode(cb, image, image))


def assert_offset_z_and_batches(device, x, dy, make_kernels, reference, reference_gradient):
    """A forward and gradient kernel pair from make_kernels(): with offset.z 1, over the batch x, for the len(dy)
    = 3 images after the first, against reference(x) and reference_gradient(x, dy), dx[0] left zero; then a new
    pair's encode_batch over separate allocations of all of x, for dy[[0, 1, 2, 0]]."""
    forward, gradient = make_kernels()
    forward.offset = (0, 0, 1)
    y, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient)
    assert y.shape == dy.shape
    np.testing.assert_allclose(y, reference(x[1:]), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(dx[0], 0)
    np.testing.assert_allclose(dx[1:], reference_gradient(x[1:], dy), rtol=1e-4, atol=1e-5)
    ys, dxs = kernel_batch_forward_and_gradient(device, x, dy[[0, 1, 2, 0]], *make_kernels())
    np.testing.assert_allclose(ys, reference(x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dxs, reference_gradient(x, dy[[0, 1, 2, 0]]), rtol=1e-4, atol=1e-5)


def assert_kernel_classes(device, forward_cls, gradient_cls, attribute, *sizes):
    """forward_cls(device, *sizes) is a CNNUnaryKernel and gradient_cls(device, *sizes) a CNNGradientKernel; made
    without __init__, the forward kernel refuses to encode and both refuse to read `attribute`, naming the class.
    Returns the image it encoded."""
    assert isinstance(forward_cls(device, *sizes), mpsx.CNNUnaryKernel)
    assert isinstance(gradient_cls(device, *sizes), mpsx.CNNGradientKernel)
    image = mpsx.Image.from_numpy(device, np.zeros((1, 2, 1, 1), np.float32))
    with pytest.raises(TypeError, match=f"this mpsx.{forward_cls.__name__} was made without __init__"):
        forward_cls.__new__(forward_cls).encode(device.command_queue.command_buffer(), image)
    for cls in (forward_cls, gradient_cls):
        with pytest.raises(TypeError, match=f"this mpsx.{cls.__name__} was made without __init__"):
            getattr(cls.__new__(cls), attribute)
    return image


def assert_parameter_sets_used(device, x, dy, forward, gradient, k, reference, reference_gradient):
    """A normalization kernel pair of window k with alpha, beta and delta set between encodes (cuda: in and out of
    the range cuDNN takes, delta >= 1e-5 and beta >= 0.01), against reference(x, k, alpha, beta, delta) and
    reference_gradient(x, dy, k, alpha, beta, delta)."""
    for alpha, beta, delta in [(1.0, 0.75, 1.0), (2.0, 0.5, 2.0), (0.5, 0.005, 1.0), (1e-3, 0.75, 0.0),
                               (1.0, 0.75, 1.0)]:
        for kernel in (forward, gradient):
            kernel.alpha, kernel.beta, kernel.delta = alpha, beta, delta
        y, dx = kernel_forward_and_gradient(device, x, dy, forward, gradient)
        np.testing.assert_allclose(y, reference(x, k, alpha, beta, delta), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(dx, reference_gradient(x, dy, k, alpha, beta, delta), rtol=1e-4, atol=1e-4)


def autograd(function, x, dy, *args):
    """function(x, *args) and its gradient for the output gradient dy by torch autograd, in float64, as numpy."""
    import torch
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    y = function(xt, *args)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    return y.detach().numpy(), xt.grad.numpy()


def assert_same_run(device, got, expected, err_msg=""):
    """Two runs of the same computation: equal on cpu; on a GPU within float32 rounding, since cuDNN's
    fastest algorithms (a weight gradient summed with atomics) need not give the same bits twice."""
    if device.backend == "cpu":
        np.testing.assert_array_equal(got, expected, err_msg=err_msg)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=err_msg)


def same(a, b):
    """Whether two persisted objects say the same: their descriptions, arrays compared by value."""
    (text_a, tensors_a), (text_b, tensors_b) = mpsx.persistence.reduce(a)[1], mpsx.persistence.reduce(b)[1]
    return text_a == text_b and tensors_a.keys() == tensors_b.keys() and \
        all(np.array_equal(tensors_a[k], tensors_b[k]) for k in tensors_a)


def round_trips(obj, device, path):
    """obj through mpsx.save and mpsx.load, pickle, copy.deepcopy and mpsx.persistence.copy, by name."""
    mpsx.save(obj, path)
    return {"load": mpsx.load(path, device), "pickle": pickle.loads(pickle.dumps(obj)),
            "deepcopy": copy.deepcopy(obj), "copy": mpsx.persistence.copy(obj, device)}


def gpu_only(device):
    if device.backend == "cpu":
        pytest.skip("needs a GPU device")


def run_isolated(device, code, timeout=60, environment=None):
    """Runs `code` in a new Python process, with `mpsx` imported and `device`
    the device of that name, for calls that could hang or kill the process
    or settings read from the environment (`environment`: variables to set,
    or to remove where None); returns what it printed. Fails on a timeout or
    a non-zero exit; on a timeout the failure shows the traceback of every
    thread of it and of its forked children (faulthandler on SIGUSR1: a
    signal handler, which forks keep), and they are killed."""
    program = ("import faulthandler, signal\nfaulthandler.register(signal.SIGUSR1, all_threads=True)\n"
               f"import mpsx\ndevice = mpsx.Device({device.name!r})\n" + textwrap.dedent(code))
    env = dict(os.environ)
    for name, value in (environment or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep))
    # Outside the checkout, whose mpsx/ folder would shadow the built package.
    with tempfile.TemporaryDirectory() as directory:
        process = subprocess.Popen([sys.executable, "-c", program], cwd=directory, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGUSR1)
            time.sleep(1)
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            raise AssertionError(f"no exit within {timeout} s; it printed {out!r}, and on stderr:\n{err}") from None
    assert process.returncode == 0, err
    return out


def assert_uninitialized_raise(cls, names, only_those_it_has=False):
    """A cls made without __init__: its repr works and reading each of `names` (only those cls has, where
    only_those_it_has) raises TypeError. Returns the object."""
    obj = cls.__new__(cls)
    repr(obj)
    for name in names:
        if not only_those_it_has or hasattr(cls, name):
            with pytest.raises(TypeError):
                getattr(obj, name)
    return obj


class GammaAndBeta:
    """The getters of a Python normalization data source that keeps gamma and beta as numpy arrays in self.g and
    self.b, with as many feature channels as gamma has; put before the mpsx data source class it serves."""

    def number_of_feature_channels(self):
        return len(self.g)

    def gamma(self):
        return self.g

    def beta(self):
        return self.b


class ArrayConvolutionSource(mpsx.CNNConvolutionDataSource):
    """A Python convolution data source of a descriptor and numpy weights and biases (self._weights and
    self._biases, which subclasses' updates replace)."""

    def __init__(self, descriptor, weights, biases):
        self._descriptor, self._weights, self._biases = descriptor, weights, biases

    def descriptor(self):
        return self._descriptor

    def weights(self):
        return self._weights

    def bias_terms(self):
        return self._biases


class RecordedLoads:
    """load, purge and label of the tests' Python data sources as users write them: each load and purge
    recorded in self.calls; keyword arguments become attributes."""

    def __init__(self, **extra):
        self.calls = []
        for k, v in extra.items():
            setattr(self, k, v)

    def load(self):
        self.calls.append("load")
        return True

    def purge(self):
        self.calls.append("purge")

    def label(self):
        return "array source"


class StateConvolutionSource:
    """The WWDC19 training sample's form of a convolution data source (a plain class, not the mpsx base): its
    weights and biases live in self.state, a CNNConvolutionWeightsAndBiasesState that its own
    update_with_command_buffer updates; self._descriptor and self.name are set by the subclass."""

    data_type = mpsx.DataType.FLOAT32

    def descriptor(self):
        return self._descriptor

    def weights(self):
        return self.state.weights

    def bias_terms(self):
        return self.state.biases

    def load(self):
        return True

    def purge(self):
        pass

    def label(self):
        return self.name


class Handle:
    """An MPSHandle of the caller's own class (any object with a label, as MPS takes), not mpsx.NNHandle: the
    graph tests name nodes with it, and the persistence tests check that it saves as an NNHandle."""

    def __init__(self, label):
        self.label = label

    def __repr__(self):
        return f"Handle({self.label!r})"


def float32_graph(*args, **kwargs):
    """mpsx.NNGraph with float32 images (format FLOAT32, where MPS's default is FLOAT16): the graph tests
    compare against float64 references."""
    kwargs.setdefault("format", mpsx.DataType.FLOAT32)
    return mpsx.NNGraph(*args, **kwargs)


def one_hot_labels(rng, n, classes):
    """One-hot labels, shaped (n, classes, 1, 1), of classes drawn from rng."""
    labels = np.zeros((n, classes, 1, 1), np.float32)
    labels[np.arange(n), rng.integers(0, classes, n)] = 1
    return labels


def run_results(device, results, inputs):
    """Encodes a float32 graph of the result image nodes `results` over the numpy images `inputs` (by handle
    label); returns every result as numpy."""
    for r in results:
        r.synchronize_resource = True
    graph = float32_graph(device, result_images=results)
    sources = [mpsx.Image.from_numpy(device, inputs[h.label]) for h in graph.source_image_handles]
    first, rest = run(device, lambda cb: graph.encode(cb, sources, intermediate_images=True))
    return [first.to_numpy()] + [r.to_numpy() for r in rest]


def run_graph(device, graph, inputs):
    """Encodes `graph` over the numpy batches `inputs` (by handle label); returns the result and the
    intermediate images as numpy."""
    images = [mpsx.ImageBatch.from_numpy(device, inputs[h.label]) for h in graph.source_image_handles]
    result, intermediates = run(device, lambda cb: graph.encode_batch(cb, images, intermediate_images=True))
    return result.to_numpy(), [i.to_numpy() for i in intermediates]


def run_gradient_graph(device, gradient_image, x, dy):
    """dx (numpy) of a float32 graph of the gradient image node gradient_image over the batches x and dy, its
    sources 'x' and 'dy' in that order."""
    gradient_image.synchronize_resource = True
    graph = float32_graph(device, gradient_image)
    assert [h.label for h in graph.source_image_handles] == ["x", "dy"]
    images = [mpsx.ImageBatch.from_numpy(device, x), mpsx.ImageBatch.from_numpy(device, dy)]
    return run(device, lambda cb: graph.encode_batch(cb, images)).to_numpy()


def forward_and_gradient(device, node, gradient, x, dy):
    """y and dx of a forward node and a gradient node reading the gradient image 'dy'."""
    for image in (node.result_image, gradient.result_image):
        image.synchronize_resource = True
    graph = float32_graph(device, result_images=[node.result_image, gradient.result_image])
    assert sorted(h.label for h in graph.source_image_handles) == ["dy", "x"]
    y, (dx,) = run_graph(device, graph, {"x": x, "dy": dy})
    return y, dx


def assert_nodes_match_torch(device, node, gradient, x, dy, function, *args, rtol=1e-4, atol=1e-5):
    """y and dx of a forward node and its gradient node (forward_and_gradient) against function(x, *args) and its
    input gradient by torch autograd (float64)."""
    y, dx = forward_and_gradient(device, node, gradient, x, dy)
    expected_y, expected_dx = autograd(function, x, dy, *args)
    assert y.shape == x.shape and dx.shape == x.shape
    np.testing.assert_allclose(y, expected_y, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, expected_dx, rtol=rtol, atol=atol)


def normalization_node(cls, source, k, parameters):
    """cls(source, k) with `parameters` (by name) set on it."""
    node = cls(source, k)
    for name, value in parameters.items():
        setattr(node, name, value)
    return node


def assert_normalization_nodes_match_torch(device, rng, shape, cls, gradient_cls, k, parameters, function, *args,
                                           atol=1e-5):
    """x and dy of `shape` drawn from rng through normalization_node(cls, x, k, parameters) and the gradient node
    it makes, a gradient_cls, against function(x, *args) (assert_nodes_match_torch). Returns the gradient node."""
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    node = normalization_node(cls, mpsx.NNImageNode(Handle("x")), k, parameters)
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
    assert isinstance(gradient, gradient_cls)
    assert_nodes_match_torch(device, node, gradient, x, dy, function, *args, atol=atol)
    return gradient


def gradient_node_copied_forward(device, cls, name, value, copied, message, settable_on_gradient=False):
    """A node cls(x, 3) and its gradient node, then the node's `name` set to value: the gradient node keeps
    the `copied` value it took when made, and a graph of it is refused with `message`. Where the gradient node's
    parameters are settable: set on both, it compiles; then the node's kernel_width and kernel_height set to 5 are
    refused likewise. Returns both nodes."""
    node = cls(mpsx.NNImageNode(Handle("x")), 3)
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
    setattr(node, name, value)
    assert getattr(gradient, name) == copied  # copied when made
    with pytest.raises(ValueError, match=message):
        float32_graph(device, gradient.result_image)
    if settable_on_gradient:
        setattr(gradient, name, value)
        float32_graph(device, gradient.result_image)
        node.kernel_width = node.kernel_height = 5
        with pytest.raises(ValueError, match=r"kernel_width is 3 but its forward node's is 5"):
            float32_graph(device, gradient.result_image)
    return node, gradient


def node_refusals(cls, kernel_name, not_an_integer):
    """The normalization node cls's refusals of a kernel size of 0 (naming kernel_name) or not_an_integer, and of
    a source that is not an image node. Returns an image node and cls(it, 3)."""
    source = mpsx.NNImageNode()
    with pytest.raises(ValueError, match=f"{kernel_name} must be positive, given 0"):
        cls(source, 0)
    with pytest.raises(TypeError):
        cls(source, not_an_integer)
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        cls(None, 3)
    return source, cls(source, 3)


def assert_finite_parameters(node):
    """A node's alpha, beta and delta refuse values that are not finite (alpha negative) and keep their defaults
    (1, 5, 1)."""
    for name, value in (("alpha", -1.0), ("alpha", float("inf")), ("alpha", float("nan")), ("beta", float("nan")),
                        ("delta", float("inf"))):
        with pytest.raises(ValueError, match=f"{name} must be finite"):
            setattr(node, name, value)
    assert (node.alpha, node.beta, node.delta) == (1.0, 5.0, 1.0)


def gradient_node_refusals(gradient_cls, node, source, *sizes):
    """node, not trainable, has no training style; gradient_cls(gradient, source, state, *sizes) refuses the
    gradient state of another family; and node's gradient node makes no gradient node of its own."""
    with pytest.raises(AttributeError):
        node.training_style = "gpu"
    pool = mpsx.CNNPoolingMaxNode(source, 2)
    with pytest.raises(TypeError, match=f"expected the result state of an MPS{type(node).__name__}, given "
                                        "the result state of an MPSCNNPoolingMaxNode"):
        gradient_cls(mpsx.NNImageNode(), source, pool.result_state, *sizes)
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode())
    with pytest.raises(TypeError, match="no gradients of gradients"):
        gradient.gradient_filter_with_source(mpsx.NNImageNode())


def train_normalization_node(device, cls, gradient_cls, k, parameters, torch_layer, **sizes):
    """train_between_convolution_and_fully_connected with cls(image, k) as the node, `parameters` set on it;
    asserts that training_graph made a gradient_cls for it, and returns that gradient node."""
    made = train_between_convolution_and_fully_connected(
        device, lambda image: normalization_node(cls, image, k, parameters), torch_layer, **sizes)[cls.__name__]
    assert isinstance(made, gradient_cls)
    return made


def train_between_convolution_and_fully_connected(device, make_node, torch_layer, c_in=2, c=4, size=5, classes=3,
                                                   n=4, lr=0.1, steps=3, seed=5, node_size=None):
    """conv 3x3 (c_in -> c, same) -> make_node(image node) -> fully connected (over the node's result,
    node_size x node_size, the source's size unless given) -> softmax cross entropy,
    trained `steps` SGD steps by the graph training_graph makes, against the same model in float64
    PyTorch with torch_layer(tensor) in place of the node: asserts that the weights agree and moved.
    Returns {forward node class name: the gradient node training_graph made for it}."""
    import torch
    import torch.nn.functional as F
    rng = np.random.default_rng(seed)
    node_size = node_size or size
    p = dict(conv_w=(rng.standard_normal((c, 3, 3, c_in)) * 0.5).astype(np.float32),
             conv_b=(rng.standard_normal(c) * 0.1).astype(np.float32),
             fc_w=(rng.standard_normal((classes, node_size, node_size, c)) * 0.1).astype(np.float32),
             fc_b=(rng.standard_normal(classes) * 0.1).astype(np.float32))
    x = rng.standard_normal((n, c_in, size, size)).astype(np.float32)
    labels = np.zeros((n, classes, 1, 1), np.float32)
    labels[np.arange(n), rng.integers(0, classes, n)] = 1
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=lr)
    conv_w = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, c_in, c), p["conv_w"], p["conv_b"],
                                     optimizer=sgd)
    fc_w = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(node_size, node_size, c, classes), p["fc_w"],
                                   p["fc_b"], optimizer=sgd)
    conv = mpsx.CNNConvolutionNode(mpsx.NNImageNode(Handle("images")), conv_w)
    fc = mpsx.CNNFullyConnectedNode(make_node(conv.result_image).result_image, fc_w)
    descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    descriptor.reduce_across_batch = True
    loss = mpsx.CNNLossNode(fc.result_image, descriptor)
    loss.input_labels.handle = Handle("labels")
    seen = []
    termini = loss.training_graph(node_handler=lambda g, f, *_: seen.append((g, f)))
    graph = float32_graph(device, termini[0].result_image, False)
    images = mpsx.ImageBatch.from_numpy(device, x)
    for _ in range(steps):
        cb = device.command_queue.command_buffer()
        graph.encode_batch(cb, [images], [mpsx.CNNLossLabels(device, labels)])
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error

    w = {name: torch.tensor(value, dtype=torch.float64, requires_grad=True) for name, value in p.items()}
    optimizer = torch.optim.SGD(list(w.values()), lr=lr)
    target = torch.tensor(labels.reshape(n, -1).argmax(1))
    for _ in range(steps):
        optimizer.zero_grad()
        h = F.conv2d(torch.tensor(x, dtype=torch.float64), w["conv_w"].permute(0, 3, 1, 2), w["conv_b"], padding=1)
        logits = torch_layer(h).permute(0, 2, 3, 1).reshape(n, -1) @ w["fc_w"].reshape(classes, -1).T + w["fc_b"]
        F.cross_entropy(logits, target).backward()
        optimizer.step()
    np.testing.assert_allclose(conv_w.weights(), w["conv_w"].detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(conv_w.bias_terms(), w["conv_b"].detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fc_w.weights(), w["fc_w"].detach().numpy(), rtol=1e-4, atol=1e-5)
    assert not np.allclose(conv_w.weights(), p["conv_w"], atol=1e-4)  # it trained
    return {type(f).__name__: g for g, f in seen}

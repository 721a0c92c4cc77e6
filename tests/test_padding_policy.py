"""Padding policy objects (MPSNNPadding, MPSNNDefaultPadding) on kernels and filter nodes: the order MPS runs a
policy in (the bits' sizing, the family's own, the source states, then the object's custom method), TensorFlow's
average pooling against a numpy reference, custom methods that set kernel properties, the inverse on gradient nodes,
fusion, persistence and bad input."""

import pickle

import numpy as np
import pytest
import torch

import mpsx
from helpers import Handle, assert_uninitialized_raise, float32_graph, read, run

M = mpsx.NNPaddingMethod


def tensorflow_average_pool(x, k, s, same):
    """TensorFlow's avg_pool (NCHW): SAME pads the remainder at the bottom right and divides by the pixels inside
    the image; VALID keeps the windows inside."""
    n, c, h, w = x.shape
    if same:
        oh, ow = -(-h // s), -(-w // s)
        ph, pw = max((oh - 1) * s + k - h, 0), max((ow - 1) * s + k - w, 0)
        top, left = ph // 2, pw // 2
    else:
        oh, ow, top, left = (h - k) // s + 1, (w - k) // s + 1, 0, 0
    out = np.zeros((n, c, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * s - top, j * s - left
            window = x[:, :, max(y0, 0):min(y0 + k, h), max(x0, 0):min(x0 + k, w)]
            out[:, :, i, j] = window.mean(axis=(2, 3))
    return out


def synchronized(device, encode):
    """The image `encode(command_buffer)` returns, synchronized and completed."""
    cb = device.command_queue.command_buffer()
    image = encode(cb)
    image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return image


class Recording(mpsx.NNPadding):
    """A custom policy that records what it is given and hands back what it is told to."""

    def __init__(self, method=M.CUSTOM | M.SIZE_VALID_ONLY, result=None, offset=None, edge_mode=None):
        self.method, self.result, self.offset, self.edge_mode = method, result, offset, edge_mode
        self.calls = []

    def padding_method(self):
        return self.method

    def destination_image_descriptor_for_source_images(self, source_images, source_states, for_kernel,
                                                       suggested_descriptor):
        self.calls.append(dict(sources=list(source_images), states=list(source_states), kernel=for_kernel,
                               suggested=suggested_descriptor, offset=for_kernel.offset))
        if self.offset is not None:
            for_kernel.offset = self.offset
        if self.edge_mode is not None:
            for_kernel.edge_mode = self.edge_mode
        return suggested_descriptor if self.result is None else self.result


def test_default_padding_objects():
    p = mpsx.NNDefaultPadding.padding_with_method(M.SIZE_VALID_ONLY | M.ALIGN_TOP_LEFT)
    assert p.padding_method() == M.SIZE_VALID_ONLY | M.ALIGN_TOP_LEFT
    assert p == mpsx.NNDefaultPadding(M.SIZE_VALID_ONLY | M.ALIGN_TOP_LEFT) != mpsx.NNDefaultPadding(M.SIZE_SAME)
    assert "SizeValidOnly" in p.label() and "AlignTopLeft" in p.label()
    assert p.inverse() == p
    tf = mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling()
    # The header's prose: SizeSame | AlignCentered | AddRemainderToBottomRight, and Custom for the Clamp step.
    assert tf.padding_method() == M.CUSTOM | M.SIZE_SAME | M.ADD_REMAINDER_TO_BOTTOM_RIGHT
    valid = mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling_valid_only()
    assert valid.padding_method() == M.CUSTOM | M.SIZE_VALID_ONLY | M.ADD_REMAINDER_TO_BOTTOM_RIGHT
    assert len({p, tf, valid, mpsx.NNDefaultPadding(M.SIZE_VALID_ONLY | M.ALIGN_TOP_LEFT)}) == 3
    for policy in (p, tf, valid):
        assert pickle.loads(pickle.dumps(policy)) == policy


def test_bits_and_their_default_padding_object_pad_alike(device, rng):
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    results = []
    for padding in (M.SIZE_VALID_ONLY, mpsx.NNDefaultPadding(M.SIZE_VALID_ONLY)):
        k = mpsx.CNNPoolingMax(device, 3, 3, 2, 2)
        k.padding = padding
        assert k.padding == padding and type(k.padding) is type(padding)
        results.append(read(device, lambda cb: k.encode(cb, mpsx.Image.from_numpy(device, x))))
    expected = torch.nn.functional.max_pool2d(torch.tensor(x), 3, 2).numpy()
    np.testing.assert_array_equal(results[0], expected)
    np.testing.assert_array_equal(results[1], expected)


@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("size", [(5, 5), (6, 7)])
def test_tensorflow_average_pooling(device, rng, same, size):
    x = rng.standard_normal((2, 3) + size).astype(np.float32)
    k = mpsx.CNNPoolingAverage(device, 2, 2, 2, 2)
    k.padding = (mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling() if same else
                 mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling_valid_only())
    y = read(device, lambda cb: k.encode(cb, mpsx.Image.from_numpy(device, x)))
    assert k.edge_mode == mpsx.ImageEdgeMode.CLAMP  # the custom step set it
    np.testing.assert_allclose(y, tensorflow_average_pool(x, 2, 2, same), rtol=1e-5, atol=1e-6)


def test_custom_method_runs_last_and_sets_kernel_properties(device, rng):
    """The suggested descriptor is the bits' (valid only: 2x2 of a 5x5 source for a 2x2 window at stride 2) with
    offset set by them; the method then moves the window and asks for float16."""
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    source = mpsx.Image.from_numpy(device, x)
    wanted = mpsx.ImageDescriptor(mpsx.DataType.FLOAT16, 2, 2, 2, 1)
    policy = Recording(result=wanted, offset=(2, 2, 0))
    k = mpsx.CNNPoolingMax(device, 2, 2, 2, 2)
    k.padding = policy
    assert k.padding is policy
    y = synchronized(device, lambda cb: k.encode(cb, source))
    (call,) = policy.calls
    assert (call["suggested"].width, call["suggested"].height, call["suggested"].feature_channels) == (2, 2, 2)
    assert call["offset"] == (1, 1, 0)  # the bits' offset: the window starts at 0
    assert isinstance(call["kernel"], mpsx.CNNPoolingMax) and call["states"] == []
    assert len(call["sources"]) == 1 and call["sources"][0].to_numpy().tobytes() == x.tobytes()
    assert y.data_type == mpsx.DataType.FLOAT16 and (y.width, y.height) == (2, 2)
    assert k.offset == (2, 2, 0)
    # offset 2 for a 2x2 window: each window starts one pixel in
    expected = torch.nn.functional.max_pool2d(torch.tensor(x[:, :, 1:, 1:]), 2, 2).numpy()
    np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-3)
    # Called on every encode (no plan is kept for a custom method), and by the descriptor query.
    run(device, lambda cb: k.encode(cb, source))
    d = k.destination_image_descriptor([source])
    assert len(policy.calls) == 3 and d == wanted


def test_custom_policy_gets_the_source_states(device, rng):
    """Step 3 before step 4: a convolution transpose sized by the convolution's gradient state (the source
    state) hands the method that size and that state."""
    x = rng.standard_normal((1, 4, 7, 7)).astype(np.float32)
    d = mpsx.CNNConvolutionDescriptor(3, 3, 4, 2, stride_in_pixels_x=2, stride_in_pixels_y=2)
    w = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, w))
    td = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4, stride_in_pixels_x=2, stride_in_pixels_y=2)
    transpose = mpsx.CNNConvolutionTranspose(device, mpsx.ConvolutionWeights(td, rng.standard_normal(
        (4, 3, 3, 2)).astype(np.float32)))
    policy = Recording(method=M.CUSTOM | M.SIZE_SAME)
    transpose.padding = policy

    def encode(cb):
        y, state = conv.encode(cb, mpsx.Image.from_numpy(device, x), destination_state=True)
        return transpose.encode(cb, y, convolution_gradient_state=state)

    z = run(device, encode)
    (call,) = policy.calls
    assert (call["suggested"].width, call["suggested"].height) == (7, 7) == (z.width, z.height)
    assert len(call["states"]) == 1 and isinstance(call["states"][0], mpsx.CNNConvolutionGradientState)


def test_custom_method_on_binary_and_gradient_kernels(device, rng):
    a, b = (rng.standard_normal((1, 4, 3, 3)).astype(np.float32) for _ in range(2))
    add = mpsx.CNNAdd(device)
    policy = Recording(method=M.CUSTOM | M.SIZE_SAME)
    add.padding = policy
    y = read(device, lambda cb: add.encode(cb, mpsx.Image.from_numpy(device, a), mpsx.Image.from_numpy(device, b)))
    np.testing.assert_allclose(y, a + b, rtol=1e-6)
    assert len(policy.calls[0]["sources"]) == 2
    # A gradient is shaped as the forward source: the method may change its format only.
    relu = mpsx.CNNNeuronReLU(device, 0)
    gradient = mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    half = mpsx.ImageDescriptor(mpsx.DataType.FLOAT16, 3, 3, 4, 1)
    gradient.padding = Recording(method=M.CUSTOM, result=half)

    def encode(cb):
        source = mpsx.Image.from_numpy(device, a)
        out, state = relu.encode(cb, source, destination_state=True)
        return gradient.encode(cb, mpsx.Image.from_numpy(device, b), source, state)

    dx = synchronized(device, encode)
    assert dx.data_type == mpsx.DataType.FLOAT16
    np.testing.assert_allclose(dx.to_numpy(), np.where(a > 0, b, 0), rtol=2e-3, atol=2e-3)
    gradient.padding = Recording(method=M.CUSTOM, result=mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 4, 3, 4, 1))
    with pytest.raises(mpsx.ShapeError, match="shaped as the forward source"):
        run(device, encode)


def test_bad_custom_methods_raise_before_anything_is_encoded(device, rng):
    x = mpsx.Image.from_numpy(device, rng.standard_normal((1, 1, 4, 4)).astype(np.float32))

    class Raising(Recording):
        def destination_image_descriptor_for_source_images(self, *args):
            raise KeyError("from the policy")

    for policy, error, match in [
            (Raising(), KeyError, "from the policy"),
            (Recording(result="4x4"), TypeError, "must return an mpsx.ImageDescriptor"),
            (Recording(offset=(1 << 62, 0, 0)), ValueError, "custom method"),
            (Recording(result=mpsx.ImageDescriptor(mpsx.DataType.UINT8, 2, 2, 1, 1)), TypeError,
             "float32 or float16")]:
        k = mpsx.CNNPoolingMax(device, 2, 2, 2, 2)
        k.padding = policy
        cb = device.command_queue.command_buffer()
        with pytest.raises(error, match=match):
            k.encode(cb, x)
        # nothing was encoded: the command buffer still runs a good encode
        y = mpsx.CNNPoolingMax(device, 2, 2, 2, 2).encode(cb, x)
        y.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed" and y.to_numpy().shape == (1, 1, 2, 2)


def test_padding_arguments_refused(device):
    k = mpsx.CNNPoolingMax(device, 2, 2)

    class CamelCase:
        def paddingMethod(self):
            return 0

    class NoCustomMethod:
        def padding_method(self):
            return M.CUSTOM

    class Negative(mpsx.NNPadding):
        def padding_method(self):
            return -1

    for value, error, match in [("same", TypeError, "NNPaddingMethod or a padding policy"),
                                (CamelCase(), TypeError, "padding_method"),
                                (NoCustomMethod(), TypeError, "sets CUSTOM"),
                                (Negative(), ValueError, "32-bit unsigned"),
                                (mpsx.NNPadding(), NotImplementedError, "must implement padding_method"),
                                (1 << 32, ValueError, "32-bit unsigned")]:
        with pytest.raises(error, match=match):
            k.padding = value
        assert k.padding == M.SIZE_SAME | M.ALIGN_CENTERED  # unchanged
    with pytest.raises(TypeError):
        mpsx.NNDefaultPadding("same")
    assert_uninitialized_raise(mpsx.NNDefaultPadding, [])
    for name in ("padding_method", "label", "inverse"):
        with pytest.raises(TypeError):
            getattr(mpsx.NNDefaultPadding.__new__(mpsx.NNDefaultPadding), name)()


def pooling_graph(policy, gradient=False):
    source = mpsx.NNImageNode(Handle("x"))
    pool = mpsx.CNNPoolingAverageNode(source, 2, 2)
    pool.padding_policy = policy
    if not gradient:
        return pool, pool.result_image
    (g,) = pool.gradient_filters_with_sources([mpsx.NNImageNode(Handle("dy"))])
    return pool, g


def test_graph_nodes_take_padding_objects_and_gradients_their_inverse(device, rng):
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    policy = mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling()
    pool, result = pooling_graph(policy)
    assert pool.padding_policy == policy
    result.synchronize_resource = True
    graph = float32_graph(device, result)
    y = synchronized(device, lambda cb: graph.encode(cb, [mpsx.Image.from_numpy(device, x)])).to_numpy()
    np.testing.assert_allclose(y, tensorflow_average_pool(x, 2, 2, True), rtol=1e-5, atol=1e-6)
    # The gradient node takes the inverse: the same policy, whose Clamp divides as the forward did.
    _, g = pooling_graph(policy, gradient=True)
    assert g.padding_policy == policy

    class Inverse(Recording):
        def inverse(self):
            return mpsx.NNDefaultPadding(M.SIZE_FULL)

    _, g = pooling_graph(Inverse(method=M.SIZE_VALID_ONLY), gradient=True)
    assert g.padding_policy == mpsx.NNDefaultPadding(M.SIZE_FULL)
    _, g = pooling_graph(Recording(method=M.SIZE_FULL), gradient=True)
    assert g.padding_policy == M.SIZE_FULL  # no inverse: the bits the pooling gradient node copies


def test_graph_gradient_through_tensorflow_average_pooling(device, rng):
    """The gradient of TF-SAME average pooling (Clamp, bottom-right remainder) against autograd of the numpy
    reference's torch twin."""
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    _, g = pooling_graph(mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling(), gradient=True)
    g.result_image.synchronize_resource = True
    graph = float32_graph(device, g.result_image)
    images = [mpsx.ImageBatch.from_numpy(device, v) for v in (x, dy)]
    dx = run(device, lambda cb: graph.encode_batch(cb, images)).to_numpy()
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    padded = torch.nn.functional.pad(xt, (0, 1, 0, 1))
    counts = torch.nn.functional.avg_pool2d(torch.nn.functional.pad(torch.ones(1, 1, 5, 5, dtype=torch.float64),
                                                                     (0, 1, 0, 1)), 2, 2, divisor_override=1)
    y = torch.nn.functional.avg_pool2d(padded, 2, 2, divisor_override=1) / counts
    (y * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("allow_fusion", [False, True])
def test_custom_policy_keeps_the_graph_from_fusing_unless_allowed(device, rng, allow_fusion):
    """A batch normalization node fuses the ReLU after it, which then makes no image: its custom method is
    not called. A CUSTOM policy on the ReLU keeps them apart unless CUSTOM_ALLOW_FOR_NODE_FUSION is set."""
    c = 3
    w = mpsx.BatchNormalizationWeights(np.ones(c, np.float32), np.zeros(c, np.float32), np.zeros(c, np.float32),
                                       np.ones(c, np.float32), 1e-5)
    bn = mpsx.CNNBatchNormalizationNode(mpsx.NNImageNode(Handle("x")), w)
    relu = mpsx.CNNNeuronReLUNode(bn.result_image)
    policy = Recording(method=M.CUSTOM | M.SIZE_SAME | (M.CUSTOM_ALLOW_FOR_NODE_FUSION if allow_fusion else 0))
    relu.padding_policy = policy
    relu.result_image.synchronize_resource = True
    graph = float32_graph(device, relu.result_image)
    assert graph.number_of_fused_filters == (1 if allow_fusion else 0)
    x = rng.standard_normal((2, c, 4, 4)).astype(np.float32)
    y = run(device, lambda cb: graph.encode(cb, [mpsx.Image.from_numpy(device, x)])).to_numpy()
    np.testing.assert_allclose(y, np.maximum(x / np.sqrt(1 + 1e-5), 0), rtol=1e-5, atol=1e-6)
    assert len(policy.calls) == (0 if allow_fusion else 1)


def test_persistence_keeps_padding_objects(device, tmp_path):
    k = mpsx.CNNPoolingAverage(device, 2, 2, 2, 2)
    k.padding = mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling()
    path = tmp_path / "k.mpsx"
    mpsx.save(k, path)
    loaded = mpsx.load(path, device)
    assert loaded.padding == k.padding
    node = mpsx.CNNPoolingMaxNode(mpsx.NNImageNode(Handle("x")), 2, 2)
    node.padding_policy = mpsx.NNDefaultPadding(M.SIZE_VALID_ONLY)
    path = tmp_path / "n.mpsx"
    mpsx.save(node, path)
    assert mpsx.load(path, device).padding_policy == mpsx.NNDefaultPadding(M.SIZE_VALID_ONLY)


def test_the_default_padding_custom_step_takes_a_kernel(device):
    policy = mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling()
    descriptor = mpsx.ImageDescriptor(width=2, height=2, feature_channels=1)
    with pytest.raises(TypeError, match=r"for_kernel: expected an mpsx kernel \(CNNKernel\), given "
                                        r"CNNConvolutionDescriptor"):
        policy.destination_image_descriptor_for_source_images([], [], mpsx.CNNConvolutionDescriptor(3, 3, 1, 1),
                                                               descriptor)
    pool = mpsx.CNNPoolingAverage(device, 2, 2)
    assert policy.destination_image_descriptor_for_source_images([], [], pool, descriptor) is descriptor
    assert pool.edge_mode == mpsx.ImageEdgeMode.CLAMP

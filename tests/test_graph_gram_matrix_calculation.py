"""NNGramMatrixCalculationNode, its gradient node and NNGramMatrixCallback: forward results and gradients against
torch.einsum and autograd, a training graph (gram -> loss) whose source gradient matches PyTorch, the alpha a
callback sets at each encode (and its gradient takes from the state), properties, saving and bad input."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import Handle, assert_uninitialized_raise, float32_graph, run_results


def gram(xt, alpha):
    n, c = xt.shape[:2]
    return (alpha * torch.einsum("nfyx,ncyx->ncf", xt, xt)).reshape(n, c, 1, c)


def autograd(x, alpha, dy):
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    y = gram(xt, alpha)
    y.backward(torch.tensor(dy.astype(np.float64)))
    return y.detach().numpy(), xt.grad.numpy()


class Alpha(mpsx.NNGramMatrixCallback):
    """alpha = scale / (the source's pixels), recording the images it is given: a callback mpsx can save."""

    def __init__(self, scale):
        self.scale = scale
        self.calls = []

    def alpha_for_source_image(self, source_image, destination_image):
        self.calls.append((type(source_image), type(destination_image), destination_image.width,
                           destination_image.height, destination_image.feature_channels))
        return self.scale / (source_image.width * source_image.height)


@pytest.mark.parametrize("alpha", [1.0, 0.125])
def test_forward_and_gradient_match_torch_autograd(device, rng, alpha):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 1, 3)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.NNGramMatrixCalculationNode(source, alpha)
    gradient = node.gradient_filter_with_source(g)
    y, dx = run_results(device, [node.result_image, gradient.result_image], dict(x=x, dy=dy))
    expected_y, expected_dx = autograd(x, alpha, dy)
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)


def style_loss_graph(alpha, callback=None):
    """x -> conv 3x3 -> gram (alpha) -> MSE (SUM) against the image node 'target', trained from an
    NNInitialGradientNode: the gradient of x, through the gram gradient node and the convolution's."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((4, 2, 3, 3)) / 3).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    weights = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 2, 4), w.transpose(0, 2, 3, 1), b)
    x = mpsx.NNImageNode(Handle("x"))
    conv = mpsx.CNNConvolutionNode(x, weights)
    conv.training_style = "none"
    node = mpsx.NNGramMatrixCalculationNode(conv.result_image, alpha)
    node.property_call_back = callback
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM)
    loss = mpsx.NNForwardLossNode(node.result_image, mpsx.NNImageNode(Handle("target")), d)
    termini = mpsx.NNInitialGradientNode(loss.result_image).training_graph()
    (dx,) = [t for t in termini if isinstance(t, mpsx.CNNConvolutionGradientNode)]
    return node, dx, w, b


def torch_style_gradient(x, target, w, b, alpha):
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    h = torch.nn.functional.conv2d(xt, torch.tensor(w, dtype=torch.float64), torch.tensor(b, dtype=torch.float64),
                                   padding=1)
    ((gram(h, alpha) - torch.tensor(target, dtype=torch.float64)) ** 2).sum().backward()
    return xt.grad.numpy()


@pytest.mark.parametrize("with_callback", [False, True], ids=["alpha", "callback"])
def test_training_graph_source_gradient_matches_pytorch(device, rng, with_callback):
    """The style loss of neural style transfer: dL/dx through the gram matrix of a convolution's features."""
    x = rng.standard_normal((2, 2, 5, 4)).astype(np.float32)
    target = rng.standard_normal((2, 4, 1, 4)).astype(np.float32)
    callback = Alpha(2.0) if with_callback else None
    node, dx_node, w, b = style_loss_graph(0.05, callback)
    (dx,) = run_results(device, [dx_node.result_image], dict(x=x, target=target))
    alpha = 2.0 / 20 if with_callback else 0.05
    np.testing.assert_allclose(dx, torch_style_gradient(x, target, w, b, alpha), rtol=1e-4, atol=1e-4)
    if with_callback:
        assert callback.calls == [(mpsx.Image, mpsx.Image, 4, 1, 4)]


def test_property_call_back_sets_alpha_and_the_gradient_takes_it(device, rng):
    x = rng.standard_normal((2, 3, 2, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 1, 3)).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.NNGramMatrixCalculationNode.node_with_source(source, 0.5)
    assert node.property_call_back is None
    callback = Alpha(3.0)
    node.property_call_back = callback
    assert node.property_call_back is callback
    # A gradient node made by hand with another alpha takes the forward encode's from the state.
    gradient = mpsx.NNGramMatrixCalculationGradientNode(g, source, node.result_state, 100.0)
    assert gradient.alpha == 100.0
    for image in (node.result_image, gradient.result_image):
        image.synchronize_resource = True
    graph = float32_graph(device, result_images=[node.result_image, gradient.result_image])

    def encode():
        images = [mpsx.ImageBatch.from_numpy(device, {"x": x, "dy": dy}[h.label]) for h in graph.source_image_handles]
        cb = device.command_queue.command_buffer()
        y, (dx,) = graph.encode_batch(cb, images, intermediate_images=True)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        return y.to_numpy(), dx.to_numpy()

    y, dx = encode()
    expected_y, expected_dx = autograd(x, 3.0 / 6, dy)
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)
    assert callback.calls == [(mpsx.Image, mpsx.Image, 3, 1, 3)]
    # Without the callback, the node's alpha again.
    node.property_call_back = None
    y, dx = encode()
    expected_y, expected_dx = autograd(x, 0.5, dy)
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-4, atol=1e-5)

    images = [mpsx.ImageBatch.from_numpy(device, {"x": x, "dy": dy}[h.label]) for h in graph.source_image_handles]

    class Raises(mpsx.NNGramMatrixCallback):
        def alpha_for_source_image(self, source_image, destination_image):
            raise KeyError("no alpha")

    class Returns:
        def __init__(self, value):
            self.value = value

        def alpha_for_source_image(self, source_image, destination_image):
            return self.value

    for callback, error, message in ((Raises(), KeyError, "no alpha"),
                                     (Returns("2"), TypeError, r"alpha_for_source_image\(\) must return a float, "
                                                               "given str"),
                                     (Returns(None), TypeError, "must return a float, given NoneType"),
                                     (Returns(float("nan")), ValueError,
                                      r"alpha \(from property_call_back\) must be finite, given nan"),
                                     (mpsx.NNGramMatrixCallback(), NotImplementedError,
                                      "must implement alpha_for_source_image")):
        node.property_call_back = callback
        cb = device.command_queue.command_buffer()
        with pytest.raises(error, match=message):
            graph.encode_batch(cb, images)
        assert cb.command_count == 0
    with pytest.raises(TypeError, match="property_call_back: expected None or an object with an "
                                        r"alpha_for_source_image\(source_image, destination_image\) method, given float"):
        node.property_call_back = 1.5


def test_properties_and_wiring():
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    node = mpsx.NNGramMatrixCalculationNode(source)
    assert node.alpha == 1.0 and mpsx.NNGramMatrixCalculationNode.node_with_source(source, 0.25).alpha == 0.25
    assert isinstance(node.result_state, mpsx.NNGradientStateNode)
    gradient = mpsx.NNGramMatrixCalculationNode(source, 0.25).gradient_filter_with_source(g)
    assert type(gradient) is mpsx.NNGramMatrixCalculationGradientNode
    assert gradient.alpha == 0.25 and gradient.source_images == [g, source]
    by_hand = mpsx.NNGramMatrixCalculationGradientNode.node_with_source_gradient(g, source, node.result_state)
    assert by_hand.alpha == 1.0 and by_hand.source_states == [node.result_state]
    with pytest.raises(TypeError, match="no gradients of gradients"):
        by_hand.gradient_filter_with_source(mpsx.NNImageNode())


def test_bad_input():
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    for value, error, message in ((float("nan"), ValueError, "alpha must be finite, given nan"),
                                  (float("inf"), ValueError, "alpha must be finite, given inf"),
                                  ("1", TypeError, "alpha must be a float")):
        with pytest.raises(error, match=message):
            mpsx.NNGramMatrixCalculationNode(source, value)
    node = mpsx.NNGramMatrixCalculationNode(source)
    with pytest.raises(ValueError, match="alpha must be finite"):
        mpsx.NNGramMatrixCalculationGradientNode(g, source, node.result_state, float("nan"))
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        mpsx.NNGramMatrixCalculationNode(None)
    pool = mpsx.CNNPoolingMaxNode(source, 2)
    with pytest.raises(TypeError, match="expected the result state of an MPSNNGramMatrixCalculationNode, given the "
                                        "result state of an MPSCNNPoolingMaxNode"):
        mpsx.NNGramMatrixCalculationGradientNode(g, source, pool.result_state)
    with pytest.raises(ValueError, match="source_image must be the source image of the "
                                         "MPSNNGramMatrixCalculationNode"):
        mpsx.NNGramMatrixCalculationGradientNode(g, mpsx.NNImageNode(), node.result_state)
    with pytest.raises(AttributeError):
        node.alpha = 2.0  # readonly, as MPS's


def test_safe_without_init():
    assert_uninitialized_raise(mpsx.NNGramMatrixCalculationNode, ["alpha", "property_call_back", "result_image"])
    assert_uninitialized_raise(mpsx.NNGramMatrixCalculationGradientNode, ["alpha", "result_image"])
    with pytest.raises(TypeError):
        mpsx.NNGramMatrixCalculationNode.__new__(mpsx.NNGramMatrixCalculationNode).property_call_back = None


def test_a_graph_saves_with_its_callback(device, rng, tmp_path):
    x = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    target = rng.standard_normal((1, 4, 1, 4)).astype(np.float32)
    node, dx_node, w, b = style_loss_graph(0.05, Alpha(2.0))
    dx_node.result_image.synchronize_resource = True
    graph = float32_graph(device, dx_node.result_image)
    mpsx.save(graph, tmp_path / "style.mpsx")
    loaded = mpsx.load(tmp_path / "style.mpsx", device)
    images = [mpsx.ImageBatch.from_numpy(device, {"x": x, "target": target}[h.label])
              for h in loaded.source_image_handles]
    cb = device.command_queue.command_buffer()
    dx = loaded.encode_batch(cb, images)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    np.testing.assert_allclose(dx.to_numpy(), torch_style_gradient(x, target, w, b, 2.0 / 20), rtol=1e-4, atol=1e-4)

"""CNNGroupNormalizationNode (and, through the same native nodes, CNNInstanceNormalizationNode) with their
gradient nodes: gradients against torch group_norm / instance_norm autograd, a few SGD steps of a graph built
with training_graph against PyTorch (training styles GPU and CPU), properties and bad input."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import GammaAndBeta, Handle, assert_uninitialized_raise, float32_graph, one_hot_labels

N, C, H, W, GROUPS, CLASSES, LR, STEPS, EPSILON = 3, 4, 4, 5, 2, 3, 0.1, 3, 1e-5


def parameters(seed=7):
    rng = np.random.default_rng(seed)
    return dict(gamma=(1 + rng.standard_normal(C) * 0.2).astype(np.float32),
                beta=(rng.standard_normal(C) * 0.1).astype(np.float32),
                fc_w=(rng.standard_normal((CLASSES, H, W, C)) * 0.1).astype(np.float32),
                fc_b=(rng.standard_normal(CLASSES) * 0.1).astype(np.float32))


def batch(seed=8):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((N, C, H, W)) * 1.5 + 0.5).astype(np.float32)
    labels = one_hot_labels(rng, N, CLASSES)
    return x, labels


def torch_normalization(kind, x, gamma, beta):
    if kind == "instance":
        return torch.nn.functional.instance_norm(x, weight=gamma, bias=beta, eps=EPSILON)
    return torch.nn.functional.group_norm(x, GROUPS, gamma, beta, eps=EPSILON)


class HostGamma(GammaAndBeta):
    """gamma and beta in numpy, plain SGD in the host update over the batch of states (training style CPU)."""
    epsilon = EPSILON
    number_of_groups = GROUPS

    def __init__(self, p):
        self.g, self.b = p["gamma"].copy(), p["beta"].copy()
        self.calls = 0

    def _update(self, states):
        self.calls += 1
        self.g = states[0].gamma.to_numpy() - LR * sum(s.gradient_for_gamma.to_numpy() for s in states)
        self.b = states[0].beta.to_numpy() - LR * sum(s.gradient_for_beta.to_numpy() for s in states)
        return True


class HostInstance(HostGamma, mpsx.CNNInstanceNormalizationDataSource):
    def update_gamma_and_beta_with_instance_normalization_state_batch(self, states):
        return self._update(states)


class HostGroup(HostGamma, mpsx.CNNGroupNormalizationDataSource):
    def update_gamma_and_beta_with_group_normalization_state_batch(self, states):
        return self._update(states)


def weights(device, kind, p, style):
    if style == "cpu":
        return HostInstance(p) if kind == "instance" else HostGroup(p)
    optimizer = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR) if style == "gpu" else None
    if kind == "instance":
        return mpsx.InstanceNormalizationWeights(p["gamma"], p["beta"], EPSILON, optimizer=optimizer)
    return mpsx.GroupNormalizationWeights(p["gamma"], p["beta"], GROUPS, EPSILON, optimizer=optimizer)


def node_class(kind):
    return mpsx.CNNInstanceNormalizationNode if kind == "instance" else mpsx.CNNGroupNormalizationNode


def gamma_beta(w):
    return (w.g, w.b) if isinstance(w, HostGamma) else (w.gamma(), w.beta())


def run(device, graph, sources, labels=None):
    cb = device.command_queue.command_buffer()
    out = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, s) for s in sources],
                             [mpsx.CNNLossLabels(device, labels)] if labels is not None else None)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return out


@pytest.mark.parametrize("kind", ["instance", "group"])
def test_forward_against_torch(device, rng, kind):
    p = parameters()
    x = rng.standard_normal((2, C, 3, 6)).astype(np.float32) * 3 + 1
    node = node_class(kind)(mpsx.NNImageNode(Handle("x")), weights(device, kind, p, "none"))
    node.result_image.synchronize_resource = True
    y = run(device, float32_graph(device, node.result_image), [x]).to_numpy()
    expected = torch_normalization(kind, torch.tensor(x), torch.tensor(p["gamma"]), torch.tensor(p["beta"]))
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["instance", "group"])
def test_gradient_filter_against_autograd(device, rng, kind):
    """gradient_filter_with_source: the source gradient of sum(y * dy), and the gamma and beta gradients
    that the host update (training style CPU) receives, against autograd."""
    p = parameters()
    x = rng.standard_normal((N, C, H, W)).astype(np.float32) * 2 - 1
    dy = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = weights(device, kind, p, "cpu")
    node = node_class(kind)(mpsx.NNImageNode(Handle("x")), w)
    node.training_style = "cpu"
    gradient = node.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
    assert type(gradient).__name__ == type(node).__name__.replace("Node", "GradientNode")
    assert gradient.training_style == mpsx.NNTrainingStyle.CPU
    assert gradient.source_states == [node.result_state]
    gradient.result_image.synchronize_resource = True
    graph = float32_graph(device, gradient.result_image)
    assert [h.label for h in graph.source_image_handles] == ["x", "dy"]
    dx = run(device, graph, [x, dy]).to_numpy()
    xt = torch.tensor(x, requires_grad=True)
    gamma = torch.tensor(p["gamma"], requires_grad=True)
    beta = torch.tensor(p["beta"], requires_grad=True)
    (torch_normalization(kind, xt, gamma, beta) * torch.tensor(dy)).sum().backward()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert w.calls == 1
    np.testing.assert_allclose(w.g, p["gamma"] - LR * gamma.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.b, p["beta"] - LR * beta.grad.numpy(), rtol=1e-5, atol=1e-5)


def model(device, kind, p, style):
    w = weights(device, kind, p, style)
    fc_w = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(W, H, C, CLASSES), p["fc_w"], p["fc_b"],
                                   optimizer=mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR))
    source = mpsx.NNImageNode(Handle("images"))
    norm = node_class(kind)(source, w)
    norm.training_style = style
    fc = mpsx.CNNFullyConnectedNode(norm.result_image, fc_w)
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    d.reduce_across_batch = True
    loss = mpsx.CNNLossNode(fc.result_image, d)
    loss.input_labels.handle = Handle("labels")
    return dict(source=source, norm=norm, fc=fc, loss=loss, w=w, fc_w=fc_w)


@pytest.mark.parametrize("style", ["gpu", "cpu"])
@pytest.mark.parametrize("kind", ["instance", "group"])
def test_training_graph_trains_as_pytorch(device, kind, style):
    p = parameters()
    x, labels = batch()
    m = model(device, kind, p, style)
    termini = m["loss"].training_graph()
    assert [type(t).__name__ for t in termini] == [type(m["norm"]).__name__.replace("Node", "GradientNode")]
    graph = float32_graph(device, termini[0].result_image, False)
    for _ in range(STEPS):
        run(device, graph, [x], labels)
    gamma = torch.tensor(p["gamma"], requires_grad=True)
    beta = torch.tensor(p["beta"], requires_grad=True)
    fc = torch.nn.Linear(C * H * W, CLASSES)
    fc.weight.data = torch.tensor(p["fc_w"]).reshape(CLASSES, -1)
    fc.bias.data = torch.tensor(p["fc_b"])
    optimizer = torch.optim.SGD([gamma, beta, fc.weight, fc.bias], lr=LR)
    target = torch.tensor(labels.reshape(N, -1).argmax(1))
    for _ in range(STEPS):
        optimizer.zero_grad()
        h = torch_normalization(kind, torch.tensor(x), gamma, beta)
        torch.nn.functional.cross_entropy(fc(h.permute(0, 2, 3, 1).reshape(N, -1)), target).backward()
        optimizer.step()
    g, b = gamma_beta(m["w"])
    np.testing.assert_allclose(g, gamma.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b, beta.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["fc_w"].weights(), fc.weight.detach().reshape(CLASSES, H, W, C).numpy(),
                               rtol=1e-4, atol=1e-5)
    if style == "cpu":
        assert m["w"].calls == STEPS


@pytest.mark.parametrize("kind", ["instance", "group"])
def test_style_none_leaves_gamma_and_beta_and_gives_the_input_gradient(device, kind):
    p = parameters()
    x, labels = batch()
    m = model(device, kind, p, "none")
    termini = m["loss"].training_graph()
    assert termini[0].training_style == mpsx.NNTrainingStyle.NONE
    termini[0].result_image.synchronize_resource = True
    dx = run(device, float32_graph(device, termini[0].result_image, True), [x], labels).to_numpy()
    g, b = gamma_beta(m["w"])
    np.testing.assert_array_equal(g, p["gamma"])
    np.testing.assert_array_equal(b, p["beta"])
    xt = torch.tensor(x, requires_grad=True)
    h = torch_normalization(kind, xt, torch.tensor(p["gamma"]), torch.tensor(p["beta"]))
    logits = h.permute(0, 2, 3, 1).reshape(N, -1) @ torch.tensor(p["fc_w"]).reshape(CLASSES, -1).T + \
        torch.tensor(p["fc_b"])
    torch.nn.functional.cross_entropy(logits, torch.tensor(labels.reshape(N, -1).argmax(1))).backward()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["instance", "group"])
def test_properties_and_defaults(device, kind):
    p = parameters()
    w = weights(device, kind, p, "gpu")
    node = node_class(kind)(mpsx.NNImageNode(), w)
    assert node.data_source is w
    assert node.training_style == mpsx.NNTrainingStyle.GPU
    assert isinstance(node.result_state, mpsx.NNGradientStateNode)
    assert node.padding_policy == node_class(kind)(mpsx.NNImageNode(), w).padding_policy
    gradient_class = getattr(mpsx, type(node).__name__.replace("Node", "GradientNode"))
    g = gradient_class(mpsx.NNImageNode(), node.source_images[0], node.result_state)
    assert g.training_style == mpsx.NNTrainingStyle.GPU
    g.training_style = "none"
    assert g.training_style == mpsx.NNTrainingStyle.NONE


def test_bad_input(device):
    p = parameters()
    source = mpsx.NNImageNode()
    instance = mpsx.CNNInstanceNormalizationNode(source, weights(device, "instance", p, "gpu"))
    group = mpsx.CNNGroupNormalizationNode(source, weights(device, "group", p, "gpu"))
    with pytest.raises(TypeError, match="an instance normalization takes InstanceNormalizationWeights, given "
                                        "GroupNormalizationWeights"):
        mpsx.CNNInstanceNormalizationNode(source, weights(device, "group", p, "gpu"))
    with pytest.raises(TypeError, match="a group normalization data source, given None"):
        mpsx.CNNGroupNormalizationNode(source, None)
    with pytest.raises(TypeError, match="does not implement gamma, beta, number_of_feature_channels"):
        mpsx.CNNGroupNormalizationNode(source, object())
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        mpsx.CNNGroupNormalizationNode("x", weights(device, "group", p, "gpu"))
    with pytest.raises(TypeError, match="expected the result state of an MPSCNNGroupNormalizationNode, given the "
                                        "result state of an MPSCNNInstanceNormalizationNode"):
        mpsx.CNNGroupNormalizationGradientNode(mpsx.NNImageNode(), source, instance.result_state)
    with pytest.raises(TypeError, match="expected the result state of an MPSCNNInstanceNormalizationNode"):
        mpsx.CNNInstanceNormalizationGradientNode(mpsx.NNImageNode(), source, group.result_state)
    # Training style CPU with a native data source (no host update): refused when the graph compiles.
    m = model(device, "group", p, "gpu")
    m["norm"].training_style = "cpu"
    with pytest.raises(TypeError, match="training style CPU calls the data source's host update, "
                                        "update_gamma_and_beta_with_\\*_normalization_state_batch"):
        float32_graph(device, m["loss"].training_graph()[0].result_image, False)
    # Training style GPU with weights that have no optimizer: nothing to update gamma and beta with.
    m = model(device, "group", p, "none")
    m["norm"].training_style = "gpu"
    with pytest.raises(TypeError, match="training style GPU updates gamma and beta through the data source"):
        float32_graph(device, m["loss"].training_graph()[0].result_image, False)


@pytest.mark.parametrize("cls", [mpsx.CNNGroupNormalizationNode, mpsx.CNNGroupNormalizationGradientNode,
                                 mpsx.CNNInstanceNormalizationNode, mpsx.CNNInstanceNormalizationGradientNode])
def test_uninitialized_objects_raise(cls):
    assert_uninitialized_raise(cls, ("result_image", "training_style", "data_source"), only_those_it_has=True)

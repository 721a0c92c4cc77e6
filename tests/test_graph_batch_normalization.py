"""CNNBatchNormalizationNode and its gradient node: a conv + batch norm + relu + fully connected + loss graph
trained with training_graph against PyTorch (BatchNorm2d in training mode, SGD), for BatchNormalizationWeights
with an optimizer (training style GPU) and a Python data source (training style CPU); the input gradient against
autograd; inference graphs on the running statistics; the flags; bad input."""

import numpy as np
import pytest
import torch

import mpsx
from mpsx.benchmarks.reference_cnn import HostSGD
from helpers import (GammaAndBeta, Handle, assert_uninitialized_raise, float32_graph, one_hot_labels,
                     run_gradient_graph)

N, C_IN, C, SIZE, CLASSES, LR, STEPS, EPSILON, MOMENTUM = 4, 2, 4, 5, 3, 0.1, 3, 1e-5, 0.1


def parameters(seed=5):
    rng = np.random.default_rng(seed)
    return dict(conv_w=(rng.standard_normal((C, 3, 3, C_IN)) * 0.3).astype(np.float32),
                conv_b=(rng.standard_normal(C) * 0.1).astype(np.float32),
                gamma=(1 + rng.standard_normal(C) * 0.2).astype(np.float32),
                beta=(rng.standard_normal(C) * 0.1).astype(np.float32),
                mean=(rng.standard_normal(C) * 0.2).astype(np.float32),
                variance=(1 + rng.random(C)).astype(np.float32),
                fc_w=(rng.standard_normal((CLASSES, SIZE, SIZE, C)) * 0.1).astype(np.float32),
                fc_b=(rng.standard_normal(CLASSES) * 0.1).astype(np.float32))


def batch(seed=6):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((N, C_IN, SIZE, SIZE)) + 0.5).astype(np.float32)
    labels = one_hot_labels(rng, N, CLASSES)
    return x, labels


class HostNormalization(GammaAndBeta, mpsx.CNNBatchNormalizationDataSource):
    """gamma, beta and the running statistics in numpy, updated on the host as PyTorch does."""
    epsilon = EPSILON

    def __init__(self, p):
        self.g, self.b, self.m, self.v = (p[k].copy() for k in ("gamma", "beta", "mean", "variance"))
        self.calls = []

    def mean(self):
        return self.m

    def variance(self):
        return self.v

    def update_gamma_and_beta_with_batch_normalization_state(self, state):
        self.calls.append("gamma_and_beta")
        self.g = state.gamma.to_numpy() - LR * state.gradient_for_gamma.to_numpy()
        self.b = state.beta.to_numpy() - LR * state.gradient_for_beta.to_numpy()
        return True

    def update_mean_and_variance_with_batch_normalization_state(self, state):
        self.calls.append("mean_and_variance")
        n = N * SIZE * SIZE
        self.m = (1 - MOMENTUM) * self.m + MOMENTUM * state.mean.to_numpy()
        self.v = (1 - MOMENTUM) * self.v + MOMENTUM * state.variance.to_numpy() * n / (n - 1)
        return True


def loss_descriptor():
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    d.reduce_across_batch = True
    return d


def model(device, p, style):
    conv_d = mpsx.CNNConvolutionDescriptor(3, 3, C_IN, C)
    fc_d = mpsx.CNNConvolutionDescriptor(SIZE, SIZE, C, CLASSES)
    if style == "cpu":
        conv_w = HostSGD(conv_d, p["conv_w"], p["conv_b"], learning_rate=LR)
        fc_w = HostSGD(fc_d, p["fc_w"], p["fc_b"], learning_rate=LR)
        bn_w = HostNormalization(p)
    else:
        sgd = lambda: mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR)
        conv_w = mpsx.ConvolutionWeights(conv_d, p["conv_w"], p["conv_b"], optimizer=sgd())
        fc_w = mpsx.ConvolutionWeights(fc_d, p["fc_w"], p["fc_b"], optimizer=sgd())
        bn_w = mpsx.BatchNormalizationWeights(p["gamma"], p["beta"], p["mean"], p["variance"], EPSILON,
                                              momentum=MOMENTUM, optimizer=sgd() if style == "gpu" else None)
    source = mpsx.NNImageNode(Handle("images"))
    conv = mpsx.CNNConvolutionNode(source, conv_w)
    bn = mpsx.CNNBatchNormalizationNode(conv.result_image, bn_w)
    relu = mpsx.CNNNeuronNode(bn.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    fc = mpsx.CNNFullyConnectedNode(relu.result_image, fc_w)
    loss = mpsx.CNNLossNode(fc.result_image, loss_descriptor())
    loss.input_labels.handle = Handle("labels")
    for node in (conv, bn, fc):
        node.training_style = style if style in ("cpu", "gpu") else "none"
    return dict(source=source, conv=conv, bn=bn, relu=relu, fc=fc, loss=loss, conv_w=conv_w, fc_w=fc_w, bn_w=bn_w)


def torch_model(p):
    conv = torch.nn.Conv2d(C_IN, C, 3, padding=1)
    conv.weight.data = torch.tensor(p["conv_w"]).permute(0, 3, 1, 2).contiguous()
    conv.bias.data = torch.tensor(p["conv_b"])
    bn = torch.nn.BatchNorm2d(C, eps=EPSILON, momentum=MOMENTUM)
    bn.weight.data, bn.bias.data = torch.tensor(p["gamma"]), torch.tensor(p["beta"])
    bn.running_mean.data, bn.running_var.data = torch.tensor(p["mean"]), torch.tensor(p["variance"])
    fc = torch.nn.Linear(SIZE * SIZE * C, CLASSES)
    fc.weight.data = torch.tensor(p["fc_w"]).reshape(CLASSES, -1)
    fc.bias.data = torch.tensor(p["fc_b"])
    forward = lambda x: fc(torch.relu(bn(conv(x))).permute(0, 2, 3, 1).reshape(len(x), -1))
    return conv, bn, fc, forward


def torch_training(p, x, labels, steps=STEPS):
    conv, bn, fc, forward = torch_model(p)
    optimizer = torch.optim.SGD([conv.weight, conv.bias, bn.weight, bn.bias, fc.weight, fc.bias], lr=LR)
    target = torch.tensor(labels.reshape(N, -1).argmax(1))
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(forward(torch.tensor(x)), target).backward()
        optimizer.step()
    t = lambda v: v.detach().numpy()
    return dict(conv_w=t(conv.weight.permute(0, 2, 3, 1)), conv_b=t(conv.bias), gamma=t(bn.weight), beta=t(bn.bias),
                mean=t(bn.running_mean), variance=t(bn.running_var),
                fc_w=t(fc.weight.reshape(CLASSES, SIZE, SIZE, C)), fc_b=t(fc.bias))


def values(m):
    w = m["bn_w"]
    if isinstance(w, HostNormalization):
        bn = dict(gamma=w.g, beta=w.b, mean=w.m, variance=w.v)
    else:
        bn = dict(gamma=w.gamma(), beta=w.beta(), mean=w.mean(), variance=w.variance())
    return dict(conv_w=m["conv_w"].weights(), conv_b=m["conv_w"].bias_terms(), fc_w=m["fc_w"].weights(),
                fc_b=m["fc_w"].bias_terms(), **bn)


def run(device, graph, x, labels=None, states=True):
    cb = device.command_queue.command_buffer()
    sources = [mpsx.ImageBatch.from_numpy(device, x)]
    out = graph.encode_batch(cb, sources, [mpsx.CNNLossLabels(device, labels)] if labels is not None else None)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return out


@pytest.mark.parametrize("style", ["gpu", "cpu"])
def test_training_graph_trains_as_pytorch(device, style):
    p = parameters()
    x, labels = batch()
    m = model(device, p, style)
    termini = m["loss"].training_graph()
    assert [type(t).__name__ for t in termini] == ["CNNConvolutionGradientNode"]
    graph = float32_graph(device, termini[0].result_image, False)
    for _ in range(STEPS):
        assert run(device, graph, x, labels) is None
    expected = torch_training(p, x, labels)
    got = values(m)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=2e-5, err_msg=name)
    if style == "cpu":
        assert m["bn_w"].calls == ["gamma_and_beta", "mean_and_variance"] * STEPS


def test_input_gradient_against_autograd_and_style_none(device):
    """Training style NONE: the gradient of the images through the batch statistics, against autograd; gamma,
    beta and the running statistics stay."""
    p = parameters()
    x, labels = batch()
    m = model(device, p, "none")
    seen = []
    termini = m["loss"].training_graph(node_handler=lambda g, *rest: seen.append(g))
    assert [type(g).__name__ for g in seen] == ["CNNFullyConnectedGradientNode", "CNNNeuronGradientNode",
                                              "CNNBatchNormalizationGradientNode", "CNNConvolutionGradientNode"]
    bn_gradient = seen[2]
    assert bn_gradient.training_style == mpsx.NNTrainingStyle.NONE
    assert bn_gradient.source_images == [seen[1].result_image, m["conv"].result_image]
    assert bn_gradient.source_states == [m["bn"].result_state]
    termini[0].result_image.synchronize_resource = True
    graph = float32_graph(device, termini[0].result_image, True)
    dx = run(device, graph, x, labels)
    _, bn, _, forward = torch_model(p)
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.cross_entropy(forward(xt), torch.tensor(labels.reshape(N, -1).argmax(1))).backward()
    np.testing.assert_allclose(dx.to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)
    got = values(m)
    for name in ("gamma", "beta", "mean", "variance", "conv_w", "fc_w"):
        np.testing.assert_array_equal(got[name], p[name], err_msg=name)


def test_gradient_node_by_hand_gives_gamma_and_beta_gradients(device, rng):
    """gradient_filter_with_source on a lone batch normalization: the source gradient of sum(y * dy) against
    autograd, and (training style CPU) the gradients of gamma and beta the data source receives."""
    p = parameters()
    x = rng.standard_normal((3, C, 4, 5)).astype(np.float32) * 2 + 1
    dy = rng.standard_normal((3, C, 4, 5)).astype(np.float32)
    w = HostNormalization(p)
    source = mpsx.NNImageNode(Handle("x"))
    bn = mpsx.CNNBatchNormalizationNode(source, w)
    bn.training_style = "cpu"
    gradient = bn.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
    assert isinstance(gradient, mpsx.CNNBatchNormalizationGradientNode)
    assert gradient.training_style == mpsx.NNTrainingStyle.CPU
    dx = run_gradient_graph(device, gradient.result_image, x, dy)
    xt = torch.tensor(x, requires_grad=True)
    gamma = torch.tensor(p["gamma"], requires_grad=True)
    beta = torch.tensor(p["beta"], requires_grad=True)
    y = torch.nn.functional.batch_norm(xt, None, None, gamma, beta, training=True, eps=EPSILON)
    (y * torch.tensor(dy)).sum().backward()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.g, p["gamma"] - LR * gamma.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.b, p["beta"] - LR * beta.grad.numpy(), rtol=1e-5, atol=1e-5)


def inference(device, p, x, flags=None):
    w = mpsx.BatchNormalizationWeights(p["gamma"], p["beta"], p["mean"], p["variance"], EPSILON)
    bn = mpsx.CNNBatchNormalizationNode(mpsx.NNImageNode(Handle("x")), w)
    if flags is not None:
        bn.flags = flags
    bn.result_image.synchronize_resource = True
    graph = float32_graph(device, bn.result_image)
    assert graph.number_of_filters == 1
    return run(device, graph, x).to_numpy(), w


@pytest.mark.parametrize("flags", [None, mpsx.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_NEVER])
def test_inference_uses_the_running_statistics(device, rng, flags):
    p = parameters()
    x = rng.standard_normal((2, C, 3, 4)).astype(np.float32)
    y, w = inference(device, p, x, flags)
    expected = torch.nn.functional.batch_norm(torch.tensor(x), torch.tensor(p["mean"]), torch.tensor(p["variance"]),
                                              torch.tensor(p["gamma"]), torch.tensor(p["beta"]), training=False,
                                              eps=EPSILON)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(w.mean(), p["mean"])


def test_flags_always_uses_the_batch_statistics_without_a_gradient(device, rng):
    p = parameters()
    x = rng.standard_normal((2, C, 3, 4)).astype(np.float32) + 2
    y, w = inference(device, p, x, mpsx.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_ALWAYS)
    expected = torch.nn.functional.batch_norm(torch.tensor(x), None, None, torch.tensor(p["gamma"]),
                                              torch.tensor(p["beta"]), training=True, eps=EPSILON)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(w.mean(), p["mean"])  # no gradient node: no update


def test_inference_graph_of_a_trained_model_uses_what_training_left(device):
    """The training graph's forward nodes, as an inference graph after training: the running statistics the
    gradient node updated, as PyTorch's eval mode."""
    p = parameters()
    x, labels = batch()
    m = model(device, p, "gpu")
    graph = float32_graph(device, m["loss"].training_graph()[0].result_image, False)
    for _ in range(STEPS):
        run(device, graph, x, labels)
    m["fc"].result_image.synchronize_resource = True
    inference_graph = float32_graph(device, m["fc"].result_image)
    # conv, batch normalization with the ReLU fused into it, fc
    assert (inference_graph.number_of_filters, inference_graph.number_of_fused_filters) == (3, 1)
    logits = run(device, inference_graph, x).to_numpy()
    conv, bn, fc, forward = torch_model(p)
    optimizer = torch.optim.SGD([conv.weight, conv.bias, bn.weight, bn.bias, fc.weight, fc.bias], lr=LR)
    for _ in range(STEPS):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(forward(torch.tensor(x)),
                                          torch.tensor(labels.reshape(N, -1).argmax(1))).backward()
        optimizer.step()
    bn.eval()
    with torch.no_grad():
        expected = forward(torch.tensor(x)).numpy()
    np.testing.assert_allclose(logits.reshape(N, CLASSES), expected, rtol=1e-4, atol=1e-5)


def test_properties_and_defaults(device):
    p = parameters()
    m = model(device, p, "gpu")
    bn = m["bn"]
    assert bn.flags == mpsx.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_AUTOMATIC == 0
    assert mpsx.CNNBatchNormalizationFlags.DEFAULT == 0
    bn.flags = 1
    assert bn.flags is mpsx.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_ALWAYS
    assert bn.data_source is m["bn_w"]
    assert mpsx.CNNBatchNormalizationNode(mpsx.NNImageNode(), m["bn_w"]).training_style == mpsx.NNTrainingStyle.GPU
    assert isinstance(bn.result_state, mpsx.NNGradientStateNode)
    assert bn.result_state is not None and bn.result_state == bn.result_state
    assert bn.source_images == [m["conv"].result_image]
    g = mpsx.CNNBatchNormalizationGradientNode(mpsx.NNImageNode(), m["conv"].result_image, bn.result_state)
    assert g.training_style == mpsx.NNTrainingStyle.GPU
    assert m["relu"].source_images[0].producer == bn


def test_bad_input(device):
    p = parameters()
    m = model(device, p, "gpu")
    with pytest.raises(TypeError, match="batch normalization data source, given None"):
        mpsx.CNNBatchNormalizationNode(mpsx.NNImageNode(), None)
    with pytest.raises(TypeError, match="does not implement number_of_feature_channels"):
        mpsx.CNNBatchNormalizationNode(mpsx.NNImageNode(), object())
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        mpsx.CNNBatchNormalizationNode(None, m["bn_w"])
    with pytest.raises(ValueError, match="flags must be"):
        m["bn"].flags = 3
    with pytest.raises(TypeError, match="expected the result state of an MPSCNNBatchNormalizationNode, given the "
                                        "result state of an MPSCNNNeuronNode"):
        mpsx.CNNBatchNormalizationGradientNode(mpsx.NNImageNode(), m["conv"].result_image, m["relu"].result_state)
    with pytest.raises(TypeError):
        mpsx.CNNBatchNormalizationGradientNode(mpsx.NNImageNode(), m["conv"].result_image, None)
    # Flags NEVER compute no statistics for a gradient to use: the graph refuses, before anything is encoded.
    m["bn"].flags = mpsx.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_NEVER
    termini = m["loss"].training_graph()
    with pytest.raises(ValueError, match="CalculateStatisticsNever"):
        float32_graph(device, termini[0].result_image, False)
    # Training style CPU with a data source that has no host update.
    m = model(device, p, "gpu")
    m["bn"].training_style = "cpu"
    with pytest.raises(TypeError, match="training style CPU calls the data source's host updates"):
        float32_graph(device, m["loss"].training_graph()[0].result_image, False)


class NoUpdates(mpsx.CNNBatchNormalizationDataSource):
    def number_of_feature_channels(self):
        return C

    def gamma(self):
        return np.ones(C, np.float32)


def test_a_data_source_without_updates(device):
    """Training style GPU finds no update to call: TypeError when the graph compiles; style NONE trains
    nothing and is fine."""
    p = parameters()
    m = model(device, p, "gpu")
    bn = mpsx.CNNBatchNormalizationNode(m["conv"].result_image, NoUpdates())
    loss = mpsx.CNNLossNode(mpsx.CNNFullyConnectedNode(bn.result_image, m["fc_w"]).result_image, loss_descriptor())
    with pytest.raises(TypeError, match="training style GPU updates through the data source"):
        float32_graph(device, loss.training_graph()[0].result_image, False)
    bn.training_style = "none"
    assert float32_graph(device, loss.training_graph()[0].result_image, False).number_of_filters == 7


@pytest.mark.parametrize("cls", [mpsx.CNNBatchNormalizationNode, mpsx.CNNBatchNormalizationGradientNode])
def test_uninitialized_objects_raise(cls):
    assert_uninitialized_raise(cls, ("result_image", "training_style", "data_source", "flags"), only_those_it_has=True)

"""CNNConvolutionTransposeNode in NNGraph: a transpose convolution restoring the size of a strided
convolution (through its convolution_gradient_state) trained against PyTorch autograd and SGD,
properties and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import Handle, assert_uninitialized_raise, float32_graph, one_hot_labels

N, C, SIZE, CLASSES, LR, STEPS = 2, 4, 6, 3, 0.1, 3


def model(device, rng, style="gpu"):
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR)
    p = dict(s_w=(rng.standard_normal((C, 3, 3, C)) * 0.3).astype(np.float32),
             s_b=(rng.standard_normal(C) * 0.1).astype(np.float32),
             t_w=(rng.standard_normal((C, 3, 3, C)) * 0.3).astype(np.float32),
             t_b=(rng.standard_normal(C) * 0.1).astype(np.float32),
             f_w=(rng.standard_normal((CLASSES, SIZE, SIZE, C)) * 0.1).astype(np.float32),
             f_b=(rng.standard_normal(CLASSES) * 0.1).astype(np.float32))
    ws = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, C, C, 2, 2), p["s_w"], p["s_b"], optimizer=sgd)
    wt = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, C, C, 2, 2), p["t_w"], p["t_b"], optimizer=sgd)
    wf = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(SIZE, SIZE, C, CLASSES), p["f_w"], p["f_b"],
                                 optimizer=sgd)
    source = mpsx.NNImageNode(Handle("x"))
    stem = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, 0.0))
    conv = mpsx.CNNConvolutionNode(stem.result_image, ws)
    relu = mpsx.CNNNeuronNode(conv.result_image, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    transpose = mpsx.CNNConvolutionTransposeNode(relu.result_image, conv.convolution_gradient_state, wt)
    transpose.training_style = style
    fc = mpsx.CNNFullyConnectedNode(transpose.result_image, wf)
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    d.reduce_across_batch = True
    loss = mpsx.CNNLossNode(fc.result_image, d)
    loss.input_labels.handle = Handle("labels")
    return dict(loss=loss, transpose=transpose, conv=conv, relu=relu, weights=dict(s=ws, t=wt, f=wf)), p


def torch_transpose(h, w, b):
    """MPS's transpose undoing a 3x3 stride 2 same convolution of a 6x6 image: the conv's data gradient
    with the transpose's OHWI weights rotated, i.e. conv_transpose2d(padding 1, output_padding 1) with
    weight[i, o, y, x] = w[o, 2 - y, 2 - x, i]."""
    return F.conv_transpose2d(h, w.flip(1, 2).permute(3, 0, 1, 2), b, stride=2, padding=1, output_padding=1)


def test_transpose_restores_a_strided_convolution_and_trains_as_pytorch(device):
    rng = np.random.default_rng(11)
    m, p = model(device, rng)
    x = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    labels = one_hot_labels(rng, N, CLASSES)
    seen = []
    termini = m["loss"].training_graph(node_handler=lambda *a: seen.append(a))
    assert [type(a[0]).__name__ for a in seen] == [
        "CNNFullyConnectedGradientNode", "CNNConvolutionTransposeGradientNode", "CNNNeuronGradientNode",
        "CNNConvolutionGradientNode", "CNNNeuronGradientNode"]
    termini[0].result_image.synchronize_resource = True
    m["transpose"].result_image.export_from_graph = True
    m["transpose"].result_image.synchronize_resource = True
    graph = float32_graph(device, termini[0].result_image, True)
    dxs, restored = [], []
    for _ in range(STEPS):
        cb = device.command_queue.command_buffer()
        dx, (u,) = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)],
                                      [mpsx.CNNLossLabels(device, labels)], intermediate_images=True)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        dxs.append(dx)
        restored.append(u)

    params = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    optimizer = torch.optim.SGD(list(params.values()), lr=LR)
    target = torch.tensor(labels.reshape(N, -1).argmax(1))
    for step in range(STEPS):
        optimizer.zero_grad()
        xt = torch.tensor(x, requires_grad=True)
        h = torch.relu(F.conv2d(xt, params["s_w"].permute(0, 3, 1, 2), params["s_b"], stride=2, padding=1))
        u = torch_transpose(h, params["t_w"], params["t_b"])
        assert u.shape == (N, C, SIZE, SIZE)
        logits = u.permute(0, 2, 3, 1).reshape(N, -1) @ params["f_w"].reshape(CLASSES, -1).T + params["f_b"]
        F.cross_entropy(logits, target).backward()
        if step == 0:
            np.testing.assert_allclose(restored[0].to_numpy(), u.detach().numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(dxs[0].to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)
        optimizer.step()
    for key, weights in m["weights"].items():
        np.testing.assert_allclose(weights.weights(), params[key + "_w"].detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(weights.bias_terms(), params[key + "_b"].detach().numpy(), rtol=1e-4, atol=1e-5)


def test_training_style_none_leaves_the_transpose_weights(device):
    rng = np.random.default_rng(12)
    m, p = model(device, rng, style="none")
    x = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    labels = np.zeros((N, CLASSES, 1, 1), np.float32)
    labels[:, 0] = 1
    graph = float32_graph(device, m["loss"].training_graph()[0].result_image, False)
    cb = device.command_queue.command_buffer()
    graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], [mpsx.CNNLossLabels(device, labels)])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    np.testing.assert_array_equal(m["weights"]["t"].weights(), p["t_w"])
    assert not np.allclose(m["weights"]["s"].weights(), p["s_w"])


def test_properties_and_defaults(device):
    rng = np.random.default_rng(13)
    m, _ = model(device, rng)
    t = m["transpose"]
    assert t.weights is m["weights"]["t"]
    assert t.training_style == mpsx.NNTrainingStyle.GPU and t.accumulator_precision == mpsx.NNConvolutionAccumulatorPrecisionOption.FLOAT
    assert t.source_states == [m["conv"].result_state]
    assert isinstance(t.result_state, mpsx.CNNConvolutionTransposeGradientStateNode)
    assert isinstance(t.result_state, mpsx.CNNConvolutionGradientStateNode)
    t.training_style = "cpu"
    t.accumulator_precision = "half"
    g = mpsx.NNImageNode()
    gradient = t.gradient_filter_with_source(g)
    assert isinstance(gradient, mpsx.CNNConvolutionTransposeGradientNode)
    assert gradient.training_style == mpsx.NNTrainingStyle.CPU
    assert gradient.source_images == [g, m["relu"].result_image] and gradient.source_states == [t.result_state]
    direct = mpsx.CNNConvolutionTransposeGradientNode(g, m["relu"].result_image, t.result_state)
    assert direct.training_style == mpsx.NNTrainingStyle.GPU
    # Without a convolution state: the padding policy sizes the result from the source alone.
    ws = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 2, 2, 2, 2),
                                 np.zeros((2, 3, 3, 2), np.float32), np.ones(2, np.float32))
    free = mpsx.CNNConvolutionTransposeNode(mpsx.NNImageNode(Handle("x")), None, ws)
    assert free.source_states == []
    free.result_image.synchronize_resource = True
    graph = float32_graph(device, free.result_image)
    cb = device.command_queue.command_buffer()
    y = graph.encode(cb, [mpsx.Image.from_numpy(device, np.ones((1, 2, 3, 3), np.float32))])
    cb.commit()
    cb.wait_until_completed()
    assert y.to_numpy().shape == (1, 2, 5, 5)  # (3 - 1) * 2 + 1 pixels, same size: zero weights, bias 1
    np.testing.assert_array_equal(y.to_numpy(), np.ones((1, 2, 5, 5), np.float32))


def test_bad_input(device):
    rng = np.random.default_rng(14)
    m, _ = model(device, rng)
    x = mpsx.NNImageNode()
    w = m["weights"]["t"]
    with pytest.raises(TypeError, match="expected a CNNConvolutionGradientStateNode or None, given int"):
        mpsx.CNNConvolutionTransposeNode(x, 3, w)
    with pytest.raises(TypeError, match=r"expected the CNNConvolutionGradientStateNode of a convolution node \(or "
                                        r"None\), given MPSNNGradientStateNode"):
        mpsx.CNNConvolutionTransposeNode(x, m["relu"].result_state, w)
    with pytest.raises(TypeError):
        mpsx.CNNConvolutionTransposeNode(x, None, None)
    with pytest.raises(TypeError, match="source: expected an NNImageNode"):
        mpsx.CNNConvolutionTransposeNode(None, None, w)
    with pytest.raises(TypeError, match="expected a CNNConvolutionTransposeGradientStateNode, given "
                                        "MPSCNNConvolutionGradientStateNode"):
        mpsx.CNNConvolutionTransposeGradientNode(x, x, m["conv"].result_state)
    with pytest.raises(TypeError, match="expected a convolution gradient state node, given "
                                        "MPSCNNConvolutionTransposeGradientStateNode"):
        mpsx.CNNConvolutionGradientNode(x, x, m["transpose"].result_state)
    with pytest.raises(ValueError, match="accumulator_precision must be"):
        m["transpose"].accumulator_precision = "double"


@pytest.mark.parametrize("cls", [mpsx.CNNConvolutionTransposeNode, mpsx.CNNConvolutionTransposeGradientNode,
                                 mpsx.CNNConvolutionTransposeGradientStateNode])
def test_uninitialized_objects_raise(cls):
    assert_uninitialized_raise(cls, ("result_image", "training_style", "accumulator_precision", "handle"),
                               only_those_it_has=True)

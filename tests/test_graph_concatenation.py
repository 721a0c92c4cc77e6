"""NNConcatenationNode in NNGraph: channels of the sources one after the other (each starting at a
multiple of 4), its gradient nodes slicing the gradient, a concatenation of two branches followed by a
convolution trained against PyTorch autograd and SGD, properties and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import Handle, assert_uninitialized_raise, float32_graph, one_hot_labels

N, C, SIZE, CLASSES, LR, STEPS = 2, 4, 5, 3, 0.1, 3


def run(device, graph, by_label, batch=False, **kwargs):
    cb = device.command_queue.command_buffer()
    make = mpsx.ImageBatch.from_numpy if batch else mpsx.Image.from_numpy
    out = graph.encode_batch(cb, [make(device, by_label[h.label]) for h in graph.source_image_handles],
                             **kwargs) if batch else \
        graph.encode(cb, [make(device, by_label[h.label]) for h in graph.source_image_handles], **kwargs)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return out


@pytest.mark.parametrize("channels", [(4, 8), (3, 5, 4), (1,), (2, 2)])
def test_inference_pads_each_source_to_four_channels(device, rng, channels):
    arrays = [rng.standard_normal((2, c, 3, 4)).astype(np.float32) for c in channels]
    nodes = [mpsx.NNImageNode(Handle(str(i))) for i in range(len(channels))]
    cat = mpsx.NNConcatenationNode(nodes)
    cat.result_image.synchronize_resource = True
    y = run(device, float32_graph(device, cat.result_image), {str(i): a for i, a in enumerate(arrays)}).to_numpy()
    expected = np.concatenate([np.pad(a, ((0, 0), (0, -a.shape[1] % 4), (0, 0), (0, 0))) for a in arrays], axis=1)
    np.testing.assert_array_equal(y, expected)


def test_gradient_nodes_slice_the_gradient(device, rng):
    a, b = mpsx.NNImageNode(Handle("a")), mpsx.NNImageNode(Handle("b"))
    cat = mpsx.NNConcatenationNode([a, b])
    g = mpsx.NNImageNode(Handle("g"))
    ga, gb = cat.gradient_filters_with_source(g)
    assert isinstance(ga, mpsx.NNConcatenationGradientNode) and (ga.source_index, gb.source_index) == (0, 1)
    assert ga.source_images == [g, a] and gb.source_images == [g, b] and ga.source_states == [cat.result_state]
    ga.result_image.synchronize_resource = True
    gb.result_image.synchronize_resource = True
    gb.result_image.export_from_graph = True
    graph = float32_graph(device, result_images=[ga.result_image, gb.result_image])
    xa, xb = rng.standard_normal((2, 3, 3, 4)).astype(np.float32), rng.standard_normal((2, 6, 3, 4)).astype(
        np.float32)
    dy = rng.standard_normal((2, 12, 3, 4)).astype(np.float32)
    da, (db,) = run(device, graph, {"a": xa, "b": xb, "g": dy}, intermediate_images=True)
    np.testing.assert_array_equal(da.to_numpy(), dy[:, 0:3])
    np.testing.assert_array_equal(db.to_numpy(), dy[:, 4:10])


def conv_weights(rng, cin, cout, optimizer):
    w = (rng.standard_normal((cout, 3, 3, cin)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
    return mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, cin, cout), w, b, optimizer=optimizer), w, b


@pytest.mark.parametrize("branch_channels", [4, 3])
def test_two_branches_concatenated_then_convolved_train_as_pytorch(device, branch_channels):
    """x -> conv_a -> relu -> a; x -> conv_b -> b; concat(a, b) -> conv_c -> fully connected -> softmax
    cross entropy. With 3 channels in b the concatenation has a zero channel that conv_c reads."""
    rng = np.random.default_rng(5)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR)
    cb_ = branch_channels
    cat_channels = 4 + 4
    wa, pa_w, pa_b = conv_weights(rng, C, 4, sgd)
    wb, pb_w, pb_b = conv_weights(rng, C, cb_, sgd)
    wc, pc_w, pc_b = conv_weights(rng, cat_channels, C, sgd)
    fc_w = (rng.standard_normal((CLASSES, SIZE, SIZE, C)) * 0.1).astype(np.float32)
    fc_b = (rng.standard_normal(CLASSES) * 0.1).astype(np.float32)
    wf = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(SIZE, SIZE, C, CLASSES), fc_w, fc_b, optimizer=sgd)
    x = rng.standard_normal((N, C, SIZE, SIZE)).astype(np.float32)
    labels = one_hot_labels(rng, N, CLASSES)

    source = mpsx.NNImageNode(Handle("x"))
    stem = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, 0.0))
    a = mpsx.CNNNeuronNode(mpsx.CNNConvolutionNode(stem.result_image, wa).result_image,
                           mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    b = mpsx.CNNConvolutionNode(stem.result_image, wb)
    cat = mpsx.NNConcatenationNode([a.result_image, b.result_image])
    conv_c = mpsx.CNNConvolutionNode(cat.result_image, wc)
    fc = mpsx.CNNFullyConnectedNode(conv_c.result_image, wf)
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    d.reduce_across_batch = True
    loss = mpsx.CNNLossNode(fc.result_image, d)
    loss.input_labels.handle = Handle("labels")
    termini = loss.training_graph()
    assert len(termini) == 1 and isinstance(termini[0], mpsx.CNNNeuronGradientNode)
    termini[0].result_image.synchronize_resource = True
    graph = float32_graph(device, termini[0].result_image, True)
    dxs = [run(device, graph, {"x": x}, batch=True, source_states=[mpsx.CNNLossLabels(device, labels)])
           for _ in range(STEPS)]

    params = {k: torch.tensor(v, requires_grad=True)
              for k, v in dict(a_w=pa_w, a_b=pa_b, b_w=pb_w, b_b=pb_b, c_w=pc_w, c_b=pc_b, f_w=fc_w,
                               f_b=fc_b).items()}
    optimizer = torch.optim.SGD(list(params.values()), lr=LR)
    conv = lambda t, k: F.conv2d(t, params[k + "_w"].permute(0, 3, 1, 2), params[k + "_b"], padding=1)
    target = torch.tensor(labels.reshape(N, -1).argmax(1))
    for step in range(STEPS):
        optimizer.zero_grad()
        xt = torch.tensor(x, requires_grad=True)
        parts = [torch.relu(conv(xt, "a")), conv(xt, "b")]
        if cb_ % 4:
            parts.append(torch.zeros(N, 4 - cb_ % 4, SIZE, SIZE))
        h = conv(torch.cat(parts, 1), "c")
        logits = h.permute(0, 2, 3, 1).reshape(N, -1) @ params["f_w"].reshape(CLASSES, -1).T + params["f_b"]
        F.cross_entropy(logits, target).backward()
        optimizer.step()
        if step == 0:
            np.testing.assert_allclose(dxs[0].to_numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)
    for weights, key in ((wa, "a"), (wb, "b"), (wc, "c"), (wf, "f")):
        np.testing.assert_allclose(weights.weights(), params[key + "_w"].detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(weights.bias_terms(), params[key + "_b"].detach().numpy(), rtol=1e-4, atol=1e-5)


def test_one_image_concatenated_twice_gets_both_gradients(device, rng):
    x = mpsx.NNImageNode(Handle("x"))
    ident = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 2.0, 0.0))
    cat = mpsx.NNConcatenationNode([ident.result_image, ident.result_image])
    g = mpsx.NNImageNode(Handle("g"))
    termini = cat.training_graph(source_gradient=g)
    assert len(termini) == 1 and isinstance(termini[0], mpsx.CNNNeuronGradientNode)
    termini[0].result_image.synchronize_resource = True
    graph = float32_graph(device, termini[0].result_image)
    xv = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 8, 3, 3)).astype(np.float32)
    dx = run(device, graph, {"x": xv, "g": dy}).to_numpy()
    np.testing.assert_allclose(dx, 2 * (dy[:, :4] + dy[:, 4:]), rtol=1e-6)


def test_bad_input(device, rng):
    a, b = mpsx.NNImageNode(Handle("a")), mpsx.NNImageNode(Handle("b"))
    with pytest.raises(ValueError, match="at least one source image"):
        mpsx.NNConcatenationNode([])
    with pytest.raises(TypeError, match="expected a list of NNImageNodes, given NNImageNode"):
        mpsx.NNConcatenationNode(a)
    with pytest.raises(TypeError, match="sources: expected an NNImageNode, given int"):
        mpsx.NNConcatenationNode([a, 1])
    cat = mpsx.NNConcatenationNode([a, b])
    g = mpsx.NNImageNode()
    with pytest.raises(TypeError, match="one gradient node per source"):
        cat.gradient_filter_with_source(g)
    with pytest.raises(ValueError, match="source_image is not a source of the concatenation"):
        mpsx.NNConcatenationGradientNode(g, g, cat.result_state)
    assert mpsx.NNConcatenationGradientNode(g, b, cat.result_state).source_index == 1
    relu = mpsx.CNNNeuronNode(a, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    with pytest.raises(TypeError, match="expected the result state of an MPSNNConcatenationNode, given the result "
                                        "state of an MPSCNNNeuronNode"):
        mpsx.NNConcatenationGradientNode(g, a, relu.result_state)
    graph = float32_graph(device, cat.result_image)
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError, match=r"source 1 is 1x4x3x2 \(NxCxHxW\)"):
        graph.encode(cb, [mpsx.Image.from_numpy(device, np.zeros((1, 4, 2, 3), np.float32)),
                          mpsx.Image.from_numpy(device, np.zeros((1, 4, 3, 2), np.float32))])
    # A gradient that is not shaped as the concatenation's result.
    ga = cat.gradient_filters_with_source(g)[0]
    graph = float32_graph(device, ga.result_image)
    arrays = {"a": np.zeros((1, 4, 2, 2), np.float32), "b": np.zeros((1, 4, 2, 2), np.float32),
              None: np.zeros((1, 4, 2, 2), np.float32)}
    with pytest.raises(mpsx.ShapeError, match="shaped as the concatenation's result, 1x8x2x2"):
        graph.encode(cb, [mpsx.Image.from_numpy(device, arrays[h.label if h else None])
                          for h in graph.source_image_handles])


@pytest.mark.parametrize("cls", [mpsx.NNConcatenationNode, mpsx.NNConcatenationGradientNode])
def test_uninitialized_objects_raise(cls):
    assert_uninitialized_raise(cls, ("result_image", "source_index", "source_images"), only_those_it_has=True)

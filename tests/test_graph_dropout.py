"""CNNDropoutNode and CNNDropoutGradientNode: the gradient is the mask the
forward pass applied (read from the forward result) scaled by 1 /
keep_probability, as PyTorch autograd computes through that mask; a
convolution trained through a dropout node against PyTorch SGD; defaults,
properties and bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import Handle, assert_uninitialized_raise, float32_graph, run_results

N, C_IN, C, SIZE, CLASSES, LR, STEPS = 3, 2, 4, 4, 3, 0.3, 3


def nonzero(rng, shape):
    """Values away from 0, so a zero in the forward result marks a dropped element."""
    x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)
    return x.astype(np.float32)


@pytest.mark.parametrize("keep, stride", [(0.6, (1, 1, 1)), (0.3, (1, 1, 1)), (0.5, (0, 0, 1)), (0.5, (1, 0, 0)),
                                          (1.0, (1, 1, 1))])
def test_gradient_is_the_forward_mask_over_keep_probability(device, rng, keep, stride):
    x = nonzero(rng, (2, 5, 6, 7))
    dy = rng.standard_normal(x.shape).astype(np.float32)
    source, g = mpsx.NNImageNode(Handle("x")), mpsx.NNImageNode(Handle("dy"))
    node = mpsx.CNNDropoutNode(source, keep, 11, stride)
    gradient = node.gradient_filter_with_source(g)
    y, dx = run_results(device, [node.result_image, gradient.result_image], dict(x=x, dy=dy))
    mask = y != 0  # what the forward pass kept, read from its result
    np.testing.assert_allclose(y[mask], x[mask] / np.float32(keep), rtol=1e-6)
    # A mask per image, broadcast where the mask stride is 0 (x, y, channels).
    assert (mask[0] != mask[1]).any() or keep == 1.0
    for axis, s in zip((3, 2, 1), stride):
        if s == 0:
            np.testing.assert_array_equal(mask, np.take(mask, [0], axis=axis).repeat(mask.shape[axis], axis))
    if keep == 1.0:
        assert mask.all()
    else:
        kept = mask[0].mean() if stride == (1, 1, 1) else None
        if kept is not None:
            assert abs(kept - keep) < 0.15, kept
    # PyTorch autograd through the same mask.
    xt = torch.tensor(x, requires_grad=True)
    (xt * torch.tensor(mask, dtype=torch.float32) / keep).backward(torch.tensor(dy))
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(dx[~mask], 0)


def test_the_same_seed_gives_the_same_mask_in_one_graph(device, rng):
    """Two dropout nodes with one seed over one source drop the same elements; another seed others."""
    x = nonzero(rng, (1, 4, 8, 8))
    source = mpsx.NNImageNode(Handle("x"))
    a, b = mpsx.CNNDropoutNode(source, 0.5, 3), mpsx.CNNDropoutNode(source, 0.5, 3)
    c = mpsx.CNNDropoutNode(source, 0.5, 4)
    ya, yb, yc = run_results(device, [a.result_image, b.result_image, c.result_image], dict(x=x))
    np.testing.assert_array_equal(ya != 0, yb != 0)
    assert ((ya != 0) != (yc != 0)).any()


def test_each_graph_encode_draws_new_masks(device, rng):
    """A graph's dropout node draws its masks as a CNNDropout kernel does: encode k of the graph gives the masks
    of a kernel's encode k with the same seed (so a new mask per image and per step)."""
    x = nonzero(rng, (3, 4, 6, 6))
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.CNNDropoutNode(source, 0.4, 17)
    node.result_image.synchronize_resource = True
    graph = float32_graph(device, result_images=[node.result_image])
    kernel = mpsx.CNNDropout(device, 0.4, 17)
    images = mpsx.ImageBatch.from_numpy(device, x)
    masks = []
    for _ in range(3):
        cb = device.command_queue.command_buffer()
        y = graph.encode_batch(cb, [images])
        expected, state = kernel.encode_batch(cb, images, destination_states=True)
        expected.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        masks.append(y.to_numpy() != 0)
        np.testing.assert_array_equal(masks[-1], expected.to_numpy() != 0)
    assert (masks[0] != masks[1]).any() and (masks[1] != masks[2]).any()


def test_convolution_trains_through_dropout_as_pytorch(device, rng):
    """conv 3x3 -> dropout -> fully connected -> softmax cross entropy; each step's mask is read from the
    dropout result the graph exports, and torch applies it."""
    keep = 0.7
    conv_w = (rng.standard_normal((C, 3, 3, C_IN)) * 0.5).astype(np.float32)
    conv_b = (rng.standard_normal(C) * 0.1).astype(np.float32)
    fc_w = (rng.standard_normal((CLASSES, SIZE, SIZE, C)) * 0.3).astype(np.float32)
    fc_b = (rng.standard_normal(CLASSES) * 0.1).astype(np.float32)
    x = rng.standard_normal((N, C_IN, SIZE, SIZE)).astype(np.float32)
    target = rng.integers(0, CLASSES, N)
    labels = np.zeros((N, CLASSES, 1, 1), np.float32)
    labels[np.arange(N), target] = 1

    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR)
    conv_weights = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, C_IN, C), conv_w, conv_b, optimizer=sgd)
    fc_weights = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(SIZE, SIZE, C, CLASSES), fc_w, fc_b,
                                         optimizer=sgd)
    conv = mpsx.CNNConvolutionNode(mpsx.NNImageNode(Handle("x")), conv_weights)
    dropout = mpsx.CNNDropoutNode(conv.result_image, keep, 5)
    fc = mpsx.CNNFullyConnectedNode(dropout.result_image, fc_weights)
    descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    descriptor.reduce_across_batch = True
    loss = mpsx.CNNLossNode(fc.result_image, descriptor)
    termini = loss.training_graph()
    dropout.result_image.synchronize_resource = True
    graph = float32_graph(device, result_images=[termini[0].result_image, dropout.result_image],
                         results_are_needed=[False, True])

    tw = torch.tensor(conv_w).permute(0, 3, 1, 2).contiguous().requires_grad_()
    tb = torch.tensor(conv_b, requires_grad=True)
    fw = torch.tensor(fc_w).reshape(CLASSES, -1).requires_grad_()
    fb = torch.tensor(fc_b, requires_grad=True)
    optimizer = torch.optim.SGD([tw, tb, fw, fb], lr=LR)
    images = mpsx.ImageBatch.from_numpy(device, x)
    for _ in range(STEPS):
        cb = device.command_queue.command_buffer()
        result, (dropped,) = graph.encode_batch(cb, [images], [mpsx.CNNLossLabels(device, labels)],
                                                intermediate_images=True)
        assert result is None
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        mask = torch.tensor(dropped.to_numpy() != 0, dtype=torch.float32)
        assert 0 < mask.mean() < 1
        optimizer.zero_grad()
        h = F.conv2d(torch.tensor(x), tw, tb, padding=1) * mask / keep
        logits = h.permute(0, 2, 3, 1).reshape(N, -1) @ fw.T + fb
        F.cross_entropy(logits, torch.tensor(target)).backward()
        optimizer.step()
    np.testing.assert_allclose(conv_weights.weights(), tw.detach().permute(0, 2, 3, 1).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(conv_weights.bias_terms(), tb.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fc_weights.weights(), fw.detach().reshape(fc_w.shape).numpy(), rtol=1e-4, atol=1e-5)


def test_defaults_and_properties(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    node = mpsx.CNNDropoutNode(source)
    assert (node.keep_probability, node.seed, node.mask_stride_in_pixels) == (0.5, 0, (1, 1, 1))
    node = mpsx.CNNDropoutNode.node_with_source(source, 0.25)
    assert (node.keep_probability, node.seed, node.mask_stride_in_pixels) == (0.25, 0, (1, 1, 1))
    node = mpsx.CNNDropoutNode(source, 0.75, 2**64 - 1, (0, 1, 0))
    assert (node.keep_probability, node.seed, node.mask_stride_in_pixels) == (0.75, 2**64 - 1, (0, 1, 0))
    assert isinstance(node.result_state, mpsx.NNGradientStateNode)
    gradient = node.gradient_filter_with_source(g)
    assert type(gradient) is mpsx.CNNDropoutGradientNode
    assert (gradient.keep_probability, gradient.seed, gradient.mask_stride_in_pixels) == (0.75, 2**64 - 1, (0, 1, 0))
    assert gradient.source_images == [g, source]
    assert gradient.source_states == [node.result_state]
    by_hand = mpsx.CNNDropoutGradientNode(g, source, node.result_state, 0.75, 9, (0, 1, 0))
    assert by_hand.seed == 9  # kept, unused: the mask comes from the state


def test_bad_input(device):
    source, g = mpsx.NNImageNode(), mpsx.NNImageNode()
    node = mpsx.CNNDropoutNode(source, 0.5, 1)
    softmax = mpsx.CNNSoftMaxNode(source)
    for keep in (0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="keep_probability must be in"):
            mpsx.CNNDropoutNode(source, keep)
    with pytest.raises(TypeError, match="keep_probability must be a float"):
        mpsx.CNNDropoutNode(source, "0.5")
    with pytest.raises(ValueError, match=r"mask_stride_in_pixels.y must be 0 or 1, given 2"):
        mpsx.CNNDropoutNode(source, 0.5, 0, (1, 2, 1))
    with pytest.raises(ValueError, match="mask_stride_in_pixels must be"):
        mpsx.CNNDropoutNode(source, 0.5, 0, (1, 1))
    with pytest.raises(TypeError, match="seed must be an int"):
        mpsx.CNNDropoutNode(source, 0.5, 1.5)
    with pytest.raises(ValueError, match="seed must be between"):
        mpsx.CNNDropoutNode(source, 0.5, -1)
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        mpsx.CNNDropoutNode(None)
    with pytest.raises(ValueError, match="the MPSCNNDropoutNode of the state has keep_probability 0.5"):
        mpsx.CNNDropoutGradientNode(g, source, node.result_state, 0.25, 1, (1, 1, 1))
    with pytest.raises(ValueError, match=r"mask_stride_in_pixels \(1, 1, 1\); given .* \(0, 1, 1\)"):
        mpsx.CNNDropoutGradientNode(g, source, node.result_state, 0.5, 1, (0, 1, 1))
    with pytest.raises(TypeError, match="expected the result state of an MPSCNNDropoutNode, given the result state of "
                                        "an MPSCNNSoftMaxNode"):
        mpsx.CNNDropoutGradientNode(g, source, softmax.result_state, 0.5, 1, (1, 1, 1))
    with pytest.raises(ValueError, match="source_image must be the source image of the MPSCNNDropoutNode"):
        mpsx.CNNDropoutGradientNode(g, node.result_image, node.result_state, 0.5, 1, (1, 1, 1))
    with pytest.raises(TypeError, match="no gradients of gradients"):
        node.gradient_filter_with_source(g).gradient_filter_with_source(g)


@pytest.mark.parametrize("cls", [mpsx.CNNDropoutNode, mpsx.CNNDropoutGradientNode])
def test_uninitialized_objects_raise(device, cls):
    assert_uninitialized_raise(cls,
                               ("result_image", "keep_probability", "seed", "mask_stride_in_pixels", "source_images"))

"""The reference CNN trained through an NNGraph made with
training_graph: its losses over 5 steps equal those of the hand-encoded
model (benchmarks/reference_cnn.py) and of PyTorch, from the same weights,
whether the graph updates the weights (styles GPU and CPU) or exports the
gradient states for updates encoded by hand (style NONE)."""

import functools

import numpy as np
import pytest
import torch

import mpsx
from mpsx.benchmarks.reference_cnn import (GraphReferenceCNN, HostSGD, ReferenceCNN, TorchReferenceCNN,
                                           random_batch)
from helpers import float32_graph

BATCH, STEPS, LR, MOMENTUM = 8, 5, 0.001, 0.9


@pytest.mark.parametrize("style", ["gpu", "cpu", "none"])
def test_reference_cnn_through_the_graph_matches_hand_encoded_and_pytorch(device, style):
    hand = ReferenceCNN(device, BATCH, learning_rate=LR, momentum=MOMENTUM)
    torch_model = TorchReferenceCNN(hand.initial_parameters, learning_rate=LR, momentum=MOMENTUM)
    model = GraphReferenceCNN(device, BATCH, learning_rate=LR, momentum=MOMENTUM,
                              data_source=functools.partial(HostSGD, learning_rate=LR, momentum=MOMENTUM) if style == "cpu" else None, style=style)
    assert [h.label for h in model.graph.source_image_handles] == ["images"]
    assert [h.label for h in model.graph.source_state_handles] == ["labels"]
    images, labels = random_batch(BATCH)
    graph_losses, hand_losses, torch_losses = [], [], []
    for _ in range(STEPS):
        model.train_step(images, labels)
        graph_losses.append(model.loss())
        hand.train_step(images, labels)
        hand_losses.append(hand.loss())
        torch_losses.append(torch_model.train_step(images, labels).item())
    np.testing.assert_allclose(graph_losses, hand_losses, rtol=1e-4)
    np.testing.assert_allclose(graph_losses, torch_losses, rtol=1e-4)
    assert graph_losses[-1] < graph_losses[0]


@pytest.mark.parametrize("style", ["gpu", "none"])
def test_a_recorded_graph_step_replays_as_the_hand_encoded_one(device, style):
    images, labels = random_batch(4)
    hand, model = ReferenceCNN(device, 4), GraphReferenceCNN(device, 4, style=style)
    hand.record_step()
    model.record_step()
    hand_losses, graph_losses = [], []
    for _ in range(3):
        hand.replay_step(images, labels)
        model.replay_step(images, labels)
        hand_losses.append(hand.loss())
        graph_losses.append(model.loss())
    np.testing.assert_allclose(graph_losses, hand_losses, rtol=1e-4)


def test_style_none_trains_nothing_in_the_graph_and_exports_the_gradient_states(device):
    model = GraphReferenceCNN(device, 2, style="none")
    labels = [h.label for h in model.graph.result_state_handles]
    assert labels == ["conv0", "bn0", "conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "fc"]
    # Every forward and gradient node but the neurons, fused into the
    # normalizations: 4 x (convolution, normalization) + 2 pooling + fully
    # connected + loss, and their 11 gradient nodes (the first convolution's
    # kept, though its result is not needed, for the state it fills).
    assert (model.graph.number_of_filters, model.graph.number_of_fused_filters) == (23, 8)
    images, labels = random_batch(2)
    cb = device.command_queue.command_buffer()
    loss_labels = mpsx.CNNLossLabels(device, labels)
    model.inputs[0].write(images)
    # The graph alone, no hand updates: the states hold gradients, the weights are unchanged.
    result, states = model.graph.encode_batch(cb, [model.inputs[0]], [loss_labels], destination_states=True)
    assert result is None
    assert [type(s) for s in states] == [mpsx.CNNConvolutionGradientState, mpsx.CNNBatchNormalizationState] * 4 + \
        [mpsx.CNNConvolutionGradientState]
    for state in states:
        state.synchronize(cb)
    exported = states[0].convolution.export_weights_and_biases(cb)
    exported.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    assert isinstance(states[-1].convolution, mpsx.CNNFullyConnected)
    assert np.abs(states[0].gradient_for_weights.to_numpy()).max() > 0
    np.testing.assert_array_equal(exported.weights.to_numpy().reshape(model.initial_parameters["conv0.weight"].shape),
                                  model.initial_parameters["conv0.weight"])


def test_style_none_bad_arguments(device):
    with pytest.raises(ValueError, match=r"style must be 'gpu', 'cpu' or 'none', given 'host'"):
        GraphReferenceCNN(device, 2, style="host")
    with pytest.raises(ValueError, match="style 'none' updates the weights by hand"):
        GraphReferenceCNN(device, 2, style="none", data_source=HostSGD)


# Training style NONE as MPS means it: the graph exports the gradient states
# and the caller updates the graph's kernels on the command buffer; the tests
# below are that flow on one convolution, against PyTorch SGD.

N, C_IN, C_OUT, SIZE, TINY_LR = 2, 3, 4, 5, 0.1


def tiny_none_graph(device, result_image_is_needed):
    """conv 3x3 (style NONE, its state exported) -> mean squared error against zeros."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((C_OUT, 3, 3, C_IN)) * 0.3).astype(np.float32)
    b = (rng.standard_normal(C_OUT) * 0.1).astype(np.float32)
    x = rng.standard_normal((N, C_IN, SIZE, SIZE)).astype(np.float32)
    conv = mpsx.CNNConvolutionNode(mpsx.NNImageNode(mpsx.NNHandle("x")),
                                   mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, C_IN, C_OUT), w, b))
    conv.training_style = "none"
    conv.convolution_gradient_state.export_from_graph = True
    descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.MEAN)
    descriptor.reduce_across_batch = True  # the mean over the batch, as PyTorch's
    loss = mpsx.CNNLossNode(conv.result_image, descriptor)
    loss.input_labels.handle = mpsx.NNHandle("labels")
    graph = float32_graph(device, loss.training_graph()[0].result_image, result_image_is_needed)
    return graph, w, b, x


def torch_sgd_weights(w, b, x, steps):
    """The weights after `steps` plain SGD steps of the same model in PyTorch (float64)."""
    wt = torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2).contiguous().requires_grad_()
    bt = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.SGD([wt, bt], lr=TINY_LR)
    for _ in range(steps):
        optimizer.zero_grad()
        y = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64), wt, bt, padding=1)
        (y ** 2).mean().backward()
        optimizer.step()
    return wt.detach().permute(0, 2, 3, 1).numpy(), bt.detach().numpy()


def labels_for(device):
    return mpsx.CNNLossLabels(device, np.zeros((N, C_OUT, SIZE, SIZE), np.float32))


def test_exported_states_keep_the_gradient_nodes_that_fill_them(device):
    graph, w, b, x = tiny_none_graph(device, result_image_is_needed=False)
    weights = mpsx.CNNConvolutionWeightsAndBiasesState(device, w, b)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=TINY_LR)
    cb = device.command_queue.command_buffer()
    _, states = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], [labels_for(device)],
                                   destination_states=True)
    sgd.encode(cb, convolution_gradient_state=states[0], convolution_source_state=weights, result_state=weights)
    weights.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    expected_w, expected_b = torch_sgd_weights(w, b, x, 1)
    np.testing.assert_allclose(weights.weights.to_numpy().reshape(w.shape), expected_w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(weights.biases.to_numpy(), expected_b, rtol=1e-4, atol=1e-6)


def test_exported_states_lead_to_the_graph_kernels_for_updates_on_the_command_buffer(device):
    graph, w, b, x = tiny_none_graph(device, result_image_is_needed=True)
    weights = mpsx.CNNConvolutionWeightsAndBiasesState(device, w, b)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=TINY_LR)
    cb = device.command_queue.command_buffer(replayable=True)
    _, states = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], [labels_for(device)],
                                   destination_states=True)
    assert isinstance(states[0], mpsx.CNNConvolutionGradientState), type(states[0])
    sgd.encode(cb, convolution_gradient_state=states[0], convolution_source_state=weights, result_state=weights)
    states[0].convolution.reload_weights_and_biases(cb, weights)
    weights.synchronize(cb)
    cb.commit()
    for _ in range(2):
        cb.wait_until_completed()
        cb.replay()
    cb.wait_until_completed()
    expected_w, expected_b = torch_sgd_weights(w, b, x, 3)
    np.testing.assert_allclose(weights.weights.to_numpy().reshape(w.shape), expected_w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(weights.biases.to_numpy(), expected_b, rtol=1e-4, atol=1e-6)


def test_steps_encoded_on_one_command_buffer_match_steps_on_their_own(device):
    """A graph's updates run beside the rest of its backward pass (on cuda, on a stream of their own); the next
    step encoded on the same command buffer still reads the weights they wrote: its first convolution reads
    those the previous step's last update wrote."""
    images, labels = random_batch(4)
    together, apart = GraphReferenceCNN(device, 4), GraphReferenceCNN(device, 4)
    together.inputs[0].write(images)
    cb = device.command_queue.command_buffer()
    loss_labels = [mpsx.CNNLossLabels(device, labels) for _ in range(3)]
    for step_labels in loss_labels:
        together.graph.encode_batch(cb, [together.inputs[0]], [step_labels])
        step_labels.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    expected = []
    for _ in loss_labels:
        apart.train_step(images, labels)
        expected.append(apart.loss())
    np.testing.assert_allclose([float(l.loss_image().to_numpy()[0, 0, 0, 0]) for l in loss_labels], expected,
                               rtol=1e-6)
    assert expected[-1] != expected[0]
    trained, reference = together.state_dict(), apart.state_dict()
    for name, source in reference.items():
        arrays = ("weights", "bias_terms") if isinstance(source, mpsx.ConvolutionWeights) else \
            ("gamma", "beta", "mean", "variance")
        for array in arrays:
            np.testing.assert_allclose(getattr(trained[name], array)(), getattr(source, array)(), rtol=1e-6,
                                       atol=1e-7, err_msg=f"{name}.{array}")

"""MPSNNInitialGradientNode: training_graph from an arbitrary output, whose
gradient is ones (the gradient of the output's sum), against PyTorch."""

import numpy as np
import pytest
import torch

import mpsx
from helpers import Handle, float32_graph


def test_ones_shaped_as_the_source(device, rng):
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    seed = mpsx.NNInitialGradientNode(mpsx.NNImageNode(Handle("x")))
    seed.result_image.synchronize_resource = True
    graph = float32_graph(device, seed.result_image)
    cb = device.command_queue.command_buffer()
    ones = graph.encode(cb, [mpsx.Image.from_numpy(device, x)])
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(ones.to_numpy(), np.ones_like(x))


def test_training_graph_from_an_output_gives_the_gradient_of_its_sum(device, rng):
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    source = mpsx.NNImageNode(Handle("x"))
    sigmoid = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.SIGMOID))
    pool = mpsx.CNNPoolingAverageNode(sigmoid.result_image, 2)
    seed = mpsx.NNInitialGradientNode(pool.result_image)
    termini = seed.training_graph()
    assert [type(t).__name__ for t in termini] == ["CNNNeuronGradientNode"]
    dx = termini[0].result_image
    dx.synchronize_resource = True
    graph = float32_graph(device, dx)
    assert [h.label for h in graph.source_image_handles] == ["x"]
    cb = device.command_queue.command_buffer()
    result = graph.encode(cb, [mpsx.Image.from_numpy(device, x)])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.avg_pool2d(torch.sigmoid(xt), 2).sum().backward()
    np.testing.assert_allclose(result.to_numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_bad_input(device):
    with pytest.raises(TypeError, match="expected an NNImageNode"):
        mpsx.NNInitialGradientNode(None)
    seed = mpsx.NNInitialGradientNode(mpsx.NNImageNode())
    with pytest.raises(TypeError, match="MPSNNInitialGradientNode has no gradient filter"):
        seed.gradient_filter_with_source(mpsx.NNImageNode())
    obj = mpsx.NNInitialGradientNode.__new__(mpsx.NNInitialGradientNode)
    with pytest.raises(TypeError):
        obj.result_image

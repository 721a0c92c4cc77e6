"""Graphs of any depth: a chain of 200,000 filters, its training graph and a
compiled graph are built, encoded and freed without recursion over the depth
(a recursion that deep overflows the stack: a crash, so each runs in a
process of its own)."""

from helpers import run_isolated

DEPTH = 200_000


def test_a_deep_chain_trains_compiles_and_frees(device):
    """200,000 ReLU nodes: training_graph makes 200,000 gradient nodes (each holding its forward node), an
    NNGraph of the chain compiles and encodes relu(x), and dropping the last references from Python frees
    every node, down to the source image's handle."""
    out = run_isolated(device, f"""
        import gc, weakref
        import numpy as np
        first = mpsx.NNHandle("x")
        first_freed = weakref.ref(first)
        image = mpsx.NNImageNode(first)
        del first
        relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
        for _ in range({DEPTH}):
            image = mpsx.CNNNeuronNode(image, relu).result_image
        (terminus,) = image.producer.training_graph()
        assert type(terminus) is mpsx.CNNNeuronGradientNode
        graph = mpsx.NNGraph(device, image, format=mpsx.DataType.FLOAT32)
        assert graph.number_of_filters == {DEPTH}
        x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(1, 2, 2, 2)
        cb = device.command_queue.command_buffer()
        y = graph.encode(cb, [mpsx.Image.from_numpy(device, x)])
        y.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_array_equal(y.to_numpy(), np.maximum(x, 0))
        del image, terminus, y
        assert first_freed() is not None  # the graph holds the chain
        del graph
        gc.collect()
        print(first_freed() is None)
    """, timeout=120)
    assert out.split() == ["True"]

"""Host writes into memory a committed command buffer still reads or writes raise SynchronizationError, so that a
command buffer never computes on an input changed halfway (a torn image); before commit and after completion they
are accepted."""

import numpy as np
import pytest

import mpsx
from helpers import Handle, float32_graph
from test_convolution import reference_forward
from test_signals import long_convolutions

IN_FLIGHT = "read or written by a command buffer that was committed and has not completed"


def relu(device):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))


def test_writes_into_images_a_running_command_buffer_uses_are_refused(device, rng):
    for trial in range(3):
        cb, weights, x, source, destination = long_convolutions(device, rng, seconds=0.5)
        assert cb.status == "committed"
        with pytest.raises(mpsx.SynchronizationError, match=f"the image is {IN_FLIGHT}; call wait_until_completed"):
            source.write(np.zeros_like(x))  # read by every convolution
        with pytest.raises(mpsx.SynchronizationError, match=IN_FLIGHT):
            destination.write(np.zeros(destination.shape, np.float32))  # written by them
        cb.wait_until_completed()
        # The command buffer computed on the image as committed, never on a torn one.
        np.testing.assert_allclose(destination.to_numpy(), reference_forward(x, weights, None).numpy(),
                                   rtol=1e-3, atol=1e-3)
        np.testing.assert_array_equal(source.to_numpy(), x)
        # Once it completed, writes go through.
        source.write(np.ones_like(x))
        np.testing.assert_array_equal(source.to_numpy(), np.ones_like(x))


def test_writes_into_other_memory_go_on_while_a_command_buffer_runs(device, rng):
    cb, *_ = long_convolutions(device, rng, seconds=0.5)
    other = mpsx.Image.from_numpy(device, np.zeros((1, 3, 2, 2), np.float32))
    y = rng.standard_normal((1, 3, 2, 2)).astype(np.float32)
    other.write(y)
    assert cb.status == "committed"
    np.testing.assert_array_equal(other.to_numpy(), y)
    cb.wait_until_completed()


def test_a_write_before_commit_is_what_the_command_buffer_reads(device, rng):
    # MPS: the host may write memory until the command buffer that uses it is committed.
    source = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 3, 3)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    result = relu(device).encode(cb, source)
    result.synchronize(cb)
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    source.write(x)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(result.to_numpy(), np.maximum(x, 0))


def test_a_view_of_a_batch_counts_as_its_whole_allocation(device, rng):
    # A batch is one allocation, tracked whole: writing image 0 is refused while image 1 is read.
    x = rng.standard_normal((16, 32, 64, 64)).astype(np.float32)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    cb = long_convolutions(device, rng, seconds=0.5)[0]  # runs first on the queue
    second = device.command_queue.command_buffer()
    relu(device).encode_batch(second, batch[1:2])
    second.commit()
    with pytest.raises(mpsx.SynchronizationError, match=IN_FLIGHT):
        batch[0].write(np.zeros((32, 64, 64), np.float32))
    with pytest.raises(mpsx.SynchronizationError, match=IN_FLIGHT):
        batch.write(np.zeros_like(x))
    second.wait_until_completed()
    assert cb.status == "completed"
    batch[0].write(np.zeros((32, 64, 64), np.float32))
    np.testing.assert_array_equal(batch.to_numpy()[1:], x[1:])


def test_vector_writes_wait_for_the_optimizer_update_that_uses_them(device, rng):
    values = mpsx.Vector.from_numpy(device, rng.standard_normal(8).astype(np.float32))
    gradient = mpsx.Vector.from_numpy(device, rng.standard_normal(8).astype(np.float32))
    start, g = values.to_numpy(), gradient.to_numpy()
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    # Once first: on cuda a kernel's first launch loads its module, which waits for the device to be idle.
    warm_up = device.command_queue.command_buffer()
    scratch = mpsx.Vector.from_numpy(device, start)
    sgd.encode(warm_up, gradient, scratch, None, scratch)
    warm_up.commit()
    warm_up.wait_until_completed()
    long_convolutions(device, rng, seconds=0.5)  # queued first: the update waits behind it
    cb = device.command_queue.command_buffer()
    sgd.encode(cb, gradient, values, None, values)
    values.synchronize(cb)
    cb.commit()
    for vector, name in ((gradient, "gradient"), (values, "values")):
        with pytest.raises(mpsx.SynchronizationError, match=f"the vector is {IN_FLIGHT}"):
            vector.write(np.zeros(8, np.float32))
    cb.wait_until_completed()
    np.testing.assert_allclose(values.to_numpy(), start - 0.5 * g, rtol=1e-6)
    gradient.write(np.zeros(8, np.float32))


def test_writes_are_refused_during_a_replay_and_accepted_between_replays(device, rng):
    x = rng.standard_normal((16, 32, 64, 64)).astype(np.float32)
    source = mpsx.ImageBatch.from_numpy(device, x)
    cb = device.command_queue.command_buffer(replayable=True)
    result = relu(device).encode_batch(cb, source)
    result.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    cb.replay()  # on cuda the first replay captures a graph, which waits for the device to be idle
    cb.wait_until_completed()
    for run in range(2):
        y = rng.standard_normal(x.shape).astype(np.float32)
        source.write(y)  # between replays
        long_convolutions(device, rng, seconds=0.3)  # the replay waits behind it on the queue
        cb.replay()
        with pytest.raises(mpsx.SynchronizationError, match=IN_FLIGHT):
            source.write(x)
        cb.wait_until_completed()
        np.testing.assert_array_equal(result.to_numpy(), np.maximum(y, 0))


def test_graph_sources_are_tracked(device, rng):
    source = mpsx.NNImageNode(Handle("x"))
    node = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    node.result_image.synchronize_resource = True
    graph = float32_graph(device, node.result_image)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    long_convolutions(device, rng, seconds=0.3)
    cb = device.command_queue.command_buffer()
    y = graph.encode(cb, [image])
    cb.commit()
    with pytest.raises(mpsx.SynchronizationError, match=IN_FLIGHT):
        image.write(np.zeros_like(x))
    cb.wait_until_completed()
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(x, 0))


def test_a_refused_encode_leaves_its_images_writable(device, rng):
    # The gather of a list of images is taken back with the refused encode, and so is its use of them.
    images = [mpsx.Image.from_numpy(device, rng.standard_normal((1, 3, 4, 4)).astype(np.float32)) for _ in range(2)]
    four = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(1, 1, 4, 4),
                                                                np.ones((4, 1, 1, 4), np.float32)))
    long_convolutions(device, rng, seconds=0.5)
    cb = device.command_queue.command_buffer()
    with pytest.raises(mpsx.ShapeError):
        four.encode_batch(cb, images[::-1])
    cb.commit()
    assert cb.status == "committed"
    images[0].write(np.zeros((3, 4, 4), np.float32))
    cb.wait_until_completed()

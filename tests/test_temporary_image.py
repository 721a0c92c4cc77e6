"""MPSTemporaryImage as MPSImage.h states it: an image for one command buffer's kernels, read as many times as its
readCount allows (1 at first; each encode that reads it lowers it), never read or written by the host; refusals
raise before anything is enqueued."""

import numpy as np
import pytest

import mpsx


def descriptor(n=1, c=2, h=3, w=4):
    return mpsx.ImageDescriptor(width=w, height=h, feature_channels=c, number_of_images=n)


def linear(device, a):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, a, 0.0))


def relu(device):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))


def filled(device, cb, x, a=1.0, read_count=1):
    """A temporary image of a * x, written by a kernel on `cb`, that `read_count` encodes may read."""
    temporary = mpsx.TemporaryImage(cb, descriptor(*x.shape))
    temporary.read_count = read_count
    linear(device, a).encode(cb, mpsx.Image.from_numpy(device, x), temporary)
    return temporary


def run(cb, image):
    image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    return image.to_numpy()


def test_a_temporary_image_carries_one_kernel_result_to_the_next(device):
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    temporary = mpsx.TemporaryImage(cb, descriptor())
    assert temporary.read_count == 1
    linear(device, -2.0).encode(cb, mpsx.Image.from_numpy(device, x), temporary)
    assert temporary.read_count == 1  # a write leaves the count
    out = relu(device).encode(cb, temporary)
    assert temporary.read_count == 0
    np.testing.assert_allclose(run(cb, out), np.maximum(-2.0 * x, 0.0), rtol=1e-6)


def test_the_read_count_allows_that_many_reads(device):
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 4)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    temporary = mpsx.TemporaryImage.temporary_image_with_command_buffer(cb, descriptor())
    temporary.read_count = 2
    linear(device, 3.0).encode(cb, mpsx.Image.from_numpy(device, x), temporary)
    first = relu(device).encode(cb, temporary)
    assert temporary.read_count == 1
    # Binary kernels read both their sources: the same image twice counts two reads.
    second = linear(device, 1.0).encode(cb, temporary)
    assert temporary.read_count == 0
    second.synchronize(cb)
    np.testing.assert_allclose(run(cb, first), np.maximum(3.0 * x, 0.0), rtol=1e-6)
    np.testing.assert_allclose(second.to_numpy(), 3.0 * x, rtol=1e-6)


def test_a_read_at_a_count_of_zero_raises_and_enqueues_nothing(device):
    x = np.ones((1, 2, 3, 4), np.float32)
    cb = device.command_queue.command_buffer()
    temporary = filled(device, cb, x, 2.0)
    out = relu(device).encode(cb, temporary)
    destination = mpsx.Image.from_numpy(device, np.full((1, 2, 3, 4), 7.0, np.float32))
    with pytest.raises(mpsx.StateError, match="MPSCNNNeuron: this temporary MPSTemporaryImage has a read_count of 0"):
        relu(device).encode(cb, temporary, destination)
    # Nor may it be written at 0.
    with pytest.raises(mpsx.StateError, match="read_count of 0"):
        relu(device).encode(cb, destination, temporary)
    np.testing.assert_array_equal(run(cb, out), 2.0 * x)
    np.testing.assert_array_equal(destination.to_numpy(), 7.0)  # the refused encode wrote nothing


def test_a_temporary_image_is_refused_on_another_command_buffer(device):
    queue = device.command_queue
    cb, other = queue.command_buffer(), queue.command_buffer()
    temporary = mpsx.TemporaryImage(cb, descriptor())
    with pytest.raises(mpsx.StateError, match="made for another command buffer"):
        relu(device).encode(other, temporary)
    with pytest.raises(mpsx.StateError, match="made for another command buffer"):
        relu(device).encode(other, mpsx.Image(device, descriptor()), temporary)
    assert temporary.read_count == 1


def test_the_host_never_reads_or_writes_a_temporary_image(device):
    cb = device.command_queue.command_buffer()
    temporary = mpsx.TemporaryImage(cb, descriptor())
    with pytest.raises(mpsx.SynchronizationError, match="MPSTemporaryImage"):
        temporary.to_numpy()
    with pytest.raises(mpsx.SynchronizationError, match="MPSTemporaryImage"):
        temporary.write(np.zeros((1, 2, 3, 4), np.float32))
    with pytest.raises(mpsx.SynchronizationError, match="MPSTemporaryImage"):
        temporary.__dlpack__()


def test_read_count_settings(device):
    cb = device.command_queue.command_buffer()
    temporary = mpsx.TemporaryImage(cb, descriptor())
    with pytest.raises(ValueError, match="read_count"):
        temporary.read_count = -1
    with pytest.raises(TypeError, match="read_count"):
        temporary.read_count = "2"
    temporary.read_count = 0  # MPS: setting 0 returns the storage
    with pytest.raises(mpsx.StateError, match="readCount once it is zero"):
        temporary.read_count = 1
    with pytest.raises(mpsx.StateError, match="read_count of 0"):
        relu(device).encode(cb, temporary)


def test_a_batch_gathered_from_temporary_images_reads_each(device):
    rng = np.random.default_rng(2)
    x = [rng.standard_normal((1, 2, 3, 4)).astype(np.float32) for _ in range(2)]
    cb = device.command_queue.command_buffer()
    temporaries = [mpsx.TemporaryImage(cb, descriptor()) for _ in x]
    for t, v in zip(temporaries, x):
        linear(device, 2.0).encode(cb, mpsx.Image.from_numpy(device, v), t)
    temporaries[1].read_count = 2
    out = relu(device).encode_batch(cb, temporaries)
    assert [t.read_count for t in temporaries] == [0, 1]
    out.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(out.to_numpy(), np.maximum(2.0 * np.concatenate(x), 0.0), rtol=1e-6)
    with pytest.raises(mpsx.StateError):
        relu(device).encode_batch(device.command_queue.command_buffer(), temporaries)


def test_a_gradient_encode_reads_its_temporary_sources(device):
    x = np.random.default_rng(3).standard_normal((1, 2, 3, 4)).astype(np.float32)
    dy = np.random.default_rng(4).standard_normal((1, 2, 3, 4)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    source = mpsx.TemporaryImage(cb, descriptor())
    source_gradient = mpsx.TemporaryImage(cb, descriptor())
    source.read_count = 2  # the forward relu and its gradient read it
    linear(device, 1.0).encode(cb, mpsx.Image.from_numpy(device, x), source)
    linear(device, 1.0).encode(cb, mpsx.Image.from_numpy(device, dy), source_gradient)
    forward = relu(device)
    _, state = forward.encode(cb, source, destination_state=True)
    gradient = mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    dx = gradient.encode(cb, source_gradient, source, state)
    assert (source.read_count, source_gradient.read_count) == (0, 0)
    np.testing.assert_allclose(run(cb, dx), dy * (x > 0), rtol=1e-6)


def test_factory_arguments_are_checked(device):
    cb = device.command_queue.command_buffer()
    with pytest.raises(TypeError):
        mpsx.TemporaryImage(device, descriptor())
    with pytest.raises(TypeError):
        mpsx.TemporaryImage(cb, None)
    with pytest.raises(TypeError, match="item 1"):
        mpsx.TemporaryImage.prefetch_storage_with_command_buffer(cb, [descriptor(), 3])
    mpsx.TemporaryImage.prefetch_storage_with_command_buffer(cb, [descriptor()])
    cb.commit()
    with pytest.raises(mpsx.MPSXError):
        mpsx.TemporaryImage(cb, descriptor())


def test_a_temporary_image_made_without_init_raises():
    image = mpsx.TemporaryImage.__new__(mpsx.TemporaryImage)
    with pytest.raises(TypeError):
        image.read_count


def test_a_binary_kernel_reads_each_of_its_sources(device):
    x = np.random.default_rng(5).standard_normal((1, 2, 3, 4)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    temporary = filled(device, cb, x, 1.0, read_count=2)
    out = mpsx.CNNAdd(device).encode(cb, temporary, temporary)
    assert temporary.read_count == 0
    np.testing.assert_allclose(run(cb, out), 2.0 * x, rtol=1e-6)


def test_a_batch_reads_each_distinct_temporary_image_once(device):
    x = np.random.default_rng(6).standard_normal((1, 2, 3, 4)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    temporary = filled(device, cb, x, 1.0, read_count=2)
    out = relu(device).encode_batch(cb, [temporary, temporary])
    assert temporary.read_count == 1
    out.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(out.to_numpy(), np.maximum(np.concatenate([x, x]), 0.0), rtol=1e-6)


def test_a_graph_reads_its_temporary_source_image(device):
    x = np.random.default_rng(7).standard_normal((1, 2, 3, 4)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    temporary = filled(device, cb, x, -1.0)
    source = mpsx.NNImageNode()
    node = mpsx.CNNNeuronNode(source, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    graph = mpsx.NNGraph(device, node.result_image)
    out = graph.encode(cb, [temporary])
    assert temporary.read_count == 0
    with pytest.raises(mpsx.StateError, match="read_count of 0"):
        graph.encode(cb, [temporary])
    # The graph's result is float16, MPS's default format for graph images.
    np.testing.assert_allclose(run(cb, out), np.maximum(-x, 0.0), rtol=1e-3, atol=1e-3)


def test_temporary_images_are_not_made_from_host_arrays(device):
    with pytest.raises(TypeError, match="never written by the host"):
        mpsx.TemporaryImage.from_numpy(device, np.zeros((1, 1, 2, 2), np.float32))
    with pytest.raises(TypeError, match="never imports a tensor"):
        mpsx.TemporaryImage.from_dlpack(device, np.zeros((1, 1, 2, 2), np.float32))


def linear_shift(device, b, temporary_results):
    kernel = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, b))
    if temporary_results:
        kernel.destination_image_allocator = mpsx.TemporaryImage.default_allocator()
    return kernel


@pytest.mark.parametrize("continued", [False, True])
def test_a_read_out_temporary_image_gives_its_storage_to_the_next(device, continued):
    # MPSImage.h: when the readCount reaches 0, "the underlying texture is automatically made available for reuse to
    # MPS for its own needs and for other MPSTemporaryImages prior to return from the -encode.. function". A chain of
    # 40 kernels through temporary results then holds two images' storage, not 40, and computes the same; across
    # commit_and_continue too. Each step adds its own index, so a reused storage read after its reuse would show.
    shape = (2, 8, 32, 32)  # 64 KiB each
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    source = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    device.reset_peak_bytes_in_use()
    before = device.bytes_in_use
    y = source
    for i in range(40):
        y = linear_shift(device, float(i), True).encode(cb, y)
        if continued and i == 20:
            cb.commit_and_continue()
    out = linear_shift(device, 0.5, False).encode(cb, y)
    del y
    grown = device.peak_bytes_in_use - before
    np.testing.assert_allclose(run(cb, out), x + sum(range(40)) + 0.5, rtol=1e-5)
    assert grown <= 3 * x.nbytes, grown  # two temporaries in turn and the result


def test_a_temporary_image_read_twice_keeps_its_storage_until_its_last_read(device):
    x = np.random.default_rng(3).standard_normal((1, 2, 3, 4)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    twice = filled(device, cb, x, 2.0, read_count=2)
    first = linear_shift(device, 1.0, True).encode(cb, twice)  # may not take twice's storage: it is read again
    second = linear_shift(device, 0.0, False).encode(cb, twice)
    third = linear_shift(device, 3.0, False).encode(cb, first)
    second.synchronize(cb)
    np.testing.assert_allclose(run(cb, third), 2.0 * x + 4.0, rtol=1e-6)
    np.testing.assert_allclose(second.to_numpy(), 2.0 * x, rtol=1e-6)

"""Image allocators (MPSImageAllocator): MPS's two defaults, allocators of one's own on kernels (forward, binary,
gradient), graphs' results and image nodes, batches, and what a bad allocator gets."""

import numpy as np
import pytest

import mpsx
from helpers import Handle, float32_graph


def neuron(device, kind=mpsx.NeuronType.RELU, a=0.0, b=0.0):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(kind, a, b))


class Pool(mpsx.ImageAllocator):
    """Hands out images it made and keeps, recording each call."""

    def __init__(self, batch_method=False):
        self.calls, self.made = [], []
        if batch_method:
            self.image_batch_for_command_buffer = self._batch

    def image_for_command_buffer(self, command_buffer, image_descriptor, kernel):
        self.calls.append(("image", image_descriptor.number_of_images, type(kernel).__name__))
        image = mpsx.ImageBatch(command_buffer.device, image_descriptor) if image_descriptor.number_of_images > 1 \
            else mpsx.Image(command_buffer.device, image_descriptor)
        self.made.append(image)
        return image

    def _batch(self, command_buffer, image_descriptor, kernel, count):
        self.calls.append(("batch", count, image_descriptor.number_of_images))
        d = mpsx.ImageDescriptor(image_descriptor.channel_format, image_descriptor.width, image_descriptor.height,
                                 image_descriptor.feature_channels, count)
        batch = mpsx.ImageBatch(command_buffer.device, d)
        self.made.append(batch)
        return batch


def test_the_default_allocators(device):
    images, temporaries = mpsx.Image.default_allocator(), mpsx.TemporaryImage.default_allocator()
    assert images == mpsx.Image.default_allocator() and images != temporaries
    assert len({images, temporaries, mpsx.Image.default_allocator()}) == 2
    cb = device.command_queue.command_buffer()
    d = mpsx.ImageDescriptor(mpsx.DataType.FLOAT16, 5, 4, 3, 1)
    kernel = neuron(device)
    image = images.image_for_command_buffer(cb, d, kernel)
    assert type(image) is mpsx.Image and (image.width, image.height, image.feature_channels) == (5, 4, 3)
    assert image.data_type == mpsx.DataType.FLOAT16
    temporary = temporaries.image_for_command_buffer(cb, d, kernel)
    assert isinstance(temporary, mpsx.TemporaryImage) and temporary.read_count == 1
    batch = images.image_batch_for_command_buffer(cb, d, kernel, 3)
    assert isinstance(batch, mpsx.ImageBatch) and len(batch) == 3
    with pytest.raises(ValueError):
        images.image_batch_for_command_buffer(cb, d, kernel, 0)
    with pytest.raises(NotImplementedError):
        mpsx.ImageAllocator().image_for_command_buffer(cb, d, kernel)


def test_kernels_make_destinations_with_their_allocator(device, rng):
    x = rng.standard_normal((1, 4, 3, 5)).astype(np.float32)
    relu = neuron(device)
    assert relu.destination_image_allocator == mpsx.Image.default_allocator()
    pool = Pool()
    relu.destination_image_allocator = pool
    assert relu.destination_image_allocator is pool
    cb = device.command_queue.command_buffer()
    y = relu.encode(cb, mpsx.Image.from_numpy(device, x))
    (made,) = pool.made
    made.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert pool.calls == [("image", 1, "CNNNeuron")]
    np.testing.assert_array_equal(made.to_numpy(), np.maximum(x, 0))  # the allocator's image was written
    np.testing.assert_array_equal(y.to_numpy(), made.to_numpy())
    # A temporary destination: read once by the next kernel on the same command buffer, never by the host.
    relu.destination_image_allocator = mpsx.TemporaryImage.default_allocator()
    cb = device.command_queue.command_buffer()
    t = relu.encode(cb, mpsx.Image.from_numpy(device, x))
    assert isinstance(t, mpsx.TemporaryImage)
    z = neuron(device, mpsx.NeuronType.LINEAR, 2.0).encode(cb, t)
    z.synchronize(cb)
    with pytest.raises(mpsx.StateError):
        neuron(device).encode(cb, t)  # its one read was taken
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(z.to_numpy(), 2 * np.maximum(x, 0))
    relu.destination_image_allocator = None
    assert relu.destination_image_allocator == mpsx.Image.default_allocator()


def test_binary_gradient_and_batch_encodes_use_the_allocator(device, rng):
    a, b = (rng.standard_normal((3, 4, 2, 2)).astype(np.float32) for _ in range(2))
    add = mpsx.CNNAdd(device)
    pool = Pool(batch_method=True)
    add.destination_image_allocator = pool
    cb = device.command_queue.command_buffer()
    y = add.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, a), mpsx.ImageBatch.from_numpy(device, b))
    y.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert pool.calls == [("batch", 3, 1)]  # a batch asks image_batch_for_command_buffer, one image's descriptor
    np.testing.assert_allclose(y.to_numpy(), a + b, rtol=1e-6)
    relu, gradient = neuron(device), mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    gradient.destination_image_allocator = pool
    cb = device.command_queue.command_buffer()
    source = mpsx.ImageBatch.from_numpy(device, a)
    _, states = relu.encode_batch(cb, source, destination_states=True)
    dx = gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, b), source, states)
    dx.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert pool.calls[-1] == ("batch", 3, 1)
    np.testing.assert_array_equal(dx.to_numpy(), np.where(a > 0, b, 0))


def test_bad_allocators_raise_before_anything_is_encoded(device, rng):
    x = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 3, 3)).astype(np.float32))

    class Wrong(mpsx.ImageAllocator):
        def __init__(self, result):
            self.result = result

        def image_for_command_buffer(self, command_buffer, image_descriptor, kernel):
            if isinstance(self.result, Exception):
                raise self.result
            return self.result(command_buffer) if callable(self.result) else self.result

    wrong_size = lambda cb: mpsx.Image(cb.device, mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 3, 3, 4, 1))
    other_buffer = device.command_queue.command_buffer()
    foreign_temporary = lambda cb: mpsx.TemporaryImage(other_buffer, mpsx.ImageDescriptor(
        mpsx.DataType.FLOAT32, 3, 3, 2, 1))
    for result, error, match in [(KeyError("mine"), KeyError, "mine"), ("image", TypeError, "must return"),
                                 (wrong_size, mpsx.ShapeError, "expected 1x2x3x3"),
                                 (foreign_temporary, mpsx.StateError, "another command buffer")]:
        relu = neuron(device)
        relu.destination_image_allocator = Wrong(result)
        cb = device.command_queue.command_buffer()
        with pytest.raises(error, match=match):
            relu.encode(cb, x)
        assert cb.command_count == 0
    relu = neuron(device)
    for value in ("pool", 3, object()):
        with pytest.raises(TypeError, match="image allocator"):
            relu.destination_image_allocator = value
    assert relu.destination_image_allocator == mpsx.Image.default_allocator()


def chain(device):
    """x -> 2x -> relu -> +1, the first image node's allocator settable."""
    source = mpsx.NNImageNode(Handle("x"))
    double = mpsx.CNNNeuronLinearNode(source, 2.0, 0.0)
    relu = mpsx.CNNNeuronReLUNode(double.result_image)
    one = mpsx.CNNNeuronLinearNode(relu.result_image, 1.0, 1.0)
    return double.result_image, one.result_image


def test_graphs_take_node_and_destination_allocators(device, rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    intermediate, result = chain(device)
    assert intermediate.image_allocator == mpsx.TemporaryImage.default_allocator()
    node_pool, result_pool = Pool(), Pool()
    intermediate.image_allocator = node_pool
    graph = float32_graph(device, result)
    assert graph.destination_image_allocator == mpsx.Image.default_allocator()
    graph.destination_image_allocator = result_pool
    result.image_allocator = Pool()  # ignored for a result, as MPS says
    cb = device.command_queue.command_buffer()
    y = graph.encode(cb, [mpsx.ImageBatch.from_numpy(device, x)])
    (kept,) = node_pool.made
    kept.synchronize(cb)
    y.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert [c[0] for c in node_pool.calls] == ["image"] and len(result_pool.made) == 1
    assert not result.image_allocator.calls
    # The node's image keeps its values: the graph handed its storage to no later step.
    np.testing.assert_allclose(kept.to_numpy(), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(y.to_numpy(), np.maximum(2 * x, 0) + 1, rtol=1e-6)
    np.testing.assert_array_equal(result_pool.made[0].to_numpy(), y.to_numpy())
    intermediate.image_allocator = mpsx.TemporaryImage.default_allocator()  # the graph's own again
    intermediate.image_allocator = None
    assert intermediate.image_allocator == mpsx.TemporaryImage.default_allocator()
    graph.destination_image_allocator = mpsx.Image.default_allocator()
    z = None
    cb = device.command_queue.command_buffer()
    z = graph.encode(cb, [mpsx.ImageBatch.from_numpy(device, x)])
    z.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(z.to_numpy(), np.maximum(2 * x, 0) + 1, rtol=1e-6)
    with pytest.raises(TypeError, match="image allocator"):
        graph.destination_image_allocator = "default"


def test_pickling_saves_allocators_of_ones_own_and_refuses_mps_defaults():
    import pickle

    restored = pickle.loads(pickle.dumps(Pool()))
    assert type(restored) is Pool and restored.calls == [] and restored.made == []
    for default in (mpsx.Image.default_allocator(), mpsx.TemporaryImage.default_allocator()):
        with pytest.raises(mpsx.UnsavableError, match="mpsx.ImageAllocator, which mpsx cannot save"):
            pickle.dumps(default)

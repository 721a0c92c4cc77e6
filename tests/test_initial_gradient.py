"""NNInitialGradient: ones shaped as the source (whatever the source holds), with and without a destination,
batches, the geometry properties, and the graph node that runs it."""

import numpy as np
import pytest

import mpsx
from helpers import Handle, read, run_results


@pytest.mark.parametrize("data_type", [np.float32, np.float16])
def test_ones_shaped_as_the_source(device, rng, data_type):
    x = rng.standard_normal((2, 5, 3, 4)).astype(data_type)
    x[0, 1, 2, 3] = np.nan  # ones whatever the source holds (not 0 * x + 1)
    x[1, 0, 0, 0] = np.inf
    kernel = mpsx.NNInitialGradient(device)
    image = mpsx.Image.from_numpy(device, x)
    d = kernel.destination_image_descriptor(image)
    assert (d.number_of_images, d.feature_channels, d.height, d.width) == x.shape
    y = read(device, lambda cb: kernel.encode(cb, image))
    assert y.shape == x.shape
    np.testing.assert_array_equal(y, np.ones(x.shape))
    assert kernel.gradient_kernels() == []


def test_into_a_destination_with_geometry(device, rng):
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    kernel = mpsx.NNInitialGradient(device)
    destination = mpsx.Image.from_numpy(device, np.full((1, 8, 5, 5), 7.0, np.float32))
    kernel.offset = (1, 2)
    kernel.clip_rect = (1, 0, 0, 3, 2, 1)
    kernel.destination_feature_channel_offset = 4
    y = read(device, lambda cb: kernel.encode(cb, mpsx.Image.from_numpy(device, x), destination))
    expected = np.full((1, 8, 5, 5), 7.0, np.float32)
    expected[0, 4:8, 0:2, 1:4] = 1.0  # only what the region reads of the source
    np.testing.assert_array_equal(y, expected)


def test_batches(device, rng):
    x = rng.standard_normal((3, 2, 4, 5)).astype(np.float32)
    kernel = mpsx.NNInitialGradient(device)
    batch = mpsx.ImageBatch.from_numpy(device, x)
    y = read(device, lambda cb: kernel.encode_batch(cb, batch))
    np.testing.assert_array_equal(y, np.ones(x.shape))
    images = [mpsx.Image.from_numpy(device, x[i:i + 1]) for i in range(3)]
    y = read(device, lambda cb: kernel.encode_batch(cb, images))
    np.testing.assert_array_equal(y, np.ones(x.shape))


def test_the_graph_node_runs_the_kernel(device, rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    node = mpsx.NNInitialGradientNode(mpsx.NNImageNode(Handle("x")))
    (y,) = run_results(device, [node.result_image], dict(x=x))
    np.testing.assert_array_equal(y, np.ones(x.shape))


def test_bad_input(device, rng):
    kernel = mpsx.NNInitialGradient(device)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 3, 4, 4)).astype(np.float32))
    with pytest.raises(TypeError):
        mpsx.NNInitialGradient(None)
    cb = device.command_queue.command_buffer()
    with pytest.raises(TypeError):
        kernel.encode(cb, None)
    with pytest.raises(mpsx.ShapeError, match="at least 3 feature channels, given 2"):
        kernel.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=2)))
    kernel.offset = (2, 0)
    with pytest.raises(mpsx.ShapeError):  # the region would read past the source
        kernel.encode(cb, image, mpsx.Image(device, mpsx.ImageDescriptor(width=4, height=4, feature_channels=3)))
    kernel.offset = (0, 0)
    with pytest.raises(TypeError, match="float32 or float16"):
        kernel.encode(cb, image, mpsx.Image.from_numpy(device, np.zeros((1, 3, 4, 4), np.uint8)))
    assert cb.command_count == 0  # nothing of the failed calls was enqueued
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"


def test_made_without_init_raises(device):
    kernel = mpsx.NNInitialGradient.__new__(mpsx.NNInitialGradient)
    repr(kernel)
    with pytest.raises(TypeError):
        kernel.offset

"""MPSImage's members beyond reading and writing whole images (MPSImage.h): label, precision, pixelSize,
resourceSize, setPurgeableState:, parent, batchRepresentation, initWithParentImage:sliceRange:featureChannels:
and readBytes:/writeBytes: of a region, checked against numpy."""

import numpy as np
import pytest

import mpsx

HWC = mpsx.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS
CHW = mpsx.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH


def image(device, shape=(3, 6, 4, 5), dtype=np.float32, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return mpsx.Image.from_numpy(device, x), x


def test_label_is_a_str_or_none(device):
    im, _ = image(device)
    assert im.label is None
    im.label = "activations"
    assert im.label == "activations"
    im.label = None
    assert im.label is None
    with pytest.raises(TypeError, match="label: expected a str or None, given int"):
        im.label = 3


@pytest.mark.parametrize("dtype, bits, size", [(np.float32, 24, 4), (np.float16, 11, 2), (np.uint8, 8, 1)])
def test_precision_pixel_size_and_resource_size(device, dtype, bits, size):
    im, _ = image(device, (2, 6, 3, 5), dtype)
    assert im.precision == bits  # bits of precision, not of size (MPSImage.h)
    assert im.pixel_size == 6 * size
    assert im.resource_size() == 2 * 6 * 3 * 5 * size
    assert im.batch_representation().resource_size() == 0  # a sub-batch: .parent is not nil


def test_set_purgeable_state_keeps_the_values(device):
    im, x = image(device)
    for state in mpsx.PurgeableState:
        assert im.set_purgeable_state(state) is mpsx.PurgeableState.NON_VOLATILE
    np.testing.assert_array_equal(im.to_numpy(), x)  # EMPTY discarded nothing
    with pytest.raises(ValueError, match="PurgeableState"):
        im.set_purgeable_state(7)


def test_batch_representation_shares_the_storage(device):
    im, x = image(device)
    assert im.parent is None
    batch = im.batch_representation()
    assert isinstance(batch, mpsx.ImageBatch) and batch.parent is im and len(batch) == 3
    np.testing.assert_array_equal(batch.to_numpy(), x)
    sub = im.batch_representation_with_sub_range((1, 2))
    assert sub.parent is im
    np.testing.assert_array_equal(sub.to_numpy(), x[1:3])
    sub.write(np.zeros((2, 6, 4, 5), np.float32))  # writes to the child alter the parent (MPSImage.h)
    x[1:3] = 0
    np.testing.assert_array_equal(im.to_numpy(), x)
    assert sub[0].parent is sub and sub[1:].parent is sub


@pytest.mark.parametrize("sub_range, error", [((2, 2), ValueError), ((0, 0), ValueError), ((3, 1), ValueError),
                                              ((-1, 1), ValueError), ((0, 1, 2), ValueError), (3, TypeError)])
def test_bad_sub_ranges(device, sub_range, error):
    im, _ = image(device)
    with pytest.raises(error, match="sub_range"):
        im.batch_representation_with_sub_range(sub_range)


def test_batch_representation_of_a_temporary_image_reads_it(device):
    x = np.random.default_rng(2).standard_normal((2, 2, 3, 4)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    temporary = mpsx.TemporaryImage(cb, mpsx.ImageDescriptor(width=4, height=3, feature_channels=2,
                                                             number_of_images=2))
    neuron = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    neuron.encode(cb, mpsx.Image.from_numpy(device, x), temporary)
    out = neuron.encode_batch(cb, temporary.batch_representation_with_sub_range((1, 1)))
    assert temporary.read_count == 0  # the view's read counts against the original (docs/semantics.md)
    out.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(out.to_numpy(), np.maximum(x[1:], 0.0), rtol=1e-6)


@pytest.mark.parametrize("channels, slices", [(3, 1), (4, 1), (6, 2), (9, 3)])
def test_with_parent_image_takes_whole_images(device, channels, slices):
    im, x = image(device, (4, channels, 2, 3))
    sub = mpsx.Image.with_parent_image(im, (slices, 2 * slices), channels)
    assert sub.parent is im and sub.shape == (2, channels, 2, 3)
    np.testing.assert_array_equal(sub.to_numpy(), x[1:3])
    if slices > 1:  # part of an image
        with pytest.raises(ValueError, match=f"whole images of {slices} slices"):
            mpsx.Image.with_parent_image(im, (slices, 2 * slices + 1), channels)
        with pytest.raises(ValueError, match=f"whole images of {slices} slices"):
            mpsx.Image.with_parent_image(im, (1, slices), channels)
    with pytest.raises(ValueError, match=f"whole images of {slices} slices"):
        mpsx.Image.with_parent_image(im, (3 * slices, 2 * slices), channels)
    with pytest.raises(ValueError, match="channel-dense"):
        mpsx.Image.with_parent_image(im, (0, slices), channels + 1)
    with pytest.raises(TypeError):
        mpsx.Image.with_parent_image(x, (0, slices), channels)


def test_with_parent_image_takes_slices_within_one_image(device):
    # 10 channels: 3 slices an image; slices 4 and 5 are image 1's channels 4..9 (MPS infers 1 image).
    im, x = image(device, (3, 10, 2, 3))
    sub = mpsx.Image.with_parent_image(im, (4, 2), 6)
    assert sub.parent is im and sub.shape == (1, 6, 2, 3)
    np.testing.assert_array_equal(sub.to_numpy(), x[1:2, 4:10])
    np.testing.assert_array_equal(mpsx.Image.with_parent_image(im, (6, 1), 3).to_numpy(), x[2:3, 0:3])
    for bad in [((4, 2), 4),  # 4 channels take 1 slice: 2 images, of two images' channels
                ((5, 2), 6),  # past image 1's slices
                ((8, 1), 4)]:  # channels 8..11 of an image of 10
        with pytest.raises(ValueError, match="channel-dense"):
            mpsx.Image.with_parent_image(im, *bad)


def reference_layout(block, layout, bytes_per_row, bytes_per_image, size, bytes_per_column=None):
    """Scatters an (N, C, H, W) block into a byte buffer as MPSImage.h lays it out, in numpy; padding stays 0xAB."""
    n, c, h, w = block.shape
    column = bytes_per_column or (c * size if layout == HWC else size)
    per_image = bytes_per_image or (bytes_per_row * h * (1 if layout == HWC else c))
    raw = np.full((n - 1) * per_image + (c * bytes_per_row * h if layout == CHW else bytes_per_row * h) + 64, 0xAB,
                  np.uint8)
    values = raw.view(np.uint8)
    for i in range(n):
        for k in range(c):
            for y in range(h):
                for xx in range(w):
                    at = i * per_image + y * bytes_per_row + xx * column
                    at += k * size if layout == HWC else k * bytes_per_row * h
                    values[at:at + size] = np.frombuffer(block[i, k, y, xx].tobytes(), np.uint8)
    return raw


@pytest.mark.parametrize("layout", [HWC, CHW])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_read_bytes_of_a_region(device, layout, dtype):
    im, x = image(device, (4, 7, 5, 6), dtype, seed=3)
    size = np.dtype(dtype).itemsize
    x0, y0, z0, w, h, d, offset, channels, index = 1, 2, 1, 4, 3, 2, 2, 4, 1
    block = x[index + z0:index + z0 + d, offset:offset + channels, y0:y0 + h, x0:x0 + w]
    row = (w * channels * size if layout == HWC else w * size) + 3 * size  # padded rows
    per_image = (row * h * (1 if layout == HWC else channels)) + 5 * size
    expected = reference_layout(block, layout, row, per_image, size)
    out = np.full_like(expected, 0xAB)
    im.read_bytes(out, layout, row, ((x0, y0, z0), (w, h, d)), (offset, channels), index, bytes_per_image=per_image)
    np.testing.assert_array_equal(out, expected)  # the padding bytes are left alone
    # Without bytes_per_image, images follow each other without padding.
    expected = reference_layout(block, layout, row, None, size)
    out = bytearray(len(expected))
    out[:] = b"\xab" * len(expected)
    im.read_bytes(out, layout, row, ((x0, y0, z0), (w, h, d)), (offset, channels), index)
    np.testing.assert_array_equal(np.frombuffer(out, np.uint8), expected)


@pytest.mark.parametrize("layout", [HWC, CHW])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_write_bytes_into_a_region_keeps_the_rest(device, layout, dtype):
    im, x = image(device, (3, 5, 4, 6), dtype, seed=4)
    size = np.dtype(dtype).itemsize
    new = np.random.default_rng(5).standard_normal((2, 3, 2, 3)).astype(dtype)
    x0, y0, z0, offset, index = 2, 1, 0, 1, 1
    column = (3 * size if layout == HWC else size) + 2 * size
    row = 3 * column + size
    per_image = row * 2 * (1 if layout == HWC else 3) + 2 * size
    data = reference_layout(new, layout, row, per_image, size, column)
    im.write_bytes(data, layout, row, ((x0, y0, z0), (3, 2, 2)), (offset, 3), index, bytes_per_image=per_image,
                   bytes_per_column=column)
    x[index:index + 2, offset:offset + 3, y0:y0 + 2, x0:x0 + 3] = new
    np.testing.assert_array_equal(im.to_numpy(), x)
    # The forms without bytes_per_column or bytes_per_image.
    data = reference_layout(new[:1], layout, row, None, size)
    im.write_bytes(memoryview(data.tobytes()), layout, row, ((0, 0, 0), (3, 2, 1)), (0, 3), 0)
    x[0, 0:3, 0:2, 0:3] = new[0]
    np.testing.assert_array_equal(im.to_numpy(), x)


def test_write_bytes_into_an_image_of_a_batch(device):
    batch = mpsx.ImageBatch.from_numpy(device, np.zeros((3, 2, 2, 2), np.float32))
    item = batch[2]
    new = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    item.write_bytes(new, CHW, 2 * 4, ((0, 0, 0), (2, 2, 1)), (0, 2), 0)
    expected = np.zeros((3, 2, 2, 2), np.float32)
    expected[2] = new[0]
    np.testing.assert_array_equal(batch.to_numpy(), expected)


@pytest.mark.parametrize("change, error, match", [
    ({"region": ((1, 0, 0), (2, 1, 1))}, ValueError, "within the image"),
    ({"region": ((0, 0, 0), (1, 1, 3))}, ValueError, "within the image"),
    ({"image_index": 2}, ValueError, "within the image"),
    ({"feature_channel_info": (2, 2)}, ValueError, "within the image"),
    ({"feature_channel_info": (0, 0)}, ValueError, "at least 1 image, channel"),
    ({"region": ((0, -1, 0), (1, 1, 1))}, ValueError, "non-negative"),
    ({"region": (0, 0)}, TypeError, "region"),
    ({"data_layout": 2}, ValueError, "data_layout"),
    ({"bytes_per_row": 5}, ValueError, "bytes_per_row"),
    ({"bytes_per_row": 4}, ValueError, "bytes_per_row"),
    ({"bytes_per_image": 4}, ValueError, "bytes_per_image"),
    ({"data_bytes": bytearray(8)}, ValueError, "needs 40 bytes, given 8"),
    ({"data_bytes": bytes(64)}, TypeError, "writable"),
    ({"data_bytes": np.zeros((4, 4), np.float32)[:, ::2]}, TypeError, "C-contiguous"),
    ({"data_bytes": 3}, TypeError, "data_bytes"),
    ({"data_bytes": np.zeros(64, object)}, TypeError, "Python objects"),
])
def test_bad_read_bytes_arguments_change_nothing(device, change, error, match):
    im, x = image(device, (2, 3, 2, 2))
    arguments = dict(data_bytes=np.full(64, 7, np.float32), data_layout=HWC, bytes_per_row=32,
                     region=((0, 0, 0), (2, 2, 1)), feature_channel_info=(0, 1), image_index=0)
    arguments.update(change)
    with pytest.raises(error, match=match):
        im.read_bytes(**arguments)
    if "data_bytes" not in change:  # the buffer of 7s
        np.testing.assert_array_equal(arguments["data_bytes"], 7)
    write = {k: v for k, v in arguments.items() if not (k == "data_bytes" and isinstance(v, bytes))}
    write.setdefault("data_bytes", bytes(64))
    if match != "writable":
        with pytest.raises(error, match=match):
            im.write_bytes(**write)
    np.testing.assert_array_equal(im.to_numpy(), x)


def test_host_bytes_of_a_temporary_image_are_refused(device):
    cb = device.command_queue.command_buffer()
    temporary = mpsx.TemporaryImage(cb, mpsx.ImageDescriptor(width=2, height=2, feature_channels=1))
    with pytest.raises(mpsx.SynchronizationError):
        temporary.read_bytes(bytearray(16), HWC, 8, ((0, 0, 0), (2, 2, 1)), (0, 1), 0)
    with pytest.raises(mpsx.SynchronizationError):
        temporary.write_bytes(bytes(16), HWC, 8, ((0, 0, 0), (2, 2, 1)), (0, 1), 0)

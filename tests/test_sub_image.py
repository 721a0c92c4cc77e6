"""-[MPSImage subImageWithFeatureChannelRange:] as MPSImage.h states it: an image of a range of feature channels of
each of the original's images, sharing its storage (kernels read and write the channels in place); location and
length multiples of 4, a length too big reduced to fit; of a temporary image, a temporary image whose reads count
against the original. References are numpy slices and torch on the CPU."""

import numpy as np
import pytest
import torch

import mpsx


def images(rng, n=2, c=8, h=3, w=5):
    return rng.standard_normal((n, c, h, w)).astype(np.float32)


def linear(device, a, b=0.0):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, a, b))


def run(cb, *outputs):
    for out in outputs:
        out.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    return [out.to_numpy() for out in outputs]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_a_sub_image_is_the_channels_of_each_image(device, rng):
    x = images(rng)
    image = mpsx.Image.from_numpy(device, x)
    sub = image.sub_image_with_feature_channel_range((4, 4))
    assert (sub.number_of_images, sub.feature_channels, sub.height, sub.width) == (2, 4, 3, 5)
    assert sub.parent is image and sub.resource_size() == 0
    np.testing.assert_array_equal(sub.to_numpy(), x[:, 4:8])
    # Too long a length is reduced to fit (MPS).
    six = mpsx.Image.from_numpy(device, x[:, :6].copy())
    np.testing.assert_array_equal(six.sub_image_with_feature_channel_range((4, 8)).to_numpy(), x[:, 4:6])


def test_kernels_read_a_sub_image(device, rng):
    x = images(rng, c=12)
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    y = linear(device, 2.0, 1.0).encode(cb, image.sub_image_with_feature_channel_range((4, 4)))
    weights = rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 4, 3),
                                                                weights.transpose(0, 2, 3, 1), bias))
    conv.padding = mpsx.NNPaddingMethod.SIZE_SAME
    z = conv.encode(cb, image.sub_image_with_feature_channel_range((8, 4)))
    add = mpsx.CNNAdd(device).encode(cb, image.sub_image_with_feature_channel_range((0, 4)),
                                     image.sub_image_with_feature_channel_range((4, 4)))
    y, z, add = run(cb, y, z, add)
    np.testing.assert_allclose(y, 2.0 * x[:, 4:8] + 1.0, rtol=1e-6)
    reference = torch.nn.functional.conv2d(torch.from_numpy(x[:, 8:12]), torch.from_numpy(weights),
                                           torch.from_numpy(bias), padding=1).numpy()
    np.testing.assert_allclose(z, reference, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(add, x[:, 0:4] + x[:, 4:8], rtol=1e-6)


def test_kernels_write_into_a_sub_image_and_leave_the_other_channels(device, rng):
    x = images(rng, c=4)
    destination = mpsx.Image.from_numpy(device, np.full((2, 8, 3, 5), 7.0, np.float32))
    cb = device.command_queue.command_buffer()
    linear(device, -1.0).encode(cb, mpsx.Image.from_numpy(device, x),
                                destination.sub_image_with_feature_channel_range((4, 4)))
    (out,) = run(cb, destination)
    np.testing.assert_array_equal(out[:, :4], 7.0)
    np.testing.assert_allclose(out[:, 4:], -x, rtol=1e-6)


def test_one_image_read_through_one_sub_image_and_written_through_another(device, rng):
    x = images(rng)
    image = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    linear(device, 3.0).encode(cb, image.sub_image_with_feature_channel_range((0, 4)),
                               image.sub_image_with_feature_channel_range((4, 4)))
    (out,) = run(cb, image)
    np.testing.assert_array_equal(out[:, :4], x[:, :4])
    np.testing.assert_allclose(out[:, 4:], 3.0 * x[:, :4], rtol=1e-6)


def test_host_writes_reach_only_its_channels(device, rng):
    x = images(rng)
    image = mpsx.Image.from_numpy(device, x)
    sub = image.sub_image_with_feature_channel_range((4, 4))
    values = images(rng, c=4)
    sub.write(values)
    expected = x.copy()
    expected[:, 4:] = values
    np.testing.assert_array_equal(image.to_numpy(), expected)


def test_batches_of_sub_images(device, rng):
    xa, xb = images(rng, n=1), images(rng, n=1)
    a, b = mpsx.Image.from_numpy(device, xa), mpsx.Image.from_numpy(device, xb)
    pair = mpsx.Image.from_numpy(device, np.concatenate([xa, xb]))
    cb = device.command_queue.command_buffer()
    kernel = linear(device, 0.5)
    # Of separate images: gathered by a copy of their channels.
    gathered = kernel.encode_batch(cb, [a.sub_image_with_feature_channel_range((4, 4)),
                                        b.sub_image_with_feature_channel_range((0, 4))])
    # Of consecutive images of one allocation: a view.
    viewed = kernel.encode_batch(cb, list(pair.sub_image_with_feature_channel_range((4, 4)).batch_representation()))
    outs = run(cb, *gathered, *viewed)
    np.testing.assert_allclose(outs[0], 0.5 * xa[:, 4:8], rtol=1e-6)
    np.testing.assert_allclose(outs[1], 0.5 * xb[:, 0:4], rtol=1e-6)
    np.testing.assert_allclose(outs[2], 0.5 * xa[:, 4:8], rtol=1e-6)
    np.testing.assert_allclose(outs[3], 0.5 * xb[:, 4:8], rtol=1e-6)


def test_a_gradient_through_sub_images(device, rng):
    x, dy = images(rng), images(rng, c=4)
    image = mpsx.Image.from_numpy(device, x)
    sub = image.sub_image_with_feature_channel_range((4, 4))
    relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    cb = device.command_queue.command_buffer()
    _, state = relu.encode(cb, sub, destination_state=True)
    cb.commit()
    gradients = mpsx.Image.from_numpy(device, np.zeros((2, 8, 3, 5), np.float32))
    cb2 = device.command_queue.command_buffer()
    mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode(
        cb2, mpsx.Image.from_numpy(device, dy), sub, state, gradients.sub_image_with_feature_channel_range((0, 4)))
    (out,) = run(cb2, gradients)
    np.testing.assert_allclose(out[:, :4], dy * (x[:, 4:8] > 0), rtol=1e-6)
    np.testing.assert_array_equal(out[:, 4:], 0.0)


def test_a_sub_image_of_a_temporary_image_counts_against_it(device, rng):
    x = images(rng)
    cb = device.command_queue.command_buffer()
    temporary = mpsx.TemporaryImage(cb, mpsx.ImageDescriptor(width=5, height=3, feature_channels=8,
                                                             number_of_images=2))
    temporary.read_count = 2
    linear(device, 1.0).encode(cb, mpsx.Image.from_numpy(device, x), temporary)
    sub = temporary.sub_image_with_feature_channel_range((4, 4))
    assert isinstance(sub, mpsx.TemporaryImage)
    y = linear(device, 1.0).encode(cb, sub)
    assert temporary.read_count == 1
    z = linear(device, 1.0).encode(cb, temporary.sub_image_with_feature_channel_range((0, 4)))
    assert temporary.read_count == 0
    with pytest.raises(mpsx.StateError):
        linear(device, 1.0).encode(cb, sub)
    y, z = run(cb, y, z)
    np.testing.assert_allclose(y, x[:, 4:8], rtol=1e-6)
    np.testing.assert_allclose(z, x[:, 0:4], rtol=1e-6)


def test_dlpack_exports_the_channels(device, rng):
    x = images(rng)
    sub = mpsx.Image.from_numpy(device, x).sub_image_with_feature_channel_range((4, 4))
    if device.backend == "metal":
        pytest.skip("metal keeps images in textures, which DLPack cannot describe")
    np.testing.assert_array_equal(torch.from_dlpack(sub).cpu().numpy(), x[:, 4:8])


@pytest.mark.parametrize("bad", [(1, 4), (4, 3), (0, 0), (8, 4), (12, 4)])
def test_ranges_must_be_multiples_of_4_within_the_image(device, bad):
    image = mpsx.Image(device, mpsx.ImageDescriptor(width=2, height=2, feature_channels=8))
    with pytest.raises(ValueError, match="multiples of 4"):
        image.sub_image_with_feature_channel_range(bad)


def test_bad_range_types(device):
    image = mpsx.Image(device, mpsx.ImageDescriptor(width=2, height=2, feature_channels=8))
    with pytest.raises(TypeError):
        image.sub_image_with_feature_channel_range(4)
    with pytest.raises(ValueError):
        image.sub_image_with_feature_channel_range((4, 4, 4))
    with pytest.raises(ValueError):
        image.sub_image_with_feature_channel_range((-4, 4))
    bare = mpsx.Image.__new__(mpsx.Image)
    with pytest.raises(TypeError, match="without __init__"):
        bare.sub_image_with_feature_channel_range((0, 4))

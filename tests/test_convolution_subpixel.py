"""MPSCNNSubPixelConvolutionDescriptor and MPSCNNConvolution.subPixelScaleFactor: the descriptor, its checks, the
convolution's member, and the refusals (no gradient in MPS; no encode in mpsx yet)."""

import pickle

import numpy as np
import pytest

import mpsx
from helpers import read


def test_sub_pixel_descriptor_members():
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 2, 4, 8, stride_in_pixels_x=2, sub_pixel_scale_factor=2)
    assert isinstance(d, mpsx.CNNConvolutionDescriptor)
    assert (d.sub_pixel_scale_factor, d.groups, d.stride_in_pixels_x, d.output_feature_channels) == (2, 1, 2, 8)
    assert d.weights_shape == (8, 2, 3, 4)
    assert mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 8).sub_pixel_scale_factor == 1  # MPS's default
    d.sub_pixel_scale_factor = 1
    assert d.sub_pixel_scale_factor == 1
    assert "sub_pixel_scale_factor 1" in repr(d)
    grouped = mpsx.CNNSubPixelConvolutionDescriptor(1, 1, 8, 36, groups=2, sub_pixel_scale_factor=3)
    assert (grouped.groups, grouped.sub_pixel_scale_factor) == (2, 3)


def test_sub_pixel_descriptor_equality_pickle_and_bare():
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 16, sub_pixel_scale_factor=2)
    assert d == mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 16, sub_pixel_scale_factor=2)
    assert d != mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 16, sub_pixel_scale_factor=4)
    assert d != mpsx.CNNConvolutionDescriptor(3, 3, 4, 16)
    # A factor of 1 computes the plain convolution, as in MPS.
    assert mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 16) == mpsx.CNNConvolutionDescriptor(3, 3, 4, 16)
    again = pickle.loads(pickle.dumps(d))
    assert type(again) is mpsx.CNNSubPixelConvolutionDescriptor and again == d and again.sub_pixel_scale_factor == 2
    bare = mpsx.CNNSubPixelConvolutionDescriptor.__new__(mpsx.CNNSubPixelConvolutionDescriptor)
    assert (bare.sub_pixel_scale_factor, bare.weights_shape) == (1, (1, 1, 1, 1))
    bare.sub_pixel_scale_factor = 4
    assert bare.sub_pixel_scale_factor == 4


@pytest.mark.parametrize("r", [0, -2])
def test_sub_pixel_scale_factor_must_be_positive(r):
    with pytest.raises(ValueError, match=rf"sub_pixel_scale_factor must be positive, given {r}"):
        mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 16, sub_pixel_scale_factor=r)
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 16, sub_pixel_scale_factor=2)
    with pytest.raises(ValueError, match=rf"sub_pixel_scale_factor must be positive, given {r}"):
        d.sub_pixel_scale_factor = r
    assert d.sub_pixel_scale_factor == 2


@pytest.mark.parametrize("r", [2.0, "2", None])
def test_sub_pixel_scale_factor_must_be_an_integer(r):
    with pytest.raises(TypeError, match="sub_pixel_scale_factor"):
        mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 16, sub_pixel_scale_factor=r)


@pytest.mark.parametrize("out, r", [(6, 2), (8, 3), (16, 8), (2, 2)])
def test_output_channels_must_be_a_multiple_of_the_factor_squared(out, r):
    with pytest.raises(ValueError, match=rf"output feature channels \({out}\) must be a multiple of "
                                         rf"sub_pixel_scale_factor squared \({r}\^2 = {r * r}\)"):
        mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, out, sub_pixel_scale_factor=r)


def test_a_factor_set_later_is_checked_when_a_kernel_is_made(device):
    d = mpsx.CNNSubPixelConvolutionDescriptor(1, 1, 2, 8, sub_pixel_scale_factor=2)
    d.sub_pixel_scale_factor = 4  # 8 is no multiple of 16: checked again when a kernel is made
    with pytest.raises(ValueError, match=r"output feature channels \(8\) must be a multiple of "
                                         r"sub_pixel_scale_factor squared \(4\^2 = 16\)"):
        mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape, np.float32))


def test_convolution_sub_pixel_scale_factor(device):
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 2, 12, sub_pixel_scale_factor=2)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape, np.float32)))
    assert conv.sub_pixel_scale_factor == 2
    plain = mpsx.CNNConvolutionDescriptor(3, 3, 2, 12)
    assert mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(plain, np.zeros(plain.weights_shape, np.float32))
                               ).sub_pixel_scale_factor == 1
    depthwise = mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 2, 4)
    assert mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(depthwise, np.zeros(depthwise.weights_shape,
                                                                                   np.float32))
                               ).sub_pixel_scale_factor == 1


def test_gradient_of_a_sub_pixel_convolution_is_refused(device):
    # "Back propagation sub-pixel convolution are not supported. So ... subPixelScaleFactor must be one."
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 2, 8, sub_pixel_scale_factor=2)
    source = mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape, np.float32))
    with pytest.raises(ValueError, match=r"MPSCNNConvolutionGradient: MPS has no gradient of a sub-pixel "
                                         r"convolution; given sub_pixel_scale_factor 2 \(must be 1\)"):
        mpsx.CNNConvolutionGradient(device, source)
    d.sub_pixel_scale_factor = 1
    assert mpsx.CNNConvolutionGradient(device, mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape, np.float32)))


def test_encoding_a_sub_pixel_convolution_is_refused_before_anything_is_enqueued(device, rng):
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 2, 8, sub_pixel_scale_factor=2)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape, np.float32)))
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    plain = mpsx.CNNConvolutionDescriptor(1, 1, 2, 2)
    weights = rng.standard_normal(plain.weights_shape).astype(np.float32)
    identity_conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(plain, weights))

    def encode(cb):
        image = mpsx.Image.from_numpy(device, x)
        with pytest.raises(ValueError, match=r"encoding a sub-pixel convolution \(sub_pixel_scale_factor 2\) is "
                                             r"not implemented in mpsx yet"):
            conv.encode(cb, image)
        with pytest.raises(ValueError, match="sub-pixel"):
            conv.destination_image_descriptor([image])
        return identity_conv.encode(cb, image)  # the command buffer still runs what else it holds

    y = read(device, encode)
    np.testing.assert_allclose(y, np.einsum("oi,nihw->nohw", weights[:, 0, 0, :], x), rtol=1e-4, atol=1e-4)


def test_a_convolution_transpose_of_a_sub_pixel_descriptor_is_refused(device, rng):
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 8, 2, sub_pixel_scale_factor=1)
    d.output_feature_channels, d.sub_pixel_scale_factor = 4, 2
    transpose = mpsx.CNNConvolutionTranspose(device, mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape,
                                                                                         np.float32)))
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 4, 5, 5)).astype(np.float32))
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match=r"MPSCNNConvolutionTranspose: encoding a sub-pixel convolution"):
        transpose.encode(cb, image)

"""MPSCNNSubPixelConvolutionDescriptor and MPSCNNConvolution.subPixelScaleFactor: the descriptor, its checks, the
convolution's member, the sub-pixel convolution computed as MPSCNNConvolution.h states it (against numpy written
from the header's formula), and the refusals (no gradient in MPS, no transpose)."""

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx
from helpers import Handle, float32_graph, read, tolerance

P = mpsx.NNPaddingMethod


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


def intermediate(x, w, b, offset, stride, dilation, groups, height, width):
    """The regular convolution of MPS's model in numpy: result pixel (i, j) has its window's centre at source
    offset + (j * stride_x, i * stride_y), zeros outside the source; w is OHWI."""
    n, cin, sh, sw = x.shape
    cout, kh, kw, cin_g = w.shape
    (sx, sy), (dx, dy) = stride, dilation
    x0, y0 = offset[0] - ((kw - 1) * dx + 1) // 2, offset[1] - ((kh - 1) * dy + 1) // 2
    pad = ((kh - 1) * dy + height * sy + sh + abs(y0)) + ((kw - 1) * dx + width * sx + sw + abs(x0))
    padded = np.zeros((n, cin, sh + 2 * pad, sw + 2 * pad), np.float64)
    padded[:, :, pad:pad + sh, pad:pad + sw] = x
    out = np.zeros((n, cout, height, width), np.float64)
    per_group = cout // groups
    for o in range(cout):
        g = o // per_group
        for ky in range(kh):
            for kx in range(kw):
                rows = pad + y0 + ky * dy + np.arange(height) * sy
                cols = pad + x0 + kx * dx + np.arange(width) * sx
                window = padded[:, g * cin_g:(g + 1) * cin_g][:, :, rows][:, :, :, cols]  # n, cin_g, h, w
                out[:, o] += np.einsum("nchw,c->nhw", window, w[o, ky, kx].astype(np.float64))
        out[:, o] += 0.0 if b is None else b[o]
    return out


def rearranged(io, r, height, width):
    """MPSCNNConvolution.h: Destination[x][y][c] = Io[floor(x/r)][floor(y/r)][(N/r^2) * (r * mod(y,r) + mod(x,r))
    + c] for x < width, y < height (NCHW arrays)."""
    n, big_n = io.shape[:2]
    c_out = big_n // (r * r)
    out = np.zeros((n, c_out, height, width), io.dtype)
    for y in range(height):
        for x in range(width):
            k = c_out * (r * (y % r) + (x % r))
            out[:, :, y, x] = io[:, k:k + c_out, y // r, x // r]
    return out


def make(rng, kw, kh, cin, cout, r, stride=(1, 1), dilation=(1, 1), groups=1, neuron=None, bias=True):
    d = mpsx.CNNSubPixelConvolutionDescriptor(kw, kh, cin, cout, stride[0], stride[1], dilation[0], dilation[1],
                                              groups, fused_neuron_descriptor=neuron, sub_pixel_scale_factor=r)
    w = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    return mpsx.ConvolutionWeights(d, w, b), w, b


CASES = [
    # r, kw, kh, cin, cout, stride, dilation, groups, image (n, h, w)
    (2, 3, 3, 3, 8, (1, 1), (1, 1), 1, (2, 5, 6)),
    (3, 3, 3, 4, 18, (1, 1), (1, 1), 1, (2, 4, 5)),
    (2, 3, 2, 4, 12, (2, 1), (1, 2), 1, (3, 7, 6)),
    # groups > 1: N / r^2 a multiple of 4 (the header's condition 3)
    (2, 3, 3, 4, 16, (1, 1), (1, 1), 2, (2, 5, 4)),
    (3, 1, 1, 6, 72, (1, 1), (1, 1), 2, (2, 3, 4)),
    (2, 3, 3, 8, 32, (1, 2), (1, 1), 4, (2, 6, 5)),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c[:8]) for c in CASES])
def test_forward_matches_the_header(device, rng, case):
    r, kw, kh, cin, cout, stride, dilation, groups, (n, h, w) = case
    source, weights, biases = make(rng, kw, kh, cin, cout, r, stride, dilation, groups)
    conv = mpsx.CNNConvolution(device, source)
    conv.padding = P.SIZE_SAME
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    image = mpsx.Image.from_numpy(device, x)
    described = conv.destination_image_descriptor([image])
    y = read(device, lambda cb: conv.encode(cb, image))
    # mpsx's choice: each pixel of the regular result becomes an r x r block.
    regular_h, regular_w = -(-h // stride[1]), -(-w // stride[0])
    assert y.shape == (n, cout // (r * r), r * regular_h, r * regular_w)
    assert (described.number_of_images, described.feature_channels, described.height, described.width) == y.shape
    io = intermediate(x, weights, biases, conv.offset, stride, dilation, groups, regular_h, regular_w)
    expected = rearranged(io, r, r * regular_h, r * regular_w)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    if groups == 1 and stride == dilation == (1, 1) and kw % 2 and kh % 2:
        # The same through torch: its convolution with "same" padding (offset (0, 0) for odd kernels), then the
        # header's order as a permutation Io[n, (r a + b) C + c, i, j] -> D[n, c, r i + a, r j + b].
        assert tuple(conv.offset)[:2] == (0, 0)
        wt = torch.as_tensor(weights, dtype=torch.float64).permute(0, 3, 1, 2)
        io_torch = F.conv2d(torch.as_tensor(x, dtype=torch.float64), wt, torch.as_tensor(biases, dtype=torch.float64),
                            padding=(kh // 2, kw // 2)).numpy()
        c = cout // (r * r)
        shuffled = io_torch.reshape(n, r, r, c, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c, r * h, r * w)
        np.testing.assert_allclose(y, shuffled, rtol=1e-4, atol=1e-4)



def test_groups_with_fewer_than_4_channels_written_per_block_pixel(device, rng):
    # "N/r^2 ... must be multiple of 4 when groups > 1" is MPS's limit: metal refuses the others; cpu and cuda
    # compute them.
    r, cin, cout, groups = 2, 4, 8, 2  # N / r^2 = 2
    source, weights, biases = make(rng, 3, 3, cin, cout, r, groups=groups)
    conv = mpsx.CNNConvolution(device, source)
    conv.padding = P.SIZE_SAME
    x = rng.standard_normal((2, cin, 3, 4)).astype(np.float32)
    if device.backend == "metal":
        with pytest.raises(ValueError, match=r"metal: MPS sub-pixel convolutions of several groups write multiples "
                                             r"of 4 feature channels; given 2"):
            conv.encode(device.command_queue.command_buffer(), mpsx.Image.from_numpy(device, x))
        return
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    io = intermediate(x, weights, biases, (0, 0), (1, 1), (1, 1), groups, 3, 4)
    np.testing.assert_allclose(y, rearranged(io, r, 6, 8), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_per_channel_neuron_applies_to_the_intermediate_channels(device, rng, dtype):
    # The PReLU slopes index the convolution's N output channels (MPSCNNConvolution.h: "i in
    # [0,outputFeatureChannels-1]"), before the rearrangement.
    r, cin, cout = 2, 3, 16
    slopes = np.linspace(-1.5, 2.0, cout).astype(np.float32)
    prelu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.PRELU, data=slopes)
    source, weights, biases = make(rng, 3, 3, cin, cout, r, neuron=prelu)
    conv = mpsx.CNNConvolution(device, source)
    conv.padding = P.SIZE_SAME
    x = rng.standard_normal((2, cin, 4, 5)).astype(dtype)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    assert y.dtype == dtype and y.shape == (2, cout // 4, 8, 10)
    io = intermediate(x.astype(np.float32), weights, biases, (0, 0), (1, 1), (1, 1), 1, 4, 5)
    io = np.where(io >= 0, io, slopes[None, :, None, None] * io)
    np.testing.assert_allclose(y, rearranged(io, r, 8, 10), *tolerance(dtype))


def test_neuron_of_shared_parameters(device, rng):
    r, cin, cout = 3, 2, 9
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU, 0.25)
    source, weights, biases = make(rng, 1, 3, cin, cout, r, neuron=relu, bias=False)
    conv = mpsx.CNNConvolution(device, source)
    conv.padding = P.SIZE_VALID_ONLY
    x = rng.standard_normal((1, cin, 5, 4)).astype(np.float32)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x)))
    assert y.shape == (1, 1, 9, 12)
    io = intermediate(x, weights, None, tuple(conv.offset), (1, 1), (1, 1), 1, 3, 4)
    np.testing.assert_allclose(y, rearranged(np.where(io >= 0, io, 0.25 * io), r, 9, 12), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("r", [2, 3])
def test_clip_rect_offset_channel_offsets_and_batch(device, rng, r):
    # A clip rect whose size is no multiple of r: the intermediate image is (size + r - 1) // r pixels and the
    # last blocks are cut where the clip rect ends; nothing outside it, or outside the channels written, changes.
    cin, cout = 8, 4 * r * r
    source, weights, biases = make(rng, 3, 3, 4, cout, r, stride=(2, 1))
    conv = mpsx.CNNConvolution(device, source)
    n, width, height = 3, 5, 4  # clip size
    x = rng.standard_normal((n, cin, 7, 9)).astype(np.float32)
    before = rng.standard_normal((n + 1, 12, 11, 13)).astype(np.float32)
    destination = mpsx.Image.from_numpy(device, before)
    conv.source_feature_channel_offset = 4
    conv.destination_feature_channel_offset = 8
    conv.offset = (1, 2, 0)
    conv.clip_rect = (3, 2, 1, width, height, n)
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x), destination))
    io_w, io_h = -(-width // r), -(-height // r)
    io = intermediate(x[:, 4:], weights, biases, (1, 2), (2, 1), (1, 1), 1, io_h, io_w)
    expected = before.copy()
    expected[1:, 8:12, 2:2 + height, 3:3 + width] = rearranged(io, r, height, width)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_clip_rect_reaching_outside_the_destination(device, rng):
    # MPSCNNKernel.h: "If the clipRect does not lie completely within the destination image, the intersection
    # between clip rectangle and destination bounds is used"; its blocks start at the intersection's origin, whose
    # windows are where a regular convolution's would be (offset belongs to clip_rect's own origin).
    r, cin, cout = 2, 2, 4
    source, weights, biases = make(rng, 3, 3, cin, cout, r)
    conv = mpsx.CNNConvolution(device, source)
    x = rng.standard_normal((1, cin, 6, 6)).astype(np.float32)
    before = np.full((1, 1, 5, 7), 9.0, np.float32)
    destination = mpsx.Image.from_numpy(device, before)
    conv.offset = (1, 1, 0)
    conv.clip_rect = (-1, -2, 0, 100, 100, 1)  # intersection: the whole 7x5 destination
    y = read(device, lambda cb: conv.encode(cb, mpsx.Image.from_numpy(device, x), destination))
    # destination pixel (0, 0) is clip_rect pixel (1, 2): its window is centred on source (1 + 1, 1 + 2).
    io = intermediate(x, weights, biases, (2, 3), (1, 1), (1, 1), 1, 3, 4)
    np.testing.assert_allclose(y, rearranged(io, r, 5, 7), rtol=1e-4, atol=1e-4)


def test_fully_connected_sub_pixel(device, rng):
    # One window on the whole source: one intermediate pixel, one r x r block.
    r, cin, cout = 2, 3, 8
    d = mpsx.CNNSubPixelConvolutionDescriptor(4, 3, cin, cout, sub_pixel_scale_factor=r)
    weights = rng.standard_normal(d.weights_shape).astype(np.float32)
    biases = rng.standard_normal(cout).astype(np.float32)
    fc = mpsx.CNNFullyConnected(device, mpsx.ConvolutionWeights(d, weights, biases))
    x = rng.standard_normal((2, cin, 3, 4)).astype(np.float32)
    y = read(device, lambda cb: fc.encode(cb, mpsx.Image.from_numpy(device, x)))
    assert y.shape == (2, 2, 2, 2)
    io = (np.einsum("ohwi,nihw->no", weights, x) + biases)[:, :, None, None]
    np.testing.assert_allclose(y, rearranged(io, r, 2, 2), rtol=1e-4, atol=1e-4)


def test_too_few_destination_channels_are_refused_before_anything_is_enqueued(device, rng):
    # "The destination MPSImage to encode call must have at least N/r^2 + destinationFeatureChannelOffset channels."
    r, cin, cout = 2, 2, 16
    source, weights, biases = make(rng, 1, 1, cin, cout, r)
    conv = mpsx.CNNConvolution(device, source)
    x = rng.standard_normal((1, cin, 3, 3)).astype(np.float32)
    plain = mpsx.CNNConvolutionDescriptor(1, 1, cin, 2)
    plain_weights = rng.standard_normal(plain.weights_shape).astype(np.float32)
    plain_conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(plain, plain_weights))

    def encode(cb):
        image = mpsx.Image.from_numpy(device, x)
        conv.destination_feature_channel_offset = 4
        for channels in (4, 7):
            small = mpsx.Image(device, mpsx.ImageDescriptor(width=6, height=6, feature_channels=channels))
            with pytest.raises(mpsx.ShapeError, match=r"expected a destination image of at least 8 feature "
                                                      rf"channels, given {channels}"):
                conv.encode(cb, image, small)
        conv.destination_feature_channel_offset = 0
        fits = mpsx.Image(device, mpsx.ImageDescriptor(width=6, height=6, feature_channels=4))
        return plain_conv.encode(cb, image), conv.encode(cb, image, fits)  # the command buffer runs what it holds

    y, sub = read(device, encode)
    np.testing.assert_allclose(y, np.einsum("oi,nihw->nohw", plain_weights[:, 0, 0, :], x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sub, rearranged(intermediate(x, weights, biases, (0, 0), (1, 1), (1, 1), 1, 3, 3),
                                               r, 6, 6), rtol=1e-4, atol=1e-4)


def test_destination_larger_than_the_padding_policy_limit_is_refused(device):
    # A 1x1 source and a window 2^29 + 1 wide: the regular result of SIZE_FULL is 2^29 + 1 wide.
    d = mpsx.CNNSubPixelConvolutionDescriptor(2, 1, 1, 4, dilation_rate_x=2**29, sub_pixel_scale_factor=2)
    conv = mpsx.CNNConvolution(device, mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape, np.float32)))
    conv.padding = P.SIZE_FULL
    image = mpsx.Image(device, mpsx.ImageDescriptor(width=1, height=1, feature_channels=1))
    match = (r"the padding policy makes a 536870913x1 result, whose sub-pixel blocks \(sub_pixel_scale_factor 2\) "
             r"make a 1073741826x2 destination; image sizes must be at most 1073741824")
    with pytest.raises(mpsx.ShapeError, match=match):
        conv.destination_image_descriptor([image])
    with pytest.raises(mpsx.ShapeError, match=match):
        conv.encode(device.command_queue.command_buffer(), image)


def test_a_convolution_transpose_of_a_sub_pixel_descriptor_is_refused(device):
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 8, 4, sub_pixel_scale_factor=2)
    with pytest.raises(ValueError, match=r"MPSCNNConvolutionTranspose: MPS defines sub-pixel convolution for "
                                         r"MPSCNNConvolution only; given sub_pixel_scale_factor 2 \(must be 1\)"):
        mpsx.CNNConvolutionTranspose(device, mpsx.ConvolutionWeights(d, np.zeros(d.weights_shape, np.float32)))


def test_graph_computes_it_and_refuses_its_training_graph(device, rng):
    d = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 2, 8, sub_pixel_scale_factor=2)
    weights, biases = rng.standard_normal(d.weights_shape).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    node = mpsx.CNNConvolutionNode(mpsx.NNImageNode(Handle("x")), mpsx.ConvolutionWeights(d, weights, biases))
    graph = float32_graph(device, node.result_image)
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    y = read(device, lambda cb: graph.encode(cb, [mpsx.Image.from_numpy(device, x)]))
    expected = rearranged(intermediate(x, weights, biases, (0, 0), (1, 1), (1, 1), 1, 5, 6), 2, 10, 12)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    termini = node.training_graph()
    with pytest.raises(ValueError, match="MPSCNNConvolutionGradient: MPS has no gradient of a sub-pixel convolution"):
        float32_graph(device, termini[0].result_image, False)

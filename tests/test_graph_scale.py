"""NNBilinearScaleNode and NNLanczosScaleNode (the scale family; MPS's MPSImageScale kernels have no public mpsx
class): results against numpy resamplers written here from MPSImageResampling.h's formulas, bilinear against
torch.nn.functional.interpolate and Lanczos against Pillow, scale transforms from a transform provider consulted at
each encode, batches, a scale node feeding a convolution encoded twice, the missing gradient, and bad input."""

import math

import numpy as np
import pytest
import torch
from PIL import Image as PILImage

import mpsx
from helpers import Handle, float32_graph, run

# ---------------------------------------------------------------- numpy references


def bilinear_matrix(size, count, scale, translate):
    """(count, size): destination pixel u reads at c = (u + 0.5 - translate) / scale - 0.5 (pixel centres, the
    transform in pixel-edge coordinates), the two pixels around c clamped into the image (texture clamp-to-edge)."""
    m = np.zeros((count, size))
    for u in range(count):
        c = (u + 0.5 - translate) / scale - 0.5
        i0 = math.floor(c)
        f = c - i0
        m[u, min(max(i0, 0), size - 1)] += 1 - f
        m[u, min(max(i0 + 1, 0), size - 1)] += f
    return m


def lanczos(x):
    x = abs(x)
    return np.sinc(x) * np.sinc(x / 3) if x < 3 else 0.0


def lanczos_matrix(size, count, scale, translate):
    """(count, size): Lanczos-3 around c (kept within the image's extent, -0.5 .. size - 0.5), its window stretched
    by 1 / scale when downscaling (scale < 1); the taps inside the image normalized to sum 1, as Pillow does."""
    m = np.zeros((count, size))
    f = min(scale, 1.0)
    for u in range(count):
        c = min(max((u + 0.5 - translate) / scale - 0.5, -0.5), size - 0.5)
        w = np.array([lanczos((c - i) * f) for i in range(size)])
        m[u] = w / w.sum()
    return m


MATRICES = {mpsx.NNBilinearScaleNode: bilinear_matrix, mpsx.NNLanczosScaleNode: lanczos_matrix}
NODES = list(MATRICES)
NODE_IDS = ["bilinear", "lanczos"]


def reference(cls, x, width, height, transform=None):
    """x (N, C, H, W) resampled to height x width by the node class's filter."""
    n, c, h, w = x.shape
    sx, sy, tx, ty = transform or (width / w, height / h, 0.0, 0.0)
    my = MATRICES[cls](h, height, sy, ty)
    mx = MATRICES[cls](w, width, sx, tx)
    return np.einsum("yh,nchw,xw->ncyx", my, x.astype(np.float64), mx)


def pillow(x, width, height, box=None):
    """Pillow's Lanczos resize of each image and channel (32-bit float images, double weights)."""
    return np.stack([np.stack([np.asarray(PILImage.fromarray(channel, mode="F").resize(
        (width, height), PILImage.Resampling.LANCZOS, box=box)) for channel in image]) for image in x])


def scale(device, cls, x, output_size, provider=None):
    source = mpsx.NNImageNode(Handle("x"))
    node = cls(source, output_size, provider)
    node.result_image.synchronize_resource = True
    graph = float32_graph(device, node.result_image)
    return run(device, lambda cb: graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)])).to_numpy()


class Fixed(mpsx.ImageTransformProvider):
    def __init__(self, transform):
        self.transform = transform
        self.calls = []

    def transform_for_source_image(self, image, handle):
        self.calls.append((type(image), (image.number_of_images, image.feature_channels, image.height, image.width),
                           handle))
        return self.transform


# (N, C, H, W) and (width, height): up, down, by 2 and by other factors, each axis its own.
SIZES = [((2, 3, 4, 5), (10, 8)), ((1, 6, 8, 10), (5, 4)), ((3, 5, 7, 5), (11, 3)), ((2, 2, 9, 12), (4, 3)),
         ((1, 1, 1, 6), (3, 2)), ((2, 2, 1, 1), (3, 2))]
SIZE_IDS = ["up2", "down2", "mixed", "down3", "one_row", "one_pixel"]


@pytest.mark.parametrize("shape, output_size", SIZES, ids=SIZE_IDS)
def test_bilinear_matches_torch_and_numpy(device, rng, shape, output_size):
    x = rng.standard_normal(shape).astype(np.float32)
    y = scale(device, mpsx.NNBilinearScaleNode, x, output_size)
    width, height = output_size
    expected = torch.nn.functional.interpolate(torch.tensor(x, dtype=torch.float64), size=(height, width),
                                               mode="bilinear", align_corners=False).numpy()
    assert y.shape == shape[:2] + (height, width)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, reference(mpsx.NNBilinearScaleNode, x, width, height), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, output_size", SIZES, ids=SIZE_IDS)
def test_lanczos_matches_numpy_and_pillow(device, rng, shape, output_size):
    x = rng.standard_normal(shape).astype(np.float32)
    y = scale(device, mpsx.NNLanczosScaleNode, x, output_size)
    width, height = output_size
    assert y.shape == shape[:2] + (height, width)
    np.testing.assert_allclose(y, reference(mpsx.NNLanczosScaleNode, x, width, height), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, pillow(x, width, height), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cls", NODES, ids=NODE_IDS)
def test_float16_graphs(device, rng, cls):
    """MPS's default graph format: float16 images, float32 arithmetic."""
    x = rng.standard_normal((2, 5, 6, 4)).astype(np.float32)
    node = cls(mpsx.NNImageNode(Handle("x")), (9, 4))
    node.result_image.synchronize_resource = True
    graph = mpsx.NNGraph(device, node.result_image)
    assert graph.format == mpsx.DataType.FLOAT16
    y = run(device, lambda cb: graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)]))
    assert y.data_type == mpsx.DataType.FLOAT16
    np.testing.assert_allclose(y.to_numpy(), reference(cls, x, 9, 4), rtol=1e-2, atol=1e-2)


def test_lanczos_downscaling_low_passes(device):
    """The window widens when downscaling: a checkerboard (the highest frequency) halved is flat at its mean, where
    an unwidened Lanczos-3 or bilinear filter keeps it."""
    x = np.indices((1, 1, 16, 16)).sum(axis=0).astype(np.float32) % 2
    y = scale(device, mpsx.NNLanczosScaleNode, x, (8, 8))
    np.testing.assert_allclose(y[..., 2:-2, 2:-2], 0.5, atol=1e-5)


@pytest.mark.parametrize("cls", NODES, ids=NODE_IDS)
def test_unit_scale_copies_and_integer_translations_shift(device, rng, cls):
    x = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    np.testing.assert_array_equal(scale(device, cls, x, (7, 6), Fixed(mpsx.ScaleTransform(1.0, 1.0))), x)
    # destination = source + (2, -1): destination column u is source column u - 2, row v is source row v + 1.
    y = scale(device, cls, x, (7, 6), Fixed((1, 1, 2, -1)))
    np.testing.assert_allclose(y[:, :, :5, 2:], x[:, :, 1:, :5], atol=1e-6)
    np.testing.assert_allclose(y, reference(cls, x, 7, 6, (1, 1, 2, -1)), rtol=1e-5, atol=1e-5)


# (scale_x, scale_y, translate_x, translate_y): zooms into a part, shrinks with an offset, reaches past the edges.
TRANSFORMS = [(2.0, 1.5, -3.0, -1.5), (0.5, 0.75, 1.0, 2.0), (3.0, 0.4, 4.5, -0.25), (1.25, 1.25, -20.0, 30.0)]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("cls", NODES, ids=NODE_IDS)
def test_transforms_scale_and_translate(device, rng, cls, transform):
    x = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    provider = Fixed(mpsx.ScaleTransform(*transform))
    y = scale(device, cls, x, (7, 6), provider)
    np.testing.assert_allclose(y, reference(cls, x, 7, 6, transform), rtol=1e-5, atol=1e-5)
    assert provider.calls == [(mpsx.Image, (2, 3, 8, 9), provider.calls[0][2])]
    assert provider.calls[0][2].label == "x"


def test_a_transform_is_pillows_box(device, rng):
    """MPSImageResampling.h's translate = -source_origin * scale: the source box (x0, y0, x1, y1) fills the result,
    as Pillow's resize(box=) does."""
    x = rng.standard_normal((1, 2, 10, 12)).astype(np.float32)
    box = (2.5, 1.0, 9.0, 7.5)
    width, height = 9, 4
    sx, sy = width / (box[2] - box[0]), height / (box[3] - box[1])
    y = scale(device, mpsx.NNLanczosScaleNode, x, (width, height), Fixed((sx, sy, -box[0] * sx, -box[1] * sy)))
    np.testing.assert_allclose(y, pillow(x, width, height, box), rtol=1e-4, atol=1e-4)


def conv_weights(rng, channels, out):
    w = rng.standard_normal((out, 3, 3, channels)).astype(np.float32) * 0.3
    b = rng.standard_normal(out).astype(np.float32)
    descriptor = mpsx.CNNConvolutionDescriptor(3, 3, channels, out)
    return mpsx.ConvolutionWeights(descriptor, w, b), w, b


class Zooms(mpsx.ImageTransformProvider):
    """A transform per encode: 2x then 1.5x with another translation; records what it was asked."""

    def __init__(self):
        self.transforms = [mpsx.ScaleTransform(2.0, 2.0, -1.0, 0.0), mpsx.ScaleTransform(1.5, 1.5, 0.5, -0.5)]
        self.asked = []

    def transform_for_source_image(self, image, handle):
        self.asked.append((image.number_of_images, handle.label))
        return self.transforms[len(self.asked) - 1]


@pytest.mark.parametrize("cls", NODES, ids=NODE_IDS)
def test_scale_then_convolution_encoded_twice_asks_the_provider_each_time(device, rng, cls):
    x = rng.standard_normal((3, 4, 6, 5)).astype(np.float32)
    weights, w, b = conv_weights(rng, 4, 2)
    provider = Zooms()
    node = cls(mpsx.NNImageNode(Handle("x")), (8, 7), provider)
    conv = mpsx.CNNConvolutionNode(node.result_image, weights)
    conv.result_image.synchronize_resource = True
    graph = float32_graph(device, conv.result_image)
    for encode in range(2):
        y = run(device, lambda cb: graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)])).to_numpy()
        scaled = reference(cls, x, 8, 7, provider.transforms[encode])
        expected = torch.nn.functional.conv2d(torch.tensor(scaled), torch.tensor(w, dtype=torch.float64)
                                              .permute(0, 3, 1, 2), torch.tensor(b, dtype=torch.float64),
                                              padding=1).numpy()
        assert y.shape == (3, 2, 7, 8)
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    assert provider.asked == [(3, "x"), (3, "x")]


def test_no_gradient_node(device, rng):
    """MPSNNGraphNodes.h declares no gradient node of MPSNNScaleNode: asking for one raises; a training graph
    stopped at the scale node's result trains what follows it."""
    weights, _, _ = conv_weights(rng, 2, 3)
    for cls in NODES:
        node = cls(mpsx.NNImageNode(Handle("x")), (4, 4))
        with pytest.raises(TypeError, match=f"MPSNN{cls.__name__[2:-4]}Node has no gradient filter: "
                                            "MPSNNGraphNodes.h declares no gradient node of MPSNNScaleNode"):
            node.gradient_filter_with_source(mpsx.NNImageNode(Handle("dy")))
        conv = mpsx.CNNConvolutionNode(node.result_image, weights)
        with pytest.raises(TypeError, match="has no gradient filter"):
            conv.training_graph()
        node.result_image.stop_gradient = True
        made = conv.training_graph()
        assert [type(f) for f in made] == [mpsx.CNNConvolutionGradientNode]


def test_factories_and_properties():
    source = mpsx.NNImageNode()
    provider = Fixed((1, 1, 0, 0))
    for cls in NODES:
        node = cls.node_with_source(source, (5, 4, 1), provider)
        assert type(node) is cls and isinstance(node, mpsx.NNScaleNode)
        assert node.output_size == (5, 4, 1) and node.transform_provider is provider
        assert cls(source, [6, 3]).output_size == (6, 3, 1)
        assert cls(source, (6, 3)).transform_provider is None
        assert node.source_images == [source] and node.result_states == []
    assert mpsx.ScaleTransform(2.0, 3.0) == (2.0, 3.0, 0.0, 0.0)


def test_bad_input(device, rng):
    source = mpsx.NNImageNode(Handle("x"))
    with pytest.raises(TypeError, match="NNScaleNode is abstract; make an NNBilinearScaleNode or an "
                                        "NNLanczosScaleNode"):
        mpsx.NNScaleNode(source, (2, 2))
    for size, error, message in (((0, 3), ValueError, "output_size width must be positive, given 0"),
                                 ((3, -1), ValueError, "output_size height must be positive, given -1"),
                                 ((3, 3, 0), ValueError, "output_size depth must be positive, given 0"),
                                 ((3,), ValueError, r"output_size must be \(width, height\[, depth\]\), given 1 "
                                                    "values"),
                                 (3, TypeError, r"output_size must be a tuple \(width, height\[, depth\]\) of ints, "
                                                "given int"),
                                 ((2.5, 3), TypeError, "output_size.width")):
        with pytest.raises(error, match=message):
            mpsx.NNBilinearScaleNode(source, size)
    with pytest.raises(TypeError, match=r"transform_provider: expected None or an object with a "
                                        r"transform_for_source_image\(image, handle\) method, given tuple"):
        mpsx.NNLanczosScaleNode(source, (2, 2), (1.0, 1.0, 0.0, 0.0))

    class Raises(mpsx.ImageTransformProvider):
        def transform_for_source_image(self, image, handle):
            raise KeyError("no transform")

    x = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
    for provider, error, message in (
            (Raises(), KeyError, "no transform"),
            (Fixed([1.0, 1.0, 0.0, 0.0]), TypeError, r"transform_for_source_image\(\) must return an "
                                                     r"mpsx.ScaleTransform \(scale_x, scale_y, translate_x, "
                                                     r"translate_y\) of real numbers, given \[1.0"),
            (Fixed((1.0, 1.0, 0.0)), TypeError, "must return an mpsx.ScaleTransform"),
            (Fixed((1.0, "2", 0.0, 0.0)), TypeError, "must return an mpsx.ScaleTransform"),
            (Fixed((1.0, True, 0.0, 0.0)), TypeError, "must return an mpsx.ScaleTransform"),
            (Fixed(None), TypeError, "given None"),
            (Fixed((math.inf, 1.0, 0.0, 0.0)), ValueError, r"MPSNNBilinearScaleNode: the transform_provider's "
                                                           "transform.scale_x must be finite and positive, given inf"),
            (Fixed((1.0, math.nan, 0.0, 0.0)), ValueError, "scale_y must be finite and positive, given nan"),
            (Fixed((0.0, 1.0, 0.0, 0.0)), ValueError, "scale_x must be finite and positive, given 0"),
            (Fixed((1.0, -2.0, 0.0, 0.0)), ValueError, "scale_y must be finite and positive, given -2"),
            (Fixed((1.0, 1.0, math.nan, 0.0)), ValueError, "translate_x must be finite, given nan"),
            (Fixed((1.0, 1.0, 0.0, -math.inf)), ValueError, "translate_y must be finite, given -inf"),
            (mpsx.ImageTransformProvider(), NotImplementedError, "must implement transform_for_source_image")):
        node = mpsx.NNBilinearScaleNode(source, (3, 5), provider)
        conv = mpsx.CNNConvolutionNode(node.result_image, conv_weights(rng, 3, 2)[0])
        graph = float32_graph(device, conv.result_image)
        cb = device.command_queue.command_buffer()
        with pytest.raises(error, match=message):
            graph.encode_batch(cb, [x])
        assert cb.command_count == 0
    # The graph encodes once its provider answers.
    provider = Fixed((1.0, 1.0, 0.0, 0.0))
    node = mpsx.NNBilinearScaleNode(source, (4, 4), provider)
    node.result_image.synchronize_resource = True
    graph = float32_graph(device, node.result_image)
    provider.transform = "no"
    cb = device.command_queue.command_buffer()
    with pytest.raises(TypeError):
        graph.encode_batch(cb, [x])
    provider.transform = (1.0, 1.0, 0.0, 0.0)
    np.testing.assert_array_equal(run(device, lambda cb: graph.encode_batch(cb, [x])).to_numpy(), x.to_numpy())


def test_uninitialized_nodes_raise():
    for cls in NODES:
        node = cls.__new__(cls)
        for name in ("output_size", "transform_provider", "result_image"):
            with pytest.raises(Exception, match="not initialized|uninitialized|__init__"):
                getattr(node, name)


def test_a_graph_saves_with_its_provider(device, rng, tmp_path):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    transform = (1.5, 0.75, -0.5, 0.25)
    node = mpsx.NNLanczosScaleNode(mpsx.NNImageNode(Handle("x")), (7, 4), Fixed(transform))
    node.result_image.synchronize_resource = True
    mpsx.save(float32_graph(device, node.result_image), tmp_path / "scale.mpsx")
    loaded = mpsx.load(tmp_path / "scale.mpsx", device)
    y = run(device, lambda cb: loaded.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)])).to_numpy()
    np.testing.assert_allclose(y, reference(mpsx.NNLanczosScaleNode, x, 7, 4, transform), rtol=1e-5, atol=1e-5)

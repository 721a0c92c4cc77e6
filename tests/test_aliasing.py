"""Aliasing: a destination that shares memory with an image an encode reads
either gives the out-of-place result (the in-place forms docs/semantics.md
lists, on cpu and cuda) or is refused with ValueError before anything is
encoded (always on metal, where MPS refuses it). Every family, forward and
gradient kernels, on every device, with the destination:
- exact: the source itself;
- offset: the source, read one column to the right of where it is written;
- channels: the source, its channels 4.. read and its channels 0.. written;
- disjoint_channels: the source, its channels 8..15 read and 0..7 written,
  which no element shares (refused where a family has no in-place form);
- batch: the source's images shifted by one in their batch;
- apart: other images of the source's batch, which never overlap it.
The reference is the same encode with the destination in a copy of its
allocation; each kernel's values are checked against PyTorch or numpy in its
own test file."""

import numpy as np
import pytest

import mpsx

N, C, H, W = 2, 8, 6, 7
FORMS = ("exact", "offset", "channels", "disjoint_channels", "batch", "apart")


def weights(kernel_width, kernel_height, neuron=None):
    d = mpsx.CNNConvolutionDescriptor(kernel_width, kernel_height, C, C, fused_neuron_descriptor=neuron)
    rng = np.random.default_rng(5)
    return mpsx.ConvolutionWeights(d, rng.standard_normal(d.weights_shape).astype(np.float32) / 8,
                                   rng.standard_normal(C).astype(np.float32))


def normalization(kind):
    rng = np.random.default_rng(6)
    gamma, beta = rng.uniform(0.5, 2, C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    if kind == "batch":
        return mpsx.BatchNormalizationWeights(gamma, beta, rng.standard_normal(C).astype(np.float32),
                                              rng.uniform(0.5, 2, C).astype(np.float32))
    if kind == "instance":
        return mpsx.InstanceNormalizationWeights(gamma, beta)
    return mpsx.GroupNormalizationWeights(gamma, beta, 2)


TANH = mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH)
MSE = mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.NONE)

# Forward and gradient kernels of each family, made anew for every encode (a
# dropout kernel's mask depends on its encodes).
FAMILIES = {
    "convolution": (lambda d: mpsx.CNNConvolution(d, weights(3, 3)),
                    lambda d: mpsx.CNNConvolutionGradient(d, weights(3, 3))),
    "convolution+neuron": (lambda d: mpsx.CNNConvolution(d, weights(3, 3, TANH)),
                           lambda d: mpsx.CNNConvolutionGradient(d, weights(3, 3, TANH))),
    "fully_connected": (lambda d: mpsx.CNNFullyConnected(d, weights(W, H)),
                        lambda d: mpsx.CNNFullyConnectedGradient(d, weights(W, H))),
    "convolution_transpose": (lambda d: mpsx.CNNConvolutionTranspose(d, weights(3, 3)),
                              lambda d: mpsx.CNNConvolutionTransposeGradient(d, weights(3, 3))),
    "pooling_max": (lambda d: mpsx.CNNPoolingMax(d, 3, 3, 1, 1), lambda d: mpsx.CNNPoolingMaxGradient(d, 3, 3, 1, 1)),
    "pooling_average": (lambda d: mpsx.CNNPoolingAverage(d, 3, 3, 1, 1),
                        lambda d: mpsx.CNNPoolingAverageGradient(d, 3, 3, 1, 1)),
    "pooling_l2_norm": (lambda d: mpsx.CNNPoolingL2Norm(d, 3, 3, 1, 1),
                        lambda d: mpsx.CNNPoolingL2NormGradient(d, 3, 3, 1, 1)),
    "dilated_pooling_max": (lambda d: mpsx.CNNDilatedPoolingMax(d, 3, 3, 2, 2, 1, 1),
                            lambda d: mpsx.CNNDilatedPoolingMaxGradient(d, 3, 3, 2, 2, 1, 1)),
    "neuron": (lambda d: mpsx.CNNNeuron(d, TANH), lambda d: mpsx.CNNNeuronGradient(d, TANH)),
    "softmax": (mpsx.CNNSoftMax, mpsx.CNNSoftMaxGradient),
    "log_softmax": (mpsx.CNNLogSoftMax, mpsx.CNNLogSoftMaxGradient),
    "batch_normalization": (lambda d: mpsx.CNNBatchNormalization(d, normalization("batch")),
                            mpsx.CNNBatchNormalizationGradient),
    "instance_normalization": (lambda d: mpsx.CNNInstanceNormalization(d, normalization("instance")),
                               mpsx.CNNInstanceNormalizationGradient),
    "group_normalization": (lambda d: mpsx.CNNGroupNormalization(d, normalization("group")),
                            mpsx.CNNGroupNormalizationGradient),
    "cross_channel_normalization": (lambda d: mpsx.CNNCrossChannelNormalization(d, 3),
                                    lambda d: mpsx.CNNCrossChannelNormalizationGradient(d, 3)),
    "spatial_normalization": (lambda d: mpsx.CNNSpatialNormalization(d, 3, 3),
                              lambda d: mpsx.CNNSpatialNormalizationGradient(d, 3, 3)),
    "local_contrast_normalization": (lambda d: mpsx.CNNLocalContrastNormalization(d, 3, 3),
                                     lambda d: mpsx.CNNLocalContrastNormalizationGradient(d, 3, 3)),
    "upsampling_nearest": (lambda d: mpsx.CNNUpsamplingNearest(d, 2, 2),
                           lambda d: mpsx.CNNUpsamplingNearestGradient(d, 2, 2)),
    "upsampling_bilinear": (lambda d: mpsx.CNNUpsamplingBilinear(d, 2, 2),
                            lambda d: mpsx.CNNUpsamplingBilinearGradient(d, 2, 2)),
    "dropout": (lambda d: mpsx.CNNDropout(d, 0.5, 7), lambda d: mpsx.CNNDropoutGradient(d, 0.5, 7)),
}
for _name, _forward, _gradient in (("add", mpsx.CNNAdd, mpsx.CNNAddGradient),
                                   ("subtract", mpsx.CNNSubtract, mpsx.CNNSubtractGradient),
                                   ("multiply", mpsx.CNNMultiply, mpsx.CNNMultiplyGradient),
                                   ("divide", mpsx.CNNDivide, None), ("compare", mpsx.NNCompare, None)):
    for _secondary in (False, True):
        FAMILIES[f"{_name}:{'secondary' if _secondary else 'primary'}"] = (
            _forward, _gradient and (lambda d, g=_gradient, s=_secondary: g(d, s)))
FAMILIES["loss"] = (lambda d: mpsx.CNNLoss(d, MSE), None)
FAMILIES["forward_loss"] = (lambda d: mpsx.NNForwardLoss(d, MSE), lambda d: mpsx.NNLossGradient(d, MSE))

# What gives the out-of-place result on cpu and cuda: the forward kernel's
# forms, and the gradient's over the source gradient ("gradient") and over
# its secondary image ("source"): "exact" for the destination exactly over
# it, "any" for every overlap. Everything else is refused.
IN_PLACE = {
    "convolution": {"source": "any"},
    "convolution+neuron": {"gradient": "any", "source": "any"},
    "fully_connected": {"source": "any"},
    "neuron": {"forward": "exact", "gradient": "exact", "source": "exact"},
    "softmax": {"forward": "exact", "gradient": "exact", "source": "exact"},
    "log_softmax": {"forward": "exact", "gradient": "exact", "source": "exact"},
    "batch_normalization": {"forward": "exact", "gradient": "exact", "source": "exact"},
    "dropout": {"forward": "exact", "gradient": "exact", "source": "exact"},
    "instance_normalization": {"forward": "exact", "gradient": "exact", "source": "exact"},
    "group_normalization": {"forward": "exact", "gradient": "exact", "source": "exact"},
    "cross_channel_normalization": {"forward": "exact"},
    "spatial_normalization": {"forward": "exact", "gradient": "exact", "source": "exact"},
}


def allowed(device, support, form):
    """Whether a destination of `form` over an image the kernel supports `support` for gives the
    out-of-place result."""
    if form == "apart":
        return True
    if device.backend == "metal" or support is None:
        return False
    return support == "any" or form in ("exact", "disjoint_channels")


def batch(device, images, channels=C, seed=0):
    return mpsx.ImageBatch.from_numpy(
        device, np.random.default_rng(seed).uniform(0.1, 1, (images, channels, H, W)).astype(np.float32))


def copy(device, images):
    return mpsx.ImageBatch.from_numpy(device, images.to_numpy())


def finish(cb, *images):
    for image in images:
        image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


# ---------------------------------------------------------------- forward kernels


class Forward:
    """A family's forward kernel as encode(cb, source, destination) with one
    source aliased: the source, a binary kernel's primary or secondary image
    (the other a separate image), or a loss's source (labels separate)."""

    def __init__(self, device, family):
        self.device, self.family = device, family
        self.kernel = FAMILIES[family][0](device)
        self.role = family.partition(":")[2]

    def configure(self, form):
        k = self.kernel
        if form == "offset":
            if self.role:
                setattr(k, f"{self.role}_offset", (1, 0, 0))
            else:
                k.offset = (1, 0, 0)
            k.clip_rect = mpsx.Region(0, 0, 0, W - 1, H, N)
        elif form in ("channels", "disjoint_channels"):
            prefix = f"{self.role}_" if self.role else ""
            setattr(k, f"{prefix}source_feature_channel_offset", 4 if form == "channels" else C)

    def encode(self, cb, source, destination):
        k, other = self.kernel, batch(self.device, N, seed=9)
        if self.role == "primary":
            return k.encode_batch(cb, source, other, destination_images=destination)
        if self.role == "secondary":
            return k.encode_batch(cb, other, source, destination_images=destination)
        if self.family == "loss":
            return k.encode_batch(cb, source, mpsx.CNNLossLabels(self.device, other.to_numpy()),
                                  destination_images=destination)
        if self.family == "forward_loss":
            return k.encode_batch(cb, source, other, destination_images=destination)
        return k.encode_batch(cb, source, destination_images=destination)


def destination_slice(form):
    """Where the destination lies in the allocation; the source is its images 0..N-1."""
    return {"batch": slice(1, N + 1), "apart": slice(N, 2 * N)}.get(form, slice(0, N))


def allocation(device, form):
    channels = {"channels": C + 4, "disjoint_channels": 2 * C}.get(form, C)
    return batch(device, {"batch": N + 1, "apart": 2 * N}.get(form, N), channels)


def forward_not_applicable(family, form):
    # A loss covers whole images, and a fully connected layer its whole source.
    return (form in ("offset", "channels", "disjoint_channels") and "loss" in family) or (
        family == "fully_connected" and form == "offset")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_forward(device, family, form):
    if forward_not_applicable(family, form):
        pytest.skip(f"{family} has no {form} form")
    # The out-of-place reference: the destination in a copy of the allocation.
    a = allocation(device, form)
    expected = copy(device, a)
    reference = Forward(device, family)
    reference.configure(form)
    cb = device.command_queue.command_buffer()
    reference.encode(cb, a[0:N], expected[destination_slice(form)])
    finish(cb, expected)

    before = a.to_numpy()
    kernel = Forward(device, family)
    kernel.configure(form)
    cb = device.command_queue.command_buffer()
    source, destination = a[0:N], a[destination_slice(form)]
    if allowed(device, IN_PLACE.get(family, {}).get("forward"), form):
        kernel.encode(cb, source, destination)
        finish(cb, a)
        np.testing.assert_allclose(a.to_numpy(), expected.to_numpy(), rtol=1e-4, atol=1e-5)
    else:
        with pytest.raises(ValueError, match="destination image (shares memory with|overlaps) the"):
            kernel.encode(cb, source, destination)
        finish(cb, a)  # nothing was enqueued: the command buffer runs, the image is as it was
        np.testing.assert_array_equal(a.to_numpy(), before)


# ---------------------------------------------------------------- gradient kernels

GRADIENT_FORMS = ("exact_gradient", "exact_source", "offset", "channels", "batch_gradient", "batch_source", "apart")
# The image the destination gradient overlaps in each form.
OVER = {"exact_gradient": "gradient", "batch_gradient": "gradient"}


class Gradient(Forward):
    """A family's forward encode with a state, then its gradient encode with a given destination gradient. The
    forward writes into `result`; the gradient's secondary image is the forward source, or the forward result for
    softmax and log-softmax (a binary kernel's: the image its filter reads)."""

    def __init__(self, device, family):
        super().__init__(device, family)
        self.forward, self.gradient = self.kernel, FAMILIES[family][1](device)
        self.reads_result = family in ("softmax", "log_softmax")
        # A binary kernel's source: the image the gradient filter reads (a
        # multiplication's primary filter reads the secondary image).
        if self.role:
            secondary = family.startswith("multiply") != (self.role == "secondary")
            self.role = "secondary" if secondary else "primary"

    def encode(self, cb, source, result, source_gradient, destination_gradient):
        f, g, device = self.forward, self.gradient, self.device
        if self.family == "batch_normalization":
            state = f.result_state(source)
            statistics = mpsx.CNNBatchNormalizationStatistics(device)
            statistics.source_feature_channel_offset = f.source_feature_channel_offset
            statistics.encode_batch(cb, source, state)
            f.encode_batch(cb, source, state, destination_images=result)
            mpsx.CNNBatchNormalizationStatisticsGradient(device).encode_batch(cb, source_gradient, source, state)
            return g.encode_batch(cb, source_gradient, source, state, destination_gradients=destination_gradient)
        if self.family == "forward_loss":
            labels = batch(device, N, seed=9)
            _, states = f.encode_batch(cb, source, labels, destination_states=True, destination_images=result)
            return g.encode_batch(cb, source_gradient, source, labels, source_states=states,
                                  destination_gradients=destination_gradient)
        if self.role:
            other = batch(device, N, seed=9)
            primary, secondary = (other, source) if self.role == "secondary" else (source, other)
            _, states = f.encode_batch(cb, primary, secondary, destination_images=result, destination_states=True)
            return g.encode_batch(cb, source_gradient, source, states, destination_gradient)
        _, states = f.encode_batch(cb, source, destination_images=result, destination_states=True)
        return g.encode_batch(cb, source_gradient, result if self.reads_result else source, states,
                              destination_gradient)


def result_shape(device, family, form):
    """The forward result's shape (N, C, H, W) for the source of `form`."""
    g = Gradient(device, family)
    g.configure(form)
    source, other = allocation(device, form)[0:N], batch(device, N)
    if g.role:
        return g.forward.destination_image_descriptor([other, source] if g.role == "secondary" else [source, other])
    return g.forward.destination_image_descriptor(source)


def gradient_images(device, family, form):
    """The allocations the encode reads and writes: the source's, the forward result's, the source
    gradient's, and the destination gradient's view: in the source's allocation, the source gradient's
    (forms over the gradient), or a result's (exact_source where the gradient reads the forward result)."""
    d = result_shape(device, family, form)
    source = allocation(device, "batch" if form == "batch_source" else "apart" if form == "apart" else form)
    images = 2 * N if form == "apart" else N + 1 if form == "batch_gradient" else N
    result = batch(device, N, d.feature_channels, seed=3) if (d.height, d.width) == (H, W) else None
    if result is None:
        result = mpsx.ImageBatch.from_numpy(device, np.zeros((N, d.feature_channels, d.height, d.width), np.float32))
    gradient = mpsx.ImageBatch.from_numpy(
        device, np.random.default_rng(4).standard_normal((images, d.feature_channels, d.height, d.width))
        .astype(np.float32))
    return {"source": source, "result": result, "gradient": gradient}


def gradient_not_applicable(family, form):
    if FAMILIES[family][1] is None:
        return "it has no gradient kernel"
    if form in ("exact_gradient", "batch_gradient") and family in (
            "fully_connected", "upsampling_nearest", "upsampling_bilinear"):
        return "its source gradient is not shaped as its source"
    if form in ("offset", "channels") and "loss" in family:
        return "a loss covers whole images"
    if form == "channels" and family.startswith("multiply"):
        return "the gradient is shaped as the image its filter does not read"
    if form == "offset" and family == "fully_connected":
        return "a fully connected layer reads its whole source"
    return None


@pytest.mark.parametrize("form", GRADIENT_FORMS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gradient(device, family, form):
    if reason := gradient_not_applicable(family, form):
        pytest.skip(f"{family}: {reason}")
    reads_result = Gradient(device, family).reads_result
    over = OVER.get(form, "result" if form == "exact_source" and reads_result else "source")
    where = slice(N, 2 * N) if form == "apart" else slice(1, N + 1) if form.startswith("batch") else slice(0, N)

    def encode(cb, images, destination):
        g = Gradient(device, family)
        g.configure(form)
        g.encode(cb, images["source"][0:N], images["result"], images["gradient"][0:N], destination)

    # The out-of-place reference: the destination gradient in a copy of its allocation.
    images = gradient_images(device, family, form)
    expected = copy(device, images[over])
    cb = device.command_queue.command_buffer()
    encode(cb, images, expected[where])
    finish(cb, expected)

    images = gradient_images(device, family, form)
    before = images[over].to_numpy() if over != "result" else None
    support = IN_PLACE.get(family, {}).get("gradient" if over == "gradient" else "source")
    cb = device.command_queue.command_buffer()
    # A gradient that reads the forward result does not read the forward source: no overlap.
    if (over == "source" and reads_result) or allowed(device, support, "exact" if form.startswith("exact") else form):
        encode(cb, images, images[over][where])
        finish(cb, images[over])
        np.testing.assert_allclose(images[over].to_numpy(), expected.to_numpy(), rtol=1e-4, atol=1e-5)
    else:
        with pytest.raises(ValueError, match="destination gradient (shares memory with|overlaps) the"):
            encode(cb, images, images[over][where])
        finish(cb, images[over])  # the forward encode runs; the destination is as it was (or as the forward wrote it)
        if before is not None:
            np.testing.assert_array_equal(images[over].to_numpy(), before)


# ---------------------------------------------------------------- states' buffers


def image_over(device, buffer, shape):
    """An image of `shape` over the memory of `buffer` (DLPack, no copy)."""
    if device.backend == "cpu":
        values = np.from_dlpack(buffer)
    else:
        torch = pytest.importorskip("torch")
        if device.backend != "cuda" or not torch.cuda.is_available():
            pytest.skip("metal imports memory by a copy")
        values = torch.from_dlpack(buffer)
    n, c, h, w = shape
    nhwc = values.reshape(n, h, w, c)
    return mpsx.Image.from_dlpack(device, nhwc.transpose(0, 3, 1, 2) if device.backend == "cpu"
                                  else nhwc.permute(0, 3, 1, 2))


def test_destination_over_a_state_buffer(device):
    # A convolution gradient's destination over the weights gradient it writes beside it (8x3x3x8 float32, the
    # size of an 8x8x9 image), a batch normalization's over the gamma its forward encode keeps in the state.
    source = mpsx.Image.from_numpy(device, np.random.default_rng(1).standard_normal((1, C, 8, 9)).astype(np.float32))
    conv, gradient = FAMILIES["convolution"][0](device), FAMILIES["convolution"][1](device)
    cb = device.command_queue.command_buffer()
    y, state = conv.encode(cb, source, destination_state=True)
    with pytest.raises(ValueError, match="destination gradient shares memory with a buffer of the "
                                         "MPSCNNConvolutionGradientState"):
        gradient.encode(cb, y, source, state, image_over(device, state.gradient_for_weights, (1, C, 8, 9)))
    bn, x = FAMILIES["batch_normalization"][0](device), mpsx.Image.from_numpy(device, np.ones((1, C, 1, 1), np.float32))
    bn_state = bn.result_state(x)
    mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, x, bn_state)
    with pytest.raises(ValueError, match="destination image shares memory with a buffer of the "
                                         "MPSCNNBatchNormalizationState"):
        bn.encode(cb, x, bn_state, image_over(device, bn_state.gamma, (1, C, 1, 1)))
    finish(cb)  # nothing was enqueued past the forward encodes

"""The table of MPSCNNGradientKernel families mpsx has: for each
one, its forward and gradient kernels are made on every device and one
training step through them gives gradients shaped as their sources, so the
table is a test, not a claim. Each family's own test file checks values."""

import numpy as np
import pytest

import mpsx

# The fourteen subclasses of MPSCNNGradientKernel the seed lists, by family.
SEED_FAMILIES = [
    "Arithmetic", "BatchNormalization", "BatchNormalizationStatistics", "Convolution",
    "CrossChannelNormalization", "Dropout", "InstanceNormalization", "LocalContrastNormalization",
    "LogSoftMax", "Neuron", "Pooling", "SoftMax", "SpatialNormalization", "Upsampling",
]

# What mpsx has today.
PRESENT = {"Arithmetic", "BatchNormalization", "BatchNormalizationStatistics", "Convolution",
           "CrossChannelNormalization", "Dropout", "InstanceNormalization", "LocalContrastNormalization", "LogSoftMax",
           "Neuron", "Pooling", "SoftMax", "SpatialNormalization", "Upsampling"}


def weights(channels_in, channels_out):
    rng = np.random.default_rng(0)
    d = mpsx.CNNConvolutionDescriptor(3, 3, channels_in, channels_out)
    return mpsx.ConvolutionWeights(d, rng.standard_normal((channels_out, 3, 3, channels_in)).astype(np.float32),
                                   np.zeros(channels_out, np.float32))


def unary(forward, gradient, secondary="source"):
    """A training step through a unary forward kernel and its gradient."""
    def step(device, cb, x):
        y, state = forward.encode(cb, x, destination_state=True)
        dy = mpsx.Image.from_numpy(device, np.ones((1, y.feature_channels, y.height, y.width), np.float32))
        return [gradient.encode(cb, dy, y if secondary == "result" else x, state)]
    return step


def batch_normalization(device):
    d = mpsx.BatchNormalizationWeights(np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32),
                                       np.ones(4, np.float32))
    bn = mpsx.CNNBatchNormalization(device, d)

    def step(device, cb, x):
        rng = np.random.default_rng(2)
        batch = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 4, 5, 6)).astype(np.float32))
        state = bn.result_state(batch)
        mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, batch, state)
        y = bn.encode_batch(cb, batch, state)
        dy = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 4, 5, 6)).astype(np.float32))
        mpsx.CNNBatchNormalizationStatisticsGradient(device).encode_batch(cb, dy, batch, state)
        return [mpsx.CNNBatchNormalizationGradient(device).encode_batch(cb, dy, batch, state)]
    return step


def arithmetic(device):
    def step(device, cb, x):
        _, state = mpsx.CNNMultiply(device).encode(cb, x, x, destination_state=True)
        dy = mpsx.Image.from_numpy(device, np.ones((1, 4, 5, 6), np.float32))
        return [mpsx.CNNMultiplyGradient(device, secondary).encode(cb, dy, x, state) for secondary in (False, True)]
    return step


BUILDERS = {
    "Arithmetic": arithmetic,
    "BatchNormalization": batch_normalization,
    "BatchNormalizationStatistics": batch_normalization,
    "Convolution": lambda device: unary(mpsx.CNNConvolution(device, weights(4, 8)),
                                        mpsx.CNNConvolutionGradient(device, weights(4, 8))),
    "CrossChannelNormalization": lambda device: unary(mpsx.CNNCrossChannelNormalization(device, 3),
                                                      mpsx.CNNCrossChannelNormalizationGradient(device, 3)),
    "Dropout": lambda device: unary(mpsx.CNNDropout(device, 0.5, 7, (1, 1, 1)),
                                    mpsx.CNNDropoutGradient(device, 0.5, 7, (1, 1, 1))),
    "LocalContrastNormalization": lambda device: unary(mpsx.CNNLocalContrastNormalization(device, 3, 3),
                                                       mpsx.CNNLocalContrastNormalizationGradient(device, 3, 3)),
    "InstanceNormalization": lambda device: unary(
        mpsx.CNNInstanceNormalization(device, mpsx.InstanceNormalizationWeights(np.full(4, 1.5, np.float32),
                                                                                np.zeros(4, np.float32))),
        mpsx.CNNInstanceNormalizationGradient(device)),
    "LogSoftMax": lambda device: unary(mpsx.CNNLogSoftMax(device), mpsx.CNNLogSoftMaxGradient(device), "result"),
    "Neuron": lambda device: unary(mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH, 1, 1)),
                                   mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH, 1, 1))),
    "Pooling": lambda device: unary(mpsx.CNNPoolingMax(device, 2, 2, 2, 2),
                                    mpsx.CNNPoolingMaxGradient(device, 2, 2, 2, 2)),
    "SoftMax": lambda device: unary(mpsx.CNNSoftMax(device), mpsx.CNNSoftMaxGradient(device), "result"),
    "SpatialNormalization": lambda device: unary(mpsx.CNNSpatialNormalization(device, 3, 3),
                                                 mpsx.CNNSpatialNormalizationGradient(device, 3, 3)),
    "Upsampling": lambda device: unary(mpsx.CNNUpsamplingNearest(device, 2, 2),
                                       mpsx.CNNUpsamplingNearestGradient(device, 2, 2)),
}


def test_the_table_of_families_is_what_exists():
    exists = {f for f in SEED_FAMILIES if hasattr(mpsx, f"CNN{f}Gradient")
              or (f == "Arithmetic" and hasattr(mpsx, "CNNAddGradient"))
              or (f == "Upsampling" and hasattr(mpsx, "CNNUpsamplingNearestGradient"))}
    assert exists == PRESENT
    assert set(BUILDERS) == PRESENT


@pytest.mark.parametrize("family", sorted(PRESENT))
def test_a_training_step_through_each_family(device, family):
    x = mpsx.Image.from_numpy(device, np.random.default_rng(1).standard_normal((1, 4, 5, 6)).astype(np.float32))
    step = BUILDERS[family](device)
    cb = device.command_queue.command_buffer()
    gradients = step(device, cb, x)
    for g in gradients:
        g.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed"
    for g in gradients:
        values = g.to_numpy()
        assert values.shape[1:] == (4, 5, 6)  # the gradient of a source is shaped as that source
        assert np.isfinite(values).all() and np.abs(values).sum() > 0

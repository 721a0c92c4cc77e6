"""Apple's MPSNNGraph training sample ("Training a Neural Network with Metal Performance Shaders", WWDC19), ported
call for call onto scikit-learn's 8x8 digits: two 5x5 convolutions (32 and 64 channels) with ReLU and 2x2 max
pooling, a fully connected layer of 1024 with ReLU, dropout keeping half, a fully connected layer of 10 classes and
softmax cross-entropy; a batch of 40 images (a list of single images, MPSImageBatch), one labels object per image
made from a 1x1x12 MPSCNNLossDataDescriptor (10 classes padded to 12 channels, "the closest multiple of 4"), and
data sources that encode their own Adam update from the gradient state (updateWithCommandBuffer:gradientState:
sourceState:). 300 iterations, then an inference graph over the same data sources, without dropout, classifies the
held-out split. float32 graph images."""

import numpy as np
import pytest

import mpsx
from helpers import StateConvolutionSource

ITERATIONS, BATCH, CLASSES, PADDED_CLASSES = 300, 40, 10, 12


class AdamConvolutionDataSource(StateConvolutionSource):
    """The sample's data source: its weights and biases live in a weights state that its own Adam updates on the
    command buffer, from the gradient state the graph hands it."""

    def __init__(self, device, rng, kernel, inputs, outputs, name):
        self._descriptor = mpsx.CNNConvolutionDescriptor(kernel, kernel, inputs, outputs)
        fan_in = kernel * kernel * inputs
        weights = rng.uniform(-1, 1, self._descriptor.weights_shape) * np.sqrt(6 / fan_in)
        self.state = mpsx.CNNConvolutionWeightsAndBiasesState(device, weights.astype(np.float32),
                                                              np.zeros(outputs, np.float32))
        self.optimizer = mpsx.NNOptimizerAdam(device, learning_rate=1e-3)
        self.momentum = [mpsx.Vector(device, weights.size), mpsx.Vector(device, outputs)]
        self.velocity = [mpsx.Vector(device, weights.size), mpsx.Vector(device, outputs)]
        for vector in self.momentum + self.velocity:
            vector.write(np.zeros(vector.length, np.float32))
        self.name = name

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        self.optimizer.encode(command_buffer, convolution_gradient_state=gradient_state,
                              convolution_source_state=source_state, input_momentum_vectors=self.momentum,
                              input_velocity_vectors=self.velocity, result_state=self.state)
        return self.state

    def checkpoint_with_command_queue(self, command_queue):
        """The sample's checkpoint before inference: the weights state made readable on the host, where
        reloadFromDataSources reads weights()."""
        with command_queue.command_buffer() as cb:
            self.state.synchronize(cb)


def digits(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[:, None]
    return train_test_split(images, data.target, test_size=0.2, stratify=data.target, random_state=seed)


def labels_batch(device, classes):
    """One MPSCNNLossLabels per image from a 1x1x12 descriptor in HeightxWidthxFeatureChannels layout."""
    batch = []
    for c in classes:
        padded = np.zeros(PADDED_CLASSES, np.float32)
        padded[c] = 1
        descriptor = mpsx.CNNLossDataDescriptor(padded, mpsx.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS,
                                                (1, 1, PADDED_CLASSES))
        batch.append(mpsx.CNNLossLabels(device, labels_descriptor=descriptor))
    return batch


def build(device, rng, by_hand=False):
    """The training graph, the inference graph and the data sources. The training graph comes from the loss node's
    training_graph (trainingGraphWithSourceGradient:), or, by_hand, from gradient nodes made one by one with
    gradient_filter_with_source, as the independent trainer does."""
    sources = [AdamConvolutionDataSource(device, rng, 5, 1, 32, "conv1"),
               AdamConvolutionDataSource(device, rng, 5, 32, 64, "conv2"),
               AdamConvolutionDataSource(device, rng, 2, 64, 1024, "fc1"),
               AdamConvolutionDataSource(device, rng, 1, 1024, CLASSES, "fc2")]

    def layers(dropout):
        filters = []
        x = mpsx.NNImageNode(mpsx.NNHandle("images"))
        for source in sources[:2]:
            filters.append(mpsx.CNNConvolutionNode(x, source))
            filters.append(mpsx.CNNNeuronReLUNode(filters[-1].result_image))
            filters.append(mpsx.CNNPoolingMaxNode(filters[-1].result_image, 2))  # 8x8 -> 4x4 -> 2x2
            x = filters[-1].result_image
        filters.append(mpsx.CNNFullyConnectedNode(filters[-1].result_image, sources[2]))
        filters.append(mpsx.CNNNeuronReLUNode(filters[-1].result_image))
        if dropout:
            filters.append(mpsx.CNNDropoutNode(filters[-1].result_image, keep_probability=0.5, seed=7))
        filters.append(mpsx.CNNFullyConnectedNode(filters[-1].result_image, sources[3]))
        return filters

    descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    descriptor.reduce_across_batch = True
    filters = layers(dropout=True)
    loss = mpsx.CNNLossNode(filters[-1].result_image, descriptor)
    if by_hand:
        gradient = loss.result_image  # the loss node's result is the gradient of the loss
        for node in reversed(filters):
            gradient = node.gradient_filter_with_source(gradient).result_image
    else:
        gradient = loss.training_graph()[0].result_image
    training = mpsx.NNGraph(device, gradient, False, format=mpsx.DataType.FLOAT32)
    probabilities = mpsx.CNNSoftMaxNode(layers(dropout=False)[-1].result_image).result_image
    probabilities.synchronize_resource = True
    inference = mpsx.NNGraph(device, probabilities, format=mpsx.DataType.FLOAT32)
    return training, inference, sources


@pytest.mark.parametrize("by_hand", [False, True], ids=["training_graph", "gradient_nodes_by_hand"])
def test_the_wwdc19_sample_ported_call_for_call_learns_digits(device, by_hand):
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    train_images, test_images, train_classes, test_classes = digits(0)
    training, inference, sources = build(device, rng, by_hand)
    previous = None
    for iteration in range(ITERATIONS):
        pick = rng.choice(len(train_images), BATCH, replace=False)
        images = [mpsx.Image.from_numpy(device, train_images[i:i + 1]) for i in pick]
        cb = device.command_queue.command_buffer()
        training.encode_batch(cb, [images], [labels_batch(device, train_classes[pick])])
        cb.commit()
        if previous is not None:  # the sample keeps one command buffer in flight while it encodes the next
            previous.wait_until_completed()
            assert previous.status == "completed", previous.error
        previous = cb
    previous.wait_until_completed()
    assert previous.status == "completed", previous.error

    for source in sources:
        source.checkpoint_with_command_queue(device.command_queue)
    inference.reload_from_data_sources()
    with device.command_queue.command_buffer() as cb:
        result = inference.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, test_images)])
    predicted = result.to_numpy().reshape(len(test_images), CLASSES).argmax(axis=1)
    accuracy = float(np.mean(predicted == test_classes))
    assert accuracy >= 0.90, f"test accuracy {accuracy:.3f} after {ITERATIONS} iterations of {BATCH}"

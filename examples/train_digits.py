"""Trains a small CNN on scikit-learn's handwritten digits through an NNGraph,
MPS style, and measures it on a held-out test split after every epoch; plots
the training loss and the test accuracy to a PNG.

    python examples/train_digits.py [--epochs N] [--batch-size N] [--device NAME] [--plot PATH] [--seed N]

The data set (1797 grayscale 8x8 images of the digits 0-9, 16 gray levels)
ships with scikit-learn; 20% of it, stratified, is the test split. The model:
two 3x3 convolutions (1->16, 16->32, "same" padding) with ReLU, 2x2 max
pooling, a fully connected layer 4*4*32 -> 10 and softmax cross-entropy,
trained with Adam. The training graph (training_graph of the loss node)
runs the forward pass, the loss, the backward pass and the Adam updates on
each step's command buffer; an inference graph of the same nodes, reloaded
from the trained data sources, classifies the test split.

Needs the `examples` extra: pip install '.[examples]'.
"""

import argparse
import time

import matplotlib
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import mpsx

matplotlib.use("Agg")  # writes the PNG without a display
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

CLASSES = 10
LEARNING_RATE = 3e-3


def load_split(seed):
    """Train and test images (N, 1, 8, 8) scaled to [0, 1], and their labels."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # pixel values 0..16
    return train_test_split(images, digits.target, test_size=0.2, stratify=digits.target, random_state=seed)


def one_hot(labels):
    """The loss labels MPS takes, shaped like the logits: (N, 10, 1, 1)."""
    out = np.zeros((len(labels), CLASSES, 1, 1), np.float32)
    out[np.arange(len(labels)), labels] = 1
    return out


def weights(device, rng, kernel, cin, cout):
    """He-initialized ConvolutionWeights (OHWI) trained by their own Adam on the device."""
    descriptor = mpsx.CNNConvolutionDescriptor(kernel, kernel, cin, cout)
    w = rng.normal(0, np.sqrt(2 / (kernel * kernel * cin)), descriptor.weights_shape).astype(np.float32)
    return mpsx.ConvolutionWeights(descriptor, w, np.zeros(cout, np.float32),
                                   optimizer=mpsx.NNOptimizerAdam(device, learning_rate=LEARNING_RATE))


def build_graphs(device, rng):
    """The training graph and an inference graph (class probabilities) over the same nodes."""
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    x = mpsx.NNImageNode(mpsx.NNHandle("images"))
    x = mpsx.CNNNeuronNode(mpsx.CNNConvolutionNode(x, weights(device, rng, 3, 1, 16)).result_image, relu).result_image
    x = mpsx.CNNNeuronNode(mpsx.CNNConvolutionNode(x, weights(device, rng, 3, 16, 32)).result_image, relu).result_image
    x = mpsx.CNNPoolingMaxNode(x, 2).result_image  # 8x8 -> 4x4
    logits = mpsx.CNNFullyConnectedNode(x, weights(device, rng, 4, 32, CLASSES)).result_image
    descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    descriptor.reduce_across_batch = True  # one loss value: the batch mean
    loss = mpsx.CNNLossNode(logits, descriptor)
    loss.input_labels.handle = mpsx.NNHandle("labels")
    # float32 images: on cpu, float16 (MPS's default format) is converted around every kernel.
    training = mpsx.NNGraph(device, loss.training_graph()[0].result_image, False, format=mpsx.DataType.FLOAT32)
    probabilities = mpsx.CNNSoftMaxNode(logits).result_image
    probabilities.synchronize_resource = True  # read on the host
    inference = mpsx.NNGraph(device, probabilities, format=mpsx.DataType.FLOAT32)
    return training, inference


def train_epoch(device, graph, images, labels, batch_size, rng, bar):
    """One pass over the training split in shuffled mini-batches; returns the mean loss. Python
    encodes each step while the queue still runs the one before, whose loss it reads after."""
    queue = device.command_queue
    order = rng.permutation(len(images))
    losses, previous = [], None
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        loss_labels = mpsx.CNNLossLabels(device, one_hot(labels[batch]))
        cb = queue.command_buffer()
        graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, images[batch])], [loss_labels])
        loss_labels.synchronize(cb)  # the loss is read on the host
        cb.commit()
        if previous is not None:
            losses.append(read_loss(*previous))
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        bar.update(len(batch))
        previous = cb, loss_labels
    losses.append(read_loss(*previous))
    return float(np.mean(losses))


def read_loss(cb, loss_labels):
    cb.wait_until_completed()
    if cb.status != "completed":
        raise cb.error
    return float(loss_labels.loss_image().to_numpy()[0, 0, 0, 0])


def accuracy(device, graph, images, labels):
    """The fraction of images whose most probable class is their label: one forward pass."""
    graph.reload_from_data_sources()  # the weights the training graph's updates left in the data sources
    with device.command_queue.command_buffer() as cb:
        probabilities = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, images)])
    predicted = probabilities.to_numpy().reshape(len(images), CLASSES).argmax(axis=1)
    return float(np.mean(predicted == labels))


def plot(path, losses, accuracies):
    epochs = np.arange(1, len(losses) + 1)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(epochs, losses, marker="o")
    left.set(xlabel="epoch", ylabel="mean training loss", title="training loss (softmax cross-entropy)")
    left.set_yscale("log")
    right.plot(epochs, np.array(accuracies) * 100, marker="o", color="tab:green")
    right.set(xlabel="epoch", ylabel="test accuracy (%)", title="accuracy on the held-out test split")
    for axes in (left, right):
        axes.grid(True, alpha=0.3)
        axes.set_xticks(epochs)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--plot", default="digits_training.png", help="where to write the plot (PNG)")
    parser.add_argument("--seed", type=int, default=0, help="for the split, the weights and the shuffling")
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1:
        parser.error(f"--epochs and --batch-size must be at least 1, given {args.epochs} and {args.batch_size}")

    device = mpsx.Device(args.device)
    rng = np.random.default_rng(args.seed)
    train_images, test_images, train_labels, test_labels = load_split(args.seed)
    training, inference = build_graphs(device, rng)
    print(f"device: {device.name} ({device.backend} backend)")
    print(f"digits: {len(train_images)} training and {len(test_images)} test images, 8x8; "
          f"batch {args.batch_size}, {args.epochs} epochs")

    losses, accuracies = [], []
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        with tqdm(total=len(train_images), desc=f"epoch {epoch}/{args.epochs}", unit="img", leave=False) as bar:
            losses.append(train_epoch(device, training, train_images, train_labels, args.batch_size, rng, bar))
        accuracies.append(accuracy(device, inference, test_images, test_labels))
        tqdm.write(f"epoch {epoch:3d}  loss {losses[-1]:.4f}  test accuracy {accuracies[-1]:.4f}")
    print(f"test accuracy {accuracies[-1]:.4f} after {args.epochs} epochs, {time.perf_counter() - start:.1f} s")
    plot(args.plot, losses, accuracies)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()

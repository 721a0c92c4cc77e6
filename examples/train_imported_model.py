"""Brings a PyTorch model into mpsx (mpsx.from_torch), trains it on scikit-learn's handwritten digits upsampled
to --size pixels, then hands the trained weights back to PyTorch and measures both on the held-out test split.

    python examples/train_imported_model.py [--model resnet18|cnn] [--epochs N] [--batch-size N] [--size N]
                                            [--device NAME] [--seed N]

--model resnet18 (the default) is torchvision's ResNet-18 (weights=None, 10 classes; the gray digits repeated
into its 3 input channels); --model cnn a small PyTorch CNN written below, for machines without torchvision.
The imported model's training graph (forward, cross entropy, backward, SGD updates with momentum) runs each step
on one command buffer; the second step records it, and it and every later one replay the recording (NNGraph
capture_encodes: one CUDA graph launch on cuda; Adam, whose time step each encode resolves anew, would encode every
step). Then mpsx's state dict goes back into the PyTorch module (load_state_dict, strict), and both
classify the test split: their accuracies are equal.

Needs torch and the `examples` extra (scikit-learn, tqdm): pip install '.[examples]' torch torchvision.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import mpsx

CLASSES = 10


def load_split(size, channels, seed):
    """Train and test images (N, channels, size, size) in [0, 1], upsampled from 8x8 by repeating pixels, and
    their labels."""
    digits = load_digits()
    if size % 8:
        raise SystemExit(f"--size must be a multiple of 8, given {size}")
    images = np.kron(digits.images / 16.0, np.ones((size // 8, size // 8))).astype(np.float32)
    images = np.repeat(images[:, None], channels, axis=1)
    return train_test_split(images, digits.target, test_size=0.2, stratify=digits.target, random_state=seed)


def small_cnn(size):
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * (size // 4) ** 2, CLASSES))


def torch_model(name, size):
    """The PyTorch module and its input channels."""
    if name == "cnn":
        return small_cnn(size), 1
    import torchvision  # only for --model resnet18
    return torchvision.models.resnet18(weights=None, num_classes=CLASSES), 3


def train_epoch(device, graph, images, labels, batch_size, rng, bar):
    """One pass over the training split in shuffled batches of one size (a last, smaller one is left out, so
    that the recorded step repeats); returns the mean loss."""
    order = rng.permutation(len(images))
    losses = []
    for start in range(0, len(order) - batch_size + 1, batch_size):
        batch = order[start:start + batch_size]
        one_hot = np.eye(CLASSES, dtype=np.float32)[labels[batch]].reshape(-1, CLASSES, 1, 1)
        loss_labels = mpsx.CNNLossLabels(device, one_hot)
        cb = device.command_queue.command_buffer()
        graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, images[batch])], [loss_labels])
        loss_labels.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        if cb.status != "completed":
            raise cb.error
        losses.append(float(loss_labels.loss_image().to_numpy()[0, 0, 0, 0]))
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
        bar.update(len(batch))
    return float(np.mean(losses))


def mpsx_predictions(device, graph, images, batch_size):
    graph.reload_from_data_sources()  # the values the training graph's updates left in the data sources
    predicted = []
    for start in range(0, len(images), batch_size):
        with device.command_queue.command_buffer() as cb:
            logits = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, images[start:start + batch_size])])
            logits.synchronize(cb)
        predicted.append(logits.to_numpy().reshape(-1, CLASSES).argmax(axis=1))
    return np.concatenate(predicted)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["resnet18", "cnn"], default="resnet18")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--size", type=int, default=32, help="the images' width and height, a multiple of 8")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, metal (default: the best present)")
    parser.add_argument("--learning-rate", type=float, default=0.02, help="SGD's, with momentum 0.9")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1:
        parser.error(f"--epochs and --batch-size must be at least 1, given {args.epochs} and {args.batch_size}")

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    module, channels = torch_model(args.model, args.size)
    train_images, test_images, train_labels, test_labels = load_split(args.size, channels, args.seed)
    device = mpsx.Device(args.device)
    model = mpsx.from_torch(module, torch.zeros(args.batch_size, channels, args.size, args.size), device)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=args.learning_rate, momentum_scale=0.9)
    training = model.training_graph(nn.CrossEntropyLoss(), sgd)
    inference = model.inference_graph()
    print(f"device: {device.name} ({device.backend} backend)")
    print(f"model: {args.model}, {len(model.data_sources)} trainable layers; digits at {args.size}x{args.size}: "
          f"{len(train_images)} training and {len(test_images)} test images")

    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        with tqdm(total=len(train_images), desc=f"epoch {epoch}/{args.epochs}", unit="img", leave=False) as bar:
            loss = train_epoch(device, training, train_images, train_labels, args.batch_size, rng, bar)
        tqdm.write(f"epoch {epoch:3d}  loss {loss:.4f}")
    print(f"trained in {time.perf_counter() - start:.1f} s ({training.captured_encode_count} steps replayed)")

    ours = mpsx_predictions(device, inference, test_images, args.batch_size)
    module.load_state_dict({name: torch.from_numpy(value) for name, value in model.state_dict().items()})
    module.eval()
    with torch.no_grad():
        theirs = module(torch.from_numpy(test_images)).argmax(dim=1).numpy()
    accuracy, torch_accuracy = float(np.mean(ours == test_labels)), float(np.mean(theirs == test_labels))
    print(f"test accuracy: mpsx {accuracy:.4f}, PyTorch with mpsx's weights {torch_accuracy:.4f}; "
          f"the same class for {np.mean(ours == theirs) * 100:.1f}% of the test images")


if __name__ == "__main__":
    main()

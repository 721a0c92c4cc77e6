"""The reference CNN (benchmarks/reference_cnn.py), hand-encoded,
against the same model in PyTorch from the same initial weights."""

import numpy as np
import pytest
import torch

import mpsx
from mpsx.benchmarks.reference_cnn import ReferenceCNN, TorchReferenceCNN, random_batch


def test_training_matches_pytorch(device):
    model = ReferenceCNN(device, 8)
    reference = TorchReferenceCNN(model.initial_parameters)
    images, labels = random_batch(8)
    losses, expected = [], []
    for _ in range(5):
        model.train_step(images, labels)
        losses.append(model.loss())
        expected.append(reference.train_step(images, labels).item())
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    assert losses[-1] < losses[0]


def test_steps_overlap_with_encoding(device):
    """Steps committed back to back (the host writes the next input while the
    last step runs) give the losses of steps run one at a time."""
    images, labels = random_batch(4)
    one_at_a_time = ReferenceCNN(device, 4)
    sequential = []
    for _ in range(4):
        one_at_a_time.train_step(images, labels)
        sequential.append(one_at_a_time.loss())
    overlapped = ReferenceCNN(device, 4)
    buffers = []
    for _ in range(4):
        overlapped.train_step(images, labels)
        buffers.append(overlapped.last)
    losses = []
    for cb, loss_labels in buffers:
        cb.wait_until_completed()
        losses.append(float(loss_labels.loss_image().to_numpy()[0, 0, 0, 0]))
    # cuDNN's fastest weight gradients vary in their last bits from run to run.
    np.testing.assert_allclose(losses, sequential, rtol=1e-6 if device.backend == "cpu" else 1e-5)

"""The examples: the U-Net of examples/train_unet_graph.py (benchmarks/unet.py)
trains as the same model does in PyTorch, every example script runs and
prints finite losses, and the digits example learns its held-out split."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpsx.benchmarks.unet import GraphUNet, TorchUNet, synthetic_batch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BATCH, SIZE, STEPS, LR, MOMENTUM = 3, 10, 3, 0.05, 0.9


@pytest.mark.parametrize("upsampling", ["bilinear", "nearest"])
def test_unet_trains_as_pytorch(device, upsampling):
    """Three SGD momentum steps through the graph against the same model in
    float64 PyTorch from the same weights: the losses, the weights and the
    updates themselves (weights minus initial weights)."""
    model = GraphUNet(device, BATCH, size=SIZE, learning_rate=LR, momentum=MOMENTUM, upsampling=upsampling)
    reference = TorchUNet(model.initial_parameters, learning_rate=LR, momentum=MOMENTUM, upsampling=upsampling)
    # 13 forward filters; 12 gradient filters (two per addition and
    # concatenation) and the two addition nodes training_graph adds for the
    # images read twice (the encoder's result and the pooled one); the
    # encoder's ReLU and its gradient fused into its batch normalization.
    assert (model.graph.number_of_filters, model.graph.number_of_fused_filters) == (27, 2)
    losses, expected = [], []
    for step in range(STEPS):
        images, labels = synthetic_batch(BATCH, SIZE, seed=step)
        losses.append(model.train_step(images, labels))
        expected.append(reference.train_step(images, labels))
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    initial, trained, reference_trained = model.initial_parameters, model.parameters(), reference.parameters()
    assert trained.keys() == reference_trained.keys() == initial.keys()
    for name in initial:
        np.testing.assert_allclose(trained[name], reference_trained[name], rtol=1e-4, atol=1e-6, err_msg=name)
        update, reference_update = trained[name] - initial[name], reference_trained[name] - initial[name]
        scale = np.abs(reference_update).max()
        # The encoder's bias comes before batch normalization: its gradient is
        # zero up to rounding, so only the absolute floor applies there.
        np.testing.assert_allclose(update, reference_update, rtol=0, atol=1e-3 * scale + 1e-6, err_msg=name)
        if name != "enc.bias":
            assert scale > 1e-4, name  # the parameter trained


def test_unet_bad_arguments(device):
    with pytest.raises(ValueError, match="upsampling must be 'bilinear' or 'nearest', given 'cubic'"):
        GraphUNet(device, 2, upsampling="cubic")
    with pytest.raises(ValueError, match="size must be even .*, given 9"):
        GraphUNet(device, 2, size=9)


def synthetic_labels_reference(images):
    padded = np.pad(images[:, 0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    n, h, w = images.shape[0], images.shape[2], images.shape[3]
    out = np.zeros((n, h, w))
    for y in range(h):
        for x in range(w):
            out[:, y, x] = images[:, 0, y, x] > padded[:, y:y + 3, x:x + 3].mean(axis=(1, 2))
    return out


def test_synthetic_labels_mark_pixels_above_their_neighbourhood_mean():
    images, labels = synthetic_batch(2, 6, seed=3)
    assert images.shape == (2, 1, 6, 6) and labels.shape == (2, 2, 6, 6)
    np.testing.assert_array_equal(labels[:, 1], synthetic_labels_reference(images))
    np.testing.assert_array_equal(labels.sum(axis=1), 1)


def run_example(script, *args, device="cpu"):
    """Runs an example; returns what it printed."""
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--device", device, *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def example_losses(script, *args):
    """Runs an example on cpu; returns the losses it printed."""
    return [float(v) for v in re.findall(r"^step +\d+ +loss (\S+)", run_example(script, *args), re.MULTILINE)]


def test_the_reference_cnn_examples_print_the_same_decreasing_losses():
    """The hand-encoded example and the graph one in each training style train
    the same model from the same weights: the same losses, falling."""
    hand = example_losses("train_reference_cnn.py", "--batch-size", "4", "--steps", "3")
    assert len(hand) == 3 and np.all(np.isfinite(hand))
    assert hand[2] < hand[1] < hand[0]
    for style in ("gpu", "cpu", "none"):
        graph = example_losses("train_reference_cnn_graph.py", "--batch-size", "4", "--steps", "3", "--style", style)
        np.testing.assert_allclose(graph, hand, rtol=1e-4, err_msg=style)


def test_the_unet_example_prints_finite_losses():
    losses = example_losses("train_unet_graph.py", "--batch-size", "4", "--steps", "3", "--size", "8")
    assert len(losses) == 3 and np.all(np.isfinite(losses))
    # Two classes: the first loss is near log 2 (PyTorch's initialization).
    assert 0.5 < losses[0] < 0.9
    assert all(0 < loss < 2 for loss in losses)


def test_the_digits_example_learns_the_held_out_split(device, tmp_path):
    """Three epochs on scikit-learn's digits: the test accuracy (chance is 0.1) is past what a model
    that did not learn reaches, the training loss falls, and the plot is a PNG."""
    plot = tmp_path / "curves.png"
    out = run_example("train_digits.py", "--epochs", "3", "--plot", str(plot), device=device.name)
    assert f"device: {device.name} ({device.backend} backend)" in out
    epochs = re.findall(r"^epoch +(\d+) +loss (\S+) +test accuracy (\S+)$", out, re.MULTILINE)
    assert [int(e) for e, _, _ in epochs] == [1, 2, 3]
    losses, accuracies = [float(v) for _, v, _ in epochs], [float(v) for _, _, v in epochs]
    assert losses[2] < losses[0] < np.log(10) * 2
    assert accuracies[-1] >= 0.9
    assert f"plot: {plot}" in out
    data = plot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


@pytest.mark.parametrize("arguments", [["--epochs", "0"], ["--batch-size", "0"]])
def test_the_digits_example_refuses_an_empty_run(arguments, capsys):
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLES / "train_digits.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with pytest.raises(SystemExit) as raised:
        example.main(arguments)
    assert raised.value.code == 2
    assert "--epochs and --batch-size must be at least 1, given" in capsys.readouterr().err


def test_the_imported_model_example_hands_back_weights_pytorch_classifies_with_alike(device):
    """A PyTorch CNN brought in, 3 epochs on the digits at 16x16: mpsx's test accuracy is past what a model that
    did not learn reaches, and PyTorch with mpsx's trained weights (its strict load_state_dict) classifies the
    test split as mpsx does."""
    pytest.importorskip("torch")
    out = run_example("train_imported_model.py", "--model", "cnn", "--epochs", "3", "--batch-size", "32", "--size",
                      "16", device=device.name)
    assert f"device: {device.name} ({device.backend} backend)" in out
    losses = [float(v) for v in re.findall(r"^epoch +\d+ +loss (\S+)$", out, re.MULTILINE)]
    assert len(losses) == 3 and losses[2] < losses[0]
    ours, theirs, same = re.search(r"test accuracy: mpsx (\S+), PyTorch with mpsx's weights (\S+); the same class "
                                   r"for (\S+)% of the test images", out).groups()
    assert float(ours) >= 0.9 and theirs == ours and float(same) >= 99
    # The second step recorded the graph's step; it and every later one ran the recording, unless the environment
    # turned capture off.
    replayed = 0 if os.environ.get("MPSX_CAPTURE_ENCODES") == "0" else 3 * (1437 // 32) - 1
    assert f"({replayed} steps replayed)" in out

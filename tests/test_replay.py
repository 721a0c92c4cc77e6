"""Replayable command buffers: replay() runs the encoded commands again on the
same resources (on cuda as one CUDA graph launch)."""

import threading

import numpy as np
import pytest

import mpsx
from mpsx.benchmarks.reference_cnn import ReferenceCNN, random_batch
from test_convolution import UpdatingSource, reference_forward


def relu_replay(device):
    source = mpsx.Image(device, mpsx.ImageDescriptor(width=5, height=3, feature_channels=6, number_of_images=2))
    relu = mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    cb = device.command_queue.command_buffer(replayable=True)
    result = relu.encode(cb, source)
    result.synchronize(cb)
    return cb, source, result


def test_replay_reads_inputs_written_in_place(device, rng):
    cb, source, result = relu_replay(device)
    for run in range(4):
        x = rng.standard_normal((2, 6, 3, 5)).astype(np.float32)
        source.write(x)
        cb.commit() if run == 0 else cb.replay()
        cb.wait_until_completed()
        assert cb.status == "completed"
        np.testing.assert_array_equal(result.to_numpy(), np.maximum(x, 0))


def test_replayed_training_matches_encoded_steps(device):
    """Four replays of one recorded training step (new batch each time) give
    the losses of four steps encoded one by one."""
    batches = [random_batch(4, seed=s) for s in range(4)]
    encoded = ReferenceCNN(device, 4)
    expected = []
    for images, labels in batches:
        encoded.train_step(images, labels)
        expected.append(encoded.loss())
    replayed = ReferenceCNN(device, 4)
    replayed.record_step()
    losses = []
    for images, labels in batches:
        replayed.replay_step(images, labels)
        losses.append(replayed.loss())
    np.testing.assert_allclose(losses, expected, rtol=1e-6 if device.backend == "cpu" else 1e-5)
    assert len(set(losses)) == 4


def test_completed_handlers_run_after_every_replay(device):
    cb, source, result = relu_replay(device)
    calls = []
    cb.add_completed_handler(lambda c: calls.append(c.status))
    cb.commit()
    cb.wait_until_completed()
    for _ in range(2):
        cb.replay()
        cb.wait_until_completed()
    assert calls == ["completed"] * 3


def test_replay_needs_a_replayable_completed_command_buffer(device):
    cb = device.command_queue.command_buffer()
    cb.commit()
    cb.wait_until_completed()
    assert not cb.replayable
    with pytest.raises(mpsx.StateError, match="replayable=True"):
        cb.replay()
    cb, _, _ = relu_replay(device)
    assert cb.replayable
    with pytest.raises(mpsx.StateError, match="not committed; call commit"):
        cb.replay()


def test_replay_while_running_raises(device):
    cb, source, result = relu_replay(device)
    release = threading.Event()
    cb.add_completed_handler(lambda c: release.wait(10))
    cb.commit()
    try:
        with pytest.raises(mpsx.StateError, match="still running; call wait_until_completed"):
            cb.replay()
    finally:
        release.set()
    cb.wait_until_completed()
    cb.replay()  # and once it completed, it may run again
    release.set()
    cb.wait_until_completed()
    assert cb.status == "completed"


def test_host_updates_are_refused_on_a_replayable_command_buffer(device, rng):
    """MPS's CPU update style reloads weights into new buffers that replayed
    commands would not read: refused when encoded, before anything is recorded."""
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 3)
    w = rng.standard_normal(d.weights_shape).astype(np.float32)
    source = UpdatingSource(d, w, np.zeros(3, np.float32))
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    image = mpsx.Image.from_numpy(device, rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    cb = device.command_queue.command_buffer(replayable=True)
    y, state = conv.encode(cb, image, destination_state=True)
    gradient.encode(cb, y, image, state)
    count = cb.command_count
    with pytest.raises(mpsx.StateError, match="CPU update style.*replayable command buffer"):
        conv.encode_weights_and_bias_update(cb, state)
    assert cb.command_count == count
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed" and source.updates == 0

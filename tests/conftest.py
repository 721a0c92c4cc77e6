"""Shared fixtures: every test runs on every device mpsx finds."""

import os

import numpy as np
import pytest

import mpsx

DEVICES = mpsx.devices()

# JAX would otherwise take 75% of the GPU at its first use, starving the other test processes on it.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES, ids=[d.name for d in DEVICES])


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def repeatable(device):
    """The device with deterministic set for the test (both processes of a resume test set it): cuDNN's
    fastest engines (a weight gradient summed with atomics, an engine chosen by timing) need not give the
    same bits twice, so the runs to compare could not be equal on a GPU without it."""
    device.deterministic = True
    yield device
    device.deterministic = False

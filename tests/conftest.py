"""Shared fixtures: every test runs on every device mpsx finds."""

import numpy as np
import pytest

import mpsx

DEVICES = mpsx.devices()


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES, ids=[d.name for d in DEVICES])


@pytest.fixture
def rng():
    return np.random.default_rng(1234)

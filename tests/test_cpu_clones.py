"""The cpu backend's own hot loops are built for AVX-512, AVX2 and baseline x86-64, and the widest that oneDNN's
effective ISA includes runs (ONEDNN_MAX_CPU_ISA lowers it). This process runs one of them through the whole
suite; these tests run the test files of every family with such loops (neurons, pooling, softmax, the
normalizations, the optimizers, the convolution transpose's bias sums) again, on cpu, under each other build
the machine has, in a process of its own, and check which build ran there."""

import os
import subprocess
import sys

import pytest

import mpsx

CLONES = ["baseline", "avx2", "avx512f"]
# The ONEDNN_MAX_CPU_ISA that makes each clone the widest.
CAP = {"baseline": "SSE41", "avx2": "AVX2", "avx512f": "AVX512_CORE"}
FILES = ["test_neuron.py", "test_pooling.py", "test_softmax.py", "test_batch_normalization.py",
         "test_instance_normalization.py", "test_group_normalization.py", "test_optimizer.py",
         "test_convolution_transpose.py"]
HERE = os.path.dirname(os.path.abspath(__file__))
RUNNING = mpsx._runtime._cpu_loop_clone()


def environment(clone):
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=CAP[clone])
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep))
    return env


def clone_under(clone):
    program = "import mpsx; print(mpsx._runtime._cpu_loop_clone())"
    done = subprocess.run([sys.executable, "-c", program], env=environment(clone), capture_output=True, text=True,
                          timeout=60, cwd=HERE)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("clone", CLONES)
def test_the_cap_picks_the_clone(clone):
    if CLONES.index(clone) > CLONES.index(RUNNING):
        pytest.skip(f"this machine's widest clone is {RUNNING}")
    assert clone_under(clone) == clone


@pytest.mark.parametrize("clone", CLONES)
def test_family_tests_pass_under_each_clone(clone):
    if CLONES.index(clone) > CLONES.index(RUNNING):
        pytest.skip(f"this machine's widest clone is {RUNNING}")
    if clone == RUNNING:
        pytest.skip(f"this process runs the {clone} clone: the suite itself tests it")
    files = [os.path.join(HERE, f) for f in FILES]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cpu", *files],
                          env=environment(clone), capture_output=True, text=True, timeout=600, cwd=HERE)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]


@pytest.mark.parametrize("clone", ["baseline", "avx2"])
def test_the_onednn_isa_follows_onednn_max_cpu_isa(clone):
    """mpsx._runtime._cpu_onednn_isa(), which the bench prints, names the kernels oneDNN runs as
    ONEDNN_MAX_CPU_ISA names them."""
    if CLONES.index(clone) > CLONES.index(RUNNING):
        pytest.skip(f"this machine's widest clone is {RUNNING}")
    done = subprocess.run([sys.executable, "-c", "import mpsx; print(mpsx._runtime._cpu_onednn_isa())"],
                          env=environment(clone), capture_output=True, text=True, timeout=60, cwd=HERE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == CAP[clone]

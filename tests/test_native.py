"""The graph compiler and the primitive registry tested natively: tests/native/*.cpp, built with the system's C++
compiler against native/include and the runtime library that `import mpsx` loaded, and run. Skips where there is no
compiler (the installed-wheel run of .ci/run) or where the headers are not beside the tests."""

import os
import shutil
import subprocess
import sys

import pytest

import mpsx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def loaded_library(name):
    """The path of a shared library this process loaded, from /proc/self/maps."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith(name):
                return path
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="builds against the Linux runtime library")
def test_graph_planner_and_registry(tmp_path):
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    check = compiler and subprocess.run([compiler, "--version"], capture_output=True)
    if not check or check.returncode != 0:
        pytest.skip("no C++ compiler")
    runtime = os.path.join(os.path.dirname(mpsx.__file__), "libmpsx_runtime.so")
    dnnl = loaded_library("libdnnl.so")
    assert os.path.exists(runtime) and dnnl, (runtime, dnnl)
    binary = tmp_path / "graph_planner_test"
    # An installed runtime finds oneDNN only as mpsx/_libraries.py loads it: the linker is told where it is.
    built = subprocess.run([compiler, "-std=c++17", "-O1", "-I", os.path.join(ROOT, "native", "include"),
                            os.path.join(ROOT, "tests", "native", "graph_planner_test.cpp"), runtime,
                            f"-Wl,-rpath,{os.path.dirname(runtime)}", f"-Wl,-rpath-link,{os.path.dirname(dnnl)}",
                            "-o", str(binary)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-4000:]
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [os.path.dirname(dnnl),
                                                                          os.environ.get("LD_LIBRARY_PATH")])))
    done = subprocess.run([str(binary)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed: 0 failed checks" in done.stdout

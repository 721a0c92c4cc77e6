"""The installed package: where its libraries come from, and how a missing backend explains itself.

The cuda cases run here without a GPU: on a copy of the installed package
whose cuda backend library cannot load, or is not there at all.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import mpsx

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the libraries loaded are Linux ones")


def test_installed_package_is_the_one_tested():
    """CI's wheel run sets MPSX_EXPECT_INSTALLED_IN to its virtual environment: the tests must import the
    installed wheel there, not the source tree."""
    expected = os.environ.get("MPSX_EXPECT_INSTALLED_IN")
    if not expected:
        pytest.skip("MPSX_EXPECT_INSTALLED_IN is set only by CI's run against the installed wheel")
    assert os.path.realpath(mpsx.__file__).startswith(os.path.realpath(expected) + os.sep), mpsx.__file__


@linux
def test_onednn_is_loaded_from_its_distribution():
    """libdnnl.so.3 comes from the onednn-cpu-gomp distribution's own files, wherever pip put them."""
    import importlib.metadata

    distribution = importlib.metadata.distribution("onednn-cpu-gomp")
    expected = next(os.path.realpath(f.locate()) for f in distribution.files if f.name == "libdnnl.so.3")
    with open("/proc/self/maps") as maps:
        loaded = {line.split()[-1] for line in maps if "libdnnl" in line}
    assert loaded == {expected}


@linux
def test_cuda_backend_libraries_come_from_the_nvidia_wheels():
    """Where this build has the cuda backend and the [cuda] extra is installed, the CUDA libraries in the
    process are the NVIDIA wheels' (whether or not a GPU is there)."""
    import importlib.util

    if not os.path.exists(os.path.join(os.path.dirname(mpsx.__file__), "libmpsx_cuda.so")):
        pytest.skip("this build has no cuda backend")
    nvidia = importlib.util.find_spec("nvidia")
    wheels = [os.path.join(root, package, "lib", name) for root in (nvidia.submodule_search_locations if nvidia else [])
              for package, name in [("cu13", "libcudart.so.13"), ("cudnn", "libcudnn.so.9")]]
    wheels = {os.path.realpath(path) for path in wheels if os.path.exists(path)}
    if len(wheels) < 2:
        pytest.skip("the NVIDIA wheels of the [cuda] extra are not installed")
    mpsx.devices()
    with open("/proc/self/maps") as maps:
        loaded = {line.split()[-1] for line in maps if "/libcudart.so" in line or "/libcudnn.so" in line}
    assert loaded == wheels


def package_copy(tmp_path):
    """A copy of the installed mpsx package (links followed) under tmp_path; returns its directory."""
    copy = tmp_path / "mpsx"
    shutil.copytree(os.path.dirname(mpsx.__file__), copy, symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "benchmarks"))
    return copy


def device_error(tmp_path, name):
    """The message of Device(name) in a fresh process that imports the package copied under tmp_path, and
    the devices it lists."""
    code = textwrap.dedent(f"""
        import mpsx
        assert mpsx.__file__.startswith({str(tmp_path)!r}), mpsx.__file__
        print([d.name for d in mpsx.devices()])
        try:
            mpsx.Device({name!r})
        except ValueError as e:
            print(e)
        else:
            print("no error")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    devices, message = result.stdout.strip().split("\n", 1)
    return message, devices


@linux
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_backend_that_cannot_load_names_the_library_it_lacks(tmp_path, name):
    # A real library whose dependency is missing: the runtime's own, needing a libdnnX.so.3 instead.
    copy = package_copy(tmp_path)
    runtime = (copy / "libmpsx_runtime.so").read_bytes()
    assert b"libdnnl.so.3" in runtime
    (copy / "libmpsx_cuda.so").write_bytes(runtime.replace(b"libdnnl.so.3", b"libdnnX.so.3"))
    message, devices = device_error(tmp_path, name)
    assert devices == "['cpu']"
    assert message.startswith(f"no device named '{name}'; devices present: cpu; the cuda backend ("), message
    assert f"{copy}/libmpsx_cuda.so) could not be loaded: libdnnX.so.3: cannot open shared object file" in message
    assert message.endswith("pip install 'mpsx[cuda]' installs the CUDA runtime, cuDNN and cuBLAS it needs"), message


@linux
def test_build_without_cuda_backend_says_so(tmp_path):
    copy = package_copy(tmp_path)
    (copy / "libmpsx_cuda.so").unlink(missing_ok=True)
    message, devices = device_error(tmp_path, "cuda")
    assert devices == "['cpu']"
    assert message.startswith("no device named 'cuda'; devices present: cpu; this build of mpsx has no cuda backend"), \
        message


@pytest.mark.skipif(any(d.backend == "cuda" for d in mpsx.devices()), reason="a cuda device is present")
def test_missing_cuda_device_is_explained():
    """Here, as installed: no cuda backend in this build, one that cannot load (the NVIDIA libraries are not
    installed), or one that finds no GPU."""
    with pytest.raises(ValueError) as error:
        mpsx.Device("cuda")
    message = str(error.value)
    assert message.startswith("no device named 'cuda'; devices present: "), message
    explanations = ("; this build of mpsx has no cuda backend (",
                    ") could not be loaded: ",  # followed by the loader's message and the remedy
                    "; the cuda backend found no device: cudaGetDeviceCount: ")
    assert sum(e in message for e in explanations) == 1, message
    if "could not be loaded" in message:
        assert message.endswith("pip install 'mpsx[cuda]' installs the CUDA runtime, cuDNN and cuBLAS it needs")


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS has the metal backend")
def test_metal_elsewhere_is_explained():
    with pytest.raises(ValueError, match=r"^no device named 'metal'; devices present: .*; "
                                         r"the metal backend runs only on macOS$"):
        mpsx.Device("metal")


def test_unknown_backend_lists_the_devices():
    with pytest.raises(ValueError, match=r"^no device named 'tpu'; devices present: [^;]*$"):
        mpsx.Device("tpu")

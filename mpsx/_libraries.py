"""Loads the shared libraries that mpsx's own libraries need, from wherever pip put them.

oneDNN (the onednn-cpu-gomp wheel) installs libdnnl.so.3 into <prefix>/lib,
and the NVIDIA wheels theirs into site-packages/nvidia/*/lib: places that no
run path of ours can name once pip installs with --target, --user or into
another prefix. Their distributions' file lists know where they are. A
library loaded here by its full path satisfies the dependency of the same
name when the extension modules (libdnnl.so.3) or the cuda backend (the
NVIDIA ones) load later. They are loaded RTLD_LOCAL: global symbols of
oneDNN 3.2 would take the place of those of another copy in the process
(PyTorch's).
"""

import ctypes
import importlib.metadata
import importlib.util
import os
import sys

# The cuda backend's dependencies in the order they load: each one's own
# dependencies first. Directories are those of the NVIDIA wheels' packages.
_CUDA_LIBRARIES = (
    ("cu13", "libcudart.so.13"),  # nvidia-cuda-runtime
    ("cu13", "libcublasLt.so.13"),  # nvidia-cublas
    ("cu13", "libcublas.so.13"),
    ("cudnn", "libcudnn.so.9"),  # nvidia-cudnn-cu13
)


def _distribution_file(distribution, name):
    """The installed path of file `name` of a distribution, or None."""
    for f in distribution.files or []:
        if f.name == name:
            path = os.path.realpath(f.locate())
            if os.path.exists(path):
                return path
    return None


def nvidia_library(package, name):
    """site-packages/nvidia/<package>/lib/<name> where the NVIDIA wheels are installed, or None."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, package, "lib", name)
        if os.path.exists(path):
            return path
    return None


def load():
    """Loads libdnnl.so.3, and the cuda backend's libraries where this build has that backend.

    One that is not found is left to the loader's own search: the import
    then fails naming libdnnl.so.3, or the cuda backend is missing and
    Device("cuda") says which library it lacked. An onednn-cpu-gomp
    installed without its library (pip install --target) is an ImportError
    that says so.
    """
    if not sys.platform.startswith("linux"):
        return
    # The first installation on sys.path that has the file (a system oneDNN where there is none).
    onednn = list(importlib.metadata.distributions(name="onednn-cpu-gomp"))
    dnnl = next(filter(None, (_distribution_file(d, "libdnnl.so.3") for d in onednn)), None)
    if onednn:
        if not dnnl:
            raise ImportError(
                f"onednn-cpu-gomp is installed ({onednn[0].locate_file('')}) without its libdnnl.so.3, which that "
                "wheel puts in <prefix>/lib: pip install --target leaves such files out. Install onednn-cpu-gomp "
                "into the environment instead (pip install onednn-cpu-gomp==2023.2.0, in a virtual environment)")
        ctypes.CDLL(dnnl)
    if os.path.exists(os.path.join(os.path.dirname(__file__), "libmpsx_cuda.so")):
        for package, name in _CUDA_LIBRARIES:
            path = nvidia_library(package, name)
            if path:
                try:
                    ctypes.CDLL(path)
                except OSError:
                    pass  # the cuda backend's own load reports it

"""tools/check_metal.sh links the metal backend against the runtime and Apple's macOS 12 stubs: a class that macOS 12
lacks and a function that nothing defines both pass a syntax check but fail the link; code that uses only what exists
passes. Runs where MPSX_MACOS_SDK names an SDK and Debian's clang-19, lld-19 and libomp-19-dev are installed, as
.ci/run's metal rung does."""

import importlib.metadata
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SDK = os.environ.get("MPSX_MACOS_SDK")


def has_onednn_headers():
    try:
        importlib.metadata.distribution("onednn-devel-cpu-gomp")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


pytestmark = [
    pytest.mark.skipif(not SDK, reason="MPSX_MACOS_SDK names no macOS SDK (docs/metal.md)"),
    pytest.mark.skipif(not has_onednn_headers(), reason="the runtime's cross-build needs oneDNN's headers "
                       "(pip install onednn-devel-cpu-gomp==2023.2.0)"),
    pytest.mark.skipif(not (shutil.which("clang++-19") and os.path.exists("/usr/lib/llvm-19/bin/ld64.lld")),
                       reason="needs Debian's clang-19 and lld-19"),
]

HEADER = """
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#include "mpsx/checked.h"
"""
PLANTED = {
    "class": ("""
@interface MPSCNNNotInMacOS12 : MPSCNNKernel
@end
Class planted_class() { return [MPSCNNNotInMacOS12 class]; }
""", "OBJC_CLASS_$_MPSCNNNotInMacOS12"),
    "function": ("""
namespace mpsx { float not_defined_anywhere(float); }
float planted_function(float x) { return mpsx::not_defined_anywhere(x); }
""", "not_defined_anywhere"),
}
# The tools run as they are, not under tools/sanitize.sh's preloaded sanitizer runtime.
TOOLS_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
# What exists: an MPS class of macOS 12 and a function of the runtime.
EXISTING = """
Class existing_class() { return [MPSCNNNeuronReLU class]; }
float existing_function(float x) { return mpsx::checked_parameter(x, "test", "x"); }
"""


def check(tmp_path, source):
    path = tmp_path / "planted.mm"
    path.write_text(HEADER + source)
    syntax = subprocess.run(["clang++-19", "-target", "arm64-apple-macos12.0", "-isysroot", SDK, "-nostdinc++",
                             "-isystem", f"{SDK}/usr/include/c++/v1", "-x", "objective-c++", "-std=c++17",
                             "-fobjc-arc", "-Wall", "-Werror", "-fsyntax-only", "-I", f"{ROOT}/native/include",
                             str(path)], capture_output=True, text=True, env=TOOLS_ENV)
    done = subprocess.run(["bash", f"{ROOT}/tools/check_metal.sh", str(path)], capture_output=True, text=True,
                          timeout=1800, env=TOOLS_ENV)
    return syntax, done


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_a_missing_class_or_function_fails_the_link(tmp_path, what):
    source, symbol = PLANTED[what]
    syntax, done = check(tmp_path, source)
    assert syntax.returncode == 0, syntax.stderr  # what -fsyntax-only alone let through
    assert done.returncode == 1, done.stdout + done.stderr
    assert "undefined symbol" in done.stderr and symbol in done.stderr, done.stderr
    assert "libmpsx_metal.dylib does not link for arm64" in done.stdout
    assert "libmpsx_metal.dylib does not link for x86_64" in done.stdout
    assert done.stdout.rstrip().endswith("FAILED")


def test_what_exists_links(tmp_path):
    syntax, done = check(tmp_path, EXISTING)
    assert syntax.returncode == 0, syntax.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("passed")


def test_check_macho_rehashes_the_signature(tmp_path):
    """tools/check_macho.py re-hashes every page of an arm64 library against its ad hoc signature: a library that
    llvm-install-name-tool rewrote (and re-signed) passes, one with a byte changed after signing fails."""
    build = os.environ.get("MPSX_MACOS_BUILD", os.path.join(ROOT, "build", "macos"))
    runtime = os.path.join(build, "arm64", "libmpsx_runtime.dylib")
    if not os.path.exists(runtime):
        subprocess.run(["bash", f"{ROOT}/tools/check_metal.sh"], check=True, capture_output=True, timeout=1800,
                       env=TOOLS_ENV)

    def check(path):
        return subprocess.run([sys.executable, f"{ROOT}/tools/check_macho.py", "--arch", "arm64", str(path)],
                              capture_output=True, text=True, env=TOOLS_ENV)

    renamed = tmp_path / "renamed.dylib"
    shutil.copy(runtime, renamed)
    subprocess.run(["/usr/lib/llvm-19/bin/llvm-install-name-tool", "-id", "@rpath/libmpsx_renamed.dylib",
                    str(renamed)], check=True, env=TOOLS_ENV)
    done = check(renamed)
    assert done.returncode == 0 and done.stdout.rstrip().endswith(": ok"), done.stdout
    changed = tmp_path / "changed.dylib"
    data = bytearray(renamed.read_bytes())
    data[3 * 4096 + 100] ^= 0xFF  # a byte of the fourth page, in the code
    changed.write_bytes(bytes(data))
    done = check(changed)
    assert done.returncode == 1
    assert "page hashes do not match the file (first: page 3)" in done.stdout, done.stdout
    moved = tmp_path / "moved.dylib"
    shutil.copy(runtime, moved)
    subprocess.run(["/usr/lib/llvm-19/bin/llvm-install-name-tool", "-change", "@rpath/libdnnl.3.dylib",
                    "/opt/homebrew/lib/libdnnl.3.dylib", str(moved)], check=True, env=TOOLS_ENV)
    done = check(moved)
    assert done.returncode == 1 and "loads /opt/homebrew/lib/libdnnl.3.dylib, a path outside macOS" in done.stdout, \
        done.stdout

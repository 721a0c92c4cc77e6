#!/usr/bin/env python3
"""Makes what a macOS cross-build on Linux needs beside Apple's SDK, in a folder of its own (docs/metal.md, "Building
for macOS on Linux"). The SDK itself is never written.

    tools/macos_overlay.py SDK OUT

OUT gets:
- Frameworks/: copies of the SDK's MetalPerformanceShaders and Foundation stubs (.tbd) with the re-export lists that
  hexops/sdk-macos-12.0 lacks restored (the umbrella's six sub-frameworks; CoreFoundation and libobjc), so that MPS
  classes and objc_msgSend resolve. Only a stub that lacks its list is copied; the linker searches OUT/Frameworks
  before the SDK's.
- lib/libdnnl.3.tbd and lib/libomp.tbd: stand-ins for Homebrew's oneDNN and libomp, which are not to be had here:
  stubs that export what the Linux libraries of the same version export (oneDNN's wheel in this Python's
  environment, Debian's libomp-19-dev), so that a call of a function they lack fails the link. A binary linked
  against them is a build check, never a release: nothing stands behind the stubs.
- include/omp.h (Debian's libomp-19-dev) and dnnl/dnnl-config.cmake (the stand-in as CMake's DNNL::dnnl, with the
  wheel's headers, which are the same on every platform).
- python/include/python3.X/: this Python's headers with a pyconfig.h for macOS arm64 and x86_64 (Python's darwin
  pyconfig.h is not on PyPI or in Debian): the Linux one, with what differs on macOS set over it.
"""

import importlib.metadata
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

TARGETS = "[ arm64-macos, x86_64-macos ]"
FRAMEWORKS = "System/Library/Frameworks"
MPS = "/System/Library/Frameworks/MetalPerformanceShaders.framework/Versions/A"
# What each stub re-exports on macOS 12 (otool -L of the real libraries).
REEXPORTS = {
    "MetalPerformanceShaders": [f"{MPS}/Frameworks/{name}.framework/Versions/A/{name}" for name in
                                ("MPSCore", "MPSImage", "MPSMatrix", "MPSNDArray", "MPSNeuralNetwork",
                                 "MPSRayIntersector")],
    "Foundation": ["/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation",
                   "/usr/lib/libobjc.A.dylib"],
}
LIBOMP = pathlib.Path("/usr/lib/llvm-19/lib/libomp.so")
OMP_H = pathlib.Path("/usr/lib/llvm-19/lib/clang/19/include/omp.h")
# pyconfig.h values that differ between Linux x86_64 and macOS (arm64 and x86_64, macOS 12).
PYCONFIG_DARWIN = """
#undef SIZEOF_FPOS_T
#define SIZEOF_FPOS_T 8
#undef SIZEOF_PTHREAD_KEY_T
#define SIZEOF_PTHREAD_KEY_T 8
#if defined(__aarch64__) || defined(__arm64__)
#undef SIZEOF_LONG_DOUBLE
#define SIZEOF_LONG_DOUBLE 8
#undef HAVE_GCC_ASM_FOR_X64
#undef HAVE_GCC_ASM_FOR_X87
#endif
#undef HAVE_EPOLL
#undef HAVE_EPOLL_CREATE1
#undef HAVE_SYS_EPOLL_H
#undef HAVE_SYS_SYSMACROS_H
#undef HAVE_LINUX_LIMITS_H
#undef HAVE_LINUX_RANDOM_H
#undef HAVE_LINUX_WAIT_H
#undef HAVE_LINUX_MEMFD_H
#undef HAVE_LINUX_AUXVEC_H
"""


def fail(message):
    sys.exit(f"macos_overlay: {message}")


def restore_reexports(sdk, out, name):
    """The framework's stub with its re-export list, in OUT, unless the SDK's already has one."""
    stub = sdk / FRAMEWORKS / f"{name}.framework" / f"{name}.tbd"
    if not stub.exists():
        fail(f"{stub} not found: is {sdk} a macOS SDK?")
    text = stub.read_text()
    first_end = text.find("\n--- !tapi-tbd", 1)
    first = text if first_end < 0 else text[:first_end]
    if "reexported-libraries:" in first:
        return f"{name}: the SDK's stub has its re-export list"
    match = re.search(r"^exports:", first, re.M)
    if not match:
        fail(f"{stub}: no exports: list in its first document")
    libraries = ", ".join(f"'{path}'" for path in REEXPORTS[name])
    targets = re.search(r"^targets:\s*(\[[^\]]*\])", first, re.M | re.S).group(1)
    entry = f"reexported-libraries:\n  - targets: {targets}\n    libraries: [ {libraries} ]\n"
    copy = out / "Frameworks" / f"{name}.framework" / f"{name}.tbd"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(text[:match.start()] + entry + text[match.start():])
    return f"{name}: re-export list restored in {copy}"


def exported_symbols(library):
    """The names of the functions and data a Linux shared library exports, as Mach-O spells them."""
    out = subprocess.run(["/usr/lib/llvm-19/bin/llvm-nm", "-D", "--defined-only", "--extern-only", str(library)],
                         check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRVWiu":
            names.add("_" + parts[2].split("@")[0])
    return sorted(names)


def stub(path, install_name, version, symbols):
    quoted = ", ".join(f"'{s}'" for s in symbols)
    path.write_text(f"--- !tapi-tbd\ntbd-version: 4\ntargets: {TARGETS}\ninstall-name: '{install_name}'\n"
                    f"current-version: {version}\nexports:\n  - targets: {TARGETS}\n    symbols: [ {quoted} ]\n...\n")


def onednn():
    """The onednn-devel-cpu-gomp wheel's library and headers."""
    try:
        distribution = importlib.metadata.distribution("onednn-devel-cpu-gomp")
    except importlib.metadata.PackageNotFoundError:
        fail("oneDNN's wheel is not installed in this Python: pip install onednn-devel-cpu-gomp==2023.2.0 "
             "onednn-cpu-gomp==2023.2.0")
    files = [pathlib.Path(distribution.locate_file(f)).resolve() for f in distribution.files]
    header = next((f for f in files if f.name == "dnnl.h"), None)
    library = next((f for f in files if f.name == "libdnnl.so"), None) or \
        next(pathlib.Path(sysconfig.get_paths()["data"]).glob("lib/libdnnl.so*"), None)
    if header is None or library is None:
        fail("oneDNN's wheel has no dnnl.h or libdnnl.so")
    return library, header.parent.parent if header.parent.name == "oneapi" else header.parent


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: tools/macos_overlay.py SDK OUT")
    sdk, out = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    for name in ("libomp.so", "omp.h"):
        if not (LIBOMP if name == "libomp.so" else OMP_H).exists():
            fail(f"{name} not found: apt-get install libomp-19-dev")
    if out.exists():
        shutil.rmtree(out)
    (out / "lib").mkdir(parents=True)
    for name in REEXPORTS:
        print("macos_overlay:", restore_reexports(sdk, out, name))

    library, include = onednn()
    version = re.search(r"DNNL_VERSION_MAJOR (\d+)\s.*DNNL_VERSION_MINOR (\d+)",
                        (include / "oneapi/dnnl/dnnl_version.h").read_text(), re.S)
    symbols = exported_symbols(library)
    stub(out / "lib/libdnnl.3.tbd", "@rpath/libdnnl.3.dylib", f"{version[1]}.{version[2]}", symbols)
    print(f"macos_overlay: oneDNN stands in as a stub of the {len(symbols)} symbols {library} exports")
    symbols = exported_symbols(LIBOMP)
    stub(out / "lib/libomp.tbd", "@rpath/libomp.dylib", "19.1", symbols)
    print(f"macos_overlay: libomp stands in as a stub of the {len(symbols)} symbols {LIBOMP} exports")
    (out / "include").mkdir()
    shutil.copy(OMP_H, out / "include/omp.h")
    (out / "dnnl").mkdir()
    (out / "dnnl/dnnl-config.cmake").write_text(
        "# A stand-in for Homebrew's oneDNN (tools/macos_overlay.py): a stub library, the wheel's headers.\n"
        "add_library(DNNL::dnnl SHARED IMPORTED)\n"
        f'set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "{out}/lib/libdnnl.3.tbd"\n'
        f'                      IMPORTED_SONAME "@rpath/libdnnl.3.dylib" INTERFACE_INCLUDE_DIRECTORIES "{include}")\n'
        "set(dnnl_FOUND TRUE)\n")

    headers = pathlib.Path(sysconfig.get_paths()["include"])
    python = out / "python/include" / headers.name
    shutil.copytree(headers, python)
    (python / "pyconfig.h").rename(python / "pyconfig-linux.h")
    (python / "pyconfig.h").write_text("/* Linux's pyconfig.h, with what differs on macOS (tools/macos_overlay.py) */\n"
                                       '#include "pyconfig-linux.h"\n' + PYCONFIG_DARWIN)
    print(f"macos_overlay: Python {headers.name} headers for macOS in {python}")


if __name__ == "__main__":
    main()

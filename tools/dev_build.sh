#!/usr/bin/env bash
# Incremental developer build: builds into BUILD_DIR (default build/dev) and
# stages an importable package at BUILD_DIR/stage, with the Python sources
# linked from the checkout, so `PYTHONPATH=BUILD_DIR/stage pytest` runs the
# tests against the fresh build without installing.
#   tools/dev_build.sh [BUILD_DIR]
# Needs the build requirements of pyproject.toml in the active Python.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build/dev}")
mkdir -p "$build"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v python)" >/dev/null
fi
ninja -C "$build"
stage=$build/stage/mpsx
mkdir -p "$stage"
for f in "$root"/mpsx/*.py "$root"/mpsx/*.pyi "$root"/mpsx/py.typed; do ln -sf "$f" "$stage/"; done
for f in "$build"/*.so; do ln -sf "$f" "$stage/"; done
ln -sfn "$root/benchmarks" "$stage/benchmarks"
echo "staged: PYTHONPATH=$build/stage"

#!/usr/bin/env bash
# Builds mpsx with AddressSanitizer and UndefinedBehaviorSanitizer into
# BUILD_DIR (default build/sanitize) and runs the test suite, the fuzz test
# included, against that build. Fails on any sanitizer report, in the test
# process or in the processes the tests start.
#   tools/sanitize.sh [BUILD_DIR] [pytest arguments...]
# Installs the build requirements of pyproject.toml into the active Python.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build/sanitize}")
shift || true
cd "$root"

python - <<'EOF'
import shutil, subprocess, sys, tomllib
requires = tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]
tools = [tool for tool in ("cmake", "ninja") if not shutil.which(tool)]
subprocess.run([sys.executable, "-m", "pip", "install", "-q", *requires, *tools], check=True)
EOF
mkdir -p "$build"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DMPSX_SANITIZE=address,undefined \
    -DMPSX_CUDA=OFF -DPython_EXECUTABLE="$(command -v python)" >/dev/null
fi
start=$(date +%s)
tools/dev_build.sh "$build" >"$build/build.log" 2>&1 || { tail -50 "$build/build.log"; exit 1; }
echo "sanitize: built in $(( $(date +%s) - start )) s"

# Python itself is not instrumented: the runtimes are preloaded, and a
# report aborts the process (the build sets -fno-sanitize-recover) after
# writing it under $reports, whichever process it came from.
reports=$build/reports
rm -rf "$reports" && mkdir -p "$reports"
cxx=${CXX:-g++}
export LD_PRELOAD="$($cxx -print-file-name=libasan.so) $($cxx -print-file-name=libstdc++.so)"
# Leaks: the interpreter's own at exit would drown any of ours.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$reports/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
export PYTHONPATH=$build/stage
status=0
# A test process per core (pytest-xdist), each on one OpenMP thread.
OMP_NUM_THREADS=1 pytest -q -p no:cacheprovider -n auto "${@:-tests}" || status=$?
unset LD_PRELOAD
# A process that ends without a report may leave an empty log, and one whose
# allocation failed as the test meant it to (MemoryError under a memory
# limit) a log of nothing but ASan's warning about it.
found=$(find "$reports" -type f -size +0 -exec grep -l -v -e '^==[0-9]*==WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]* bytes$' {} + || true)
if [ -n "$found" ]; then
  echo "sanitize: sanitizer reports:"
  for f in $found; do echo "== $f"; head -60 "$f"; done
  exit 1
fi
echo "sanitize: no sanitizer reports"
exit $status

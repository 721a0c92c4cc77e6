#!/usr/bin/env bash
# Builds mpsx with the cuda backend and runs the test suite (cpu and every GPU)
# and, with --bench, `python -m mpsx.bench --device cuda`, on a machine with an
# NVIDIA GPU, CUDA, cuDNN 9 and cuBLAS. Logs go to $OUT (default build/gpu).
# oneDNN wheels in .whl/ are installed first where there is no network.
#   tools/gpu_check.sh [--bench] [pytest arguments...]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bench=0
if [ "${1:-}" = "--bench" ]; then bench=1; shift; fi
out=${OUT:-$root/build/gpu}
build=$root/build/cuda
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
# The system compilers: a wrapper that GPU images put in CXX and PATH mixed
# two libstdc++ builds, and number formatting crashed.
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++; fi
dnnl=()
if ls .whl/*.whl >/dev/null 2>&1; then
  deps=/tmp/mpsx-deps
  python3 -m pip install -q --no-index --no-deps --no-compile --ignore-installed --prefix $deps .whl/*.whl || exit 1
  dnnl=(-Ddnnl_DIR=$deps/lib/cmake/dnnl)
  export PYTHONPATH=$(python3 -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '$deps'}))")
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DMPSX_CUDA=ON -DMPSX_CUDA_ARCHITECTURES="${MPSX_CUDA_ARCHITECTURES:-90}" "${dnnl[@]}" > "$out/configure.log" 2>&1 \
    || { cat "$out/configure.log"; exit 1; }
fi
grep "mpsx:" "$out/configure.log"
start=$(date +%s)
tools/dev_build.sh "$build" > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "built in $(( $(date +%s) - start )) s"
export PYTHONPATH=$build/stage${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
(cd /tmp && python3 -c "import mpsx; print('devices:', mpsx.devices(), 'load errors:', mpsx._runtime._backend_load_errors())")
# One pytest per file, so that a crash shows which file and the rest still run.
start=$(date +%s)
status=0
for f in ${@:-tests/test_*.py}; do
  name=$(basename "$f" .py)
  timeout 900 pytest -q -rs -p no:cacheprovider "$f" > "$out/$name.log" 2>&1 || status=1
  echo "$name: $(tail -1 "$out/$name.log")"
  grep -E "^(FAILED|ERROR)|Fatal Python error" "$out/$name.log" | head -20
done
echo "tests in $(( $(date +%s) - start )) s"
if [ $bench = 1 ]; then
  (cd /tmp && python3 -m mpsx.bench --device cuda) 2>&1 | tee "$out/bench.txt"
fi
exit $status

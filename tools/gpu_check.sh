#!/usr/bin/env bash
# Builds mpsx with the cuda backend and runs the test suite (cpu and every GPU)
# and, with --bench, `python -m mpsx.bench --device cuda` (the imported model's
# part in a second run), on a machine with an
# NVIDIA GPU, CUDA, cuDNN 9 and cuBLAS. With --memcheck it runs the cuda tests
# of each file and MPSX_MEMCHECK_FUZZ_CASES fuzz cases (default 1000) on
# cuda:0 under `compute-sanitizer --tool memcheck` instead, failing on any
# report. With --fuzz CASES it runs CASES fuzz cases of seed MPSX_FUZZ_SEED
# (default 1) instead, split into one part per GPU, the parts side by side
# (processes on one GPU share it by time slices); no part starts a case after
# MPSX_FUZZ_TIME_LIMIT seconds (default 420), and each report counts the cases
# it left out. Logs go to $OUT (default build/gpu). oneDNN wheels in .whl/ are
# installed first where there is no network.
#   tools/gpu_check.sh [--bench | --memcheck | --fuzz CASES] [pytest arguments...]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bench=0 memcheck=0 fuzz=0
if [ "${1:-}" = "--bench" ]; then bench=1; shift; fi
if [ "${1:-}" = "--memcheck" ]; then memcheck=1; shift; fi
if [ "${1:-}" = "--fuzz" ]; then fuzz=$2; shift 2; fi
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
start=$(date +%s)
status=0
if [ $memcheck = 1 ]; then
  # Reports of API errors are left out: tests that run out of memory on purpose make them.
  sanitizer=(compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 --target-processes all)
  for f in ${@:-tests/test_*.py}; do
    name=$(basename "$f" .py)
    [ "$name" = test_fuzz ] && continue
    timeout 900 "${sanitizer[@]}" pytest -q -rs -p no:cacheprovider -k cuda "$f" > "$out/memcheck_$name.log" 2>&1 \
      || status=1
    echo "$name: $(grep -E "passed|failed|no tests ran" "$out/memcheck_$name.log" | tail -1); \
$(grep "ERROR SUMMARY" "$out/memcheck_$name.log" | tail -1)"
  done
  MPSX_FUZZ_TIMEOUT=60 timeout 1800 "${sanitizer[@]}" python3 tests/test_fuzz.py --device cuda:0 \
    --cases "${MPSX_MEMCHECK_FUZZ_CASES:-1000}" > "$out/memcheck_fuzz.log" 2>&1 || status=1
  echo "fuzz: $(grep -E "cases tried|finding" "$out/memcheck_fuzz.log" | head -3 | tr '\n' ' ')"
  echo "fuzz: $(grep -c "ERROR SUMMARY: [1-9]" "$out/memcheck_fuzz.log") processes with memcheck errors"
  echo "memcheck in $(( $(date +%s) - start )) s"
  exit $status
fi
if [ "$fuzz" -gt 0 ]; then
  gpus=$(nvidia-smi -L | wc -l) cores=$(nproc)
  part=$(( (fuzz + gpus - 1) / gpus ))
  for ((i = 0; i < gpus; i++)); do
    first=$(( i * part )) cases=$(( fuzz - i * part < part ? fuzz - i * part : part ))
    MPSX_FUZZ_TIMEOUT=${MPSX_FUZZ_TIMEOUT:-20} python3 tests/test_fuzz.py --device cuda:$i \
      --seed "${MPSX_FUZZ_SEED:-1}" --first-case $first --cases $cases --jobs $(( (cores / gpus < 8 ? cores / gpus : 8) + 1 )) \
      --time-limit "${MPSX_FUZZ_TIME_LIMIT:-420}" --report "$out" > "$out/fuzz_cuda$i.log" 2>&1 &
  done
  wait
  for ((i = 0; i < gpus; i++)); do
    echo "cuda:$i, cases $(( i * part )) on: $(grep -a "^mpsx fuzz on" "$out/fuzz_cuda$i.log" || echo "no report")"
    grep -aq "^mpsx fuzz on.*; 0 findings" "$out/fuzz_cuda$i.log" || status=1
  done
  echo "fuzz in $(( $(date +%s) - start )) s"
  exit $status
fi
# One pytest per file, so that a crash shows which file and the rest still run.
for f in ${@:-tests/test_*.py}; do
  name=$(basename "$f" .py)
  timeout 900 pytest -q -rs -p no:cacheprovider "$f" > "$out/$name.log" 2>&1 || status=1
  echo "$name: $(tail -1 "$out/$name.log")"
  grep -E "^(FAILED|ERROR)|Fatal Python error" "$out/$name.log" | head -20
done
echo "tests in $(( $(date +%s) - start )) s"
if [ $bench = 1 ]; then
  # The imported ResNet-18 (torch.compile's autotuning included) in a run of its own: each takes minutes.
  (cd /tmp && timeout 600 python3 -m mpsx.bench --device cuda --skip-imported --json "$out/bench.json" \
    --plot "$out/bench.png") 2>&1 | tee "$out/bench.txt"
  (cd /tmp && timeout 900 python3 -m mpsx.bench --device cuda --skip-kernels --skip-steps \
    --json "$out/bench_imported.json") 2>&1 | tee "$out/bench_imported.txt"
fi
exit $status

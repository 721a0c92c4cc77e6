#!/usr/bin/env bash
# Data-parallel checks on a machine with two or more NVIDIA GPUs (the device
# tool's nvidia-h100-x2 or nvidia-h100-x4): builds the cuda backend (tools/gpu_check.sh's
# build), then, through torchrun with NCCL,
#   - tests/distributed_worker.py (hand and graph) on 2 GPUs against 1 GPU on
#     the whole batch (float32 tolerance);
#   - a rank that raises and one that hangs (the others must fail within the
#     timeout);
#   - ranks with other bucket_bytes (every rank must fail at the bucket layout
#     check, naming the difference);
#   - examples/train_data_parallel.py --replay at batch 256 per GPU on 1, 2,
#     4, ... up to GPUS GPUs, and the same model under PyTorch DDP, in one
#     session (MPSX_MULTI_GPU_PEERS="mpsx" leaves DDP out).
#   tools/multi_gpu_check.sh [GPUS] [TRANSPORT]
# GPUS: 2 by default. TRANSPORT: "default" (NCCL's choice: NVLink, shared
# memory) or "net", NCCL's network transport as between hosts
# (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1). NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0). Logs and figures go to $OUT (default build/multi_gpu).
set -uo pipefail
gpus=${1:-2} transport=${2:-default}
case $gpus in *[!0-9]* | "" | 0 | 1) echo "GPUS must be a number of GPUs, 2 or more; given '$gpus'"; exit 2;; esac
case $transport in
  default) ;;
  net) export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1;;
  *) echo "TRANSPORT must be 'default' or 'net'; given '$transport'"; exit 2;;
esac
export NCCL_NVLS_ENABLE=0
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/build/multi_gpu}
mkdir -p "$out"
OUT=$out bash "$root/tools/gpu_check.sh" "$root/tests/test_distributed.py" > "$out/gpu_check.log" 2>&1
echo "gpu_check (build + test_distributed on cuda:0): exit $?"; tail -3 "$out/gpu_check.log"
grep -E "^(FAILED|E   )" "$out/test_distributed.log" | head -40
deps=$(ls -d /tmp/mpsx-deps/lib/python3*/site-packages 2>/dev/null | head -1)
export PYTHONPATH=$root/build/cuda/stage${deps:+:$deps} PYTHONUNBUFFERED=1
cd /tmp
worker=$root/tests/distributed_worker.py
status=0
# The graph with 256-byte buckets launches its all-reduces during the backward pass (overlapped).
for run in hand:33554432 graph:33554432 graph:256; do
  mode=${run%%:*} bucket=${run##*:}
  torchrun --nproc_per_node=1 "$worker" $mode "$out/$mode-1.npz" --backend nccl > "$out/$mode-1.log" 2>&1 || status=1
  torchrun --nproc_per_node=2 "$worker" $mode "$out/$mode-2.npz" --backend nccl --bucket-bytes $bucket \
    > "$out/$mode-2.log" 2>&1 || status=1
  python3 -c "
import numpy as np, sys
a, b = np.load('$out/$mode-1.npz'), np.load('$out/$mode-2.npz')
worst = max(float(np.abs(a[k] - b[k]).max() / (np.abs(a[k]).max() + 1e-6)) for k in a)
print('$mode, buckets of $bucket bytes: 2 GPUs vs 1 on the whole batch, largest relative difference', worst)
for k in a: np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)
" || status=1
done
for how in fail hang; do
  start=$(date +%s)
  timeout 120 torchrun --nproc_per_node=2 "$worker" graph "$out/x.npz" --backend nccl --$how 1 --timeout 10 \
    > "$out/$how.log" 2>&1
  code=$?
  echo "--$how 1: exit $code after $(( $(date +%s) - start )) s; $(grep -o 'DistributedError: [^\"]*' "$out/$how.log" | head -1)"
  [ $code -ne 0 ] && [ $code -ne 124 ] || status=1
done
# Ranks with other buckets: both must fail at the layout check, in seconds, not at the timeout.
for mode in hand graph; do
  start=$(date +%s)
  timeout 120 torchrun --nproc_per_node=2 "$worker" $mode "$out/x.npz" --backend nccl --timeout 60 \
    --bucket-bytes 256,33554432 > "$out/$mode-buckets.log" 2>&1
  code=$?
  ranks=$(grep -c 'DistributedError: all_reduce on rank . of 2: the ranks reduce different' "$out/$mode-buckets.log")
  echo "$mode, buckets of 256 and 33554432 bytes: exit $code after $(( $(date +%s) - start )) s, $ranks ranks" \
       "named the difference"
  [ $code -ne 0 ] && [ $code -ne 124 ] && [ "$ranks" -ge 2 ] || status=1
done
example=$root/examples/train_data_parallel.py
peers=${MPSX_MULTI_GPU_PEERS:-"mpsx torch"}
for n in $(n=1; while [ $n -le $gpus ]; do echo $n; n=$((n * 2)); done); do
  for peer in $peers; do
    flags=$([ $peer = torch ] && echo "--peer torch" || echo "--replay")
    torchrun --nproc_per_node=$n "$example" $flags --batch-size 256 --steps 200 --json 2>&1 | grep '^{' \
      | sed "s/^{/{\"transport\": \"$transport\", /" | tee -a "$out/throughput.jsonl"
  done
done
exit $status

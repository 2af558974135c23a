#!/usr/bin/env bash
# One device call: the host-bound cases of bench/perf/host_bound.py on the GPU (Hugging Face MoE
# models from the image's transformers; TE's grouped MLP, small and production, bf16 and
# fp8-current, unfused, real kernels). Usage (device machine, repo root, TE wheels in .device/te,
# a wheel of this tree in .device/dist):  bash bench/device/host_bound.sh OUTDIR [PROCESSES] [CASES]
# (CASES: comma-separated, default all of --gpu). Writes OUTDIR/host-bound.{json,md} and OUTDIR/host-bound.log.
set -u
OUT="${1:?usage: bench/device/host_bound.sh OUTDIR [PROCESSES]}"
PROCS="${2:-5}"
if [ -n "${3:-}" ]; then WHICH=(--cases "$3"); else WHICH=(--gpu); fi
mkdir -p "$OUT"
source bench/device/device_env.sh  # TE from .device/te, memaudit from this tree (checked)
{
  echo "== environment"
  python3 -c "import torch, transformers, transformer_engine as te; print('torch', torch.__version__, 'transformers', transformers.__version__, 'TE', te.__version__, torch.cuda.get_device_name(0))"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"
  echo "== host-bound cases"
  python3 bench/perf/host_bound.py "${WHICH[@]}" --processes "$PROCS" --json "$OUT/host-bound.json" --md "$OUT/host-bound.md"
  echo "rc=$?"
} > "$OUT/host-bound.log" 2>&1
tail -40 "$OUT/host-bound.log"

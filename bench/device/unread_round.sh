#!/usr/bin/env bash
# One device call: the --unread verdicts on real kernels (TE bf16 and fp8-current, unfused; the six
# PyTorch models of bench/verify/verify_allocator.py), both methods row for row, emulated sm90 against
# real kernels, and the GPU tests. Usage (device machine, repo root, TE wheels in .device/te, a
# wheel of this tree in .device/dist):  bash bench/device/unread_round.sh OUTDIR
# Writes OUTDIR/unread-crosscheck.{json,md} and OUTDIR/unread-round.log.
set -u
OUT="${1:?usage: bench/device/unread_round.sh OUTDIR}"
mkdir -p "$OUT"
source bench/device/device_env.sh  # TE from .device/te, memaudit from this tree (checked)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "rc=$rc wall_ms=$(( ($(date +%s%N) - s) / 1000000 ))"; }
{
  echo "== environment"
  python3 -c "import torch, transformer_engine as te, transformer_engine_torch as tex; print('torch', torch.__version__, 'TE', te.__version__, torch.cuda.get_device_name(0), 'cuBLASLt', tex.get_cublasLt_version())"
  echo "== unread: TE real kernels (default and production shapes), emulated sm90, PyTorch models"
  t python3 bench/verify/unread_crosscheck.py --te --production --emulated-sm90 --torch --out "$OUT"
  echo "== gpu tests (unread, PyTorch, TE)"
  t python3 -m pytest -p no:cacheprovider -q -rs tests/capture/test_unread.py tests/capture/test_aten_reads.py
  t python3 -m pytest -p no:cacheprovider -q -m gpu -rs tests/capture/test_capture_gpu.py
  t python3 -m pytest -p no:cacheprovider -q -m gpu -rs tests/te/test_te_gpu.py tests/capture/test_no_sync_gpu.py
} > "$OUT/unread-round.log" 2>&1
tail -60 "$OUT/unread-round.log"

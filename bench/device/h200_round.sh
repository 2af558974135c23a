#!/usr/bin/env bash
# One device call that re-verifies a round of changes on the H200 (reports/h200/round/; README there).
# Usage (device machine, repo root, TE wheels in .device/te):  bash bench/device/h200_round.sh OUTDIR
# Results are packed in OUTDIR/round.tar.gz; the log is OUTDIR/round.log.
#   - GPU tests: PyTorch (capture, torch.compile with inductor, allocator snapshots) and TE
#   - the measured matrix against the committed one, row for row (bench/verify/same_rows.py)
#   - allocator hidden_bytes on the TE cells and the six PyTorch models
#   - the emulated sm100 matrix (fused, unfused) and the production shape, to compare with fake CUDA
#   - allocator snapshots with memaudit's row names (fp8-current real kernels, nvfp4 emulated)
set -u
OUT="${1:?usage: bench/device/h200_round.sh OUTDIR}"
W=/tmp/round; rm -rf "$W"; mkdir -p "$W" "$OUT"
source bench/device/device_env.sh  # TE from .device/te, memaudit from this tree (checked)
ma() { python3 -c "import memaudit.cli as c; c.main()" "$@"; }
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "rc=$rc wall_ms=$(( ($(date +%s%N) - s) / 1000000 ))"; }
pack() { rm -f "$W"/*.pickle.tmp; tar -C "$W" --exclude='*.pickle' -czf "$OUT/round.tar.gz" .; }  # after each step: a call cut short keeps what ran
PROD="--tokens 82944 --hidden 3072 --ffn 1536"
{
  echo "== environment"
  python3 -c "import torch, transformer_engine as te; print('torch', torch.__version__, 'TE', te.__version__, torch.cuda.get_device_name(0), 'annotate_tensor', hasattr(torch.cuda.memory, '_annotate_tensor'))"
  echo "== gpu tests (PyTorch: capture, torch.compile inductor, snapshots)"
  t python3 -m pytest -p no:cacheprovider -q -m gpu -rs tests/capture/test_capture_gpu.py tests/capture/test_compile_gpu.py
  t python3 -m pytest -p no:cacheprovider -q -rs tests/capture/test_snapshot.py -k "not te_cli"
  pack
  echo "== gpu tests (TE)"
  t python3 -m pytest -p no:cacheprovider -q -m gpu -rs tests/te/test_te_gpu.py tests/capture/test_no_sync_gpu.py
  t python3 -m pytest -p no:cacheprovider -q -rs tests/capture/test_snapshot.py -k te_cli
  pack
  echo "== measured matrix against the committed one"
  t ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --quiet --json "$W/te-grouped-mlp.json" > /dev/null
  python3 bench/verify/same_rows.py reports/h200/te-grouped-mlp.json "$W/te-grouped-mlp.json" --ignore module
  pack
  echo "== allocator check, TE"
  t ma run --target te-grouped-mlp --recipe bf16,fp8-delayed,fp8-current --groups 1,4,8 --verify-allocator --quiet --json "$W/verify-allocator-te.json" > /dev/null
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('hidden_bytes', [c['allocator']['hidden_bytes'] for c in d['cases']])" "$W/verify-allocator-te.json"
  pack
  echo "== allocator check, PyTorch models"
  t python3 bench/verify/verify_allocator.py --out "$W/verify-allocator-torch.json"
  pack
  echo "== emulated sm100 matrix (fused, unfused) and production shape"
  t ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --kernels emulated --arch sm100 --fused --quiet --json "$W/sm100-fused.json" > /dev/null
  t ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --kernels emulated --arch sm100 --no-fused --quiet --json "$W/sm100-no-fused.json" > /dev/null
  t ma run --target te-grouped-mlp --recipe mxfp8,nvfp4 --groups 1,8 $PROD --kernels emulated --arch sm100 --fused --quiet --json "$W/sm100-production.json" > /dev/null
  pack
  echo "== allocator snapshots with row names"
  t ma run --target te-grouped-mlp --recipe fp8-current --groups 4 --quiet --json "$W/snapshot-fp8-current.json" --memory-snapshot "$W/snapshot-fp8-current.pickle"
  python3 bench/verify/snapshot_render.py "$W/snapshot-fp8-current.pickle" "$W/snapshot-fp8-current.json" --md "$W/snapshot-fp8-current.md"
  t ma run --target te-grouped-mlp --recipe nvfp4 --groups 8 $PROD --kernels emulated --arch sm100 --fused --quiet --json "$W/snapshot-nvfp4.json" --memory-snapshot "$W/snapshot-nvfp4.pickle"
  python3 bench/verify/snapshot_render.py "$W/snapshot-nvfp4.pickle" "$W/snapshot-nvfp4.json" --md "$W/snapshot-nvfp4.md" --html "$W/snapshot-nvfp4.html"
} > "$OUT/round.log" 2>&1
pack
grep -v "RHT fusion is only supported\|VARYING_FIRST_DIM\|^\s*$" "$OUT/round.log" | tail -120

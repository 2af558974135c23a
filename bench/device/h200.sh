#!/usr/bin/env bash
# Everything the H200 measures for memaudit (see docs/investigations/overhead.md and docs/investigations/bench.md).
# Usage (device machine, repo root; TE importable, or TE wheels in .device/te):
#   bash bench/device/h200.sh OUTDIR                       # doctor, gpu tests, matrix, allocator checks, scenario, expected
#   bash bench/device/h200.sh OUTDIR --bench               # the overhead bench (~7 min): OUTDIR/reports/bench/h200.{json,md}
#   bash bench/device/h200.sh OUTDIR --bench --cpu-smoke   # the same harness on CPU (proves it end to end; no GPU)
# After --bench: cp OUTDIR/reports/bench/h200.* reports/bench/ && python bench/perf/readme_table.py
set -u
OUT="${1:?usage: bench/device/h200.sh OUTDIR [--bench [--cpu-smoke]]}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT/bench" "$OUT/reports/bench"
source bench/device/device_env.sh  # TE from .device/te, memaudit from this tree (checked)
ma() { "$PY" -c "import memaudit.cli as c; c.main()" "$@"; }
if [ "${2:-}" = "--bench" ]; then
  # Five independent invocations (fresh processes) of bare / capture() / floor rounds come first;
  # then one process measures MemTracker, peak memory, report(), the pack hook, the 48-layer
  # whole-model scaling, syncs and the estimator. The watchdog ends it at budget + grace (450 s).
  if [ "${3:-}" = "--cpu-smoke" ]; then
    ARGS=(--cpu-smoke --runs 5 --run-pairs 5 --pairs 5 --budget-s 240 --grace-s 30)
  else
    ARGS=(--runs 5 --run-warmup 3 --run-pairs 60 --pairs 10 --budget-s 420 --grace-s 30)
  fi
  "$PY" bench/perf/run.py --out "$OUT/reports/bench/h200.json" "${ARGS[@]}" > "$OUT/bench.log" 2>&1
  echo "bench rc=$?" >> "$OUT/bench.log"
  cp docs/investigations/overhead.md "$OUT/overhead.md" && "$PY" bench/perf/readme_table.py --json "$OUT/reports/bench/h200.json" --readme "$OUT/overhead.md" >> "$OUT/bench.log" 2>&1
  echo "readme_table rc=$?" >> "$OUT/bench.log"
  tail -40 "$OUT/bench.log"
  exit 0
fi
{
  echo "== doctor"; ma doctor
  # PyTorch-only GPU tests in their own process: once TE has loaded its cuDNN, torch's cuDNN LSTM
  # in the same process fails (seen on the H200), which says nothing about memaudit.
  echo "== gpu tests (PyTorch)"; "$PY" -m pytest -p no:cacheprovider -q -m gpu -rs tests/capture/test_capture_gpu.py
  echo "== gpu tests (TE)"; "$PY" -m pytest -p no:cacheprovider -q -m gpu -rs tests/te/test_te_gpu.py tests/capture/test_no_sync_gpu.py
  echo "== dropped checkpoint graphs (probe)"; "$PY" bench/device/probe_checkpoint_leak.py --out "$OUT/probe-checkpoint.json"
  echo "== matrix"; ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --quiet --json "$OUT/te-grouped-mlp.json"; echo "rc=$?"
  echo "== determinism (same matrix again, compared without 'created')"
  ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --quiet --json /tmp/again.json > /dev/null; echo "rc=$?"
  "$PY" -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); [d.pop('created') for d in (a,b)]; print('identical' if json.dumps(a,sort_keys=True)==json.dumps(b,sort_keys=True) else 'DIFFERENT')" "$OUT/te-grouped-mlp.json" /tmp/again.json
  echo "== allocator check, TE"; ma run --target te-grouped-mlp --recipe bf16,fp8-delayed,fp8-current --groups 1,4,8 --verify-allocator --quiet --json "$OUT/verify-allocator-te.json"; echo "rc=$?"
  echo "== allocator check, PyTorch modules"; "$PY" bench/verify/verify_allocator.py --out "$OUT/verify-allocator-torch.json"; echo "rc=$?"
  echo "== scenario"; ma run --scenario scenarios/grouped_mlp.toml --quiet --json "$OUT/scenario.json"; echo "rc=$?"
  echo "== expected (default shape)"; ma run --target te-grouped-mlp --recipe bf16,fp8-delayed,fp8-current --groups 1,4,8 --expected --quiet --json "$OUT/expected-t4096.json"; echo "rc=$?"
  echo "== expected (small, odd splits)"; ma run --target te-grouped-mlp --recipe bf16,fp8-delayed,fp8-current --groups 1,4,8,64 --tokens 2048 --hidden 256 --ffn 768 --expected --quiet --json "$OUT/expected-t2048.json"; echo "rc=$?"
} > "$OUT/h200.log" 2>&1
tail -60 "$OUT/h200.log"

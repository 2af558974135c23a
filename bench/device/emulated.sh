#!/usr/bin/env bash
# The emulated-kernels measurements on a GPU (reports/emulated/). Usage (device machine, repo
# root, TE wheels in .device/te):  bash bench/device/emulated.sh OUTDIR   (results packed in OUTDIR/emulated.tar.gz)
set -u
OUT="${1:?usage: bench/device/emulated.sh OUTDIR}"
W=/tmp/emulated; rm -rf "$W"; mkdir -p "$W" "$OUT"
source bench/device/device_env.sh  # TE from .device/te, memaudit from this tree (checked)
ma() { python3 -c "import memaudit.cli as c; c.main()" "$@"; }
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "rc=$rc wall_ms=$(( ($(date +%s%N) - s) / 1000000 ))"; }
R=bf16,fp8-delayed,fp8-current
SMALL="--tokens 2048 --hidden 256 --ffn 768"
{
  echo "== stand-ins against the real kernels, call by call"; t python3 bench/verify/standin_diff.py --out "$W/standin-diff.json"
  echo "== measured (real kernels), default shape"; t ma run --target te-grouped-mlp --recipe $R --groups 1,4,8,64 --quiet --json "$W/measured-default.json"
  echo "== emulated as this GPU (sm90, every kernel a stand-in), default shape"; t ma run --target te-grouped-mlp --recipe $R --groups 1,4,8,64 --kernels standins --arch sm90 --quiet --json "$W/standins-sm90-default.json"
  echo "== measured, small shape"; t ma run --target te-grouped-mlp --recipe $R --groups 1,4,8,64 $SMALL --quiet --json "$W/measured-small.json"
  echo "== emulated as this GPU, small shape"; t ma run --target te-grouped-mlp --recipe $R --groups 1,4,8,64 $SMALL --kernels standins --arch sm90 --quiet --json "$W/standins-sm90-small.json"
  echo "== emulated sm100 matrix, fused"; t ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --kernels emulated --arch sm100 --fused --quiet --json "$W/sm100-fused.json"
  echo "== emulated sm100 matrix, unfused"; t ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --kernels emulated --arch sm100 --no-fused --quiet --json "$W/sm100-unfused.json"
  echo "== emulated sm100 G=1 with cuDNN-frontend 1.26 (no dense single-group path)"; t ma run --target te-grouped-mlp --recipe mxfp8,nvfp4 --groups 1 --kernels emulated --arch sm100 --fused --cudnn-frontend 1.26.0 --quiet --json "$W/sm100-fe126-g1.json"
  echo "== emulated sm100, production shape (T=82944, H=3072, F=1536)"; t ma run --target te-grouped-mlp --recipe mxfp8,nvfp4 --groups 1,8 --tokens 82944 --hidden 3072 --ffn 1536 --kernels emulated --arch sm100 --fused --quiet --json "$W/sm100-production.json"
  echo "== the same, G=1 with cuDNN-frontend 1.26"; t ma run --target te-grouped-mlp --recipe mxfp8,nvfp4 --groups 1 --tokens 82944 --hidden 3072 --ffn 1536 --kernels emulated --arch sm100 --fused --cudnn-frontend 1.26.0 --quiet --json "$W/sm100-production-fe126.json"
  echo "== emulated sm100, single grouped weight (fused and unfused)"; t ma run --target te-grouped-mlp --recipe mxfp8,nvfp4 --groups 1,4,8 --kernels emulated --arch sm100 --fused --single-grouped-weight --quiet --json "$W/sm100-single-weight-fused.json"
  t ma run --target te-grouped-mlp --recipe mxfp8,nvfp4 --groups 1,4,8 --kernels emulated --arch sm100 --no-fused --single-grouped-weight --quiet --json "$W/sm100-single-weight-unfused.json"
  echo "== the whole emulated matrix in one process (6 recipes x G 1,4,8 x fused/unfused)"; python3 bench/perf/emulated_timing.py; python3 bench/perf/emulated_timing.py --tokens 82944 --hidden 3072 --ffn 1536
  echo "== emulated sm100 matrix again (determinism)"; ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --kernels emulated --arch sm100 --fused --quiet --json /tmp/again.json > /dev/null
  python3 -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); [d.pop('created') for d in (a,b)]; print('identical' if json.dumps(a,sort_keys=True)==json.dumps(b,sort_keys=True) else 'DIFFERENT')" "$W/sm100-fused.json" /tmp/again.json
  echo "== GPU tests: PR #3545 end to end and the mutations"; t python3 -m pytest -p no:cacheprovider -q -rs tests/te/test_emulated.py
  echo "== mutation score"; t python3 bench/mutation/mutation_score.py --out "$W/mutation.md"
  echo "== GPU tests (PyTorch)"; python3 -m pytest -p no:cacheprovider -q -m gpu -rs tests/capture/test_capture_gpu.py
  echo "== GPU tests (TE, real kernels)"; python3 -m pytest -p no:cacheprovider -q -m gpu -rs tests/te/test_te_gpu.py tests/capture/test_no_sync_gpu.py
} > "$W/emulated.log" 2>&1
tar -C "$W" -czf "$OUT/emulated.tar.gz" .
grep -v "RHT fusion is only supported\|VARYING_FIRST_DIM\|^\s*$\|│\|┃\|━\|─" "$W/emulated.log" | tail -90

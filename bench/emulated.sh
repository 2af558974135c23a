#!/usr/bin/env bash
# The emulated-kernels measurements on a GPU (see reports/emulated/). Usage (device machine,
# repo root, TE wheels in .device/te):  bash bench/emulated.sh OUTDIR
set -u
OUT="${1:?usage: bench/emulated.sh OUTDIR}"
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/te/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
ma() { python3 -c "import memaudit.cli as c; c.main()" "$@"; }
t() { local s=$(date +%s.%N); "$@"; local rc=$?; echo "rc=$rc wall_s=$(echo "$(date +%s.%N) - $s" | bc)"; }
R=bf16,fp8-delayed,fp8-current
SMALL="--tokens 2048 --hidden 256 --ffn 768"
{
  echo "== stand-ins against the real kernels, call by call"; t python3 bench/standin_diff.py --out "$OUT/standin-diff.json"
  echo "== measured (real kernels), default shape"; t ma run --target te-grouped-mlp --recipe $R --groups 1,4,8,64 --quiet --json "$OUT/measured-default.json"
  echo "== emulated as this GPU (sm90, every kernel a stand-in), default shape"; t ma run --target te-grouped-mlp --recipe $R --groups 1,4,8,64 --kernels standins --arch sm90 --quiet --json "$OUT/standins-sm90-default.json"
  echo "== measured, small shape"; t ma run --target te-grouped-mlp --recipe $R --groups 1,4,8,64 $SMALL --quiet --json "$OUT/measured-small.json"
  echo "== emulated as this GPU, small shape"; t ma run --target te-grouped-mlp --recipe $R --groups 1,4,8,64 $SMALL --kernels standins --arch sm90 --quiet --json "$OUT/standins-sm90-small.json"
  echo "== emulated sm100 matrix, fused"; t ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --kernels emulated --arch sm100 --fused --quiet --json "$OUT/sm100-fused.json"
  echo "== emulated sm100 matrix, unfused"; t ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --kernels emulated --arch sm100 --no-fused --quiet --json "$OUT/sm100-unfused.json"
  echo "== emulated sm100, production shape (T=82944, H=3072, F=1536)"; t ma run --target te-grouped-mlp --recipe mxfp8,nvfp4 --groups 1,8 --tokens 82944 --hidden 3072 --ffn 1536 --kernels emulated --arch sm100 --fused --quiet --json "$OUT/sm100-production.json"
  echo "== emulated sm100 matrix again (determinism)"; ma run --target te-grouped-mlp --recipe all --groups 1,4,8 --kernels emulated --arch sm100 --fused --quiet --json /tmp/again.json > /dev/null
  python3 -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); [d.pop('created') for d in (a,b)]; print('identical' if json.dumps(a,sort_keys=True)==json.dumps(b,sort_keys=True) else 'DIFFERENT')" "$OUT/sm100-fused.json" /tmp/again.json
} > "$OUT/emulated.log" 2>&1
grep -v "^\s*$" "$OUT/emulated.log" | grep -v "Warning\|warn(" | tail -80

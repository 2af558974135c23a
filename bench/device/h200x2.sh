#!/usr/bin/env bash
# Per-rank audits on two H200s, NCCL, a real expert-parallel all-to-all dispatch, TE's
# GroupedLinear ops as each rank's experts (bf16 and fp8-current measured, mxfp8 and nvfp4 emulated),
# uniform and skewed routing. See docs/investigations/bench.md ("Per-rank audits") for what each file shows.
# Usage (repo root; TE importable, or TE wheels in .device/te):
#   bash bench/device/h200x2.sh OUTDIR               # 2 GPUs -> OUTDIR/*.json, *.md, OUTDIR/h200x2.log (commit as reports/h200x2/)
#   NPROC=8 bash bench/device/h200x2.sh OUTDIR       # the same at 8 ranks (8 GPUs)
#   bash bench/device/h200x2.sh OUTDIR --cpu-smoke   # every step on CPU: gloo, the reference experts, small shapes
set -u
OUT="${1:?usage: bench/device/h200x2.sh OUTDIR [--cpu-smoke]}"
PY="${PYTHON:-python3}"
NPROC="${NPROC:-2}"
mkdir -p "$OUT"
source bench/device/device_env.sh  # TE from .device/te, memaudit from this tree (checked)
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
if [ "${2:-}" = "--cpu-smoke" ]; then
  DEV=(--device cpu --dist-backend gloo); EXPERTS=(--experts reference); MEASURED=bf16; EMULATED=""
  SHAPE=(--groups 2 --tokens 256 --hidden 64 --ffn 128); ALLOC=(); OVH=(--device cpu --experts reference --groups 2 --tokens 256 --hidden 64 --ffn 128)
else
  DEV=(--device cuda --dist-backend cpu:gloo,cuda:nccl); EXPERTS=(--experts te); MEASURED=bf16,fp8-current; EMULATED=mxfp8,nvfp4
  SHAPE=(--groups 4 --tokens 8192 --hidden 3072 --ffn 1536); ALLOC=(--verify-allocator)
  OVH=(--device cuda --experts te --groups 4 --tokens 8192 --hidden 3072 --ffn 1536)
fi
TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc-per-node "$NPROC")
RUN=("${TORCHRUN[@]}" -m memaudit run --target ep-grouped-mlp "${EXPERTS[@]}" "${DEV[@]}" "${SHAPE[@]}" --quiet)
{
  echo "== doctor"; "$PY" -m memaudit doctor
  for routing in uniform hot; do
    name=$([ "$routing" = uniform ] && echo uniform || echo skewed)
    echo "== $NPROC ranks, $routing routing, $MEASURED measured (allocator check per rank)"
    "${RUN[@]}" --recipe "$MEASURED" --routing "$routing" "${ALLOC[@]}" --json "$OUT/ep-$name.json" --markdown "$OUT/ep-$name.md"
    echo "rc=$?"
    echo "== the same again (the merged report must be byte-identical, 'created' aside)"
    "${RUN[@]}" --recipe "$MEASURED" --routing "$routing" "${ALLOC[@]}" --json "/tmp/ep-$name-again.json" > /dev/null; echo "rc=$?"
    "$PY" -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); [d.pop('created') for d in (a,b)]; print('identical' if a==b else 'DIFFERENT')" "$OUT/ep-$name.json" "/tmp/ep-$name-again.json"
    echo "== each rank against one GPU at its split sizes"
    CUDA_VISIBLE_DEVICES=0 "$PY" bench/verify/dist_equivalence.py "$OUT/ep-$name.json" --out "$OUT/equivalence-$name.json"; echo "rc=$?"
    if [ -n "$EMULATED" ]; then
      echo "== $NPROC ranks, $routing routing, $EMULATED emulated (sm100 kernels, TE's real Python)"
      "${RUN[@]}" --recipe "$EMULATED" --kernels emulated --arch sm100 --routing "$routing" --json "$OUT/ep-$name-emulated.json" --markdown "$OUT/ep-$name-emulated.md"
      echo "rc=$?"
      CUDA_VISIBLE_DEVICES=0 "$PY" bench/verify/dist_equivalence.py "$OUT/ep-$name-emulated.json" --out "$OUT/equivalence-$name-emulated.json"; echo "rc=$?"
    fi
  done
  echo "== the gate on the worst rank (a budget between the ranks' bytes)"
  "$PY" bench/verify/dist_gate.py "$OUT/ep-skewed.json" --out "$OUT/gate-skewed.json"; echo "rc=$?"
  echo "== memaudit merge of the skewed run's rank files (wall time, 3 runs)"
  for i in 1 2 3; do /usr/bin/time -f "merge wall %e s" "$PY" -m memaudit merge "$OUT/ep-skewed.ranks" --json /tmp/merged.json --quiet > /dev/null; done
  for recipe in ${MEASURED//,/ }; do
    echo "== capture() over the bare distributed forward, per rank, $recipe (medians of 5)"
    "${TORCHRUN[@]}" bench/perf/dist_overhead.py "${OVH[@]}" --recipe "$recipe" --routing hot --rounds 5 --out "$OUT/overhead-$recipe.json"
    echo "rc=$?"
  done
} > "$OUT/h200x2.log" 2>&1
tail -60 "$OUT/h200x2.log"

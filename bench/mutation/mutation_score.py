"""Mutation score of ``memaudit compare`` on emulated TE cases (writes markdown).

Runs each injected regression of ``bench/_emulated.py`` (a run-time patch of TE's save path) on
an emulated sm100 beside the unpatched case, and records whether ``compare`` fails and what it
names. On a GPU the forward runs there; with no GPU on fake CUDA, one child process per case.
Usage: python bench/mutation/mutation_score.py --out reports/emulated/mutation.md (H200) or
reports/cpu/fake-cuda/mutation.md (no GPU)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._emulated import MUTATIONS, caught, emulated_case, saving  # noqa: E402
from memaudit.units import fmt_delta  # noqa: E402

SHAPE = {"tokens": 2048, "hidden": 512, "ffn": 512}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    lines = [
        "# Mutation score: injected saved-state regressions in TE 2.20.2's forward",
        "",
        "Each mutation is a run-time patch of TE's save path (`OperationContext.save_for_backward`, "
        "`bench/_emulated.py`), run with emulated kernels on sm100 "
        f"(T={SHAPE['tokens']}, H={SHAPE['hidden']}, F={SHAPE['ffn']}, G=4) beside the unpatched case, then "
        "`compare` (fail on increase; on change for a decrease). Caught = compare fails and names an "
        "operand, the kind and the orientation the mutation changed (where bytes only move between "
        "orientations at an equal total, the kind's bytes do not change: compare fails on the orientation "
        "and names the operand's buffers behind it, as `compare -v` prints them).",
        "",
        "| mutation | recipe | path | caught | saved bytes | compare names |",
        "|---|---|---|---|---|---|",
    ]
    score = 0
    base_cache = {}
    for m in MUTATIONS:
        key = (m.recipe, m.groups, m.fused)
        if key not in base_cache:
            base_cache[key] = emulated_case(m.recipe, m.groups, fused=m.fused, **SHAPE)
        base = base_cache[key]
        with saving(m.mutate):
            cur = emulated_case(m.recipe, m.groups, fused=m.fused, **SHAPE)
        ok = base.status == cur.status == "ok"
        labels: list[str] = []
        hit = False
        delta = ""
        if ok:
            hit, labels = caught(m, base, cur)
            delta = fmt_delta(cur.totals.saved_bytes - base.totals.saved_bytes)
        score += hit
        path = "fused" if base.fused else (base.path.get("grouped_linear_path") if base.path else "?")
        what = ", ".join(labels) if ok else f"error: {base.reason or cur.reason}"
        lines.append(f"| {m.name} | {m.recipe} | {path} | {'yes' if hit else '**no**'} | {delta} | {what} |")
        print(m.name, "caught" if hit else "NOT CAUGHT", labels, flush=True)
    host = base.emulation.machine.get("host", "?") if base.emulation else "?"
    lines += ["", f"**Score: {score} of {len(MUTATIONS)} caught** (emulation host: {host}).", ""]
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    print(f"score {score}/{len(MUTATIONS)}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Fingerprints of ``memaudit estimate`` over a large sweep, to prove two versions give the same output.

    PYTHONPATH=OLD_TREE python bench/verify/estimate_golden.py --out before.tsv
    PYTHONPATH=NEW_TREE python bench/verify/estimate_golden.py --out after.tsv --compile-after 1
    cmp before.tsv after.tsv

One line per (configuration, variant): the inputs, then the SHA-256 of the case's JSON as
``memaudit estimate --json`` writes it (``CaseReport.to_dict()``, sorted keys), of
``compute_totals`` of its rows, and of ``expected_rows`` where it applies. The configurations are
every point of bench/perf/bench_estimate.py's and bench/perf/run.py's grids plus a seeded random sample over
recipes, paths, archs, dtypes, shapes (odd ones included), group counts, explicit splits with empty
groups, ``dense_single_group``, probs and split-size dtypes. Only valid configurations are kept
(``resolve`` decides, in whichever tree runs this). The last line is the SHA-256 of all lines.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memaudit.errors import UsageError
from memaudit.report import compute_totals
from memaudit.te.estimate import PATHS, VARIANTS, estimate_config, expected_rows, make_spec, resolve
from memaudit.te.machine.recipes import ALIGNMENT, RECIPES


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def configs(n_random: int, seed: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for recipe in RECIPES:  # bench/perf/bench_estimate.py's grid
        for tokens in (1024 << i for i in range(8)):
            for groups in (1, 8, 64):
                for path in (None, *PATHS):
                    out.append(
                        {
                            "recipe": recipe,
                            "tokens": tokens,
                            "hidden": 3072,
                            "ffn": 1536,
                            "groups": groups,
                            "path": path,
                        }
                    )
    for recipe in RECIPES:  # bench/perf/run.py's grid
        for tokens in (4096, 8192, 65536):
            for hidden in (1024, 4096, 7168):
                for ffn in (1024, 2048):
                    for groups in (1, 4, 8, 32):
                        out.append({"recipe": recipe, "tokens": tokens, "hidden": hidden, "ffn": ffn, "groups": groups})
    rng = random.Random(seed)
    dims = (16, 32, 48, 64, 96, 128, 160, 256, 320, 1024, 1536, 2048, 3072, 4096, 7168)
    for _ in range(n_random):
        recipe = rng.choice(RECIPES)
        groups = rng.choice((1, 2, 3, 4, 5, 8, 16, 64))
        align = ALIGNMENT[recipe]
        tokens = align * rng.choice((1, 2, 3, 7, 8, 16, 33, 64, 128, 129, 1000, 5184, 8192))
        c: dict[str, Any] = {
            "recipe": recipe,
            "tokens": tokens,
            "hidden": rng.choice(dims),
            "ffn": rng.choice(dims),
            "groups": groups,
            "path": rng.choice((None, *PATHS)),
            "arch": rng.choice((None, "sm90", "sm100")),
            "dtype": rng.choice(("bf16", "bf16", "fp32")),
            "dense_single_group": rng.random() < 0.7,
            "probs_dtype": rng.choice(("float32", "bfloat16")),
            "split_sizes_dtype": rng.choice(("int64", "int32")),
        }
        if groups > 1 and rng.random() < 0.4:  # explicit splits, some groups empty
            units = tokens // align
            cuts = sorted(rng.randint(0, units) for _ in range(groups - 1))
            c["splits"] = [align * (b - a) for a, b in zip([0, *cuts], [*cuts, units], strict=True)]
        out.append(c)
    return out


def lines(n_random: int, seed: int) -> list[str]:
    rows = []
    for c in configs(n_random, seed):
        args = {k: v for k, v in c.items() if k not in ("recipe", "tokens", "hidden", "ffn", "groups")}
        try:
            cfg = resolve(c["recipe"], c["tokens"], c["hidden"], c["ffn"], c["groups"], **args)
        except UsageError:
            continue
        key = json.dumps(c, sort_keys=True, separators=(",", ":"))
        for variant in VARIANTS:
            case = estimate_config(cfg, variant)
            d = case.to_dict()
            totals = {
                k: v for k, v in asdict(compute_totals(case.rows)).items() if v is not None
            }  # as the report writes them
            rows.append(f"{key}\t{variant}\t{_sha(d)}\t{_sha(totals)}\t{len(case.rows)}")
        spec = make_spec(
            cfg.recipe,
            cfg.tokens,
            cfg.hidden,
            cfg.ffn,
            cfg.groups,
            cfg.splits,
            probs_dtype=cfg.probs_dtype,
            split_sizes_dtype=cfg.split_sizes_dtype,
        )
        exp = expected_rows(spec)
        rows.append(f"{key}\texpected\t{_sha(None if exp is None else [asdict(r) for r in exp])}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--random", type=int, default=6000, help="random configurations on top of the bench grids")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument(
        "--compile-after",
        type=int,
        default=None,
        help="compile each structure at this use (1: every estimate takes the compiled path), where the tree has one",
    )
    args = ap.parse_args()
    if args.compile_after is not None:
        try:
            import memaudit.te.estimate.compiled as compiled
        except ImportError:
            print("this tree has no compiled estimator; --compile-after ignored", file=sys.stderr)
        else:
            compiled.COMPILE_AFTER = args.compile_after
    out = lines(args.random, args.seed)
    digest = hashlib.sha256("\n".join(out).encode()).hexdigest()
    args.out.write_text("\n".join(out) + f"\nall\t{digest}\n", encoding="utf-8")
    print(f"{len(out)} lines, sha256 {digest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

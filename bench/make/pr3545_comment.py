"""The PR comment for the PR #3545 difference (docs/examples/pr3545-comment.md).

TE's grouped MLP at PR #3545's shape (T=82,944, H=3,072, F=1,536) on an emulated sm100: the
baseline is TE with PR #3545's pruning applied to its save path at run time (``bench/_emulated.py``),
the current report TE 2.20.2 as installed, so the comment shows the buffers PR #3545 removes as a
regression that puts them back. NVFP4 at G=1 (cuDNN frontend 1.26: the grouped single-group path)
and G=8; MXFP8 at G=8 and FP8-current at G=8 as cases the change does not touch. On a GPU the
forward runs there; with no GPU on fake CUDA, one child process per case (about a minute on CPU).

Usage: python bench/make/pr3545_comment.py --out docs/examples/pr3545-comment.md [--reports DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench._emulated import PRODUCTION, emulated_case, pr3545, saving  # noqa: E402
from memaudit.judge.baseline import compare_reports  # noqa: E402
from memaudit.render.markdown import render_markdown  # noqa: E402
from memaudit.report import Report, atomic_write_text  # noqa: E402

CASES = [("nvfp4", 1, "1.26.0"), ("nvfp4", 8, "1.28.0"), ("mxfp8", 8, "1.28.0"), ("fp8-current", 8, "1.28.0")]
ENVIRONMENT = {
    "device_class": "cpu",
    "transformer_engine": "2.20.2",
}  # fixed, so that the file regenerates byte for byte


def reports() -> tuple[Report, Report]:
    """(baseline: TE with PR #3545, current: TE 2.20.2)."""
    current = [emulated_case(r, g, cudnn_frontend=fe, **PRODUCTION) for r, g, fe in CASES]
    with saving(pr3545):
        fixed = [emulated_case(r, g, cudnn_frontend=fe, **PRODUCTION) for r, g, fe in CASES]
    return (
        Report(cases=fixed, environment=ENVIRONMENT, memaudit="example"),
        Report(cases=current, environment=ENVIRONMENT, memaudit="example"),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--reports", type=Path, help="also write base.json and current.json here")
    args = ap.parse_args()
    base, cur = reports()
    if args.reports is not None:
        from memaudit.report import write_report

        args.reports.mkdir(parents=True, exist_ok=True)
        write_report(base, args.reports / "base.json")
        write_report(cur, args.reports / "current.json")
    cmp = compare_reports(base, cur)
    atomic_write_text(args.out, render_markdown(cur, cmp, name="pr3545-example"))
    print(f"wrote {args.out}: {'regressed' if cmp.regressed else 'no regression'}, saved {cmp.saved_delta:+,} B")


if __name__ == "__main__":
    main()

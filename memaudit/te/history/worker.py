"""One TE version's cases in a process of its own: ``python -m memaudit.te.history.worker REQUEST``.

REQUEST is a JSON file: ``tree`` (an overlay tree, :mod:`.sources`), ``cases`` (what
:meth:`memaudit.te.history.cases.HistoryCase.to_dict` writes), ``arch``, ``out`` (where the
report goes), and ``unread`` (the read analysis to run, where asked: ``observed``). The worker loads the tree over the
installed compiled parts
(:func:`memaudit.te.history.compat.load_tree`), checks the version imported, and runs the cases
with TE's emulated forward (each case in a child forked from it on fake CUDA, or here on a GPU).
It writes ``out`` (a ``memaudit.report/3`` report; ``created`` left empty so that two runs are
byte-identical) and exits 0, or writes ``{"error": ...}`` to ``out`` and exits 3 when the version's
Python does not load: the parent makes every case of it an error cell with that reason.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from memaudit.report import atomic_write_text
from memaudit.te.history.cases import HistoryCase
from memaudit.te.history.compat import load_tree
from memaudit.te.history.sources import TESource
from memaudit.te.targets.grouped_mlp import FUSED_ENV, TEGroupedMLPTarget

LOAD_FAILED = 3


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def run(request: dict[str, Any]) -> int:
    """Load the version, run its cases, write the report; the exit status."""
    out = Path(request["out"])
    source = TESource.read(Path(request["tree"]))
    os.environ[FUSED_ENV] = "0"  # TE reads its fused switch at import; each emulated case sets its own
    try:
        loaded = load_tree(source.tree, source.version)
    except BaseException as exc:  # noqa: BLE001 - any failure to load is the version's error cell
        atomic_write_text(
            out,
            json.dumps(
                {
                    "error": f"TE {source.label} does not load here: {_first_line(exc)}",
                    "traceback": traceback.format_exc(),
                },
                sort_keys=True,
            )
            + "\n",
        )
        return LOAD_FAILED
    from memaudit.runner import run_matrix  # imports torch: after the version's Python is in place

    arch = request.get("arch", "sm100")
    target = TEGroupedMLPTarget().configure(
        {"kernels": "standins" if request.get("standins") else "emulated", "arch": arch}
    )
    cases = [HistoryCase.from_dict(d) for d in request["cases"]]
    try:
        extra = {"unread": request["unread"]} if request.get("unread") else {}  # only where asked: the runner's keyword
        report = run_matrix(target, [c.spec(target) for c in cases], **extra)
    except BaseException as exc:  # noqa: BLE001 - memaudit's own TE code does not run on this TE: every cell says so
        atomic_write_text(
            out,
            json.dumps(
                {
                    "error": f"memaudit's emulation does not run on TE {source.label}: {_first_line(exc)}",
                    "traceback": traceback.format_exc(),
                },
                sort_keys=True,
            )
            + "\n",
        )
        return LOAD_FAILED
    report.created = ""
    report.environment["te_source"] = {**source.describe(), **loaded.describe()}
    atomic_write_text(out, report.to_json())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m memaudit.te.history.worker REQUEST.json", file=sys.stderr)
        return 2
    return run(json.loads(Path(args[0]).read_text(encoding="utf-8")))


if __name__ == "__main__":
    sys.exit(main())

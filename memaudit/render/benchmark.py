"""``github-action-benchmark`` input: saved bytes per case as ``customSmallerIsBetter`` JSON.

The action (benchmark-action/github-action-benchmark, ``tool: customSmallerIsBetter``) reads a
JSON array of ``{"name", "unit", "value", "range"?, "extra"?}`` objects and keeps one history chart
per name. memaudit writes one entry per case of the *current* report that measured something
(status ``ok``): the case id as the name, ``saved_bytes`` as the value in ``bytes``, and the
baseline, delta and environment in ``extra`` (the chart's tooltip). Cases that were skipped or
errored have no saved bytes and are left out; the PR comment and the gate report them. Entries
follow the current report's case order, so the same reports give the same file, byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

from memaudit.environment import libraries
from memaudit.judge.baseline import Comparison
from memaudit.report import CaseReport, Report

UNIT = "bytes"


def _extra(case: CaseReport, cmp: Comparison | None, env: dict[str, Any]) -> str:
    lines = [f"target {case.target} · recipe {case.recipe} · groups {case.groups} · rows {len(case.rows)}"]
    diff = cmp.case(case.id) if cmp is not None else None
    base = diff.baseline if diff is not None else None
    if base is None:
        lines.append("not in the baseline")
    elif base.status != "ok":
        lines.append(f"baseline: {base.status}")
    else:
        delta = case.totals.saved_bytes - base.totals.saved_bytes
        lines.append(f"baseline {base.totals.saved_bytes:,} B · delta {delta:+,} B")
    named = (("device_class", "device"), *((lib.key, lib.short) for lib in libraries()), ("torch", "torch"))
    facts = [f"{label} {env[key]}" for key, label in named if env.get(key)]
    if facts:
        lines.append(" · ".join(facts))
    if case.emulation is not None:
        lines.append(case.emulation.label())
    if not case.complete:
        lines.append("incomplete: saved bytes are a partial count")
    return "\n".join(lines)


def benchmark_entries(current: Report, cmp: Comparison | None = None) -> list[dict[str, Any]]:
    """One ``customSmallerIsBetter`` entry per ok case of ``current``, in its case order."""
    return [
        {"name": c.id, "unit": UNIT, "value": int(c.totals.saved_bytes), "extra": _extra(c, cmp, current.environment)}
        for c in current.cases
        if c.status == "ok"
    ]


def render_benchmark_json(current: Report, cmp: Comparison | None = None) -> str:
    """The file ``compare --benchmark-json`` writes: the entries as indented JSON."""
    return json.dumps(benchmark_entries(current, cmp), indent=2, ensure_ascii=False) + "\n"

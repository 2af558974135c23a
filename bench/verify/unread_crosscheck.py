"""Cross-check the two ``--unread`` methods row for row: observed reads against poisoned buffers.

Each case runs twice through :func:`memaudit.runner.run_case`, once per method, and the verdicts
are compared row by row: ``rows`` counts the rows both methods gave a verdict of read or unread,
``disagree`` the rows where one says read and the other unread (the goal is 0). Unknown verdicts
are counted apart, per method, with the reasons.

- ``--te``: TE's grouped MLP on real kernels (a GPU): bf16 and fp8-current, unfused, G in {1, 4, 8},
  at the default shape and with ``--production`` also at T=65,536, H=4,096, F=2,048.
- ``--emulated-sm90``: the same cases with emulated sm90 kernels (observed reads only: stand-ins
  compute no values), compared with the real-kernel observed verdicts row for row.
- ``--torch``: the six PyTorch models of ``bench/verify/verify_allocator.py`` (``--shrink`` divides their
  batch dimensions; CPU or GPU).

Writes ``OUT/unread-crosscheck.json`` (the card and versions, every case, and the totals) and
``OUT/unread-crosscheck.md`` beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from memaudit.runner import run_case  # noqa: E402
from memaudit.targets.base import Built, Target  # noqa: E402

SHAPES = {
    "default": {"tokens": 4096, "hidden": 1024, "ffn": 2048},
    "production": {"tokens": 65536, "hidden": 4096, "ffn": 2048},
}


def compare(observed: Any, poisoned: Any) -> dict[str, Any]:
    """Row-for-row comparison of one case run by each method."""
    out: dict[str, Any] = {"status": [observed.status, poisoned.status], "reason": [observed.reason, poisoned.reason]}
    if observed.status != "ok" or poisoned.status != "ok":
        return {**out, "rows": 0, "disagree": 0, "compared": False}
    pairs = list(zip(observed.rows, poisoned.rows, strict=True))
    both = [(a, b) for a, b in pairs if a.read in ("read", "unread") and b.read in ("read", "unread")]
    disagree = [(a, b) for a, b in both if a.read != b.read]
    return {
        **out,
        "compared": True,
        "rows": len(both),
        "disagree": len(disagree),
        "disagreements": [
            {"row": a.index, "operand": a.operand, "observed": [a.read, a.read_by], "poisoned": [b.read, b.read_by]}
            for a, b in disagree
        ],
        "unknown_observed": sorted({str(a.read_by) for a, _ in pairs if a.read == "unknown"}),
        "unknown_poisoned": sorted({str(b.read_by) for _, b in pairs if b.read == "unknown"}),
        "unread_bytes": [observed.totals.unread_bytes, poisoned.totals.unread_bytes],
        "unread_rows": [a.operand for a, b in pairs if a.read == "unread" or b.read == "unread"],
        "poisoned_notes": list(poisoned.unread.notes) if poisoned.unread is not None else [],
    }


def run_pair(target: Target, spec: Any) -> tuple[dict[str, Any], Any]:
    t0 = time.perf_counter()
    observed = run_case(target, spec, unread="observed")
    t1 = time.perf_counter()
    poisoned = run_case(target, spec, unread="poisoned")
    t2 = time.perf_counter()
    return {
        "id": observed.id,
        **compare(observed, poisoned),
        "seconds": [round(t1 - t0, 2), round(t2 - t1, 2)],
    }, observed


def te_cases(production: bool) -> list[tuple[str, dict[str, int], str, int]]:
    shapes = ["default", "production"] if production else ["default"]
    return [
        (shape, SHAPES[shape], recipe, g) for shape in shapes for recipe in ("bf16", "fp8-current") for g in (1, 4, 8)
    ]


def te(production: bool, emulated_sm90: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

    real = TEGroupedMLPTarget().configure({"fused": False})
    emulated = None
    if emulated_sm90:
        emulated = TEGroupedMLPTarget().configure({"kernels": "emulated", "arch": "sm90", "fused": False})
    results, against = [], []
    for shape, dims, recipe, g in te_cases(production):
        spec = real.spec(recipe, g, device="cuda", **dims)
        result, observed = run_pair(real, spec)
        results.append({"shape": shape, **result})
        if emulated is not None:
            em = run_case(emulated, emulated.spec(recipe, g, device="cuda", **dims), unread="observed")
            same = differ = 0
            diffs = []
            if em.status == "ok" and observed.status == "ok" and len(em.rows) == len(observed.rows):
                for a, b in zip(observed.rows, em.rows, strict=True):
                    if (a.read, a.operand) == (b.read, b.operand):
                        same += 1
                    else:
                        differ += 1
                        diffs.append(
                            {
                                "row": a.index,
                                "operand": a.operand,
                                "real": a.read,
                                "emulated": [b.operand, b.read, b.read_by],
                            }
                        )
            against.append(
                {
                    "id": result["id"],
                    "shape": shape,
                    "status": [observed.status, em.status],
                    "reason": em.reason,
                    "rows": same + differ,
                    "differ": differ,
                    "differences": diffs,
                }
            )
    return results, against


class TorchModel(Target):
    """One model of bench/verify/verify_allocator.py as a target (its own forward, a sum backward)."""

    recipes = ("fp32",)
    shape = ()
    defaults: dict[str, Any] = {"groups": (1,), "dtype": "fp32"}

    def __init__(self, case: Any, device: str, shrink: int) -> None:
        self.case, self.device, self.shrink = case, device, shrink

    @property
    def name(self) -> str:
        return self.case.name

    def skip_reason(self, spec: Any) -> str | None:
        return None

    def case_id(self, spec: Any) -> str:
        return f"torch/{self.case.name}"

    def build(self, spec: Any) -> Built:
        from memaudit.targets.base import backward_sum

        torch.manual_seed(0)
        model, inputs = self.case.build(torch.device(self.device), self.shrink)
        return Built(
            forward=lambda cap: self.case.forward(model, inputs),
            backward=backward_sum,
            model=model,
            inputs=tuple(inputs),
        )


def torch_models(device: str, shrink: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "bench" / "verify"))
    import verify_allocator

    out = []
    for case in verify_allocator.CASES:
        target = TorchModel(case, device, shrink)
        result, _ = run_pair(target, target.spec("fp32", 1, device=device))
        out.append(result)
    return out


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# Observed reads against poisoned buffers ({doc['device']})",
        "",
        f"torch {doc['torch']}, TE {doc['te']}. Rows compared: **{doc['rows']}**, "
        f"disagreements: **{doc['disagree']}**.",
        "",
        "| case | rows | disagree | unread bytes (observed, poisoned) | unknown (observed / poisoned) |",
        "|---|---:|---:|---|---|",
    ]
    for c in doc["cases"]:
        unk = f"{len(c.get('unknown_observed', []))} / {len(c.get('unknown_poisoned', []))} reasons"
        lines.append(f"| {c['id']} | {c['rows']} | {c['disagree']} | {c.get('unread_bytes', c['status'])} | {unk} |")
    if doc.get("emulated_sm90"):
        lines += [
            "",
            f"Emulated sm90 against real kernels (observed reads): {doc['emulated_rows']} rows, "
            f"{doc['emulated_differ']} differ.",
            "",
            "| case | rows | differ |",
            "|---|---:|---:|",
        ]
        lines += [f"| {c['id']} | {c['rows']} | {c['differ']} |" for c in doc["emulated_sm90"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--te", action="store_true")
    ap.add_argument("--production", action="store_true")
    ap.add_argument("--emulated-sm90", action="store_true")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--shrink", type=int, default=1)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cases: list[dict[str, Any]] = []
    against: list[dict[str, Any]] = []
    te_version = None
    if args.te:
        import transformer_engine

        te_version = transformer_engine.__version__
        found, against = te(args.production, args.emulated_sm90)
        cases += found
    if args.torch:
        cases += torch_models(device, args.shrink)
    doc = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "te": te_version,
        "rows": sum(c["rows"] for c in cases),
        "disagree": sum(c["disagree"] for c in cases),
        "cases": cases,
        "emulated_sm90": against,
        "emulated_rows": sum(c["rows"] for c in against),
        "emulated_differ": sum(c["differ"] for c in against),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "unread-crosscheck.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "unread-crosscheck.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0 if doc["disagree"] == 0 and doc["emulated_differ"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

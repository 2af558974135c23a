"""Observed reads of TE's grouped MLP under emulation: every saved buffer's verdict (read, unread,
unknown), per case, on fake CUDA (no GPU) or a GPU.

Each case runs as ``--unread`` will run it: TE's real forward under :func:`memaudit.capture`,
then TE's real backward inside the same emulation with a read observer and TE's read sets
(:mod:`memaudit.te.capture.reads`) active. With no GPU each case runs in a child process on fake CUDA
(:func:`memaudit.te.emulate.host.call_in_child`).

    python bench/verify/te_unread.py                 # the emulated matrix -> reports/unread/
    python bench/verify/te_unread.py --shape pr      # at PR #3545's shape (T=82,944, H=3,072, F=1,536)
    python bench/verify/te_unread.py --te-tree PATH --recipes nvfp4 --fused-only   # another TE's Python

Shared with ``tests/te/test_te_unread.py``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "reports" / "unread"
RECIPES = ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4")
SHAPES = {"small": {"tokens": 4096, "hidden": 1024, "ffn": 2048}, "pr": {"tokens": 82944, "hidden": 3072, "ffn": 1536}}
"""``small``: the matrix's shape; ``pr``: PR #3545's (its description's T, H and F)."""


def observe_case(
    recipe: str, groups: int, *, arch: str, fused: bool, tokens: int, hidden: int, ffn: int, kernels: str = "emulated"
) -> dict[str, Any]:
    """One case's verdicts, here (fake CUDA must be in force without a GPU): rows with their
    verdicts, the kernels backward called, and the error if backward failed. ``kernels="real"``
    runs TE's real kernels on this GPU (``arch`` is then only the label)."""
    from memaudit.capture import capture, reads
    from memaudit.te.capture.reads import watch
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget
    from memaudit.unread import observed_verdicts

    t = TEGroupedMLPTarget().configure(
        {"kernels": "emulated", "arch": arch, "fused": fused} if kernels == "emulated" else {"fused": fused}
    )
    spec = t.spec(recipe, groups, device="cuda", tokens=tokens, hidden=hidden, ffn=ffn)
    built = t.build(spec)
    with capture() as cap:
        out = built.forward(cap)
    rep = cap.report(outputs=out)
    path = built.annotate(rep.rows, cap)
    obs = reads.Observer(cap.row_storages())
    error = None
    try:
        with reads.observing(obs, [watch]):
            built.backward(out)
    except Exception as exc:  # noqa: BLE001 - the case's error, reported with it
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    emulation = built.emulation()
    rows = []
    verdicts = observed_verdicts(obs, rep.rows)  # as the runner gives them (a container: from its buffers)
    for r in rep.rows:
        verdict, why = verdicts[r.index] if error is None else ("unknown", f"backward failed: {error}")
        rows.append(
            {
                "index": r.index,
                "operand": r.operand,
                "slot": r.slot,
                "orientation": r.orientation,
                "storage": r.storage,
                "bytes": r.bytes,
                "verdict": verdict,
                "read_by" if verdict == "read" else "why": why,
            }
        )
    fused_ran = bool(path is not None and path.to_dict().get("fused"))
    return {
        "recipe": recipe,
        "groups": groups,
        "arch": arch,
        "kernels": kernels,
        "fused_asked": fused,
        "fused": fused_ran,
        "dims": {"tokens": tokens, "hidden": hidden, "ffn": ffn},
        "error": error,
        "forward_kernels": sorted(emulation.standins) if emulation is not None else [],
        "opaque": dict(obs.opaque),
        "rows": rows,
    }


def run_case(recipe: str, groups: int, *, arch: str, fused: bool, shape: str = "small") -> dict[str, Any]:
    """:func:`observe_case` in a child process on fake CUDA for ``arch`` (on a GPU: here)."""
    import torch

    dims = SHAPES[shape]
    if torch.cuda.is_available():
        return observe_case(recipe, groups, arch=arch, fused=fused, **dims)
    from memaudit.te.emulate.host import call_in_child

    try:
        return call_in_child(arch, lambda: observe_case(recipe, groups, arch=arch, fused=fused, **dims))  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - the cell's error
        return {
            "recipe": recipe,
            "groups": groups,
            "arch": arch,
            "fused_asked": fused,
            "fused": None,
            "dims": dims,
            "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            "rows": [],
        }


def unread_rows(case: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in case["rows"] if r["verdict"] == "unread"]


def unread_bytes(case: dict[str, Any]) -> int:
    """By storage, as ``saved_bytes`` counts (a storage two rows name counts once)."""
    seen: dict[str, int] = {}
    for r in unread_rows(case):
        seen.setdefault(r["storage"] or f"row{r['index']}", r["bytes"])
    return sum(seen.values())


BLACKWELL_ONLY = ("mxfp8", "nvfp4")
"""Recipes TE refuses below compute capability 10.0 (te-internals §4), emulated or not."""
MATRIX = [
    (recipe, fused, arch)
    for recipe in RECIPES
    for fused, arch in ((True, "sm100"), (False, "sm100"), (False, "sm90"))
    if not (fused and recipe not in BLACKWELL_ONLY) and not (arch == "sm90" and recipe in BLACKWELL_ONLY)
]
"""The fused path exists for MXFP8 and NVFP4 on sm100 only (te-internals §1); every recipe runs
unfused on sm100, and the four TE runs on Hopper also on sm90."""


def markdown(cases: list[dict[str, Any]]) -> str:
    lines = [
        "| recipe | path | arch | G | unread bytes | unread rows | unknown rows | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        path = "fused" if c["fused_asked"] else "unfused"
        unknown = sum(r["verdict"] == "unknown" for r in c["rows"])
        names = ", ".join(sorted({f"{r['operand'].split('[')[0]} {r['slot']}" for r in unread_rows(c)})) or "-"
        lines.append(
            f"| {c['recipe']} | {path} | {c['arch']} | {c['groups']} | {unread_bytes(c):,} | {names} | {unknown} | "
            f"{(c['error'] or '-')[:80]} |"
        )
    return "\n".join(lines) + "\n"


def load_te_tree(tree: Path, cache: Path | None) -> str:
    """Import TE's Python from a local tree (a copy in te-history's cache) over the installed
    compiled parts; its version label."""
    import os

    from memaudit.te.history import compat, sources
    from memaudit.te.machine.recipes import FUSED_ENV

    os.environ[FUSED_ENV] = "0"  # TE reads its fused switch at import; each emulated case sets its own
    source = sources.local(tree, sources.cache_dir(cache))
    compat.load_tree(source.tree, source.version)
    return source.version


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="small")
    p.add_argument("--groups", default="1,4,8")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--recipes", default=",".join(RECIPES))
    p.add_argument("--fused-only", action="store_true")
    p.add_argument(
        "--te-tree",
        type=Path,
        help="a local TE source tree: its Python over the installed compiled parts, "
        "loaded as `memaudit te-history --te-tree` loads it (before anything imports TE)",
    )
    p.add_argument("--cache", type=Path, help="te-history's cache (for --te-tree)")
    p.add_argument(
        "--real", action="store_true", help="TE's real kernels on this GPU (unfused cases of its architecture)"
    )
    a = p.parse_args(argv)
    if a.te_tree is not None:
        load_te_tree(a.te_tree, a.cache)
    from memaudit.te.emulate.run import import_te_modules

    import_te_modules()
    cases = []
    recipes = a.recipes.split(",")
    here = None
    if a.real:
        from memaudit.te.emulate.run import here_arch

        here = here_arch()
    for recipe, fused, arch in MATRIX:
        if recipe not in recipes or (a.fused_only and not fused) or (a.real and (fused or arch != here)):
            continue
        for g in (int(x) for x in a.groups.split(",")):
            if a.real:
                c = observe_case(recipe, g, arch=arch, fused=fused, kernels="real", **SHAPES[a.shape])
            else:
                c = run_case(recipe, g, arch=arch, fused=fused, shape=a.shape)
            print(
                f"{recipe:12} {'fused' if fused else 'unfused':8} {arch} G={g}: unread {unread_bytes(c):>12,} B"
                f"{' error: ' + c['error'] if c['error'] else ''}",
                flush=True,
            )
            cases.append(c)
    a.out.mkdir(parents=True, exist_ok=True)
    stem = f"{'real' if a.real else 'emulated'}-{a.shape}"
    (a.out / f"{stem}.json").write_text(json.dumps(cases, indent=1) + "\n", encoding="utf-8")
    (a.out / f"{stem}.md").write_text(markdown(cases), encoding="utf-8")


if __name__ == "__main__":
    main()

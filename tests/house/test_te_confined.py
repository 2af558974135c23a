"""TE knowledge lives in memaudit/te/: outside it (tests and docs aside) no module imports
TransformerEngine, names one of TE's tensor classes, spells one of TE's recipe names or asks TE's
version. Read with ``ast``: code only (docstrings are docs).

Allowed by name, with the reason: the budget language's ``known_failure = { te = ... }`` (judge's
``te_version`` / ``te_version_of``): the version it matches comes from the report's environment
through the probed library whose ``rule_key`` is ``te`` (``memaudit.environment.Library``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "memaudit"
RECIPES = ("fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4")
TE_NAMES = frozenset(
    {
        "QuantizedTensor",
        "QuantizedTensorStorage",
        "Float8Tensor",
        "Float8TensorStorage",
        "MXFP8Tensor",
        "NVFP4Tensor",
        "Float8BlockwiseQTensor",
        "GroupedTensor",
        "GroupedLinear",
        "ScaledSwiGLU",
        "te_version",
        "TE_VERSION",
        "TEGroupedMLPTarget",
        "te_version_of",
        "is_fp8_available",
        "is_nvfp4_available",
        "is_mxfp8_available",
    }
)
ALLOWED = {
    ("memaudit/judge", "te_version"),
    ("memaudit/judge", "te_version_of"),
    ("memaudit/cli/check.py", "te_version_of"),
}
"""(path prefix, name): the budget language's ``te`` key (see the module docstring)."""


def _allowed(rel: str, name: str) -> bool:
    return any(rel.startswith(p) and name == x for p, x in ALLOWED)


def lookups(path: Path) -> list[str]:
    """Every TE lookup in ``path``'s code: ``line: what``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    rel = path.relative_to(ROOT.parent).as_posix()
    out = []
    for n in ast.walk(tree):
        what = None
        if isinstance(n, ast.Import | ast.ImportFrom):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            what = next(
                (f"imports {m}" for m in mods if m.split(".")[0] in ("transformer_engine", "transformer_engine_torch")),
                None,
            )
            names = [a.name for a in n.names] if isinstance(n, ast.ImportFrom) else []
            what = what or next((f"imports {x}" for x in names if x in TE_NAMES and not _allowed(rel, x)), None)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            if "transformer_engine" in n.value or "transformer-engine" in n.value:
                what = f"names TE's package: {n.value[:60]!r}"
            what = what or next(
                (f"recipe {r!r}" for r in RECIPES if re.search(rf"(?<![\w-]){re.escape(r)}(?![\w-])", n.value)), None
            )
        elif isinstance(n, ast.Name | ast.Attribute):
            name = n.id if isinstance(n, ast.Name) else n.attr
            if name in TE_NAMES and not _allowed(rel, name):
                what = name
        if what is not None:
            out.append(f"{rel}:{getattr(n, 'lineno', 0)}: {what}")
    return out


def test_no_te_lookup_outside_te() -> None:
    found = [hit for p in sorted(ROOT.rglob("*.py")) if "te" != p.relative_to(ROOT).parts[0] for hit in lookups(p)]
    assert found == []


def test_the_grep_finds_te_inside_te() -> None:
    """Control: the same reader finds TE's lookups where they belong."""
    hits = [hit for p in sorted((ROOT / "te").rglob("*.py")) for hit in lookups(p)]
    assert any("recipe 'nvfp4'" in h for h in hits)
    assert any("imports transformer_engine" in h for h in hits)
    assert any("te_version" in h for h in hits)

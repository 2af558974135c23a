"""A package that is not memaudit, shipping a target by entry point: ``memaudit_attn`` (the
``attn`` target of ``tests/shape_target.py``, shape seq x heads x head_dim), installed as a
``.dist-info`` beside its module in a folder put on ``sys.path`` (or ``PYTHONPATH``)."""

from __future__ import annotations

from pathlib import Path

SHAPE_TARGET = Path(__file__).with_name("shape_target.py")
PACKAGE = "memaudit_attn"


def install(root: Path) -> Path:
    """Write the package and its metadata under ``root``/site; return that folder."""
    site = root / "site"
    pkg = site / PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(SHAPE_TARGET.read_text(encoding="utf-8"), encoding="utf-8")
    info = site / f"{PACKAGE}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[memaudit.targets]\nattn = {PACKAGE}:AttentionTarget\n", encoding="utf-8")
    return site

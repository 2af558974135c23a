"""The scenarios that ship with memaudit, and how ``--scenario`` finds one by name.

The top-level ``scenarios/`` folder is the source of truth; pyproject.toml maps it into the wheel
as ``memaudit/scenarios``, so ``--scenario grouped_mlp`` works wherever memaudit is installed, not
only in a clone. A path to an existing file always wins over a name.
"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from memaudit.errors import UsageError, did_you_mean
from memaudit.report import read_input

SHIPPED = " (shipped)"
"""How a scenario that ships with memaudit is named in messages and reports (``grouped_mlp (shipped)``)."""


def shipped_dir() -> Traversable:
    """The folder of the scenarios that ship with memaudit.

    An installed wheel carries the top-level ``scenarios/`` folder as ``memaudit/scenarios``
    (pyproject.toml maps it); a source checkout (a clone, an editable install, ``PYTHONPATH``) has
    it beside the package, next to its pyproject.toml. Either way it belongs to the memaudit that
    was imported (never a ``scenarios`` folder some other project put in site-packages).
    """
    pkg = resources.files("memaudit")
    inside = pkg.joinpath("scenarios")
    if inside.is_dir():
        return inside
    checkout = Path(str(pkg)).parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "scenarios").is_dir():
        return checkout / "scenarios"
    return inside


def shipped_scenarios() -> dict[str, Traversable]:
    """The shipped scenarios by name (the file's stem: ``grouped_mlp``, ``reference``), sorted."""
    folder = shipped_dir()
    if not folder.is_dir():
        return {}
    found = [f for f in folder.iterdir() if f.name.endswith(".toml") and f.is_file()]
    return {f.name.removesuffix(".toml"): f for f in sorted(found, key=lambda f: f.name)}


def is_scenario_name(ref: str) -> bool:
    """A bare name (``grouped_mlp``): no folder separator and no ``.toml`` suffix."""
    return (
        bool(ref.strip())
        and ref not in (".", "..")
        and "/" not in ref
        and os.sep not in ref
        and not ref.endswith(".toml")
    )


def resolve_scenario(ref: str | os.PathLike[str]) -> tuple[str, str]:
    """``(source, text)`` of the scenario ``ref`` names: a file path, or the bare name of a shipped
    scenario. An existing file wins over a shipped scenario of the same name; the source of a
    shipped one is ``NAME (shipped)``, never a site-packages path. An unknown name is a UsageError
    listing the shipped names."""
    src = str(ref)
    if not is_scenario_name(src) or (os.path.exists(src) and not os.path.isdir(src)):
        return src, read_input(ref, "scenario file")
    shipped = shipped_scenarios()
    if src not in shipped:
        names = ", ".join(shipped) or "none (this memaudit was installed without its scenarios)"
        raise UsageError(
            f"no scenario file and no shipped scenario of that name{did_you_mean(src, shipped)}; "
            f"shipped scenarios: {names}; or give the path of a .toml file",
            source=src,
        )
    source = src + SHIPPED
    try:
        return source, shipped[src].read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read: {exc}", source=source) from None

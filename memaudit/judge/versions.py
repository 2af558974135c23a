"""TE version specifiers: does a TE version fall in a ``known_failure`` range (PEP 440)?

:func:`version_in` uses ``packaging`` when it is installed and falls back to
:func:`fallback_version_in`, a small PEP 440 subset over release segments, when it is not (or when
the version is one ``packaging`` rejects). Nothing here imports torch or TE.
"""

from __future__ import annotations

import re
from typing import Any

from memaudit.environment import libraries

_CLAUSE = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)\s*([0-9][0-9A-Za-z.+*!-]*)\s*$")


def _release(version: str) -> tuple[int, ...]:
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    if not m:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(p) for p in m.group(1).split("."))


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a > b) - (a < b)


def fallback_version_in(version: str, spec: str) -> bool:
    """A small PEP 440 subset for when ``packaging`` is missing: release segments only."""
    v = _release(version)
    for clause in spec.split(","):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"invalid specifier clause {clause.strip()!r}")
        op, target = m.groups()
        if target.endswith(".*"):
            if op not in ("==", "!="):
                raise ValueError(f"a wildcard needs == or !=: {clause.strip()!r}")
            prefix = _release(target[:-2])
            padded = v + (0,) * max(0, len(prefix) - len(v))
            if (padded[: len(prefix)] == prefix) != (op == "=="):
                return False
            continue
        t = _release(target)
        c = _cmp(v, t)
        ok = {
            "==": c == 0,
            "===": c == 0,
            "!=": c != 0,
            "<": c < 0,
            "<=": c <= 0,
            ">": c > 0,
            ">=": c >= 0,
            "~=": c >= 0 and len(t) >= 2 and v[: len(t) - 1] == t[: len(t) - 1],
        }[op]
        if not ok:
            return False
    return True


def validate_specifier(spec: str) -> None:
    """Raise ValueError if ``spec`` is not a version specifier."""
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:  # pragma: no cover - packaging ships with pip/TE
        fallback_version_in("0", spec)
        return
    try:
        SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise ValueError(str(exc)) from None
    if not spec.strip():
        raise ValueError("empty specifier")


def version_in(version: str, spec: str) -> bool:
    """Whether ``version`` satisfies ``spec`` (pre-releases included); uses packaging if present."""
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover
        return fallback_version_in(version, spec)
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return fallback_version_in(version, spec)


def te_version_of(environment: dict[str, Any] | None) -> str | None:
    """The version ``known_failure = { te = ... }`` is matched against: the entry in
    ``report.environment`` of the library whose ``rule_key`` is ``te`` (a version string, or a dict
    with one), or None."""
    key = next((lib.key for lib in libraries() if lib.rule_key == "te"), None)
    te = (environment or {}).get(key) if key is not None else None
    if isinstance(te, dict):
        te = te.get("version")
    return te if isinstance(te, str) and te else None

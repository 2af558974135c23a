"""TE version specifiers: does a TE version fall in a ``known_failure`` range (PEP 440)?

``packaging`` (a declared dependency) does the parsing and the comparison. A version it rejects
(a local build named ``2.21.0-custom``) is compared by its leading release segments. Nothing here
imports torch or TE.
"""

from __future__ import annotations

import re
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from memaudit.environment import libraries

_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def validate_specifier(spec: str) -> None:
    """Raise ValueError if ``spec`` is not a version specifier."""
    if not spec.strip():
        raise ValueError("empty specifier")
    try:
        SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise ValueError(str(exc)) from None


def _version(version: str) -> Version:
    """``version`` as PEP 440 sees it, or its leading release segments (``2.21.0`` of
    ``2.21.0-custom``) where it is not PEP 440; ValueError where it has none."""
    try:
        return Version(version)
    except InvalidVersion:
        m = _RELEASE.match(version)
        if m is None:
            raise ValueError(f"not a version: {version!r}") from None
        return Version(m.group(1))


def version_in(version: str, spec: str) -> bool:
    """Whether ``version`` satisfies ``spec`` (pre-releases included)."""
    try:
        specifiers = SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise ValueError(str(exc)) from None
    return specifiers.contains(_version(version), prereleases=True)


def te_version_of(environment: dict[str, Any] | None) -> str | None:
    """The version ``known_failure = { te = ... }`` is matched against: the entry in
    ``report.environment`` of the library whose ``rule_key`` is ``te`` (a version string, or a dict
    with one), or None."""
    key = next((lib.key for lib in libraries() if lib.rule_key == "te"), None)
    te = (environment or {}).get(key) if key is not None else None
    if isinstance(te, dict):
        te = te.get("version")
    return te if isinstance(te, str) and te else None

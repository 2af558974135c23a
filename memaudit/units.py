"""Byte quantities: parsing ("136 MiB", "1.9 GiB", "4096") and human-readable formatting."""

from __future__ import annotations

import re
from collections.abc import Sequence

from memaudit.errors import UsageError

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


MAX_BYTES = 2**63 - 1
"""The largest byte quantity anything in memaudit holds."""


def parse_bytes(value: str | int, *, source: str | None = None, key: str | None = None) -> int:
    """Parse a byte quantity; ints pass through. Raises UsageError naming source/key/value."""
    if isinstance(value, bool):
        raise UsageError(f"expected a byte quantity, got {value!r}", source=source, key=key)
    if isinstance(value, int):
        if value < 0:
            raise UsageError(f"byte quantity must be >= 0, got {value}", source=source, key=key)
        if value > MAX_BYTES:
            raise UsageError(f"byte quantity must be at most 2**63-1, got an integer of {value.bit_length()} bits", source=source, key=key)
        return value
    if not isinstance(value, str):
        raise UsageError(f"expected a byte quantity, got {value!r}", source=source, key=key)
    m = _RE.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(
            f"malformed byte quantity {value!r} (use e.g. '4096', '136 MiB', '1.9 GiB')",
            source=source,
            key=key,
        )
    number, unit = m.group(1), m.group(2).lower()
    if len(number) > 24:
        raise UsageError(f"byte quantity {value[:40]!r}... has {len(number)} digits; at most 2**63-1 bytes", source=source, key=key)
    scaled = float(number) * _UNITS[unit] if "." in number else int(number) * _UNITS[unit]
    if scaled > MAX_BYTES:
        raise UsageError(f"byte quantity {value!r} is more than 2**63-1 bytes", source=source, key=key)
    return int(round(scaled))


def fmt_bytes(n: int | None) -> str:
    """Binary-unit human form, e.g. '63.5 MiB'; exact integers below 1 KiB; any integer."""
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{n} B"
    if n >= 1024**5:  # beyond float's comfort: whole TiB, in integer arithmetic
        return f"{sign}{n // 1024**4} TiB"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.1f} {unit}"
    raise AssertionError("unreachable")


def fmt_delta(n: int) -> str:
    """Signed byte delta, '+1.0 MiB' / '-12 B' / '0 B'."""
    if n == 0:
        return "0 B"
    return ("+" if n > 0 else "") + fmt_bytes(n)


def fmt_shape(shape: Sequence[int]) -> str:
    """A shape as Python prints a tuple: ``(1024, 512)``, ``(8,)``, ``()``."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"

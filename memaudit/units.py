"""Byte quantities: parsing ("136 MiB", "1.5 GiB", "4096") and human-readable formatting.

Units are case-sensitive and unambiguous: ``B``; ``kB``/``KB``, ``MB``, ``GB``, ``TB`` (powers of
1000); ``KiB``, ``MiB``, ``GiB``, ``TiB`` (powers of 1024). A lowercase ``b`` (``Mb``, ``kb``) reads
as bits to many people, so it is refused, as is any other spelling. A quantity must be a whole
number of bytes: ``"1.5 KiB"`` (1536 B) is fine, ``"0.1 B"`` and ``"0.3 KiB"`` (307.2 B) are
refused, never rounded. The arithmetic is exact (integers and fractions, no floats).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, localcontext
from fractions import Fraction

from memaudit.errors import UsageError, did_you_mean

UNITS: dict[str, int] = {
    "B": 1,
    "kB": 1000,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}
"""The accepted units, spelled exactly so, and their bytes."""
UNIT_LIST = ", ".join(UNITS)
NUMBER = r"[0-9](?:_?[0-9])*(?:\.[0-9](?:_?[0-9])*)?"
"""A quantity's number: digits (``_`` may separate them, as in Python), maybe a fraction."""
MAX_DIGITS = 24
_RE = re.compile(rf"^\s*({NUMBER})\s*([A-Za-z]*)\s*$")


MAX_BYTES = 2**63 - 1
"""The largest byte quantity anything in memaudit holds."""


def unit_problem(unit: str) -> str | None:
    """Why ``unit`` is refused (ambiguous, misspelled, unknown), or None for an accepted unit."""
    if unit in UNITS:
        return None
    if unit.lower() in ("b", "kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib") and unit.endswith("b"):
        prefix = unit[0].upper() if len(unit) > 1 else ""
        if not prefix:
            return f"ambiguous unit {unit!r} (a lowercase b can mean bits): write B for bytes"
        decimal, binary = f"{prefix}B", f"{prefix}iB"
        return (
            f"ambiguous unit {unit!r} (a lowercase b can mean bits): write {decimal} "
            f"({UNITS[decimal]} bytes) or {binary} ({UNITS[binary]} bytes)"
        )
    canonical = {u.lower(): u for u in UNITS if u != "kB"}.get(unit.lower())
    if canonical is not None:
        return f"unit {unit!r} is spelled {canonical!r} (units are {UNIT_LIST})"
    return f"unknown unit {unit!r}{did_you_mean(unit, UNITS)}; units are {UNIT_LIST}"


def quantity_bytes(number: str, unit: str, text: str, where: str = "") -> int:
    """The bytes of ``number`` ``unit`` (as :data:`NUMBER` matches it; ``unit`` may be ``""``),
    exactly. Raises ValueError with a message naming ``text`` (the quantity as written) and
    ``where`` (e.g. ``" at column 5 of '...'"``)."""
    scale = UNITS.get(unit, 0) if unit else 1
    if not scale:
        raise ValueError(f"malformed byte quantity {text!r}{where}: {unit_problem(unit)}")
    digits = number.replace("_", "") if "_" in number else number
    if len(digits) > MAX_DIGITS:
        raise ValueError(
            f"byte quantity {text[:40]!r}{'...' if len(text) > 40 else ''}{where} has {len(digits)} digits; "
            f"at most 2**63-1 bytes"
        )
    exact = int(digits) * scale if "." not in digits else Fraction(digits) * scale
    if isinstance(exact, Fraction) and exact.denominator != 1:
        with localcontext() as ctx:
            ctx.prec = 2 * MAX_DIGITS
            shown = Decimal(digits) * scale
        raise ValueError(f"byte quantity {text!r}{where} is {shown:f} bytes, not a whole number of bytes")
    if exact > MAX_BYTES:
        raise ValueError(f"byte quantity {text!r}{where} is more than 2**63-1 bytes")
    return int(exact)


def parse_bytes(value: str | int, *, source: str | None = None, key: str | None = None) -> int:
    """Parse a byte quantity; ints pass through. Raises UsageError naming source/key/value."""
    if isinstance(value, bool):
        raise UsageError(f"expected a byte quantity, got {value!r}", source=source, key=key)
    if isinstance(value, int):
        if value < 0:
            raise UsageError(f"byte quantity must be >= 0, got {value}", source=source, key=key)
        if value > MAX_BYTES:
            raise UsageError(
                f"byte quantity must be at most 2**63-1, got an integer of {value.bit_length()} bits",
                source=source,
                key=key,
            )
        return value
    if not isinstance(value, str):
        raise UsageError(f"expected a byte quantity, got {value!r}", source=source, key=key)
    m = _RE.match(value)
    if not m:
        shown = repr(value[:40]) + ("..." if len(value) > 40 else "")
        raise UsageError(
            f"malformed byte quantity {shown} (use e.g. '4096', '136 MiB', '1.5 GiB'; units are {UNIT_LIST})",
            source=source,
            key=key,
        )
    try:
        return quantity_bytes(m.group(1), m.group(2), value.strip())
    except ValueError as e:
        raise UsageError(str(e), source=source, key=key) from None


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
    x = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        x /= 1024
        if x < 1024 or unit == "TiB":
            return f"{sign}{x:.1f} {unit}"
    raise AssertionError("unreachable")


def fmt_delta(n: int) -> str:
    """Signed byte delta, '+1.0 MiB' / '-12 B' / '0 B'."""
    if n == 0:
        return "0 B"
    return ("+" if n > 0 else "") + fmt_bytes(n)


def fmt_shape(shape: Sequence[int]) -> str:
    """A shape as Python prints a tuple: ``(1024, 512)``, ``(8,)``, ``()``."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"

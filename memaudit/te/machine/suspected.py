"""Failures inside TE's own Python that memaudit traced to a suspected TE bug.

An error cell whose exception matches one of :data:`KNOWN` says so in its first line, with the
document that has the lines and a reproduction, so that the cell is not mistaken for a fault of
memaudit's emulation.
"""

from __future__ import annotations

import linecache
import traceback
from dataclasses import dataclass


@dataclass(frozen=True)
class Suspect:
    """Where a suspected TE bug raises, and what memaudit says about it."""

    file: str
    """The path under ``transformer_engine/``."""
    function: str
    source: str
    """Text the failing statement's lines contain (matched within the statement, so a shifted
    line number in another TE version still matches)."""
    message: str
    """Text in the exception's message."""
    note: str


KNOWN = (
    Suspect(
        "pytorch/ops/fused/grouped_mlp.py",
        "fuser_forward",
        "fc1_w_scales.view(",
        "is invalid for input of size",
        "suspected TE bug: NVFP4 FC1 weight scales viewed with the unpacked K, ceil_div(fc1_weight_shape[1], "
        "k_sf_divisor), where the input uses the packed K (grouped_mlp.py:1629 and 1666 vs 1479); "
        "see docs/investigations/te-nvfp4-weight-scale-view.md",
    ),
)
"""TE 2.20.2's failures memaudit knows (docs/investigations/te-nvfp4-weight-scale-view.md)."""


def known_failure(status: str, reason: str | None) -> Suspect | None:
    """The suspected TE bug an error cell's reason names (its note, as :func:`annotated` put it
    there), if any: an expected failure, labelled as one, never a red run."""
    if status != "error" or not reason:
        return None
    # By the note's own words, not its "see PAGE" tail: reports written before the docs moved name the old path.
    return next((s for s in KNOWN if s.note.partition("; see ")[0] in reason), None)


def _statement(filename: str, lineno: int) -> str:
    """The line ``lineno`` and the few before it (the start of a call split over lines)."""
    return "".join(linecache.getline(filename, n) for n in range(max(1, lineno - 6), lineno + 1))


def suspect(exc: BaseException) -> Suspect | None:
    """The known suspected TE bug ``exc`` comes from, if any (its innermost TE frame)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/transformer_engine/" in f.filename]
    if not frames:
        return None
    f = frames[-1]
    path = f.filename[f.filename.rfind("/transformer_engine/") + len("/transformer_engine/") :]
    for s in KNOWN:
        if (
            path == s.file
            and f.name == s.function
            and s.message in str(exc)
            and s.source in _statement(f.filename, f.lineno or 0)
        ):
            return s
    return None


def annotated(exc: BaseException) -> BaseException:
    """``exc`` as it was, or, for a suspected TE bug, the same type with the note after its first line."""
    s = suspect(exc)
    if s is None:
        return exc
    first, _, rest = str(exc).partition("\n")
    try:
        out = type(exc)(f"{first} ({s.note})" + (f"\n{rest}" if rest else ""))
    except Exception:  # noqa: BLE001 - an exception type that takes other arguments
        out = RuntimeError(f"{type(exc).__name__}: {first} ({s.note})")
    out.__cause__ = exc
    return out

"""The matrix a ``run`` asks for: the flags (recipes, group counts, the target's dimensions,
dtype, device, splits) made into the target's specs, validated before anything runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memaudit.errors import UsageError
from memaudit.spec import DTYPES, CaseSpec, validate_splits
from memaudit.targets.base import Target

DEVICE = re.compile(r"cpu|meta|cuda(:\d{1,3})?")
"""The devices a run accepts."""


def parse_int_list(text: str, flag: str) -> list[int]:
    """'1,4,8' -> [1, 4, 8]; every value must be a positive integer, each given once, at most
    ``MAX_INT`` (a bound on every quantity: no overflow further on)."""
    out = []
    if len(text) > 10_000:
        raise UsageError(f"{len(text)} characters is too long for a list of integers", key=flag)
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or len(part) > 12:
            raise UsageError(f"expected positive integers separated by commas, got {part!r} in {text!r}", key=flag)
        try:
            value = int(part)
        except ValueError:
            raise UsageError(
                f"expected positive integers separated by commas, got {part!r} in {text!r}", key=flag
            ) from None
        if value < 1:
            raise UsageError(f"must be >= 1, got {value}", key=flag)
        if value in out:
            raise UsageError(
                f"{value} is listed twice in {text!r} (each value once: the cases would share an id)", key=flag
            )
        out.append(value)
    if not out:
        raise UsageError("no value given", key=flag)
    return out


def parse_recipes(text: str, supported: Sequence[str], known: Sequence[str]) -> list[str]:
    """'all' (the ``supported`` ones), or names from ``known`` separated by commas."""
    if text == "all":
        return list(supported)
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UsageError("no recipe given", key="--recipe")
    for i, n in enumerate(names):
        if n not in known:
            raise UsageError(f"unknown recipe {n!r}; use one of {', '.join(known)} or 'all'", key="--recipe")
        if n in names[:i]:
            raise UsageError(
                f"{n!r} is listed twice in {text!r} (each recipe once: the cases would share an id)", key="--recipe"
            )
    return names


MAX_DIM = 2**40
"""The largest shape dimension a run accepts (larger ones overflow the libraries below)."""


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"must be >= 1, got {value}", key=flag)


def build_specs(
    target: Target,
    *,
    recipe: str | None,
    groups: str | list[int] | None,
    dims: dict[str, int | None],
    dtype: str | None,
    device: str,
    options: dict[str, Any],
    splits: str | None = None,
    all_recipes: tuple[str, ...] | None = None,
) -> list[CaseSpec]:
    """The matrix of CaseSpecs a ``run`` asks for, validated (UsageError on bad flags).

    ``dims`` are the shape options given (``--tokens`` ...; None where not given); the target's
    declared dimensions take their defaults, and an option it does not declare is refused.
    ``all_recipes`` is what ``--recipe all`` means (default: the target's supported recipes).
    """
    d = target.defaults
    names = [p.name for p in target.shape]
    for name, value in dims.items():
        flag = "--" + name.replace("_", "-")
        if value is not None and name not in names:
            has = f"it has {', '.join(names)}" if names else "it declares none: its factory takes no required case spec"
            raise UsageError(f"target {target.name!r} has no dimension {name!r} ({has})", key=flag)
        _positive(value, flag)
        if value is not None and value > MAX_DIM:
            raise UsageError(f"must be at most 2**40, got an integer of {value.bit_length()} bits", key=flag)
    supported = all_recipes if all_recipes is not None else target.supported_recipes
    recipes = parse_recipes(recipe, supported, target.recipes) if recipe is not None else list(target.default_recipes)
    group_list = (
        (parse_int_list(groups, "--groups") if isinstance(groups, str) else list(groups))
        if groups is not None
        else list(d["groups"])
    )  # the CLI gives a list (IntList); the Python API may give "1,4,8"
    dtype = dtype if dtype is not None else d["dtype"]
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}", key="--dtype")
    if not DEVICE.fullmatch(device):
        raise UsageError(f"unknown device {device!r}; use cpu, cuda, cuda:N or meta", key="--device")
    shape = {n: dims.get(n) or d[n] for n in names}
    split = next((p.name for p in target.shape if p.split), None)
    specs = []
    for r in recipes:
        for g in group_list:
            split_tuple = None
            if splits:
                if split is None:
                    raise UsageError(f"target {target.name!r} has no dimension that groups split", key="--splits")
                try:
                    values = [int(s) for s in splits.split(",")]
                except ValueError:
                    raise UsageError(f"expected integers separated by commas, got {splits!r}", key="--splits") from None
                validate_splits(values, shape[split], g, target.alignment(r), key="--splits")
                split_tuple = tuple(values)
            spec = CaseSpec(target.name, r, g, tuple(shape.items()), dtype, device, dict(options), split_tuple, target)
            spec.split_sizes()  # validates the split dimension vs groups vs alignment
            specs.append(spec)
    ids = [s.id for s in specs]
    twice = next((i for k, i in enumerate(ids) if i in ids[:k]), None)
    if twice is not None:
        raise UsageError(
            f"these options make case {twice!r} more than once: target {target.name!r} does not tell "
            "the cases apart (a factory that takes no case spec runs one case)",
            key="--groups",
        )
    return specs


def parse_range(text: str, flag: str) -> list[int]:
    """``N``, ``A,B,C``, ``A:B:xK`` (geometric) or ``A:B:+K`` (arithmetic), inclusive of B when hit."""
    text = text.strip()
    if ":" not in text:
        out = []
        for part in text.split(","):
            if len(part.strip()) > 15:
                raise UsageError(f"{part.strip()[:20]!r}...: numbers of more than 15 digits", key=flag)
            try:
                v = int(part.strip())
            except ValueError:
                raise UsageError(
                    f"expected an integer, a list A,B or a range A:B:xK / A:B:+K, got {text!r}", key=flag
                ) from None
            if v < 1:
                raise UsageError(f"must be >= 1, got {v}", key=flag)
            out.append(v)
        return out
    parts = text.split(":")
    bad = UsageError(f"malformed range {text!r}; use A:B:xK (multiply) or A:B:+K (add)", key=flag)
    if len(parts) != 3 or len(parts[2]) < 2 or parts[2][0] not in "x+":
        raise bad
    if any(len(p) > 16 for p in parts):
        raise UsageError(f"range {text!r}: numbers of more than 15 digits", key=flag)
    try:
        a, b, k = int(parts[0]), int(parts[1]), int(parts[2][1:])
    except ValueError:
        raise bad from None
    if a < 1 or b < a:
        raise UsageError(f"range {text!r} needs 1 <= A <= B", key=flag)
    if (parts[2][0] == "x" and k < 2) or (parts[2][0] == "+" and k < 1):
        raise UsageError(f"range {text!r} needs a step of x2 or more / +1 or more", key=flag)
    out = []
    v = a
    while v <= b:
        out.append(v)
        v = v * k if parts[2][0] == "x" else v + k
        if len(out) > 100_000:
            raise UsageError(f"range {text!r} has more than 100000 points", key=flag)
    return out

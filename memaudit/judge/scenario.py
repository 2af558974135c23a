"""Scenario files: the cases to run and the budgets that judge them (``scenarios/*.toml``).

:func:`load_scenario` reads and validates a file, or a scenario shipped with memaudit given by name
(``grouped_mlp``: :func:`resolve_scenario`); every problem is a :class:`UsageError` that names the
file, the key path and the bad value (exit 2, nothing written). :meth:`Scenario.specs` gives
the CaseSpecs to run; :func:`evaluate` applies the budgets to a report (filling each case's
``budgets``) and :func:`outcome` sums the verdicts up (the CLI turns it into the exit status).
The rule language is documented in docs/budgets.md.

Why one file of about 550 lines: most of it is the validating reader, one function per table of
the TOML schema, each naming the file, key path and value of what is wrong; it reads best in the
order of the schema.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memaudit.errors import UsageError, did_you_mean
from memaudit.judge.budgets import Verdict, evaluate_case
from memaudit.judge.checks import Context
from memaudit.judge.rules import (
    CHECKS,
    COUNT_OPS,
    COUNT_UNITS,
    MEASURES,
    PER,
    ByteExpr,
    CaseLike,
    Check,
    Count,
    ExactBytes,
    Forbid,
    KnownFailure,
    MaxBytes,
    PathCheck,
    Ratio,
    Rule,
    Selection,
    default_dims,
)
from memaudit.judge.shipped import SHIPPED, resolve_scenario
from memaudit.judge.versions import te_version_of, validate_specifier
from memaudit.report import KINDS, MAX_INT, ORIENTATIONS, Report, check_depth, read_input
from memaudit.spec import DTYPES, CaseSpec, default_splits
from memaudit.targets import registry

ON_ERROR = ("fail", "warn")
MAX_DIM = 2**40
"""The largest shape dimension or group count a scenario may name."""
TOP_KEYS = ("name", "description", "on_error", "allow_incomplete", "require_measured", "flags", "cases", "budget")
CASE_KEYS = ("target", "recipes", "groups", "dtype", "options")
"""A cases table's keys besides the target's dimensions (``Target.shape``: tokens, hidden, ...)."""
RULE_KEYS = ("name", "why", "recipes", "groups", "when", "select", "per", "unit", "measure", "against", "known_failure", *CHECKS)
SELECT_KEYS = ("operand", "kind", "orientation", "format", "container", "slot", "group", "is_parameter", "duplicate")
KNOWN_FAILURE_KEYS = ("te", "reason")
AGAINST_KEYS = ("recipe", "groups", "dtype")
"""What ``against`` may change besides the target's dimensions."""
FORMATS = (
    "bf16", "fp16", "fp32", "fp64", "int64", "int32", "int16", "int8", "uint8", "bool",
    "fp8", "fp8-block", "mxfp8", "nvfp4", "fp8_e4m3", "fp8_e5m2", "e8m0", "fp4_e2m1x2",
)  # fmt: skip


# ---- typed access with key paths ----------------------------------------------------------------
def _tname(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}.get(
        type(v), type(v).__name__
    )


def _join(base: str, k: str | int) -> str:
    if isinstance(k, int):
        return f"{base}[{k}]"
    return f"{base}.{k}" if base else k


@dataclass
class _Reader:
    """Typed getters that raise UsageError(source, key path, value)."""

    source: str

    def fail(self, key: str, message: str) -> UsageError:
        return UsageError(message, source=self.source, key=key)

    def table(self, v: Any, key: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(key, f"expected a table, got {v!r} ({_tname(v)})")
        return v

    def keys(self, d: dict[str, Any], allowed: Sequence[str], key: str) -> None:
        for k in d:
            if k not in allowed:
                raise self.fail(
                    _join(key, k), f"unknown key {k!r}{did_you_mean(k, allowed)}; allowed keys: {', '.join(allowed)}"
                )

    def string(self, v: Any, key: str, *, choices: Sequence[str] | None = None) -> str:
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {v!r} ({_tname(v)})")
        if not v.strip():
            raise self.fail(key, f"expected a non-empty string, got {v!r}")
        if choices is not None and v not in choices:
            raise self.fail(key, f"unknown value {v!r}{did_you_mean(v, choices)}; use one of {', '.join(choices)}")
        return v

    def integer(self, v: Any, key: str, *, minimum: int = 1) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"expected an integer, got {v!r} ({_tname(v)})")
        if v < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {v}")
        if v > MAX_DIM:
            raise self.fail(key, f"must be at most 2**40, got an integer of {v.bit_length()} bits")
        return v

    def boolean(self, v: Any, key: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {v!r} ({_tname(v)})")
        return v

    def strings(self, v: Any, key: str, *, choices: Sequence[str] | None = None) -> tuple[str, ...]:
        """A string or a non-empty array of strings."""
        if isinstance(v, str):
            return (self.string(v, key, choices=choices),)
        if not isinstance(v, list) or not v:
            raise self.fail(key, f"expected a string or a non-empty array of strings, got {v!r} ({_tname(v)})")
        return tuple(self.string(x, _join(key, i), choices=choices) for i, x in enumerate(v))

    def integers(self, v: Any, key: str, *, minimum: int = 1) -> tuple[int, ...]:
        """An integer or a non-empty array of integers."""
        if isinstance(v, int) and not isinstance(v, bool):
            return (self.integer(v, key, minimum=minimum),)
        if not isinstance(v, list) or not v:
            raise self.fail(key, f"expected an integer or a non-empty array of integers, got {v!r} ({_tname(v)})")
        return tuple(self.integer(x, _join(key, i), minimum=minimum) for i, x in enumerate(v))


# ---- rules --------------------------------------------------------------------------------------
_COUNT = re.compile(r"^\s*(==|<=|>=)?\s*([0-9]+)\s*$")


def _formats(r: _Reader, v: Any, key: str) -> tuple[str, ...]:
    out = r.strings(v, key)
    for i, f in enumerate(out):
        k = key if isinstance(v, str) else _join(key, i)
        if any(c in f for c in "*?"):
            rx = re.compile(re.escape(f).replace(r"\*", ".*").replace(r"\?", ".") + r"\Z")
            if not any(rx.match(x) for x in FORMATS):
                raise r.fail(k, f"format pattern {f!r} matches no known format; formats: {', '.join(FORMATS)}")
        elif f not in FORMATS:
            raise r.fail(k, f"unknown format {f!r}{did_you_mean(f, FORMATS)}; formats: {', '.join(FORMATS)}")
    return out


def parse_selection(d: Any, *, source: str, key: str) -> Selection:
    """A ``select`` table: operand patterns, kinds, orientations, formats, group, ..."""
    r = _Reader(source)
    d = r.table(d, key)
    r.keys(d, SELECT_KEYS, key)
    kw: dict[str, Any] = {}
    if "operand" in d:
        kw["operand"] = r.strings(d["operand"], _join(key, "operand"))
    if "kind" in d:
        kw["kind"] = r.strings(d["kind"], _join(key, "kind"), choices=KINDS)
    if "orientation" in d:
        kw["orientation"] = r.strings(d["orientation"], _join(key, "orientation"), choices=(*ORIENTATIONS, "none"))
    if "format" in d:
        kw["format"] = _formats(r, d["format"], _join(key, "format"))
    for name in ("container", "slot"):
        if name in d:
            kw[name] = r.strings(d[name], _join(key, name))
    if "group" in d:
        g = d["group"]
        if isinstance(g, str):
            kw["group"] = r.string(g, _join(key, "group"), choices=("nonempty",))
        else:
            kw["group"] = r.integers(g, _join(key, "group"), minimum=0)
    for name in ("is_parameter", "duplicate"):
        if name in d:
            kw[name] = r.boolean(d[name], _join(key, name))
    return Selection(**kw)


def parse_count(v: Any, *, source: str, key: str) -> tuple[str, int]:
    """``1`` (== 1), ``"== 1"``, ``"<= 2"``, ``">= 1"``."""
    r = _Reader(source)
    if isinstance(v, int) and not isinstance(v, bool):
        op, n = "==", v
    else:
        m = _COUNT.match(v) if isinstance(v, str) else None
        if not m:
            raise r.fail(key, f"malformed count {v!r}; use an integer or '== N', '<= N', '>= N' ({', '.join(COUNT_OPS)})")
        if len(m.group(2).lstrip("0")) > 19:
            raise r.fail(key, f"a count is at most 2**63-1, got {len(m.group(2))} digits")
        op, n = m.group(1) or "==", int(m.group(2))
    if not 0 <= n <= MAX_INT:
        raise r.fail(key, f"a count is from 0 to 2**63-1, got {n if n < 0 else f'an integer of {n.bit_length()} bits'}")
    return op, n


def parse_rule(d: Any, *, source: str, key: str, dims: tuple[str, ...] | None = None,
               path_keys: tuple[str, ...] | None = None) -> Rule:
    """One budget table (or marker rule dict) into a :class:`Rule`; ``dims`` are the target's
    dimension names (default: every built-in target's)."""
    dims = dims if dims is not None else default_dims()
    r = _Reader(source)
    d = r.table(d, key)
    r.keys(d, RULE_KEYS, key)
    if "name" not in d:
        raise r.fail(_join(key, "name"), "missing key 'name' (every budget needs a name)")
    name = r.string(d["name"], _join(key, "name"))
    checks = [c for c in CHECKS if c in d]
    if not checks:
        raise r.fail(key, f"budget {name!r} has no check; add one of {', '.join(CHECKS)}")
    if len(checks) > 1:
        raise r.fail(_join(key, checks[1]), f"budget {name!r} has {len(checks)} checks ({', '.join(checks)}); use one per budget")
    kind = checks[0]
    ck = _join(key, kind)
    select = parse_selection(d["select"], source=source, key=_join(key, "select")) if "select" in d else None

    for opt, allowed in (("per", ("count",)), ("unit", ("count",)), ("measure", ("max_bytes", "exact_bytes", "ratio")), ("against", ("ratio",))):
        if opt in d and kind not in allowed:
            raise r.fail(_join(key, opt), f"{opt!r} = {d[opt]!r} does not go with a {kind} check (only with {', '.join(allowed)})")
    measure = "saved" if select is None else "logical"
    if "measure" in d:
        measure = r.string(d["measure"], _join(key, "measure"), choices=MEASURES)

    check: Check
    if kind == "count":
        op, n = parse_count(d["count"], source=source, key=ck)
        per = "case"
        if "per" in d:
            per = r.string(d["per"], _join(key, "per")).replace(" ", "")
            if per not in PER:
                raise r.fail(_join(key, "per"), f"unknown value {d['per']!r}{did_you_mean(per, PER)}; use one of {', '.join(PER)}")
        unit = r.string(d["unit"], _join(key, "unit"), choices=COUNT_UNITS) if "unit" in d else "rows"
        check = Count(op, n, per, unit)
    elif kind == "forbid":
        if d["forbid"] is not True:
            raise r.fail(ck, f"forbid must be true (it forbids every row of the selection), got {d['forbid']!r}")
        if select is None:
            raise r.fail(ck, f"budget {name!r}: forbid needs a 'select' table (forbidding every row is never meant)")
        check = Forbid()
    elif kind in ("max_bytes", "exact_bytes"):
        expr = ByteExpr.parse(d[kind], source=source, key=ck, dims=dims)
        check = MaxBytes(expr, measure) if kind == "max_bytes" else ExactBytes(expr, measure)
    elif kind == "ratio":
        v = d["ratio"]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0 or v > 1e12:
            raise r.fail(ck, f"expected a positive, finite number (the largest allowed ratio), got {v!r}")
        if "against" not in d:
            raise r.fail(_join(key, "against"), f"budget {name!r}: ratio needs 'against', e.g. against = {{ recipe = \"bf16\" }}")
        check = Ratio(float(v), _parse_against(r, d["against"], _join(key, "against"), dims), measure)
    else:
        check = PathCheck(r.string(d["path"], ck, choices=("fused", "unfused")) == "fused")

    known = None
    if "known_failure" in d:
        kk = _join(key, "known_failure")
        kf = r.table(d["known_failure"], kk)
        r.keys(kf, KNOWN_FAILURE_KEYS, kk)
        for k in KNOWN_FAILURE_KEYS:
            if k not in kf:
                raise r.fail(_join(kk, k), f"missing key {k!r}; known_failure needs te (a version range) and reason")
        spec = r.string(kf["te"], _join(kk, "te"))
        try:
            validate_specifier(spec)
        except ValueError as exc:
            raise r.fail(_join(kk, "te"), f"invalid version specifier {spec!r} (use e.g. '<2.21'): {exc}") from None
        known = KnownFailure(spec, r.string(kf["reason"], _join(kk, "reason")))

    return Rule(
        name=name,
        check=check,
        select=select,
        recipes=frozenset(r.strings(d["recipes"], _join(key, "recipes"), choices=registry.all_recipes())) if "recipes" in d else None,
        groups=frozenset(r.integers(d["groups"], _join(key, "groups"))) if "groups" in d else None,
        known_failure=known,
        why=r.string(d["why"], _join(key, "why")) if "why" in d else None,
        when=_parse_when(r, d["when"], _join(key, "when"), path_keys) if "when" in d else (),
        source=source,
        key=key,
    )


def _parse_when(r: _Reader, v: Any, key: str, path_keys: tuple[str, ...] | None = None) -> tuple[tuple[str, Any], ...]:
    """``when = { KEY = VALUE, ... }``; ``path_keys`` are the keys the target's cases record (None:
    a marker rule, which knows no target); any other key is refused: the rule would apply nowhere."""
    d = r.table(v, key)
    for k in d:
        if path_keys is not None and k not in path_keys:
            have = f"the target's cases record {', '.join(path_keys)}" if path_keys else "the target's cases record no path"
            raise r.fail(_join(key, k), f"unknown path key {k!r}{did_you_mean(k, path_keys)}; {have}")
    if not d:
        raise r.fail(key, "empty table: name path keys and values, e.g. { grouped_linear_path = \"split-quantize\" }")
    for k, x in d.items():
        if not isinstance(x, str | int | float | bool):
            raise r.fail(_join(key, k), f"expected a string, number or boolean, got {x!r} ({_tname(x)})")
    return tuple(d.items())


def _parse_against(r: _Reader, v: Any, key: str, dims: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    d = r.table(v, key)
    r.keys(d, (*AGAINST_KEYS[:2], *dims, *AGAINST_KEYS[2:]), key)
    if not d:
        raise r.fail(key, "empty table: name what differs in the other case, e.g. { recipe = \"bf16\" }")
    out: list[tuple[str, Any]] = []
    for k, x in d.items():
        kk = _join(key, k)
        if k == "recipe":
            out.append((k, r.string(x, kk, choices=registry.all_recipes())))
        elif k == "dtype":
            out.append((k, r.string(x, kk, choices=DTYPES)))
        else:
            out.append((k, r.integer(x, kk)))
    return tuple(out)


# ---- cases --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaseBlock:
    """One ``[cases]`` table: a matrix of recipes x group counts at one shape."""

    target: str
    recipes: tuple[str, ...]
    groups: tuple[int, ...]
    shape: tuple[tuple[str, int], ...]
    dtype: str = "bf16"
    options: dict[str, Any] = field(default_factory=dict, hash=False)
    key: str = "cases"

    @property
    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    def specs(self, device: str = "cpu", options: dict[str, Any] | None = None) -> list[CaseSpec]:
        return [
            CaseSpec(self.target, rec, g, self.shape, self.dtype, device, {**(options or {}), **self.options})
            for rec in self.recipes
            for g in self.groups
        ]

    def covers(self, case: CaseLike) -> bool:
        """Whether a report case is one of this block's cells."""
        opts = getattr(case, "options", None) or {}
        return (
            getattr(case, "target", None) == self.target
            and case.recipe in self.recipes
            and case.groups in self.groups
            and (case.dims, case.dtype) == (self.dims, self.dtype)
            and all(opts.get(k) == v for k, v in self.options.items())
        )


def parse_cases(d: Any, *, source: str, key: str, allow_targets: tuple[str, ...] = ()) -> CaseBlock:
    r = _Reader(source)
    d = r.table(d, key)
    target = r.string(d["target"], _join(key, "target")) if "target" in d else None
    builtin = tuple(registry.BUILTIN)
    if target is not None and target not in builtin and ":" not in target:
        raise r.fail(
            _join(key, "target"),
            f"unknown target {target!r}{did_you_mean(target, builtin)}; use {' or '.join(builtin)} or PKG.MOD:FACTORY",
        )
    if target is not None and ":" in target and target not in allow_targets:
        # A scenario is data: it may not make memaudit import and call any callable it names.
        raise r.fail(
            _join(key, "target"),
            f"a scenario file names only {' or '.join(builtin)}, or a factory the user allowed: pass "
            f"--allow-target {target} or list it under [tool.memaudit] allow-targets in pyproject.toml",
        )
    declared = registry.shape_params(target) if target is not None else registry.all_shape_params()
    dims = tuple(p.name for p in declared or ())
    r.keys(d, (*CASE_KEYS[:3], *dims, *CASE_KEYS[3:]), key)
    required = ("target", "recipes", "groups", *dims)
    for k in required:
        if k not in d:
            raise r.fail(_join(key, k), f"missing key {k!r}; a cases table needs {', '.join(required)}")
    assert target is not None
    known = registry.recipes(target)
    if d["recipes"] == "all":
        recipes: tuple[str, ...] = known
    else:
        recipes = r.strings(d["recipes"], _join(key, "recipes"), choices=known)
    groups = r.integers(d["groups"], _join(key, "groups"))
    for name, values in (("recipes", recipes), ("groups", groups)):
        dup = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if dup is not None:
            raise r.fail(_join(key, name), f"{dup!r} is listed twice")
    shape = tuple((k, r.integer(d[k], _join(key, k))) for k in dims)
    dtype = r.string(d.get("dtype", registry.default_dtype(target)), _join(key, "dtype"), choices=DTYPES)
    options = r.table(d.get("options", {}), _join(key, "options"))
    for k, v in options.items():
        if not isinstance(v, str | int | float | bool):
            raise r.fail(_join(_join(key, "options"), k), f"option values must be strings, numbers or booleans, got {v!r} ({_tname(v)})")
    split = registry.split_dim(target)
    for rec in recipes:
        if split is None:
            break
        align = registry.alignment(target, rec)
        size = dict(shape)[split]
        if size % align:
            raise r.fail(
                _join(key, split),
                f"{size} {split} cannot be split into groups of multiples of {align} (the alignment of recipe {rec!r}); use a multiple of {align}",
            )
        for i, g in enumerate(groups):
            try:
                default_splits(size, g, align)
            except UsageError as exc:
                detail = str(exc).removeprefix(f"{exc.key}: ") if exc.key else str(exc)
                raise r.fail(_join(_join(key, "groups"), i), f"group count {g} with recipe {rec!r}: {detail}") from None
    return CaseBlock(target, recipes, groups, shape, dtype, dict(options), key)


# ---- scenario -----------------------------------------------------------------------------------
_SPEC_FIELDS = ("target", "recipe", "groups", "dims", "dtype")


def _fields(x: Any) -> tuple[Any, ...]:
    return tuple(frozenset(x.dims.items()) if f == "dims" else getattr(x, f, None) for f in _SPEC_FIELDS)


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: its case blocks, budgets and error policy."""

    path: str
    name: str
    cases: tuple[CaseBlock, ...]
    rules: tuple[Rule, ...] = ()
    description: str = ""
    on_error: str = "warn"
    allow_incomplete: bool = False
    """Judge cases memaudit marked incomplete instead of failing them."""
    require_measured: bool = False
    """Fail every case that ran emulated kernels (``--kernels emulated``) instead of judging it."""
    flags: dict[str, Any] = field(default_factory=dict, hash=False)
    """The target's ``run`` options (``Target.flags``, e.g. ``kernels = "emulated"``); a flag given on
    the command line wins."""

    @property
    def target(self) -> str:
        """The target every case block runs (one per scenario)."""
        return self.cases[0].target

    def specs(self, device: str = "cpu", options: dict[str, Any] | None = None) -> list[CaseSpec]:
        """Every case to run, in file order; ``options`` are extra target options (the scenario's win)."""
        return [s for block in self.cases for s in block.specs(device, options)]

    def covers(self, case: CaseLike) -> bool:
        """Whether a report case is one of the scenario's cases."""
        return any(b.covers(case) for b in self.cases)


def parse_scenario(data: Any, *, source: str, allow_targets: tuple[str, ...] = ()) -> Scenario:
    """Validate a decoded TOML document; ``allow_targets`` are the ``PKG.MOD:FACTORY`` targets the
    user allowed (a scenario may name no other factory)."""
    r = _Reader(source)
    data = r.table(data, "")
    r.keys(data, TOP_KEYS, "")
    name = r.string(data["name"], "name") if "name" in data else Path(source.removesuffix(SHIPPED)).stem
    description = r.string(data["description"], "description") if "description" in data else ""
    on_error = r.string(data.get("on_error", "warn"), "on_error", choices=ON_ERROR)
    allow_incomplete = r.boolean(data.get("allow_incomplete", False), "allow_incomplete")
    require_measured = r.boolean(data.get("require_measured", False), "require_measured")
    flags = r.table(data.get("flags", {}), "flags")
    known_flags = {f.name: f for f in registry.run_flags()}
    for k, v in flags.items():
        if k not in known_flags:
            raise r.fail(_join("flags", k), f"unknown run flag {k!r}{did_you_mean(k, tuple(known_flags))}; "
                                            f"the targets' flags are {', '.join(known_flags)}")
        if not isinstance(v, str | int | bool):
            raise r.fail(_join("flags", k), f"expected a string, integer or boolean, got {v!r} ({_tname(v)})")
    if "cases" not in data:
        raise r.fail("cases", "missing [cases] table: name the target, recipes, groups and the target's dimensions (tokens, hidden, ffn for the built-in targets)")
    raw = data["cases"]
    if isinstance(raw, list):
        if not raw:
            raise r.fail("cases", "empty array of cases")
        blocks = tuple(parse_cases(b, source=source, key=f"cases[{i}]", allow_targets=allow_targets) for i, b in enumerate(raw))
    else:
        blocks = (parse_cases(raw, source=source, key="cases", allow_targets=allow_targets),)
    for b in blocks[1:]:
        if b.target != blocks[0].target:
            raise r.fail(_join(b.key, "target"), f"target {b.target!r} differs from {blocks[0].target!r}; one target per scenario")
    specs = [s for b in blocks for s in b.specs()]
    seen: set[str] = set()
    for s in specs:
        if s.id in seen:
            raise r.fail("cases", f"case {s.id} is listed twice")
        seen.add(s.id)

    raw_rules = data.get("budget", [])
    if not isinstance(raw_rules, list):
        raise r.fail("budget", f"expected an array of tables ([[budget]]), got {_tname(raw_rules)}")
    dims = tuple(blocks[0].dims)
    pkeys = registry.path_keys(blocks[0].target)
    rules = tuple(parse_rule(d, source=source, key=f"budget[{i}]", dims=dims, path_keys=pkeys) for i, d in enumerate(raw_rules))
    names: dict[str, int] = {}
    for i, rule in enumerate(rules):
        if rule.name in names:
            raise r.fail(f"budget[{i}].name", f"duplicate budget name {rule.name!r} (also budget[{names[rule.name]}])")
        names[rule.name] = i
        applies = [s for s in specs if rule.not_applicable(s) is None]  # type: ignore[arg-type]
        if not applies:
            run_recipes = sorted({s.recipe for s in specs})
            if rule.recipes is not None and not rule.recipes & set(run_recipes):
                k, shown, have = "recipes", sorted(rule.recipes), run_recipes
            else:
                k, shown, have = "groups", sorted(rule.groups or ()), sorted({s.groups for s in specs})
            raise r.fail(
                f"budget[{i}].{k}",
                f"budget {rule.name!r} applies to {k} {shown!r}, but the scenario runs {k} {have!r}: it would never be checked",
            )
        if isinstance(rule.check, Ratio):
            have = {_fields(s) for s in specs}
            for s in applies:
                other = s.replace(**dict(rule.check.against))
                if _fields(other) not in have:
                    shape = ", ".join(f"{k} {v}" for k, v in other.shape)
                    raise r.fail(
                        f"budget[{i}].against",
                        f"budget {rule.name!r}: against = {dict(rule.check.against)!r} points at a case the scenario "
                        f"does not run ({other.recipe}, groups {other.groups}, {shape}, {other.dtype}) for {s.id}",
                    )
    return Scenario(source, name, blocks, rules, description, on_error, allow_incomplete, require_measured, dict(flags))


_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


def allowed_targets(extra: tuple[str, ...] = (), pyproject: str | os.PathLike[str] = "pyproject.toml") -> tuple[str, ...]:
    """``extra`` (``--allow-target``) and ``[tool.memaudit] allow-targets`` of ``pyproject`` (if it exists)."""
    p = Path(pyproject)
    listed: Any = []
    try:
        present = p.is_file()
    except OSError:
        present = False
    if present:
        text = read_input(p, "pyproject.toml")  # a file that is not UTF-8 is a UsageError naming it
        check_depth(text, str(p))
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
            raise UsageError(f"cannot read [tool.memaudit]: {exc or type(exc).__name__}", source=str(p)) from None
        tool = data.get("tool", {})
        memaudit = tool.get("memaudit", {}) if isinstance(tool, dict) else None
        if not isinstance(memaudit, dict):
            raise UsageError(f"expected a table, got {memaudit!r}"[:200], source=str(p), key="tool.memaudit")
        listed = memaudit.get("allow-targets", [])
        if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
            raise UsageError(f"expected an array of PKG.MOD:FACTORY strings, got {listed!r}", source=str(p), key="tool.memaudit.allow-targets")
    return (*extra, *listed)


MAX_SCENARIO_CHARS = 2 * 1024 * 1024
"""A scenario file larger than this is refused before parsing (the shipped ones are a few KB; a
10 MB file with 250,000 budgets would take tens of seconds in TOML parsing alone)."""


def load_scenario(path: str | os.PathLike[str], allow_targets: tuple[str, ...] = ()) -> Scenario:
    """Read and validate a scenario: a file, or a shipped one by name (:func:`resolve_scenario`).
    Every problem is a UsageError naming file, key and value."""
    src, text = resolve_scenario(path)
    if len(text) > MAX_SCENARIO_CHARS:
        raise UsageError(f"the scenario is {len(text):,} characters, more than {MAX_SCENARIO_CHARS:,} (about 40,000 "
                         "budgets): split it into several files", source=src)
    check_depth(text, src)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _LINE.search(msg)
        if m:
            n = int(m.group(1))
            lines = text.splitlines()
            shown = lines[n - 1].strip() if 0 < n <= len(lines) else ""
            raise UsageError(f"TOML syntax error: {msg}: {shown!r}", source=src, key=f"line {n}") from None
        raise UsageError(f"TOML syntax error: {msg}", source=src) from None
    return parse_scenario(data, source=src, allow_targets=allow_targets)


# ---- evaluation ---------------------------------------------------------------------------------
def evaluate(
    report: Report, scenario: Scenario, *, source: str | None = None, allow_incomplete: bool = False
) -> list[Verdict]:
    """Apply the scenario's budgets to every case of ``report`` that the scenario names.

    Fills each such case's ``budgets`` with the verdict dicts. Every scenario case must be in the
    report (a report from another scenario or shape is bad input: UsageError naming ``source``).
    """
    covered = [c for c in report.cases if scenario.covers(c)]
    have = {_fields(c) for c in covered}
    for spec in scenario.specs():
        if _fields(spec) not in have:
            raise UsageError(
                f"the report has no case {spec.id}, which scenario {scenario.path} runs "
                f"(report cases: {', '.join(c.id for c in report.cases[:6]) or 'none'}{', ...' if len(report.cases) > 6 else ''})",
                source=source or "<report>",
                key="cases",
            )

    def find_case(case: CaseLike, ratio: Ratio) -> CaseLike | None:
        want = _fields(case.spec.replace(**dict(ratio.against)))
        return next((c for c in covered if _fields(c) == want), None)

    ctx = Context(
        te_version=te_version_of(report.environment),
        find_case=find_case,
        allow_incomplete=allow_incomplete or scenario.allow_incomplete,
    )
    verdicts: list[Verdict] = []
    for case in covered:
        execution = getattr(case, "execution", "measured")
        if scenario.require_measured and execution != "measured":
            how = ("ran TE's real Python with stand-in kernels" if execution == "emulated"
                   else "was estimated from TE's layout rules (no kernel ran)")
            mine = [Verdict(case.id, "require_measured", "execution", "fail", "measured", getattr(case, "execution_label", lambda: None)() or execution,
                            f"the scenario requires measured cases (require_measured = true); this case {how}, "
                            "so its budgets are not judged")]
        else:
            mine = evaluate_case(case, scenario.rules, ctx)
        case.budgets = [v.to_dict() for v in mine]
        verdicts.extend(mine)
    return verdicts


Outcome = Literal["ok", "fail", "case_error"]


def outcome(report: Report, verdicts: Sequence[Verdict], scenario: Scenario) -> Outcome:
    """``ok``: all pass or xfail; ``fail``: a fail or XPASS (or an errored case with
    on_error = "fail"); ``case_error``: an errored case with on_error = "warn" and nothing failed.
    The CLI turns it into the exit status."""
    if any(v.failed for v in verdicts):
        return "fail"
    if any(c.status == "error" for c in report.cases if scenario.covers(c)):
        return "fail" if scenario.on_error == "fail" else "case_error"
    return "ok"


@dataclass(frozen=True)
class Unjudged:
    """A budget that judged no case of a report (n/a on every case), and why.

    ``vacuous``: it could not have applied to any case of the report, whatever ran (every case
    was filtered out, or records none of its ``when`` keys): it checked nothing and fails the
    check unless ``--allow-na``. Otherwise its cases did not run (skipped or errored) or took
    another path than its ``when`` names: said, and a failure only under ``--strict``.
    """

    rule: str
    why: str
    vacuous: bool

    def text(self) -> str:
        what = "applied to no case" if self.vacuous else "judged no case here"
        return f"budget {self.rule!r} {what}: {self.why}"


def _why_not_judged(rule: Rule, case: CaseLike) -> str:
    """Why ``rule`` is n/a on ``case``: ``not run``, ``filtered``, ``no path key`` or ``another path``."""
    if rule.not_applicable(case) is not None:
        return "filtered"
    if case.status != "ok":
        return "not run"
    path = case.path
    for k, v in rule.when:
        if path is None or k not in path:
            return "no path key"
        if path[k] != v:
            return "another path"
    return "not run"  # the check itself could not judge it (a ratio against a case that did not run)


def unjudged(report: Report, verdicts: Sequence[Verdict], scenario: Scenario) -> list[Unjudged]:
    """The scenario's budgets that judged none of the report's cases (every verdict n/a), in
    scenario order, each with why (:class:`Unjudged`)."""
    judged = {v.rule for v in verdicts if v.verdict != "n/a"}
    cases = [c for c in report.cases if scenario.covers(c)]
    out = []
    for rule in scenario.rules:
        if rule.name in judged:
            continue
        counts = {k: 0 for k in ("not run", "another path", "no path key", "filtered")}
        for c in cases:
            counts[_why_not_judged(rule, c)] += 1
        keys = ", ".join(f"path.{k}" for k, _ in rule.when)
        parts = [text for n, text in (
            (counts["not run"], f"{counts['not run']} case(s) did not run (skipped or error)"),
            (counts["another path"], f"{counts['another path']} case(s) took another path than {keys}"),
            (counts["no path key"], f"{counts['no path key']} case(s) record no {keys}"),
        ) if n] or [f"all {counts['filtered']} case(s) are outside its recipes or groups"] * bool(counts["filtered"])
        vacuous = not (counts["not run"] or counts["another path"])
        out.append(Unjudged(rule.name, "; ".join(parts) or "the report has none of the scenario's cases", vacuous))
    return out


def nothing_judged(verdicts: Sequence[Verdict]) -> bool:
    """No budget judged any case (every verdict n/a, or no verdict at all): a check of nothing."""
    return not any(v.verdict != "n/a" for v in verdicts)

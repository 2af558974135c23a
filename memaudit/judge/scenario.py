"""Scenario files: the cases to run and the budgets that judge them (``scenarios/*.toml``).

:func:`load_scenario` reads and validates a file, or a scenario shipped with memaudit given by name
(``grouped_mlp``: :func:`resolve_scenario`); every problem is a :class:`UsageError` that names the
file, the key path and the bad value (exit 2, nothing written). :meth:`Scenario.specs` gives
the CaseSpecs to run; :func:`evaluate` applies the budgets to a report (filling each case's
``budgets``) and :func:`outcome` sums the verdicts up (the CLI turns it into the exit status).
The rule language is documented in docs/guides/budgets.md.

The file's schema is pydantic models made for the scenario's target
(:mod:`memaudit.judge.scenario_schema`); what types cannot say (one check per budget, a ratio's
other case, the split of tokens into groups) is checked here, on the validated tables.
"""

from __future__ import annotations

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
    CaseLike,
    Check,
    Count,
    ExactBytes,
    Forbid,
    KnownFailure,
    MaxBytes,
    MaxUnreadBytes,
    PathCheck,
    Ratio,
    Rule,
    Selection,
    default_dims,
)
from memaudit.judge.scenario_schema import MAX_DIM as MAX_DIM
from memaudit.judge.scenario_schema import budget_model, join_key, scenario_model, validate_table
from memaudit.judge.scenario_schema import parse_count as parse_count
from memaudit.judge.shipped import SHIPPED, resolve_scenario
from memaudit.judge.versions import te_version_of
from memaudit.report import CaseReport, Report, check_depth, read_input
from memaudit.spec import CaseSpec, default_splits
from memaudit.targets import registry
from memaudit.targets.base import Target


# ---- rules --------------------------------------------------------------------------------------
def parse_rule(
    d: Any,
    *,
    source: str,
    key: str,
    dims: tuple[str, ...] | None = None,
    path_keys: tuple[str, ...] | None = None,
    recipes: tuple[str, ...] | None = None,
) -> Rule:
    """One budget table (or marker rule dict) into a :class:`Rule`; ``dims`` and ``recipes`` are
    the target's dimension and recipe names (default: every built-in target's)."""
    dims = tuple(dims) if dims is not None else tuple(default_dims())
    recipes = tuple(recipes) if recipes is not None else _builtin_recipes()
    table = validate_table(
        budget_model(dims, recipes, tuple(path_keys) if path_keys is not None else None), d, source=source, key=key
    )
    return _rule(table, d, source=source, key=key)


def _ordered(table: Any, raw: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A validated table's entries in the file's order."""
    if isinstance(table, dict):
        return tuple((k, table[k]) for k in raw)
    return tuple((k, table.value(k)) for k in raw)


def _rule(t: Any, raw: dict[str, Any], *, source: str, key: str) -> Rule:
    """A validated budget table as a :class:`Rule`: what its types cannot say is checked here."""

    def fail(k: str, message: str) -> UsageError:
        return UsageError(message, source=source, key=join_key(key, k) if k else key)

    name = t.name
    checks = [c for c in CHECKS if getattr(t, c) is not None]
    if not checks:
        raise fail("", f"budget {name!r} has no check; add one of {', '.join(CHECKS)}")
    if len(checks) > 1:
        raise fail(checks[1], f"budget {name!r} has {len(checks)} checks ({', '.join(checks)}); use one per budget")
    kind = checks[0]
    for opt, allowed in (
        ("per", ("count",)),
        ("unit", ("count",)),
        ("measure", ("max_bytes", "exact_bytes", "ratio")),
        ("against", ("ratio",)),
    ):
        if opt in raw and kind not in allowed:
            raise fail(opt, f"{opt!r} = {raw[opt]!r} does not go with a {kind} check (only with {', '.join(allowed)})")
    select = Selection(**{k: v for k, v in t.select if v is not None}) if t.select is not None else None
    measure = t.measure or ("saved" if select is None else "logical")
    check: Check
    if kind == "count":
        op, n = t.count
        check = Count(op, n, t.per or "case", t.unit or "rows")
    elif kind == "forbid":
        if select is None:
            raise fail(
                "forbid", f"budget {name!r}: forbid needs a 'select' table (forbidding every row is never meant)"
            )
        check = Forbid()
    elif kind == "max_bytes":
        check = MaxBytes(t.max_bytes, measure)
    elif kind == "exact_bytes":
        check = ExactBytes(t.exact_bytes, measure)
    elif kind == "max_unread_bytes":
        check = MaxUnreadBytes(t.max_unread_bytes)
    elif kind == "ratio":
        if t.against is None:
            raise fail("against", f"budget {name!r}: ratio needs 'against', e.g. against = {{ recipe = \"bf16\" }}")
        check = Ratio(t.ratio, _ordered(t.against, raw["against"]), measure)
    else:
        check = PathCheck(t.path == "fused")
    kf = t.known_failure
    return Rule(
        name=name,
        check=check,
        select=select,
        recipes=frozenset(t.recipes) if t.recipes is not None else None,
        groups=frozenset(t.groups) if t.groups is not None else None,
        known_failure=KnownFailure(kf.te, kf.reason) if kf is not None else None,
        why=t.why,
        when=_ordered(t.when, raw["when"]) if t.when is not None else (),
        source=source,
        key=key,
    )


def _builtin_recipes() -> tuple[str, ...]:
    """Every recipe memaudit's own targets know (a rule that names no target: a marker's)."""
    return tuple(registry.union_recipes(registry.builtin_targets()))


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
    owner: Target | None = field(default=None, hash=False, compare=False, repr=False)
    """The target the block names (its specs carry it)."""
    unread: str | None = None
    """The read analysis its cases run with (``unread``: ``observed``, ``poisoned``, ``both``), or None."""

    @property
    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    def specs(
        self, device: str = "cpu", options: dict[str, Any] | None = None, target: Target | None = None
    ) -> list[CaseSpec]:
        """The block's cells; ``target`` is the (configured) target that runs them (default: the block's)."""
        owner = target if target is not None else self.owner
        return [
            CaseSpec(
                self.target, rec, g, self.shape, self.dtype, device, {**(options or {}), **self.options}, owner=owner
            )
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


def _block(t: Any, *, source: str, key: str, owner: Target) -> CaseBlock:
    """A validated cases table as a :class:`CaseBlock`: its shape is checked against the target's
    alignment here (each recipe's, for each group count)."""
    dims = tuple(p.name for p in owner.shape)
    shape = tuple((k, t.value(k)) for k in dims)
    dtype = t.dtype or owner.defaults.get("dtype", "bf16")
    split = next((p.name for p in owner.shape if p.split), None)
    for rec in t.recipes:
        if split is None:
            break
        align = owner.alignment(rec)
        size = dict(shape)[split]
        if size % align:
            raise UsageError(
                f"{size} {split} cannot be split into groups of multiples of {align} (the alignment of "
                f"recipe {rec!r}); use a multiple of {align}",
                source=source,
                key=join_key(key, split),
            )
        for i, g in enumerate(t.groups):
            try:
                default_splits(size, g, align)
            except UsageError as exc:
                detail = str(exc).removeprefix(f"{exc.key}: ") if exc.key else str(exc)
                raise UsageError(
                    f"group count {g} with recipe {rec!r}: {detail}",
                    source=source,
                    key=join_key(join_key(key, "groups"), i),
                ) from None
    return CaseBlock(t.target, t.recipes, t.groups, shape, dtype, dict(t.options), key, owner, t.unread)


def _owner(data: Any, *, source: str, allow_targets: tuple[str, ...]) -> Target | None:
    """The target the scenario's cases name, checked before anything is imported: a registered
    one, or a factory the user allowed; one target for every cases table. None where no table
    names one (the schema then says what is missing)."""
    raw = data.get("cases") if isinstance(data, dict) else None
    blocks = raw if isinstance(raw, list) else [raw]
    first: str | None = None
    owner = None
    for i, b in enumerate(blocks):
        target = b.get("target") if isinstance(b, dict) else None
        if not isinstance(target, str) or not target.strip():
            continue
        key = join_key(f"cases[{i}]" if isinstance(raw, list) else "cases", "target")
        if first is not None:
            if target != first:
                raise UsageError(
                    f"target {target!r} differs from {first!r}; one target per scenario", source=source, key=key
                )
            continue
        builtin = registry.target_names()
        if target not in builtin and ":" not in target:
            raise UsageError(
                f"unknown target {target!r}{did_you_mean(target, builtin)}; use {' or '.join(builtin)} "
                "or PKG.MOD:FACTORY",
                source=source,
                key=key,
            )
        if ":" in target and target not in allow_targets:
            # A scenario is data: it may not make memaudit import and call any callable it names.
            raise UsageError(
                f"a scenario file names only {' or '.join(builtin)}, or a factory the user allowed: pass "
                f"--allow-target {target} or list it under [tool.memaudit] allow-targets in pyproject.toml",
                source=source,
                key=key,
            )
        try:
            owner = registry.get_target(target)
        except UsageError as exc:
            raise UsageError(
                str(exc).removeprefix(f"{exc.key}: ") if exc.key else str(exc), source=source, key=key
            ) from None
        first = target
    return owner


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

    @property
    def owner(self) -> Target:
        """The target object every case block runs."""
        owner = self.cases[0].owner
        assert owner is not None
        return owner

    def specs(
        self, device: str = "cpu", options: dict[str, Any] | None = None, target: Target | None = None
    ) -> list[CaseSpec]:
        """Every case to run, in file order; ``options`` are extra target options (the scenario's
        win); ``target`` the configured target that runs them."""
        return [s for block in self.cases for s in block.specs(device, options, target)]

    def covers(self, case: CaseLike) -> bool:
        """Whether a report case is one of the scenario's cases."""
        return any(b.covers(case) for b in self.cases)

    def unread_methods(self) -> list[str | None]:
        """The read analysis of each case of :meth:`specs`, in the same order (its block's ``unread``)."""
        return [b.unread for b in self.cases for _ in range(len(b.recipes) * len(b.groups))]


def parse_scenario(data: Any, *, source: str, allow_targets: tuple[str, ...] = ()) -> Scenario:
    """Validate a decoded TOML document; ``allow_targets`` are the ``PKG.MOD:FACTORY`` targets the
    user allowed (a scenario may name no other factory)."""
    owner = _owner(data, source=source, allow_targets=allow_targets)
    shape = owner.shape if owner is not None else registry.union_shape(registry.builtin_targets())
    dims = tuple(p.name for p in shape)
    recipes = tuple(owner.recipes) if owner is not None else _builtin_recipes()
    pkeys = tuple(owner.path_keys) if owner is not None else ()
    flag_names = tuple(f.name for f in owner.flags) if owner is not None else ()
    model = scenario_model(dims, recipes, pkeys, flag_names, owner.name if owner is not None else None)
    t = validate_table(model, data, source=source)
    assert owner is not None  # a validated file names its target
    raw = data["cases"]
    blocks = tuple(
        _block(c, source=source, key=f"cases[{i}]" if isinstance(raw, list) else "cases", owner=owner)
        for i, c in enumerate(t.cases)
    )
    specs = [s for b in blocks for s in b.specs()]
    seen: set[str] = set()
    for s in specs:
        if s.id in seen:
            raise UsageError(f"case {s.id} is listed twice", source=source, key="cases")
        seen.add(s.id)

    raw_rules = data.get("budget", [])
    rules = tuple(_rule(b, raw_rules[i], source=source, key=f"budget[{i}]") for i, b in enumerate(t.budget))
    names: dict[str, int] = {}
    for i, rule in enumerate(rules):

        def fail(k: str, message: str, i: int = i) -> UsageError:
            return UsageError(message, source=source, key=f"budget[{i}].{k}")

        if rule.name in names:
            raise fail("name", f"duplicate budget name {rule.name!r} (also budget[{names[rule.name]}])")
        names[rule.name] = i
        applies = [s for s in specs if rule.not_applicable(s) is None]  # type: ignore[arg-type]
        if not applies:
            run_recipes = sorted({s.recipe for s in specs})
            shown: list[Any]
            have: Any
            if rule.recipes is not None and not rule.recipes & set(run_recipes):
                k, shown, have = "recipes", sorted(rule.recipes), run_recipes
            else:
                k, shown, have = "groups", sorted(rule.groups or ()), sorted({s.groups for s in specs})
            raise fail(
                k,
                f"budget {rule.name!r} applies to {k} {shown!r}, but the scenario runs {k} {have!r}: it would never "
                "be checked",
            )
        if isinstance(rule.check, Ratio):
            have = {_fields(s) for s in specs}
            for s in applies:
                other = s.replace(**dict(rule.check.against))
                if _fields(other) not in have:
                    dims_text = ", ".join(f"{k} {v}" for k, v in other.shape)
                    raise fail(
                        "against",
                        f"budget {rule.name!r}: against = {dict(rule.check.against)!r} points at a case the "
                        f"scenario does not run ({other.recipe}, groups {other.groups}, {dims_text}, "
                        f"{other.dtype}) for {s.id}",
                    )
    flags = dict(_ordered(t.flags, data.get("flags", {})))
    name = t.name if t.name is not None else Path(source.removesuffix(SHIPPED)).stem
    return Scenario(
        source, name, blocks, rules, t.description or "", t.on_error, t.allow_incomplete, t.require_measured, flags
    )


_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


def allowed_targets(
    extra: tuple[str, ...] = (), pyproject: str | os.PathLike[str] = "pyproject.toml"
) -> tuple[str, ...]:
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
            raise UsageError(
                f"expected an array of PKG.MOD:FACTORY strings, got {listed!r}",
                source=str(p),
                key="tool.memaudit.allow-targets",
            )
    return (*extra, *listed)


_LONG_DIGITS = re.compile(r"[0-9_]{1000,}")
"""A run of digits too long for any quantity a scenario holds (where a number Python refuses is)."""

MAX_SCENARIO_CHARS = 2 * 1024 * 1024
"""A scenario file larger than this is refused before parsing (the shipped ones are a few KB; a
10 MB file with 250,000 budgets would take tens of seconds in TOML parsing alone)."""


def load_scenario(path: str | os.PathLike[str], allow_targets: tuple[str, ...] = ()) -> Scenario:
    """Read and validate a scenario: a file, or a shipped one by name (:func:`resolve_scenario`).
    Every problem is a UsageError naming file, key and value."""
    src, text = resolve_scenario(path)
    if len(text) > MAX_SCENARIO_CHARS:
        raise UsageError(
            f"the scenario is {len(text):,} characters, more than {MAX_SCENARIO_CHARS:,} (about 40,000 "
            "budgets): split it into several files",
            source=src,
        )
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
    except ValueError as exc:  # an integer past Python's digit limit for str -> int (4300)
        m = _LONG_DIGITS.search(text)
        where = text.count("\n", 0, m.start()) + 1 if m else None
        raise UsageError(
            f"cannot read a number: {str(exc).split(';')[0]}", source=src, key=f"line {where}" if where else None
        ) from None
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
                "(report cases: "
                f"{', '.join(c.id for c in report.cases[:6]) or 'none'}{', ...' if len(report.cases) > 6 else ''})",
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
            how = (
                "ran TE's real Python with stand-in kernels"
                if execution == "emulated"
                else "was estimated from TE's layout rules (no kernel ran)"
            )
            mine = [
                Verdict(
                    case.id,
                    "require_measured",
                    "execution",
                    "fail",
                    "measured",
                    (registry.execution_label(case) if isinstance(case, CaseReport) else None) or execution,
                    f"the scenario requires measured cases (require_measured = true); this case {how}, "
                    "so its budgets are not judged",
                )
            ]
        else:
            mine = evaluate_case(case, scenario.rules, ctx)
        verdicts.extend(mine)
    return verdicts


def record_verdicts(report: Report, verdicts: list[Verdict], scenario: Scenario) -> None:
    """Store the verdicts on the cases they judged (``CaseReport.budgets``, which a written report
    carries): the one change judging makes to a report, made by the caller that writes it (:func:`evaluate`
    changes nothing). A case the scenario covers and no rule judged gets an empty list."""
    by_case: dict[str, list[dict[str, Any]]] = {}
    for v in verdicts:
        by_case.setdefault(v.case_id, []).append(v.to_dict())
    for case in report.cases:
        if case.id in by_case or scenario.covers(case):
            case.budgets = by_case.get(case.id, [])


ScenarioOutcome = Literal["ok", "fail", "case_error"]


def outcome(report: Report, verdicts: Sequence[Verdict], scenario: Scenario) -> ScenarioOutcome:
    """``ok``: all pass or xfail; ``fail``: a fail or XPASS (or an errored case with
    on_error = "fail"); ``case_error``: an errored case with on_error = "warn" and nothing failed.
    :func:`memaudit.judge.outcome.conclude` turns it into the exit status."""
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
        parts = [
            text
            for n, text in (
                (counts["not run"], f"{counts['not run']} case(s) did not run (skipped or error)"),
                (counts["another path"], f"{counts['another path']} case(s) took another path than {keys}"),
                (counts["no path key"], f"{counts['no path key']} case(s) record no {keys}"),
            )
            if n
        ] or [f"all {counts['filtered']} case(s) are outside its recipes or groups"] * bool(counts["filtered"])
        vacuous = not (counts["not run"] or counts["another path"])
        out.append(Unjudged(rule.name, "; ".join(parts) or "the report has none of the scenario's cases", vacuous))
    return out


def nothing_judged(verdicts: Sequence[Verdict]) -> bool:
    """No budget judged any case (every verdict n/a, or no verdict at all): a check of nothing."""
    return not any(v.verdict != "n/a" for v in verdicts)

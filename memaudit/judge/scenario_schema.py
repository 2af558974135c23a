"""The scenario file's schema (``scenarios/*.toml``): pydantic models, one per TOML table, with
strict types (``"4"`` is no integer, ``"no"`` no boolean) and no unknown key (``extra="forbid"``).
A table whose keys are a target's own names (its dimensions, recipes, path keys and run flags) is
made for that target (:func:`scenario_model`, :func:`budget_model`). :func:`validate_table` turns
pydantic's first error into a UsageError naming the file, the key path as written in the file and
the value, in memaudit's words (``unknown key 'selct' (did you mean 'select'?); allowed keys: ...``).
What types cannot say (one check per budget, a ratio's other case, the split of tokens into groups)
is :mod:`memaudit.judge.scenario`'s.
"""

from __future__ import annotations

import functools
import math
import re
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
)

from memaudit.errors import UsageError, did_you_mean
from memaudit.extension import formats
from memaudit.judge.byte_expr import ByteExpr
from memaudit.judge.rules import COUNT_OPS, COUNT_UNITS, MEASURES, PER
from memaudit.judge.versions import validate_specifier
from memaudit.report import KINDS, MAX_INT, ORIENTATIONS, UNREAD_CHOICES
from memaudit.spec import DTYPES

ON_ERROR = ("fail", "warn")
MAX_DIM = 2**40
"""The largest shape dimension or group count a scenario may name."""
FORMATS = formats()
"""What a selection's ``format`` may name: torch's dtypes and the classifier plugins' formats
(:func:`memaudit.extension.formats`)."""


# ---- value types: pydantic's strict types, with memaudit's words for what is wrong ------------------
def _tname(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}.get(
        type(v), type(v).__name__
    )


def join_key(base: str, k: str | int) -> str:
    """``base.k``, or ``base[k]`` for an index: a key path as an error names it."""
    if isinstance(k, int):
        return f"{base}[{k}]"
    return f"{base}.{k}" if base else k


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 300 else text[:300] + "..."


def _text(v: str) -> str:
    if not v.strip():
        raise ValueError(f"expected a non-empty string, got {v!r}")
    return v


Text = Annotated[str, AfterValidator(_text)]


def _choice(choices: Sequence[str]) -> Any:
    """A non-empty string, one of ``choices``."""
    choices = tuple(choices)

    def check(v: str) -> str:
        if v not in choices:
            raise ValueError(f"unknown value {v!r}{did_you_mean(v, choices)}; use one of {', '.join(choices)}")
        return v

    return Annotated[Text, AfterValidator(check)]


def _check_int(v: int, minimum: int) -> int:
    if v < minimum:
        raise ValueError(f"must be >= {minimum}, got {v}")
    if v > MAX_DIM:
        raise ValueError(f"must be at most 2**40, got an integer of {v.bit_length()} bits")
    return v


def _int(minimum: int = 1) -> Any:
    """An integer from ``minimum`` to 2**40 (a dimension, a group count or index)."""
    return Annotated[int, AfterValidator(lambda v: _check_int(v, minimum))]


def _unique(values: tuple[Any, ...]) -> tuple[Any, ...]:
    dup = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if dup is not None:
        raise ValueError(f"{dup!r} is listed twice")
    return values


def _one_or_many(item: Any, what: Literal["string", "integer"], *, unique: bool = False) -> Any:
    """One value or a non-empty array of them (``recipes = "bf16"`` or ``["bf16", "mxfp8"]``): a tuple."""
    lone = str if what == "string" else int

    def before(v: Any) -> Any:
        if isinstance(v, lone) and not isinstance(v, bool):
            return [v]
        if not isinstance(v, list) or not v:
            raise ValueError(
                f"expected {'a' if what == 'string' else 'an'} {what} or a non-empty array of {what}s, "
                f"got {_shown(v)} ({_tname(v)})"
            )
        return v

    after = [AfterValidator(tuple), *([AfterValidator(_unique)] if unique else [])]
    return Annotated[list[item], BeforeValidator(before), *after]


def _scalar(kinds: tuple[type, ...], what: str) -> Any:
    """A TOML scalar of one of ``kinds`` (not a table or an array)."""

    def check(v: Any) -> Any:
        if not isinstance(v, kinds):
            raise ValueError(f"{what}, got {_shown(v)} ({_tname(v)})")
        return v

    return Annotated[Any, AfterValidator(check)]


def _not_empty(hint: str) -> BeforeValidator:
    def check(v: Any) -> Any:
        if v == {}:
            raise ValueError(f"empty table: {hint}")
        return v

    return BeforeValidator(check)


_COUNT = re.compile(r"^\s*(==|<=|>=)?\s*([0-9]+)\s*$")


def _count(v: Any) -> tuple[str, int]:
    """``1`` (== 1), ``"== 1"``, ``"<= 2"``, ``">= 1"`` -> (op, n)."""
    if isinstance(v, int) and not isinstance(v, bool):
        op, n = "==", v
    else:
        m = _COUNT.match(v) if isinstance(v, str) else None
        if not m:
            raise ValueError(
                f"malformed count {_shown(v)}; use an integer or '== N', '<= N', '>= N' ({', '.join(COUNT_OPS)})"
            )
        if len(m.group(2).lstrip("0")) > 19:
            raise ValueError(f"a count is at most 2**63-1, got {len(m.group(2))} digits")
        op, n = m.group(1) or "==", int(m.group(2))
    if not 0 <= n <= MAX_INT:
        raise ValueError(f"a count is from 0 to 2**63-1, got {n if n < 0 else f'an integer of {n.bit_length()} bits'}")
    return op, n


def parse_count(v: Any, *, source: str, key: str) -> tuple[str, int]:
    """``1`` (== 1), ``"== 1"``, ``"<= 2"``, ``">= 1"``; a UsageError naming ``source`` and ``key``."""
    try:
        return _count(v)
    except ValueError as exc:
        raise UsageError(str(exc), source=source, key=key) from None


def _forbid(v: Any) -> bool:
    if v is not True:
        raise ValueError(f"forbid must be true (it forbids every row of the selection), got {_shown(v)}")
    return True


def _ratio(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0 or v > 1e12:
        raise ValueError(f"expected a positive, finite number (the largest allowed ratio), got {_shown(v)}")
    return float(v)


def unread_choice(v: Any) -> str | None:
    """A run's read analysis: ``true`` is ``observed``, ``false`` none, else one of :data:`UNREAD_CHOICES`."""
    if v is True:
        return "observed"
    if v is False:
        return None
    if isinstance(v, str) and v in UNREAD_CHOICES:
        return v
    raise ValueError(f"expected true, false or one of {', '.join(map(repr, UNREAD_CHOICES))}, got {_shown(v)}")


def _specifier(v: str) -> str:
    try:
        validate_specifier(v)
    except ValueError as exc:
        raise ValueError(f"invalid version specifier {v!r} (use e.g. '<2.21'): {exc}") from None
    return v


def _format(f: str) -> str:
    if any(c in f for c in "*?"):
        rx = re.compile(re.escape(f).replace(r"\*", ".*").replace(r"\?", ".") + r"\Z")
        if not any(rx.match(x) for x in FORMATS):
            raise ValueError(f"format pattern {f!r} matches no known format; formats: {', '.join(FORMATS)}")
    elif f not in FORMATS:
        raise ValueError(f"unknown format {f!r}{did_you_mean(f, FORMATS)}; formats: {', '.join(FORMATS)}")
    return f


def _group(v: Any) -> str | tuple[int, ...]:
    """``group = "nonempty"``, or group indices (an integer or an array of them, each >= 0)."""
    if isinstance(v, str):
        if v != "nonempty":
            raise ValueError(f"unknown value {v!r}{did_you_mean(v, ('nonempty',))}; use one of nonempty")
        return v
    values = [v] if isinstance(v, int) and not isinstance(v, bool) else v
    if not isinstance(values, list) or not values:
        raise ValueError(f"expected an integer or a non-empty array of integers, got {_shown(v)} ({_tname(v)})")
    for i, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, int):
            raise ValueError(f"[{i}]: expected an integer, got {_shown(x)} ({_tname(x)})")
        _check_int(x, 0)
    return tuple(values)


Strings = _one_or_many(Text, "string")
OptionValue = _scalar((str, int, float, bool), "option values must be strings, numbers or booleans")
FlagValue = _scalar((str, int, bool), "expected a string, integer or boolean")
PathValue = _scalar((str, int, float, bool), "expected a string, number or boolean")


# ---- the tables: pydantic models ----------------------------------------------------------------
class Table(BaseModel):
    """A TOML table: strict types (``"4"`` is no integer, ``"no"`` no boolean), no unknown key.
    Keys that are a target's own names (dimensions, path keys, run flags) are fields under a prefix
    with the name as their alias, so that no name can shadow pydantic's."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)
    noun: ClassVar[str] = "key"
    """What an unknown key is called in an error."""
    listing: ClassVar[str] = "allowed keys:"
    """What the list of known keys is called in an error."""
    what: ClassVar[str] = "the table"
    """The table, in an error about a missing key."""
    missing: ClassVar[dict[str, str]] = {}
    """A missing key's own message, where it needs more than its name."""

    @classmethod
    def keys(cls) -> list[str]:
        return [f.alias or name for name, f in cls.model_fields.items()]

    @classmethod
    def required(cls) -> list[str]:
        return [f.alias or name for name, f in cls.model_fields.items() if f.is_required()]

    def value(self, key: str) -> Any:
        """The value of TOML key ``key`` (a field's alias or name)."""
        name = next(n for n, f in type(self).model_fields.items() if (f.alias or n) == key)
        return getattr(self, name)


class SelectTable(Table):
    """A budget's ``select``: which rows it looks at."""

    operand: Strings | None = None  # type: ignore[valid-type]
    kind: _one_or_many(_choice(KINDS), "string") | None = None  # type: ignore[valid-type]
    orientation: _one_or_many(_choice((*ORIENTATIONS, "none")), "string") | None = None  # type: ignore[valid-type]
    format: _one_or_many(Annotated[Text, AfterValidator(_format)], "string") | None = None  # type: ignore[valid-type]
    container: Strings | None = None  # type: ignore[valid-type]
    slot: Strings | None = None  # type: ignore[valid-type]
    group: Annotated[Any, AfterValidator(_group)] | None = None
    is_parameter: bool | None = None
    duplicate: bool | None = None


class KnownFailureTable(Table):
    """``known_failure = { te = "<2.21", reason = "..." }``: a strict xfail."""

    what: ClassVar[str] = "known_failure"
    missing: ClassVar[dict[str, str]] = {
        k: f"missing key {k!r}; known_failure needs te (a version range) and reason" for k in ("te", "reason")
    }
    te: Annotated[Text, AfterValidator(_specifier)]
    reason: Text


class _WhenTable(Table):
    noun: ClassVar[str] = "path key"
    listing: ClassVar[str] = "the target's cases record"


class _FlagsTable(Table):
    noun: ClassVar[str] = "run flag"


def _aliased(prefix: str, names: Sequence[str], annotation: Any, *, required: bool = False) -> dict[str, Any]:
    """create_model fields for a target's own key names (aliases of prefixed fields)."""
    return {f"{prefix}{i}": (annotation, Field(... if required else None, alias=n)) for i, n in enumerate(names)}


def _model(name: str, base: type[Table], fields: dict[str, Any]) -> type[Table]:
    """pydantic's ``create_model``: a table whose keys are known only at run time."""
    return create_model(name, __base__=base, **fields)  # type: ignore[no-any-return]


def _optional(t: Any) -> Any:
    return t | None


@functools.cache
def budget_model(dims: tuple[str, ...], recipes: tuple[str, ...], path_keys: tuple[str, ...] | None) -> type[Table]:
    """A ``[[budget]]`` table of a target with dimensions ``dims``, recipes ``recipes`` and path keys
    ``path_keys`` (None: a marker rule, which knows no target, takes any path key)."""
    against = _model(
        "AgainstTable",
        Table,
        {
            "recipe": (_optional(_choice(recipes)), None),
            "groups": (_optional(_int()), None),
            **_aliased("dim_", dims, _optional(_int())),
            "dtype": (_optional(_choice(DTYPES)), None),
        },
    )
    when: Any = (
        types.GenericAlias(dict, (str, PathValue))
        if path_keys is None
        else _model("WhenTable", _WhenTable, _aliased("key_", path_keys, _optional(PathValue)))
    )

    def bytes_expr(v: Any) -> ByteExpr:
        try:
            return ByteExpr.parse(v, dims=dims)
        except UsageError as exc:
            raise ValueError(exc.message) from None

    def checked(*validators: Any) -> Any:
        return (_optional(Annotated[(Any, *validators)]), None)  # type: ignore[valid-type]

    return _model(
        "BudgetTable",
        _BudgetBase,
        {
            "name": (Text, ...),
            "why": (_optional(Text), None),
            "recipes": (_optional(_one_or_many(_choice(recipes), "string")), None),
            "groups": (_optional(_one_or_many(_int(), "integer")), None),
            "when": (
                _optional(
                    Annotated[
                        (when, _not_empty('name path keys and values, e.g. { grouped_linear_path = "split-quantize" }'))
                    ]
                ),
                None,
            ),  # type: ignore[valid-type]
            "select": (_optional(SelectTable), None),
            "per": (_optional(Annotated[(_choice(PER), BeforeValidator(_no_spaces))]), None),  # type: ignore[valid-type]
            "unit": (_optional(_choice(COUNT_UNITS)), None),
            "measure": (_optional(_choice(MEASURES)), None),
            "against": (
                _optional(
                    Annotated[(against, _not_empty('name what differs in the other case, e.g. { recipe = "bf16" }'))]
                ),
                None,
            ),  # type: ignore[valid-type]
            "known_failure": (_optional(KnownFailureTable), None),
            "count": checked(AfterValidator(_count)),
            "forbid": checked(AfterValidator(_forbid)),
            "max_bytes": checked(AfterValidator(bytes_expr)),
            "exact_bytes": checked(AfterValidator(bytes_expr)),
            "max_unread_bytes": checked(AfterValidator(bytes_expr)),
            "ratio": checked(AfterValidator(_ratio)),
            "path": (_optional(_choice(("fused", "unfused"))), None),
        },
    )


def _no_spaces(v: Any) -> Any:
    """``per = "operand, group"`` is ``operand,group``."""
    return v.replace(" ", "") if isinstance(v, str) else v


class _BudgetBase(Table):
    what: ClassVar[str] = "a budget"
    missing: ClassVar[dict[str, str]] = {"name": "missing key 'name' (every budget needs a name)"}


class _CasesBase(Table):
    what: ClassVar[str] = "a cases table"


@functools.cache
def cases_model(dims: tuple[str, ...], recipes: tuple[str, ...]) -> type[Table]:
    """A ``[cases]`` table of a target with dimensions ``dims`` and recipes ``recipes``."""

    def everything(v: Any) -> Any:
        return list(recipes) if v == "all" else v

    return _model(
        "CasesTable",
        _CasesBase,
        {
            "target": (Text, ...),
            "recipes": (
                Annotated[
                    (
                        _one_or_many(_choice(recipes), "string", unique=True),  # type: ignore[valid-type]
                        BeforeValidator(everything),
                    )
                ],
                ...,
            ),
            "groups": (_one_or_many(_int(), "integer", unique=True), ...),
            **_aliased("dim_", dims, _int(), required=True),
            "dtype": (_optional(_choice(DTYPES)), None),
            "options": (types.GenericAlias(dict, (str, OptionValue)), {}),
            "unread": (_optional(Annotated[(Any, AfterValidator(unread_choice))]), None),  # type: ignore[valid-type]
        },
    )


class _ScenarioBase(Table):
    what: ClassVar[str] = "a scenario"
    missing: ClassVar[dict[str, str]] = {
        "cases": "missing [cases] table: name the target, recipes, groups and the "
        "target's dimensions (tokens, hidden, ffn for the built-in targets)"
    }


def _cases_list(v: Any) -> Any:
    if isinstance(v, dict):
        return [v]  # one [cases] table
    if v == []:
        raise ValueError("empty array of cases")
    if not isinstance(v, list):
        raise ValueError(f"expected a table ([cases]) or an array of tables ([[cases]]), got {_shown(v)} ({_tname(v)})")
    return v


@functools.cache
def scenario_model(
    dims: tuple[str, ...],
    recipes: tuple[str, ...],
    path_keys: tuple[str, ...],
    flags: tuple[str, ...],
    target: str | None,
) -> type[Table]:
    """A scenario file whose cases run a target with these dimensions, recipes, path keys and
    run flags (``target``: its name, for the errors)."""
    flags_table = _model("FlagsTable", _FlagsTable, _aliased("flag_", flags, _optional(FlagValue)))
    flags_table.listing = f"target {target!r} has" if target else "the target has"
    cases = types.GenericAlias(list, (cases_model(dims, recipes),))
    return _model(
        "ScenarioTable",
        _ScenarioBase,
        {
            "name": (_optional(Text), None),
            "description": (_optional(Text), None),
            "on_error": (_choice(ON_ERROR), "warn"),
            "allow_incomplete": (bool, False),
            "require_measured": (bool, False),
            "flags": (flags_table, flags_table()),
            "cases": (Annotated[(cases, BeforeValidator(_cases_list))], ...),  # type: ignore[valid-type]
            "budget": (types.GenericAlias(list, (budget_model(dims, recipes, path_keys),)), []),
        },
    )


# ---- pydantic's errors as memaudit's ------------------------------------------------------------
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
    "float_type": "a number",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "list_type": "an array of tables",
    "tuple_type": "an array",
}


def _strip(t: Any) -> Any:
    """``t`` without Annotated and without ``| None``."""
    while True:
        if typing.get_origin(t) is Annotated:
            t = typing.get_args(t)[0]
        elif typing.get_origin(t) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(t) if a is not type(None)]
            if len(args) != 1:
                return t
            t = args[0]
        else:
            return t


def _table_at(model: type[Table], loc: tuple[Any, ...]) -> Any:
    """The model (or type) at a pydantic error location."""
    t: Any = model
    for p in loc:
        t = _strip(t)
        if isinstance(p, int):
            t = typing.get_args(t)[0] if typing.get_origin(t) in (list, tuple) else t
        elif typing.get_origin(t) is dict:
            t = typing.get_args(t)[1]
        elif isinstance(t, type) and issubclass(t, Table):
            t = next((f.annotation for n, f in t.model_fields.items() if (f.alias or n) == p), Any)
        else:
            return None
    return _strip(t)


def _key_path(loc: tuple[Any, ...], data: Any, key: str) -> str:
    """``key`` joined with the error location as written in the file: an index pydantic adds where
    the file has one value, not an array (``recipes = "x"``, a lone ``[cases]`` table), is left out."""
    obj = data
    for p in loc:
        if isinstance(p, int) and not isinstance(obj, list):
            continue
        key = join_key(key, p)
        obj = (
            obj.get(p)
            if isinstance(obj, dict)
            else obj[p]
            if isinstance(obj, list) and isinstance(p, int) and p < len(obj)
            else None
        )
    return key


def as_usage_error(exc: ValidationError, model: type[Table], data: Any, *, source: str, key: str = "") -> UsageError:
    """The first error of a validation (an unknown key first: it explains a missing one) as a
    UsageError naming ``source``, the key path under ``key`` and the value."""
    errors = exc.errors()
    e = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    loc, kind, value = tuple(e["loc"]), e["type"], e.get("input")
    if kind in ("extra_forbidden", "missing"):
        table, k = _table_at(model, loc[:-1]), str(loc[-1])
        is_table = isinstance(table, type) and issubclass(table, Table)
        if kind == "extra_forbidden":
            allowed = table.keys() if is_table else []
            noun, listing = (table.noun, table.listing) if is_table else ("key", "allowed keys:")
            message = f"unknown {noun} {k!r}{did_you_mean(k, allowed)}; {listing} {', '.join(allowed) or 'none'}"
        elif is_table and k in table.missing:
            message = table.missing[k]
        else:
            needs = ", ".join(table.required()) if is_table else ""
            message = f"missing key {k!r}; {table.what if is_table else 'the table'} needs {needs}"
        return UsageError(message, source=source, key=_key_path(loc, data, key))
    if kind == "value_error":
        message = str(e["ctx"]["error"])
        if message.startswith("[") and "]: " in message:  # an item of a value checked whole: its index
            index, message = message[1:].split("]: ", 1)
            loc = (*loc, int(index))
    elif kind in _EXPECTED:
        message = f"expected {_EXPECTED[kind]}, got {_shown(value)} ({_tname(value)})"
    else:
        message = f"{e['msg'][0].lower()}{e['msg'][1:]}, got {_shown(value)}"
    return UsageError(message, source=source, key=_key_path(loc, data, key))


def validate_table(model: type[Table], data: Any, *, source: str, key: str = "") -> Any:
    """``data`` validated by ``model``; a UsageError naming ``source`` and the key path under ``key``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise as_usage_error(exc, model, data, source=source, key=key) from None

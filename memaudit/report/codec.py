"""The report's JSON codec: decoding (duplicate keys, lone surrogates, depth), the strict schema
(pydantic, :func:`schema`), and validation of cases and reports against it and against themselves
(totals against rows, row references, module groups, rank facts)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import MISSING, fields
from typing import Any

from memaudit.errors import UsageError
from memaudit.ranks import DistRun, RankInfo, base_id, info_problem, pydantic_types, run_from, run_problem
from memaudit.report.model import (
    DEVICE,
    KINDS,
    MAX_DEPTH,
    MAX_DIM,
    MAX_INT,
    ORIENTATIONS,
    READ_VERDICTS,
    READABLE_SCHEMAS,
    RESIDES,
    ROW_DEFAULTS,
    SCHEMA,
    STATUSES,
    UNREAD_METHODS,
    VIA,
    CaseReport,
    Emulation,
    ModuleGroup,
    PathInfo,
    Report,
    Row,
    Totals,
    Unread,
    check_module_groups,
    compute_totals,
    gc_paused,
    verdict_problem,
)
from memaudit.spec import DTYPES, CaseSpec


def short_value(v: Any) -> str:
    """``repr(v)``, cut to 60 characters (a 5000-digit integer is named, not printed)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {v.bit_length()} bits"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


class _DuplicateKey(Exception):  # noqa: N818 - a signal inside the decoder, never shown
    """A JSON object named one key twice (raised inside the decoder; located afterwards)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _DuplicateKey
    return d


class _Twice(dict):  # type: ignore[type-arg]
    """An object that named a key twice (made only to say where, after :class:`_DuplicateKey`)."""

    key = ""


def _marking(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    seen: set[str] = set()
    out = _Twice(d)
    out.key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return out


def _walk(v: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every value of a decoded document with its path, outermost first (iterative: no recursion)."""
    stack = [(path, v)]
    while stack:
        p, x = stack.pop()
        yield p, x
        if isinstance(x, dict):
            stack.extend(reversed([(p + (k,), y) for k, y in x.items()]))
        elif isinstance(x, list):
            stack.extend(reversed([(p + (i,), y) for i, y in enumerate(x)]))


def _where(path: tuple[Any, ...], data: Any) -> str:
    """``cases[ID].rows[3].bytes`` for a path into a report (a case by its id where it has one)."""
    out, obj = "", data
    for p in path:
        if isinstance(p, int):
            case = obj[p] if isinstance(obj, list) and 0 <= p < len(obj) else None
            cid = case.get("id") if out == "cases" and isinstance(case, dict) else None
            out += f"[{cid}]" if isinstance(cid, str) and 0 < len(cid) <= 200 else f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
        try:
            obj = obj[p]
        except (KeyError, IndexError, TypeError):
            obj = None
    return out


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_lone_surrogates(data: Any, source: str) -> None:
    """A string that is not valid Unicode (a lone ``\\ud800`` escape) cannot be written out again."""
    for path, v in _walk(data):
        bad = _LONE_SURROGATE.search(v) if isinstance(v, str) else None
        if bad is None and isinstance(v, dict):
            key = next((k for k in v if _LONE_SURROGATE.search(k)), None)
            if key is not None:
                bad, path = _LONE_SURROGATE.search(key), path + (key,)
        if bad is not None:
            raise UsageError(
                f"holds a lone surrogate {bad.group().encode('utf-8', 'backslashreplace').decode()!r}, "
                "which is not valid Unicode text",
                source=source,
                key=_where(path, data) or None,
            )


def decode_report(text: str, source: str) -> Any:
    """The decoded JSON of a report's text; a UsageError naming ``source`` (and where, for a key
    named twice or text that is not valid Unicode) for anything a report cannot be."""
    try:
        data = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except _DuplicateKey:
        marked = json.loads(text, object_pairs_hook=_marking, parse_constant=_no_constant)
        path, obj = next((p, x) for p, x in _walk(marked) if isinstance(x, _Twice))
        where = _where(path, marked)
        raise UsageError(
            f"key {obj.key!r} appears twice{' in ' + where if where else ' at the top level'} "
            "(JSON keeps the last, a reader sees the first: a report that says two things is refused)",
            source=source,
            key=_where(path + (obj.key,), marked),
        ) from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"not valid JSON (truncated or corrupted?): {exc.msg} at line {exc.lineno} column {exc.colno}",
            source=source,
        ) from None
    except RecursionError:
        raise UsageError(f"nested too deep (at most {MAX_DEPTH} levels)", source=source) from None
    except ValueError as exc:  # NaN / Infinity, or an integer too long to parse
        raise UsageError(f"not a valid report: {exc}", source=source) from None
    if _SURROGATE_ESCAPE.search(text):
        _refuse_lone_surrogates(data, source)
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a report may hold")


def _depth(v: Any) -> int:
    """How deep ``v`` nests (0 for a scalar, 1 for a flat list or object); iterative."""
    worst, stack = 0, [(v, 0)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict | list):
            d += 1
            worst = max(worst, d)
            stack.extend((y, d) for y in (x.values() if isinstance(x, dict) else x))
    return worst


@functools.cache
def _validators() -> dict[str, Any]:
    """Strict pydantic validators (no coercion: ``"12"`` is not 12, 1.5 is not an integer, ``"no"``
    is not a boolean, no unknown key): one for a case, which holds its rows and totals, one for a
    row and one for the totals (the JSON Schema ``memaudit schema`` prints)."""
    import typing
    from typing import Annotated, Literal, NotRequired

    from pydantic import ConfigDict, Field, TypeAdapter
    from typing_extensions import TypedDict

    config = ConfigDict(strict=True, extra="forbid")
    count = Annotated[int, Field(ge=0, le=MAX_INT)]
    groups = Annotated[int, Field(ge=0, le=MAX_DIM)]  # 0: a bare capture() report (no target, recipe or shape)
    text = Annotated[str, Field(min_length=1)]

    def typed(cls: type, overrides: dict[str, Any]) -> Any:
        """A TypedDict of a dataclass's fields (``overrides`` narrow their types; fields with a
        default may be left out, as in reports made before them)."""
        hints = typing.get_type_hints(cls)
        ann = {}
        for f in fields(cls):
            t = overrides.get(f.name, count if hints[f.name] is int else hints[f.name])
            ann[f.name] = t if f.default is MISSING and f.default_factory is MISSING else NotRequired[t]
        td = TypedDict(cls.__name__, ann)  # type: ignore[operator]
        td.__pydantic_config__ = config  # type: ignore[attr-defined]
        return td

    row = typed(
        Row,
        {
            "kind": Literal[KINDS],
            "orientation": Literal[ORIENTATIONS] | None,
            "resides": Literal[RESIDES],
            "via": Literal[VIA],
            "shape": list[count],
            "group": Annotated[int, Field(ge=0, le=MAX_DIM)] | None,
            "read": Literal[READ_VERDICTS] | None,
            "read_by": text | None,
            "cached": text | None,
        },
    )
    totals = typed(Totals, {"unread_bytes": count | None})
    unread = typed(Unread, {"methods": Annotated[list[Literal[UNREAD_METHODS]], Field(min_length=1, max_length=2)]})
    emulation = typed(Emulation, {"machine": dict[str, str]})
    module_group = typed(ModuleGroup, {"module": text, "rows": list[count], "frees": list[count]})

    budget = TypedDict(
        "Budget",
        {
            **dict.fromkeys(("rule", "kind", "verdict", "expected", "actual", "select", "message"), str),
            "rows": list[count],
        },
    )  # type: ignore[operator]
    budget.__pydantic_config__ = config  # type: ignore[attr-defined]

    dist_types = pydantic_types(config, count, text)
    scalar = str | bool | int | float
    case_fields = {
        "id": text,
        "target": text,
        "recipe": text,
        "groups": groups,
        "dtype": Literal[(*DTYPES, "-")],
        "device": Annotated[str, Field(pattern=f"^(?:{DEVICE.pattern})$")],
        "splits": list[Annotated[int, Field(ge=0, le=MAX_DIM)]],
        "options": dict[str, scalar | None],
        "status": Literal[STATUSES],
        "reason": text | None,
        "path": dict[str, Any] | None,
        "rows": list[row],
        "freed": list[row],
        "totals": totals,
        "warnings": list[str],
        "budgets": list[budget],
        "complete": bool,
        "allocator": dict[str, Any] | None,
        "execution": Literal["measured", "emulated"],
        "emulation": emulation,
        "modules": list[module_group],
        "dist": dist_types["RankInfo"],
        "unread": unread,
    }
    written = set(case_fields) - {
        "execution",
        "emulation",
        "modules",
        "dist",
        "unread",
    }  # what /2 and /3 write for every case
    first = {"id", "target", "recipe", "groups"}  # what a /1 report surely has
    adapters = {}
    for schema_name, required in ((SCHEMA, written), ("memaudit.report/2", written), ("memaudit.report/1", first)):
        ann = {k: t if k in required else NotRequired[t] for k, t in case_fields.items()}
        case = TypedDict("Case", ann)  # type: ignore[operator]
        case.__pydantic_config__ = config  # type: ignore[attr-defined]
        adapters[schema_name] = TypeAdapter(case)
    return {
        "cases": adapters,
        "case_keys": frozenset(case_fields),
        "Row": TypeAdapter(row),
        "Totals": TypeAdapter(totals),
        "DistRun": TypeAdapter(dist_types["DistRun"]),
    }


def schema() -> dict[str, Any]:
    """The JSON Schema of a whole report as memaudit writes it (``memaudit schema``): the top-level
    object, each case (its shape dimensions are further integer keys), its rows and totals, and a
    distributed run's ``dist``; one ``$defs`` that every ``$ref`` resolves in. A JSON Schema
    validator (``check-jsonschema --schemafile``) can check a report with it; memaudit's own
    reader checks more (totals against rows, unique ids, a merged run's summary)."""
    from pydantic import TypeAdapter

    v = _validators()
    adapters = [("Case", v["cases"][SCHEMA]), ("DistRun", v["DistRun"]), ("Row", v["Row"]), ("Totals", v["Totals"])]
    refs, shared = TypeAdapter.json_schemas([(name, "validation", a) for name, a in adapters])
    defs = shared["$defs"]
    defs["Case"]["additionalProperties"] = {"type": "integer", "minimum": 1, "maximum": MAX_DIM}  # the shape dimensions
    ref = {name: refs[(name, "validation")] for name, _ in adapters}
    text = {"type": "string"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": SCHEMA,
        "type": "object",
        "properties": {
            "schema": {"const": SCHEMA},
            "memaudit": text,
            "created": text,
            "environment": {"type": "object"},
            "cases": {"type": "array", "items": ref["Case"]},
            "dist": ref["DistRun"],
        },
        "required": ["schema", "memaudit", "created", "environment", "cases"],
        "additionalProperties": False,
        "$defs": defs,
    }


def _validation_error(exc: Any, source: str, where: str, data: Any) -> UsageError:
    """A pydantic ValidationError as memaudit's UsageError: the first error, its key path."""
    errors = exc.errors()
    e = errors[0]
    loc = _existing(tuple(e["loc"]), data)
    if len(loc) < len(e["loc"]) and e["type"] not in ("missing", "extra_forbidden"):  # a union: each member's error
        kinds = sorted(
            {str(x["loc"][len(loc)]) for x in errors if len(x["loc"]) > len(loc) and tuple(x["loc"][: len(loc)]) == loc}
        )
        return UsageError(
            f"expected {' or '.join(kinds) or 'another type'}, got {short_value(e.get('input'))}",
            source=source,
            key=_join_where(where, _where(loc, data)),
        )
    if e["type"] == "missing":
        return UsageError(f"missing key(s) {loc[-1]}", source=source, key=_join_where(where, _where(loc[:-1], data)))
    if e["type"] == "extra_forbidden":
        return UsageError(f"unknown key(s) {loc[-1]}", source=source, key=_join_where(where, _where(loc[:-1], data)))
    return UsageError(
        f"{e['msg'][0].lower()}{e['msg'][1:]}, got {short_value(e.get('input'))}",
        source=source,
        key=_join_where(where, _where(loc, data)),
    )


def _existing(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """The longest prefix of a pydantic error location that indexes ``data`` (a union's member
    names, ``str`` or ``int``, are not in the data), plus a last key that is missing or unknown."""
    out: list[Any] = []
    obj = data
    for p in loc:
        if (
            isinstance(obj, dict)
            and isinstance(p, str)
            or isinstance(obj, list)
            and isinstance(p, int)
            and 0 <= p < len(obj)
        ):
            out.append(p)
            obj = obj.get(p) if isinstance(obj, dict) else obj[p]  # type: ignore[index]  # an int on a list (checked)
        else:
            break
    return tuple(out)


def _join_where(base: str, rest: str) -> str:
    return f"{base}.{rest}" if base and rest else base or rest


def _make_rows(items: list[dict[str, Any]]) -> list[Row]:
    """Rows from validated dicts: each Row's fields in declaration order, defaults where a report
    leaves one out (what :func:`make_row` makes, without its checks: the schema made them)."""
    template, new, out = ROW_DEFAULTS, object.__new__, []
    for v in items:
        d = dict(template)
        d.update(v)
        row = new(Row)
        row.__dict__.update(d)
        out.append(row)
    return out


def _row_problems(rows: list[Row], which: str, groups: int) -> tuple[str, str] | None:
    """(key, message) of the first row that contradicts its case or an earlier row, or None."""
    storage_bytes: dict[str, tuple[int, int]] = {}
    for i, r in enumerate(rows):
        at = f"{which}[{i}]"
        if r.index != i:
            return f"{at}.index", f"row {i} says index {r.index}: rows are numbered in order from 0"
        if r.duplicate_of is not None and not r.duplicate_of < i:
            return (
                f"{at}.duplicate_of",
                f"{r.duplicate_of} is not an earlier row (a duplicate points back at the first view)",
            )
        ci = r.container_index
        if ci is not None and not (ci < i and rows[ci].kind == "container"):
            return f"{at}.container_index", f"{ci} is not an earlier container row"
        if r.group is not None and r.group >= groups:
            return f"{at}.group", f"group {r.group} in a case of {groups} group(s)"
        if r.storage is not None:
            first = storage_bytes.setdefault(r.storage, (i, r.storage_bytes))
            if first[1] != r.storage_bytes:
                return (
                    f"{at}.storage_bytes",
                    f"storage {r.storage} is {r.storage_bytes:,} B here but {first[1]:,} B "
                    f"in {which}[{first[0]}]: one storage has one size",
                )
    return None


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def validate_case(d: Any, *, source: str = "<report>", schema: str = SCHEMA, where: str | None = None) -> CaseReport:
    """A case from its decoded JSON object, validated strictly; a UsageError names ``source``,
    the case (``cases[ID]``) and the field.

    Beyond the schema (types, ranges, vocabularies, no unknown key): the case's other keys are its
    shape dimensions (positive integers); a skipped or errored case has a reason and no rows; rows
    are numbered in order and point only at earlier rows; one storage has one size; splits name
    one count per group; and its totals are what its rows add up to (:func:`compute_totals`).
    """
    from pydantic import ValidationError

    cid = d.get("id") if isinstance(d, dict) else None
    where = where or (f"cases[{cid}]" if isinstance(cid, str) and 0 < len(cid) <= 200 else "cases[?]")
    if not isinstance(d, dict):
        raise UsageError(f"expected an object, found {type(d).__name__}", source=source, key=where)
    v = _validators()
    known = v["case_keys"]
    dims = {k: x for k, x in d.items() if k not in known}
    for k, x in dims.items():
        if type(x) is int and not 1 <= x <= MAX_DIM:
            raise UsageError(
                f"a shape dimension is from 1 to 2**40, got {short_value(x)}", source=source, key=f"{where}.{k}"
            )
        if type(x) is not int:
            raise UsageError(
                f"unknown key(s) {k} (a case's other keys are its shape dimensions, integers), got {short_value(x)}",
                source=source,
                key=f"{where}.{k}",
            )
    core = {k: x for k, x in d.items() if k in known}
    try:
        c = v["cases"].get(schema, v["cases"][SCHEMA]).validate_python(core)
    except ValidationError as exc:
        raise _validation_error(exc, source, where, core) from None
    execution, emulation = c.pop("execution", "measured"), c.pop("emulation", None)
    if (execution == "emulated") != (emulation is not None):
        raise UsageError(
            f"execution {execution!r} with emulation {short_value(emulation)}: an emulated case has both, "
            "a measured case neither",
            source=source,
            key=f"{where}.execution",
        )
    dist = _rank_info(c.pop("dist", None), c, source, where)
    for k in ("path", "allocator"):
        if c.get(k) is not None and 3 + _depth(c[k]) > MAX_DEPTH:
            raise UsageError(
                f"nested {3 + _depth(c[k])} levels deep (at most {MAX_DEPTH})", source=source, key=f"{where}.{k}"
            )
    path = c.get("path")
    for k, t in (("fused", bool), ("estimated", bool)):
        if path is not None and k in path and type(path[k]) is not t:
            raise UsageError(
                f"expected true or false, got {short_value(path[k])}", source=source, key=f"{where}.path.{k}"
            )
    rows, freed = _make_rows(c.get("rows", [])), _make_rows(c.get("freed", []))
    groups = c["groups"]
    status = c.get("status", "ok")
    splits = c.get("splits")
    if splits and len(splits) != groups:
        raise UsageError(f"{len(splits)} splits for {groups} group(s)", source=source, key=f"{where}.splits")
    if status != "ok":
        if not c.get("reason"):
            raise UsageError(f"{_a(status)} case says why: reason is missing", source=source, key=f"{where}.reason")
        if rows or freed:
            raise UsageError(
                f"{_a(status)} case has no rows, got {len(rows) + len(freed)}", source=source, key=f"{where}.rows"
            )
    for which, rs in (("rows", rows), ("freed", freed)):
        problem = _row_problems(rs, which, groups)
        if problem is not None:
            raise UsageError(problem[1], source=source, key=f"{where}.{problem[0]}")
    modules = [ModuleGroup(**g) for g in c.get("modules", [])]
    check_module_groups(modules, rows, source, where)
    totals = Totals(**c.get("totals", {}))
    truth = compute_totals(rows, freed)
    unread = Unread(**c["unread"]) if c.get("unread") is not None else None
    if unread is not None and schema != SCHEMA:
        raise UsageError(
            f"read verdicts are new in {SCHEMA}; a {schema} report has none", source=source, key=f"{where}.unread"
        )
    if unread is not None and len(set(unread.methods)) != len(unread.methods):
        raise UsageError(f"a method named twice: {unread.methods}", source=source, key=f"{where}.unread.methods")
    problem = verdict_problem(rows, unread)
    if problem is not None:
        raise UsageError(problem[1], source=source, key=f"{where}.{problem[0]}")
    read_freed = next((i for i, r in enumerate(freed) if r.read is not None or r.read_by is not None), None)
    if read_freed is not None:
        raise UsageError(
            "a freed row has no verdict (autograd released it before the analysis)",
            source=source,
            key=f"{where}.freed[{read_freed}].read",
        )
    for f in fields(Totals):
        said, summed = getattr(totals, f.name), getattr(truth, f.name)
        if said != summed:
            raise UsageError(
                f"says {_num(said)} but the rows add up to {_num(summed)} (totals that disagree with their rows "
                "are refused)",
                source=source,
                key=f"{where}.totals.{f.name}",
            )
    spec = CaseSpec(
        c["target"],
        c["recipe"],
        groups,
        tuple(dims.items()),
        c.get("dtype", "bf16"),
        c.get("device", "cpu"),
        c.get("options", {}),
        tuple(splits) if splits is not None else None,
    )
    return CaseReport(
        spec,
        id=c["id"],
        status=status,
        reason=c.get("reason"),
        path=PathInfo(path) if path is not None else None,
        rows=rows,
        totals=totals,
        warnings=c.get("warnings", []),
        budgets=c.get("budgets", []),
        complete=c.get("complete", True),
        freed=freed,
        allocator=c.get("allocator"),
        emulation=Emulation(**emulation) if emulation is not None else None,
        modules=modules,
        dist=dist,
        unread=unread,
    )


def _num(v: int | None) -> str:
    """A total as a message shows it: ``1,024``, or ``none`` where it is not recorded."""
    return "none" if v is None else f"{v:,}"


def _rank_info(d: dict[str, Any] | None, c: dict[str, Any], source: str, where: str) -> RankInfo | None:
    """A case's ``dist`` (validated by the schema) as a RankInfo that agrees with itself and with
    the case: its id ends with its coordinates, and what it received is what its groups ran."""
    if d is None:
        return None
    info = RankInfo(**d)
    problem = info_problem(info)
    if problem is not None:
        raise UsageError(problem[1], source=source, key=f"{where}.dist.{problem[0]}")
    if base_id(c["id"], info) is None:
        raise UsageError(
            f"a case run on rank {info.rank} has an id that ends with its coordinates /{info.key}",
            source=source,
            key=f"{where}.id",
        )
    splits = c.get("splits")
    if info.recv_splits is not None and splits and sum(info.recv_splits) != sum(splits):
        raise UsageError(
            f"received {sum(info.recv_splits):,} tokens ({info.recv_splits}) but its groups ran {sum(splits):,} "
            f"({splits})",
            source=source,
            key=f"{where}.dist.recv_splits",
        )
    return info


_TOP_KEYS = ("schema", "memaudit", "created", "environment", "cases", "dist")


def validate_report(d: Any, *, source: str = "<report>") -> Report:
    """A report from its decoded JSON, validated strictly (:func:`validate_case` for each case;
    case ids unique; no unknown top-level key); every problem a UsageError naming ``source``."""
    if not isinstance(d, dict):
        raise UsageError(f"expected a JSON object at the top level, found {type(d).__name__}", source=source)
    schema = d.get("schema")
    if schema not in READABLE_SCHEMAS:
        raise UsageError(f"unsupported schema {short_value(schema)} (expected {SCHEMA!r})", source=source, key="schema")
    unknown = sorted(k for k in d if k not in _TOP_KEYS)
    if unknown:
        raise UsageError(f"unknown key(s) {', '.join(map(repr, unknown))[:200]}", source=source, key=unknown[0][:100])
    cases = d.get("cases")
    if not isinstance(cases, list):
        raise UsageError(f"expected a list, found {type(cases).__name__}", source=source, key="cases")
    for k, t in (("environment", dict), ("memaudit", str), ("created", str)):
        if k in d and not isinstance(d[k], t):
            raise UsageError(
                f"expected {'an object' if t is dict else 'a string'}, got {short_value(d[k])}", source=source, key=k
            )
    env = d.get("environment") or {}
    if 1 + _depth(env) > MAX_DEPTH:
        raise UsageError(
            f"nested {1 + _depth(env)} levels deep (at most {MAX_DEPTH})", source=source, key="environment"
        )
    parsed: list[CaseReport] = []
    seen: dict[str, int] = {}
    with gc_paused():
        for i, c in enumerate(cases):
            cid = c.get("id") if isinstance(c, dict) else None
            case = validate_case(
                c,
                source=source,
                schema=schema,
                where=None if isinstance(cid, str) and 0 < len(cid) <= 200 else f"cases[{i}]",
            )
            if case.id in seen:
                raise UsageError(
                    f"case id {case.id!r} appears twice (cases[{seen[case.id]}] and cases[{i}]): ids must be unique",
                    source=source,
                    key=f"cases[{i}].id",
                )
            seen[case.id] = i
            parsed.append(case)
        run = _dist_run(d.get("dist"), parsed, source)
    return Report(cases=parsed, environment=env, memaudit=d.get("memaudit", ""), created=d.get("created", ""), dist=run)


def _dist_run(d: Any, cases: list[CaseReport], source: str) -> DistRun | None:
    """The report's ``dist`` (a distributed run's), validated strictly and against its cases
    (:func:`memaudit.ranks.run_problem`: a merged report's summary is what its cases give)."""
    if d is None:
        return None
    from pydantic import ValidationError

    try:
        valid = _validators()["DistRun"].validate_python(d)
    except ValidationError as exc:
        raise _validation_error(exc, source, "dist", d) from None
    run = run_from(valid)
    problem = run_problem(run, cases)
    if problem is not None:
        raise UsageError(problem[1], source=source, key=problem[0])
    return run

"""The report model: pure data with a JSON round-trip.

A :class:`Report` holds :class:`CaseReport` s; a case holds :class:`Row` s (one per buffer that
autograd saved) and :class:`Totals`. Nothing here imports torch or TE.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import json
import operator
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

from memaudit.errors import UsageError
from memaudit.spec import CaseSpec

SCHEMA = "memaudit.report/2"
READABLE_SCHEMAS = ("memaudit.report/1", SCHEMA)
"""/1 reports (before residence, freed rows and completeness) read with those fields at their defaults."""

KINDS = ("data", "scale_inv", "amax", "scale", "metadata", "tensor", "container", "unknown")
ORIENTATIONS = ("rowwise", "columnwise", "both")
STATUSES = ("ok", "skipped", "error")
RESIDES = ("device", "host", "recomputed", "unknown")
"""Where a saved buffer is kept: on its device; on the host (a pair such as ``save_on_cpu`` keeps a
copy there); nowhere (``checkpoint`` recomputes it in backward); or where no one can tell."""
VIA = ("hook", "ctx", "unhooked", "cache")
"""How a row was found: packed by memaudit's hook; a ``ctx`` attribute of a Python node (no hook
sees those); a saved tensor the graph walk met that no memaudit hook packed; an output selective
activation checkpointing caches for backward outside any hook (read off the checkpoint's frame)."""


@dataclass(frozen=True)
class Row:
    """One saved buffer; immutable (enrichment steps return new rows: ``dataclasses.replace``).

    ``bytes`` is numel x element size (logical). ``storage`` names the untyped storage the buffer
    lives in (``s0``, ``s1``, ... in first-seen order); ``op`` is the autograd node that saved it
    and ``saved_as`` its attribute there (``_saved_self``, ``saved_tensors[3]``); ``slot`` is the
    attribute inside a container (a classifier's name for the buffer) or else ``saved_as``; ``storage_bytes`` is that storage's full
    size and ``storage_offset`` the buffer's byte offset in it. A ``container`` row (a tensor
    subclass that reached the hook whole) has ``bytes == 0`` and no storage: its inner buffers
    are the rows whose ``container_index`` points at it. ``operand`` is a label's, the target's
    or the classifier's name, else memaudit's own (:func:`module_operand`).
    """

    index: int
    kind: str
    format: str
    shape: list[int]
    dtype: str
    bytes: int
    op: str | None = None
    saved_as: str | None = None
    slot: str | None = None
    operand: str | None = None
    group: int | None = None
    container: str | None = None
    container_index: int | None = None
    orientation: str | None = None
    storage: str | None = None
    storage_offset: int = 0
    storage_bytes: int = 0
    device: str = "cpu"
    is_parameter: bool = False
    duplicate_of: int | None = None
    note: str | None = None
    expected_bytes: int | None = None
    resides: str = "device"
    via: str = "hook"
    aliases_output: bool = False
    module: str | None = None
    """The qualified name of the module whose forward saved it (``layers.3.mlp.fc1``; the root
    module and a module outside it by class name), or None (saved outside any module call)."""
    source: str | None = None
    """``file:line`` of the user code that saved it (``capture(stack=True)``, ``run --stack``)."""

    def notes(self) -> list[str]:
        """Short flags for tables: parameter, duplicate view, buffer of a container, note."""
        out = []
        if self.is_parameter:
            out.append("param")
        if self.via != "hook":
            out.append(self.via)
        if self.resides != "device":
            out.append(self.resides)
        if self.aliases_output:
            out.append("output")
        if self.duplicate_of is not None:
            out.append(f"dup of #{self.duplicate_of}")
        if self.container_index is not None:
            out.append(f"in #{self.container_index}")
        if self.note:
            out.append(self.note)
        return out


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection while a report builds its many small, acyclic objects (rows, dicts):
    10⁵ rows would otherwise trigger full collections over the whole heap, making the cost per
    row grow with the model. The collector's previous state is restored."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_ROW_FIELDS = tuple(f.name for f in fields(Row))


_ROW_DEFAULTS: dict[str, Any] = {f.name: None if f.default is MISSING else f.default for f in fields(Row)}
_ROW_KEYS = frozenset(_ROW_DEFAULTS)
_ROW_REQUIRED = frozenset(f.name for f in fields(Row) if f.default is MISSING)


def make_row(values: dict[str, Any]) -> Row:
    """``Row(**values)`` for the capture's hot loop: the same frozen row (fields in declaration
    order, defaults where not given), without the dataclass ``__init__``'s per-field
    ``object.__setattr__``. Unknown keys raise, as ``Row(**values)`` would."""
    if not (_ROW_KEYS.issuperset(values) and values.keys() >= _ROW_REQUIRED):
        raise TypeError(f"row fields {sorted(values)}: expected {sorted(_ROW_REQUIRED)} and only Row's fields")
    d = dict(_ROW_DEFAULTS)
    d.update(values)
    row = object.__new__(Row)
    row.__dict__.update(d)
    return row


OPTIONAL_ROW_KEYS = ("module", "source")
"""Row keys written only when set, so that reports made before them stay byte for byte as they were
(:func:`row_dicts` names them one by one)."""


def replace_row(row: Row, **changes: Any) -> Row:
    """``dataclasses.replace(row, **changes)`` for the report's per-row passes (Row has no
    ``__post_init__`` and no init-only fields, so copying the fields is the same row)."""
    if not _ROW_KEYS.issuperset(changes):
        raise TypeError(f"unexpected row field(s): {sorted(set(changes) - _ROW_KEYS)}")
    new = object.__new__(Row)
    d = dict(row.__dict__)
    d.update(changes)
    new.__dict__.update(d)
    return new


def row_dict(r: Row) -> dict[str, Any]:
    """A row as JSON: ``asdict`` without its recursive deep copy (a row holds scalars and a shape
    list of ints; the same dict, an order of magnitude faster for 10⁵ rows), and without the
    optional keys that are None."""
    return row_dicts([r])[0]


def row_dicts(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """:func:`row_dict` of each row, in one loop."""
    out = []
    n = len(_ROW_FIELDS)
    for r in rows:
        d = r.__dict__.copy()  # dataclass __init__ (and make_row) set the fields in declaration order
        if len(d) != n:  # pragma: no cover - something set an extra attribute
            d = {name: getattr(r, name) for name in _ROW_FIELDS}
        d["shape"] = list(d["shape"])
        if d["module"] is None:  # OPTIONAL_ROW_KEYS
            del d["module"]
        if d["source"] is None:
            del d["source"]
        out.append(d)
    return out


def module_operand(module: str | None, op: str | None, saved_as: str | None, slot: str | None,
                   nth: int | None = None) -> str | None:
    """memaudit's name for a row no label, target or classifier named: ``MODULE:NODE.ATTRIBUTE``.

    ``layers.3.mlp.fc1:AddmmBackward0.mat1`` (``_saved_`` dropped from C++ attributes), a buffer
    inside a container adds its slot (``...saved_tensors[0]._data``). Without a node (a row
    autograd released before ``report()`` ran) it is the save's position in its module call,
    ``layers.3.mlp.fc1:saved[1]``; without a module, ``AddmmBackward0.mat1``. None when nothing
    is known. Stable across runs: names and positions only, no addresses.
    """
    attr = saved_as or slot
    if op is not None and attr is not None:
        what = f"{op}.{attr.removeprefix('_saved_')}"
        if slot and saved_as and slot != saved_as:
            what += f".{slot}"
        return f"{module}:{what}" if module else what
    if module is None:
        return None
    return f"{module}:saved[{nth}]" if nth is not None else module


@dataclass
class Totals:
    """Byte totals of a case; ``saved_bytes`` is the headline number the gate uses.

    ``physical_bytes`` counts each device-resident storage once at its full size;
    ``saved_bytes = physical_bytes - parameter_bytes``. Apart from those: ``host_bytes`` (copies a
    hook keeps on the host), ``unknown_bytes`` (logical bytes whose residence no one can tell),
    ``output_bytes`` (saved storages that are also forward outputs: alive anyway), ``ctx_bytes``
    (storages only ``ctx`` attributes keep) and the ``freed`` rows autograd already released.
    """

    rows: int = 0
    logical_bytes: int = 0
    physical_bytes: int = 0
    parameter_bytes: int = 0
    saved_bytes: int = 0
    host_bytes: int = 0
    unknown_bytes: int = 0
    output_bytes: int = 0
    ctx_bytes: int = 0
    freed_rows: int = 0
    freed_bytes: int = 0


_TOTALS_FIELDS = operator.attrgetter("bytes", "resides", "storage", "storage_bytes", "is_parameter", "aliases_output", "via")


def compute_totals(rows: list[Row], freed: list[Row] | tuple[Row, ...] = ()) -> Totals:
    """Totals from live rows (and the freed ones, counted apart)."""
    logical = 0
    device: dict[str, int] = {}
    host: dict[str, int] = {}
    params: set[str] = set()
    outputs: set[str] = set()
    hooked: set[str] = set()
    host_loose = unknown = 0
    for nbytes, resides, storage, storage_bytes, is_param, is_output, via in map(_TOTALS_FIELDS, rows):
        logical += nbytes
        if resides == "device":
            if storage is None:
                continue
            device[storage] = storage_bytes
            if is_param:
                params.add(storage)
            if is_output:
                outputs.add(storage)
            if via != "ctx":
                hooked.add(storage)
        elif resides == "unknown":
            unknown += nbytes
        elif resides == "host":
            if storage is None:
                host_loose += nbytes
            else:
                host[storage] = storage_bytes
    physical = sum(device.values())
    param_bytes = sum(device[s] for s in params)
    return Totals(
        rows=len(rows),
        logical_bytes=logical,
        physical_bytes=physical,
        parameter_bytes=param_bytes,
        saved_bytes=physical - param_bytes,
        host_bytes=sum(host.values()) + host_loose,
        unknown_bytes=unknown,
        output_bytes=sum(device[s] for s in outputs - params),
        ctx_bytes=sum(b for s, b in device.items() if s not in hooked and s not in params),
        freed_rows=len(freed),
        freed_bytes=sum(r.bytes for r in freed),
    )


class PathInfo(Mapping[str, Any]):
    """The code path a case took, as its target recorded it (``path`` in the JSON); read-only.

    The core reads one key: ``fused`` (:attr:`fused`), whether the target's fused kernel ran. A
    change of it is a gate finding, and ``path = "fused"`` rules test it. The other keys are the
    target's own: rules filter on them with ``when``, and the target names the path for tables
    (``Target.path_label``).
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any] | None = None) -> None:
        self._fields = dict(fields or {})

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"PathInfo({self._fields!r})"

    @property
    def fused(self) -> bool | None:
        """True or False where the target records whether its fused kernel ran, else None."""
        v = self._fields.get("fused")
        return v if isinstance(v, bool) else None

    def label(self) -> str | None:
        """A target-neutral name: ``fused`` / ``unfused``, or None when the target records no flag."""
        return None if self.fused is None else ("fused" if self.fused else "unfused")

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._fields)


@dataclass(frozen=True)
class Emulation:
    """How an emulated case ran: the target's real code on an emulated machine, with kernel
    stand-ins (``execution: "emulated"`` in the JSON; measured cases carry neither key)."""

    machine: dict[str, str]
    """The emulated machine (``arch`` and the library versions its gates read) and ``host``, the
    machine that ran it: a GPU's name, or ``no GPU (fake CUDA)`` (reports before it have none)."""
    standins: list[str]
    """Kernel entry points the forward called that were stand-ins."""
    real: list[str]
    """Kernel entry points the forward called that ran for real."""
    fusions: list[str] = field(default_factory=list)
    """Fusions registered for the emulated machine."""

    def label(self) -> str:
        """``emulated sm100`` (what tables and PR comments show beside the status)."""
        return f"emulated {self.machine.get('arch', '?')}"

    def host(self) -> str | None:
        """The machine that ran the emulation (a GPU's name, or no GPU), where the report records it."""
        return self.machine.get("host")


@dataclass(frozen=True)
class ModuleGroup:
    """The rows one module call saved, with the calls inside it: what a checkpoint of it frees.

    ``module`` is the call's name (as in ``Row.module``, ``blocks.0#2`` for a module's second call);
    ``rows`` the indices of the live rows saved in it or in a call inside it; ``own_rows`` how many
    of those carry this name itself. ``saved_bytes`` counts the device storages those rows hold
    (each once, parameters excluded, as the totals). ``frees`` are the rows a non-reentrant
    checkpoint of this call would no longer keep: rows whose storage no row outside the call holds
    and that is not one of the call's tensor arguments (checkpoint keeps its inputs);
    ``frees_bytes`` is their storages' bytes. Groups are sorted by ``saved_bytes``, largest first.
    """

    module: str
    rows: list[int]
    own_rows: int
    saved_bytes: int
    frees: list[int]
    frees_bytes: int


def group_bytes(rows: list[Row], indices: Iterable[int]) -> int:
    """Device storages of ``rows[i]`` for ``i`` in ``indices``, each once, parameters excluded."""
    storages: dict[str, int] = {}
    params: set[str] = set()
    for i in indices:
        r = rows[i]
        if r.resides != "device" or r.storage is None:
            continue
        storages[r.storage] = r.storage_bytes
        if r.is_parameter:
            params.add(r.storage)
    return sum(n for s, n in storages.items() if s not in params)


def check_module_groups(groups: list[ModuleGroup], rows: list[Row], source: str, where: str) -> None:
    """A report's module groups must agree with its rows (indices in range, bytes as the rows say)."""
    for k, g in enumerate(groups):
        key = f"{where}.modules[{k}]"
        bad = [i for i in (*g.rows, *g.frees) if not 0 <= i < len(rows)]
        if bad:
            raise UsageError(f"row index {bad[0]} out of range (the case has {len(rows)} rows)", source=source, key=key)
        if not set(g.frees) <= set(g.rows):
            raise UsageError("frees names rows that are not in the group", source=source, key=f"{key}.frees")
        for field_, want in (("saved_bytes", group_bytes(rows, g.rows)), ("frees_bytes", group_bytes(rows, g.frees))):
            if getattr(g, field_) != want:
                raise UsageError(f"{getattr(g, field_)} disagrees with its rows ({want})", source=source, key=f"{key}.{field_}")


_SPEC_KEYS = ("target", "recipe", "groups", "shape", "dtype", "device", "splits", "options")
"""The spec's fields, flat at the top of each case in the JSON (``shape`` as one key per dimension)."""


@dataclass
class CaseReport:
    """One (target, recipe, group count, shape) cell of the matrix: its spec and what it saved.

    The spec (with the token splits that ran) is held, not copied: ``case.recipe``,
    ``case.groups`` and the rest read it. ``id`` is fixed when the case is made (options a
    target adds while building, such as ``fused_env``, are recorded but not part of it).
    """

    spec: CaseSpec
    id: str = ""
    status: str = "ok"
    reason: str | None = None
    path: PathInfo | None = None
    rows: list[Row] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    warnings: list[str] = field(default_factory=list)
    budgets: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = True
    """False when memaudit knows it did not see everything kept (see ``warnings``)."""
    freed: list[Row] = field(default_factory=list)
    """Rows autograd released before ``report()`` ran (after backward): not in the totals."""
    allocator: dict[str, Any] | None = None
    """The CUDA allocator cross-check (``--verify-allocator``): ``hidden_bytes`` and its inputs."""
    emulation: Emulation | None = None
    """Set when the case ran emulated kernels (see :class:`Emulation`); None when measured."""
    modules: list[ModuleGroup] = field(default_factory=list)
    """Rows grouped by the module call that saved them, largest first (what to checkpoint); written
    to the JSON only when there are any."""

    def __post_init__(self) -> None:
        if not self.id:
            self.id = self.spec.id

    # The spec's fields, read through.
    target = property(lambda self: self.spec.target)
    recipe = property(lambda self: self.spec.recipe)
    groups = property(lambda self: self.spec.groups)
    dims = property(lambda self: self.spec.dims)
    dtype = property(lambda self: self.spec.dtype)
    device = property(lambda self: self.spec.device)
    splits = property(lambda self: list(self.spec.splits or ()))

    def __getattr__(self, name: str) -> int:
        """A shape dimension of the spec (``case.tokens``)."""
        if name.startswith("_") or name == "spec":
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "spec"), name)

    @property
    def execution(self) -> str:
        """``measured`` (real kernels), ``emulated`` (the target's real code with stand-in kernels
        on an emulated machine) or ``estimated`` (TE's layout rules, no code ran: ``path.estimated``)."""
        if self.emulation is not None:
            return "emulated"
        if self.path is not None and self.path.get("estimated"):
            return "estimated"
        return "measured"

    def execution_label(self) -> str | None:
        """What tables and PR comments show beside the status (``emulated sm100``, ``estimated
        sm100``); None for a measured case."""
        if self.emulation is not None:
            return self.emulation.label()
        if self.execution == "estimated":
            arch = self.path.get("arch") if self.path is not None else None
            return f"estimated {arch}" if arch else "estimated"
        return None

    @property
    def fused(self) -> bool | None:
        """``path.fused``: whether the target's fused kernel ran, or None where it records no path."""
        return self.path.fused if self.path is not None else None

    @property
    def options(self) -> dict[str, Any]:
        return self.spec.options

    @options.setter
    def options(self, value: dict[str, Any]) -> None:
        self.spec = dataclasses.replace(self.spec, options=dict(value))

    def to_dict(self) -> dict[str, Any]:
        with gc_paused():
            return self._to_dict()

    def _to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in _SPEC_KEYS:
            if k == "shape":
                out.update(self.spec.shape)
            else:
                out[k] = copy.deepcopy(getattr(self, k))
        out.update({f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name not in _NESTED})
        out["rows"] = row_dicts(self.rows)
        out["freed"] = row_dicts(self.freed)
        if self.modules:
            out["modules"] = [asdict(g) for g in self.modules]
        else:
            out.pop("modules", None)
        out["totals"] = asdict(self.totals)
        out["path"] = None if self.path is None else self.path.to_dict()
        if self.emulation is not None:  # measured cases carry neither key (reports stay as they were)
            out["execution"] = "emulated"
            out["emulation"] = asdict(self.emulation)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str = "<report>") -> CaseReport:
        d = dict(d)
        where = f"cases[{d.get('id')}]"
        path = d.get("path")
        if path is not None:
            if not isinstance(path, dict):
                raise UsageError(f"expected an object or null, found {type(path).__name__}", source=source, key=f"{where}.path")
            d["path"] = PathInfo(path)
        for k in ("rows", "freed"):
            if not isinstance(d.get(k, []), list):
                raise UsageError(f"expected a list of rows, got {_short(d[k])}", source=source, key=f"{where}.{k}")
        rows = [_from_dict(Row, r, source, f"{where}.rows[{i}]") for i, r in enumerate(d.pop("rows", []))]
        freed = [_from_dict(Row, r, source, f"{where}.freed[{i}]") for i, r in enumerate(d.pop("freed", []))]
        totals = _from_dict(Totals, d.pop("totals", {}), source, f"{where}.totals")
        groups = d.pop("modules", [])
        if not isinstance(groups, list):
            raise UsageError(f"expected a list of module groups, got {_short(groups)}", source=source, key=f"{where}.modules")
        modules = [_from_dict(ModuleGroup, g, source, f"{where}.modules[{k}]") for k, g in enumerate(groups)]
        check_module_groups(modules, rows, source, where)
        execution = d.pop("execution", "measured")
        emulation = d.pop("emulation", None)
        if execution not in ("measured", "emulated") or (execution == "emulated") != (emulation is not None):
            raise UsageError(f"execution {execution!r} with emulation {emulation!r}: an emulated case has both, a measured case neither",
                             source=source, key=f"{where}.execution")
        if emulation is not None:
            d["emulation"] = _from_dict(Emulation, emulation, source, f"{where}.emulation")
        spec_fields = {k: d.pop(k) for k in _SPEC_KEYS if k in d and k != "shape"}
        spec_fields["shape"] = _shape_from(d)
        if "splits" in spec_fields and isinstance(spec_fields["splits"], list):
            spec_fields["splits"] = tuple(spec_fields["splits"])
        spec = _from_dict(CaseSpec, spec_fields, source, where)
        if "id" not in d:
            raise UsageError("missing key(s) id", source=source, key=where)
        _check_case_fields(d, source, where)
        case = _from_dict(cls, {**d, "spec": spec}, source, where)
        case.rows = rows
        case.freed = freed
        case.totals = totals
        case.modules = modules
        return case


_NESTED = ("spec", "rows", "freed", "totals", "path", "emulation", "modules")


STATUSES = ("ok", "skipped", "error")

_CASE_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "status": (str,), "reason": (str, type(None)), "warnings": (list,), "budgets": (list,),
    "complete": (bool,), "allocator": (dict, type(None)),
}


def _check_case_fields(d: dict[str, Any], source: str, where: str) -> None:
    """The case's own scalar fields: types and the status vocabulary (rows and totals go through
    the strict schema)."""
    for k, types in _CASE_TYPES.items():
        if k in d and (not isinstance(d[k], types) or (bool not in types and isinstance(d[k], bool))):
            raise UsageError(f"expected {' or '.join(t.__name__ for t in types)}, got {d[k]!r}", source=source, key=f"{where}.{k}")
    if d.get("status", "ok") not in STATUSES:
        raise UsageError(f"unknown status {d['status']!r}; a case is {', '.join(STATUSES)}", source=source, key=f"{where}.status")
    if any(not isinstance(w, str) for w in d.get("warnings", [])):
        raise UsageError("warnings must be strings", source=source, key=f"{where}.warnings")


def _shape_from(d: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """Pop a case's shape dimensions from ``d``: the integer keys that are neither spec nor report
    fields (the report model reads no target declaration; reports are written with sorted keys,
    so this order is not the target's: compare shapes as dicts)."""
    known = {f.name for f in fields(CaseReport)} | set(_SPEC_KEYS)
    names = [k for k, v in d.items() if k not in known and isinstance(v, int) and not isinstance(v, bool)]
    return tuple((n, d.pop(n)) for n in names)


@dataclass
class Report:
    """A whole run: environment plus cases."""

    cases: list[CaseReport] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    memaudit: str = ""
    created: str = ""
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "memaudit": self.memaudit,
            "created": self.created,
            "environment": self.environment,
            "cases": [c.to_dict() for c in self.cases],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1, ensure_ascii=False) + "\n"

    def case(self, case_id: str) -> CaseReport | None:
        return next((c for c in self.cases if c.id == case_id), None)

    @classmethod
    def from_dict(cls, d: Any, *, source: str = "<report>") -> Report:
        if not isinstance(d, dict):
            raise UsageError(f"expected a JSON object at the top level, found {type(d).__name__}", source=source)
        schema = d.get("schema")
        if schema not in READABLE_SCHEMAS:
            raise UsageError(f"unsupported schema {schema!r} (expected {SCHEMA!r})", source=source, key="schema")
        cases = d.get("cases")
        if not isinstance(cases, list):
            raise UsageError(f"expected a list, found {type(cases).__name__}", source=source, key="cases")
        parsed = []
        for i, c in enumerate(cases):
            if not isinstance(c, dict):
                raise UsageError(f"expected an object, found {type(c).__name__}", source=source, key=f"cases[{i}]")
            parsed.append(CaseReport.from_dict(c, source=source))
        for k, t in (("environment", dict), ("memaudit", str), ("created", str)):
            if k in d and not isinstance(d[k], t):
                raise UsageError(f"expected {'an object' if t is dict else 'a string'}, got {d[k]!r}", source=source, key=k)
        return cls(
            cases=parsed,
            environment=d.get("environment") or {},
            memaudit=d.get("memaudit", ""),
            created=d.get("created", ""),
        )


MAX_INT = 2**63 - 1
"""No count or byte number in a report is larger (what a signed 64-bit counter holds)."""

_STRICT = (Row, Totals, ModuleGroup)
"""Leaf records validated by pydantic in strict mode (no coercion: ``"12"`` is not 12, 1.5 is
not an integer, ``"no"`` is not a boolean)."""


@functools.cache
def _adapter(cls: type) -> Any:
    """A strict pydantic model with ``cls``'s fields (the dataclass stays the in-memory type)."""
    import typing

    from pydantic import ConfigDict, TypeAdapter, create_model

    hints = typing.get_type_hints(cls)
    spec = {f.name: (hints[f.name], ... if f.default is MISSING and f.default_factory is MISSING
                     else (f.default if f.default is not MISSING else f.default_factory()))
            for f in fields(cls)}
    model = create_model(cls.__name__, __config__=ConfigDict(strict=True, extra="forbid"), **spec)
    return TypeAdapter(model)


def _short(v: Any) -> str:
    """``repr(v)``, cut to 60 characters (a 5000-digit integer is named, not printed)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {v.bit_length()} bits"
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def schema() -> dict[str, Any]:
    """The JSON Schema of a report's leaf records (``memaudit schema``): rows and totals."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": SCHEMA,
            "$defs": {c.__name__: _adapter(c).json_schema() for c in _STRICT}}


def _from_dict(cls: type, d: Any, source: str, key: str) -> Any:
    if not isinstance(d, dict):
        raise UsageError(f"expected an object, found {type(d).__name__}", source=source, key=key)
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    missing = sorted(required - d.keys())
    if missing:
        raise UsageError(f"missing key(s) {', '.join(missing)}", source=source, key=key)
    unknown = sorted(d.keys() - names)
    if unknown:
        raise UsageError(f"unknown key(s) {', '.join(unknown)}", source=source, key=key)
    if cls in _STRICT:
        from pydantic import ValidationError

        try:
            obj = cls(**dict(_adapter(cls).validate_python(d)))
        except ValidationError as exc:
            e = exc.errors()[0]
            where = ".".join(str(p) for p in e["loc"])
            raise UsageError(f"{e['msg'].lower()}, got {_short(e.get('input'))}", source=source,
                             key=f"{key}.{where}" if where else key) from None
        for f in fields(cls):
            v = getattr(obj, f.name)
            if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v <= MAX_INT and f.name != "group":
                raise UsageError(f"must be between 0 and 2**63-1, got {_short(v)}", source=source, key=f"{key}.{f.name}")
        return obj
    try:
        return cls(**d)
    except TypeError as exc:  # pragma: no cover - guarded by the checks above
        raise UsageError(str(exc), source=source, key=key) from exc


def read_input(path: str | os.PathLike[str], what: str = "file") -> str:
    """The UTF-8 text of an input file; a missing or unreadable one is a UsageError naming it."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no such {what}", source=str(path))
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read: {exc}", source=str(path)) from exc


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read and validate a report file; every problem is a UsageError naming the file."""
    src = str(path)
    text = read_input(path)
    check_depth(text, src)
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"not valid JSON (truncated or corrupted?): {exc.msg} at line {exc.lineno} column {exc.colno}",
            source=src,
        ) from exc
    except ValueError as exc:  # NaN / Infinity, or an integer too long to parse
        raise UsageError(f"not a valid report: {exc}", source=src) from None
    return Report.from_dict(data, source=src)


MAX_DEPTH = 64
"""Nesting deeper than this in a report or scenario file is refused (a report nests 5 deep)."""


_SPECIAL = re.compile(r'[\[\]{}"\\]')


def check_depth(text: str, source: str) -> None:
    """Refuse JSON/TOML nested deeper than :data:`MAX_DEPTH` before a recursive parser sees it
    (strings in double quotes are skipped; only the bracket, brace, quote and backslash
    characters are visited)."""
    depth = worst = 0
    in_str = esc = False
    for m in _SPECIAL.finditer(text):
        ch = m.group()
        if in_str:
            if esc:
                esc = False  # (a backslash escapes only the next character, adjacent or not: close enough)
            elif ch == "\\":
                esc = m.end() == len(text) or text[m.end()] in '"\\'
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > worst:
                worst = depth
        elif ch in "]}":
            depth -= 1
    if worst > MAX_DEPTH:
        raise UsageError(f"nested {worst} levels deep (at most {MAX_DEPTH})", source=source)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a report may hold")


def check_output(path: str | os.PathLike[str], key: str) -> Path:
    """Fail now (UsageError naming ``key`` and the path), before any work, if ``path`` cannot be
    written: a directory, a path under a file, a folder memaudit may not write. Returns the path
    a write goes to (a symlink's target: the link stays a link)."""
    p = Path(path)
    if p.is_symlink():
        p = p.resolve()
    if p.is_dir():
        raise UsageError(f"{str(path)!r} is a directory; name a file", key=key)
    if p.exists() and not p.is_file():
        raise UsageError(f"{str(path)!r} exists and is not a regular file", key=key)
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"cannot write {str(path)!r}: {str(parent)!r} is a file, not a folder", key=key)
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"cannot write {str(path)!r}: no permission to write in {str(parent)!r}", key=key)
    try:  # the permission bits do not tell everything (root, /proc, read-only mounts): try it
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc.strerror or exc} in {str(parent)!r}", key=key) from None
    return p


def check_outputs(outputs: dict[str, str | os.PathLike[str] | None]) -> None:
    """:func:`check_output` for each given ``{key: path}``, and no file named twice."""
    seen: dict[Path, str] = {}
    for key, path in outputs.items():
        if path is None:
            continue
        p = check_output(path, key).absolute()
        if p in seen:
            raise UsageError(f"{str(path)!r} is also given to {seen[p]}; name two files", key=key)
        seen[p] = key


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (see ``atomic_write``)."""
    atomic_write(path, lambda f: f.write(text))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see ``atomic_write``)."""
    atomic_write(path, lambda f: f.write(data), binary=True)


def atomic_write(path: str | os.PathLike[str], write: Callable[[Any], object], *, binary: bool = False) -> None:
    """Call ``write(file)`` on a temp file in the same folder (UTF-8 text, or bytes with
    ``binary``), then rename it to ``path`` (through a symlink to its target). An OSError is a
    UsageError naming the path; the temp file is removed also on KeyboardInterrupt and SystemExit
    (the CLI turns SIGTERM into one)."""
    p = Path(path)
    if p.is_symlink():
        p = p.resolve()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise UsageError(f"cannot write: {exc.strerror or exc}", source=str(path)) from None
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, p)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write: {exc.strerror or exc}", source=str(path)) from None
        raise


def write_report(report: Report, path: str | os.PathLike[str]) -> None:
    """Write the report as JSON, atomically."""
    atomic_write_text(path, report.to_json())


def write_report_streaming(header: Report, cases: Iterable[CaseReport], path: str | os.PathLike[str]) -> int:
    """Write ``header`` (environment, version, created; its own ``cases`` are ignored) with
    ``cases`` as they are produced, atomically, holding one case in memory at a time. The bytes
    equal ``write_report`` of the same report. Returns the number of cases written."""
    head = dataclasses.replace(header, cases=[]).to_json()
    marker = '"cases": []'
    assert head.startswith("{\n " + marker), "sort_keys puts cases first"
    rest = head[len("{\n " + marker):]
    count = 0

    def write(f: TextIO) -> None:
        nonlocal count
        f.write('{\n "cases": [')
        for case in cases:
            text = json.dumps(case.to_dict(), sort_keys=True, indent=1, ensure_ascii=False)
            del case  # released before the next one is made
            f.write(("\n" if count == 0 else ",\n") + "\n".join("  " + line for line in text.split("\n")))
            count += 1
        f.write("\n ]" if count else "]")
        f.write(rest)

    atomic_write(path, write)
    return count

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
from memaudit.ranks import DistRun, RankInfo, base_id, info_problem, run_from, run_problem
from memaudit.spec import DTYPES, CaseSpec

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
    dist: RankInfo | None = None
    """Set when the case ran on one rank of a distributed job (:class:`~memaudit.ranks.RankInfo`);
    its id then ends with the rank's coordinates."""

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
        if self.dist is not None:  # only a case run on one rank of a distributed job
            out["dist"] = self.dist.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Any, *, source: str = "<report>", schema: str = SCHEMA) -> CaseReport:
        """A case from its JSON object, validated strictly (:func:`validate_case`): every field's
        type and range, and that its totals are what its rows add up to. A UsageError names
        ``source``, the case and the field."""
        return validate_case(d, source=source, schema=schema)


_NESTED = ("spec", "rows", "freed", "totals", "path", "emulation", "modules", "dist")


@dataclass
class Report:
    """A whole run: environment plus cases."""

    cases: list[CaseReport] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    memaudit: str = ""
    created: str = ""
    schema: str = SCHEMA
    dist: DistRun | None = None
    """Set for a distributed run's report: a rank's own file or a merged one (:class:`~memaudit.ranks.DistRun`)."""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "schema": self.schema,
            "memaudit": self.memaudit,
            "created": self.created,
            "environment": self.environment,
            "cases": [c.to_dict() for c in self.cases],
        }
        if self.dist is not None:  # only a distributed run's report
            out["dist"] = self.dist.to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1, ensure_ascii=False) + "\n"

    def case(self, case_id: str) -> CaseReport | None:
        return next((c for c in self.cases if c.id == case_id), None)

    @classmethod
    def from_dict(cls, d: Any, *, source: str = "<report>") -> Report:
        """A report from its decoded JSON, validated strictly (:func:`validate_report`)."""
        return validate_report(d, source=source)


MAX_INT = 2**63 - 1
"""No count or byte number in a report is larger (what a signed 64-bit counter holds)."""
MAX_DIM = 2**40
"""No shape dimension or group count in a report is larger (as for ``run`` and scenarios)."""
MAX_DEPTH = 64
"""Nesting deeper than this in a report or scenario file is refused (a report nests 6 deep)."""
DEVICE = re.compile(r"cpu|meta|cuda(:\d{1,3})?")
"""A case's device, as ``run --device`` takes it."""


# ---- reading a report: decode, then validate every field ------------------------------------------
#
# One pass of the C decoder (duplicate keys refused as each object is made), then one strict
# pydantic validation per case (rows, totals and case fields together, in pydantic-core), then the
# checks no schema states: each case's totals against its rows, its status against its rows, row
# references, unique ids. Free-form values (environment, path, allocator) are the only ones that
# can nest, so only they are measured for depth.


def _short(v: Any) -> str:
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
            raise UsageError(f"holds a lone surrogate {bad.group().encode('utf-8', 'backslashreplace').decode()!r}, "
                             "which is not valid Unicode text", source=source, key=_where(path, data) or None)


def decode_report(text: str, source: str) -> Any:
    """The decoded JSON of a report's text; a UsageError naming ``source`` (and where, for a key
    named twice or text that is not valid Unicode) for anything a report cannot be."""
    try:
        data = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except _DuplicateKey:
        marked = json.loads(text, object_pairs_hook=_marking, parse_constant=_no_constant)
        path, obj = next((p, x) for p, x in _walk(marked) if isinstance(x, _Twice))
        where = _where(path, marked)
        raise UsageError(f"key {obj.key!r} appears twice{' in ' + where if where else ' at the top level'} "
                         "(JSON keeps the last, a reader sees the first: a report that says two things is refused)",
                         source=source, key=_where(path + (obj.key,), marked)) from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"not valid JSON (truncated or corrupted?): {exc.msg} at line {exc.lineno} column {exc.colno}", source=source
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

    row = typed(Row, {
        "kind": Literal[KINDS], "orientation": Literal[ORIENTATIONS] | None, "resides": Literal[RESIDES],
        "via": Literal[VIA], "shape": list[count], "group": Annotated[int, Field(ge=0, le=MAX_DIM)] | None,
    })
    totals = typed(Totals, {})
    emulation = typed(Emulation, {"machine": dict[str, str]})
    module_group = typed(ModuleGroup, {"module": text, "rows": list[count], "frees": list[count]})

    budget = TypedDict("Budget", {**dict.fromkeys(("rule", "kind", "verdict", "expected", "actual", "select", "message"), str),
                                  "rows": list[count]})  # type: ignore[operator]
    budget.__pydantic_config__ = config  # type: ignore[attr-defined]

    from memaudit.ranks import pydantic_types

    dist_types = pydantic_types(config, count, text)
    scalar = str | bool | int | float
    case_fields = {
        "id": text, "target": text, "recipe": text, "groups": groups, "dtype": Literal[(*DTYPES, "-")],
        "device": Annotated[str, Field(pattern=f"^(?:{DEVICE.pattern})$")], "splits": list[Annotated[int, Field(ge=0, le=MAX_DIM)]],
        "options": dict[str, scalar | None], "status": Literal[STATUSES], "reason": text | None,
        "path": dict[str, Any] | None, "rows": list[row], "freed": list[row], "totals": totals,
        "warnings": list[str], "budgets": list[budget], "complete": bool, "allocator": dict[str, Any] | None,
        "execution": Literal["measured", "emulated"], "emulation": emulation, "modules": list[module_group],
        "dist": dist_types["RankInfo"],
    }
    written = set(case_fields) - {"execution", "emulation", "modules", "dist"}  # what a /2 report writes for every case
    first = {"id", "target", "recipe", "groups"}  # what a /1 report surely has
    adapters = {}
    for schema_name, required in ((SCHEMA, written), ("memaudit.report/1", first)):
        ann = {k: t if k in required else NotRequired[t] for k, t in case_fields.items()}
        case = TypedDict("Case", ann)  # type: ignore[operator]
        case.__pydantic_config__ = config  # type: ignore[attr-defined]
        adapters[schema_name] = TypeAdapter(case)
    return {"cases": adapters, "case_keys": frozenset(case_fields), "Row": TypeAdapter(row), "Totals": TypeAdapter(totals),
            "DistRun": TypeAdapter(dist_types["DistRun"])}


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
        "$schema": "https://json-schema.org/draft/2020-12/schema", "title": SCHEMA, "type": "object",
        "properties": {"schema": {"const": SCHEMA}, "memaudit": text, "created": text, "environment": {"type": "object"},
                       "cases": {"type": "array", "items": ref["Case"]}, "dist": ref["DistRun"]},
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
        kinds = sorted({str(x["loc"][len(loc)]) for x in errors if len(x["loc"]) > len(loc) and tuple(x["loc"][:len(loc)]) == loc})
        return UsageError(f"expected {' or '.join(kinds) or 'another type'}, got {_short(e.get('input'))}", source=source,
                          key=_join_where(where, _where(loc, data)))
    if e["type"] == "missing":
        return UsageError(f"missing key(s) {loc[-1]}", source=source, key=_join_where(where, _where(loc[:-1], data)))
    if e["type"] == "extra_forbidden":
        return UsageError(f"unknown key(s) {loc[-1]}", source=source, key=_join_where(where, _where(loc[:-1], data)))
    return UsageError(f"{e['msg'][0].lower()}{e['msg'][1:]}, got {_short(e.get('input'))}", source=source,
                      key=_join_where(where, _where(loc, data)))


def _existing(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """The longest prefix of a pydantic error location that indexes ``data`` (a union's member
    names, ``str`` or ``int``, are not in the data), plus a last key that is missing or unknown."""
    out: list[Any] = []
    obj = data
    for p in loc:
        if isinstance(obj, dict) and isinstance(p, str) or isinstance(obj, list) and isinstance(p, int) and 0 <= p < len(obj):
            out.append(p)
            obj = obj.get(p) if isinstance(obj, dict) else obj[p]
        else:
            break
    return tuple(out)


def _join_where(base: str, rest: str) -> str:
    return f"{base}.{rest}" if base and rest else base or rest


def _make_rows(items: list[dict[str, Any]]) -> list[Row]:
    """Rows from validated dicts: each Row's fields in declaration order, defaults where a report
    leaves one out (what :func:`make_row` makes, without its checks: the schema made them)."""
    template, new, out = _ROW_DEFAULTS, object.__new__, []
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
            return f"{at}.duplicate_of", f"{r.duplicate_of} is not an earlier row (a duplicate points back at the first view)"
        ci = r.container_index
        if ci is not None and not (ci < i and rows[ci].kind == "container"):
            return f"{at}.container_index", f"{ci} is not an earlier container row"
        if r.group is not None and r.group >= groups:
            return f"{at}.group", f"group {r.group} in a case of {groups} group(s)"
        if r.storage is not None:
            first = storage_bytes.setdefault(r.storage, (i, r.storage_bytes))
            if first[1] != r.storage_bytes:
                return (f"{at}.storage_bytes", f"storage {r.storage} is {r.storage_bytes:,} B here but {first[1]:,} B "
                        f"in {which}[{first[0]}]: one storage has one size")
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
            raise UsageError(f"a shape dimension is from 1 to 2**40, got {_short(x)}", source=source, key=f"{where}.{k}")
        if type(x) is not int:
            raise UsageError(f"unknown key(s) {k} (a case's other keys are its shape dimensions, integers), got {_short(x)}",
                             source=source, key=f"{where}.{k}")
    core = {k: x for k, x in d.items() if k in known}
    try:
        c = v["cases"].get(schema, v["cases"][SCHEMA]).validate_python(core)
    except ValidationError as exc:
        raise _validation_error(exc, source, where, core) from None
    execution, emulation = c.pop("execution", "measured"), c.pop("emulation", None)
    if (execution == "emulated") != (emulation is not None):
        raise UsageError(f"execution {execution!r} with emulation {_short(emulation)}: an emulated case has both, "
                         "a measured case neither", source=source, key=f"{where}.execution")
    dist = _rank_info(c.pop("dist", None), c, source, where)
    for k in ("path", "allocator"):
        if c.get(k) is not None and 3 + _depth(c[k]) > MAX_DEPTH:
            raise UsageError(f"nested {3 + _depth(c[k])} levels deep (at most {MAX_DEPTH})", source=source, key=f"{where}.{k}")
    path = c.get("path")
    for k, t in (("fused", bool), ("estimated", bool)):
        if path is not None and k in path and type(path[k]) is not t:
            raise UsageError(f"expected true or false, got {_short(path[k])}", source=source, key=f"{where}.path.{k}")
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
            raise UsageError(f"{_a(status)} case has no rows, got {len(rows) + len(freed)}", source=source, key=f"{where}.rows")
    for which, rs in (("rows", rows), ("freed", freed)):
        problem = _row_problems(rs, which, groups)
        if problem is not None:
            raise UsageError(problem[1], source=source, key=f"{where}.{problem[0]}")
    modules = [ModuleGroup(**g) for g in c.get("modules", [])]
    check_module_groups(modules, rows, source, where)
    totals = Totals(**c.get("totals", {}))
    truth = compute_totals(rows, freed)
    for f in fields(Totals):
        said, summed = getattr(totals, f.name), getattr(truth, f.name)
        if said != summed:
            raise UsageError(f"says {said:,} but the rows add up to {summed:,} (totals that disagree with their rows are refused)",
                             source=source, key=f"{where}.totals.{f.name}")
    spec = CaseSpec(c["target"], c["recipe"], groups, tuple(dims.items()), c.get("dtype", "bf16"), c.get("device", "cpu"),
                    c.get("options", {}), tuple(splits) if splits is not None else None)
    return CaseReport(
        spec, id=c["id"], status=status, reason=c.get("reason"), path=PathInfo(path) if path is not None else None,
        rows=rows, totals=totals, warnings=c.get("warnings", []), budgets=c.get("budgets", []), complete=c.get("complete", True),
        freed=freed, allocator=c.get("allocator"), emulation=Emulation(**emulation) if emulation is not None else None,
        modules=modules, dist=dist,
    )


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
        raise UsageError(f"a case run on rank {info.rank} has an id that ends with its coordinates /{info.key}",
                         source=source, key=f"{where}.id")
    splits = c.get("splits")
    if info.recv_splits is not None and splits and sum(info.recv_splits) != sum(splits):
        raise UsageError(f"received {sum(info.recv_splits):,} tokens ({info.recv_splits}) but its groups ran {sum(splits):,} "
                         f"({splits})", source=source, key=f"{where}.dist.recv_splits")
    return info


_TOP_KEYS = ("schema", "memaudit", "created", "environment", "cases", "dist")


def validate_report(d: Any, *, source: str = "<report>") -> Report:
    """A report from its decoded JSON, validated strictly (:func:`validate_case` for each case;
    case ids unique; no unknown top-level key); every problem a UsageError naming ``source``."""
    if not isinstance(d, dict):
        raise UsageError(f"expected a JSON object at the top level, found {type(d).__name__}", source=source)
    schema = d.get("schema")
    if schema not in READABLE_SCHEMAS:
        raise UsageError(f"unsupported schema {_short(schema)} (expected {SCHEMA!r})", source=source, key="schema")
    unknown = sorted(k for k in d if k not in _TOP_KEYS)
    if unknown:
        raise UsageError(f"unknown key(s) {', '.join(map(repr, unknown))[:200]}", source=source, key=unknown[0][:100])
    cases = d.get("cases")
    if not isinstance(cases, list):
        raise UsageError(f"expected a list, found {type(cases).__name__}", source=source, key="cases")
    for k, t in (("environment", dict), ("memaudit", str), ("created", str)):
        if k in d and not isinstance(d[k], t):
            raise UsageError(f"expected {'an object' if t is dict else 'a string'}, got {_short(d[k])}", source=source, key=k)
    env = d.get("environment") or {}
    if 1 + _depth(env) > MAX_DEPTH:
        raise UsageError(f"nested {1 + _depth(env)} levels deep (at most {MAX_DEPTH})", source=source, key="environment")
    parsed: list[CaseReport] = []
    seen: dict[str, int] = {}
    with gc_paused():
        for i, c in enumerate(cases):
            cid = c.get("id") if isinstance(c, dict) else None
            case = validate_case(c, source=source, schema=schema,
                                 where=None if isinstance(cid, str) and 0 < len(cid) <= 200 else f"cases[{i}]")
            if case.id in seen:
                raise UsageError(f"case id {case.id!r} appears twice (cases[{seen[case.id]}] and cases[{i}]): ids must be unique",
                                 source=source, key=f"cases[{i}].id")
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


def read_input(path: str | os.PathLike[str], what: str = "file") -> str:
    """The UTF-8 text of an input file; a missing, unreadable or unnameable one is a UsageError naming it."""
    try:
        p = Path(path)
        if not p.is_file():
            raise UsageError(f"no such {what}", source=str(path))
        return p.read_text(encoding="utf-8")
    except UsageError:
        raise
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})", source=str(path)) from None
    except (OSError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot read: {_os_reason(exc)}", source=str(path)) from None


def _os_reason(exc: BaseException) -> str:
    """What the OS said, without the path it repeats (the message names it already)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read and validate a report file (:func:`decode_report`, :func:`validate_report`); every
    problem is a UsageError naming the file and where in it."""
    src = str(path)
    return validate_report(decode_report(read_input(path), src), source=src)


_SPECIAL = re.compile(r'[\[\]{}"\\]')


def check_depth(text: str, source: str) -> None:
    """Refuse TOML (or JSON) nested deeper than :data:`MAX_DEPTH` before a recursive parser sees it
    (strings in double quotes are skipped; only the bracket, brace, quote and backslash
    characters are visited). Reports are measured after decoding instead (:func:`_depth`)."""
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


def _file_identity(path: str | os.PathLike[str]) -> tuple[Path, tuple[int, int] | None]:
    """(resolved path, (device, inode) where the file exists): two spellings of one file, a
    symlink and its target, or two hard links have one identity."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (OSError, ValueError):
        ino = None
    else:
        ino = (st.st_dev, st.st_ino)
    return p.resolve(), ino


def check_output(path: str | os.PathLike[str], key: str) -> Path:
    """Fail now (UsageError naming ``key`` and the path), before any work, if ``path`` cannot be
    written: a directory, a path under a file, a folder memaudit may not write, a name the OS
    refuses (a component over 255 bytes, a symlink loop). Returns the path a write goes to (a
    symlink's target: the link stays a link)."""
    try:
        return _check_output(path, key)
    except UsageError:
        raise
    except (OSError, RuntimeError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, a NUL byte: what the OS says
        raise UsageError(f"cannot write {_short(str(path))}: {_os_reason(exc)}", key=key) from None


def _check_output(path: str | os.PathLike[str], key: str) -> Path:
    p = Path(path)
    if p.is_symlink():
        p = p.resolve()  # a loop raises (RuntimeError or OSError); a dangling link names the file to make
    if p.is_dir():
        raise UsageError(f"{str(path)!r} is a directory; name a file", key=key)
    if p.exists() and not p.is_file():
        raise UsageError(f"{str(path)!r} exists and is not a regular file", key=key)
    if len(os.fsencode(p.name)) > _NAME_MAX - 20:  # the temp file beside it adds a few bytes
        raise UsageError(f"cannot write {_short(str(path))}: its name is {len(os.fsencode(p.name))} bytes "
                         f"(at most {_NAME_MAX - 20})", key=key)
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
    for part in p.relative_to(parent).parts:  # the folders a write will make, and the file itself
        if len(os.fsencode(part)) > _NAME_MAX:
            raise UsageError(f"cannot write {_short(str(path))}: a name in it is {len(os.fsencode(part))} bytes "
                             f"(at most {_NAME_MAX})", key=key)
    return p


_NAME_MAX = 255
"""The longest file name (one path component, in bytes) on Linux and macOS file systems."""


def check_outputs(outputs: dict[str, str | os.PathLike[str] | None],
                  inputs: dict[str, str | os.PathLike[str] | None] | None = None) -> None:
    """:func:`check_output` for each given ``{key: path}``; and no output is an input or another
    output, however spelled (``sub/../x``, a symlink, a hard link: the same resolved path or the
    same inode). ``inputs`` are ``{what: path}`` of the files the command reads; one that does not
    exist (yet) is still compared by its resolved path."""
    seen: dict[Path | tuple[int, int], str] = {}
    for what, path in (inputs or {}).items():
        if path is None:
            continue
        try:
            resolved, ino = _file_identity(path)
        except (OSError, RuntimeError, ValueError):
            continue  # an input the OS cannot name is refused when it is read
        seen[resolved] = what
        if ino is not None:
            seen[ino] = what
    names = set((inputs or {}).keys())
    for key, path in outputs.items():
        if path is None:
            continue
        check_output(path, key)
        try:
            resolved, ino = _file_identity(path)
        except (OSError, RuntimeError, ValueError) as exc:
            raise UsageError(f"cannot write {_short(str(path))}: {_os_reason(exc)}", key=key) from None
        other = seen.get(resolved) or (seen.get(ino) if ino is not None else None)
        if other is not None:
            if other in names:
                raise UsageError(f"{str(path)!r} is also the input {other} ({str((inputs or {})[other])!r}): an output "
                                 "never overwrites what memaudit reads; name another file", key=key)
            raise UsageError(f"{str(path)!r} is also given to {other}; name two files", key=key)
        seen[resolved] = key
        if ino is not None:
            seen[ino] = key


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (see ``atomic_write``)."""
    atomic_write(path, lambda f: f.write(text))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see ``atomic_write``)."""
    atomic_write(path, lambda f: f.write(data), binary=True)


def atomic_write(path: str | os.PathLike[str], write: Callable[[Any], object], *, binary: bool = False) -> None:
    """Call ``write(file)`` on a temp file in the same folder (UTF-8 text, or bytes with
    ``binary``), then rename it to ``path`` (through a symlink to its target). An OSError is a
    UsageError naming the path. The temp file's name is chosen before it is made, so that it is
    removed whenever the write does not finish: also on KeyboardInterrupt and SystemExit (the
    CLI turns SIGTERM into one), whenever they arrive."""
    p = Path(path)
    try:
        if p.is_symlink():
            p = p.resolve()  # a loop raises (RuntimeError or OSError); a dangling link names the file to make
        p.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot write: {_os_reason(exc)}", source=str(path)) from None
    stem = os.fsencode(p.name)[:200].decode("utf-8", "ignore")
    tmp = p.parent / f".{stem}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)  # the umask applies
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write: {_os_reason(exc)}", source=str(path)) from None
        if isinstance(exc, UnicodeEncodeError):
            raise UsageError(f"cannot write: text that is not valid Unicode ({exc.reason})", source=str(path)) from None
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

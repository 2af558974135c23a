"""The report model: pure data with a JSON round-trip.

A :class:`Report` holds :class:`CaseReport` s; a case holds :class:`Row` s (one per buffer that
autograd saved) and :class:`Totals`. Nothing here imports torch or TE.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import json
import operator
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from memaudit.errors import UsageError
from memaudit.ranks import DistRun, RankInfo
from memaudit.spec import CaseSpec

SCHEMA = "memaudit.report/3"
READABLE_SCHEMAS = ("memaudit.report/1", "memaudit.report/2", SCHEMA)
"""/1 reports (before residence, freed rows and completeness) read with those fields at their defaults;
/2 reports (before read verdicts: ``read``, ``read_by``, ``unread_bytes``, ``unread``) without them."""

KINDS = ("data", "scale_inv", "amax", "scale", "metadata", "tensor", "container", "unknown")
ORIENTATIONS = ("rowwise", "columnwise", "both")
STATUSES = ("ok", "skipped", "error")
RESIDES = ("device", "host", "recomputed", "unknown")
"""Where a saved buffer is kept: on its device; on the host (a pair such as ``save_on_cpu`` keeps a
copy there); nowhere (``checkpoint`` recomputes it in backward); or where no one can tell."""
READ_VERDICTS = ("read", "unread", "unknown")
"""A saved buffer's verdict (``Row.read``): backward read its contents; finished without reading
them; or memaudit cannot tell (``Row.read_by`` says why)."""
UNREAD_METHODS = ("observed", "poisoned")
"""How verdicts were reached (``Unread.methods``): reads observed during backward; gradients
compared with the buffers' contents poisoned."""
UNREAD_CHOICES = (*UNREAD_METHODS, "both")
"""What a run may ask for (``run --unread-method``, a scenario's ``unread``, the pytest marker's)."""
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
    attribute inside a container (a classifier's name for the buffer) or else ``saved_as``; ``storage_bytes`` is that
    storage's full
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
    """The qualified name of the module whose forward saved it (``layers.3.mlp.fc1``; the root by
    its class name; a module with no name under the root under the innermost caller that has one,
    ``mlp.experts.<Sequential>``, else by its class name), or None (saved outside any module call)."""
    source: str | None = None
    """``file:line`` of the user code that saved it (``capture(stack=True)``, ``run --stack``)."""
    read: str | None = None
    """Whether backward read it (one of :data:`READ_VERDICTS`), or None where no analysis ran."""
    read_by: str | None = None
    """For ``read``: the op or kernel that first read it (``aten.mm``; None where only poisoning
    saw the read); for ``unknown``: why; None for ``unread``."""
    cached: str | None = None
    """What a module keeps this buffer as across steps, where it is such a copy (``fp8 weight cache of
    layers.0.fc1``: a library module's cached quantized weight, which a classifier recognises). Its
    storage is counted apart (``Totals.cached_bytes``), as a parameter's is: the step did not make
    it, and backward does not free it. None for memory the step saved."""

    @property
    def apart(self) -> bool:
        """Whether its storage is counted apart from ``saved_bytes``: a parameter's, or a cached copy."""
        return self.is_parameter or self.cached is not None

    def notes(self) -> list[str]:
        """Short flags for tables: parameter, duplicate view, buffer of a container, note."""
        out = []
        if self.is_parameter:
            out.append("param")
        if self.cached is not None:
            out.append(self.cached)
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


ROW_DEFAULTS: dict[str, Any] = {f.name: None if f.default is MISSING else f.default for f in fields(Row)}
_ROW_KEYS = frozenset(ROW_DEFAULTS)
_ROW_REQUIRED = frozenset(f.name for f in fields(Row) if f.default is MISSING)


def make_row(values: dict[str, Any]) -> Row:
    """``Row(**values)`` for the capture's hot loop: the same frozen row (fields in declaration
    order, defaults where not given), without the dataclass ``__init__``'s per-field
    ``object.__setattr__``. Unknown keys raise, as ``Row(**values)`` would."""
    if not (_ROW_KEYS.issuperset(values) and values.keys() >= _ROW_REQUIRED):
        raise TypeError(f"row fields {sorted(values)}: expected {sorted(_ROW_REQUIRED)} and only Row's fields")
    d = dict(ROW_DEFAULTS)
    d.update(values)
    row = object.__new__(Row)
    row.__dict__.update(d)
    return row


OPTIONAL_ROW_KEYS = ("module", "source", "read", "read_by", "cached")
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
        if d["read"] is None:
            del d["read"]
        if d["read_by"] is None:
            del d["read_by"]
        if d["cached"] is None:
            del d["cached"]
        out.append(d)
    return out


def module_operand(
    module: str | None, op: str | None, saved_as: str | None, slot: str | None, nth: int | None = None
) -> str | None:
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
    ``saved_bytes = physical_bytes - parameter_bytes - cached_bytes``: ``cached_bytes`` (written only
    when not 0) counts the storages of ``cached`` rows that are not parameters' (copies a module keeps
    across steps, such as TE's FP8 weight workspaces: no step makes them, no backward frees them),
    so ``saved_bytes`` is the new memory the step's saved state holds. Apart from those: ``host_bytes`` (copies a
    hook keeps on the host), ``unknown_bytes`` (logical bytes whose residence no one can tell),
    ``output_bytes`` (saved storages that are also forward outputs: alive anyway), ``ctx_bytes``
    (storages only ``ctx`` attributes keep) and the ``freed`` rows autograd already released.
    ``unread_bytes`` (written only when not None) counts, as ``saved_bytes`` does, the storages
    whose every row backward left ``unread``; None when no row carries a verdict. Every total but
    ``physical_bytes`` and ``parameter_bytes`` leaves parameter and cached storages out alike.
    """

    rows: int = 0
    logical_bytes: int = 0
    physical_bytes: int = 0
    parameter_bytes: int = 0
    saved_bytes: int = 0
    cached_bytes: int = 0
    host_bytes: int = 0
    unknown_bytes: int = 0
    output_bytes: int = 0
    ctx_bytes: int = 0
    freed_rows: int = 0
    freed_bytes: int = 0
    unread_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: ``unread_bytes`` only where the rows carry verdicts, ``cached_bytes`` only
        where it is not 0 (reports before it stay byte for byte as they were)."""
        out = asdict(self)
        if out["unread_bytes"] is None:
            del out["unread_bytes"]
        if not out["cached_bytes"]:
            del out["cached_bytes"]
        return out


_TOTALS_FIELDS = operator.attrgetter(
    "bytes", "resides", "storage", "storage_bytes", "is_parameter", "aliases_output", "via", "cached"
)


def compute_totals(rows: list[Row], freed: list[Row] | tuple[Row, ...] = ()) -> Totals:
    """Totals from live rows (and the freed ones, counted apart)."""
    logical = 0
    device: dict[str, int] = {}
    host: dict[str, int] = {}
    params: set[str] = set()
    cached: set[str] = set()
    outputs: set[str] = set()
    hooked: set[str] = set()
    host_loose = unknown = 0
    for nbytes, resides, storage, storage_bytes, is_param, is_output, via, cache in map(_TOTALS_FIELDS, rows):
        logical += nbytes
        if resides == "device":
            if storage is None:
                continue
            device[storage] = storage_bytes
            if is_param:
                params.add(storage)
            if cache is not None:
                cached.add(storage)
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
    cached -= params  # a parameter's storage is a parameter's, whatever else holds it
    cached_bytes = sum(device[s] for s in cached)
    apart = params | cached
    unread_bytes = None
    if any(r.read is not None for r in rows):
        unread_bytes = sum(device[s] for s in unread_storages(rows) if s in device and s not in apart)
    return Totals(
        rows=len(rows),
        logical_bytes=logical,
        physical_bytes=physical,
        parameter_bytes=param_bytes,
        saved_bytes=physical - param_bytes - cached_bytes,
        cached_bytes=cached_bytes,
        host_bytes=sum(host.values()) + host_loose,
        unknown_bytes=unknown,
        output_bytes=sum(device[s] for s in outputs - apart),
        ctx_bytes=sum(b for s, b in device.items() if s not in hooked and s not in apart),
        freed_rows=len(freed),
        freed_bytes=sum(r.bytes for r in freed),
        unread_bytes=unread_bytes,
    )


def unread_storages(rows: Iterable[Row]) -> list[str]:
    """The storages (first-seen order) whose every row is ``unread``: a storage with a ``read`` row
    is read, and one with an ``unknown`` row (or a row without a verdict) is not counted."""
    verdicts: dict[str, bool] = {}
    for r in rows:
        if r.storage is not None:
            verdicts[r.storage] = verdicts.get(r.storage, True) and r.read == "unread"
    return [s for s, unread in verdicts.items() if unread]


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
    (each once, parameters and cached copies excluded, as the totals). ``frees`` are the rows a non-reentrant
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
    """Device storages of ``rows[i]`` for ``i`` in ``indices``, each once, parameters and cached
    copies excluded (a checkpoint frees neither)."""
    storages: dict[str, int] = {}
    params: set[str] = set()
    for i in indices:
        r = rows[i]
        if r.resides != "device" or r.storage is None:
            continue
        storages[r.storage] = r.storage_bytes
        if r.is_parameter or r.cached is not None:
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
                raise UsageError(
                    f"{getattr(g, field_)} disagrees with its rows ({want})", source=source, key=f"{key}.{field_}"
                )


@dataclass(frozen=True)
class Unread:
    """How a case's read verdicts were reached (``unread`` in the JSON; set only on an analysed case).

    ``methods`` are the methods that ran (of :data:`UNREAD_METHODS`); ``notes`` say why a method
    did not run, where backward was nondeterministic, where the methods disagreed.
    """

    methods: list[str]
    notes: list[str] = field(default_factory=list)


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
    unread: Unread | None = None
    """Set when the case's rows carry read verdicts (:func:`with_verdicts`): the methods that ran."""

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
        out["totals"] = self.totals.to_dict()
        out["path"] = None if self.path is None else self.path.to_dict()
        if self.emulation is not None:  # measured cases carry neither key (reports stay as they were)
            out["execution"] = "emulated"
            out["emulation"] = asdict(self.emulation)
        if self.dist is not None:  # only a case run on one rank of a distributed job
            out["dist"] = self.dist.to_dict()
        if self.unread is not None:  # only an analysed case (reports without the analysis stay as they were)
            out["unread"] = asdict(self.unread)
        return out


_NESTED = ("spec", "rows", "freed", "totals", "path", "emulation", "modules", "dist", "unread")


def verdict_problem(rows: list[Row], unread: Unread | None) -> tuple[str, str] | None:
    """``(key, what is wrong)`` for the first row whose verdict the case cannot hold, else None: a
    ``read_by`` on an ``unread`` row or without a verdict, a verdict where the case records no
    analysis, a live row without one where it does, an ``unknown`` row that does not say why."""
    for i, r in enumerate(rows):
        if r.read is None and r.read_by is not None:
            return f"rows[{i}].read_by", f"read_by {r.read_by!r} on a row without a verdict (read is missing)"
        if r.read == "unread" and r.read_by is not None:
            return f"rows[{i}].read_by", f"an unread row names no reader, got read_by {r.read_by!r}"
        if r.read is not None and unread is None:
            return (
                f"rows[{i}].read",
                f"a verdict {r.read!r} in a case that records no analysis (its unread key is missing)",
            )
        if r.read is None and unread is not None:
            return (
                f"rows[{i}].read",
                f"the case was analysed ({', '.join(unread.methods)}), but this row has no verdict",
            )
        if r.read == "unknown" and not r.read_by:
            return f"rows[{i}].read_by", "an unknown row says why (read_by is missing)"
    return None


def with_verdicts(case: CaseReport, verdicts: Mapping[int, tuple[str, str | None]], unread: Unread) -> None:
    """Give ``case``'s rows their read verdicts: ``verdicts[row index] = (verdict, read_by)``.

    Rows are replaced (they are immutable), ``case.unread`` is set and ``case.totals`` recomputed
    (only ``unread_bytes`` is new; every other total is unchanged). Every live row must get a
    verdict of :data:`READ_VERDICTS`, ``read_by`` naming the reader of a ``read`` row and the
    reason of an ``unknown`` one (a ``read`` row found by poisoning alone may name none), none for
    ``unread``: anything else is a ValueError, and the case
    is left as it was.
    """
    n = len(case.rows)
    bad = sorted(i for i in verdicts if not (isinstance(i, int) and 0 <= i < n))
    if bad:
        raise ValueError(f"{case.id}: verdicts for row(s) {bad[:5]} of a case with {n} rows")
    missing = [i for i in range(n) if i not in verdicts]
    if missing:
        raise ValueError(
            f"{case.id}: row(s) {missing[:5]} have no verdict ({len(missing)} of {n}): every live row gets one"
        )
    methods = [m for m in unread.methods if m in UNREAD_METHODS]
    if not unread.methods or len(methods) != len(unread.methods) or len(set(methods)) != len(methods):
        raise ValueError(f"{case.id}: methods {unread.methods!r}: expected one or both of {', '.join(UNREAD_METHODS)}")
    rows = []
    for r in case.rows:
        verdict, read_by = verdicts[r.index]
        if verdict not in READ_VERDICTS:
            raise ValueError(f"{case.id}: row {r.index}: verdict {verdict!r} is not one of {', '.join(READ_VERDICTS)}")
        if verdict == "unread" and read_by is not None:
            raise ValueError(f"{case.id}: row {r.index}: an unread row names no reader (got {read_by!r})")
        if verdict == "unknown" and not read_by:
            raise ValueError(f"{case.id}: row {r.index}: an unknown row says why (read_by)")
        rows.append(replace_row(r, read=verdict, read_by=read_by))
    case.rows = rows
    case.unread = Unread(list(unread.methods), list(unread.notes))
    case.totals = compute_totals(rows, case.freed)


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

"""The estimator's fast path: :class:`~.model.Model` compiled once per structure, run per shape.

What TE saves depends on two kinds of input. The *structure* (recipe, path, arch, dtype, group
count, variant, ``dense_single_group``, probs and split-size dtypes) decides which buffers exist,
their names, formats, slots and which storage each lives in; the *shape* (tokens, hidden, FFN,
the per-group splits) only decides the numbers: each buffer's shape, bytes, offset and its
storage's size. So the model is run once per structure on symbolic integers (:class:`Sym`): every
arithmetic operation it does on a dimension is recorded, and the rows it makes become one
straight-line Python function of ``(T, H, F, splits)``, compiled and cached by structure. Each
later configuration of that structure costs one call: integer arithmetic and one dict copy per
row (a row is made as ``object.__new__(Row)`` with its fields copied in: the same frozen
dataclass with every field in its ``__dict__`` in declaration order, as ``memaudit.report.make_row``
makes rows; not validated, as rows made in memory never were), no model walk.

Rows are immutable, so a row need not be made twice. Each value is traced with its *level*: what
decides it. A row whose every field the structure fixes (a per-tensor scale of shape (1,), the
split sizes) is made once, at compile time, and shared by every estimate of that structure. A row
that only H and F decide (the weights and their scales: most rows at large G) is made by a
second compiled function, ``weights(H, F)``, once per (structure, H, F), with the padded entries
and partial totals of those rows, and shared by every estimate with that H and F (a sweep over
token counts makes them once); at most :data:`MAX_WEIGHTS_ROWS` such rows are kept. Their padded
entries (dicts in the case's read-only ``path``) are shared the same way. Only the rows that T or
the splits decide are made per call.

Nothing here restates a rule of TE: the rules stay in :mod:`.model`, :mod:`.shapes` and
:mod:`.buffers`, and this module only replays them. Where the model would branch on a value (a
comparison, ``bool``, ``int`` or hashing of a dimension), tracing stops and that structure keeps
the direct path (:func:`compiled` returns None). The things the direct path decides from values
are computed from values here too: which views are duplicates of an earlier one (same storage,
offset and shape), and which rows are padded (ideal bytes differ). ``tests/te/test_estimate_compiled.py``
checks the compiled path against the direct one, field by field.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from dataclasses import fields
from typing import Any, cast

from memaudit.report import Row, Totals
from memaudit.te.estimate.buffers import _ideal_fp8, _keep
from memaudit.te.estimate.config import DEVICE, Config, default_splits_tuple
from memaudit.te.estimate.model import Model


class NotCompiled(Exception):
    """No compiled form for a structure: the model used a dimension's value (not just arithmetic
    on it), or the structure has more than :data:`MAX_ROWS` rows."""


STRUCTURE, WEIGHTS, CALL = 0, 1, 2
"""What decides a value (its *level*): the structure alone (a literal); H and F (the weights'
dimensions: the same for every token count of a sweep); T or the splits (each call)."""


class _Trace:
    """The straight-line program being recorded: ``name = expression`` lines, shared by value,
    each with its level (the highest level among its inputs) and the names it reads."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, str] = {}
        self.levels: dict[str, int] = {}
        self.reads: dict[str, tuple[str, ...]] = {}

    def input(self, name: str, level: int) -> Sym:
        """An argument of the compiled function, decided at ``level``."""
        self.levels[name] = level
        return Sym(self, name)

    def level(self, code: str) -> int:
        """The level of a name or literal (an argument nobody declared counts as per call)."""
        return STRUCTURE if _literal(code) else self.levels.get(code, CALL)

    def emit(self, expr: str, operands: tuple[Any, ...] = ()) -> Sym:
        name = self.names.get(expr)
        if name is None:
            name = self.names[expr] = f"v{len(self.lines)}"
            self.lines.append(f"{name} = {expr}")
            reads = tuple(o.name for o in operands if isinstance(o, Sym))
            self.reads[name] = reads
            self.levels[name] = max((self.level(r) for r in reads), default=STRUCTURE)
        return Sym(self, name)


def _code(x: Any) -> str:
    if isinstance(x, Sym):
        return x.name
    if type(x) is int:
        return repr(x)
    raise NotCompiled(f"a dimension met a {type(x).__name__}")


class Sym:
    """A symbolic integer: a name in the trace's program. Arithmetic records a line; anything
    that would need its value raises :class:`NotCompiled`."""

    __slots__ = ("trace", "name")

    def __init__(self, trace: _Trace, name: str) -> None:
        self.trace = trace
        self.name = name

    def _op(self, op: str, a: Any, b: Any) -> Any:
        return self.trace.emit(f"{_code(a)} {op} {_code(b)}", (a, b))

    def __add__(self, o: Any) -> Any:
        return self if type(o) is int and o == 0 else self._op("+", self, o)

    def __radd__(self, o: Any) -> Any:
        return self if type(o) is int and o == 0 else self._op("+", o, self)

    def __sub__(self, o: Any) -> Any:
        return self if type(o) is int and o == 0 else self._op("-", self, o)

    def __rsub__(self, o: Any) -> Any:
        return self._op("-", o, self)

    def __mul__(self, o: Any) -> Any:
        return self if type(o) is int and o == 1 else self._op("*", self, o)

    def __rmul__(self, o: Any) -> Any:
        return self if type(o) is int and o == 1 else self._op("*", o, self)

    def __floordiv__(self, o: Any) -> Any:
        return self if type(o) is int and o == 1 else self._op("//", self, o)

    def __rfloordiv__(self, o: Any) -> Any:
        return self._op("//", o, self)

    def __mod__(self, o: Any) -> Any:
        return self._op("%", self, o)

    def __rmod__(self, o: Any) -> Any:
        return self._op("%", o, self)

    def __neg__(self) -> Any:
        return self.trace.emit(f"-{self.name}", (self,))

    def _value(self, *args: Any) -> Any:
        raise NotCompiled(f"the model needs the value of {self.name}")

    __bool__ = __index__ = __int__ = __hash__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _value
    __pow__ = __rpow__ = __truediv__ = __rtruediv__ = __and__ = __or__ = __lshift__ = __rshift__ = _value


Key = tuple[Any, ...]
SHAPE_FIELDS = ("tokens", "hidden", "ffn", "splits")
"""The :class:`~.config.Config` fields a compiled function takes as arguments; every other field is structure."""
_STRUCTURE_FIELDS = tuple(f.name for f in fields(Config) if f.name not in SHAPE_FIELDS)
_structure_of = operator.attrgetter(*_STRUCTURE_FIELDS)

COMPILE_AFTER = 8
"""Uses of a structure on the direct path before it is compiled. Compiling costs about as much
as 6-19 direct estimates of that structure (median 10 over the sweep grid's structures), the first
estimate at each (H, F) about a fourteenth of one and each later one about a fortieth, so one-off
estimates never pay for it and repeated ones (sweeps, benchmarks, ``run --expected``) soon do."""
MAX_ROWS = 4096
"""Structures with more rows than this stay on the direct path (their compiled code would be large)."""
MAX_CACHED = 256
"""Compiled structures kept (the oldest is dropped first)."""
MAX_WEIGHTS_ROWS = 16_384
"""Rows that only H and F decide kept for reuse, over every structure and (H, F); each (structure,
H, F) counts its rows plus one, the oldest are dropped first (a row takes about 1 KB)."""


def structure(c: Config, variant: str) -> Key:
    """Everything about a configuration but its shape: what one compiled function serves."""
    return (*_structure_of(c), variant)


_CACHE: dict[Key, Callable[..., Any] | None] = {}
_USES: dict[Key, int] = {}
_WEIGHTS: dict[tuple[int, Key], tuple[dict[Key, Any], Key, int]] = {}  # (id(cache), (H, F)) -> (cache, (H, F), rows)
_held = [0]  # what _WEIGHTS holds, counted as MAX_WEIGHTS_ROWS counts
_LOCK = threading.Lock()


def compiled(c: Config, variant: str) -> Callable[..., Any] | None:
    """The compiled estimate for ``c``'s structure, or None: the structure was used fewer than
    :data:`COMPILE_AFTER` times, is too large, or the model cannot be traced for it (the caller
    takes the direct path; both give the same case)."""
    key = structure(c, variant)
    try:
        return _CACHE[key]
    except KeyError:
        pass
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        uses = _USES[key] = _USES.get(key, 0) + 1
        if uses < COMPILE_AFTER:
            if len(_USES) > 100_000:  # many structures seen a few times each: start counting afresh
                _USES.clear()
            return None
        try:
            fn: Callable[..., Any] | None = _compile(c, variant)
        except NotCompiled:
            fn = None
        if len(_CACHE) >= MAX_CACHED:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = fn
        _USES.pop(key, None)
        return fn


def clear() -> None:
    """Forget every compiled structure, use count, weights' rows and kept default splits (tests
    and benchmarks of the cold path)."""
    default_splits_tuple.cache_clear()
    with _LOCK:
        _CACHE.clear()
        _USES.clear()
        for cache, key, _ in _WEIGHTS.values():
            cache.pop(key, None)
        _WEIGHTS.clear()
        _held[0] = 0


def _remember(cache: dict[Key, Any], key: Key, value: tuple[Any, ...], nrows: int) -> tuple[Any, ...]:
    """Keep a structure's weights' rows ``value`` for ``key`` = (H, F) in its ``cache``, within
    :data:`MAX_WEIGHTS_ROWS` over all structures; returns ``value``."""
    nrows += 1
    with _LOCK:
        if nrows > MAX_WEIGHTS_ROWS:
            return value
        while _WEIGHTS and _held[0] + nrows > MAX_WEIGHTS_ROWS:
            old_cache, old_key, n = _WEIGHTS.pop(next(iter(_WEIGHTS)))
            old_cache.pop(old_key, None)
            _held[0] -= n
        if (id(cache), key) not in _WEIGHTS:
            _WEIGHTS[id(cache), key] = (cache, key, nrows)
            _held[0] += nrows
        cache[key] = value
        return value


def _literal(code: str) -> bool:
    """True for the code of a constant (an integer literal, maybe negative)."""
    return code.lstrip("-").isdigit()


def _made(fields_: dict[str, Any]) -> Row:
    """A row with ``fields_`` (every field, in declaration order) in its ``__dict__``."""
    row = object.__new__(Row)
    row.__dict__.update(fields_)
    return row


def _row_template(index: int, b: Any, storage: str | None, container_index: int | None) -> dict[str, Any]:
    """A row's fields that the structure fixes (the shape's are filled in per call), in field order."""
    return {
        "index": index,
        "kind": b.kind,
        "format": b.fmt,
        "shape": None,
        "dtype": b.dtype,
        "bytes": None,
        "op": None,
        "saved_as": None,
        "slot": b.slot,
        "operand": b.operand,
        "group": b.group,
        "container": b.container,
        "container_index": container_index,
        "orientation": b.orient,
        "storage": storage,
        "storage_offset": 0,
        "storage_bytes": 0,
        "device": DEVICE,
        "is_parameter": b.param,
        "duplicate_of": None,
        "note": b.note,
        "expected_bytes": None,
        "resides": "device",
        "via": "hook",
        "aliases_output": False,
        "module": None,
        "source": None,
        "read": None,
        "read_by": None,
        "cached": None,
    }


class _Part:
    """Rows of one level as code, and the names that code reads."""

    def __init__(self) -> None:
        self.body: list[str] = []
        self.reads: set[str] = set()
        self.value_dups = False

    def use(self, *codes: str) -> None:
        self.reads.update(c for c in codes if not _literal(c))


def _total(terms: list[str]) -> str:
    """The sum of ``terms`` as code: the literals folded, flat for the compiler."""
    const = sum(int(t) for t in terms if _literal(t))
    rest = [t for t in terms if not _literal(t)]
    terms = [*rest, str(const)] if const or not rest else rest
    return " + ".join(terms) if len(terms) < 32 else "sum((" + ", ".join(terms) + ",))"


def _compile(c: Config, variant: str) -> Callable[..., Any]:
    """Trace the model on symbolic dimensions and compile the rows it makes (see the module doc)."""
    trace = _Trace()
    T, H, F = trace.input("T", CALL), trace.input("H", WEIGHTS), trace.input("F", WEIGHTS)
    splits = tuple(trace.input(f"m{g}", CALL) for g in range(c.groups))
    sym = Config(  # the dimensions as symbols where Config holds integers
        c.recipe,
        cast(int, T),
        cast(int, H),
        cast(int, F),
        c.groups,
        cast(tuple[int, ...], splits),
        c.path,
        c.arch,
        c.dtype,
        c.dense_single_group,
        c.probs_dtype,
        c.split_sizes_dtype,
    )
    acc = Model(sym).build()
    bufs = [b for b in acc.bufs if _keep(b, variant, c.recipe, c.fused)]
    if variant == "ideal" and c.recipe in ("fp8-delayed", "fp8-current"):
        bufs = _ideal_fp8(bufs)
    if len(bufs) > MAX_ROWS:
        raise NotCompiled(f"{len(bufs)} rows: more than MAX_ROWS")
    level = trace.level

    # Each row's level: the highest of its numbers'. Duplicate views decided from values compare
    # every view of their storage, so those views all take the highest level among them.
    views: dict[int, list[tuple[int, str, list[str]]]] = {}  # storage -> (row, offset, dims) of its rows
    own: list[int] = []
    for i, b in enumerate(bufs):
        codes = [_code(d) for d in b.shape] + [_code(b.nbytes)]
        if b.storage is not None:
            views.setdefault(b.storage, []).append((i, _code(b.soff), [_code(d) for d in b.shape]))
            codes += [_code(b.soff), _code(acc.sizes[b.storage])]
        own.append(max(map(level, codes)))
    by_value = {
        s
        for s, peers in views.items()
        if len(peers) > 1 and not all(_literal(o) and all(map(_literal, ds)) for _, o, ds in peers)
    }
    storage_level = {s: max(own[i] for i, _, _ in views[s]) for s in by_value}

    templates: list[dict[str, Any]] = []
    base: list[Row | None] = []  # the rows the structure fixes (shared), None for the others
    parts = {WEIGHTS: _Part(), CALL: _Part()}
    names: dict[int, str] = {}
    cont_index: dict[int, int] = {}
    sizes_by_storage: dict[str, str] = {}
    param_storages: set[str] = set()
    logical: list[str] = []
    ideal_terms: list[str] = []
    pads: list[tuple[int, int, str, str]] = []  # (level, row, ideal, padded) of rows that may be padded
    weights_rows = 0
    for i, b in enumerate(bufs):
        storage = None
        if b.storage is not None:
            storage = names.get(b.storage)
            if storage is None:
                storage = names[b.storage] = f"s{len(names)}"
        ci = None
        if b.is_container:
            cont_index[b.cref] = i  # type: ignore[index]  # a container has its cref
        elif b.cref is not None:
            ci = cont_index.get(b.cref)
        tpl = _row_template(i, b, storage, ci)
        templates.append(tpl)
        dims = [_code(d) for d in b.shape]
        nbytes = _code(b.nbytes)
        sets = {"shape": "[" + ", ".join(dims) + "]"}  # a fresh list per row: rows share no mutable field
        fixed = {"bytes": nbytes}
        row_level = own[i]
        if storage is not None:
            size = _code(acc.sizes[b.storage])  # type: ignore[index]  # b.storage is set: the row has a storage
            soff = _code(b.soff)
            fixed["storage_offset"] = soff
            fixed["storage_bytes"] = size
            sizes_by_storage.setdefault(storage, size)
            if b.param:
                param_storages.add(storage)
            peers = views[b.storage]  # type: ignore[index]  # b.storage is set: the row has a storage
            if (
                b.storage in by_value
            ):  # a duplicate view (same storage, offset and shape as an earlier row), from values
                row_level = storage_level[b.storage]
                view = "(" + "".join(d + ", " for d in dims) + ")"
                sets["duplicate_of"] = f"None if (x := fv.setdefault(({b.storage}, {soff}, {view}), {i})) == {i} else x"
            elif len(peers) > 1:  # decided by the structure
                first = next(j for j, o, ds in peers if o == soff and ds == dims)
                tpl["duplicate_of"] = None if first == i else first
        for key, code in fixed.items():
            if _literal(code):
                tpl[key] = int(code)
            else:
                sets[key] = code
        if row_level == STRUCTURE:
            # Every field is fixed by the structure (a scale_inv of (1,), the split sizes): one
            # row, made here, serves every call. Rows are immutable, and their fields are shared
            # as replace_row and dataclasses.replace share them.
            tpl["shape"] = [int(d) for d in dims]
            base.append(_made(tpl))
        else:
            base.append(None)
            part = parts[row_level]
            part.use(*dims, *(code for key, code in fixed.items() if key in sets))
            part.value_dups |= "duplicate_of" in sets
            weights_rows += row_level == WEIGHTS
            part.body.append(f"r = new(Row); d = r.__dict__; d.update(C[{i}])")
            part.body.extend(f"d[{key!r}] = {code}" for key, code in sets.items())
            part.body.append(f"rows[{i}] = r")
        logical.append(nbytes)
        ideal = _code(b.ideal)
        ideal_terms.append(ideal)
        if ideal != nbytes and not (_literal(ideal) and _literal(nbytes) and int(ideal) == int(nbytes)):
            pads.append((max(level(ideal), level(nbytes)), i, ideal, nbytes))

    # Padded entries, in row order, in runs: those H and F decide (made with the weights' rows:
    # lists P0, P1, ...) and those each call decides. A run is one comprehension, not an ``if``
    # per entry: a function with thousands of branches takes twice as long to compile.
    weights, call = parts[WEIGHTS], parts[CALL]
    runs: list[tuple[int, list[str]]] = []
    for lv, i, ideal, nbytes in pads:
        side = CALL if lv == CALL else WEIGHTS
        if side == CALL:
            call.use(ideal, nbytes)
        if not runs or runs[-1][0] != side:
            runs.append((side, []))
        runs[-1][1].append(f"({i}, {ideal}, {nbytes}), ")

    def entries(items: list[str]) -> str:
        return "[{'index': i, 'ideal_bytes': a, 'padded_bytes': b} for i, a, b in (" + "".join(items) + ") if a != b]"

    weights_pads: list[str] = []  # P0 = [...], made with the weights' rows
    pieces: list[str] = []  # the main function's padded list, run by run
    for side, items in runs:
        if side == WEIGHTS:
            pieces.append(f"P{len(weights_pads)}")
            weights_pads.append(f"{pieces[-1]} = {entries(items)}")
        else:
            pieces.append(entries(items))
    if not pieces:
        padded = "[]"
    elif len(pieces) == 1:
        padded = pieces[0] + (".copy()" if runs[0][0] == WEIGHTS else "")
    else:
        padded = "[" + ", ".join("*" + p for p in pieces) + "]"

    # Totals: the sums of the terms H and F decide are made with the weights' rows.
    def split(terms: list[str]) -> tuple[str, str]:
        per_call = [t for t in terms if level(t) == CALL]
        call.use(*per_call)
        return _total([t for t in terms if level(t) < CALL]), _total(per_call)

    sums = {
        "logical": split(logical),
        "physical": split(list(sizes_by_storage.values())),
        "params": split([sizes_by_storage[s] for s in sizes_by_storage if s in param_storages]),
        "ideal": split(ideal_terms),
    }
    weights_lines = [line for line in trace.lines if trace.levels[line.split(" ", 1)[0]] == WEIGHTS]
    call_lines = [line for line in trace.lines if trace.levels[line.split(" ", 1)[0]] == CALL]
    for line in call_lines:
        call.use(*trace.reads[line.split(" ", 1)[0]])
    # The names H and F decide that the main function reads: computed once, passed on.
    passed = sorted(
        (n for n in call.reads if trace.levels.get(n) == WEIGHTS and n.startswith("v")), key=lambda n: int(n[1:])
    )

    out = ["rows", *(f"P{j}" for j in range(len(weights_pads))), *(f"W_{k}" for k in sums), *passed]
    m = ", ".join(f"m{g}" for g in range(c.groups))
    src = [
        "def weights(H, F):",
        *("    " + line for line in weights_lines),
        "    rows = B.copy()",
        *(["    fv = {}"] if weights.value_dups else []),
        *("    " + line for line in weights.body),
        *("    " + line for line in weights_pads),
        *(f"    W_{k} = {v[0]}" for k, v in sums.items()),
        f"    return ({', '.join(out)},)",
        "",
        "def estimate_rows(T, H, F, S):",
        "    w = W.get((H, F))",
        "    if w is None:",
        "        w = remember(W, (H, F), weights(H, F), WROWS)",
        f"    {', '.join(out)}, = w",
        "    rows = rows.copy()",
        f"    {m}, = S",
        *("    " + line for line in call_lines),
        *(["    fv = {}"] if call.value_dups else []),
        *("    " + line for line in call.body),
        f"    padded = {padded}",
        *(f"    {k} = W_{k}" + (f" + {v[1]}" if v[1] != "0" else "") for k, v in sums.items()),
        f"    totals = Totals(rows={len(bufs)}, logical_bytes=logical, physical_bytes=physical, "
        "parameter_bytes=params, "
        "saved_bytes=physical - params)",
        "    return rows, totals, padded, ideal, logical",
    ]
    namespace: dict[str, Any] = {
        "C": templates,
        "B": base,
        "W": {},
        "WROWS": weights_rows,
        "remember": _remember,
        "new": object.__new__,
        "Row": Row,
        "Totals": Totals,
    }
    exec(compile("\n".join(src), f"<memaudit estimate {'/'.join(map(str, structure(c, variant)))}>", "exec"), namespace)
    return namespace["estimate_rows"]

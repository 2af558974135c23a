"""TransformerEngine storage classification: the one module that knows TE internals.

Every TE fact used here is in docs/internals/te-internals.md (TE 2.20.2), by section:

* §2.0 / §5.4: TE's ``prepare_for_saving`` is the one place a storage object
  (``Float8TensorStorage``, ``MXFP8TensorStorage``, ``NVFP4TensorStorage``,
  ``Float8BlockwiseQTensorStorage``, ``GroupedTensorStorage``, ...) is decomposed into raw
  buffers. During ``capture()`` we wrap that method on every storage class, so each buffer is
  known by its owner class and attribute *before* it reaches the pack hook (provenance, never
  dtype: these buffers are all uint8).
* §2.0: ``QuantizedTensor`` subclasses and ``GroupedTensor`` reach the hook whole; their inner
  buffers are read directly (``_INNER_TENSORS`` / the grouped buffer attributes).
* §2.1 / §2.4: the fuser flattens each basic op's ``to_save`` in op order and records each op's
  entry range (``ctx._saved_tensors_range``), which names operands and roles.

Importing this module imports TE; memaudit imports it only when the caller already did.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from transformer_engine.pytorch.quantized_tensor import QuantizedTensor, QuantizedTensorStorage
from transformer_engine.pytorch.tensor.storage.grouped_tensor_storage import GroupedTensorStorage

from memaudit.capture import hooks, stack
from memaudit.capture import tensors as tclass
from memaudit.capture.recorder import Plugin
from memaudit.report import Row
from memaudit.te.capture import cache, roles
from memaudit.te.capture.layout import BUFFER_SLOTS, GROUPED_SLOTS, SAVE_ORDER

if TYPE_CHECKING:
    from memaudit.capture.recorder import Capture

try:
    from transformer_engine.pytorch.tensor.grouped_tensor import GroupedTensor
except ImportError:  # pragma: no cover - older TE
    GroupedTensor = ()  # type: ignore[assignment,misc]

# attribute -> (kind, orientation): the shared table plus buffers only the classifier meets.
SLOTS: dict[str, tuple[str, str | None]] = {
    **BUFFER_SLOTS,
    # IdentityTensorStorage
    "_hp_data": ("tensor", None),
    # custom_recipes NVFP4TensorRef (§6)
    "data": ("data", "rowwise"),
    "data_t": ("data", "columnwise"),
    "scale_t": ("scale_inv", "columnwise"),
}
# The NVFP4TensorRef's "scale" is a rowwise scale_inv, not a grouped FP8 "scale".
_CLASS_SLOT_OVERRIDES = {("NVFP4TensorRef", "scale"): ("scale_inv", "rowwise")}

# Storage class -> format (§5.1). Grouped storages take their quantizer's format.
CLASS_FORMATS = {
    "Float8TensorStorage": "fp8",
    "Float8Tensor": "fp8",
    "MXFP8TensorStorage": "mxfp8",
    "MXFP8Tensor": "mxfp8",
    "NVFP4TensorStorage": "nvfp4",
    "NVFP4Tensor": "nvfp4",
    "Float8BlockwiseQTensorStorage": "fp8-block",
    "Float8BlockwiseQTensor": "fp8-block",
    "NVFP4TensorRef": "nvfp4-ref",
}
QUANTIZER_FORMATS = {
    "Float8Quantizer": "fp8",
    "Float8CurrentScalingQuantizer": "fp8",
    "MXFP8Quantizer": "mxfp8",
    "NVFP4Quantizer": "nvfp4",
    "Float8BlockQuantizer": "fp8-block",
}


def storage_format(obj: Any) -> str:
    """Format of a TE storage object: its class, or for grouped storage its quantizer."""
    for cls in type(obj).__mro__:
        if cls.__name__ in CLASS_FORMATS:
            return CLASS_FORMATS[cls.__name__]
    if isinstance(obj, GroupedTensorStorage):
        q = getattr(obj, "quantizer", None)
        if q is None:
            return tclass.format_of(getattr(obj, "fake_dtype", torch.float32))
        for cls in type(q).__mro__:
            if cls.__name__ in QUANTIZER_FORMATS:
                return QUANTIZER_FORMATS[cls.__name__]
        return type(q).__name__
    return type(obj).__name__


def _container_name(obj: Any) -> str:
    return type(obj).__name__


def slot_fields(
    cls: str, attr: str, fmt: str, shared_scale: bool, dtype: torch.dtype, warnings: list[str]
) -> dict[str, Any]:
    """Row fields for buffer ``attr`` of a TE object of class ``cls`` and format ``fmt``."""
    slot = _CLASS_SLOT_OVERRIDES.get((cls, attr)) or SLOTS.get(attr)
    fields: dict[str, Any] = {"container": cls, "slot": attr}
    if slot is None:
        msg = f"unknown TE buffer {cls}.{attr}: classified as kind 'tensor'"
        if msg not in warnings:
            warnings.append(msg)
        fields.update(kind="tensor", orientation=None, format=tclass.format_of(dtype))
        return fields
    kind, orientation = slot
    fields.update(kind=kind, orientation=orientation)
    fields["format"] = tclass.format_of(dtype) if kind == "metadata" else fmt
    if attr == "scale_inv" and shared_scale:
        fields["orientation"] = "both"  # FP8 current scaling shares one tensor (§5.2)
    return fields


def buffer_fields(obj: Any, attr: str, buf: torch.Tensor, warnings: list[str]) -> dict[str, Any]:
    """Row fields for buffer ``attr`` of TE object ``obj``."""
    shared = attr == "scale_inv" and getattr(obj, "columnwise_scale_inv", None) is buf
    return slot_fields(_container_name(obj), attr, storage_format(obj), shared, buf.dtype, warnings)


_FORMAT_CACHE: dict[tuple[type, type, Any], str] = {}


def cached_format(obj: Any) -> str:
    """``storage_format`` memoized by (class, quantizer class, fake dtype): the hot-path variant."""
    key = (type(obj), type(getattr(obj, "quantizer", None)), getattr(obj, "fake_dtype", None))
    fmt = _FORMAT_CACHE.get(key)
    if fmt is None:
        fmt = _FORMAT_CACHE[key] = storage_format(obj)
    return fmt


_NAMES_CACHE: dict[type, tuple[str, ...]] = {}


def slot_names(obj: Any) -> tuple[str, ...] | None:
    """The buffer attributes a storage object's ``prepare_for_saving`` returns, in that order:
    TE's own classes from te-internals §5.4, others as they declare them (``_INNER_TENSORS``);
    None where a class declares none (its __dict__ is looked at)."""
    cls = type(obj)
    names = _NAMES_CACHE.get(cls)
    if names is None:
        known = next((SAVE_ORDER[c.__name__] for c in cls.__mro__ if c.__name__ in SAVE_ORDER), None)
        if known is not None:
            names = known
        elif isinstance(obj, GroupedTensorStorage):
            names = GROUPED_SLOTS
        else:
            names = tuple(attr for attr, _ in getattr(cls, "_INNER_TENSORS", ()))
        _NAMES_CACHE[cls] = names
    return names or None


def inner_buffers(obj: Any) -> list[tuple[str, torch.Tensor]]:
    """Non-None buffers of a TE object, by attribute, in TE's slot order."""
    if isinstance(obj, GroupedTensorStorage):
        names: tuple[str, ...] = GROUPED_SLOTS
    else:
        names = tuple(attr for attr, _ in getattr(type(obj), "_INNER_TENSORS", ()))
    out = []
    for name in names:
        buf = getattr(obj, name, None)
        if isinstance(buf, torch.Tensor):
            out.append((name, buf))
    return out


@functools.lru_cache(maxsize=1)
def storage_classes() -> tuple[type, ...]:
    """Every TE storage class that defines its own ``prepare_for_saving`` (they exist once TE imports)."""
    found: list[type] = []
    stack: list[type] = [QuantizedTensorStorage, GroupedTensorStorage]
    seen: set[type] = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if "prepare_for_saving" in vars(cls):
            found.append(cls)
        stack.extend(cls.__subclasses__())
    return tuple(found)


def _warnings_sink() -> list[str]:
    caps = hooks.state().captures
    return caps[-1].warnings if caps else []


class _Plan:
    """How one storage class's ``prepare_for_saving`` output is named.

    ``names``: its buffer attributes in TE's slot order (te-internals §5.4), or None where the
    class declares none. ``positional``: TE returned the buffers in exactly that order on the
    first call seen in this process (checked by identity against the attributes it emptied), so
    later calls name the i-th returned tensor ``names[i]`` without reading any attribute first.
    ``shared``: positions of ``scale_inv`` and ``columnwise_scale_inv`` (one tensor object under
    both is FP8 current scaling's shared scale, §5.2). ``unknown``: declared names the slot
    table does not know (each gets a warning when it holds a buffer).
    """

    __slots__ = ("names", "positional", "checked", "shared", "unknown", "fns", "fmt")

    def __init__(self, cls: type, names: tuple[str, ...] | None) -> None:
        self.names = names
        # The format, where the class alone fixes it (every storage but grouped ones, §5.1).
        self.fmt = next((CLASS_FORMATS[c.__name__] for c in cls.__mro__ if c.__name__ in CLASS_FORMATS), None)
        self.positional = False
        self.checked = names is None  # nothing to check without declared slots: identity always
        self.shared: tuple[int, int] | None = None
        if names is not None and "scale_inv" in names and "columnwise_scale_inv" in names:
            self.shared = (names.index("scale_inv"), names.index("columnwise_scale_inv"))
        self.unknown = frozenset(n for n in names or () if n not in SLOTS)
        self.fns: dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}

    def slot_fns(self, cls: str, fmt: str, shared: bool) -> tuple[Any, ...]:
        """The provenance of each position: a function of the buffer's dtype giving its row fields
        (made once per format, unshared and shared; the unknown-slot warning is the wrapper's)."""
        fns = self.fns.get(fmt)
        if fns is None:
            fns = self.fns[fmt] = tuple(  # type: ignore[assignment]
                tuple(partial(slot_fields, cls, name, fmt, sh, warnings=[]) for name in self.names or ())
                for sh in (False, True)
            )
        return fns[shared]  # type: ignore[index]


_PLANS: dict[type, _Plan] = {}


def named_by_position(cls: type) -> bool | None:
    """Whether ``cls``'s buffers are named by their position in what TE returns (None: no call of
    its ``prepare_for_saving`` was checked yet in this process)."""
    plan = _PLANS.get(cls)
    return None if plan is None or not plan.checked else plan.positional


def forget_plans() -> None:
    """Check every class again on its next call (tests)."""
    _PLANS.clear()


def _plan(cls: type, obj: Any) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _Plan(cls, slot_names(obj))
    return plan


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    """``prepare_for_saving`` that, inside a capture, queues each returned buffer's provenance.

    Outside a capture it is one thread-local check and TE's own call. Inside, a class whose
    buffers TE returns in slot order (checked once per class, the first time it is seen) costs one
    cached lookup and, per returned buffer, a queue entry for the pack hook: nothing is read from
    the object but its class, quantizer class and fake dtype. Any other class is named by
    identity against the attributes read before TE empties them. Only names are taken here; the
    row fields are built in ``report()``, off the hot path.
    """
    local = hooks.thread_local
    note_buffers = hooks.note_buffers
    wref = weakref.ref

    def queue(obj: Any, state: Any, out: Any) -> Any:
        """Queue the provenance of what TE returned for ``obj`` (a positional class)."""
        tensors = out[0]
        cls = type(obj)
        plan = _PLANS[cls]
        names = plan.names or ()  # a positional plan has its names
        if len(tensors) != len(names):  # TE changed the layout under us: name by identity from now on
            plan.positional = False
            state.captures[-1].warnings.append(
                f"TE's {cls.__name__}.prepare_for_saving returned {len(tensors)} buffers, not the {len(names)} "
                "of its slot order: this call's buffers are unclassified"
            )
            return out
        pair = plan.shared
        shared = pair is not None and tensors[pair[0]] is not None and tensors[pair[0]] is tensors[pair[1]]
        fmt = plan.fmt or cached_format(obj)
        both = plan.fns.get(fmt)
        fns = both[shared] if both is not None else plan.slot_fns(cls.__name__, fmt, shared)
        prov = state.provenance
        for t, fn in zip(tensors, fns):  # noqa: B905 - equal lengths, checked above
            if t is not None:
                key = id(t)  # hooks.note, inline
                known = prov.get(key)
                if known is None or known[0]() is not t:
                    prov[key] = (wref(t), fn)
                else:
                    prov[key] = (*known, fn)
        if plan.unknown:
            _warn_unknown(plan, cls.__name__, tensors, state.captures[-1].warnings)
        return out

    if _takes_only_self(original):  # every TE 2.20.2 storage class: no *args/**kwargs to forward

        def prepare_for_saving(obj: Any) -> Any:
            state = local.state
            if not state.captures:
                return original(obj)
            plan = _PLANS.get(type(obj))
            if plan is not None and plan.positional:
                return queue(obj, state, original(obj))
            return _by_identity(original, _plan(type(obj), obj), obj, state, (), {})

    else:

        def prepare_for_saving(obj: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            state = local.state
            if not state.captures:
                return original(obj, *args, **kwargs)
            plan = _PLANS.get(type(obj))
            if plan is not None and plan.positional:
                return queue(obj, state, original(obj, *args, **kwargs))
            return _by_identity(original, _plan(type(obj), obj), obj, state, args, kwargs)

    def _by_identity(original: Callable[..., Any], plan: _Plan, obj: Any, state: Any, args: Any, kwargs: Any) -> Any:
        names = plan.names
        if names is None:  # no declared slots: every tensor attribute, in __dict__ order
            items = [(name, buf) for name, buf in vars(obj).items() if isinstance(buf, torch.Tensor)]
            names = tuple(name for name, _ in items)
            held: list[Any] = [buf for _, buf in items]
        else:
            held = [getattr(obj, name, None) for name in names]
        cls = type(obj).__name__
        fmt = cached_format(obj)
        scale_inv = getattr(obj, "scale_inv", None)
        shared = scale_inv is not None and scale_inv is getattr(obj, "columnwise_scale_inv", None)
        tensors, self_obj = original(obj, *args, **kwargs)
        warnings = state.captures[-1].warnings
        attrs: list[str | None] = []
        noted = []
        for i, t in enumerate(tensors):
            name = None
            if t is not None:
                # TE returns the buffers in slot order (te-internals §5.4): try that slot first.
                j = i if i < len(held) and held[i] is t else next((k for k, buf in enumerate(held) if buf is t), -1)
                if j >= 0:
                    name = names[j]
                    held[j] = None  # the next return of the same tensor takes its next attribute
                    noted.append((t, partial(slot_fields, cls, name, fmt, shared, warnings=warnings)))
            attrs.append(name)
        note_buffers(state, noted)
        hooks.note_decomposed(self_obj, attrs)
        if not plan.checked and any(t is not None for t in tensors):
            # The first call of a declared class that returned a buffer: positional from now on if
            # every buffer sat in its own slot (a failed check keeps this class on identity).
            plan.checked = True
            plan.positional = len(tensors) == len(plan.names) and all(  # type: ignore[arg-type]
                t is None or a == n
                for t, a, n in zip(tensors, attrs, plan.names, strict=True)  # type: ignore[arg-type]
            )
        return tensors, self_obj

    prepare_for_saving.__wrapped__ = original  # type: ignore[attr-defined]
    return prepare_for_saving


def _takes_only_self(fn: Callable[..., Any]) -> bool:
    """True when ``fn(self)`` is its whole signature."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return False
    return len(params) == 1 and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD)


def _warn_unknown(plan: _Plan, cls: str, tensors: list[Any], warnings: list[str]) -> None:
    for name, t in zip(plan.names or (), tensors, strict=True):
        if t is not None and name in plan.unknown:
            msg = f"unknown TE buffer {cls}.{name}: classified as kind 'tensor'"
            if msg not in warnings:
                warnings.append(msg)


_INSTALLED: dict[type, Callable[..., Any]] = {}


_ROOTS_SEEN: list[tuple[int, int]] = [(-1, -1)]


def install_provenance() -> None:
    """Wrap ``prepare_for_saving`` on every TE storage class, once per class and process.

    The wrappers are inert outside a capture (one thread-local check), so no capture pays for
    patching classes, and nested captures share one set of wrappers.
    """
    # A storage class defined since the last capture (a custom recipe imported later) is found
    # by the count of the roots' direct subclasses changing: two C calls per capture, no walk.
    seen = (len(QuantizedTensorStorage.__subclasses__()), len(GroupedTensorStorage.__subclasses__()))
    if seen != _ROOTS_SEEN[0]:
        _ROOTS_SEEN[0] = seen
        storage_classes.cache_clear()
    elif len(_INSTALLED) == len(storage_classes()):  # every later capture: nothing to do
        return
    for cls in storage_classes():
        if cls not in _INSTALLED:
            original = vars(cls)["prepare_for_saving"]
            _INSTALLED[cls] = original
            cls.prepare_for_saving = _wrap(original)  # type: ignore[attr-defined]  # TE's storage classes have it


def original_prepare_for_saving(cls: type) -> Callable[..., Any]:
    """TE's own method for ``cls``, whether or not memaudit wrapped it."""
    return _INSTALLED.get(cls) or vars(cls)["prepare_for_saving"]


def _offload_hook_kind(pack: Callable[..., Any]) -> str | None:
    """TE's CPU offload pushes ``OffloadSynchronizer.push_tensor`` (te-internals §7.2)."""
    owner = getattr(pack, "__self__", None)
    if owner is not None and type(owner).__module__.startswith("transformer_engine.pytorch.cpu_offload"):
        return "te-offload"
    return None


class TEClassifier(Plugin):
    """Capture plugin: provenance from ``prepare_for_saving``, whole objects, and the grouped MLP's roles
    (:mod:`memaudit.te.capture.roles`)."""

    def install(self) -> None:
        install_provenance()
        stack.register_hook_namer(_offload_hook_kind)

    def uninstall(self) -> None:
        """Nothing to undo: the wrappers are inert outside a capture."""

    def resides(self, hook_kind: str | None, payload: Any) -> str | None:
        """TE's offload returns an int index for a tensor it moves to the host (cpu_offload.py:366-400)."""
        if hook_kind == "te-offload" and isinstance(payload, int):
            return "host"
        return None

    # -- whole objects at the hook ------------------------------------------------------------
    def expand(self, t: torch.Tensor) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any], torch.Tensor]]] | None:
        if not isinstance(t, QuantizedTensor | GroupedTensor):
            return None
        is_param = isinstance(t, torch.nn.Parameter)
        container = {
            "kind": "container",
            "format": storage_format(t),
            "shape": list(t.shape),
            "dtype": tclass.dtype_name(t.dtype),
            "bytes": 0,
            "device": str(t.device),
            "is_parameter": is_param,
            "container": _container_name(t),
        }
        inner = []
        for name, buf in inner_buffers(t):
            fields = buffer_fields(t, name, buf, _warnings_sink())
            fields["is_parameter"] = is_param
            inner.append((name, fields, buf))
        return container, inner

    # -- roles from the fuser ------------------------------------------------------------------
    def annotate(self, rows: list[Row], cap: Capture) -> list[Row]:
        rows = cache.mark_cached(list(rows), cap)  # cached FP8 weights, counted apart (te-internals §13)
        fusers = [n for n in cap.walk_nodes if hasattr(n, "basic_op_ctxs") and hasattr(n, "tensor_objects")]
        functions = [n for n in cap.walk_nodes if roles.function_of(n) is not None]
        if not fusers and not functions:
            return rows
        # Each fuser node names only the rows it holds (matched by the node's sequence number, so
        # layers of a stack are told apart), and containers find their buffers in one pass.
        by_node: dict[int, list[int]] = {}
        for index, seq in getattr(cap, "walk_row_nodes", {}).items():
            by_node.setdefault(seq, []).append(index)
        children: dict[int, list[int]] = {}
        for r in rows:
            if r.container_index is not None:
                children.setdefault(r.container_index, []).append(r.index)
        for node in fusers:  # a node none of whose rows is live names nothing
            label_fuser_rows(node, rows, by_node.get(node._sequence_nr(), []), children)
        for node in functions:  # te.Linear's, te.LayerNormLinear's Function (te-internals §12)
            objects = getattr(node, "tensor_objects", None)
            if objects is None:  # backward already restored them: the order cannot be read
                continue
            warning = roles.name_function_rows(
                node, rows, _entry_counts(list(objects)), by_node.get(node._sequence_nr(), []), children
            )
            if warning is not None and warning not in cap.warnings:
                cap.warnings.append(warning)
        return rows


def _entry_counts(tensor_objects: list[Any]) -> list[int]:
    counts = []
    for obj in tensor_objects:
        if obj is None:
            counts.append(1)
            continue
        # Named by identity: as many entries as it returned. Named by position: its save order's
        # length, which the wrapper checked against what TE returned.
        attrs = hooks.decomposed(obj)
        counts.append(len(attrs) if attrs is not None else len(slot_names(obj) or ()) or 1)
    return counts


def label_fuser_rows(
    node: Any, rows: list[Row], mine: list[int] | None = None, children: dict[int, list[int]] | None = None
) -> None:
    """Name operands of the rows a TE ``OperationFuser`` saved (:func:`memaudit.te.capture.roles.name_rows`,
    the grouped MLP's roles), with each ``to_save`` entry's buffer count as this module reads it."""
    roles.name_rows(node, rows, _entry_counts(list(node.tensor_objects)), mine, children)

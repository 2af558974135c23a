"""The saved-tensor hook layers: record every pack, and stay invisible to autograd.

A *layer* is one ``(pack, unpack)`` pair on PyTorch's thread-local saved-tensors hook stack.
``capture()`` pushes one; while a capture is active in a thread, every pair that code pushes
there (``save_on_cpu``, non-reentrant ``checkpoint``, TE's CPU offload, a user's hooks, a nested
``capture()``) is pushed wrapped in a layer too, so memaudit records every tensor autograd saves
in that thread whichever pair PyTorch calls (PyTorch calls only the innermost one).

What makes a layer invisible:

* **Composition.** A layer delegates to the pair it stands for (the foreign pair it wraps, or the
  pair that was on top when the capture started): that pair's pack and unpack run exactly as
  they would without memaudit, and their result is what autograd gets back.
* **In-place check.** PyTorch skips its saved-version check whenever hooks are active
  (``SavedVariable::unpack``). A layer that stands for no other pair records ``t._version`` when
  it packs and raises PyTorch's own error at unpack if the tensor was modified in place. Under a
  foreign pair PyTorch would not check either, so neither does memaudit.
* **No cycles.** An output of the node being built (tanh, relu, exp save their result) is kept as
  a detached alias (same storage, same version counter, no ``grad_fn``), so it does not hold its
  own node alive; autograd re-attaches the edge when it unpacks. A layer never stores its pack
  function: the graph holds it from C++, where the garbage collector cannot look.
* **No extra lifetime.** memaudit's records hold weak references only: to the object autograd
  keeps (which also tells when autograd released it) and to storages (which name them).
* **Never raises.** A pack that memaudit cannot describe becomes a record with a warning.

Nothing here reads tensor data or syncs a device. Pushing layers and routing foreign pairs
through them is :mod:`memaudit.capture.stack`.
"""

from __future__ import annotations

import contextvars
import math
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch._C._autograd as _autograd_c

from memaudit.capture.tensors import (
    Buffer,
    buffer_of,
    dtype_name,
    format_of,
    has_real_storage,
    inner_tensors,
    is_parameter,
    is_wrapper_subclass,
)

if TYPE_CHECKING:
    from memaudit.capture.modules import Frame
    from memaudit.capture.recorder import Capture
    from memaudit.capture.stack import labelled

_Tensor = torch.Tensor
_BackwardCFunction = torch.autograd.function.BackwardCFunction
# The sequence number the next autograd node in this thread gets. Where torch does not expose it,
# every non-leaf tensor is taken for an output of the node being built (kept as an alias: safe).
_next_sequence_nr = getattr(_autograd_c, "_get_sequence_nr", lambda: -1)
_Parameter = torch.nn.Parameter
_wref = weakref.ref


class Record(weakref.ref):
    """One pack-hook call: what was packed (metadata only) and how to tell if it is still kept.

    A record is a weak reference to the object autograd holds for the saved tensor (``rec()`` is
    that object while autograd keeps it, None once it was released): one allocation does both.
    ``raw`` is the hot-path tuple for a plain tensor; ``buffers`` the described buffers of anything
    else (``(name, Buffer)``; name is the attribute inside a container). Rarely set attributes are
    class-level defaults; the hot path sets only slots (no instance dict is made).
    """

    __slots__ = ("raw", "version", "output_nr", "is_output", "frame", "__dict__")

    raw: tuple[Any, ...] | None
    version: int
    output_nr: int | None  # a non-leaf's output_nr when packed (PyTorch's in-place message names it)
    is_output: bool  # packed as an output of the node being built (kept as a detached alias)
    frame: Frame | None  # the module call that was innermost when packed (modules.py)
    # Set by report()'s walk only (the pack leaves them to these class-level defaults).
    op: str | None = None  # the node that holds it, once report()'s walk named it
    slot: str | None = None  # the node's attribute (saved_tensors[k], _saved_self, ...)
    node_seq: int | None = None  # sequence number of the Python autograd node that holds it (set by the walk)
    buffers: list[tuple[str | None, Buffer]] | None = None
    container: dict[str, Any] | None = None
    hook: HookInfo | None = None
    context: tuple[str, str] | None = None
    warning: str | None = None
    resides: str | None = None  # set when the pack already knows (an unreadable tensor)
    source: tuple[str, int] | None = None  # (file, line) of the user frame, under capture(stack=True)

    @property
    def ref(self) -> Record:
        """The weak reference to what autograd holds: the record itself."""
        return self

    def described(self) -> list[tuple[str | None, Buffer]]:
        """The buffers, building the plain-tensor one from ``raw`` on first use."""
        if self.buffers is None:
            shape, dtype, device, sref, nbytes, offset, is_param, fields = self.raw  # type: ignore[misc]
            elt = dtype.itemsize
            numel = math.prod(shape)
            self.buffers = [
                (None, Buffer(tuple(shape), dtype, device, sref, nbytes, offset * elt, numel * elt, is_param, fields))
            ]
        return self.buffers

    @property
    def dtype(self) -> torch.dtype:
        if self.raw is not None:
            return self.raw[1]
        if self.container is not None:
            return self.container["_dtype"]
        bufs = self.described()
        return bufs[0][1].dtype if bufs else torch.float32

    def alive(self) -> bool:
        """True while autograd still holds what this pack returned."""
        return self() is not None

    def payload(self) -> Any:
        """What the delegated pair packed (only meaningful for records made under a foreign pair)."""
        saved = self()
        return None if saved is None else saved.value


class _Saved:
    """What a layer's pack returns to autograd: the kept value (or the delegate's payload) and its
    record. Made without ``__init__`` on the hot path (``_Saved()`` then two slot stores)."""

    __slots__ = ("value", "rec", "__weakref__")

    value: Any
    rec: Record


def new_record(value: Any, on_release: Callable[[Record], None] | None = None) -> tuple[_Saved, Record]:
    """What a pack returns for ``value`` and its record (``raw`` None, version -1: to be filled)."""
    saved = _Saved()
    saved.value = value
    rec = Record(saved, on_release)
    saved.rec = rec
    rec.raw = None
    rec.version = -1
    rec.output_nr = None
    rec.is_output = False
    rec.frame = None
    return saved, rec


class HookInfo:
    """A foreign pair, described without holding it: its name and the kind a plugin or torch gives it."""

    __slots__ = ("name", "kind", "frame")

    def __init__(self, name: str, kind: str | None, frame: Any = None) -> None:
        self.name = name
        self.kind = kind
        self.frame = frame
        """A weak reference to non-reentrant checkpoint's frame (selective checkpointing keeps its
        cached outputs there, outside any hook), or None."""


TASK_CAPTURES: contextvars.ContextVar[tuple[Capture, ...]] = contextvars.ContextVar(
    "memaudit_task_captures", default=()
)
"""The captures entered in the current asyncio task (and the tasks it started): a capture entered
inside a task records only the saves of that context, not those of other tasks sharing the thread."""


class ThreadState:
    """Per-thread capture state: active captures, the graph walk in progress, provenance."""

    def __init__(self) -> None:
        self.captures: list[Capture] = []
        self.walking: list[Record] | None = None
        self.context: labelled | None = None
        # id(buffer) -> (weakref to buffer, fields per expected pack...): see note_buffer
        self.provenance: dict[int, tuple[Any, ...]] = {}
        # id(storage object) -> (weakref, [attribute per decomposed tensor]); see note_decomposed
        self.decomposed: dict[int, tuple[Callable[[], Any], list[str | None]]] = {}
        # Module calls (memaudit.capture.modules): the open ones, the innermost, every one opened
        # since the first capture in this thread started, and the qualified names of each root.
        self.frames: list[Frame] = []
        self.frame: Frame | None = None
        self.spans: list[Frame] = []
        # id(module) -> [weak reference, name, calls(, None where the name is no path | class -> named under it)]
        self.names: dict[int, list[Any]] | None = None
        self.roots: dict[int, tuple[Callable[[], Any], dict[int, list[Any]]]] = {}
        # While Dynamo compiles in another thread (no module hook runs): id(frame) -> the Python
        # frame of its ``Module._call_impl``, for the calls that stack reads matched or opened.
        self.window: dict[int, Any] = {}
        self.ident = threading.get_ident()
        self.sources = 0  # active captures in this thread that record source lines (stack=True)
        self.tracking = 0  # active captures in this thread that name modules (modules=True)
        self.naming = 0  # active captures in this thread that name records early (name_early=True)
        self.clean = True  # the module calls are as reset() leaves them (no capture pushed since)


def _take(prov: dict[int, tuple[Any, ...]], t: Any) -> Any:
    """The classifier fields queued for ``t`` in ``prov`` (each pack of it takes the next), or None."""
    key = id(t)
    known = prov.get(key)
    if known is None:
        return None
    if known[0]() is not t:  # the tensor noted under this id is gone: the id was reused
        del prov[key]
        return None
    if len(known) == 2:
        del prov[key]
    else:
        prov[key] = (known[0], *known[2:])
    return known[1]


_walks = 0
"""Graph walks in progress in any thread (:class:`memaudit.capture.stack.walking`): while it is 0,
an unpack needs no thread-local read to know that no walk is asking."""


_walks_lock = threading.Lock()

unpack_watch: Callable[[], None] | None = None
"""Called at every unpack while an ``--unread`` analysis observes backward
(:func:`memaudit.capture.reads.observing`), in the thread that unpacks; None otherwise."""


def walk_started() -> None:
    """A graph walk starts reading saved attributes (in some thread)."""
    global _walks
    with _walks_lock:
        _walks += 1


def walk_ended() -> None:
    """A graph walk is done."""
    global _walks
    with _walks_lock:
        _walks -= 1


_states: weakref.WeakSet[ThreadState] = weakref.WeakSet()


class _Local(threading.local):
    def __init__(self) -> None:
        self.state = ThreadState()
        _states.add(self.state)


def thread_states() -> list[ThreadState]:
    """The capture state of every thread that has one (alive or not yet collected)."""
    return list(_states)


compiling_in: int | None = None
"""The thread in which Dynamo compiles while ``Module.__call__`` has torch's code again
(:mod:`memaudit.capture.modules`), or None."""


def compile_window(thread: int | None) -> None:
    """Dynamo starts (``thread``) or ends (None) compiling with module tracking out of the way."""
    global compiling_in
    compiling_in = thread


def _in_compile_window(layer: Layer, rec: Record, state: ThreadState) -> None:
    """A save while another thread compiles: no module hook runs anywhere, so the module calls
    open in this thread are read off its Python stack (:func:`memaudit.capture.modules.from_stack`).
    Where that fails, the save names no module, and each capture says so once."""
    if threading.get_ident() == compiling_in:
        return
    if not state.tracking:
        return
    read = from_stack
    if read is not None:
        try:
            rec.frame = read(state)
            return
        except Exception:  # noqa: BLE001 - the hook never raises: the row names no module
            pass
    rec.frame = None
    for cap in layer.recorders:
        if COMPILE_WINDOW not in cap.warnings:
            cap.warnings.append(COMPILE_WINDOW)


from_stack: Callable[[ThreadState], Frame | None] | None = None
"""Set by :mod:`memaudit.capture.modules`: this thread's innermost module call, its stack of calls
first made what its Python stack says (while Dynamo compiles in another thread)."""


COMPILE_WINDOW = (
    "some rows were saved in a thread while torch.compile compiled in another: no module hook runs anywhere "
    "meanwhile (they are taken out of torch's global dicts so that Dynamo compiles as bare), and the module calls "
    "could not be read off that thread's Python stack, so those rows name no module"
)


_local = _Local()
thread_local = _local
"""``thread_local.state`` is this thread's :class:`ThreadState` (what :func:`state` returns; the
module tracking reads it directly, as it runs on every module call)."""


def state() -> ThreadState:
    """This thread's capture state."""
    return _local.state


def recording() -> bool:
    """True while a capture is active in this thread (classifier wrappers are inert otherwise)."""
    return bool(_local.state.captures)


def note_buffer(t: torch.Tensor, fields: Any) -> None:
    """A classifier learned what buffer ``t`` is before it reaches the hook (provenance).

    One tensor can be handed over more than once (a storage object may hold one tensor under two
    attributes): the fields queue up, and each pack of the tensor takes the next. ``fields`` is
    a dict of row fields, or a function of the buffer's dtype that returns them.
    """
    note(_local.state.provenance, t, fields)


def note(prov: dict[int, tuple[Any, ...]], t: torch.Tensor, fields: Any) -> None:
    """:func:`note_buffer` into a thread's ``provenance`` (classifiers' hot path)."""
    key = id(t)
    known = prov.get(key)
    if known is None or known[0]() is not t:
        prov[key] = (_wref(t), fields)
    else:
        prov[key] = (*known, fields)


def note_buffers(state: ThreadState, noted: list[tuple[torch.Tensor, Any]]) -> None:
    """:func:`note_buffer` for each ``(tensor, fields)``, into ``state`` (one call per object)."""
    prov = state.provenance
    for t, fields in noted:
        note(prov, t, fields)


def note_decomposed(obj: Any, attrs: list[str | None]) -> None:
    """A classifier saw storage object ``obj`` decomposed into tensors named ``attrs``."""
    _local.state.decomposed[id(obj)] = (_weak(obj), attrs)


def decomposed(obj: Any) -> list[str | None] | None:
    """The attribute names ``note_decomposed`` recorded for ``obj`` (this thread), or None."""
    rec = _local.state.decomposed.get(id(obj))
    return rec[1] if rec is not None and rec[0]() is obj else None


# ---- layers -----------------------------------------------------------------------------------
class Layer:
    """One (pack, unpack) pair memaudit pushed, recording into ``recorders``.

    ``delegate`` is the foreign pair this layer stands for, or None (then the layer keeps the
    tensor itself and checks its version at unpack, as PyTorch does without hooks).
    """

    def __init__(
        self,
        recorders: list[Capture],
        delegate: tuple[Callable[..., Any], Callable[..., Any]] | None,
        hook: HookInfo | None,
        expand: Callable[[Any], Any],
    ) -> None:
        self.recorders = recorders
        # The usual case, one capture entered outside any asyncio task: the pack appends to it
        # directly (a capture's task is set when it is entered, before its layers are pushed).
        self.single = recorders[0] if len(recorders) == 1 and recorders[0].task is None else None
        pair: tuple[Any, Any] = delegate if delegate is not None else (None, None)
        self.delegate_pack, self.delegate_unpack = pair  # on the layer: each pack and unpack reads them
        self.hook = hook
        self.expand = expand
        self.state = _local.state
        self.on_release: Callable[[Record], None] | None = None
        for cap in recorders:  # no list is built in the usual case (no capture tracks the peak)
            if cap.track_peak:
                self.on_release = _releaser([c for c in recorders if c.track_peak])
                break

    orphaned: Callable[[], None] | None = None
    """Set when its capture was exited in another thread: the next capture entered here pops the
    layer and calls it (ending that capture's region in this thread)."""

    @property
    def pack(self) -> Callable[[Any], Any]:
        """The pack function to push. Made on each read and never stored on the layer: the graph
        holds it from C++, where the garbage collector cannot see, so a layer -> pack -> layer
        cycle would be freed only by later collections (and a dropped graph would linger)."""
        return self._pack if self.delegate_pack is None else _ForwardingPack(self, self.delegate_pack)

    def _pack(self, t: Any) -> Any:
        """Pack under no foreign pair: keep ``t`` (or a detached alias), remember its version.

        A plain tensor (nearly every pack) is recorded inline: one tuple of metadata, the
        provenance a classifier queued for it, the module call, and a record that is itself the
        weak reference to what autograd keeps. Everything else goes through :meth:`_describe`.
        """
        state = self.state
        tp = type(t)
        plain = tp is _Tensor or tp is _Parameter
        if plain:
            saved = _Saved()
            rec = Record(saved, self.on_release)
            saved.rec = rec
            fields = None
            prov = state.provenance
            if prov:  # a classifier queued what this tensor is (_take, inline)
                key = id(t)
                known = prov.get(key)
                if known is not None:
                    if known[0]() is t:
                        fields = known[1]
                        if len(known) == 2:
                            del prov[key]
                        else:
                            prov[key] = (known[0], *known[2:])
                    else:
                        del prov[key]
            try:
                st = t.untyped_storage()
                base = t._base
                rec.raw = (
                    t.shape,
                    t.dtype,
                    t.device,
                    _wref(st),
                    st.nbytes(),
                    t.storage_offset(),
                    tp is _Parameter or (base is not None and _is_parameter_base(base)),
                    fields,
                )
            except Exception as exc:  # noqa: BLE001 - the hook never raises: say what could not be read
                rec.raw = None
                self._odd(rec, t, exc)
        else:
            saved, rec = new_record(None, self.on_release)
            self._describe(rec, t, state)
        rec.output_nr = None
        rec.is_output = False
        version = -1
        try:
            version = t._version
            # None for a leaf: what is_leaf says, in the read the next lines need (a subclass is
            # asked is_leaf first: its grad_fn may be a property that warns)
            fn = t.grad_fn if plain or not t.is_leaf else None
            if fn is not None:
                rec.output_nr = t.output_nr
                # An output of the node being built (tanh, relu, exp save their result) has that
                # node, the newest in this thread, as grad_fn: keeping it would make a
                # node -> tensor -> node cycle that C++ holds. Keep an alias without grad_fn
                # (same storage and version counter); every other tensor is kept as given.
                newest = _next_sequence_nr() - 1
                if newest < 0 or fn._sequence_nr() == newest:
                    rec.is_output = True
                    t = t.detach()
        except Exception:  # noqa: BLE001 - an object torch cannot version or detach: keep it as given
            pass
        rec.version = version
        saved.value = t
        rec.frame = state.frame
        if compiling_in is not None:
            _in_compile_window(self, rec, state)
        if state.context is not None:
            rec.context = state.context.next()
        if state.sources:
            rec.source = user_frame()
        single = self.single
        if single is not None:
            if single.active:
                single.records.append(rec)
        else:
            self._file(rec)
        return saved

    def pack_delegated(self, t: Any) -> Any:
        """Pack under a foreign pair: its pack runs first and as without memaudit."""
        payload = self.delegate_pack(t)  # type: ignore[misc]
        saved, rec = new_record(payload, self.on_release)
        state = self.state
        self._describe(rec, t, state)
        rec.hook = self.hook
        rec.frame = state.frame
        if compiling_in is not None:
            _in_compile_window(self, rec, state)
        if state.context is not None:
            rec.context = state.context.next()
        if state.sources:
            rec.source = user_frame()
        self._file(rec)
        return saved

    def _file(self, rec: Record) -> None:
        """Append ``rec`` to every active capture this layer records into."""
        for cap in self.recorders:
            if cap.active and (cap.task is None or cap in TASK_CAPTURES.get()):
                cap.records.append(rec)

    def _describe(self, rec: Record, t: Any, state: ThreadState) -> None:
        """Fill ``rec`` with what ``t`` is (any object autograd saved); never raises."""
        try:
            tp = type(t)
            if tp is _Tensor or tp is _Parameter:
                st = t.untyped_storage()
                base = t._base
                prov = state.provenance
                rec.raw = (
                    t.shape,
                    t.dtype,
                    t.device,
                    _wref(st),
                    st.nbytes(),
                    t.storage_offset(),
                    tp is _Parameter or (base is not None and _is_parameter_base(base)),
                    _take(prov, t) if prov else None,
                )
            else:
                self._describe_object(rec, t, state)
        except Exception as exc:  # noqa: BLE001 - the hook never raises: say what could not be read
            rec.raw = None
            self._odd(rec, t, exc)

    @staticmethod
    def _odd(rec: Record, t: Any, exc: BaseException) -> None:
        """A tensor the plain path could not read: a nested tensor is described by its storage;
        anything else becomes an unknown row (never raises)."""
        try:
            if t.is_nested and t.layout == torch.strided:
                describe_nested(rec, t)
                return
        except Exception:  # noqa: BLE001 - fall through to the unknown row
            rec.buffers = None
        _unreadable(rec, t, exc)

    def _describe_object(self, rec: Record, t: Any, state: ThreadState) -> None:
        expanded = self.expand(t)
        if expanded is not None:
            container, inner = expanded
            rec.container = container
            rec.buffers = [
                (name, buffer_of(buf, fields, is_param=fields.get("is_parameter"))) for name, fields, buf in inner
            ]
        elif isinstance(t, torch.Tensor) and is_wrapper_subclass(t):
            is_param = is_parameter(t)
            rec.container = container_fields(t, type(t).__name__, format_of(t.dtype), is_param)
            rec.buffers = [
                (name, buffer_of(buf, {"container": type(t).__name__}, is_param=is_param))
                for name, buf in inner_tensors(t)
            ]
        elif isinstance(t, torch.Tensor):
            prov = state.provenance
            buf = buffer_of(t, _take(prov, t) if prov else None)
            if not has_real_storage(t):
                buf.sref, buf.storage_bytes, buf.offset = None, 0, 0
                rec.warning = (
                    f"a saved {type(t).__name__} has no storage memaudit can read and no __tensor_flatten__: "
                    "where its memory lives is unknown (counted as logical bytes only; case incomplete)"
                )
                buf.fields = {"kind": "unknown", "container": type(t).__name__}
                rec.resides = "unknown"
            rec.buffers = [(None, buf)]
        else:
            raise TypeError(f"autograd saved a {type(t).__name__}, not a tensor")

    def unpack(self, saved: Any) -> Any:
        if unpack_watch is not None:  # an --unread analysis follows this thread's calls from here on
            unpack_watch()
        if (
            _walks and _local.state.walking is not None
        ):  # report() is naming rows: answer without running anyone's unpack
            _local.state.walking.append(saved.rec)
            return placeholder(saved)
        if self.delegate_unpack is not None:
            return self.delegate_unpack(saved.value)
        value = saved.value
        rec = saved.rec
        # is_leaf: grad_fn is None, without making the node's Python object
        if rec.output_nr is not None and not rec.is_output and value.is_leaf and _unpacked_for_nobody():
            raise RuntimeError(DETACHED_INPLACE)
        if value._version != rec.version:
            raise RuntimeError(version_error(value, rec))
        return value


# torch.utils.checkpoint looks for "the user's pair" under its own (``_current_user_saved_tensors_hooks``:
# selective checkpointing warns about one and may route its cached outputs through it). A capture's
# own layer is no user's pair: it reads as checkpoint-internal with no user pair below it, as bare.
# A layer that stands for a foreign pair forwards these attributes to it (_ForwardingPack).
Layer._pack._checkpoint_internal = True  # type: ignore[attr-defined]
Layer._pack._user_hooks = None  # type: ignore[attr-defined]


def _releaser(caps: list[Capture]) -> Callable[[Record], None]:
    """The callback that tells ``caps`` when autograd released a record (for the peak: each notes
    how many packs it had seen by then)."""

    def released(rec: Record) -> None:
        for cap in caps:
            cap.released.append((rec, len(cap.records)))

    return released


class _ForwardingPack:
    """The pack of a layer that stands for a foreign pair.

    Attribute reads fall through to the foreign pack function, so code that inspects the pack
    on top of the stack (``torch.utils.checkpoint`` reads ``_checkpoint_internal`` and
    ``_user_hooks``) sees what it would see without memaudit.
    """

    __slots__ = ("layer", "wrapped")

    def __init__(self, layer: Layer, wrapped: Callable[..., Any]) -> None:
        self.layer = layer
        self.wrapped = wrapped

    def __call__(self, t: Any) -> Any:
        return self.layer.pack_delegated(t)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def placeholder(saved: _Saved) -> Any:
    """What the walk's unpack returns: the kept tensor itself, or an empty meta stand-in."""
    value = saved.value
    if isinstance(value, torch.Tensor) and saved.rec.hook is None:
        return value
    return torch.empty(0, dtype=saved.rec.dtype, device="meta")


def container_fields(t: torch.Tensor, name: str, fmt: str, is_param: bool) -> dict[str, Any]:
    """Row fields of a tensor subclass saved whole: a 0-byte container row."""
    return {
        "kind": "container",
        "format": fmt,
        "shape": list(t.shape),
        "dtype": dtype_name(t.dtype),
        "_dtype": t.dtype,
        "bytes": 0,
        "device": str(t.device),
        "is_parameter": is_param,
        "container": name,
    }


def _unreadable(rec: Record, t: Any, exc: BaseException) -> None:
    """Make ``rec`` say that ``t`` could not be described (a 0-byte row and a warning). Reads only
    what ``t`` answers without raising: this runs inside the pack hook, which must never raise."""
    rec.buffers = []
    what = type(t).__name__
    rec.warning = f"a saved {what} could not be described ({type(exc).__name__}: {exc}); its bytes are not counted"
    shape, dtype, device = _safe(t, "shape"), _safe(t, "dtype"), _safe(t, "device")
    try:
        dims = [int(d) for d in shape] if shape is not None else []
    except Exception:  # noqa: BLE001 - symbolic or odd sizes
        dims = []
    known = isinstance(dtype, torch.dtype)
    rec.container = {
        "kind": "unknown",
        "format": format_of(dtype) if known else "?",
        "shape": dims,
        "dtype": dtype_name(dtype) if known else "?",
        "_dtype": dtype if known else torch.float32,
        "bytes": 0,
        "device": str(device) if device is not None else "?",
        "is_parameter": False,
        "container": what,
    }
    rec.resides = "unknown"


def _safe(t: Any, attr: str) -> Any:
    try:
        return getattr(t, attr, None)
    except Exception:  # noqa: BLE001 - a nested tensor's shape raises RuntimeError
        return None


def describe_nested(rec: Record, t: torch.Tensor) -> None:
    """A strided nested tensor (``torch.nested``, the default layout): its sizes are not one shape,
    but its buffer is a storage like any other, counted once by storage. The row's shape is
    ``[components, -1, ...]`` (no component sizes are read: they are tensor data)."""
    st = t.untyped_storage()
    elt = t.element_size()
    n = t.numel()
    shape = (t.size(0),) + (-1,) * (t.dim() - 1)
    rec.buffers = [
        (
            None,
            Buffer(
                shape,
                t.dtype,
                t.device,
                _wref(st),
                st.nbytes(),
                t.storage_offset() * elt,  # type: ignore[arg-type]
                n * elt,
                False,
                {"container": "nested"},
            ),
        )
    ]


_SKIPPED_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (torch, sys.modules[__name__.partition(".")[0]]) if m.__file__
)
_skipped: dict[str, bool] = {}


def user_frame() -> tuple[str, int] | None:
    """(file, line) of the innermost Python frame outside torch and memaudit: the user code whose
    operation saved the tensor being packed (only under ``capture(stack=True)``)."""
    f: Any = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        skip = _skipped.get(name)
        if skip is None:
            skip = _skipped[name] = name.startswith(_SKIPPED_DIRS) or name.startswith("<frozen")
        if not skip:
            return name, f.f_lineno
        f = f.f_back
    return None


def _is_parameter_base(base: Any) -> bool:
    """``isinstance(base, Parameter)`` without ``_ParameterMeta.__instancecheck__`` for the usual
    cases (a plain tensor, a Parameter); a subclass still takes the full check."""
    tp = type(base)
    if tp is _Parameter:
        return True
    if tp is _Tensor:
        return bool(getattr(base, "_is_param", False))
    return isinstance(base, _Parameter)


def _weak(t: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(t)
    except TypeError:  # pragma: no cover - every torch.Tensor is weak-referenceable
        return lambda: None


# ---- the in-place check PyTorch skips under hooks -----------------------------------------------
DETACHED_INPLACE = (
    "Trying to use a saved tensor that has been detached in-place, i.e. with .detach_()."
    "This is not supported, please use out-of-place `.detach()` instead"
)
"""PyTorch's message (``SavedVariable::unpack``) for a saved non-leaf input that lost its grad_fn to
an in-place ``detach_()``; like the version check, PyTorch skips it under any hook pair."""


def _unpacked_for_nobody() -> bool:
    """True where PyTorch unpacks a saved input without naming the node it is for (``saved_for``
    null), so that it raises :data:`DETACHED_INPLACE`: a C++ node's backward reading its saved
    inputs. A Python ``autograd.Function`` (``ctx.saved_tensors``) and the ``_saved_*`` getters
    name their node, and PyTorch uses that node instead of raising."""
    node = torch._C._current_autograd_node()
    return node is not None and not isinstance(node, _BackwardCFunction)


def _node_name(node: Any) -> str:
    name = node.name()
    head, sep, tail = name.rpartition("Backward")
    return head if sep and (tail == "" or tail.isdigit()) else name


def _sizes_text(value: torch.Tensor) -> str:
    """The sizes as PyTorch's message prints them: a list, or a nested tensor's size matrix (read
    here, at unpack, where PyTorch reads it too; the pack hook never does)."""
    if not value.is_nested:
        return str(list(value.shape))
    sizes = value._nested_tensor_size().tolist()
    width = max((len(str(v)) for row in sizes for v in row), default=1) + 1
    body = "".join(" ".join(f"{v:>{width}d}" for v in row) + "\n" for row in sizes)
    return f"{body}[ torch.LongTensor{{{len(sizes)},{len(sizes[0]) if sizes else 0}}} ]"


def version_error(value: torch.Tensor, rec: Record) -> str:
    """PyTorch's own message for a saved tensor modified in place (``SavedVariable::unpack``)."""
    current = value._version
    msg = (
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{value.type()} {_sizes_text(value)}]"
    )
    fn = None
    if rec.is_output:
        fn = torch._C._current_autograd_node()  # as PyTorch: a saved output names the node that saved it
    elif rec.output_nr is not None:
        fn = value.grad_fn  # the tensor itself is kept: its grad_fn now (after the in-place op)
    if fn is not None:
        msg += f", which is output {rec.output_nr} of {_node_name(fn)},"
    msg += f" is at version {current}; expected version {rec.version} instead."
    if torch.is_anomaly_enabled():
        msg += (
            " Hint: the backtrace further above shows the operation that failed to compute its gradient. "
            "The variable in question was changed in there or anywhere later. Good luck!"
        )
    else:
        msg += (
            " Hint: enable anomaly detection to find the operation that failed to compute its gradient, "
            "with torch.autograd.set_detect_anomaly(True, check_nan=False)."
        )
    return msg


def layer_of(pack: Any) -> Layer | None:
    """The memaudit layer a pack function belongs to, or None for a foreign pack."""
    if isinstance(pack, _ForwardingPack):
        return pack.layer
    owner = getattr(pack, "__self__", None)
    return owner if isinstance(owner, Layer) else None

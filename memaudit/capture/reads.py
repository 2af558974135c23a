"""Which saved buffers backward reads: the observed-reads method of ``--unread``.

While an :class:`Observer` is active (:func:`observing`), every read of a saved buffer's contents
during backward is recorded by storage (a view, or a read through another tensor over the same
storage, is a read of the buffer):

- **ATen ops**, through a dispatch mode. An argument the op reads is a read; a view or metadata op
  (``view``, ``transpose``, ``detach``, ``empty_like``, size queries) reads nothing, an argument
  an op only overwrites (``copy_``'s destination, an ``out=``) is not read, and a backward op in
  :data:`memaudit.capture.aten_reads.ATEN_READS` reads only what its entry says (its kernel takes
  some arguments for their shapes, or for other output masks). An op on a
  wrapper subclass (a tensor whose bytes are in inner tensors) is re-dispatched to the subclass
  under the mode, so the ops it runs on its inner tensors are seen.
- **A library's kernel entry points**, through :func:`entry_point`: a library's watcher (its
  plugin's ``reads``) says which buffers each entry point reads by the library's own rules, or
  that it cannot say (the buffers it received are then ``unknown``).
- **Everything else** that could read memory without passing through either: a profile function
  sees every call of a C function during backward. A C function outside torch, the standard
  library's metadata modules and an observed entry point (an extension, a Triton launch, numpy)
  makes every buffer not already seen read ``unknown``, naming the call; ``Tensor.tolist``,
  ``Tensor.numpy`` and storage item reads are reads.

Reads are recorded only while autograd evaluates a node (``torch._C._current_autograd_node``), or
inside :func:`evaluating` for an engine that calls nodes itself: building the loss from the
outputs is not backward. The observer reads metadata only; the ops it watches run unchanged.
"""

from __future__ import annotations

import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from memaudit.capture import hooks
from memaudit.capture.aten_reads import ATEN_READS

READ, UNREAD, UNKNOWN = "read", "unread", "unknown"
VERDICTS = (READ, UNREAD, UNKNOWN)

_current_node = torch._C._current_autograd_node
_wref = weakref.ref

METADATA_OPS = frozenset({
    "empty_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "zeros_like",
    "ones_like", "full_like", "rand_like", "randn_like", "randint_like", "empty_strided", "sym_size",
    "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel", "dim", "is_same_size",
    "_unsafe_view", "record_stream", "_has_same_storage_numel", "lift_fresh", "_nested_tensor_size",
    "_nested_tensor_strides", "_nested_tensor_storage_offsets", "is_pinned", "_is_zerotensor",
    "is_complex", "is_floating_point", "is_conj", "is_neg", "is_inference", "_version", "device",
})  # fmt: skip
"""ATen ops that read no tensor's contents besides their views' (sizes, strides, new allocations;
``prim.device`` is a fake tensor's ``.device``, dispatched on fake CUDA)."""

OVERWRITE_OPS = frozenset({
    "copy_", "fill_", "zero_", "random_", "uniform_", "normal_", "exponential_", "geometric_",
    "log_normal_", "cauchy_", "bernoulli_", "set_", "resize_", "resize_as_", "_resize_output_",
    "index_put_", "masked_fill_", "_copy_from", "_copy_from_and_resize",
})  # fmt: skip
"""In-place ops whose written argument is overwritten, not read (``index_put_`` and
``masked_fill_`` write where their index says; the untouched part is not read either)."""

TENSOR_READS = frozenset(
    {
        "tolist",
        "numpy",
        "__array__",
        "__dlpack__",
        "item",
        "__bool__",
        "__float__",
        "__int__",
        "__index__",
        "__complex__",
        "__reduce_ex__",
    }
)
"""Tensor methods that read contents without dispatching a read op to the mode."""

STORAGE_METADATA = frozenset({
    "nbytes", "size", "data_ptr", "device", "element_size", "is_cuda", "is_hpu", "is_shared", "is_pinned",
    "is_sparse", "_cdata", "__len__", "resize_", "fill_", "_new_wrapper", "untyped", "_weak_ref",
    "__reduce__", "_get_filename", "type", "dtype", "_untyped_storage", "_expired",
})  # fmt: skip
"""Storage methods that read no contents (``fill_`` and ``resize_`` overwrite)."""

SAFE_MODULES = frozenset({
    "builtins", "_operator", "operator", "math", "cmath", "itertools", "functools", "_functools",
    "collections", "_collections", "_abc", "abc", "weakref", "_weakref", "_thread", "threading", "time",
    "posix", "os", "sys", "_warnings", "warnings", "_contextvars", "contextvars", "typing", "_typing",
    "enum", "_struct", "re", "_sre", "copy", "dataclasses", "inspect", "types", "_heapq", "heapq",
    "_bisect", "bisect", "gc", "traceback", "linecache", "_signal", "errno", "_io", "io", "_string",
    "string", "logging", "_random", "random", "_locale", "_codecs", "codecs", "importlib", "_imp",
    "_frozen_importlib", "_frozen_importlib_external", "marshal", "_stat", "stat", "_sha1", "_sha256",
    "_md5", "_hashlib", "hashlib", "_blake2", "_datetime", "datetime", "_decimal", "_statistics",
    "numbers", "_weakrefset", "contextlib", "_json", "json", "_ast", "ast", "_tokenize", "_opcode",
    "opcode", "_symtable", "atexit", "_posixsubprocess", "select", "selectors", "_socket",
})  # fmt: skip
"""C modules whose functions cannot read a tensor's memory (they never see a data pointer)."""


class Observer:
    """The reads of one backward, by storage name (``s3``: the rows' ``storage``).

    ``storages`` maps each storage name of the case's rows to the weak references of its storage
    objects (:meth:`memaudit.capture.Capture.row_storages`).
    """

    def __init__(self, storages: Mapping[str, Sequence[Any]]) -> None:
        self._names: dict[int, str] = {}
        self._refs: list[Any] = []  # held, so that the ids above stay unique while observing
        for name, refs in storages.items():
            for ref in refs:
                self._refs.append(ref)
                self._names[id(ref)] = name
        self.read_by: dict[str, str] = {}
        """Storage name -> the op or entry point that first read it."""
        self.received: dict[str, str] = {}
        """Storage name -> what received it without memaudit seeing what it read."""
        self.opaque: dict[str, int] = {}
        """Calls during backward that memaudit does not observe (C functions of other libraries), counted."""
        self.profiled_elsewhere: list[str] = []
        """Threads where another profiler was active (their C calls were not observed)."""
        self.ran = False
        """True once any autograd node was seen evaluating."""
        self._local = threading.local()
        self._profiled: set[int] = set()
        self._lock = threading.Lock()

    # ---- what the watchers report ---------------------------------------------------------------
    def storage_name(self, t: Any) -> str | None:
        """The row storage name of ``t``'s storage, or None (not saved, or no storage)."""
        try:
            st = t.untyped_storage()
        except Exception:  # noqa: BLE001 - a wrapper subclass or a tensor without storage
            return None
        try:
            return self._names.get(id(_wref(st)))
        except TypeError:  # pragma: no cover - every storage is weak-referenceable
            return None

    def read(self, t: Any, by: str) -> None:
        """``t``'s storage was read by ``by``."""
        name = self.storage_name(t)
        if name is not None and name not in self.read_by:
            self.read_by[name] = by

    def read_storage(self, st: Any, by: str) -> None:
        """A storage object itself was read (an item read)."""
        name = self._names.get(id(_wref(st)))
        if name is not None and name not in self.read_by:
            self.read_by[name] = by

    def receive(self, t: Any, by: str) -> None:
        """``t`` went to ``by``, which memaudit does not see into: its buffer is ``unknown`` unless
        something observed reads it."""
        name = self.storage_name(t)
        if name is not None and name not in self.received:
            self.received[name] = by

    def note_opaque(self, what: str) -> None:
        with self._lock:
            self.opaque[what] = self.opaque.get(what, 0) + 1

    # ---- where reads count ----------------------------------------------------------------------
    def recording(self) -> bool:
        """True while autograd evaluates a node in this thread (or an engine said so), outside an
        observed entry point that answers for what it reads."""
        local = self._local
        if getattr(local, "quiet", 0):
            return False
        if _current_node() is not None or getattr(local, "evaluating", 0) > 0:
            self.ran = True
            return True
        return False

    def inside(self) -> int:
        return getattr(self._local, "inside", 0)

    # ---- verdicts ---------------------------------------------------------------------------------
    def verdict(self, storage: str | None) -> tuple[str, str | None]:
        """(verdict, read_by or why) for one storage name."""
        if storage is None:
            return UNKNOWN, "no storage memaudit can follow"
        by = self.read_by.get(storage)
        if by is not None:
            return READ, by
        if not self.ran:
            return UNKNOWN, "backward evaluated no autograd node"
        got = self.received.get(storage)
        if got is not None:
            return UNKNOWN, f"received by {got}, which memaudit does not observe"
        if self.opaque:
            calls = ", ".join(sorted(self.opaque)[:3]) + (" ..." if len(self.opaque) > 3 else "")
            return UNKNOWN, f"backward called {calls}, which memaudit does not observe"
        if self.profiled_elsewhere:
            return (
                UNKNOWN,
                f"another profiler was active in {self.profiled_elsewhere[0]}: its C calls were not observed",
            )
        return UNREAD, None


# ---- the dispatch mode ------------------------------------------------------------------------------
def _is_wrapper(t: torch.Tensor) -> bool:
    """A tensor subclass whose bytes live in inner tensors (its own storage is a placeholder)."""
    if type(t) is torch.Tensor or type(t) is torch.nn.Parameter:
        return False
    if "FakeTensor" in type(t).__name__:
        return False
    try:
        t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return True
    return False


class _ReadMode(TorchDispatchMode):
    """Records which arguments each ATen op reads (see the module docstring)."""

    def __init__(self, obs: Observer) -> None:
        super().__init__()
        self.obs = obs
        self.redispatching = threading.local()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        obs = self.obs
        if not obs.recording():
            return func(*args, **kwargs)
        _profile_this_thread(obs)
        read, wrapper = self._reads(func, args, kwargs)
        if wrapper is not None and getattr(self.redispatching, "depth", 0) < 4:
            # The subclass unwraps and runs ops on its inner tensors: run its own dispatch with
            # this mode pushed again, so that those ops are seen.
            self.redispatching.depth = getattr(self.redispatching, "depth", 0) + 1
            try:
                with self:
                    out = type(wrapper).__torch_dispatch__(func, types, args, kwargs)
            finally:
                self.redispatching.depth -= 1
        else:
            out = func(*args, **kwargs)
        if read and not _all_empty(out):  # an op with nothing to compute reads nothing
            by = f"aten.{func.overloadpacket.__name__}" if hasattr(func, "overloadpacket") else str(func)
            for t in read:
                obs.read(t, by)
        return out

    def _reads(self, func: Any, args: Any, kwargs: Any) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """The arguments one op reads, and a wrapper-subclass argument to re-dispatch, if any."""
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        if name in METADATA_OPS or getattr(func, "is_view", False):
            return [], None
        schema = getattr(func, "_schema", None)
        written: set[int] = set()
        if schema is not None and (
            name in OVERWRITE_OPS or any(a.kwarg_only and a.alias_info is not None for a in schema.arguments)
        ):
            positional = [a for a in schema.arguments if not a.kwarg_only]
            for i, a in enumerate(positional):
                if a.alias_info is not None and a.alias_info.is_write and i < len(args):
                    written.update(id(t) for t in tree_flatten(args[i])[0] if isinstance(t, torch.Tensor))
            for a in schema.arguments:
                if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write and a.name in kwargs:
                    written.update(id(t) for t in tree_flatten(kwargs[a.name])[0] if isinstance(t, torch.Tensor))
        wrapper = None
        read = []
        only = _kernel_reads(name, args, kwargs)
        for t in tree_flatten((args, kwargs))[0]:
            if not isinstance(t, torch.Tensor) or id(t) in written:
                continue
            if _is_wrapper(t):
                wrapper = t
            elif t.numel() and (only is None or id(t) in only):  # an empty argument has no contents to read
                read.append(t)
        return read, wrapper


def _all_empty(out: Any) -> bool:
    """True when the op returned tensors and every one is empty (it computed nothing)."""
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.numel() == 0 for t in tensors)


def _kernel_reads(name: str, args: Any, kwargs: Any) -> set[int] | None:
    """The ids of the arguments an op in :data:`ATEN_READS` reads, or None: every argument is read
    (an op not in the table, or an entry that fails)."""
    entry = ATEN_READS.get(name)
    if entry is None:
        return None
    try:
        return {id(t) for t in entry(*args, **kwargs) if t is not None}
    except Exception:  # noqa: BLE001 - an entry that cannot answer leaves every argument read
        return None


# ---- C calls: what the mode and the entry points do not see ----------------------------------------
_SAFE_CACHE: dict[tuple[Any, ...], str | None] = {}


def _classify_call(fn: Any) -> tuple[str, Any] | None:
    """None for a call that reads nothing unobserved; ``("read", tensor)`` or ``("storage", storage)``
    for a method that reads contents; ``("opaque", name)`` for a foreign C function."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.Tensor):
        return ("read", owner) if getattr(fn, "__name__", "") in TENSOR_READS else None
    if isinstance(owner, torch.UntypedStorage | torch.TypedStorage):
        return None if getattr(fn, "__name__", "") in STORAGE_METADATA else ("storage", owner)
    module = getattr(fn, "__module__", None)
    key = (type(owner), module, getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None))
    cached = _SAFE_CACHE.get(key, "")
    if cached == "":
        if not isinstance(module, str):
            if isinstance(owner, types.ModuleType):
                module = owner.__name__
            elif isinstance(owner, type):
                module = owner.__module__
            else:
                module = type(owner).__module__
        top = (module or "builtins").partition(".")[0]
        cached = None if top in SAFE_MODULES or top == "torch" else f"{module}.{key[2]}"
        _SAFE_CACHE[key] = cached
    return None if cached is None else ("opaque", cached)


def _profile(frame: Any, event: str, arg: Any) -> None:
    if event != "c_call":
        return
    obs = _active
    if obs is None:
        sys.setprofile(None)
        return
    if obs.inside() or not obs.recording():
        return
    found = _classify_call(arg)
    if found is None:
        return
    kind, what = found
    if kind == "read":
        obs.read(what, f"Tensor.{arg.__name__}")
    elif kind == "storage":
        obs.read_storage(what, f"UntypedStorage.{arg.__name__}")
    else:
        obs.note_opaque(what)


def _profile_this_thread(obs: Observer) -> None:
    """Install the profile function in this thread once per observer (autograd runs CUDA nodes in
    its own threads); a thread that already has a profiler keeps it and says so."""
    tid = threading.get_ident()
    if tid in obs._profiled:
        return
    obs._profiled.add(tid)
    current = sys.getprofile()
    if current is None:
        sys.setprofile(_profile)
    elif current is not _profile:
        obs.profiled_elsewhere.append(threading.current_thread().name)


_active: Observer | None = None


def observer() -> Observer | None:
    """The active observer (any thread: backward may run in autograd's threads), or None."""
    return _active


@contextmanager
def observing(obs: Observer, watchers: Iterable[Callable[[], Any]] = ()) -> Iterator[Observer]:
    """Observe the block (a backward): the dispatch mode, the profile function in this thread,
    and each library watcher (a context manager factory routing its entry points here)."""
    global _active
    if _active is not None:
        raise RuntimeError("an unread analysis is already running")
    from contextlib import ExitStack

    _active = obs
    hooks.unpack_watch = unpacked
    previous = sys.getprofile()
    try:
        with ExitStack() as stack:
            for watch in watchers:
                stack.enter_context(watch())
            stack.enter_context(_ReadMode(obs))
            _profile_this_thread(obs)
            yield obs
    finally:
        _active = None
        hooks.unpack_watch = None
        if sys.getprofile() is _profile:
            sys.setprofile(previous)


@contextmanager
def evaluating() -> Iterator[None]:
    """For an engine that calls autograd nodes itself (no current node is set): reads count."""
    obs = _active
    if obs is None:
        yield
        return
    local = obs._local
    local.evaluating = getattr(local, "evaluating", 0) + 1
    try:
        yield
    finally:
        local.evaluating -= 1


def unpacked() -> None:
    """A saved tensor was unpacked in this thread (the capture's unpack calls this while observing):
    the thread's C calls are watched from here on."""
    obs = _active
    if obs is not None:
        _profile_this_thread(obs)


def entry_point(name: str, reads: Iterable[Any] | None, received: Iterable[Any] = (), *, answers: bool = False) -> Any:
    """A library entry point is about to run with the active observer recording: ``reads`` are the
    tensors whose contents it reads by the library's rules (None: it cannot say, and every tensor
    in ``received`` is ``unknown``). Returns a context manager for the call: inside it, C calls are
    the entry point's own, and with ``answers`` (a stand-in whose read set is the whole truth) the
    ATen ops it runs are not reads."""
    obs = _active
    if obs is None or not obs.recording():
        return _NULL
    _profile_this_thread(obs)
    if reads is None:
        for t in received:
            obs.receive(t, name)
    else:
        for t in reads:
            if t is not None:
                obs.read(t, name)
    return _Inside(obs, answers)


class _Inside:
    __slots__ = ("obs", "answers")

    def __init__(self, obs: Observer, answers: bool) -> None:
        self.obs = obs
        self.answers = answers

    def __enter__(self) -> None:
        local = self.obs._local
        local.inside = getattr(local, "inside", 0) + 1
        if self.answers:
            local.quiet = getattr(local, "quiet", 0) + 1

    def __exit__(self, *exc: object) -> None:
        local = self.obs._local
        local.inside -= 1
        if self.answers:
            local.quiet -= 1


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()

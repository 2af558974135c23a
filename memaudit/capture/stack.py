"""The hook stack: push a capture's layer, and route every pair pushed inside a capture through a
layer of its own (:mod:`memaudit.capture.hooks` has the layers).

``install()`` patches, once per process, the Python class ``torch.autograd.graph.saved_tensors_hooks``
(its ``__enter__``), non-reentrant checkpoint's input saving (to name those rows) and
``threading.Thread.start`` (threads started inside a capture are captured). Every patch is inert
in a thread without an active capture.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch._C._autograd as _autograd_c

from memaudit.capture import modules
from memaudit.capture.hooks import (
    TASK_CAPTURES,
    HookInfo,
    Layer,
    Record,
    layer_of,
    state,
    thread_local,
    walk_ended,
    walk_started,
)

if TYPE_CHECKING:
    from memaudit.capture.recorder import Capture


# ---- pushing layers ---------------------------------------------------------------------------
_original_push = _autograd_c._push_saved_tensors_default_hooks
_original_pop = _autograd_c._pop_saved_tensors_default_hooks
_top = _autograd_c._top_saved_tensors_default_hooks
_install_lock = threading.Lock()
_installed = False
_hook_namers: list[Callable[[Callable[..., Any]], str | None]] = []


def describe_hook(pack: Callable[..., Any]) -> HookInfo:
    """Name a foreign pack function and give it a kind (``checkpoint``, or what a plugin says)."""
    name = getattr(pack, "__qualname__", None) or type(pack).__qualname__
    module = getattr(pack, "__module__", None) or ""
    # Non-reentrant checkpoint's pair: marked ``_checkpoint_internal`` in recent torch; before that,
    # known by its defining class (``_checkpoint_hook.__init__.<locals>.pack_hook``).
    from_checkpoint = module == "torch.utils.checkpoint" and name.startswith("_checkpoint_hook.")
    kind = "checkpoint" if getattr(pack, "_checkpoint_internal", False) or from_checkpoint else None
    if kind is None and module.startswith("torch.autograd.graph") and "save_on_cpu" in name:
        kind = "save_on_cpu"
    for namer in _hook_namers:
        kind = kind or namer(pack)
    frame = _checkpoint_frame(pack) if kind == "checkpoint" else None
    return HookInfo(f"{module}.{name}" if module else name, kind, frame)


def _checkpoint_frame(pack: Any) -> Any:
    """A weak reference to the ``_CheckpointFrame`` non-reentrant checkpoint's pack closes over."""
    for cell in getattr(pack, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if type(value).__name__ == "_CheckpointFrame":
            try:
                return weakref.ref(value)
            except TypeError:
                return None
    return None


def selective_cache(frame: Any) -> list[tuple[str, torch.Tensor]] | None:
    """What selective activation checkpointing keeps for the region of ``frame``: the outputs its
    policy saves, cached by its dispatch mode outside any hook (``storage[op][k]``), as
    ``(name, tensor)``; [] when the region caches nothing now; None when the frame has no
    selective cache memaudit knows how to read (plain checkpoint)."""
    closure = getattr(getattr(frame, "recompute_fn", None), "__closure__", None) or ()
    storage = None
    for cell in closure:
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if type(value).__name__ in ("_CachedTorchDispatchMode", "_CachingTorchDispatchMode"):
            storage = getattr(value, "storage", None)
            break
    if not isinstance(storage, dict):
        return None
    out: list[tuple[str, torch.Tensor]] = []
    for key, entries in list(storage.items()):
        op = getattr(key[0] if isinstance(key, tuple) else key, "__name__", None) or str(key)
        for idx, entry in list(entries.items()) if isinstance(entries, dict) else enumerate(entries):
            for k, t in enumerate(_cached_tensors(entry)):
                out.append((f"{op}[{idx}]" + (f"[{k}]" if k else ""), t))
    return out


def has_dispatch_mode(frame: Any) -> bool:
    """True when the region's recompute runs under a TorchDispatchMode (a ``context_fn``)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    for cell in getattr(getattr(frame, "recompute_fn", None), "__closure__", None) or ():
        try:
            if isinstance(cell.cell_contents, TorchDispatchMode):
                return True
        except ValueError:
            continue
    return False


def _cached_tensors(entry: Any, depth: int = 3) -> list[torch.Tensor]:
    val = getattr(entry, "val", entry)
    if isinstance(val, torch.Tensor):
        return [val]
    if depth > 0 and isinstance(val, list | tuple):
        return [t for v in val for t in _cached_tensors(v, depth - 1)]
    return []


def register_hook_namer(namer: Callable[[Callable[..., Any]], str | None]) -> None:
    """Let a classifier give a kind to foreign pack functions it knows (TE's CPU offload)."""
    if namer not in _hook_namers:
        _hook_namers.append(namer)


def _enter(self: torch.autograd.graph.saved_tensors_hooks) -> None:
    """``saved_tensors_hooks.__enter__``, except that inside a capture the pair is pushed in a layer.

    Every Python-level pair (``save_on_cpu``, checkpoint's, TE's CPU offload, a user's) enters
    through this method; a pair pushed from C++ does not, and the graph walk reports what it hid.
    """
    st = state()
    pack = self.pack_hook
    if st.captures and layer_of(pack) is None:
        caps = list(dict.fromkeys(st.captures))
        layer = Layer(caps, (pack, self.unpack_hook), describe_hook(pack), st.captures[-1].expand)
        _original_push(layer.pack, layer.unpack)
    else:
        _original_push(pack, self.unpack_hook)


def install() -> None:
    """Route hook pushes through memaudit (once per process; inert in threads without a capture).

    Patches the Python class ``torch.autograd.graph.saved_tensors_hooks`` (its ``__exit__`` pops as
    before), never torch's C module.
    """
    global _installed
    if _installed:  # every capture after the first: no lock to take
        return
    with _install_lock:
        if not _installed:
            cls = torch.autograd.graph.saved_tensors_hooks
            _enter.__wrapped__ = cls.__enter__  # type: ignore[attr-defined]
            cls.__enter__ = _enter  # type: ignore[method-assign]
            _label_checkpoint_inputs()
            _watch_thread_starts()
            _installed = True


before_backward: Any = None
"""Called with a backward's outputs before it runs, in a thread that names records early."""


_backward_users = 0
_backward_originals: dict[str, Any] = {}


def watch_backward(on: bool) -> None:
    """While a capture that names records early is active (the pytest plugin's), route the autograd
    engine's entry (``torch.autograd._engine_run_backward``, which ``backward``, ``grad`` and
    ``Tensor.backward`` all call) through a wrapper that names the graph before backward releases
    it; put it back after the last. The public functions stay as they are (TorchScript resolves
    ``torch.autograd.grad`` by identity)."""
    global _backward_users
    import torch.autograd as autograd

    with _install_lock:
        _backward_users += 1 if on else -1
        if on and _backward_users == 1:
            original = getattr(autograd, "_engine_run_backward", None)
            if original is not None:
                _backward_originals["_engine_run_backward"] = original
                autograd._engine_run_backward = _naming(original)  # type: ignore[attr-defined]
        elif not on and _backward_users <= 0:
            _backward_users = 0
            for name, original in _backward_originals.items():
                setattr(autograd, name, original)
            _backward_originals.clear()


def _naming(original: Any) -> Any:
    def run(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if state().naming and before_backward is not None:
            try:
                before_backward(t_outputs)
            except Exception:  # noqa: BLE001 - naming never changes what backward does
                pass
        return original(t_outputs, *args, **kwargs)

    run.__wrapped__ = original  # type: ignore[attr-defined]
    return run


def _label_checkpoint_inputs() -> None:
    """Name the inputs non-reentrant checkpoint saves through ``_CheckpointFrame.save_inputs``."""
    from torch.utils import checkpoint as ckpt

    frame = getattr(ckpt, "_CheckpointFrame", None)
    original = getattr(frame, "save_inputs", None)
    if original is None:
        _label_noop_save_inputs(ckpt)
        return
    original = getattr(original, "__wrapped__", original)  # an earlier import of memaudit wrapped it

    def save_inputs(self: Any, *args: Any) -> Any:
        if not state().captures:
            return original(self, *args)
        with labelled("checkpoint", "inputs"):
            return original(self, *args)

    save_inputs.__wrapped__ = original  # type: ignore[attr-defined]
    frame.save_inputs = save_inputs  # type: ignore[union-attr]  # frame has save_inputs: checked above


def _label_noop_save_inputs(ckpt: Any) -> None:
    """Older torch (2.11 and before) saves the region's inputs in a ``_NoopSaveInputs`` node that
    only the frame references, so the graph walk never meets it: name what its ``apply`` packs
    (a 0-element dummy first, then the inputs)."""
    noop = getattr(ckpt, "_NoopSaveInputs", None)
    if noop is None:  # another torch: those rows stay unnamed
        return
    original = noop.apply
    original = getattr(original, "_memaudit_original", original)  # an earlier import wrapped it

    def apply(*args: Any, **kwargs: Any) -> Any:
        if not state().captures:
            return original(*args, **kwargs)
        with labelled("checkpoint", "inputs"):
            return original(*args, **kwargs)

    apply._memaudit_original = original  # type: ignore[attr-defined]
    noop.apply = staticmethod(apply)


ACTIVE: dict[int, weakref.ref[Capture]] = {}
"""Captures active in any thread, by id (a thread started while one is active may save unseen
tensors): a weak reference each, put in when a capture is entered and taken out when it ends
(cheaper to enter and leave than a ``WeakSet``, which makes a weak reference with a callback)."""


def active_captures() -> list[Capture]:
    """The captures active in any thread now."""
    return [cap for ref in list(ACTIVE.values()) if (cap := ref()) is not None and cap.active]


def _mine() -> list[Capture]:
    """The captures a thread or pool task started here now should run attached to: those active
    in this thread, except a capture entered in an asyncio task whose context this is not."""
    st = state()
    if not st.captures:
        return []
    ours = TASK_CAPTURES.get()
    return [cap for cap in st.captures if cap.active and (cap.task is None or cap in ours)]


def _attached(mine: list[Capture], fn: Callable[..., Any], hold_module_hooks: bool = True) -> Callable[..., Any]:
    """``fn`` run attached to the captures of ``mine`` still active when it runs.

    A capture entered in an asyncio task records only the saves of its task's context
    (:data:`~memaudit.capture.hooks.TASK_CAPTURES`); ``run_in_executor``, ``submit`` and a thread
    do not carry that context to the worker (``asyncio.to_thread`` does), so ``fn`` runs with
    those captures in it, as the task that started it has them."""
    tasked = tuple(cap for cap in dict.fromkeys(mine) if cap.task is not None)

    def run(*args: Any, **kwargs: Any) -> Any:
        with contextlib.ExitStack() as stack:
            if tasked:
                have = TASK_CAPTURES.get()
                token = TASK_CAPTURES.set((*have, *(cap for cap in tasked if cap not in have)))
                stack.callback(TASK_CAPTURES.reset, token)
            for cap in dict.fromkeys(mine):
                try:
                    stack.enter_context(cap.attach(hold_module_hooks=hold_module_hooks))
                except RuntimeError:  # that capture ended before this got going
                    pass
            return fn(*args, **kwargs)

    return run


def _is_pool_worker(thread: threading.Thread) -> bool:
    target = getattr(thread, "_target", None)
    return (
        getattr(target, "__module__", None) == "concurrent.futures.thread"
        and getattr(target, "__name__", "") == "_worker"
    )


def _watch_thread_starts() -> None:
    """Threads started inside a capture are captured too; other active captures are told.

    A ``threading.Thread`` started while captures are active in the starting thread runs its
    ``run()`` attached to them (:meth:`Capture.attach`): saved-tensor hooks are thread-local, and
    without this a forward in a worker would be unseen. A ``ThreadPoolExecutor``'s workers are
    attached per task instead: a task submitted inside a capture runs attached (whenever its
    worker was started), and the worker is bare again once the task returns, so a pool outliving
    the capture keeps nothing of memaudit (``asyncio.to_thread`` and ``run_in_executor`` submit
    tasks too). Captures active only in *other* threads are told a thread started (their report
    then looks for unhooked saves outside their thread).
    """
    import concurrent.futures

    original = threading.Thread.start
    original = getattr(original, "__wrapped__", original)

    def start(self: threading.Thread) -> None:
        mine = _mine()
        for cap in active_captures():
            if cap not in mine:
                cap.thread_started()
        if mine and not _is_pool_worker(self):  # it may outlive the capture: it does not hold module tracking
            self.run = _attached(mine, self.run, hold_module_hooks=False)  # type: ignore[method-assign]
        original(self)

    start.__wrapped__ = original  # type: ignore[attr-defined]
    threading.Thread.start = start  # type: ignore[method-assign]

    pool = concurrent.futures.ThreadPoolExecutor
    submit = pool.submit
    submit = getattr(submit, "__wrapped__", submit)

    def pool_submit(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        mine = _mine()
        if mine:
            fn = _attached(mine, fn)
        return submit(self, fn, *args, **kwargs)

    pool_submit.__wrapped__ = submit  # type: ignore[attr-defined]
    pool.submit = pool_submit  # type: ignore[method-assign]


def push_capture(cap: Capture) -> Layer:
    """Make ``cap`` record in this thread: push a layer over whatever pair is on top."""
    if not _installed:
        install()
    st = thread_local.state
    captures = st.captures
    if not captures:  # what earlier captures noted is stale now
        if st.provenance:
            st.provenance.clear()
        if st.decomposed:
            st.decomposed.clear()
        if not st.clean:  # the last capture here left without its pop (exited in another thread)
            modules.reset(st)
        st.clean = False
    top = _top(False)
    below = layer_of(top[0]) if top is not None else None
    while below is not None and below.orphaned is not None:  # a capture exited in another thread left it: pop it now
        _original_pop()
        below.orphaned()
        top = _top(False)
        below = layer_of(top[0]) if top is not None else None
    if below is not None:  # a nested capture: share the pair below's delegate, record into both
        delegate = None if below.delegate_pack is None else (below.delegate_pack, below.delegate_unpack)
        hook = below.hook
    else:
        delegate = top
        hook = describe_hook(top[0]) if top is not None else None
    captures.append(cap)
    layer = Layer([cap] if len(captures) == 1 else list(dict.fromkeys(captures)), delegate, hook, cap.expand)
    try:
        _original_push(layer.pack, layer.unpack)
    except BaseException:
        captures.remove(cap)
        raise
    return layer


def pop_capture(cap: Capture) -> None:
    """Undo :func:`push_capture` (the layer is on top again once inner contexts have exited)."""
    st = thread_local.state
    try:
        _original_pop()
    finally:
        captures = st.captures
        if cap in captures:
            captures.remove(cap)
        if not captures:
            if st.provenance:
                st.provenance.clear()  # noted for buffers no hook took; decomposed stays for report()
            modules.reset(st)  # the captures keep their spans; the module stack starts clean


class walking:
    """While the graph walk reads saved attributes: unpacks answer without running any hook."""

    def __init__(self) -> None:
        self.seen: list[Record] = []

    def __enter__(self) -> list[Record]:
        self._prev = state().walking
        state().walking = self.seen
        walk_started()
        return self.seen

    def __exit__(self, *exc: object) -> None:
        walk_ended()
        state().walking = self._prev


class labelled:
    """Records packed inside are named ``(op, slot[k])``: saves that no graph node owns.

    ``torch.utils.checkpoint`` (non-reentrant) keeps its region's inputs in a frame object, not in
    a node; they are named ``checkpoint`` / ``inputs[k]``.
    """

    def __init__(self, op: str, slot: str) -> None:
        self.op, self.slot, self.count = op, slot, 0

    def next(self) -> tuple[str, str]:
        k, self.count = self.count, self.count + 1
        return self.op, f"{self.slot}[{k}]"

    def __enter__(self) -> None:
        self._prev = state().context
        state().context = self

    def __exit__(self, *exc: object) -> None:
        state().context = self._prev

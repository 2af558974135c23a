"""Which module saved each tensor: a stack of module calls per thread, and their qualified names.

While at least one capture that tracks modules is active (in any thread), every module call runs
:func:`_call` around torch's ``Module.__call__``; the last capture to end gives torch its own code
back. It is inert in a thread without an active capture. No global module hook is registered: one
would send every module call down torch's slow path (``Module._call_impl`` builds a closure and
reads every hook dict; measured, 17,000 instructions a call on the host-bound CPU model), and
setting ``torch.nn.Module.__call__`` would flush the method caches of every module class (measured:
setting and resetting it, and the next step's cache misses, add about 240 microseconds to a step
of that model). So the function object stays torch's and its *code* is swapped:
``Module.__call__`` runs :func:`_call`'s code (with the globals of torch's module, where memaudit
puts the few names it reads), which calls a copy of torch's function. Everything torch's
``__call__`` does (its hooks, their order, what they return) runs inside the call as bare.

:func:`_call` pushes a :class:`Frame` onto this thread's stack (``ThreadState.frames``) and pops
it when the call returns or raises; the pack hook only copies a pointer to the innermost frame
into its record. A frame's name is resolved when the call starts, from the qualified names of the
*root*: the outermost module entered in this thread (``root.named_modules()``, built once per root
and memoised, holding weak references only). A module shared under two names gets the first
``named_modules()`` gives; the root itself gets its class name. The stack is per thread because
saved-tensor hooks are.

A module with no name under the root (one a parent keeps in a plain tuple, list or dict attribute,
one made inside a forward, one from another tree) is named, at its first call in the capture, under
the innermost call on the stack whose module has a qualified path: ``<that path>.<ClassName>``,
``<that path>.<ClassName@n>`` for the n-th distinct such module of that class named under it, in
the order of their first calls; its own submodules are named under that name as ``named_modules()``
names them (``mlp.experts.<Sequential>.0``). Its calls are then counted like any module's (``#k``).
Where no caller has a path (the root's own path is empty: a module the root calls itself, or one
called only by modules named this way), the module keeps its class name alone.

Each frame also records the autograd sequence numbers of the nodes created during the call
(``lo``..``hi``), so that rows the graph walk finds without a record (``ctx`` attributes,
unhooked saves) are named by the innermost call whose range holds their node.

Nothing here keeps a module or a tensor alive, and nothing here raises into the user's forward.
"""

from __future__ import annotations

import bisect
import sys
import threading
import types
import weakref
from typing import Any

import torch
import torch._C._autograd as _autograd_c

from memaudit.capture import compiled, hooks
from memaudit.capture.compiled import OPTIMIZED_MODULE
from memaudit.capture.hooks import ThreadState, thread_local
from memaudit.capture.tensors import iter_tensors

_next_sequence_nr = getattr(_autograd_c, "_get_sequence_nr", lambda: -1)
_Tensor = torch.Tensor
_wref = weakref.ref


class Frame:
    """One module call: its name (the qualified name, with ``#k`` from the module's k-th call in
    the capture on), the module's id while it runs, the call around it, weak references to the
    storages of its tensor arguments (what a checkpoint of the call would keep), and the sequence
    numbers of the autograd nodes created during it (``lo`` <= seq < ``hi``; ``hi`` is None while
    the call is open, or when it never closed)."""

    __slots__ = ("name", "module_id", "lo", "hi", "parent", "inputs", "module", "outputs")

    def __init__(
        self,
        name: str,
        module_id: int,
        lo: int,
        parent: Frame | None = None,
        inputs: tuple[Any, ...] = (),
        module: Any = None,
    ) -> None:
        self.name = name
        self.module_id = module_id
        self.module = module  # a weak reference to the module
        self.lo = lo
        self.hi: int | None = None
        self.parent = parent
        self.inputs = inputs
        self.outputs: tuple[Any, ...] = ()
        """A root call's output tensors that have a ``grad_fn``, as weak references (what
        ``report()`` without outputs walks from)."""

    def __repr__(self) -> str:
        return f"Frame({self.name!r}, lo={self.lo}, hi={self.hi})"

    def within(self, other: Frame) -> bool:
        """True when this call is ``other`` or runs inside it."""
        f: Frame | None = self
        while f is not None:
            if f is other:
                return True
            f = f.parent
        return False


on_root_done: Any = None
"""Called with a root module's output when its call returns in a thread that names records early."""

_lock = threading.Lock()
_users = 0
_hidden = False  # torch's code is back while Dynamo compiles (memaudit.capture.compiled)
_watching = False  # Dynamo's compile callbacks call _hide and _show (from the first capture on)


_CALL: Any = torch.nn.Module.__dict__.get("__call__")
"""torch's ``Module.__call__`` (``_wrapped_call_impl``): the function object every module call
runs. memaudit never replaces it; while a capture names modules it swaps the function's code for
:func:`_call`'s, and back."""

_SWAPPABLE = isinstance(_CALL, types.FunctionType) and _CALL.__closure__ is None
"""False for a torch (or a library loaded first) whose ``Module.__call__`` is no plain function:
module names are then off, and each capture says so (:data:`UNTRACKED`)."""

_TORCH_CODE: Any = _CALL.__code__ if _SWAPPABLE else None
_inner: Any = _CALL
"""A copy of torch's ``Module.__call__`` with torch's code: what :func:`_call` calls."""
if _SWAPPABLE:
    _inner = types.FunctionType(_TORCH_CODE, _CALL.__globals__, _CALL.__name__, _CALL.__defaults__)
    _inner.__kwdefaults__ = _CALL.__kwdefaults__
    _inner.__qualname__ = _CALL.__qualname__

UNTRACKED = (
    "module names are off: torch.nn.Module.__call__ runs code memaudit cannot run around (another library "
    "replaced its code, or it is a closure or no plain function), so the rows name no module"
)


_GLOBALS: dict[str, Any] = {}
"""The names :func:`_call` reads, which memaudit puts in the globals of torch's module, where its
code runs as ``Module.__call__``'s (a function's code reads the globals of the function it runs
in). Set below, once their values exist. ``_call`` is never called as itself."""


def _register() -> None:
    """Make every module call run :func:`_call` (``Module.__call__`` gets its code)."""
    if _SWAPPABLE and _CALL.__code__ is _TORCH_CODE:
        if _CALL.__globals__.get("__memaudit_local__") is not thread_local:
            _CALL.__globals__.update(_GLOBALS)  # they stay: a thread may be about to read them
        _CALL.__code__ = _CALL_CODE


def _remove() -> None:
    """Give ``Module.__call__`` torch's code back (unless another library has replaced it since)."""
    if _SWAPPABLE and _CALL.__code__ is _CALL_CODE:
        _CALL.__code__ = _TORCH_CODE


def acquire() -> str | None:
    """A capture starts tracking modules: module calls run :func:`_call` from now on, in every
    thread (it does nothing where no capture names modules). Returns :data:`UNTRACKED` where that
    could not be done."""
    global _users, _watching
    with _lock:
        if _users == 0:
            _register()
            if not _watching:  # once: the callbacks do nothing while no capture names modules
                try:
                    compiled.watch(_hide, _show)
                except BaseException:
                    _remove()
                    raise
                _watching = True
        _users += 1
        return None if _hidden or (_SWAPPABLE and _CALL.__code__ is _CALL_CODE) else UNTRACKED


def release() -> None:
    """Undo one :func:`acquire`; the last one gives torch its code back."""
    global _users, _hidden
    with _lock:
        _users -= 1
        if _users <= 0:
            _users = 0
            _hidden = False
            hooks.compile_window(None)
            _remove()


def _hide() -> None:
    """Dynamo starts compiling: ``Module.__call__`` has torch's code until it ends (in every thread:
    the function is one for the process). Meanwhile a save in another thread reads that thread's module calls off
    its Python stack (:func:`from_stack`); the calls open now in each thread are matched to their
    Python frames first, so that a later call of the same module is told from them."""
    global _hidden
    with _lock:
        if _users > 0 and not _hidden:
            # The window opens before torch's code is back: a save another thread makes in between reads
            # its module calls off its stack, never the stale innermost call no longer updated.
            hooks.compile_window(threading.get_ident())
            _remove()
            _hidden = True
            try:
                _match_open_calls()
            except Exception:  # noqa: BLE001 - never raise into Dynamo: calls are then matched by module
                pass


def _show() -> None:
    global _hidden
    with _lock:
        if _hidden and _users > 0:
            _resync()
            _register()
        hooks.compile_window(None)  # closed once memaudit's code is back (see _hide), or the last capture ended
        _hidden = False


_CALL_IMPL = torch.nn.Module._call_impl.__code__


def _calls_on(f: Any) -> list[tuple[int, Any, Any]]:
    """The module calls running in the Python stack from frame ``f`` up, outermost first: (id of
    the module, as :func:`_open` names it; the module; the frame of its ``Module._call_impl``)."""
    live: list[tuple[int, Any, Any]] = []
    while f is not None:
        if f.f_code is _CALL_IMPL:
            m = f.f_locals.get("self")
            if m is not None:
                inner = m._orig_mod if OPTIMIZED_MODULE and type(m) is OPTIMIZED_MODULE[0] else m  # type: ignore[attr-defined]
                live.append((id(inner), m, f))
        f = f.f_back
    live.reverse()
    return live


def _same_calls(st: ThreadState, live: list[tuple[int, Any, Any]]) -> int:
    """How many of the outermost open calls of ``st`` are the calls ``live`` lists: a call matched
    to a Python frame before is that frame's; another is matched by its module."""
    window = st.window
    keep = 0
    frames = st.frames
    while keep < len(frames) and keep < len(live):
        frame = frames[keep]
        py = window.get(id(frame))
        if (py is not live[keep][2]) if py is not None else (frame.module_id != live[keep][0]):
            break
        keep += 1
    return keep


def _follow(st: ThreadState, live: list[tuple[int, Any, Any]], lo: int, hi: int) -> None:
    """Make the open calls of ``st`` those of ``live``: the calls that returned are closed (at
    ``hi`` where their end is unknown), those that started are opened (at ``lo``) and matched to
    their Python frames."""
    keep = _same_calls(st, live)
    window = st.window
    for gone in st.frames[keep:]:
        if gone.hi is None:
            gone.hi = hi
        window.pop(id(gone), None)
    del st.frames[keep:]
    st.frame = st.frames[-1] if st.frames else None
    for _, m, py in live[keep:]:
        _open(st, m, (), lo)
        window[id(st.frames[-1])] = py


def _match_open_calls() -> None:
    """Dynamo starts compiling: match the open calls of every other thread that names modules to
    the Python frames of their ``Module._call_impl``."""
    me = threading.get_ident()
    stacks = sys._current_frames()
    for st in hooks.thread_states():
        if st.ident == me or not st.tracking:
            continue
        live = _calls_on(stacks.get(st.ident))
        keep = _same_calls(st, live)
        st.window = {id(st.frames[i]): live[i][2] for i in range(keep)}


def from_stack(st: ThreadState) -> Frame | None:
    """A save in this thread while Dynamo compiles in another (no module call is tracked): make this
    thread's open calls what its Python stack says, and give the innermost.

    A call seen at an earlier save is the same call while its Python frame is (memaudit holds that
    frame until the call is seen gone, or the compile ends), so each call is opened, and counted
    in its module's ``#k``, once. A call that saves nothing meanwhile is not seen, nor counted."""
    newest = _next_sequence_nr() - 1  # the node this save belongs to: inside the calls opened now
    _follow(st, _calls_on(sys._getframe(1)), newest, newest)
    return st.frame


hooks.from_stack = from_stack


def _resync() -> None:
    """After a compile elsewhere: the module calls that started or returned in another thread while
    torch's code was back ran no memaudit code (save those seen at a save). Make each such
    thread's stack of calls what its Python stack says: the calls that returned are closed, those
    that started are opened; the Python frames held meanwhile are let go."""
    me = threading.get_ident()
    stacks = sys._current_frames()
    for st in hooks.thread_states():
        if st.ident == me or not st.tracking:
            st.window = {}
            continue
        live = _calls_on(stacks.get(st.ident))
        for gone in st.frames[_same_calls(st, live) :]:
            if gone.hi is None:  # when it returned is unknown: no node is placed in it by number
                gone.hi = gone.lo
        lo = st.spans[-1].lo if st.spans else 0  # the thread's counter cannot be read from here
        _follow(st, live, lo, lo)
        st.window = {}


def tracking() -> bool:
    """True while a capture names modules (memaudit's code in ``Module.__call__``, or out for a compile)."""
    return _users > 0


def reset(st: ThreadState) -> None:
    """Forget this thread's module calls (no capture is active in it any more, or a first starts)."""
    st.clean = True
    st.frames = []
    st.frame = None
    st.spans = []
    st.names = None
    st.roots = {}


_NAMED_MODULES = torch.nn.Module.named_modules


def qualified_names(root: torch.nn.Module) -> dict[int, list[Any]]:
    """id(module) -> [weak reference, qualified name, calls so far] for every module under ``root``: what
    ``root.named_modules()`` gives (pre-order, the first name of a shared module), read off the
    ``_modules`` dicts directly unless a module overrides ``named_modules``.

    The root's entry, named by its class, has a fourth item, None: it has no qualified path
    (:func:`_unnamed` names no module under it). A module with a path may get a fourth item later:
    class name -> how many unregistered modules of that class were named under it.

    A new dict each call (its entries count one capture's calls). The tree read off the ``_modules``
    dicts is kept between calls, weakly, and taken again while it is provably the same
    (:func:`_same_tree`): every module in it alive, of the same class, with the same children
    under the same keys, and no class overriding ``named_modules`` since."""
    key = id(root)
    known = _trees.get(key)
    if known is not None and known[0]() is root and _same_tree(known[2], known[3]):
        return {k: [ref, name, 0] if path else [ref, name, 0, None] for k, (ref, name, path) in known[1].items()}
    out: dict[int, list[Any]] = {}
    top = type(root).__name__
    wref = weakref.ref
    try:
        shape: list[tuple[Any, type, tuple[str, ...], tuple[int, ...]]] = []
        todo: list[tuple[str, Any]] = [("", root)]
        while todo:
            name, m = todo.pop()
            if id(m) in out:
                continue
            tp = type(m)
            if tp.named_modules is not _NAMED_MODULES:
                raise _Overridden
            ref = wref(m)
            out[id(m)] = [ref, name, 0] if name else [ref, top, 0, None]
            children = m._modules
            if children:
                shape.append((ref, tp, tuple(children), tuple(map(id, children.values()))))
                prefix = name + "." if name else ""
                for k in reversed(children):
                    c = children[k]
                    if c is not None:
                        todo.append((prefix + k, c))
            else:
                shape.append((ref, tp, (), ()))
        _keep_tree(root, out, shape)
        return out
    except _Overridden:
        pass
    except Exception:  # noqa: BLE001 - a module tree memaudit cannot walk: the root alone is named
        return {id(root): [wref(root), top, 0, None]}
    out = {}
    try:
        for name, m in root.named_modules():
            out.setdefault(id(m), [wref(m), name, 0] if name else [wref(m), top, 0, None])
    except Exception:  # noqa: BLE001 - a module tree memaudit cannot walk: the root alone is named
        out = {id(root): [wref(root), top, 0, None]}
    return out


_trees: dict[int, tuple[Any, dict[int, tuple[Any, str, bool]], list[Any], tuple[type, ...]]] = {}
"""id(root) -> (weak reference to the root, id -> (weak reference, name, has a path), the shape of
the tree as walked, its classes): the last walk of each root's tree (:func:`qualified_names`)."""


def _keep_tree(root: Any, out: dict[int, list[Any]], shape: list[Any]) -> None:
    """Keep the walk of ``root``'s tree for the next :func:`qualified_names` of it (weakly: the entry
    goes when the root does)."""
    key = id(root)

    def gone(ref: Any) -> None:
        if _trees.get(key, (None,))[0] is ref:
            del _trees[key]

    ref = weakref.ref(root, gone)
    names = {k: (e[0], e[1], len(e) == 3) for k, e in out.items()}
    _trees[key] = (ref, names, shape, tuple({s[1]: None for s in shape}))


def _same_tree(shape: list[tuple[Any, Any, tuple[str, ...], tuple[int, ...]]], classes: tuple[Any, ...]) -> bool:
    """True when a walk of the tree now would give what it gave: every module it met is alive (so
    no id it holds was reused), of the class it had, and holds the same children (by identity) under
    the same keys in the same order; and no class of theirs overrides ``named_modules`` now."""
    try:
        for ref, tp, keys, ids in shape:
            m: Any = ref()
            if type(m) is not tp:  # a dead one's is NoneType
                return False
            children = m._modules
            if keys:
                if tuple(children) != keys or tuple(map(id, children.values())) != ids:
                    return False
            elif children:
                return False
        return all(tp.named_modules is _NAMED_MODULES for tp in classes)
    except Exception:  # noqa: BLE001 - a tree that cannot be read the same way: walk it again
        return False


class _Overridden(Exception):
    """A module in the tree has its own ``named_modules``: ask it."""


def _call(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The code ``torch.nn.Module.__call__`` runs while a capture names modules: the call is pushed
    on this thread's stack of calls around the whole of torch's (its hooks included), and popped
    however it ends. Inert in a thread without such a capture.

    Its code runs as ``Module.__call__``'s, with the globals of torch's module: the names it reads
    are the ``__memaudit_*__`` ones memaudit puts there (:data:`_GLOBALS`), so the call takes one
    Python frame of memaudit's and no more. Dynamo never runs it: while Dynamo compiles,
    ``Module.__call__`` has torch's code again (:mod:`memaudit.capture.compiled`), and where
    compiled code calls a module eagerly, this code is one Dynamo skips."""
    st = __memaudit_local__.state  # type: ignore[name-defined]  # noqa: F821
    if not st.tracking:
        return __memaudit_inner__(self, *args, **kwargs)  # type: ignore[name-defined]  # noqa: F821
    try:
        frame = __memaudit_open__(st, self, args, __memaudit_seq__(), kwargs)  # type: ignore[name-defined]  # noqa: F821
    except Exception:  # noqa: BLE001 - never raise into the user's forward
        return __memaudit_inner__(self, *args, **kwargs)  # type: ignore[name-defined]  # noqa: F821
    try:
        out = __memaudit_inner__(self, *args, **kwargs)  # type: ignore[name-defined]  # noqa: F821
    except BaseException:
        __memaudit_close__(st, frame, None)  # type: ignore[name-defined]  # noqa: F821
        raise
    __memaudit_close__(st, frame, out)  # type: ignore[name-defined]  # noqa: F821
    return out


def _open(st: ThreadState, module: torch.nn.Module, args: Any, lo: int, kwargs: Any = None) -> Frame:
    """Push the frame of a call of ``module`` that starts now in the thread of ``st``."""
    if OPTIMIZED_MODULE and type(module) is OPTIMIZED_MODULE[0]:  # torch.compile(module): named as what it wraps
        compiled.registered()
        module = module._orig_mod  # type: ignore[assignment]  # the module torch.compile wraps
    frames = st.frames
    if frames:
        names = st.names
    else:  # the outermost module entered: the root names are relative to
        memo = st.roots.get(id(module))
        if memo is None or memo[0]() is not module:
            memo = st.roots[id(module)] = (weakref.ref(module), qualified_names(module))
        names = st.names = memo[1]
    mid = id(module)
    entry = names.get(mid) if names is not None else None
    if entry is None or entry[0]() is not module:  # not under the root (or an id reused)
        entry = _unnamed(names, frames, module)
    parent = frames[-1] if frames else None
    inputs = _storages(args)
    if kwargs:  # tensors passed by keyword are arguments too
        inputs += _storages(kwargs.values())
    if parent is not None and parent.module_id == mid:  # the module a compiled wrapper wraps: the same call
        name = parent.name
    else:
        calls = entry[2] = entry[2] + 1
        name = entry[1] if calls == 1 else f"{entry[1]}#{calls}"
    frame = Frame(name, mid, lo, parent, inputs, entry[0])
    frames.append(frame)
    st.spans.append(frame)
    st.frame = frame
    return frame


def _unnamed(names: dict[int, list[Any]] | None, frames: list[Frame], module: torch.nn.Module) -> list[Any]:
    """The entry of a module that has no name under the root, made at its first call: named under
    the innermost open call whose module has a qualified path (``path.<ClassName>``, then
    ``path.<ClassName@2>``... for further modules of that class named under the same path), its
    own submodules under it; with no such call, by its class name alone (no path: nothing is named
    under it)."""
    cls = type(module).__name__
    caller = None
    if names is not None:
        for f in reversed(frames):
            e = names.get(f.module_id)
            if e is not None and e[0] is f.module and (len(e) < 4 or e[3] is not None):
                caller = e
                break
    if caller is None:
        entry = [weakref.ref(module), cls, 0, None]
        if names is not None:
            names[id(module)] = entry
        return entry
    assert names is not None
    if len(caller) < 4:
        caller.append({})
    seen: dict[str, int] = caller[3]
    n = seen[cls] = seen.get(cls, 0) + 1
    path = f"{caller[1]}.<{cls}>" if n == 1 else f"{caller[1]}.<{cls}@{n}>"
    entry = [weakref.ref(module), path, 0]
    names[id(module)] = entry
    for key, sub in qualified_names(module).items():
        if key == id(module) or len(sub) > 3:  # itself (or a tree memaudit could not walk)
            continue
        known = names.get(key)
        if known is None or known[0]() is not sub[0]():  # a module with a name keeps it
            sub[1] = f"{path}.{sub[1]}"
            names[key] = sub
    return entry


def _storages(args: Any) -> tuple[Any, ...]:
    """Weak references to the storages of the tensors in a call's arguments (in tuples, lists and
    dicts too; None for a tensor without a storage): what a checkpoint of the call keeps."""
    out: tuple[Any, ...] = ()
    for a in args:
        if isinstance(a, _Tensor):
            try:
                out += (_wref(a.untyped_storage()),)
            except Exception:  # noqa: BLE001 - a subclass without a storage
                out += (None,)
        elif isinstance(a, tuple | list | dict):
            out += _storages(list(iter_tensors(a)))
    return out


def _close(st: ThreadState, frame: Frame, output: Any) -> None:
    """The call of ``frame`` ends (``output`` None where it raised): pop it, and any call above it
    that never closed (a call whose end no hook saw closes with it)."""
    try:
        frames = st.frames
        hi = _next_sequence_nr()
        if frames and frames[-1] is frame:  # the usual case: the call that ends is the innermost
            frame.hi = hi
            frames.pop()
        else:
            for i in range(len(frames) - 1, -1, -1):
                if frames[i] is frame:
                    for f in frames[i:]:
                        f.hi = hi
                    del frames[i:]
                    break
            else:
                return  # no longer on the stack (the stack was reset meanwhile)
        if frames:
            st.frame = frames[-1]
            return
        st.frame = None
        frame.outputs = tuple(_wref(t) for t in iter_tensors(output) if t.grad_fn is not None)
        if st.naming and on_root_done is not None:
            on_root_done(output)
    except Exception:  # noqa: BLE001 - never raise into the user's forward
        pass


_GLOBALS.update(
    __memaudit_local__=thread_local,
    __memaudit_inner__=_inner,
    __memaudit_open__=_open,
    __memaudit_close__=_close,
    __memaudit_seq__=_next_sequence_nr,
)
_CALL_CODE = _call.__code__
"""The code ``Module.__call__`` runs while a capture names modules."""


def module_at(spans: list[Frame], seq: int) -> str | None:
    """The name of the innermost module call during which node ``seq`` was created, or None.

    ``spans`` are in the order the calls started (``lo`` non-decreasing); an inner call starts
    after the call around it, so the last span holding ``seq`` is the innermost.
    """
    if seq < 0 or not spans:
        return None
    i = bisect.bisect_right(spans, seq, key=lambda f: f.lo) - 1
    while i >= 0:
        f = spans[i]
        if f.lo <= seq and (f.hi is None or seq < f.hi):
            return f.name
        i -= 1
    return None

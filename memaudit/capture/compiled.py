"""Keep memaudit's module tracking out of what ``torch.compile`` sees.

While a capture names modules, ``torch.nn.Module.__call__`` runs memaudit's code
(:mod:`memaudit.capture.modules`). Dynamo traces ``Module.__call__`` when it inlines a module call:
it would trace memaudit's code instead of torch's, and a module compiled inside a capture would
get other graphs than bare. So while Dynamo compiles (its compile-start and compile-end callbacks),
``Module.__call__`` has torch's code again, and memaudit's after: Dynamo traces exactly what it
traces bare, and its guards are bare's. The compiled graph runs no module call of its own, so its
saved tensors are named by the compiled module (or the module around it).

The function is one for the process, so no module call is tracked in any thread while Dynamo
compiles; a save another thread makes meanwhile reads that thread's module calls off its Python
stack instead (the frames of ``Module._call_impl``: ``memaudit.capture.modules.from_stack``), so
it still names its module call.

Dynamo is never imported here (it costs most of a second). Where it is not imported yet when a
capture starts, a finder on ``sys.meta_path`` (only while captures are active) registers the
callbacks right after ``torch._dynamo`` is first imported. The callbacks stay registered once
Dynamo is imported, and do nothing while no capture names modules.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.RLock()
_hide: Callable[[], None] | None = None
_show: Callable[[], None] | None = None
_registered = False
_callbacks: Any = None  # torch._dynamo.callback_handler, once Dynamo is imported
_finder: _DynamoImport | None = None

OPTIMIZED_MODULE: list[type] = []
"""``torch._dynamo.eval_frame.OptimizedModule`` once Dynamo is imported (what modules.py maps to the
module it wraps)."""


_skipped: set[str] = set()
_modules_seen = 0  # len(sys.modules) at the last scan


def _skip_memaudit() -> None:
    """Dynamo must never compile a frame of memaudit's: every function of every memaudit module
    loaded so far runs as it is.

    memaudit code that runs eagerly while a compiled region is active (a module call in code after
    a graph break runs :func:`memaudit.capture.modules._call`'s code as ``Module.__call__``'s;
    a pack from an op Dynamo left to eager) would otherwise be compiled by Dynamo as a frame of its
    own, and so would every memaudit function it calls: frames (and graph breaks) that bare does not
    have. This marks the code objects only (Dynamo's frame-skip strategy); the frames of torch's
    ``Module.__call__`` that memaudit's run are Dynamo's to compile, as bare.
    """
    global _modules_seen
    if len(sys.modules) == _modules_seen:  # nothing imported since the last scan (the usual case)
        return
    skip = getattr(getattr(sys.modules.get("torch._dynamo"), "eval_frame", None), "skip_code", None)
    if skip is None:  # pragma: no cover - a torch without it
        return
    _modules_seen = len(sys.modules)
    for name, module in list(sys.modules.items()):
        if module is None or name in _skipped or not (name == "memaudit" or name.startswith("memaudit.")):
            continue
        _skipped.add(name)
        for code in _codes(module):
            skip(code)


def _codes(module: Any) -> list[Any]:
    """Every code object defined in ``module``: its functions, its classes' methods and
    properties, and the functions defined inside them."""
    name = module.__name__
    out: list[Any] = []
    todo: list[Any] = []
    for value in list(vars(module).values()):
        if getattr(value, "__module__", None) != name:
            continue
        if isinstance(value, type):
            for attr in vars(value).values():
                for fn in (
                    attr,
                    getattr(attr, "__func__", None),
                    getattr(attr, "fget", None),
                    getattr(attr, "fset", None),
                ):
                    code = getattr(fn, "__code__", None)
                    if code is not None:
                        todo.append(code)
        else:
            code = getattr(value, "__code__", None)
            if code is not None:
                todo.append(code)
    while todo:
        code = todo.pop()
        out.append(code)
        todo.extend(c for c in code.co_consts if isinstance(c, type(code)))
    return out


_entered = 0


def enter() -> None:
    """A capture starts: Dynamo, whenever it is imported, never compiles memaudit's hooks."""
    global _entered, _finder
    if _registered:  # the usual case: Dynamo was imported and seen before. Nothing is counted (the
        # count only says when to take the import finder out); the callbacks are registered again
        # if torch._dynamo.reset() dropped them, and only modules loaded since need skipping.
        callbacks = _callbacks
        if len(sys.modules) != _modules_seen or (
            callbacks is not None and _started not in getattr(callbacks, "start_callbacks", ())
        ):
            with _lock:
                _register()
                _skip_memaudit()
        return
    with _lock:
        _entered += 1
        if "torch._dynamo" in sys.modules:
            _register()
            _skip_memaudit()  # modules loaded since (a classifier)
        elif _finder is None:
            _finder = _DynamoImport()
            sys.meta_path.insert(0, _finder)


def exit() -> None:  # noqa: A001 - enter/exit of a capture
    """A capture ends; the last one takes the import finder out again."""
    global _entered, _finder
    if _registered and _finder is None:  # Dynamo is imported: no finder to take out, nothing counted
        return
    with _lock:
        _entered -= 1
        if _entered <= 0:
            _entered = 0
            if _finder is not None:
                try:
                    sys.meta_path.remove(_finder)
                except ValueError:
                    pass
                _finder = None


def watch(hide: Callable[[], None], show: Callable[[], None]) -> None:
    """Call ``hide`` when Dynamo starts compiling and ``show`` when it ends, from now on."""
    global _hide, _show
    with _lock:
        _hide, _show = hide, show
        if "torch._dynamo" in sys.modules:
            _register()


def _register() -> None:
    """Dynamo is imported: skip memaudit's hook frames, and register the compile callbacks (they do
    nothing while no capture names modules; ``torch._dynamo.reset()`` drops them, so this checks)."""
    global _registered, _callbacks
    if not _registered:
        dynamo = sys.modules["torch._dynamo"]
        _skip_memaudit()
        optimized = getattr(getattr(dynamo, "eval_frame", None), "OptimizedModule", None)
        if optimized is not None and not OPTIMIZED_MODULE:
            OPTIMIZED_MODULE.append(optimized)
        _callbacks = getattr(dynamo, "callback_handler", None)  # one object for the process (reset() clears it)
        _registered = True
    callbacks = _callbacks
    if callbacks is not None and _started not in getattr(callbacks, "start_callbacks", ()):
        callbacks.register_start_callback(_started)
        callbacks.register_end_callback(_ended)


def registered() -> None:
    """Register again if ``torch._dynamo.reset()`` dropped the callbacks (a compiled module is
    called: it may compile now)."""
    with _lock:
        if _hide is not None:
            _register()


def _started(args: Any) -> None:
    hide = _hide
    if hide is not None:
        hide()


def _ended(args: Any) -> None:
    show = _show
    if show is not None:
        show()


class _DynamoImport(importlib.abc.MetaPathFinder):
    """Registers the compile callbacks once ``torch._dynamo`` has been imported."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch._dynamo":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Then(spec.loader)
        return spec


class _Then(importlib.abc.Loader):
    """A loader that runs the real one, then registers the callbacks."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        global _finder
        self.loader.exec_module(module)
        with _lock:
            if _finder is not None:
                try:
                    sys.meta_path.remove(_finder)
                except ValueError:
                    pass
                _finder = None
            _register()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

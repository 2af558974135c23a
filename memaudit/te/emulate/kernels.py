"""Every TE kernel entry point, guarded: a stand-in, a real kernel, or an error that names it.

TE's Python reaches its C++ through the extension module ``transformer_engine_torch`` (``tex``),
and several TE modules bind its functions by name (``cpp_extensions/__init__.py`` star-imports
it; ``ops/basic/rmsnorm.py`` imports two). Inside :func:`kernel_table` every binding of every
``tex`` function, in ``tex`` and in every ``transformer_engine`` module, is replaced:

- a name in ``standins`` calls the stand-in (it allocates what the C++ would; contents are zeros
  or empty);
- a name in ``real`` calls the real kernel (preferred where it runs correctly here);
- a name in :data:`QUERIES` (versions, sizes: no kernel) calls through;
- any other name raises :class:`MissingStandIn` naming it: it never falls through to a kernel.

On exit every binding is put back, also bindings modules made while inside. The log says which
entry points the forward called and of which kind.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

QUERIES = frozenset({
    "get_cublasLt_version", "get_cudnn_version", "get_num_cublas_streams",
    "get_grouped_gemm_setup_workspace_size", "device_supports_multicast", "get_stream_priority_range",
})  # fmt: skip
"""``tex`` functions that answer questions and launch nothing: they always call through."""


class MissingStandIn(RuntimeError):
    """The forward reached a TE kernel entry point that has no stand-in here."""

    def __init__(self, name: str) -> None:
        where = name if "." in name else f"tex.{name}"
        super().__init__(f"TE kernel entry point {where} has no stand-in (emulated kernels); it was not run")
        self.entry_point = name


@dataclass
class KernelLog:
    """Which entry points ran inside the table, by kind, in first-call order."""

    standins: dict[str, int] = field(default_factory=dict)
    real: dict[str, int] = field(default_factory=dict)
    queries: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def note(self, kind: str, name: str) -> None:
        """Count one call of ``name`` under ``kind`` (standins, real or queries)."""
        book: dict[str, int] = getattr(self, kind)
        book[name] = book.get(name, 0) + 1


def _is_function(f: Any) -> bool:
    return isinstance(f, types.BuiltinFunctionType | types.FunctionType)


def tex_functions() -> dict[str, Any]:
    """``tex``'s functions by name, those of its submodules as ``sub.name``
    (``grouped_mlp_experimental.swizzle_scales_and_pack_ptrs_for_discrete_weights``); its
    classes and enums are left alone."""
    return {name: getattr(owner, attr) for name, (owner, attr) in _owners().items()}


def _owners() -> dict[str, tuple[Any, str]]:
    import transformer_engine_torch as tex

    out: dict[str, tuple[Any, str]] = {}
    for n, f in vars(tex).items():
        if n.startswith("_"):
            continue
        if _is_function(f):
            out[n] = (tex, n)
        elif isinstance(f, types.ModuleType):
            out.update({f"{n}.{m}": (f, m) for m, g in vars(f).items() if _is_function(g) and not m.startswith("_")})
    return out


def _te_modules() -> list[Any]:
    return [
        m
        for name, m in list(sys.modules.items())
        if m is not None and (name.startswith("transformer_engine") or name == "transformer_engine_torch")
    ]


Route = Callable[[str, Callable[..., Any], bool], Callable[..., Any]]
"""(entry point, call, answers) -> the call reporting its reads (:func:`memaudit.te.capture.reads.routed`):
``answers`` for a stand-in, whose read set is the whole truth."""


@contextmanager
def kernel_table(
    standins: dict[str, Callable[..., Any]], real: frozenset[str] = frozenset(), route: Route | None = None
) -> Iterator[KernelLog]:
    """Guard every ``tex`` function for the block (see the module docstring); yields the log.
    With ``route``, every stand-in and real call (not a query) goes through it."""
    owners = _owners()
    originals = {name: getattr(owner, attr) for name, (owner, attr) in owners.items()}
    unknown = sorted((set(standins) | set(real)) - set(originals))
    if unknown:
        raise ValueError(f"not tex functions: {', '.join(unknown)}")
    log = KernelLog()
    guards = {
        id(fn): _guard(name, fn, standins.get(name), name in real or name in QUERIES, log, route)
        for name, fn in originals.items()
    }
    patched: list[tuple[Any, str, Any]] = []
    for name, (owner, attr) in owners.items():
        patched.append((owner, attr, originals[name]))
        setattr(owner, attr, guards[id(originals[name])])
    for module in _te_modules():  # bindings by name (cpp_extensions star-imports tex)
        for attr, value in list(vars(module).items()):
            guard = guards.get(id(value))
            if guard is not None and value is originals[guard.entry_point]:
                setattr(module, attr, guard)
                patched.append((module, attr, value))
    try:
        yield log
    finally:
        by_guard = {id(g): originals[g.entry_point] for g in guards.values()}
        for module in _te_modules():  # also modules that bound a guard while inside
            for attr, value in list(vars(module).items()):
                if id(value) in by_guard:
                    setattr(module, attr, by_guard[id(value)])
        for module, attr, value in reversed(patched):
            setattr(module, attr, value)


def _guard(
    name: str,
    original: Any,
    standin: Callable[..., Any] | None,
    passthrough: bool,
    log: KernelLog,
    route: Route | None = None,
) -> Any:
    if standin is not None:
        run = standin if route is None else route(name, standin, True)

        def call(*args: Any, **kwargs: Any) -> Any:
            log.note("standins", name)
            return run(*args, **kwargs)
    elif passthrough:
        kind = "queries" if name in QUERIES else "real"
        real = original if route is None or kind == "queries" else route(name, original, False)

        def call(*args: Any, **kwargs: Any) -> Any:
            log.note(kind, name)
            return real(*args, **kwargs)
    else:

        def call(*args: Any, **kwargs: Any) -> Any:
            log.missing.append(name)
            raise MissingStandIn(name)

    call.__name__ = call.__qualname__ = name
    call.entry_point = name  # type: ignore[attr-defined]
    return call

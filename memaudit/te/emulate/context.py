"""One context for TE's real forward on an emulated machine: gates, versions, fusion, kernels.

Inside :func:`emulation`:

- TE's capability gates answer for the emulated architecture (:func:`.gates.emulated_arch`);
- ``tex.get_cublasLt_version`` and the cuDNN-frontend version TE reads from package metadata
  (``ops/fused/grouped_mlp.py:66-72``) report the emulated machine's (:class:`Machine`);
- a ``cudnn`` module with the cuDNN-frontend ``grouped_gemm_*_wrapper_sm100`` stand-ins is in
  ``sys.modules`` (the fused op imports its kernels from it, ``grouped_mlp.py:1058``, ``2760``);
- every ``lru_cache`` in ``grouped_mlp.py`` and ``utils.py`` (``is_non_tn_fp8_gemm_supported``
  reads the capability once) is cleared on entry and on exit, and the fused
  grouped-MLP fusions TE registers at import time only when ``is_supported()`` said yes
  (``grouped_mlp.py``, last lines) are registered when they say yes now, and removed on exit;
- ``torch.cuda.get_device_capability``, which ``general_grouped_gemm_for_grouped_tensor`` reads
  directly (``cpp_extensions/gemm.py:676``), reports the emulated capability;
- every ``tex`` entry point is a stand-in, a real kernel or an error naming it
  (:func:`.kernels.kernel_table`), and every call reports what it reads to an active unread
  observer (:func:`memaudit.te.capture.reads.routed`).

Everything is put back on exit, also when the block raises.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from memaudit.te.capture.reads import emulation_table, routed
from memaudit.te.emulate.gates import ARCHS, emulated_arch
from memaudit.te.emulate.kernels import KernelLog, kernel_table


@dataclass(frozen=True)
class Machine:
    """The emulated machine: architecture and the library versions TE's gates read."""

    arch: str = "sm100"
    cublaslt: int = 130600
    """``tex.get_cublasLt_version()``: 13.6.0, the newest any TE 2.20.2 gate asks for."""
    cudnn_frontend: str = "1.28.0"
    """The nvidia-cudnn-frontend version: the newest any 2.20.2 feature check asks for (its wheel
    requires >= 1.29.0, which takes the same paths)."""

    def describe(self) -> dict[str, str]:
        v = self.cublaslt
        return {
            "arch": self.arch,
            "cublaslt": f"{v // 10000}.{v // 100 % 100}.{v % 100}",
            "cudnn_frontend": self.cudnn_frontend,
        }


@dataclass
class EmulationLog:
    """What ran inside one :func:`emulation`: the kernel log and the fusions registered."""

    machine: Machine
    kernels: KernelLog = field(default_factory=KernelLog)
    fusions: list[str] = field(default_factory=list)


def _clear_caches(module: Any) -> None:
    """``cache_clear`` every lru_cache in ``module``: functions and classmethods of its classes."""
    for value in list(vars(module).values()):
        if hasattr(value, "cache_clear"):
            value.cache_clear()
        if isinstance(value, type) and value.__module__ == module.__name__:
            for attr in vars(value).values():
                fn = getattr(attr, "__func__", attr)
                if hasattr(fn, "cache_clear"):
                    fn.cache_clear()


@contextmanager
def _cudnn_module(wrappers: dict[str, Callable[..., Any]]) -> Iterator[types.ModuleType]:
    saved = sys.modules.get("cudnn", None)
    had = "cudnn" in sys.modules
    fake = types.ModuleType("cudnn", "memaudit: cuDNN-frontend kernel stand-ins (emulated kernels)")
    for name, fn in wrappers.items():
        setattr(fake, name, fn)
    sys.modules["cudnn"] = fake
    try:
        yield fake
    finally:
        if had:
            sys.modules["cudnn"] = saved  # type: ignore[assignment]
        else:
            sys.modules.pop("cudnn", None)


def _noted(log: EmulationLog, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    run = routed(f"cudnn.{name}", fn, answers=True)  # its reads, for an unread analysis

    def call(*args: Any, **kwargs: Any) -> Any:
        log.kernels.note("standins", f"cudnn.{name}")
        return run(*args, **kwargs)

    call.__name__ = name
    return call


@contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


FUSED_MODULES = ("grouped_mlp", "forward_grouped_mlp", "backward_grouped_mlp")
"""TE's fused grouped-MLP modules under ``transformer_engine.pytorch.ops.fused``: ``grouped_mlp``
(2.17 on: joint forward-backward fusions), ``forward_grouped_mlp`` / ``backward_grouped_mlp``
(2.14-2.16: separate forward and backward fusions). Those the imported TE has are patched."""


def fused_modules() -> list[Any]:
    """The fused grouped-MLP modules of the imported TE (imported here), in FUSED_MODULES order."""
    import importlib

    out = []
    for name in FUSED_MODULES:
        try:
            out.append(importlib.import_module(f"transformer_engine.pytorch.ops.fused.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"transformer_engine.pytorch.ops.fused.{name}":
                raise
    return out


@dataclass(frozen=True)
class Registration:
    """One import-time fusion registration of a TE module: ``if CLS.is_supported(): REGISTER(FUNC, **kwargs)``."""

    cls: str
    register: str
    func: str
    kwargs: tuple[tuple[str, Any], ...]


@functools.cache
def registrations(path: str) -> tuple[Registration, ...]:
    """The registrations a TE module makes at import time, read from its own source in order (so
    every TE version's fused ops register as that version registers them)."""
    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = []
    for node in tree.body:
        if not (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Call)
            and isinstance(node.test.func, ast.Attribute)
            and node.test.func.attr == "is_supported"
            and isinstance(node.test.func.value, ast.Name)
        ):
            continue
        for stmt in node.body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and len(call.args) == 1
                and isinstance(call.args[0], ast.Name)
            ):
                kwargs = tuple((k.arg, ast.literal_eval(k.value)) for k in call.keywords if k.arg is not None)
                out.append(Registration(node.test.func.value.id, call.func.id, call.args[0].id, kwargs))
    return tuple(out)


def _fusion_tables() -> list[list[Any]]:
    from transformer_engine.pytorch.ops.fuser import OperationFuser

    return [
        v for k, v in sorted(vars(OperationFuser).items()) if k.endswith("fusion_functions") and isinstance(v, list)
    ]


@contextmanager
def _fusions(modules: list[Any], log: EmulationLog) -> Iterator[None]:
    """Register the fused grouped-MLP fusions TE would have registered on this machine: each
    module's own import-time registrations (:func:`registrations`) whose ``is_supported()`` says
    yes now."""
    tables = _fusion_tables()
    added = []
    for module in modules:
        for reg in registrations(module.__file__):
            func = getattr(module, reg.func)
            if getattr(module, reg.cls).is_supported() and not any(func in t for t in tables):
                getattr(module, reg.register)(func, **dict(reg.kwargs))
                added.append(func)
                log.fusions.append(reg.cls)
    try:
        yield
    finally:
        for func in added:
            for table in tables:
                while func in table:
                    table.remove(func)


@contextmanager
def emulation(
    machine: Machine,
    standins: dict[str, Callable[..., Any]],
    cudnn: dict[str, Callable[..., Any]],
    real: frozenset[str] = frozenset(),
) -> Iterator[EmulationLog]:
    """TE's real Python on ``machine`` with ``standins`` for ``tex`` and ``cudnn`` for the
    cuDNN-frontend kernels; ``real`` names the ``tex`` kernels to run for real."""
    import torch
    import transformer_engine.pytorch.utils as te_utils

    modules = fused_modules()
    capability = ARCHS[machine.arch]
    log = EmulationLog(machine)
    version = PkgVersionAnswer(machine.cudnn_frontend)
    with ExitStack() as stack:
        stack.enter_context(emulated_arch(machine.arch))
        for gm in modules:
            stack.callback(_clear_caches, gm)  # run last on exit: TE's caches forget the emulation
        stack.callback(_clear_caches, te_utils)  # is_non_tn_fp8_gemm_supported and the like
        for gm in modules:
            if hasattr(gm, "_cudnn_frontend_version_at_least"):
                stack.enter_context(_patched(gm, "_cudnn_frontend_version_at_least", version))
        stack.enter_context(_frontend_supported(version))
        stack.enter_context(_patched(torch.cuda, "get_device_capability", lambda device=None: capability))
        table = {**standins, "get_cublasLt_version": lambda: machine.cublaslt}
        log.kernels = stack.enter_context(
            kernel_table(table, real, route=lambda name, fn, answers: routed(name, fn, answers=answers))
        )
        stack.enter_context(emulation_table())
        stack.enter_context(_cudnn_module({name: _noted(log, name, fn) for name, fn in cudnn.items()}))
        for gm in modules:
            _clear_caches(gm)
        _clear_caches(te_utils)
        stack.enter_context(_fusions(modules, log))
        yield log


@contextmanager
def _frontend_supported(version: PkgVersionAnswer) -> Iterator[None]:
    """TE 2.16's ``ops/_common.py`` ``_cudnn_frontend_version_supported`` (the fused op's >= 1.23.0
    check, reading package metadata, bound by name in ``forward_grouped_mlp``) answers for the
    emulated cuDNN-frontend version; TE versions without it are left alone."""
    common = sys.modules.get("transformer_engine.pytorch.ops._common")
    original = getattr(common, "_cudnn_frontend_version_supported", None) if common is not None else None
    if original is None:
        yield
        return

    def supported() -> bool:
        return version("1.23.0")

    bound = [
        m
        for name, m in list(sys.modules.items())
        if m is not None
        and name.startswith("transformer_engine")
        and vars(m).get("_cudnn_frontend_version_supported") is original
    ]
    for m in bound:
        setattr(m, "_cudnn_frontend_version_supported", supported)  # noqa: B010 - mypy: modules of any TE version
    try:
        yield
    finally:
        for m in bound:
            setattr(m, "_cudnn_frontend_version_supported", original)  # noqa: B010


class PkgVersionAnswer:
    """``_cudnn_frontend_version_at_least(v)`` for the emulated cuDNN-frontend version (TE's own
    comparison, ``packaging.version``; lru-cached as TE's is)."""

    def __init__(self, have: str) -> None:
        self.have = have
        self.__wrapped__ = functools.lru_cache(maxsize=None)(self._at_least)

    def _at_least(self, min_version: str) -> bool:
        from packaging.version import Version

        return Version(self.have) >= Version(min_version)

    def __call__(self, min_version: str) -> bool:
        return self.__wrapped__(min_version)

    def cache_clear(self) -> None:
        self.__wrapped__.cache_clear()

"""Target ``PKG.MOD:FACTORY``: any PyTorch model from a factory returning ``(model, inputs)``.

The factory is called with the case's ``CaseSpec`` if it takes an argument, else with none.
``inputs`` is a tuple of positional arguments (or one tensor). Forward is ``model(*inputs)``.
Case ids say only what the case is (see :class:`CustomTarget`).

With ``--device meta`` the factory, the forward and the backward run under
``torch.device("meta")``: tensors made without naming a device are meta tensors (shapes, no
values, nothing allocated), so a factory that ignores ``spec.device`` is audited on meta too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from typing import TYPE_CHECKING, Any

from memaudit.errors import Terminated, UsageError
from memaudit.spec import DTYPES, CaseSpec, ShapeParam, default_case_id
from memaudit.targets.base import MLP_SHAPE, Built, Target, backward_sum

if TYPE_CHECKING:
    from memaudit.capture import Capture


def load_factory(ref: str) -> Any:
    """Import ``PKG.MOD:FACTORY``; a failure is a UsageError naming --target and the value."""
    mod_name, _, attr = ref.partition(":")
    if not mod_name or not attr:
        raise UsageError(f"expected PKG.MOD:FACTORY, got {ref!r}", key="--target")
    try:
        module = importlib.import_module(mod_name)
    except Terminated:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import failure (a sys.exit too) is bad input here
        raise UsageError(
            f"cannot import {mod_name!r} from {ref!r}: {type(exc).__name__}: {exc}{_path_hint(exc, mod_name)}",
            key="--target",
        ) from exc
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise UsageError(f"{mod_name!r} has no callable {attr!r} (from {ref!r})", key="--target")
    return factory


def _path_hint(exc: BaseException, mod_name: str) -> str:
    """``; ... PYTHONPATH=.`` where the module that is missing is a file or package in the current
    folder, which the ``memaudit`` console script does not put on Python's path."""
    import os
    import sys
    from pathlib import Path

    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return ""
    top = Path(*exc.name.split("."))
    here = Path.cwd()
    if not (here / top.with_suffix(".py")).is_file() and not (here / top).is_dir():
        return ""
    if any(os.path.abspath(p or ".") == str(here) for p in sys.path):
        return ""
    return (
        f"; {top.with_suffix('.py') if (here / top.with_suffix('.py')).is_file() else str(top) + '/'} is in the "
        f"current folder, which is not on Python's path: run with PYTHONPATH=. (or pip install your package)"
    )


@functools.cache
def takes_spec(ref: str) -> bool | None:
    """Whether factory ``ref`` takes the case's ``CaseSpec`` (a required argument), or None where it
    cannot be imported here (then it is taken to take one: nothing is hidden from its id). A
    factory whose parameters all have defaults (``def build(spec=None)``) is called with none:
    its model is what its defaults make, so its ids name no grouped-MLP dimensions."""
    try:
        factory = load_factory(ref)
    except UsageError:
        return None
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: called with the spec
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return any(p.kind in positional and p.default is inspect.Parameter.empty for p in params)


def built_dtype(factory: Any) -> str | None:
    """The dtype (``bf16``, ``fp32``) of the floating-point parameters (else inputs) a factory that
    takes no spec builds, from one build on the meta device (no values, nothing allocated); None
    where it builds another dtype or a mix, or the meta build fails (the real build then says why)."""
    import torch

    try:
        with torch.device("meta"):
            model, inputs = factory()
    except Exception:  # noqa: BLE001 - the real build reports it as the case's error
        return None
    formats = built_formats(model, inputs if isinstance(inputs, tuple) else (inputs,))
    return formats[0] if len(formats) == 1 and formats[0] in DTYPES else None


def built_formats(model: Any, args: tuple[Any, ...]) -> list[str]:
    """The formats (``bf16``, ``fp32``), sorted, of the floating-point parameters of ``model``, or
    of the tensor inputs ``args`` where it has none."""
    import torch

    from memaudit.capture.tensors import format_of

    params: list[torch.Tensor] = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    floating = [t for t in (params or [a for a in args if isinstance(a, torch.Tensor)]) if t.is_floating_point()]
    return sorted({format_of(t.dtype) for t in floating})


class CustomTarget(Target):
    """Wraps a user factory.

    A factory that takes the spec is told the grouped-MLP dimensions (``--tokens``, ``--hidden``,
    ``--ffn``), the group count, dtype and device; one that takes none declares no dimensions (a
    dimension option is refused) and its case id names only what it runs: ``PKG.MOD:FACTORY/fp32``.
    The dtype defaults to ``fp32`` (PyTorch's default) for a factory told the spec, and to the
    dtype it builds (one build on the meta device) for one that takes none; a case whose model or
    inputs are not of its dtype and device is an error cell rather than a case whose id says
    something untrue.
    The custom target runs no quantization recipe: its one recipe (``bf16``, the built-ins' name
    for plain high precision) is not part of its ids.
    """

    recipes = ("bf16",)
    shape: tuple[ShapeParam, ...] = MLP_SHAPE
    defaults: dict[str, Any] = {"tokens": 1024, "hidden": 256, "ffn": 512, "groups": (1,), "dtype": "fp32"}
    default_device = "cpu"

    @staticmethod
    def runs_here() -> bool:
        return True

    @staticmethod
    def shape_of(ref: str) -> tuple[ShapeParam, ...]:
        """The dimensions factory ``ref`` is told: the grouped MLP's, or none when it takes no spec."""
        return MLP_SHAPE if takes_spec(ref) is not False else ()

    @staticmethod
    def custom_case_id(spec: CaseSpec) -> str:
        """``PKG.MOD:FACTORY/gG/tT-hH-fF/dtype`` for a factory told the shape, else ``PKG.MOD:FACTORY/dtype``
        (the default id without the recipe: the custom target runs one)."""
        if spec.shape:
            return default_case_id(spec, MLP_SHAPE).replace(f"/{spec.recipe}/", "/", 1)
        opts = ",".join(f"{k}={v}" for k, v in sorted(spec.options.items()))
        return f"{spec.target}/{spec.dtype}" + (f"/{opts}" if opts else "")

    def case_id(self, spec: CaseSpec) -> str:
        return self.custom_case_id(spec)

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.factory = load_factory(ref)
        self.shape = self.shape_of(ref)
        if takes_spec(ref) is False:  # it builds what it builds: without --dtype, the case says that dtype
            self.defaults = {**self.defaults, "dtype": built_dtype(self.factory) or self.defaults["dtype"]}

    @property
    def name(self) -> str:
        return self.ref

    def skip_reason(self, spec: CaseSpec) -> str | None:
        return None

    def build(self, spec: CaseSpec) -> Built:
        takes = takes_spec(self.ref) is not False
        on = _default_device(spec.device)
        with on():
            model, inputs = self.factory(spec) if takes else self.factory()
        args = inputs if isinstance(inputs, tuple) else (inputs,)
        problem = mismatch(model, args, spec, takes)
        if problem is not None:
            raise ValueError(problem)

        def forward(cap: Capture) -> Any:
            with on():
                return model(*args)

        def backward(outputs: Any) -> None:
            with on():
                backward_sum(outputs)

        return Built(forward=forward, backward=backward, model=model, inputs=args)


def _default_device(device: str) -> Any:
    """A context that makes ``device`` the default for new tensors on meta, else does nothing."""
    if device == "meta":
        import torch

        return lambda: torch.device("meta")
    return contextlib.nullcontext


def mismatch(model: Any, args: tuple[Any, ...], spec: CaseSpec, takes_spec: bool) -> str | None:
    """Why the built model and inputs are not what ``spec`` (and so its id) says: another dtype or
    device; None when they agree. The dtype is that of the floating-point parameters (of the
    inputs where the model has none); a mix agrees when the spec's dtype is among them."""
    import torch

    params = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    tensors = [*params, *(a for a in args if isinstance(a, torch.Tensor))]
    how = "build spec.dtype and spec.device in the factory, or run with" if takes_spec else "run with"
    formats = built_formats(model, args)
    if formats and spec.dtype not in formats:
        fix = f"--dtype {formats[0]}" if len(formats) == 1 else f"--dtype {' or '.join(formats)}"
        return (
            f"the factory built {'/'.join(formats)} tensors, but the case (and its id) says {spec.dtype}: {how} {fix}"
        )
    want = torch.device(spec.device)
    for t in tensors:
        if t.device.type != want.type or (want.index is not None and t.device.index not in (None, want.index)):
            return (
                f"the factory built tensors on {t.device}, but the case says {spec.device}: {how} --device "
                f"{t.device.type}"
            )
    return None

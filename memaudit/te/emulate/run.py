"""One emulated case: which kernels are stand-ins, the context around its forward, its label."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memaudit.report import Emulation
from memaudit.te.emulate.context import EmulationLog, Machine, emulation, fused_modules
from memaudit.te.emulate.cudnn import CUDNN_STANDINS
from memaudit.te.emulate.families import standins
from memaudit.te.emulate.gates import ARCHS
from memaudit.te.emulate.kernels import tex_functions
from memaudit.te.emulate.standins import NEVER_REAL, STANDINS
from memaudit.te.machine.recipes import FUSED_ENV


def here_arch() -> str | None:
    """The architecture name of this machine's GPU, or None (no GPU, fake CUDA in force, or a GPU
    not in ARCHS): only a real GPU of the emulated architecture runs real kernels."""
    import torch

    from memaudit.te.emulate import fakecuda

    if fakecuda.active() is not None or not torch.cuda.is_available():
        return None
    cc = torch.cuda.get_device_capability()
    return next((name for name, v in ARCHS.items() if v == cc), None)


def default_cublaslt(arch: str) -> int:
    """This GPU's cuBLASLt when it is ``arch`` (so emulating the machine at hand takes its
    paths), else 13.6.0 (:class:`Machine`)."""
    if here_arch() == arch:
        import transformer_engine_torch as tex

        return int(tex.get_cublasLt_version())
    return Machine().cublaslt


def parse_cublaslt(text: str) -> int:
    """``13.6.0`` (or ``130600``) -> 130600; ValueError otherwise."""
    if text.isdigit():
        return int(text)
    major, minor, *patch = (int(p) for p in text.split("."))
    return major * 10000 + minor * 100 + (patch[0] if patch else 0)


class EmulatedRun:
    """``kernels`` is ``emulated`` (real kernels where this GPU is the emulated architecture,
    GEMMs and cuDNN-frontend kernels always stand-ins) or ``standins`` (every kernel)."""

    def __init__(
        self,
        kernels: str,
        arch: str,
        fused: bool,
        recipe: str,
        cublaslt: int | None = None,
        cudnn_frontend: str = Machine.cudnn_frontend,
    ) -> None:
        self.kernels = kernels
        self.machine = Machine(arch, cublaslt if cublaslt is not None else default_cublaslt(arch), cudnn_frontend)
        self.fused = fused
        self.recipe = recipe
        self.log: EmulationLog | None = None
        """The forward's log (the case's label)."""
        self.backward_log: EmulationLog | None = None
        """The last backward's log."""

    def real(self) -> frozenset[str]:
        if self.kernels != "emulated" or here_arch() != self.machine.arch:
            return frozenset()
        return frozenset(STANDINS) - NEVER_REAL

    @contextmanager
    def active(self, backward: bool = False) -> Iterator[EmulationLog]:
        """The emulation around one forward (or, with ``backward``, around the backward of the
        forward that ran in it before), with the fused switch this case asks for."""
        old = os.environ.get(FUSED_ENV)
        os.environ[FUSED_ENV] = "1" if self.fused else "0"
        real = self.real()
        table = {k: v for k, v in standins(STANDINS, set(tex_functions())).items() if k not in real}
        try:
            with emulation(self.machine, table, CUDNN_STANDINS, real=real) as log:
                if backward:
                    self.backward_log = log
                else:
                    self.log = log
                yield log
        finally:
            if old is None:
                os.environ.pop(FUSED_ENV, None)
            else:
                os.environ[FUSED_ENV] = old

    def describe(self) -> Emulation:
        """The case's label: machine, the stand-ins and real kernels its forward called."""
        from memaudit.te.emulate.host import name  # imports torch (fake CUDA): only when asked

        log = self.log
        kernels: Any = log.kernels if log is not None else None

        return Emulation(
            machine={**self.machine.describe(), "kernels": self.kernels, "host": name()},
            standins=sorted(kernels.standins) if kernels else [],
            real=sorted(kernels.real) if kernels else [],
            fusions=list(log.fusions) if log is not None else [],
        )


@contextmanager
def emulated(arch: str = "sm100", *, fused: bool | None = None, kernels: str = "emulated") -> Iterator[EmulatedRun]:
    """TE's real Python on an emulated ``arch`` around a block of the caller's own code (the
    ``saved_budget`` marker's ``emulate``): gates, versions, stand-ins and the fused op's
    registration, fused where TE fuses on ``arch`` unless ``fused`` says otherwise. On a machine
    with no GPU the block must already run on fake CUDA (:mod:`memaudit.te.emulate.host`)."""
    run = EmulatedRun(kernels, arch, arch == "sm100" if fused is None else fused, recipe="")
    with run.active():
        yield run


def import_te_modules() -> None:
    """Import what an emulated case imports on first use: the TE modules :func:`emulation`
    patches and memaudit's own TE modules (a process that forks cases imports them once, not
    every child)."""
    import transformer_engine.pytorch.tensor.nvfp4_tensor  # noqa: F401
    import transformer_engine.pytorch.utils  # noqa: F401

    fused_modules()  # whichever fused grouped-MLP modules this TE version has

    import memaudit.te.capture.classify  # noqa: F401  (after TE: it reads TE's classes)

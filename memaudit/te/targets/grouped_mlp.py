"""Target ``te-grouped-mlp``: TE's ``te.ops.Sequential(GroupedLinear, ScaledSwiGLU, GroupedLinear)``.

Built as TE's own tests build it (te-internals §3): discrete weights by default, the same
``split_sizes`` tensor for FC1 and FC2, ``probs`` as the activation's extra input. TE is imported
lazily, after ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` has been set (TE caches it at import, §1.1).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from memaudit.errors import UsageError
from memaudit.report import PathInfo, Row
from memaudit.spec import CaseSpec, RunFlag
from memaudit.targets.base import MLP_SHAPE, Built, Fallback, Target, backward_sum
from memaudit.te.emulate.gates import ARCHS, emulated_arch
from memaudit.te.emulate.gates import ARCHS as EMULATED_ARCHS
from memaudit.te.estimate.expected import attach_expected
from memaudit.te.machine.fallback import grouped_mlp_fallback, notes
from memaudit.te.machine.probes import (  # noqa: F401 - re-exported: tests and bench name them here
    cublaslt_version,
    cudnn_frontend_version,
    fmt_cublaslt,
    grouped_linear_path,
    import_te,
    make_recipe,
    recipe_availability,
    recipe_gate,
    set_fused_env,
    why_fused_cannot_register,
    why_not_fused,
)
from memaudit.te.machine.recipes import FUSED_ENV as FUSED_ENV
from memaudit.te.machine.recipes import RECIPES, alignment, needs
from memaudit.te.machine.suspected import annotated

if TYPE_CHECKING:
    import torch

    from memaudit.capture import Capture

_CUDA_OUTSIDE_KERNELS = (
    "cpp_extensions/gemm.py:408 _empty_tensor() = torch.Tensor().cuda(); gemm.py:658 "
    "'alpha and beta must be CUDA tensors'; ops/fused/grouped_mlp.py:1508 torch.cuda.current_stream; "
    "tensor/nvfp4_tensor.py:175 torch.cuda.current_device() in NVFP4Quantizer"
)
"""Where TE 2.20.2's forward needs CUDA outside its kernels (why it runs neither on CPU nor on meta
tensors; with no GPU, fake CUDA tensors answer these, :mod:`memaudit.te.emulate.fakecuda`)."""
ACTIVATIONS = ("swiglu", "clamped-qgeglu", "srelu")
KERNELS = ("real", "emulated", "standins")
EMULATED_WARNING = (
    "emulated kernels: TE's real Python with stand-in kernels (what the forward saved for backward is "
    "complete; backward runs only for --unread, to see what it reads; no values are meaningful)"
)
"""The warning every emulated case carries."""
EMULATED_WARNING_BEFORE = (
    "emulated kernels: forward only (what the forward saved for backward is complete; backward "
    "did not run, and no values are meaningful)"
)
"""What emulated cases said before backward could run under emulation (committed reports)."""


@dataclass(frozen=True)
class Emulated:
    """``--kernels emulated|standins``: the kernel policy, the emulated architecture, and
    whether the fused switch is on inside the emulation."""

    kernels: str
    arch: str
    fused: bool
    cublaslt: int | None = None
    cudnn_frontend: str = "1.28.0"


@dataclass(frozen=True)
class GroupedMLPPath:
    """What the grouped MLP's ``path`` records (the JSON keys, in this order)."""

    forward_ops: list[str]
    fused: bool
    fused_env: str
    why_not_fused: str | None = None
    grouped_linear_path: str | None = None
    """``split-quantize`` or ``grouped-tensor``: which GroupedLinear path ran (unfused only)."""
    grouped_linear_why: str | None = None

    def info(self) -> PathInfo:
        fields = dict(vars(self))
        if self.fused:  # GroupedLinear's own path is not recorded when the fused op ran
            del fields["grouped_linear_path"], fields["grouped_linear_why"]
        return PathInfo(fields)


class TEGroupedMLPTarget(Target):
    """TE's grouped MLP; cases TE cannot run here are skipped with TE's reason."""

    name = "te-grouped-mlp"
    recipes = RECIPES
    default_recipes = RECIPES
    supported_recipes = RECIPES
    shape = MLP_SHAPE
    path_keys = (
        *(f.name for f in fields(GroupedMLPPath)),
        "estimated",
        "name",
        "arch",
        "dense_single_group",
        "padding",
    )
    """What a case's ``path`` may hold (:class:`GroupedMLPPath`, and the estimator's keys): a
    scenario's ``when`` keys are checked against it."""
    defaults: dict[str, Any] = {"tokens": 4096, "hidden": 1024, "ffn": 2048, "groups": (1, 4, 8), "dtype": "bf16"}
    default_device = "cuda"
    flags = (
        RunFlag(
            "fused",
            bool | None,
            None,
            f"TE target: set {FUSED_ENV} before TE is imported (see memaudit doctor). Default: fused where TE can "
            "fuse (compute capability 10.x).",
            ("--fused/--no-fused",),
        ),
        RunFlag(
            "single_grouped_weight", bool, False, "TE target: one grouped weight parameter instead of discrete ones."
        ),
        RunFlag("activation", Literal[ACTIVATIONS], "swiglu", "TE target activation."),
        RunFlag(
            "kernels",
            Literal[KERNELS],
            "real",
            "TE target. emulated runs TE's real forward (and, for --unread, its backward) on an emulated "
            "machine (--arch) with kernel stand-ins that allocate as TE's C++ does, real kernels only where this "
            "GPU is that architecture; standins replaces every kernel. With no GPU (torch's CUDA build) each case "
            "runs on fake CUDA in a child process.",
        ),
        RunFlag(
            "arch",
            Literal[tuple(EMULATED_ARCHS)],
            "sm100",
            "TE target with --kernels emulated|standins: the emulated architecture.",
        ),
        RunFlag(
            "cublaslt",
            str | None,
            None,
            "TE target with --kernels emulated|standins: the emulated cuBLASLt version "
            "(e.g. 13.1.0; TE's path choice reads it). Default: this GPU's when it is --arch, else 13.6.0.",
        ),
        RunFlag(
            "cudnn_frontend",
            str,
            "1.28.0",
            "TE target with --kernels emulated|standins: the emulated nvidia-cudnn-frontend "
            "version (TE's fused-op feature checks read it; below 1.27 a single group takes the grouped path).",
        ),
    )

    @staticmethod
    def runs_here() -> bool:
        """TE is installed (not imported: the fused switch must come first) and its forward runs
        here: on a GPU, or with emulated kernels on fake CUDA (torch's CUDA build, no GPU)."""
        import importlib.util

        from memaudit.te.emulate.host import unavailable  # imports torch (fake CUDA): only when asked

        return importlib.util.find_spec("transformer_engine") is not None and unavailable() is None

    @staticmethod
    def alignment(recipe: str) -> int:
        return alignment(recipe)

    @staticmethod
    def path_label(path: PathInfo) -> str | None:
        """``fused``, or GroupedLinear's path (``split-quantize`` / ``grouped-tensor``); estimates
        name their modelled path."""
        if path.get("estimated"):
            return path.get("name")
        if path.fused:
            return "fused"
        return path.get("grouped_linear_path") or path.label()

    @staticmethod
    def path_detail(path: PathInfo) -> str:
        """The forward ops the fuser ran (what a path rule's failure shows)."""
        ops = path.get("forward_ops")
        return f"forward ops: {', '.join(map(str, ops))}" if isinstance(ops, list) and ops else ""

    def configuration(self, flags: dict[str, Any]) -> dict[str, Any]:
        """``fused`` sets NVTE_CUTEDSL_FUSED_GROUPED_MLP before TE's import (an environment
        setting, recorded per case, not part of the id); ``single_grouped_weight`` and a
        non-default ``activation`` are options; ``kernels``/``arch``/... make ``emulated``."""
        activation = flags.get("activation", "swiglu")
        if activation not in ACTIVATIONS:
            raise UsageError(
                f"unknown activation {activation!r}; use one of {', '.join(ACTIVATIONS)}", key="--activation"
            )
        kernels = flags.get("kernels", "real")
        if kernels not in KERNELS:
            raise UsageError(f"unknown kernels {kernels!r}; use one of {', '.join(KERNELS)}", key="--kernels")
        arch = flags.get("arch", "sm100")

        if arch not in ARCHS:
            raise UsageError(f"unknown architecture {arch!r}; use one of {', '.join(ARCHS)}", key="--arch")
        emulated = None
        if kernels == "real":
            set_fused_env(flags.get("fused"))
        else:
            # TE reads the fused switch at import (and its import-time check needs a GPU of that
            # architecture), so it stays off for the import and is set inside each emulated forward.
            set_fused_env(False)
            fused = flags.get("fused")
            lt = flags.get("cublaslt")
            if lt is not None:
                from memaudit.te.emulate.run import parse_cublaslt

                try:
                    lt = parse_cublaslt(lt)
                except ValueError:
                    raise UsageError(f"expected a version such as 13.6.0, got {lt!r}", key="--cublaslt") from None
            fe = flags.get("cudnn_frontend", "1.28.0")
            from packaging.version import InvalidVersion, Version

            try:
                Version(fe)
            except InvalidVersion:
                raise UsageError(f"expected a version such as 1.28.0, got {fe!r}", key="--cudnn-frontend") from None
            emulated = Emulated(kernels, arch, fused if fused is not None else arch == "sm100", lt, fe)
        options: dict[str, Any] = {}
        if flags.get("single_grouped_weight"):
            options["single_grouped_weight"] = True
        if activation != "swiglu":
            options["activation"] = activation
        return {"options": options, "emulated": emulated}

    emulated: Emulated | None = None
    """The emulated machine of a target configured with ``--kernels emulated|standins``."""
    fallback_recipes = RECIPES
    supported_recipes = RECIPES

    def fallback(self, spec: CaseSpec, reason: str, mode: str, *, backward: bool = True) -> Fallback | None:
        """A case TE refuses on real kernels here: TE's real forward with emulated kernels wherever
        it runs (a GPU, or fake CUDA), else TE's layout rules (:mod:`memaudit.te.machine.fallback`). None
        with ``--kernels emulated|standins``: the user chose the machine."""
        if self.emulated is not None:
            return None

        return grouped_mlp_fallback(
            type(self), spec, reason, mode, dict(self.flags_given), backward=backward, defaults=self.defaults
        )

    def execution_label(self, case: Any) -> str | None:
        """``estimated sm100``: an estimate names the architecture it modelled (``path.arch``)."""
        if case.emulation is None and case.execution == "estimated":
            arch = case.path.get("arch") if case.path is not None else None
            return f"estimated {arch}" if arch else "estimated"
        return super().execution_label(case)

    def notes(self, case: Any) -> list[str]:
        """An emulated answer that failed, and was replaced by the estimate, says why."""

        return notes(case)

    def attach_expected(self, case: Any) -> int | None:
        """``run --expected``: the estimator's rows beside the measured ones (:mod:`memaudit.te.estimate.expected`)."""

        return attach_expected(case)

    def skip_reason(self, spec: CaseSpec) -> str | None:
        import torch

        from memaudit.te.emulate import host  # imports torch (fake CUDA): only when asked

        if spec.device == "meta":
            return (
                "TransformerEngine does not run on meta: its forward makes and checks CUDA tensors outside any "
                f"kernel, which kernel stand-ins cannot replace ({_CUDA_OUTSIDE_KERNELS})"
            )
        fused = spec.options.get("fused")
        if fused is not None and not isinstance(fused, bool):
            return f"option fused must be true or false, got {fused!r}"
        if fused is not None and self.emulated is None and os.environ.get(FUSED_ENV, "0") != ("1" if fused else "0"):
            return (
                f"option fused = {fused} needs {FUSED_ENV}={'1' if fused else '0'} at TE's import, and this process "
                "has "
                f"{os.environ.get(FUSED_ENV, '0')!r}: on real kernels choose it with --fused/--no-fused (with "
                "--kernels emulated it is chosen per case)"
            )
        if importlib.util.find_spec("transformer_engine") is None:  # the first thing missing, as doctor says it
            return "TransformerEngine is not installed"
        if self.emulated is not None:
            if not spec.device.startswith("cuda"):
                return (
                    f"emulated kernels run TE's forward on CUDA tensors (device {spec.device!r}; use --device cuda, "
                    "which with no GPU is fake CUDA): TE's forward uses CUDA outside any kernel "
                    f"({_CUDA_OUTSIDE_KERNELS})"
                )
            why = host.unavailable()
            if why is not None:
                return f"emulated kernels cannot run here: {why}"
        elif not spec.device.startswith("cuda") or not torch.cuda.is_available():
            return (
                f"TransformerEngine runs on CUDA only (no CUDA device here; TE runs {spec.recipe} on "
                f"{needs(spec.recipe)})"
            )
        te, why = import_te()
        if te is None:
            return why
        if self.emulated is not None:
            with host.cuda_answers(self.emulated.arch), emulated_arch(self.emulated.arch):
                ok, reason = recipe_gate(te, spec.recipe)
        else:
            ok, reason = recipe_gate(te, spec.recipe)
        return None if ok else (reason or f"{spec.recipe} is not available on this GPU")

    def case_host(self, spec: CaseSpec) -> Any:
        """With emulated kernels and no GPU, the case runs on fake CUDA in a child process
        (:mod:`memaudit.te.emulate.host`); else here (None)."""

        from memaudit.te.emulate import host  # imports torch (fake CUDA): only when asked

        if self.emulated is None or not spec.device.startswith("cuda") or not host.needs_child() or host.unavailable():
            return None
        arch = self.emulated.arch
        te, why = import_te()  # imported once here, not in every child
        if te is None:
            return None  # the case's own skip_reason says why
        from memaudit.te.emulate.run import import_te_modules

        import_te_modules()

        def run(case: Any) -> Any:
            from memaudit.te.emulate import host  # imports torch (fake CUDA): only when asked

            return host.run_in_child(arch, lambda: [case()])[0]

        return run

    def build(self, spec: CaseSpec) -> Built:
        import torch

        te, why = import_te()
        if te is None:
            raise RuntimeError(why)
        recipe = make_recipe(spec.recipe)
        dtype = torch.bfloat16 if spec.dtype == "bf16" else torch.float32
        activation = spec.options.get("activation", "swiglu")
        single = bool(spec.options.get("single_grouped_weight", False))
        fc1_out = spec.ffn if activation == "srelu" else 2 * spec.ffn
        torch.manual_seed(1234)
        common = {"bias": False, "device": spec.device, "dtype": dtype, "single_grouped_weight": single}
        fc1 = te.ops.GroupedLinear(spec.groups, spec.hidden, fc1_out, **common)
        act = {
            "swiglu": lambda: te.ops.ScaledSwiGLU(glu_interleave_size=32),
            "clamped-qgeglu": lambda: te.ops.ScaledClampedQGeGLU(glu_interleave_size=32),
            "srelu": lambda: te.ops.ScaledSReLU(),
        }[activation]()
        fc2 = te.ops.GroupedLinear(spec.groups, spec.ffn, spec.hidden, **common)
        model = te.ops.Sequential(fc1, act, fc2)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(spec.tokens, spec.hidden, generator=gen).to(spec.device, dtype).requires_grad_()
        split_sizes = torch.tensor(spec.split_sizes(), dtype=torch.int64, device=spec.device)
        probs = torch.rand(spec.tokens, generator=gen).to(spec.device).requires_grad_()

        def run_model() -> torch.Tensor:
            with te.autocast(enabled=recipe is not None, recipe=recipe):
                return model(x, split_sizes, probs, split_sizes)

        def forward(cap: Capture) -> torch.Tensor:
            cap.label(x, "fc1.input")
            cap.label(split_sizes, "fc1.split_sizes")
            cap.label(probs, "activation.scales")
            try:
                return run_model()
            except Exception as exc:
                said = annotated(exc)  # a failure traced to a suspected TE bug says so
                if said is exc:
                    raise
                raise said from exc

        def annotate(rows: list[Row], cap: Capture) -> PathInfo:
            return self._path(model, spec, recipe)

        if self.emulated is not None:
            return self._emulated_built(spec, recipe, model, (x, probs), forward, run_model)
        return Built(
            forward=forward,
            backward=backward_sum,
            annotate=annotate,
            options={"fused_env": os.environ.get(FUSED_ENV, "0")},
            model=model,
            inputs=(x, probs),
        )

    def _emulated_built(
        self, spec: CaseSpec, recipe: Any, model: Any, inputs: tuple[Any, ...], forward: Any, run_model: Any
    ) -> Built:
        """Forward and backward inside the emulation (TE's real Python, stand-in kernels).

        The backward runs when a read observer is active (``--unread``: what backward reads is
        the measurement); otherwise it is skipped, as it adds nothing to what the forward saved and
        its values mean nothing. On fake CUDA, where torch's autograd engine cannot run, backward
        is memaudit's engine (:mod:`memaudit.te.emulate.engine`); on a GPU, ``loss.backward()``."""
        from memaudit.te.emulate.run import EmulatedRun

        assert self.emulated is not None
        e = self.emulated
        run = EmulatedRun(
            e.kernels, e.arch, bool(spec.options.get("fused", e.fused)), spec.recipe, e.cublaslt, e.cudnn_frontend
        )
        paths: list[PathInfo] = []

        def emulated_forward(cap: Capture) -> Any:
            with run.active():
                out = forward(cap)
                called = (
                    frozenset(run.log.kernels.standins) | frozenset(run.log.kernels.real)
                    if run.log is not None
                    else None
                )
                paths.append(self._path(model, spec, recipe, frontend=run.machine.cudnn_frontend, called=called))
            return out

        def emulated_backward(outputs: Any) -> None:
            from memaudit.capture import reads
            from memaudit.te.emulate import engine, fakecuda  # imports torch: only when asked

            if reads.observer() is None:
                return
            with run.active(backward=True):
                if fakecuda.active() is not None:
                    engine.backward_sum(outputs)
                else:
                    backward_sum(outputs)

        return Built(
            forward=emulated_forward,
            backward=emulated_backward,
            annotate=lambda rows, cap: paths[-1] if paths else None,
            options={"fused_env": "1" if run.fused else "0"},
            model=model,
            inputs=inputs,
            warnings=[EMULATED_WARNING],
            emulation=run.describe,
        )

    def _path(
        self, model: Any, spec: CaseSpec, recipe: Any, frontend: str | None = None, called: frozenset[str] | None = None
    ) -> PathInfo:
        forward_ops: list[str] = []
        for group in getattr(model, "_module_groups", None) or ():
            for op, _idxs in getattr(group, "_forward_ops", ()):
                forward_ops.append(type(op).__name__)
        fused = any("GroupedMLP" in name for name in forward_ops)  # ForwardGroupedMLP_... in TE 2.14-2.16
        if fused:
            return GroupedMLPPath(forward_ops, True, os.environ.get(FUSED_ENV, "0")).info()
        name, why = grouped_linear_path(spec, recipe, called)
        return GroupedMLPPath(
            forward_ops, False, os.environ.get(FUSED_ENV, "0"), why_not_fused(spec, recipe, frontend), name, why
        ).info()

"""Target ``te-grouped-mlp``: TE's ``te.ops.Sequential(GroupedLinear, ScaledSwiGLU, GroupedLinear)``.

Built as TE's own tests build it (te-internals §3): discrete weights by default, the same
``split_sizes`` tensor for FC1 and FC2, ``probs`` as the activation's extra input. TE is imported
lazily, after ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` has been set (TE caches it at import, §1.1).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal

from memaudit.errors import UsageError
from memaudit.report import PathInfo, Row
from memaudit.spec import CaseSpec, RunFlag
from memaudit.targets.base import MLP_SHAPE, Built, Fallback, backward_sum
from memaudit.te.emulate.gates import ARCHS as EMULATED_ARCHS
from memaudit.te.recipes import RECIPES, alignment, needs
from memaudit.te.suspected import annotated

if TYPE_CHECKING:
    import torch

    from memaudit.capture import Capture

FUSED_ENV = "NVTE_CUTEDSL_FUSED_GROUPED_MLP"
_CUDA_OUTSIDE_KERNELS = (
    "cpp_extensions/gemm.py:408 _empty_tensor() = torch.Tensor().cuda(); gemm.py:658 "
    "'alpha and beta must be CUDA tensors'; ops/fused/grouped_mlp.py:1508 torch.cuda.current_stream; "
    "tensor/nvfp4_tensor.py:175 torch.cuda.current_device() in NVFP4Quantizer"
)
"""Where TE 2.20.2's forward needs CUDA outside its kernels (why it runs neither on CPU nor on meta
tensors; with no GPU, fake CUDA tensors answer these, :mod:`memaudit.te.emulate.fakecuda`)."""
ACTIVATIONS = ("swiglu", "clamped-qgeglu", "srelu")
KERNELS = ("real", "emulated", "standins")


def set_fused_env(fused: bool | None) -> str:
    """Set the fused-MLP env var before TE is imported; return the value in force.

    ``None`` means fused where TE can fuse: compute capability 10.x.
    """
    import torch

    if fused is None:
        can = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10
        value = os.environ.get(FUSED_ENV, "1" if can else "0")
    else:
        value = "1" if fused else "0"
    if "transformer_engine.pytorch" in sys.modules and os.environ.get(FUSED_ENV, "0") != value:
        raise RuntimeError(f"{FUSED_ENV} must be set before TE is imported; TE was imported with {os.environ.get(FUSED_ENV)!r}")
    os.environ[FUSED_ENV] = value
    return value


def import_te() -> tuple[Any, str | None]:
    """(transformer_engine.pytorch, None) or (None, why it does not import)."""
    try:
        import transformer_engine.pytorch as te  # noqa: F401  (torch is already imported)
    except Exception as exc:  # noqa: BLE001 - any import failure means "TE not usable here"
        return None, f"transformer_engine.pytorch does not import: {type(exc).__name__}: {exc}".strip()
    return te, None


def make_recipe(name: str) -> Any:
    """The TE recipe object for a memaudit recipe name (None for bf16)."""
    from transformer_engine.common import recipe as r

    if name == "bf16":
        return None
    if name == "fp8-delayed":
        return r.DelayedScaling()
    if name == "fp8-current":
        return r.Float8CurrentScaling()
    if name == "fp8-block":
        return r.Float8BlockScaling()
    if name == "mxfp8":
        return r.MXFP8BlockScaling(fp8_format=r.Format.E4M3)
    if name == "nvfp4":  # as TE's tests configure "nvfp4_rht" (te-internals §3)
        return r.NVFP4BlockScaling(
            disable_rht=False,
            disable_stochastic_rounding=True,
            disable_2d_quantization=True,
            row_scaled_activation=False,
            nvfp4_4over6="none",
        )
    raise ValueError(f"unknown recipe {name!r}")


def recipe_gate(te: Any, name: str) -> tuple[bool, str | None]:
    """TE's own answer, with its reason string, for one recipe (te-internals §4)."""
    checks = {
        "bf16": getattr(te, "is_bf16_available", None),
        "fp8-delayed": te.is_fp8_available,
        "fp8-current": te.is_fp8_available,
        "fp8-block": te.is_fp8_block_scaling_available,
        "mxfp8": te.is_mxfp8_available,
        "nvfp4": te.is_nvfp4_available,
    }
    fn = checks[name]
    if fn is None:
        return True, None
    try:
        res = fn(return_reason=True)
    except TypeError:
        res = (fn(), None)
    ok, reason = res if isinstance(res, tuple) else (bool(res), None)
    return bool(ok), reason or None


def recipe_availability(te: Any) -> dict[str, tuple[bool, str | None]]:
    """TE's own answer, with its reason string, for every recipe (te-internals §4)."""
    return {name: recipe_gate(te, name) for name in RECIPES}


def cudnn_frontend_version() -> str | None:
    try:
        return metadata.version("nvidia-cudnn-frontend")
    except metadata.PackageNotFoundError:
        return None


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


def why_fused_cannot_register(frontend: str | None = None) -> str | None:
    """The first failing condition of ``GroupedMLP_CuTeGEMMGLU.is_supported`` (te-internals §1.1);
    ``frontend`` is the cuDNN-frontend version to assume (an emulated machine's), else the installed one."""
    import torch

    from memaudit.te.emulate.host import cuda_here

    if int(os.environ.get(FUSED_ENV, "0") or 0) <= 0:
        return f"{FUSED_ENV} is not set to a positive value"
    if not cuda_here():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if major != 10:
        return f"compute capability {major}.{minor} is not 10.x (the fused CuTeDSL op needs Blackwell)"
    fe = frontend or cudnn_frontend_version()
    if fe is None:
        return "nvidia-cudnn-frontend is not installed (needs >= 1.23.0)"
    if _version_tuple(fe) < (1, 23, 0):
        return f"nvidia-cudnn-frontend {fe} < 1.23.0"
    try:
        from transformer_engine.pytorch.ops.fused.grouped_mlp import GroupedMLP_CuTeGEMMGLU as Fused
    except ImportError as exc:
        try:  # TE 2.14-2.16: the forward-only fused op
            from transformer_engine.pytorch.ops.fused.forward_grouped_mlp import (
                ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8 as Fused,
            )
        except ImportError:
            return f"the fused grouped MLP does not import: {exc}"
    if not Fused.is_supported():
        return "the cuDNN frontend grouped GEMM kernels do not import"
    return None


def why_not_fused(spec: CaseSpec, recipe: Any, frontend: str | None = None) -> str | None:
    """Every failing fusion condition for this case, TE's check order first (te-internals §1.1-1.2)."""
    import torch

    from memaudit.te.emulate.host import cuda_here

    reasons = []
    registered = why_fused_cannot_register(frontend)
    if registered:
        reasons.append(registered)
        if registered.startswith(FUSED_ENV) and cuda_here():
            major, minor = torch.cuda.get_device_capability()
            if major != 10:
                reasons.append(f"compute capability {major}.{minor} is not 10.x (the fused CuTeDSL op needs Blackwell)")
    if recipe is None or not (recipe.mxfp8() or recipe.nvfp4()):
        reasons.append(f"recipe {spec.recipe} never fuses (only mxfp8 and nvfp4 do)")
    elif recipe.nvfp4() and recipe.disable_rht:
        reasons.append("NVFP4 without RHT")
    elif recipe.mxfp8():
        from transformer_engine.common.recipe import Format

        if recipe.fp8_format != Format.E4M3:
            reasons.append(f"MXFP8 with fp8_format {recipe.fp8_format.name} (needs E4M3)")
    fc1_out = spec.ffn if spec.options.get("activation") == "srelu" else 2 * spec.ffn
    for name, value in (("hidden", spec.hidden), ("fc1 out", fc1_out), ("ffn", spec.ffn)):
        if value % 64:
            reasons.append(f"{name} {value} is not a multiple of 64")
    if spec.tokens % 128:
        reasons.append(f"tokens {spec.tokens} is not a multiple of 128")
    if not reasons:
        return "fusion conditions hold but TE did not fuse (check TE's activation list for this arch)"
    return "; ".join(reasons)


GROUPED_TENSOR_ENTRY_POINTS = ("group_quantize", "nvfp4_group_quantize_with_amax", "te_general_grouped_gemm_for_grouped_tensor")
SPLIT_ENTRY_POINTS = ("split_quantize", "te_general_grouped_gemm")


def grouped_linear_path(spec: CaseSpec, recipe: Any, called: frozenset[str] | None = None) -> tuple[str, str]:
    """Which GroupedLinear path TE takes and why, using TE's own predicate (te-internals §1.5).
    A TE version without the predicate (2.18 and older) is read from the kernel entry points its
    emulated forward ``called``."""
    import torch

    try:
        from transformer_engine.pytorch.ops.basic.grouped_linear import (
            is_op_fuser_grouped_tensor_path_supported,
        )
    except ImportError:
        why = "this TE has no is_op_fuser_grouped_tensor_path_supported"
        seen = sorted(set(called or ()) & {*GROUPED_TENSOR_ENTRY_POINTS, *SPLIT_ENTRY_POINTS})
        if any(n in GROUPED_TENSOR_ENTRY_POINTS for n in seen):
            return "grouped-tensor", f"{why}; its forward called {', '.join(seen)}"
        if seen:
            return "split-quantize", f"{why}; its forward called {', '.join(seen)}"
        return "unknown", f"{why}, and no grouped entry point was called"

    dtype = torch.bfloat16 if spec.dtype == "bf16" else torch.float32
    grouped = is_op_fuser_grouped_tensor_path_supported(recipe, dtype)
    return ("grouped-tensor" if grouped else "split-quantize"), _grouped_path_reason(spec, recipe, grouped)


def cublaslt_version() -> int | None:
    try:
        import transformer_engine_torch as tex

        return int(tex.get_cublasLt_version())
    except Exception:  # noqa: BLE001 - no CUDA runtime
        return None


def fmt_cublaslt(v: int | None) -> str:
    return "unknown" if v is None else f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def _grouped_path_reason(spec: CaseSpec, recipe: Any, grouped: bool) -> str:
    import transformer_engine.pytorch.utils as te_utils

    from memaudit.te.emulate.host import cuda_here

    cc = te_utils.get_device_compute_capability() if cuda_here() else (0, 0)
    v = cublaslt_version() or 0
    lt = f"cuBLASLt {fmt_cublaslt(v)}"
    if spec.dtype != "bf16":
        return f"dtype {spec.dtype} is not bf16/fp16"
    if not (9, 0) <= cc <= (11, 0):
        return f"compute capability {cc[0]}.{cc[1]} outside 9.0-11.0"
    if v < 130300:
        return f"{lt} < 13.3"
    if cc < (10, 0) and v < 130400:
        return f"{lt} < 13.4 on Hopper"
    if recipe is None:
        return f"bf16 with {lt} on compute capability {cc[0]}.{cc[1]}"
    if recipe.float8_current_scaling():
        return f"fp8 current scaling {'on Blackwell' if cc >= (10, 0) else ('with ' + lt + (' >= 13.5' if grouped else ' < 13.5 on Hopper'))}"
    if recipe.float8_block_scaling():
        return "fp8 block scaling: grouped path only on Hopper with cuBLASLt >= 13.6" + ("" if grouped else f" ({lt})")
    if recipe.delayed():
        return "DelayedScaling has no grouped quantize kernel: always split-quantize"
    return f"recipe {spec.recipe} on compute capability {cc[0]}.{cc[1]}"


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


class TEGroupedMLPTarget:
    """TE's grouped MLP; cases TE cannot run here are skipped with TE's reason."""

    name = "te-grouped-mlp"
    recipes = RECIPES
    default_recipes = RECIPES
    supported_recipes = RECIPES
    shape = MLP_SHAPE
    path_keys = (*(f.name for f in fields(GroupedMLPPath)), "estimated", "name", "arch", "dense_single_group", "padding")
    """What a case's ``path`` may hold (:class:`GroupedMLPPath`, and the estimator's keys): a
    scenario's ``when`` keys are checked against it."""
    defaults: dict[str, Any] = {"tokens": 4096, "hidden": 1024, "ffn": 2048, "groups": (1, 4, 8), "dtype": "bf16"}
    default_device = "cuda"
    flags = (
        RunFlag("fused", bool | None, None,
                f"TE target: set {FUSED_ENV} before TE is imported (see memaudit doctor). Default: fused where TE can fuse (compute capability 10.x).",
                ("--fused/--no-fused",)),
        RunFlag("single_grouped_weight", bool, False, "TE target: one grouped weight parameter instead of discrete ones."),
        RunFlag("activation", Literal[ACTIVATIONS], "swiglu", "TE target activation."),
        RunFlag("kernels", Literal[KERNELS], "real",
                "TE target. emulated runs TE's real forward (no backward) on an emulated "
                "machine (--arch) with kernel stand-ins that allocate as TE's C++ does, real kernels only where this "
                "GPU is that architecture; standins replaces every kernel. With no GPU (torch's CUDA build) each case "
                "runs on fake CUDA in a child process."),
        RunFlag("arch", Literal[tuple(EMULATED_ARCHS)], "sm100", "TE target with --kernels emulated|standins: the emulated architecture."),
        RunFlag("cublaslt", str | None, None, "TE target with --kernels emulated|standins: the emulated cuBLASLt version "
                "(e.g. 13.1.0; TE's path choice reads it). Default: this GPU's when it is --arch, else 13.6.0."),
        RunFlag("cudnn_frontend", str, "1.28.0", "TE target with --kernels emulated|standins: the emulated nvidia-cudnn-frontend "
                "version (TE's fused-op feature checks read it; below 1.27 a single group takes the grouped path)."),
    )

    @staticmethod
    def runs_here() -> bool:
        """TE is installed (not imported: the fused switch must come first) and its forward runs
        here: on a GPU, or with emulated kernels on fake CUDA (torch's CUDA build, no GPU)."""
        import importlib.util

        from memaudit.te.emulate.host import unavailable

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

    def configure(self, flags: dict[str, Any]) -> dict[str, Any]:
        """``fused`` sets NVTE_CUTEDSL_FUSED_GROUPED_MLP before TE's import (an environment
        setting, recorded per case, not part of the id); ``single_grouped_weight`` and a
        non-default ``activation`` are options."""
        self.flags_given = dict(flags)
        activation = flags.get("activation", "swiglu")
        if activation not in ACTIVATIONS:
            raise UsageError(f"unknown activation {activation!r}; use one of {', '.join(ACTIVATIONS)}", key="--activation")
        kernels = flags.get("kernels", "real")
        if kernels not in KERNELS:
            raise UsageError(f"unknown kernels {kernels!r}; use one of {', '.join(KERNELS)}", key="--kernels")
        arch = flags.get("arch", "sm100")
        from memaudit.te.emulate.gates import ARCHS

        if arch not in ARCHS:
            raise UsageError(f"unknown architecture {arch!r}; use one of {', '.join(ARCHS)}", key="--arch")
        if kernels == "real":
            set_fused_env(flags.get("fused"))
            self.emulated = None
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
            self.emulated = Emulated(kernels, arch, fused if fused is not None else arch == "sm100", lt, fe)
        options: dict[str, Any] = {}
        if flags.get("single_grouped_weight"):
            options["single_grouped_weight"] = True
        if activation != "swiglu":
            options["activation"] = activation
        return options

    emulated: Emulated | None = None
    """Set by ``configure`` for ``--kernels emulated|standins``."""
    flags_given: dict[str, Any] = {}
    """The run flags ``configure`` was given (an emulated fallback keeps them)."""
    fallback_recipes = RECIPES

    def fallback(self, spec: CaseSpec, reason: str, mode: str, *, backward: bool = True) -> Fallback | None:
        """A case TE refuses on real kernels here: TE's real forward with emulated kernels wherever
        it runs (a GPU, or fake CUDA), else TE's layout rules (:mod:`memaudit.te.fallback`). None
        with ``--kernels emulated|standins``: the user chose the machine."""
        if self.emulated is not None:
            return None
        from memaudit.te.fallback import grouped_mlp_fallback

        return grouped_mlp_fallback(spec, reason, mode, self.flags_given, backward=backward)

    def skip_reason(self, spec: CaseSpec) -> str | None:
        import torch

        from memaudit.te.emulate import host

        if spec.device == "meta":
            return ("TransformerEngine does not run on meta: its forward makes and checks CUDA tensors outside any "
                    f"kernel, which kernel stand-ins cannot replace ({_CUDA_OUTSIDE_KERNELS})")
        fused = spec.options.get("fused")
        if fused is not None and not isinstance(fused, bool):
            return f"option fused must be true or false, got {fused!r}"
        if fused is not None and self.emulated is None and os.environ.get(FUSED_ENV, "0") != ("1" if fused else "0"):
            return (f"option fused = {fused} needs {FUSED_ENV}={'1' if fused else '0'} at TE's import, and this process has "
                    f"{os.environ.get(FUSED_ENV, '0')!r}: on real kernels choose it with --fused/--no-fused (with "
                    "--kernels emulated it is chosen per case)")
        if self.emulated is not None:
            if not spec.device.startswith("cuda"):
                return (f"emulated kernels run TE's forward on CUDA tensors (device {spec.device!r}; use --device cuda, "
                        "which with no GPU is fake CUDA): TE's forward uses CUDA outside any kernel "
                        f"({_CUDA_OUTSIDE_KERNELS})")
            why = host.unavailable()
            if why is not None:
                return f"emulated kernels cannot run here: {why}"
        elif not spec.device.startswith("cuda") or not torch.cuda.is_available():
            return f"TransformerEngine runs on CUDA only (no CUDA device here; TE runs {spec.recipe} on {needs(spec.recipe)})"
        te, why = import_te()
        if te is None:
            return why
        if self.emulated is not None:
            from memaudit.te.emulate.gates import emulated_arch

            with host.cuda_answers(self.emulated.arch), emulated_arch(self.emulated.arch):
                ok, reason = recipe_gate(te, spec.recipe)
        else:
            ok, reason = recipe_gate(te, spec.recipe)
        return None if ok else (reason or f"{spec.recipe} is not available on this GPU")

    def case_host(self, spec: CaseSpec) -> Any:
        """With emulated kernels and no GPU, the case runs on fake CUDA in a child process
        (:mod:`memaudit.te.emulate.host`); else here (None)."""
        from memaudit.te.emulate import host

        if self.emulated is None or not spec.device.startswith("cuda") or not host.needs_child() or host.unavailable():
            return None
        arch = self.emulated.arch
        te, why = import_te()  # imported once here, not in every child
        if te is None:
            return None  # the case's own skip_reason says why
        from memaudit.te.emulate.context import import_te_modules

        import_te_modules()

        def run(case: Any) -> Any:
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

    def _emulated_built(self, spec: CaseSpec, recipe: Any, model: Any, inputs: tuple[Any, ...],
                        forward: Any, run_model: Any) -> Built:
        """The forward inside the emulation (TE's real Python, stand-in kernels); no backward."""
        from memaudit.te.emulate.run import EmulatedRun

        assert self.emulated is not None
        e = self.emulated
        run = EmulatedRun(e.kernels, e.arch, bool(spec.options.get("fused", e.fused)), spec.recipe, e.cublaslt, e.cudnn_frontend)
        paths: list[PathInfo] = []

        def emulated_forward(cap: Capture) -> Any:
            with run.active():
                out = forward(cap)
                called = frozenset(run.log.kernels.standins) | frozenset(run.log.kernels.real) if run.log is not None else None
                paths.append(self._path(model, spec, recipe, frontend=run.machine.cudnn_frontend, called=called))
            return out

        return Built(
            forward=emulated_forward,
            backward=lambda outputs: None,
            annotate=lambda rows, cap: paths[-1] if paths else None,
            options={"fused_env": "1" if run.fused else "0"},
            model=model,
            inputs=inputs,
            warnings=["emulated kernels: forward only (what the forward saved for backward is complete; backward "
                      "did not run, and no values are meaningful)"],
            emulation=run.describe,
        )

    def _path(self, model: Any, spec: CaseSpec, recipe: Any, frontend: str | None = None,
              called: frozenset[str] | None = None) -> PathInfo:
        forward_ops: list[str] = []
        for group in getattr(model, "_module_groups", None) or ():
            for op, _idxs in getattr(group, "_forward_ops", ()):
                forward_ops.append(type(op).__name__)
        fused = any("GroupedMLP" in name for name in forward_ops)  # ForwardGroupedMLP_... in TE 2.14-2.16
        if fused:
            return GroupedMLPPath(forward_ops, True, os.environ.get(FUSED_ENV, "0")).info()
        name, why = grouped_linear_path(spec, recipe, called)
        return GroupedMLPPath(forward_ops, False, os.environ.get(FUSED_ENV, "0"), why_not_fused(spec, recipe, frontend), name, why).info()

"""Target ``ep-grouped-mlp``: an expert-parallel MoE layer, one grouped MLP of local experts per rank.

Each rank routes its own tokens with a seeded router (:mod:`memaudit.te.targets.routing`: uniform,
Zipf or one hot expert), dispatches them as Megatron's all-to-all token dispatcher does (permute by
expert; an all-to-all of the counts, then of the tokens and probabilities; sort by local expert),
runs its local experts, and returns the tokens the same way (:mod:`memaudit.te.targets.ep_model`).
Under ``torchrun`` (or ``memaudit run --nproc N``) the all-to-alls are real collectives over the
expert-parallel group; in one process the layer runs with one expert-parallel rank.

``--groups`` is the number of experts per rank (the grouped MLP's group count); ``--ep`` the
expert-parallel size (default: the world size; the rest of the world is data-parallel replicas of
the expert-parallel group, which route the same tokens and should save the same). Each rank's case
records its split sizes (tokens per local expert), what it sent to and received from each peer,
and its coordinates.

The local experts are a backend (``--experts``): ``reference`` (the reference target's model, runs
anywhere) or ``te`` (TE's ``te.ops`` grouped MLP, :mod:`memaudit.te.targets.ep_backend`). A backend implements
:class:`ExpertsBackend`; :data:`EXPERTS` names each by module path, so naming one imports nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from memaudit.errors import UsageError
from memaudit.ranks import RankInfo, coords_of
from memaudit.report import Emulation, PathInfo, Row
from memaudit.spec import CaseSpec, RunFlag, ShapeParam
from memaudit.targets.base import Built, Target
from memaudit.te.machine.recipes import RECIPES, alignment, needs
from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget
from memaudit.te.targets.reference import ReferenceTarget
from memaudit.te.targets.routing import RoutingPlan, parse_routing, routing_name

if TYPE_CHECKING:
    import torch

    from memaudit.capture import Capture

EP_SHAPE = (
    ShapeParam("tokens", "t", "Tokens per rank entering the router (each goes to --topk experts)."),
    ShapeParam("hidden", "h", "Hidden size H."),
    ShapeParam("ffn", "f", "FFN size F (FC1 has 2F outputs for SwiGLU)."),
)
"""The expert-parallel layer's dimensions: ``tokens`` is per rank and is not what its groups split
(they run the tokens the dispatch brings them: the case's ``splits``)."""

EXPERTS = {
    "reference": "memaudit.te.targets.ep:ReferenceExperts",
    "te": "memaudit.te.targets.ep_backend:TEExperts",
}
"""Expert backend name -> ``module:class`` (imported when asked for)."""


@dataclass
class Experts:
    """A rank's local experts, built for one case.

    ``run(x, split_sizes, probs, cap)`` runs them on the dispatched tokens (``split_sizes`` an
    int64 tensor on the device, ``probs`` the routing probabilities that scale the activation) and
    names their operands through ``cap.label``; the rest is :class:`~memaudit.targets.base.Built`'s.
    ``backward=False``: the backend cannot run backward (an emulated forward).
    """

    run: Callable[..., Any]
    model: Any = None
    annotate: Callable[[list[Row], Capture], PathInfo | None] = lambda rows, cap: None
    options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    emulation: Callable[[], Emulation | None] = lambda: None
    backward: bool = True


class ExpertsBackend(Protocol):
    """What the expert-parallel target needs from an expert backend. ``spec`` is the local
    grouped MLP: the rank's local experts as groups, the tokens they received, its splits."""

    @property
    def name(self) -> str: ...

    @property
    def recipes(self) -> tuple[str, ...]: ...

    @property
    def default_device(self) -> str: ...

    def configure(self, flags: dict[str, Any]) -> dict[str, Any]:
        """Options from the run flags the backend reads (part of the case id); UsageError on bad values."""

    def skip_reason(self, spec: CaseSpec) -> str | None:
        """Why the local experts cannot run here (its library's own words), or None."""

    def build(self, spec: CaseSpec) -> Experts:
        """The local experts for ``spec``."""


def experts_backend(name: str) -> ExpertsBackend:
    ref = EXPERTS.get(name)
    if ref is None:
        raise UsageError(f"unknown experts backend {name!r}; use one of {', '.join(EXPERTS)}", key="--experts")
    module, _, cls = ref.partition(":")
    return getattr(importlib.import_module(module), cls)()


class ReferenceExperts:
    """The reference target's grouped MLP (plain PyTorch, saves what TE's unfused path saves)."""

    name = "reference"
    recipes = ("bf16",)
    default_device = "cpu"

    def configure(self, flags: dict[str, Any]) -> dict[str, Any]:
        return {}

    def skip_reason(self, spec: CaseSpec) -> str | None:
        return ReferenceTarget().skip_reason(spec.retarget(ReferenceTarget()))

    def build(self, spec: CaseSpec) -> Experts:
        from memaudit.te.targets.reference_model import DTYPES, ReferenceGroupedMLP

        model = ReferenceGroupedMLP(spec.groups, spec.hidden, spec.ffn, dtype=DTYPES[spec.dtype], device=spec.device)

        def run(x: torch.Tensor, split_sizes: torch.Tensor, probs: torch.Tensor, cap: Capture) -> torch.Tensor:
            model.labeler = cap.label
            try:
                return model(x, split_sizes, probs)
            finally:
                model.labeler = None

        return Experts(run=run, model=model)


EXPERTS_FLAG = "experts"
DEFAULT_TOPK = 2


class EPGroupedMLPTarget(Target):
    """Target ``ep-grouped-mlp``: expert-parallel dispatch around a rank's local grouped MLP."""

    name = "ep-grouped-mlp"
    recipes = RECIPES
    default_recipes = ("bf16",)
    supported_recipes: tuple[str, ...] = ("bf16",)
    shape = EP_SHAPE
    defaults: dict[str, Any] = {"tokens": 1024, "hidden": 256, "ffn": 512, "groups": (2,), "dtype": "bf16"}
    default_device = "cpu"
    path_keys = TEGroupedMLPTarget.path_keys
    """The TE experts record TE's path (the reference experts none)."""
    path_label = staticmethod(TEGroupedMLPTarget.path_label)
    path_detail = staticmethod(TEGroupedMLPTarget.path_detail)
    collective = True
    """Its forward and backward run collectives: one rank's error would leave the others waiting, so
    under torchrun an error in a case ends the run (the ranks' files say where)."""
    flags = (
        RunFlag(
            "ep",
            int | None,
            None,
            "ep-grouped-mlp: expert-parallel size (default: the world size; 1 in one process). "
            "The rest of the world is data-parallel replicas.",
        ),
        RunFlag(
            "routing",
            str,
            "uniform",
            "ep-grouped-mlp: routing skew: uniform | zipf[:S] (S=1) | hot[:P] "
            "(a fraction P of the tokens picks one hot expert; P=1).",
        ),
        RunFlag("topk", int, DEFAULT_TOPK, "ep-grouped-mlp: experts per token."),
        RunFlag("routing_seed", int, 0, "ep-grouped-mlp: the router's seed (expert popularity, token order)."),
        RunFlag(
            EXPERTS_FLAG,
            Literal[tuple(EXPERTS)],
            "reference",
            "ep-grouped-mlp: the local experts: reference "
            "(plain PyTorch, anywhere) or te (TE's te.ops grouped MLP; the TE target's flags apply).",
        ),
        *TEGroupedMLPTarget.flags,
    )
    """Its own options, then the TE target's (``--kernels``, ``--arch``, ``--fused``, ...), which the
    TE experts take; given with the reference experts they are bad usage."""

    def __init__(self) -> None:
        self.backend: ExpertsBackend = ReferenceExperts()

    @staticmethod
    def runs_here() -> bool:
        return False  # never the default target

    @staticmethod
    def alignment(recipe: str) -> int:
        return alignment(recipe)

    def configuration(self, flags: dict[str, Any]) -> dict[str, Any]:
        """``routing`` (canonical spelling), ``topk``, ``ep`` where given, ``routing_seed`` and
        ``experts`` where not the default, and the backend's own options; the backend (configured),
        its recipes and its device."""
        backend = experts_backend(str(flags.get(EXPERTS_FLAG, "reference")))
        if backend.name == "reference":
            for flag in TEGroupedMLPTarget.flags:
                if flags.get(flag.name, flag.default) != flag.default:
                    raise UsageError(
                        f"is a flag of the TE experts: add --{EXPERTS_FLAG} te", key="--" + flag.name.replace("_", "-")
                    )
        skew, param = parse_routing(flags.get("routing", "uniform"))
        topk = flags.get("topk", DEFAULT_TOPK)
        if not isinstance(topk, int) or topk < 1:
            raise UsageError(f"must be >= 1, got {topk!r}", key="--topk")
        ep = flags.get("ep")
        if ep is not None and (not isinstance(ep, int) or ep < 1):
            raise UsageError(f"must be >= 1, got {ep!r}", key="--ep")
        seed = flags.get("routing_seed", 0)
        if not isinstance(seed, int) or seed < 0:
            raise UsageError(f"must be >= 0, got {seed!r}", key="--routing-seed")
        options: dict[str, Any] = {"routing": routing_name(skew, param), "topk": topk}
        if ep is not None:
            options["ep"] = ep
        if seed:
            options["routing_seed"] = seed
        if backend.name != "reference":
            options[EXPERTS_FLAG] = backend.name
        options.update(backend.configure(flags))
        return {
            "options": options,
            "backend": backend,
            "supported_recipes": tuple(r for r in RECIPES if r in backend.recipes),
            "default_device": backend.default_device,
        }

    def case_host(self, spec: CaseSpec) -> Any:
        """Where the experts' backend runs a case (TE's emulated kernels with no GPU: a child process
        on fake CUDA), else here."""
        host = getattr(self.backend, "case_host", None)
        return host(spec) if host is not None else None

    # ---- placement: what each rank runs ------------------------------------------------------

    def plan(self, spec: CaseSpec, ep: int) -> RoutingPlan:
        skew, param = parse_routing(spec.options.get("routing", "uniform"))
        return RoutingPlan(
            ep,
            spec.groups,
            spec.tokens,
            int(spec.options.get("topk", DEFAULT_TOPK)),
            spec.alignment(),
            skew,
            param,
            int(spec.options.get("routing_seed", 0)),
        )

    def place(self, spec: CaseSpec, rank: int = 0, world_size: int = 1) -> tuple[CaseSpec, RankInfo]:
        """The case rank ``rank`` of ``world_size`` runs: ``ep`` resolved (the world size where not
        given), its local experts' split sizes from the routing plan, and where it sits."""
        ep = spec.options.get("ep") or world_size
        if world_size % ep:
            how = (
                "run it under torchrun --nproc-per-node N (or memaudit run --nproc N) with N a multiple of it"
                if world_size == 1
                else f"it must divide the world size {world_size}"
            )
            raise UsageError(f"expert-parallel size {ep} with {world_size} process(es): {how}", key="--ep")
        plan = self.plan(spec, ep)
        layout = {"ep": ep, "dp": world_size // ep}
        coords = coords_of(rank, layout)
        splits = plan.local_splits(coords["ep"])
        placed = replace(spec, options={**spec.options, "ep": ep}, splits=tuple(splits))
        return placed, RankInfo(
            rank, world_size, layout, coords, send_splits=plan.send_splits(), recv_splits=plan.recv_splits(coords["ep"])
        )

    def rank_problem(self, case: Any) -> tuple[str, str] | None:
        """``(field, what is wrong)`` where a rank's case contradicts the dispatch: its ``ep``
        option is its layout's, it sent ``tokens x topk`` tokens, and its groups ran what it received."""
        info = case.dist
        ep = case.options.get("ep")
        if ep != info.layout.get("ep"):
            return "options.ep", f"ep={ep!r}, but the rank's layout is {info.layout}"
        want = case.dims.get("tokens", 0) * case.options.get("topk", DEFAULT_TOPK)
        if info.send_splits is None or sum(info.send_splits) != want:
            return "dist.send_splits", (
                f"sent {info.send_splits} tokens, but {case.dims.get('tokens')} tokens to "
                f"top-{case.options.get('topk', DEFAULT_TOPK)} experts are {want}"
            )
        if len(case.splits) != case.groups:
            return "splits", f"{len(case.splits)} split sizes for {case.groups} local expert(s)"
        return None

    def local_spec(self, spec: CaseSpec) -> CaseSpec:
        """The grouped MLP the local experts are: the reference target's shape, the tokens they received."""
        splits = tuple(spec.splits or ())
        return CaseSpec.make(
            ReferenceTarget(),
            spec.recipe,
            spec.groups,
            dtype=spec.dtype,
            device=spec.device,
            options=dict(spec.options),
            splits=splits,
            tokens=sum(splits),
            hidden=spec.hidden,
            ffn=spec.ffn,
        )

    def skip_reason(self, spec: CaseSpec) -> str | None:
        if spec.device == "meta":
            return (
                "the dispatch's sizes come from the routing (masked_select, the all-to-all of counts): a meta "
                "tensor holds no values to route by"
            )
        if spec.recipe not in self.backend.recipes:
            return (
                f"the {self.backend.name} experts run no {spec.recipe!r} (they run {', '.join(self.backend.recipes)}; "
                f"TE runs it on {needs(spec.recipe)}, --experts te)"
            )
        return self.backend.skip_reason(self.local_spec(spec) if spec.splits else spec)

    def build(self, spec: CaseSpec) -> Built:
        from memaudit.te.targets import ep_model

        return ep_model.build(self, spec)

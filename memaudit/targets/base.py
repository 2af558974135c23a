"""The target protocol: build a model and inputs for a case, run forward, annotate rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from memaudit.ranks import RankInfo, data_parallel
from memaudit.report import CaseReport, Emulation, PathInfo, Row
from memaudit.spec import CaseSpec, ShapeParam

if TYPE_CHECKING:
    from memaudit.capture import Capture


MLP_SHAPE = (
    ShapeParam("tokens", "t", "Tokens T across all groups.", split=True),
    ShapeParam("hidden", "h", "Hidden size H."),
    ShapeParam("ffn", "f", "FFN size F (FC1 has 2F outputs for SwiGLU)."),
)
"""The dimensions of a grouped MLP (the built-in targets'); a target of another shape declares its own."""


@dataclass
class Built:
    """A model ready to run for one case.

    ``forward(cap)`` runs the forward pass inside ``capture()`` and returns the outputs;
    ``backward(outputs)`` runs backward afterwards; ``annotate(rows, cap)`` may name operands
    and return the case's :class:`~memaudit.report.PathInfo`; ``emulation()`` says how an
    emulated forward ran (:class:`~memaudit.report.Emulation`, read after forward, also after an
    error), None for real kernels.
    """

    forward: Callable[[Capture], Any]
    backward: Callable[[Any], None]
    annotate: Callable[[list[Row], Capture], PathInfo | None] = lambda rows, cap: None
    options: dict[str, Any] = field(default_factory=dict)
    model: Any = None
    inputs: tuple[Any, ...] = ()
    warnings: list[str] = field(default_factory=list)
    emulation: Callable[[], Emulation | None] = lambda: None


FALLBACKS = ("auto", "emulate", "estimate", "none")
"""``run --fallback``: what answers a case the target cannot run on real kernels here. ``auto``
takes the best there is (the target's real code with emulated kernels, else an estimate)."""


@dataclass(frozen=True)
class Fallback:
    """The best available answer for a case that cannot run on real kernels here.

    ``execution`` is ``emulated`` or ``estimated``; ``reason`` why real kernels cannot run it (the
    target's or its library's own words); ``command`` the memaudit command that gives the same
    answer on its own; ``run()`` produces the case (a fault is that case's error cell);
    ``better`` says where a better answer can be had, with its command (or is empty).
    """

    execution: str
    reason: str
    command: str
    run: Callable[[], CaseReport]
    better: str = ""


class Target(Protocol):
    """What the runner and the CLI need from a target: a target declares itself.

    ``recipes`` are the names it understands (``--recipe`` is checked against them; a recipe it
    cannot run here is a skipped cell), ``supported_recipes`` what ``--recipe all`` means,
    ``default_recipes`` what runs without ``--recipe``; ``shape`` its dimensions
    (:class:`~memaudit.spec.ShapeParam` s: ``run`` options, scenario keys, byte-expression
    variables, case-id letters); ``defaults`` their values, the group counts and the dtype;
    ``default_device`` where it runs without ``--device``.

    Optional: ``flags`` (:class:`~memaudit.spec.RunFlag` s: its own ``memaudit run`` options,
    whose values reach ``configure``), ``case_id(spec) -> str`` (its own case-id format; see
    :func:`memaudit.targets.registry.case_id` for the default), and the static methods ``path_label(path) -> str | None`` names the recorded path for
    tables, and ``path_detail(path) -> str`` says more when a path rule fails (see
    :func:`memaudit.targets.registry.path_label`); without them the core says fused / unfused;
    ``fallback(spec, reason, mode) -> Fallback | None``: what answers a case that
    ``skip_reason`` refuses (``mode`` one of :data:`FALLBACKS` other than ``none``), and
    ``fallback_recipes``: what ``--recipe all`` means when fallbacks are on; ``case_host(spec)``:
    None to run the case in this process, or a function that runs the given zero-argument runner
    elsewhere and returns its :class:`~memaudit.report.CaseReport` (the TE target's forward on fake
    CUDA runs in a child process);
    ``place(spec, rank, world_size) -> (CaseSpec, RankInfo)``: what rank ``rank`` of a job of
    ``world_size`` processes runs and where it sits (see :func:`place`), and ``collective``: true
    when its forward runs collectives (an error on one rank then ends a distributed run).
    """

    name: str
    recipes: tuple[str, ...]
    default_recipes: tuple[str, ...]
    supported_recipes: tuple[str, ...]
    shape: tuple[ShapeParam, ...]
    defaults: dict[str, Any]
    default_device: str

    @staticmethod
    def runs_here() -> bool:
        """True when this machine can run the target's real code (chooses the default target)."""

    @staticmethod
    def alignment(recipe: str) -> int:
        """Per-group token alignment the recipe needs."""

    def configure(self, flags: dict[str, Any]) -> dict[str, Any]:
        """Target options from the run flags it knows (``fused``, ``activation``, ...); UsageError on bad values.

        Called before anything runs; may set process state the target needs before its library
        is imported. Options become part of the case id.
        """

    def skip_reason(self, spec: CaseSpec) -> str | None:
        """Why this case cannot run here (shown in the skipped cell), or None."""

    def build(self, spec: CaseSpec) -> Built:
        """Build the model and inputs for ``spec``."""


def place(target: Target, spec: CaseSpec, rank: int = 0, world_size: int = 1) -> tuple[CaseSpec, RankInfo]:
    """The case rank ``rank`` of ``world_size`` runs, and where it sits: the target's own
    ``place`` where it declares one (an expert-parallel target gives each rank its own split
    sizes); otherwise every rank runs ``spec`` whole, as data-parallel replicas. In one process
    this is rank 0 of 1."""
    own = getattr(target, "place", None)
    if own is not None:
        return own(spec, rank, world_size)
    return spec, data_parallel(rank, world_size)


def backward_sum(outputs: Any) -> None:
    """Backward through the sum of every floating output that requires grad."""
    loss = None
    from memaudit.capture import iter_tensors

    for t in iter_tensors(outputs):
        if t.requires_grad and t.is_floating_point():
            s = t.float().sum()
            loss = s if loss is None else loss + s
    if loss is not None:
        loss.backward()

"""The target interface (an abstract base class with defaults): build a model and inputs for a case, run forward,
annotate rows."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Self

from memaudit.ranks import RankInfo, data_parallel
from memaudit.report import CaseReport, Emulation, PathInfo, Row
from memaudit.spec import CaseSpec, RunFlag, ShapeParam, default_case_id

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
    what: str = ""
    """How the answer is made, for the note said before anything runs (``TE's layout rules``)."""
    at_scale: str = ""
    """Where the case ran at the target's toy default shape: the same answer at a shape that shows
    what the recipe keeps (the target's words, then the command), or empty."""


class Target(ABC):
    """What the runner, the judge and the CLI need from a target: a target declares itself.

    Abstract (every target says them): ``name``; ``recipes``, the names it understands
    (``--recipe`` is checked against them; a recipe it cannot run here is a skipped cell);
    ``shape``, its dimensions (:class:`~memaudit.spec.ShapeParam` s: ``run`` options, scenario
    keys, byte-expression variables, case-id letters); ``defaults``, their values, the group
    counts and the dtype; :meth:`skip_reason` and :meth:`build`.

    Everything else has a default here, which a target overrides where it has more to say. The
    members are grouped by who calls them: what it is (everyone), planning (the matrix, the command
    line, scenarios), running a case (the runner), showing and judging its cases (render, the
    judge), distributed runs. A target is stateless: :meth:`configure` returns a new, frozen one. A
    target is declared by an extension (:class:`memaudit.extension.Extension`: its name -> its
    class, made with no arguments); memaudit's own are declared the same way.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """Its name (``--target``, the first part of its case ids)."""

    @property
    @abstractmethod
    def recipes(self) -> tuple[str, ...]:
        """The recipe names it understands."""

    @property
    @abstractmethod
    def shape(self) -> tuple[ShapeParam, ...]:
        """Its dimensions, in order."""

    @property
    @abstractmethod
    def defaults(self) -> dict[str, Any]:
        """Each dimension's value without its option, ``groups`` (a tuple) and ``dtype``."""

    # -- what it is (every caller) -------------------------------------------------------------
    default_device: str = "cpu"
    """Where it runs without ``--device``."""
    flags: tuple[RunFlag, ...] = ()
    """Its own ``memaudit run`` options (and scenario ``[flags]``); their values reach :meth:`configure`."""
    path_keys: tuple[str, ...] = ()
    """The ``path`` keys its cases may record (a scenario's ``when`` may name them)."""
    collective: bool = False
    """True when its forward runs collectives (an error on one rank then ends a distributed run)."""

    # -- planning: the matrix, the command line's flags, the specs (memaudit.audit.plan, targets.matrix,
    #    the scenario) ------------------------------------------------------------------------
    @property
    def default_recipes(self) -> tuple[str, ...]:
        """What runs without ``--recipe`` (by default its first recipe)."""
        return self.recipes[:1]

    @property
    def supported_recipes(self) -> tuple[str, ...]:
        """What ``--recipe all`` means (by default every recipe)."""
        return self.recipes

    @property
    def fallback_recipes(self) -> tuple[str, ...] | None:
        """What ``--recipe all`` means when fallbacks are on (None: :attr:`supported_recipes`)."""
        return None

    def runs_here(self) -> bool:
        """True when this machine can run the target's real code (a built-in that does may be the default)."""
        return False

    def alignment(self, recipe: str) -> int:
        """Per-group alignment of the split dimension the recipe needs (16 by default)."""
        return 16

    options: Mapping[str, Any] = MappingProxyType({})
    """The options its run flags configured (:meth:`configure`): part of each case id."""
    flags_given: Mapping[str, Any] = MappingProxyType({})
    """The run flags it was configured with (:meth:`configure`)."""

    def configure(self, flags: Mapping[str, Any]) -> Self:
        """A new target configured by the run flags it declares, frozen; this one is unchanged.

        The copy has the attributes :meth:`configuration` returns (``options`` among them) and
        ``flags_given``; setting an attribute of it afterwards raises. A UsageError on bad values.
        """
        settings = dict(self.configuration(dict(flags)))
        new = copy.copy(self)
        vars(new).update(settings)
        vars(new)["options"] = MappingProxyType(dict(settings.get("options", {})))
        vars(new)["flags_given"] = MappingProxyType(dict(flags))
        vars(new)["_frozen"] = True
        return new

    def configuration(self, flags: dict[str, Any]) -> dict[str, Any]:
        """What ``flags`` configure, as the attributes of the configured copy (:meth:`configure`):
        ``options`` (part of each case id; none by default) and any setting the target reads later.
        Called before anything runs; may set process state the target needs before its library is
        imported; UsageError on bad values."""
        return {}

    def __setattr__(self, name: str, value: Any) -> None:
        if vars(self).get("_frozen"):
            raise AttributeError(f"target {self.name!r} is configured, and so frozen: configure() returns a new one")
        super().__setattr__(name, value)

    def spec(
        self,
        recipe: str,
        groups: int,
        *,
        dtype: str | None = None,
        device: str | None = None,
        options: dict[str, Any] | None = None,
        splits: tuple[int, ...] | None = None,
        **dims: int,
    ) -> CaseSpec:
        """A spec of this target (its dims in its declared order; it carries the target); ``options``
        by default the ones it was configured with."""
        return CaseSpec.make(
            self,
            recipe,
            groups,
            dtype=dtype or self.defaults.get("dtype", "bf16"),
            device=device or self.default_device,
            options=dict(self.options) if options is None else options,
            splits=splits,
            **dims,
        )

    def case_id(self, spec: CaseSpec) -> str:
        """The case id (by default :func:`~memaudit.spec.default_case_id` with its letters)."""
        return default_case_id(spec, self.shape)

    # -- running a case (the runner) ----------------------------------------------------------
    @abstractmethod
    def skip_reason(self, spec: CaseSpec) -> str | None:
        """Why this case cannot run here (shown in the skipped cell), or None."""

    @abstractmethod
    def build(self, spec: CaseSpec) -> Built:
        """Build the model and inputs for ``spec``."""

    def case_host(self, spec: CaseSpec) -> Callable[[Callable[[], CaseReport]], CaseReport] | None:
        """None to run the case in this process (the default), or a function that runs the given
        zero-argument runner elsewhere and returns its case (TE's forward on fake CUDA: a child process)."""
        return None

    def fallback(self, spec: CaseSpec, reason: str, mode: str, *, backward: bool = True) -> Fallback | None:
        """What answers a case :meth:`skip_reason` refuses (``mode`` one of :data:`FALLBACKS`
        other than ``none``); None by default (the case stays a skipped cell)."""
        return None

    # -- showing and judging its cases (render, the judge, run --expected, figures) ------------
    def path_label(self, path: PathInfo) -> str | None:
        """A short name of the recorded path for tables (by default fused / unfused, or None)."""
        return path.label()

    def execution_label(self, case: CaseReport) -> str | None:
        """What tables and PR comments show beside a case's status: the emulated machine
        (``emulated sm100``) or ``estimated``; None for a measured case."""
        if case.emulation is not None:
            return case.emulation.label()
        return "estimated" if case.execution == "estimated" else None

    def notes(self, case: CaseReport) -> list[str]:
        """What ``run`` says on stderr about a finished case of this target besides its table (an
        answer that replaced one that failed); none by default."""
        return []

    def path_detail(self, path: PathInfo) -> str:
        """What to say about a path beyond its name when a path rule fails ('' by default)."""
        return ""

    def attach_expected(self, case: CaseReport) -> int | None:
        """``run --expected``: put a model's ``expected_bytes`` on the case's rows (the case gets
        new rows, and a warning per mismatch) and return the number of mismatches; None where the
        target has no model of the case (the default)."""
        return None

    def estimate_totals(self, case: CaseReport) -> Any:
        """A model's totals for ``case`` (figures draw them beside the measured bars), or None (the default)."""
        return None

    # -- distributed runs (memaudit.distributed, the merge) -------------------------------------
    def place(self, spec: CaseSpec, rank: int = 0, world_size: int = 1) -> tuple[CaseSpec, RankInfo]:
        """What rank ``rank`` of ``world_size`` runs and where it sits: by default every rank runs
        ``spec`` whole, as data-parallel replicas."""
        return spec, data_parallel(rank, world_size)

    def rank_problem(self, case: CaseReport) -> tuple[str, str] | None:
        """``(field, what is wrong)`` when a rank's case contradicts how this target places cases."""
        return None


def place(target: Target, spec: CaseSpec, rank: int = 0, world_size: int = 1) -> tuple[CaseSpec, RankInfo]:
    """The case rank ``rank`` of ``world_size`` runs, and where it sits (:meth:`Target.place`)."""
    return target.place(spec, rank, world_size)


def sum_loss(outputs: Any) -> Any:
    """The sum of every floating output that requires grad (in fp32), or None where there is none."""
    loss = None
    from memaudit.capture import iter_tensors

    for t in iter_tensors(outputs):
        if t.requires_grad and t.is_floating_point():
            s = t.float().sum()
            loss = s if loss is None else loss + s
    return loss


def backward_sum(outputs: Any) -> None:
    """Backward through the sum of every floating output that requires grad."""
    loss = sum_loss(outputs)
    if loss is not None:
        loss.backward()

"""Per-rank audits: where a case ran in a distributed job, and what a merged report says about its ranks.

Part of the report model (imports nothing of memaudit, torch or pydantic at import). A case run on
one rank of a ``torchrun`` job carries a :class:`RankInfo` (``dist`` in the JSON): its rank, the
world size, the parallel layout (sizes per axis) and its coordinates in it, and for an
expert-parallel target the tokens it sent to and received from each expert-parallel peer. Its id
is the case's id on one process plus ``/`` and its coordinates (``.../ep1-dp0``): the gate matches
per-rank baselines by coordinates, not by rank number.

A report from a distributed run carries a :class:`DistRun` (``dist`` at the top level): a rank's
own file says which rank wrote it and whether it finished; a merged report has one case per
planned case and rank, and a :class:`RankSummary` per planned case (min, max, mean and imbalance
over the ranks of the saved bytes and of each operand and kind; the worst rank; data-parallel
replicas compared). The summary is derived data: a report whose summary is not what its cases give
is refused on load (:func:`run_problem`), as totals that disagree with their rows are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

AXES = ("tp", "ep", "dp")
"""The parallel axes a layout may have, fastest-varying first: rank = tp + TP * (ep + EP * dp)
(Megatron's default order, tensor parallel innermost)."""

REPLICA_AXIS = "dp"
"""Ranks that differ only in this coordinate are data-parallel replicas: they should save the same."""


@dataclass(frozen=True)
class RankInfo:
    """Where one case ran: ``rank`` of ``world_size``, its ``coords`` in ``layout`` (axis -> size,
    axes from :data:`AXES` whose size the target uses), the process-group ``backend``, and for an
    expert-parallel dispatch the tokens this rank sent to (``send_splits``) and received from
    (``recv_splits``) each expert-parallel peer, in peer order."""

    rank: int
    world_size: int
    layout: dict[str, int]
    coords: dict[str, int]
    backend: str = "gloo"
    send_splits: list[int] | None = None
    recv_splits: list[int] | None = None

    @property
    def key(self) -> str:
        """The coordinates as a case-id suffix: ``ep1-dp0`` (axes in :data:`AXES` order)."""
        return coords_key(self.coords)

    def label(self) -> str:
        """``rank 1 (ep1-dp0)``: how messages name the rank."""
        return f"rank {self.rank} ({self.key})"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rank": self.rank,
            "world_size": self.world_size,
            "layout": dict(self.layout),
            "coords": dict(self.coords),
            "backend": self.backend,
        }
        if self.send_splits is not None:
            out["send_splits"] = list(self.send_splits)
        if self.recv_splits is not None:
            out["recv_splits"] = list(self.recv_splits)
        return out


def coords_key(coords: dict[str, int]) -> str:
    """``ep1-dp0``: the coordinates in :data:`AXES` order."""
    return "-".join(f"{axis}{coords[axis]}" for axis in AXES if axis in coords)


def coords_of(rank: int, layout: dict[str, int]) -> dict[str, int]:
    """The coordinates of ``rank`` in ``layout`` (tp fastest, then ep, then dp)."""
    out, rest = {}, rank
    for axis in AXES:
        if axis in layout:
            out[axis], rest = rest % layout[axis], rest // layout[axis]
    return out


def rank_of(coords: dict[str, int], layout: dict[str, int]) -> int:
    """The rank at ``coords`` in ``layout`` (the inverse of :func:`coords_of`)."""
    rank, stride = 0, 1
    for axis in AXES:
        if axis in layout:
            rank += coords[axis] * stride
            stride *= layout[axis]
    return rank


def data_parallel(rank: int, world_size: int, backend: str = "gloo") -> RankInfo:
    """A rank of a job in which every rank runs the whole case (data-parallel replicas)."""
    return RankInfo(rank, world_size, {"dp": world_size}, {"dp": rank}, backend)


def info_problem(info: RankInfo) -> tuple[str, str] | None:
    """``(field, what is wrong)`` when a :class:`RankInfo` contradicts itself, else None."""
    if not info.layout:
        return "layout", "a layout names at least one axis"
    unknown = [a for a in info.layout if a not in AXES]
    if unknown:
        return "layout", f"unknown axis {unknown[0]!r} (axes are {', '.join(AXES)})"
    bad = [a for a, n in info.layout.items() if n < 1]
    if bad:
        return f"layout.{bad[0]}", f"an axis has size 1 or more, got {info.layout[bad[0]]}"
    if math.prod(info.layout.values()) != info.world_size:
        sizes = " x ".join(f"{a}{n}" for a, n in info.layout.items())
        return "layout", f"{sizes} is {math.prod(info.layout.values())} ranks, not the world size {info.world_size}"
    if set(info.coords) != set(info.layout):
        return (
            "coords",
            f"coordinates on {', '.join(sorted(info.coords)) or 'no axis'} in a layout of "
            f"{', '.join(sorted(info.layout))}",
        )
    out = [a for a in info.coords if not 0 <= info.coords[a] < info.layout[a]]
    if out:
        return f"coords.{out[0]}", f"coordinate {info.coords[out[0]]} outside 0..{info.layout[out[0]] - 1}"
    if info.rank >= info.world_size:
        return "rank", f"rank {info.rank} in a world of {info.world_size}"
    if rank_of(info.coords, info.layout) != info.rank:
        return "rank", (
            f"rank {info.rank} is at {coords_key(coords_of(info.rank, info.layout))} in this layout, "
            f"not {info.key} (rank = tp + TP * (ep + EP * dp))"
        )
    ep = info.layout.get("ep")
    for name in ("send_splits", "recv_splits"):
        splits = getattr(info, name)
        if splits is not None and len(splits) != (ep or 1):
            return name, f"{len(splits)} counts for {ep or 1} expert-parallel peer(s)"
    return None


def base_id(case_id: str, info: RankInfo) -> str | None:
    """The id the case has on one process (its id without ``/COORDS``), or None where the id does
    not end with its coordinates."""
    suffix = "/" + info.key
    return case_id[: -len(suffix)] if case_id.endswith(suffix) and len(case_id) > len(suffix) else None


# ---- the summary over ranks ---------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """One quantity over the ranks: its value per rank (in rank order), min, max, mean and
    imbalance (max over mean; None where the mean is 0), and the worst rank (the lowest rank
    holding the max)."""

    per_rank: list[int]
    min: int
    max: int
    mean: float
    imbalance: float | None
    worst_rank: int

    @classmethod
    def of(cls, ranks: Sequence[int], values: Sequence[int]) -> Spread:
        total = sum(values)
        mean = total / len(values)
        top = max(values)
        return cls(list(values), min(values), top, mean, top / mean if total else None, ranks[values.index(top)])

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_rank": list(self.per_rank),
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "imbalance": self.imbalance,
            "worst_rank": self.worst_rank,
        }


@dataclass(frozen=True)
class OperandSpread:
    """The bytes of one operand and kind over the ranks: each saved storage once, at its full size,
    under the first row that names it (the operands of a rank add up to its ``saved_bytes``)."""

    operand: str
    kind: str
    spread: Spread

    def to_dict(self) -> dict[str, Any]:
        return {"operand": self.operand, "kind": self.kind, **self.spread.to_dict()}


@dataclass(frozen=True)
class ReplicaCheck:
    """Data-parallel replicas (ranks whose coordinates differ only in dp) that should save the
    same rows; ``difference`` says where the first one that does not differs from the first."""

    group: str
    ranks: list[int]
    identical: bool
    difference: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "ranks": list(self.ranks),
            "identical": self.identical,
            "difference": self.difference,
        }


@dataclass(frozen=True)
class RankSummary:
    """One planned case over the ranks. ``saved`` (the cases' ``saved_bytes``) and ``by`` (per
    operand and kind) are given only when every rank's case is ok; ``not_ok`` lists the ranks whose
    case is skipped or errored, or has no case at all (``missing``): never counted as zero."""

    case: str
    ranks: list[int]
    not_ok: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    saved: Spread | None = None
    by: list[OperandSpread] = field(default_factory=list)
    replicas: list[ReplicaCheck] = field(default_factory=list)

    @property
    def worst_rank(self) -> int | None:
        return self.saved.worst_rank if self.saved is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "ranks": list(self.ranks),
            "not_ok": list(self.not_ok),
            "missing": list(self.missing),
            "saved": self.saved.to_dict() if self.saved is not None else None,
            "by": [b.to_dict() for b in self.by],
            "replicas": [r.to_dict() for r in self.replicas],
        }


@dataclass
class DistRun:
    """What a report from a distributed run says about the run (``dist`` at the top level).

    A rank's own file: ``rank`` (who wrote it), ``run_id`` (one id per launch, so that files of
    two runs are not merged), ``finished`` (false while it runs, and after a crash). A merged
    report: ``rank`` and ``run_id`` are None, and ``summary`` has one entry per planned case.
    ``planned`` lists the ids (without coordinates) every rank runs, in order; ``warnings`` what
    the merge found (environments that differ between ranks).
    """

    world_size: int
    planned: list[str]
    rank: int | None = None
    run_id: str | None = None
    finished: bool = True
    summary: list[RankSummary] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def merged(self) -> bool:
        return self.rank is None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "world_size": self.world_size,
            "planned": list(self.planned),
            "finished": self.finished,
            "warnings": list(self.warnings),
        }
        if self.rank is not None:
            out["rank"] = self.rank
        if self.run_id is not None:
            out["run_id"] = self.run_id
        if self.summary is not None:
            out["summary"] = [s.to_dict() for s in self.summary]
        return out

    def case_summary(self, base: str) -> RankSummary | None:
        return next((s for s in self.summary or () if s.case == base), None)


def storage_breakdown(rows: Iterable[Any], key_fn: Callable[[Any], Any]) -> dict[Any, int]:
    """Bytes per key as ``saved_bytes`` counts them: each device-resident storage that is not a
    parameter's, once, at its full size, under the first row that names it (a later view of it, a
    metadata row over a tensor's storage, adds nothing; a cached copy's storage is left out as a
    parameter's is). The keys add up to ``saved_bytes``."""
    rows = list(rows)
    params = {r.storage for r in rows if r.apart and r.storage is not None}
    seen: set[str] = set()
    out: dict[Any, int] = {}
    for r in rows:
        if r.resides != "device" or r.storage is None or r.storage in params or r.storage in seen:
            continue
        seen.add(r.storage)
        k = key_fn(r)
        out[k] = out.get(k, 0) + r.storage_bytes
    return out


def _counted(rows: Sequence[Any]) -> dict[tuple[str, str], int]:
    """Bytes per (operand, kind), counted by storage as ``saved_bytes`` is (they add up to it)."""
    return storage_breakdown(rows, lambda r: (r.operand or r.slot or f"row {r.index}", r.kind))


_SKIP_IN_REPLICA = frozenset({"device"})
"""Row fields replicas may differ in (each rank has its own device)."""


def _row_signature(row: Any) -> tuple[Any, ...]:
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in vars(row).items() if k not in _SKIP_IN_REPLICA)


def replica_difference(a: Any, b: Any) -> str | None:
    """Where case ``b`` saves something other than case ``a`` (rows compared in order, device
    aside), or None when they save the same."""
    ra, rb = a.case.dist.rank, b.case.dist.rank
    if len(a.case.rows) != len(b.case.rows):
        return f"rank {rb} saves {len(b.case.rows)} rows, rank {ra} {len(a.case.rows)}"
    for x, y in zip(a.case.rows, b.case.rows, strict=True):
        sx, sy = dict(_row_signature(x)), dict(_row_signature(y))
        if sx != sy:
            what = next(k for k in sx if sx[k] != sy.get(k))
            name = x.operand or f"row {x.index}"
            if x.group is not None and not name.endswith("]"):
                name += f" g{x.group}"
            return f"row {x.index} ({name}): {what} {_fmt(sy[what])} on rank {rb}, {_fmt(sx[what])} on rank {ra}"
    if a.case.totals != b.case.totals:
        return (
            f"totals differ: saved {b.case.totals.saved_bytes:,} B on rank {rb}, {a.case.totals.saved_bytes:,} B "
            f"on rank {ra}"
        )
    return None


def _fmt(v: Any) -> str:
    return f"[{', '.join(map(str, v))}]" if isinstance(v, tuple) else repr(v)


@dataclass(frozen=True)
class _Placed:
    case: Any
    base: str


def summarize(cases: Iterable[Any], planned: Sequence[str], world_size: int) -> list[RankSummary]:
    """One :class:`RankSummary` per planned case, from the cases that carry ``dist`` (duck-typed:
    ``id``, ``status``, ``rows``, ``totals``, ``dist``). A rank with no case for a planned case is
    ``missing``; one whose case is not ok is ``not_ok``; the spread is given only when every rank's
    case is ok. Replica groups with two or more ok ranks are compared."""
    by_base: dict[str, dict[int, _Placed]] = {b: {} for b in planned}
    for c in cases:
        info = c.dist
        if info is None:
            continue
        base = base_id(c.id, info)
        if base in by_base:
            by_base[base][info.rank] = _Placed(c, base)
    out = []
    for base in planned:
        placed = by_base[base]
        ranks = list(range(world_size))
        missing = [r for r in ranks if r not in placed]
        not_ok = [r for r in ranks if r in placed and placed[r].case.status != "ok"]
        saved, by = None, []
        ok = [r for r in ranks if r in placed and placed[r].case.status == "ok"]
        if not missing and not not_ok and ranks:
            saved = Spread.of(ranks, [placed[r].case.totals.saved_bytes for r in ranks])
            per = {r: _counted(placed[r].case.rows) for r in ranks}
            keys = sorted({k for d in per.values() for k in d})
            by = [
                OperandSpread(op, kind, Spread.of(ranks, [per[r].get((op, kind), 0) for r in ranks]))
                for op, kind in keys
            ]
        out.append(RankSummary(base, ranks, not_ok, missing, saved, by, _replicas([placed[r] for r in ok])))
    return out


def _replicas(placed: list[_Placed]) -> list[ReplicaCheck]:
    groups: dict[str, list[_Placed]] = {}
    for p in placed:
        info = p.case.dist
        if REPLICA_AXIS not in info.layout or info.layout[REPLICA_AXIS] < 2:
            continue
        others = {a: v for a, v in info.coords.items() if a != REPLICA_AXIS}
        groups.setdefault(coords_key(others) or "all", []).append(p)
    out = []
    for name, members in groups.items():
        if len(members) < 2:
            continue
        first = members[0]
        diff = next((d for d in (replica_difference(first, m) for m in members[1:]) if d is not None), None)
        out.append(ReplicaCheck(name, [m.case.dist.rank for m in members], diff is None, diff))
    return out


def run_problem(run: DistRun, cases: Sequence[Any]) -> tuple[str, str] | None:
    """``(key, what is wrong)`` when the report's cases contradict its :class:`DistRun`, else None:
    world sizes agree; a rank file holds only its rank's cases, of planned ids, in planned order
    (all of them once finished); a merged report holds exactly one case per planned id and rank and
    the summary its cases give."""
    if len(set(run.planned)) != len(run.planned):
        twice = next(p for i, p in enumerate(run.planned) if p in run.planned[:i])
        return "dist.planned", f"case {twice!r} is planned twice"
    if run.rank is not None and run.rank >= run.world_size:
        return "dist.rank", f"rank {run.rank} in a world of {run.world_size}"
    if run.merged and run.run_id is not None:
        return "dist.run_id", "a merged report names no run id (only a rank's own file does)"
    seen: dict[tuple[str, int], int] = {}
    order: list[int] = []
    for i, c in enumerate(cases):
        info = c.dist
        where = f"cases[{c.id}].dist"
        if info is None:
            return f"cases[{c.id}]", "a report of a distributed run has per-rank cases only: this case has no dist"
        if info.world_size != run.world_size:
            return f"{where}.world_size", f"{info.world_size}, but the run's world size is {run.world_size}"
        base = base_id(c.id, info)
        if base is None or base not in run.planned:
            return (
                f"cases[{c.id}]",
                "not one of the planned cases "
                f"({', '.join(run.planned[:3])}{', ...' if len(run.planned) > 3 else ''}) "
                f"on its coordinates {info.key}",
            )
        if run.rank is not None and info.rank != run.rank:
            return f"{where}.rank", f"rank {info.rank} in rank {run.rank}'s file"
        if (base, info.rank) in seen:
            return f"cases[{c.id}]", f"rank {info.rank} has case {base!r} twice"
        seen[(base, info.rank)] = i
        order.append(run.planned.index(base))
    if run.rank is not None:
        if order != sorted(order):
            return "cases", "a rank's cases are in planned order"
        if run.finished and len(order) != len(run.planned):
            return "dist.finished", f"finished, but {len(run.planned) - len(order)} planned case(s) are not in the file"
        if run.summary is not None:
            return "dist.summary", "a rank's own file has no summary (only a merged report does)"
        return None
    for base in run.planned:
        absent = [r for r in range(run.world_size) if (base, r) not in seen]
        if absent:
            return "cases", (
                f"case {base!r} has no case for rank(s) {', '.join(map(str, absent))}: a merged report has one "
                "per rank (a rank that wrote nothing is an error case, never left out)"
            )
    if not run.finished:
        return "dist.finished", "a merged report is finished"
    if run.summary is None:
        return "dist.summary", "missing: a merged report has a summary per planned case"
    truth = summarize(cases, run.planned, run.world_size)
    said = [s.to_dict() for s in run.summary]
    for i, (a, b) in enumerate(zip(said, (t.to_dict() for t in truth), strict=False)):
        if a != b:
            key = next((k for k in b if a.get(k) != b[k]), "case")
            return f"dist.summary[{i}].{key}", (
                f"says {_short(a.get(key))} but the ranks' cases give {_short(b[key])} "
                "(a summary that disagrees with its cases is refused)"
            )
    if len(said) != len(truth):
        return "dist.summary", f"{len(said)} entries for {len(truth)} planned case(s)"
    return None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def spread_from(d: dict[str, Any]) -> Spread:
    return Spread(list(d["per_rank"]), d["min"], d["max"], d["mean"], d["imbalance"], d["worst_rank"])


def summary_from(d: dict[str, Any]) -> RankSummary:
    """A :class:`RankSummary` from its validated JSON object."""
    return RankSummary(
        d["case"],
        list(d["ranks"]),
        list(d["not_ok"]),
        list(d["missing"]),
        spread_from(d["saved"]) if d["saved"] is not None else None,
        [OperandSpread(b["operand"], b["kind"], spread_from(b)) for b in d["by"]],
        [ReplicaCheck(r["group"], list(r["ranks"]), r["identical"], r["difference"]) for r in d["replicas"]],
    )


def run_from(d: dict[str, Any]) -> DistRun:
    """A :class:`DistRun` from its validated JSON object."""
    summary = d.get("summary")
    return DistRun(
        d["world_size"],
        list(d["planned"]),
        d.get("rank"),
        d.get("run_id"),
        d.get("finished", True),
        [summary_from(s) for s in summary] if summary is not None else None,
        list(d.get("warnings", [])),
    )


def pydantic_types(config: Any, count: Any, text: Any) -> dict[str, Any]:
    """The strict TypedDicts (pydantic) of ``dist`` in a case and at the top level of a report;
    ``config``, ``count`` and ``text`` are the report model's (strict, no unknown key; a
    non-negative integer; a non-empty string)."""
    from typing import Annotated, Literal, NotRequired

    from pydantic import Field
    from typing_extensions import TypedDict

    def td(name: str, ann: dict[str, Any]) -> Any:
        t = TypedDict(name, ann)  # type: ignore[operator]
        t.__pydantic_config__ = config  # type: ignore[attr-defined]
        return t

    size = Annotated[int, Field(ge=1, le=2**20)]
    axis = Literal[AXES]
    rank_info = td(
        "RankInfo",
        {
            "rank": count,
            "world_size": size,
            "layout": dict[axis, size],
            "coords": dict[axis, count],  # type: ignore[valid-type]
            "backend": text,
            "send_splits": NotRequired[list[count]],
            "recv_splits": NotRequired[list[count]],  # type: ignore[valid-type]
        },
    )
    number = Annotated[float, Field(ge=0, allow_inf_nan=False)]
    spread = {
        "per_rank": list[count],
        "min": count,
        "max": count,
        "mean": number,
        "imbalance": number | None,  # type: ignore[valid-type]
        "worst_rank": count,
    }
    saved = td("Spread", spread)
    operand = td("OperandSpread", {"operand": text, "kind": text, **spread})
    replica = td("ReplicaCheck", {"group": text, "ranks": list[count], "identical": bool, "difference": str | None})  # type: ignore[valid-type]
    summary = td(
        "RankSummary",
        {
            "case": text,
            "ranks": list[count],
            "not_ok": list[count],
            "missing": list[count],  # type: ignore[valid-type]
            "saved": saved | None,
            "by": list[operand],
            "replicas": list[replica],
        },
    )
    run = td(
        "DistRun",
        {
            "world_size": size,
            "planned": list[text],
            "finished": bool,
            "warnings": list[str],  # type: ignore[valid-type]
            "rank": NotRequired[count],
            "run_id": NotRequired[text],
            "summary": NotRequired[list[summary]],  # type: ignore[valid-type]
        },
    )
    return {"RankInfo": rank_info, "DistRun": run}

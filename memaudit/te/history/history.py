"""Audit a case list across TE versions: each version's Python in a worker process of its own.

:func:`run_history` gets each version's tree (:mod:`.sources`), runs the worker
(:mod:`.worker`) on it, and builds the history document (:mod:`.model`). A version that cannot be
had (no wheel, no network, an unknown revision) or that does not load is an error cell in every
case, with the reason; nothing silently falls back to another version.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memaudit.environment import environment
from memaudit.errors import UsageError
from memaudit.report import Report, validate_report
from memaudit.te.history import sources
from memaudit.te.history.cases import HistoryCase
from memaudit.te.history.model import History, VersionInfo, build
from memaudit.te.history.sources import VERSION_RE, DownloadFailed, GitError, TESource, rev_range
from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

WORKER_TIMEOUT_S = 900.0
"""How long one version's worker may run (a case takes about a second on fake CUDA)."""


@dataclass(frozen=True)
class VersionSpec:
    """A version the user asked for: ``release`` 2.17.1, ``git`` REV of ``repo``, ``local`` PATH, ``installed``."""

    kind: str
    value: str
    repo: Path | None = None

    @property
    def label(self) -> str:
        return {"installed": "installed"}.get(self.kind, self.value if self.kind != "local" else Path(self.value).name)


def parse_versions(
    te: str | None, repo: Path | None, revs: list[str], trees: list[str], installed: bool
) -> list[VersionSpec]:
    """The versions in the order given: releases, then git revisions (a range expands to its
    commits), then local trees, then the installed TE."""
    out: list[VersionSpec] = []
    for v in (te or "").split(","):
        v = v.strip()
        if not v:
            continue
        if not VERSION_RE.match(v):
            raise UsageError(f"not a TE release version: {v!r} (e.g. 2.17.1)", key="--te")
        out.append(VersionSpec("release", v))
    if revs and repo is None:
        raise UsageError("--rev needs --te-repo (the TE checkout whose history to read)", key="--rev")
    for r in revs:
        assert repo is not None
        if ".." in r:
            out.extend(VersionSpec("git", c[:12], repo) for c in rev_range(repo, r))
        else:
            rev_range(repo, r)  # checks it resolves
            out.append(VersionSpec("git", r, repo))
    for t in trees:
        if not Path(t).is_dir():
            raise UsageError(f"no such directory: {t}", key="--te-tree")
        if not (Path(t) / "transformer_engine" / "pytorch" / "__init__.py").is_file():
            raise UsageError(f"{t} holds no transformer_engine/pytorch package", key="--te-tree")
        out.append(VersionSpec("local", t))
    if installed:
        out.append(VersionSpec("installed", "installed"))
    if not out:
        raise UsageError(
            "no TE version to audit: give --te, --te-repo with --rev, --te-tree or --installed", key="--te"
        )
    return out


def materialise(spec: VersionSpec, cache: Path) -> TESource:
    """The overlay tree of a version (downloaded, archived or copied once into ``cache``)."""
    if spec.kind == "release":
        return sources.release(spec.value, cache)
    if spec.kind == "git":
        assert spec.repo is not None
        return sources.git_rev(spec.repo, spec.value, cache)
    if spec.kind == "local":
        return sources.local(spec.value, cache)
    return sources.installed(cache)


def slug(label: str) -> str:
    """A file name stem for a version label: ``2.17.1`` -> ``te-2.17.1``."""
    return "te-" + (re.sub(r"[^A-Za-z0-9_.+-]+", "-", label).strip("-.") or "version")


def error_report(cases: list[HistoryCase], reason: str, source: dict[str, Any] | None) -> Report:
    """A version's report where it could not run: every case an error cell with ``reason``."""
    import memaudit
    from memaudit.runner import empty_case

    target = TEGroupedMLPTarget().configure({"kernels": "emulated", "arch": "sm100"})
    out = []
    for c in cases:
        case = empty_case(c.spec(target))
        case.status, case.reason = "error", reason
        out.append(case)
    env = environment("cuda")
    env["transformer_engine"] = source.get("version") if source else None
    env.pop("cublaslt", None)
    env.pop("cudnn_frontend", None)
    env["te_source"] = source or {}
    return Report(cases=out, environment=env, memaudit=memaudit.__version__, created="")


def run_version(
    source: TESource,
    cases: list[HistoryCase],
    arch: str = "sm100",
    *,
    timeout_s: float = WORKER_TIMEOUT_S,
    unread: str | None = None,
) -> tuple[Report, str | None]:
    """One version's report from its worker process; (report, None), or (error report, why).
    ``unread``: the read analysis each case runs with (``observed``), or none."""
    with tempfile.TemporaryDirectory(prefix="memaudit-te-history-") as tmp:
        req, out = Path(tmp) / "request.json", Path(tmp) / "report.json"
        request = {"tree": str(source.tree), "cases": [c.to_dict() for c in cases], "arch": arch, "out": str(out)}
        if unread is not None:
            request["unread"] = unread
        req.write_text(json.dumps(request), encoding="utf-8")
        try:  # -P: a memaudit/ folder in the current folder must not shadow the installed package
            done = subprocess.run(
                [sys.executable, "-P", "-m", "memaudit.te.history.worker", str(req)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
        except subprocess.TimeoutExpired:
            why = f"the worker for TE {source.label} ran past {timeout_s:g} s (killed)"
            return error_report(cases, why, source.describe()), why
        data = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
    if data is None:
        tail = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        why = f"the worker for TE {source.label} exited with status {done.returncode} and no report" + (
            f": {tail[-1]}" if tail else ""
        )
        return error_report(cases, why, source.describe()), why
    if "error" in data:
        return error_report(cases, data["error"], source.describe()), data["error"]
    return validate_report(data, source=f"TE {source.label}"), None


@dataclass
class VersionRun:
    """One version's outcome: its info (label, source, error), its report, its time."""

    info: VersionInfo
    report: Report
    seconds: float


def run_versions(
    specs: list[VersionSpec],
    cases: list[HistoryCase],
    cache: Path,
    arch: str = "sm100",
    on_version: Callable[[VersionRun, int, int], None] | None = None,
    unread: str | None = None,
) -> list[VersionRun]:
    """Every version's report, in order (none is written here); ``unread`` as for :func:`run_version`."""
    runs = []
    for i, spec in enumerate(specs, 1):
        t0 = time.perf_counter()
        why: str | None
        try:
            source = materialise(spec, cache)
        except (DownloadFailed, GitError) as exc:
            why = f"TE {spec.label} could not be had: {exc}"
            desc = {"kind": spec.kind, "label": spec.label}
            run = VersionRun(
                VersionInfo(spec.label, desc, None, why), error_report(cases, why, desc), time.perf_counter() - t0
            )
        else:
            report, why = run_version(source, cases, arch, unread=unread)
            run = VersionRun(VersionInfo(source.label, source.describe(), None, why), report, time.perf_counter() - t0)
        run.info.report = f"{slug(run.info.label)}.json"
        runs.append(run)
        if on_version is not None:
            on_version(run, i, len(specs))
    labels = [r.info.label for r in runs]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise UsageError(f"a version is named twice: {', '.join(dup)}", key="--te")
    return runs


def history_of(runs: list[VersionRun], cases: list[HistoryCase], arch: str = "sm100") -> History:
    """The history document of version runs."""
    return build([r.info for r in runs], [r.report for r in runs], [c.id for c in cases], arch)

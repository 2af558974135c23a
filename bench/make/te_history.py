"""TE's saved state across its history: the committed history and its timing.

    python bench/make/te_history.py history --te-repo PATH [--cache DIR] [--out reports/te-history]
    python bench/make/te_history.py render [--out reports/te-history]
    python bench/make/te_history.py timing --te-repo PATH [--cache DIR] [--out reports/bench/cpu-te-history]

``history`` audits the grouped-MLP case list (fused NVFP4 and MXFP8; unfused NVFP4, MXFP8 and
fp8-current; G in {1, 8}; memaudit's small shape and TE PR #3545's shape) across the released TE
versions 2.14.0 to 2.20.2 (their pure-Python wheels from the package index) and the newest ``main``
of the TE checkout at PATH, writes a report per version, then bisects every change between
neighbouring versions on ``main``'s first-parent line (a release is its branch point there:
``git merge-base main release_vX.Y``) and writes the history with the table of PRs
(history.json, history.md, history.png). Changes of the same kind (same operands, kinds and
orientations, same pair of versions) are bisected once, on one case; the commit found is then
checked on every case of the group (its parent and it run each case: the saved state must differ),
and a case where it never does is bisected on its own. Where the state at the commit found is not
yet the later version's, the bisect goes on from that commit: every commit that changed the case in
the range is named, in order.

``render`` makes history.md and history.png again from the per-version reports and the bisects
recorded in history.json (which must come out of them byte for byte): a change to how the history
is shown needs no TE checkout.

``timing`` measures, on this machine: one version (2.19.0) x the case list, as one worker process,
median of 3; and the bisect over 2.16..2.17's first-parent line (83 commits), once.

TE's code is read from the checkout and the cache, never written into the project.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RELEASES = ("2.14.0", "2.15.0", "2.16.1", "2.17.1", "2.18.0", "2.19.0")
LAST_RELEASE = "2.20.2"


def _branch_point(repo: Path, main: str, version: str) -> str | None:
    """``main``'s commit where release ``version``'s branch left it, or None (no such branch)."""
    from memaudit.te.history.sources import GitError, git

    major_minor = ".".join(version.split(".")[:2])
    for ref in (
        f"release_v{major_minor}",
        f"origin/release_v{major_minor}",
        f"refs/remotes/origin/release_v{major_minor}",
    ):
        try:
            return str(git(repo, "merge-base", main, ref)).strip()
        except GitError:
            continue
    return None


def _group_key(pair: tuple[str, str], change: Any) -> tuple[Any, ...]:
    import re

    parts = frozenset((re.sub(r"\[\d+\]", "[g]", r.operand or ""), r.kind, r.orientation) for r in change.rows)
    return (pair, change.what, parts)


def _state_at(repo: Path, commit: str, cases: list[Any], cache: Path) -> dict[str, Any]:
    from memaudit.te.history.history import run_version
    from memaudit.te.history.model import saved_state
    from memaudit.te.history.sources import git_rev

    report, _ = run_version(git_rev(repo, commit, cache), cases)
    return {c.id: saved_state(report.case(c.id)) for c in cases}


def history(args: argparse.Namespace) -> int:
    from memaudit.render.plots import render
    from memaudit.report import atomic_write_bytes, atomic_write_text
    from memaudit.te.history.bisect import bisect
    from memaudit.te.history.cases import default_cases
    from memaudit.te.history.history import VersionSpec, history_of, run_versions
    from memaudit.te.history.model import saved_state
    from memaudit.te.history.render import history_figure, history_markdown
    from memaudit.te.history.sources import cache_dir, check_repo, resolve

    repo = check_repo(args.te_repo)
    cache = cache_dir(args.cache)
    main = resolve(repo, args.main)
    cases = default_cases(("small", "pr3545"), (1, 8))
    specs = [VersionSpec("release", v) for v in RELEASES]
    specs += [VersionSpec("git", args.main, repo), VersionSpec("release", LAST_RELEASE)]

    def progress(run: Any, i: int, n: int) -> None:
        ok = sum(c.status == "ok" for c in run.report.cases)
        print(
            f"[{i}/{n}] TE {run.info.label}: {ok}/{len(run.report.cases)} cases ran ({run.seconds:.1f} s)"
            + (f"; {run.info.error}" if run.info.error else ""),
            flush=True,
        )

    runs = run_versions(specs, cases, cache, on_version=progress)
    h = history_of(runs, cases)
    by_id = {c.id: c for c in cases}
    points = {v: _branch_point(repo, main, v) for v in (*RELEASES, LAST_RELEASE)}
    points[args.main] = main
    # every case at every branch point: where a release's state is not its branch point's, a
    # release-branch commit (a cherry-pick) made the difference, and main's line cannot name it
    at_point = {v: _state_at(repo, c, cases, cache) for v, c in points.items() if c is not None}
    version_state = {r.info.label: {c.id: saved_state(r.report.case(c.id)) for c in cases} for r in runs}
    h.branch_points = [
        {
            "version": v,
            "commit": points[v],
            "cases_differing_from_the_release": sorted(
                cid for cid, st in at_point[v].items() if v in version_state and st != version_state[v][cid]
            ),
        }
        for v in sorted(at_point, key=lambda x: [r.info.label for r in runs].index(x) if x in version_state else 99)
    ]
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for case_h, change in h.changed():
        groups.setdefault(_group_key((change.before, change.after), change), []).append(case_h)
    bisects: list[dict[str, Any]] = []
    for key, members in groups.items():
        before, after = key[0]
        good, bad = points.get(before), points.get(after)
        ids = [m.id for m in members]
        if good is None or bad is None or good == bad:
            why = (
                f"{after} is not on the checkout's main line (its release branch is not in the checkout)"
                if bad is None
                else f"{before} has no branch point in the checkout"
                if good is None
                else "both versions branch from the same main commit (the change came with a release-branch "
                "cherry-pick)"
            )
            bisects.append(
                {
                    "case": ids[0],
                    "cases": ids,
                    "pair": [before, after],
                    "good": good or "",
                    "bad": bad or "",
                    "commits": 0,
                    "first": None,
                    "candidates": [],
                    "probes": [],
                    "not_bisected": why,
                }
            )
            print(f"{before} -> {after}: {len(ids)} cases not bisected: {why}", flush=True)
            continue
        todo = sorted(members, key=lambda m: (m.shape.get("tokens", 0), -m.groups, m.id))
        while todo:
            rep, rest = todo[0], todo[1:]
            confirmed_any: set[str] = {rep.id}
            lo = good
            while True:  # every commit that changed the representative's state in the range, in order
                t0 = time.perf_counter()
                try:
                    result = bisect(repo, lo, bad, by_id[rep.id], cache)
                except Exception as exc:  # noqa: BLE001 - recorded as the group's answer
                    bisects.append(
                        {
                            "case": rep.id,
                            "cases": [rep.id],
                            "pair": [before, after],
                            "good": lo,
                            "bad": bad,
                            "commits": 0,
                            "first": None,
                            "candidates": [],
                            "probes": [],
                            "not_bisected": f"{type(exc).__name__}: {exc}",
                        }
                    )
                    print(f"{before} -> {after}: {rep.id}: {exc}", flush=True)
                    break
                d = result.to_dict()
                d["pair"] = [before, after]
                seconds = round(time.perf_counter() - t0, 1)  # printed, not saved: reruns write the same bytes
                confirmed = [rep.id]
                if result.first is not None and rest:
                    rcases = [by_id[m.id] for m in rest]
                    s0 = _state_at(repo, result.last_old, rcases, cache)
                    s1 = _state_at(repo, result.first, rcases, cache)
                    confirmed += [m.id for m in rest if s0[m.id] != s1[m.id]]
                confirmed_any.update(confirmed)
                d["cases"] = confirmed
                bisects.append(d)
                print(
                    f"{before} -> {after}: {len(confirmed)} cases: {result.summary()} ({seconds} s)"
                    + ("; changed again later" if result.changed_again else ""),
                    flush=True,
                )
                if result.first is None or not result.changed_again:
                    break
                lo = result.first
            todo = [m for m in rest if m.id not in confirmed_any]
    h.bisects = bisects
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for r in runs:
        atomic_write_text(out / r.info.report, r.report.to_json())
    atomic_write_text(out / "history.json", h.to_json())
    atomic_write_text(out / "history.md", history_markdown(h))
    atomic_write_bytes(out / "history.png", render(history_figure(h), "png"))
    print(f"wrote {out}")
    return 0


def render_again(args: argparse.Namespace) -> int:
    """history.md and history.png made again from a history folder's per-version reports and the
    bisects recorded in its history.json, which must come out byte for byte (no TE needed)."""
    from memaudit.render.plots import render
    from memaudit.report import atomic_write_bytes, atomic_write_text
    from memaudit.te.history.model import load, rebuild
    from memaudit.te.history.render import history_figure, history_markdown

    out = Path(args.out)
    saved = (out / "history.json").read_text(encoding="utf-8")
    h = rebuild(load(out / "history.json"), out)
    if h.to_json() != saved:
        print(f"{out / 'history.json'} does not come out of the reports beside it: not rendered", file=sys.stderr)
        return 1
    atomic_write_text(out / "history.md", history_markdown(h))
    atomic_write_bytes(out / "history.png", render(history_figure(h), "png"))
    print(f"rendered {out / 'history.md'} and {out / 'history.png'}")
    return 0


def timing(args: argparse.Namespace) -> int:
    from memaudit.report import atomic_write_text
    from memaudit.te.history.bisect import bisect
    from memaudit.te.history.cases import HistoryCase, default_cases
    from memaudit.te.history.history import run_version
    from memaudit.te.history.sources import cache_dir, check_repo, release

    repo = check_repo(args.te_repo)
    cache = cache_dir(args.cache)
    cases = default_cases(("small", "pr3545"), (1, 8))
    source = release("2.19.0", cache)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        report, why = run_version(source, cases)
        walls.append(time.perf_counter() - t0)
        assert why is None, why
    ok = sum(c.status == "ok" for c in report.cases)
    case = HistoryCase("nvfp4", 8, True, 4096, 1024, 2048)
    t0 = time.perf_counter()
    result = bisect(repo, args.good, args.bad, case, cache)
    bisect_s = time.perf_counter() - t0
    memaudit_commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    data = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "load_average": [round(x, 2) for x in __import__("os").getloadavg()],
        },
        "memaudit_commit": memaudit_commit,
        "version_x_cases": {
            "version": "2.19.0",
            "cases": len(cases),
            "ok": ok,
            "runs_s": [round(w, 2) for w in walls],
            "median_s": round(statistics.median(walls), 2),
        },
        "bisect": {
            "case": case.id,
            "commits": result.commits,
            "probes": len(result.probes),
            "seconds": round(bisect_s, 1),
            "first": result.first,
            "subject": result.subject,
            "probe_s": [round(p.seconds, 2) for p in result.probes],
        },
    }
    out = Path(args.out)
    atomic_write_text(out.with_suffix(".json"), json.dumps(data, indent=1, sort_keys=True) + "\n")
    v, b = data["version_x_cases"], data["bisect"]
    md = (
        f"# TE history timing (`python bench/make/te_history.py timing`)\n\n"
        f"memaudit {memaudit_commit}, Python {data['machine']['python']}, load average "
        f"{', '.join(map(str, data['machine']['load_average']))} (this machine's 2 cores are shared).\n\n"
        f"| what | wall |\n|---|---:|\n"
        f"| one version (TE {v['version']}) x {v['cases']} cases ({v['ok']} ran), one worker process incl. TE's "
        "import, "
        f"median of 3 ({', '.join(f'{x} s' for x in v['runs_s'])}) | {v['median_s']} s |\n"
        f"| bisect of {b['case']} over {b['commits']} first-parent commits: {b['probes']} probes, each a git archive "
        f"and a worker (median probe {statistics.median(b['probe_s']):.1f} s); found {str(b['first'])[:12]} "
        f"{b['subject']} | {b['seconds']} s |\n"
    )
    atomic_write_text(out.with_suffix(".md"), md)
    print(md)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("history")
    h.add_argument("--te-repo", required=True)
    h.add_argument("--main", default="main", help="the revision that stands for TE's newest main")
    h.add_argument("--cache")
    h.add_argument("--out", default=str(ROOT / "reports" / "te-history"))
    t = sub.add_parser("timing")
    t.add_argument("--te-repo", required=True)
    t.add_argument("--cache")
    t.add_argument("--good", default="eca05d3b554e", help="the 2.16 branch point on main")
    t.add_argument("--bad", default="5d1dddfe2397", help="the 2.17 branch point on main")
    t.add_argument("--out", default=str(ROOT / "reports" / "bench" / "cpu-te-history"))
    r = sub.add_parser("render", help="history.md and history.png again from the reports and history.json in --out")
    r.add_argument("--out", default=str(ROOT / "reports" / "te-history"))
    args = ap.parse_args()
    return {"history": history, "timing": timing, "render": render_again}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())

"""PyTorch's own autograd and checkpoint tests, three times: bare, every test inside ``capture()``
(a ``report(outputs)`` before every backward and a ``report()`` at its end), and under a plain
pass-through hook pair (the control: what PyTorch does under any pair). Writes the outcome table.

    python bench/verify/pytorch_suites.py FOLDER [--out reports/bench/pytorch-suites] [--timeout 120]

FOLDER holds PyTorch's ``test_autograd.py`` (with its ``autograd/`` package and ``expect/`` files)
and ``test_utils.py`` (only ``TestCheckpoint`` runs from it). They are PyTorch's, never memaudit's:
they are not committed; bring them from PyTorch's repository or its source release. Needs
``expecttest`` and ``pytest-timeout`` (pip). Each mode runs in a fresh process
(``bench/_suite_mode.py`` is the plugin that sets the mode), outcomes are read from JUnit XML.

A test whose outcome under ``capture()`` differs from bare is listed with the control's outcome:
``control fails the same way`` means PyTorch forbids that under any hook pair (README, what
memaudit cannot do); anything else is memaudit's to fix. The end-of-test ``report()`` (the heap
scan) is timed per test: median, p90 and max are in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODES = ("bare", "capture", "control")
SUITES = (("test_autograd.py", None), ("test_utils.py", "TestCheckpoint"))


def run_mode(folder: Path, mode: str, out: Path, timeout: int) -> tuple[dict[str, tuple[str, str]], float]:
    """Run every suite in ``mode``; return test id -> (outcome, first line of the message), and seconds."""
    env = dict(os.environ)
    env["MEMAUDIT_SUITE_MODE"] = mode
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bench"), str(ROOT), env.get("PYTHONPATH", "")])
    times = out / f"report-times-{mode}.jsonl"
    times.unlink(missing_ok=True)
    env["MEMAUDIT_SUITE_TIMES"] = str(times)
    outcomes: dict[str, tuple[str, str]] = {}
    start = time.perf_counter()
    for name, select in SUITES:
        if not (folder / name).exists():
            print(f"{name}: not in {folder}, skipped", file=sys.stderr)
            continue
        xml = out / f"junit-{mode}-{Path(name).stem}.xml"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "_suite_mode",
            name,
            f"--timeout={timeout}",
            f"--junitxml={xml}",
        ]
        if select:
            cmd += ["-k", select]
        print(f"[{mode}] {' '.join(cmd[3:])}", file=sys.stderr)
        subprocess.run(cmd, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        outcomes.update(read_junit(xml))
    return outcomes, time.perf_counter() - start


def read_junit(path: Path) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    if not path.exists():
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = child.tag if child.tag == "error" else "failed", child.get("message") or ""
                break
            if child.tag == "skipped":
                kind = child.get("type") or ""
                outcome = "xfailed" if "xfail" in kind else "skipped"
                message = child.get("message") or ""
        out[test] = (outcome, message.strip().splitlines()[0][:160] if message.strip() else "")
    return out


def report_times(path: Path) -> list[float]:
    if not path.exists():
        return []
    return [json.loads(line)["report_s"] for line in path.read_text().splitlines() if line.strip()]


def table(
    results: dict[str, dict[str, tuple[str, str]]], seconds: dict[str, float], times: list[float], source: str
) -> tuple[str, dict[str, Any]]:
    bare, cap, ctl = results["bare"], results["capture"], results["control"]
    tests = sorted(set(bare) | set(cap) | set(ctl))
    changed = [t for t in tests if cap.get(t, ("missing", ""))[0] != bare.get(t, ("missing", ""))[0]]
    rows = []
    for t in changed:
        b, c, k = (m.get(t, ("missing", "")) for m in (bare, cap, ctl))
        same = k[0] == c[0] and k[0] != b[0]
        rows.append(
            {
                "test": t,
                "bare": b[0],
                "capture": c[0],
                "control": k[0],
                "why": c[1],
                "verdict": "control fails the same way (PyTorch forbids it under any hook pair)"
                if same
                else "memaudit only",
            }
        )
    counts = {
        mode: {
            o: sum(1 for v in results[mode].values() if v[0] == o)
            for o in ("passed", "failed", "error", "skipped", "xfailed")
        }
        for mode in MODES
    }
    ms = sorted(t * 1000 for t in times)
    timing = {
        "tests": len(ms),
        "median_ms": round(statistics.median(ms), 1) if ms else None,
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 1) if ms else None,
        "max_ms": round(ms[-1], 1) if ms else None,
        "total_s": round(sum(ms) / 1000, 1),
    }
    data = {
        "source": source,
        "counts": counts,
        "seconds": {m: round(s, 1) for m, s in seconds.items()},
        "changed": rows,
        "memaudit_only": sum(1 for r in rows if r["verdict"] == "memaudit only"),
        "report_without_outputs": timing,
    }
    lines = [
        "# PyTorch's autograd and checkpoint tests under capture()",
        "",
        f"Made by `python bench/verify/pytorch_suites.py FOLDER` ({source}). Each test runs bare, inside `capture()` "
        "(`report(outputs)` before every backward, `report()` at the end) and under a plain pass-through pair "
        "(control). The test files are PyTorch's and are not committed.",
        "",
        "| mode | passed | failed | error | skipped | xfailed | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        c = counts[mode]
        lines.append(
            f"| {mode} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} | {c['xfailed']} | "
            f"{seconds.get(mode, 0):.1f} |"
        )
    lines += [
        "",
        f"**{len(rows)} tests change outcome under `capture()`; {data['memaudit_only']} of them not under the "
        "control pair too.**",
        "",
    ]
    if rows:
        lines += ["| test | bare | capture() | control | verdict | capture()'s message |", "|---|---|---|---|---|---|"]
        for r in rows:
            why = r["why"].replace("|", "\\|")
            lines.append(f"| `{r['test']}` | {r['bare']} | {r['capture']} | {r['control']} | {r['verdict']} | {why} |")
    restored = [
        t
        for t in tests
        if ctl.get(t, ("missing", ""))[0] != bare.get(t, ("missing", ""))[0]
        and cap.get(t, ("missing", ""))[0] == bare.get(t, ("missing", ""))[0]
    ]
    data["restored"] = restored
    lines += [
        "",
        f"Under the plain pair {len(restored)} more tests change outcome that `capture()` runs as bare "
        "(checks PyTorch skips under any pair and memaudit restores, or hooks that are now transparent):",
        "",
    ]
    lines += [f"- `{t}`: bare {bare[t][0]}, control {ctl[t][0]}" for t in restored]
    lines += [
        "",
        "End-of-test `report()` without outputs (the heap scan for live graphs), per test: "
        f"median {timing['median_ms']} ms, p90 {timing['p90_ms']} ms, max {timing['max_ms']} ms over "
        f"{timing['tests']} tests ({timing['total_s']} s in all).",
        "",
    ]
    return "\n".join(lines), data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "bench" / "pytorch-suites")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test (pytest-timeout)")
    ap.add_argument("--source", default="", help="where the test files came from (written into the table)")
    ap.add_argument("--render-only", action="store_true", help="render the last run's JUnit files again (no test runs)")
    args = ap.parse_args(argv)
    folder = args.folder.resolve()
    if not (folder / "test_autograd.py").exists() and not (folder / "test_utils.py").exists():
        print(f"error: {folder}: holds neither test_autograd.py nor test_utils.py", file=sys.stderr)
        return 2
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "memaudit-pytorch-suites"
    work.mkdir(parents=True, exist_ok=True)
    results, seconds = {}, {}
    if args.render_only:  # the JUnit files and timings of the last run, rendered again
        previous = json.loads(args.out.with_suffix(".json").read_text())["seconds"]
        for mode in MODES:
            results[mode] = {}
            for name, _ in SUITES:
                results[mode].update(read_junit(work / f"junit-{mode}-{Path(name).stem}.xml"))
            seconds[mode] = previous.get(mode, 0.0)
    else:
        for mode in MODES:
            results[mode], seconds[mode] = run_mode(folder, mode, work, args.timeout)
    text, data = table(
        results, seconds, report_times(work / "report-times-capture.jsonl"), args.source or str(folder.name)
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

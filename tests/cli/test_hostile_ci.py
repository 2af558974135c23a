"""Hostile input aimed at what runs in other people's CI: ``merge`` with a forged world size, a
huge error reason in ``compare --markdown``, a 10,000-digit integer in a scenario, a broken
classifier plugin, a third party's ``SystemExit``, and ``--json -``.

Each case keeps the bad-input promises: a clear ``error:`` line and the documented exit status,
no traceback, bounded time, nothing written where nothing should be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.ranks import DistRun
from memaudit.runner import run_matrix
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target


def _invoke(*argv: str) -> tuple[int, str, float]:
    start = time.perf_counter()
    result = CliRunner().invoke(app, list(argv))
    took = time.perf_counter() - start
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    out = result.output + (result.stderr if result.stderr_bytes is not None else "")
    return result.exit_code, out, took


# ---- merge with a forged world size ----------------------------------------------------------------------
def _forged_rank_files(tmp: Path, world: int) -> list[str]:
    """Two genuine rank files of a 2-rank data-parallel run of the reference target, their world
    size (the run's and every case's) then forged to ``world``."""
    tgt = get_target("reference")
    spec = CaseSpec.make(
        tgt,
        "bf16",
        1,
        dtype="bf16",
        device="cpu",
        options=dict(tgt.configure({}).options),
        tokens=64,
        hidden=16,
        ffn=32,
    )
    names = []
    for r in range(2):
        rep = run_matrix(tgt, [spec], rank=r, world_size=2, backend="gloo", backward=False)
        rep.created = "2026-01-01T00:00:00Z"
        rep.dist = DistRun(2, [spec.id], r, "run-1", True)
        d = json.loads(rep.to_json())
        d["dist"]["world_size"] = world
        for c in d["cases"]:
            c["dist"]["world_size"] = world
            c["dist"]["layout"] = {"dp": world}
        (tmp / f"rank{r}.json").write_text(json.dumps(d), encoding="utf-8")
        names.append(str(tmp / f"rank{r}.json"))
    return names


def test_merge_names_missing_ranks_as_ranges(tmp_path: Path) -> None:
    files = _forged_rank_files(tmp_path, 10**6)
    code, out, took = _invoke("merge", *files, "--json", str(tmp_path / "m.json"))
    assert code == 2 and "Traceback" not in out, out[-2000:]
    assert "rank(s) 2-999999 of 1000000 wrote no report" in out
    assert len(out) < 2000 and took < 10, (len(out), took)
    assert not (tmp_path / "m.json").exists()


def test_merge_allow_missing_ranks_refuses_a_world_far_beyond_its_files(tmp_path: Path) -> None:
    files = _forged_rank_files(tmp_path, 2**20)
    code, out, took = _invoke("merge", *files, "--allow-missing-ranks", "--json", str(tmp_path / "m.json"))
    assert code == 2 and "Traceback" not in out, out[-2000:]
    assert "dist.world_size" in out and "1,048,574 ranks are missing" in out, out
    assert took < 10 and not (tmp_path / "m.json").exists()


# ---- a huge error reason -------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "reports" / "baseline" / "h200-te-grouped-mlp.json"


@pytest.mark.parametrize(
    "reason", ["a\n" * 106_000, "|`_*<@x #1 " * 20_000], ids=["212 KB of lines", "220 KB of specials"]
)
def test_a_huge_error_reason_does_not_stall_compare_markdown(tmp_path: Path, reason: str) -> None:
    """The reason of an error case (a fp8-block cell of the H200 baseline) is shown clipped, on one
    line, saying how long it is; the comparison takes time linear in it (it took minutes)."""
    d = json.loads(H200.read_text(encoding="utf-8"))
    assert d["cases"][9]["status"] == "error"
    d["cases"][9]["reason"] = reason
    (tmp_path / "cur.json").write_text(json.dumps(d), encoding="utf-8")
    code, out, took = _invoke(
        "compare", str(H200), str(tmp_path / "cur.json"), "--markdown", str(tmp_path / "c.md"), "-v"
    )
    assert code == 0 and took < 10, (code, took, out[-2000:])
    md = (tmp_path / "c.md").read_text(encoding="utf-8")
    assert f"({len(reason):,} characters in all; the report has the whole reason)" in md
    assert len(md) < 20_000 and len(out.splitlines()) < 100, (len(md), len(out.splitlines()))


# ---- a scenario with a 10,000-digit integer ------------------------------------------------------------------
SCENARIO = """[cases]
target = "reference"
recipes = ["bf16"]
groups = [1]
tokens = {tokens}
hidden = 16
ffn = 32
"""


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_ten_thousand_digit_integer_in_a_scenario_is_bad_input(tmp_path: Path, command: str) -> None:
    (tmp_path / "big.toml").write_text(SCENARIO.format(tokens="9" * 10_000), encoding="utf-8")
    argv = (
        ["run", "--scenario", str(tmp_path / "big.toml"), "--json", str(tmp_path / "r.json")]
        if command == "run"
        else ["check", str(ROOT / "reports" / "cpu" / "reference.json"), "--scenario", str(tmp_path / "big.toml")]
    )
    code, out, _ = _invoke(*argv)
    assert code == 2 and "Traceback" not in out, out[-2000:]
    assert "error:" in out and "big.toml: line 5: cannot read a number" in out and "10000 digits" in out, out
    assert not (tmp_path / "r.json").exists()


# ---- broken extensions and a third party's sys.exit ----------------------------------------------------------
SMALL = ["--target", "reference", "--groups", "1", "--tokens", "64", "--hidden", "16", "--ffn", "32"]
CLASSIFIERS = {
    "raises": "raise RuntimeError('broken on purpose')\n",
    "not an Extension": "EXTENSION = object()\n",
    "exits": "import sys\nsys.exit(0)\n",
    "prints": "from memaudit.extension import Extension\nprint('hello from a plugin')\n"
    "EXTENSION = Extension('somelib', library='somelib', classifier='nowhere:Nothing')\n",
}


def _site(tmp: Path, group: str, name: str, module: str, value: str, **others: str) -> Path:
    """A package ``badplug`` (its ``__init__`` is ``module``'s text, its other modules ``others``)
    with one entry point, installed as a ``.dist-info`` in ``tmp/site``."""
    site = tmp / "site"
    (site / "badplug").mkdir(parents=True)
    (site / "badplug" / "__init__.py").write_text(module, encoding="utf-8")
    for mod, text in others.items():
        (site / "badplug" / f"{mod}.py").write_text(text, encoding="utf-8")
    info = site / "badplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: badplug\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = {value}\n", encoding="utf-8")
    return site


def _cli(*argv: str, site: Path | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site) if site else "", str(ROOT / "tests"), str(ROOT)) if p)
    return subprocess.run(
        [sys.executable, "-P", "-m", "memaudit", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("kind", list(CLASSIFIERS), ids=list(CLASSIFIERS))
def test_a_broken_extension_is_bad_input_naming_it(tmp_path: Path, kind: str) -> None:
    site = _site(tmp_path, "memaudit.extensions", "somelib", CLASSIFIERS[kind], "badplug:EXTENSION")
    (tmp_path / "s.toml").write_text(
        SCENARIO.format(tokens=64) + '\n[[budget]]\nname = "b"\nmax_bytes = "1 GiB"\n', encoding="utf-8"
    )
    for argv in (
        ["run", *SMALL, "--json", "r.json"],
        ["check", str(ROOT / "reports" / "cpu" / "reference.json"), "--scenario", "s.toml"],
    ):
        done = _cli(*argv, site=site, cwd=tmp_path)
        text = done.stdout + done.stderr
        if kind == "prints":  # loads: what it prints goes to stderr, never into memaudit's output
            assert "hello from a plugin" not in done.stdout and "Traceback" not in text, text[-2000:]
            continue
        assert done.returncode == 2 and "Traceback" not in text, text[-2000:]
        assert "error: extensions: the extension somelib = badplug:EXTENSION (package badplug)" in text, text[-2000:]
        assert not (tmp_path / "r.json").exists()


def test_a_target_plugin_that_exits_is_bad_input(tmp_path: Path) -> None:
    site = _site(
        tmp_path,
        "memaudit.extensions",
        "exiter",
        "from memaudit.extension import Extension\n"
        "EXTENSION = Extension('exiter', targets={'exiter': 'badplug.exiting:Target'})\n",
        "badplug:EXTENSION",
        exiting="import sys\nsys.exit(0)\n",
    )
    done = _cli("run", "--target", "exiter", "--json", "r.json", site=site, cwd=tmp_path)
    text = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in text and "target 'exiter'" in text and "sys.exit(0)" in text, (
        text
    )
    assert not (tmp_path / "r.json").exists()


def test_a_factory_that_calls_sys_exit_is_that_cases_error_not_an_exit_0(tmp_path: Path) -> None:
    (tmp_path / "exiting_factory.py").write_text(
        "import sys\nfrom custom_factory import make as _make\n\n"
        "def make(spec):\n    if spec.groups == 2:\n        sys.exit(0)\n    return _make(spec)\n",
        encoding="utf-8",
    )
    (tmp_path / "s.toml").write_text(
        '[cases]\ntarget = "exiting_factory:make"\nrecipes = ["bf16"]\ngroups = [1, 2]\ntokens = 64\nhidden = 16\nffn '
        "= 32\n\n"
        '[[budget]]\nname = "b"\nmax_bytes = "1 GiB"\n',
        encoding="utf-8",
    )
    env_site = tmp_path  # the factory's module, found through PYTHONPATH
    done = _cli(
        "run",
        "--scenario",
        "s.toml",
        "--allow-target",
        "exiting_factory:make",
        "--json",
        "r.json",
        site=env_site,
        cwd=tmp_path,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 3 and "Traceback" not in text, text[-3000:]
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert [c["status"] for c in report["cases"]] == ["ok", "error"]
    assert report["cases"][1]["reason"] == "SystemExit: the case's code called sys.exit(0)"


def test_a_sys_exit_outside_a_case_is_never_the_exit_status(tmp_path: Path) -> None:
    """A factory that takes no spec is built once on the meta device while the run is planned
    (outside any case): its sys.exit(0) is exit 2, naming where it was called, never exit 0."""
    (tmp_path / "exiting_target.py").write_text("import sys\n\n\ndef make():\n    sys.exit(0)\n", encoding="utf-8")
    done = _cli("run", "--target", "exiting_target:make", "--json", "r.json", site=tmp_path, cwd=tmp_path)
    text = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in text, text[-3000:]
    assert "called sys.exit(0) at" in text and "exiting_target.py:5" in text, text[-3000:]
    assert not (tmp_path / "r.json").exists()


# ---- --json - ---------------------------------------------------------------------------------------------------
REF = str(ROOT / "reports" / "cpu" / "reference.json")
DASH = {
    "run --json": ["run", *SMALL, "--json", "-"],
    "run --markdown": ["run", *SMALL, "--markdown", "-"],
    "compare --markdown": ["compare", REF, REF, "--markdown", "-"],
    "compare --benchmark-json": ["compare", REF, REF, "--benchmark-json", "-"],
    "check --json": ["check", REF, "--scenario", "reference", "--json", "-"],
}


@pytest.mark.parametrize("argv", list(DASH.values()), ids=list(DASH))
def test_dash_as_an_output_is_refused_not_a_file_named_dash(
    tmp_path: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = _invoke(*argv)
    flag = argv[argv.index("-") - 1]
    assert code == 2 and f"error: {flag}: '-' (standard output) is not an output memaudit writes" in out, out[-2000:]
    assert list(tmp_path.iterdir()) == []

"""memaudit outside a clone: shipped scenarios by name, the wheel's contents, and the wheel in a
fresh venv (the ``wheel`` test: built from this checkout, installed outside the repo, then
``memaudit --help``, ``run``, ``check --scenario reference``, ``compare --benchmark-json`` and the
README's Python snippet run from a folder outside the repo; and every shell command of README.md,
docs/guides/ci.md and docs/guides/distributed.md that runs memaudit, read from their ``bash``/``sh``/``console``
blocks).

The fresh venv gets only the wheel (``--no-deps``); torch, TransformerEngine, rich, typer and
pydantic come from the test interpreter's site-packages through a ``.pth`` file that lists those
folders as plain paths (installing torch 2.14.1 itself into the venv took 70 s and 5.4 GB, before
TE; this way the whole test takes about 16 s). Plain path lines do not run the ``.pth`` files inside them, so the
checkout's editable install stays out; the test asserts that memaudit itself is imported from the
fresh venv. That memaudit's own requirements, ``[te]`` included, are met there is checked from the
installed wheel's metadata.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import time
import tomllib
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.distribution import DISTRIBUTION, OTHER
from memaudit.errors import UsageError
from memaudit.judge.scenario import load_scenario
from memaudit.judge.shipped import SHIPPED, is_scenario_name, resolve_scenario, shipped_dir, shipped_scenarios

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.toml"))
RUNNER = CliRunner()


def cli(*args: object):
    return RUNNER.invoke(app, [str(a) for a in args])


def output(result) -> str:
    return result.output + (result.stderr if result.stderr_bytes is not None else "")


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``memaudit run --scenario reference --json``: the shipped scenario run by name."""
    path = tmp_path_factory.mktemp("run") / "reference.json"
    result = cli("run", "--scenario", "reference", "--device", "cpu", "--json", path, "--quiet")
    assert result.exit_code == 0, output(result)
    return path


# ---- shipped scenarios by name ---------------------------------------------------------------------
def test_the_shipped_scenarios_are_the_files_in_scenarios() -> None:
    assert SCENARIOS, "scenarios/ is empty"
    shipped = shipped_scenarios()
    assert list(shipped) == [p.stem for p in SCENARIOS]
    for p in SCENARIOS:
        assert shipped[p.stem].read_text(encoding="utf-8") == p.read_text(encoding="utf-8")


def test_a_checkout_reads_its_own_scenarios_folder() -> None:
    assert Path(str(shipped_dir())) == ROOT / "scenarios"


def test_an_install_without_scenarios_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import memaudit.judge.shipped as shipped

    monkeypatch.setattr(shipped, "shipped_scenarios", dict)
    with pytest.raises(UsageError, match=r"installed without its scenarios"):
        resolve_scenario("reference")


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_a_shipped_scenario_loads_by_name_as_from_its_file(path: Path) -> None:
    by_name, by_path = load_scenario(path.stem), load_scenario(path)
    assert by_name.path == f"{path.stem}{SHIPPED}" and by_path.path == str(path)
    assert by_name.name == by_path.name
    assert by_name.specs() == by_path.specs()
    assert [replace(r, source="") for r in by_name.rules] == [replace(r, source="") for r in by_path.rules]
    assert {r.source for r in by_name.rules} == {by_name.path}


def test_what_counts_as_a_name() -> None:
    assert is_scenario_name("grouped_mlp") and is_scenario_name("reference")
    for ref in ("scenarios/grouped_mlp.toml", "grouped_mlp.toml", "./x/y", "", " ", ".", ".."):
        assert not is_scenario_name(ref), ref


def test_run_and_check_take_a_scenario_by_name(reference_run: Path) -> None:
    report = json.loads(reference_run.read_text(encoding="utf-8"))
    assert [c["id"] for c in report["cases"]] == [
        s.id for s in load_scenario(ROOT / "scenarios" / "reference.toml").specs()
    ]
    assert all(b["verdict"] == "pass" for c in report["cases"] for b in c["budgets"])
    result = cli("check", reference_run, "--scenario", "reference")
    assert result.exit_code == 0, output(result)
    assert " 0 fail" in result.stdout


def test_check_by_name_equals_check_by_path_on_the_h200_report() -> None:
    report = ROOT / "reports" / "h200" / "te-grouped-mlp.json"
    by_name = cli("check", report, "--scenario", "grouped_mlp")
    by_path = cli("check", report, "--scenario", ROOT / "scenarios" / "grouped_mlp.toml")
    assert by_name.exit_code == by_path.exit_code == 3, output(by_name)  # fp8-block error cells, on_error = "warn"
    assert output(by_name) == output(by_path)


def test_an_unknown_name_exits_2_listing_the_shipped_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for argv in (["check", ROOT / "reports" / "cpu" / "reference.json"], ["run", "--json", tmp_path / "o.json"]):
        result = cli(*argv, "--scenario", "refrence")
        assert result.exit_code == 2, output(result)
        text = output(result)
        assert "Traceback" not in text and "no shipped scenario" in text and "did you mean 'reference'?" in text
        assert "shipped scenarios: " + ", ".join(p.stem for p in SCENARIOS) in text
    assert list(tmp_path.iterdir()) == []


def test_a_missing_path_is_not_taken_for_a_name(tmp_path: Path) -> None:
    result = cli("check", ROOT / "reports" / "cpu" / "reference.json", "--scenario", tmp_path / "reference")
    assert result.exit_code == 2 and "no such scenario file" in output(result)


def test_an_existing_file_wins_over_a_shipped_name(
    reference_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "scenarios" / "reference.toml").read_text(encoding="utf-8")
    (tmp_path / "reference").write_text(
        text + '\n[[budget]]\nname = "local-file"\nmax_bytes = "1 B"\n', encoding="utf-8"
    )
    result = cli("check", reference_run, "--scenario", "reference")
    assert result.exit_code == 1 and "local-file" in result.stdout, output(result)
    assert resolve_scenario("reference")[0] == "reference"


def test_a_folder_of_that_name_does_not_hide_the_shipped_scenario(
    reference_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reference").mkdir()
    result = cli("check", reference_run, "--scenario", "reference")
    assert result.exit_code == 0, output(result)


def test_messages_name_a_shipped_scenario_not_its_install_path() -> None:
    # reports/cpu/reference.json is T=1024; the shipped reference scenario runs T=256
    result = cli("check", ROOT / "reports" / "cpu" / "reference.json", "--scenario", "reference")
    assert result.exit_code == 2
    text = output(result)
    assert f"which scenario reference{SHIPPED} runs" in text
    assert str(ROOT / "scenarios") not in text and "site-packages" not in text


# ---- the build configuration -----------------------------------------------------------------------
def test_pyproject_lists_every_package_folder() -> None:
    """packages.find cannot see the mapped memaudit.scenarios, so pyproject lists the packages;
    a new folder under memaudit/ must be added there or the wheel would lack it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "memaudit").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert set(config["packages"]) == folders | {"memaudit.scenarios"}
    assert config["package-dir"] == {"memaudit.scenarios": "scenarios"}
    assert config["package-data"] == {"memaudit": ["gate.sh", "py.typed"], "memaudit.scenarios": ["*.toml"]}
    assert (ROOT / "memaudit" / "py.typed").is_file()  # PEP 561: type checkers read memaudit's hints


def test_the_distribution_name_is_not_the_other_projects() -> None:
    """The package index's ``memaudit`` is another project; this one is published as DISTRIBUTION."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION != OTHER
    assert project["scripts"] == {"memaudit": "memaudit.cli:main"}


def _fake_other_project(folder: Path, summary: str) -> None:
    info = folder / "memaudit-0.2.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: memaudit\nVersion: 0.2.0\nSummary: {summary}\n", encoding="utf-8"
    )


def test_the_command_refuses_to_run_beside_the_other_memaudit(tmp_path: Path) -> None:
    """Both projects install a ``memaudit`` package folder and command; the command says so, exit 2."""
    _fake_other_project(tmp_path / "other", "Local Trainer/TRL plugin that audits fine-tunes for membership leakage")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "other")}
    done = subprocess.run(
        [sys.executable, "-m", "memaudit", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'memaudit' 0.2.0 installed (Local Trainer/TRL plugin" in done.stderr
    assert f"pip uninstall -y memaudit {DISTRIBUTION} && pip install {DISTRIBUTION}" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_this_project_under_its_old_name_is_not_the_other_project(tmp_path: Path) -> None:
    _fake_other_project(
        tmp_path / "old", "Saved-tensor memory auditor and regression gate for PyTorch and TransformerEngine"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "old")}
    done = subprocess.run(
        [sys.executable, "-m", "memaudit", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_te_extra_names_transformer_engine_for_pytorch() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["optional-dependencies"]["te"] == ["transformer-engine[pytorch]"]


# ---- the wheel -------------------------------------------------------------------------------------
def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of this checkout's sources (so the build leaves nothing in it)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("memaudit", "scenarios"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    try:  # build with this interpreter's setuptools where it meets [build-system] (setuptools>=68)
        import setuptools

        offline = ["--no-build-isolation", "--no-index"] if int(setuptools.__version__.split(".")[0]) >= 68 else []
    except (ImportError, ValueError):
        offline = []
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *offline, "-w", str(work / "dist"), str(src)]
    done = subprocess.run(cmd, cwd=work, env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (whl,) = (work / "dist").glob("torch_memaudit-*.whl")
    return whl


def test_the_wheel_ships_the_scenarios_and_every_module(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for p in SCENARIOS:
            assert z.read(f"memaudit/scenarios/{p.name}") == p.read_bytes()
        assert z.read("memaudit/gate.sh") == (ROOT / "memaudit" / "gate.sh").read_bytes()  # the CI gate's script
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    modules = {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "memaudit").rglob("*.py") if "__pycache__" not in p.parts
    }
    assert modules <= names, sorted(modules - names)
    assert "memaudit/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "reports/", "scenarios/", "bench/", "docs/"))]
    assert 'Requires-Dist: transformer-engine[pytorch]; extra == "te"' in metadata


CHECK_REQUIREMENTS = r"""
import importlib.metadata as md, sys
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

def check(dist, extras, depth):
    for text in md.distribution(dist).requires or ():
        req = Requirement(text)
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        try:
            have = md.distribution(req.name)
        except md.PackageNotFoundError:
            sys.exit(f"{dist}: requirement {text!r}: {req.name} is not installed")
        if have.version not in req.specifier:
            sys.exit(f"{dist}: requirement {text!r}: {req.name} {have.version} is installed")
        provided = have.metadata.get_all("Provides-Extra") or []
        for extra in req.extras:
            if extra not in provided:
                sys.exit(f"{dist}: requirement {text!r}: {req.name} has no extra {extra!r} (it has {provided})")
        if req.extras and depth:
            check(req.name, ["", *req.extras], depth - 1)
        print("ok", text, "->", req.name, have.version)

check("torch-memaudit", ["", "te"], 1)
"""


def _readme_snippet() -> str:
    fences = [
        t.content
        for t in MarkdownIt().parse((ROOT / "README.md").read_text(encoding="utf-8"))
        if t.type == "fence" and t.info.strip() == "python" and "memaudit.capture(" in t.content
    ]
    assert len(fences) == 1, "README.md should have one python block with memaudit.capture()"
    return fences[0]


@dataclass(frozen=True)
class Venv:
    """A fresh venv outside the repo with the wheel installed (and its dependencies seen through a
    ``.pth`` file), a work folder outside the repo, and the environment the commands run in."""

    root: Path
    python: Path
    memaudit: Path
    work: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    base = tmp_path_factory.mktemp("fresh")
    venv, work = base / "venv", base / "work"
    work.mkdir()
    assert ROOT not in work.parents and ROOT not in venv.parents
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py, exe = venv / "bin" / "python", venv / "bin" / "memaudit"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    purelib = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            env=_clean_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "_memaudit_test_deps.pth").write_text("".join(f"{p}\n" for p in deps), encoding="utf-8")
    # TE finds its CUDA libraries (cuDNN, NVRTC: the nvidia-* packages) under the running venv's own
    # site-packages, not on sys.path: they are linked there, as installing them would put them
    for p in deps:
        if (Path(p) / "nvidia").is_dir() and not (purelib / "nvidia").exists():
            (purelib / "nvidia").symlink_to(Path(p) / "nvidia", target_is_directory=True)
    # torch's console script torchrun (the .pth brings torch's modules, not its scripts)
    torchrun = venv / "bin" / "torchrun"
    torchrun.write_text(
        f"#!{py}\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n", encoding="utf-8"
    )
    torchrun.chmod(0o755)
    env = _clean_env(CUDA_VISIBLE_DEVICES="", NO_COLOR="1", COLUMNS="200")
    return Venv(venv, py, exe, work, env)


@pytest.mark.wheel
def test_the_wheel_works_in_a_fresh_venv_outside_the_repo(fresh_venv: Venv) -> None:
    start = time.perf_counter()
    py, exe, work, env, venv = fresh_venv.python, fresh_venv.memaudit, fresh_venv.work, fresh_venv.env, fresh_venv.root

    def sh(*argv: object, code: int = 0) -> str:
        done = subprocess.run([str(a) for a in argv], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == code, f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    where = json.loads(
        sh(
            py,
            "-c",
            "import json, memaudit; from memaudit.judge.shipped import shipped_dir, shipped_scenarios; "
            "print(json.dumps([memaudit.__file__, str(shipped_dir()), list(shipped_scenarios())]))",
        )
    )
    assert Path(where[0]).is_relative_to(venv), where  # not the checkout's memaudit
    assert Path(where[1]) == Path(where[0]).parent / "scenarios", where  # the wheel's own package data
    assert where[2] == [p.stem for p in SCENARIOS]
    sh(py, "-c", CHECK_REQUIREMENTS)
    assert "check" in sh(exe, "--help")
    # the default target: TE's grouped MLP wherever TE is installed and its forward can run (with no GPU,
    # emulated kernels on fake CUDA), else the reference target. The fresh venv sees this one's packages,
    # but TE may not import there (where this interpreter has no nvidia-* packages for it to load): then
    # every case is the estimate, saying why, and nothing was measured or emulated (exit 4)
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

    te = TEGroupedMLPTarget.runs_here()
    te_imports = (
        subprocess.run(
            [str(py), "-c", "import torch, transformer_engine.pytorch"],
            cwd=work,
            env=env,
            capture_output=True,
            timeout=300,
        ).returncode
        == 0
    )
    sh(
        exe,
        "run",
        "--quiet",
        "--json",
        "plain.json",
        code=0 if not te or te_imports or torch.cuda.is_available() else 4,
    )
    plain = json.loads((work / "plain.json").read_text(encoding="utf-8"))
    assert {c["target"] for c in plain["cases"]} == ({"te-grouped-mlp"} if te else {"reference"})
    assert all(c["status"] == "ok" for c in plain["cases"])
    if te and te_imports and not torch.cuda.is_available():
        assert {c["emulation"]["machine"]["host"] for c in plain["cases"] if c.get("execution") == "emulated"} == {
            "no GPU (fake CUDA)"
        }
    elif te and not torch.cuda.is_available():
        assert all(c["path"].get("estimated") for c in plain["cases"])
    sh(exe, "run", "--scenario", "reference", "--quiet", "--json", "reference.json")
    assert " 0 fail" in sh(exe, "check", "reference.json", "--scenario", "reference")
    sh(exe, "compare", "plain.json", "plain.json", "--benchmark-json", "bench.json")
    bench = json.loads((work / "bench.json").read_text(encoding="utf-8"))
    assert [b["value"] for b in bench] == [c["totals"]["saved_bytes"] for c in plain["cases"]]
    (work / "snippet.py").write_text(_readme_snippet(), encoding="utf-8")
    assert int(sh(py, "snippet.py").split()[-1]) > 0
    print(f"fresh-venv wheel test: {time.perf_counter() - start:.1f} s")


# ---- the docs' commands, against the installed wheel ---------------------------------------------------
DOCS = ("README.md", "docs/guides/ci.md", "docs/guides/distributed.md")
SHELLS = ("bash", "sh", "shell", "console")
NOT_RUN = {
    "bash .ci/setup && .venv/bin/memaudit run": "a clone's setup: .ci/setup builds .venv from the package index",
    "bash .ci/setup && .venv/bin/python -m pytest -q": "a clone's setup and test suite",
    "pip install torch-memaudit==0.1.0": "the package index; the wheel under test is installed instead",
    "memaudit run --scenario grouped_mlp --json current.json": "TE on real kernels: the GPU runner (with no GPU every "
    "cell is skipped)",
    "memaudit baseline update current.json --into reports/baseline/h200-te-grouped-mlp.json": "the H200 baseline, "
    "from the GPU run's report",
    "git add reports/baseline/h200-te-grouped-mlp.json": "the user's own repository",
    'git commit -m "memaudit: accept +X MiB saved for ... (reason)" reports/baseline/h200-te-grouped-mlp.json': (
        "the user's own repository"
    ),
    "torchrun --nproc-per-node 8 -m memaudit run --scenario my_moe.toml --device cuda --json current.json --markdown "
    "comment.md": "8 CUDA GPUs and the user's own my_moe.toml",
    "memaudit run --nproc 8 --scenario my_moe.toml --device cuda --json current.json --markdown comment.md": (
        "8 CUDA GPUs and the user's own my_moe.toml"
    ),
    "memaudit compare reports/baseline/h200x8-ep.json current.json --markdown comment.md": "the 8-GPU run's report "
    "and the user's own 8-rank baseline",
    **dict.fromkeys(
        (
            "PYTHONPATH=. memaudit run --target model:build --json before.json --quiet",
            "memaudit baseline update before.json --into test-baseline.json",
            "GROW=1 PYTHONPATH=. memaudit run --target model:build --json after.json --quiet",
            "memaudit compare test-baseline.json after.json --markdown comment.md",
        ),
        "the test variant of a baseline needs the doc's model.py: tests/cli/test_first_impressions.py runs it with it",
    ),
}
"""Commands of the docs' shell blocks that this test does not run, with why (each must still be in a doc)."""
STATED = {
    "COLUMNS=120 memaudit run --recipe nvfp4 --quiet -v": (
        (4,),
        "A run in which\nnothing was measured or emulated exits 4",
    ),
}
"""Exit codes a doc states in its prose for a command (besides 0), with the sentence that states them."""
_EXIT_COMMENT = re.compile(r"#.*?\bexit (\d+)")


@dataclass(frozen=True)
class DocBlock:
    doc: str
    line: int
    commands: tuple[str, ...]

    def runs_memaudit(self) -> bool:
        return any(invokes_memaudit(c) for c in self.commands)


def bare(command: str) -> str:
    """``command`` without its trailing comment (a ``#`` after a space, outside quotes)."""
    quote = None
    for i, ch in enumerate(command):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i].rstrip()
    return command.rstrip()


def invokes_memaudit(command: str) -> bool:
    """A command that runs memaudit: the program (``memaudit``, ``.venv/bin/memaudit``), ``-m memaudit``
    (torchrun, python) or memaudit's gate script."""
    return re.search(r"(?:^|[\s;&|(/])memaudit(?:\s|$)|-m memaudit\b|gate\.sh", bare(command)) is not None


def doc_blocks() -> list[DocBlock]:
    """Every bash/sh/console block of the docs, as its commands (a console block's ``$`` lines;
    continuation lines joined; comment lines and blank lines left out)."""
    out = []
    for doc in DOCS:
        for t in MarkdownIt().parse((ROOT / doc).read_text(encoding="utf-8")):
            lang = t.info.strip().split()[0] if t.info.strip() else ""
            if t.type != "fence" or lang not in SHELLS:
                continue
            lines = t.content.replace("\\\n", " ").splitlines()
            if lang == "console":
                lines = [line[2:] for line in lines if line.startswith("$ ")]
            cmds = tuple(line for line in lines if line.strip() and not line.lstrip().startswith("#"))
            out.append(DocBlock(doc, t.map[0] + 1 if t.map else 0, cmds))
    return out


def test_the_docs_shell_blocks_are_found_and_every_exception_is_still_in_them() -> None:
    blocks = [b for b in doc_blocks() if b.runs_memaudit()]
    commands = [bare(c) for b in blocks for c in b.commands]
    assert {b.doc for b in blocks} == set(DOCS) and len(commands) >= 20, commands
    assert not set(NOT_RUN) - set(commands), sorted(set(NOT_RUN) - set(commands))
    assert not set(STATED) - set(commands), sorted(set(STATED) - set(commands))
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for _codes, sentence in STATED.values():
        assert " ".join(sentence.split()) in text
    runnable = [c for c in commands if invokes_memaudit(c) and c not in NOT_RUN]
    assert len(runnable) >= 10, runnable


@pytest.mark.wheel
def test_the_docs_commands_run_against_the_wheel(fresh_venv: Venv, tmp_path: Path) -> None:
    """Each README.md, docs/guides/ci.md and docs/guides/distributed.md shell block that runs memaudit
    runs as a bash script, in document order in one folder outside the repo (a user's project: its reports/baseline/
    holds the committed
    baselines the docs compare against), with the fresh venv's memaudit first on PATH. Every memaudit
    invocation (also those of gate.sh) and every block exits 0 or a code its doc states."""
    start = time.perf_counter()
    work = tmp_path / "project"
    shutil.copytree(ROOT / "reports" / "baseline", work / "reports" / "baseline")
    shim, log = tmp_path / "shim", tmp_path / "memaudit.log"
    shim.mkdir()
    (shim / "memaudit").write_text(
        f'#!/bin/sh\n"{fresh_venv.memaudit}" "$@"\nrc=$?\nprintf \'%s\\t%s\\n\' "$rc" "$*" >> "{log}"\nexit $rc\n',
        encoding="utf-8",
    )
    (shim / "memaudit").chmod(0o755)
    env = dict(fresh_venv.env, PATH=f"{shim}:{fresh_venv.root / 'bin'}:{os.environ.get('PATH', '')}")
    ran = []
    for block in (b for b in doc_blocks() if b.runs_memaudit()):
        todo = [c for c in block.commands if bare(c) not in NOT_RUN]
        if not any(invokes_memaudit(c) for c in todo):
            continue
        script = "\n".join(
            c if bare(c) not in NOT_RUN else ": " + shlex.quote(f"not run: {NOT_RUN[bare(c)]}") for c in block.commands
        )
        allowed = {
            0,
            *(int(n) for c in todo for n in _EXIT_COMMENT.findall(c)),
            *(n for c in todo for n in STATED.get(bare(c), ((), ""))[0]),
        }
        log.write_text("", encoding="utf-8")
        t0 = time.perf_counter()
        done = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        where = f"{block.doc}:{block.line} ({time.perf_counter() - t0:.1f} s)"
        output = f"{where}\n{script}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        assert done.returncode in allowed, f"exit {done.returncode}, allowed {sorted(allowed)}: {output}"
        calls = [line.split("\t", 1) for line in log.read_text(encoding="utf-8").splitlines()]
        direct = [p for c in todo for p in re.split(r"[;&|]+", bare(c)) if re.match(r"\s*(?:\w+=\S*\s+)*memaudit\s", p)]
        assert len(calls) >= len(direct), f"{calls} for {direct}: {output}"
        assert all(int(rc) in allowed for rc, _ in calls), f"{calls}, allowed {sorted(allowed)}: {output}"
        assert "Traceback" not in done.stderr, output
        ran.append(f"{where}: {len(calls)} memaudit call(s), exit {done.returncode}")
    assert len(ran) >= 6, ran
    print("\n".join(ran))
    print(f"docs' commands against the wheel: {time.perf_counter() - start:.1f} s")

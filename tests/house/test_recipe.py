"""The no-GPU CI recipe (docs/guides/ci/no-gpu.yml) as a new user would follow it.

Always: docs/guides/ci.md shows that very file (byte for byte, so the two cannot drift), its ``run:``
steps take every GitHub expression through ``env:`` (so they run as plain shell), and each step's
``if:`` is one this test knows how to decide.

Opt-in (``MEMAUDIT_RECIPE_TEST=1``, marker ``recipe``; it downloads torch and TE and compiles TE's
torch extension, 15 to 30 minutes on 2 cores): the workflow's ``run:`` steps, in order, as written,
in a fresh workspace and a fresh venv, through ``bash --noprofile --norc -eo pipefail`` (GitHub's
``shell: bash``). What stands in for GitHub:

- ``actions/checkout``: the workspace holds only the baseline the gate compares against
  (``reports/baseline/cpu-te-emulated.json``, copied from this checkout);
- ``actions/setup-python``: ``python`` and ``python3`` on ``PATH`` are this interpreter's base
  Python (3.11);
- ``actions/cache``: always a miss (``steps.te-cache.outputs.cache-hit`` is ``'false'``), so the
  build step runs; ``actions/upload-artifact`` is not run;
- ``$GITHUB_PATH`` and ``$GITHUB_ENV`` are files read back between steps, as the runner does;
  ``$GITHUB_OUTPUT`` and ``$GITHUB_STEP_SUMMARY`` are files; ``${{ github.token }}`` is empty;
- ``MEMAUDIT_PACKAGE`` is this checkout (the recipe's pin names the published release) and
  ``MEMAUDIT_COMMENT`` is ``false`` (there is no pull request to comment on).

The environment is cleared to ``HOME``, ``LANG``, ``TMPDIR`` and pip's certificate and timeout:
no ``CUDA_HOME`` or ``CUDA_PATH``, ``PATH`` without ``/usr/local`` (where a CUDA toolkit's ``nvcc``
may live), no pip configuration file, find-links or extra index (``PIP_CONFIG_FILE`` is the null
device): pip sees the package index only, never a local wheel folder. pip's own cache stays (set
``MEMAUDIT_RECIPE_NO_PIP_CACHE=1`` for a run that downloads everything). The log, with each step's
time, goes to ``MEMAUDIT_RECIPE_LOG`` (default: the test's temporary folder).

The gate must reach its verdict: ``run`` measured (not exit 4, nothing measured) and the gate's
verdict is ``pass`` (exit 0) against the committed baseline.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "guides" / "ci" / "no-gpu.yml"
DOCS = ROOT / "docs" / "guides" / "ci.md"
BASELINE = "reports/baseline/cpu-te-emulated.json"

EXPRESSIONS = {"github.token": ""}
"""``${{ ... }}`` in an ``env:`` value -> what it is here."""
CONDITIONS = {"steps.te-cache.outputs.cache-hit != 'true'": True}
"""A ``run:`` step's ``if:`` -> whether it runs here (the cache always misses)."""


@dataclass(frozen=True)
class Step:
    name: str
    script: str
    env: dict[str, str]
    runs: bool


def load() -> dict:
    return yaml.safe_load(RECIPE.read_text(encoding="utf-8"))


def _env(block: dict | None) -> dict[str, str]:
    out = {}
    for key, value in (block or {}).items():
        text = str(value)
        for expr in re.findall(r"\$\{\{\s*(.*?)\s*\}\}", text):
            if expr not in EXPRESSIONS:
                raise AssertionError(f"{RECIPE.name}: env {key} uses ${{{{ {expr} }}}}, which this test does not know")
            text = re.sub(r"\$\{\{\s*" + re.escape(expr) + r"\s*\}\}", EXPRESSIONS[expr], text)
        out[str(key)] = text
    return out


def run_steps(workflow: dict) -> list[Step]:
    """The job's ``run:`` steps in order, each with its environment (workflow, job, step)."""
    (job,) = workflow["jobs"].values()
    base = {**_env(workflow.get("env")), **_env(job.get("env"))}
    steps = []
    for i, step in enumerate(job["steps"]):
        if "run" not in step:
            continue
        cond = step.get("if")
        if cond is not None and cond not in CONDITIONS:
            raise AssertionError(
                f"{RECIPE.name}: step {step.get('name', i)} has `if: {cond}`, which this test does not know"
            )
        steps.append(
            Step(
                step.get("name", f"step {i}"),
                step["run"],
                {**base, **_env(step.get("env"))},
                True if cond is None else CONDITIONS[cond],
            )
        )
    return steps


# ---- always ----------------------------------------------------------------------------------------
def test_docs_show_the_recipe_file_itself() -> None:
    text = RECIPE.read_text(encoding="utf-8")
    assert f"```yaml\n{text}```\n" in DOCS.read_text(encoding="utf-8"), (
        "docs/guides/ci.md must show docs/guides/ci/no-gpu.yml byte for byte in a ```yaml block: copy the file into it"
    )


def test_the_run_steps_are_plain_shell() -> None:
    workflow = load()
    (job,) = workflow["jobs"].values()
    for step in job["steps"]:
        if "run" in step:
            assert "${{" not in step["run"], (
                f"step {step.get('name')}: pass GitHub expressions through env:, not into the script"
            )
    steps = run_steps(workflow)  # every env expression and if: known
    names = [s.name for s in steps]
    assert any("Build" in n for n in names) and "memaudit gate" in names
    assert workflow["defaults"]["run"]["shell"] == "bash"


def test_the_cache_key_names_te_torch_and_python() -> None:
    (job,) = load()["jobs"].values()
    (cache,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/cache@")]
    key = cache["with"]["key"]
    for part in ("env.TE_VERSION", "env.TORCH_VERSION", "python-version"):
        assert part in key
    (build,) = [s for s in job["steps"] if s.get("name", "").startswith("Build")]
    assert build["if"] == f"steps.{cache['id']}.outputs.cache-hit != 'true'"
    assert cache["with"]["path"] in build["run"]


# ---- opt-in: the recipe for real --------------------------------------------------------------------
def _machine() -> str:
    gpu = shutil.which("nvidia-smi")
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
        f"GPU: {'nvidia-smi at ' + gpu if gpu else 'none (no nvidia-smi)'}; "
        "CUDA toolkit: "
        f"{'/usr/local/cuda exists (TE may find its nvcc there)' if Path('/usr/local/cuda').exists() else 'none'}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


@pytest.mark.recipe
@pytest.mark.skipif(
    os.environ.get("MEMAUDIT_RECIPE_TEST") != "1",
    reason="the no-GPU recipe for real (downloads torch and TE, compiles TE's torch extension, "
    "15-30 min): set MEMAUDIT_RECIPE_TEST=1 to run it",
)
def test_the_no_gpu_recipe_runs_as_written(tmp_path: Path) -> None:
    log_path = Path(os.environ.get("MEMAUDIT_RECIPE_LOG") or tmp_path / "recipe.log")
    work = tmp_path / "work"
    (work / BASELINE).parent.mkdir(parents=True)
    shutil.copy(ROOT / BASELINE, work / BASELINE)
    pybin = tmp_path / "setup-python"
    pybin.mkdir()
    base_python = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    for name in ("python", "python3"):
        (pybin / name).symlink_to(base_python)
    gh = {
        name: tmp_path / "github" / name
        for name in ("GITHUB_PATH", "GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")
    }
    gh["GITHUB_PATH"].parent.mkdir()
    for f in gh.values():
        f.touch()
    env = {k: os.environ[k] for k in ("HOME", "LANG", "TMPDIR", "PIP_CERT", "PIP_DEFAULT_TIMEOUT") if k in os.environ}
    env |= {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(work),
        "RUNNER_TEMP": str(tmp_path),
        **{k: str(v) for k, v in gh.items()},
    }
    if os.environ.get("MEMAUDIT_RECIPE_NO_PIP_CACHE") == "1":
        env["PIP_NO_CACHE_DIR"] = "1"
    overrides = {"MEMAUDIT_PACKAGE": str(ROOT), "MEMAUDIT_COMMENT": "false"}
    timings: list[tuple[str, float, int | str]] = []
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"# the no-GPU recipe ({RECIPE.relative_to(ROOT)}), its run: steps as written\n")
        log.write(f"# machine: {_machine()}\n# started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
        log.flush()
        for step in run_steps(load()):
            if not step.runs:
                timings.append((step.name, 0.0, "skipped"))
                continue
            added_path = [line for line in gh["GITHUB_PATH"].read_text().splitlines() if line.strip()]
            added_env = dict(line.split("=", 1) for line in gh["GITHUB_ENV"].read_text().splitlines() if "=" in line)
            step_env = {
                **env,
                **step.env,
                **added_env,
                **overrides,
                "PATH": ":".join([*reversed(added_path), str(pybin), "/usr/bin", "/bin"]),
            }
            log.write(f"\n## step: {step.name}\n")
            log.flush()
            start = time.monotonic()
            rc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step.script],
                cwd=work,
                env=step_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            ).returncode
            took = time.monotonic() - start
            timings.append((step.name, took, rc))
            log.write(f"## step: {step.name}: exit {rc} after {took:.0f} s\n")
            log.flush()
            if rc != 0:
                break
        log.write("\n# timings\n" + "".join(f"#   {name}: {t:.0f} s (exit {rc})\n" for name, t, rc in timings))
        log.write(f"# total {sum(t for _, t, _ in timings):.0f} s; finished {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
    text = log_path.read_text(encoding="utf-8")
    failed = [(name, rc) for name, _, rc in timings if rc not in (0, "skipped")]
    assert not failed, f"step {failed[0][0]!r} exited {failed[0][1]}; log {log_path}:\n{text[-6000:]}"
    assert "memaudit gate: run exit 0, compare exit 0: pass" in text, text[-6000:]
    assert (work / "memaudit-out" / "current.json").is_file()

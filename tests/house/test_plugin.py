"""The pytest plugin: ``saved_tensors`` fixture and ``@pytest.mark.saved_budget`` (run through pytester)."""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _entry_point_installed() -> bool:
    return any(
        ep.name == "memaudit" and ep.value == "memaudit.pytest_plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )


# In-process runs: the entry point loads the plugin where memaudit is installed; otherwise name it.
PLUGIN_ARGS: tuple[str, ...] = () if _entry_point_installed() else ("-p", "memaudit.pytest_plugin")

HEADER = """
import pytest
import torch


def linear_step(cap=None):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(16, 64, requires_grad=True)
    if cap is not None:
        cap.label(x, "fc1.input")
    return lin(x)
"""


def run_inner(pytester: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_inner=HEADER + body)
    return pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", *args)


def test_plugin_module_is_light() -> None:
    """Loaded by every pytest run: it must not import torch or TE at import time."""
    import subprocess

    code = (
        "import sys, memaudit; before = 'torch' in sys.modules; import memaudit.pytest_plugin; "
        "print(before, 'torch' in sys.modules, 'transformer_engine' in sys.modules)"
    )
    before, after, te = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert te == "False"
    assert after == before  # whatever the package itself imports, the plugin adds no torch


def test_entry_point_is_declared() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["entry-points"]["pytest11"] == {"memaudit": "memaudit.pytest_plugin"}


def test_budget_that_holds_passes(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
@pytest.mark.saved_budget(max_bytes="1 MiB", count={"fc1.input": 1}, forbid=["Linear:TanhBackward0.*"])
def test_fits(saved_tensors):
    y = linear_step(saved_tensors)
    assert y.shape == (16, 32)
    rows = saved_tensors.report(outputs=y).rows
    assert [r.operand for r in rows].count("fc1.input") == 1
""",
    )
    result.assert_outcomes(passed=1)


def test_failing_budget_fails_with_the_rule_numbers_and_rows(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
@pytest.mark.saved_budget(max_bytes="1 KiB")
def test_too_big(saved_tensors):
    linear_step(saved_tensors)
""",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "saved-tensor budget failed (1 of 1)" in out
    assert "max_bytes: " in out and "expected <= 1.0 KiB (1024 B) (saved)" in out
    assert "#0  fc1.input  fp32  tensor  -  (16, 64)  float32  4.0 KiB" in out
    assert "AssertionError" not in out and "def test_too_big" not in out  # a report, not a bare assert


def test_count_and_forbid(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
@pytest.mark.saved_budget(forbid=["fc1.input"])
def test_forbidden(saved_tensors):
    linear_step(saved_tensors)


@pytest.mark.saved_budget(count={"fc1.input": ">= 2"})
def test_too_few(saved_tensors):
    linear_step(saved_tensors)


@pytest.mark.saved_budget(rules=[
    {"name": "no-bf16", "select": {"format": "bf16"}, "forbid": True},
    {"name": "one-param", "select": {"is_parameter": True}, "per": "operand", "count": "<= 1"},
])
def test_full_rules(saved_tensors):
    linear_step(saved_tensors)
""",
    )
    result.assert_outcomes(failed=2, passed=1)
    out = result.stdout.str()
    assert "forbid fc1.input: forbidden rows were saved (1 row)" in out
    assert "count fc1.input: expected count >= 2; 1" in out


def test_marker_without_the_fixture_still_captures(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
@pytest.mark.saved_budget(max_bytes="16")
def test_no_fixture():
    linear_step()


@pytest.mark.saved_budget(max_bytes="1 MiB")
@pytest.mark.parametrize("n", [1, 2])
def test_parametrized(n):
    linear_step()
""",
    )
    result.assert_outcomes(failed=1, passed=2)
    assert "test_no_fixture" in result.stdout.str() and "saved-tensor budget failed" in result.stdout.str()


def test_bad_marker_arguments_are_an_error_before_the_test(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
@pytest.mark.saved_budget(max_byts="1 KiB")
def test_typo(saved_tensors):
    raise AssertionError("must not run")


@pytest.mark.saved_budget(max_bytes="12 MiBs")
def test_units(saved_tensors):
    raise AssertionError("must not run")


@pytest.mark.saved_budget(count={"fc9.input": 1})
def test_nothing_selected(saved_tensors):
    linear_step(saved_tensors)
""",
    )
    out = result.stdout.str()
    assert "unknown argument 'max_byts' (did you mean 'max_bytes'?)" in out
    assert "saved_budget.max_bytes: malformed byte quantity '12 MiBs'" in out
    assert "must not run" not in out
    assert "count pattern 'fc9.input' matches no saved row and no name memaudit could give" in out
    result.assert_outcomes(errors=2, failed=1)


def test_a_failing_test_body_wins_over_the_budget(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
@pytest.mark.saved_budget(max_bytes="1")
def test_body_fails(saved_tensors):
    linear_step(saved_tensors)
    assert 1 == 2, "the body's own failure"
""",
    )
    result.assert_outcomes(failed=1)
    assert "the body's own failure" in result.stdout.str()
    assert "saved-tensor budget failed" not in result.stdout.str()


def test_capture_ends_at_teardown(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
KEEP = {}


def test_first(saved_tensors):
    linear_step(saved_tensors)
    KEEP["cap"] = saved_tensors
    report = saved_tensors.report(include_freed=True)
    KEEP["rows"] = len(report.rows)
    assert KEEP["rows"] >= 2


def test_second():
    y = linear_step()  # outside any capture: the first test's capture must not see it
    assert len(KEEP["cap"].report(outputs=y, include_freed=True).rows) == KEEP["rows"]
""",
    )
    result.assert_outcomes(passed=2)


def test_known_failure_is_strict_xfail(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
import pytest


@pytest.fixture(autouse=True)
def te_version(monkeypatch):
    import memaudit.te.machine.environment as te_env

    monkeypatch.setattr(te_env, "te_version", lambda **kwargs: "2.20.2")
"""
    )
    rule = '{"name": "tiny", "max_bytes": "%s", "known_failure": {"te": "<2.21", "reason": "known"}}'
    result = run_inner(
        pytester,
        f"""
@pytest.mark.saved_budget(rules=[{rule % "16"}])
def test_known_to_fail(saved_tensors):
    linear_step(saved_tensors)


@pytest.mark.saved_budget(rules=[{rule % "1 MiB"}])
def test_unexpectedly_passes(saved_tensors):
    linear_step(saved_tensors)
""",
        "-rxX",
    )
    result.assert_outcomes(xfailed=1, failed=1)
    out = result.stdout.str()
    assert "known failure on TE 2.20.2 (<2.21): known" in out
    assert "tiny: passed on TE 2.20.2, but known_failure says it fails on TE <2.21" in out


def test_ratio_is_refused_in_a_marker(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
@pytest.mark.saved_budget(rules=[{"name": "r", "ratio": 0.5, "against": {"recipe": "bf16"}}])
def test_ratio(saved_tensors):
    linear_step(saved_tensors)
""",
    )
    result.assert_outcomes(errors=1)
    assert "ratio compares two cases" in result.stdout.str()


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*PLUGIN_ARGS, "--markers")
    result.stdout.fnmatch_lines(["*saved_budget(max_bytes=None*"])


@pytest.mark.skipif(
    not _entry_point_installed(), reason="needs memaudit installed (pip install -e .: the torch-memaudit distribution)"
)
@pytest.mark.parametrize("args", [("-p", "memaudit"), ()], ids=["dash-p", "auto"])
def test_loads_by_entry_point(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    """``pytest -p memaudit`` (plugin autoload off) and plain auto-registration both provide the plugin."""
    if args:
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    else:
        monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makepyfile(
        test_sub=HEADER
        + """
@pytest.mark.saved_budget(max_bytes="16")
def test_sub(saved_tensors):
    linear_step(saved_tensors)
"""
    )
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "saved-tensor budget failed" in result.stdout.str()


def test_a_budget_on_a_test_that_saved_nothing_fails(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
@pytest.mark.saved_budget(max_bytes="1 MiB")
def test_saves_nothing(saved_tensors):
    torch.ones(3) * 2  # no autograd graph: nothing is saved
""",
    )
    assert "saved no tensor for backward" in result.stdout.str()
    result.assert_outcomes(failed=1)


MODEL = """
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))

    def forward(self, x):
        return x + self.mlp(x)


class Net(nn.Module):
    def __init__(self, ckpt=False):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.ckpt = ckpt

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.ckpt else b(x)
        return x


def own_step_bytes(ckpt=False):
    '''Ground truth: the non-parameter storages one forward saves, by a pair of the test's own.'''
    torch.manual_seed(0)
    net, x = Net(ckpt), torch.randn(32, 64)
    seen = {}
    def pack(t):
        if not isinstance(t, nn.Parameter) and not isinstance(t._base, nn.Parameter):
            seen[id(t.untyped_storage())] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        net(x).square().mean()
    return sum(seen.values())


def steps(n, ckpt=False, backward=True):
    torch.manual_seed(0)
    net = Net(ckpt)
    for _ in range(n):
        y = net(torch.randn(32, 64)).square().mean()  # a new batch each step
        if backward:
            y.backward()
"""


@pytest.mark.parametrize("n", [1, 3])
def test_max_bytes_is_the_peak_alive_at_once_and_the_sum_is_its_own_option(pytester: pytest.Pytester, n: int) -> None:
    pytester.makepyfile(model=HEADER + MODEL)
    result = run_inner(
        pytester,
        f"""
from model import own_step_bytes, steps
ONE = own_step_bytes()


@pytest.mark.saved_budget(exact_bytes=ONE)
def test_peak_is_one_step(saved_tensors):
    steps({n})


@pytest.mark.saved_budget(max_bytes=ONE - 1)
def test_peak_over(saved_tensors):
    steps({n})


@pytest.mark.saved_budget(max_total_bytes={n} * ONE)
def test_total_fits(saved_tensors):
    steps({n})


@pytest.mark.saved_budget(max_total_bytes={n} * ONE - 1)
def test_total_over(saved_tensors):
    steps({n})
""",
    )
    out = result.stdout.str()
    # one step's saves are all alive at the end of its forward; steps do not overlap (backward frees)
    result.assert_outcomes(passed=2, failed=2)
    assert "max_total_bytes: " in out and "at the peak" in out


def test_checkpointed_peak_is_what_is_kept_with_or_without_backward(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(model=HEADER + MODEL)
    result = run_inner(
        pytester,
        """
from model import own_step_bytes, steps
KEPT = own_step_bytes(ckpt=True)  # what checkpoint keeps: the blocks' inputs


@pytest.mark.saved_budget(exact_bytes=KEPT)
def test_dropped(saved_tensors):
    steps(1, ckpt=True, backward=False)


@pytest.mark.saved_budget(exact_bytes=KEPT)
def test_backward(saved_tensors):
    steps(1, ckpt=True)
""",
    )
    result.assert_outcomes(passed=2)


def test_forbid_names_rows_as_the_cli_does(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(model=HEADER + MODEL)
    result = run_inner(
        pytester,
        """
from model import steps


@pytest.mark.saved_budget(forbid=["blocks.0.mlp.1:GeluBackward0.self"])  # GELU saves its input there
def test_forbidden_after_backward(saved_tensors):
    steps(1)


@pytest.mark.saved_budget(forbid=["blocks.0.mlp.1:GeluBackward0.self"])
def test_forbidden_graph_dropped(saved_tensors):
    steps(1, backward=False)


@pytest.mark.saved_budget(forbid=["blocks.0.mlp.9:GeluBackward0.self"])  # no such module
def test_unnameable(saved_tensors):
    steps(1)
""",
        "-rN",  # no short summary: on CI (env CI set) pytest prints its messages in full there too
    )
    out = result.stdout.str()
    result.assert_outcomes(failed=3)
    assert out.count("forbid blocks.0.mlp.1:GeluBackward0.self: forbidden rows were saved (1 row)") == 2
    assert (
        "forbid pattern 'blocks.0.mlp.9:GeluBackward0.self' matches no saved row and no name memaudit could give" in out
    )

"""Every row names the module that saved it (``Row.module``), and rows no one else named get an
operand from it (``layers.1.fc2:AddmmBackward0.mat1``); ``stack=True`` adds the source line.

Expected names come from a minimal recorder of the test's own (:class:`ModuleLog`: per-module
forward hooks on the model plus a saved-tensors pair, no memaudit), or from the model's structure
written out here; never from memaudit itself.
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint
from typer.testing import CliRunner

from memaudit.capture import capture, hooks
from memaudit.cli import app
from memaudit.judge.baseline import compare_reports
from memaudit.report import CaseReport, Report, Row, load_report, module_operand

pytest_plugins = ["pytester"]


# ---- models -------------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, width: int = 8, repeat: int = 1) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = Repeated(2 * width, width, repeat)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


class Repeated(nn.Module):
    """A Linear whose input is saved ``repeat`` times over (what a regression in one layer looks like)."""

    def __init__(self, i: int, o: int, repeat: int) -> None:
        super().__init__()
        self.lin = nn.Linear(i, o)
        self.repeat = repeat

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return self.lin(x.repeat(self.repeat, 1)).view(self.repeat, n, -1).sum(0)


class Block(nn.Module):
    def __init__(self, width: int = 8, repeat: int = 1) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mlp = MLP(width, repeat)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, depth: int = 2, width: int = 8, grow: int | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(width, 2 if i == grow else 1) for i in range(depth))
        self.head = nn.Sequential(nn.Linear(width, width), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x) * 2.0


def make(seed: int = 0, **kw: Any) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    return Net(**kw), torch.randn(4, 8, requires_grad=True)


class ModuleLog:
    """Ground truth: per-module forward hooks keep a stack of qualified names (the model's own
    ``named_modules()``, with ``#k`` from a module's k-th call on), and a saved-tensors pair
    records (innermost name, shape) per pack."""

    def __init__(self, model: nn.Module) -> None:
        self.stack: list[str] = []
        self.calls: dict[str, int] = {}
        self.packed: list[tuple[str | None, tuple[int, ...]]] = []
        self.handles = []
        for name, m in model.named_modules():
            qual = name or type(model).__name__
            self.handles.append(m.register_forward_pre_hook(lambda mod, args, q=qual: self.push(q)))
            self.handles.append(m.register_forward_hook(lambda mod, args, out: self.pop()))

    def push(self, name: str) -> None:
        k = self.calls[name] = self.calls.get(name, 0) + 1
        self.stack.append(name if k == 1 else f"{name}#{k}")

    def pop(self) -> None:
        self.stack.pop()

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        self.packed.append((self.stack[-1] if self.stack else None, tuple(t.shape)))
        return t

    def run(self, fn: Any) -> Any:
        try:
            with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t):
                return fn()
        finally:
            for h in self.handles:
                h.remove()


def hook_rows(rows: list[Row]) -> list[tuple[str | None, tuple[int, ...]]]:
    return [(r.module, tuple(r.shape)) for r in rows if r.via == "hook"]


def global_hooks() -> tuple[int, int]:
    from torch.nn.modules import module as m

    return len(m._global_forward_pre_hooks), len(m._global_forward_hooks)


# ---- names --------------------------------------------------------------------------------------
def test_nested_model_rows_are_named_by_qualified_module_name() -> None:
    model, x = make()
    truth = ModuleLog(model)
    truth.run(lambda: model(x))
    model, x = make()
    with capture() as cap:
        y = model(x)
    rows = cap.report(outputs=y).rows
    assert hook_rows(rows) == truth.packed
    names = {r.module for r in rows}
    assert {"layers.0.mlp.fc1", "layers.1.mlp.fc2.lin", "layers.0.norm", "head.0", "Net"} <= names
    fc1 = [r for r in rows if r.module == "layers.1.mlp.fc1"]
    assert sorted(r.operand for r in fc1) == [
        "layers.1.mlp.fc1:AddmmBackward0.mat1",
        "layers.1.mlp.fc1:AddmmBackward0.mat2",
    ]
    # a scalar saved in the root's own forward (found by the walk, not packed) is named by the root
    assert any(r.module == "Net" and r.op == "MulBackward0" for r in rows)


def test_operands_are_the_same_in_two_runs_and_carry_no_address() -> None:
    def once() -> list[tuple[str | None, str | None]]:
        model, x = make()
        with capture() as cap:
            y = model(x)
        return [(r.module, r.operand) for r in cap.report(outputs=y).rows]

    a, b = once(), once()
    assert a == b
    assert not any("0x" in (op or "") for _, op in a)
    assert all(op is not None for _, op in a)


def test_module_called_twice_names_each_call_by_its_index() -> None:
    lin = nn.Linear(8, 8)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = lin

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(torch.tanh(self.lin(x)))

    model, x = Twice(), torch.randn(2, 8, requires_grad=True)
    truth = ModuleLog(model)
    truth.run(lambda: model(x))
    with capture() as cap:
        y = model(x)
    rows = cap.report(outputs=y).rows
    assert hook_rows(rows) == truth.packed
    mat1 = [r.operand for r in rows if r.op == "AddmmBackward0" and r.saved_as == "_saved_mat1"]
    assert mat1 == ["lin:AddmmBackward0.mat1", "lin#2:AddmmBackward0.mat1"]  # one per call, told apart


def test_shared_module_takes_its_first_qualified_name() -> None:
    shared = nn.Linear(8, 8)

    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = shared
            self.second = shared  # the same instance under a second name

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.second(self.first(x))

    model = Shared()
    first = next(n for n, m in model.named_modules() if m is shared)  # what named_modules() yields first
    with capture() as cap:
        y = model(torch.randn(2, 8, requires_grad=True))
    assert first == "first"  # the shared instance is called twice (tied weights): the second call is #2
    assert [r.module for r in cap.report(outputs=y).rows if r.op == "AddmmBackward0"] == ["first"] * 2 + ["first#2"] * 2


def test_recursive_and_reentrant_modules() -> None:
    class Rec(nn.Module):
        def __init__(self, depth: int) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.inner = Rec(depth - 1) if depth else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = torch.tanh(self.lin(x))
            return self.inner(x) if self.inner is not None else x

    model, x = Rec(2), torch.randn(2, 4, requires_grad=True)
    truth = ModuleLog(model)
    truth.run(lambda: model(x))
    with capture() as cap:
        y = model(x)
    rows = cap.report(outputs=y).rows
    assert hook_rows(rows) == truth.packed
    assert {r.module for r in rows} == {"Rec", "lin", "inner", "inner.lin", "inner.inner", "inner.inner.lin"}


def test_module_outside_the_root_gets_its_class_name_and_outside_any_module_none() -> None:
    class Makes(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.Linear(4, 4)(x)  # made and called inside, never registered

    x = torch.randn(2, 4, requires_grad=True)
    with capture() as cap:
        y = Makes()(x)
        z = (y * y).sum()  # outside any module
    rows = cap.report(outputs=z).rows
    assert {r.module for r in rows if r.op == "AddmmBackward0"} == {"Linear"}
    plain = [r for r in rows if r.op == "MulBackward0"]
    assert plain and all(r.module is None for r in plain)
    assert {r.operand for r in plain} == {"MulBackward0.self", "MulBackward0.other"}


def test_exception_inside_forward_leaves_no_frame_and_removes_the_hooks() -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.boom = Boom()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.boom(self.lin(x))

    before = global_hooks()
    x = torch.randn(2, 4, requires_grad=True)
    with capture() as cap:
        with pytest.raises(ValueError, match="boom"):
            Outer()(x)
        assert hooks.state().frames == [] and hooks.state().frame is None
        after = nn.Linear(4, 4)
        y = after(x)  # named from a clean stack: a root of its own
    assert {r.module for r in cap.report(outputs=y).rows} == {"Linear"}
    assert global_hooks() == before
    with pytest.raises(RuntimeError, match="inside"), capture():
        nn.Linear(4, 4)(x)
        raise RuntimeError("inside")
    assert global_hooks() == before
    assert hooks.state().frames == []


def test_modules_false_records_no_module_and_registers_no_hook() -> None:
    model, x = make()
    before = global_hooks()
    with capture(modules=False) as cap:
        assert global_hooks() == before
        y = model(x)
    rows = cap.report(outputs=y).rows
    assert all(r.module is None for r in rows)
    assert "AddmmBackward0.mat1" in {r.operand for r in rows}


def test_threads_keep_their_own_module_stacks() -> None:
    barrier = threading.Barrier(2)
    out: dict[str, set[str | None]] = {}

    class Slow(nn.Module):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.add_module(name, nn.Linear(4, 4))
            self.name = name

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            barrier.wait()  # both threads are inside a module call at once
            return getattr(self, self.name)(x)

    def work(name: str) -> None:
        model, x = Slow(name), torch.randn(2, 4, requires_grad=True)
        with capture() as cap:
            y = model(x)
        out[name] = {r.module for r in cap.report(outputs=y).rows}

    threads = [threading.Thread(target=work, args=(n,)) for n in ("left", "right")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {"left": {"left"}, "right": {"right"}}


def test_a_module_called_from_two_pool_threads_gets_a_call_index_per_call() -> None:
    """As serial calls do (``Twice``, ``Twice#2``): two pool threads each call it once, at once."""
    barrier = threading.Barrier(2)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            barrier.wait()  # both threads are inside the call at once
            return self.lin(x).tanh()

    model, x = Twice(), torch.randn(32, 64)
    packed: list[int] = []  # what one call saves, under a pair of the test's own (the parameter left out)

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() != model.lin.weight.untyped_storage().data_ptr():
            packed.append(t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        keep = model.lin(x).tanh()
    assert keep.grad_fn is not None and sum(packed) > 0
    with capture() as cap, concurrent.futures.ThreadPoolExecutor(2) as pool:
        ys = [f.result() for f in [pool.submit(model, x), pool.submit(model, x)]]
    case = cap.report(outputs=ys)
    assert sorted({r.module for r in case.rows}) == ["Twice", "Twice#2", "lin", "lin#2"]
    groups = {g.module: g.saved_bytes for g in case.modules}
    assert groups["Twice"] == groups["Twice#2"] == sum(packed)


def test_thread_started_inside_capture_names_its_modules() -> None:
    model, x = make()
    result: list[torch.Tensor] = []
    with capture() as cap:
        t = threading.Thread(target=lambda: result.append(model(x)))
        t.start()
        t.join()
    rows = cap.report(outputs=result[0]).rows
    assert "layers.1.mlp.fc1" in {r.module for r in rows}


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_module_rows_are_named(reentrant: bool) -> None:
    class Ck(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = MLP(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(self.body, x, use_reentrant=reentrant)

    model, x = Ck(), torch.randn(4, 8, requires_grad=True)
    with capture() as cap:
        y = model(x)
    rows = cap.report(outputs=y).rows
    names = {r.module for r in rows}
    if reentrant:  # the region ran without grad; its inputs are saved by the module that called checkpoint
        assert names == {"Ck"}
    else:
        assert {"body.fc1", "body.fc2.lin"} <= names
        assert {r.module for r in rows if r.op == "checkpoint"} == {"Ck"}
    y.sum().backward()  # the recompute runs the modules again; the stack stays clean
    assert hooks.state().frames == []


def test_ctx_rows_are_named_by_the_module_whose_forward_made_the_node() -> None:
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
            ctx.kept = t * 3  # no hook sees it
            return t * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * 2

    class UsesFn(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Fn.apply(x)

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = UsesFn()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.inner(x))

    with capture() as cap:
        y = Outer()(torch.randn(3, requires_grad=True))
    ctx = [r for r in cap.report(outputs=y).rows if r.via == "ctx"]
    assert [(r.module, r.operand) for r in ctx] == [("inner", "inner:FnBackward.ctx.kept")]


def test_released_rows_are_named_by_module_and_position() -> None:
    model, x = make(depth=1)
    with capture() as cap:
        model(x)  # the graph is dropped at once: report() cannot walk it
    case = cap.report(include_freed=True)
    fc1 = [r.operand for r in case.rows if r.module == "layers.0.mlp.fc1"]
    assert fc1 == ["layers.0.mlp.fc1:saved[0]", "layers.0.mlp.fc1:saved[1]"]


def test_module_operand_forms() -> None:
    assert module_operand("a.b", "AddmmBackward0", "_saved_mat1", "_saved_mat1") == "a.b:AddmmBackward0.mat1"
    assert module_operand(None, "MulBackward0", "_saved_self", None) == "MulBackward0.self"
    assert module_operand("m", "FnBackward", "saved_tensors[0]", "_data") == "m:FnBackward.saved_tensors[0]._data"
    assert module_operand("m", None, None, None, 3) == "m:saved[3]"
    assert module_operand(None, None, None, None, 3) is None


# ---- source lines -------------------------------------------------------------------------------
def test_stack_names_the_user_line_that_saved() -> None:
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    with capture(stack=True) as cap:
        line = sys._getframe().f_lineno + 1
        y = torch.tanh(lin(x))
    rows = cap.report(outputs=y).rows
    here = f"tests/capture/{Path(__file__).name}:{line}"
    assert rows and {r.source for r in rows} == {here}
    with capture() as plain:
        y = torch.tanh(lin(x))
    assert {r.source for r in plain.report(outputs=y).rows} == {None}


def test_stack_names_the_innermost_user_frame_inside_a_model() -> None:
    import inspect

    model, x = make(depth=1)
    with capture(stack=True) as cap:
        y = model(x)
    rows = cap.report(outputs=y).rows
    src, start = inspect.getsourcelines(MLP.forward)
    mlp_line = start + next(i for i, s in enumerate(src) if "self.fc2(torch.tanh(self.fc1(x)))" in s)
    fc1 = {r.source for r in rows if r.module == "layers.0.mlp.fc1"}
    assert fc1 == {f"tests/capture/{Path(__file__).name}:{mlp_line}"}  # MLP.forward, not torch's Linear.forward


# ---- late labels --------------------------------------------------------------------------------
def test_label_after_report_names_the_returned_rows() -> None:
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    with capture() as cap:
        y = torch.tanh(lin(x))
    case = cap.report(outputs=y)
    before = {r.index: r.operand for r in case.rows}
    assert before[0] == "Linear:AddmmBackward0.mat1"
    cap.label(x, "input", group=2)
    after = {r.index: (r.operand, r.group) for r in case.rows}
    assert after[0] == ("input", 2)
    assert {i: op for i, (op, _) in after.items() if i != 0} == {i: op for i, op in before.items() if i != 0}
    assert cap.report(outputs=y).rows[0].operand == "input"  # and the next report has it too
    cap.label(torch.randn(3), "unrelated")  # names nothing
    assert case.rows[0].operand == "input"


def test_label_after_report_does_not_rename_what_a_label_named() -> None:
    x = torch.randn(2, 4, requires_grad=True)
    with capture() as cap:
        cap.label(x, "first")
        y = torch.tanh(nn.Linear(4, 4)(x))
    case = cap.report(outputs=y)
    cap.label(x, "second")
    assert case.rows[0].operand == "first"


# ---- reports, compare, plugin -------------------------------------------------------------------
def _case(grow: int | None) -> CaseReport:
    model, x = make(depth=2, grow=grow)
    with capture() as cap:
        y = model(x)
    case = cap.report(outputs=y, case_id="net")
    return case


def test_compare_names_the_one_layer_that_grew() -> None:
    base = Report(cases=[_case(None)])
    cur = Report(cases=[_case(1)])
    cmp = compare_reports(base, cur)
    failing = [f for f in cmp.failures if f.metric == "operand"]
    assert [f.key for f in failing] == ["layers.1.mlp.fc2.lin:AddmmBackward0.mat1"]
    assert "operand layers.1.mlp.fc2.lin:AddmmBackward0.mat1 grew by 256 B" in failing[0].text


def test_module_and_source_round_trip_and_are_left_out_when_unset(tmp_path: Path) -> None:
    case = _case(None)
    report = Report(cases=[case])
    d = json.loads(report.to_json())
    assert all("module" in r for r in d["cases"][0]["rows"])
    assert not any("source" in r for r in d["cases"][0]["rows"])  # None: not written (old reports stay byte-identical)
    path = tmp_path / "r.json"
    path.write_text(report.to_json(), encoding="utf-8")
    assert load_report(path).to_json() == report.to_json()


def test_committed_h200_baseline_compares_with_a_report_that_names_modules(tmp_path: Path) -> None:
    """A baseline written before ``module`` existed still gates a report that has it: module is
    no compare key, and the TE rows keep their target names."""
    root = Path(__file__).resolve().parents[2]
    base = load_report(root / "reports" / "baseline" / "h200-te-grouped-mlp.json")
    assert all(r.module is None for c in base.cases for r in c.rows)
    cur = load_report(root / "reports" / "baseline" / "h200-te-grouped-mlp.json")
    import dataclasses

    for c in cur.cases:
        c.rows = [dataclasses.replace(r, module="Sequential") for r in c.rows]
    cmp = compare_reports(base, cur)
    assert not cmp.regressed and not cmp.findings


def test_compare_cli_names_the_layer(tmp_path: Path) -> None:
    from memaudit.report import write_report

    write_report(Report(cases=[_case(None)]), tmp_path / "base.json")
    write_report(Report(cases=[_case(1)]), tmp_path / "cur.json")
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json")])
    assert result.exit_code == 1
    assert "layers.1.mlp.fc2.lin:AddmmBackward0.mat1 grew" in " ".join(result.output.split())


def _plugin_args() -> tuple[str, ...]:
    """As tests/house/test_plugin.py: the entry point loads the plugin where memaudit is installed."""
    import importlib.metadata

    installed = any(
        ep.name == "memaudit" and ep.value == "memaudit.pytest_plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )
    return () if installed else ("-p", "memaudit.pytest_plugin")


def test_plugin_failure_names_modules_and_lines(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_inner="""
import pytest
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


@pytest.mark.saved_budget(max_bytes="1 KiB", stack=True)
def test_too_big(saved_tensors):
    Net()(torch.randn(16, 64, requires_grad=True))


@pytest.mark.saved_budget(count={"layers.1:*": 2})
def test_count_by_module(saved_tensors):
    Net()(torch.randn(16, 64, requires_grad=True))
"""
    )
    result = pytester.runpytest(*_plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    # released by the time the budget is judged, yet named as the CLI names them (named when the root returned)
    assert "layers.0:AddmmBackward0.mat1" in out and "layers.1:AddmmBackward0.mat1" in out
    assert "Net:TanhBackward0.result" in out
    lines = (pytester.path / "test_inner.py").read_text().splitlines()
    line = 1 + next(i for i, t in enumerate(lines) if "x = torch.tanh(layer(x))" in t)
    assert f"at test_inner.py:{line}" in out  # the line in Net.forward whose call saved it
    assert "?" not in "".join(line for line in out.splitlines() if line.strip().startswith("#"))


# ---- custom target ids --------------------------------------------------------------------------
def test_custom_target_ids_say_what_ran(tests_on_path: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "c.json"
    r = runner.invoke(
        app,
        [
            "run",
            "--target",
            "custom_factory:make",
            "--tokens",
            "32",
            "--hidden",
            "8",
            "--ffn",
            "16",
            "--quiet",
            "--json",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    (case,) = load_report(out).cases
    assert case.id == "custom_factory:make/g1/t32-h8-f16/fp32" and case.dtype == "fp32"
    assert {row.module for row in case.rows} == {"TinyMLP", "up", "down"}
    assert "down:MmBackward0.self" in {row.operand for row in case.rows}

    r = runner.invoke(app, ["run", "--target", "custom_factory:make_no_args", "--quiet", "--json", str(out)])
    assert r.exit_code == 0, r.output
    (case,) = load_report(out).cases
    assert case.id == "custom_factory:make_no_args/fp32"  # no shape: the factory is told none
    assert case.dims == {} and "tokens" not in json.loads(out.read_text())["cases"][0]


def test_custom_target_refuses_what_it_would_misname(tests_on_path: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["run", "--target", "custom_factory:make_no_args", "--tokens", "64"])
    assert r.exit_code == 2 and "no dimension 'tokens'" in r.output
    r = runner.invoke(app, ["run", "--target", "custom_factory:make_no_args", "--groups", "1,4"])
    assert r.exit_code == 2 and "more than once" in r.output
    out = tmp_path / "c.json"
    r = runner.invoke(
        app,
        [
            "run",
            "--target",
            "custom_factory:make",
            "--tokens",
            "32",
            "--hidden",
            "8",
            "--ffn",
            "16",
            "--dtype",
            "bf16",
            "--quiet",
            "--json",
            str(out),
        ],
    )
    assert r.exit_code == 3
    (case,) = load_report(out).cases
    assert case.status == "error" and "built fp32 tensors, but the case (and its id) says bf16" in case.reason
    assert "--dtype fp32" in case.reason


def test_qualified_names_are_those_named_modules_gives() -> None:
    """The tree walk behind Row.module gives named_modules()'s names, in its order (the first name
    of a shared module), and a module that overrides named_modules is asked instead."""
    from memaudit.capture import modules as mod

    shared = nn.Linear(2, 2)

    class Tree(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Sequential(nn.Linear(2, 2), shared, nn.ReLU())
            self.b = shared
            self.c = nn.ModuleList([nn.Linear(1, 1), nn.Sequential(shared)])
            self.d = None

    class Renaming(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.x = nn.Linear(1, 1)

        def named_modules(self, *args: Any, **kwargs: Any) -> Any:
            for name, m in super().named_modules(*args, **kwargs):
                yield ("renamed." + name if name else name), m

    roots = [
        Tree(),
        nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), 2, enable_nested_tensor=False),
        nn.Sequential(Renaming()),
    ]
    for root in roots:
        expect: dict[int, str] = {}
        for name, m in root.named_modules():
            expect.setdefault(id(m), name or type(root).__name__)
        got = {k: v[1] for k, v in mod.qualified_names(root).items()}
        assert list(got.items()) == list(expect.items())
    assert "renamed.0.x" in {v[1] for v in mod.qualified_names(roots[2]).values()}


def test_module_calls_are_tracked_around_torchs_own_call_and_its_hooks() -> None:
    """memaudit runs around torch's ``Module.__call__`` without replacing it and without a global
    hook: the class is untouched, torch's hooks run as bare (a global pre-hook that replaces the
    arguments, a forward hook that replaces the output), and a save made inside a module's own
    hooks is named by that module's call (the call encloses its hooks)."""
    import torch.nn.modules.module as mm

    from memaudit.capture import modules as mod

    call = torch.nn.Module.__dict__["__call__"]
    code = call.__code__
    hook_dicts = [len(d) for d in (mm._global_forward_pre_hooks, mm._global_forward_hooks)]

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    def run(inside: Any = None) -> tuple[torch.Tensor, torch.Tensor, list[Any]]:
        torch.manual_seed(0)
        model = Scaled()
        model.lin.register_forward_hook(lambda m, a, out: out.exp())  # exp saves its result, in lin's hooks
        handle = mm.register_module_forward_pre_hook(lambda m, a: (a[0] * 2,) if isinstance(m, nn.Linear) else None)
        try:
            x = torch.randn(2, 3, requires_grad=True)
            y = model(x)
            rows = inside.report(outputs=y).rows if inside is not None else []
            y.sum().backward()
            assert x.grad is not None
            return y.detach(), x.grad, rows
        finally:
            handle.remove()

    bare = run()
    with capture() as cap:
        assert torch.nn.Module.__dict__["__call__"] is call and call.__code__ is not code
        assert [len(d) for d in (mm._global_forward_pre_hooks, mm._global_forward_hooks)] == hook_dicts
        under = run(cap)
    assert call.__code__ is code and torch.nn.Module.__dict__["__call__"] is call
    assert torch.equal(bare[0], under[0]) and torch.equal(bare[1], under[1])
    rows = under[2]
    assert {r.module for r in rows if r.op == "ExpBackward0"} == {"lin"}
    assert {r.module for r in rows if r.op == "AddmmBackward0"} == {"lin"}
    assert mod.tracking() is False


def test_a_module_call_replaced_by_another_library_meanwhile_keeps_its_replacement() -> None:
    """Another library replaces ``Module.__call__`` during a capture, with a function that calls the
    one it found: at exit memaudit leaves the replacement in place (it still calls torch's function,
    whose code is torch's again), and a later capture names modules through it."""
    from memaudit.capture import modules as mod

    torchs = torch.nn.Module.__dict__["__call__"]
    seen: list[str] = []

    def theirs(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        seen.append(type(self).__name__)
        return torchs(self, *args, **kwargs)

    lin = nn.Linear(2, 2)
    try:
        with capture():
            torch.nn.Module.__call__ = theirs  # type: ignore[method-assign]
            lin(torch.randn(1, 2))
        assert torch.nn.Module.__dict__["__call__"] is theirs and torchs.__code__ is mod._TORCH_CODE
        lin(torch.randn(1, 2))
        assert seen == ["Linear", "Linear"]
        with capture() as cap:
            y = lin(torch.randn(1, 2, requires_grad=True))
        case = cap.report(outputs=y)
        assert {r.module for r in case.rows} == {"Linear"} and not case.warnings
        assert seen == ["Linear", "Linear", "Linear"]
    finally:
        torch.nn.Module.__call__ = torchs  # type: ignore[method-assign]


def test_a_module_call_whose_code_memaudit_cannot_replace_says_modules_are_not_named() -> None:
    """Where ``Module.__call__`` no longer runs torch's code (another library swapped it), memaudit
    does not touch it: the capture says module names are off, and rows name no module."""
    from memaudit.capture import modules as mod

    call = torch.nn.Module.__dict__["__call__"]

    def other(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._call_impl(*args, **kwargs)

    lin = nn.Linear(2, 2)
    call.__code__ = other.__code__
    try:
        with capture() as cap:
            y = lin(torch.randn(1, 2, requires_grad=True))
        assert call.__code__ is other.__code__
    finally:
        call.__code__ = mod._TORCH_CODE
    case = cap.report(outputs=y)
    assert mod.UNTRACKED in case.warnings
    assert {r.module for r in case.rows} == {None}


def test_a_module_called_with_a_sparse_tensor_is_named() -> None:
    """A call whose one argument has no storage memaudit can take (a sparse tensor) is still a
    module call: its rows are named by it (its argument's storage is None, as for any such tensor)."""

    class SparseMM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sparse.mm(x, self.w).tanh()

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = SparseMM()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x) * 2

    x = torch.randn(5, 4).relu().to_sparse()
    with capture() as cap:
        y = Outer()(x)
        rows = cap.report(outputs=y).rows
    assert sorted({(r.module, r.op) for r in rows}) == [
        ("Outer", "MulBackward0"),
        ("inner", "SparseAddmmBackward0"),
        ("inner", "TanhBackward0"),
    ]


def test_a_module_call_that_is_no_plain_function_at_import_says_modules_are_not_named() -> None:
    """A torch (or a library imported before memaudit) whose ``Module.__call__`` is no plain function
    (here a ``partialmethod``): memaudit imports, leaves it alone, and each capture says module names
    are off; the bytes are counted."""
    import subprocess

    code = """
import torch
torch.manual_seed(0)
import functools
torch.nn.Module.__call__ = functools.partialmethod(torch.nn.Module.__call__)
from memaudit.capture import capture, modules
lin = torch.nn.Linear(2, 2)
with capture() as cap:
    y = lin(torch.randn(1, 2, requires_grad=True))
case = cap.report(outputs=y)
assert modules.UNTRACKED in case.warnings, case.warnings
assert {r.module for r in case.rows} == {None}
assert case.totals.saved_bytes > 0
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_qualified_names_follow_every_change_of_the_tree_between_captures() -> None:
    """The walk of a root's tree is kept between captures and taken again only while the tree is
    the same: after each change (a child added, deleted, replaced, renamed, reordered; a class
    swapped; a class that starts overriding named_modules) the names are those named_modules()
    gives now, and each call's entries count calls afresh."""
    import gc

    from memaudit.capture import modules as mod

    def expected(root: nn.Module) -> list[tuple[int, str]]:
        out: dict[int, str] = {}
        for name, m in root.named_modules():
            out.setdefault(id(m), name or type(root).__name__)
        return list(out.items())

    def names(root: nn.Module) -> list[tuple[int, str]]:
        got = mod.qualified_names(root)
        assert all(id(v[0]()) == k for k, v in got.items())  # each entry's reference is the live module
        return [(k, v[1]) for k, v in got.items()]

    class Leaf(nn.Module):
        pass

    class Other(nn.Module):
        pass

    inner = nn.Sequential(nn.ReLU(), nn.Tanh())
    root = nn.Sequential(nn.Linear(2, 2), inner, nn.GELU())
    changes = [
        lambda: root.append(nn.Linear(2, 2)),  # added
        lambda: inner.__delitem__(0),  # deleted, deep in the tree
        lambda: root._modules.__setitem__("0", nn.Linear(2, 2)),  # replaced, without Module.__setattr__
        lambda: root._modules.__setitem__("x", root._modules.pop("2")),  # renamed
        lambda: root._modules.__setitem__("0", root._modules.pop("0")),  # reordered: "0" last
        lambda: inner.insert(0, Leaf()),  # inserted in front
        lambda: setattr(inner[0], "__class__", Other),  # a class swapped
        lambda: setattr(Other, "named_modules", lambda self, *a, **k: iter([("", self)])),  # now overridden
        lambda: inner.__delitem__(0),
    ]
    first = mod.qualified_names(root)
    first[id(root[0])][2] = 5  # one capture's count
    assert mod.qualified_names(root)[id(root[0])][2] == 0  # the next starts from 0
    for change in changes:
        assert names(root) == expected(root)  # kept from the walk before the change
        change()
        gc.collect()
        assert names(root) == expected(root), change
    # A module deleted and another made in its place, perhaps at its address: walked again.
    for _ in range(20):
        del root[-1]
        gc.collect()
        root.append(nn.Linear(2, 2))
        assert names(root) == expected(root)


def test_the_kept_tree_holds_no_module_alive() -> None:
    """The walk kept between captures holds weak references only: a root and its modules die as bare."""
    import gc
    import weakref as wr

    from memaudit.capture import modules as mod

    root = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    refs = [wr.ref(m) for m in root.modules()]
    mod.qualified_names(root)
    mod.qualified_names(root)
    del root
    gc.collect()
    assert all(r() is None for r in refs)

"""A module with no registered path under the root (kept in a plain tuple or list attribute, as
Megatron-Core keeps TransformerEngine's fused grouped-MLP ops) is named under the innermost caller
that has a path: ``mlp.<Sequential>``, ``mlp.<Sequential@2>`` for a second one of that class, its own
submodules under it (``mlp.<Sequential>.0``), ``#k`` for its k-th call. Never by its class alone
when such a caller exists.

Expected names are written out here from the models' structure; never taken from memaudit itself.
"""

from __future__ import annotations

import json

import torch
import torch.nn as nn
from rich.console import Console

from memaudit.capture import capture
from memaudit.render.modules import module_table
from memaudit.report import CaseReport, Report, Row, group_bytes, validate_report


class Experts(nn.Module):
    """Keeps its two ops in a tuple (not registered as submodules) and calls both."""

    def __init__(self, width: int = 8, back: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        if back:  # each op ends where it started: Linear, Tanh, Linear
            self.ops = tuple(
                nn.Sequential(nn.Linear(width, 2 * width), nn.Tanh(), nn.Linear(2 * width, width)) for _ in range(2)
            )
        else:
            self.ops = (
                nn.Sequential(nn.Linear(width, 2 * width), nn.Tanh()),
                nn.Sequential(nn.Linear(2 * width, width), nn.Tanh()),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for op in self.ops:
            x = op(x)
        return self.proj(x)


class Layer(nn.Module):
    def __init__(self, back: bool = False) -> None:
        super().__init__()
        self.mlp = nn.Module()
        self.mlp.experts = Experts(back=back)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp.experts(x)


class Net(nn.Module):
    def __init__(self, back: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(back) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x.sum()


class Square(nn.Module):
    """Saves in its own forward (no submodule): what a fused op does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


def rows_of(model: nn.Module, x: torch.Tensor) -> list[Row]:
    with capture() as cap:
        y = model(x)
    return cap.report(outputs=y).rows


def case_of(model: nn.Module, x: torch.Tensor) -> CaseReport:
    with capture() as cap:
        y = model(x)
    return cap.report(outputs=y)


def test_rows_of_ops_kept_in_a_tuple_are_named_under_their_caller() -> None:
    torch.manual_seed(0)
    rows = rows_of(Net(), torch.randn(4, 8, requires_grad=True))
    names = {r.module for r in rows}
    expected = {
        f"layers.{i}.mlp.experts.<Sequential{n}>.{k}" for i in range(2) for n in ("", "@2") for k in range(2)
    } | {f"layers.{i}.mlp.experts.proj" for i in range(2)}
    assert expected <= names
    assert not names & {"Sequential", "Linear", "Tanh"}  # never the class alone: a named caller exists
    first = [r for r in rows if r.module == "layers.0.mlp.experts.<Sequential>.0"]
    assert sorted(r.operand for r in first) == [
        "layers.0.mlp.experts.<Sequential>.0:AddmmBackward0.mat1",
        "layers.0.mlp.experts.<Sequential>.0:AddmmBackward0.mat2",
    ]


def test_an_op_that_saves_in_its_own_forward_is_named_path_dot_class_and_counts_its_calls() -> None:
    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.ops = [Square(), Square()]  # a plain list: not registered

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = self.ops
            return b(a(a(self.lin(x))))

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = Gate()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.gate(x)

    rows = rows_of(Top(), torch.randn(2, 4, requires_grad=True))
    mul = [r.module for r in rows if r.op == "MulBackward0"]
    # each MulBackward0 of x * x saves x twice (self, other): two rows per call
    assert mul == ["gate.<Square>"] * 2 + ["gate.<Square>#2"] * 2 + ["gate.<Square@2>"] * 2


def test_a_module_kept_unregistered_inside_an_unregistered_one_nests_under_it() -> None:
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)  # registered in an unregistered module: named under it
            self.inner = (Square(),)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner[0](self.lin(x))

    class Top(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = nn.Linear(4, 4)
            self.outer = (Outer(),)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.outer[0](self.block(x))

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.top = Top()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.top(x)

    rows = rows_of(Root(), torch.randn(2, 4, requires_grad=True))
    assert {r.module for r in rows} >= {"top.block", "top.<Outer>.lin", "top.<Outer>.<Square>"}


def test_names_are_the_same_in_two_runs() -> None:
    def once() -> list[tuple[str | None, str | None]]:
        torch.manual_seed(0)
        return [(r.module, r.operand) for r in rows_of(Net(), torch.randn(4, 8, requires_grad=True))]

    assert once() == once()


def test_a_module_the_root_calls_itself_keeps_its_class_name() -> None:
    """The root's own path is empty: what it calls unregistered is named by class, as before."""

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ops = (nn.Sequential(nn.Linear(4, 4), nn.Tanh()),)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.ops[0](x)

    rows = rows_of(Root(), torch.randn(2, 4, requires_grad=True))
    assert {r.module for r in rows} == {"Linear", "Tanh"}


def test_module_groups_tell_the_unregistered_ops_apart_and_what_a_checkpoint_frees() -> None:
    torch.manual_seed(0)
    case = case_of(Net(back=True), torch.randn(4, 8, requires_grad=True))
    groups = {g.module: g for g in case.modules}
    assert len(groups) == len(case.modules)  # one group per call: names are unique
    for n in ("", "@2"):
        name = f"layers.0.mlp.experts.<Sequential{n}>"
        op = groups[name]
        assert {case.rows[i].module for i in op.rows} == {f"{name}.0", f"{name}.1", f"{name}.2"}
        assert op.own_rows == 0  # the Sequential saves nothing itself: its Linears and Tanh do
        # its argument (kept by a checkpoint) and its weights stay; the Tanh's output (4 x 16 float32,
        # saved by the Tanh and by the Linear after it) is what a checkpoint of it frees
        assert op.frees_bytes == 4 * 16 * 4 == group_bytes(case.rows, op.frees)
        assert {case.rows[i].module for i in op.frees} == {f"{name}.1", f"{name}.2"}
        assert set(op.rows) <= set(groups["layers.0.mlp.experts"].rows)
    back = validate_report(json.loads(Report(environment={}, cases=[case]).to_json()))  # groups agree with rows
    assert back.cases[0].modules == case.modules
    console = Console(width=200, record=True)
    console.print(module_table(case, limit=100))
    assert "layers.0.mlp.experts.<Sequential@2>" in console.export_text()

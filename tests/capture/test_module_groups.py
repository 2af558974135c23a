"""What should I checkpoint? Rows grouped by module call (``CaseReport.modules``, the JSON's
``modules``, the CLI's table), a call index for modules called twice, and what a checkpoint of each
call frees.

Ground truth: the model run bare and with the module really checkpointed, each under a saved-tensors
pair of the test's own that sums the non-parameter storages it sees; never memaudit itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from memaudit.capture import capture
from memaudit.errors import UsageError
from memaudit.report import CaseReport, Report, validate_report


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(x)


class Net(nn.Module):
    """Two blocks, then one shared block called twice (weights tied across depth)."""

    def __init__(self, ckpt: str | None = None) -> None:
        super().__init__()
        self.emb = nn.Linear(16, 64)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.shared = Block()
        self.ckpt = ckpt

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        for i, b in enumerate(self.blocks):
            h = checkpoint(b, h, use_reentrant=False) if self.ckpt == f"blocks.{i}" else b(h)
        for _ in range(2):
            h = self.shared(h)
        return h.tanh()


def own_saved_bytes(ckpt: str | None = None) -> int:
    """The non-parameter storages a forward keeps for backward, by a pair of the test's own (under
    checkpoint, only what reaches it: checkpoint's own pair hides the region)."""
    torch.manual_seed(0)
    net, x = Net(ckpt), torch.randn(32, 16)
    params = {p.untyped_storage().data_ptr() for p in net.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = net(x)
    del y
    return sum(seen.values())


def groups() -> tuple[CaseReport, Any]:
    torch.manual_seed(0)
    net, x = Net(), torch.randn(32, 16)
    with capture() as cap:
        y = net(x)
    return cap.report(outputs=y), y


def test_groups_are_sorted_by_saved_bytes_and_sum_as_the_rows_say() -> None:
    case, _ = groups()
    sizes = [g.saved_bytes for g in case.modules]
    assert sizes == sorted(sizes, reverse=True)
    root = case.modules[0]
    assert root.module == "Net" and root.saved_bytes == case.totals.saved_bytes == own_saved_bytes()
    by = {g.module: g for g in case.modules}
    # blocks.0 keeps its input (8 KiB), GELU's input and the second Linear's input (32 KiB each)
    assert by["blocks.0"].saved_bytes == 32 * 64 * 4 + 2 * 32 * 256 * 4
    assert {r.module for r in case.rows if r.index in by["blocks.0"].rows} == {
        "blocks.0.mlp.0",
        "blocks.0.mlp.1",
        "blocks.0.mlp.2",
    }


def test_a_module_called_twice_gets_a_call_index() -> None:
    case, _ = groups()
    names = {g.module for g in case.modules}
    assert {"shared", "shared#2", "shared.mlp.1", "shared.mlp.1#2"} <= names
    first, second = (next(g for g in case.modules if g.module == n) for n in ("shared", "shared#2"))
    assert not set(first.rows) & set(second.rows)
    gelu = [r.operand for r in case.rows if r.op == "GeluBackward0" and r.module.startswith("shared")]
    assert gelu == ["shared.mlp.1:GeluBackward0.self", "shared.mlp.1#2:GeluBackward0.self"]


@pytest.mark.parametrize("block", ["blocks.0", "blocks.1"])
def test_what_a_checkpoint_frees_is_what_checkpointing_it_really_frees(block: str) -> None:
    case, _ = groups()
    group = next(g for g in case.modules if g.module == block)
    freed = own_saved_bytes() - own_saved_bytes(ckpt=block)
    assert group.frees_bytes == freed > 0
    assert set(group.frees) <= set(group.rows)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 128), nn.Linear(128, 64)

    def forward(self, h: torch.Tensor | None = None, pair: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
        h = pair[0] if pair is not None else h
        return self.b(torch.tanh(self.a(h)))


class CallsBy(nn.Module):
    """Calls its block with the tensor by keyword (``blk(h=h)``) or inside a tuple (``blk(None, (h,))``)."""

    def __init__(self, how: str, ckpt: bool = False) -> None:
        super().__init__()
        self.emb, self.blk, self.how, self.ckpt = nn.Linear(16, 64), Inner(), how, ckpt

    def call(self, h: torch.Tensor) -> torch.Tensor:
        return self.blk(h=h) if self.how == "keyword" else self.blk(None, (h,))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        return checkpoint(self.call, h, use_reentrant=False) if self.ckpt else self.call(h)


def own_bytes(how: str, ckpt: bool) -> int:
    torch.manual_seed(0)
    net, x = CallsBy(how, ckpt), torch.randn(32, 16)
    params = {p.untyped_storage().data_ptr() for p in net.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = net(x)
    del y
    return sum(seen.values())


@pytest.mark.parametrize("how", ["keyword", "tuple"])
def test_a_tensor_passed_by_keyword_or_in_a_tuple_is_an_argument_checkpoint_keeps(how: str) -> None:
    torch.manual_seed(0)
    net, x = CallsBy(how), torch.randn(32, 16)
    with capture() as cap:
        y = net(x)
    group = next(g for g in cap.report(outputs=y).modules if g.module == "blk")
    assert group.frees_bytes == own_bytes(how, ckpt=False) - own_bytes(how, ckpt=True) > 0


def test_groups_round_trip_through_json_and_a_lie_is_refused() -> None:
    case, _ = groups()
    data = json.loads(Report(environment={}, cases=[case]).to_json())
    assert data["cases"][0]["modules"][0]["module"] == "Net"
    back = validate_report(data)
    assert back.cases[0].modules == case.modules
    data["cases"][0]["modules"][1]["frees_bytes"] += 1
    with pytest.raises(UsageError, match=r"modules\[1\]\.frees_bytes"):
        validate_report(data)


def test_cli_table_shows_what_to_checkpoint() -> None:
    from rich.console import Console

    from memaudit.render.modules import module_table

    case, _ = groups()
    console = Console(width=160, record=True)
    console.print(module_table(case))
    text = console.export_text()
    assert "what to checkpoint" in text and "blocks.0" in text and "shared#2" in text

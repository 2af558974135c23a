"""``--unread`` on plain PyTorch (CPU): the observed-reads and poisoned-buffers methods, their
agreement, what neither can see, and that observing changes nothing backward computes."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
import torch
import unread_models
from torch import nn

from memaudit.capture import capture, reads
from memaudit.report import validate_case
from memaudit.runner import run_case
from memaudit.targets.custom import CustomTarget
from memaudit.unread import observe, observed_verdicts


def _case(factory: str, method: str) -> Any:
    target = CustomTarget(f"unread_models:{factory}")
    return run_case(target, target.spec("bf16", 1, dtype=target.defaults["dtype"]), unread=method)


def _verdicts(case: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in case.rows:
        out.setdefault(row.read, []).append(row.operand)
    return out


@pytest.mark.parametrize("method", ["observed", "poisoned", "both"])
def test_the_planted_waste_is_found_with_its_exact_bytes(method: str) -> None:
    case = _case("planted", method)
    assert case.status == "ok", case.reason
    unread = [r for r in case.rows if r.read == "unread"]
    assert [r.operand for r in unread] == ["Planted:SavesJunkBackward.saved_tensors[2]"]
    assert unread[0].bytes == unread_models.PLANTED_BYTES
    assert case.totals.unread_bytes == unread_models.PLANTED_BYTES
    assert all(r.read == "read" for r in case.rows if r not in unread)
    assert case.unread is not None
    assert (
        case.unread.methods
        == {"observed": ["observed"], "poisoned": ["poisoned"], "both": ["observed", "poisoned"]}[method]
    )


MODELS = ["transformer", "conv_bn_relu", "autocast_mlp", "checkpointed", "compiled_mlp"]


@pytest.mark.parametrize("model", MODELS)
def test_plain_models_both_methods_agree_and_keep_nothing_unread(model: str) -> None:
    case = _case(model, "both")
    assert case.status == "ok", case.reason
    assert case.unread is not None and case.unread.methods == ["observed", "poisoned"], case.unread
    assert case.totals.unread_bytes == 0, [(r.operand, r.read, r.bytes) for r in case.rows if r.read == "unread"]
    unread = [r for r in case.rows if r.read == "unread"]
    # What is unread is parameter memory a backward op receives only for its shape (alive anyway),
    # or an empty tensor, which holds nothing to read (torch 2.11's non-reentrant checkpoint saves a
    # 0-element placeholder as the first of its inputs; measured on an H100, reports/h100/round4/).
    assert all(r.is_parameter or 0 in r.shape for r in unread), [(r.operand, r.bytes, r.shape) for r in unread]


def test_the_cpu_lstm_disagreement_is_named() -> None:
    """oneDNN's LSTM backward (CPU) is given the biases and the last hidden state; whether it reads
    them is oneDNN's code, not PyTorch's, so observed reads count them read, while poisoning them
    changes no gradient bit. Both methods together make that an error naming the rows (never a
    silent choice); each alone says what it saw."""
    both = _case("lstm", "both")
    assert both.status == "error" and "disagree on 6 row(s)" in (both.reason or ""), both.reason
    observed = _case("lstm", "observed")
    assert observed.totals.unread_bytes == 0
    poisoned = _case("lstm", "poisoned")
    unread = sorted({r.operand.rpartition(".")[2] for r in poisoned.rows if r.read == "unread"})
    assert unread == ["result1", "weight2", "weight3"], unread
    assert poisoned.totals.unread_bytes == 2 * 3 * 32 * 4  # hy of each layer: (1, 3, 32) fp32


def test_the_reference_target_keeps_nothing_unread() -> None:
    from memaudit.te.targets.reference import ReferenceTarget

    target = ReferenceTarget()
    spec = target.spec("bf16", 4, tokens=256, hidden=64, ffn=128, dtype="fp32")
    case = run_case(target, spec, unread="both")
    assert case.status == "ok", case.reason
    assert case.totals.unread_bytes == 0
    assert not [r for r in case.rows if r.read == "unknown"], [
        (r.operand, r.read_by) for r in case.rows if r.read == "unknown"
    ]


def test_checkpointed_rows_say_why_they_have_no_verdict() -> None:
    case = _case("checkpointed", "observed")
    recomputed = [r for r in case.rows if r.resides == "recomputed"]
    assert recomputed and all(r.read == "unknown" and "recomputes" in (r.read_by or "") for r in recomputed)


class _NumpyBackward(torch.autograd.Function):
    """Backward reads ``a`` through numpy (a C library memaudit does not observe); ``b`` is saved
    and never touched."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return a * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        a, _b = ctx.saved_tensors
        scale = float(np.abs(a.detach().numpy()).max() > -1)
        return g * 2 * scale, None


def _observe(fn: Any, loss: Any = lambda y: y.sum()) -> tuple[Any, reads.Observer]:
    with capture() as cap:
        y = fn()
    rep = cap.report(outputs=y)
    with observe(cap) as obs:
        loss(y).backward()
    return rep, obs


def test_a_read_memaudit_cannot_see_makes_unseen_buffers_unknown() -> None:
    a = torch.randn(8, 8, requires_grad=True)
    b = torch.randn(16, 16)
    rep, obs = _observe(lambda: _NumpyBackward.apply(a, b))
    verdicts = observed_verdicts(obs, rep.rows)
    (ra, rb) = rep.rows
    assert verdicts[ra.index] == ("read", "Tensor.numpy")
    v, why = verdicts[rb.index]
    assert v == "unknown" and "numpy" in (why or ""), why


class _ToList(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(scale)
        return a * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        (scale,) = ctx.saved_tensors
        return g * scale.tolist()[0], None


def test_tolist_in_backward_is_a_read() -> None:
    a = torch.randn(4, requires_grad=True)
    rep, obs = _observe(lambda: _ToList.apply(a, torch.tensor([3.0])))
    assert observed_verdicts(obs, rep.rows)[rep.rows[0].index] == ("read", "Tensor.tolist")


def test_observing_changes_no_gradient_error_or_hook() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    x = torch.randn(5, 8, requires_grad=True)
    model(x).sum().backward()
    bare = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    seen: list[str] = []
    handle = model[0].weight.register_hook(lambda g: seen.append("hook"))
    try:
        rep, obs = _observe(lambda: model(x))
    finally:
        handle.remove()
    observed = [p.grad for p in model.parameters()] + [x.grad]
    assert all(torch.equal(a, b) for a, b in zip(bare, observed, strict=True))
    assert seen == ["hook"]
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert reads.observer() is None and _get_current_dispatch_mode() is None and sys.getprofile() is None
    # An error raised in backward comes out unchanged.
    with capture() as cap:
        y = (x * 2).sum()
    cap.report(outputs=y)
    y.backward()
    with pytest.raises(RuntimeError) as bare_err:
        y.backward()
    with capture() as cap:
        y = (x * 2).sum()
    cap.report(outputs=y)
    with observe(cap):
        y.backward()
    with observe(cap), pytest.raises(RuntimeError) as observed_err:
        y.backward()
    assert str(observed_err.value) == str(bare_err.value)


def test_two_analyses_cannot_nest() -> None:
    with capture() as cap:
        y = torch.randn(3, requires_grad=True).exp().sum()
    cap.report(outputs=y)
    with observe(cap), pytest.raises(RuntimeError, match="already running"), observe(cap):
        pass


def test_a_nondeterministic_backward_falls_back_to_observed_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    noisy = iter(range(10**6))
    original = unread_models.SavesJunk.backward

    def backward(ctx: Any, g: torch.Tensor) -> Any:
        gx, gw, none = original(ctx, g)
        return gx + next(noisy), gw, none

    monkeypatch.setattr(unread_models.SavesJunk, "backward", staticmethod(backward))
    case = _case("planted", "both")
    assert case.status == "ok", case.reason
    assert case.unread.methods == ["observed"]
    assert any("not deterministic" in n for n in case.unread.notes), case.unread.notes
    assert case.totals.unread_bytes == unread_models.PLANTED_BYTES


def test_integer_metadata_is_never_poisoned() -> None:
    case = _case("autocast_mlp", "poisoned")
    indices = [r for r in case.rows if r.kind == "metadata"]
    assert indices and all(r.read == "unknown" and "never poisoned" in (r.read_by or "") for r in indices)


def test_methods_that_disagree_make_an_error_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """An observer that missed every read would call the weight unread; the poisoned method sees
    the gradients change: the case is an error naming the row, never a silent choice."""
    monkeypatch.setattr(reads.Observer, "read", lambda self, t, by: None)
    case = _case("planted", "both")
    assert case.status == "error"
    assert "disagree" in (case.reason or "") and "SavesJunkBackward.saved_tensors[1]" in (case.reason or "")
    assert case.rows == [] and case.totals.rows == 0
    validate_case(case.to_dict())  # an error cell a report can hold (it reads back)


def test_a_backward_that_fails_leaves_an_error_cell_without_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        raise RuntimeError("backward failed on purpose")

    monkeypatch.setattr(unread_models.SavesJunk, "backward", staticmethod(backward))
    case = _case("planted", "observed")
    assert case.status == "error" and "backward failed on purpose" in (case.reason or "")
    assert case.rows == [] and case.unread is None
    validate_case(case.to_dict())


def test_the_poisoned_method_needs_values() -> None:
    from memaudit.unread import poison_storage

    t = torch.arange(4, dtype=torch.float32)
    view = t[1:3]
    undo = poison_storage(t.untyped_storage(), "ff")
    assert torch.isnan(view).all() and t._version == 0
    undo()
    assert torch.equal(t, torch.arange(4, dtype=torch.float32))

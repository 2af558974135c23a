"""The CPU reference target: its saved set is known exactly, so every row and total is derived.

Per GroupedLinear the model saves ``[split_sizes, *xs, *ws]`` (xs: views of the input, one per
group; ws: the weight Parameters); ScaledSwiGLU saves ``(fc1.output (T, 2F), scales (T,) fp32)``.
"""

from __future__ import annotations

import pytest
import torch

from memaudit.capture import capture
from memaudit.spec import CaseSpec, default_splits
from memaudit.targets.registry import get_target
from memaudit.te.machine.recipes import ALIGNMENT
from memaudit.te.targets.reference import ReferenceTarget
from memaudit.te.targets.reference_model import DTYPES, ReferenceGroupedMLP, make_inputs

T, H, F = 256, 64, 128
I64 = 8
F32 = 4
GL = "GroupedLinearFunctionBackward"
SW = "ScaledSwiGLUFunctionBackward"


def spec_for(groups: int, dtype: str) -> CaseSpec:
    return CaseSpec.make(get_target("reference"), recipe="bf16", groups=groups, tokens=T, hidden=H, ffn=F, dtype=dtype)


def captured(spec: CaseSpec):
    built = ReferenceTarget().build(spec)
    with capture() as cap:
        out = built.forward(cap)
    return cap.report(outputs=out), out


CASES = [(g, d) for g in (1, 4, 8) for d in ("bf16", "fp32")]


@pytest.mark.parametrize(("groups", "dtype"), CASES)
def test_rows_are_exactly_what_the_model_saves(groups: int, dtype: str) -> None:
    spec = spec_for(groups, dtype)
    e = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    fmt = {"bf16": "bf16", "fp32": "fp32"}[dtype]
    splits = spec.split_sizes()
    rep, _ = captured(spec)
    rows = rep.rows
    G = groups
    assert len(rows) == 4 * G + 4

    def check(
        idx: int,
        op: str,
        slot: int,
        kind: str,
        form: str,
        shape: list[int],
        nbytes: int,
        operand: str | None,
        group: int | None,
        *,
        param: bool = False,
    ) -> None:
        r = rows[idx]
        got = (r.index, r.op, r.slot, r.kind, r.format, r.shape, r.bytes, r.operand, r.group, r.is_parameter)
        want = (idx, op, f"saved_tensors[{slot}]", kind, form, shape, nbytes, operand, group, param)
        assert got == want

    # FC1: [split_sizes, *xs, *w1]
    check(0, GL, 0, "metadata", "int64", [G], G * I64, "split_sizes", None)
    for g, s in enumerate(splits):
        check(1 + g, GL, 1 + g, "tensor", fmt, [s, H], s * H * e, "fc1.input", g)
    for g in range(G):
        check(1 + G + g, GL, 1 + G + g, "tensor", fmt, [2 * F, H], 2 * F * H * e, f"fc1.weight[{g}]", g, param=True)
    # ScaledSwiGLU: (fc1.output, scales)
    i = 1 + 2 * G
    check(i, SW, 0, "tensor", fmt, [T, 2 * F], T * 2 * F * e, "fc1.output", None)
    check(i + 1, SW, 1, "tensor", "fp32", [T], T * F32, "activation.scales", None)
    # FC2: [split_sizes, *acts, *w2]
    i = 3 + 2 * G
    check(0, GL, 0, "metadata", "int64", [G], G * I64, "split_sizes", None)
    for g, s in enumerate(splits):
        check(i + 1 + g, GL, 1 + g, "tensor", fmt, [s, F], s * F * e, "fc2.input", g)
    for g in range(G):
        check(i + 1 + G + g, GL, 1 + G + g, "tensor", fmt, [H, F], H * F * e, f"fc2.weight[{g}]", g, param=True)

    # split_sizes is one tensor saved by both GroupedLinears
    assert rows[i].duplicate_of == 0 and rows[i].storage == rows[0].storage
    assert all(r.duplicate_of is None for r in rows if r.index != i)

    # the xs are views of one input storage, laid out by the splits
    xs = rows[1 : 1 + G]
    acts = rows[i + 1 : i + 1 + G]
    for views, width, total in ((xs, H, T * H * e), (acts, F, T * F * e)):
        assert len({r.storage for r in views}) == 1
        offsets = [r.storage_offset for r in views]
        assert offsets == [sum(splits[:g]) * width * e for g in range(G)]
        assert all(r.storage_bytes == total for r in views)
    # x, fc1.output, probs, the activation and every weight live in separate storages
    weights = [r for r in rows if r.is_parameter]
    storages = {xs[0].storage, acts[0].storage, rows[1 + 2 * G].storage, rows[2 + 2 * G].storage, rows[0].storage}
    storages |= {r.storage for r in weights}
    assert len(storages) == 5 + 2 * G == len({r.storage for r in rows})

    t = rep.totals
    assert t.rows == 4 * G + 4
    assert t.logical_bytes == 2 * G * I64 + T * H * e + T * F * e + T * 2 * F * e + T * F32 + 3 * G * H * F * e
    assert t.physical_bytes == G * I64 + T * H * e + T * F * e + T * 2 * F * e + T * F32 + 3 * G * H * F * e
    assert t.parameter_bytes == G * 2 * F * H * e + G * H * F * e
    assert t.saved_bytes == T * H * e + T * 2 * F * e + T * F32 + T * F * e + G * I64


@pytest.mark.parametrize(("groups", "dtype"), CASES)
def test_gradients_equal_with_and_without_capture(groups: int, dtype: str) -> None:
    spec = spec_for(groups, dtype)

    def run(hooked: bool) -> list[torch.Tensor]:
        model = ReferenceGroupedMLP(groups, H, F, dtype=DTYPES[dtype], device="cpu")
        x, split_sizes, probs = make_inputs(spec)
        if hooked:
            with capture() as cap:
                model.labeler = cap.label
                y = model(x, split_sizes, probs)
            assert cap.report(outputs=y).rows
        else:
            y = model(x, split_sizes, probs)
        y.float().sum().backward()
        grads = [x.grad, probs.grad, *(p.grad for p in model.parameters())]
        assert all(gr is not None for gr in grads)
        return grads

    for a, b in zip(run(False), run(True), strict=True):
        assert torch.equal(a, b)


def test_backward_matches_autograd_of_plain_ops() -> None:
    """The hand-written backward is the gradient of the same computation written in plain torch."""
    groups = 4
    spec = spec_for(groups, "fp32")
    model = ReferenceGroupedMLP(groups, H, F, dtype=torch.float32, device="cpu")
    x, split_sizes, probs = make_inputs(spec)
    model(x, split_sizes, probs).sum().backward()

    x2 = x.detach().clone().requires_grad_()
    p2 = probs.detach().clone().requires_grad_()
    w1 = [w.detach().clone().requires_grad_() for w in model.fc1_weight]
    w2 = [w.detach().clone().requires_grad_() for w in model.fc2_weight]
    sizes = split_sizes.tolist()
    h = torch.cat([xg @ w.t() for xg, w in zip(torch.split(x2, sizes), w1, strict=True)])
    a, b = h.chunk(2, dim=-1)
    act = torch.nn.functional.silu(a) * b * p2.unsqueeze(-1)
    y = torch.cat([ag @ w.t() for ag, w in zip(torch.split(act, sizes), w2, strict=True)])
    y.sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(probs.grad, p2.grad, rtol=1e-4, atol=1e-5)
    for w, ref in zip(list(model.fc1_weight) + list(model.fc2_weight), w1 + w2, strict=True):
        torch.testing.assert_close(w.grad, ref.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("recipe", sorted(ALIGNMENT))
@pytest.mark.parametrize("groups", [1, 2, 3, 4, 8])
def test_default_splits_are_uneven_aligned_and_sum_to_tokens(recipe: str, groups: int) -> None:
    align = ALIGNMENT[recipe]
    tokens = 32 * align
    splits = default_splits(tokens, groups, align)
    assert len(splits) == groups
    assert sum(splits) == tokens
    assert all(s >= 0 and s % align == 0 for s in splits)
    if groups >= 3:
        assert splits[1] == 0
        assert all(s > 0 for i, s in enumerate(splits) if i != 1)
    else:
        assert all(s > 0 for s in splits)
    live = [s for s in splits if s]
    if groups >= 2:
        assert len(set(live)) > 1, "splits must be uneven"
        assert live == sorted(live), "later groups get more tokens (weights 1, 2, 3, ...)"
    assert default_splits(tokens, groups, align) == splits  # deterministic


@pytest.mark.parametrize("groups", [1, 4, 8])
def test_spec_splits_at_test_shape(groups: int) -> None:
    splits = spec_for(groups, "bf16").split_sizes()
    assert sum(splits) == T and all(s % ALIGNMENT["bf16"] == 0 for s in splits)
    assert (0 in splits) == (groups >= 3)
    assert groups < 3 or splits[1] == 0


def test_minimum_tokens_gives_each_live_group_one_unit() -> None:
    assert default_splits(16 * 7, 8, 16) == [16, 0, 16, 16, 16, 16, 16, 16]


def test_reference_skips_quantized_recipes() -> None:
    spec = CaseSpec.make(get_target("reference"), recipe="mxfp8", groups=1, tokens=T, hidden=H, ffn=F)
    assert "bf16" in (ReferenceTarget().skip_reason(spec) or "")
    assert ReferenceTarget().skip_reason(spec_for(1, "bf16")) is None

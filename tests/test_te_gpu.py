"""TE grouped MLP on a real GPU (the H200): the saved set TE 2.20.2 produces on the unfused path.

te-internals §2.4: on Hopper with cuBLASLt < 13.4 every recipe takes the split-quantize path.
FP8 (delayed/current) saves per group and quantized input exactly one ``_transpose`` (columnwise
data) and one ``_scale_inv``, never rowwise ``_data``; BF16 saves views of the input and the
weight parameters themselves.
"""

from __future__ import annotations

import collections

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
te = pytest.importorskip("transformer_engine.pytorch", reason="needs TransformerEngine")

from memaudit.runner import run_case  # noqa: E402
from memaudit.spec import CaseSpec  # noqa: E402
from memaudit.targets.te_grouped_mlp import TEGroupedMLPTarget  # noqa: E402

T, H, F = 2048, 256, 512
TARGET = TEGroupedMLPTarget()


def _case(recipe: str, groups: int):
    spec = CaseSpec("te-grouped-mlp", recipe, groups, T, H, F, device="cuda", options={"fused_env": "0"})
    return spec, run_case(TARGET, spec)


@pytest.mark.parametrize("groups", [1, 4, 8])
@pytest.mark.parametrize("recipe", ["bf16", "fp8-delayed", "fp8-current"])
def test_every_row_classified(recipe: str, groups: int) -> None:
    spec, case = _case(recipe, groups)
    assert case.status == "ok", case.reason
    assert case.path is not None and case.path["fused"] is False
    assert case.path["forward_ops"] == ["GroupedLinear", "ScaledSwiGLU", "GroupedLinear"]
    for row in case.rows:
        assert row.operand, f"unlabelled row {row}"
        assert row.op == "_OperationFuserAutogradFunctionBackward"
        if row.container is not None:
            assert row.kind != "tensor", row


@pytest.mark.parametrize("groups", [1, 4, 8])
@pytest.mark.parametrize("recipe", ["fp8-delayed", "fp8-current"])
def test_fp8_split_path_saves_one_columnwise_data_and_scale_per_group(recipe: str, groups: int) -> None:
    spec, case = _case(recipe, groups)
    assert case.status == "ok", case.reason
    if case.path["grouped_linear_path"] != "split-quantize":
        pytest.skip(f"GroupedLinear took {case.path['grouped_linear_path']}: {case.path['grouped_linear_why']}")
    for operand, width in (("fc1.input", H), ("fc2.input", F)):
        rows = [r for r in case.rows if r.operand == operand]
        per_group = collections.Counter((r.group, r.slot, r.kind, r.orientation) for r in rows)
        for g, m in enumerate(spec.split_sizes()):
            assert per_group[(g, "_transpose", "data", "columnwise")] == 1
            assert per_group[(g, "_scale_inv", "scale_inv", "both")] == 1
            data = next(r for r in rows if r.group == g and r.slot == "_transpose")
            assert data.shape == [width, m] and data.dtype == "uint8" and data.bytes == width * m
        assert not [r for r in rows if r.orientation == "rowwise"], "rowwise data saved"
        assert len(rows) == 2 * groups


@pytest.mark.parametrize("groups", [1, 4])
def test_bf16_saves_input_views_and_parameters(groups: int) -> None:
    spec, case = _case("bf16", groups)
    assert case.status == "ok", case.reason
    fc1_inputs = [r for r in case.rows if r.operand == "fc1.input"]
    assert len({r.storage for r in fc1_inputs}) == 1  # views of x, no copy
    assert sum(r.bytes for r in fc1_inputs) == T * H * 2
    weights = [r for r in case.rows if r.operand and ".weight" in r.operand]
    assert len(weights) == 2 * groups and all(r.is_parameter for r in weights)


@pytest.mark.parametrize("recipe", ["bf16", "fp8-current"])
def test_gradients_match_without_capture(recipe: str) -> None:
    from memaudit import capture

    grads = []
    for hooked in (False, True):
        spec = CaseSpec("te-grouped-mlp", recipe, 4, T, H, F, device="cuda")
        built = TARGET.build(spec)
        if hooked:
            with capture() as cap:
                out = built.forward(cap)
        else:
            from memaudit.capture import Capture

            out = built.forward(Capture())
        built.backward(out)
        grads.append([out.detach(), *(t.grad for t in (*built.inputs, *built.model.parameters()))])
    for a, b in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_unavailable_recipes_are_skipped_with_te_reason() -> None:
    for recipe, check in (("mxfp8", te.is_mxfp8_available), ("nvfp4", te.is_nvfp4_available)):
        ok, reason = check(return_reason=True)
        _, case = _case(recipe, 4)
        if ok:
            assert case.status in ("ok", "error")
        else:
            assert case.status == "skipped" and case.reason == reason

"""TE grouped MLP on a real GPU (the H200): the saved set TE 2.20.2 produces on the unfused path.

te-internals §2.4: on Hopper with cuBLASLt < 13.4 every recipe takes the split-quantize path.
FP8 (delayed/current) saves per group and quantized input exactly one ``_transpose`` (columnwise
data) and one ``_scale_inv``, never rowwise ``_data``; BF16 saves views of the input and the
weight parameters themselves.
"""

from __future__ import annotations

import collections
import types

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
te = pytest.importorskip("transformer_engine.pytorch", reason="needs TransformerEngine")

from memaudit.runner import run_case  # noqa: E402
from memaudit.spec import CaseSpec  # noqa: E402
from memaudit.targets.registry import get_target  # noqa: E402
from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget  # noqa: E402

T, H, F = 2048, 256, 512
TARGET = TEGroupedMLPTarget()


def _case(recipe: str, groups: int):
    spec = CaseSpec.make(
        get_target("te-grouped-mlp"),
        recipe,
        groups,
        tokens=T,
        hidden=H,
        ffn=F,
        device="cuda",
        options={"fused_env": "0"},
    )
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


@pytest.mark.parametrize("recipe", ["bf16", "fp8-delayed", "fp8-current"])
def test_gradients_match_without_capture(recipe: str) -> None:
    from memaudit import capture

    grads = []
    for hooked in (False, True):
        spec = CaseSpec.make(get_target("te-grouped-mlp"), recipe, 4, tokens=T, hidden=H, ffn=F, device="cuda")
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


@pytest.mark.parametrize("recipe", ["bf16", "fp8-delayed", "fp8-current"])
def test_allocator_growth_is_what_the_rows_name(recipe: str) -> None:
    """Ground truth from the CUDA caching allocator: nothing the forward keeps is unseen."""
    spec = CaseSpec.make(
        get_target("te-grouped-mlp"), recipe, 4, tokens=T, hidden=H, ffn=F, device="cuda", options={"fused_env": "0"}
    )
    case = run_case(TARGET, spec, verify_allocator=True)
    assert case.status == "ok", case.reason
    alloc = case.allocator
    assert alloc is not None and alloc["available"], alloc
    assert alloc["allocated_delta"] > 0
    assert alloc["hidden_bytes"] == 0, alloc
    assert case.complete, case.warnings


@pytest.mark.parametrize("recipe", ["bf16", "fp8-current"])
def test_dropped_captured_graph_frees_all_its_memory(recipe: str) -> None:
    """A captured forward dropped without backward: memory_allocated returns to its start (no cycle)."""
    import gc

    from memaudit.capture import capture

    spec = CaseSpec.make(get_target("te-grouped-mlp"), recipe, 4, tokens=T, hidden=H, ffn=F, device="cuda")
    built = TARGET.build(spec)
    with capture() as warm:  # lazy TE/cuBLAS state first
        out = built.forward(warm)
    built.backward(out)
    del out, warm
    gc.collect()
    torch.cuda.synchronize()
    gc.disable()
    try:
        start = torch.cuda.memory_allocated()
        for _ in range(3):
            with capture() as cap:
                out = built.forward(cap)
            assert cap.report(outputs=out).rows
            del out, cap
            assert torch.cuda.memory_allocated() == start  # freed by reference counting alone
    finally:
        gc.enable()


def _offloaded_by_te(built, cap=None) -> tuple[list[torch.Tensor], int, int]:
    """Two layers (the same grouped MLP twice) under TE's CPU offload, layer 0 offloaded. Returns
    the outputs and what TE itself took for offload from layer 0 (its ``fwd_gpu_tensor_group``,
    cpu_offload.py:366-400): count and bytes."""
    offload_ctx, sync = te.get_cpu_offload_context(enabled=True, num_layers=1, model_layers=2)
    labels = cap if cap is not None else types.SimpleNamespace(label=lambda *_: None)
    outs = []
    taken: list[torch.Tensor] = []
    for layer in range(2):
        with offload_ctx:
            out = built.forward(labels)
        if layer == 0:
            taken = list(offload_ctx.offload_synchronizer.layer_states[0].fwd_gpu_tensor_group.tensor_list)
        outs.append(sync(out))
    return outs, len(taken), sum(t.numel() * t.element_size() for t in taken)


def test_te_cpu_offload_rows_reside_on_the_host() -> None:
    """TE's CPU offload pair composes with capture(): TE takes the same tensors as without a
    capture (ground truth: TE's own offload list, from a run without memaudit), the rows it moves
    to the host say so (resides = host, host_bytes) instead of counting as device bytes, and
    backward through the offloaded layer gives the same gradients."""
    from memaudit.capture import capture

    spec = CaseSpec.make(get_target("te-grouped-mlp"), "bf16", 4, tokens=T, hidden=H, ffn=F, device="cuda")
    built = TARGET.build(spec)
    params = list(built.model.parameters())
    assert params, "the target exposes no parameters: the gradient check would compare nothing"
    outs, n_bare, bytes_bare = _offloaded_by_te(built)
    built.backward(outs)
    assert n_bare > 0, "TE offloaded nothing at this shape: the test checks nothing"
    bare_grads = [p.grad.clone() for p in params if p.grad is not None]
    for p in params:
        p.grad = None
    with capture() as cap:
        outs, n_cap, bytes_cap = _offloaded_by_te(built, cap)
    rep = cap.report(outputs=outs)
    assert (n_cap, bytes_cap) == (n_bare, bytes_bare)  # TE's pack still ran, on the same tensors
    host = [r for r in rep.rows if r.resides == "host"]
    assert len(host) == n_bare
    assert rep.totals.host_bytes == sum(r.bytes for r in host) == bytes_bare
    assert all(r.storage is None for r in host)  # not counted as device storage
    built.backward(outs)
    cap_grads = [p.grad for p in params if p.grad is not None]
    assert len(cap_grads) == len(bare_grads)
    assert all(torch.equal(a, b) for a, b in zip(cap_grads, bare_grads, strict=True))


def test_unavailable_recipes_are_skipped_with_te_reason() -> None:
    for recipe, check in (("mxfp8", te.is_mxfp8_available), ("nvfp4", te.is_nvfp4_available)):
        ok, reason = check(return_reason=True)
        _, case = _case(recipe, 4)
        if ok:
            assert case.status in ("ok", "error")
        else:
            assert case.status == "skipped" and case.reason == reason

"""TE's cached FP8 weights (te-internals §13): ``te.Linear`` called with ``is_first_microbatch``, as
Megatron-Core calls it, keeps its quantized weight in ``module._fp8_workspaces`` and saves that copy
for backward. Its rows are marked ``cached``, counted apart (``cached_bytes``), and ``saved_bytes``
is what the step's saved state newly holds.

Run by TE's real Python on emulated kernels (fake CUDA, a child process per case); the bytes are
checked against an independent saved-tensor hook pair of the test's own on a twin module (same
shapes, same calls) that sums storages by address, the cached storages against the twin's
workspaces read by address here. A control
shows the checks fail where the classifier does not look for the workspaces (the code before it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

from memaudit.te.emulate import fakecuda, host

pytestmark = pytest.mark.te

try:
    import transformer_engine.pytorch  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)
if not torch.cuda.is_available() and fakecuda.unavailable() is not None:
    pytest.skip(fakecuda.unavailable(), allow_module_level=True)

import memaudit.te.capture.cache as cache  # noqa: E402
from memaudit.report import CaseReport, compute_totals  # noqa: E402
from memaudit.report.codec import validate_case  # noqa: E402

T, H, F = 128, 256, 512
BF16 = torch.bfloat16


def _address(t: torch.Tensor) -> int:
    """Where ``t``'s storage starts (a fake tensor's ``data_ptr()`` is its storage's own address plus
    its offset; its storage's ``data_ptr()`` is 0)."""
    return t.data_ptr() - t.storage_offset() * t.element_size()


def _buffers(t: Any) -> list[torch.Tensor]:
    """The plain tensors holding ``t``'s bytes: itself, or a quantized tensor's buffer attributes."""
    if not any(isinstance(v, torch.Tensor) for v in vars(t).values()):
        return [t]
    return [v for v in vars(t).values() if isinstance(v, torch.Tensor)]


def _hook_pair(sizes: dict[int, tuple[int, bool]]) -> torch.autograd.graph.saved_tensors_hooks:
    """An independent pack/unpack pair: every packed tensor's storages (a quantized tensor packed
    whole by its buffers), by address, with the size in bytes and whether a parameter's."""

    def pack(t: torch.Tensor) -> torch.Tensor:
        param = isinstance(t, torch.nn.Parameter) or isinstance(getattr(t, "_base", None), torch.nn.Parameter)
        for buf in _buffers(t):
            address = _address(buf)
            sizes[address] = (buf.untyped_storage().nbytes(), sizes.get(address, (0, False))[1] or param)
        return t

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


def run(recipe: str, arch: str, flags: tuple[bool | None, ...]) -> list[dict[str, Any]]:
    """Forwards of a ``te.Linear`` under ``recipe`` on an emulated ``arch``, one capture per entry of
    ``flags`` (its ``is_first_microbatch``); a twin module (same shapes, same calls) is seen by the
    test's own hook pair alone. (A pair pushed inside a capture that keeps a quantized tensor whole
    would make memaudit see a copy it cannot name, so the twin runs outside it.)"""

    def body() -> list[dict[str, Any]]:
        import transformer_engine.pytorch as te

        import memaudit
        from memaudit.te.emulate.run import emulated
        from memaudit.te.machine.probes import make_recipe

        module = te.Linear(H, F, device="cuda", params_dtype=BF16)
        twin = te.Linear(H, F, device="cuda", params_dtype=BF16)
        rec = make_recipe(recipe)
        out = []
        for flag in flags:
            x = torch.randn(T, H, device="cuda", dtype=BF16, requires_grad=True)
            with emulated(arch), memaudit.capture() as cap:
                with te.autocast(enabled=True, recipe=rec):
                    y = module(x, is_first_microbatch=flag)
            report = cap.report(outputs=y)
            sizes: dict[int, tuple[int, bool]] = {}
            with emulated(arch), _hook_pair(sizes):
                with te.autocast(enabled=True, recipe=rec):
                    y_twin = twin(x, is_first_microbatch=flag)
            workspace = {_address(b) for ws in twin._fp8_workspaces.values() for b in _buffers(ws)}
            out.append(
                {
                    "case": report.to_dict(),
                    "rows": [dataclasses.asdict(row) for row in report.rows],
                    "totals": report.totals.to_dict(),
                    "warnings": list(report.warnings),
                    "hook_bytes": sum(n for n, _ in sizes.values()),
                    "hook_param_bytes": sum(n for n, param in sizes.values() if param),
                    "hook_cache_bytes": sum(n for a, (n, param) in sizes.items() if a in workspace and not param),
                    "workspaces": sorted(module._fp8_workspaces),
                }
            )
            del y, y_twin, report  # the step's graphs go (their saved tensors with them); the caches stay
        return out

    return host.call_in_child(arch, body)


RECIPES = [("fp8-current", "sm90"), ("fp8-delayed", "sm90"), ("fp8-current", "sm100"), ("mxfp8", "sm100")]


@pytest.fixture(scope="module")
def cases() -> Callable[..., list[dict[str, Any]]]:
    from memaudit.te.emulate.run import import_te_modules

    import_te_modules()  # once here, not in each child
    done: dict[tuple[Any, ...], list[dict[str, Any]]] = {}

    def get(recipe: str, arch: str, flags: tuple[bool | None, ...]) -> list[dict[str, Any]]:
        key = (recipe, arch, flags)
        if key not in done:
            done[key] = run(recipe, arch, flags)
        return done[key]

    return get


def problems(step: dict[str, Any]) -> list[str]:
    """What disagrees with the independent hook: physical bytes, the cached storages, saved bytes."""
    totals, out = step["totals"], []
    if not step["hook_bytes"]:
        out.append("the independent hook saw nothing")
    if totals["physical_bytes"] != step["hook_bytes"]:
        out.append(f"physical bytes {totals['physical_bytes']} != the hook's {step['hook_bytes']}")
    if totals.get("cached_bytes", 0) != step["hook_cache_bytes"]:
        out.append(f"cached bytes {totals.get('cached_bytes', 0)} != the hook's {step['hook_cache_bytes']}")
    want = step["hook_bytes"] - step["hook_param_bytes"] - step["hook_cache_bytes"]
    if totals["saved_bytes"] != want:
        out.append(f"saved bytes {totals['saved_bytes']} != the hook's new storages {want}")
    out += [f"warning: {w}" for w in step["warnings"]]
    return out


@pytest.mark.parametrize(("recipe", "arch"), RECIPES)
def test_the_cached_fp8_weight_is_counted_apart_in_both_microbatches(
    recipe: str, arch: str, cases: Callable[..., list[dict[str, Any]]]
) -> None:
    steps = cases(recipe, arch, (True, False))
    for k, step in enumerate(steps):
        assert step["workspaces"] == ["weight"], "TE cached nothing: the test checks nothing"
        assert step["hook_cache_bytes"] > 0, f"microbatch {k}: the hook saw no cached storage saved"
        assert problems(step) == [], f"microbatch {k}"
        cached = [r for r in step["rows"] if r["cached"] is not None]
        assert {r["cached"] for r in cached} == {"fp8 weight cache of Linear"}
        assert {r["operand"] for r in cached} == {"weight"}  # the GEMM's weight, and nothing else
        assert all(not r["is_parameter"] for r in cached)
        by_storage = {r["storage"]: r["storage_bytes"] for r in cached if r["storage"] is not None}
        assert sum(by_storage.values()) == step["totals"]["cached_bytes"]
        # every buffer of the weight operand is the cache's; the input's buffers are not
        weight = [r for r in step["rows"] if r["operand"] == "weight"]
        assert weight and all(r["cached"] is not None for r in weight)
        assert all(r["cached"] is None for r in step["rows"] if r["operand"] != "weight")
    # the second microbatch reuses the first's copy: the same bytes, the same rows
    assert steps[0]["totals"] == steps[1]["totals"]


def test_on_hopper_the_cache_is_the_fp8_data_and_its_transpose(cases: Callable[..., list[dict[str, Any]]]) -> None:
    """What the H100 showed: a weight's ``_data`` and ``_transpose`` (and its scale) are the cache."""
    step = cases("fp8-current", "sm90", (True, False))[1]
    slots = {(r["slot"], r["kind"]) for r in step["rows"] if r["cached"] is not None}
    assert {("_data", "data"), ("_transpose", "data"), ("_scale_inv", "scale_inv")} <= slots
    data = [r for r in step["rows"] if r["cached"] is not None and r["kind"] == "data"]
    assert sorted(r["storage_bytes"] for r in data) == [H * F, H * F]  # one byte per FP8 element


def test_without_is_first_microbatch_nothing_is_cached(cases: Callable[..., list[dict[str, Any]]]) -> None:
    steps = cases("fp8-current", "sm90", (None, None))
    for step in steps:
        assert step["workspaces"] == []
        assert all(r["cached"] is None for r in step["rows"])
        assert "cached_bytes" not in step["totals"]  # reports without a cache stay as they were
        assert "cached" not in str(step["case"]["rows"])
        assert problems(step) == []
        assert step["totals"]["saved_bytes"] == step["hook_bytes"] - step["hook_param_bytes"]


def test_the_report_with_cached_rows_is_read_back_strictly(cases: Callable[..., list[dict[str, Any]]]) -> None:
    step = cases("fp8-current", "sm90", (True, False))[1]
    d = step["case"]
    case = validate_case(d)
    assert isinstance(case, CaseReport)
    assert case.totals.cached_bytes == step["totals"]["cached_bytes"] > 0
    assert case.to_dict() == d
    lie = {**d, "totals": {**d["totals"], "saved_bytes": d["totals"]["saved_bytes"] + d["totals"]["cached_bytes"]}}
    with pytest.raises(Exception, match="saved_bytes"):
        validate_case(lie)
    lie = {**d, "totals": {k: v for k, v in d["totals"].items() if k != "cached_bytes"}}
    with pytest.raises(Exception, match="cached_bytes"):
        validate_case(lie)
    # the same rows unmarked add up to the totals before this: the cache in saved_bytes
    plain = compute_totals([dataclasses.replace(r, cached=None) for r in case.rows])
    assert plain.saved_bytes == case.totals.saved_bytes + case.totals.cached_bytes
    assert plain.cached_bytes == 0


def test_control_without_the_workspace_lookup_the_checks_fail(
    monkeypatch: pytest.MonkeyPatch, cases: Callable[..., list[dict[str, Any]]]
) -> None:
    """The classifier before te-internals §13 (no module's workspaces read): no row is marked, the
    cached copy is in saved_bytes, and the checks above say so (the children fork from here, so they
    see the patch)."""
    monkeypatch.setattr(cache, "WORKSPACES", "_no_such_attribute")
    steps = run("fp8-current", "sm90", (True, False))
    for step in steps:
        assert all(r["cached"] is None for r in step["rows"])
        found = problems(step)
        assert any(p.startswith("saved bytes") for p in found), found
        assert any(p.startswith("cached bytes 0 != the hook's") for p in found), found
    # the rows are the same either way: only the counting changes
    fixed = cases("fp8-current", "sm90", (True, False))[1]
    assert [r["storage"] for r in steps[1]["rows"]] == [r["storage"] for r in fixed["rows"]]
    assert steps[1]["totals"]["physical_bytes"] == fixed["totals"]["physical_bytes"]

"""The expert-parallel target's TE experts with emulated kernels and no GPU (fake CUDA).

The router and the dispatch read values (the counts, ``masked_select``, ``tolist``), which fake CUDA
tensors do not hold: they run on real host tensors outside the fake mode, and only the experts'
forward runs on fake CUDA, with the split sizes the routing plan gives. The experts' rows are then
TE's, named by TE's roles under ``experts``, and byte for byte those of a plain ``te-grouped-mlp``
case of the same local split sizes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from memaudit.te.emulate import fakecuda

pytestmark = pytest.mark.te

if torch.cuda.is_available():
    pytest.skip("fake CUDA is the host with no GPU; on a GPU the emulation runs on the GPU", allow_module_level=True)
if fakecuda.unavailable() is not None:
    pytest.skip(str(fakecuda.unavailable()), allow_module_level=True)
try:
    import transformer_engine.pytorch  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)

from memaudit.report import CaseReport, Row, validate_report  # noqa: E402
from memaudit.runner import run_case  # noqa: E402
from memaudit.spec import CaseSpec  # noqa: E402
from memaudit.te.targets.ep import EPGroupedMLPTarget  # noqa: E402
from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget  # noqa: E402

SHAPE = {"tokens": 256, "hidden": 128, "ffn": 128}
GROUPS = 4
EMULATED = {"kernels": "emulated", "arch": "sm100"}


def _ep_case(recipe: str) -> CaseReport:
    target = EPGroupedMLPTarget().configure({"experts": "te", **EMULATED})
    spec = CaseSpec.make(
        target,
        recipe,
        GROUPS,
        device="cuda",
        options=dict(target.options),
        tokens=SHAPE["tokens"],
        hidden=SHAPE["hidden"],
        ffn=SHAPE["ffn"],
    )
    placed, _ = target.place(spec)
    return run_case(target, placed)


def _plain_case(recipe: str, splits: tuple[int, ...]) -> CaseReport:
    target = TEGroupedMLPTarget().configure(EMULATED)
    spec = CaseSpec.make(
        target,
        recipe,
        len(splits),
        device="cuda",
        options=dict(target.options),
        splits=splits,
        tokens=sum(splits),
        hidden=SHAPE["hidden"],
        ffn=SHAPE["ffn"],
    )
    return run_case(target, spec)


def _experts(case: CaseReport) -> list[Row]:
    return [r for r in case.rows if not (r.operand or "").startswith("dispatch.")]


def _key(r: Row) -> tuple[Any, ...]:
    return (r.operand, r.kind, r.bytes, tuple(r.shape or ()), r.dtype, r.is_parameter, r.storage_bytes)


@pytest.mark.parametrize("recipe", ["bf16", "fp8-current", "mxfp8", "nvfp4"])
def test_the_te_experts_run_on_fake_cuda_and_save_what_the_plain_grouped_mlp_saves(recipe: str) -> None:
    """The case is ok; its experts' rows carry TE's roles under ``experts``, on fake CUDA; its
    dispatch's rows are the router's and dispatch's plain PyTorch ones; and the experts' rows are
    those of a te-grouped-mlp case with the same local split sizes (same recipe and shape)."""
    case = _ep_case(recipe)
    assert case.status == "ok", case.reason
    assert case.execution == "emulated" and case.emulation is not None
    assert case.emulation.machine["host"] == fakecuda.HOST_NAME
    assert len(case.splits) == GROUPS and sum(case.splits) == SHAPE["tokens"] * 2
    experts, dispatch = _experts(case), [r for r in case.rows if (r.operand or "").startswith("dispatch.")]
    assert experts and {r.operand for r in dispatch} == {
        "dispatch.routing_map",
        "dispatch.probs",
        "dispatch.sorted_indices",
    }
    assert all(r.device == "cpu" for r in dispatch)  # the router and the dispatch ran on host tensors
    assert all(r.device.startswith("cuda") for r in experts)
    assert not [r.operand for r in experts if r.operand is None or r.operand.startswith("saved_tensors[")]
    assert {"fc1.input", "fc2.input", "activation.scales"} <= {r.operand for r in experts}
    assert all("experts" in (r.module or "").split(".") for r in experts), {r.module for r in experts}

    plain = _plain_case(recipe, tuple(case.splits))
    assert plain.status == "ok", plain.reason
    assert sorted(map(_key, experts), key=repr) == sorted(map(_key, plain.rows), key=repr)
    assert case.path is not None and plain.path is not None and case.path.fused == plain.path.fused


def test_the_command_gives_ok_cases_for_every_recipe(cli_runner: Any, tmp_path: Path) -> None:
    """``memaudit run --target ep-grouped-mlp --experts te --kernels emulated`` with no GPU."""
    from memaudit.cli import app

    out = tmp_path / "ep.json"
    result = cli_runner.invoke(
        app,
        [
            "run",
            "--target",
            "ep-grouped-mlp",
            "--experts",
            "te",
            "--kernels",
            "emulated",
            "--arch",
            "sm100",
            "--recipe",
            "bf16,fp8-current,mxfp8,nvfp4",
            "--groups",
            str(GROUPS),
            *(a for k, v in SHAPE.items() for a in (f"--{k}", str(v))),
            "--json",
            str(out),
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    cases = validate_report(json.loads(out.read_text()), source="ep.json").cases
    assert [(c.recipe, c.status) for c in cases] == [
        ("bf16", "ok"),
        ("fp8-current", "ok"),
        ("mxfp8", "ok"),
        ("nvfp4", "ok"),
    ]


def test_outside_gives_real_tensors_and_puts_the_fake_mode_back() -> None:
    """:func:`fakecuda.outside`: values on the host inside fake CUDA, fake tensors again after."""
    with fakecuda.fake_cuda("sm100"):
        with fakecuda.outside():
            counts = torch.tensor([3, 1, 2])
            real = torch.repeat_interleave(torch.arange(3), counts)
        assert real.tolist() == [0, 0, 0, 1, 2, 2] and type(real) is torch.Tensor
        moved = counts.to("cuda")
        assert isinstance(moved, torch._subclasses.fake_tensor.FakeTensor) and moved.device.type == "cuda"
        assert type(torch.ones(2)) is not torch.Tensor  # back in the fake mode
    with fakecuda.outside():  # fake CUDA not in force: nothing changes
        assert type(torch.ones(2)) is torch.Tensor

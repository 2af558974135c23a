"""Audits on the ``meta`` device: shapes and storages without values or allocation.

Storage identity is checked against ground truth that does not go through memaudit (a function
whose saved set is built by hand, and a minimal hook of our own that keeps every storage object),
then meta is compared with CPU row by row, and a production-shape run is checked to make nothing
but meta tensors. Timings are in ``bench/perf/meta.py``, not here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from memaudit.capture import capture
from memaudit.cli import app
from memaudit.runner import run_case
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target
from memaudit.te.targets.reference import ReferenceTarget
from memaudit.te.targets.reference_model import ReferenceGroupedMLP, make_inputs


def partition(keys: list[Any]) -> list[int]:
    """Each key's group number in first-seen order: [a, b, a] -> [0, 1, 0]."""
    seen: dict[Any, int] = {}
    return [seen.setdefault(k, len(seen)) for k in keys]


# ---- storage identity, against ground truth ----------------------------------------------------
class SaveMany(torch.autograd.Function):
    """Saves six tensors whose storages are known by construction: views of ``a`` share one
    storage, ``b`` (same shape and dtype as ``a``) has its own."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, a[1:], a.t(), b, a, a.view(-1))
        return a + b

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return dy, dy


KNOWN = [0, 0, 0, 1, 0, 0]  # a, a[1:], a.t(), b, a, a.view(-1)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_storages_are_told_apart_as_built(device: str) -> None:
    a = torch.empty(4, 6, device=device, requires_grad=True)
    b = torch.empty(4, 6, device=device, requires_grad=True)
    with capture() as cap:
        out = SaveMany.apply(a, b)
    rows = cap.report(outputs=out).rows
    assert partition([r.storage for r in rows]) == KNOWN
    assert [r.duplicate_of for r in rows] == [None, None, None, None, 0, None]
    assert {r.device for r in rows} == {device}
    assert cap.report(outputs=out).totals.physical_bytes == 2 * 4 * 6 * 4  # two storages, each once


def test_addresses_cannot_tell_meta_storages_apart() -> None:
    """Why identity is the storage object: every meta storage has address 0."""
    a = torch.empty(4, 4, device="meta")
    b = torch.empty(4, 4, device="meta")
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() == 0
    assert a.untyped_storage() is a[1:].untyped_storage()
    assert a.untyped_storage() is not b.untyped_storage()


class StorageHook:
    """A minimal saved-tensor hook pair of our own: keeps every packed storage object alive (so ids
    are never reused) and records (shape, dtype, id of the storage)."""

    def __init__(self) -> None:
        self.keep: list[Any] = []
        self.seen: list[tuple[list[int], torch.dtype, int]] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        self.keep.append(st)
        self.seen.append((list(t.shape), t.dtype, id(st)))
        return t

    def hooks(self) -> Any:
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)


def spec(
    groups: int, device: str, tokens: int = 256, hidden: int = 64, ffn: int = 128, dtype: str = "bf16"
) -> CaseSpec:
    return CaseSpec.make(
        get_target("reference"), "bf16", groups, tokens=tokens, hidden=hidden, ffn=ffn, dtype=dtype, device=device
    )


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("groups", [1, 4, 8])
def test_reference_storages_match_an_independent_hook(device: str, groups: int) -> None:
    s = spec(groups, device)
    model = ReferenceGroupedMLP(groups, s.hidden, s.ffn, dtype=torch.bfloat16, device=device)
    x, sizes, probs = make_inputs(s)
    mine = StorageHook()
    with mine.hooks():
        model(x, sizes, probs)
    with capture() as cap:
        model.labeler = cap.label
        out = model(x, sizes, probs)
    rows = cap.report(outputs=out).rows
    assert [(r.shape, r.dtype) for r in rows] == [(shape, str(dt).removeprefix("torch.")) for shape, dt, _ in mine.seen]
    assert partition([r.storage for r in rows]) == partition([k for _, _, k in mine.seen])
    # views of the input share its storage; every weight has one of its own
    assert len({r.storage for r in rows if r.operand == "fc1.input"}) == 1
    assert len({r.storage for r in rows if r.operand and "weight" in r.operand}) == 2 * groups


# ---- meta gives CPU's rows ---------------------------------------------------------------------
SHAPES = [(256, 64, 128, 1), (256, 64, 128, 4), (512, 32, 96, 8), (1024, 128, 64, 3), (2048, 64, 64, 8)]


@pytest.mark.parametrize(("tokens", "hidden", "ffn", "groups"), SHAPES)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_meta_rows_are_cpu_rows(tokens: int, hidden: int, ffn: int, groups: int, dtype: str) -> None:
    cases = {dev: run_case(ReferenceTarget(), spec(groups, dev, tokens, hidden, ffn, dtype)) for dev in ("cpu", "meta")}
    cpu, meta = cases["cpu"], cases["meta"]
    assert cpu.status == meta.status == "ok", (cpu.reason, meta.reason)
    assert {r.device for r in cpu.rows} == {"cpu"} and {r.device for r in meta.rows} == {"meta"}
    strip = [dataclasses.replace(r, device="-") for r in meta.rows]
    assert strip == [dataclasses.replace(r, device="-") for r in cpu.rows]  # every other field
    assert meta.totals == cpu.totals
    assert meta.totals.saved_bytes > 0 and meta.complete and cpu.complete
    assert meta.warnings == cpu.warnings == []


# ---- production shape: nothing but meta tensors ------------------------------------------------
def _bench_meta() -> Any:
    """bench/perf/meta.py, whose DeviceLog (every device an op touched) the production-shape test uses."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "memaudit_bench_meta", Path(__file__).resolve().parents[2] / "bench" / "perf" / "meta.py"
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


DeviceLog = _bench_meta().DeviceLog


def test_production_shape_on_meta_makes_only_meta_tensors() -> None:
    T, H, F, G = 82944, 3072, 1536, 8
    s = spec(G, "meta", T, H, F)
    with DeviceLog() as log:
        case = run_case(ReferenceTarget(), s, backward=True)
    assert case.status == "ok", case.reason
    assert log.ops > 100 and log.devices == {"meta"}  # build, forward and backward: no CPU tensor at all
    assert {r.device for r in case.rows} == {"meta"}
    e = 2
    assert case.totals.saved_bytes == T * H * e + T * 2 * F * e + T * 4 + T * F * e + G * 8
    assert case.totals.parameter_bytes == 3 * G * H * F * e
    assert case.totals.saved_bytes == 1_274_351_680  # 1.19 GiB that a CPU run would allocate


# ---- the command line --------------------------------------------------------------------------
SHAPE = ["--tokens", "256", "--hidden", "64", "--ffn", "128"]


def run_json(cli_runner: Any, path: Path, *argv: str, code: int = 0) -> dict[str, Any]:
    result = cli_runner.invoke(app, ["run", *argv, "--json", str(path)])
    assert result.exit_code == code, result.output
    return json.loads(path.read_text(encoding="utf-8"))


def test_run_reference_on_meta_equals_cpu(cli_runner: Any, tmp_path: Path) -> None:
    argv = ["--target", "reference", "--groups", "1,4", *SHAPE]
    meta = run_json(cli_runner, tmp_path / "m.json", *argv, "--device", "meta")
    cpu = run_json(cli_runner, tmp_path / "c.json", *argv, "--device", "cpu")
    assert meta["environment"]["device"] == meta["environment"]["device_class"] == "meta"
    for m, c in zip(meta["cases"], cpu["cases"], strict=True):
        assert m["id"] == c["id"] and m["status"] == c["status"] == "ok"
        assert m["device"] == "meta"
        assert [{**r, "device": "-"} for r in m["rows"]] == [{**r, "device": "-"} for r in c["rows"]]
        assert m["totals"] == c["totals"]


def test_custom_target_on_meta_builds_under_the_meta_default(
    cli_runner: Any, tmp_path: Path, tests_on_path: Path
) -> None:
    """``custom_factory:make`` names no device: with --device meta its model and input are meta tensors."""
    argv = ["--target", "custom_factory:make", "--groups", "1", "--tokens", "4096", "--hidden", "512", "--ffn", "2048"]
    meta = run_json(cli_runner, tmp_path / "m.json", *argv, "--device", "meta")
    cpu = run_json(cli_runner, tmp_path / "c.json", *argv)
    (m,), (c,) = meta["cases"], cpu["cases"]
    assert m["status"] == c["status"] == "ok"
    assert {r["device"] for r in m["rows"]} == {"meta"} and {r["device"] for r in c["rows"]} == {"cpu"}
    assert [{**r, "device": "-"} for r in m["rows"]] == [{**r, "device": "-"} for r in c["rows"]]
    assert m["totals"] == c["totals"]


def test_te_target_on_meta_is_skipped_with_the_reason_or_estimated(cli_runner: Any, tmp_path: Path) -> None:
    """TE cannot run on meta: with --fallback none the cell says why; by default the estimate answers
    (never TE's forward with emulated kernels, which would allocate on a GPU)."""
    argv = ["--target", "te-grouped-mlp", "--recipe", "bf16", "--groups", "1", *SHAPE, "--device", "meta"]
    data = run_json(cli_runner, tmp_path / "te.json", *argv, "--fallback", "none", code=4)  # nothing measured
    (case,) = data["cases"]
    assert case["status"] == "skipped"
    assert "does not run on meta" in case["reason"] and "torch.Tensor().cuda()" in case["reason"]
    result = cli_runner.invoke(app, ["run", *argv, "--json", str(tmp_path / "auto.json")])
    assert result.exit_code == 4, result.output  # nothing measured or emulated: answered by the estimate
    (case,) = json.loads((tmp_path / "auto.json").read_text(encoding="utf-8"))["cases"]
    assert case["status"] == "ok" and case["path"]["estimated"] is True
    assert "does not run on meta" in result.output
    emulate = cli_runner.invoke(app, ["run", *argv, "--fallback", "emulate", "--json", str(tmp_path / "e.json")])
    (case,) = json.loads((tmp_path / "e.json").read_text(encoding="utf-8"))["cases"]
    assert case["status"] == "skipped", emulate.output


# ---- the pytest plugin -------------------------------------------------------------------------
PLUGIN_TEST = """
import pytest
import torch

T, H, F = 65536, 4096, 2048
SAVED = T * H * 4 + T * F * 4  # fc1's input and fc2's input (tanh's output), fp32


@pytest.mark.saved_budget(exact_bytes=SAVED, device="meta")
def test_production_shape(saved_tensors):
    up = torch.nn.Linear(H, F, bias=False)
    down = torch.nn.Linear(F, H, bias=False)
    x = torch.randn(T, H, requires_grad=True)  # 1 GiB on CPU; nothing on meta
    y = down(torch.tanh(up(x)))
    assert x.is_meta and up.weight.is_meta and y.is_meta
    rows = saved_tensors.report(outputs=y).rows
    assert {r.device for r in rows} == {"meta"}
    assert [r.shape for r in rows if not r.is_parameter] == [[T, H], [T, F], [T, F]]


@pytest.mark.saved_budget(max_bytes="1 MiB")
def test_without_device_stays_on_cpu(saved_tensors):
    x = torch.randn(16, 64, requires_grad=True)
    torch.nn.Linear(64, 32)(x)
    assert not x.is_meta


@pytest.mark.saved_budget(max_bytes="1 GiB", device="cuda")
def test_bad_device(saved_tensors):
    pass
"""


def test_plugin_device_meta(pytester: pytest.Pytester) -> None:
    from tests.house.test_plugin import PLUGIN_ARGS

    pytester.makepyfile(test_inner=PLUGIN_TEST)
    result = pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    out = result.stdout.str()
    assert "saved_budget.device" in out and "'cuda'" in out

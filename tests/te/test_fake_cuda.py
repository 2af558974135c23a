"""Fake CUDA, the emulation's host with no GPU: TE 2.20.2's real forward on fake CUDA tensors.

Ground truth is the H200: every committed emulated report (``reports/emulated``, made with
``--kernels emulated|standins`` on the H200) comes out again here byte for byte, and the sm90
all-stand-in cases equal the H200's real-kernel reports row for row. The rest checks the layer
itself against torch and TE directly: the values it knows and refuses, the data pointers, the
child process, and a CPU-only torch build.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from memaudit.te.emulate import fakecuda, host

pytestmark = pytest.mark.te

if torch.cuda.is_available():
    pytest.skip("fake CUDA is the host with no GPU; on a GPU the emulation runs on the GPU", allow_module_level=True)
if fakecuda.unavailable() is not None:
    pytest.skip(fakecuda.unavailable(), allow_module_level=True)
try:
    import transformer_engine.pytorch  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)

from bench._fake_cuda import (  # noqa: E402
    EMULATED,
    MEASURED,
    against_measured,
    committed_groups,
    differences,
    replay,
    row_for_row,
)
from memaudit.report import load_report  # noqa: E402
from memaudit.runner import run_case  # noqa: E402
from memaudit.spec import CaseSpec  # noqa: E402
from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget  # noqa: E402

GROUPS = committed_groups()
SMALL = {"tokens": 2048, "hidden": 128, "ffn": 128}


@pytest.fixture(scope="module")
def replays() -> dict[str, list[Any]]:
    """Every committed group replayed once (one child process each): name -> cases."""
    from memaudit.te.emulate.run import import_te_modules

    import_te_modules()  # once here, not in each child
    return {g.name: replay(g) for g in GROUPS}


def test_the_committed_emulated_reports_are_all_found() -> None:
    assert sum(len(g.cases) for g in GROUPS) == 102 and len(GROUPS) == 11
    assert {g.file for g in GROUPS} >= {"h200", "sm100-fused", "sm100-unfused", *MEASURED}


@pytest.mark.parametrize("group", GROUPS, ids=[g.name for g in GROUPS])
def test_every_committed_h200_emulated_case_comes_out_byte_for_byte(group: Any, replays: dict[str, list[Any]]) -> None:
    """Every case of the committed file, in its process's order: every field the committed JSON
    holds, rows and totals byte for byte, status, reason, path, warnings, stand-ins called,
    fusions. Today's memaudit adds the row's ``module`` and the host (``no GPU (fake CUDA)``);
    an error TE raises at a suspected TE bug keeps its message and gains the note."""
    fresh = replays[group.name]
    assert [c.id for c in fresh] == [c.id for c in group.cases]
    for committed, case in zip(group.cases, fresh, strict=True):
        assert differences(committed, case, host=fakecuda.HOST_NAME) == [], committed.id
        assert case.emulation is not None and case.emulation.machine["host"] == fakecuda.HOST_NAME
        if committed.status == "error":
            assert "suspected TE bug" in (case.reason or ""), case.reason


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_sm90_all_standin_cases_equal_the_h200_real_kernels_row_for_row(
    name: str, replays: dict[str, list[Any]]
) -> None:
    """The only real-kernel ground truth: every kernel a stand-in on an emulated sm90, on fake CUDA,
    against the H200 running the real kernels: every row in order, byte for byte in its JSON
    (operand, kind, orientation, shape, dtype, bytes, storage and offset, op, slot, ...), the
    totals, path, options and status; only the emulated case's label and forward-only warning differ."""
    measured = {c.id: c for c in load_report(EMULATED / MEASURED[name]).cases}
    fresh = next(cases for g, cases in replays.items() if g.startswith(name + ":"))
    assert len(fresh) == len(measured) == 12
    for case in fresh:
        assert case.status == "ok" and case.emulation is not None and case.emulation.machine["kernels"] == "standins"
        assert row_for_row(measured[case.id], case) == [], case.id
        assert against_measured(measured[case.id], case) == [], case.id


# ---- the layer itself --------------------------------------------------------------------------
def test_torch_cuda_answers_are_the_emulated_machines_and_are_put_back() -> None:
    before = (
        torch.cuda.current_device,
        torch.cuda.get_device_properties,
        torch.cuda.current_stream,
        torch.cuda.is_current_stream_capturing,
    )
    with fakecuda.fake_cuda("sm100") as mode:
        assert fakecuda.active() is mode and host.cuda_here() and host.name() == fakecuda.HOST_NAME
        assert torch.cuda.get_device_capability() == (10, 0) and torch.cuda.current_device() == 0
        assert torch.cuda.current_stream().cuda_stream == 0 and not torch.cuda.is_current_stream_capturing()
        x = torch.empty(4, 8, device="cuda")
        assert x.is_cuda and type(x).__name__ == "FakeTensor" and x.untyped_storage().nbytes() == 128
        assert torch.Tensor().cuda().is_cuda  # cpp_extensions/gemm.py:408
    assert fakecuda.active() is None and not host.cuda_here()
    assert (
        torch.cuda.current_device,
        torch.cuda.get_device_properties,
        torch.cuda.current_stream,
        torch.cuda.is_current_stream_capturing,
    ) == before
    assert "data_ptr" not in vars(type(x))


def test_values_come_from_python_numbers_and_are_read_only_where_te_reads_them() -> None:
    """The split sizes the case gave are known through a move and a view; reading them anywhere but
    TE's known line, or reading a value nobody gave, is an error naming the reader."""
    with fakecuda.fake_cuda("sm100") as mode:
        sizes = torch.tensor([128, 0, 256], dtype=torch.int64).to("cuda")
        assert mode.value_of(sizes[1:]).tolist() == [0, 256]
        with pytest.raises(fakecuda.UnknownValueRead, match=r"test_fake_cuda\.py:\d+ .*is not a read memaudit knows"):
            sizes.tolist()
        rand = torch.randn(3, device="cuda")
        with pytest.raises(fakecuda.UnknownValueRead, match="grouped_linear.py:1222"):
            rand.sum().item()
        sizes.add_(1)  # an in-place write forgets what was known about the storage
        assert mode.value_of(sizes) is None and mode.value_of(sizes[1:]) is None


def test_data_pointers_tell_storages_apart_and_add_the_offset() -> None:
    """torch answers 0 for every fake tensor; TE compares pointers (grouped_mlp.py:1251)."""
    with fakecuda.fake_cuda("sm100"):
        a, b = torch.empty(16, device="cuda"), torch.empty(16, device="cuda")
        assert a.data_ptr() != b.data_ptr() and a.data_ptr() == a.view(4, 4).data_ptr()
        assert a[3:].data_ptr() == a.data_ptr() + 3 * 4 and a.data_ptr() % 512 == 0


def _emulated(recipe: str, groups: int, **flags: Any) -> tuple[TEGroupedMLPTarget, CaseSpec]:
    target = TEGroupedMLPTarget().configure({"kernels": "emulated", "arch": "sm100", **flags})
    return target, CaseSpec.make(target, recipe, groups, device="cuda", options=dict(target.options), **SMALL)


def test_a_value_read_beyond_the_known_sites_is_an_error_cell_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TE change that reads a tensor's value somewhere new: the cell says where, nothing is made up."""
    import transformer_engine.pytorch.ops.basic.grouped_linear as gl

    original = gl.GroupedLinear.fuser_forward

    def reads_a_value(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["basic_op_extra_inputs"][0][0].max().item()  # as TE code would, e.g. to size a buffer
        return original(self, *args, **kwargs)

    monkeypatch.setattr(gl.GroupedLinear, "fuser_forward", reads_a_value)
    case = run_case(*_emulated("bf16", 4))
    assert case.status == "error" and case.execution == "emulated"
    assert "UnknownValueRead: a tensor's value was read at" in (case.reason or "")
    assert (
        "test_fake_cuda.py" in case.reason
        and "reads_a_value" in case.reason
        and "grouped_linear.py:1222" in case.reason
    )


def test_te_reads_the_split_sizes_where_memaudit_knows_them() -> None:
    """fp8-delayed takes the split-quantize path, which reads the split sizes (grouped_linear.py:1222)."""
    case = run_case(*_emulated("fp8-delayed", 4))
    assert case.status == "ok" and case.path is not None and case.path.get("grouped_linear_path") == "split-quantize"
    assert [r.shape[0] for r in case.rows if r.operand == "fc1.input" and r.kind == "data"] == list(case.splits)


def test_a_child_that_dies_is_that_cells_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def dies() -> list[Any]:
        os.kill(os.getpid(), signal.SIGKILL)  # as an abort in C++ would end it, without its noise in the log
        return []

    with pytest.raises(host.ChildFailed, match=r"died of signal 9 \(SIGKILL\)"):
        host.run_in_child("sm100", dies)
    target, spec = _emulated("bf16", 1)
    monkeypatch.setattr(type(target), "build", lambda self, spec: dies())
    case = run_case(target, spec)
    assert case.status == "error" and "died of signal 9" in (case.reason or "")

    def raises() -> list[Any]:
        raise KeyError("outside the runner's own error handling")

    with pytest.raises(host.ChildFailed, match="in the fake-CUDA child process: KeyError"):
        host.run_in_child("sm100", raises)


def test_each_case_runs_in_a_child_and_leaves_this_process_as_it_was() -> None:
    import transformer_engine.pytorch.quantization as q

    history = dict(q.FP8GlobalStateManager.quantization_state.global_amax_buffer)
    update = "fused_amax_and_scale_update_after_reduction"  # delayed scaling's amax history update
    delayed = run_case(*_emulated("fp8-delayed", 4))
    after = run_case(*_emulated("fp8-current", 4))
    assert delayed.status == after.status == "ok" and after.emulation is not None and delayed.emulation is not None
    assert update in delayed.emulation.standins
    assert update not in after.emulation.standins  # in one process TE would run it again (the committed h200.json)
    assert after.emulation.machine["host"] == fakecuda.HOST_NAME and fakecuda.active() is None
    assert q.FP8GlobalStateManager.quantization_state.global_amax_buffer == history  # TE's history stayed in the child


def test_a_cpu_only_torch_build_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", None)
    why = fakecuda.unavailable()
    assert why is not None and "CPU-only build" in why and "aborts the process" in why
    assert host.unavailable() == why and not TEGroupedMLPTarget.runs_here()
    target, spec = _emulated("nvfp4", 4)
    assert target.case_host(spec) is None
    assert target.skip_reason(spec) == f"emulated kernels cannot run here: {why}"


def test_the_python_api_runs_a_matrix_with_no_gpu(tmp_path: Path) -> None:
    from memaudit.report import write_report
    from memaudit.runner import run_matrix

    target, spec = _emulated("mxfp8", 4)
    report = run_matrix(target, [spec, spec.replace(groups=8)], backward=False)
    assert [c.status for c in report.cases] == ["ok", "ok"] and all(c.fused for c in report.cases)
    assert report.environment["device_class"] == "cpu"
    write_report(report, tmp_path / "r.json")
    assert load_report(tmp_path / "r.json").cases[0].emulation.machine["host"] == fakecuda.HOST_NAME


# ---- TE-side code only GPU tests reached before: on real TE forwards, on CPU --------------------
def test_the_fused_layout_names_the_pr3545_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused op saves everything through FC1's context; memaudit's fused layout (te-internals
    §2.1) names each entry: the NVFP4 inputs' rowwise data and scales (the buffers PR #3545
    prunes), the metadata and every weight come out as the estimator has them."""
    from memaudit.te.estimate import estimate

    target, spec = _emulated("nvfp4", 8, fused=True)
    case = run_case(target, spec)
    assert case.status == "ok" and case.fused, case.reason
    ops = {r.op for r in case.rows}
    assert ops == {"_OperationFuserAutogradFunctionBackward"}  # one save, through TE's OperationFuser node
    named = {
        (r.operand, r.kind, r.orientation): r.bytes
        for r in case.rows
        if r.orientation == "rowwise" and r.kind != "amax"
    }
    t, h, f = SMALL["tokens"], SMALL["hidden"], SMALL["ffn"]
    assert (
        named[("fc1.input", "data", "rowwise")] == t * h // 2
        and named[("fc1.input", "scale_inv", "rowwise")] == t * h // 16
    )
    assert named[("fc2.input", "data", "rowwise")] == t * f // 2
    assert [r.operand for r in case.rows if r.operand and r.operand.startswith("fc2.weight")][-1] == "fc2.weight[7]"
    est = estimate(case.spec, path="fused", arch="sm100")
    fields = lambda c: sorted((r.operand, r.kind, r.orientation, tuple(r.shape), r.bytes) for r in c.rows)  # noqa: E731
    assert fields(case) == fields(est)
    # without the layout, entries after FC1's input take the unfused GroupedLinear's roles: FC2's
    # offsets and weights become FC1's, past its 8 groups fc1.extra[k] (this test reads what the
    # detector names)
    import memaudit.te.capture.roles as roles

    monkeypatch.setattr(roles, "fused_layout", lambda basic_ops, ctxs: None)
    blind = run_case(target, spec)
    assert blind.status == "ok", blind.reason
    assert [r.index for r in blind.rows] == [r.index for r in case.rows]
    moved = {(a.operand, b.operand) for a, b in zip(case.rows, blind.rows, strict=True) if a.operand != b.operand}
    assert ("fc2.weight[7]", "fc1.extra[5]") in moved and ("fc2.input_offsets", "fc1.input") in moved


def test_te_cpu_offload_rows_reside_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """TE's CPU offload pair composes with capture() on fake CUDA as on the H200
    (tests/te/test_te_gpu.py): TE takes the same tensors with and without a capture (ground truth:
    TE's own offload list), and those rows reside on the host, counted in host_bytes.

    TE never offloads a FakeTensor (cpu_offload.py:465, for torch.compile's tracing), so the test
    asks TE's rule (cpu_offload.py:454-475) without that clause; streams and events are fake CUDA's stubs."""
    import transformer_engine.pytorch as te
    import transformer_engine.pytorch.cpu_offload as cpu_offload

    def as_on_a_gpu(self: Any, t: torch.Tensor) -> bool:
        if t.numel() < 256 * 1024:
            return False
        if isinstance(t, torch.nn.Parameter) or getattr(t, "_TE_do_not_offload", False) or t.device.type != "cuda":
            return False
        return t.is_contiguous() or getattr(t, "offload_base_tensor", False)

    monkeypatch.setattr(cpu_offload.OffloadableLayerState, "_check_if_offload", as_on_a_gpu)
    target, spec = _emulated("bf16", 4)
    spec = spec.replace(tokens=2048, hidden=256, ffn=512)

    def two_layers(built: Any, labels: Any) -> tuple[list[Any], int, int]:
        offload_ctx, sync = te.get_cpu_offload_context(enabled=True, num_layers=1, model_layers=2)
        outs, taken = [], []
        for layer in range(2):
            with offload_ctx:
                out = built.forward(labels)
            if layer == 0:
                taken = list(offload_ctx.offload_synchronizer.layer_states[0].fwd_gpu_tensor_group.tensor_list)
            outs.append(sync(out))
        return outs, len(taken), sum(t.numel() * t.element_size() for t in taken)

    def offloaded() -> dict[str, Any]:
        from types import SimpleNamespace

        from memaudit.capture import capture

        built = target.build(spec)
        _, n_bare, bytes_bare = two_layers(built, SimpleNamespace(label=lambda *_: None))
        with capture() as cap:
            outs, n_cap, bytes_cap = two_layers(built, cap)
        rep = cap.report(outputs=outs)
        host_rows = [r for r in rep.rows if r.resides == "host"]
        return {
            "bare": [n_bare, bytes_bare],
            "capture": [n_cap, bytes_cap],
            "host_rows": len(host_rows),
            "host_row_bytes": sum(r.bytes for r in host_rows),
            "host_bytes": rep.totals.host_bytes,
            "storages": [r.storage for r in host_rows],
            "operands": [r.operand for r in host_rows],
        }

    got = host.call_in_child("sm100", offloaded)
    n, nbytes = got["bare"]
    assert n > 0, "TE offloaded nothing at this shape: the test checks nothing"
    assert got["capture"] == [n, nbytes] and got["host_rows"] == n
    assert got["host_row_bytes"] == got["host_bytes"] == nbytes and got["storages"] == [None] * n
    assert set(got["operands"]) == {"fc1.input", "activation.activation_in", "fc2.input"}


# ---- the pytest plugin --------------------------------------------------------------------------
TE_TEST = """
import pytest
import torch
import transformer_engine.pytorch as te
from transformer_engine.common import recipe as r

RECIPE = r.NVFP4BlockScaling(disable_rht=False, disable_stochastic_rounding=True, disable_2d_quantization=True)
# the fused op's quantized inputs are GroupedTensors (the weights are per-group NVFP4 tensors)
INPUTS = {"container": "GroupedTensorStorage", "format": "nvfp4"}
ROWWISE_INPUTS = {**INPUTS, "kind": ["data", "scale_inv"], "orientation": "rowwise"}


def forward():
    bf16 = torch.bfloat16
    model = te.ops.Sequential(te.ops.GroupedLinear(4, 256, 512, bias=False, device="cuda", dtype=bf16),
                              te.ops.ScaledSwiGLU(glu_interleave_size=32),
                              te.ops.GroupedLinear(4, 256, 256, bias=False, device="cuda", dtype=bf16))
    x = torch.randn(2048, 256, device="cuda", dtype=bf16, requires_grad=True)
    splits = torch.tensor([512, 0, 1024, 512], device="cuda")
    probs = torch.rand(2048, device="cuda", requires_grad=True)
    with te.autocast(recipe=RECIPE):
        return model(x, splits, probs, splits)


@pytest.mark.saved_budget(emulate="sm100", max_bytes="64 MiB", rules=[
    {
        "name": "one-columnwise-data-per-input",
        "select": {**INPUTS, "kind": "data", "orientation": "columnwise"},
        "count": 2,
    }])
def test_passes(saved_tensors):
    forward()


@pytest.mark.saved_budget(emulate="sm100", forbid=[ROWWISE_INPUTS])
def test_pr3545_buffers_are_forbidden(saved_tensors):
    forward()


@pytest.mark.saved_budget(emulate="sm100", rules=[{"name": "pr3545", "select": ROWWISE_INPUTS, "forbid": True,
                                                  "known_failure": {"te": "<2.21", "reason": "PR #3545"}}])
def test_known_failure(saved_tensors):
    forward()
"""


def test_the_pytest_plugin_emulates_a_tests_te_forward_with_no_gpu(pytester: pytest.Pytester) -> None:
    """``@pytest.mark.saved_budget(emulate="sm100")``: the test's own TE model, fused NVFP4 on an
    emulated Blackwell; with no GPU its body runs on fake CUDA in a child process and the budgets
    judge what it saved (the PR #3545 buffers fail a forbid, and xfail under a known_failure)."""
    from tests.house.test_plugin import PLUGIN_ARGS

    pytester.makepyfile(test_te=TE_TEST)
    result = pytester.runpytest(*PLUGIN_ARGS, "-p", "no:cacheprovider", "-rxXf")
    result.assert_outcomes(passed=1, failed=1, xfailed=1)
    out = result.stdout.str()
    assert "forbid container=GroupedTensorStorage" in out and "rowwise_data" in out and "nvfp4" in out
    assert fakecuda.active() is None


# ---- the NVFP4 single-group failure (docs/investigations/te-nvfp4-weight-scale-view.md) ------------------------
FIX = ("ceil_div(fc1_weight_shape[1], k_sf_divisor)", "ceil_div(fc1_weight_k, k_sf_divisor)")
"""grouped_mlp.py:1629 and 1666, as the input path computes it (1479): the packed K."""


def _with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """TE's fused forward with the two weight-scale views computed from the packed K (a test-only
    copy of TE's own function, changed in exactly those two expressions)."""
    import inspect
    import textwrap

    import transformer_engine.pytorch.ops.fused.grouped_mlp as gm

    source = textwrap.dedent(inspect.getsource(gm.GroupedMLP_CuTeGEMMGLU.fuser_forward))
    assert source.count(FIX[0]) == 2
    namespace: dict[str, Any] = {}
    exec(compile(source.replace(*FIX), gm.__file__, "exec"), vars(gm), namespace)  # noqa: S102 - TE's own source
    monkeypatch.setattr(gm.GroupedMLP_CuTeGEMMGLU, "fuser_forward", namespace["fuser_forward"])


@pytest.mark.parametrize("groups", [1, 4, 8])
def test_nvfp4_single_grouped_weight_fails_at_the_suspected_te_bug(
    groups: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With NVTE_GROUPED_LINEAR_SINGLE_PARAM=1 TE keeps one grouped weight, and the fused NVFP4
    forward fails at every group count where the weight scales are viewed (grouped_mlp.py:1626);
    MXFP8, whose packed and unpacked K are the same, runs."""
    monkeypatch.setenv("NVTE_GROUPED_LINEAR_SINGLE_PARAM", "1")
    case = run_case(*_emulated("nvfp4", groups, fused=True, single_grouped_weight=True))
    assert case.status == "error" and case.execution == "emulated"
    # FC1 weight (2F, H) = (256, 128): TE allocates 256 x ru(128 / 16, 4) scales per group and the
    # view asks for ceil(256 / 128) x ceil(128 / 32) x 512, twice that (with the packed K: 128 / 2 / 32)
    assert (case.reason or "").startswith(
        f"RuntimeError: shape '[{groups}, 2, 4, 32, 4, 4]' is invalid for input of size {groups * 256 * 8} ("
    )
    assert "(suspected TE bug: NVFP4 FC1 weight scales viewed with the unpacked K" in case.reason
    assert "docs/investigations/te-nvfp4-weight-scale-view.md" in case.reason
    mxfp8 = run_case(*_emulated("mxfp8", groups, fused=True, single_grouped_weight=True))
    assert mxfp8.status == "ok" and mxfp8.fused, mxfp8.reason


def test_nvfp4_one_group_fails_on_the_dense_branch_and_the_packed_k_fixes_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """One group, discrete weights, cuDNN frontend >= 1.27: TE's dense single-group branch fails
    at grouped_mlp.py:1663. Computed from the packed K, both branches run, and the dense branch
    saves what the estimator's dense single-group model says."""
    from memaudit.te.estimate import estimate

    target, spec = _emulated("nvfp4", 1, fused=True)
    case = run_case(target, spec)
    assert case.status == "error" and "suspected TE bug" in (case.reason or "")
    _with_the_fix(monkeypatch)
    fixed = run_case(target, spec)
    assert fixed.status == "ok" and fixed.fused, fixed.reason
    est = estimate(fixed.spec, path="fused", arch="sm100", dense_single_group=True)
    fields = lambda c: sorted((r.operand, r.kind, r.orientation, tuple(r.shape), r.bytes) for r in c.rows)  # noqa: E731
    assert fields(fixed) == fields(est) and fixed.totals.saved_bytes == est.totals.saved_bytes
    monkeypatch.setenv("NVTE_GROUPED_LINEAR_SINGLE_PARAM", "1")
    for groups in (1, 4, 8):
        single = run_case(*_emulated("nvfp4", groups, fused=True, single_grouped_weight=True))
        assert single.status == "ok" and single.fused, (groups, single.reason)


def test_every_patch_is_documented_with_the_line_it_serves() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "internals" / "fake-cuda.md").read_text(encoding="utf-8")
    for patch in fakecuda.PATCHES:
        assert f"| `{patch.name}` |" in text, patch.name
        assert ".py:" in patch.serves, patch.name  # each names the TE or torch line it is for
    for site in fakecuda.VALUE_SITES:
        assert f"{site.file.rsplit('/', 1)[-1]}:{site.line}" in text


def test_a_child_that_hangs_is_killed_and_named() -> None:
    def hangs() -> list[Any]:
        import time

        time.sleep(60)
        return []

    with pytest.raises(host.ChildFailed, match=r"did not finish within 0.5 s \(killed\)"):
        host.call_in_child("sm100", hangs, timeout_s=0.5)

"""Emulated kernels on CPU, against TE 2.20.2's real Python: the kernel table, the emulation
context, the stand-ins (with TE's own quantizers), and how emulated cases are labelled and gated.

The stand-ins' numbers here are the real kernels' on the H200 (``reports/emulated/standin-diff.json``:
the same calls, the real result beside the stand-in's, 0 differences where the architecture
matches) or the C++ formulas cited in ``memaudit/te/emulate/standins.py``.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

try:
    import transformer_engine.pytorch as te  # noqa: F401
    import transformer_engine.pytorch.cpp_extensions as cpp_extensions
    import transformer_engine.pytorch.ops.fused.grouped_mlp as gm
    import transformer_engine_torch as tex
    from transformer_engine.pytorch.ops.fuser import OperationFuser
except Exception as exc:  # noqa: BLE001 - not installed, or broken
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)

from memaudit.errors import UsageError  # noqa: E402
from memaudit.judge.baseline import compare_reports  # noqa: E402
from memaudit.report import Emulation, Report, validate_case  # noqa: E402
from memaudit.te.emulate import standins as si  # noqa: E402
from memaudit.te.emulate.context import Machine, emulation  # noqa: E402
from memaudit.te.emulate.cudnn import CUDNN_STANDINS  # noqa: E402
from memaudit.te.emulate.kernels import MissingStandIn, kernel_table, tex_functions  # noqa: E402
from tests._reports import make_case  # noqa: E402

pytestmark = pytest.mark.te

FUSED_ENV = "NVTE_CUTEDSL_FUSED_GROUPED_MLP"


def _bindings() -> dict[tuple[str, str], int]:
    """Every binding of a tex function in every TE module, by identity."""
    ids = {id(f) for f in tex_functions().values()}
    return {
        (name, attr): id(v)
        for name, m in list(sys.modules.items())
        if m is not None and name.startswith("transformer_engine")
        for attr, v in vars(m).items()
        if id(v) in ids
    }


# ---- the kernel table ---------------------------------------------------------------------------
def test_every_entry_point_is_guarded_and_a_missing_one_is_named() -> None:
    before = _bindings()
    original = tex.quantize
    calls = []
    with kernel_table({"swizzle_scales_for_gemm_": lambda t: calls.append(t)}) as log:
        assert tex.quantize is not original and cpp_extensions.quantize is tex.quantize  # star-imported copy too
        with pytest.raises(MissingStandIn, match=r"tex\.quantize has no stand-in"):
            cpp_extensions.quantize(torch.zeros(2), None)
        with pytest.raises(MissingStandIn, match="grouped_mlp_experimental.swizzle_scales_and_pack_ptrs"):
            tex.grouped_mlp_experimental.swizzle_scales_and_pack_ptrs_for_discrete_weights([], [], "mxfp8", "cpu")
        tex.swizzle_scales_for_gemm_("x")
        assert tex.get_num_cublas_streams.__name__ == "get_num_cublas_streams"  # a query: guarded, calls through
    assert calls == ["x"]
    assert log.standins == {"swizzle_scales_for_gemm_": 1}
    assert log.missing == ["quantize", "grouped_mlp_experimental.swizzle_scales_and_pack_ptrs_for_discrete_weights"]
    assert tex.quantize is original and _bindings() == before


def test_the_table_is_restored_when_the_block_raises_and_rejects_unknown_names() -> None:
    before = _bindings()
    with pytest.raises(RuntimeError, match="boom"), kernel_table({}):
        raise RuntimeError("boom")
    assert _bindings() == before
    with pytest.raises(ValueError, match="not tex functions: no_such_kernel"), kernel_table({"no_such_kernel": print}):
        pass
    assert _bindings() == before


# ---- the emulation context ----------------------------------------------------------------------
def test_emulation_registers_the_fused_op_and_puts_everything_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FUSED_ENV, "1")
    fusions = list(OperationFuser.forward_backward_fusion_functions)
    version_fn, capability_fn, before = (
        gm._cudnn_frontend_version_at_least,
        torch.cuda.get_device_capability,
        _bindings(),
    )
    with emulation(Machine("sm100", 130600, "1.28.0"), {}, CUDNN_STANDINS) as log:
        assert gm.GroupedMLP_CuTeGEMMGLU.is_supported()  # TE's own check, on the emulated machine
        assert gm.fuse_glu_ops in OperationFuser.forward_backward_fusion_functions
        assert log.fusions == ["GroupedMLP_CuTeGEMMGLU", "GroupedMLP_CuTeGEMMUnary"]  # as on a B200 with FE 1.28
        assert tex.get_cublasLt_version() == 130600 and torch.cuda.get_device_capability() == (10, 0)
        assert gm._cudnn_frontend_version_at_least("1.27.0") and not gm._cudnn_frontend_version_at_least("1.29")
        import cudnn  # the stand-in module

        assert cudnn.grouped_gemm_glu_wrapper_sm100.__name__ == "grouped_gemm_glu_wrapper_sm100"
    assert OperationFuser.forward_backward_fusion_functions == fusions
    assert gm._cudnn_frontend_version_at_least is version_fn and torch.cuda.get_device_capability is capability_fn
    assert "cudnn" not in sys.modules and _bindings() == before
    monkeypatch.setenv(FUSED_ENV, "0")
    with emulation(Machine("sm100"), {}, CUDNN_STANDINS) as log:  # the switch off: TE says no, nothing registered
        assert not gm.GroupedMLP_CuTeGEMMGLU.is_supported() and log.fusions == []


# ---- stand-ins, with TE's own quantizers ---------------------------------------------------------
def _mxfp8(rowwise: bool = True, columnwise: bool = True, optimize: bool = False) -> object:
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer

    q = MXFP8Quantizer(tex.DType.kFloat8E4M3, rowwise=rowwise, columnwise=columnwise)
    q.internal, q.optimize_for_gemm = True, optimize
    return q


def _shapes(obj: object) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    from memaudit.te.capture.classify import inner_buffers

    return {a: (tuple(b.shape), b.dtype) for a, b in inner_buffers(obj)}


def test_mxfp8_group_quantize_sizes_scales_from_the_totals_as_the_h200_kernel_did() -> None:
    # H200, real tex.group_quantize, T=1024 split 160/0/384/480, H=256 (reports/emulated/standin-diff.json)
    x = torch.empty(1024, 256, dtype=torch.bfloat16)
    first = torch.tensor([160, 0, 384, 480])
    offsets = torch.tensor([0, 40960, 40960, 139264, 262144])
    with emulation(Machine("sm100"), {}, {}):
        g = si.group_quantize(x, _mxfp8(optimize=True), 4, first, tensor_offsets=offsets)
    assert _shapes(g) == {
        "rowwise_data": ((262144,), torch.uint8), "columnwise_data": ((262144,), torch.uint8),
        "scale_inv": ((8192,), torch.uint8), "columnwise_scale_inv": ((8192,), torch.uint8),
        "first_dims": ((4,), torch.int64), "tensor_offsets": ((5,), torch.int64),
    }  # fmt: skip
    assert g.first_dims is first and g.tensor_offsets is offsets and g._with_gemm_swizzled_scales
    assert type(g).__name__ == "GroupedTensorStorage"
    # TE's Python make_grouped_tensor sizes per member instead (9216 B here): the stand-in does not use it
    per_member = sum(_ru(m, 128) * 8 for m in (160, 0, 384, 480))
    assert per_member == 9216 != g.scale_inv.numel()


def _ru(x: int, a: int) -> int:
    return -(-x // a) * a


def test_bulk_split_quantize_gives_storages_without_fake_dtype() -> None:
    x = torch.empty(1024, 256, dtype=torch.bfloat16)
    with emulation(Machine("sm100"), {}, {}):
        parts = si.split_quantize(x, [160, 0, 864], [_mxfp8() for _ in range(3)])
    assert [type(p).__name__ for p in parts] == ["MXFP8TensorStorage"] * 3
    assert all(p._dtype == torch.float32 for p in parts)  # cast.cpp:1171-1181 passes no fake_dtype
    assert _shapes(parts[0]) == {
        "_rowwise_data": ((160, 256), torch.uint8), "_rowwise_scale_inv": ((256, 8), torch.uint8),
        "_columnwise_data": ((160, 256), torch.uint8), "_columnwise_scale_inv": ((8, 256), torch.uint8),
    }  # fmt: skip
    assert _shapes(parts[1])["_rowwise_scale_inv"] == ((0, 8), torch.uint8)


def test_float8_delayed_follows_the_emulated_architecture() -> None:
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Quantizer

    q = Float8Quantizer(torch.ones(1), torch.zeros(1), tex.DType.kFloat8E4M3)
    q.internal = True
    x = torch.empty(144, 256, dtype=torch.bfloat16)
    with emulation(Machine("sm90"), {}, {}):
        hopper = _shapes(si.quantize(x, q))
    with emulation(Machine("sm100"), {}, {}):
        blackwell = _shapes(si.quantize(x, q))
    # as the H200's real kernel allocated (144 x 256 split, reports/emulated/standin-diff.json)
    assert hopper == {
        "_data": ((144, 256), torch.uint8),
        "_transpose": ((256, 144), torch.uint8),
        "_scale_inv": ((1,), torch.float32),
    }
    # quantizer.cpp:363-384: non-TN architectures keep one _data buffer and no transpose
    assert blackwell == {"_data": ((144, 256), torch.uint8), "_scale_inv": ((1,), torch.float32)}


def test_current_scaling_group_quantize_shares_one_scale_inv() -> None:
    from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer

    q = Float8CurrentScalingQuantizer(tex.DType.kFloat8E4M3, device=torch.device("cpu"))
    q.internal = True
    with emulation(Machine("sm90"), {}, {}):
        g = si.group_quantize(torch.empty(512, 128, dtype=torch.bfloat16), q, 4, torch.tensor([128, 0, 256, 128]))
    assert g.scale_inv is g.columnwise_scale_inv and g.scale_inv.shape == (4,)
    assert g.tensor_offsets.tolist() == [0, 16384, 16384, 49152, 65536]  # splits_to_offsets(first_dims, L1)
    with emulation(Machine("sm100"), {}, {}):  # non-TN: rowwise data only, so no columnwise scale either
        b = si.group_quantize(torch.empty(512, 128, dtype=torch.bfloat16), q, 4, torch.tensor([128, 0, 256, 128]))
    assert b.columnwise_data is None and b.columnwise_scale_inv is None and b.scale_inv.shape == (4,)


def test_offsets_are_computed_as_the_kernel_computes_them() -> None:
    sizes, (points, base, xin, xout) = si.splits_to_offsets_multi(
        torch.tensor([3, 0, 5]),
        "cpu",
        strides=[1, 1, 16, 32],
        include_leading_zero=[False, True, True, True],
        dtypes=[torch.int32, torch.int64, torch.int64, torch.int64],
    )
    assert points.tolist() == [3, 3, 8] and points.dtype == torch.int32
    assert base.tolist() == [0, 3, 3, 8] and xin.tolist() == [0, 48, 48, 128] and xout.tolist() == [0, 96, 96, 256]


def test_fc1_cudnn_stand_in_allocates_what_the_frontend_returns() -> None:
    m, n1, g = 256, 512, 2
    out = CUDNN_STANDINS["grouped_gemm_glu_wrapper_sm100"](
        a_tensor=torch.empty(m, 128, 1, dtype=torch.float8_e4m3fn),
        sfa_tensor=torch.empty(8, dtype=torch.float8_e8m0fnu),
        padded_offsets=torch.empty(g, dtype=torch.int32),
        n=n1,
        c_dtype=torch.bfloat16,
        d_dtype=torch.float8_e4m3fn,
        sf_vec_size=32,
    )
    assert out["c_tensor"].shape == (m, n1, 1) and out["c_tensor"].stride() == (n1, 1, m * n1)
    assert out["d_tensor"].shape == out["d_col_tensor"].shape == (m, n1 // 2, 1)
    assert out["amax_tensor"] is None  # fp8 D
    assert out["sfd_row_tensor"].numel() == 2 * 2 * 512 and out["sfd_row_tensor"].dtype == torch.float8_e8m0fnu
    with pytest.raises(MissingStandIn, match="cudnn.grouped_gemm_srelu_wrapper_sm100"):
        CUDNN_STANDINS["grouped_gemm_srelu_wrapper_sm100"]()


def test_backward_cudnn_stand_ins_allocate_what_the_frontend_returns() -> None:
    """dGLU (FC2 dgrad + dSwiGLU): D row and column (M, 2N, 1) with the frontend's strides, MXFP8
    scales for FP8 A, amax only for a bf16 D; wgrad writes the caller's buffers and allocates none."""
    m, n, g = 256, 192, 2
    dprob = torch.zeros(m, 1, 1)
    out = CUDNN_STANDINS["grouped_gemm_dglu_wrapper_sm100"](
        a_tensor=torch.empty(m, 128, 1, dtype=torch.float8_e4m3fn),
        sfa_tensor=torch.empty(8, dtype=torch.float8_e8m0fnu),
        b_tensor=torch.empty(n, 128, g, dtype=torch.float8_e4m3fn),
        d_dtype=torch.float8_e4m3fn,
        sf_vec_size=32,
        dprob_tensor=dprob,
        generate_dbias=False,
    )
    assert out["d_row_tensor"].shape == out["d_col_tensor"].shape == (m, 2 * n, 1)
    assert out["d_row_tensor"].stride() == (2 * n, 1, m * 2 * n) and out["dprob_tensor"] is dprob
    assert out["amax_tensor"] is None and out["dbias_tensor"] is None
    assert out["sfd_row_tensor"].shape == (32, 4, 2, 4, 3, 1)  # (1, M/128, ceil(2N/32/4), 32, 4, 4) permuted
    nv = CUDNN_STANDINS["grouped_gemm_dglu_wrapper_sm100"](
        a_tensor=torch.empty(m, 64, 1, dtype=torch.float4_e2m1fn_x2),
        sfa_tensor=torch.empty(8, dtype=torch.float8_e4m3fn),
        b_ptrs=torch.empty(g, dtype=torch.int64),
        n=n,
        d_dtype=torch.bfloat16,
        sf_vec_size=16,
        dprob_tensor=dprob,
        generate_dbias=True,
    )
    assert (
        nv["sfd_row_tensor"] is None
        and nv["amax_tensor"].shape == (g, 2, 1)
        and nv["dbias_tensor"].shape == (g, 2 * n, 1)
    )
    w = torch.empty(g, 8, 8)
    assert CUDNN_STANDINS["grouped_gemm_wgrad_wrapper_sm100"](wgrad_tensor=w)["wgrad_tensor"] is w
    with pytest.raises(MissingStandIn):
        CUDNN_STANDINS["grouped_gemm_wgrad_wrapper_sm100"](a_tensor=w)


# ---- the TE target's options ---------------------------------------------------------------------
def test_target_flags_and_cpu_skip_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from memaudit.spec import CaseSpec
    from memaudit.targets.registry import get_target
    from memaudit.te.targets.grouped_mlp import TEGroupedMLPTarget

    t = TEGroupedMLPTarget()
    with pytest.raises(UsageError) as exc:
        t.configure({"kernels": "fake"})
    assert exc.value.key == "--kernels"
    with pytest.raises(UsageError) as exc:
        t.configure({"kernels": "emulated", "arch": "sm120"})
    assert exc.value.key == "--arch"
    with pytest.raises(UsageError) as exc:
        t.configure({"kernels": "emulated", "cublaslt": "thirteen"})
    assert exc.value.key == "--cublaslt"
    e = t.configure({"kernels": "emulated", "cublaslt": "13.6.0"})
    assert e.options == {} and t.emulated is None  # a new, configured target; this one is unchanged
    assert e.emulated is not None and e.emulated.fused and e.emulated.cublaslt == 130600
    with pytest.raises(AttributeError, match="frozen"):
        e.emulated = None
    t = e
    assert os.environ[FUSED_ENV] == "0"  # off for TE's import; set inside each emulated forward
    spec = CaseSpec.make(get_target("te-grouped-mlp"), "nvfp4", 1, tokens=256, hidden=128, ffn=128, device="cpu")
    assert "emulated kernels run TE's forward on CUDA tensors (device 'cpu'" in t.skip_reason(spec)
    assert "gemm.py:658" in t.skip_reason(spec)
    from memaudit.te.emulate.host import unavailable

    if unavailable() is None:  # a GPU, or torch's CUDA build for fake CUDA
        assert t.skip_reason(spec.replace(device="cuda")) is None
    for bad in ("yes", 1):
        assert (
            t.skip_reason(spec.replace(device="cuda", options={"fused": bad}))
            == f"option fused must be true or false, got {bad!r}"
        )
    real = TEGroupedMLPTarget()
    real = real.configure({"fused": False})
    assert "choose it with --fused/--no-fused" in real.skip_reason(spec.replace(device="cuda", options={"fused": True}))


# ---- labels and gates ----------------------------------------------------------------------------
EMU = Emulation(
    {"arch": "sm100", "cublaslt": "13.6.0", "cudnn_frontend": "1.28.0", "kernels": "emulated"},
    ["quantize"],
    [],
    ["GroupedMLP_CuTeGEMMGLU"],
)
CASE = "te-grouped-mlp/nvfp4/g1/t256-h128-f128/bf16"


def _emulated_report() -> Report:
    case = make_case(CASE)
    case.emulation = EMU
    return Report(cases=[case])


def test_emulated_cases_round_trip_and_measured_cases_carry_no_key() -> None:
    d = _emulated_report().cases[0].to_dict()
    assert d["execution"] == "emulated" and d["emulation"]["machine"]["arch"] == "sm100"
    back = validate_case(d)
    assert back.emulation == EMU and back.execution == "emulated"
    measured = make_case(CASE).to_dict()
    assert "execution" not in measured and "emulation" not in measured
    with pytest.raises(UsageError, match="execution"):
        validate_case({**measured, "execution": "emulated"})


def test_compare_refuses_emulated_against_measured_unless_asked() -> None:
    measured = Report(cases=[make_case(CASE)])
    with pytest.raises(UsageError, match="--allow-emulated"):
        compare_reports(measured, _emulated_report())
    cmp = compare_reports(measured, _emulated_report(), allow_emulated=True)
    assert any("emulated in one report and measured in the other" in w for w in cmp.env_warnings)
    assert not compare_reports(_emulated_report(), _emulated_report()).env_warnings


def test_tables_and_markdown_say_emulated() -> None:
    from rich.console import Console

    from memaudit.render.markdown import render_markdown
    from memaudit.render.tables import summary_table

    console = Console(width=200, record=True)
    console.print(summary_table(_emulated_report().cases))
    assert "emulated sm100" in console.export_text()
    md = render_markdown(_emulated_report(), None, name="x")
    assert "emulated sm100" in md and "stand-in kernels; not measured" in md


def test_a_scenario_can_require_measured_cases(tmp_path) -> None:
    from memaudit.judge.scenario import evaluate, load_scenario

    path = tmp_path / "s.toml"
    body = (
        '[cases]\ntarget = "te-grouped-mlp"\nrecipes = ["nvfp4"]\ngroups = [1]\ntokens = 256\nhidden = 128\nffn = '
        "128\n\n"
        '[[budget]]\nname = "small"\nmax_bytes = "1 GiB"\n'
    )
    path.write_text("require_measured = true\n" + body, encoding="utf-8")
    verdicts = evaluate(_emulated_report(), load_scenario(path))
    assert [(v.rule, v.verdict) for v in verdicts] == [("require_measured", "fail")]
    path.write_text(body, encoding="utf-8")
    assert [(v.rule, v.verdict) for v in evaluate(_emulated_report(), load_scenario(path))] == [("small", "pass")]


def test_a_scenario_can_ask_for_emulated_kernels(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memaudit.judge.scenario import load_scenario

    body = (
        '[cases]\ntarget = "te-grouped-mlp"\nrecipes = ["nvfp4"]\ngroups = [1]\ntokens = 256\nhidden = 128\nffn = 128\n'
    )
    path = tmp_path / "s.toml"
    path.write_text('[flags]\nkernels = "emulated"\narch = "sm100"\n' + body, encoding="utf-8")
    assert load_scenario(path).flags == {"kernels": "emulated", "arch": "sm100"}
    path.write_text('[flags]\nkernel = "emulated"\n' + body, encoding="utf-8")
    with pytest.raises(UsageError) as exc:
        load_scenario(path)
    assert exc.value.key == "flags.kernel" and "did you mean 'kernels'" in str(exc.value)
    # through the CLI: the scenario's flags reach the target (on CPU the cell says why it cannot run)
    from typer.testing import CliRunner

    from memaudit.cli import app

    path.write_text('[flags]\nkernels = "emulated"\n' + body, encoding="utf-8")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["run", "--scenario", str(path), "--device", "cpu", "--json", str(out)])
    assert "emulated kernels run TE's forward on CUDA tensors (device 'cpu'" in out.read_text(encoding="utf-8"), (
        result.output
    )

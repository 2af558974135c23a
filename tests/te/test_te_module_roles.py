"""Operand roles of TE's modules beyond the grouped MLP (te-internals §12): ``te.Linear``, the norms
(``te.LayerNorm``, ``te.RMSNorm`` and their ``te.ops`` ops), ``te.LayerNormLinear`` and
``te.LayerNormMLP``, run by TE's real Python on emulated kernels (fake CUDA with no GPU, a child
process per case).

Each row is named by the autograd Function or op that saved it and TE's save order in it; the
bytes are checked against an independent saved-tensor hook pair of the test's own that sums
storages by address, and a control shows the same checks fail where the classifier knows no
module but the grouped MLP (slot names, the grouped MLP's activation roles on a norm).
"""

from __future__ import annotations

import dataclasses
import os
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

import memaudit.te.capture.roles as roles  # noqa: E402

T, H, F = 128, 256, 512
BF16 = torch.bfloat16


def _build(name: str) -> Any:
    import transformer_engine.pytorch as te

    module_kw: dict[str, Any] = {"device": "cuda", "params_dtype": BF16}

    def linear(n_in: int, n_out: int) -> Any:
        return te.ops.BasicLinear(n_in, n_out, device="cuda", dtype=BF16)

    return {
        "Linear": lambda: te.Linear(H, F, **module_kw),
        "LayerNorm": lambda: te.LayerNorm(H, **module_kw),
        "RMSNorm": lambda: te.RMSNorm(H, **module_kw),
        "ops.LayerNorm": lambda: te.ops.LayerNorm(H, device="cuda", dtype=BF16),
        "ops.RMSNorm": lambda: te.ops.RMSNorm(H, device="cuda", dtype=BF16),
        "LayerNormLinear": lambda: te.LayerNormLinear(H, F, **module_kw),
        "LayerNormLinear(RMSNorm)": lambda: te.LayerNormLinear(H, F, normalization="RMSNorm", **module_kw),
        "LayerNormMLP": lambda: te.LayerNormMLP(H, F, **module_kw),
        "LayerNormMLP(RMSNorm)": lambda: te.LayerNormMLP(H, F, normalization="RMSNorm", **module_kw),
        "LayerNormMLP(relu)": lambda: te.LayerNormMLP(H, F, activation="relu", **module_kw),
        "LayerNormMLP(swiglu)": lambda: te.LayerNormMLP(H, F, activation="swiglu", **module_kw),
        "Sequential(GELU)": lambda: te.ops.Sequential(linear(H, F), te.ops.GELU(), linear(F, H)),
        "Sequential(Bias, ReLU)": lambda: te.ops.Sequential(
            linear(H, F), te.ops.Bias(F, device="cuda", dtype=BF16), te.ops.ReLU(), linear(F, H)
        ),
        "Sequential(SwiGLU)": lambda: te.ops.Sequential(linear(H, 2 * F), te.ops.SwiGLU(), linear(F, H)),
        "LayerNormMLP(no nvfusion)": lambda: _without_bias_gelu_nvfusion(lambda: te.LayerNormMLP(H, F, **module_kw)),
    }[name]()


def _without_bias_gelu_nvfusion(make: Callable[[], Any]) -> Any:
    """TE reads ``NVTE_BIAS_GELU_NVFUSION`` when the module is made (layernorm_mlp.py:2005-2007);
    set in the child that runs the case only."""
    os.environ["NVTE_BIAS_GELU_NVFUSION"] = "0"
    return make()


def _hook_pair(sizes: dict[int, tuple[int, bool]]) -> torch.autograd.graph.saved_tensors_hooks:
    """An independent pack/unpack pair: every packed tensor's storage, by its address, with its
    size in bytes and whether it is a parameter's."""

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        address = t.data_ptr() - t.storage_offset() * t.element_size()
        sizes[address] = (storage.nbytes(), sizes.get(address, (0, False))[1] or isinstance(t, torch.nn.Parameter))
        return t

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


def run(name: str, recipe: str, arch: str = "sm100") -> dict[str, Any]:
    """One forward of module ``name`` under ``recipe`` on an emulated ``arch``, captured by memaudit
    and by the test's own hook pair (inside the capture, so both see every save)."""

    def body() -> dict[str, Any]:
        import transformer_engine.pytorch as te

        import memaudit
        from memaudit.te.emulate.run import emulated
        from memaudit.te.machine.probes import make_recipe

        module = _build(name)
        x = torch.randn(T, H, device="cuda", dtype=BF16, requires_grad=True)
        rec = make_recipe(recipe)
        sizes: dict[int, tuple[int, bool]] = {}
        with emulated(arch), memaudit.capture() as cap, _hook_pair(sizes):
            with te.autocast(enabled=rec is not None, recipe=rec):
                y = module(x)
        report = cap.report(outputs=y)
        return {
            "rows": [dataclasses.asdict(row) for row in report.rows],
            "totals": report.totals.to_dict(),
            "warnings": list(report.warnings),
            "hook_bytes": sum(n for n, _ in sizes.values()),
            "hook_param_bytes": sum(n for n, param in sizes.values() if param),
        }

    return host.call_in_child(arch, body)


GROUPED_MLP_ROLES = ("fc1.", "fc2.")
GROUPED_MLP_ACTIVATION = ("activation.activation_in", "activation.scales")

# (module, recipe) -> (operand, kind, orientation, format) of every row, on an emulated sm100
BF16_LINEAR = {
    ("input", "tensor", None, "bf16"),
    ("weight", "tensor", None, "bf16"),
    ("weight_param", "tensor", None, "bf16"),
    ("bias", "tensor", None, "bf16"),
}
FP8_LINEAR = {  # Blackwell: an FP8 tensor's columnwise copy is its _data (te-internals §11.1)
    ("input", "data", "rowwise", "fp8"),
    ("input", "scale_inv", "both", "fp8"),
    ("weight", "data", "rowwise", "fp8"),
    ("weight", "scale_inv", "both", "fp8"),
    ("weight_param", "tensor", None, "bf16"),
    ("bias", "tensor", None, "bf16"),
}
LAYERNORM = {("input", "tensor", None, "bf16"), ("mu", "tensor", None, "fp32"), ("rsigma", "tensor", None, "fp32")}
RMSNORM = LAYERNORM - {("mu", "tensor", None, "fp32")}
LN_PARAMS = {("ln_weight", "tensor", None, "bf16")}
BF16_LNLINEAR = BF16_LINEAR | LN_PARAMS | LAYERNORM | {("ln_out", "tensor", None, "bf16")}
FP8_LNLINEAR = (FP8_LINEAR - {("input", "data", "rowwise", "fp8"), ("input", "scale_inv", "both", "fp8")}) | {
    ("input", "tensor", None, "bf16"),
    ("ln_out", "data", "rowwise", "fp8"),
    ("ln_out", "scale_inv", "both", "fp8"),
    ("mu", "tensor", None, "fp32"),
    ("rsigma", "tensor", None, "fp32"),
    *LN_PARAMS,
}


def _fp8(operand: str) -> set[tuple[str, str, str | None, str]]:
    """An FP8 tensor on Blackwell whose columnwise copy is its _data (te-internals §11.1)."""
    return {(operand, "data", "rowwise", "fp8"), (operand, "scale_inv", "both", "fp8")}


MLP_PARAMS = {(n, "tensor", None, "bf16") for n in ("fc1_weight_param", "fc1_bias", "fc2_weight_param", "fc2_bias")}
FP8_LNMLP = (  # te-internals §12.4: fc1_out is the GEMM's high-precision output, act_out FC2's FP8 input
    {("input", "tensor", None, "bf16"), ("fc1_out", "tensor", None, "bf16")}
    | _fp8("ln_out")
    | _fp8("fc1_weight")
    | _fp8("act_out")
    | _fp8("fc2_weight")
    | MLP_PARAMS
    | LN_PARAMS
    | (LAYERNORM - {("input", "tensor", None, "bf16")})
)
BF16_LNMLP = (
    {  # the GEMM+GELU fusion: fc1_out is its pre-GELU output (te-internals §12.4)
        (name, "tensor", None, "bf16") for name in ("input", "ln_out", "fc1_weight", "fc1_out", "act_out", "fc2_weight")
    }
    | MLP_PARAMS
    | LN_PARAMS
    | (LAYERNORM - {("input", "tensor", None, "bf16")})
)
SEQUENTIALS = ("Sequential(GELU)", "Sequential(Bias, ReLU)", "Sequential(SwiGLU)")
BF16_SEQUENTIAL = {(name, "tensor", None, "bf16") for name in ("linear.input", "linear.weight", "activation.input")}
FP8_SEQUENTIAL = _fp8("linear.input") | _fp8("linear.weight") | {("activation.input", "tensor", None, "bf16")}
EXPECTED: dict[tuple[str, str], set[tuple[str, str, str | None, str]]] = {
    ("Linear", "bf16"): BF16_LINEAR,
    ("Linear", "fp8-current"): FP8_LINEAR,
    ("LayerNormLinear", "bf16"): BF16_LNLINEAR,
    ("LayerNormLinear", "fp8-current"): FP8_LNLINEAR,
    ("LayerNormLinear(RMSNorm)", "bf16"): BF16_LNLINEAR - {("mu", "tensor", None, "fp32")},
    ("LayerNormLinear(RMSNorm)", "fp8-current"): FP8_LNLINEAR - {("mu", "tensor", None, "fp32")},
    ("LayerNormMLP", "fp8-current"): FP8_LNMLP,
    ("LayerNormMLP(RMSNorm)", "fp8-current"): FP8_LNMLP - {("mu", "tensor", None, "fp32")},
    ("LayerNormMLP(relu)", "fp8-current"): FP8_LNMLP,
    ("LayerNormMLP(swiglu)", "fp8-current"): FP8_LNMLP,
    ("LayerNormMLP(no nvfusion)", "bf16"): BF16_LNMLP,
    **{(seq, "bf16"): BF16_SEQUENTIAL for seq in SEQUENTIALS},
    **{(seq, "fp8-current"): FP8_SEQUENTIAL for seq in SEQUENTIALS},
    **{(norm, r): LAYERNORM for norm in ("LayerNorm", "ops.LayerNorm") for r in ("bf16", "fp8-current")},
    **{(norm, r): RMSNORM for norm in ("RMSNorm", "ops.RMSNorm") for r in ("bf16", "fp8-current")},
}
NORMS = ("LayerNorm", "RMSNorm", "ops.LayerNorm", "ops.RMSNorm")


def problems(name: str, case: dict[str, Any]) -> list[str]:
    """What is wrong with a case's rows: a slot name for an operand, a grouped-MLP role, bytes that
    differ from the independent hook's, a warning."""
    out = []
    for row in case["rows"]:
        operand = row.get("operand") or ""
        if "saved_tensors[" in operand or "ctx." in operand or not operand:
            out.append(f"row {row['index']} ({row['saved_as']}) is named by its slot: {operand!r}")
        if operand.startswith(GROUPED_MLP_ROLES) or operand in GROUPED_MLP_ACTIVATION:
            out.append(f"row {row['index']} ({row['saved_as']}) of {name} carries a grouped-MLP role: {operand}")
    totals = case["totals"]
    if not case["hook_bytes"]:
        out.append("the independent hook saw nothing")
    if case["hook_bytes"] != totals["physical_bytes"]:
        out.append(f"physical bytes {totals['physical_bytes']} != the hook's {case['hook_bytes']}")
    if case["hook_bytes"] - case["hook_param_bytes"] != totals["saved_bytes"]:
        out.append(f"saved bytes {totals['saved_bytes']} != the hook's {case['hook_bytes'] - case['hook_param_bytes']}")
    by_storage = {row["storage"]: row["storage_bytes"] for row in case["rows"] if row.get("storage")}
    if sum(by_storage.values()) != case["hook_bytes"]:
        out.append(f"the rows' storages sum to {sum(by_storage.values())}, the hook's to {case['hook_bytes']}")
    out += [f"warning: {w}" for w in case["warnings"]]
    return out


def fields(case: dict[str, Any]) -> set[tuple[str, str, str | None, str]]:
    return {(r["operand"], r["kind"], r.get("orientation"), r["format"]) for r in case["rows"]}


@pytest.fixture(scope="module")
def cases() -> Callable[..., dict[str, Any]]:
    from memaudit.te.emulate.run import import_te_modules

    import_te_modules()  # once here, not in each child
    done: dict[tuple[str, str, str], dict[str, Any]] = {}

    def get(name: str, recipe: str, arch: str = "sm100") -> dict[str, Any]:
        key = (name, recipe, arch)
        if key not in done:
            done[key] = run(name, recipe, arch)
        return done[key]

    return get


@pytest.mark.parametrize(("name", "recipe"), sorted(EXPECTED))
def test_every_row_is_named_by_the_function_or_op_that_saved_it(
    name: str, recipe: str, cases: Callable[..., dict[str, Any]]
) -> None:
    case = cases(name, recipe)
    assert case["rows"], "nothing saved: the test checks nothing"
    assert problems(name, case) == []
    assert fields(case) == EXPECTED[(name, recipe)]


@pytest.mark.parametrize("recipe", ["fp8-delayed", "mxfp8", "fp8-block", "nvfp4"])
@pytest.mark.parametrize("name", ["Linear", "LayerNormLinear", "LayerNorm", "RMSNorm"])
def test_the_other_recipes_name_every_row_too(name: str, recipe: str, cases: Callable[..., dict[str, Any]]) -> None:
    case = cases(name, recipe)
    assert case["rows"] and problems(name, case) == []
    operands = {r["operand"] for r in case["rows"]}
    if name in NORMS:  # a norm's save does not depend on the recipe
        assert fields(case) == EXPECTED[(name, "bf16")]
        return
    assert {"weight", "weight_param", "bias"} <= operands
    quantized = "nvfp4" if recipe == "nvfp4" else "mxfp8" if recipe == "mxfp8" else "fp8"
    quantized = "fp8-block" if recipe == "fp8-block" else quantized
    weight = {(k, o) for op, k, o, f in fields(case) if op == "weight" and f == quantized}
    assert ("data", "rowwise") in weight and any(k == "scale_inv" for k, _ in weight)
    x = "input" if name == "Linear" else "ln_out"
    x_rows = {(k, o) for op, k, o, f in fields(case) if op == x}
    if recipe == "fp8-delayed":  # Blackwell: the columnwise copy is _data (te-internals §11.1)
        assert x_rows == {("data", "rowwise"), ("scale_inv", "both")}
    else:  # only the columnwise usage is kept (te-internals §12.1, §12.3)
        assert ("data", "columnwise") in x_rows and all(o == "columnwise" for _, o in x_rows)


def test_on_hopper_the_fp8_input_is_its_columnwise_transpose(cases: Callable[..., dict[str, Any]]) -> None:
    """sm90 runs TN GEMMs only: the saved FP8 input is the transpose (te-internals §11.1, §12.1)."""
    case = cases("Linear", "fp8-current", "sm90")
    assert problems("Linear", case) == []
    inputs = [r for r in case["rows"] if r["operand"] == "input"]
    assert {(r["kind"], r["orientation"], r["slot"]) for r in inputs} == {
        ("data", "columnwise", "_transpose"),
        ("scale_inv", "both", "_scale_inv"),
    }
    assert [r["shape"] for r in inputs if r["kind"] == "data"] == [[H, T]]


def test_control_without_the_module_roles_the_checks_fail(
    monkeypatch: pytest.MonkeyPatch, cases: Callable[..., dict[str, Any]]
) -> None:
    """The classifier as it was before te-internals §12: only the grouped MLP's roles. Linear's
    rows keep their autograd slots and the norm's input takes the grouped MLP's activation role,
    and the checks above say so (the children fork from here, so they see the patch)."""
    monkeypatch.setattr(roles, "OP_SAVES", {})
    monkeypatch.setattr(roles, "FUNCTION_SAVES", {})
    linear = run("Linear", "bf16")
    assert [r["operand"] for r in linear["rows"]][:1] == ["Linear:_LinearBackward.saved_tensors[0]"]
    assert any("is named by its slot" in p for p in problems("Linear", linear))
    norm = run("LayerNorm", "bf16")
    grouped_mlp_roles = ["activation.activation_in", "activation.scales", "activation.scales"]
    assert [r["operand"] for r in norm["rows"]] == grouped_mlp_roles
    assert any("carries a grouped-MLP role: activation.activation_in" in p for p in problems("LayerNorm", norm))
    # the bytes are the same either way: names change, nothing else
    assert linear["totals"] == cases("Linear", "bf16")["totals"]


def test_a_function_whose_save_order_changed_keeps_its_slot_names_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TE whose _Linear saves a fifth entry: nothing is named by a guessed position."""
    monkeypatch.setitem(roles.FUNCTION_SAVES, "_Linear", ("input", "weight", "weight_param", "bias", "extra"))
    case = run("Linear", "bf16")
    assert all("saved_tensors[" in r["operand"] for r in case["rows"])
    assert any("_Linear saved 4 entries, not the 5 of its save order" in w for w in case["warnings"])


def test_the_norm_backward_stand_ins_allocate_what_the_cpp_does() -> None:
    """normalization.cpp:23-25 and 224-225: dx like x, dgamma (and dbeta) like gamma; and the GEMM
    output shape of gemm.cpp:41-82 for the fprop (TN), dgrad (NN) and wgrad (NT) layouts."""
    from memaudit.te.emulate import standins

    x, gamma, stat = torch.empty(T, H, dtype=BF16), torch.empty(H, dtype=BF16), torch.empty(T)
    dx, dgamma, dbeta = standins.layernorm_bwd(x, x, stat, stat, gamma, 0, False)
    assert (dx.shape, dgamma.shape, dbeta.shape) == (x.shape, gamma.shape, gamma.shape)
    assert [t.shape for t in standins.rmsnorm_bwd(x, x, stat, gamma, 0, False)] == [x.shape, gamma.shape]
    w = (F, H)
    assert standins.gemm_output_shape(w, True, (4, T // 4, H), False) == (4, T // 4, F)  # fprop keeps x's lead dims
    assert standins.gemm_output_shape(w, False, (T, F), False) == (T, H)  # dgrad
    assert standins.gemm_output_shape((T, H), False, (T, F), True) == (F, H)  # wgrad
    with pytest.raises(RuntimeError, match="Invalid matrix dimensions"):
        standins.gemm_output_shape(w, True, (T, F), False)


MLP_OPERANDS = {  # te-internals §12.4; fc1_out_without_bias only with the BF16 bias+GELU fusion
    "input", "ln_weight", "ln_out", "fc1_weight", "fc1_weight_param", "fc1_bias", "fc1_out", "act_out",
    "fc2_weight", "fc2_weight_param", "fc2_bias", "mu", "rsigma",
}  # fmt: skip


@pytest.mark.parametrize("recipe", ["fp8-delayed", "mxfp8", "fp8-block", "nvfp4"])
def test_layernorm_mlp_names_every_row_under_the_other_recipes(
    recipe: str, cases: Callable[..., dict[str, Any]]
) -> None:
    case = cases("LayerNormMLP", recipe)
    assert case["rows"] and problems("LayerNormMLP", case) == []
    assert {r["operand"] for r in case["rows"]} == MLP_OPERANDS
    quantized = {"mxfp8": "mxfp8", "fp8-block": "fp8-block", "nvfp4": "nvfp4"}.get(recipe, "fp8")
    for operand in ("ln_out", "fc1_weight", "act_out", "fc2_weight"):
        kinds = {(k, f) for op, k, _, f in fields(case) if op == operand}
        assert ("data", quantized) in kinds and ("scale_inv", quantized) in kinds, (operand, kinds)
    assert {f for op, _, _, f in fields(case) if op == "fc1_out"} == {"bf16"}


BF16_BIAS_GELU_NVFUSION = (
    "TE's LayerNormMLP under BF16 adds FC1's bias and applies GELU in bias_gelu_fused "
    "(layernorm_mlp.py:627-630; on by default, NVTE_BIAS_GELU_NVFUSION, :2005-2007), which TE compiles "
    "with torch.compile (jit.py:20-42); Inductor asks the CUDA driver for the device's properties, and "
    "fake CUDA has no driver"
)


def test_layernorm_mlp_under_bf16_needs_torch_compile(cases: Callable[..., dict[str, Any]]) -> None:
    """The BF16 default path is not emulated: a documented skip with torch's own reason, never a
    pass. On a machine where it runs, the fused path saves fc1_out_without_bias, not fc1_out."""
    try:
        case = cases("LayerNormMLP", "bf16")
    except host.ChildFailed as exc:
        # torch's reason: no driver, or (in a forked child of a process that touched torch.cuda) no re-init
        said = [line.strip() for line in str(exc).splitlines() if "InductorError: RuntimeError:" in line]
        if not said or "get_device_properties" not in str(exc):
            raise
        pytest.skip(f"{BF16_BIAS_GELU_NVFUSION}: torch: {said[-1]}")
    assert problems("LayerNormMLP", case) == []
    assert {r["operand"] for r in case["rows"]} == MLP_OPERANDS - {"fc1_out"} | {"fc1_out_without_bias"}


def test_control_without_the_layernorm_mlp_roles_the_checks_fail(
    monkeypatch: pytest.MonkeyPatch, cases: Callable[..., dict[str, Any]]
) -> None:
    """Without _LayerNormMLP's save order its rows keep their autograd slots (and the weights kept
    on ctx their attribute names), and the checks above say so; the bytes are the same."""
    monkeypatch.delitem(roles.FUNCTION_SAVES, "_LayerNormMLP")
    monkeypatch.delitem(roles.FUNCTION_CTX, "_LayerNormMLP")
    case = run("LayerNormMLP", "fp8-current")
    assert [r["operand"] for r in case["rows"]][:1] == ["LayerNormMLP:_LayerNormMLPBackward.saved_tensors[0]"]
    found = problems("LayerNormMLP", case)
    assert any("is named by its slot" in p for p in found)
    assert any("ctx.fc1_weight" in p for p in found)
    assert case["totals"] == cases("LayerNormMLP", "fp8-current")["totals"]


def test_the_activation_stand_ins_allocate_what_the_cpp_does() -> None:
    """activation.cpp:17-32 and 128-145: the output has the input's shape, its last dim halved for
    the gated activations; the backward's grad_input the input's shape; both in the input's dtype."""
    from memaudit.te.emulate import standins

    x = torch.empty(T, F, dtype=BF16)
    for name in standins.ACTIVATIONS:
        assert standins.STANDINS[name](x, None).shape == (T, F)
        assert standins.STANDINS[f"d{name}"](x, x, None).shape == (T, F)
    for name in standins.GATED_ACTIVATIONS:
        y = standins.STANDINS[name](x, None)
        assert (y.shape, y.dtype) == ((T, F // 2), BF16)
    assert standins.STANDINS["dswiglu"](x[:, : F // 2], x, None).shape == (T, F)
    assert standins.STANDINS["clamped_dswiglu"](x[:, : F // 2], x, None, 7.0, 1.0, 1.0).shape == (T, F)


@pytest.mark.parametrize("name", SEQUENTIALS)
def test_each_basic_op_of_a_fused_sequential_names_its_own_saves(
    name: str, cases: Callable[..., dict[str, Any]]
) -> None:
    """In save order: FC1's linear (input, weight), the activation's input, FC2's linear; Bias saves
    nothing (te-internals §12.5), fused with the linear or not."""
    case = cases(name, "bf16")
    assert [r["operand"] for r in case["rows"]] == [
        "linear.input",
        "linear.weight",
        "activation.input",
        "linear.input",
        "linear.weight",
    ]
    fp8 = cases(name, "fp8-current")
    assert [(r["operand"], r["kind"]) for r in fp8["rows"]][2:5] == [
        ("linear.weight", "data"),
        ("linear.weight", "scale_inv"),
        ("activation.input", "tensor"),
    ]


def test_control_without_the_basic_op_roles_the_sequential_takes_the_grouped_mlps(
    monkeypatch: pytest.MonkeyPatch, cases: Callable[..., dict[str, Any]]
) -> None:
    """Without the entries for BasicLinear and the activations, their saves take the grouped MLP's
    activation roles (the classifier's fallback, te-internals §2.4), and the checks say so."""
    for op in ("BasicLinear", "_ActivationOperation", "SwiGLU", "ClampedSwiGLU"):
        monkeypatch.delitem(roles.OP_SAVES, op)
    case = run("Sequential(GELU)", "fp8-current")
    assert {r["operand"] for r in case["rows"]} == {"activation.activation_in", "activation.scales"}
    assert any("carries a grouped-MLP role: activation.scales" in p for p in problems("Sequential(GELU)", case))
    assert case["totals"] == cases("Sequential(GELU)", "fp8-current")["totals"]


@pytest.mark.parametrize("recipe", ["fp8-delayed", "mxfp8", "fp8-block", "nvfp4"])
def test_a_fused_sequential_names_every_row_under_the_other_recipes(
    recipe: str, cases: Callable[..., dict[str, Any]]
) -> None:
    case = cases("Sequential(GELU)", recipe)
    assert case["rows"] and problems("Sequential(GELU)", case) == []
    assert {r["operand"] for r in case["rows"]} == {"linear.input", "linear.weight", "activation.input"}

"""TE's read sets (``memaudit/te/capture/reads.py``) on TE's real storage objects: a GEMM reads one
orientation of each quantized operand, by TE's layout rules; the watcher wraps every ``tex``
function for the block and puts it back; an entry point with no read set makes what it received
``unknown``."""

from __future__ import annotations

import pytest
import torch

try:
    import transformer_engine.pytorch  # noqa: F401
    import transformer_engine_torch as tex
except Exception as exc:  # noqa: BLE001 - not installed, or broken
    pytest.skip(f"TransformerEngine is not importable here: {type(exc).__name__}: {exc}", allow_module_level=True)

from memaudit.capture import reads as core  # noqa: E402
from memaudit.te.capture import reads  # noqa: E402
from memaudit.te.emulate import standins as si  # noqa: E402
from memaudit.te.emulate.context import Machine, emulation  # noqa: E402
from memaudit.te.emulate.kernels import tex_functions  # noqa: E402

pytestmark = pytest.mark.te


def _mxfp8() -> object:
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer

    q = MXFP8Quantizer(tex.DType.kFloat8E4M3, rowwise=True, columnwise=True)
    q.internal = True
    return si.quantize(torch.empty(128, 256, dtype=torch.bfloat16), q)


def _float8() -> object:
    from transformer_engine.pytorch.tensor.float8_tensor import Float8Quantizer

    q = Float8Quantizer(torch.ones(1), torch.zeros(1), tex.DType.kFloat8E4M3)
    q.internal = True
    return si.quantize(torch.empty(128, 256, dtype=torch.bfloat16), q)


def _ids(ts: list[object]) -> set[int]:
    return {id(t) for t in ts}


def test_an_mxfp8_gemm_operand_is_read_in_one_orientation() -> None:
    t = _mxfp8()
    row = _ids([t._rowwise_data, t._rowwise_scale_inv])  # type: ignore[attr-defined]
    col = _ids([t._columnwise_data, t._columnwise_scale_inv])  # type: ignore[attr-defined]
    # cublaslt_gemm.cu CanonicalizeGemmInput: A transposed / B not transposed read rowwise
    assert _ids(reads._operand(t, True, True, grouped=False)) == row
    assert _ids(reads._operand(t, False, False, grouped=False)) == row
    assert _ids(reads._operand(t, False, True, grouped=False)) == col  # dgrad's weight (NN)
    assert _ids(reads._operand(t, True, False, grouped=False)) == col  # wgrad's dy (NT)


def test_fp8_tensor_scaling_reads_the_transpose_only_where_the_architecture_is_tn_only() -> None:
    with emulation(Machine("sm90"), {}, {}):
        hopper = _float8()
        a_nn = reads._operand(hopper, False, True, grouped=False)
        a_tn = reads._operand(hopper, True, True, grouped=False)
    assert _ids(a_nn) == _ids([hopper._transpose, hopper._scale_inv])  # type: ignore[attr-defined]
    assert _ids(a_tn) == _ids([hopper._data, hopper._scale_inv])  # type: ignore[attr-defined]
    with emulation(Machine("sm100"), {}, {}):
        blackwell = _float8()
        assert _ids(reads._operand(blackwell, False, True, grouped=False)) == _ids(
            [blackwell._data, blackwell._scale_inv]
        )  # type: ignore[attr-defined]


def test_a_multi_tensor_gemm_reads_nothing_of_a_member_that_got_no_tokens() -> None:
    """te-internals §11.4: the member loop skips a member whose A or B is empty."""
    with emulation(Machine("sm90"), {}, {}):
        weights = [_float8(), _float8()]
        inputs = [torch.empty(64, 256, dtype=torch.bfloat16), torch.empty(0, 256, dtype=torch.bfloat16)]
        bias = [torch.empty(128), torch.empty(128)]
        d = [torch.empty(64, 128), torch.empty(0, 128)]
        gemm = reads.READ_SETS["te_general_grouped_gemm"]
        read = _ids(gemm(weights, True, inputs, False, d, None, [64, 0], bias, None, False, [], False, [], 0, True))
        member0 = _ids([*reads._operand(weights[0], True, True, grouped=False), inputs[0], bias[0], d[0]])
    assert member0 <= read
    assert not read & _ids([*reads.every_buffer(weights[1]), inputs[1], bias[1], d[1]])


def test_an_entry_point_with_no_read_set_leaves_what_it_received_unknown() -> None:
    saved = torch.empty(16)
    other = torch.empty(16)
    storages = {"s0": [core._wref(saved.untyped_storage())], "s1": [core._wref(other.untyped_storage())]}
    obs = core.Observer(storages)
    fake_kernel = reads.routed("bgrad_group_quantize", lambda *a: None, answers=True)
    gemm = reads.routed("te_general_grouped_gemm_for_discrete_out", lambda *a: a[4], answers=True)
    with core.observing(obs), core.evaluating():
        fake_kernel(saved)
        gemm(torch.empty(4), False, other, True, [torch.empty(4)], None, None, torch.empty(1), torch.empty(1))
    assert obs.verdict("s0")[0] == core.UNKNOWN and "tex.bgrad_group_quantize" in (obs.verdict("s0")[1] or "")
    assert obs.verdict("s1") == (core.READ, "tex.te_general_grouped_gemm_for_discrete_out")


def test_the_watcher_wraps_every_tex_function_for_the_block_and_steps_aside_under_an_emulation() -> None:
    originals = tex_functions()
    obs = core.Observer({})
    with core.observing(obs, [reads.watch]):
        inside = tex_functions()
        assert all(inside[n] is not originals[n] for n in originals if n not in ("get_cublasLt_version",))
        with emulation(Machine("sm100"), {}, {}):
            assert reads._TABLE_DEPTH[0] == 1
    assert tex_functions() == originals
    assert reads._TABLE_DEPTH[0] == 0

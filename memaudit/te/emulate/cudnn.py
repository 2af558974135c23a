"""Stand-ins for the cuDNN-frontend kernels TE's fused grouped MLP imports from ``cudnn``.

The fused op imports them by name (``ops/fused/grouped_mlp.py:1058``, ``1072``, ``2760``,
``2781``) and calls them with keyword arguments only. A wrapper the forward reaches without a
stand-in raises :class:`~memaudit.te.emulate.kernels.MissingStandIn` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from memaudit.te.emulate.kernels import MissingStandIn

WRAPPERS = (
    "grouped_gemm_glu_wrapper_sm100", "grouped_gemm_dglu_wrapper_sm100", "grouped_gemm_quant_wrapper_sm100",
    "grouped_gemm_wgrad_wrapper_sm100", "grouped_gemm_srelu_wrapper_sm100", "grouped_gemm_dsrelu_wrapper_sm100",
)  # fmt: skip
"""The wrappers ``is_supported()`` imports (the GLU and unary fused ops, forward and backward)."""


def _missing(name: str) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        raise MissingStandIn(f"cudnn.{name}")

    call.__name__ = name
    return call


def _cd(x: int, a: int) -> int:
    return -(-int(x) // a)


def _fc1_outputs(kwargs: dict[str, Any], *, hadamard: bool) -> dict[str, Any]:
    """What the FC1 GLU wrapper allocates and returns (cudnn-frontend
    ``grouped_gemm_glu/api.py:1212-1587``, 1.23.0): ``c_tensor`` (M, N1, 1) in ``c_dtype`` with
    strides (N1, 1, M*N1); ``d_tensor`` and ``d_col_tensor`` (M, N1/2, 1) in ``d_dtype``; for
    FP8 A with FP8/E8M0 scales (MXFP8) the 6-D row/column scale tensors of D; ``amax_tensor``
    (G, 1) fp32 when D is bf16/fp16. The hadamard variant (``grouped_gemm_glu_hadamard/api.py``)
    returns c, d and amax, plus ``post_rht_amax_tensor`` (G, 1) fp32, which TE reads
    (grouped_mlp.py:1738-1739; newer than 1.23.0)."""
    a = kwargs["a_tensor"]
    m = int(a.shape[0])
    g = int(kwargs["padded_offsets"].numel())
    n1 = int(kwargs["n"]) if kwargs.get("b_tensor") is None else int(kwargs["b_tensor"].shape[0])
    n_out = n1 // 2
    dev = a.device
    c_dtype, d_dtype = kwargs["c_dtype"], kwargs["d_dtype"]
    out: dict[str, Any] = {
        "c_tensor": torch.empty_strided((m, n1, 1), (n1, 1, m * n1), dtype=c_dtype, device=dev),
        "d_tensor": torch.empty_strided((m, n_out, 1), (n_out, 1, m * n_out), dtype=d_dtype, device=dev),
    }
    low_precision_d = d_dtype in (torch.bfloat16, torch.float16)
    out["amax_tensor"] = torch.full((g, 1), float("-inf"), dtype=torch.float32, device=dev) if low_precision_d else None
    if hadamard:
        out["post_rht_amax_tensor"] = torch.full((g, 1), float("-inf"), dtype=torch.float32, device=dev)
        return out
    out["d_col_tensor"] = torch.empty_strided((m, n_out, 1), (n_out, 1, m * n_out), dtype=d_dtype, device=dev)
    sfa = kwargs["sfa_tensor"]
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    if a.dtype in fp8 and sfa.dtype in (*fp8, torch.float8_e8m0fnu):
        vec = int(kwargs["sf_vec_size"])
        row = torch.empty((1, _cd(m, 128), _cd(_cd(n_out, vec), 4), 32, 4, 4), dtype=sfa.dtype, device=dev)
        col = torch.empty((1, _cd(n_out, 128), _cd(_cd(m, vec), 4), 32, 4, 4), dtype=sfa.dtype, device=dev)
        out["sfd_row_tensor"] = row.permute(3, 4, 1, 5, 2, 0)
        out["sfd_col_tensor"] = col.permute(3, 4, 1, 5, 2, 0)
    else:
        out["sfd_row_tensor"] = out["sfd_col_tensor"] = None
    return out


def grouped_gemm_glu_wrapper_sm100(**kwargs: Any) -> dict[str, Any]:
    """FC1 GEMM + GLU (grouped_mlp.py:1693)."""
    return _fc1_outputs(kwargs, hadamard=False)


def grouped_gemm_glu_hadamard_wrapper_sm100(**kwargs: Any) -> dict[str, Any]:
    """FC1 GEMM + GLU + RHT amaxes for NVFP4 (grouped_mlp.py:1690-1691)."""
    return _fc1_outputs(kwargs, hadamard=True)


def grouped_gemm_quant_wrapper_sm100(**kwargs: Any) -> dict[str, Any]:
    """FC2 for MXFP8 (grouped_mlp.py:1906): TE 2.19 on passes its own ``d_tensor`` and ignores
    the return, so nothing it allocates outlives the call; the stand-in allocates nothing. TE 2.17
    and 2.18 pass none and read the wrapper's ``d_tensor`` (grouped_mlp.py:1424-1425 in 2.17.1):
    (M, N, 1) in ``d_dtype`` with strides (N, 1, M*N), as the GLU wrapper's D."""
    if kwargs.get("d_tensor") is not None:
        return {"d_tensor": kwargs["d_tensor"]}
    a = kwargs["a_tensor"]
    m = int(a.shape[0])
    n = int(kwargs["n"]) if kwargs.get("b_tensor") is None else int(kwargs["b_tensor"].shape[0])
    d = torch.empty_strided((m, n, 1), (n, 1, m * n), dtype=kwargs["d_dtype"], device=a.device)
    return {"d_tensor": d}


CUDNN_STANDINS: dict[str, Callable[..., Any]] = {name: _missing(name) for name in WRAPPERS}
CUDNN_STANDINS.update({
    "grouped_gemm_glu_wrapper_sm100": grouped_gemm_glu_wrapper_sm100,
    "grouped_gemm_glu_hadamard_wrapper_sm100": grouped_gemm_glu_hadamard_wrapper_sm100,
    "grouped_gemm_quant_wrapper_sm100": grouped_gemm_quant_wrapper_sm100,
})
"""``cudnn`` name -> stand-in (a module attribute of the fake ``cudnn`` module)."""

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


def _dact_outputs(kwargs: dict[str, Any], *, glu: bool) -> dict[str, Any]:
    """What the backward GEMM + dactivation wrappers allocate and return (cudnn-frontend 1.23.0
    ``grouped_gemm_dglu/api.py:1360-1410``, ``grouped_gemm_dsrelu/api.py:1300-1350``): N from
    ``b_tensor`` (N, K, L) or, with discrete weights, ``n`` and ``b_ptrs`` (L); N_out = 2N for a
    GLU, N for dSReLU; ``d_row_tensor`` and ``d_col_tensor`` (M, N_out, 1) in ``d_dtype`` with
    strides (N_out, 1, M*N_out); for FP8 A with E8M0/E4M3 scales (MXFP8) the 6-D row scales
    (1, ceil(M/128), ceil(ceil(N_out/vec)/4), 32, 4, 4) and column scales (1, ceil(N_out/128),
    ceil(ceil(M/vec)/4), 32, 4, 4), permuted (3, 4, 1, 5, 2, 0); ``amax_tensor`` fp32 -inf, (L, 2, 1)
    for a GLU and (L, 1) for dSReLU, when D is bf16/fp16; ``dbias_tensor`` zeros (L, N_out, 1) bf16
    when ``generate_dbias``; ``dprob_tensor`` the caller's (accumulated into)."""
    a = kwargs["a_tensor"]
    m = int(a.shape[0])
    b = kwargs.get("b_tensor")
    if b is not None:
        n_weight, groups = int(b.shape[0]), int(b.shape[2])
    else:
        n_weight, groups = int(kwargs["n"]), int(kwargs["b_ptrs"].shape[0])
    n_out = 2 * n_weight if glu else n_weight
    dev, d_dtype = a.device, kwargs["d_dtype"]
    out: dict[str, Any] = {
        "d_row_tensor": torch.empty_strided((m, n_out, 1), (n_out, 1, m * n_out), dtype=d_dtype, device=dev),
        "d_col_tensor": torch.empty_strided((m, n_out, 1), (n_out, 1, m * n_out), dtype=d_dtype, device=dev),
        "dprob_tensor": kwargs.get("dprob_tensor"),
        "sfd_row_tensor": None,
        "sfd_col_tensor": None,
        "amax_tensor": None,
        "dbias_tensor": None,
    }
    sfa = kwargs["sfa_tensor"]
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    if a.dtype in fp8 and sfa.dtype in (torch.float8_e8m0fnu, torch.float8_e4m3fn):
        vec = int(kwargs["sf_vec_size"])
        row = torch.empty((1, _cd(m, 128), _cd(_cd(n_out, vec), 4), 32, 4, 4), dtype=sfa.dtype, device=dev)
        col = torch.empty((1, _cd(n_out, 128), _cd(_cd(m, vec), 4), 32, 4, 4), dtype=sfa.dtype, device=dev)
        out["sfd_row_tensor"] = row.permute(3, 4, 1, 5, 2, 0)
        out["sfd_col_tensor"] = col.permute(3, 4, 1, 5, 2, 0)
    if d_dtype in (torch.bfloat16, torch.float16):
        out["amax_tensor"] = torch.full(
            (groups, 2, 1) if glu else (groups, 1), float("-inf"), dtype=torch.float32, device=dev
        )
    if kwargs.get("generate_dbias"):
        out["dbias_tensor"] = torch.zeros((groups, n_out, 1), dtype=torch.bfloat16, device=dev)
    return out


def grouped_gemm_dglu_wrapper_sm100(**kwargs: Any) -> dict[str, Any]:
    """FC2 dgrad GEMM + dGLU (grouped_mlp.py:2398)."""
    return _dact_outputs(kwargs, glu=True)


def grouped_gemm_dsrelu_wrapper_sm100(**kwargs: Any) -> dict[str, Any]:
    """FC2 dgrad GEMM + dSReLU (grouped_mlp.py:2398). The recompute of FC2's input
    (``use_dsrelu_reuse``, grouped_mlp.py:2434-2440) and a wrapper-allocated ``dprob_tensor`` are
    not emulated."""
    if kwargs.get("use_dsrelu_reuse") or kwargs.get("dprob_tensor") is None:
        raise MissingStandIn("cudnn.grouped_gemm_dsrelu_wrapper_sm100 (FC2 input recompute or its own dprob)")
    return _dact_outputs(kwargs, glu=False)


def grouped_gemm_wgrad_wrapper_sm100(**kwargs: Any) -> dict[str, Any]:
    """FC1/FC2 wgrad GEMM (grouped_mlp.py:733-752, ``_cudnn_compute_wgrad``): writes the caller's
    ``wgrad_tensor`` (dense) or the buffers ``wgrad_ptrs`` point at (discrete) and returns
    ``wgrad_tensor`` (cudnn-frontend 1.23.0 ``grouped_gemm_wgrad/api.py:579-672``); it allocates
    only when given neither (not TE's call)."""
    if kwargs.get("wgrad_tensor") is None and kwargs.get("wgrad_ptrs") is None:
        raise MissingStandIn("cudnn.grouped_gemm_wgrad_wrapper_sm100 (with no output given)")
    return {"wgrad_tensor": kwargs.get("wgrad_tensor")}


CUDNN_STANDINS: dict[str, Callable[..., Any]] = {name: _missing(name) for name in WRAPPERS}
CUDNN_STANDINS.update(
    {
        "grouped_gemm_glu_wrapper_sm100": grouped_gemm_glu_wrapper_sm100,
        "grouped_gemm_glu_hadamard_wrapper_sm100": grouped_gemm_glu_hadamard_wrapper_sm100,
        "grouped_gemm_quant_wrapper_sm100": grouped_gemm_quant_wrapper_sm100,
        "grouped_gemm_dglu_wrapper_sm100": grouped_gemm_dglu_wrapper_sm100,
        "grouped_gemm_dsrelu_wrapper_sm100": grouped_gemm_dsrelu_wrapper_sm100,
        "grouped_gemm_wgrad_wrapper_sm100": grouped_gemm_wgrad_wrapper_sm100,
    }
)
"""``cudnn`` name -> stand-in (a module attribute of the fake ``cudnn`` module)."""

"""Kernel stand-ins per TE version family: what differs between TE versions for the emulation.

The stand-ins of :mod:`.standins` are written against TE 2.20.2. Older TE Python (a release, or a
git revision laid over the installed compiled parts, :mod:`memaudit.te.history`) differs in three
ways that matter to the emulation, each detected in the imported TE's own Python (not by version
number, so that a git revision between releases gets what it has):

- **Allocation** (``allocation``): TE 2.19 added a pure-Python mirror of the C++ quantizer
  allocation (``dynamo/tensor_spec.py``: ``TensorSpec``, ``Quantizer.inner_tensor_specs``), which
  the 2.20.2 stand-ins use. Where it is absent (2.18 and older), ``empty_quantized`` builds the
  same buffers with memaudit's own copy of those rules (:mod:`.allocation`, TE 2.20.2's
  ``inner_tensor_specs`` of the MXFP8, NVFP4 and FP8 quantizers) through the storage and tensor
  classes' constructors, which take the same arguments from 2.14 to 2.20.2 (checked by
  ``tests/te/test_te_history.py`` against ``TensorSpec`` on the installed TE).
- **Entry points by name**: ``tex.splits_to_offsets(first_dims, logical_last_dim)`` (GroupedLinear
  up to 2.18; csrc/extensions/misc.cpp) next to 2.19's ``splits_to_offsets_multi``.
- **Fused-op modules and their registration** (``forward_grouped_mlp`` / ``backward_grouped_mlp``
  up to 2.16, ``grouped_mlp`` from 2.17): handled in :mod:`.context` by reading each module's own
  import-time registrations.

Each entry point's call sites in a TE tree are checked against its stand-in's signature by
``tests/te/test_te_history.py`` (:func:`call_sites`): the signature drift test.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from memaudit.te.emulate.standins import empty_quantized

# ---- entry points by name ------------------------------------------------------------------------


def splits_to_offsets(first_dims: torch.Tensor, logical_last_dim: int) -> torch.Tensor:
    """``tex.splits_to_offsets`` (TE 2.17-2.18 csrc/extensions/misc.cpp:23-39): int64 [G+1],
    ``[0, cumsum(first_dims) * logical_last_dim]`` on first_dims' device (metadata later Python
    reads, so computed)."""
    offs = torch.cumsum(first_dims.to(torch.int64), 0) * int(logical_last_dim)
    return torch.cat([torch.zeros(1, dtype=torch.int64, device=offs.device), offs])


def swiglu(input: torch.Tensor, quantizer: Any) -> Any:  # noqa: A002 - TE's name
    """``tex.swiglu`` (csrc/extensions/activation.cpp): the GLU output, last dim halved, in the
    input's dtype or quantized with ``quantizer`` (TE 2.15-2.18's ``ScaledSwiGLU._glu_forward``
    calls it with None and scales in Python, ops/basic/swiglu.py:561-562 in 2.17.1)."""
    shape = (*input.shape[:-1], input.shape[-1] // 2)
    if quantizer is None:
        return torch.empty(shape, dtype=input.dtype, device=input.device)
    return empty_quantized(quantizer, shape, input.dtype, input.device)


def get_device_pointer_for_data_and_scales(
    data_tensors: list[torch.Tensor],
    scale_tensors: list[torch.Tensor],
    swizzle: bool = False,
    rowwise: bool = True,
    data_dtype: Any = None,
) -> tuple[Any, ...]:
    """``tex.get_device_pointer_for_data_and_scales`` (TE 2.15-2.16 csrc/extensions/utils.cpp:51-162,
    the fused MXFP8 op's discrete weights): int64 [G] data pointers and int64 [G] scale pointers,
    each a device tensor of its own (``collect_pointers_in_device_tensor``), and the swizzled
    scales' keep-alive buffer: one uint8 buffer of every scale tensor's bytes, each start rounded
    up to 16 (an empty uint8 tensor without ``swizzle``)."""
    g = len(data_tensors)
    if g == 0:
        raise ValueError("data_tensors must not be empty.")
    device = data_tensors[0].device
    if swizzle:
        total = 0
        for t in scale_tensors:
            total = -(-total // 16) * 16 + int(t.numel())  # E8M0 / E4M3 scales: one byte each
        keep = torch.empty(total, dtype=torch.uint8, device=device)
    else:
        keep = torch.empty(0, dtype=torch.uint8, device=device)
    return (torch.empty(g, dtype=torch.int64, device=device), torch.empty(g, dtype=torch.int64, device=device), keep)


def transform_and_copy_data_ptrs_to_device(
    transform_type: str, tensors: list[torch.Tensor], device: Any
) -> tuple[Any, Any]:
    """``tex.transform_and_copy_data_ptrs_to_device`` (main between PR #3048 and 2.17,
    csrc/extensions/utils.cpp:41-150 at 920a7db1a): without a transform, the pointers only (int64
    [G]) and None; with a ``uniform_*_swizzle``, the pointers of the swizzled scales and their one
    uint8 buffer, each tensor's scale bytes (one byte per E8M0 / E4M3 scale) rounded up to 16."""
    g = len(tensors)
    ptrs = torch.empty(g, dtype=torch.int64, device=device)
    if not transform_type or g == 0:
        return ptrs, None
    stride = -(-int(tensors[0].numel()) // 16) * 16
    return ptrs, torch.empty(stride * g, dtype=torch.uint8, device=device)


def bulk_allocate(
    shapes: list[list[int]], dtypes: list[torch.dtype], device: Any = None, alignments: list[int] | None = None
) -> list[torch.Tensor]:
    """``tex.bulk_allocate`` (TE 2.16-2.17 csrc/extensions/allocate.cpp:15-90, the grouped linear's
    weight gradients in backward): one buffer, each tensor an ``at::from_blob`` view of it with a
    Storage of its own (an empty shape: ``at::empty``), so a separate tensor of each shape and
    dtype stands in for it."""
    dev = device if device is not None else "cuda"
    return [
        torch.empty(tuple(int(d) for d in shape), dtype=dtype, device=dev)
        for shape, dtype in zip(shapes, dtypes, strict=True)
    ]


def dswiglu(grad: torch.Tensor, input: torch.Tensor, quantizer: Any = None) -> Any:  # noqa: A002 - TE's name
    """``tex.dswiglu`` (TE 2.16-2.17 csrc/extensions/activation.cpp:129-160, ``dactivation_helper``;
    the swiglu op's backward before the scaled variants): the input gradient in the input's shape,
    made by the quantizer's ``create_tensor`` (the input's dtype without one)."""
    if quantizer is None:
        return torch.empty(tuple(input.shape), dtype=input.dtype, device=input.device)
    return empty_quantized(quantizer, input.shape, input.dtype, input.device)


FAMILY_STANDINS: dict[str, Callable[..., Any]] = {
    "bulk_allocate": bulk_allocate,
    "dswiglu": dswiglu,
    "transform_and_copy_data_ptrs_to_device": transform_and_copy_data_ptrs_to_device,
    "splits_to_offsets": splits_to_offsets,
    "swiglu": swiglu,
    "get_device_pointer_for_data_and_scales": get_device_pointer_for_data_and_scales,
}
"""Entry points older TE Python reaches that TE 2.20.2's grouped-MLP forward does not."""


def standins(base: dict[str, Callable[..., Any]], tex_names: set[str]) -> dict[str, Callable[..., Any]]:
    """The stand-in table for the imported TE: ``base`` plus the family's, for names ``tex`` has."""
    return {k: v for k, v in {**base, **FAMILY_STANDINS}.items() if k in tex_names}


# ---- the signature drift check -------------------------------------------------------------------


@dataclass(frozen=True)
class CallSite:
    """One call of a ``tex`` entry point in TE's Python: where, how many positional arguments,
    which keywords (``*args`` / ``**kwargs`` at a call site make it unknowable: ``starred``)."""

    name: str
    file: str
    line: int
    positional: int
    keywords: tuple[str, ...]
    starred: bool

    def binds(self, fn: Callable[..., Any]) -> str | None:
        """None where ``fn`` accepts this call's arguments, else why not."""
        if self.starred:
            return None
        try:
            inspect.signature(fn).bind(*range(self.positional), **dict.fromkeys(self.keywords))
        except TypeError as exc:
            return (
                f"{self.file}:{self.line} tex.{self.name}({self.positional} positional, keywords "
                f"{list(self.keywords)}): {exc}"
            )
        return None


def call_sites(tree: Path, names: set[str]) -> Iterator[CallSite]:
    """Calls ``tex.NAME(...)`` (and of names imported from ``transformer_engine_torch``) in a TE tree's
    torch-side Python, for ``names`` (``sub.name`` for a submodule's function)."""
    root = Path(tree) / "transformer_engine"
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts and rel.parts[0] == "jax":
            continue
        try:
            module = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        aliases = {
            a.asname or a.name
            for n in ast.walk(module)
            if isinstance(n, ast.Import)
            for a in n.names
            if a.name == "transformer_engine_torch"
        }
        imported = {
            a.asname or a.name: a.name
            for n in ast.walk(module)
            if isinstance(n, ast.ImportFrom) and n.module == "transformer_engine_torch"
            for a in n.names
        }
        for node in ast.walk(module):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in aliases:
                name = f.attr
            elif (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Attribute)
                and isinstance(f.value.value, ast.Name)
                and f.value.value.id in aliases
            ):
                name = f"{f.value.attr}.{f.attr}"
            elif isinstance(f, ast.Name) and f.id in imported:
                name = imported[f.id]
            if name in names:
                starred = any(isinstance(a, ast.Starred) for a in node.args) or any(
                    k.arg is None for k in node.keywords
                )
                yield CallSite(
                    name,
                    rel.as_posix(),
                    node.lineno,
                    len(node.args),
                    tuple(k.arg for k in node.keywords if k.arg is not None),
                    starred,
                )

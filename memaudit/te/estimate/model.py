"""What TE 2.20.2 saves on each path, buffer by buffer, in pack-hook order (the ``te-2.20`` variant).

:class:`Model` walks FC1, the activation and FC2 of one :class:`~.config.Config` and records each
saved buffer in an :class:`~.buffers.Accumulator`, with the TE source line that saves it.
"""

from __future__ import annotations

from collections.abc import Sequence

from memaudit.te.estimate.buffers import Accumulator
from memaudit.te.estimate.config import Config
from memaudit.te.estimate.shapes import (
    FORMAT,
    HP_DTYPES,
    ITEMSIZE,
    SINGLE_CONTAINER,
    SLOTS,
    grouped_buffers_cpp,
    prod,
    scale_shape,
    single_buffers,
    unpadded_scale_elems,
)

# Source notes (TE 2.20.2 file:line) attached to rows.
_SRC = {
    "split_bf16_x": "torch.split views of the input (grouped_linear.py:1246)",
    "split_q_x": "tex.split_quantize, then update_usage(rowwise=False) (grouped_linear.py:1244,1293)",
    "split_bulk_x": "tex.split_quantize bulk-allocates columnwise data+scales (csrc/extensions/cast.cpp "
    "split_quantize), update_usage(rowwise=False) (grouped_linear.py:1293)",
    "split_q_w": "weight quantized on the fly, update_usage(rowwise=False) (grouped_linear.py:938,1286)",
    "param_w": "weight Parameter saved as is (grouped_linear.py:935)",
    "split_sizes": "split_sizes as int64 on the device (grouped_linear.py:1042)",
    "fused_split_sizes": "split_sizes as int64 on the device (tex.splits_to_offsets_multi, grouped_mlp.py:1311)",
    "grouped_meta": "tex.splits_to_offsets_multi bulk views, 16-B aligned (grouped_linear.py:1326)",
    "grouped_bf16_x": "GroupedTensorStorage over the input, no copy (grouped_linear.py:1381)",
    "grouped_q_x": "tex.group_quantize, scales sized from totals (grouped_linear.py:1372; csrc/quantizer.cpp "
    "create_grouped_tensor)",
    "grouped_prune": "rowwise pruned when columnwise exists (grouped_linear.py:1464-1469)",
    "grouped_q_w": "weight quantized on the fly with both usages, no update_usage (grouped_linear.py:938)",
    "swiglu_in": "ScaledSwiGLU saves its input, the FC1 output (ops/basic/swiglu.py:552)",
    "swiglu_scales": "ScaledSwiGLU saves scales = maybe_dequantize(probs, FC1 dtype) (swiglu.py:541,552)",
    "fused_meta": "tex.splits_to_offsets_multi bulk views, 16-B aligned (ops/fused/grouped_mlp.py:1311)",
    "fused_save": "fc1_ctx.save_for_backward (ops/fused/grouped_mlp.py:1960)",
    "fused_x": "tex.group_quantize, scales sized from totals (grouped_mlp.py:326; csrc/quantizer.cpp "
    "create_grouped_tensor)",
    "fused_dense_x": "single-group dense path wraps tex.quantize output as a GroupedTensor (grouped_mlp.py:259-307)",
    "fused_nvfp4_keep": "kept: NVFP4 skips the rowwise prune (`if not use_nvfp4`, "
    "ops/fused/grouped_mlp.py:1934-1938); PR #3545 drops it",
    "fused_mxfp8_prune": "rowwise pruned for MXFP8 (ops/fused/grouped_mlp.py:1934-1938)",
    "fused_w": "per-expert quantizer(weight), rowwise+columnwise (ops/fused/grouped_mlp.py:1370,1408)",
    "fused_act_in": "cuDNN c_tensor, pre-activation FC1 output (grouped_mlp.py:1711)",
    "fused_scales": "the caller's probs extra input, as passed (grouped_mlp.py:1261)",
    "fused_mxfp8_fc2x": "GroupedTensorStorage over cuDNN d_col/sfd_col outputs (grouped_mlp.py:1799); dtype from "
    "cuDNN (unsure)",
    "dup_split": "same tensor as fc1.split_sizes",
    "dup_offsets": "same tensor as the offsets row of this operand",
}


class Model:
    """Builds the te-2.20 buffer list for one Config."""

    def __init__(self, c: Config) -> None:
        self.c = c
        self.acc = Accumulator()
        self.fmt = FORMAT[c.recipe]
        self.hp = HP_DTYPES[c.dtype]

    # ---- shared pieces ------------------------------------------------------------------------
    def split_sizes_storage(self, op: str, shared: int | None) -> int:
        """Row for an op's int64 split sizes; returns its storage (shared when the caller passed int64)."""
        c = self.c
        if shared is not None and c.split_sizes_dtype == "int64":
            self.acc.plain(f"{op}.split_sizes", (c.groups,), "int64", storage=shared, note=_SRC["dup_split"])
            return shared
        note = _SRC["fused_split_sizes"] if c.fused else _SRC["split_sizes"]
        self.acc.plain(f"{op}.split_sizes", (c.groups,), "int64", note=note)
        return self.acc.bufs[-1].storage  # type: ignore[return-value]

    def weights(self, op: str, n: int, k: int, *, rowwise: bool, note: str) -> None:
        """Each group's (N, K) weight: the BF16 Parameter itself, else a quantized copy (columnwise kept).

        The BF16 Parameters are views of one packed (G, N, K) buffer (``reset_parameters``,
        ops/basic/grouped_linear.py:443-450), so they share one storage."""
        packed = None
        if self.c.recipe == "bf16":
            packed = self.acc.storage(self.c.groups * n * k * ITEMSIZE[self.hp])
        for g in range(self.c.groups):
            if self.c.recipe == "bf16":
                self.acc.plain(
                    f"{op}.weight[{g}]",
                    (n, k),
                    self.hp,
                    storage=packed,
                    soff=g * n * k * ITEMSIZE[self.hp],
                    param=True,
                    group=g,
                    note=_SRC["param_w"],
                )
            else:
                self.quantized_single(
                    f"{op}.weight[{g}]", g, n, k, rowwise=rowwise, columnwise=True, block_dim=2, note=note
                )

    def quantized_single(
        self,
        operand: str,
        group: int | None,
        m: int,
        k: int,
        *,
        rowwise: bool,
        columnwise: bool,
        block_dim: int,
        note: str,
    ) -> None:
        """One quantized tensor's buffers, each in its own allocation (``Quantizer::create_tensor``)."""
        c = self.c
        cont = SINGLE_CONTAINER[c.recipe]
        for slot, shape, dtype in single_buffers(
            c.recipe, m, k, rowwise=rowwise, columnwise=columnwise, arch=c.arch, block_dim=block_dim
        ):
            ideal = None
            if "scale_inv" in slot and c.recipe in ("mxfp8", "nvfp4", "fp8-block"):
                ideal = (
                    unpadded_scale_elems(c.recipe, m, k, "columnwise" in slot, block_dim=block_dim) * ITEMSIZE[dtype]
                )
            self.acc.te(operand, group, cont, slot, self.fmt, shape, dtype, ideal=ideal, note=note)

    def activation(self, act_in_storage: int | None = None) -> None:
        c = self.c
        if c.fused:
            self.acc.plain("activation.activation_in", (c.tokens, 2 * c.ffn), "bfloat16", note=_SRC["fused_act_in"])
            self.acc.plain("activation.scales", (c.tokens,), c.probs_dtype, note=_SRC["fused_scales"])
            return
        self.acc.plain(
            "activation.activation_in", (c.tokens, 2 * c.ffn), self.hp, storage=act_in_storage, note=_SRC["swiglu_in"]
        )
        self.acc.plain(
            "activation.scales",
            (c.tokens,),
            self.hp,
            note=_SRC["swiglu_scales"]
            + ("" if c.probs_dtype == self.hp else f"; a {self.hp} copy of {c.probs_dtype} probs"),
        )

    # ---- unfused-split -------------------------------------------------------------------------
    def split_linear(self, op: str, k: int, n: int, x_storage: int | None, shared_sizes: int | None) -> int:
        """Rows of one GroupedLinear on the split-quantize path; returns the split-sizes storage."""
        c, acc = self.c, self.acc
        sizes = self.split_sizes_storage(op, shared_sizes)
        operand = f"{op}.input"
        if c.recipe == "bf16":
            off = 0
            item = ITEMSIZE[self.hp]
            for g, m in enumerate(c.splits):
                acc.plain(operand, (m, k), self.hp, storage=x_storage, soff=off, group=g, note=_SRC["split_bf16_x"])
                off += m * k * item
        elif c.recipe in ("fp8-delayed", "fp8-current"):
            for g, m in enumerate(c.splits):
                self.quantized_single(
                    operand, g, m, k, rowwise=False, columnwise=True, block_dim=1, note=_SRC["split_q_x"]
                )
        else:
            self.split_bulk_inputs(operand, k)
        self.weights(op, n, k, rowwise=False, note=_SRC["split_q_w"])
        return sizes

    def split_bulk_inputs(self, operand: str, k: int) -> None:
        """Block-FP8 / MXFP8 / NVFP4 ``tex.split_quantize``: one bulk buffer for all groups' columnwise views."""
        c, acc = self.c, self.acc
        per_group = [
            single_buffers(c.recipe, m, k, rowwise=False, columnwise=True, arch=c.arch, block_dim=1) for m in c.splits
        ]
        # bulk_allocate (csrc/extensions/allocate.cpp:24-90) hands out each view through
        # ``from_blob``: a Storage of its own, exactly the view's bytes (as the H200's real
        # splits_to_offsets_multi and split_quantize results show, reports/emulated/standin-diff.json).
        cont = SINGLE_CONTAINER[c.recipe]
        for g, bufs in enumerate(per_group):
            m = c.splits[g]
            for slot, shape, dtype in bufs:
                ideal = None
                if "scale_inv" in slot:
                    ideal = unpadded_scale_elems(c.recipe, m, k, True) * ITEMSIZE[dtype]
                acc.te(operand, g, cont, slot, self.fmt, shape, dtype, ideal=ideal, note=_SRC["split_bulk_x"])

    # ---- unfused-grouped -----------------------------------------------------------------------
    def offsets_bulk(self, names: Sequence[str]) -> dict[str, tuple[int, int]]:
        """splits_to_offsets_multi views: split_points int32 (G), the rest int64 (G+1); bulk-allocated
        16-B aligned (misc.cpp:63-75), each view a ``from_blob`` Storage of its own."""
        c, acc = self.c, self.acc
        g = c.groups
        sizes = [4 * g] + [8 * (g + 1)] * (len(names) - 1)
        return {n: (acc.storage(size), 0) for n, size in zip(names, sizes, strict=True)}

    def grouped_input(
        self,
        operand: str,
        k: int,
        x_storage: int | None,
        sizes_storage: int,
        offsets: tuple[int, int],
        *,
        fused: bool,
        prune_rowwise: bool,
        prune_note: str,
    ) -> None:
        """A GroupedTensorStorage input reaching the hook as its 10 raw slots (None slots skipped)."""
        c, acc = self.c, self.acc
        cont = "GroupedTensorStorage"
        g = c.groups
        if c.recipe == "bf16":
            acc.te(
                operand,
                None,
                cont,
                "rowwise_data",
                "bf16",
                (c.tokens * k,),
                self.hp,
                storage=x_storage,
                note=_SRC["grouped_bf16_x"],
            )
        else:
            bufs = grouped_buffers_cpp(c.recipe, c.tokens, k, g, arch=c.arch, block_dim=1)
            src = _SRC["fused_x"] if fused else _SRC["grouped_q_x"]
            has_col = "columnwise_data" in bufs
            for slot in SLOTS[cont][:7]:
                if slot not in bufs:
                    continue
                if c.recipe == "fp8-current" and slot == "scale_inv" and has_col:
                    continue  # the same tensor as columnwise_scale_inv, and pruned with the rowwise data
                numel, dtype = bufs[slot]
                ideal = None
                if "scale_inv" in slot and c.recipe in ("mxfp8", "nvfp4", "fp8-block"):
                    colw = slot == "columnwise_scale_inv"
                    ideal = sum(unpadded_scale_elems(c.recipe, m, k, colw) for m in c.splits) * ITEMSIZE[dtype]
                prune = None
                note = src
                if has_col and slot in ("rowwise_data", "scale_inv"):
                    if prune_rowwise:
                        continue
                    prune = "rowwise"
                    note = prune_note
                acc.te(operand, None, cont, slot, self.fmt, (numel,), dtype, ideal=ideal, note=note, prune=prune)
        acc.te(
            operand, None, cont, "first_dims", self.fmt, (g,), "int64", storage=sizes_storage, note=_SRC["dup_split"]
        )
        acc.te(
            operand,
            None,
            cont,
            "tensor_offsets",
            self.fmt,
            (g + 1,),
            "int64",
            storage=offsets[0],
            soff=offsets[1],
            note=_SRC["dup_offsets"],
        )

    def grouped_linear(self, op: str, k: int, n: int, x_storage: int | None, shared_sizes: int | None) -> int:
        c = self.c
        sizes = self.split_sizes_storage(op, shared_sizes)
        names = ("split_points", "base_split_offsets", "input_offsets", "output_offsets")
        meta = self.offsets_bulk(names)
        g = c.groups
        for name, shape, dtype in (
            ("base_split_offsets", (g + 1,), "int64"),
            ("split_points", (g,), "int32"),
            ("input_offsets", (g + 1,), "int64"),
            ("output_offsets", (g + 1,), "int64"),
        ):
            st, off = meta[name]
            self.acc.plain(f"{op}.{name}", shape, dtype, storage=st, soff=off, note=_SRC["grouped_meta"])
        self.grouped_input(
            f"{op}.input",
            k,
            x_storage,
            sizes,
            meta["input_offsets"],
            fused=False,
            prune_rowwise=True,
            prune_note=_SRC["grouped_prune"],
        )
        self.weights(op, n, k, rowwise=True, note=_SRC["grouped_q_w"])
        return sizes

    # ---- fused ---------------------------------------------------------------------------------
    def fused_input(self, op: str, k: int, sizes: int, offsets: tuple[int, int], *, explicit_mxfp8: bool) -> None:
        c, acc = self.c, self.acc
        operand = f"{op}.input"
        nvfp4 = c.recipe == "nvfp4"
        prune_note = _SRC["fused_nvfp4_keep"]
        if explicit_mxfp8:
            # fc2_x on MXFP8: GroupedTensorStorage built over cuDNN's columnwise outputs, rowwise pruned.
            cont = "GroupedTensorStorage"
            cs = scale_shape("mxfp8", c.tokens, k, True)
            ideal: int | None = sum(unpadded_scale_elems("mxfp8", m, k, True) for m in c.splits)
            acc.te(
                operand,
                None,
                cont,
                "columnwise_data",
                self.fmt,
                (c.tokens * k,),
                "float8_e4m3fn",
                note=_SRC["fused_mxfp8_fc2x"],
            )
            acc.te(
                operand,
                None,
                cont,
                "columnwise_scale_inv",
                self.fmt,
                (prod(cs),),
                "float8_e8m0fnu",
                ideal=ideal,
                note=_SRC["fused_mxfp8_fc2x"],
            )
            acc.te(
                operand, None, cont, "first_dims", self.fmt, (c.groups,), "int64", storage=sizes, note=_SRC["dup_split"]
            )
            acc.te(
                operand,
                None,
                cont,
                "tensor_offsets",
                self.fmt,
                (c.groups + 1,),
                "int64",
                storage=offsets[0],
                soff=offsets[1],
                note=_SRC["dup_offsets"],
            )
            return
        if c.groups == 1 and c.dense_single_group:
            # Whole GroupedTensor wrapper: a container row, then its inner buffers.
            ref = acc.container(
                operand, "GroupedTensor", self.fmt, (c.tokens, k), "bfloat16", note=_SRC["fused_dense_x"]
            )
            bufs = dict((s, (sh, dt)) for s, sh, dt in single_buffers(c.recipe, c.tokens, k, arch=c.arch))
            mapping = (
                ("rowwise_data", "_rowwise_data"),
                ("columnwise_data", "_columnwise_data"),
                ("scale_inv", "_rowwise_scale_inv"),
                ("columnwise_scale_inv", "_columnwise_scale_inv"),
                ("amax", "_amax_rowwise"),
                ("columnwise_amax", "_amax_columnwise"),
            )
            for gslot, sslot in mapping:
                if sslot not in bufs:
                    continue
                shape, dtype = bufs[sslot]
                prune = None
                note = _SRC["fused_dense_x"]
                if gslot in ("rowwise_data", "scale_inv"):
                    if not nvfp4:
                        continue  # MXFP8: pruned in 2.20.2
                    prune, note = "rowwise", prune_note
                ideal = None
                if "scale_inv" in gslot:
                    ideal = (
                        unpadded_scale_elems(c.recipe, c.tokens, k, gslot.startswith("columnwise")) * ITEMSIZE[dtype]
                    )
                acc.te(
                    operand,
                    None,
                    "GroupedTensor",
                    gslot,
                    self.fmt,
                    (prod(shape),),
                    dtype,
                    ideal=ideal,
                    note=note,
                    cref=ref,
                    prune=prune,
                )
            acc.te(
                operand,
                None,
                "GroupedTensor",
                "first_dims",
                self.fmt,
                (1,),
                "int64",
                storage=sizes,
                note=_SRC["dup_split"],
                cref=ref,
            )
            acc.te(
                operand,
                None,
                "GroupedTensor",
                "tensor_offsets",
                self.fmt,
                (2,),
                "int64",
                storage=offsets[0],
                soff=offsets[1],
                note=_SRC["dup_offsets"],
                cref=ref,
            )
            return
        self.grouped_input(operand, k, None, sizes, offsets, fused=True, prune_rowwise=not nvfp4, prune_note=prune_note)

    def fused(self) -> None:
        c, acc = self.c, self.acc
        h, f, g = c.hidden, c.ffn, c.groups
        sizes = self.split_sizes_storage("fc1", None)
        names = ("split_points", "base_split_offsets", "fc1_x", "fc1_out", "fc2_x", "fc2_out")
        meta = self.offsets_bulk(names)
        for operand, name, shape, dtype in (
            ("fc1.base_split_offsets", "base_split_offsets", (g + 1,), "int64"),
            ("fc1.split_points", "split_points", (g,), "int32"),
            ("fc1.input_offsets", "fc1_x", (g + 1,), "int64"),
            ("fc1.output_offsets", "fc1_out", (g + 1,), "int64"),
            ("fc2.input_offsets", "fc2_x", (g + 1,), "int64"),
            ("fc2.output_offsets", "fc2_out", (g + 1,), "int64"),
        ):
            st, off = meta[name]
            acc.plain(operand, shape, dtype, storage=st, soff=off, note=_SRC["fused_meta"])
        self.fused_input("fc1", h, sizes, meta["fc1_x"], explicit_mxfp8=False)
        self.weights("fc1", 2 * f, h, rowwise=True, note=_SRC["fused_w"])  # never bf16: resolve() refuses
        self.activation()
        self.fused_input("fc2", f, sizes, meta["fc2_x"], explicit_mxfp8=c.recipe == "mxfp8")
        self.weights("fc2", h, f, rowwise=True, note=_SRC["fused_w"])

    # ---- entry ---------------------------------------------------------------------------------
    def build(self) -> Accumulator:
        c, acc = self.c, self.acc
        if c.fused:
            self.fused()
            return acc
        item = ITEMSIZE[self.hp]
        x = acc.storage(c.tokens * c.hidden * item)  # the caller's input
        fc1_out = acc.storage(c.tokens * 2 * c.ffn * item)
        act_out = acc.storage(c.tokens * c.ffn * item)  # ScaledSwiGLU output = FC2 input
        linear = self.split_linear if c.path == "unfused-split" else self.grouped_linear
        sizes = linear("fc1", c.hidden, 2 * c.ffn, x, None)
        self.activation(fc1_out)
        linear("fc2", c.ffn, c.hidden, act_out, sizes)
        return acc

"""Operand roles: what each entry of a TE save is.

The grouped MLP's (fc1.input, fc1.weight[g], activation.scales, ...): the fuser's one save, for the
fused op (te-internals §2.1) and the unfused ops (§2.4). TE's other modules (te-internals §12): the
norm ops' entries inside a fuser (``input``, ``mu``, ``rsigma``), the other ``te.ops`` basic ops'
(``linear.input``, ``linear.weight``, ``activation.input``) and the autograd Functions of
``te.Linear``, ``te.LayerNormLinear`` and ``te.LayerNormMLP`` (``input``, ``weight``,
``weight_param``, ``bias``, ``ln_weight``, ``ln_out``, ``mu``, ``rsigma``, ``fc1_out``,
``act_out``, ...), each by the class that saved it and TE's save order in that class.
``memaudit.te.capture.classify`` reads the storage objects; this module names what they are.
Imports nothing of TE (it reads class names and modules)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from memaudit.report import Row


def name_rows(
    node: Any,
    rows: list[Row],
    counts: list[int],
    mine: list[int] | None = None,
    children: dict[int, list[int]] | None = None,
) -> None:
    """Name operands of the rows a TE ``OperationFuser`` saved (roles from te-internals §2.1/§2.4):
    the named rows replace the originals in ``rows`` (a row's ``index`` is its position).
    ``counts``: how many buffers each ``to_save`` entry became; ``mine``: the indices of the rows
    this node holds (default: every row of its op type); ``children``: container index -> indices
    of its buffers' rows (default: found by a scan)."""
    op_name = type(node).__name__
    # flat position -> to_save entry index
    entry_of: list[int] = []
    for j, n in enumerate(counts):
        entry_of.extend([j] * n)
    roles: dict[int, tuple[str, int | None]] = {}
    basic_ops = list(node.basic_ops)
    ctxs = list(node.basic_op_ctxs)
    linear_seen = 0
    prefixes = []
    for op in basic_ops:
        if type(op).__name__ == "GroupedLinear":
            prefixes.append("fc1" if linear_seen == 0 else "fc2")
            linear_seen += 1
        else:
            prefixes.append("activation")
    fused_entries = fused_layout(basic_ops, ctxs)
    for i, (op, ctx) in enumerate(zip(basic_ops, ctxs, strict=True)):
        rng = getattr(ctx, "_saved_tensors_range", None)
        if not rng:
            continue
        start, end = rng
        saves = op_saves(op)
        if saves is not None:  # a norm op (te-internals §12.2): its own save order, whatever its neighbours
            for k in range(end - start):
                roles[start + k] = (saves[k], None) if k < len(saves) else (f"extra[{k - len(saves)}]", None)
            continue
        if fused_entries is not None and i == 0:
            for k, role in enumerate(fused_entries(end - start)):
                roles[start + k] = role
            continue
        early = early_fused_roles(op, ctx, prefixes[i], end - start)
        if early is not None:
            for k, role in enumerate(early):
                roles[start + k] = role
            continue
        meta = meta_count(op, ctx, prefixes[i], end - start)
        for k in range(end - start):
            roles[start + k] = unfused_role(op, ctx, prefixes[i], k, meta)
    for row in rows if mine is None else [rows[i] for i in mine]:
        slot = row.saved_as
        if row.op != op_name or not slot or not slot.startswith("saved_tensors["):
            continue
        pos = int(slot[len("saved_tensors[") : -1])
        if pos >= len(entry_of):
            continue
        found = roles.get(entry_of[pos])
        if found is None:
            continue
        set_role(row, rows, found, children)


def set_role(
    row: Row, rows: list[Row], role: tuple[str, int | None], children: dict[int, list[int]] | None = None
) -> None:
    operand, group = role
    targets = [row]
    if row.kind == "container":
        targets += (
            [r for r in rows if r.container_index == row.index]
            if children is None
            else [rows[i] for i in children.get(row.index, ())]
        )
    for r in targets:
        rows[r.index] = dataclasses.replace(r, operand=operand, group=r.group if group is None else group)


GL_META = ("split_sizes", "base_split_offsets", "split_points", "input_offsets", "output_offsets")
"""GroupedLinear's leading metadata entries in TE 2.19 on (PR #3238 added the two offsets); TE
2.16-2.18 save the first three, TE 2.14-2.15 the first one (``split_sizes``)."""
GL_META_COUNTS = (5, 3, 1)


def early_fused_roles(op: Any, ctx: Any, prefix: str, n: int) -> list[tuple[str, int | None]] | None:
    """TE 2.14-2.15's forward-only fused MXFP8 op (``ops/fused/forward_grouped_mlp.py``) saves its
    own layout through each GroupedLinear's context, which it marks with a singular
    ``input_quantizer``: ``split_sizes`` (FC1 also ``split_points``), the weights, then the
    grouped input's columnwise data, columnwise scales and tensor offsets. None for any other op."""
    if prefix == "activation" or not hasattr(ctx, "input_quantizer") or hasattr(ctx, "input_quantizers"):
        return None
    ws = 1 if getattr(op, "single_grouped_weight", False) else int(getattr(op, "num_groups", 0) or 0)
    lead = n - ws - 3
    if lead not in (1, 2):
        return None
    roles: list[tuple[str, int | None]] = [(f"{prefix}.split_sizes", None)]
    if lead == 2:
        roles.append((f"{prefix}.split_points", None))
    roles += (
        [(f"{prefix}.weight", None)]
        if ws == 1 and getattr(op, "single_grouped_weight", False)
        else [(f"{prefix}.weight[{g}]", g) for g in range(ws)]
    )
    return roles + [(f"{prefix}.input", None), (f"{prefix}.input", None), (f"{prefix}.input_offsets", None)]


def meta_count(op: Any, ctx: Any, prefix: str, n: int) -> int:
    """How many of ``GL_META`` a GroupedLinear's ``n`` saved entries start with: what is left
    after the scales, the inputs (one grouped tensor, or one per group) and the weights (one
    grouped weight, or one per group); TE 2.20.2's five where no TE layout fits."""
    if prefix == "activation":
        return 0
    groups = int(getattr(op, "num_groups", 0) or 0)
    xs = 1 if getattr(ctx, "use_grouped_tensor_path", False) else groups
    ws = 1 if getattr(op, "single_grouped_weight", False) else groups
    m = n - (1 if getattr(op, "_scale_bias", False) else 0) - xs - ws
    return m if m in GL_META_COUNTS else len(GL_META)


def unfused_role(op: Any, ctx: Any, prefix: str, k: int, meta: int = len(GL_META)) -> tuple[str, int | None]:
    """Role of entry ``k`` of an unfused basic op's ``to_save`` (te-internals §2.4), whose first
    ``meta`` entries are GroupedLinear's metadata (:func:`meta_count`)."""
    if prefix == "activation":
        return ("activation.activation_in", None) if k == 0 else ("activation.scales", None)
    if k < meta:
        return f"{prefix}.{GL_META[k]}", None
    m = meta
    if getattr(op, "_scale_bias", False):
        if k == m:
            return f"{prefix}.scales", None
        m += 1
    groups = int(op.num_groups)
    if getattr(ctx, "use_grouped_tensor_path", False):
        if k == m:
            return f"{prefix}.input", None
        w = k - m - 1
        if getattr(op, "single_grouped_weight", False):
            return (f"{prefix}.weight", None) if w == 0 else (f"{prefix}.extra[{w - 1}]", None)
    else:
        if k < m + groups:
            return f"{prefix}.input", k - m
        w = k - m - groups
    if w >= groups:  # more entries than TE 2.20.2's layout has: named as such, never a group that does not exist
        return f"{prefix}.extra[{w - groups}]", None
    return f"{prefix}.weight[{w}]", w


FUSED_META = (
    "fc1.split_sizes",
    "fc1.base_split_offsets",
    "fc1.split_points",
    "fc1.input_offsets",
    "fc1.output_offsets",
    "fc2.input_offsets",
    "fc2.output_offsets",
)
FUSED_META_OLD = 3
"""TE 2.17-2.18's fused op saves only the first three of ``FUSED_META`` (no tensor offsets: PR #3238)."""


def fused_layout(basic_ops: list[Any], ctxs: list[Any]) -> Callable[[int], list[tuple[str, int | None]]] | None:
    """Roles of the fused grouped MLP's single save (te-internals §2.1), if a fused op ran.

    The fused op saves everything through the FC1 context; the activation and FC2 contexts save
    nothing. On the unfused path the activation op always saves its two entries.
    """
    if len(basic_ops) != 3 or [type(op).__name__ for op in basic_ops][::2] != ["GroupedLinear", "GroupedLinear"]:
        return None
    ranges = [getattr(c, "_saved_tensors_range", None) for c in ctxs]
    if not ranges[0] or ranges[0][1] - ranges[0][0] < FUSED_META_OLD + 4 + 2:
        return None
    if any(r and r[1] > r[0] for r in ranges[1:]):
        return None
    fc1_single = bool(getattr(basic_ops[0], "single_grouped_weight", False))
    fc2_single = bool(getattr(basic_ops[2], "single_grouped_weight", False))
    groups = int(getattr(basic_ops[0], "num_groups", 0) or 0)

    def weights(prefix: str, single: bool, w: int) -> list[tuple[str, int | None]]:
        if single and w == 1:
            return [(f"{prefix}.weight", None)]
        # more entries than groups: TE saved something its 2.20.2 layout does not have; never a group
        # that does not exist
        return [
            (f"{prefix}.weight[{g}]", g) if g < groups else (f"{prefix}.extra[{g - groups}]", None) for g in range(w)
        ]

    def layout(n: int) -> list[tuple[str, int | None]]:
        meta = len(FUSED_META)
        per = 1 if fc1_single else groups
        if n - 4 - 2 * per == FUSED_META_OLD:  # TE 2.17-2.18: no tensor offsets (PR #3238)
            meta = FUSED_META_OLD
        w = (n - meta - 4) // 2
        roles: list[tuple[str, int | None]] = [(name, None) for name in FUSED_META[:meta]]
        roles.append(("fc1.input", None))
        roles += weights("fc1", fc1_single, w)
        roles += [("activation.activation_in", None), ("activation.scales", None), ("fc2.input", None)]
        roles += weights("fc2", fc2_single, w)
        return roles

    return layout


# ---- TE's modules beyond the grouped MLP (te-internals §12) -----------------------------------

OP_SAVES: dict[str, tuple[str, ...]] = {
    "LayerNorm": ("input", "mu", "rsigma"),  # ops/basic/layer_norm.py:228 (te-internals §12.2)
    "RMSNorm": ("input", "rsigma"),  # ops/basic/rmsnorm.py:209 (te-internals §12.2)
    # ops/basic/basic_linear.py:1053, and its fused forwards through its ctx (te-internals §12.5)
    "BasicLinear": ("linear.input", "linear.weight"),
    "_ActivationOperation": ("activation.input",),  # ops/basic/activation.py:121: GELU, ReLU, GEGLU, ...
    "SwiGLU": ("activation.input",),  # ops/basic/swiglu.py:157 (and SiTUGLU, its subclass)
    "ClampedSwiGLU": ("activation.input",),  # ops/basic/swiglu.py:401
}
"""A ``te.ops`` basic op's class (in ``transformer_engine.pytorch.ops.basic``) -> its
``ctx.save_for_backward`` entries, in order. ``te.LayerNorm`` and ``te.RMSNorm`` subclass the norm
ops. The grouped MLP's ops (``GroupedLinear``, the scaled activations ``ScaledSwiGLU``, ...) are
not here: their roles are the grouped MLP's (te-internals §2.1, §2.4)."""

OPS_MODULE = "transformer_engine.pytorch.ops.basic."

FUNCTION_SAVES: dict[str, tuple[str, ...]] = {
    # module/linear.py:1853-1854 via _linear_setup_ctx (:1101-1118; te-internals §12.1)
    "_Linear": ("input", "weight", "weight_param", "bias"),
    # module/layernorm_linear.py:526-536 (te-internals §12.3)
    "_LayerNormLinear": ("input", "weight", "weight_param", "bias", "ln_weight", "ln_out", "mu", "rsigma"),
    # module/layernorm_mlp.py:807-824 (te-internals §12.4)
    "_LayerNormMLP": (
        "input",
        "ln_weight",
        "ln_out",
        "fc1_weight",
        "fc1_weight_param",
        "fc1_bias",
        "fc1_out",
        "fc1_out_without_bias",
        "act_out",
        "fc2_weight",
        "fc2_weight_param",
        "fc2_bias",
        "mu",
        "rsigma",
    ),
}
"""A TE autograd Function's class (in ``transformer_engine.pytorch.module``) -> the entries it passes
to ``prepare_for_saving`` before its one ``ctx.save_for_backward``, in order."""

FUNCTION_CTX: dict[str, dict[str, str]] = {
    "_LayerNormLinear": {"ctx.weight": "weight_param"},  # layernorm_linear.py:565 (te-internals §12.3)
    # layernorm_mlp.py:870-871 (te-internals §12.4)
    "_LayerNormMLP": {"ctx.fc1_weight": "fc1_weight_param", "ctx.fc2_weight": "fc2_weight_param"},
}
"""Tensors such a Function keeps as plain ``ctx`` attributes (found by the graph walk), by attribute."""

FUNCTIONS_MODULE = "transformer_engine.pytorch.module."


def op_saves(op: Any) -> tuple[str, ...] | None:
    """The save order of a ``te.ops`` basic op whose class (or a base class: ``te.LayerNorm``) is in
    :data:`OP_SAVES`; None for any other op."""
    for cls in type(op).__mro__:
        if cls.__name__ in OP_SAVES and cls.__module__.startswith(OPS_MODULE):
            return OP_SAVES[cls.__name__]
    return None


def function_of(node: Any) -> str | None:
    """The TE autograd Function class name (``_Linear``) of a Python backward node, if it is one of
    :data:`FUNCTION_SAVES`'s."""
    cls = getattr(node, "_forward_cls", None)
    if cls is None or not cls.__module__.startswith(FUNCTIONS_MODULE) or cls.__name__ not in FUNCTION_SAVES:
        return None
    return str(cls.__name__)


def name_function_rows(
    node: Any,
    rows: list[Row],
    counts: list[int],
    mine: list[int],
    children: dict[int, list[int]] | None = None,
) -> str | None:
    """Name the rows a TE autograd Function's node holds (``mine``) by that Function's save order:
    ``counts`` says how many saved tensors each ``prepare_for_saving`` entry became. Returns a
    warning when the entries do not match the order (TE changed it: nothing is named)."""
    fn = function_of(node)
    if fn is None:
        return None
    layout = FUNCTION_SAVES[fn]
    if len(counts) != len(layout):
        return (
            f"TE's {fn} saved {len(counts)} entries, not the {len(layout)} of its save order "
            f"({', '.join(layout)}): its rows keep their slot names"
        )
    entry_of: list[int] = []
    for j, n in enumerate(counts):
        entry_of.extend([j] * n)
    ctx_roles = FUNCTION_CTX.get(fn, {})
    if ctx_roles:  # the walk's ctx rows carry no node: they are this Function's by their op (every layer's alike)
        op = type(node).__name__
        for row in [r for r in rows if r.op == op and r.saved_as in ctx_roles]:
            set_role(row, rows, (ctx_roles[row.saved_as or ""], None), children)
    for row in [rows[i] for i in mine]:
        slot = row.saved_as or ""
        if not slot.startswith("saved_tensors["):
            continue
        pos = int(slot[len("saved_tensors[") : -1])
        if pos < len(entry_of):
            set_role(row, rows, (layout[entry_of[pos]], None), children)
    return None

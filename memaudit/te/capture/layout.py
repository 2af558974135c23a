"""TE 2.20.2 buffer attributes as data, shared by the classifier and the estimator (no TE import).

attribute -> (kind, orientation), from docs te-internals §5.2 / §5.4.
"""

from __future__ import annotations

BUFFER_SLOTS: dict[str, tuple[str, str | None]] = {
    # Float8TensorStorage
    "_data": ("data", "rowwise"),
    "_transpose": ("data", "columnwise"),
    "_scale_inv": ("scale_inv", "both"),
    # MXFP8 / NVFP4 / Float8Blockwise storages
    "_rowwise_data": ("data", "rowwise"),
    "_columnwise_data": ("data", "columnwise"),
    "_rowwise_scale_inv": ("scale_inv", "rowwise"),
    "_columnwise_scale_inv": ("scale_inv", "columnwise"),
    "_amax_rowwise": ("amax", "rowwise"),
    "_amax_columnwise": ("amax", "columnwise"),
    # GroupedTensorStorage (all 1-D)
    "rowwise_data": ("data", "rowwise"),
    "columnwise_data": ("data", "columnwise"),
    "scale_inv": ("scale_inv", "rowwise"),
    "columnwise_scale_inv": ("scale_inv", "columnwise"),
    "amax": ("amax", "rowwise"),
    "columnwise_amax": ("amax", "columnwise"),
    "scale": ("scale", None),
    "first_dims": ("metadata", None),
    "last_dims": ("metadata", None),
    "tensor_offsets": ("metadata", None),
}

GROUPED_SLOTS = (
    "rowwise_data",
    "columnwise_data",
    "scale_inv",
    "columnwise_scale_inv",
    "amax",
    "columnwise_amax",
    "scale",
    "first_dims",
    "last_dims",
    "tensor_offsets",
)
"""``GroupedTensorStorage.prepare_for_saving`` order (grouped_tensor_storage.py:346-389)."""

SAVE_ORDER: dict[str, tuple[str, ...]] = {
    "Float8TensorStorage": ("_data", "_transpose", "_scale_inv"),
    "MXFP8TensorStorage": ("_rowwise_data", "_columnwise_data", "_rowwise_scale_inv", "_columnwise_scale_inv"),
    "Float8BlockwiseQTensorStorage": (
        "_rowwise_data",
        "_columnwise_data",
        "_rowwise_scale_inv",
        "_columnwise_scale_inv",
    ),
    "NVFP4TensorStorage": (
        "_rowwise_data",
        "_columnwise_data",
        "_rowwise_scale_inv",
        "_columnwise_scale_inv",
        "_amax_rowwise",
        "_amax_columnwise",
    ),
    "GroupedTensorStorage": GROUPED_SLOTS,
    "IdentityTensorStorage": ("_hp_data",),
    "NVFP4TensorRef": ("data", "data_t", "scale", "scale_t"),
}
"""Storage class -> the attributes its ``prepare_for_saving`` returns, in that order (te-internals
§5.4). Not always the order the class declares its buffers in (``_INNER_TENSORS``): MXFP8, NVFP4
and blockwise storages declare each scale next to its data but return both data buffers first."""

"""TE's targets: its grouped MLP (``grouped_mlp``), the grouped MLP in plain PyTorch (``reference``,
``reference_model``), and the expert-parallel layer (``ep``: routing, the Megatron-style dispatch,
TE or reference experts) with its one-process check."""

"""memaudit's TransformerEngine wing, registered through the one door (:data:`EXTENSION`).

Rooms: ``targets`` (TE's grouped MLP, its plain-PyTorch reference, the expert-parallel layer),
``capture`` (TE's storage objects at the hook, operand roles, buffer layouts, what each kernel
entry point reads), ``machine`` (recipes, TE's probes, the fallback, the doctor section, TE's
versions), ``estimate`` (saved bytes from shapes and layout rules), ``emulate`` (TE's real code on
an emulated machine), ``history`` (TE's saved state across its history) and ``commands``
(``estimate``, ``te-history``). Importing this package imports nothing of TE, nor torch.
"""

from memaudit.extension import Extension

EXTENSION = Extension(
    "transformer-engine",
    targets={
        "reference": "memaudit.te.targets.reference:ReferenceTarget",
        "te-grouped-mlp": "memaudit.te.targets.grouped_mlp:TEGroupedMLPTarget",
        "ep-grouped-mlp": "memaudit.te.targets.ep:EPGroupedMLPTarget",
    },
    library="transformer_engine.pytorch",
    classifier="memaudit.te.capture.classify:TEClassifier",
    formats=("fp8", "fp8-block", "mxfp8", "nvfp4"),
    environment="memaudit.te.machine.environment",
    reads="memaudit.te.capture.reads:watch",
    commands="memaudit.te.commands:register",
    doctor="memaudit.te.machine.doctor:section",
    emulator="memaudit.te.emulate.pytest:EMULATOR",
)
"""TE's declaration (registered as ``te`` in the ``memaudit.extensions`` entry points): its
targets; its classifier, which joins every capture once the caller has imported TE; its container
formats; its version probe; its read sets for ``--unread``; its commands; its doctor section; the
emulator behind the pytest plugin's ``emulate=``."""

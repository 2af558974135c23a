"""Everything memaudit knows about TransformerEngine 2.20.x, in one place.

``classify`` (TE storage objects and the fuser's roles), ``layout`` (buffer attributes and slot
orders), ``target`` (the grouped-MLP target), ``estimate`` (saved bytes from shapes and layout
rules), ``expected`` (the estimate beside measured rows), ``doctor`` and ``environment`` (probes),
``emulate`` (TE's real code on an emulated architecture), ``reads`` (what each TE kernel entry
point reads).
Importing this package imports nothing of TE; each module says whether it does.
"""

from memaudit.plugins import Provider

PROVIDER = Provider("memaudit.te.classify:TEClassifier", formats=("fp8", "fp8-block", "mxfp8", "nvfp4"),
                    environment="memaudit.te.environment", reads="memaudit.te.reads:watch")
"""TE's classifier (registered for ``transformer_engine.pytorch`` in the ``memaudit.plugins``
entry points) joins every capture once the caller has imported TE (see
:func:`memaudit.capture.recorder.default_plugins`); its container formats are ``classify``'s; ``reads`` (its ``watch``) says what each TE
kernel entry point reads during an unread analysis."""

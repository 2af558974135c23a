"""The emulator the pytest plugin's ``emulate="sm100"`` runs a test body under (the extension's
``emulator``): TE's real Python on an emulated machine, in this process on a GPU, in a child
process on fake CUDA with no GPU. Importing this module imports neither torch nor TE."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any


class TEEmulator:
    """:class:`memaudit.extension.Emulator` for TE (:mod:`memaudit.te.emulate.host`, :mod:`~.run`)."""

    archs = ("sm90", "sm100")
    default = "sm100"

    def unavailable(self) -> str | None:
        from memaudit.te.emulate.host import unavailable

        return unavailable()

    def needs_child(self) -> bool:
        from memaudit.te.emulate.host import needs_child

        return needs_child()

    def emulated(self, arch: str) -> contextlib.AbstractContextManager[Any]:
        from memaudit.te.emulate.run import emulated

        return emulated(arch)

    def call_in_child(self, arch: str, body: Callable[[], Any]) -> Any:
        from memaudit.te.emulate.host import call_in_child

        return call_in_child(arch, body)


EMULATOR = TEEmulator()

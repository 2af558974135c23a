"""Classifier plugins as packages register them: the ``memaudit.plugins`` entry points.

An entry point is named by the library module whose tensor types the classifier knows (its
classifier joins a capture only once the caller has imported that module: memaudit never imports
a library itself) and points at a :class:`Provider`, a light declaration read without importing
torch or the library: where its classifier is (``pkg.mod:Class``, a
:class:`memaudit.capture.recorder.Plugin`) and the storage formats its rows may name (what a
scenario's ``format`` may say besides torch's dtypes). memaudit's TE classifier registers the
same way (``memaudit.te:PROVIDER``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass
from importlib import metadata

from memaudit.errors import Terminated, UsageError

GROUP = "memaudit.plugins"

TORCH_FORMATS = ("bf16", "fp16", "fp32", "fp64", "int64", "int32", "int16", "int8", "uint8", "bool")
"""The formats of torch's plain dtypes (``capture.tensors.format_of``)."""
TORCH_LOW_PRECISION = ("fp8_e4m3", "fp8_e5m2", "e8m0", "fp4_e2m1x2")
"""The formats of torch's low-precision dtypes, where this torch has them."""


@dataclass(frozen=True)
class Provider:
    """A classifier plugin's declaration: the module of its classifier class and the formats its
    rows may name."""

    classifier: str
    formats: tuple[str, ...] = ()
    environment: str | None = None
    """A module whose ``LIBRARY`` (:class:`memaudit.environment.Library`) names the library,
    ``probe()`` adds its versions to a report's environment and ``version(imported_only=...)``
    gives its version (each imports the library only if the caller already has)."""
    reads: str | None = None
    """``pkg.mod:function``: a context manager factory that, for the block, routes the library's kernel
    entry points to the active :class:`memaudit.capture.reads.Observer` with what each reads by the
    library's rules (``--unread``); entered only once the caller has imported the library."""


@functools.cache
def _providers(path: tuple[str, ...]) -> tuple[tuple[str, Provider], ...]:
    out = []
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda ep: ep.name):
        where = f"the classifier plugin {ep.name} = {ep.value}" + (f" (package {ep.dist.name})" if ep.dist else "")
        try:
            with contextlib.redirect_stdout(sys.stderr):  # what it prints never mixes with memaudit's output
                provider = ep.load()
        except Terminated:
            raise
        except SystemExit as exc:  # a plugin's sys.exit is its failure, never memaudit's exit status
            raise UsageError(f"{where} called sys.exit({exc.code!r}) while loading", key="plugins") from None
        except Exception as exc:  # noqa: BLE001 - a broken plugin package is bad input, named
            raise UsageError(f"{where} does not load: {type(exc).__name__}: {exc}", key="plugins") from None
        if not isinstance(provider, Provider):
            raise UsageError(f"{where} is a {type(provider).__name__}, not a memaudit.plugins.Provider", key="plugins")
        out.append((ep.name, provider))
    return tuple(out)


def providers() -> tuple[tuple[str, Provider], ...]:
    """``(library module, Provider)`` for every registered classifier plugin, by library name."""
    return _providers(tuple(sys.path))


def formats() -> tuple[str, ...]:
    """Every storage format a row may name: torch's dtypes, then the plugins' own formats."""
    out = dict.fromkeys(TORCH_FORMATS)
    for _, provider in providers():
        out.update(dict.fromkeys(provider.formats))
    out.update(dict.fromkeys(TORCH_LOW_PRECISION))
    return tuple(out)

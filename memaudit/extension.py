"""The one door: what a package adds to memaudit, declared in one :class:`Extension`.

A package registers one ``Extension`` under the ``memaudit.extensions`` entry point group::

    [project.entry-points."memaudit.extensions"]
    attn = "mypkg.memaudit_ext:EXTENSION"

The declaration is lazy: every field that names code is a ``"pkg.mod:name"`` string, imported only
when it is used (:meth:`Extension.load`). Reading the declarations imports the module that holds
each one and nothing else, so the module must stay light (no torch, no library). memaudit's own
TransformerEngine support registers the same way (``memaudit.te:EXTENSION``); the command line,
``doctor`` and the pytest plugin list extensions and never name one.

What an extension may declare (every field optional but ``name``):

* ``targets``: target name -> ``pkg.mod:Class`` (a :class:`memaudit.targets.base.Target`);
* ``library``, ``classifier``, ``formats``, ``environment``, ``reads``: a library's tensor types. The
  classifier (a :class:`memaudit.capture.recorder.Plugin`) joins a capture only once the caller has
  imported ``library`` (memaudit never imports a library itself); ``formats`` are the storage formats
  its rows may name; ``environment`` a module whose ``LIBRARY``, ``probe()`` and ``version()`` put
  the library's versions in a report; ``reads`` a context-manager factory that routes the library's
  kernel entry points to ``--unread``'s observer;
* ``commands``: ``register(app)`` adds its commands to the ``memaudit`` typer app;
* ``doctor``: a function that returns the rich renderable ``memaudit doctor`` shows for it, or None;
* ``emulator``: an :class:`Emulator` the pytest plugin's ``emulate=`` runs a test body under.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from types import MappingProxyType
from typing import Any, Protocol

from memaudit.errors import Terminated, UsageError

GROUP = "memaudit.extensions"
"""The entry point group extensions register under."""

TORCH_FORMATS = ("bf16", "fp16", "fp32", "fp64", "int64", "int32", "int16", "int8", "uint8", "bool")
"""The formats of torch's plain dtypes (``capture.tensors.format_of``)."""
TORCH_LOW_PRECISION = ("fp8_e4m3", "fp8_e5m2", "e8m0", "fp4_e2m1x2")
"""The formats of torch's low-precision dtypes, where this torch has them."""


class EmulationFailed(Exception):
    """An emulated test body failed where the test cannot see it (in a child process); the message
    says what failed."""


class Emulator(Protocol):
    """What the pytest plugin's ``emulate="ARCH"`` needs from an extension that emulates a machine."""

    archs: tuple[str, ...]
    """The architectures ``emulate=`` may name."""
    default: str
    """What ``emulate=True`` means."""

    def unavailable(self) -> str | None:
        """Why emulated kernels cannot run here, or None."""

    def needs_child(self) -> bool:
        """True where the body must run in a child process (no GPU: fake CUDA)."""

    def emulated(self, arch: str) -> contextlib.AbstractContextManager[Any]:
        """The emulation, entered around the test body in this process."""

    def call_in_child(self, arch: str, body: Callable[[], Any]) -> Any:
        """``body()`` in a child process on the emulated machine's host (the body enters
        :meth:`emulated` where it needs it); its result (raises :class:`EmulationFailed`)."""


@dataclass(frozen=True, eq=False)
class Extension:
    """A package's declaration of what it adds to memaudit (see the module docstring)."""

    name: str
    targets: Mapping[str, str] = field(default_factory=dict)
    library: str | None = None
    classifier: str | None = None
    formats: tuple[str, ...] = ()
    environment: str | None = None
    reads: str | None = None
    commands: str | None = None
    doctor: str | None = None
    emulator: str | None = None
    entry_point: str = field(default="", compare=False)
    """Where it was registered (``name = value (package P)``), set by the scan: how errors name it."""
    builtin: bool = field(default=False, compare=False)
    """memaudit's own (set by the scan)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", MappingProxyType(dict(self.targets)))
        for key in ("classifier", "reads", "commands", "doctor", "emulator"):
            ref = getattr(self, key)
            if ref is not None and (not isinstance(ref, str) or ":" not in ref):
                raise ValueError(f"extension {self.name!r}: {key} must be 'pkg.mod:name', got {ref!r}")

    def load(self, ref: str) -> Any:
        """The object ``ref`` (``pkg.mod:name``, one of this declaration's fields) names; a failure is
        a UsageError naming the extension."""
        return _load(ref, self.entry_point or self.name)

    def library_imported(self) -> bool:
        """True once the caller has imported the library its classifier knows."""
        return self.library is not None and self.library in sys.modules


def _guarded(what: str, load: Callable[[], Any]) -> Any:
    """``load()``, with what it prints sent to stderr (never mixed with memaudit's output); a failure
    or a ``sys.exit`` while loading is a UsageError naming ``what`` (a broken extension is bad input,
    never memaudit's exit status)."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return load()
    except Terminated:
        raise
    except SystemExit as exc:
        raise UsageError(f"{what} called sys.exit({exc.code!r}) while loading", key="extensions") from None
    except Exception as exc:  # noqa: BLE001 - a broken extension package is bad input, named
        raise UsageError(f"{what} does not load: {type(exc).__name__}: {exc}", key="extensions") from None


@functools.cache
def _load(ref: str, where: str) -> Any:
    module, _, name = ref.partition(":")

    def load() -> Any:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj

    return _guarded(f"the extension {where}: {ref}", load)


@functools.cache
def _scan(path: tuple[str, ...]) -> tuple[Extension, ...]:
    """The extensions installed on ``path``: memaudit's own first, then by entry point name."""
    eps = sorted(metadata.entry_points(group=GROUP), key=lambda ep: (ep.module.split(".")[0] != "memaudit", ep.name))
    out = []
    for ep in eps:
        where = f"{ep.name} = {ep.value}" + (f" (package {ep.dist.name})" if ep.dist else "")
        ext = _guarded(f"the extension {where}", ep.load)
        if not _is_extension(ext):
            raise UsageError(
                f"the extension {where} is a {type(ext).__name__}, not a memaudit.extension.Extension", key="extensions"
            )
        out.append(_stamped(ext, where, ep.module.split(".")[0] == "memaudit"))
    return tuple(out)


def _is_extension(obj: Any) -> bool:
    """An Extension, by identity or (the module was imported twice) by its class's module and name."""
    return isinstance(obj, Extension) or any(
        c.__module__ == Extension.__module__ and c.__qualname__ == Extension.__qualname__ for c in type(obj).__mro__
    )


def _stamped(ext: Any, where: str, builtin: bool) -> Extension:
    fields = {
        k: getattr(ext, k)
        for k in (
            "name",
            "targets",
            "library",
            "classifier",
            "formats",
            "environment",
            "reads",
            "commands",
            "doctor",
            "emulator",
        )
    }
    return Extension(**fields, entry_point=where, builtin=builtin)


def extensions() -> tuple[Extension, ...]:
    """Every registered extension (scanned once per ``sys.path``): memaudit's own first."""
    return _scan(tuple(sys.path))


def with_library() -> Iterator[Extension]:
    """The extensions whose library the caller has imported (their classifiers, probes and read
    watchers apply)."""
    return (e for e in extensions() if e.library_imported())


def formats() -> tuple[str, ...]:
    """Every storage format a row may name: torch's dtypes, then the extensions' own formats."""
    out = dict.fromkeys(TORCH_FORMATS)
    for ext in extensions():
        out.update(dict.fromkeys(ext.formats))
    out.update(dict.fromkeys(TORCH_LOW_PRECISION))
    return tuple(out)


def read_watchers() -> list[Any]:
    """The ``reads`` watchers of the extensions whose library is imported."""
    return [e.load(e.reads) for e in with_library() if e.reads is not None]


def emulators() -> dict[str, tuple[Extension, str]]:
    """``arch -> (extension, its emulator ref)`` for every extension that declares an emulator (the
    emulator object is loaded: its module must import nothing heavy)."""
    out: dict[str, tuple[Extension, str]] = {}
    for ext in extensions():
        if ext.emulator is not None:
            for arch in ext.load(ext.emulator).archs:
                out.setdefault(arch, (ext, ext.emulator))
    return out

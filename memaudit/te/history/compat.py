"""TE's Python of one version over the installed TE's compiled parts: the compatibility layer.

TE is two things: Python (``transformer_engine/``, one wheel per release, or a git revision's
tree) and compiled parts (``libtransformer_engine.so``, the core library, and
``transformer_engine_torch``, the torch extension ``tex``). Only the installed TE's compiled parts
exist here; building an older extension takes about ten minutes of two cores per version and the
sources of a CUDA toolchain, which is not possible for a history of a hundred commits. Under the
emulation every kernel entry point is a stand-in called by name, so what a version's Python needs of
the compiled parts is small, and this module provides it:

1. **The libraries** are loaded by the installed TE's own loader (its ``common/__init__.py``, run
   as a module of its own before the version's tree is on ``sys.path``): TE's own package checks,
   the CUDA libraries, the core library, and ``tex`` into ``sys.modules``.
2. **The version's ``transformer_engine.common``** runs its own code with
   ``NVTE_PROJECT_BUILDING=1`` (TE's own switch that skips its install checks and library loading,
   which step 1 did), and its ``load_framework_extension("torch")`` then answers with the ``tex``
   already loaded instead of asserting that the installed extension's version equals the Python's.
3. **Names the version's Python uses that the installed ``tex`` lacks**, read from the tree's
   source (``tex.NAME``, ``from transformer_engine_torch import NAME``, ``tex.Enum.MEMBER``):
   a missing function is a placeholder function, which the emulation's kernel table guards like
   any entry point (a per-family stand-in where one exists, else an error naming it); a missing
   member of an enum or class is a placeholder object named ``<missing tex.Enum.MEMBER>`` (a
   value TE compares against; used as an argument of a stand-in it is carried, never interpreted).
   Every placeholder is listed in the version's report (``environment.te_source.placeholders``).

Limits (what this cannot do, stated in docs/investigations/te-history.md): classes and enums are the installed
extension's (a version whose Python constructs a class the extension no longer has, or passes a
removed enum member to a real kernel, fails, naming it); a placeholder answers ``hasattr`` with
True; real kernels never run for a version other than the installed one (emulated kernels only);
and nothing of a version's C++ (allocation rules of its kernels) is known beyond what its stand-in
family says (:mod:`.families`).

After the import :func:`verify` checks that every ``transformer_engine`` module came from the
tree and that the distribution version TE reports is the one asked for: never the wrong version.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

TEX = "transformer_engine_torch"
INSTALLED_LOADER = "memaudit_te_installed_common"
"""The module name the installed TE's ``common/__init__.py`` runs under (step 1)."""


class CompatError(RuntimeError):
    """A version's Python cannot be loaded over the installed compiled parts; says why."""


def installed_te_dir() -> Path:
    """The installed TE's package directory (found, not imported)."""
    spec = importlib.util.find_spec("transformer_engine")
    if spec is None or spec.origin is None:
        raise CompatError("TransformerEngine is not installed: its compiled parts are needed for any version's Python")
    return Path(spec.origin).parent


def load_installed_extension() -> tuple[types.ModuleType, str]:
    """Step 1: the installed TE's loader loads the core library and ``tex``; (tex, installed version)."""
    import torch  # noqa: F401 - TE's libraries need torch's (libnccl) loaded first

    if TEX in sys.modules:
        return sys.modules[TEX], metadata.version("transformer_engine")
    if any(n == "transformer_engine" or n.startswith("transformer_engine.") for n in sys.modules):
        raise CompatError(
            "transformer_engine is already imported in this process; a version's Python needs a fresh process"
        )
    installed = installed_te_dir()
    version = metadata.version("transformer_engine")
    spec = importlib.util.spec_from_file_location(INSTALLED_LOADER, installed / "common" / "__init__.py")
    assert spec is not None and spec.loader is not None
    loader = importlib.util.module_from_spec(spec)
    sys.modules[INSTALLED_LOADER] = loader
    spec.loader.exec_module(loader)
    loader.load_framework_extension("torch")
    return sys.modules[TEX], version


# ---- step 3: names the tree uses ----------------------------------------------------------------


@dataclass
class TexNames:
    """What a tree's Python reads of ``tex``: module-level names, and members of its classes."""

    names: set[str] = field(default_factory=set)
    members: set[tuple[str, str]] = field(default_factory=set)


def scan_tex_names(tree: Path) -> TexNames:
    """Every ``tex`` name and class member the tree's torch-side Python reads (``ast``; JAX left out)."""
    out = TexNames()
    root = tree / "transformer_engine"
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if rel and rel[0] == "jax":
            continue
        try:
            module = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        _scan_module(module, out)
    return out


def _scan_module(module: ast.Module, out: TexNames) -> None:
    aliases: set[str] = set()
    imported: dict[str, str] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == TEX:
                    aliases.add(a.asname or a.name)
        elif isinstance(node, ast.ImportFrom) and node.module == TEX and node.level == 0:
            for a in node.names:
                if a.name != "*":
                    out.names.add(a.name)
                    imported[a.asname or a.name] = a.name
    if not aliases and not imported:
        return
    for node in ast.walk(module):
        if not isinstance(node, ast.Attribute):
            continue
        v = node.value
        if isinstance(v, ast.Name) and v.id in aliases:
            out.names.add(node.attr)
        elif isinstance(v, ast.Name) and v.id in imported:
            out.members.add((imported[v.id], node.attr))
        elif isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id in aliases:
            out.members.add((v.attr, node.attr))


class MissingMember:
    """A member of a ``tex`` enum or class that the installed extension does not have."""

    def __init__(self, owner: str, name: str) -> None:
        self.owner, self.name = owner, name

    def __repr__(self) -> str:
        return f"<missing tex.{self.owner}.{self.name}>"


class MissingCompiled(RuntimeError):
    """A version's Python called a ``tex`` function the installed extension does not have, outside
    the emulation's kernel table (inside it, the table names it as a missing stand-in)."""


def _placeholder(name: str, installed: str) -> types.FunctionType:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise MissingCompiled(
            f"tex.{name} is not in the installed TE {installed} extension (compatibility layer placeholder)"
        )

    missing.__name__ = missing.__qualname__ = name
    missing.memaudit_placeholder = True  # type: ignore[attr-defined]
    return missing  # type: ignore[return-value]


def fill_missing(tex: types.ModuleType, wanted: TexNames, installed: str) -> list[str]:
    """Add a placeholder for every name and member ``wanted`` that ``tex`` lacks; their names."""
    added = []
    for name in sorted(wanted.names):
        if not hasattr(tex, name):
            setattr(tex, name, _placeholder(name, installed))
            added.append(f"tex.{name}")
    for owner, member in sorted(wanted.members):
        cls = getattr(tex, owner, None)
        if isinstance(cls, type) and not hasattr(cls, member):
            setattr(cls, member, MissingMember(owner, member))
            added.append(f"tex.{owner}.{member}")
    return added


# ---- step 2: the version's transformer_engine.common ---------------------------------------------


class _CommonLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, tex: types.ModuleType) -> None:
        self.inner, self.tex = inner, tex

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        old = os.environ.get("NVTE_PROJECT_BUILDING")
        os.environ["NVTE_PROJECT_BUILDING"] = "1"  # TE's own switch: no install checks, no loading
        try:
            self.inner.exec_module(module)  # type: ignore[attr-defined]
        finally:
            if old is None:
                os.environ.pop("NVTE_PROJECT_BUILDING", None)
            else:
                os.environ["NVTE_PROJECT_BUILDING"] = old
        tex = self.tex

        def load_framework_extension(framework: str) -> None:
            """memaudit's compatibility layer: the installed extension, loaded already."""
            if framework != "torch":
                raise CompatError(f"only the torch extension is loaded for a version's Python, not {framework!r}")
            sys.modules[TEX] = tex

        module.load_framework_extension = load_framework_extension  # type: ignore[attr-defined]


class _CommonFinder(importlib.abc.MetaPathFinder):
    def __init__(self, tree: Path, tex: types.ModuleType) -> None:
        self.tree, self.tex = tree, tex

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "transformer_engine.common":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or spec.origin is None:
            return None
        if not Path(spec.origin).resolve().is_relative_to(self.tree.resolve()):
            raise CompatError(f"transformer_engine.common would come from {spec.origin}, not from the version's tree")
        spec.loader = _CommonLoader(spec.loader, self.tex)
        return spec


# ---- the whole: load, import, verify ------------------------------------------------------------


@dataclass
class Loaded:
    """A version's TE, imported in this process over the installed compiled parts."""

    tree: Path
    version: str
    installed: str
    placeholders: list[str]

    def describe(self) -> dict[str, Any]:
        return {"compiled_parts": self.installed, "placeholders": list(self.placeholders)}


def load_tree(tree: Path, expected_version: str) -> Loaded:
    """Import ``transformer_engine.pytorch`` from ``tree`` (a directory holding
    ``transformer_engine/`` and its dist-info) over the installed compiled parts, then
    :func:`verify`. This process must not have imported TE before."""
    tree = Path(tree).resolve()
    if not (tree / "transformer_engine" / "__init__.py").is_file():
        raise CompatError(f"{tree} holds no transformer_engine package")
    tex, installed = load_installed_extension()
    placeholders = fill_missing(tex, scan_tex_names(tree), installed)
    sys.path.insert(0, str(tree))
    sys.meta_path.insert(0, _CommonFinder(tree, tex))
    importlib.invalidate_caches()
    import transformer_engine.pytorch  # noqa: F401

    verify(tree, expected_version)
    return Loaded(tree, expected_version, installed, placeholders)


def verify(tree: Path, expected_version: str) -> None:
    """Every imported ``transformer_engine`` module is the tree's, and TE's distribution version
    (what ``transformer_engine.__version__`` and memaudit's environment report) is ``expected_version``."""
    tree = Path(tree).resolve()
    foreign = []
    for name, module in list(sys.modules.items()):
        if not (name == "transformer_engine" or name.startswith("transformer_engine.")) or module is None:
            continue
        origin = getattr(module, "__file__", None)
        if origin is not None and not Path(origin).resolve().is_relative_to(tree):
            foreign.append(f"{name} ({origin})")
    if foreign:
        raise CompatError(f"modules not from the version's tree: {', '.join(sorted(foreign)[:5])}")
    found = metadata.version("transformer_engine")
    if found != expected_version:
        raise CompatError(f"the imported TE reports version {found}, expected {expected_version}")
    te = sys.modules["transformer_engine"]
    if getattr(te, "__version__", found) != expected_version:
        raise CompatError(f"transformer_engine.__version__ is {te.__version__}, expected {expected_version}")

"""The folder tree is the pipeline: memaudit's import graph has no circles, and no arrow from a
lower stage (the model: spec, report, ranks, units, errors; capture) to a higher one (targets,
runner, dist, judge, te, render, cli). Read with ``ast`` from the source: module-level and
function-level imports both (an import inside a function is an arrow too, only a hidden one).

Imports under ``if TYPE_CHECKING:`` never run: they make no circle, but they still may not point
up (a type is a dependency a reader follows)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "memaudit"

LOWER = (
    "memaudit.spec",
    "memaudit.report",
    "memaudit.ranks",
    "memaudit.units",
    "memaudit.errors",
    "memaudit.environment",
    "memaudit.capture",
)
"""The model and the recorder: they know nothing of what runs them, judges or shows them."""
HIGHER = (
    "memaudit.targets",
    "memaudit.runner",
    "memaudit.unread",
    "memaudit.distributed",
    "memaudit.judge",
    "memaudit.te",
    "memaudit.render",
    "memaudit.cli",
    "memaudit.pytest_plugin",
)


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported memaudit module, line, under TYPE_CHECKING) for every import in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for n in child.body:
                    visit_node(n, True)
                for n in child.orelse:
                    visit_node(n, typing_only)
                continue
            visit_node(child, typing_only)

    def visit_node(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name) if alias.name.startswith("memaudit") else None
                if target:
                    out.append((target, node.lineno, typing_only))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            if base.startswith("memaudit"):
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in MODULES else _resolve(base)
                    if target:
                        out.append((target, node.lineno, typing_only))
        visit(node, typing_only)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return [(t, line, typing) for t, line, typing in out if t != module]


GRAPH = {m: imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), run-time imports only."""
    edges = {m: sorted({t for t, _, typing in GRAPH[m] if not typing}) for m in GRAPH}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return found


def _within(module: str, stages: tuple[str, ...]) -> bool:
    return any(module == s or module.startswith(s + ".") for s in stages)


def test_the_graph_is_read() -> None:
    """Control: the reader sees module-level, function-level and TYPE_CHECKING imports."""
    runner = {t for t, _, _ in GRAPH["memaudit.runner"]}
    assert {"memaudit.capture", "memaudit.report", "memaudit.targets.base"} <= runner
    registry = GRAPH["memaudit.targets.registry"]
    assert any(t == "memaudit.targets.custom" for t, _, _ in registry)  # imported inside get_target
    assert any(typing for t, _, typing in GRAPH["memaudit.capture.hooks"])
    assert _heavy("memaudit.te.capture.classify") and _heavy("memaudit.runner") and not _heavy("memaudit.spec")


def test_no_import_circles() -> None:
    assert _cycles() == []


def test_no_arrow_from_a_lower_stage_to_a_higher_one() -> None:
    up = [
        f"{m}:{line} imports {t}"
        for m in sorted(GRAPH)
        if _within(m, LOWER)
        for t, line, _ in GRAPH[m]
        if _within(t, HIGHER)
    ]
    assert up == []


STAGES = (
    ("memaudit", "memaudit.errors", "memaudit.units"),
    ("memaudit.spec", "memaudit.report", "memaudit.ranks", "memaudit.environment", "memaudit.extension"),
    ("memaudit.capture",),
    ("memaudit.targets",),
    ("memaudit.runner", "memaudit.unread"),
    ("memaudit.distributed",),
    ("memaudit.judge",),
    ("memaudit.audit",),
    ("memaudit.render",),
    ("memaudit.cli", "memaudit.pytest_plugin", "memaudit.__main__"),
    ("memaudit.te",),
)
"""The pipeline, lowest first (docs/internals/architecture.md): a module imports its own stage or lower ones.
``memaudit`` is the package's ``__init__`` (its version; its attributes load lazily). TE is a wing
above every stage, entered through its door (``memaudit.te:EXTENSION``): its targets, its fallbacks
(the runner), its tables and figures (render), its commands (the CLI's helpers)."""


def _stage(module: str) -> int:
    best = [(len(s), i) for i, group in enumerate(STAGES) for s in group if module == s or module.startswith(s + ".")]
    assert best, f"{module} is in no stage: add it to STAGES (and docs/internals/architecture.md)"
    return max(best)[1]


def test_every_import_points_down_the_pipeline() -> None:
    up = [f"{m}:{line} imports {t}" for m in sorted(GRAPH) for t, line, _ in GRAPH[m] if _stage(t) > _stage(m)]
    assert up == []


def test_nothing_outside_the_te_wing_imports_it() -> None:
    """TE enters through its extension (declared by ``"pkg.mod:name"`` strings): no module outside
    memaudit/te/ imports memaudit.te, not even for a type."""
    into = [
        f"{m}:{line} imports {t}"
        for m in sorted(GRAPH)
        if not _within(m, ("memaudit.te",))
        for t, line, _ in GRAPH[m]
        if _within(t, ("memaudit.te",))
    ]
    assert into == []


def test_the_te_wing_is_registered_as_an_extension_like_anyone_else() -> None:
    """memaudit's one entry point group holds TE's extension; the older per-kind groups are gone."""
    text = (ROOT.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '[project.entry-points."memaudit.extensions"]\nte = "memaudit.te:EXTENSION"' in text
    assert 'memaudit.targets"]' not in text and 'memaudit.plugins"]' not in text


def test_te_is_above_targets() -> None:
    """The generic targets (the interface, custom factories, the matrix) know nothing of TE: TE's
    targets live in memaudit/te/ and import the interface."""
    up = [
        f"{m}:{line} imports {t}"
        for m in sorted(GRAPH)
        if _within(m, ("memaudit.targets",))
        for t, line, _ in GRAPH[m]
        if _within(t, ("memaudit.te", "memaudit.judge", "memaudit.render", "memaudit.cli"))
    ]
    assert up == []


HEAVY = ("torch", "transformer_engine", "transformer_engine_torch", "matplotlib", "numpy")
"""Libraries a module may import only when it is used: torch and TE (TE after its fused switch is
set), matplotlib and numpy (plots)."""
LIGHT_ENTRY = (
    "memaudit.cli",
    "memaudit.pytest_plugin",
    "memaudit.__main__",
    "memaudit.te.commands",
    "memaudit.te.emulate.pytest",
)
"""Entry modules that must start light (``memaudit --help`` and the commands extensions add; the plugin
loads in every pytest run, and with it the emulators extensions declare):
they import the stages a command uses inside the command."""


def _top_level(module: str) -> list[str]:
    """The names ``module`` imports when it is imported (not under TYPE_CHECKING, not in a function)."""
    out = []
    for node in ast.parse(MODULES[module].read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and _type_checking(node):
            continue
        for n in ast.walk(node) if isinstance(node, ast.If | ast.Try) else (node,):
            if isinstance(n, ast.Import):
                out += [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and not n.level:
                base = n.module or ""
                out += [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in n.names]
    return out


_HEAVY: dict[str, bool] = {}


def _heavy(module: str) -> bool:
    """Whether importing ``module`` imports one of :data:`HEAVY` (through memaudit's modules too)."""
    if module not in _HEAVY:
        _HEAVY[module] = False  # while in progress (no circles: test_no_import_circles)
        _HEAVY[module] = any(
            name.split(".")[0] in HEAVY
            or (name.startswith("memaudit") and (t := _resolve(name)) is not None and t != module and _heavy(t))
            for name in _top_level(module)
        )
    return _HEAVY[module]


def test_function_level_imports_have_their_reason() -> None:
    """An import of memaudit's own module inside a function is kept only where it has a reason: an
    entry module that must start light, or a module that imports torch, TE or matplotlib (imported
    when used: TE after its environment is set)."""
    needless = []
    for module, path in sorted(MODULES.items()):
        if _within(module, LIGHT_ENTRY):
            continue
        level = {id(n) for n in ast.parse(path.read_text(encoding="utf-8")).body}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for n in ast.walk(node):
                if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("memaudit") and id(n) not in level:
                    for a in n.names:
                        full = f"{n.module}.{a.name}"
                        target = full if full in MODULES else _resolve(n.module or "")
                        if target and not _heavy(target):
                            needless.append(f"{module}:{n.lineno} imports {target} inside a function")
    assert sorted(set(needless)) == []


def test_bench_imports_no_tests() -> None:
    """Benchmarks share helpers through bench/ (tests may import them), never through tests/."""
    bench = Path(__file__).resolve().parents[2] / "bench"
    found = []
    for path in sorted(bench.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert found == []


def test_a_circle_would_be_found() -> None:
    """Control: the cycle finder finds one made up here."""
    saved = dict(GRAPH)
    try:
        GRAPH["memaudit.spec"] = [*GRAPH["memaudit.spec"], ("memaudit.report.model", 1, False)]
        GRAPH["memaudit.report.model"] = [*GRAPH["memaudit.report.model"], ("memaudit.spec", 1, False)]
        assert ["memaudit.report.model", "memaudit.spec"] in [c for c in _cycles() if len(c) == 2]
    finally:
        GRAPH.clear()
        GRAPH.update(saved)

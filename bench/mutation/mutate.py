#!/usr/bin/env python
"""Mutation testing of the modules that decide verdicts and bytes: do the tests guard them?

A small AST mutator. Each mutant changes one thing in one function:

* ``cmp``   a comparison (``<`` / ``<=``, ``>`` / ``>=``, ``==`` / ``!=``, ``in`` / ``not in``, ``is`` / ``is not``)
* ``bool``  a boolean operator (``and`` / ``or``)
* ``arith`` arithmetic (``+`` / ``-``, ``*`` -> ``//``, ``//`` and ``/`` -> ``*``, ``%`` -> ``//``; also ``+=`` /
``-=``)
* ``const`` a constant off by one (an integer ``n`` -> ``n + 1``; ``True`` / ``False``)
* ``neg``   a negated condition (``if``, ``while``, a conditional expression, a comprehension filter;
            ``not x`` -> ``x``)
* ``ret``   a dropped return value (``return x`` -> ``return None``)
* ``call``  a dropped call (a statement ``f(...)`` -> ``pass``)

Only code inside functions is mutated (not annotations, f-strings, docstrings or asserts). The
mutants of each module are sampled (``--per-module``, ranked by a hash of each mutant's key and
``--seed``, so that edits elsewhere leave the sample as it was), and each runs only the
tests that execute its function, found once by tracing the whole suite (``--trace``: which test
calls which function of these modules; cached in ``--cache``). A mutant is killed when those
tests fail (or time out); it survives when they pass. The mutant is applied to a copy of the
checkout made when the run starts (its package first on ``PYTHONPATH``, its tests run); the
working tree is never touched, and may be edited during a run.

    python bench/mutation/mutate.py --trace                      # once per change of the tests (about 5 minutes)
    python bench/mutation/mutate.py --per-module 60 --out reports/bench/mutation.json --md reports/bench/mutation.md

Survivors are then either killed by a new test or explained: ``bench/mutation/mutation_notes.toml`` maps a
mutant's key (module, function, operator, the change) to why it is equivalent, or to the test that
now kills it; the markdown lists every survivor with its note, and the score per module counts
equivalent mutants out. ``--only KEYS.json`` re-runs a list of mutants (the survivors of a run).
This is a benchmark, not part of CI: about 540 mutants at a few seconds each on 2 cores.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import types
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODULES = (
    "memaudit/te/capture/classify.py",
    "memaudit/judge/baseline.py",
    "memaudit/capture/recorder.py",
    "memaudit/te/estimate/shapes.py",
    "memaudit/judge/checks.py",
    "memaudit/report/model.py",
    "memaudit/report/codec.py",
    "memaudit/report/io.py",
    "memaudit/capture/rows.py",
    "memaudit/te/estimate/model.py",
    "memaudit/judge/rules.py",
    "memaudit/judge/byte_expr.py",
)
NOTES = ROOT / "bench" / "mutation" / "mutation_notes.toml"
GOAL = 0.90
"""At least this share of the non-equivalent mutants of each module is killed."""

CMP_SWAP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
ARITH_SWAP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
}


@dataclass(frozen=True)
class Mutant:
    module: str
    function: str
    """Qualified name of the innermost function (``Class.method``, ``outer.inner``)."""
    code_line: int
    """``co_firstlineno`` of that function's code (its first decorator's line, else its ``def``)."""
    op: str
    outer: str
    """Qualified name of the outermost function around the mutant (a module function or a method):
    the one whose code a running process swaps (``--fork``)."""
    outer_line: int
    start: tuple[int, int]
    end: tuple[int, int]
    original: str
    replacement: str
    nth: int = 0
    """Which of its function's identical changes this is (two ``return False`` in one function)."""

    @property
    def key(self) -> str:
        """Stable across edits elsewhere in the module: module, function, operator, the change and
        which of the function's identical changes it is."""
        digest = hashlib.sha1(f"{self.original}\x00{self.replacement}".encode()).hexdigest()[:8]
        return f"{self.module}::{self.function}::{self.op}::{digest}" + (f"::{self.nth}" if self.nth else "")

    def describe(self) -> str:
        def short(s: str) -> str:
            s = " ".join(s.split())
            return s if len(s) <= 70 else s[:67] + "..."

        return f"`{short(self.original)}` -> `{short(self.replacement)}`"


def _segment(lines: list[str], node: ast.AST) -> str:
    return ast.get_source_segment("".join(lines), node) or ""


class _Finder(ast.NodeVisitor):
    """Every mutation point of a module, with its innermost function."""

    def __init__(self, module: str, source: str) -> None:
        self.module = module
        self.source = source
        self.stack: list[tuple[str, int]] = []  # (qualname part, code line) of the enclosing defs/classes
        self.kinds: list[str] = []  # "def" or "class", parallel to stack
        self.out: list[Mutant] = []

    # -- scopes
    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, kind: str) -> None:
        line = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        self.stack.append((node.name, line))
        self.kinds.append(kind)
        if (
            kind == "def"
        ):  # arguments' defaults are evaluated at def time, in the enclosing scope: skip; annotations too
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                body = body[1:]  # the docstring
            for stmt in body:
                self.visit(stmt)
        else:
            for stmt in node.body:
                self.visit(stmt)
        self.stack.pop()
        self.kinds.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:  # noqa: N802
        self._scope(node, "def")

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]  # noqa: N815

    def visit_ClassDef(self, node: ast.ClassDef) -> None:  # noqa: N802
        self._scope(node, "class")

    def _in_function(self) -> bool:
        return "def" in self.kinds

    def _function(self) -> tuple[str, int]:
        i = max(i for i, k in enumerate(self.kinds) if k == "def")
        return ".".join(n for n, _ in self.stack[: i + 1]), self.stack[i][1]

    def _outer(self) -> tuple[str, int]:
        i = self.kinds.index("def")
        return ".".join(n for n, _ in self.stack[: i + 1]), self.stack[i][1]

    # -- what is never mutated
    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:  # noqa: N802 - positions inside f-strings are unreliable in 3.11
        return

    def visit_Assert(self, node: ast.Assert) -> None:  # noqa: N802
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:  # noqa: N802
        if node.value is not None:
            self.visit(node.value)

    def visit_Lambda(self, node: ast.Lambda) -> None:  # noqa: N802
        self.visit(node.body)

    # -- mutation points
    def _add(self, op: str, node: ast.AST, replacement: str) -> None:
        if not self._in_function() or not hasattr(node, "end_lineno"):
            return
        original = ast.get_source_segment(self.source, node)
        if original is None:
            return
        func, line = self._function()
        outer, outer_line = self._outer()
        self.out.append(
            Mutant(
                self.module,
                func,
                line,
                op,
                outer,
                outer_line,
                (node.lineno, node.col_offset),
                (node.end_lineno, node.end_col_offset),
                original,
                replacement,
            )
        )  # type: ignore[attr-defined]

    def _expr(self, node: ast.expr) -> str:
        return f"({ast.unparse(node)})"

    def visit_Compare(self, node: ast.Compare) -> None:  # noqa: N802
        swap = CMP_SWAP.get(type(node.ops[0]))
        if swap is not None:
            new = ast.Compare(node.left, [swap(), *node.ops[1:]], node.comparators)
            self._add("cmp", node, self._expr(new))
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:  # noqa: N802
        new = ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
        self._add("bool", node, self._expr(new))
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:  # noqa: N802
        swap = ARITH_SWAP.get(type(node.op))
        if swap is not None:
            self._add("arith", node, self._expr(ast.BinOp(node.left, swap(), node.right)))
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:  # noqa: N802
        swap = {ast.Add: ast.Sub, ast.Sub: ast.Add}.get(type(node.op))
        if swap is not None:
            self._add("arith", node, ast.unparse(ast.AugAssign(node.target, swap(), node.value)))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:  # noqa: N802
        v = node.value
        if isinstance(v, bool):
            self._add("const", node, str(not v))
        elif isinstance(v, int):
            self._add("const", node, f"({v + 1})")

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:  # noqa: N802
        if isinstance(node.op, ast.Not):
            self._add("neg", node, self._expr(node.operand))
        self.generic_visit(node)

    def _negate(self, test: ast.expr) -> None:
        if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
            self._add("neg", test, f"(not {self._expr(test)})")

    def visit_If(self, node: ast.If) -> None:  # noqa: N802
        self._negate(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:  # noqa: N802
        self._negate(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:  # noqa: N802
        self._negate(node.test)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for cond in node.ifs:
            self._negate(cond)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:  # noqa: N802
        if node.value is not None and not isinstance(node.value, ast.Constant):  # a constant is the const operator's
            self._add("ret", node, "return None")
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:  # noqa: N802
        if isinstance(node.value, ast.Call):
            self._add("call", node, "pass")
        self.generic_visit(node)


def mutants_of(module: str, root: Path = ROOT) -> list[Mutant]:
    source = (root / module).read_text(encoding="utf-8")
    finder = _Finder(module, source)
    finder.visit(ast.parse(source))
    seen: dict[tuple[str, str, str, str], int] = {}
    out = []
    for m in finder.out:
        k = (m.function, m.op, m.original, m.replacement)
        out.append(replace(m, nth=seen.get(k, 0)))
        seen[k] = seen.get(k, 0) + 1
    return out


def sample_of(mutants: list[Mutant], n: int, seed: int) -> list[Mutant]:
    """``n`` mutants chosen by a hash of their keys: the same mutants are chosen again after edits
    elsewhere (a new or removed candidate changes the sample by at most one)."""
    rank = sorted(mutants, key=lambda m: hashlib.sha1(f"{seed}:{m.key}".encode()).hexdigest())
    return sorted(rank[:n], key=lambda m: m.start)


def apply(source: str, m: Mutant) -> str:
    """The module's source with ``m`` applied (its text span replaced); it must still compile."""
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode("utf-8")))
    raw = source.encode("utf-8")
    a = offsets[m.start[0] - 1] + m.start[1]
    b = offsets[m.end[0] - 1] + m.end[1]
    assert raw[a:b].decode("utf-8") == m.original, (m.key, raw[a:b][:80], m.original[:80])
    out = (raw[:a] + m.replacement.encode("utf-8") + raw[b:]).decode("utf-8")
    compile(out, m.module, "exec")
    return out


# ---- which tests execute which function ------------------------------------------------------------
TRACER = '''
"""pytest plugin (bench/mutation/mutate.py --trace): the functions of the mutated modules each test calls."""
import json, os, sys, threading, time
FILES = set(json.loads(os.environ["MUTATE_FILES"]))
OUT = os.environ["MUTATE_MAP"]
seen = {}
durations = {}
current = None

def _prof(frame, event, arg):
    if event == "call":
        code = frame.f_code
        if code.co_filename in FILES:
            seen.setdefault(current, set()).add((code.co_filename, code.co_firstlineno))

def pytest_runtest_protocol(item, nextitem):
    global current
    current = item.nodeid
    sys.setprofile(_prof)
    threading.setprofile(_prof)
    start = time.perf_counter()
    return None

def pytest_runtest_logfinish(nodeid, location):
    global current
    sys.setprofile(None)
    threading.setprofile(None)
    current = None

def pytest_runtest_logreport(report):
    durations[report.nodeid] = durations.get(report.nodeid, 0.0) + report.duration

def pytest_sessionfinish(session, exitstatus):
    sys.setprofile(None)
    out = {"tests": {k: sorted([os.path.relpath(f), n] for f, n in v) for k, v in seen.items() if k},
           "durations": durations}
    with open(OUT, "w") as f:
        json.dump(out, f)
'''


def trace(cache: Path) -> Path:
    """Run the whole suite once, recording for each test the functions of MODULES it calls."""
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "mutate_trace.py").write_text(TRACER, encoding="utf-8")
    out = cache / "map.json"
    env = {
        **os.environ,
        "MUTATE_FILES": json.dumps([str(ROOT / m) for m in MODULES]),
        "MUTATE_MAP": str(out),
        "PYTHONPATH": os.pathsep.join([str(cache), str(ROOT)]),
    }
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "mutate_trace", "tests"],
        cwd=ROOT,
        env=env,
    )
    print(f"traced the suite in {time.perf_counter() - start:.0f} s (pytest exit {proc.returncode})", flush=True)
    return out


def tests_of(mapping: dict[str, Any], m: Mutant) -> list[str]:
    """The tests that call the mutant's function; where none does (it runs at import or collection
    time, or once per process behind a cache), those of its outermost function, else every test
    that calls any function of its module. Fastest first, so that a killed mutant stops early."""
    tests: list[str] = []
    for want in ([m.module, m.code_line], [m.module, m.outer_line]):
        tests = [t for t, funcs in mapping["tests"].items() if want in funcs]
        if tests:
            break
    else:
        tests = [t for t, funcs in mapping["tests"].items() if any(f == m.module for f, _ in funcs)]
    return sorted(tests, key=lambda t: mapping["durations"].get(t, 0.0))


# ---- running one mutant -------------------------------------------------------------------------------
SNAPSHOT = (
    "memaudit",
    "tests",
    "bench",
    "reports",
    "scenarios",
    "pyproject.toml",
    "README.md",
    "CHANGELOG.md",
    "docs",
    ".github",
    "action.yml",
)
"""What a mutant's tests run in: a copy of the checkout made when the run starts, so that editing
the working tree during a run changes nothing (the mutated module is a file of this copy). Every
file a test reads must be here: a test that cannot be collected is an error, not a kill."""


def snapshot(work: Path) -> Path:
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    for name in SNAPSHOT:
        src = ROOT / name
        if not src.exists():
            continue
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__", ".mutation-cache"))
        else:
            shutil.copy2(src, tree / name)
    return tree


CONTROL = {"collects": False}
"""Whether the unmutated snapshot collects the whole suite (checked once per run, in :func:`main`)."""


def control_collects(tree: Path) -> bool:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    return proc.returncode == 0


def run_mutant(m: Mutant, tests: list[str], tree: Path, timeout: float) -> dict[str, Any]:
    target = tree / m.module
    original = target.read_text(encoding="utf-8")
    try:
        mutated = apply(original, m)
    except SyntaxError as exc:
        return {"status": "invalid", "detail": str(exc)}
    target.write_text(mutated, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    args = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.perf_counter()
    try:
        proc = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
        code = proc.returncode
        tail = proc.stdout[-2000:]
    except subprocess.TimeoutExpired:
        code, tail = -1, "timeout"
    finally:
        target.write_text(original, encoding="utf-8")
    took = time.perf_counter() - start
    killer = next(
        (line.split(" ")[1] for line in tail.splitlines() if line.startswith("FAILED ") or line.startswith("ERROR ")),
        None,
    )
    if code == 0:
        status = "survived"
    elif code == 5:
        status = "no tests"
    elif code in (1, -1):  # a test failed, or the tests never finished
        status = "killed"
    elif code in (2, 4) and CONTROL["collects"]:
        # the tests could not be collected (a test id parametrized from what memaudit reads went
        # missing): the unmutated snapshot collects every test, so the mutant broke it
        status = "killed"
        killer = killer or f"collection (pytest exit {code}; the unmutated snapshot collects)"
    else:  # the tests did not judge the mutant (the snapshot itself fails to collect, an internal error)
        status = "error"
    return {
        "status": status,
        "exit": code,
        "seconds": round(took, 1),
        "killed_by": killer if status == "killed" else None,
        "tests": len(tests),
    }


# ---- running mutants in a warm process: fork, swap one function's code, run its tests in-process ------------
def _function_objects(module: Any) -> list[types.FunctionType]:
    """Every function object the module defines: module functions, methods (static, class,
    properties' accessors, nested classes), and what ``functools`` wrappers wrap."""
    out: list[types.FunctionType] = []
    seen: set[int] = set()

    def add(obj: Any) -> None:
        for _ in range(8):
            if isinstance(obj, staticmethod | classmethod):
                obj = obj.__func__
                continue
            if isinstance(obj, property):
                for f in (obj.fget, obj.fset, obj.fdel):
                    if f is not None:
                        add(f)
                return
            inner = getattr(obj, "__wrapped__", None)
            if isinstance(obj, types.FunctionType) and id(obj) not in seen:
                seen.add(id(obj))
                out.append(obj)
            if inner is None:
                return
            obj = inner

    classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    while classes:
        cls = classes.pop()
        for v in vars(cls).values():
            if isinstance(v, type) and v.__module__ == module.__name__:
                classes.append(v)
            else:
                add(v)
    for v in vars(module).values():
        if not isinstance(v, type):
            add(v)
    return out


def _code_of(code: types.CodeType, qualname: str, line: int) -> types.CodeType | None:
    stack = [code]
    while stack:
        c = stack.pop()
        if c.co_qualname == qualname and c.co_firstlineno == line:
            return c
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return None


def _swap(m: Mutant, tree: Path) -> bool:
    """Give the live function around ``m`` the mutated code (every reference to it sees the change);
    clear functools caches that may hold what the original computed. False when it cannot be done."""
    import functools
    import importlib

    name = m.module.removesuffix(".py").replace("/", ".")
    module = importlib.import_module(name)
    source = (tree / m.module).read_text(encoding="utf-8")
    new = _code_of(compile(apply(source, m), str(tree / m.module), "exec"), m.outer, m.outer_line)
    live = [
        f
        for f in _function_objects(module)
        if f.__code__.co_qualname == m.outer and f.__code__.co_firstlineno == m.outer_line
    ]
    if new is None or not live:
        return False
    for f in live:
        try:
            f.__code__ = new
        except ValueError:  # another closure layout
            return False
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("memaudit"):
            for v in list(vars(mod).values()):
                if isinstance(v, functools._lru_cache_wrapper):  # type: ignore[attr-defined]
                    v.cache_clear()
    return True


def serve(plan_path: Path) -> int:
    """The warm process (``--serve``, run in the snapshot): import once, then per mutant fork a child
    that swaps the code and runs ``pytest -x`` on its tests; one JSON line per mutant on stdout."""
    import importlib
    import signal

    import pytest  # noqa: F401 - imported once, before the forks
    import torch  # noqa: F401

    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    tree = Path(plan["tree"])
    for mod in MODULES:
        importlib.import_module(mod.removesuffix(".py").replace("/", "."))
    importlib.import_module("memaudit.cli")
    log = tree.parent / "child.log"
    for item in plan["mutants"]:
        m = Mutant(**{**item["mutant"], "start": tuple(item["mutant"]["start"]), "end": tuple(item["mutant"]["end"])})
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child
            code = 98
            try:
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                if not _swap(m, tree):
                    os._exit(97)
                import pytest as pt

                code = int(pt.main(["-x", "-q", "-p", "no:cacheprovider", *item["tests"]]))
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001 - the child reports by its exit status
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        deadline = start + item["timeout"]
        status = None
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(st)
            elif time.perf_counter() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = -9
            else:
                time.sleep(0.02)
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:] if log.exists() else ""
        print(
            json.dumps({"key": m.key, "exit": status, "seconds": round(time.perf_counter() - start, 1), "tail": tail}),
            flush=True,
        )
    return 0


def _result(exit_code: int, tail: str, seconds: float, tests: int) -> dict[str, Any]:
    killer = next((line.split(" ")[1] for line in tail.splitlines() if line.startswith(("FAILED ", "ERROR "))), None)
    if exit_code == 0:
        status = "survived"
    elif exit_code == 5:
        status = "no tests"
    elif exit_code in (1, -9, -1):  # a test failed, or the tests never finished (a loop the mutant made)
        status = "killed"
        killer = killer or ("timeout" if exit_code in (-9, -1) else None)
    else:
        status = "error"
    summary = next(
        (
            line.strip("= ")
            for line in reversed(tail.splitlines())
            if " in " in line and ("passed" in line or "failed" in line or "skipped" in line)
        ),
        "",
    )
    return {
        "status": status,
        "exit": exit_code,
        "seconds": seconds,
        "killed_by": killer if status == "killed" else None,
        "tests": tests,
        "summary": summary,
    }


def run_forked(sample: list[Mutant], mapping: dict[str, Any], tree: Path, work: Path, timeout: float) -> Any:
    """Yield (mutant, tests, result) for each mutant, from one warm ``--serve`` process."""
    items = []
    for m in sample:
        tests = tests_of(mapping, m)
        budget = sum(mapping["durations"].get(t, 1.0) for t in tests)
        items.append({"mutant": asdict(m), "tests": tests, "timeout": min(timeout, 60 + 5 * budget)})
    plan = work / "plan.json"
    plan.write_text(json.dumps({"tree": str(tree), "mutants": [i for i in items if i["tests"]]}), encoding="utf-8")
    for item in items:
        if not item["tests"]:
            yield (
                Mutant(
                    **{**item["mutant"], "start": tuple(item["mutant"]["start"]), "end": tuple(item["mutant"]["end"])}
                ),
                [],
                {"status": "no tests", "tests": 0},
            )
    by_key = {
        Mutant(**{**i["mutant"], "start": tuple(i["mutant"]["start"]), "end": tuple(i["mutant"]["end"])}).key: i
        for i in items
    }
    proc = subprocess.Popen(
        [sys.executable, str(tree / "bench" / "mutation" / "mutate.py"), "--serve", str(plan)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        r = json.loads(line)
        item = by_key[r["key"]]
        m = Mutant(**{**item["mutant"], "start": tuple(item["mutant"]["start"]), "end": tuple(item["mutant"]["end"])})
        res = _result(r["exit"], r["tail"], r["seconds"], len(item["tests"]))
        if res["status"] == "error" or r["exit"] == 97:  # could not swap the code in place: a fresh process
            res = run_mutant(m, item["tests"], tree, item["timeout"])
            res["isolated"] = True
        yield m, item["tests"], res
    proc.wait()


# ---- the report -------------------------------------------------------------------------------------------
def load_notes() -> dict[str, dict[str, str]]:
    if not NOTES.exists():
        return {}
    return tomllib.loads(NOTES.read_text(encoding="utf-8")).get("mutant", {})


def summarize(results: list[dict[str, Any]], notes: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
    per: dict[str, dict[str, Any]] = {}
    for r in results:
        s = per.setdefault(
            r["module"],
            {"sampled": 0, "killed": 0, "survived": 0, "equivalent": 0, "no_tests": 0, "invalid": 0, "error": 0},
        )
        s["sampled"] += 1
        note = notes.get(r["key"], {})
        if r["status"] == "survived" and note.get("equivalent"):
            s["equivalent"] += 1
        elif r["status"] == "survived":
            s["survived"] += 1
        elif r["status"] == "no tests":
            s["no_tests"] += 1  # no test executes the function: a survivor
        elif r["status"] == "invalid":
            s["invalid"] += 1
        elif r["status"] == "error":
            s["error"] += 1  # the tests could not run (not collected): not judged, so not killed
        else:
            s["killed"] += 1
    for s in per.values():
        counted = s["killed"] + s["survived"] + s["no_tests"] + s["error"]
        s["score"] = round(s["killed"] / counted, 3) if counted else None
        s["met"] = s["score"] is not None and s["score"] >= GOAL
    return per


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    notes = load_notes()
    per = summarize(results, notes)
    lines = [
        "# Mutation score: do the tests guard the verdicts?",
        "",
        f"`python bench/mutation/mutate.py --per-module {meta['per_module']} --seed {meta['seed']}`: "
        f"{meta['per_module']} mutants sampled per module from {meta['candidates']} candidates in all, each run "
        "against the tests "
        "that execute its function (traced from the whole suite). Operators: comparisons, boolean operators, "
        "arithmetic, "
        "integer constants +1 and booleans flipped, negated conditions, dropped return values, dropped calls. "
        "A survivor is either equivalent (explained below, counted out) or a test gap. "
        f"Goal: at least {GOAL:.0%} of the non-equivalent mutants of every module killed.",
        "",
        f"Run: {meta['when']}, {meta['seconds']:.0f} s on {meta['cpus']} cores"
        + (
            f" ({meta['rerun']} survivors of the full run run again after new tests, with a fresh trace)."
            if meta.get("rerun")
            else "."
        ),
        "",
        "| module | sampled | killed | survived | equivalent | no test runs it | tests not run (error) | score | goal "
        "met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    total = {"killed": 0, "counted": 0}
    for mod in MODULES:
        s = per.get(mod)
        if not s:
            continue
        counted = s["killed"] + s["survived"] + s["no_tests"] + s.get("error", 0)
        total["killed"] += s["killed"]
        total["counted"] += counted
        score = f"{s['score']:.0%}" if s["score"] is not None else "-"
        lines.append(
            f"| `{mod.removeprefix('memaudit/')}` | {s['sampled']} | {s['killed']} | {s['survived']} | "
            f"{s['equivalent']} | "
            f"{s['no_tests']} | {s.get('error', 0)} | {score} | {'yes' if s['met'] else '**no**'} |"
        )
    if total["counted"]:
        lines += [
            "",
            f"Overall: {total['killed']} of {total['counted']} non-equivalent mutants killed "
            f"({total['killed'] / total['counted']:.1%}).",
        ]
    survivors = [r for r in results if r["status"] in ("survived", "no tests", "error")]
    lines += [
        "",
        "## Survivors",
        "",
        "Each with why it is equivalent (counted out of the score) or the gap it shows.",
        "",
        "| module | function | mutant | why |",
        "|---|---|---|---|",
    ]
    for r in sorted(survivors, key=lambda r: (MODULES.index(r["module"]), r["line"])):
        note = notes.get(r["key"], {})
        why = (
            note.get("equivalent") and f"equivalent: {note['equivalent']}" or note.get("gap") or "**not yet explained**"
        )
        lines.append(
            f"| `{r['module'].removeprefix('memaudit/')}` | `{r['function']}` (line {r['line']}) | {r['op']}: "
            f"{r['describe'].replace('|', '&#124;')} | {why.replace('|', '&#124;')} |"
        )
    killed_by_new = [
        (r, notes[r["key"]]["killed_by"])
        for r in results
        if r["status"] == "killed" and notes.get(r["key"], {}).get("killed_by")
    ]
    if killed_by_new:
        lines += [
            "",
            "## Survivors of earlier runs that new tests kill",
            "",
            "| module | mutant | killed by |",
            "|---|---|---|",
        ]
        for r, test in killed_by_new:
            lines.append(
                f"| `{r['module'].removeprefix('memaudit/')}` | {r['describe'].replace('|', '&#124;')} | `{test}` |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", action="store_true", help="(re)build the map of which test runs which function")
    ap.add_argument("--cache", type=Path, default=ROOT / ".mutation-cache")
    ap.add_argument("--per-module", type=int, default=60)
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--modules", help="comma-separated subset of the modules (paths as in MODULES)")
    ap.add_argument("--only", type=Path, help="a JSON list of mutant keys to run (e.g. the survivors of a run)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path, help="the results (JSON)")
    ap.add_argument("--md", type=Path, help="the summary (markdown)")
    ap.add_argument("--list", action="store_true", help="print the sampled mutants and exit")
    ap.add_argument("--merge", type=Path, help="an earlier run's JSON: its results stand, except the mutants run now")
    ap.add_argument(
        "--isolated",
        action="store_true",
        help="a fresh pytest process per mutant (slower; the default forks a warm one)",
    )
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        return serve(args.serve)

    if args.trace or not (args.cache / "map.json").exists():
        trace(args.cache)
    mapping = json.loads((args.cache / "map.json").read_text(encoding="utf-8"))
    modules = tuple(args.modules.split(",")) if args.modules else MODULES
    only = set(json.loads(args.only.read_text(encoding="utf-8"))) if args.only else None
    sample: list[Mutant] = []
    candidates = 0
    for mod in modules:
        all_mutants = mutants_of(mod)
        candidates += len(all_mutants)
        if only is not None:
            sample += [m for m in all_mutants if m.key in only]
        else:
            sample += sample_of(all_mutants, args.per_module, args.seed)
    if args.list:
        for m in sample:
            print(m.key, m.start[0], m.describe())
        return 0
    tree = snapshot(args.cache)
    CONTROL["collects"] = control_collects(tree)
    print(f"the unmutated snapshot {'collects' if CONTROL['collects'] else 'does NOT collect'} the suite", flush=True)
    results = []
    start = time.perf_counter()
    if args.isolated:
        runs = (
            (m, t, run_mutant(m, t, tree, args.timeout) if t else {"status": "no tests", "tests": 0})
            for m in sample
            for t in [tests_of(mapping, m)]
        )
    else:
        runs = run_forked(sample, mapping, tree, args.cache, args.timeout)
    for i, (m, _tests, r) in enumerate(runs, 1):
        row = {
            **{k: v for k, v in asdict(m).items() if k not in ("start", "end")},
            "key": m.key,
            "line": m.start[0],
            "describe": m.describe(),
            **r,
        }
        results.append(row)
        print(
            f"[{i}/{len(sample)}] {r['status']:9} {m.module}:{m.start[0]} {m.function} {m.op} {m.describe()}"
            f" ({r.get('tests', 0)} tests, {r.get('seconds', 0)} s)",
            flush=True,
        )
    meta = {
        "per_module": args.per_module,
        "seed": args.seed,
        "candidates": candidates,
        "seconds": time.perf_counter() - start,
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d"),
    }
    if args.merge:
        earlier = json.loads(args.merge.read_text(encoding="utf-8"))
        now = {r["key"]: r for r in results}
        results = [now.pop(r["key"], r) for r in earlier["mutants"]] + list(now.values())
        meta = {
            **earlier["meta"],
            "seconds": earlier["meta"]["seconds"] + meta["seconds"],
            "rerun": earlier["meta"].get("rerun", 0) + len(sample),
        }
    notes = load_notes()
    if args.out:
        args.out.write_text(
            json.dumps({"meta": meta, "summary": summarize(results, notes), "mutants": results}, indent=1) + "\n",
            encoding="utf-8",
        )
    if args.md:
        args.md.write_text(markdown(results, meta), encoding="utf-8")
    for mod, s in summarize(results, notes).items():
        print(f"{mod}: {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

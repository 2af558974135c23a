"""Byte expressions: the values of ``max_bytes`` and ``exact_bytes``.

``4096``, ``"136 MiB"``, ``"tokens * hidden * elt"``, ``"(tokens - 64) * hidden * elt / 2"``. The
grammar (docs/guides/budgets.md, "Byte expressions") is a small subset of Python's, parsed with
:func:`ast.parse` and checked against an allow-list:

- a quantity: a whole number, or a number with a unit (``136 MiB``, ``1.5 GiB``, ``64B``; the units
  of :mod:`memaudit.units`), which must come to a whole number of bytes;
- a variable: the target's dimensions (``tokens``, ``hidden``, ...), ``groups`` and ``elt``;
- ``+``, ``-``, ``*``, ``/`` (exact: it must divide evenly), ``//`` (rounds down) and parentheses.

Everything else (calls, attributes, subscripts, comparisons, unary minus, ``**``, floats, other
names) is refused with the column of the offending token. Every intermediate value must lie in
0 .. 2**63-1. Parts without variables are evaluated once, at parse time; the rest compiles to a
short stack program (a tuple of small tuples: cheap to hold by the hundred thousand, and no work
for the garbage collector), so :meth:`ByteExpr.value` costs about one loop step per operator.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memaudit.errors import UsageError, did_you_mean
from memaudit.targets import registry
from memaudit.units import MAX_BYTES, NUMBER, UNIT_LIST, UNITS, parse_bytes, quantity_bytes

if TYPE_CHECKING:
    from memaudit.judge.rules import CaseLike

CASE_VARIABLES = ("groups", "elt")
"""Byte-expression variables every case has; the target's shape dimensions come first."""
ELEMENT_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
MAX_CHARS = 1000
"""The longest byte expression (longer text is refused before it is parsed)."""
MAX_DEPTH = 100
"""The deepest nesting of operators and parentheses."""
GRAMMAR = "numbers, units (B, KiB, MiB, ...), variables, + - * / // and parentheses"

_QUANTITY = re.compile(rf"(?<![\w.])(?:(?P<qnum>{NUMBER})[ \t]*(?P<unit>[A-Za-z_]\w*)|(?P<num>{NUMBER})(?![.\w]))")
"""A number followed by a word (a unit, or a mistake such as ``2 tokens``), or a number alone."""
_BAD_CHAR = re.compile(r"[^\t -~]")
"""Anything but printable ASCII and tabs (so a column is a character, and a byte, offset)."""
_WHOLE = re.compile(rf"\s*(?P<num>{NUMBER})\s*(?P<unit>[A-Za-z]*)\s*")
_PLACEHOLDER = "_"
_BINOPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//"}
_REFUSED_OPS = {
    ast.Pow: "'**'",
    ast.Mod: "'%'",
    ast.MatMult: "'@'",
    ast.LShift: "'<<'",
    ast.RShift: "'>>'",
    ast.BitOr: "'|'",
    ast.BitXor: "'^'",
    ast.BitAnd: "'&'",
}
_REFUSED_UNARY = {
    ast.USub: "unary minus (byte quantities are never negative)",
    ast.UAdd: "unary plus",
    ast.Not: "'not'",
    ast.Invert: "'~'",
}
_REFUSED_NODES = {
    "Call": "a function call",
    "Attribute": "an attribute",
    "Subscript": "a subscript",
    "Slice": "a slice",
    "Compare": "a comparison",
    "BoolOp": "'and'/'or'",
    "IfExp": "a conditional expression",
    "Lambda": "a lambda",
    "NamedExpr": "':='",
    "Tuple": "a tuple",
    "List": "a list",
    "Set": "a set",
    "Dict": "a dict",
    "ListComp": "a comprehension",
    "SetComp": "a comprehension",
    "DictComp": "a comprehension",
    "GeneratorExp": "a generator",
    "JoinedStr": "an f-string",
    "FormattedValue": "an f-string",
    "Starred": "'*'",
    "Await": "'await'",
    "Yield": "'yield'",
    "YieldFrom": "'yield'",
}

_PUSH, _ADD, _SUB, _MUL, _DIV, _FLOORDIV = range(6)
_FROM_VAR, _FROM_CONST, _FROM_STACK = range(3)
"""A stack-program instruction is ``(op, source, arg, column)``: its operand is variable number
``arg``, the number ``arg``, or popped from the stack; ``_PUSH`` pushes it, a binary op combines
the top of the stack with it (``column`` is the operator's, for messages)."""
_OPCODES = {"+": _ADD, "-": _SUB, "*": _MUL, "/": _DIV, "//": _FLOORDIV}
_SYMBOLS = {v: k for k, v in _OPCODES.items()}
Instruction = tuple[int, int, int, int]
Program = tuple[Instruction, ...]


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut to its first 60 characters when longer than 80."""
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text)} characters)"


class _Refused(Exception):
    """Internal: a value out of range or an uneven division; the message names the operator's column."""


def default_dims() -> tuple[str, ...]:
    """Every built-in target's dimension names (the variables where no target is named)."""

    return tuple(p.name for p in registry.union_shape(registry.builtin_targets()))


@dataclass(frozen=True)
class ByteExpr:
    """A byte quantity: ``"136 MiB"``, ``4096``, or an expression of quantities and case variables
    (the target's dimensions such as ``tokens``, then ``groups`` and ``elt``) with ``+ - * / //``
    and parentheses: ``"tokens * hidden * elt"``, ``"(tokens - 64) * hidden * elt / 2"``.

    Two expressions are equal when their text is. Build one with :meth:`parse`.
    """

    text: str
    const: int | None = field(default=None, compare=False, repr=False)
    """The value, when the expression has no variable."""
    variables: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """The variables it reads, each once, in the order the program indexes them."""
    program: Program = field(default=(), compare=False, repr=False)
    """The stack program of an expression with variables (see :func:`_run`)."""

    @classmethod
    def parse(
        cls, value: Any, *, source: str | None = None, key: str | None = None, dims: tuple[str, ...] | None = None
    ) -> ByteExpr:
        """Parse ``value`` (an int or a string); ``dims`` are the target's dimension names (default:
        every built-in target's). Every problem is a UsageError naming the column."""
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise UsageError(
                f"expected a byte quantity such as '136 MiB' or 4096, got {value!r}", source=source, key=key
            )
        if isinstance(value, int):
            return cls(str(value), parse_bytes(value, source=source, key=key))
        variables = (*(dims if dims is not None else default_dims()), *CASE_VARIABLES)
        try:
            const, names, program = _compile(value, variables)
        except ValueError as e:
            raise UsageError(str(e), source=source, key=key) from None
        return cls(value, const, names, program)

    @property
    def constant(self) -> bool:
        """Whether the expression has no variable (its value is the same for every case)."""
        return self.const is not None

    def value(self, case: CaseLike, *, source: str | None = None, key: str | None = None) -> int:
        """The quantity for ``case``; a variable the case cannot supply, a division that does not
        come out even, a negative or too large intermediate value is a UsageError naming the case."""
        if self.const is not None:
            return self.const
        env = []  # the variables' values, inline: value() runs once per case and budget
        dims = case.dims
        for name in self.variables:
            v = (
                ELEMENT_SIZE.get(getattr(case, "dtype", ""))
                if name == "elt"
                else case.groups
                if name == "groups"
                else dims.get(name)
            )
            env.append(
                v if v.__class__ is int and 0 < v <= MAX_BYTES else _variable(case, name, self.text, source, key)
            )
        try:
            return _run(self.program, env)
        except _Refused as e:
            values = ", ".join(f"{k}={v}" for k, v in zip(self.variables, env, strict=True))
            raise UsageError(
                f"{_shown(self.text)} for case {case.id} ({values}): {e}", source=source, key=key
            ) from None


def _variable(case: CaseLike, name: str, text: str, source: str | None, key: str | None) -> int:
    if name == "elt":
        size = ELEMENT_SIZE.get(getattr(case, "dtype", ""))
        if size is None:
            raise UsageError(
                f"{_shown(text)}: case {case.id} has dtype {case.dtype!r}, so 'elt' is unknown", source=source, key=key
            )
        return size
    value = case.groups if name == "groups" else case.dims.get(name)
    if value.__class__ is not int or not 1 <= value <= MAX_BYTES:  # bool and int subclasses too
        raise UsageError(f"{_shown(text)}: case {case.id} has no {name} (got {value!r})", source=source, key=key)
    return value


def _run(program: Program, env: list[int]) -> int:
    """Run a stack program on the variables' values; every result is checked to lie in
    0 .. 2**63-1 and every ``/`` to divide evenly (else :class:`_Refused`)."""
    stack: list[int] = []
    for op, source, arg, col in program:
        b = env[arg] if source == _FROM_VAR else arg if source == _FROM_CONST else stack.pop()
        if op == _PUSH:
            stack.append(b)
            continue
        a = stack[-1]
        if op == _MUL:  # the common operators inline; the rest, and any problem, in _apply
            v = a * b
        elif op == _ADD:
            v = a + b
        else:
            stack[-1] = _apply(op, a, b, col)
            continue
        stack[-1] = v if v <= MAX_BYTES else _apply(op, a, b, col)
    return stack[-1]


def _apply(op: int, a: int, b: int, col: int) -> int:
    """``a op b`` for two byte counts; ``col`` is the operator's column, for the message."""
    if op == _MUL:
        v = a * b
    elif op == _ADD:
        v = a + b
    elif op == _SUB:
        v = a - b
        if v < 0:
            raise _Refused(f"{a} - {b} (the '-' at column {col}) is negative")
    elif b == 0:
        raise _Refused(f"{a} {_SYMBOLS[op]} 0 (the {_SYMBOLS[op]!r} at column {col}) divides by zero")
    else:
        v, rest = divmod(a, b)
        if rest and op == _DIV:
            raise _Refused(
                f"{a} / {b} (the '/' at column {col}) is not a whole number of bytes; write // to round down"
            )
    if v > MAX_BYTES:
        raise _Refused(f"{a} {_SYMBOLS[op]} {b} (the {_SYMBOLS[op]!r} at column {col}) is more than 2**63-1 bytes")
    return v


# ---- parsing -------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _compile(text: str, variables: tuple[str, ...]) -> tuple[int | None, tuple[str, ...], Program]:
    """``(value, (), ())`` for a constant, else ``(None, variables read, program)``.
    Raises ValueError with the message for the user. Cached: scenarios repeat expressions."""
    if len(text) > MAX_CHARS:
        raise ValueError(f"byte expression {_shown(text)} is too long; at most {MAX_CHARS} characters")
    bad = _BAD_CHAR.search(text)
    if bad is not None:
        raise ValueError(
            f"character {bad.group()!r} at column {bad.start() + 1} of {_shown(text)} is not allowed in a byte "
            f"expression (it has {GRAMMAR})"
        )
    if not text.strip():
        raise ValueError(f"empty byte expression {_shown(text)} (use e.g. '4096', '136 MiB', 'tokens * hidden * elt')")
    whole = _WHOLE.fullmatch(text)
    if whole is not None:  # a lone quantity, the common case: no tree needed
        return _quantity(text, whole.start("num"), whole.end(), whole["num"], whole["unit"], variables), (), ()
    masked, quantities = _mask_quantities(text, variables)
    body = masked.lstrip()
    lead = len(masked) - len(body)
    try:
        tree = ast.parse(body, mode="eval")
    except SyntaxError as e:
        known = ("never closed", "unmatched", "does not match", "too many nested")
        reason = e.msg if e.msg and any(k in e.msg for k in known) else "invalid syntax"
        offset = e.offset or 0
        at = f"at column {lead + offset}" if 1 <= offset <= len(body) and (e.lineno or 1) == 1 else "at the end"
        raise ValueError(
            f"malformed byte expression {_shown(text)}: {reason} {at} (a byte expression has {GRAMMAR})"
        ) from None
    except (RecursionError, MemoryError, ValueError):
        raise ValueError(f"malformed byte expression {_shown(text)}: too complex") from None
    compiler = _Compiler(text, body, lead, quantities, variables)
    const, program = compiler.node(tree.body, 1)
    if const is not None:
        return const, (), ()
    return None, tuple(compiler.names), tuple(program)


def _mask_quantities(text: str, variables: tuple[str, ...]) -> tuple[str, dict[int, int]]:
    """Replace each quantity (``136 MiB``, ``4096``) by ``_`` and spaces, keeping every column, and
    return the masked text with ``{column: bytes}``. A number followed by a word that is not a unit
    is a ValueError (``12 MiBs``, ``2 tokens``, ``1e3``)."""
    out, quantities, pos = [], {}, 0
    for m in _QUANTITY.finditer(text):
        start, end = m.span()
        number, unit = (m["num"], "") if m["num"] is not None else (m["qnum"], m["unit"])
        quantities[start] = _quantity(text, start, end, number, unit, variables)
        out += [text[pos:start], _PLACEHOLDER, " " * (end - start - 1)]
        pos = end
    out.append(text[pos:])
    return "".join(out), quantities


def _quantity(text: str, start: int, end: int, number: str, unit: str, variables: tuple[str, ...]) -> int:
    """The bytes of the quantity at ``text[start:end]``; a ValueError names its column (unless it
    is the whole text) and, for ``2 tokens``, says to write ``2 * tokens``."""
    try:
        return quantity_bytes(number, unit, text[start:end].strip())
    except ValueError:
        pass
    alone = not text[:start].strip() and not text[end:].strip()
    try:
        quantity_bytes(
            number, unit, text[start:end].strip(), "" if alone else f" at column {start + 1} of {_shown(text)}"
        )
    except ValueError as e:
        raise ValueError(f"{e}; write {number} * {unit}" if unit in variables else str(e)) from None
    raise AssertionError("unreachable")


class _Compiler:
    """Turns an allow-listed tree into ``(constant, [])`` or ``(None, stack program)``; parts
    without variables are folded into constants (their problems are found here, at parse time)."""

    def __init__(self, text: str, body: str, lead: int, quantities: dict[int, int], variables: tuple[str, ...]) -> None:
        self.text, self.body, self.lead = text, body, lead
        self.quantities, self.variables = quantities, variables
        self.names: list[str] = []

    def col(self, node: ast.AST) -> int:
        """The 1-based column of ``node`` in the text as written."""
        return self.lead + getattr(node, "col_offset", 0) + 1

    def refuse(self, what: str, node: ast.AST, hint: str = "") -> ValueError:
        return ValueError(
            f"{what} at column {self.col(node)} of {_shown(self.text)} is not allowed{hint} "
            f"(a byte expression has {GRAMMAR})"
        )

    def node(self, node: ast.AST, depth: int) -> tuple[int | None, list[Instruction]]:
        if depth > MAX_DEPTH:  # checked before recursing further, so the recursion stays shallow
            raise ValueError(
                f"byte expression {_shown(self.text)} is nested more than {MAX_DEPTH} deep (at column {self.col(node)})"
            )
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.BinOp):
            return self.binop(node, depth)
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_BYTES:
                return v, []
            if isinstance(v, float):
                source = ast.get_source_segment(self.body, node) or repr(v)
                raise ValueError(
                    f"{source!r} at column {self.col(node)} of {_shown(self.text)} is not a whole number of bytes "
                    f"(write a whole number, or a unit: '1.5 KiB' is 1536 bytes)"
                )
            what = {str: "a string", bytes: "a bytes literal", complex: "a complex number"}.get(type(v), repr(v))
            raise self.refuse(what, node)
        if isinstance(node, ast.UnaryOp):
            raise self.refuse(_REFUSED_UNARY.get(type(node.op), "a unary operator"), node)
        raise self.refuse(_REFUSED_NODES.get(type(node).__name__, type(node).__name__), node)

    def name(self, node: ast.Name) -> tuple[int | None, list[Instruction]]:
        start = getattr(node, "col_offset", 0) + self.lead
        if node.id == _PLACEHOLDER and start in self.quantities:
            return self.quantities[start], []
        if node.id in self.variables:
            if node.id not in self.names:
                self.names.append(node.id)
            return None, [(_PUSH, _FROM_VAR, self.names.index(node.id), 0)]
        unit = {u.lower(): u for u in UNITS}.get(node.id.lower())
        hint = (
            f" ({node.id!r} is a unit: put a number before it, e.g. '1 {unit}')"
            if unit is not None
            else did_you_mean(node.id, self.variables)
        )
        raise ValueError(
            f"unknown variable {node.id!r} at column {self.col(node)} of {_shown(self.text)}{hint}; "
            f"variables are {', '.join(self.variables)}"
        )

    def binop(self, node: ast.BinOp, depth: int) -> tuple[int | None, list[Instruction]]:
        sym = _BINOPS.get(type(node.op))
        if sym is None:
            what = _REFUSED_OPS.get(type(node.op), type(node.op).__name__)
            hint = " (use a unit such as MiB, or write the product out)" if isinstance(node.op, ast.Pow) else ""
            raise ValueError(
                f"{what} at column {self._op_col(node, what.strip(chr(39)))} of {_shown(self.text)} is not "
                f"allowed{hint} "
                f"(a byte expression has {GRAMMAR})"
            )
        col = self._op_col(node, sym)
        lc, left = self.node(node.left, depth + 1)
        rc, right = self.node(node.right, depth + 1)
        op = _OPCODES[sym]
        if lc is not None and rc is not None:
            try:
                return _apply(op, lc, rc, col), []
            except _Refused as e:
                raise ValueError(f"{_shown(self.text)}: {e}") from None
        left = left if lc is None else [(_PUSH, _FROM_CONST, lc, 0)]
        if rc is not None:
            return None, [*left, (op, _FROM_CONST, rc, col)]
        if len(right) == 1:  # a variable: take it straight from the environment
            return None, [*left, (op, *right[0][1:3], col)]
        return None, [*left, *right, (op, _FROM_STACK, 0, col)]

    def _op_col(self, node: ast.BinOp, sym: str) -> int:
        """The 1-based column of a binary operator: the symbol between its operands."""
        left_end = getattr(node.left, "end_col_offset", None) or 0
        right_start = getattr(node.right, "col_offset", len(self.body))
        i = self.body.find(sym, left_end, right_start)
        return self.lead + (i if i >= 0 else getattr(node, "col_offset", 0)) + 1


__all__ = ["CASE_VARIABLES", "ELEMENT_SIZE", "MAX_CHARS", "MAX_DEPTH", "UNIT_LIST", "ByteExpr", "default_dims"]

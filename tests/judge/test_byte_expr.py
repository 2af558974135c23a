"""Byte expressions (memaudit/judge/byte_expr.py) and byte quantities (memaudit/units.py).

The issue's examples, the column in every message, each refused construct, hostile sizes, the
division rule, negative and too large values, units, and a scenario through ``memaudit check``.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from _budget_cases import make_case
from typer.testing import CliRunner

from memaudit.cli import app
from memaudit.errors import UsageError
from memaudit.judge.byte_expr import MAX_CHARS, MAX_DEPTH
from memaudit.judge.rules import ByteExpr
from memaudit.units import MAX_BYTES, parse_bytes

ROOT = Path(__file__).resolve().parents[2]
DIMS = ("tokens", "hidden", "ffn")
CASE = make_case("bf16", 4, [], tokens=256, hidden=64, ffn=128, dtype="bf16")  # elt = 2


def parse(text: object) -> ByteExpr:
    return ByteExpr.parse(text, source="s.toml", key="budget[0].max_bytes", dims=DIMS)


def value(text: str, case=CASE) -> int:
    return parse(text).value(case, source="s.toml", key="budget[0].max_bytes")


def refused(text: object, *needles: str, case=None) -> str:
    """The message of the UsageError that parsing (or, with ``case``, evaluating) ``text`` raises."""
    with pytest.raises(UsageError) as info:
        expr = parse(text)
        if case is not None:
            expr.value(case, source="s.toml", key="budget[0].max_bytes")
    message = str(info.value)
    assert message.startswith("s.toml: budget[0].max_bytes: "), message
    for needle in needles:
        assert needle in message, message
    return message


# ---- the examples ---------------------------------------------------------------------------
def test_division_subtraction_and_parentheses() -> None:
    assert value("tokens*hidden*elt/2") == 256 * 64 * 2 // 2
    assert value("tokens * hidden * elt - 1 KiB") == 256 * 64 * 2 - 1024
    assert value("(tokens - 64) * (hidden + 1) * elt") == 192 * 65 * 2
    assert value("tokens * hidden // 3") == 256 * 64 // 3
    assert value("((tokens))") == 256


def test_fractional_bytes_are_refused_not_rounded() -> None:
    refused("0.1 B", "'0.1 B' is 0.1 bytes, not a whole number of bytes")
    with pytest.raises(UsageError, match="0.1 bytes"):
        parse_bytes("0.1 B")


def test_lowercase_b_is_ambiguous() -> None:
    refused("3 Mb", "ambiguous unit 'Mb'", "write MB (1000000 bytes) or MiB (1048576 bytes)")
    with pytest.raises(UsageError, match="ambiguous unit 'Mb'"):
        parse_bytes("3 Mb")


def test_unknown_name_gives_its_column_and_a_suggestion() -> None:
    msg = refused("tokns*hidden", "unknown variable 'tokns' at column 1 of 'tokns*hidden' (did you mean 'tokens'?)")
    assert "variables are tokens, hidden, ffn, groups, elt" in msg
    refused("tokens * hiden", "'hiden' at column 10", "did you mean 'hidden'")


# ---- what is accepted ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (4096, 4096),
        ("4096", 4096),
        ("136 MiB", 136 * 2**20),
        ("136MiB", 136 * 2**20),
        ("1.5 GiB", 3 * 2**29),
        ("1.5 KiB", 1536),
        ("1.0 B", 1),
        ("1_048_576 B", 2**20),
        ("  2 * tokens + 1 KiB ", 2 * 256 + 1024),
        ("tokens * 2 * ffn * elt + groups * 8", 256 * 2 * 128 * 2 + 32),
        ("elt", 2),
        ("4 TiB * 1 MiB - 1 + 4 TiB * 1 MiB", 2**63 - 1),
        ("tokens / 256 * 7", 7),
        ("tokens // 3 * 3 + tokens - tokens", 255),
    ],
)
def test_accepted(text: object, expected: int) -> None:
    assert value(text) == expected


def test_constant_parts_are_folded_and_constant_expressions_are_constant() -> None:
    e = parse("(1 MiB - 1 KiB) / 2")
    assert e.constant and e.const == (2**20 - 1024) // 2 and e.variables == ()
    e = parse("tokens * (2 KiB / 2)")
    assert not e.constant and e.variables == ("tokens",) and e.value(CASE) == 256 * 1024
    assert parse("tokens + tokens * hidden").variables == ("tokens", "hidden")  # each once


def test_every_existing_scenario_expression_parses_as_before() -> None:
    case = make_case("bf16", 8, [], tokens=1024, hidden=256, ffn=512, dtype="fp32")
    t, h, f, g, e = 1024, 256, 512, 8, 4
    assert value("tokens * hidden * elt", case) == t * h * e
    assert value("tokens * ffn * elt", case) == t * f * e
    assert value(
        "tokens * hidden * elt + tokens * 2 * ffn * elt + tokens * ffn * elt + tokens * 4 + groups * 8", case
    ) == (t * h * e + t * 2 * f * e + t * f * e + t * 4 + g * 8)
    for text, expected in (
        ("1 GiB", 2**30),
        ("1 MiB", 2**20),
        ("100 KiB", 102400),
        ("2 GiB", 2**31),
        ("64 MiB", 2**26),
        ("16", 16),
        ("1 B", 1),
        (96477376, 96477376),
    ):
        assert parse(text).const == expected


def test_equal_texts_are_equal_expressions() -> None:
    assert parse("tokens * elt") == parse("tokens * elt") and parse(4096) == parse("4096")
    assert parse("tokens * elt") != parse("elt * tokens")


# ---- positions and each refused construct ----------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("f(tokens)", "a function call at column 1"),
        ("__import__('os').system('x')", "a function call at column 1"),
        ("tokens.real", "an attribute at column 1"),
        ("tokens[0]", "a subscript at column 1"),
        ("tokens < hidden", "a comparison at column 1"),
        ("tokens and hidden", "'and'/'or' at column 1"),
        ("tokens if groups else 1", "a conditional expression at column 1"),
        ("lambda: 1", "a lambda at column 1"),
        ("(x := 1)", "':=' at column 2"),
        ("tokens, hidden", "a tuple at column 1"),
        ("[tokens]", "a list at column 1"),
        ("{tokens: 1}", "a dict at column 1"),
        ("'1 MiB'", "a string at column 1"),
        ("True", "True at column 1"),
        ("-tokens", "unary minus (byte quantities are never negative) at column 1"),
        ("tokens * +2", "unary plus at column 10"),
        ("~tokens", "'~' at column 1"),
        ("not tokens", "'not' at column 1"),
        ("tokens ** 2", "'**' at column 8"),
        ("tokens % 3", "'%' at column 8"),
        ("tokens @ 3", "'@' at column 8"),
        ("tokens << 3", "'<<' at column 8"),
        ("tokens | 3", "'|' at column 8"),
        ("1.5 * tokens", "'1.5' at column 1 of '1.5 * tokens' is 1.5 bytes"),
        (".5 * tokens", "'.5' at column 1 of '.5 * tokens' is not a whole number of bytes"),
        ("1e3", "unknown unit 'e3'"),
        ("0x10 * tokens", "unknown unit 'x10'"),
        (
            "tokens * 2 MiBs",
            "malformed byte quantity '2 MiBs' at column 10 of 'tokens * 2 MiBs': unknown unit 'MiBs' (did you mean "
            "'MiB'?)",
        ),
        ("2 tokens", "write 2 * tokens"),
        (
            "tokens * MiB",
            "'MiB' at column 10 of 'tokens * MiB' ('MiB' is a unit: put a number before it, e.g. '1 MiB')",
        ),
        ("_ * tokens", "unknown variable '_' at column 1"),
        ("os", "unknown variable 'os' at column 1"),
        ("(tokens", "'(' was never closed at column 1"),
        ("tokens)", "unmatched ')' at column 7"),
        ("tokens +", "invalid syntax at the end"),
        ("tokens = 1", "invalid syntax at column 8"),
        ("tokens\n+ 1", "character '\\n' at column 7"),
        ("tokens * \u00e9", "character '\u00e9' at column 10"),
        ("tokens\x00", "character '\\x00' at column 7"),
        ("", "empty byte expression"),
        ("   ", "empty byte expression"),
    ],
)
def test_refused_with_its_column(text: str, needle: str) -> None:
    refused(text, needle)


@pytest.mark.parametrize("value", [True, 1.5, 1024.0, None, [1], {"a": 1}, -4096, 2**63])
def test_not_a_string_or_a_byte_count(value: object) -> None:
    refused(value)


# ---- hostile sizes: refused at once, never a RecursionError ---------------------------------------
@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("tokens+" * 1_500_000 + "1", "is too long; at most 1000 characters"),  # 10.5 MB
        ("x" * (MAX_CHARS + 1), "is too long"),
        ("1+" * 400 + "1", f"is nested more than {MAX_DEPTH} deep"),
        ("1*(" * 150 + "1" + ")" * 150, f"is nested more than {MAX_DEPTH} deep"),
        ("(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
        ("-" * 999 + "1", "unary minus"),
        ("9" * 999, "has 999 digits"),
        ("tokens * " + "9" * 30, "has 30 digits"),
        ("(" * 999, "malformed byte expression"),
    ],
)
def test_hostile_sizes_are_refused_before_evaluation(text: str, needle: str) -> None:
    start = time.perf_counter()
    msg = refused(text, needle)
    assert time.perf_counter() - start < 300, "a hang"  # only a hang bound: speed is bench/perf/byte_expr_speed.py's
    assert len(msg) < 600  # a long expression is cut in the message


def test_the_deepest_allowed_nesting_parses_and_evaluates() -> None:
    text = "+".join(["tokens"] * (MAX_DEPTH - 1))  # MAX_DEPTH - 2 additions deep, plus the leaf
    assert value(text) == 256 * (MAX_DEPTH - 1)


# ---- division, negative values, overflow -----------------------------------------------------------
def test_division_must_be_exact_for_the_case() -> None:
    assert value("tokens * hidden * elt / 4") == 8192
    msg = refused("tokens*hidden*elt/3", case=CASE)
    assert f"'tokens*hidden*elt/3' for case {CASE.id} (tokens=256, hidden=64, elt=2)" in msg
    assert "32768 / 3 (the '/' at column 18) is not a whole number of bytes; write // to round down" in msg
    assert value("tokens*hidden*elt//3") == 32768 // 3


def test_constant_division_is_checked_at_parse_time() -> None:
    refused("1 KiB / 3", "'1 KiB / 3': 1024 / 3 (the '/' at column 7) is not a whole number of bytes")
    refused("1 KiB / (2 - 2)", "1024 / 0 (the '/' at column 7) divides by zero")
    refused("1 KiB // 0", "1024 // 0 (the '//' at column 7) divides by zero")


def test_division_by_zero_for_a_case() -> None:
    refused("tokens / (groups - 4)", "256 / 0 (the '/' at column 8) divides by zero", f"case {CASE.id}", case=CASE)


def test_negative_values_are_refused() -> None:
    refused("1 - 2", "1 - 2 (the '-' at column 3) is negative")
    refused("tokens - 300", "256 - 300 (the '-' at column 8) is negative", case=CASE)
    # every intermediate value is a byte count: no detour through a negative one
    refused("tokens - 300 + 300", "is negative", case=CASE)
    assert value("tokens + 300 - 300") == 256


def test_values_past_2_63_are_refused() -> None:
    refused("8 TiB * 8 TiB", "8796093022208 * 8796093022208 (the '*' at column 7) is more than 2**63-1 bytes")
    refused("8 TiB * 1024 * 1024", "is more than 2**63-1 bytes")  # exactly 2**63
    refused("tokens * 1 TiB * 1 TiB", "(the '*' at column 16) is more than 2**63-1 bytes", case=CASE)
    refused("4 TiB * 1 MiB + 4 TiB * 1 MiB", "(the '+' at column 15) is more than 2**63-1 bytes")
    refused("9000000 TiB", "is more than 2**63-1 bytes")
    assert value("4 TiB * 1 MiB - 1 + 4 TiB * 1 MiB") == MAX_BYTES


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 KiB / tokens", 4),  # a variable on the right, taken straight into the operator
        ("1000 / tokens", "1000 / 256 (the '/' at column 6) is not a whole number of bytes"),
        ("hidden - tokens", "64 - 256 (the '-' at column 8) is negative"),
        ("tokens - hidden", 192),
        ("1 KiB // tokens", 4),
        ("(tokens + hidden) * (ffn - hidden) / (groups * elt)", (256 + 64) * (128 - 64) // 8),  # stack operands
        ("(tokens + hidden) * (hidden - ffn)", "64 - 128 (the '-' at column 29) is negative"),
        ("ffn * ffn * ffn * ffn * ffn * ffn * ffn * ffn * ffn", "(the '*' at column 47) is more than 2**63-1 bytes"),
    ],
)
def test_every_operand_form(text: str, expected: int | str) -> None:
    if isinstance(expected, int):
        assert value(text) == expected
    else:
        refused(text, expected, case=CASE)


def test_a_variable_the_case_cannot_supply() -> None:
    refused("elt * tokens", "has dtype '-', so 'elt' is unknown", case=make_case("bf16", 1, [], dtype="-"))
    for bad in (0, True, 2.0, None, 2**63):
        odd = SimpleNamespace(id="odd", groups=1, dtype="bf16", dims={"tokens": bad, "hidden": 64, "ffn": 128})
        refused("tokens * hidden", f"case {odd.id} has no tokens (got {bad!r})", case=odd)


# ---- units ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 B", 1),
        ("1 kB", 1000),
        ("1 KB", 1000),
        ("1 MB", 10**6),
        ("1 GB", 10**9),
        ("1 TB", 10**12),
        ("1 KiB", 1024),
        ("1 MiB", 2**20),
        ("1 GiB", 2**30),
        ("1 TiB", 2**40),
        ("4096", 4096),
        ("0", 0),
        ("1.5 KiB", 1536),
        ("0.5 B", None),
        ("0.3 KiB", None),
        ("1.9 GiB", None),
        ("1.5", None),
        ("2.5 kB", 2500),
        ("0.001 KB", 1),
        ("1.000000001 GB", 10**9 + 1),
        ("8388607.999999 TiB", None),
        ("8388607 TiB", 8388607 * 2**40),
    ],
)
def test_units_and_whole_bytes(text: str, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(UsageError, match="not a whole number of bytes"):
            parse_bytes(text)
        refused(text, "not a whole number of bytes")
    else:
        assert parse_bytes(text) == expected
        assert parse(text).const == expected


def test_fractional_messages_give_the_exact_value() -> None:
    refused("0.3 KiB", "'0.3 KiB' is 307.2 bytes")
    refused("1.9 GiB", "'1.9 GiB' is 2040109465.6 bytes")
    refused("0.000000000000000000001 TiB", "is 0.000000001099511627776 bytes")


@pytest.mark.parametrize(
    ("unit", "needle"),
    [
        ("b", "ambiguous unit 'b' (a lowercase b can mean bits): write B for bytes"),
        ("kb", "ambiguous unit 'kb'"),
        ("Kb", "ambiguous unit 'Kb'"),
        ("mb", "ambiguous unit 'mb'"),
        ("Mb", "ambiguous unit 'Mb'"),
        ("Gb", "ambiguous unit 'Gb'"),
        ("gb", "ambiguous unit 'gb'"),
        ("Tb", "ambiguous unit 'Tb'"),
        ("Mib", "ambiguous unit 'Mib'"),
        ("gib", "ambiguous unit 'gib'"),
        ("MIB", "unit 'MIB' is spelled 'MiB'"),
        ("GIB", "is spelled 'GiB'"),
        ("kiB", "is spelled 'KiB'"),
        ("mB", "is spelled 'MB'"),
        ("K", "unknown unit 'K'"),
        ("M", "unknown unit 'M'"),
        ("bytes", "unknown unit 'bytes'"),
        ("PiB", "unknown unit 'PiB'"),
        ("MiBs", "(did you mean 'MiB'?)"),
    ],
)
def test_refused_units_name_the_accepted_ones(unit: str, needle: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_bytes(f"3 {unit}", key="--tolerance")
    assert needle in str(info.value)
    refused(f"3 {unit}", needle)
    if "ambiguous" not in needle:
        assert "units are B, kB, KB, MB, GB, TB, KiB, MiB, GiB, TiB" in refused(f"3 {unit}")


def test_parse_bytes_still_takes_ints_and_refuses_the_rest() -> None:
    assert parse_bytes(0) == 0 and parse_bytes(MAX_BYTES) == MAX_BYTES
    for bad, needle in (
        (-1, ">= 0"),
        (2**63, "at most 2**63-1"),
        (True, "expected a byte quantity"),
        ("1 MiB + 1", "malformed byte quantity"),
        ("-5 B", "malformed"),
        ("", "malformed"),
        ("x" * 10_000_000, "malformed byte quantity 'xxxx"),
    ):
        with pytest.raises(UsageError, match=None) as info:
            parse_bytes(bad, key="--tolerance")
        assert needle in str(info.value) and len(str(info.value)) < 300


# ---- many expressions (their speed is measured by bench/perf/byte_expr_speed.py, not here) -------------
def test_many_distinct_expressions_evaluate_exactly() -> None:
    exprs = [parse(f"tokens * (hidden + {i}) * elt / 2 - {i} + 1 KiB") for i in range(5000)]
    total = sum(e.value(CASE) for e in exprs)
    assert total == sum(256 * (64 + i) - i + 1024 for i in range(5000))


# ---- through memaudit check ------------------------------------------------------------------------
REFERENCE = ROOT / "reports" / "cpu" / "reference.json"
SCENARIO = """[cases]
target = "reference"
recipes = ["bf16"]
groups = [1, 4, 8]
tokens = 1024
hidden = 256
ffn = 512
dtype = "bf16"

# fc2.input is a view of the activation output: half the FC1 output (T, 2F).
[[budget]]
name = "fc2-input-is-half-the-fc1-output"
select = { operand = "fc2.input" }
measure = "physical"
exact_bytes = "(tokens * 2 * ffn * elt) / 2"

[[budget]]
name = "saved-ceiling"
max_bytes = "tokens * (hidden + 3 * ffn) * elt + tokens * 4 + groups * 8"

[[budget]]
name = "fc1-input-is-the-ceiling-less-the-activations"
select = { operand = "fc1.input" }
measure = "physical"
exact_bytes = "tokens * (hidden + 3 * ffn) * elt - tokens * 3 * ffn * elt"
"""


def check(tmp_path: Path, text: str):
    scen = tmp_path / "s.toml"
    scen.write_text(text, encoding="utf-8")
    return CliRunner().invoke(app, ["check", str(REFERENCE), "--scenario", str(scen)]), scen


def test_check_with_division_subtraction_and_parentheses(tmp_path: Path) -> None:
    result, _ = check(tmp_path, SCENARIO)
    assert result.exit_code == 0, result.output
    assert "9 pass, 0 fail" in result.stdout


def test_check_shows_the_expression_of_a_failing_budget(tmp_path: Path) -> None:
    tight = SCENARIO.replace('+ groups * 8"', '+ groups * 8 - (1 KiB + 1 KiB) / 2"')
    result, _ = check(tmp_path, tight)
    assert result.exit_code == 1, result.output
    assert "0 pass" not in result.stdout and "3 fail" in result.stdout
    assert "[tokens * (hidden + 3 * ffn) * elt + tokens * 4 + groups * 8 - (1 KiB + 1 KiB) / 2]" in result.stdout


def test_check_refuses_an_uneven_division_naming_the_case_and_column(tmp_path: Path) -> None:
    result, scen = check(tmp_path, SCENARIO.replace('"(tokens * 2 * ffn * elt) / 2"', '"(tokens * 2 * ffn * elt) / 3"'))
    assert result.exit_code == 2, result.output
    err = result.stderr
    assert f"{scen}: budget[0].exact_bytes:" in err and "reference/bf16/g1/t1024-h256-f512/bf16" in err
    assert "2097152 / 3 (the '/' at column 26) is not a whole number of bytes" in err
    assert "Traceback" not in result.output


def test_check_refuses_a_bad_expression_at_load_with_its_column(tmp_path: Path) -> None:
    result, scen = check(tmp_path, SCENARIO.replace('"(tokens * 2 * ffn * elt) / 2"', '"(tokens * 2 * fnn * elt) / 2"'))
    assert result.exit_code == 2
    assert f"{scen}: budget[0].exact_bytes: unknown variable 'fnn' at column 15" in result.stderr
    assert "(did you mean 'ffn'?)" in result.stderr


def test_the_plugin_marker_takes_expressions() -> None:
    from memaudit.pytest_plugin import marker_rules

    (rule,) = marker_rules([pytest.mark.saved_budget(max_bytes="(1 MiB - 1 KiB) / 2").mark], source="t.py")
    assert rule.byte_target(CASE) == (2**20 - 1024) // 2
    with pytest.raises(UsageError, match="saved_budget.max_bytes: malformed byte quantity '3 Mb': ambiguous unit"):
        marker_rules([pytest.mark.saved_budget(max_bytes="3 Mb").mark], source="t.py")

"""pytest plugin (entry point ``memaudit``): the ``saved_tensors`` fixture and the ``saved_budget`` marker.

::

    @pytest.mark.saved_budget(max_bytes="64 MiB", count={"fc1.input": 1}, forbid=["fc1.output"])
    def test_mlp(saved_tensors):
        y = model(x)
        saved_tensors.label(x, "fc1.input")

``saved_tensors`` yields an entered :func:`memaudit.capture` and exits it at teardown. After the
test body, the marker's budgets are evaluated on ``saved_tensors.report()`` with the same rule
engine as scenario files; a failing budget fails the test with the rule, the numbers and the
offending rows. This module imports neither torch nor TE at import time: it is loaded by every
pytest run in an environment where memaudit is installed.

``device="meta"`` in the marker makes meta the default device while the fixture is active
(``torch.device("meta")``): a model and inputs the test builds without naming a device hold no
values and allocate nothing, so a budget can be checked at production shape on any machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

MARKER = "saved_budget"
FIXTURE = "saved_tensors"
MARKER_KEYS = ("max_bytes", "exact_bytes", "count", "forbid", "rules", "allow_incomplete", "stack", "device", "ranks")
MARKER_HELP = (
    f"{MARKER}(max_bytes=None, exact_bytes=None, count=None, forbid=None, rules=None): budgets on the "
    f"tensors autograd saved during the test (captured by the {FIXTURE} fixture, requested automatically). "
    "max_bytes/exact_bytes: saved bytes ('64 MiB'); count: {operand pattern: N or '<= N'}; "
    "forbid: [operand pattern or select table]; rules: [budget tables as in scenario files]; "
    "stack=True: name the source line of each saved tensor in the failure; device='meta': meta is the default "
    "device in the test (shapes only, nothing allocated); ranks=[0, 1]: under torchrun, judge on these ranks only "
    "(default: every rank judges what it saved, and a failure names the rank). See docs/budgets.md."
)

_rules_key = pytest.StashKey[list]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test with the marker gets the fixture even if it does not ask for it."""
    for item in items:
        if item.get_closest_marker(MARKER) is None:
            continue
        names = getattr(item, "fixturenames", None)
        if isinstance(names, list) and FIXTURE not in names:
            names.append(FIXTURE)


@pytest.fixture
def saved_tensors(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An entered ``memaudit.capture()``: every tensor autograd saves in the test is recorded
    (with each save's source line where the marker says ``stack=True``). Under a marker with
    ``device="meta"``, meta is also the default device until teardown."""
    import contextlib

    from memaudit.capture import capture

    marks = list(request.node.iter_markers(MARKER))
    stack = any(m.kwargs.get("stack") is True for m in marks)
    device = marker_device(marks)
    with contextlib.ExitStack() as contexts:
        cap = contexts.enter_context(capture(stack=stack))
        if device is not None:
            import torch

            contexts.enter_context(torch.device(device))
        yield cap


def marker_device(marks: list[pytest.Mark]) -> str | None:
    """The ``device`` a marker asks for (the closest marker's), or None."""
    for m in marks:
        if "device" in m.kwargs:
            return m.kwargs["device"]
    return None


def marker_rules(marks: list[pytest.Mark], *, source: str) -> list[Any]:
    """The marker arguments as budget rules; bad arguments raise UsageError naming them."""
    from memaudit.errors import UsageError, did_you_mean
    from memaudit.judge.scenario import parse_rule

    rules = []
    for m in marks:
        if m.args:
            raise UsageError(f"takes keyword arguments only ({', '.join(MARKER_KEYS)}), got {m.args!r}", source=source, key=MARKER)
        for k, v in m.kwargs.items():
            key = f"{MARKER}.{k}"
            if k in ("max_bytes", "exact_bytes"):
                rules.append(parse_rule({"name": k, k: v}, source=source, key=MARKER))
            elif k == "count":
                if not isinstance(v, dict) or not v:
                    raise UsageError(f"expected {{operand pattern: count}}, got {v!r}", source=source, key=key)
                for pattern, n in v.items():
                    rules.append(
                        parse_rule(
                            {"name": f"count {pattern}", "select": {"operand": pattern}, "count": n},
                            source=source,
                            key=f"{key}[{pattern!r}]",
                        )
                    )
            elif k == "forbid":
                items = v if isinstance(v, list | tuple) else [v]
                for i, sel in enumerate(items):
                    select = {"operand": sel} if isinstance(sel, str) else sel
                    label = sel if isinstance(sel, str) else ", ".join(f"{a}={b}" for a, b in (sel.items() if isinstance(sel, dict) else ()))
                    rules.append(parse_rule({"name": f"forbid {label}", "select": select, "forbid": True}, source=source, key=f"{key}[{i}]"))
            elif k in ("allow_incomplete", "stack"):
                if not isinstance(v, bool):
                    raise UsageError(f"expected true or false, got {v!r}", source=source, key=key)
            elif k == "ranks":
                if not isinstance(v, list | tuple) or not v or not all(type(r) is int and r >= 0 for r in v):
                    raise UsageError(f"expected a list of ranks (integers >= 0), got {v!r}", source=source, key=key)
            elif k == "device":
                if v != "meta":
                    raise UsageError(f"expected 'meta' (the only device the fixture makes the default), got {v!r}",
                                     source=source, key=key)
            elif k == "rules":
                if not isinstance(v, list | tuple):
                    raise UsageError(f"expected a list of budget tables, got {v!r}", source=source, key=key)
                for i, d in enumerate(v):
                    rule = parse_rule(d, source=source, key=f"{key}[{i}]")
                    if rule.kind == "ratio":
                        raise UsageError("ratio compares two cases; a test captures one", source=source, key=f"{key}[{i}].ratio")
                    rules.append(rule)
            else:
                raise UsageError(
                    f"unknown argument {k!r}{did_you_mean(k, MARKER_KEYS)}; use {', '.join(MARKER_KEYS)}", source=source, key=key
                )
    return rules


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Validate the marker before the test runs: a bad budget is an error, not a failed test."""
    marks = list(item.iter_markers(MARKER))
    if not marks:
        return
    from memaudit.errors import UsageError

    try:
        item.stash[_rules_key] = marker_rules(marks, source=item.nodeid)
        return
    except UsageError as exc:
        problem = str(exc)
    pytest.fail(f"bad @pytest.mark.{MARKER}: {problem}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """After the test body passes, judge what it saved."""
    result = yield
    rules = item.stash.get(_rules_key, None)
    if rules:
        _judge(item, rules)
    return result


def rank_of_process() -> tuple[int, int] | None:
    """(rank, world size) of a process torchrun started (``RANK``, ``WORLD_SIZE``), else None."""
    import os

    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None


def _judge(item: pytest.Item, rules: list[Any]) -> None:
    from memaudit.errors import UsageError
    from memaudit.judge.budgets import Context, evaluate_case, format_rows
    from memaudit.te.environment import te_version
    from memaudit.units import fmt_bytes

    cap = getattr(item, "funcargs", {}).get(FIXTURE)
    if cap is None:
        pytest.fail(f"@pytest.mark.{MARKER} needs the {FIXTURE} fixture, which this test did not get", pytrace=False)
    where = rank_of_process()
    ranks = next((m.kwargs["ranks"] for m in item.iter_markers(MARKER) if "ranks" in m.kwargs), None)
    if ranks is not None:
        world = where[1] if where is not None else 1
        absent = [r for r in ranks if r >= world]
        if absent:
            pytest.fail(f"bad @pytest.mark.{MARKER}: ranks={list(ranks)} names rank(s) {absent} in a world of {world} "
                        f"process(es){'' if where else ' (not under torchrun)'}", pytrace=False)
        if (where[0] if where is not None else 0) not in ranks:
            return  # another rank judges it
    on = f" on rank {where[0]} of {where[1]}" if where is not None else ""
    case = cap.report(case_id=item.nodeid + (f"/rank{where[0]}" if where else ""), include_freed=True)  # the graphs are gone by now
    if not case.rows and not case.freed:
        pytest.fail(f"@pytest.mark.{MARKER}: the test saved no tensor for backward inside {FIXTURE}{on}, so the "
                    "budget checked nothing (run the forward inside the fixture's capture)", pytrace=False)
    try:
        allow = any(m.kwargs.get("allow_incomplete") is True for m in item.iter_markers(MARKER))
        verdicts = evaluate_case(case, rules, Context(te_version=te_version(imported_only=True), allow_incomplete=allow))
    except UsageError as exc:
        problem = str(exc)
    else:
        problem = None
    if problem is not None:
        pytest.fail(f"bad @pytest.mark.{MARKER}: {problem}", pytrace=False)
    bad = [v for v in verdicts if v.failed]
    if bad:
        lines = [f"saved-tensor budget failed{on} ({len(bad)} of {len(verdicts)}):"]
        for v in bad:
            lines.append("  " + v.message.replace("\n", "\n  "))
        lines.append(f"all {len(case.rows)} saved rows ({fmt_bytes(case.totals.saved_bytes)} saved, parameters excluded):")
        lines.extend("    " + line for line in format_rows(case.rows, limit=40))
        pytest.fail("\n".join(lines), pytrace=False)
    xfails = [v for v in verdicts if v.verdict == "xfail"]
    if xfails:
        pytest.xfail(on.strip() + (": " if on else "") + "; ".join(f"{v.rule}: {v.message}" for v in xfails))

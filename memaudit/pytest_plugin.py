"""pytest plugin (entry point ``memaudit``): the ``saved_tensors`` fixture and the ``saved_budget`` marker.

::

    @pytest.mark.saved_budget(max_bytes="64 MiB", count={"fc1.input": 1}, forbid=["fc2:GeluBackward0.*"])
    def test_mlp(saved_tensors):
        saved_tensors.label(x, "fc1.input")
        y = model(x)

``saved_tensors`` yields an entered :func:`memaudit.capture` and exits it at teardown. After the
test body, the marker's budgets are evaluated with the same rule engine as scenario files:
``max_bytes`` / ``exact_bytes`` on the peak of saved bytes alive at once during the test (the rows
alive then), ``max_total_bytes`` on the sum of everything saved, and ``count`` / ``forbid`` / row
selections on every row saved during the test. Rows are named as the CLI names them
(``MODULE:NODE.ATTRIBUTE``, named before the graph is released); a ``count`` or ``forbid`` pattern
that matches nothing memaudit could name in the test is an error, not a pass. A failing budget
fails the test with the rule, the numbers and the offending rows. This module imports neither torch nor TE at import
time: it is loaded by every
pytest run in an environment where memaudit is installed.

``device="meta"`` in the marker makes meta the default device while the fixture is active
(``torch.device("meta")``): a model and inputs the test builds without naming a device hold no
values and allocate nothing, so a budget can be checked at production shape on any machine.

``unread="observed"`` (or ``True``) gives every saved buffer a read verdict, from the reads
observed while the test runs backward **through the fixture**: ``saved_tensors.backward(loss)``
(:meth:`SavedTensors.backward`, which takes what ``torch.autograd.backward`` takes). Backward must
run with the analysis active, and a test's own ``loss.backward()`` gives memaudit no place to
start it, so a marker with ``unread`` fails a test that did not call it. ``max_unread_bytes``
(marker key or a ``rules`` table) is judged on the rows alive when that backward began. Only the
observed method runs in a test: the poisoned one re-runs backward, which only the CLI does
(``run --unread-method``).

``emulate="sm100"`` runs the test body with TE's real Python on an emulated machine (kernel
stand-ins, the TE extension's emulator: :class:`memaudit.extension.Emulator`): on a GPU in this process, with no GPU on
fake CUDA in a child
process forked for the test (build the model inside the test body: ``device="cuda"`` tensors are
fake there), whose capture comes back for the budgets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

MARKER = "saved_budget"
FIXTURE = "saved_tensors"
MARKER_KEYS = (
    "max_bytes",
    "exact_bytes",
    "max_total_bytes",
    "max_unread_bytes",
    "count",
    "forbid",
    "rules",
    "allow_incomplete",
    "stack",
    "device",
    "emulate",
    "ranks",
    "unread",
)
UNREAD = ("observed",)
"""``unread`` values a test can run (``True`` is observed): see the module's docstring."""


def emulate_choices() -> tuple[str, ...]:
    """``emulate`` values: the architectures the extensions' emulators declare (TE's: sm90, sm100)."""
    from memaudit.extension import emulators

    return tuple(emulators())


def emulator(arch: str) -> Any:
    """The :class:`memaudit.extension.Emulator` that emulates ``arch``."""
    from memaudit.extension import emulators

    ext, ref = emulators()[arch]
    return ext.load(ref)


MARKER_HELP = (
    f"{MARKER}(max_bytes=None, exact_bytes=None, max_total_bytes=None, count=None, forbid=None, rules=None): budgets "
    "on the "
    f"tensors autograd saved during the test (captured by the {FIXTURE} fixture, requested automatically). "
    "max_bytes/exact_bytes: the peak of saved bytes alive at once ('64 MiB'); max_total_bytes: the sum of every "
    "tensor saved during the test, whenever; count: {operand pattern: N or '<= N'}; "
    "forbid: [operand pattern or select table]; rules: [budget tables as in scenario files]; "
    "stack=True: name the source line of each saved tensor in the failure; device='meta': meta is the default "
    "device in the test (shapes only, nothing allocated); emulate='sm100': TE's real forward with emulated kernels "
    "(with no GPU, the test body runs on fake CUDA in a child process); ranks=[0, 1]: under torchrun, judge on these "
    "ranks only (default: every rank judges what it saved, and a failure names the rank); unread='observed': a read "
    "verdict "
    "for every saved buffer, from the backward the test runs through saved_tensors.backward(loss); max_unread_bytes: "
    "bytes saved for backward and never read. See docs/guides/budgets.md."
)

_rules_key = pytest.StashKey[list]()
_case_key = pytest.StashKey[Any]()
"""The case a test body that ran in a child process (``emulate`` with no GPU) sent back."""


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


def _saved_tensors_class() -> type:
    """:class:`memaudit.capture.Capture` with :meth:`backward` (made on first use: this module
    imports no torch at import time)."""
    from memaudit.capture import Capture

    class SavedTensors(Capture):  # type: ignore[misc]
        """The fixture's capture; :meth:`backward` runs the test's backward (with the read analysis
        where the marker asks for it)."""

        unread: str | None = None
        """The marker's ``unread`` (``observed``) or None."""
        analysed: Any = None
        """The case whose rows got read verdicts in :meth:`backward`, or None."""
        case_id: str = "test"

        def backward(self, tensors: Any, grad_tensors: Any = None, **kwargs: Any) -> None:
            """``torch.autograd.backward(tensors, grad_tensors, **kwargs)``; under ``unread``, with the
            observed-reads analysis active: every row alive now gets a verdict (``analysed``)."""
            import torch

            if self.unread is None:
                torch.autograd.backward(tensors, grad_tensors, **kwargs)
                return
            if self.analysed is not None:
                raise RuntimeError(
                    "saved_tensors.backward() with unread runs once per test (its verdicts are of one backward)"
                )
            self.analysed = observed_verdicts(
                self, self.case_id, lambda: torch.autograd.backward(tensors, grad_tensors, **kwargs)
            )

    return SavedTensors


def observed_verdicts(cap: Any, case_id: str, backward: Any) -> Any:
    """Run ``backward()`` with the observed-reads analysis over ``cap``'s live rows (and every
    imported library's entry-point watcher); the case of those rows, with their verdicts."""

    from memaudit.capture.reads import Observer, observing
    from memaudit.extension import read_watchers
    from memaudit.report import Unread, with_verdicts

    case = cap.report(case_id=case_id)  # names the live rows and their storages
    watchers = read_watchers()  # of the libraries the test imported
    obs = Observer(cap.row_storages())
    with observing(obs, watchers):
        backward()
    notes = [f"another profiler was active in {t}" for t in obs.profiled_elsewhere[:1]]
    with_verdicts(case, {r.index: obs.verdict(r.storage) for r in case.rows}, Unread(["observed"], notes))
    return case


@pytest.fixture
def saved_tensors(request: pytest.FixtureRequest) -> Iterator[Any]:
    """An entered ``memaudit.capture()``: every tensor autograd saves in the test is recorded
    (with each save's source line where the marker says ``stack=True``). Under a marker with
    ``device="meta"``, meta is also the default device until teardown. ``saved_tensors.backward(loss)``
    runs backward (under ``unread``, with the read analysis active)."""
    import contextlib

    marks = list(request.node.iter_markers(MARKER))
    stack = any(m.kwargs.get("stack") is True for m in marks)
    device = marker_device(marks)
    arch = marker_emulate(marks)
    with contextlib.ExitStack() as contexts:
        cap = contexts.enter_context(_saved_tensors_class()(stack=stack, track_peak=True, name_early=True))
        cap.unread = marker_unread(marks)
        cap.case_id = request.node.nodeid
        if device is not None:
            import torch

            contexts.enter_context(torch.device(device))
        if arch is not None:
            emu = emulator(arch)
            if not emu.needs_child():  # a GPU: here; with no GPU the body runs in a child (pytest_pyfunc_call)
                contexts.enter_context(emu.emulated(arch))
        yield cap


def marker_device(marks: list[pytest.Mark]) -> str | None:
    """The ``device`` a marker asks for (the closest marker's), or None."""
    for m in marks:
        if "device" in m.kwargs:
            return m.kwargs["device"]
    return None


def _marker_choice(marks: list[pytest.Mark], key: str, when_true: str) -> str | None:
    """What the closest marker's ``key`` asks for (``True`` is ``when_true``), or None."""
    for m in marks:
        if key in m.kwargs:
            value = m.kwargs[key]
            return when_true if value is True else value or None
    return None


def marker_emulate(marks: list[pytest.Mark]) -> str | None:
    """The architecture a marker's ``emulate`` asks for (``True`` is the first emulator's default:
    TE's sm100), or None."""
    for m in marks:
        if "emulate" in m.kwargs:
            value = m.kwargs["emulate"]
            if value is True:
                from memaudit.extension import emulators

                first = next(iter(emulators().values()), None)
                return first[0].load(first[1]).default if first is not None else "sm100"
            return value or None
    return None


def marker_unread(marks: list[pytest.Mark]) -> str | None:
    """The read analysis a marker's ``unread`` asks for (``True`` is observed), or None."""
    return _marker_choice(marks, "unread", "observed")


def marker_rules(marks: list[pytest.Mark], *, source: str) -> list[Any]:
    """The marker arguments as budget rules; bad arguments raise UsageError naming them."""
    from memaudit.errors import UsageError, did_you_mean
    from memaudit.judge.scenario import parse_rule

    rules = []
    for m in marks:
        if m.args:
            raise UsageError(
                f"takes keyword arguments only ({', '.join(MARKER_KEYS)}), got {m.args!r}", source=source, key=MARKER
            )
        for k, v in m.kwargs.items():
            key = f"{MARKER}.{k}"
            if k in ("max_bytes", "exact_bytes", "max_unread_bytes"):
                rules.append(parse_rule({"name": k, k: v}, source=source, key=MARKER))
            elif k == "max_total_bytes":
                rules.append(parse_rule({"name": k, "max_bytes": v}, source=source, key=MARKER))
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
                    label = (
                        sel
                        if isinstance(sel, str)
                        else ", ".join(f"{a}={b}" for a, b in (sel.items() if isinstance(sel, dict) else ()))
                    )
                    rules.append(
                        parse_rule(
                            {"name": f"forbid {label}", "select": select, "forbid": True},
                            source=source,
                            key=f"{key}[{i}]",
                        )
                    )
            elif k in ("allow_incomplete", "stack"):
                if not isinstance(v, bool):
                    raise UsageError(f"expected true or false, got {v!r}", source=source, key=key)
            elif k == "unread":
                if not (v is True or v is False or v in UNREAD):
                    from memaudit.report import UNREAD_CHOICES

                    more = (
                        f" ({v!r} re-runs backward, which only memaudit run --unread-method does)"
                        if v in UNREAD_CHOICES
                        else ""
                    )
                    raise UsageError(
                        f"expected True or {', '.join(map(repr, UNREAD))}, got {v!r}{more}", source=source, key=key
                    )
            elif k == "emulate":
                if not (v is True or v in (choices := emulate_choices())):
                    raise UsageError(
                        f"expected True or one of {', '.join(map(repr, choices))}, got {v!r}", source=source, key=key
                    )
            elif k == "ranks":
                if not isinstance(v, list | tuple) or not v or not all(type(r) is int and r >= 0 for r in v):
                    raise UsageError(f"expected a list of ranks (integers >= 0), got {v!r}", source=source, key=key)
            elif k == "device":
                if v != "meta":
                    raise UsageError(
                        f"expected 'meta' (the only device the fixture makes the default), got {v!r}",
                        source=source,
                        key=key,
                    )
            elif k == "rules":
                if not isinstance(v, list | tuple):
                    raise UsageError(f"expected a list of budget tables, got {v!r}", source=source, key=key)
                for i, d in enumerate(v):
                    rule = parse_rule(d, source=source, key=f"{key}[{i}]")
                    if rule.kind == "ratio":
                        raise UsageError(
                            "ratio compares two cases; a test captures one", source=source, key=f"{key}[{i}].ratio"
                        )
                    rules.append(rule)
            else:
                raise UsageError(
                    f"unknown argument {k!r}{did_you_mean(k, MARKER_KEYS)}; use {', '.join(MARKER_KEYS)}",
                    source=source,
                    key=key,
                )
    if any(r.kind == "max_unread_bytes" for r in rules) and marker_unread(marks) is None:
        raise UsageError(
            "a max_unread_bytes budget needs the read analysis: add unread='observed' and run backward "
            f"through {FIXTURE}.backward(loss)",
            source=source,
            key=f"{MARKER}.unread",
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


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """``emulate`` on a machine with no GPU: the test body runs on fake CUDA in a child process
    (TE keeps global state, and fake tensors must not reach this process); the capture it made
    comes back for the budgets."""
    arch = marker_emulate(list(pyfuncitem.iter_markers(MARKER)))
    if arch is None:
        return None
    emu = emulator(arch)
    if not emu.needs_child():
        return None
    import inspect

    from memaudit.extension import EmulationFailed

    why = emu.unavailable()
    if why is not None:
        pytest.skip(f"@pytest.mark.{MARKER}(emulate={arch!r}): emulated kernels cannot run here: {why}")
    cap: Any = pyfuncitem.funcargs.get(FIXTURE)
    params = inspect.signature(pyfuncitem.obj).parameters
    kwargs = {k: v for k, v in pyfuncitem.funcargs.items() if k in params}

    def body() -> dict[str, Any]:
        with emu.emulated(arch):  # the test body only: its capture is read back outside the emulation
            pyfuncitem.obj(**kwargs)
        if cap is None:
            return {}
        nodeid = pyfuncitem.nodeid
        return {
            "history": cap.report(case_id=nodeid, include_freed=True).to_dict(),
            "peak": peak_case(cap, nodeid).to_dict(),
            "labels": cap.label_names(),
            "modules": sorted(cap.module_names()),
            "analysed": cap.analysed.to_dict() if getattr(cap, "analysed", None) is not None else None,
        }

    try:
        case = emu.call_in_child(arch, body)
    except EmulationFailed as exc:
        pytest.fail(str(exc), pytrace=False)
    if case:
        pyfuncitem.stash[_case_key] = case
    return True


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
    from memaudit.environment import rule_versions
    from memaudit.errors import UsageError
    from memaudit.judge.budgets import Context, evaluate_case, format_rows
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
            pytest.fail(
                f"bad @pytest.mark.{MARKER}: ranks={list(ranks)} names rank(s) {absent} in a world of {world} "
                f"process(es){'' if where else ' (not under torchrun)'}",
                pytrace=False,
            )
        if (where[0] if where is not None else 0) not in ranks:
            return  # another rank judges it
    on = f" on rank {where[0]} of {where[1]}" if where is not None else ""
    case_id = item.nodeid + (f"/rank{where[0]}" if where else "")
    child = item.stash.get(_case_key, None)  # what a body run in a child process saved
    if child is not None:
        from memaudit.report import validate_case

        history, peak = validate_case(child["history"]), validate_case(child["peak"])
        labels, modules = list(child["labels"]), set(child["modules"])
        analysed = validate_case(child["analysed"]) if child.get("analysed") is not None else None
    else:
        analysed = getattr(cap, "analysed", None)
        history = cap.report(case_id=case_id, include_freed=True)  # every row saved during the test
        peak, labels, modules = None, cap.label_names(), cap.module_names()
    if not history.rows:
        pytest.fail(
            f"@pytest.mark.{MARKER}: the test saved no tensor for backward inside {FIXTURE}{on}, so the "
            "budget checked nothing (run the forward inside the fixture's capture)",
            pytrace=False,
        )
    if peak is None:
        peak = peak_case(cap, case_id)
    wanted = marker_unread(list(item.iter_markers(MARKER)))
    if wanted is not None and analysed is None:
        pytest.fail(
            f"@pytest.mark.{MARKER}(unread={wanted!r}): the test ran no backward through {FIXTURE}.backward(loss), "
            "so no buffer got a read verdict (a plain loss.backward() runs without the analysis)",
            pytrace=False,
        )
    try:
        unnamed = [p for rule in rules for p in unnameable(rule, history, labels, modules)]
        if unnamed:
            raise UsageError("; ".join(unnamed))
        allow = any(m.kwargs.get("allow_incomplete") is True for m in item.iter_markers(MARKER))
        context = Context(te_version=rule_versions(imported_only=True).get("te"), allow_incomplete=allow)
        verdicts = []
        for rule in rules:
            on_peak = (
                rule.kind in ("max_bytes", "exact_bytes") and rule.select is None and rule.name != "max_total_bytes"
            )
            judged = (analysed or history) if rule.kind == "max_unread_bytes" else peak if on_peak else history
            verdicts += evaluate_case(judged, [rule], context)
    except UsageError as exc:
        problem: str | None = str(exc)
    else:
        problem = None
    if problem is not None:
        pytest.fail(f"bad @pytest.mark.{MARKER}: {problem}", pytrace=False)
    bad = [v for v in verdicts if v.failed]
    if bad:
        lines = [f"saved-tensor budget failed{on} ({len(bad)} of {len(verdicts)}):"]
        for v in bad:
            lines.append("  " + v.message.replace("\n", "\n  "))
        lines.append(
            f"at the peak, {len(peak.rows)} saved rows alive at once ({fmt_bytes(peak.totals.saved_bytes)} saved, "
            "parameters excluded):"
        )
        lines.extend("    " + line for line in format_rows(peak.rows, limit=40))  # type: ignore[arg-type]  # frozen rows: read only
        if analysed is not None and (unread := [r for r in analysed.rows if r.read == "unread"]):
            lines.append(
                f"saved for backward, never read ({len(unread)} rows, {fmt_bytes(analysed.totals.unread_bytes or 0)}):"
            )
            lines.extend("    " + line for line in format_rows(unread, limit=40))  # type: ignore[arg-type]  # frozen rows: read only
        pytest.fail("\n".join(lines), pytrace=False)
    xfails = [v for v in verdicts if v.verdict == "xfail"]
    if xfails:
        pytest.xfail(on.strip() + (": " if on else "") + "; ".join(f"{v.rule}: {v.message}" for v in xfails))


def peak_case(cap: Any, case_id: str) -> Any:
    """The rows alive at the peak of saved bytes during the test, as a case: the replay of packs and
    releases, or the end state where a report finds more (``ctx`` attributes, cached outputs)."""
    best, alive = cap.peak()
    now = cap.report(case_id=case_id)
    if now.totals.saved_bytes >= best:
        return now
    case = cap.report_of(alive, case_id=case_id)
    case.complete = case.complete and now.complete
    case.warnings = list(dict.fromkeys([*case.warnings, *now.warnings]))
    return case


def unnameable(rule: Any, case: Any, labels: list[str], modules: set[str]) -> list[str]:
    """A ``count`` or ``forbid`` operand pattern that matches no row of the test and no name memaudit
    could give in it: it could never fire (or never count), so it is an error rather than a pass."""
    from fnmatch import fnmatchcase

    from memaudit.judge.rules import operand_matches

    select = rule.select
    if rule.kind not in ("count", "forbid") or select is None or not select.operand:
        return []
    rows = case.rows + case.freed
    operands = [r.operand for r in rows]
    # a classifier (TE's) named rows of this test with names of its own: a pattern may be one of its
    classified = any(
        r.operand
        and ":" not in r.operand
        and r.operand not in labels
        and not (r.op and r.operand.startswith(r.op + "."))
        for r in rows
    )
    bad = []
    for pattern in select.operand:
        if any(operand_matches(pattern, o) for o in operands) or any(fnmatchcase(n, pattern) for n in labels):
            continue
        head, colon, _ = pattern.partition(":")
        if colon and any(fnmatchcase(m, head) for m in modules):
            continue  # a module of the test: a name memaudit gives (MODULE:NODE.ATTRIBUTE), just not saved now
        if not colon and classified:
            continue  # a classifier names operands of its own (TE's fc1.input): the pattern may be one
        some = ", ".join(sorted(modules)[:6]) or "none called"
        bad.append(
            f"{rule.kind} pattern {pattern!r} matches no saved row and no name memaudit could give in this test, so it "
            f"could never {'fire' if rule.kind == 'forbid' else 'count anything'}: rows are named "
            "MODULE:NODE.ATTRIBUTE as "
            f"the CLI shows them (modules here: {some}), or by labels given with {FIXTURE}.label()"
        )
    return bad

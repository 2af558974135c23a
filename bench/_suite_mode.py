"""pytest plugin for bench/verify/pytorch_suites.py: run every test bare, inside ``capture()``, or under a
plain pass-through hook pair (``MEMAUDIT_SUITE_MODE`` = ``bare`` | ``capture`` | ``control``).

In ``capture`` mode each test body runs inside ``memaudit.capture()``; before every backward
(the engine's entry that ``torch.autograd.backward``, ``grad`` and ``Tensor.backward`` call) the
capture reports with the backward's outputs (``report(outputs)``, the graph walk), and after the
body it reports without outputs (``report()``, the heap scan), whose wall time is appended to
``MEMAUDIT_SUITE_TIMES`` (JSON lines). A report that raises fails the test with a marker string,
so the outcome table can tell memaudit's own errors from the test's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

MODE = os.environ.get("MEMAUDIT_SUITE_MODE", "bare")
TIMES = os.environ.get("MEMAUDIT_SUITE_TIMES")
REPORT_ERROR = "memaudit report() raised"


def pytest_configure(config: pytest.Config) -> None:
    import torch.autograd._functions.utils as fu

    if not hasattr(
        fu, "check_onnx_broadcast"
    ):  # older test_utils.py imports it (removed since); unused by TestCheckpoint
        fu.check_onnx_broadcast = lambda *a, **k: None  # type: ignore[attr-defined]


class _Reporting:
    """The autograd engine's entry (``torch.autograd._engine_run_backward``, which ``backward``,
    ``grad`` and ``Tensor.backward`` call) wrapped to report(outputs) first. The public functions
    stay as they are: TorchScript resolves ``torch.autograd.grad`` by identity."""

    def __init__(self, cap: Any) -> None:
        import torch.autograd as autograd

        self.autograd = autograd
        self.cap = cap
        self.original = autograd._engine_run_backward
        self.errors: list[str] = []

    def __enter__(self) -> _Reporting:
        original = self.original

        def run(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
            if self.cap.active:
                try:
                    self.cap.report(outputs=list(t_outputs))
                except Exception as exc:  # noqa: BLE001 - recorded as memaudit's failure
                    self.errors.append(f"report(outputs): {type(exc).__name__}: {exc}")
            return original(t_outputs, *args, **kwargs)

        self.autograd._engine_run_backward = run
        return self

    def __exit__(self, *exc: object) -> None:
        self.autograd._engine_run_backward = self.original


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if MODE == "bare":
        return (yield)
    import torch

    if MODE == "control":
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            return (yield)
    import memaudit

    with memaudit.capture() as cap, _Reporting(cap) as reporting:
        result = yield
        start = time.perf_counter()
        try:
            case = cap.report()
        except Exception as exc:  # noqa: BLE001 - recorded as memaudit's failure
            reporting.errors.append(f"report(): {type(exc).__name__}: {exc}")
            case = None
        elapsed = time.perf_counter() - start
    if TIMES:
        with open(TIMES, "a") as f:
            f.write(
                json.dumps({"test": item.nodeid, "report_s": elapsed, "rows": len(case.rows) if case else None}) + "\n"
            )
    if reporting.errors:
        pytest.fail(f"{REPORT_ERROR}: {reporting.errors[0]}", pytrace=False)
    return result

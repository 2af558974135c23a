"""pytest plugin for bench/pytorch_suites.py: run every test bare, inside ``capture()``, or under a
plain pass-through hook pair (``MEMAUDIT_SUITE_MODE`` = ``bare`` | ``capture`` | ``control``).

In ``capture`` mode each test body runs inside ``memaudit.capture()``; before every
``torch.autograd.backward`` / ``torch.autograd.grad`` (``Tensor.backward`` calls the first) the
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

    if not hasattr(fu, "check_onnx_broadcast"):  # older test_utils.py imports it (removed since); unused by TestCheckpoint
        fu.check_onnx_broadcast = lambda *a, **k: None  # type: ignore[attr-defined]


class _Reporting:
    """``torch.autograd.backward`` and ``grad`` wrapped to report(outputs) first."""

    def __init__(self, cap: Any) -> None:
        import torch

        self.torch = torch
        self.cap = cap
        self.originals = {name: getattr(torch.autograd, name) for name in ("backward", "grad")}
        self.errors: list[str] = []

    def __enter__(self) -> _Reporting:
        for name, original in self.originals.items():
            setattr(self.torch.autograd, name, self._wrap(original))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self.originals.items():
            setattr(self.torch.autograd, name, original)

    def _wrap(self, original: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            outputs = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
            if self.cap.active and outputs is not None:
                try:
                    self.cap.report(outputs=outputs)
                except Exception as exc:  # noqa: BLE001 - recorded as memaudit's failure
                    self.errors.append(f"report(outputs): {type(exc).__name__}: {exc}")
            return original(*args, **kwargs)

        run.__wrapped__ = original  # type: ignore[attr-defined]
        return run


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
            f.write(json.dumps({"test": item.nodeid, "report_s": elapsed, "rows": len(case.rows) if case else None}) + "\n")
    if reporting.errors:
        pytest.fail(f"{REPORT_ERROR}: {reporting.errors[0]}", pytrace=False)
    return result

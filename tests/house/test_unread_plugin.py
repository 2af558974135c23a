"""The pytest plugin's read analysis: ``unread=`` and ``max_unread_bytes`` in the marker, backward
run through ``saved_tensors.backward`` (pytester, in-process; CPU)."""

from __future__ import annotations

import pytest
import torch._dynamo  # noqa: F401 - imported here, once: backward imports it lazily, and pytester's in-process runs
from test_plugin import run_inner  # would import it again (a second registration of its test ops)

PLANTED = '''

class Wasteful(torch.autograd.Function):
    """Saves a 4 KiB tensor its backward never touches (the planted waste)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x, torch.ones(1024))
        return x * 2

    @staticmethod
    def backward(ctx, g):
        x, _waste = ctx.saved_tensors
        return g * 2 + x * 0


def step(cap):
    x = torch.randn(8, 16, requires_grad=True)
    cap.label(x, "x")
    return Wasteful.apply(x).sum()
'''


def test_the_planted_waste_fails_max_unread_bytes_0(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        PLANTED
        + """

@pytest.mark.saved_budget(unread="observed", max_unread_bytes=0)
def test_waste(saved_tensors):
    saved_tensors.backward(step(saved_tensors))
""",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "4.0 KiB (4096 B) saved for backward and never read" in out
    assert "saved for backward, never read (1 rows, 4.0 KiB)" in out and "never read" in out


def test_a_budget_over_the_waste_passes_and_reads_are_named(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        PLANTED
        + """

@pytest.mark.saved_budget(unread=True, max_unread_bytes=4096)
def test_waste(saved_tensors):
    saved_tensors.backward(step(saved_tensors))
    rows = saved_tensors.analysed.rows
    assert [r.read for r in rows] == ["read", "unread"], [(r.read, r.read_by) for r in rows]
    assert rows[0].read_by.startswith("aten.") and saved_tensors.analysed.totals.unread_bytes == 4096
""",
    )
    result.assert_outcomes(passed=1)


def test_unread_without_backward_through_the_fixture_fails(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        PLANTED
        + """

@pytest.mark.saved_budget(unread="observed", max_unread_bytes="1 MiB")
def test_plain_backward(saved_tensors):
    step(saved_tensors).backward()
""",
    )
    result.assert_outcomes(failed=1)
    assert "ran no backward through saved_tensors.backward(loss)" in result.stdout.str()


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("max_unread_bytes=0", "a max_unread_bytes budget needs the read analysis: add unread='observed'"),
        ("unread='poisoned'", "only memaudit run --unread-method does"),
        ("unread='everything'", "expected True or 'observed', got 'everything'"),
    ],
)
def test_bad_unread_markers_are_errors(pytester: pytest.Pytester, marker: str, message: str) -> None:
    result = run_inner(
        pytester,
        PLANTED
        + f"""

@pytest.mark.saved_budget({marker})
def test_bad(saved_tensors):
    saved_tensors.backward(step(saved_tensors))
""",
    )
    result.assert_outcomes(errors=1)
    assert message in result.stdout.str()


def test_backward_through_the_fixture_without_unread_is_plain(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        PLANTED
        + """

@pytest.mark.saved_budget(max_bytes="1 MiB")
def test_plain(saved_tensors):
    x = torch.randn(8, 16, requires_grad=True)
    Wasteful.apply(x).sum()
    saved_tensors.backward(Wasteful.apply(x).sum())
    assert x.grad is not None and saved_tensors.analysed is None
""",
    )
    result.assert_outcomes(passed=1)

"""Exit codes: part of the CLI contract (docs/reference/exit-codes.md, --help); the judge's outcome
(:func:`memaudit.judge.outcome.conclude`) picks one."""

OK = 0
"""Every budget passed (or is xfail); no regression; some case was measured or emulated (others may
be skipped or estimated: a run whose every case is skipped is :data:`NOTHING_MEASURED`)."""
FAIL = 1
"""A budget failed or XPASSed, or compare found a regression."""
USAGE = 2
"""Bad usage or input: a flag, a file, a key or a value. Nothing was written."""
CASE_ERROR = 3
"""A case ended in ``error`` and nothing failed (scenario ``on_error = "warn"`` or a plain run)."""
NOTHING_MEASURED = 4
"""``run``: no case was measured or emulated (every answer is an estimate or a skipped cell): a
gate on a runner without the GPU it expects goes red, not green."""

"""Stage 6 of the pipeline: the ``memaudit`` command line (typer).

``root`` holds the app and ``run`` / ``doctor``; each other module adds one command group
(``register(app)``), and so does each extension's ``commands``. Only this stage talks to the
terminal; the exit status of a judged report is the judge's (:func:`memaudit.judge.outcome.conclude`).

This module imports nothing heavy: :func:`main` sets its SIGINT handler before typer, rich,
torch or TE load, so that Ctrl-C while they import exits 130 with one line, not a traceback.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["INTERRUPTED", "app", "main"]

INTERRUPTED = "memaudit: interrupted"
"""The one line a SIGINT prints (exit 130, ``128 + SIGINT``)."""

_interrupted = False


def _during_startup(signum: int, frame: object) -> None:
    """SIGINT while the command's modules import: nothing to clean up yet, so leave at once."""
    os.write(2, (INTERRUPTED + "\n").encode())
    os._exit(128 + signum)


def _noted(signum: int, frame: object) -> None:
    """SIGINT once the command runs: Python's KeyboardInterrupt (a write in progress removes its
    temp file), noted so that the exit says it in one line."""
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def _handle(handler: object) -> None:
    try:
        signal.signal(signal.SIGINT, handler)  # type: ignore[arg-type]
    except ValueError:  # not the main thread: Python's own handling stays
        pass


def _is_the_command() -> bool:
    """True when this process is the ``memaudit`` command (the console script, or ``python -m
    memaudit``), not a program that imports memaudit.cli."""
    first = sys.argv[0] if sys.argv else ""
    return os.path.basename(first) == "memaudit" or first.endswith(os.path.join("memaudit", "__main__.py"))


def main() -> None:
    """Console-script entry point: refuses to run (exit 2) beside the package index's other
    ``memaudit`` distribution, whose files share this one's folder and command."""
    _handle(_during_startup)
    from memaudit.cli.root import main as run_app
    from memaudit.distribution import foreign_distribution

    _handle(_noted)
    problem = foreign_distribution()
    if problem is not None:
        sys.stderr.write(f"error: {problem}\n")
        sys.exit(2)
    try:
        run_app()
    except KeyboardInterrupt:  # outside typer's own handling (which exits 130 silently)
        _interrupted_exit()
    except SystemExit as exc:
        if _interrupted and exc.code == 128 + signal.SIGINT:
            _interrupted_exit()
        raise
    finally:
        _handle(_during_startup)  # and while the interpreter shuts down: one line, at once


def _interrupted_exit() -> None:
    try:
        sys.stderr.write(INTERRUPTED + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001, S110 - stderr gone: the exit status still says it
        pass
    sys.exit(128 + signal.SIGINT)


def __getattr__(name: str) -> object:
    if name == "app":  # loaded when asked, not when the command starts (see the module docstring)
        from memaudit.cli.root import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if _is_the_command():  # the command started: its handler from here on, before anything imports
    _handle(_during_startup)

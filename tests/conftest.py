"""Shared fixtures for memaudit's tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# pytester's in-process runs restore sys.modules afterwards: a torch first imported inside one
# would be dropped and imported a second time by the next, and torch's C extension does not
# survive that (a segfault). Importing it here keeps it in every snapshot.
import torch  # noqa: F401, E402

TESTS_DIR = Path(__file__).resolve().parent

pytest_plugins = ["pytester"]


@pytest.fixture
def tests_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put tests/ on sys.path so helper modules (e.g. ``custom_factory``) import by name."""
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    yield TESTS_DIR
    sys.modules.pop("custom_factory", None)


@pytest.fixture
def cli_runner():
    """typer's CliRunner (stdout and stderr kept apart in ``result.stdout`` / ``result.stderr``)."""
    from typer.testing import CliRunner

    return CliRunner()


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI honours ``COLUMNS``: tests see the log width (200) unless they set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)

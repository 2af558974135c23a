"""Shared fixtures for memaudit's tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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

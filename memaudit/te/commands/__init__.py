"""TE's commands: ``estimate`` (the saved-bytes model) and ``te-history`` (TE's saved state across
its own history), added to the ``memaudit`` command line through the extension."""

from __future__ import annotations

from typing import Any


def register(app: Any) -> None:
    """Add TE's commands to the ``memaudit`` app."""
    from memaudit.te.commands import estimate, history

    estimate.register(app)
    history.register(app)

"""Stage 5 of the pipeline: the ``memaudit`` command line (typer).

``root`` holds the app and ``run`` / ``doctor``; each other module adds one command group
(``register(app)``). Only this stage chooses exit codes and talks to the terminal.
"""

import sys

from memaudit.cli.root import app
from memaudit.cli.root import main as _run_app

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: refuses to run (exit 2) beside the package index's other
    ``memaudit`` distribution, whose files share this one's folder and command."""
    from memaudit.distribution import foreign_distribution

    problem = foreign_distribution()
    if problem is not None:
        sys.stderr.write(f"error: {problem}\n")
        sys.exit(2)
    _run_app()

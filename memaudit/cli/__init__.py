"""Stage 5 of the pipeline: the ``memaudit`` command line (typer).

``root`` holds the app and ``run`` / ``doctor``; each other module adds one command group
(``register(app)``). Only this stage chooses exit codes and talks to the terminal.
"""

from memaudit.cli.root import app, main

__all__ = ["app", "main"]

"""CLI subcommands beyond ``run`` and ``doctor``: one module each, with ``register(app)``."""

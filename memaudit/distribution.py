"""The name memaudit is installed under, and the other project that shares its import name.

The package index's ``memaudit`` is a different project (a fine-tuning privacy auditor) with its
own ``memaudit`` package folder and ``memaudit`` command. This project is published as
``torch-memaudit``; its import package and command stay ``memaudit``. Both wheels install files
into the same ``memaudit/`` folder and ``bin/memaudit``, and pip does not check for that: the
one installed last overwrites the other's files, and uninstalling either removes files the
other needs. :func:`foreign_distribution` finds that state so the command can refuse to run in it.
"""

from __future__ import annotations

DISTRIBUTION = "torch-memaudit"
"""The distribution (``pip install`` name) of this project."""

OTHER = "memaudit"
"""The package index's project of that name: not this one."""

_OWN_SUMMARY = "Saved-tensor memory auditor"
"""How this project's own summary starts (an install made before the rename was named ``memaudit``)."""


def pip_install(extra: str | None = None) -> str:
    """The install line for this project, e.g. ``pip install 'torch-memaudit[plot]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"


def foreign_distribution() -> str | None:
    """A message when the environment also holds the package index's ``memaudit`` (a different
    project whose files share this one's folder and command), else None."""
    from importlib import metadata

    try:
        dist = metadata.distribution(OTHER)
    except metadata.PackageNotFoundError:
        return None
    summary = dist.metadata.get("Summary") or ""
    if summary.startswith(_OWN_SUMMARY):  # this project, installed under its old name
        return None
    return (
        f"this environment also has the distribution {OTHER!r} {dist.version} installed "
        f"({' '.join(summary.split())[:100] or 'no summary'}): a different project whose files go into the same "
        f"'memaudit' package folder and 'memaudit' command as {DISTRIBUTION!r}, so one overwrote the other's files. "
        f"Use separate environments; to repair this one: pip uninstall -y {OTHER} {DISTRIBUTION} && {pip_install()}"
    )

"""TE's saved state across TE's own history: releases, git revisions, local trees, and a bisect.

- :mod:`.sources` gets TE's Python at a version (a released wheel, a git revision of a checkout
  the user points at, a local tree) into a cache, as an overlay directory with its identity;
- :mod:`.compat` loads one such tree in a worker process over the installed TE's compiled parts
  (the documented compatibility layer) and checks that the Python imported is the one asked for;
- :mod:`memaudit.te.emulate.families` knows what differs between TE version families for the emulation;
- :mod:`.render` shows a history as markdown, a rich table and a figure;
- :mod:`.worker` runs a case list for one version in its own process (``python -m``);
- :mod:`.history` runs many versions and builds the history document (per case: saved bytes and
  rows per version, changes between neighbours named by operand, kind and orientation);
- :mod:`.bisect` finds the first commit that changed a case's saved state.

Importing this package imports nothing of TE.
"""

"""pytest plugin (entry point ``memaudit``): the ``saved_tensors`` fixture and ``saved_budget`` marker."""

from __future__ import annotations

"""Targets: build a model and inputs for a case. See :mod:`memaudit.targets.base`."""

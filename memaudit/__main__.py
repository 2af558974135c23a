"""``python -m memaudit``: the command line (what ``torchrun ... -m memaudit run`` starts on each rank)."""

from memaudit.cli import main

main()

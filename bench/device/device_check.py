"""Before a device call measures anything: memaudit is imported from this tree, and its entry
points (read from installed metadata) are the ones pyproject.toml declares. Exit 1 with the
difference otherwise (see bench/device/device_env.sh)."""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    import memaudit

    problems = []
    if Path(memaudit.__file__).resolve().parent != ROOT / "memaudit":
        problems.append(f"memaudit is imported from {memaudit.__file__}, not from this tree")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    for group in ("memaudit.extensions",):
        want = dict(declared.get(group, {}))
        have = {ep.name: ep.value for ep in metadata.entry_points(group=group) if ep.value.startswith("memaudit")}
        if have != want:
            problems.append(
                f"{group}: installed {have}, pyproject.toml declares {want}"
                " (make the wheel again: python -m pip wheel --no-deps --no-build-isolation -w .device/dist .)"
            )
    for p in problems:
        print(f"device_check: {p}", file=sys.stderr)
    if not problems:
        print(f"device_check: memaudit {memaudit.__version__} from this tree; entry points as declared")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

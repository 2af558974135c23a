"""``.ci/setup``'s pip wrapper: pip's resolver line about the one conflict left on purpose
(``nvidia-cudnn-frontend``, see the comment there) is dropped, any other conflict or error is
shown, and pip's exit status is kept (a failed install fails the setup; it used to exit 0)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREAMBLE = (
    "ERROR: pip's dependency resolver does not currently take into account all the packages that are "
    "installed. This behaviour is the source of the following dependency conflicts."
)
KNOWN = "transformer-engine-torch 2.20.2 requires nvidia-cudnn-frontend>=1.29.0, which is not installed."
OTHER = "transformer-engine-torch 2.20.2 requires onnx, which is not installed."


def _pipq(tmp_path: Path, output: str, rc: int) -> subprocess.CompletedProcess[str]:
    setup = (ROOT / ".ci" / "setup").read_text()
    function = re.search(r"^KNOWN_CONFLICT=.*?^}\n", setup, re.S | re.M)
    assert function is not None, "pipq is not in .ci/setup"
    (tmp_path / "out.txt").write_text(output)
    pip = tmp_path / ".venv" / "bin" / "python"  # a stand-in for the venv's python -m pip
    pip.parent.mkdir(parents=True)
    pip.write_text(f"#!/bin/bash\ncat {tmp_path / 'out.txt'}\nexit {rc}\n")
    pip.chmod(0o755)
    script = f"set -euo pipefail\n{function.group()}pipq anything\necho after\n"
    return subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )  # a hang bound only


@pytest.mark.parametrize(
    ("output", "rc", "shown", "code"),
    [
        (f"WARNING: Location 'x' is ignored\n{PREAMBLE}\n{KNOWN}\n", 0, [], 0),
        (f"{PREAMBLE}\n{KNOWN}\n{OTHER}\n", 0, [PREAMBLE, KNOWN, OTHER], 0),
        ("ERROR: No matching distribution found for x\n", 1, ["No matching distribution"], 1),
    ],
    ids=["the known conflict only", "another conflict too", "a failed install"],
)
def test_pipq(tmp_path: Path, output: str, rc: int, shown: list[str], code: int) -> None:
    result = _pipq(tmp_path, output, rc)
    assert result.returncode == code, result.stderr
    assert ("after" in result.stdout) == (code == 0)  # set -e: a failed pip ends the setup
    for line in shown:
        assert line in result.stderr
    if not shown:
        assert result.stderr == ""

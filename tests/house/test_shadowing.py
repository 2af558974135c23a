"""A ``memaudit/`` folder in the current folder (the parent folder of a clone, say) cannot shadow
the installed package in the processes memaudit starts: te-history's workers and the ranks of
``run --nproc``. Each command runs from such a folder, through the console script (which, unlike
``python -m`` or ``python -c``, does not put the current folder on ``sys.path`` itself).

Also here: a bare ``run --nproc 2`` on a machine without CUDA says once, before anything starts,
why it cannot run, in words that do not blame a ``--device`` nobody gave.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed

ENTRY = Path(sys.executable).parent / "memaudit"
SMALL = ["--groups", "1,2", "--tokens", "128", "--hidden", "16", "--ffn", "32"]


def _shadowed(tmp: Path) -> Path:
    """A folder holding a ``memaudit/`` package that has none of memaudit's names."""
    (tmp / "memaudit").mkdir()
    (tmp / "memaudit" / "__init__.py").write_text("", encoding="utf-8")
    return tmp


def _memaudit(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env.update(COLUMNS="120", NO_COLOR="1", OMP_NUM_THREADS="1")
    return subprocess.run([str(ENTRY), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


pytestmark = pytest.mark.skipif(not ENTRY.is_file(), reason="no memaudit console script beside this interpreter")


@pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is None, reason="TE not installed")
def test_te_history_installed_from_a_folder_holding_memaudit(tmp_path: Path) -> None:
    done = _memaudit("te-history", "--installed", "--out", "o", cwd=_shadowed(tmp_path))
    text = done.stdout + done.stderr
    assert "__version__" not in text and "Traceback" not in text, text[-3000:]
    assert "wrote 4 files into o" in text, text[-3000:]
    # every case but TE's known NVFP4 G=1 failure answered (the worker imported the real memaudit);
    # that failure is an expected one, labelled, and the run is not red for it
    assert text.count(" MiB / ") >= 9, text[-3000:]
    assert "xfail (TE bug)" in done.stdout and "expected failure: te-grouped-mlp/nvfp4/g1/" in done.stderr, text[-3000:]
    assert done.returncode == 0, text[-3000:]


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="torch.distributed without gloo")
def test_run_nproc_2_from_a_folder_holding_memaudit(tmp_path: Path) -> None:
    done = _memaudit(
        "run", "--nproc", "2", "--target", "reference", *SMALL, "--quiet", "--json", "r.json", cwd=_shadowed(tmp_path)
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "__version__" not in text and "Traceback" not in text, text[-3000:]
    assert (tmp_path / "r.json").is_file() and "dp replicas all (ranks 0, 1): identical" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
@pytest.mark.skipif(
    importlib.util.find_spec("transformer_engine") is None, reason="TE not installed: the default target is CPU"
)
def test_bare_run_nproc_without_cuda_says_why_once(tmp_path: Path) -> None:
    done = _memaudit("run", "--nproc", "2", "--quiet", cwd=tmp_path)
    text = done.stdout + done.stderr
    assert done.returncode == 2, text[-3000:]
    assert text.count("error:") == 1 and "--device cuda" not in text, text
    assert "runs on cuda by default" in text and "--target reference" in text, text
    assert not (tmp_path / "memaudit-ranks").exists()

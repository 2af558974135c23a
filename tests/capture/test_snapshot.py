"""``capture(snapshot=...)`` and ``run --memory-snapshot``: allocator snapshots whose saved-tensor
blocks carry memaudit's row names.

On CPU: the option refuses clearly, before anything runs, and writes nothing. On CUDA (the H200):
the snapshot is PyTorch's own (``torch.cuda.memory._snapshot()``, read back with ``pickle``), and
every live saved storage's block is named; the named block's requested size equals the row's
storage bytes (the allocator's own figure, not memaudit's), and gradients equal a bare run's.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from memaudit.capture import SnapshotUnavailable, capture
from memaudit.capture.snapshot import FRAME_FILE, row_label

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memaudit", *args], capture_output=True, text=True, cwd=cwd)


def named_blocks(path: Path) -> dict[int, tuple[str, int]]:
    """address -> (the memaudit frame's name, requested bytes) of every block the snapshot names."""
    snap = pickle.loads(path.read_bytes())
    out = {}
    for seg in snap["segments"]:
        for block in seg["blocks"]:
            frames = block.get("frames") or []
            if frames and frames[0]["filename"] == FRAME_FILE:
                out[block["address"]] = (frames[0]["name"], block["requested_size"])
    return out


# ---- CPU: the refusal ------------------------------------------------------------------------


@pytest.mark.skipif(CUDA, reason="the refusal is for machines without CUDA")
def test_capture_refuses_without_cuda(tmp_path: Path) -> None:
    target = tmp_path / "snap.pickle"
    with pytest.raises(SnapshotUnavailable, match="needs the CUDA caching allocator"):
        capture(snapshot=target)
    assert not target.exists()


@pytest.mark.skipif(CUDA, reason="the refusal is for machines without CUDA")
def test_cli_refuses_before_running(tmp_path: Path) -> None:
    r = _cli(
        "run",
        "--target",
        "reference",
        "--recipe",
        "bf16",
        "--groups",
        "1",
        "--memory-snapshot",
        "s.pickle",
        "--json",
        "r.json",
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    assert "--memory-snapshot: needs the CUDA caching allocator" in r.stderr
    assert list(tmp_path.iterdir()) == []  # neither the snapshot nor the report


def test_cli_refuses_an_output_that_is_an_input(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text('target = "reference"\n[[cases]]\nrecipe = "bf16"\ngroups = [1]\n')
    before = scenario.read_bytes()
    r = _cli("run", "--scenario", str(scenario), "--memory-snapshot", str(scenario), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "--memory-snapshot" in r.stderr and "input" in r.stderr
    assert scenario.read_bytes() == before


def test_row_label_reads_operand_kind_orientation_format() -> None:
    with capture() as cap:
        x = torch.randn(4, 8, requires_grad=True)
        y = nn.Linear(8, 8)(x).sin()
    rows = cap.report(outputs=y).rows
    labels = [row_label(r) for r in rows]
    assert all(r.kind in label and r.format in label for r, label in zip(rows, labels, strict=True))
    assert len(set(labels)) == len(labels), labels  # rows are told apart by their operand


# ---- CUDA: the snapshot names every saved block -----------------------------------------------


@needs_cuda
def test_every_saved_block_named_with_its_bytes(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).cuda()
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    model(x).sum().backward()
    bare = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    path = tmp_path / "snap.pickle"
    with capture(snapshot=path) as cap:
        y = model(x)
    case = cap.report(outputs=y)
    y.sum().backward()
    assert [torch.equal(a, p.grad) for a, p in zip(bare, model.parameters(), strict=True)] == [True] * 4
    blocks = named_blocks(path)
    by_storage: dict[str, Any] = {}
    for row in case.rows:
        if row.storage is not None and row.resides == "device" and row.storage_bytes:  # 0 bytes: no allocation
            by_storage.setdefault(row.storage, row)
    assert by_storage, "the MLP saved nothing on the device"
    sizes = sorted(r.storage_bytes for r in by_storage.values())
    assert sorted(size for _, size in blocks.values()) == sizes
    names = " | ".join(name for name, _ in blocks.values())
    for row in case.rows:
        if row.storage is not None:
            assert row_label(row) in names
    assert not any("memory snapshot" in w for w in case.warnings), case.warnings


@needs_cuda
def test_recording_stops_when_the_block_raises(tmp_path: Path) -> None:
    path = tmp_path / "snap.pickle"
    with pytest.raises(ValueError, match="boom"), capture(snapshot=path):
        torch.randn(8, device="cuda", requires_grad=True).sin()
        raise ValueError("boom")
    assert not path.exists()
    before = sum(map(len, torch.cuda.memory._snapshot()["device_traces"]))
    keep = torch.empty(1 << 20, device="cuda")
    assert sum(map(len, torch.cuda.memory._snapshot()["device_traces"])) == before  # recording is off again
    del keep


@needs_cuda
@pytest.mark.parametrize(("recipe", "extra"), [("fp8-current", []), ("nvfp4", ["--kernels", "emulated"])])
def test_te_cli_snapshot(tmp_path: Path, recipe: str, extra: list[str]) -> None:
    pytest.importorskip("transformer_engine.pytorch", reason="needs TransformerEngine")
    r = _cli(
        "run",
        "--target",
        "te-grouped-mlp",
        "--recipe",
        recipe,
        "--groups",
        "4",
        "--tokens",
        "2048",
        "--hidden",
        "256",
        "--ffn",
        "512",
        *extra,
        "--quiet",
        "--json",
        "r.json",
        "--memory-snapshot",
        "s.pickle",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    case = json.loads((tmp_path / "r.json").read_text())["cases"][0]
    storages = {
        row["storage"]: row["storage_bytes"] for row in case["rows"] if row.get("storage") and row["storage_bytes"]
    }
    blocks = named_blocks(tmp_path / "s.pickle")
    assert sorted(size for _, size in blocks.values()) == sorted(storages.values())
    assert any(name.startswith("fc1.input") for name, _ in blocks.values()), blocks


def test_allocator_scan_survives_a_dead_weak_proxy() -> None:
    """Found on the H200: Dynamo leaves ``weakref.proxy`` objects whose referent is gone among the
    garbage collector's objects, and ``isinstance`` on one raises ``ReferenceError``; the
    allocator check's scan of live CUDA tensors skipped none of that and crashed ``capture()``."""
    import gc
    import weakref

    from memaudit.capture.verify import cuda_storages

    class Referent:
        pass

    obj = Referent()
    dead = [weakref.proxy(obj)]
    del obj
    gc.collect()
    with pytest.raises(ReferenceError):
        isinstance(dead[0], torch.Tensor)
    assert isinstance(cuda_storages(), dict)  # no ReferenceError

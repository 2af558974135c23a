"""Where an emulated case runs: the host under the emulation.

- **A GPU** (any architecture): TE's forward runs in this process on real CUDA tensors; the
  stand-ins allocate the buffers TE's C++ would (real kernels where the GPU is the emulated
  architecture, :class:`~memaudit.te.emulate.run.EmulatedRun`).
- **No GPU** (torch's CUDA build, no driver needed): the same forward on fake CUDA tensors
  (:mod:`memaudit.te.emulate.fakecuda`), each case in a child process forked from this one. TE
  keeps global state (delayed-scaling history, caches that would hold fake tensors), so a case
  starts from the state this process had, not from the cases before it; forking after TE's
  import keeps the import out of every case.

Both give the same report; ``emulation.machine["host"]`` says which ran it (:func:`name`).
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from memaudit.extension import EmulationFailed
from memaudit.report import CaseReport, validate_case
from memaudit.te.emulate import fakecuda


def gpu() -> bool:
    """A real CUDA device is present."""
    import torch

    return torch.cuda.is_available()


def cuda_here() -> bool:
    """TE's forward can use CUDA here: a GPU, or fake CUDA in force (memaudit's TE code asks this
    where it would ask ``torch.cuda.is_available()``)."""
    return fakecuda.active() is not None or gpu()


def name() -> str:
    """The host, as ``emulation.machine["host"]`` records it: the GPU's name, or no GPU."""
    if fakecuda.active() is not None:
        return fakecuda.HOST_NAME
    if gpu():
        import torch

        return torch.cuda.get_device_name()
    return "no GPU"


def unavailable() -> str | None:
    """None where an emulated case can run here (a GPU, or torch's CUDA build for fake CUDA), else why not."""
    if gpu():
        return None
    return fakecuda.unavailable()


def needs_child() -> bool:
    """Cases run in a child process on fake CUDA (no GPU here, and fake CUDA not already in force)."""
    return not gpu() and fakecuda.active() is None


@contextmanager
def cuda_answers(arch: str) -> Iterator[None]:
    """What ``torch.cuda`` answers to TE's gates on this host: itself on a GPU, fake CUDA's
    answers for ``arch`` with no GPU (no fake tensors: for asking TE's recipe gates here)."""
    if not needs_child():
        yield
        return
    with fakecuda.cuda_answers(arch):
        yield


CHILD_TIMEOUT_S = 600.0
"""How long a child may run one call (a case takes well under a second; a hang is killed)."""


class ChildFailed(EmulationFailed, RuntimeError):
    """The child process that ran a case ended without a report."""


def _child(arch: str, fn: Callable[[], Any], out: int) -> None:
    code = 0
    # fresh stream objects: another thread of the parent (a progress display) may have held the old
    # ones' locks at the fork, and only the forking thread lives on here
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the child's for its whole life
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    try:
        import torch

        torch.set_num_threads(1)  # values it computes are a few integers; no thread pool after fork
        with fakecuda.fake_cuda(arch):
            payload = {"result": fn()}
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        payload = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        code = 1
    try:
        data = json.dumps(payload, sort_keys=True).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def call_in_child(arch: str, fn: Callable[[], Any], *, timeout_s: float = CHILD_TIMEOUT_S) -> Any:
    """``fn()`` in a child process forked from this one, on fake CUDA for ``arch``; its result,
    which must be JSON data.

    Raises :class:`ChildFailed` when ``fn`` raised, the child died (a signal, an abort in C++) or
    ran past ``timeout_s`` (then it is killed), naming what ended it."""
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    gc.freeze()  # the child's collections skip what this process holds: no copy-on-write of it
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        os.close(read)
        os.close(write)
        raise
    if pid == 0:  # pragma: no cover - the child; its coverage is the parent's result
        os.close(read)
        _child(arch, fn, write)
    gc.unfreeze()
    os.close(write)
    chunks = []
    deadline = time.monotonic() + timeout_s
    with os.fdopen(read, "rb", buffering=0) as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise ChildFailed(f"the fake-CUDA child process did not finish within {timeout_s:g} s (killed)")
            chunk = pipe.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        raise ChildFailed(f"the fake-CUDA child process died of signal {sig} ({signal.Signals(sig).name})")
    try:
        payload: dict[str, Any] = json.loads(data) if data else {}
    except json.JSONDecodeError:
        payload = {}
    if "result" in payload:
        return payload["result"]
    if "error" in payload:
        raise ChildFailed(f"in the fake-CUDA child process: {payload['error']}\n{payload.get('traceback', '')}")
    raise ChildFailed(f"the fake-CUDA child process exited with status {os.WEXITSTATUS(status)} and no result")


def run_in_child(arch: str, fn: Callable[[], list[CaseReport]]) -> list[CaseReport]:
    """The cases ``fn()`` makes in a child process on fake CUDA for ``arch`` (:func:`call_in_child`)."""
    return [validate_case(d) for d in call_in_child(arch, lambda: [c.to_dict() for c in fn()])]

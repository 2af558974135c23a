"""The process group a rank joins, from the environment ``torchrun`` sets."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from memaudit.errors import UsageError

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""What ``torchrun`` (``torch.distributed.run``) sets for each worker."""

DEFAULT_TIMEOUT = 120
"""Seconds a rank waits for the others after a case, and for the gather (``--dist-timeout``)."""


@dataclass(frozen=True)
class RankEnv:
    """This worker's place in the job, as torchrun says it."""

    rank: int
    world_size: int
    local_rank: int


def torchrun_env(environ: dict[str, str] | None = None) -> RankEnv | None:
    """This process's rank, world size and local rank when ``torchrun`` started it, else None."""
    env = os.environ if environ is None else environ
    if not all(k in env for k in TORCHRUN_ENV):
        return None
    try:
        rank, world, local = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])
    except ValueError:
        raise UsageError(
            f"RANK={env['RANK']!r}, WORLD_SIZE={env['WORLD_SIZE']!r}, LOCAL_RANK={env['LOCAL_RANK']!r} "
            "are not integers",
            key="environment",
        ) from None
    if not 0 <= rank < world:
        raise UsageError(f"RANK={rank} outside a WORLD_SIZE of {world}", key="environment")
    return RankEnv(rank, world, local)


def default_backend(device: str) -> str:
    """gloo on CPU; TE's own tests' ``cpu:gloo,cuda:nccl`` where the cases run on CUDA (the
    reports still travel over gloo)."""
    return "cpu:gloo,cuda:nccl" if device.startswith("cuda") else "gloo"


@dataclass
class World:
    """A joined process group: ``rank`` of ``world_size``; ``cpu_group`` the gloo group reports
    and statuses travel over; ``run_id`` the same on every rank (rank 0's)."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    cpu_group: Any
    run_id: str
    timeout: int = DEFAULT_TIMEOUT

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (over the gloo group)."""
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.cpu_group)
        return box[0]

    def broadcast_long(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank, waiting as long as the cases' collectives may (the
        default group: rank 0 may take a while to write a large merged report first)."""
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value, group=self.cpu_group)
        return out

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's ``value`` on rank 0 (None elsewhere), over the gloo group."""
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(value, out, dst=0, group=self.cpu_group)
        return out


def join(env: RankEnv, backend: str, device: str, *, timeout: int = DEFAULT_TIMEOUT) -> World:
    """Initialise the default process group (``backend``), make the CPU gloo group (whose
    operations give up after ``timeout`` seconds) and agree on a run id.

    On CUDA, each rank takes the GPU of its local rank first (``torch.cuda.set_device``)."""
    import torch
    import torch.distributed as dist

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device} under torchrun, but CUDA is not available", key="--device")
        torch.cuda.set_device(env.local_rank)
    dist.init_process_group(backend=backend)  # the collectives of the cases: torch's default timeout
    cpu = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
    world = World(env.rank, env.world_size, env.local_rank, backend, cpu, "", timeout)
    world.run_id = world.broadcast(uuid.uuid4().hex if env.rank == 0 else None)
    return world


def leave() -> None:
    """Destroy the process groups (where one was made)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()

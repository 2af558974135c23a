"""Per-rank audits under ``torchrun``: the runner stage for a distributed job.

* :mod:`memaudit.distributed.world`: the process group a rank joins (``torchrun``'s environment), the
  CPU gloo group the reports travel over, a run id;
* :mod:`memaudit.distributed.rank`: one rank's run: its cases captured locally (no collective in a hook),
  its own file written after each case, the reports gathered to rank 0 after the last one;
* :mod:`memaudit.distributed.merge`: rank reports -> one merged report (a missing rank is an error);
* :mod:`memaudit.distributed.launch`: ``memaudit run --nproc N`` starts the same command under
  ``torch.distributed.run`` and explains a rank that failed.

The merged report's model (per-rank ``dist``, the summary over ranks) is :mod:`memaudit.ranks`.
"""

"""What a pack that reads tensors through libtorch's C++ would save: an experiment, not memaudit.

memaudit's pack reads a tensor's metadata through torch's Python bindings (about thirteen reads).
This script builds, with ``torch.utils.cpp_extension`` (a C++ compiler is needed; about 20 s), one
C++ function that makes the same reads in one call, and times a host-bound step of
``bench/perf/host_bound.py`` under the floor pair, ``capture()`` and ``capture(modules=False)``, and
the two captures again with the pack's plain-tensor path swapped for one that calls it, in
alternating rounds of fresh processes (medians, [min, max]). The swapped pack keeps the storage's
address where memaudit keeps a weak reference to its Python object (and skips the parameter and
classifier look-ups): its rows would be wrong, so no report is made. It bounds what such a helper
could save at best; it is not memaudit's pack, and such a helper would have to be built for each
torch release::

    python bench/perf/libtorch_reads.py [--case cpu|mixtral|...] [--processes 3] [--rounds 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SOURCE = r"""
#include <torch/extension.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/python_variable.h>

// (shape, scalar type, device, storage address, storage bytes, offset, version, node sequence
// number or -1, output_nr or -1, is a view): what memaudit's pack reads, in one call.
static PyObject* meta(PyObject*, PyObject* obj) {
  if (!THPVariable_Check(obj)) { Py_RETURN_NONE; }
  const at::Tensor& t = THPVariable_Unpack(obj);
  auto sizes = t.sizes();
  PyObject* shape = PyTuple_New((Py_ssize_t)sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(sizes[i]));
  const c10::Storage& st = t.storage();
  const auto& fn = t.grad_fn();
  long long seq = fn ? (long long)fn->sequence_nr() : -1;
  long long onr = fn ? (long long)t.output_nr() : -1;
  int dev = (int)t.device().type() * 256 + (int)t.device().index() + 1;
  return Py_BuildValue("(NiiLLLLLLi)", shape, (int)t.scalar_type(), dev,
                       (long long)(intptr_t)st.unsafeGetStorageImpl(), (long long)st.nbytes(),
                       (long long)t.storage_offset(), (long long)t._version(), seq, onr, (int)t.is_view());
}
static PyMethodDef meta_def = {"meta", (PyCFunction)meta, METH_O, "a tensor's metadata"};
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("meta") = pybind11::reinterpret_steal<pybind11::object>(PyCFunction_New(&meta_def, nullptr));
}
"""


def build(where: str) -> Any:
    """The probe module (built into ``where``)."""
    from torch.utils.cpp_extension import load_inline

    return load_inline(
        "memaudit_libtorch_reads", cpp_sources=[SOURCE], functions=None, extra_cflags=["-O2"], build_directory=where
    )


def swapped_pack(meta: Any) -> Any:
    """``Layer._pack`` with the plain-tensor path's reads made by ``meta`` (anything else as memaudit's)."""
    import torch

    from memaudit.capture import hooks
    from memaudit.capture.hooks import Record

    original = hooks.Layer._pack
    plain = (torch.Tensor, torch.nn.Parameter)
    new_saved = type(hooks.new_record(None)[0])
    next_seq = torch._C._autograd._get_sequence_nr  # the number the next node in this thread gets

    def pack(self: Any, t: Any) -> Any:
        if type(t) not in plain:
            return original(self, t)
        saved = new_saved()
        rec = Record(saved, self.on_release)
        saved.rec = rec
        m = meta(t)
        rec.raw = m
        rec.version = m[6]
        rec.is_output = False
        rec.output_nr = m[8] if m[7] >= 0 else None
        if m[7] >= 0 and m[7] == next_seq() - 1:  # an output of the node being built: kept as an alias
            rec.is_output = True
            t = t.detach()
        saved.value = t
        rec.frame = self.state.frame
        if self.single is not None:
            if self.single.active:
                self.single.records.append(rec)
        else:
            self._file(rec)
        return saved

    return original, pack


def one_process(case: str, rounds: int, warmup: int, where: str) -> dict[str, float]:
    """Median ms a step of each variant, in alternating rounds."""
    import torch
    from host_bound import alternating, make_step, variants

    from memaudit.capture import hooks

    original, pack = swapped_pack(build(where).meta)
    step, _ = make_step(case)
    vs = variants(step)

    def swapped(fn: Any) -> Any:
        def run() -> None:
            hooks.Layer._pack = pack  # type: ignore[method-assign]
            try:
                fn()
            finally:
                hooks.Layer._pack = original  # type: ignore[method-assign]

        return run

    runs = {name: vs[name] for name in ("bare", "floor", "capture(modules=False)", "capture()")}
    runs["capture(modules=False), C++ reads"] = swapped(vs["capture(modules=False)"])
    runs["capture(), C++ reads"] = swapped(vs["capture()"])
    gpu = case != "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    clock = time.perf_counter if gpu else time.thread_time
    return alternating(runs, rounds, warmup, sync, clock)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="cpu", help="a case of host_bound.py (cpu, mixtral, qwen3-moe, olmoe, te-...)")
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.processes < 1 or args.rounds < 1 or args.warmup < 0:
        ap.error("--processes and --rounds must be >= 1, --warmup >= 0")
    if args.child:
        print(json.dumps(one_process(args.case, args.rounds, args.warmup, args.child)))
        return
    with tempfile.TemporaryDirectory() as where:
        build(where)  # once, before the processes time anything
        runs = []
        for _ in range(args.processes):
            cmd = [sys.executable, __file__, "--case", args.case, "--rounds", str(args.rounds)]
            cmd += ["--warmup", str(args.warmup), "--child", where]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"a process failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(
        f"{args.case}: {args.processes} fresh processes x {args.rounds} alternating rounds; / floor, median [min, max]"
    )
    print(f"  bare step {statistics.median(r['bare'] for r in runs):.3f} ms")
    for name in runs[0]:
        if name in ("bare", "floor"):
            continue
        ratios = [r[name] / r["floor"] for r in runs]
        print(f"  {name:36s} {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")


if __name__ == "__main__":
    main()

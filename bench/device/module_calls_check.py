"""Module calls tracked around ``Module.__call__`` on this machine's Python and torch: names, the
code given back, no global hook, and ``torch.compile`` compiling as bare (graph and recompile
counts) with a module compiled outside and called inside a capture, and one compiled inside.
Prints what it checked; exits 1 on a mismatch. Usage: python bench/device/module_calls_check.py"""

from __future__ import annotations

import sys

import torch
import torch.nn.modules.module as mm
from torch._dynamo.utils import counters

from memaudit.capture import capture

failed: list[str] = []


def check(what: str, ok: bool) -> None:
    print(("ok  " if ok else "FAIL") + " " + what)
    if not ok:
        failed.append(what)


print("python", sys.version.split()[0], "torch", torch.__version__)
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64)).to(dev)
x = torch.randn(8, 64, device=dev, requires_grad=True)
call, code = torch.nn.Module.__dict__["__call__"], torch.nn.Module.__dict__["__call__"].__code__
with capture() as cap:
    check("memaudit's code runs in Module.__call__ inside a capture", call.__code__ is not code)
    check("no global module hook", not mm._global_forward_pre_hooks and not mm._global_forward_hooks)
    y = model(x)
    names = sorted({r.module or "-" for r in cap.report(outputs=y).rows})
check("torch's code is back after it", call.__code__ is code and torch.nn.Module.__dict__["__call__"] is call)
print("   row modules:", names)
check("rows named by their module call", names == ["0", "1", "2"])


def graphs() -> int:
    """Graphs Dynamo made so far in this process (a recompile makes one too)."""
    return counters["stats"]["unique_graphs"]


compiled = torch.compile(model)
compiled(x).sum().backward()
bare = graphs()
with capture() as cap:
    compiled(x).sum().backward()
    inside = torch.compile(torch.nn.Sequential(torch.nn.Linear(64, 8)).to(dev))
    out = inside(x)
    rows = cap.report(outputs=out).rows
after = graphs()
check(
    f"a module compiled bare is not compiled again inside a capture (graphs {bare} -> {after}, one new module)",
    after == bare + 1,
)
check("rows of a module compiled inside a capture are named by it", {r.module for r in rows} == {"Sequential"})
inside(x)
check("and it is not compiled again outside", graphs() == after)
sys.exit(1 if failed else 0)

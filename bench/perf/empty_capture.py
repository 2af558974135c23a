"""What entering and leaving an empty ``capture()`` costs, part by part.

Times, in one process, an empty floor pair, an empty ``capture()``, and each operation an empty
capture performs (its object, its layer, pushing and popping the pair in C, module tracking's
acquire and release, Dynamo's enter and exit, the default plugins, the thread count it reads
twice). Medians of several rounds of a loop each, microseconds, thread CPU time::

    python bench/perf/empty_capture.py [--rounds 9] [--loop 20000] [--dynamo]

``--dynamo`` imports ``torch._dynamo`` first (as TE and transformers do): Dynamo's enter and exit
then take their fast path.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import weakref
from collections.abc import Callable


def parts() -> dict[str, Callable[[], object]]:
    """Name -> one call of what is timed."""
    import torch._C._autograd as autograd_c
    from host_bound import empty_capture, empty_floor_pair  # this folder's: the pair host_bound.py times

    from memaudit.capture import compiled, hooks, modules, stack
    from memaudit.capture.recorder import Capture, default_plugins

    cap = Capture(plugins=[])
    layer = hooks.Layer([cap], None, None, cap.expand)
    push, pop = autograd_c._push_saved_tensors_default_hooks, autograd_c._pop_saved_tensors_default_hooks
    active = stack.ACTIVE

    def empty_bare_object() -> None:
        with Capture(plugins=[]):
            pass

    def pair_in_c() -> None:
        push(layer.pack, layer.unpack)
        pop()

    def acquire_release() -> None:
        modules.acquire()
        modules.release()

    def enter_exit() -> None:
        compiled.enter()
        compiled.exit()

    def push_pop() -> None:
        stack.push_capture(cap)
        stack.pop_capture(cap)

    def active_entry() -> None:
        active[id(cap)] = weakref.ref(cap)
        active.pop(id(cap), None)

    def thread_count() -> None:
        threading.active_count()
        threading.active_count()

    return {
        "empty floor pair": empty_floor_pair,
        "empty capture()": empty_capture,
        "empty Capture(plugins=[])": empty_bare_object,
        "Capture(plugins=[]) object": lambda: Capture(plugins=[]),
        "default_plugins()": default_plugins,
        "Layer object": lambda: hooks.Layer([cap], None, None, cap.expand),
        "push and pop the pair in C": pair_in_c,
        "stack.push_capture + pop_capture": push_pop,
        "modules.acquire + release": acquire_release,
        "compiled.enter + exit": enter_exit,
        "ACTIVE entry in and out": active_entry,
        "threading.active_count() twice": thread_count,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--loop", type=int, default=20000)
    ap.add_argument("--dynamo", action="store_true", help="import torch._dynamo first")
    args = ap.parse_args()
    if args.rounds < 1 or args.loop < 1:
        ap.error("--rounds and --loop must be >= 1")
    if args.dynamo:
        import torch._dynamo  # noqa: F401

    fns = parts()
    clock = time.thread_time_ns
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm: first calls import and cache
        for _ in range(100):
            fn()
    names = list(fns)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = fns[name]
            c0 = clock()
            for _ in range(args.loop):
                fn()
            times[name].append((clock() - c0) / args.loop / 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    floor = med["empty floor pair"]
    print(f"µs a call, median of {args.rounds} rounds of {args.loop} (Dynamo imported: {args.dynamo})")
    for name, us in med.items():
        print(f"  {name:36s} {us:7.3f}  ({us / floor:5.2f}x the floor pair)")


if __name__ == "__main__":
    main()

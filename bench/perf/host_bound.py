#!/usr/bin/env python
"""Host-bound steps: what ``capture()`` costs over the floor hook pair where the host sets the pace.

Two kinds of case, each timed bare, under the floor (a metadata-only pack that appends shape,
dtype and bytes and returns the tensor; an identity unpack), under ``capture(modules=False)`` and
under ``capture()``, in alternating rounds of one process, several fresh processes per case:

* ``cpu``: 50 blocks of ``Linear(64, 64)`` + ``GELU`` on a (4, 16, 64) input, on CPU: 150 saved
  tensors a step, compute negligible. Also times an empty ``capture()`` against an empty floor
  pair (entering and leaving), per saved tensor over the floor, and thread CPU time.
* ``mixtral``, ``qwen3-moe``, ``olmoe`` (``--gpu``): Hugging Face MoE models with random small
  configs (2 layers; Mixtral 8 experts top-2, Qwen3-MoE 16 experts top-4, OLMoE 16 experts top-4;
  bf16, 4 x 512 tokens) on the GPU, wall time between device syncs; and TE's grouped MLP at
  ``small`` and ``production`` shapes in bf16 and fp8-current (unfused path, real kernels).

Each case reports ``model``, ``device``, ``bare_ms`` and the ratios ``floor``, ``capture`` and
``capture_over_floor`` (capture / floor), as medians over the processes with min and max. The
ratios compare runs of one process (the same warm allocator and caches), medians of its rounds.

    python bench/perf/host_bound.py --cpu --json reports/bench/cpu-host-bound.json --md reports/bench/cpu-host-bound.md
    python bench/perf/host_bound.py --gpu --json reports/bench/host-bound.json --md reports/bench/host-bound.md
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HF_MODELS = ("mixtral", "qwen3-moe", "olmoe")
TE_CASES = ("te-small-bf16", "te-small-fp8-current", "te-production-bf16", "te-production-fp8-current")


# ---- the steps ---------------------------------------------------------------------------------
def cpu_step() -> tuple[Callable[[], None], str]:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    blocks = [m for _ in range(50) for m in (torch.nn.Linear(64, 64), torch.nn.GELU())]
    model = torch.nn.Sequential(*blocks)
    x = torch.randn(4, 16, 64, requires_grad=True)

    def step() -> None:
        model(x).sum().backward()

    return step, "50 x (Linear(64, 64) + GELU), input (4, 16, 64), fp32"


def hf_step(name: str) -> tuple[Callable[[], None], str]:
    import torch

    torch.manual_seed(0)
    common = {
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "vocab_size": 1024,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "max_position_embeddings": 1024,
    }
    if name == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM

        cfg = MixtralConfig(**common, num_local_experts=8, num_experts_per_tok=2)
        model = MixtralForCausalLM(cfg)
        what = "Mixtral, 2 layers, 8 experts, top-2"
    elif name == "qwen3-moe":
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

        cfg = Qwen3MoeConfig(
            **common,
            moe_intermediate_size=256,
            num_experts=16,
            num_experts_per_tok=4,
            decoder_sparse_step=1,
            head_dim=64,
        )
        model = Qwen3MoeForCausalLM(cfg)
        what = "Qwen3-MoE, 2 layers, 16 experts, top-4"
    elif name == "olmoe":
        from transformers import OlmoeConfig, OlmoeForCausalLM

        cfg = OlmoeConfig(**common, num_experts=16, num_experts_per_tok=4)
        model = OlmoeForCausalLM(cfg)
        what = "OLMoE, 2 layers, 16 experts, top-4"
    else:
        raise SystemExit(f"unknown model {name!r}")
    device = os.environ.get("HOST_BOUND_DEVICE", "cuda")  # cpu: a smoke run of the harness without a GPU
    model = model.to(device, torch.bfloat16).train()
    ids = torch.randint(0, 1024, (4, 512), device=device)

    def step() -> None:
        model(input_ids=ids).logits.float().sum().backward()
        model.zero_grad(set_to_none=True)

    return step, what + ", random weights, bf16, 4 x 512 tokens"


def te_step(case: str) -> tuple[Callable[[], None], str]:
    import transformer_engine.pytorch as te  # noqa: F401

    from memaudit.spec import CaseSpec
    from memaudit.targets.registry import get_target

    _, shape, recipe = case.split("-", 2)
    dims = {"small": (2048, 4096, 2048, 8), "production": (65536, 4096, 2048, 8)}[shape]
    tokens, hidden, ffn, groups = dims
    target = get_target("te-grouped-mlp")
    spec = CaseSpec.make(target, recipe, device="cuda", tokens=tokens, hidden=hidden, ffn=ffn, groups=groups)
    built = target.build(spec)

    class NoLabels:
        def label(self, *args: Any, **kwargs: Any) -> None:
            return None

    nolabels = NoLabels()

    def step(cap: Any = None) -> None:
        built.backward(built.forward(cap if cap is not None else nolabels))

    return step, f"TE grouped MLP, T={tokens}, H={hidden}, F={ffn}, G={groups}, {recipe}, unfused"


def make_step(case: str) -> tuple[Callable[[], None], str]:
    if case == "cpu":
        return cpu_step()
    if case in HF_MODELS:
        return hf_step(case)
    return te_step(case)


# ---- one process: alternating rounds ------------------------------------------------------------
def variants(step: Callable[[], None]) -> dict[str, Callable[[], None]]:
    import torch

    from memaudit.capture import capture

    meta: list[Any] = []

    def pack(t: Any) -> Any:
        meta.append((t.shape, t.dtype, t.untyped_storage().nbytes()))
        return t

    def floor() -> None:
        meta.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step()

    # A step that takes the capture labels its tensors with it (TE's grouped MLP); the others ignore it.
    labels = "cap" in inspect.signature(step).parameters

    def unnamed() -> None:
        with capture(modules=False) as cap:
            step(cap) if labels else step()  # type: ignore[call-arg]

    def full() -> None:
        with capture() as cap:
            step(cap) if labels else step()  # type: ignore[call-arg]

    def floor_hooks() -> None:
        with noop_module_hooks():
            floor()

    return {
        "bare": step,
        "floor": floor,
        "floor + no-op module hooks": floor_hooks,
        "capture(modules=False)": unnamed,
        "capture()": full,
    }


@contextmanager
def noop_module_hooks(as_memaudit: bool = False) -> Iterator[None]:
    """Two global module hooks that do nothing: what any audit that names modules by torch's global
    hooks pays at least (every module call takes torch's slow path). ``as_memaudit``: the forward
    hook registered as memaudit registered its own before it ran around ``Module.__call__`` (with
    keyword arguments, always called)."""
    from torch.nn.modules import module as mm

    pre = mm.register_module_forward_pre_hook(lambda m, a: None)
    if as_memaudit:
        post = mm.register_module_forward_hook(lambda m, a, k, o: None, with_kwargs=True, always_call=True)
    else:
        post = mm.register_module_forward_hook(lambda m, a, o: None)
    try:
        yield
    finally:
        pre.remove()
        post.remove()
        mm._global_forward_hooks_with_kwargs.pop(post.id, None)


def empty_floor_pair() -> None:
    """Enter and leave an empty floor pair."""
    import torch

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        pass


def empty_capture() -> None:
    """Enter and leave an empty ``capture()``."""
    from memaudit.capture import capture

    with capture():
        pass


def empty_pairs(rounds: int) -> dict[str, float]:
    """Entering and leaving an empty capture() and an empty floor pair, microseconds, medians."""
    floor, empty = empty_floor_pair, empty_capture
    clock = time.thread_time_ns
    times: dict[str, list[float]] = {"floor": [], "capture()": []}
    inner = 200
    for r in range(rounds):
        for name, fn in (("floor", floor), ("capture()", empty)) if r % 2 else (("capture()", empty), ("floor", floor)):
            c0 = clock()
            for _ in range(inner):
                fn()
            times[name].append((clock() - c0) / inner / 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def alternating(
    runs: dict[str, Callable[[], None]], rounds: int, warmup: int, sync: Callable[[], None], clock: Callable[[], float]
) -> dict[str, float]:
    """Median ms of each of ``runs``, timed in rounds that start at a different one each time (the
    first ``warmup`` rounds not counted); ``sync`` before and after each."""
    names = list(runs)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds + warmup):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            sync()
            c0 = clock()
            runs[name]()
            sync()
            if r >= warmup:
                times[name].append(clock() - c0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def one_process(case: str, rounds: int, warmup: int) -> dict[str, Any]:
    import torch

    from memaudit.capture import capture

    step, what = make_step(case)
    gpu = case != "cpu" and os.environ.get("HOST_BOUND_DEVICE", "cuda") == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    clock = time.perf_counter if gpu else time.thread_time
    with capture() as cap:
        step()
        saved = len(cap.records)
    del cap
    med = alternating(variants(step), rounds, warmup, sync, clock)
    out: dict[str, Any] = {"model": what, "saved_tensors": saved, "median_ms": med}
    if case == "cpu":
        out["empty_us"] = empty_pairs(max(rounds // 4, 10))
    return out


# ---- several processes, summarised ------------------------------------------------------------
def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def summarise(case: str, runs: list[dict[str, Any]], device: str) -> dict[str, Any]:
    def ratio(a: str, b: str) -> list[float]:
        return [r["median_ms"][a] / r["median_ms"][b] for r in runs]

    out: dict[str, Any] = {
        "case": case,
        "model": runs[0]["model"],
        "device": device,
        "saved_tensors": runs[0]["saved_tensors"],
        "processes": len(runs),
        "bare_ms": spread([r["median_ms"]["bare"] for r in runs], 4),
        "floor": spread(ratio("floor", "bare")),
        "capture": spread(ratio("capture()", "bare")),
        "capture_unnamed": spread(ratio("capture(modules=False)", "bare")),
        "capture_over_floor": spread(ratio("capture()", "floor")),
        "unnamed_over_floor": spread(ratio("capture(modules=False)", "floor")),
        "hooks_over_floor": spread(ratio("floor + no-op module hooks", "floor")),
    }
    n = runs[0]["saved_tensors"]
    if n:
        out["us_per_saved_over_floor"] = spread(
            [(r["median_ms"]["capture()"] - r["median_ms"]["floor"]) * 1e3 / n for r in runs], 2
        )
    if "empty_us" in runs[0]:
        out["empty_floor_us"] = spread([r["empty_us"]["floor"] for r in runs], 2)
        out["empty_capture_us"] = spread([r["empty_us"]["capture()"] for r in runs], 2)
        out["empty_over_floor"] = spread([r["empty_us"]["capture()"] / r["empty_us"]["floor"] for r in runs], 2)
    return out


def device_name(case: str) -> str:
    if case == "cpu" or os.environ.get("HOST_BOUND_DEVICE", "cuda") != "cuda":
        return f"CPU ({platform.machine()}, {os.cpu_count()} cores), thread CPU time"
    import torch

    return torch.cuda.get_device_name(0) + ", wall time between syncs"


def environment() -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    for pkg in ("transformers", "transformer_engine"):
        try:
            from importlib.metadata import version

            env[pkg] = version(pkg if pkg != "transformer_engine" else "transformer-engine")
        except Exception:  # noqa: BLE001 - not installed here
            env[pkg] = None
    try:
        env["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except Exception:  # noqa: BLE001 - not a checkout (the device gets a copy of the tree)
        env["commit"] = os.environ.get("MEMAUDIT_COMMIT")
    return env


def run_case(case: str, processes: int, rounds: int, warmup: int) -> tuple[dict[str, Any] | None, str | None]:
    runs = []
    for _ in range(processes):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        cmd = [
            sys.executable,
            __file__,
            "--child",
            case,
            "--rounds",
            str(rounds),
            "--warmup",
            str(warmup),
            "--out",
            out,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return None, (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        runs.append(json.loads(Path(out).read_text()))
        os.unlink(out)
    return summarise(case, runs, device_name(case)), None


def markdown(result: dict[str, Any]) -> str:
    env = result["environment"]
    lines = [
        "# Host-bound steps: capture() against the floor hook pair",
        "",
        f"`{result['command']}`; {result['date']}; Python {env['python']}, torch {env['torch']}"
        + (f", transformers {env['transformers']}" if env.get("transformers") else "")
        + (f", TE {env['transformer_engine']}" if env.get("transformer_engine") else "")
        + (f"; tree `{env['commit']}`" if env.get("commit") else "")
        + ".",
        "",
        "Ratios to the bare step (floor, capture) and capture / floor: medians of each process's alternating "
        "rounds, then the median over fresh processes [min, max]. The floor is a metadata-only hook pair; "
        "'no-op module hooks / floor' adds two global module hooks that do nothing (what naming modules by "
        "torch's global hooks costs at least; a result without it was run before it was measured).",
        "",
        "| case | model | device | saved | bare ms | floor | capture() | capture() / floor | "
        "capture(modules=False) / floor | no-op module hooks / floor |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def f(s: dict[str, float]) -> str:
        return f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"

    for c in result["cases"]:
        lines.append(
            f"| {c['case']} | {c['model']} | {c['device']} | {c['saved_tensors']} | {c['bare_ms']['median']:.3f} | "
            f"{f(c['floor'])} | {f(c['capture'])} | **{f(c['capture_over_floor'])}** | {f(c['unnamed_over_floor'])} | "
            + (f(c["hooks_over_floor"]) if "hooks_over_floor" in c else "not run")
            + " |"
        )
    for c in result["cases"]:
        if "us_per_saved_over_floor" in c:
            s = c["us_per_saved_over_floor"]
            lines += [
                "",
                f"{c['case']}: capture() over the floor per saved tensor: {s['median']:.2f} µs "
                f"[{s['min']:.2f}, {s['max']:.2f}].",
            ]
        if "empty_capture_us" in c:
            e, fl, r = c["empty_capture_us"], c["empty_floor_us"], c["empty_over_floor"]
            lines.append(
                f"{c['case']}: an empty capture() (enter and exit) {e['median']:.2f} µs "
                f"[{e['min']:.2f}, {e['max']:.2f}], an empty floor pair {fl['median']:.2f} µs; "
                f"ratio {r['median']:.2f} [{r['min']:.2f}, {r['max']:.2f}]."
            )
    if result["errors"]:
        lines += ["", "## Cases that did not run", ""]
        lines += [f"- {k}: {v}" for k, v in result["errors"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="the CPU host-bound model")
    ap.add_argument("--gpu", action="store_true", help="the Hugging Face MoE models and TE's grouped MLP, on CUDA")
    ap.add_argument("--cases", help="comma-separated cases instead (cpu, mixtral, qwen3-moe, olmoe, te-...)")
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=0, help="rounds per process (default: 200 on CPU, 30 on GPU)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--profile", help="a case: cProfile of capture() rounds against bare rounds, per step (printed)")
    ap.add_argument("--combine", nargs="+", type=Path, help="JSON files of earlier runs: one report of their cases")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        res = one_process(args.child, args.rounds, args.warmup)
        Path(args.out).write_text(json.dumps(res))
        return
    for out in (args.json, args.md):
        if out is not None and not out.parent.is_dir():
            ap.error(f"--json/--md: folder {out.parent} does not exist")
    if args.combine:
        write(combine(args.combine), args.json, args.md)
        return
    if args.profile:
        profile(args.profile, args.rounds or 20)
        return
    cases: list[str] = []
    if args.cases:
        cases = args.cases.split(",")
    if args.cpu:
        cases.append("cpu")
    if args.gpu:
        cases += [*HF_MODELS, *TE_CASES]
    if not cases:
        ap.error("name --cpu, --gpu, --cases or --combine")
    result: dict[str, Any] = {
        "schema": "memaudit.bench.host-bound/1",
        "command": "python bench/perf/host_bound.py " + " ".join(map(_shown, sys.argv[1:])),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "environment": environment(),
        "cases": [],
        "errors": {},
    }
    for case in cases:
        rounds = args.rounds or (200 if case == "cpu" else 30)
        t0 = time.perf_counter()
        summary, error = run_case(case, args.processes, rounds, args.warmup)
        took = time.perf_counter() - t0
        if summary is None:
            result["errors"][case] = error
            print(f"{case}: error: {error}", flush=True)
            continue
        summary["seconds"] = round(took, 1)
        result["cases"].append(summary)
        print(
            f"{case}: bare {summary['bare_ms']['median']:.3f} ms, capture/floor "
            f"{summary['capture_over_floor']['median']:.3f} ({took:.0f} s)",
            flush=True,
        )
    write(result, args.json, args.md)


def profile(case: str, steps: int) -> None:
    """Where capture()'s time over the bare step goes: cProfile's own time per function, per step,
    capture() rounds minus bare rounds (the functions whose time grew), and calls per step."""
    import cProfile
    import pstats

    import torch

    step, what = make_step(case)
    vs = variants(step)
    sync = torch.cuda.synchronize if torch.cuda.is_available() and case != "cpu" else (lambda: None)
    stats = {}
    for name in ("bare", "floor", "capture()"):
        for _ in range(3):
            vs[name]()
        sync()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            vs[name]()
        sync()
        prof.disable()
        stats[name] = {k: (v[1], v[2]) for k, v in pstats.Stats(prof).stats.items()}  # type: ignore[attr-defined]
    for base in ("bare", "floor"):
        print(f"{what}: cProfile, per step, capture() minus {base}: own time (us), calls, function")
        grown = []
        for k, (calls, tt) in stats["capture()"].items():
            bc, bt = stats[base].get(k, (0, 0.0))
            grown.append(((tt - bt) / steps * 1e6, (calls - bc) / steps, k))
        grown.sort(reverse=True)
        for dt, dc, (file, line, fn) in grown[:40]:
            print(f"  {dt:9.1f} us {dc:+8.1f}  {'/'.join(file.rsplit('/', 2)[-2:])}:{line} {fn}")
    total = {n: sum(t for _, t in st.values()) / steps * 1e6 for n, st in stats.items()}
    print("  totals per step under the profiler (us):", {k: round(v) for k, v in total.items()})


def _shown(arg: str) -> str:
    """An argument as the report shows it: an absolute path by its name under OUT (no machine's paths)."""
    return f"OUT/{Path(arg).name}" if os.path.isabs(arg) else arg


def combine(paths: list[Path]) -> dict[str, Any]:
    """One result of several runs' (each case keeps its run's command and environment)."""
    runs = [json.loads(p.read_text()) for p in paths]
    envs = {json.dumps(r["environment"], sort_keys=True) for r in runs}
    if len(envs) != 1:
        raise SystemExit("--combine: the runs' environments differ; combine runs of one machine and tree only")
    commands = [re.sub(r"/\S*/(?=[^/\s]+\.(json|md)\b)", "OUT/", r["command"]) for r in runs]
    out = dict(runs[0], command=" ; ".join(commands), cases=[], errors={})
    for r in runs:
        out["cases"] += r["cases"]
        out["errors"].update(r["errors"])
    return out


def write(result: dict[str, Any], json_path: Path | None, md_path: Path | None) -> None:
    if json_path:
        tmp = json_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(json_path)
    if md_path:
        tmp = md_path.with_suffix(".tmp")
        tmp.write_text(markdown(result))
        tmp.replace(md_path)
    print(markdown(result))


if __name__ == "__main__":
    main()

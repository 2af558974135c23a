"""The fast paths of report() give exactly the rows the general paths give."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from memaudit.capture import capture
from memaudit.capture import recorder as rec_mod
from memaudit.report import OPTIONAL_ROW_KEYS, Row, make_row, replace_row, row_dict

ROOT = Path(__file__).resolve().parents[2]


def _model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False), torch.randn(
        2, 4, 8, requires_grad=True
    )


def test_make_row_and_row_dict_match_the_dataclass() -> None:
    values = {
        "index": 3,
        "kind": "tensor",
        "format": "fp32",
        "shape": [2, 3],
        "dtype": "float32",
        "bytes": 24,
        "op": "MmBackward0",
        "note": "n",
        "storage": "s1",
    }
    fast, slow = make_row(dict(values)), Row(**values)
    assert fast == slow
    want = {k: v for k, v in dataclasses.asdict(slow).items() if not (k in OPTIONAL_ROW_KEYS and v is None)}
    assert row_dict(fast) == want and list(row_dict(fast)) == list(want)
    with_module = make_row({**values, "module": "layers.0"})
    assert row_dict(with_module)["module"] == "layers.0" and with_module == Row(**values, module="layers.0")
    assert row_dict(fast)["shape"] is not fast.shape  # a copy, as asdict makes
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.bytes = 1  # type: ignore[misc]
    assert replace_row(fast, operand="x", group=2) == dataclasses.replace(slow, operand="x", group=2)
    assert list(vars(replace_row(fast, operand="x"))) == list(vars(dataclasses.replace(slow, operand="x")))
    with pytest.raises(TypeError):
        replace_row(fast, nope=1)
    with pytest.raises(TypeError):
        make_row({**values, "nope": 1})
    with pytest.raises(TypeError):
        make_row({k: v for k, v in values.items() if k != "kind"})


@pytest.mark.parametrize("opts", [{}, {"modules": False}, {"stack": True}], ids=["modules", "no-modules", "stack"])
def test_plain_fast_path_gives_the_general_rows(opts: dict[str, bool]) -> None:
    model, x = _model()
    with capture(**opts) as cap:
        y = model(x).sum()
        fast = cap.report(outputs=y)
        # A label on an unrelated tensor sends every record through the general path.
        cap.label(torch.empty(1), "unrelated")
        general = cap.report(outputs=y)
        assert cap._labels
        y.backward()
    assert fast.rows and fast.rows == general.rows
    assert fast.to_dict()["rows"] == general.to_dict()["rows"]
    if opts.get("modules", True):
        assert any(r.module for r in fast.rows) and all(r.operand for r in fast.rows)
    if opts.get("stack"):
        assert any(r.source for r in fast.rows)


def test_report_without_outputs_finds_the_same_rows_and_restores_gc() -> None:
    model, x = _model()

    class Sub(torch.Tensor):
        pass

    with capture() as cap:
        y = model(x).sum()
        # A subclass with a grad_fn is a root too: this graph's records (two leaves) reach no node
        # of it, so report() without outputs walks from every live tensor's graph.
        z = (x.as_subclass(Sub) * x).sum()
        with_outputs = cap.report(outputs=[y, z])
        assert gc.isenabled()
        without = cap.report()
        assert gc.isenabled()
        gc.disable()
        cap.report()
        assert not gc.isenabled()  # the caller's state is kept
        gc.enable()
        (y + z).backward()
    key = [(r.op, r.saved_as, r.shape, r.bytes) for r in with_outputs.rows]
    assert sorted(map(str, key)) == sorted(map(str, [(r.op, r.saved_as, r.shape, r.bytes) for r in without.rows]))


def test_report_without_outputs_walks_from_what_was_recorded_not_the_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the records' graphs and the root module's outputs reach every live record, report()
    without outputs never lists the heap (its cost follows the records), and finds what outputs
    find; after backward it has nothing to walk. Where a live record stays unnamed (a graph
    outside any module whose records reach none of its nodes), it walks every live tensor's graph."""
    model, x = _model()
    scans: list[int] = []
    scan = rec_mod._live_graph_tensors
    monkeypatch.setattr(rec_mod, "_live_graph_tensors", lambda: scans.append(1) or scan())
    with capture() as cap:
        y = model(x)
        with_outputs = cap.report(outputs=y)
        without = cap.report()
    assert scans == [] and without.complete
    assert [dataclasses.astuple(r) for r in without.rows] == [dataclasses.astuple(r) for r in with_outputs.rows]
    y.sum().backward()
    after = cap.report()
    assert scans == [] and after.rows == [] and len(after.freed) == len(with_outputs.rows)

    a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    with capture() as cap:
        z = (a * b).exp().sum()  # exp saves its result (an alias), mul two leaves: no record reaches a node
    first = cap.report()
    assert scans == [1]
    again = cap.report()  # named now; and the tensors the scan found are remembered (weakly)
    assert scans == [1]
    outputs = cap.report(outputs=z)
    for case in (first, again):
        assert [(r.op, r.saved_as) for r in case.rows] == [(r.op, r.saved_as) for r in outputs.rows]
        assert all(r.op for r in case.rows)


def _count_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    scans: list[int] = []
    scan = rec_mod._live_graph_tensors
    monkeypatch.setattr(rec_mod, "_live_graph_tensors", lambda: scans.append(1) or scan())
    return scans


class _Head(torch.nn.Module):
    """A module whose own op follows its child's: exp saves its result, and no record's graph reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).exp()


def test_report_without_outputs_starts_from_what_the_root_module_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The root call's outputs reach the root module's own ops: no heap scan, the rows outputs give."""
    scans = _count_scans(monkeypatch)
    m, x = _Head(), torch.randn(2, 4)
    with capture() as cap:
        y = m(x)
    without = cap.report()
    assert scans == []
    assert ("ExpBackward0", "_saved_result") in [(r.op, r.saved_as) for r in without.rows]
    assert [(r.op, r.saved_as, r.module) for r in without.rows] == [
        (r.op, r.saved_as, r.module) for r in cap.report(outputs=y).rows
    ]


def test_a_second_report_without_outputs_starts_from_what_the_heap_scan_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live tensors a heap scan found are where later reports start too: a save no hook saw (a
    pair pushed from C++), reached only from such a tensor, is found again with no second scan, and
    the case stays incomplete."""
    scans = _count_scans(monkeypatch)
    a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    with capture() as cap:
        z = (a * b).exp()  # exp saves its result, mul two leaves: no record reaches a node
        torch._C._autograd._push_saved_tensors_default_hooks(lambda t: t.clone(), lambda t: t)
        try:
            w = z.sin()  # what sin saves is hidden from memaudit: only w's graph reaches it
        finally:
            torch._C._autograd._pop_saved_tensors_default_hooks()
    first = cap.report()
    again = cap.report()
    assert scans == [1]
    for case in (first, again):
        assert [(r.op, r.via) for r in case.rows if r.via != "hook"] == [("SinBackward0", "unhooked")]
        assert not case.complete
    assert w.grad_fn is not None


class _Fn(torch.autograd.Function):
    """A Python node: saved_tensors (one of them None) and a ctx attribute."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        ctx.save_for_backward(a, None, b)
        ctx.extra = b * 2
        return a * b

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
        a, _, b = ctx.saved_tensors
        return g * b, g * a


def _mixed_graph(a: torch.Tensor) -> torch.Tensor:
    """Nodes of many kinds: list attributes, optional tensors, scalars, a foreign pair, checkpoint."""
    import torch.utils.checkpoint as ckpt

    model, x = _model()
    parts = [
        model(x).sum(),
        _Fn.apply(a, a.exp()).sum(),
        a[torch.tensor([0, 2])].sum(),
        a[:, None][torch.tensor([1])].sum(),
        torch.nn.functional.layer_norm(a, (3,)).sum(),
        ckpt.checkpoint(lambda t: (t.sin() * 2).cos(), a, use_reentrant=False).sum(),
    ]
    with torch.autograd.graph.save_on_cpu():
        parts.append((a * a.sin()).tanh().sum())
    return torch.stack(parts).sum()


def _reports(cap, y: torch.Tensor) -> list[str]:  # noqa: ANN001
    return [json.dumps(r.to_dict(), sort_keys=True) for r in (cap.report(outputs=y), cap.report())]


def test_raw_walk_names_rows_as_the_unpack_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved values memaudit packed are read raw (SavedTensor.data, no unpack); the walk that
    unpacks every attribute (PyTorch without the raw view) names the same rows."""
    from memaudit.capture import graph

    if not graph._RAW:
        pytest.skip("this PyTorch exposes no SavedTensor.data: the walk always unpacks")
    a = torch.randn(4, 3, requires_grad=True)
    with capture() as cap:
        y = _mixed_graph(a)
        raw = _reports(cap, y)
        for rec in cap.records:  # forget the names, so the second walk claims every record again
            rec.op = rec.slot = rec.node_seq = None
        monkeypatch.setattr(graph, "_RAW", False)
        monkeypatch.setattr(graph, "_KINDS", {})
        unpacked = _reports(cap, y)
        assert all(attrs is None or all(r is None for _, r in attrs) for _, attrs in graph._KINDS.values())
        y.backward()
    assert raw == unpacked
    assert '"via": "ctx"' in raw[0] and "saved_tensors[2]" in raw[0] and "_saved_indices" in raw[0]


def test_attributes_that_hold_no_tensor_are_learned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from memaudit.capture import graph

    assert (
        graph._no_tensor(3) and graph._no_tensor(0.5) and graph._no_tensor(torch.float32) and graph._no_tensor((2, 3))
    )
    assert not graph._no_tensor(None) and not graph._no_tensor(()) and not graph._no_tensor([torch.ones(1)])
    assert not graph._no_tensor(torch.ones(1)) and not graph._no_tensor((None, torch.ones(1)))
    monkeypatch.setattr(graph, "_KINDS", {})
    a = torch.randn(4, 3, requires_grad=True)
    with capture() as cap:
        y = _mixed_graph(a)
        first = _reports(cap, y)
        kinds = {tp.__name__: attrs for tp, (_, attrs) in graph._KINDS.items() if attrs is not None}
        assert "_saved_alpha" not in {attr for attr, _ in kinds["AddmmBackward0"]}  # an int: dropped
        assert "_saved_mat1" in {attr for attr, _ in kinds["AddmmBackward0"]}
        assert first == _reports(cap, y)  # the same rows once the scalars are skipped
        y.backward()


def test_rows_named_while_built_equal_rows_named_after_a_plugin() -> None:
    """With no plugin, plain rows get memaudit's operand while built; a plugin that names nothing
    sends them through name_rest: the same rows, the same late labels, fields in declaration order."""

    class Passive:
        def install(self) -> None: ...
        def uninstall(self) -> None: ...
        def expand(self, t: object) -> None:
            return None

        def annotate(self, rows: list[Row], cap: object) -> list[Row]:
            return rows

    order = [f.name for f in dataclasses.fields(Row)]
    for opts in ({}, {"modules": False}):
        out = {}
        for plugins in ([], [Passive()]):
            model, x = _model()
            torch.manual_seed(0)
            mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
            with capture(plugins=plugins, **opts) as cap:
                y = model(x).sum() + mlp(x[0]).sum()  # the MLP saves a view of x
                rep = cap.report(outputs=y)
                assert all(list(vars(r)) == order for r in rep.rows)
                cap.label(x, "input")  # after report(): names the rows of x in the report returned
                y.backward()
                freed = cap.report(include_freed=False)
            out[bool(plugins)] = (rep.to_dict(), freed.to_dict())
        assert out[False] == out[True]
        assert any(r["operand"] == "input" for r in out[False][0]["rows"])


def test_live_roots_filter_sees_subclasses_defined_late() -> None:
    class Late(torch.Tensor):
        pass

    t = torch.ones(2, requires_grad=True).as_subclass(Late) * 3
    assert t.grad_fn is not None
    assert any(found is t for found in rec_mod._live_graph_tensors())
    assert Late in rec_mod._tensor_types()


def _load(name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / "perf" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_aggregate_runs_medians_spread_and_over_floor() -> None:
    run = _load("run")
    per_run = [
        {
            "production": {"bf16": {"ratio": r, "floor": f}, "fp8-current": {"ratio": None, "floor": None}},
            "small": {"bf16": {"ratio": r + 0.1, "floor": 1.0}},
        }
        for r, f in ((1.02, 1.01), (1.04, 1.01), (1.03, 1.02))
    ]
    agg = run.aggregate_runs(per_run)
    assert agg["runs"] == 3
    assert agg["overhead_ratio_production"] == {"bf16": 1.03}
    over = agg["overhead_over_floor_production"]["bf16"]
    assert set(over) == {"median", "min", "max"}
    assert over["min"] == round(1.03 / 1.02, 4) and over["max"] == round(1.04 / 1.01, 4)  # per run, then spread
    assert "fp8-current" not in agg["overhead_over_floor_production"]
    assert agg["floor_ratio_spread_production"]["bf16"]["values"] == [1.01, 1.01, 1.02]


def test_readme_table_renders_old_and_new_json(tmp_path: Path) -> None:
    table = _load("readme_table")
    old = json.loads((ROOT / "reports" / "bench" / "h200.json").read_text())
    text = table.render(old)
    assert "over the floor" in text and "n/a" not in text.split("\n")[4]
    new = dict(old, runs=5, overhead_over_floor_production={"bf16": {"median": 1.004, "min": 1.001, "max": 1.009}})
    assert "1.004× (1.001–1.009)" in table.render(new)
    readme = tmp_path / "README.md"
    readme.write_text(f"a\n{table.START}\nold\n{table.END}\nb\n")
    assert table.main(["--json", str(ROOT / "reports" / "bench" / "h200.json"), "--readme", str(readme)]) == 0
    assert (
        table.main(["--json", str(ROOT / "reports" / "bench" / "h200.json"), "--readme", str(readme), "--check"]) == 0
    )
    assert readme.read_text().startswith("a\n") and readme.read_text().endswith("\nb\n")


def test_committed_readme_table_is_current() -> None:
    table = _load("readme_table")
    assert table.main(["--check"]) == 0


def _totals_by_definition(rows: list[Row], freed: list[Row]) -> dict[str, int]:
    """The totals as docs/guides/budgets define them, one rule at a time (the reference for compute_totals)."""
    device = {r.storage: r.storage_bytes for r in rows if r.resides == "device" and r.storage is not None}
    params = {r.storage for r in rows if r.resides == "device" and r.storage is not None and r.is_parameter}
    cached = {r.storage for r in rows if r.resides == "device" and r.storage is not None and r.cached} - params
    apart = params | cached
    outputs = {r.storage for r in rows if r.resides == "device" and r.storage is not None and r.aliases_output}
    hooked = {r.storage for r in rows if r.resides == "device" and r.storage is not None and r.via != "ctx"}
    host = {r.storage: r.storage_bytes for r in rows if r.resides == "host" and r.storage is not None}
    physical, param = sum(device.values()), sum(device[s] for s in params)
    cache = sum(device[s] for s in cached)
    return {
        "rows": len(rows),
        "logical_bytes": sum(r.bytes for r in rows),
        "physical_bytes": physical,
        "parameter_bytes": param,
        "saved_bytes": physical - param - cache,
        "cached_bytes": cache,
        "host_bytes": sum(host.values()) + sum(r.bytes for r in rows if r.resides == "host" and r.storage is None),
        "unknown_bytes": sum(r.bytes for r in rows if r.resides == "unknown"),
        "output_bytes": sum(device[s] for s in outputs - apart),
        "ctx_bytes": sum(b for s, b in device.items() if s not in hooked and s not in apart),
        "freed_rows": len(freed),
        "freed_bytes": sum(r.bytes for r in freed),
        "unread_bytes": None
        if all(r.read is None for r in rows)
        else sum(
            b for s, b in device.items() if s not in apart and all(r.read == "unread" for r in rows if r.storage == s)
        ),
    }


def test_compute_totals_matches_the_definition() -> None:
    import random

    from memaudit.report import RESIDES, compute_totals

    rng = random.Random(0)
    for k in range(400):
        every_device = k % 2 == 1  # the path that reads one field at a time
        rows = [
            make_row(
                {
                    "index": i,
                    "kind": "tensor",
                    "format": "fp32",
                    "shape": [1],
                    "dtype": "float32",
                    "bytes": rng.randrange(1, 1000),
                    "storage": rng.choice(["s0", "s1", "s2", "s3"] if every_device else [None, "s0", "s1", "s2", "s3"]),
                    "storage_bytes": rng.randrange(1000, 2000),
                    "resides": "device" if every_device else rng.choice(RESIDES),
                    "is_parameter": rng.random() < 0.3,
                    "aliases_output": rng.random() < 0.3,
                    "via": rng.choice(["hook", "ctx", "unhooked"]),
                    "read": rng.choice(["read", "unread", "unread", "unknown"]) if k % 4 >= 2 else None,
                    "cached": rng.choice([None, None, None, "fp8 weight cache of fc1"]),
                }
            )
            for i in range(rng.randrange(0, 12))
        ]
        freed = rows[: rng.randrange(0, 3)]
        assert dataclasses.asdict(compute_totals(rows, freed)) == _totals_by_definition(rows, freed)


def test_a_plain_view_of_a_parameter_storage_is_parameter_memory() -> None:
    """finish() visits only rows whose storage may change: a non-parameter tensor in a parameter's
    storage (saved before the parameter itself) and a saved output are still found."""
    w = torch.nn.Parameter(torch.randn(4, 4))
    x = torch.randn(3, 4, requires_grad=True)
    with capture() as cap:
        v = w.detach()  # the parameter's storage, not a parameter
        y = (x * v[0]).sum() + (x @ w).sum()
        z = x.exp()  # saves its result: an output
        rep = cap.report(outputs=[y, z])
        (y + z.sum()).backward()
    first = rep.rows[0]
    assert (first.op, first.is_parameter, first.storage) == ("MulBackward0", True, rep.rows[1].storage)
    assert [r.aliases_output for r in rep.rows if r.op == "ExpBackward0"] == [True]
    assert not any(r.aliases_output for r in rep.rows if r.op != "ExpBackward0")


@pytest.mark.parametrize("plugins", [[], None], ids=["named-while-built", "named-after"])
def test_late_label_names_live_and_freed_rows(plugins: list | None) -> None:
    """A label given after report() renames the rows memaudit named, live or already freed, in
    both naming paths (while built, and by name_rest after a plugin)."""

    class Passive:
        def install(self) -> None: ...
        def uninstall(self) -> None: ...
        def expand(self, t: object) -> None:
            return None

        def annotate(self, rows: list[Row], cap: object) -> list[Row]:
            return rows

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    x = torch.randn(4, 8, requires_grad=True)
    with capture(plugins=[] if plugins is not None else [Passive()]) as cap:
        y = mlp(x).sum()
        live = cap.report(outputs=y)
        y.backward()
        freed = cap.report()
        assert not freed.rows and freed.freed
        cap.label(x, "input", group=1)
        cap.label(mlp[0].weight, "w0", group=2)
    assert [(r.operand, r.group) for r in live.rows[:2]] == [("input", 1), ("w0", None)]  # w0 saved as weight.t()
    assert [(r.operand, r.group) for r in freed.freed[:2]] == [("input", 1), ("w0", None)]
    assert live.rows[2].operand == "1:ReluBackward0.result"

"""The fast paths of report() (issue 15, goal 4) give exactly the rows the general paths give."""

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

ROOT = Path(__file__).resolve().parent.parent


def _model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False), torch.randn(2, 4, 8, requires_grad=True)


def test_make_row_and_row_dict_match_the_dataclass() -> None:
    values = {"index": 3, "kind": "tensor", "format": "fp32", "shape": [2, 3], "dtype": "float32", "bytes": 24,
              "op": "MmBackward0", "note": "n", "storage": "s1"}
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
        z = (x.as_subclass(Sub) * 2).sum()  # a subclass with a grad_fn is a root too
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


def test_live_roots_filter_sees_subclasses_defined_late() -> None:
    class Late(torch.Tensor):
        pass

    t = (torch.ones(2, requires_grad=True).as_subclass(Late) * 3)
    assert t.grad_fn is not None
    assert any(fn is t.grad_fn or fn == t.grad_fn for fn in rec_mod._live_graph_roots())
    assert Late in rec_mod._tensor_types()


def _load(name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_aggregate_runs_medians_spread_and_over_floor() -> None:
    run = _load("run")
    per_run = [{"production": {"bf16": {"ratio": r, "floor": f}, "fp8-current": {"ratio": None, "floor": None}},
                "small": {"bf16": {"ratio": r + 0.1, "floor": 1.0}}} for r, f in ((1.02, 1.01), (1.04, 1.01), (1.03, 1.02))]
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
    assert table.main(["--json", str(ROOT / "reports" / "bench" / "h200.json"), "--readme", str(readme), "--check"]) == 0
    assert readme.read_text().startswith("a\n") and readme.read_text().endswith("\nb\n")


def test_committed_readme_table_is_current() -> None:
    table = _load("readme_table")
    assert table.main(["--check"]) == 0

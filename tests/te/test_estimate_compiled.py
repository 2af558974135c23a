"""The estimator's compiled fast path (memaudit.te.estimate.compiled) gives the direct path's cases.

The direct path (``estimate_config_direct``: walk the model, number the buffers, total the rows)
is the reference; every compiled case is compared with it field by field. bench/verify/estimate_golden.py
fingerprints a larger sweep for comparisons between versions.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random
from typing import Any

import pytest

import memaudit.te.estimate.compiled as compiled_mod
from memaudit.errors import UsageError
from memaudit.spec import CaseSpec, default_splits
from memaudit.targets.registry import get_target, owner_of
from memaudit.te.estimate import PATHS, VARIANTS, estimate, estimate_config, make_spec, resolve
from memaudit.te.estimate.config import Config
from memaudit.te.estimate.rows import estimate_config_direct
from memaudit.te.machine.recipes import ALIGNMENT, RECIPES


@pytest.fixture
def always_compiled(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Compile every structure at its first use (and forget what other tests compiled)."""
    monkeypatch.setattr(compiled_mod, "COMPILE_AFTER", 1)
    compiled_mod.clear()
    yield
    compiled_mod.clear()


def sample(n: int, seed: int) -> list[Config]:
    """Valid configurations over every recipe, path, arch, dtype and option, odd shapes, explicit
    splits with empty groups (the same kind of sample as bench/verify/estimate_golden.py)."""
    rng = random.Random(seed)
    dims = (16, 32, 48, 64, 96, 128, 160, 256, 1024, 1536, 3072)
    out: list[Config] = []
    while len(out) < n:
        recipe = rng.choice(RECIPES)
        groups = rng.choice((1, 2, 3, 4, 8, 16))
        align = ALIGNMENT[recipe]
        tokens = align * rng.choice((1, 2, 3, 7, 8, 33, 64, 129, 1000))
        kw: dict[str, Any] = {
            "path": rng.choice((None, *PATHS)),
            "arch": rng.choice((None, "sm90", "sm100")),
            "dtype": rng.choice(("bf16", "fp32")),
            "dense_single_group": rng.random() < 0.7,
            "probs_dtype": rng.choice(("float32", "bfloat16")),
            "split_sizes_dtype": rng.choice(("int64", "int32")),
        }
        if groups > 1 and rng.random() < 0.5:
            units = tokens // align
            cuts = sorted(rng.randint(0, units) for _ in range(groups - 1))
            kw["splits"] = [align * (b - a) for a, b in zip([0, *cuts], [*cuts, units], strict=True)]
        try:
            out.append(resolve(recipe, tokens, rng.choice(dims), rng.choice(dims), groups, **kw))
        except UsageError:
            continue
    return out


def same_case(a: Any, b: Any) -> None:
    assert a.to_dict() == b.to_dict()
    assert a.rows == b.rows and a.totals == b.totals
    assert [vars(r) for r in a.rows] == [vars(r) for r in b.rows]
    # every field in __dict__, in declaration order (row_dict and replace_row copy it)
    assert [list(vars(r)) for r in a.rows] == [[f.name for f in dataclasses.fields(r)] for r in a.rows]
    names = [f.name for f in dataclasses.fields(a.rows[0])] if a.rows else []
    assert [[getattr(r, n) for n in names] for r in a.rows] == [[getattr(r, n) for n in names] for r in b.rows]
    assert [[type(getattr(r, n)) for n in names] for r in a.rows] == [
        [type(getattr(r, n)) for n in names] for r in b.rows
    ]
    assert [dataclasses.asdict(r) for r in a.rows] == [dataclasses.asdict(r) for r in b.rows]
    assert [dataclasses.replace(r) for r in a.rows] == b.rows and [repr(r) for r in a.rows] == [repr(r) for r in b.rows]
    for r in a.rows[:3]:  # copies and pickles of a compiled row are the row
        assert copy.deepcopy(r) == r and pickle.loads(pickle.dumps(r)) == r
    assert a.id == b.id and a.spec == b.spec and a.spec.options == b.spec.options
    assert dict(a.path) == dict(b.path)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_equals_direct_on_a_random_sample(always_compiled: Any, seed: int) -> None:
    for c in sample(60, seed):
        for variant in VARIANTS:
            assert compiled_mod.compiled(c, variant) is not None, (c, variant)
            same_case(estimate_config(c, variant), estimate_config_direct(c, variant))


def test_one_compiled_structure_serves_every_shape(always_compiled: Any) -> None:
    """Compiled once (at the first shape), then right for other tokens, hidden, FFN and splits."""
    first = resolve("nvfp4", 4096, 1024, 512, 4, path="unfused-grouped")
    fn = compiled_mod.compiled(first, "te-2.20")
    a = ALIGNMENT["nvfp4"]
    for tokens, hidden, ffn, splits in (
        (8192, 3072, 1536, None),
        (a * 9, 48, 16, [0, a * 9, 0, 0]),
        (a * 648, 3072, 1536, [a * 645, a, a, a]),
    ):
        c = resolve("nvfp4", tokens, hidden, ffn, 4, path="unfused-grouped", splits=splits)
        assert compiled_mod.compiled(c, "te-2.20") is fn
        same_case(estimate_config(c), estimate_config_direct(c))


def test_duplicate_views_are_decided_from_values(always_compiled: Any) -> None:
    """bf16 split views of one input: empty groups at one offset are duplicates only when their
    shapes agree, which depends on the splits, not the structure."""
    dups = []
    for splits in ([0, 0, 256, 0], [256, 0, 0, 0], [64, 64, 64, 64], [0, 128, 0, 128]):
        c = resolve("bf16", 256, 64, 64, 4, splits=splits)
        a, b = estimate_config(c), estimate_config_direct(c)
        same_case(a, b)
        dups.append([r.index for r in a.rows if r.duplicate_of is not None and r.operand == "fc1.input"])
    assert dups[0] and dups[1] and not dups[2]  # empty groups 0 and 1 at offset 0; 1-3 at the end


def test_structures_are_compiled_after_a_few_uses() -> None:
    compiled_mod.clear()
    c = resolve("mxfp8", 8192, 4096, 2048, 8)
    try:
        got = [compiled_mod.compiled(c, "te-2.20") for _ in range(compiled_mod.COMPILE_AFTER)]
        assert got[:-1] == [None] * (compiled_mod.COMPILE_AFTER - 1) and callable(got[-1])
        assert compiled_mod.compiled(resolve("mxfp8", 4096, 1024, 512, 8), "te-2.20") is got[-1]
        assert compiled_mod.compiled(c, "pr3545") is None  # another variant is another structure
    finally:
        compiled_mod.clear()


def test_a_model_that_reads_a_value_keeps_the_direct_path(
    always_compiled: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tracing stops where the model branches on a dimension; the case is still right."""
    from memaudit.te.estimate.model import Model

    original = Model.activation

    def branching(self: Model, act_in_storage: int | None = None) -> None:
        if self.c.tokens > 1000:  # a comparison: needs the value
            pass
        original(self, act_in_storage)

    monkeypatch.setattr(Model, "activation", branching)
    c = resolve("fp8-current", 2048, 256, 128, 2)
    assert compiled_mod.compiled(c, "te-2.20") is None
    same_case(estimate_config(c), estimate_config_direct(c))


def test_symbolic_dimensions_refuse_their_value() -> None:
    trace = compiled_mod._Trace()
    t = compiled_mod.Sym(trace, "T")
    x = (t * 2 + 1) // 16 - 3
    assert isinstance(x, compiled_mod.Sym) and len(trace.lines) == 4
    assert (t * 1) is t and (t + 0) is t and (0 + t) is t
    for use in (bool, int, hash, lambda v: v == 3, lambda v: v < 3, lambda v: range(v), lambda v: v / 2):
        with pytest.raises(compiled_mod.NotCompiled):
            use(x)


def test_large_structures_stay_direct(always_compiled: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_mod, "MAX_ROWS", 10)
    c = resolve("fp8-current", 2048, 256, 128, 8)
    assert compiled_mod.compiled(c, "te-2.20") is None
    same_case(estimate_config(c), estimate_config_direct(c))


def test_estimate_and_make_spec_take_the_fast_constructors_faithfully() -> None:
    spec = make_spec("nvfp4", 8192, 3072, 1536, 4, None, probs_dtype="bfloat16")
    made = CaseSpec.make(
        get_target("te-grouped-mlp"),
        "nvfp4",
        4,
        tokens=8192,
        hidden=3072,
        ffn=1536,
        options={"probs_dtype": "bfloat16"},
    )
    # the fast constructors carry no target object (the estimator is below the TE target); the
    # registry finds it by name, and everything else is what CaseSpec.make gives
    assert (
        spec == made and spec.options == made.options and {**vars(spec), "owner": None} == {**vars(made), "owner": None}
    )
    assert spec.owner is None and type(owner_of(spec)) is type(made.owner)
    c = resolve("nvfp4", 8192, 3072, 1536, 4)
    normal = Config(**{f.name: getattr(c, f.name) for f in dataclasses.fields(Config)})
    assert c == normal and hash(c) == hash(normal) and vars(c) == vars(normal) and repr(c) == repr(normal)
    case = estimate(spec)
    expect = CaseSpec.make(
        get_target("te-grouped-mlp"),
        "nvfp4",
        4,
        tokens=8192,
        hidden=3072,
        ffn=1536,
        dtype="bf16",
        device="cuda:0",
        options=case.spec.options,
        splits=tuple(c.splits),
    )
    assert {**vars(case.spec), "owner": None} == {**vars(expect), "owner": None}


def _default_splits_reference(tokens: int, groups: int, align: int) -> list[int]:
    """default_splits as first written (largest remainder by an explicit (remainder, index) key)."""
    units = tokens // align
    if groups == 1:
        return [tokens]
    zero = 1 if groups >= 3 else None
    weights = [0 if i == zero else i + 1 for i in range(groups)]
    live = sum(1 for w in weights if w)
    rest = units - live
    total_w = sum(weights)
    shares = [rest * w // total_w for w in weights]
    remainders = sorted(range(groups), key=lambda i: (-(rest * weights[i] % total_w), i))
    for i in remainders[: rest - sum(shares)]:
        shares[i] += 1
    return [(s + (1 if w else 0)) * align for s, w in zip(shares, weights, strict=True)]


def test_default_splits_unchanged() -> None:
    for align in (1, 16, 32, 128):
        for groups in (*range(1, 40), 64, 256):
            for tokens in (*range(align * 8, align * 400, align * 13), 82944 - 82944 % align):
                if tokens // align < groups - (groups >= 3):
                    continue
                assert default_splits(tokens, groups, align) == _default_splits_reference(tokens, groups, align)


def test_rows_the_structure_fixes_are_shared_and_the_rest_are_fresh(always_compiled: Any) -> None:
    a = estimate_config(resolve("fp8-current", 4096, 1024, 512, 4))
    b = estimate_config(resolve("fp8-current", 8192, 2048, 1024, 4))
    shared = [i for i, (x, y) in enumerate(zip(a.rows, b.rows, strict=True)) if x is y]
    assert shared and all(a.rows[i].shape in ([1], [4]) for i in shared)  # scale_inv (1,), split sizes (G,)
    assert all(a.rows[i].shape is not b.rows[i].shape for i in range(len(a.rows)) if i not in shared)
    same_case(b, estimate_config_direct(resolve("fp8-current", 8192, 2048, 1024, 4)))


@pytest.mark.parametrize("seed", range(2))
def test_rows_kept_for_h_and_f_serve_other_tokens_and_splits(always_compiled: Any, seed: int) -> None:
    """The rows compiled as depending on H and F alone are made at the first call and reused: a
    later call with other tokens and splits (same structure, H and F) must still give the direct
    path's case. A row put on the wrong side of that line would carry the first call's numbers."""
    for c in sample(40, 100 + seed):
        fields = {f.name: getattr(c, f.name) for f in dataclasses.fields(Config)}
        other = Config(**{**fields, "tokens": 2 * c.tokens, "splits": tuple(2 * m for m in reversed(c.splits))})
        for variant in VARIANTS:
            first = estimate_config(c, variant)
            same_case(first, estimate_config_direct(c, variant))
            again = estimate_config(other, variant)
            same_case(again, estimate_config_direct(other, variant))
            assert again.rows is not first.rows and again.path["padding"]["rows"] is not first.path["padding"]["rows"]


def test_a_token_sweep_makes_the_weights_rows_once(always_compiled: Any) -> None:
    """Same H and F: the weights' rows are the same objects at every token count; another H
    makes new ones; the input and activation rows are made per call."""
    cases = []
    for tokens, hidden in ((4096, 1024), (8192, 1024), (65536, 1024), (8192, 2048)):
        c = resolve("fp8-current", tokens, hidden, 512, 8)
        cases.append(estimate_config(c))
        same_case(cases[-1], estimate_config_direct(c))
    a, b, c_, d = cases
    weights = [i for i, r in enumerate(a.rows) if ".weight[" in (r.operand or "") and r.kind == "data"]
    per_call = [
        i
        for i, r in enumerate(a.rows)
        if r.kind in ("data", "tensor") and ((r.operand or "").endswith(".input") or r.operand.startswith("activation"))
    ]
    assert len(weights) == 16 and per_call
    assert all(a.rows[i] is b.rows[i] is c_.rows[i] for i in weights)
    assert not any(a.rows[i] is d.rows[i] for i in weights)
    assert not any(a.rows[i] is b.rows[i] for i in per_call)


def test_rows_kept_for_h_and_f_are_bounded(always_compiled: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiled_mod, "MAX_WEIGHTS_ROWS", 80)
    for hidden in (*range(64, 1024, 64), 64):  # every entry of 33 rows: two fit; 64 comes back evicted
        c = resolve("mxfp8", 4096, hidden, 256, 8)
        same_case(estimate_config(c), estimate_config_direct(c))
        assert 0 < compiled_mod._held[0] <= 80
    monkeypatch.setattr(compiled_mod, "MAX_WEIGHTS_ROWS", 10)  # more than the bound: made, not kept
    c = resolve("mxfp8", 8192, 128, 256, 8)
    same_case(estimate_config(c), estimate_config_direct(c))
    assert compiled_mod._held[0] <= 80


def test_views_compared_by_value_are_made_together(always_compiled: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two views of one storage, one decided by H alone, one by T too: whether the second is a
    duplicate of the first is decided from values, so both are made per call, in one place."""
    from memaudit.te.estimate.model import Model

    original = Model.build

    def build(self: Model) -> Any:
        acc = original(self)
        c = self.c
        storage = acc.storage(c.hidden * 16)
        acc.plain("extra.view", (c.hidden,), "int64", storage=storage)
        acc.plain("extra.view", (c.hidden,), "int64", storage=storage, soff=(c.tokens - c.tokens) * 8)
        return acc

    monkeypatch.setattr(Model, "build", build)
    for tokens in (256, 512):
        c = resolve("bf16", tokens, 64, 64, 2)
        case = estimate_config(c)
        same_case(case, estimate_config_direct(c))
        assert case.rows[-1].duplicate_of == case.rows[-2].index


def test_default_splits_are_kept_per_tokens_groups_and_alignment() -> None:
    compiled_mod.clear()
    a = resolve("nvfp4", 8192, 3072, 1536, 8)
    assert a.splits == tuple(default_splits(8192, 8, ALIGNMENT["nvfp4"]))
    assert resolve("nvfp4", 8192, 1024, 512, 8, path="unfused-split").splits is a.splits  # kept
    assert resolve("bf16", 8192, 3072, 1536, 8).splits == tuple(default_splits(8192, 8, ALIGNMENT["bf16"])) != a.splits
    for _ in range(2):  # a refusal is not kept
        with pytest.raises(UsageError):
            resolve("nvfp4", 8192 + 16, 3072, 1536, 8, path="unfused-split")
    compiled_mod.clear()
    assert resolve("nvfp4", 8192, 3072, 1536, 8).splits is not a.splits  # clear() forgets them

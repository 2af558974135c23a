"""``memaudit.capture.aten_reads``: each entry's read set against ground truth that does not use
memaudit, and the observer's verdicts with the table wired in.

Ground truth: the ATen backward op runs on the same arguments twice (bit for bit the same, or the
case is not deterministic), then once per argument and fill with that argument replaced by a copy
whose bytes are all 0xFF (NaN in every float format) or random. An argument the table leaves out
must leave every output bit for bit the same under both fills; an argument the table calls read
must change an output under one of them, unless the case names it as not observable (read, but
only for an output whose value does not depend on it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from torch import nn

from memaudit.capture import aten_reads, capture, reads
from memaudit.capture.aten_reads import ATEN_READS

FILLS = ("ff", "random")


@dataclass
class Case:
    id: str
    op: str
    build: Callable[[], list[Any]]
    unread: set[str]
    """Argument names the table must leave out (exactly these)."""
    unobservable: set[str] = field(default_factory=set)
    """Read arguments whose poisoning no output can show."""


def _names(op: str) -> list[str]:
    return [a.name for a in getattr(torch.ops.aten, op).default._schema.arguments]


def _poisoned(t: torch.Tensor, fill: str, seed: int) -> torch.Tensor:
    """A copy of ``t`` (same sizes and strides) whose storage bytes are all 0xFF or random."""
    p = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(p.untyped_storage())
    if fill == "ff":
        raw.fill_(0xFF)
    else:
        g = torch.Generator(device="cpu").manual_seed(seed)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=g))
    return p


def _outputs(op: str, args: list[Any]) -> list[torch.Tensor]:
    out = getattr(torch.ops.aten, op).default(*args)
    return [t for t in (out if isinstance(out, tuple | list) else (out,)) if isinstance(t, torch.Tensor)]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape
        and x.dtype == y.dtype
        and torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))
        for x, y in zip(a, b, strict=True)
    )


def check(case: Case) -> None:
    names = _names(case.op)
    args = case.build()
    read_ids = {id(t) for t in ATEN_READS[case.op](*args) if t is not None}
    tensors = {names[i]: a for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    assert {n for n, t in tensors.items() if id(t) not in read_ids} == case.unread
    ref = _outputs(case.op, args)
    assert _same(ref, _outputs(case.op, args)), "the op is not deterministic on these arguments"
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            continue
        changed = []
        for k, fill in enumerate(FILLS):
            poisoned = list(args)
            poisoned[i] = _poisoned(a, fill, seed=1000 * i + k)
            changed.append(not _same(ref, _outputs(case.op, poisoned)))
        if names[i] in case.unread:
            assert not any(changed), f"{case.op}: {names[i]} is called unread but poisoning it changes the result"
        elif names[i] not in case.unobservable:
            assert any(changed), f"{case.op}: {names[i]} is called read but poisoning it changes nothing"


# ---- native_layer_norm_backward -------------------------------------------------------------------
def _layer_norm(dtype: torch.dtype, device: str = "cpu", affine: bool = True) -> Callable[[], list[Any]]:
    def build() -> list[Any]:
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(4, 6, 10, generator=g).to(device, dtype)
        w = (torch.rand(10, generator=g) + 0.5).to(device, dtype) if affine else None
        b = torch.randn(10, generator=g).to(device, dtype) if affine else None
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [10], w, b, 1e-5)
        dy = torch.randn(4, 6, 10, generator=g).to(device, dtype)
        return [dy, x, [10], mean, rstd, w, b, [True, affine, affine]]

    return build


LAYER_NORM = [
    Case("f32", "native_layer_norm_backward", _layer_norm(torch.float32), {"bias"}),
    Case("f64", "native_layer_norm_backward", _layer_norm(torch.float64), {"bias"}),
    Case("bf16", "native_layer_norm_backward", _layer_norm(torch.bfloat16), {"bias"}),
    Case("no-affine", "native_layer_norm_backward", _layer_norm(torch.float32, affine=False), set()),
]


# ---- native_batch_norm_backward (CPU) --------------------------------------------------------------
def _batch_norm(layout: str, train: bool) -> Callable[[], list[Any]]:
    def build() -> list[Any]:
        g = torch.Generator(device="cpu").manual_seed(1)
        shape = (4, 3) if layout == "2d" else (4, 3, 5, 5)
        x = torch.randn(*shape, generator=g) * 2 + 1
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        elif layout == "strided":  # neither contiguous nor channels-last: the template's own loop
            x = x.transpose(2, 3)
        w, b = torch.rand(3, generator=g) + 0.5, torch.randn(3, generator=g)
        rm, rv = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
        # The saved statistics of a training forward (passed in evaluation too, where they must go unread).
        _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
        dy = (
            torch.randn(x.shape, generator=g).to(memory_format=torch.channels_last)
            if layout == "channels_last"
            else torch.randn(x.shape, generator=g)
        )
        return [dy, x, w, rm, rv, save_mean, save_invstd, train, 1e-5, [True, True, True]]

    return build


BATCH_NORM = [
    Case(
        f"{layout}-{'train' if train else 'eval'}",
        "native_batch_norm_backward",
        _batch_norm(layout, train),
        {"running_mean", "running_var"} if train else {"save_mean", "save_invstd"},
    )
    for layout in ("contiguous", "channels_last", "strided", "2d")
    for train in (True, False)
]


# ---- convolution_backward (oneDNN backend) --------------------------------------------------------
def _conv(kind: str, mask: tuple[bool, bool, bool]) -> Callable[[], list[Any]]:
    def build() -> list[Any]:
        g = torch.Generator(device="cpu").manual_seed(2)
        groups = 2 if kind == "groups" else 1
        spatial = {"1d": (9,), "3d": (5, 6, 7)}.get(kind, (8, 8))
        x = torch.randn(2, 4, *spatial, generator=g)
        w = torch.randn(6, 4 // groups, *([3] * len(spatial)), generator=g)
        n = len(spatial)
        y = torch.ops.aten.convolution(x, w, None, [1] * n, [1] * n, [1] * n, False, [0] * n, groups)
        dy = torch.randn(y.shape, generator=g)
        return [dy, x, w, [6], [1] * n, [1] * n, [1] * n, False, [0] * n, groups, list(mask)]

    return build


def _conv_case(kind: str, mask: tuple[bool, bool, bool]) -> Case:
    unread = set() if mask[0] else {"weight"}
    if not (mask[1] or mask[2]):
        unread.add("input")
    # grad_bias is a sum of grad_output: the input is read (for grad_weight, computed with it) but
    # no output shows it when only the bias's gradient is asked for.
    unobservable = {"input"} if mask == (False, False, True) else set()
    flags = "".join("T" if m else "F" for m in mask)
    return Case(f"{kind}-{flags}", "convolution_backward", _conv(kind, mask), unread, unobservable)


CONV = [
    _conv_case(kind, mask)
    for kind in ("2d", "1d", "3d", "groups")
    for mask in (
        (True, True, True),
        (False, True, True),
        (True, False, False),
        (True, False, True),
        (False, True, False),
        (False, False, True),
    )
]


@pytest.mark.parametrize("case", LAYER_NORM + BATCH_NORM, ids=lambda c: f"{c.op}-{c.id}")
def test_read_set_against_poisoning(case: Case) -> None:
    check(case)


@pytest.mark.parametrize("case", CONV, ids=lambda c: f"{c.op}-{c.id}")
def test_convolution_read_set_against_poisoning(case: Case) -> None:
    args = case.build()
    backend = torch._C._select_conv_backend(args[1], args[2], None, *args[4:10], args[3])
    if backend != getattr(torch._C, "_ConvBackend").Mkldnn:  # noqa: B009
        pytest.skip(f"this build picks {backend} for the case, not oneDNN")
    check(case)


def test_other_conv_backend_reads_everything() -> None:
    """A backend whose kernels the table does not cover (here the slow CPU path of a float64 conv,
    which oneDNN does not take) leaves every tensor argument read."""
    args = _conv("2d", (False, True, True))()
    args = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    backend = torch._C._select_conv_backend(args[1], args[2], None, *args[4:10], args[3])
    assert backend != getattr(torch._C, "_ConvBackend").Mkldnn  # noqa: B009
    assert {id(t) for t in aten_reads.convolution_backward(*args)} == {id(a) for a in args[:3]}


def test_other_devices_read_everything() -> None:
    """Batch norm's entry covers the CPU and CUDA kernels only: a meta tensor reads everything."""
    args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in _batch_norm("contiguous", True)()]
    got = {id(t) for t in aten_reads.native_batch_norm_backward(*args)}
    assert got == {id(a) for a in args if isinstance(a, torch.Tensor)}


def test_keyword_arguments_bind_by_schema() -> None:
    args = _layer_norm(torch.float32)()
    names = _names("native_layer_norm_backward")
    kw = dict(zip(names[4:], args[4:], strict=True))
    assert [id(t) for t in aten_reads.native_layer_norm_backward(*args[:4], **kw)] == [
        id(t) for t in aten_reads.native_layer_norm_backward(*args)
    ]


def test_cudnn_batch_norm_entry_leaves_out_running_stats() -> None:
    """The entry alone (no kernel runs: the op exists on CUDA only; the gpu test below poisons)."""
    names = _names("cudnn_batch_norm_backward")
    args: list[Any] = [torch.zeros(1) if n != "epsilon" else 1e-5 for n in names]
    got = {id(t) for t in aten_reads.cudnn_batch_norm_backward(*args)}
    assert {n for n, a in zip(names, args, strict=True) if isinstance(a, torch.Tensor) and id(a) not in got} == {
        "running_mean",
        "running_var",
    }


@pytest.mark.parametrize("op", ["embedding_dense_backward", "native_dropout_backward"])
def test_ops_left_out_read_every_argument(op: str) -> None:
    """The two ops the table leaves out as reading all they receive: changing either tensor
    argument's contents changes the result (a mask or an index is changed, not poisoned: a bool
    or an index out of range is no value)."""
    g = torch.Generator(device="cpu").manual_seed(3)
    if op == "embedding_dense_backward":
        dy, idx = torch.randn(5, 4, generator=g), torch.tensor([0, 2, 2, 5, 7])
        args: list[Any] = [dy, idx, 8, -1, False]
        changed = [[_poisoned(dy, "random", 0), idx, 8, -1, False], [dy, idx.flip(0), 8, -1, False]]
    else:
        dy, mask = torch.randn(6, 5, generator=g), torch.rand(6, 5, generator=g) > 0.5
        args = [dy, mask, 2.0]
        changed = [[_poisoned(dy, "random", 0), mask, 2.0], [dy, ~mask, 2.0]]
    ref = _outputs(op, args)
    assert op not in ATEN_READS
    for other in changed:
        assert not _same(ref, _outputs(op, other))


# ---- the observer with the table wired in ---------------------------------------------------------
def _observe(model: nn.Module, x: torch.Tensor) -> dict[str, str]:
    """operand -> verdict of one captured forward and observed backward."""
    with capture() as cap:
        y = model(x)
    rep = cap.report(outputs=y)
    obs = reads.Observer(cap.row_storages())
    with reads.observing(obs):
        y.float().sum().backward()
    return {r.operand: obs.verdict(r.storage)[0] for r in rep.rows}


def _model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 4, 3),
        nn.Flatten(),
        nn.LayerNorm(4 * 6 * 6),
    ).train()
    return model, torch.randn(2, 3, 8, 8)  # the input does not require grad


def test_observer_unread_by_table() -> None:
    model, x = _model()
    got = _observe(model, x)
    assert got["5:NativeLayerNormBackward0.bias"] == reads.UNREAD
    assert got["1:NativeBatchNormBackward0.running_mean"] == reads.UNREAD
    assert got["1:NativeBatchNormBackward0.running_var"] == reads.UNREAD
    if torch.backends.mkldnn.is_available():
        assert got["0:ConvolutionBackward0.weight"] == reads.UNREAD
    for operand in (
        "0:ConvolutionBackward0.input",
        "1:NativeBatchNormBackward0.input",
        "1:NativeBatchNormBackward0.weight",
        "1:NativeBatchNormBackward0.result1",
        "1:NativeBatchNormBackward0.result2",
        "3:ConvolutionBackward0.weight",
        "5:NativeLayerNormBackward0.weight",
        "5:NativeLayerNormBackward0.input",
    ):
        assert got[operand] == reads.READ, operand


def test_observer_batch_norm_eval_reads_running_stats() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)).eval()
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    got = _observe(model, x)
    assert got["1:NativeBatchNormBackward0.running_mean"] == reads.READ
    assert got["1:NativeBatchNormBackward0.running_var"] == reads.READ
    assert got["0:ConvolutionBackward0.weight"] == reads.READ  # the input's gradient needs it


def test_failing_entry_counts_every_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> list[torch.Tensor]:
        raise RuntimeError("no answer")

    monkeypatch.setitem(ATEN_READS, "native_layer_norm_backward", broken)
    model, x = _model()
    got = _observe(model, x)
    assert got["5:NativeLayerNormBackward0.bias"] == reads.READ
    assert got["1:NativeBatchNormBackward0.running_mean"] == reads.UNREAD  # other entries still apply


# ---- CUDA --------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_layer_norm_cuda_against_poisoning(dtype: torch.dtype) -> None:
    check(Case("cuda", "native_layer_norm_backward", _layer_norm(dtype, device="cuda"), {"bias"}))


def _on_cuda(build: Callable[[], list[Any]], dtype: torch.dtype | None = None) -> Callable[[], list[Any]]:
    def moved() -> list[Any]:
        out = []
        for a in build():
            if isinstance(a, torch.Tensor):
                fmt = (
                    torch.channels_last
                    if a.dim() == 4 and a.is_contiguous(memory_format=torch.channels_last) and not a.is_contiguous()
                    else torch.preserve_format
                )
                a = a.to("cuda", memory_format=fmt)
                if dtype is not None and a.dim() > 1:
                    a = a.to(dtype)  # activations in dtype, the statistics and affine stay float32
            out.append(a)
        return out

    return moved


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "2d"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_batch_norm_cuda_train_against_poisoning(layout: str, dtype: torch.dtype) -> None:
    check(
        Case(
            f"cuda-{layout}",
            "native_batch_norm_backward",
            _on_cuda(_batch_norm(layout, True), dtype),
            {"running_mean", "running_var"},
        )
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_batch_norm_cuda_eval_reads_everything() -> None:
    args = _on_cuda(_batch_norm("contiguous", False))()
    got = {id(t) for t in aten_reads.native_batch_norm_backward(*args)}
    assert got == {id(a) for a in args if isinstance(a, torch.Tensor)}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not torch.backends.cudnn.is_available(), reason="needs cuDNN")
def test_cudnn_batch_norm_against_poisoning() -> None:
    def build() -> list[Any]:
        g = torch.Generator(device="cpu").manual_seed(4)
        x = torch.randn(4, 3, 5, 5, generator=g).cuda()
        w, b = (torch.rand(3, generator=g) + 0.5).cuda(), torch.randn(3, generator=g).cuda()
        rm, rv = torch.randn(3, generator=g).cuda(), (torch.rand(3, generator=g) + 0.5).cuda()
        _, save_mean, save_var, reserve = torch.ops.aten.cudnn_batch_norm(
            x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5
        )
        dy = torch.randn(x.shape, generator=g).cuda()
        return [x, dy, w, rm, rv, save_mean, save_var, 1e-5, reserve]

    # reserveSpace may be empty (the cuDNN-frontend build): poisoning it then changes nothing.
    check(Case("cuda", "cudnn_batch_norm_backward", build, {"running_mean", "running_var"}, {"reserveSpace"}))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not torch.backends.cudnn.is_available(), reason="needs cuDNN")
@pytest.mark.parametrize("kind", ["2d", "1d", "3d", "groups"])
@pytest.mark.parametrize(
    "mask",
    [
        (True, True, True),
        (False, True, True),
        (True, False, False),
        (True, False, True),
        (False, True, False),
        (False, False, True),
    ],
    ids=str,
)
def test_convolution_cudnn_against_poisoning(kind: str, mask: tuple[bool, bool, bool]) -> None:
    unread = set() if mask[0] else {"weight"}
    if not mask[1]:
        unread.add("input")  # cuDNN's bias gradient is a sum of grad_output
    case = Case(f"cuda-{kind}", "convolution_backward", _on_cuda(_conv(kind, mask)), unread)
    args = case.build()
    backend = torch._C._select_conv_backend(args[1], args[2], None, *args[4:10], args[3])
    if backend != getattr(torch._C, "_ConvBackend").Cudnn:  # noqa: B009
        pytest.skip(f"this build picks {backend} for the case, not cuDNN")
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True):  # two clean runs agree
        check(case)

"""Fake CUDA: the emulation's host on a machine with no GPU (``torch``'s CUDA build, no driver).

TE's real Python forward runs on ``FakeTensorMode`` tensors that claim device ``cuda:0`` (meta
storage: shapes, dtypes, strides and storage identity, no values, nothing allocated). Saved-tensor
hooks, storage identity and :func:`memaudit.capture` work on them unchanged, and the kernels are
the emulation's stand-ins, as on a GPU whose architecture is not the emulated one.

What this needs beyond :mod:`memaudit.te.emulate.context` is :data:`PATCHES`, each for the TE or
torch line that asks (TE 2.20.2, torch 2.14.1): five ``torch.cuda`` answers, TE's NVFP4 sign mask,
and the values of the few small tensors TE reads (:class:`FakeCudaMode`). TE reads a tensor's
value (``.item()``, ``.tolist()``, ``bool()``) at :data:`VALUE_SITES` only; a read anywhere else,
or of a tensor whose value is not known, raises :class:`UnknownValueRead` naming TE's line: an
error cell, never a made-up value.

It needs torch's CUDA build (:func:`unavailable`): on a CPU-only build the first autograd op on a
fake CUDA tensor aborts the process (no CUDA device guard is linked). A GPU is not needed, and
none is touched. Everything is put back on exit from :func:`fake_cuda`; TE's own global state
(delayed-scaling history, caches holding fake tensors) is not, which is why each case runs in a
process of its own (:mod:`memaudit.te.emulate.host`).
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)
from torch.utils.weak import WeakIdKeyDictionary

from memaudit.te.emulate.gates import ARCHS

aten = torch.ops.aten


@dataclass(frozen=True)
class Patch:
    """One thing fake CUDA changes, and the TE or torch line that needs it."""

    name: str
    what: str
    serves: str


PATCHES = (
    Patch(
        "current_device",
        "torch.cuda.current_device() -> 0",
        "TE utils.py:806 canonicalize_device (every module's constructor); tensor/nvfp4_tensor.py:176 and 196 "
        "(NVFP4Quantizer); utils.py:161 get_device_compute_capability; utils.py:844 get_sm_count",
    ),
    Patch(
        "get_device_properties",
        "torch.cuda.get_device_properties() -> the emulated architecture's (major, minor, SMs)",
        "TE utils.py:154 _get_device_compute_capability; utils.py:743 is_bf16_compatible (via torch's "
        "get_device_capability); utils.py:844 get_sm_count (the GEMM stand-ins' argument only); "
        "cpp_extensions/gemm.py:43 get_cublas_workspace_size_bytes",
    ),
    Patch(
        "is_available",
        "torch.cuda.is_available() -> True when TE's module/base.py asks, torch's own answer for every other caller",
        "TE module/base.py:895 TransformerEngineBaseModule.__init__ (every te.Linear, LayerNormLinear, "
        "LayerNormMLP): torch's FakeTensorMode keeps its own answer (no CUDA, so it never initialises a device)",
    ),
    Patch(
        "current_stream",
        "torch.cuda.current_stream() -> a stream stub (cuda_stream 0)",
        "TE ops/fused/grouped_mlp.py:1508 (the fused op hands it to the cuDNN-frontend stand-in)",
    ),
    Patch(
        "streams",
        "torch.cuda.Stream, Event and stream(): stubs with nothing to order (no device work)",
        "TE's CPU offload only (cpu_offload.py:76-77, 287-312, 351-357, 397-398, 441, 509); the grouped MLP's "
        "forward makes none",
    ),
    Patch(
        "is_current_stream_capturing",
        "torch.cuda.is_current_stream_capturing() -> False",
        "TE quantization.py:594 FP8GlobalStateManager.fp8_graph_capturing "
        "(from ops/op.py:440, every quantized forward)",
    ),
    Patch(
        "sign_mask",
        "NVFP4's RHT sign mask: TE's own get_sign_from_vector on the vector's CPU value",
        "TE tensor/nvfp4_tensor.py:45-46 (mask |= (v == -1) << i; mask.item()): the meta kernel of bool << int "
        "refuses what CUDA accepts, and .item() reads a value",
    ),
    Patch(
        "data_ptr",
        "a fake tensor's data_ptr() -> its storage's own address plus its byte offset",
        "TE ops/fused/grouped_mlp.py:1251 (FC1's and FC2's split sizes must be one tensor): torch answers 0 for "
        "every fake tensor, so two different tensors would compare equal",
    ),
    Patch(
        "values",
        "small tensors made from Python numbers keep their value beside the fake (FakeCudaMode)",
        "TE ops/basic/grouped_linear.py:1222 split_sizes.tolist() (split-quantize path: fp8-delayed, fp8-block, "
        "and any recipe on an architecture without the grouped-tensor path)",
    ),
)
"""Everything fake CUDA changes. torch's own ``FakeTensorMode`` does the rest: TE's
``torch.Tensor().cuda()`` (cpp_extensions/gemm.py:408) and ``alpha.is_cuda`` (gemm.py:658) just work."""


@dataclass(frozen=True)
class ValueSite:
    """A place where TE reads a tensor's value, and what the value is."""

    file: str
    """The path under ``transformer_engine/``."""
    function: str
    line: int
    """The line in TE 2.20.2 (for messages; the site is matched by file and function)."""
    what: str


VALUE_SITES = (
    ValueSite(
        "pytorch/ops/basic/grouped_linear.py",
        "_fuser_forward_split_quantize",
        1222,
        "split_sizes.tolist(): the split sizes the case gave",
    ),
    ValueSite(
        "pytorch/ops/basic/grouped_linear.py",
        "_fuser_backward_split_quantize",
        1540,
        "split_sizes.tolist() in the split-quantize path's backward: the split sizes the case gave",
    ),
    ValueSite(
        "pytorch/tensor/nvfp4_tensor.py",
        "get_sign_from_vector",
        45,
        "mask |= (v == -1) << i; mask.item(): the RHT sign vector TE builds from a constant list",
    ),
    ValueSite(
        "pytorch/ops/basic/grouped_linear.py",
        "fuser_forward",
        769,
        "split_sizes.tolist() in TE 2.14-2.16 (GroupedLinear.fuser_forward, before the split-quantize "
        "path was its own function; line of 2.15.0): the split sizes the case gave",
    ),
)
"""The only places TE 2.20.2's grouped MLP reads a tensor's value (the first three: forward and
backward), and the one older TE versions read instead (:mod:`memaudit.te.history`)."""

SM_COUNT = {"sm90": 132, "sm100": 148}
"""Streaming multiprocessors of the emulated machine (H100/H200, B200). TE passes the count only
to its GEMMs (cpp_extensions/gemm.py:415, 668), which are stand-ins here."""

HOST_NAME = "no GPU (fake CUDA)"
"""What ``emulation.machine.host`` says for a case that ran here."""

VALUE_LIMIT = 4096
"""Largest tensor (elements) whose value is kept: split sizes and offsets are a few per group."""

_SCALAR_READS = frozenset({aten._local_scalar_dense.default, aten.item.default})
_VALUE_OPS = frozenset({
    aten.lift_fresh.default, aten.lift_fresh_copy.default, aten._to_copy.default, aten.clone.default,
    aten.detach.default, aten.alias.default, aten.view.default, aten._unsafe_view.default,
    aten.unbind.int, aten.select.int, aten.slice.Tensor,
})  # fmt: skip
"""Ops whose result's value is the input's, moved or viewed: the only ones that carry values."""


class UnknownValueRead(RuntimeError):
    """TE read the value of a fake CUDA tensor where memaudit does not know it."""


def unavailable() -> str | None:
    """None where fake CUDA can run here (torch's CUDA build), else why not."""
    if torch.version.cuda is None or not torch.backends.cuda.is_built():
        return (
            f"torch {torch.__version__} is a CPU-only build: with no GPU, TE's forward runs on fake CUDA tensors, "
            "which "
            "need torch's CUDA build (no driver or GPU; the default wheel): on a CPU-only build the first autograd op "
            "on a CUDA tensor aborts the process"
        )
    return None


Frame = tuple[str, int, str]
"""(file, line, function) of a Python frame; a TE file as its path under ``transformer_engine/``."""


def _te_frame() -> Frame | None:
    """The innermost TE frame calling now."""
    f: Any = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        at = name.rfind("/transformer_engine/")
        if at >= 0:
            return name[at + len("/transformer_engine/") :], f.f_lineno, f.f_code.co_name
        f = f.f_back
    return None


def _reader() -> Frame | None:
    """The innermost frame calling now outside torch and this module (who read the value); another
    dispatch mode passing the op on (a ``__torch_dispatch__``, as the unread observer's) is not it."""
    f: Any = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if (
            name != __file__
            and "/torch/" not in name
            and not name.startswith("<")
            and f.f_code.co_name != "__torch_dispatch__"
        ):
            at = name.rfind("/transformer_engine/")
            return (name[at + len("/transformer_engine/") :] if at >= 0 else name), f.f_lineno, f.f_code.co_name
        f = f.f_back
    return None


def _where(frame: Frame | None) -> str:
    if frame is None:
        return "an unknown place"
    te = not frame[0].startswith("/")
    return f"{'transformer_engine/' if te else ''}{frame[0]}:{frame[1]} ({frame[2]})"


def _known_sites() -> str:
    return "; ".join(f"{s.file.rsplit('/', 1)[-1]}:{s.line} {s.what}" for s in VALUE_SITES)


def unknown_read(why: str) -> UnknownValueRead:
    """The error for a value read memaudit cannot answer, naming who read it (and TE's frame)."""
    reader, te = _reader(), _te_frame()
    where = _where(reader) + (
        ""
        if te is None or (reader is not None and reader[0] == te[0] and reader[1] == te[1])
        else f", called from {_where(te)}"
    )
    return UnknownValueRead(
        f"a tensor's value was read at {where}: {why}; with no GPU tensors hold no values, "
        f"and memaudit knows them only at {_known_sites()}"
    )


class FakeCudaMode(FakeTensorMode):
    """``FakeTensorMode`` that knows the values of small tensors made from Python numbers.

    ``torch.tensor([...])`` (``lift_fresh`` of a real CPU tensor) keeps its value, and so does
    what :data:`_VALUE_OPS` make of it (moved to the device, viewed, unbound); an in-place write
    forgets every value on the storage it writes. A read (``.item()``, ``.tolist()``, ``bool()``)
    answers at :data:`VALUE_SITES` with the known value and raises :class:`UnknownValueRead`
    anywhere else, or when the value is not known. ``reads`` counts the answered reads per site.
    """

    def __init__(self) -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.values: Any = WeakIdKeyDictionary()
        self.reads: dict[str, int] = {}
        self._writes: dict[Any, tuple[int, ...]] = {}
        self._bases: dict[int, int] = {}

    def address(self, t: FakeTensor) -> int:
        """``t.data_ptr()``: a distinct base per storage (1 TiB apart, as allocations never
        overlap), plus ``t``'s byte offset into it."""
        key = t.untyped_storage()._cdata
        base = self._bases.get(key)
        if base is None:
            base = self._bases[key] = (len(self._bases) + 1) << 40
        return base + t.storage_offset() * t.element_size()  # type: ignore[return-value]

    def value_of(self, t: Any) -> torch.Tensor | None:
        """The CPU value of ``t``, if known (a real CPU tensor is its own value)."""
        if isinstance(t, FakeTensor):
            return self.values.get(t)
        if type(t) is torch.Tensor and t.device.type == "cpu" and t.numel() <= VALUE_LIMIT:
            return t
        return None

    def _written(self, func: Any) -> tuple[int, ...]:
        """Positions of the arguments ``func`` writes (cached per op)."""
        found = self._writes.get(func)
        if found is None:
            args = getattr(func, "_schema", None)
            found = (
                tuple(i for i, a in enumerate(args.arguments) if a.alias_info is not None and a.alias_info.is_write)
                if args
                else ()
            )
            self._writes[func] = found
        return found

    def _read(self, func: Any, t: Any) -> Any:
        frame = _reader()
        site = next(
            (s for s in VALUE_SITES if frame is not None and frame[0] == s.file and frame[2] == s.function), None
        )
        value = self.value_of(t)
        if site is None:
            raise unknown_read(f"{func} is not a read memaudit knows")
        if value is None:
            raise unknown_read(f"{func} of a tensor whose value is not known")
        key = f"{site.file}:{site.line}"
        self.reads[key] = self.reads.get(key, 0) + 1
        return value.item()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in _SCALAR_READS:
            return self._read(func, args[0])
        try:
            out = super().__torch_dispatch__(func, types, args, kwargs or {})
        except (DataDependentOutputException, DynamicOutputShapeException) as exc:
            raise unknown_read(f"{func} needs the values ({type(exc).__name__})") from None
        if func in _VALUE_OPS:
            self._carry(func, args, kwargs or {}, out)
        elif self.values and self._written(func):
            for i in self._written(func):
                if i < len(args) and isinstance(args[i], FakeTensor):
                    self._forget(args[i])
            for v in (kwargs or {}).values():
                if isinstance(v, FakeTensor):
                    self._forget(v)
        return out

    def _carry(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        src = args[0] if args else None
        value = self.value_of(src)
        if value is None or value.numel() > VALUE_LIMIT:
            return
        cpu = dict(kwargs)
        if "device" in cpu:
            cpu["device"] = torch.device("cpu")
        cpu.pop("pin_memory", None)
        with unset_fake_temporarily():
            result = func(value, *args[1:], **cpu)
        outs = out if isinstance(out, list | tuple) else (out,)
        results = result if isinstance(result, list | tuple) else (result,)
        for o, v in zip(outs, results, strict=True):
            if isinstance(o, FakeTensor) and isinstance(v, torch.Tensor):
                self.values[o] = v

    def _forget(self, t: FakeTensor) -> None:
        key = t.untyped_storage()._cdata
        for k in [k for k in list(self.values.keys()) if k.untyped_storage()._cdata == key]:
            self.values.pop(k, None)


class _Stream:
    """A stream with nothing to order: ``torch.cuda.current_stream()`` and ``torch.cuda.Stream()``.
    TE reads ``cuda_stream`` (grouped_mlp.py:1508); its CPU offload makes streams and waits on them
    (cpu_offload.py:287, 324, 351, 441, 509)."""

    cuda_stream = 0
    device_index = 0
    device = torch.device("cuda", 0)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None

    def record_event(self, event: Any = None) -> Any:
        return event if event is not None else _Event()

    def query(self) -> bool:
        return True


class _Event:
    """``torch.cuda.Event()``: TE's CPU offload records and waits on events (cpu_offload.py:76-77,
    311-312, 356-357, 397-398); with no device work there is nothing to wait for."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        return None

    def record(self, stream: Any = None) -> None:
        return None

    def wait(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


def device_properties(arch: str) -> types.SimpleNamespace:
    """What ``torch.cuda.get_device_properties`` answers: the emulated architecture, named as no GPU."""
    major, minor = ARCHS[arch]
    return types.SimpleNamespace(name=HOST_NAME, major=major, minor=minor, multi_processor_count=SM_COUNT[arch])


_ACTIVE: list[FakeCudaMode] = []


def active() -> FakeCudaMode | None:
    """The fake-CUDA mode in force, if any (memaudit's TE code asks this where it would ask for a GPU)."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def outside() -> Iterator[None]:
    """Real tensors for the block while fake CUDA is in force (its mode set aside, the patches
    kept): CPU tensors made there hold values, for code around TE's forward that reads them (the
    expert-parallel target's router and dispatch). A real tensor handed to an op back in fake CUDA
    becomes a fake one there (``.to("cuda")``: a fake CUDA copy, its value kept when small). With
    fake CUDA not in force, nothing changes."""
    if not _ACTIVE:
        yield
        return
    with unset_fake_temporarily():
        yield


@contextmanager
def _set(owner: Any, name: str, value: Any) -> Iterator[None]:
    own = name in vars(owner)
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, old)
        else:  # it was inherited: inherit it again
            delattr(owner, name)


MODULE_BASE = "/transformer_engine/pytorch/module/base.py"
"""The one TE file whose ``torch.cuda.is_available()`` fake CUDA answers yes (te module/base.py:895)."""


def _is_available_for(original: Any) -> Any:
    """``torch.cuda.is_available`` answering True to TE's module constructor only (its caller's file is
    :data:`MODULE_BASE`), and torch's own answer to everyone else (FakeTensorMode among them)."""

    def is_available() -> bool:
        if sys._getframe(1).f_code.co_filename.endswith(MODULE_BASE):
            return True
        return bool(original())

    return is_available


@contextmanager
def cuda_answers(arch: str) -> Iterator[None]:
    """The ``torch.cuda`` answers of :data:`PATCHES` for the block (no fake tensors)."""
    import torch.cuda.graphs as graphs

    props = device_properties(arch)
    with ExitStack() as stack:
        stack.enter_context(_set(torch.cuda, "current_device", lambda: 0))
        stack.enter_context(_set(torch.cuda, "is_available", _is_available_for(torch.cuda.is_available)))
        stack.enter_context(_set(torch.cuda, "get_device_properties", lambda device=None: props))
        stack.enter_context(_set(torch.cuda, "current_stream", lambda device=None: _Stream()))
        stack.enter_context(_set(torch.cuda, "Stream", _Stream))
        stack.enter_context(_set(torch.cuda, "Event", _Event))
        stack.enter_context(_set(torch.cuda, "stream", lambda stream=None: contextlib.nullcontext()))
        stack.enter_context(_set(torch.cuda, "is_current_stream_capturing", lambda: False))
        stack.enter_context(_set(graphs, "is_current_stream_capturing", lambda: False))
        yield


@contextmanager
def fake_cuda(arch: str) -> Iterator[FakeCudaMode]:
    """:data:`PATCHES` and a :class:`FakeCudaMode` for the block, all put back on exit."""
    why = unavailable()
    if why is not None:
        raise RuntimeError(why)
    import transformer_engine.pytorch.tensor.nvfp4_tensor as nvfp4

    mode = FakeCudaMode()
    original_sign = nvfp4.get_sign_from_vector
    sign_site = f"{VALUE_SITES[1].file}:{VALUE_SITES[1].line}"

    def get_sign_from_vector(vector: torch.Tensor) -> int:
        """TE's own function on the vector's CPU value (nvfp4_tensor.py:45-46)."""
        value = mode.value_of(vector)
        if value is None:
            raise unknown_read("the RHT sign vector's value is not known")
        with unset_fake_temporarily():
            mask = original_sign(value)
        mode.reads[sign_site] = mode.reads.get(sign_site, 0) + 1
        return mask

    with ExitStack() as stack:
        stack.enter_context(cuda_answers(arch))
        stack.enter_context(_set(nvfp4, "get_sign_from_vector", get_sign_from_vector))
        stack.enter_context(_set(FakeTensor, "data_ptr", lambda self: mode.address(self)))
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings(
            "ignore", message="Accessing the data pointer of FakeTensor"
        )  # memaudit's storage check
        stack.enter_context(mode)
        _ACTIVE.append(mode)
        stack.callback(_ACTIVE.pop)
        yield mode

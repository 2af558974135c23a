"""``capture()``: record every tensor autograd saves, and turn the records into rows.

The hooks (:mod:`memaudit.capture.hooks`) only record; ``report()`` does the rest, off the hot
path: it walks the graph to name each record's node and attribute (:mod:`~memaudit.capture.graph`),
tells live records from those autograd has released (``freed``), finds where each kept tensor
resides, names operands from labels, and computes the totals.
"""

from __future__ import annotations

import dataclasses
import gc
import operator
import os
import sys
import threading
import types
import warnings as _warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from memaudit.capture import compiled, graph, hooks, modules, stack
from memaudit.capture.hooks import Record
from memaudit.capture.modules import Frame
from memaudit.capture.rows import RowBuilder, Unlabelled
from memaudit.capture.snapshot import AllocatorHistory, row_label
from memaudit.capture.tensors import (
    Buffer,
    buffer_of,
    iter_tensors,
    storage_ref,
)
from memaudit.capture.verify import AllocatorCheck
from memaudit.extension import extensions
from memaudit.report import (
    CaseReport,
    ModuleGroup,
    Row,
    compute_totals,
    gc_paused,
)
from memaudit.spec import CaseSpec

_get_ident = threading.get_ident


def _name_early(outputs: Any) -> None:
    """A root module returned, or a backward starts, in a thread where a ``name_early`` capture
    is active: name what the graph of ``outputs`` holds."""
    for cap in hooks.state().captures:
        if cap.name_early and cap.active:
            cap.name_now(outputs)
            return


modules.on_root_done = _name_early
stack.before_backward = _name_early

CAPTURE_SPEC = CaseSpec("capture", "-", 0, dtype="-", splits=())
"""The spec of a bare ``capture()`` report: no target, recipe or shape."""


class Plugin(ABC):
    """A classifier that knows a library's tensor types (TE's is :class:`memaudit.te.capture.classify.TEClassifier`),
    declared by its package's extension (:mod:`memaudit.extension`). Abstract: :meth:`expand` and :meth:`annotate`;
    the rest does nothing by default. ``capture(plugins=...)`` takes any object with these methods."""

    def install(self) -> None:  # noqa: B027 - a default that does nothing
        """Start learning provenance (called when a capture starts)."""

    def uninstall(self) -> None:  # noqa: B027 - a default that does nothing
        """Stop (called when that capture ends)."""

    def resides(self, hook_kind: str | None, payload: Any) -> str | None:
        """Where a tensor a library's own hook packed now lives (``host``), or None."""
        return None

    @abstractmethod
    def expand(self, t: Any) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any], torch.Tensor]]] | None:
        """A container row and its ``(name, fields, buffer)`` list for an object saved whole, or None."""

    @abstractmethod
    def annotate(self, rows: list[Row], cap: Capture) -> list[Row]:
        """The finished rows with operands named (``cap.walk_nodes`` holds the Python nodes walked)."""


@dataclass
class Label:
    name: str
    group: int | None
    offset: int
    shape: tuple[int, ...]


_peek_sequence_nr = getattr(torch._C._autograd, "_get_sequence_nr", None)


def _probe_sequence_nr() -> int | None:
    """The autograd sequence number the next node made in this thread gets (None in inference
    mode, where no node is made).

    Read directly where torch exposes it; elsewhere a meta probe makes a node (touching no
    device) and the next node gets the number after it.
    """
    if _peek_sequence_nr is not None:  # a counter: readable in inference mode too
        return _peek_sequence_nr()
    if torch.is_inference_mode_enabled():
        return None
    try:
        with torch.enable_grad():
            probe = torch.empty(0, requires_grad=True, device="meta").view(0)
        return graph.sequence_nr(probe.grad_fn) + 1
    except RuntimeError:  # pragma: no cover - inference mode is caught above
        return None


_next_seq: Any = _peek_sequence_nr if _peek_sequence_nr is not None else _probe_sequence_nr
"""What entering and leaving a capture call: torch's counter itself where it has one."""


def _ender(region: list[int | None] | None) -> Callable[[], None]:
    """What ends ``region`` when called in the thread that opened it (the one whose sequence numbers
    it holds)."""

    def end() -> None:
        if region is not None and region[1] is None:
            region[1] = _next_seq()

    return end


def _current_task() -> Any:
    """The asyncio task running in this thread, or None (asyncio is not imported for this)."""
    aio = sys.modules.get("asyncio")
    if aio is None or aio._get_running_loop() is None:
        return None
    return aio.current_task()


def _refuse_interleaved(task: Any) -> None:
    """A capture entered in an asyncio task while one entered in *another* task is active in this
    thread: refused, saying why (saved-tensor hooks are per thread, and the tasks interleave)."""
    for other in hooks.state().captures:
        theirs = getattr(other, "task", None)
        if other.active and theirs is not None and theirs is not task and not theirs.done():
            raise RuntimeError(
                f"capture() entered in asyncio task {task.get_name()!r} while a capture entered in task "
                f"{theirs.get_name()!r} is still active in the same thread: saved-tensor hooks belong to the thread, "
                "so two interleaved captures would record each other's forwards and could not end in any order. "
                "Run the captures one after the other, or each forward in a thread of its own (asyncio.to_thread)"
            )


class _InThread:
    """What a capture pushed in one thread: per push, the region of sequence numbers it recorded
    (``[lo, hi)``, ``hi`` None while open), its layer and whether it holds module tracking; and the
    thread's lists of module calls it recorded into."""

    __slots__ = ("held", "layers", "regions", "spans")

    def __init__(self) -> None:
        self.regions: list[list[int | None]] = []
        self.layers: list[hooks.Layer] = []
        self.held: list[bool] = []
        self.spans: list[list[Frame]] = []


_NO_ROWS: Mapping[Any, Any] = types.MappingProxyType({})
"""An empty mapping no capture writes into (the class's value of what a report sets)."""


class Capture:
    """The state of one capture. Use :func:`capture`, or enter one directly::

    cap = Capture(plugins=[])
    with cap: ...
    """

    def __init__(
        self,
        plugins: Iterable[Plugin] | None = None,
        *,
        verify_allocator: bool = False,
        modules: bool = True,
        stack: bool = False,
        track_peak: bool = False,
        name_early: bool = False,
        snapshot: str | os.PathLike[str] | None = None,
    ) -> None:
        self.history = AllocatorHistory(snapshot) if snapshot is not None else None
        """The allocator history recorded for ``snapshot`` (CUDA; written by the first ``report()``)."""
        self.track_peak = track_peak
        """Note when autograd releases each record, for :meth:`peak` (a callback per release)."""
        self.released: list[tuple[Record, int]] = []
        """(record, packs seen) per release, in order (``track_peak``)."""
        self.name_early = name_early
        """Name records (node and attribute) when a root module's forward returns and before each
        backward, so rows of graphs gone by ``report()`` are named as while alive (the pytest plugin)."""
        self.modules = modules
        """Name each row by the module whose forward saved it (``Row.module``; runs around ``Module.__call__``)."""
        self.stack = stack
        """Record the user source line of each save (``Row.source``; costs a frame walk per save)."""
        self.plugins: list[Plugin] = list(plugins) if plugins is not None else default_plugins()
        self.records: list[Record] = []
        self.warnings: list[str] = []
        self._verify = verify_allocator
        self._threads: dict[int, _InThread] = {}
        """Thread id -> what this capture pushed there (one entry per thread it recorded in)."""
        self._roots: dict[int, Any] = {}  # the qualified names and call counts of every thread that records first here

    # Everything else starts as the class's value and is made per capture when first needed, so that
    # entering and leaving an empty capture builds only what it uses (an empty capture is timed).
    active = False
    walk_nodes: list[Any] | tuple[()] = ()
    """Python-function nodes met by the graph walk; held only while ``report()`` runs."""
    walk_row_nodes: Mapping[int, int] = _NO_ROWS
    """During ``report()``'s annotation: live row index -> sequence number of the Python node
    (in ``walk_nodes``) whose ``saved_tensors`` holds it."""
    task: Any = None
    """The asyncio task that entered this capture (None outside a running event loop)."""
    _task_token: Any = None
    _other_threads = False
    """True once another thread ran during the capture (see :meth:`attach`)."""
    _entered_in: int | None = None  # the thread that entered it
    _installed: list[Plugin] | tuple[()] = ()  # the plugins installed, in order
    _allocator: AllocatorCheck | None = None
    _labels: dict[int, tuple[Any, list[Label]]] | None = None  # id(storage reference) -> (it, its labels)
    _param_refs: dict[int, tuple[Any, list[Any]]] | None = None  # id(root module) -> (its weakref, its storages)
    _row_storages: Mapping[str, list[Any]] = _NO_ROWS
    _tops: list[Any] | tuple[()] = ()
    """Weak references to live tensors made in the region that a heap scan found (the graphs
    above every record: later reports start from them too)."""
    _reports: list[tuple[Any, list[int], list[Any], list[Unlabelled]]] | tuple[()] = ()
    """Reports returned, for late labels: (weak reference to the case, live rows named while
    built, the storage reference of each live row, the other rows only memaudit named)."""

    # ---- entering and leaving ------------------------------------------------------------------
    def __enter__(self) -> Capture:
        tid = _get_ident()
        self._entered_in = tid
        self.task = task = _current_task()
        if task is not None:
            _refuse_interleaved(task)
            self._task_token = hooks.TASK_CAPTURES.set((*hooks.TASK_CAPTURES.get(), self))
        if self._verify:
            self._allocator = AllocatorCheck()
        if self.history is not None and self.history.result is None:
            self.history.start()
        if self.plugins:
            installed: list[Plugin] = []
            self._installed = installed
            for plugin in self.plugins:
                plugin.install()
                installed.append(plugin)
        self.active = True
        stack.ACTIVE[id(self)] = weakref.ref(self)
        compiled.enter()
        if self.name_early:
            stack.watch_backward(True)
        try:
            self._push(tid)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        entered = self._entered_in
        tid = _get_ident()
        elsewhere = False
        if entered is not None and entered != tid:
            there = self._threads.get(entered)
            elsewhere = there is not None and bool(there.layers)
        try:
            if elsewhere:
                self._abandon(entered)  # type: ignore[arg-type]  # not None: checked above
            else:
                self._pop(tid)
        finally:
            self.active = False
            stack.ACTIVE.pop(id(self), None)
            compiled.exit()
            if self.name_early:
                stack.watch_backward(False)
            if self._task_token is not None:
                try:
                    hooks.TASK_CAPTURES.reset(self._task_token)
                except ValueError:  # exited in another context than entered: leave that context's as it is
                    pass
                self._task_token = None
            installed = self._installed
            while installed:
                installed.pop().uninstall()  # type: ignore[union-attr]  # a list once anything was installed
            if self._allocator is not None:
                self._allocator.stop()
            if self.history is not None and exc and exc[0] is not None:
                self.history.stop()  # the block raised: no report will write the snapshot

            if elsewhere:
                raise RuntimeError(
                    f"capture() entered in thread {entered} was exited in thread {tid}: saved-tensor "
                    "hooks belong to the thread that pushed them, and only it can pop them, so its hook pair stays on "
                    "that thread (torch.func transforms raise there) until the next capture entered there pops it. "
                    "The capture has stopped recording. Exit a capture in the thread that entered it"
                )

    def _abandon(self, tid: int) -> None:
        """Exited in another thread than ``tid``, the one that entered: stop recording and give back
        the module tracking it holds there. Its pair cannot be popped from here, nor its region
        ended (sequence numbers are per thread): the next capture entered in ``tid`` pops the pair and
        ends the region there."""
        there = self._threads[tid]
        layers, held = there.layers, there.held
        regions = [region for region in there.regions if region[1] is None]  # one per layer
        while layers:
            layer = layers.pop()
            layer.orphaned = _ender(regions.pop() if regions else None)
            st = layer.state
            if self in st.captures:
                st.captures.remove(self)
            self._undo_counts(st, held)

    def _undo_counts(self, st: hooks.ThreadState, held: list[bool]) -> None:
        """Take back what one push added to a thread's state: its counts and its hold on module
        tracking."""
        if self.name_early:
            st.naming -= 1
        if self.stack:
            st.sources -= 1
        if self.modules:
            st.tracking -= 1
        if held and held.pop():
            modules.release()

    def _note_threads(self) -> None:
        """Another thread alive now, other than this capture's, may have run during it (called where
        more than one Python thread is alive: with one, it is the calling one, always among them)."""
        self._other_threads = any(t.ident not in self._threads for t in threading.enumerate())

    def thread_started(self) -> None:
        """Called when a Python thread starts while this capture is active."""
        self._other_threads = True

    def _push(self, tid: int, hold_module_hooks: bool = True) -> None:
        """Record in thread ``tid`` (the calling one): open a region, hold module tracking, push a layer."""
        mine = self._threads.get(tid)
        if mine is None:
            mine = self._threads[tid] = _InThread()
        mine.regions.append([_next_seq(), None])
        hold = self.modules and hold_module_hooks
        if hold:
            untracked = modules.acquire()
            if untracked is not None and untracked not in self.warnings:
                self.warnings.append(untracked)
        try:
            layer = stack.push_capture(self)
        except BaseException:
            if hold:
                modules.release()
            raise
        mine.layers.append(layer)
        mine.held.append(hold)
        st = layer.state  # this thread's (the layer just pushed read it)
        if len(st.captures) == 1:  # the first capture in this thread: its module calls count with the capture's
            st.roots = self._roots  # other threads' (one module called from two pool threads: `m`, `m#2`)
        if self.name_early:
            st.naming += 1
        if self.stack:
            st.sources += 1
        if self.modules:
            st.tracking += 1
        spans = st.spans
        for known in mine.spans:
            if known is spans:
                break
        else:
            mine.spans.append(spans)
        if not self._other_threads and threading.active_count() > 1:
            self._note_threads()

    def _close_region(self, tid: int) -> None:
        mine = self._threads.get(tid)
        for region in reversed(mine.regions if mine is not None else ()):
            if region[1] is None:
                region[1] = _next_seq()
                return

    def _pop(self, tid: int) -> None:
        if not self._other_threads and threading.active_count() > 1:
            self._note_threads()
        mine = self._threads.get(tid)
        if mine is None or not mine.layers:  # this thread's push failed (hooks disabled here): no pair to pop
            self._close_region(tid)
            return
        try:
            stack.pop_capture(self)
        finally:
            # this thread's push succeeded: undo what it added
            self._undo_counts(mine.layers.pop().state, mine.held)
            self._close_region(tid)

    @property
    def hook_pair(self) -> tuple[Any, Any]:
        """The ``(pack, unpack)`` pair this capture pushed in the calling thread (benchmarks time it).

        Calling ``pack(t)`` records ``t`` as if autograd had saved it, and returns what autograd
        would keep; ``unpack`` of that returns the tensor (or raises PyTorch's in-place error).
        """
        mine = self._threads.get(_get_ident())
        if mine is None or not mine.layers:
            raise RuntimeError("hook_pair needs a capture active in this thread")
        return mine.layers[-1].pack, mine.layers[-1].unpack

    @contextmanager
    def attach(self, *, hold_module_hooks: bool = True) -> Iterator[Capture]:
        """Record in the calling thread too (saved-tensor hooks are thread-local).

        Use it inside a worker thread whose forward should be captured::

            def worker():
                with cap.attach():
                    y = model(x)

        ``hold_module_hooks=False``: module tracking ends when the capture ends even while
        this thread is still attached (what a thread started inside a capture uses: it may outlive it).
        """
        if not self.active:
            raise RuntimeError("attach() needs an active capture")
        tid = _get_ident()
        self._push(tid, hold_module_hooks)
        try:
            yield self
        finally:
            self._pop(tid)

    def expand(self, t: Any) -> Any:
        """A plugin's description of an object saved whole, or None."""
        for plugin in self.plugins:
            out = plugin.expand(t)
            if out is not None:
                return out
        return None

    # ---- provenance and labels -----------------------------------------------------------------
    def note_buffer(self, t: torch.Tensor, fields: Any) -> None:
        """Classifiers: what buffer ``t`` is, learned before it reaches the hook."""
        hooks.note_buffer(t, fields)

    def label(self, tensor: torch.Tensor, name: str, *, group: int | None = None) -> None:
        """Name an operand: rows in the same storage get the name (the exact view first).

        A label applies to every later ``report()`` and also to the reports this capture already
        returned (their rows that no label, target or classifier had named: those rows are
        replaced in ``case.rows`` / ``case.freed``), so labelling after ``report()`` is not lost.
        """
        try:
            sref = weakref.ref(tensor.untyped_storage())
        except (RuntimeError, NotImplementedError, TypeError):  # no storage: nothing to match rows by
            return
        if self._labels is None:
            self._labels = {}
        entry = self._labels.get(id(sref))
        if entry is None:
            entry = self._labels[id(sref)] = (sref, [])
        entry[1].append(Label(name, group, tensor.storage_offset() * tensor.element_size(), tuple(tensor.shape)))  # type: ignore[arg-type]
        if self._reports:
            self._label_returned(sref)

    def _label_returned(self, sref: Any) -> None:
        """Apply the labels of storage ``sref`` to the unnamed rows of the reports already returned."""
        alive = []
        for entry in self._reports:
            ref, named, srefs, pending = entry
            case = ref()
            if case is None:
                continue
            alive.append(entry)
            rows = case.rows
            for index in named:  # a live row named while built: no group, its view as the row says
                if srefs[index] is sref and index < len(rows) and rows[index].index == index:
                    row = rows[index]
                    self._name_late(rows, index, sref, row.storage_offset, tuple(row.shape), None)
            for live, index, row_sref, offset, shape, row_group in pending:
                if row_sref is not sref:
                    continue
                target = case.rows if live else case.freed
                if index >= len(target) or target[index].index != index:
                    continue  # the caller rebuilt the list: nothing to name safely
                self._name_late(target, index, sref, offset, shape, row_group)
        self._reports = alive

    def _name_late(
        self, rows: list[Row], index: int, sref: Any, offset: int, shape: tuple[int, ...], row_group: int | None
    ) -> None:
        label = self._label_at(sref, offset, shape)
        if label is None:
            return
        exact = label.offset == offset and label.shape == shape
        group = label.group if exact and row_group is None else row_group
        rows[index] = dataclasses.replace(rows[index], operand=label.name, group=group)

    def label_for(self, buf: Buffer) -> Label | None:
        """The label given to the storage of ``buf`` (the exact view first), or None."""
        return self._label_at(buf.sref, buf.offset, buf.shape) if buf.sref is not None else None

    def _label_at(self, sref: Any, offset: int, shape: tuple[int, ...]) -> Label | None:
        entry = self._labels.get(id(sref)) if self._labels is not None else None
        if not entry:
            return None
        labels = entry[1]
        exact = [lab for lab in labels if lab.offset == offset and lab.shape == shape]
        if exact:
            return exact[0]
        return labels[0] if len({lab.name for lab in labels}) == 1 else None

    # ---- report ---------------------------------------------------------------------------------
    def _own_regions(self) -> list[list[int | None]]:
        """The regions of the thread calling report() (all of them when it never recorded)."""
        mine = self._threads.get(_get_ident())
        if mine is not None and mine.regions:
            return mine.regions
        return [r for there in self._threads.values() for r in there.regions]

    def _in_region(self) -> Any:
        ranges = []
        for lo, hi in self._own_regions():
            if lo is None:
                return lambda seq: True
            ranges.append((lo, hi if hi is not None else _probe_sequence_nr() or sys.maxsize))
        if len(ranges) == 1:  # the usual case: one region, one comparison per node
            ((lo1, hi1),) = ranges
            return lambda seq: lo1 <= seq < hi1
        return lambda seq: any(lo <= seq < hi for lo, hi in ranges)

    def _outside(self) -> Any:
        """Which out-of-region roots may be another thread's: any made before this thread's last
        region ended (a root made in this thread after the capture ended is this thread's own)."""
        ends = [hi for lo, hi in self._own_regions() if lo is not None]
        if not ends or any(hi is None for hi in ends):
            return lambda seq: True
        last = max(hi for hi in ends if hi is not None)
        return lambda seq: seq < last

    def report(
        self, outputs: Any = None, *, case_id: str = "capture", include_freed: bool = False, walk: bool = True
    ) -> CaseReport:
        """Rows and totals of everything saved so far.

        ``outputs`` roots the graph walk that names each row's node (``op``) and attribute
        (``saved_as``) and marks rows that alias an output. Without it the walk starts from every
        live tensor that has a ``grad_fn`` (slower). Rows autograd has already released (after
        backward, or because the graph was dropped) are listed in ``freed`` and left out of the
        totals; ``include_freed=True`` reports them as rows (what was saved at any point).
        """
        with gc_paused():
            return self._report(outputs, case_id, include_freed, walk)

    def _report(self, outputs: Any, case_id: str, include_freed: bool, walk: bool = True) -> CaseReport:
        in_region = self._in_region()
        if not walk:
            walked = graph.walk([], in_region)
        elif outputs is not None:
            roots = [t.grad_fn for t in iter_tensors(outputs) if t.grad_fn is not None]
            walked = graph.walk(roots, in_region, outside=self._outside() if self._other_threads else None)
        else:
            walked = self._walk_recorded(in_region)
        self.walk_nodes = walked.python_nodes
        try:
            builder = RowBuilder(self, outputs, include_freed)
            builder.add_records(self.records)
            for found in walked.found:
                builder.add_found(found)
            self._add_selective_cache(builder)
            rows, freed = builder.finish()
            self._row_storages = _storages_by_name(builder.rows, builder.row_srefs)
            self.walk_row_nodes = builder.node_of
            for plugin in self.plugins:
                rows = plugin.annotate(rows, self)
            pending = builder.name_rest(rows, True) + builder.name_rest(freed, False)
            groups = self._module_groups(builder, rows) if self.modules else []
        finally:
            self.walk_nodes = []
            self.walk_row_nodes = {}
        warnings = list(self.warnings) + builder.warnings + walked.warnings
        if freed and not rows:
            warnings.append(
                f"all {len(freed)} saved buffers were already released by autograd (backward ran before report()): "
                "they are listed as freed, and the totals are 0"
            )
        case = CaseReport(
            CAPTURE_SPEC,
            id=case_id,
            rows=rows,
            freed=freed,
            totals=compute_totals(rows, freed),
            warnings=_unique(warnings),
            complete=not (walked.unseen or builder.incomplete),
            modules=groups,
        )
        if self._allocator is not None:
            case.allocator = self._allocator.result(builder.device_storages(), outputs)
        if self.history is not None and self.history.recording:
            self._write_snapshot(builder, rows, case)
        if pending or builder.named:
            self._reports = [*self._reports, (weakref.ref(case), builder.named, builder.row_srefs, pending)]
        return case

    def row_storages(self) -> dict[str, list[Any]]:
        """Storage name (``s3``) -> the weak references of the storage objects the last report's live
        rows named with it (what :class:`memaudit.capture.reads.Observer` follows)."""
        return {name: list(refs) for name, refs in self._row_storages.items()}

    def _walk_recorded(self, in_region: Any) -> graph.WalkResult:
        """The walk of ``report()`` without outputs: from the graphs of what the capture recorded
        (each live record's kept tensor, and what its root module calls returned), at a cost that
        grows with the records, not with the heap. Only where a live record is still unnamed after
        it (a graph none of those reaches from above) are every live tensor's graphs walked."""
        roots = self._recorded_roots()
        walked = graph.walk(roots, in_region)
        for rec in self.records:
            if rec.op is None and rec.context is None and rec() is not None:
                break
        else:
            return walked
        found = _live_graph_tensors()
        tops = [t for t in found if in_region(graph.sequence_nr(t.grad_fn))]
        self._tops = [*self._tops, *(weakref.ref(t) for t in tops)]  # the next report() starts from them too
        return graph.walk(roots + [t.grad_fn for t in found], in_region)

    def _recorded_roots(self) -> list[Any]:
        """The ``grad_fn`` of each live record's kept tensor and of each live output of a root
        module call in this capture (read now: nothing here was held strongly)."""
        roots: list[Any] = []
        seen: set[int] = set()

        def add(t: Any) -> None:
            try:  # a pair's payload may be any object (a dead weak proxy raises even on isinstance)
                if type(t) is not torch.Tensor and not isinstance(t, torch.Tensor):
                    return
                fn = None if t.is_leaf else t.grad_fn
            except Exception:  # noqa: BLE001 - an object or subclass that cannot say: not a root
                return
            if fn is not None and id(fn) not in seen:
                seen.add(id(fn))
                roots.append(fn)

        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore", FutureWarning)  # a subclass's grad_fn may be a deprecated property
            for rec in self.records:
                saved = rec()
                if saved is not None:
                    add(saved.value)
            for spans in self._all_spans():
                for f in spans:
                    if f.parent is None:
                        for ref in f.outputs:
                            add(ref())
            tops = [ref for ref in self._tops if ref() is not None]
            self._tops = tops
            for ref in tops:
                add(ref())
        return roots

    def _write_snapshot(self, builder: RowBuilder, rows: list[Row], case: CaseReport) -> None:
        """Name the allocations of the live rows' storages after their rows and write the snapshot."""
        assert self.history is not None
        sref_of = {r.index: sref for r, sref in zip(builder.rows, builder.row_srefs, strict=True)}
        storages: dict[str, tuple[Any, list[str]]] = {}
        for row in rows:
            sref = sref_of.get(row.index)
            st = sref() if sref is not None else None
            if st is None or row.storage is None or row.resides != "device":
                continue
            storages.setdefault(row.storage, (st, []))[1].append(row_label(row))
        result = self.history.write([(name, st, labels) for name, (st, labels) in storages.items()])
        if result.unlabelled:
            case.warnings.append(
                f"memory snapshot: {len(result.unlabelled)} saved storage(s) have no live caching-allocator block to "
                "name "
                f"({', '.join(result.unlabelled[:8])}{', ...' if len(result.unlabelled) > 8 else ''}): "
                "memory not from PyTorch's caching allocator, or a block already split or freed"
            )

    def _module_groups(self, builder: RowBuilder, rows: list[Row]) -> list[ModuleGroup]:
        """Rows grouped by module call (with the calls inside it), largest first, and what a
        checkpoint of each call would free (:class:`memaudit.report.ModuleGroup`). One pass over
        the rows and their calls' ancestors; bytes as :func:`memaudit.report.group_bytes`."""
        by_name: dict[str, modules.Frame] = {}
        for spans in self._all_spans():
            for f in spans:
                by_name.setdefault(f.name, f)
        members: dict[int, list[int]] = {}
        calls: dict[int, modules.Frame] = {}
        own: dict[str, int] = {}
        holders: dict[str, set[int]] = {}
        kept: list[tuple[str, int, bool] | None] = []  # per row: (storage, bytes, parameter) where it is device memory
        chains: dict[
            str | None, list[list[int]] | None
        ] = {}  # module name -> the member lists of its call and its ancestors
        fields = _GROUP_FIELDS
        for i, (module, storage, resides, nbytes_, is_param) in enumerate(map(fields, rows)):
            if storage is not None and resides == "device":
                kept.append((storage, nbytes_, is_param))
                held = holders.get(storage)
                if held is None:
                    holders[storage] = {i}
                else:
                    held.add(i)
            else:
                kept.append(None)
            chain = chains.get(module, ())
            if chain == ():
                top = by_name.get(module) if module is not None else None
                chain = chains[module] = None if top is None else []
                g: Frame | None = top
                while g is not None:
                    calls[id(g)] = g
                    chain.append(members.setdefault(id(g), []))  # type: ignore[union-attr]
                    g = g.parent
            if chain is None:
                continue
            own[module] = own.get(module, 0) + 1
            for lst in chain:
                lst.append(i)

        def nbytes(indices: list[int]) -> int:
            sizes: dict[str, int] = {}
            params: set[str] = set()
            for i in indices:
                k = kept[i]
                if k is not None:
                    sizes[k[0]] = k[1]
                    if k[2]:
                        params.add(k[0])
            return sum(n for st, n in sizes.items() if st not in params)

        out = []
        new, set_dict = object.__new__, object.__setattr__
        for key, inside in members.items():
            frame = calls[key]
            inputs = set()
            for ref in frame.inputs:
                st = ref() if ref is not None else None
                if st is not None:
                    name = builder.storage_name_of(weakref.ref(st))
                    if name is not None:
                        inputs.add(name)
            frees = []
            mine: set[int] | None = None
            for i in inside:
                k = kept[i]
                if k is None or k[2] or k[0] in inputs:
                    continue
                held = holders[k[0]]
                if len(held) > 1:  # held by other rows too: are they all inside this call?
                    if mine is None:
                        mine = set(inside)
                    if not held <= mine:
                        continue
                frees.append(i)
            group = new(ModuleGroup)  # frozen: set whole, as make_row does for rows
            set_dict(
                group,
                "__dict__",
                {
                    "module": frame.name,
                    "rows": inside,
                    "own_rows": own.get(frame.name, 0),
                    "saved_bytes": nbytes(inside),
                    "frees": frees,
                    "frees_bytes": nbytes(frees) if frees else 0,
                },
            )
            out.append(group)
        out.sort(key=lambda g: (-g.saved_bytes, g.module))
        return out

    def _add_selective_cache(self, builder: RowBuilder) -> None:
        """Rows for what selective activation checkpointing caches (``via="cache"``): the outputs
        its policy saves are kept by its dispatch mode, outside every hook; a region whose cache
        memaudit cannot read makes the case incomplete, loudly."""
        frames: dict[int, tuple[Any, list[modules.Frame]]] = {}
        for rec in self.records:
            hook = rec.hook
            if hook is None or hook.frame is None or hook.kind != "checkpoint":
                continue
            frame = hook.frame()
            if frame is None:
                continue
            calls = frames.setdefault(id(frame), (frame, []))[1]
            if rec.frame is not None:
                calls.append(rec.frame)
        seen: set[int] = set()
        for frame, calls in frames.values():
            module = _common_call(calls).name if calls and self.modules else None
            cached = stack.selective_cache(frame)
            if cached is None:
                if stack.has_dispatch_mode(frame):
                    builder.warnings.append(
                        "a checkpointed region runs under a context_fn whose saved outputs memaudit cannot read "
                        "(not selective checkpointing's cache): what it keeps is not counted (case incomplete)"
                    )
                    builder.incomplete = True
                continue
            for name, t in cached:
                if id(t) in seen:
                    continue
                seen.add(id(t))
                fields = {
                    "op": "checkpoint",
                    "saved_as": f"selective_cache.{name}",
                    "slot": f"selective_cache.{name}",
                    "via": "cache",
                    "note": "cached by selective activation checkpointing",
                    **buffer_of(t).row_fields(),
                }
                if module is not None:
                    fields["module"] = module
                builder._row(fields, buffer_of(t), True)

    def peak(self) -> tuple[int, list[Record]]:
        """The most saved bytes alive at once over the capture, and the records alive then.

        Replays packs and releases in the order they happened (``track_peak``): a storage counts
        once, at its full size, while any record that names it is alive; parameters (by storage, as
        in the totals) and what a foreign pair keeps elsewhere (checkpoint, host copies) do not
        count. Bytes only a report finds (``ctx`` attributes, selective-checkpoint caches) are not
        in this replay: compare with the final report's totals."""
        params = {id(r) for r in self.module_storages()}
        released: dict[int, int] = {}
        for rec, n in self.released:
            released.setdefault(id(rec), n)
        order = sorted((k, i) for i, rec in enumerate(self.records) if (k := released.get(id(rec))) is not None)
        contrib: list[list[tuple[int, int]]] = []
        for rec in self.records:
            mine: list[tuple[int, int]] = []
            if rec.hook is None and rec.resides is None:
                for _, buf in rec.described():
                    if buf.sref is not None and not buf.is_parameter and id(buf.sref) not in params:
                        mine.append((id(buf.sref), buf.storage_bytes))
            contrib.append(mine)
        refs: dict[int, int] = {}
        now = best = 0
        best_at = 0
        k = 0
        for i in range(len(self.records)):
            while k < len(order) and order[k][0] <= i:
                for key, nbytes in contrib[order[k][1]]:
                    refs[key] -= 1
                    if refs[key] == 0:
                        now -= nbytes
                k += 1
            for key, nbytes in contrib[i]:
                refs[key] = refs.get(key, 0) + 1
                if refs[key] == 1:
                    now += nbytes
            if now > best:
                best, best_at = now, i
        alive = [
            rec
            for i, rec in enumerate(self.records)
            if i <= best_at and released.get(id(rec), len(self.records) + 1) > best_at
        ]
        return best, alive

    def report_of(self, records: list[Record], *, case_id: str = "capture") -> CaseReport:
        """A report of ``records`` only, each a row whether autograd released it or not (the rows
        alive at :meth:`peak`)."""
        kept = self.records
        self.records = records
        try:
            return self.report(case_id=case_id, include_freed=True, walk=False)
        finally:
            self.records = kept

    def name_now(self, outputs: Any) -> None:
        """Name the records the graph of ``outputs`` holds (node and attribute), reading raw: no
        unpack runs, nothing else is read (``name_early``)."""
        roots = [t.grad_fn for t in iter_tensors(outputs) if t.grad_fn is not None]
        if roots:
            with gc_paused():
                graph.walk(roots, _never)

    def label_names(self) -> list[str]:
        """Every operand name given with :meth:`label`."""
        return sorted({lab.name for _, labels in (self._labels or {}).values() for lab in labels})

    def module_names(self) -> set[str]:
        """Every module name a row of this capture could carry: each call made, and every module
        under the roots called (qualified names, as rows name them)."""
        names: set[str] = set()
        roots: dict[int, Any] = {}
        for spans in self._all_spans():
            for f in spans:
                names.add(f.name)
                if f.parent is None and f.module is not None:
                    roots.setdefault(id(f.module), f.module)
        for ref in roots.values():
            root = ref()
            if root is not None:
                names.update(entry[1] for entry in modules.qualified_names(root).values())
        return names

    def _all_spans(self) -> Iterator[list[Frame]]:
        """The lists of module calls this capture recorded into, thread by thread."""
        for mine in self._threads.values():
            yield from mine.spans

    def _root_refs(self) -> dict[int, Any]:
        """id -> weak reference of every root module call made during the capture (first seen first)."""
        roots: dict[int, Any] = {}
        for spans in self._all_spans():
            for f in spans:
                if f.parent is None and f.module is not None:
                    roots.setdefault(id(f.module), f.module)
        return roots

    def modules_called(self) -> list[tuple[str, Any]]:
        """``(qualified name, module)`` of every live module under the roots called during the capture
        (names as rows carry them: the root by its class name). What a classifier reads to find the
        copies a module keeps across steps (TE's cached FP8 weights); held only by the caller."""
        out: list[tuple[str, Any]] = []
        seen: set[int] = set()
        for ref in self._root_refs().values():
            root = ref()
            if root is None:
                continue
            for key, entry in modules.qualified_names(root).items():
                m = entry[0]()
                if m is not None and key not in seen:
                    seen.add(key)
                    out.append((entry[1], m))
        return out

    def module_storages(self) -> list[Any]:
        """Weak references to the storages of the parameters and buffers of every module called
        during the capture (parameter memory, whatever tensor object saved it)."""
        roots = self._root_refs()
        out = []
        for key, ref in roots.items():
            m = ref()
            if m is None:
                continue
            if self._param_refs is None:
                self._param_refs = {}
            cached = self._param_refs.get(key)
            if cached is None or cached[0]() is not m:  # listed once per root per capture (named_modules is slow)
                refs = []
                try:
                    tensors = [*m.parameters(), *m.buffers()]
                except Exception:  # noqa: BLE001 - a module that cannot list them: nothing to add
                    tensors = []
                for t in tensors:
                    r = storage_ref(t)
                    if r is not None:
                        refs.append(r[0])
                cached = self._param_refs[key] = (ref, refs)
            out.extend(cached[1])
        return out

    def module_of_node(self, seq: int) -> str | None:
        """The module call (in the calling thread) during which autograd node ``seq`` was made."""
        mine = self._threads.get(_get_ident())
        for spans in reversed(mine.spans if mine is not None else []):
            name = modules.module_at(spans, seq)
            if name is not None:
                return name
        return None


_GROUP_FIELDS = operator.attrgetter("module", "storage", "resides", "storage_bytes", "apart")  # parameter or cached


def _storages_by_name(rows: list[Row], srefs: list[Any]) -> dict[str, list[Any]]:
    """Storage name -> its storage references (one name may stand for two storage objects over
    the same memory), for the live rows of a report."""
    out: dict[str, list[Any]] = {}
    for row, sref in zip(rows, srefs, strict=True):
        if sref is not None and row.storage is not None:
            refs = out.setdefault(row.storage, [])
            if not any(r is sref for r in refs):
                refs.append(sref)
    return out


def _never(seq: int) -> bool:
    return False


def _common_call(calls: list[modules.Frame]) -> modules.Frame:
    """The innermost module call that every one of ``calls`` runs inside (the checkpointed module)."""
    common: modules.Frame | None = calls[0]
    while common is not None and not all(c.within(common) for c in calls):
        common = common.parent
    return common if common is not None else calls[0]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _subclasses(root: type) -> frozenset[type]:
    """``root`` and every subclass of it defined so far."""
    found: set[type] = set()
    todo: list[type] = [root]
    while todo:
        cls = todo.pop()
        if cls not in found:
            found.add(cls)
            todo.extend(cls.__subclasses__())
    return frozenset(found)


def _tensor_types() -> frozenset[type]:
    """torch.Tensor and every subclass defined so far (Parameter, TE's tensors, a user's)."""
    return _subclasses(torch.Tensor)


def _fake_types() -> frozenset[type]:
    """FakeTensor and its subclasses, where torch has imported them (never imported here)."""
    fake = getattr(sys.modules.get("torch._subclasses.fake_tensor"), "FakeTensor", None)
    return frozenset() if fake is None else _subclasses(fake)


def _live_graph_tensors() -> list[Any]:
    """Every live tensor that has a grad_fn: the fallback roots when the caller names no outputs
    and what the capture recorded leaves a live record unnamed.

    The heap is filtered by exact type (``type(o) in types``): no ``isinstance`` per object, and
    no ``__class__`` read on objects that warn when touched (deprecated module-level aliases such
    as ``torch.distributed.reduce_op``); one comprehension is a little faster than
    ``itertools.compress`` over two ``map`` s. This scan is most of the cost when few rows are saved.
    """
    types = _tensor_types() - _fake_types()  # fake tensors (compile's tracing leaves some) hold no memory
    objs = gc.get_objects()
    tensors = [o for o in objs if type(o) in types]
    del objs
    roots = []
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore", FutureWarning)  # a subclass's grad_fn may be a deprecated property
        for obj in tensors:
            if obj.is_leaf:  # parameters and inputs: no grad_fn (and no node wrapper to build)
                continue
            if obj.grad_fn is not None:
                roots.append(obj)
    return roots


def default_plugins() -> list[Plugin]:
    """The classifier of every extension (:mod:`memaudit.extension`) whose library the caller
    already imported (memaudit never imports one: TE's
    must be imported after its fused switch is set)."""
    out: list[Plugin] = []
    for ext in extensions():  # a loop, not with_library()'s generator: every capture() runs it
        if ext.classifier is not None and ext.library_imported():
            out.append(ext.load(ext.classifier)())
    return out


def capture(
    plugins: Iterable[Plugin] | None = None,
    *,
    verify_allocator: bool = False,
    modules: bool = True,
    stack: bool = False,
    snapshot: str | os.PathLike[str] | None = None,
) -> Capture:
    """Record every saved tensor of the autograd graphs built inside the block (this thread).

    Autograd behaves as without it; hooks entered inside the block still run (and are seen), and
    so does a pair that was active when it started. The hooks are removed on exit, also when the
    block raises. ``verify_allocator`` (CUDA) compares the allocator's growth with the rows.
    ``modules`` (default on) names each row by the module whose forward saved it (``Row.module``,
    e.g. ``layers.3.mlp.fc1``); ``stack`` adds the user source line of each save (``Row.source``,
    ``model.py:42``; a frame walk per saved tensor). ``snapshot`` (CUDA) records the caching
    allocator's history from entering the block to the first ``report()``, which names each saved
    buffer's allocation after its row and writes the snapshot there (a pickle for PyTorch's
    ``memory_viz``); it raises :class:`~memaudit.capture.snapshot.SnapshotUnavailable` where there
    is no CUDA caching allocator.
    """
    return Capture(plugins, verify_allocator=verify_allocator, modules=modules, stack=stack, snapshot=snapshot)

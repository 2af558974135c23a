"""GitHub-flavoured markdown for a sticky PR comment.

Layout: line 1 is a hidden marker ``<!-- memaudit:NAME -->`` that CI uses to find the comment
again; line 2 is a one-line verdict; then one ``<details>`` block per (target, recipe) with a table
of its cases. With a :class:`~memaudit.judge.baseline.Comparison` the table has baseline and delta
columns and the block lists the findings; without one (``memaudit run --markdown``) it shows the
current numbers only.

The comment is kept under ``limit`` characters (GitHub rejects comments over 65,536); when the
full detail does not fit, it is cut in steps and the comment says what was left out.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memaudit.environment import libraries
from memaudit.errors import UsageError, clip
from memaudit.judge.baseline import WORSE, CaseDiff, Comparison, Finding, RowDiff, kind_breakdown
from memaudit.render.ranks import PER_RANK_MAX, RankView, imbalance, rank_views
from memaudit.render.unread import unread_markdown
from memaudit.report import CaseReport, Report
from memaudit.targets.registry import execution_label, owner_of
from memaudit.units import fmt_bytes, fmt_delta, fmt_shape

GITHUB_LIMIT = 65536
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./:+-]*")
_MD_SPECIAL = re.compile(r"([\\*_\[\]~])")
_LEADING = re.compile(r"^([#+\-=]|\d+[.)])")


def marker_name(text: str) -> str:
    """A valid marker name made from any text (a file's stem, a target name): every run of other
    characters becomes ``-``; ``default`` when nothing is left."""
    name = re.sub(r"[^A-Za-z0-9_.:+-]+", "-", text)
    name = re.sub(r"-{2,}", "-", name).lstrip("._:+-")
    return name[:100] or "default"


def marker(name: str) -> str:
    """The hidden first line that identifies the comment. Raises UsageError for a bad name."""
    if not _NAME.fullmatch(name) or "--" in name or len(name) > 100:
        raise UsageError(
            f"comment name {name!r} must start with a letter or digit and use only letters, digits and _./:+- "
            "(no '--', at most 100 characters)",
            key="--name",
        )
    return f"<!-- memaudit:{name} -->"


_ZWJ = "\u200d"
_LIVE = re.compile(r"@(?=[A-Za-z0-9_])|(?i:\b(?:https?|ftp|mailto|file)(?=:))|(?i:\bwww(?=\.))|#(?=[0-9])")
"""What GitHub turns into a notification, a link or a reference: ``@name``, ``user@host``,
``https://...``, ``www.`` and ``#123``."""
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def neutralize(text: str) -> str:
    """``text`` with GitHub's live syntax made inert: a zero-width joiner after every ``@`` before
    a name, inside every URL scheme and ``www`` and after ``#`` before a number (so an id, a
    reason or an environment value can neither mention nor link), and control characters and
    bidirectional overrides dropped."""
    text = _UNPRINTABLE.sub("", text)
    return _LIVE.sub(lambda m: m.group() + _ZWJ, text)


def md_escape(text: Any) -> str:
    """Escape text for a table cell or list item: markdown specials, ``|``, backticks and HTML;
    mentions, links and references neutralised (:func:`neutralize`)."""
    s = neutralize(" ".join(str(text).split()))
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = html.escape(s, quote=False).replace("`", "&#96;").replace("|", "\\|")
    m = _LEADING.match(s)
    if m:  # a list or heading marker: escape its punctuation (a backslash before a digit is shown)
        s = s[: m.end() - 1] + "\\" + s[m.end() - 1 :]
    return s


_ENTITIES = {**{c: f"&#{ord(c)};" for c in "\\*_[]~`|!#'\""}, "&": "&amp;", "<": "&lt;", ">": "&gt;"}


def html_escape(text: Any) -> str:
    """Escape text for inline HTML such as ``<summary>`` or ``<sub>`` (one line): HTML, and
    markdown's specials as entities (GitHub renders markdown inside inline HTML); mentions,
    links and references neutralised (:func:`neutralize`)."""
    return "".join(_ENTITIES.get(c, c) for c in neutralize(" ".join(str(text).split())))


def fmt_pct(pct: float | None) -> str:
    if pct is None:
        return "-"
    if pct == 0:
        return "0%"
    if abs(pct) < 0.01:
        return ("+" if pct > 0 else "-") + "<0.01%"
    return f"{pct:+.2f}%"


def _size(text: str) -> int:
    # UTF-8 bytes: never less than GitHub's character count, so the limit holds either way.
    return len(text.encode("utf-8"))


# --------------------------------------------------------------------------------------------
# The model the renderer works on: one entry per case, grouped by (target, recipe)


@dataclass
class _Entry:
    case: CaseReport  # current, or baseline for a missing case
    diff: CaseDiff | None

    @property
    def failing(self) -> bool:
        """A regression against the baseline; without one, a case that ended in error."""
        if self.diff is not None:
            return self.diff.regressed
        return self.case.status == "error"

    @property
    def changed(self) -> bool:
        if self.diff is not None:
            return self.diff.changed
        return self.case.status != "ok"

    @property
    def checked(self) -> bool:
        """The case ran the code it audits (measured or emulated, ok); not a skipped, errored or
        estimated case, nor one missing from the current report."""
        missing = self.diff is not None and self.diff.state == "missing"
        return not missing and self.case.status == "ok" and self.case.execution in ("measured", "emulated")


@dataclass
class _Group:
    target: str
    recipe: str
    entries: list[_Entry]

    @property
    def checked(self) -> bool:
        """Some case of the group was checked: only then does its block show a tick."""
        return any(e.checked for e in self.entries)

    @property
    def failing(self) -> bool:
        return any(e.failing for e in self.entries)

    @property
    def changed(self) -> bool:
        return any(e.changed for e in self.entries)


def _groups(report: Report, comparison: Comparison | None) -> list[_Group]:
    if comparison is not None:
        entries = []
        for d in comparison.cases:
            c = d.current or d.baseline
            assert c is not None
            entries.append(_Entry(c, d))
    else:
        entries = [_Entry(c, None) for c in report.cases]
    groups: dict[tuple[str, str], _Group] = {}
    for e in entries:
        key = (e.case.target, e.case.recipe)
        groups.setdefault(key, _Group(key[0], key[1], [])).entries.append(e)
    return list(groups.values())


def _label(case: CaseReport) -> str:
    prefix = f"{case.target}/{case.recipe}/"
    return case.id[len(prefix) :] if case.id.startswith(prefix) and len(case.id) > len(prefix) else case.id


# --------------------------------------------------------------------------------------------
# Rendering pieces


def _status_cell(e: _Entry) -> str:
    text = _status_text(e)
    label = execution_label(e.case)
    return f"{text} · {md_escape(label)}" if label is not None else text


def _status_text(e: _Entry) -> str:
    d, c = e.diff, e.case
    if e.failing:
        icon = "❌"
    elif d is not None and d.state == "missing":
        icon = "❔"
    elif c.status == "skipped":
        icon = "⏭️"
    elif c.status == "error":
        icon = "⚠️"
    elif c.execution not in ("measured", "emulated"):
        icon = "➖"  # an estimate: nothing was checked
    else:
        icon = "✅"
    if d is not None and d.state == "missing":
        return f"{icon} missing from the current report"
    if c.status != "ok":
        text = f"{c.status}: {clip(c.reason)}" if c.reason else c.status
        if d is not None and d.baseline is not None and d.baseline.status != c.status:
            text += f" (was {d.baseline.status})"
        return f"{icon} {md_escape(text)}"
    if not c.complete:
        first = c.warnings[0] if c.warnings else "see the case's warnings"
        return f"{'❌' if e.failing or d is None else icon} incomplete: {md_escape(first)}"
    if d is None:
        return f"{icon} ok"
    if d.state == "new":
        return f"{icon} new"
    if d.baseline is not None and d.baseline.status != "ok":
        return f"{icon} ok (was {md_escape(d.baseline.status)})"
    if e.failing:
        return f"{icon} regression"
    if any(f.direction == "better" for f in d.findings) and not any(f.direction == WORSE for f in d.findings):
        return f"{icon} improvement"
    return f"{icon} changed" if d.findings else f"{icon} unchanged"


def _kinds_cell(case: CaseReport, diff: CaseDiff | None) -> str:
    if case.status != "ok":
        return "-"
    kinds = kind_breakdown(case)
    deltas: dict[str, int] = {}
    if diff is not None and diff.baseline is not None and diff.baseline.status == "ok":
        before = kind_breakdown(diff.baseline)  # the same measure as the cell: bytes by storage
        deltas = {
            k: kinds.get(k, 0) - before.get(k, 0) for k in [*kinds, *before] if kinds.get(k, 0) != before.get(k, 0)
        }
    parts = []
    for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]):
        s = f"{k} {fmt_bytes(v)}"
        if k in deltas:
            s += f" ({fmt_delta(deltas[k])})"
        parts.append(md_escape(s))
    parts += [md_escape(f"{k} 0 B ({fmt_delta(d)})") for k, d in deltas.items() if k not in kinds]
    return ", ".join(parts) if parts else "-"


def _path_cell(e: _Entry) -> str:
    def word(c: CaseReport | None) -> str | None:
        return c.path.label() if c is not None and c.path is not None else None

    now = word(e.case if (e.diff is None or e.diff.state != "missing") else None)
    before = word(e.diff.baseline) if e.diff is not None else None
    if now and before and now != before:
        return f"{now} (was {before})"
    return now or before or "-"


def _unread_cell(c: CaseReport) -> str:
    """Unread bytes of an ok case: ``-`` where it was not analysed (never a silent zero)."""
    if c.status != "ok":
        return "-"
    if c.unread is None:
        return "not analysed"
    return fmt_bytes(c.totals.unread_bytes or 0)


def _cached_cell(c: CaseReport) -> str:
    """Bytes of the copies a module keeps across steps (not in ``saved``) of an ok case."""
    return fmt_bytes(c.totals.cached_bytes) if c.status == "ok" else "-"


def _row(e: _Entry, compare: bool, show_path: bool, unread: bool = False, cached: bool = False) -> str:
    c, d = e.case, e.diff
    cells = [md_escape(_label(c)), _status_cell(e)]
    if compare:
        assert d is not None
        cur = d.current if d.current is not None and d.current.status == "ok" else None
        base = d.baseline if d.baseline is not None and d.baseline.status == "ok" else None
        delta = d.saved_delta
        pct = None
        if delta is not None and base is not None and base.totals.saved_bytes:
            pct = 100.0 * delta / base.totals.saved_bytes
        elif delta == 0:
            pct = 0.0
        cells += [
            fmt_bytes(cur.totals.saved_bytes) if cur else "-",
            fmt_bytes(base.totals.saved_bytes) if base else "-",
            fmt_delta(delta) if delta is not None else "-",
            fmt_pct(pct),
        ]
    else:
        cells += [
            fmt_bytes(c.totals.saved_bytes) if c.status == "ok" else "-",
            str(len(c.rows)) if c.status == "ok" else "-",
        ]
    if unread:
        cells.append(_unread_cell(c))
    if cached:
        cells.append(_cached_cell(c))
    if show_path:
        cells.append(_path_cell(e))  # fixed words only
    cells.append(_kinds_cell(c, d))
    return "| " + " | ".join(cells) + " |"


def _table(entries: list[_Entry], compare: bool, show_path: bool) -> list[str]:
    if compare:
        head = ["case", "status", "saved now", "baseline", "delta", "delta %"]
        align = ["---", "---", "---:", "---:", "---:", "---:"]
    else:
        head = ["case", "status", "saved", "rows"]
        align = ["---", "---", "---:", "---:"]
    unread = any(e.case.unread is not None for e in entries)
    if unread:
        head.append("never read")
        align.append("---:")
    cached = any(e.case.status == "ok" and e.case.totals.cached_bytes for e in entries)
    if cached:  # copies a module keeps across steps (TE's cached FP8 weights), not in saved
        head.append("cached")
        align.append("---:")
    if show_path:
        head.append("path")
        align.append("---")
    head.append("by kind")
    align.append("---")
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    lines += [_row(e, compare, show_path, unread, cached) for e in entries]
    return lines


def _finding_item(f: Finding, case: CaseReport) -> str:
    return f"- {md_escape(_label(case))}: {md_escape(f.text)}"


def _findings(g: _Group) -> list[str]:
    sections: dict[str, list[str]] = {"Regressions": [], "Improvements": [], "Other changes": []}
    for e in g.entries:
        if e.diff is None:
            continue
        for f in e.diff.findings:
            title = "Regressions" if f.failing else ("Improvements" if f.direction == "better" else "Other changes")
            sections[title].append(_finding_item(f, e.case))
    out: list[str] = []
    for title, items in sections.items():
        if items:
            out += ["", f"**{title}**", "", *items]
    return out


def _group_delta(g: _Group) -> int | None:
    ds = [e.diff.saved_delta for e in g.entries if e.diff is not None and e.diff.saved_delta is not None]
    return sum(ds) if ds else None


def _block(
    g: _Group,
    compare: bool,
    show_path: bool,
    *,
    findings: bool = True,
    only_changed: bool = False,
    max_rows: int | None = None,
) -> str:
    icon = (
        "❌"
        if g.failing
        else "✅"
        if g.checked
        else "⏭️"
        if all(e.case.status == "skipped" for e in g.entries)
        else "➖"
    )
    n = len(g.entries)
    summary = f"{icon} <b>{html_escape(g.target)} · {html_escape(g.recipe)}</b> — {n} case{'s' if n != 1 else ''}"
    if not g.checked and not g.failing:
        summary += ", not checked"
    if compare:
        d = _group_delta(g)
        if d is not None:
            summary += f", saved {html_escape(fmt_delta(d))}"
        bad = sum(1 for e in g.entries if e.failing)
        if bad:
            summary += f", {bad} regressed"
    else:
        errors = sum(1 for e in g.entries if e.case.status == "error")
        skipped = sum(1 for e in g.entries if e.case.status == "skipped")
        if errors:
            summary += f", {errors} error{'s' if errors != 1 else ''}"
        if skipped:
            summary += f", {skipped} skipped"
        estimated = sum(1 for e in g.entries if e.case.status == "ok" and e.case.execution == "estimated")
        if estimated:
            summary += f", {estimated} estimated"
    entries = [e for e in g.entries if e.changed] if only_changed else list(g.entries)
    omitted = len(g.entries) - len(entries)
    if max_rows is not None and len(entries) > max_rows:
        omitted += len(entries) - max_rows
        entries = entries[:max_rows]
    lines = ["<details open>" if g.failing else "<details>", f"<summary>{summary}</summary>", ""]
    if entries:
        lines += _table(entries, compare, show_path)
    if omitted:
        what = "unchanged " if only_changed and max_rows is None else ""
        lines += ["", f"_{omitted} {what}case{'s' if omitted != 1 else ''} not shown._"]
    if findings and compare:
        lines += _findings(g)
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _not_checked(report: Report, comparison: Comparison | None) -> str:
    """`` · not checked: nvfp4, mxfp8``: the recipes of which no case ran the audited code."""
    names = [g.recipe for g in _groups(report, comparison) if not g.checked and not g.failing]
    return f" · not checked: {md_escape(', '.join(names))}" if names else ""


def _case_notes(report: Report) -> list[str]:
    """What a case's target says besides its numbers (an estimate that answers because TE's
    forward failed, and why), one quoted line each (clipped), then a blank line; none: nothing."""
    lines = []
    for case in report.cases:
        owner = owner_of(case.spec)
        for note in owner.notes(case) if owner is not None else ():
            lines.append(f"> ℹ️ {md_escape(case.id)}: {md_escape(clip(note))}")
    return [*lines, ""] if lines else []


def _verdict(report: Report, comparison: Comparison | None) -> str:
    return _verdict_text(report, comparison) + _not_checked(report, comparison)


def _verdict_text(report: Report, comparison: Comparison | None) -> str:
    if comparison is None:
        n = len(report.cases)
        ok = [c for c in report.cases if c.status == "ok"]
        errors = sum(1 for c in report.cases if c.status == "error")
        skipped = sum(1 for c in report.cases if c.status == "skipped")
        total = sum(c.totals.saved_bytes for c in ok)
        incomplete = sum(1 for c in ok if not c.complete)
        estimated = sum(1 for c in ok if c.execution == "estimated")
        answered = len(ok) > estimated  # what `run` exits 4 without (nothing measured or emulated)
        icon = "❌" if errors or incomplete or not answered else "✅"
        parts = [
            f"{n} case{'s' if n != 1 else ''}",
            f"{len(ok)} ok" + (f" ({estimated} estimated)" if estimated else ""),
        ]
        if not answered:
            parts.insert(0, "nothing measured or emulated")
        if incomplete:
            parts.append(f"{incomplete} incomplete")
        if skipped:
            parts.append(f"{skipped} skipped")
        if errors:
            parts.append(f"{errors} error{'s' if errors != 1 else ''}")
        return f"{icon} **memaudit**: {', '.join(parts)} · saved bytes {fmt_bytes(total)} in total (no baseline)"
    cmp = comparison
    delta = (
        f"saved bytes {fmt_delta(cmp.saved_delta)} ({fmt_bytes(cmp.baseline_saved)} → {fmt_bytes(cmp.current_saved)})"
    )
    n = len(cmp.compared)
    over = f"over {n} compared case{'s' if n != 1 else ''}"
    if cmp.regressed:
        fails = len(cmp.failures)
        cases = sum(1 for c in cmp.cases if c.regressed)
        head = f"{cases} case{'s' if cases != 1 else ''} regressed ({fails} finding{'s' if fails != 1 else ''})"
        if not fails:
            head = "environment differs from the baseline (strict)"
        if cmp.nothing_compared:
            head = "nothing compared: no case is ok in both reports"
        return f"❌ **memaudit: {head}** · {delta} {over}"
    text = f"✅ **memaudit: no regression** · {delta} {over}"
    imp = len(cmp.improvements)
    if imp:
        text += f" · {imp} improvement{'s' if imp != 1 else ''}"
    return text


def _footer(report: Report, comparison: Comparison | None) -> str:
    env = report.environment or {}
    bits = []
    if comparison is not None:
        bits += [f"tolerance {comparison.tolerance}", f"fail on {comparison.fail_on}"]
    if report.memaudit:
        bits.append(f"memaudit {report.memaudit}")
    emulated = [c for c in report.cases if c.emulation is not None]
    if emulated:
        archs = sorted({c.emulation.label() for c in emulated if c.emulation is not None})
        hosts = sorted({h for c in emulated if c.emulation is not None and (h := c.emulation.host())})
        on = f" on {', '.join(hosts)}" if hosts else ""
        bits.append(
            f"{len(emulated)} of {len(report.cases)} cases {', '.join(archs)}{on} (TE's real Python with stand-in "
            "kernels; not measured)"
        )
    estimated = [c for c in report.cases if c.execution == "estimated"]
    if estimated:
        bits.append(f"{len(estimated)} of {len(report.cases)} cases estimated (TE's layout rules; not measured)")
    named = [
        ("device_class", None),
        ("torch", "torch"),
        *((lib.key, lib.short) for lib in libraries()),
        ("cuda", "CUDA"),
    ]
    for key, name in named:
        v = env.get(key)
        if v:
            bits.append(f"{name} {v}" if name else str(v))
    return f"<sub>{html_escape(' · '.join(bits))}</sub>\n" if bits else ""


def _ranks_block(v: RankView) -> str:
    """One planned case of a merged report: a column per rank (up to PER_RANK_MAX), else the
    worst rank and the spread; the worst rank's cell in bold."""
    icon = "⚠️" if not v.ok or any(not r.identical for r in v.summary.replicas) else "⚖️"
    lines = ["<details open>" if not v.ok else "<details>", f"<summary>{icon} {html_escape(v.title())}</summary>", ""]
    ranks = v.summary.ranks
    if v.lines and len(ranks) <= PER_RANK_MAX:
        lines += [
            "| what | " + " | ".join(f"r{r}" for r in ranks) + " | max/mean |",
            "|---|" + "--:|" * (len(ranks) + 1),
        ]
        for what, sp in v.lines:
            bold = sp.imbalance not in (None, 1.0)
            cells = [
                f"**{fmt_bytes(x)}**" if bold and r == sp.worst_rank else fmt_bytes(x)
                for r, x in zip(ranks, sp.per_rank, strict=True)
            ]
            lines.append(f"| {md_escape(what)} | " + " | ".join(cells) + f" | {imbalance(sp)} |")
    elif v.lines:
        lines += ["| what | worst | max | mean | min | max/mean |", "|---|--:|--:|--:|--:|--:|"]
        for what, sp in v.lines:
            lines.append(
                f"| {md_escape(what)} | r{sp.worst_rank} | {fmt_bytes(sp.max)} | {fmt_bytes(round(sp.mean))} | "
                f"{fmt_bytes(sp.min)} | {imbalance(sp)} |"
            )
    lines += ["", *(f"- {md_escape(n)}" for n in v.notes()), "", "</details>", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Public entry point


def md_code(text: str) -> str:
    """``text`` as an inline code span (a command, a path), neutralised; plain escaped text where
    it holds a backtick (which would end the span)."""
    text = neutralize(" ".join(text.split()))
    return f"`{text}`" if "`" not in text else md_escape(text)


def render_markdown(
    report: Report,
    comparison: Comparison | None = None,
    *,
    name: str = "default",
    limit: int = GITHUB_LIMIT,
    notes: Sequence[str] = (),
) -> str:
    """Render ``report`` (and its comparison against a baseline, if any) as a PR comment;
    ``notes`` (markdown lines, escaped by the caller) go above the footer of a comparison."""
    if comparison is not None:
        return render_compare_markdown(report, comparison, name=name, limit=limit, notes=notes)
    head = [marker(name), _verdict(report, comparison), ""]
    head += unread_markdown(report.cases, md_escape)  # the buffers backward never read, first
    head += _case_notes(report)
    head += [_ranks_block(v) for v in rank_views(report)]  # a merged report's ranks, side by side
    if comparison is not None and comparison.env_warnings:
        strict = " (a failure under --strict-env)" if comparison.strict_env else ""
        head += [f"> ⚠️ Environment differs from the baseline{strict}:"]
        head += [f"> - {md_escape(w)}" for w in comparison.env_warnings]
        head.append("")
    compare = comparison is not None
    groups = _groups(report, comparison)
    show_path = any(e.case.fused is not None for g in groups for e in g.entries)
    if comparison is not None:
        show_path = show_path or any(d.baseline is not None and d.baseline.fused is not None for d in comparison.cases)
    footer = _footer(report, comparison)
    if not groups:
        head.append("_No cases._\n")

    def assemble(blocks: list[str], note: str | None) -> str:
        parts = ["\n".join(head)]
        if note:
            parts.append(note + "\n")
        parts += blocks
        if footer:
            parts.append(footer)
        return "\n".join(parts)

    text = assemble([_block(g, compare, show_path) for g in groups], None)
    if _size(text) <= limit:
        return text

    def cut_note(what: str) -> str:
        return (
            f"> ✂️ Detail was cut to stay under GitHub's {limit:,}-character comment limit: {what}. "
            "The full comparison is in `memaudit compare` output and the JSON report."
        )

    steps = [
        ("lists of findings left out", {"findings": False}),
        ("lists of findings and unchanged cases left out", {"findings": False, "only_changed": True}),
    ]
    for what, kw in steps:
        text = assemble([_block(g, compare, show_path, **kw) for g in groups], cut_note(what))
        if _size(text) <= limit:
            return text

    # Last resort: the most important groups first, as many as fit; the next one with fewer rows.
    order = sorted(range(len(groups)), key=lambda i: (not groups[i].failing, not groups[i].changed, i))
    kept: list[str] = []
    shown = 0
    budget_note = cut_note(f"only {len(groups)} of {len(groups)} target/recipe groups shown, unchanged cases left out")
    for i in order:
        block = _block(groups[i], compare, show_path, findings=False, only_changed=True)
        if _size(assemble([*kept, block], budget_note)) <= limit:
            kept.append(block)
            shown += 1
            continue
        changed = [e for e in groups[i].entries if e.changed]
        lo, hi = 0, len(changed)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            trial = _block(groups[i], compare, show_path, findings=False, only_changed=True, max_rows=mid)
            if _size(assemble([*kept, trial], budget_note)) <= limit:
                lo = mid
            else:
                hi = mid - 1
        if lo > 0:
            kept.append(_block(groups[i], compare, show_path, findings=False, only_changed=True, max_rows=lo))
            shown += 1
        break
    note = cut_note(f"only {shown} of {len(groups)} target/recipe groups shown, unchanged cases left out")
    text = assemble(kept, note)
    if _size(text) > limit:  # even the header does not fit: cut at a line boundary
        tail = "\n" + note + "\n"
        room = limit - _size(tail)
        out = []
        used = 0
        for line in text.split("\n"):
            n = _size(line) + 1
            if used + n > room:
                break
            out.append(line)
            used += n
        text = "\n".join(out) + tail
    return text


# --------------------------------------------------------------------------------------------
# The compare comment: the reviewer's view


def exact(n: int, *, signed: bool = False) -> str:
    """Exact bytes with thousands separators and, from 1 KiB, the binary unit:
    ``127,401,984 B (121.5 MiB)``; signed: ``+127,401,984 B (+121.5 MiB)``."""
    text = f"{n:+,} B" if signed and n else f"{n:,} B"
    if abs(n) >= 1024:
        text += f" ({fmt_delta(n) if signed else fmt_bytes(n)})"
    return text


_TABLE_METRICS = ("saved_bytes", "operand", "kind", "orientation", "rows")
"""Findings the buffer table and the case line show; the others (status, path, ...) are listed."""


def _section(d: CaseDiff) -> str:
    if d.regressed:
        return "regressions"
    if not d.changed:
        return "unchanged"
    if any(f.direction == "better" for f in d.findings) and not any(f.direction == WORSE for f in d.findings):
        return "improvements"
    return "other"


def _case_icon(d: CaseDiff, section: str) -> str:
    c = d.current or d.baseline
    assert c is not None
    if section == "regressions":
        return "❌"
    if c.status == "skipped":
        return "⏭️"
    if c.status == "error":
        return "⚠️"
    if d.state == "missing":
        return "❔"
    if c.status == "ok" and c.execution not in ("measured", "emulated"):
        return "➖"  # an estimate: nothing was checked
    return "✅" if section != "other" else "🔸"


def _buffer_order(d: CaseDiff, sign: int) -> list[RowDiff]:
    """Rows grouped by operand (the operand whose rows moved most first), then by delta."""

    def operand(rd: RowDiff) -> str:
        r = rd.current or rd.baseline
        return (r.operand or r.slot or "") if r is not None else ""

    per_operand: dict[str, int] = {}
    for rd in d.row_diffs:
        per_operand[operand(rd)] = per_operand.get(operand(rd), 0) + sign * rd.delta
    return sorted(d.row_diffs, key=lambda rd: (-per_operand[operand(rd)], operand(rd), -sign * rd.delta, rd.key))


def _shape_cell(rd: RowDiff) -> str:
    b, c = rd.baseline, rd.current
    if b is not None and c is not None and (b.shape != c.shape or b.dtype != c.dtype):
        return f"{fmt_shape(b.shape)} {md_escape(b.dtype)} → {fmt_shape(c.shape)} {md_escape(c.dtype)}"
    r = c or b
    assert r is not None
    return f"{fmt_shape(r.shape)} {md_escape(r.dtype)}"


def _buffer_table(d: CaseDiff, sign: int, max_rows: int | None) -> list[str]:
    rows = _buffer_order(d, sign)
    shown = rows if max_rows is None else rows[:max_rows]
    lines = [
        "| operand | kind | orientation | format | shape | before | after | Δ |",
        "|---|---|---|---|---|---:|---:|---:|",
    ]
    for rd in shown:
        r = rd.current or rd.baseline
        assert r is not None
        kind = r.kind + ("" if not r.notes() else f" ({', '.join(r.notes())})")
        before = exact(rd.baseline.bytes) if rd.baseline is not None else "— (added)"
        after = exact(rd.current.bytes) if rd.current is not None else "— (removed)"
        delta = exact(rd.delta, signed=True)
        cells = [
            md_escape(r.operand or r.slot or f"row {r.index}"),
            md_escape(kind),
            md_escape(r.orientation or "-"),
            md_escape(r.format),
            _shape_cell(rd),
            before,
            after,
            f"**{delta}**" if rd.delta else delta,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if len(shown) < len(rows):
        lines += [
            "",
            f"_{len(rows) - len(shown)} more changed buffer{'s' if len(rows) - len(shown) != 1 else ''} not shown._",
        ]
    return lines


def _finding_bytes(f: Finding) -> str:
    if f.numeric and f.is_bytes:
        return (
            f"{md_escape(f.label)}: {exact(f.baseline)} → {exact(f.current)} "
            f"({exact(f.current - f.baseline, signed=True)})"
        )
    if f.numeric:
        return f"{md_escape(f.label)}: {f.baseline:,} → {f.current:,} ({f.current - f.baseline:+,})"
    return md_escape(f.text)


def _case_block(d: CaseDiff, section: str, *, findings: bool, max_rows: int | None) -> list[str]:
    c = d.current or d.baseline
    assert c is not None
    head = f"{_case_icon(d, section)} **{md_escape(c.id)}**"
    label = execution_label(c)
    bits = [md_escape(label)] if label is not None else []
    path = _path_cell(_Entry(c, d))
    if path != "-":
        bits.append(path)
    lines = [head + (" · " + " · ".join(bits) if bits else ""), ""]
    base = d.baseline if d.baseline is not None and d.baseline.status == "ok" else None
    cur = d.current if d.current is not None and d.current.status == "ok" else None
    if d.saved_delta is not None and base is not None and cur is not None:
        pct = fmt_pct(
            100.0 * d.saved_delta / base.totals.saved_bytes
            if base.totals.saved_bytes
            else (0.0 if not d.saved_delta else None)
        )
        lines += [
            f"saved {exact(base.totals.saved_bytes)} → {exact(cur.totals.saved_bytes)}: "
            f"**{exact(d.saved_delta, signed=True)}**, {pct} · rows {len(base.rows):,} → {len(cur.rows):,}",
            "",
        ]
    else:
        lines += [_status_text(_Entry(c, d)), ""]
    if d.row_diffs:
        lines += _buffer_table(d, -1 if section == "improvements" else 1, max_rows) + [""]
    events = [f for f in d.findings if f.metric not in _TABLE_METRICS or not d.row_diffs]
    lines += [f"- {_finding_bytes(f)}" for f in events]
    if events:
        lines.append("")
    measured = [f for f in d.findings if f.metric in _TABLE_METRICS and d.row_diffs]
    if findings and measured:
        lines += [
            "<details>",
            f"<summary>what the gate compared: {len(measured)} finding{'s' if len(measured) != 1 else ''}</summary>",
            "",
        ]
        lines += [f"- {'❌ ' if f.failing else ''}{_finding_bytes(f)}" for f in measured]
        lines += ["", "</details>", ""]
    return lines


def _unchanged_block(diffs: list[CaseDiff], rows: bool) -> list[str]:
    n = len(diffs)
    recipes: dict[str, list[CaseDiff]] = {}
    for d in diffs:
        recipes.setdefault(d.recipe, []).append(d)
    per = []
    for recipe, ds in recipes.items():
        entries = [_Entry(d.current or d.baseline, d) for d in ds]  # type: ignore[arg-type]
        checked = [e for e in entries if e.checked]
        emulated = " emulated" if checked and all(e.case.execution == "emulated" for e in checked) else ""
        per.append(f"{recipe} {'✅' + emulated if checked else '(not checked)'}")
    summary = f"Unchanged: {n} case{'s' if n != 1 else ''} ({', '.join(per)})"
    lines = ["<details>", f"<summary>{html_escape(summary)}</summary>", ""]
    if rows:
        lines += ["| case | status | saved | path |", "|---|---|---:|---|"]
        for d in diffs:
            c = d.current or d.baseline
            assert c is not None
            e = _Entry(c, d)
            saved = exact(c.totals.saved_bytes) if c.status == "ok" else "-"
            lines.append(f"| {md_escape(c.id)} | {_status_cell(e)} | {saved} | {_path_cell(e)} |")
    else:
        lines.append(f"_{n} unchanged case{'s' if n != 1 else ''} not listed._")
    lines += ["", "</details>", ""]
    return lines


def _headline(report: Report, cmp: Comparison) -> str:
    n = len(cmp.compared)
    total = f"saved {exact(cmp.saved_delta, signed=True)} over {n} compared case{'s' if n != 1 else ''}"
    failing = [d for d in cmp.cases if d.regressed]
    worst: CaseDiff | None
    if failing:
        worst = sorted(failing, key=lambda d: (d.saved_delta is not None, -(d.saved_delta or 0)))[0]
    else:
        grew = [d for d in cmp.compared if (d.saved_delta or 0) > 0]
        worst = max(grew, key=lambda d: d.saved_delta or 0) if grew else None
    if worst is not None:
        what = (
            exact(worst.saved_delta, signed=True)
            if worst.saved_delta is not None
            else md_escape(next((f.text for f in worst.findings if f.failing), "changed"))
        )
        total += f" · worst: {md_escape(worst.id)} {what}"
    if cmp.regressed:
        cases = len(failing)
        head = f"{cases} case{'s' if cases != 1 else ''} regressed"
        if not cmp.failures:
            head = "environment differs from the baseline (strict)"
        if cmp.nothing_compared:
            head = "nothing compared: no case is ok in both reports"
        text = f"❌ **memaudit: {head}** · {total}"
    else:
        text = f"✅ **memaudit: no regression** · {total}"
        imp = sum(1 for d in cmp.cases if _section(d) == "improvements")
        if imp:
            text += f" · {imp} improved"
    return text + _not_checked(report, cmp)


def render_compare_markdown(
    report: Report, cmp: Comparison, *, name: str = "default", limit: int = GITHUB_LIMIT, notes: Sequence[str] = ()
) -> str:
    """The PR comment for a comparison: a headline (total delta, worst case, verdict), then the
    regressed cases, the improved ones and other changes, each with its table of changed buffers
    in exact bytes, then the unchanged cases collapsed; cut to ``limit`` from the end."""
    head = [marker(name), _headline(report, cmp), ""]
    head += unread_markdown(report.cases, md_escape)  # the buffers backward never read, first
    head += _case_notes(report)
    head += [_ranks_block(v) for v in rank_views(report)]
    if cmp.env_warnings:
        strict = " (a failure under --strict-env)" if cmp.strict_env else ""
        head += [
            f"> ⚠️ Environment differs from the baseline{strict}:",
            *(f"> - {md_escape(w)}" for w in cmp.env_warnings),
            "",
        ]
    sections: dict[str, list[CaseDiff]] = {"regressions": [], "improvements": [], "other": [], "unchanged": []}
    for d in cmp.cases:
        sections[_section(d)].append(d)
    sections["regressions"].sort(key=lambda d: (d.saved_delta is not None, -(d.saved_delta or 0)))
    sections["improvements"].sort(key=lambda d: d.saved_delta or 0)
    titles = {"regressions": "❌ Regressions", "improvements": "📉 Improvements", "other": "🔸 Other changes"}
    footer = _footer(report, cmp)
    if notes:
        footer = "\n".join(notes) + "\n\n" + footer
    if not cmp.cases:
        head.append("_No cases._\n")

    def build(
        findings: bool, max_rows: int | None, unchanged_rows: bool, max_cases: int | None, note: str | None
    ) -> str:
        parts = ["\n".join(head)]
        if note:
            parts.append(note + "\n")
        shown = 0
        for key, title in titles.items():
            ds = sections[key]
            if not ds:
                continue
            if max_cases is not None and shown >= max_cases:
                break
            lines = [f"### {title} · {len(ds)} case{'s' if len(ds) != 1 else ''}", ""]
            for d in ds:
                if max_cases is not None and shown >= max_cases:
                    lines += [f"_{len(ds) - ds.index(d)} more case(s) not shown._", ""]
                    break
                lines += _case_block(d, key, findings=findings, max_rows=max_rows)
                shown += 1
            parts.append("\n".join(lines))
        if sections["unchanged"] and max_cases is None:
            parts.append("\n".join(_unchanged_block(sections["unchanged"], unchanged_rows)))
        if footer:
            parts.append(footer)
        return "\n".join(parts)

    text = build(True, None, True, None, None)
    if _size(text) <= limit:
        return text

    def cut_note(what: str) -> str:
        return (
            f"> ✂️ Detail was cut to stay under GitHub's {limit:,}-character comment limit: {what}. "
            "The full comparison is in `memaudit compare -v` output and the JSON report."
        )

    steps = [
        ("lists of findings left out", (False, None, True)),
        ("lists of findings and the unchanged cases' table left out", (False, None, False)),
        ("only the 8 largest changed buffers of each case shown", (False, 8, False)),
    ]
    for what, (findings, rows, unchanged) in steps:
        text = build(findings, rows, unchanged, None, cut_note(what))
        if _size(text) <= limit:
            return text
    changed = sum(len(v) for k, v in sections.items() if k != "unchanged")
    lo, hi = 0, changed
    while lo < hi:  # as many changed cases as fit, regressions first
        mid = (lo + hi + 1) // 2
        if (
            _size(build(False, 8, False, mid, cut_note(f"only the first {mid} of {changed} changed cases shown")))
            <= limit
        ):
            lo = mid
        else:
            hi = mid - 1
    text = build(False, 8, False, lo, cut_note(f"only the first {lo} of {changed} changed cases shown"))
    if _size(text) > limit:  # even the head does not fit: cut at a line boundary
        tail = "\n" + cut_note("cut at a line") + "\n"
        out, used = [], 0
        for line in text.split("\n"):
            if used + _size(line) + 1 > limit - _size(tail):
                break
            out.append(line)
            used += _size(line) + 1
        text = "\n".join(out) + tail
    return text

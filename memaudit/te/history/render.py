"""A TE history (:mod:`memaudit.te.history.model`) as markdown, a rich table, and a figure of
saved bytes per version."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memaudit.render.markdown import md_escape as escape_md
from memaudit.render.plots import fmt_axis_bytes
from memaudit.te.machine.suspected import known_failure
from memaudit.units import fmt_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.table import Table

    from memaudit.te.history.bisect import BisectResult
    from memaudit.te.history.model import History


_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+()=/-]*")


def label(text: Any) -> str:
    """A version label or case id as markdown: as it is where it holds nothing markdown reads
    (``2.17.1``, ``main``), else escaped."""
    s = str(text)
    return s if _PLAIN.fullmatch(s) else escape_md(s)


def _cell_text(cell: Any) -> str:
    if known_failure(cell.status, cell.reason) is not None:
        return "xfail (TE bug)"
    if cell.status != "ok":
        return cell.status
    unread = "" if getattr(cell, "unread_bytes", None) is None else f" ({fmt_bytes(cell.unread_bytes)} never read)"
    return f"{fmt_bytes(cell.saved_bytes)} / {cell.rows}{unread}"


def _case_label(c: Any) -> str:
    s = c.shape
    return (
        f"{c.recipe} {'fused' if c.fused else 'unfused'} G={c.groups} T={s.get('tokens')} H={s.get('hidden')} "
        f"F={s.get('ffn')}"
    )


def _version_line(v: Any) -> str:
    src = v.source
    where = {"release": "wheel", "git": "git", "local": "local tree", "installed": "installed"}.get(
        src.get("kind"), src.get("kind", "")
    )
    bits = [f"**{label(v.label)}**", escape_md(where), f"version {label(src.get('version', '?'))}"]
    if src.get("commit"):
        bits.append(
            f"commit {src['commit'][:12]} ({escape_md(str(src.get('date')))}): {escape_md(str(src.get('subject')))}"
        )
    if src.get("placeholders"):
        bits.append(f"compatibility placeholders: {escape_md(', '.join(src['placeholders']))}")
    if v.error:
        bits.append(f"**did not run**: {escape_md(v.error)}")
    return "- " + "; ".join(bits)


def history_markdown(h: History, *, title: str = "TE's saved state across its history") -> str:
    """The history as GitHub markdown: versions, a table of saved bytes / rows per case and
    version, the changes between neighbours, and the bisects."""
    out = [f"# {escape_md(title)}", ""]
    out.append(
        f"Emulated {escape_md(h.arch)} (TE's real Python, stand-in kernels, fake CUDA or a GPU); memaudit "
        f"{escape_md(h.memaudit)}. Each cell: saved bytes / rows (what the forward saved for backward); "
        "`error` and `skipped` cells give their reason below."
    )
    out += ["", "## Versions", ""]
    out += [_version_line(v) for v in h.versions]
    out += ["", "## Saved bytes / rows per version", ""]
    labels = [v.label for v in h.versions]
    out.append("| case | " + " | ".join(label(x) for x in labels) + " |")
    out.append("|---|" + "---:|" * len(labels))
    for c in h.cases:
        cells = []
        for i, cell in enumerate(c.cells):
            text = _cell_text(cell)
            if i and c.cells[i - 1].status == cell.status == "ok" and any(ch.after == cell.version for ch in c.changes):
                text = f"**{text}**"
            cells.append(text)
        out.append(f"| {label(_case_label(c))} | " + " | ".join(cells) + " |")
    out += ["", "Bold: the saved state changed from the version to its left.", ""]
    out += ["## Changes between neighbours", ""]
    changed = h.changed()
    if not changed:
        out.append("None: every case saved the same in every version.")
    for c, ch in changed:
        out.append(f"- {label(_case_label(c))}, {label(ch.before)} → {label(ch.after)}: {escape_md(ch.text)}")
    errors = [(c, cell) for c in h.cases for cell in c.cells if cell.status not in ("ok",)]
    if errors:
        out += ["", "## Cells that did not run", ""]
        for c, cell in errors:
            status = (
                "expected failure (a known, suspected TE bug)"
                if known_failure(cell.status, cell.reason)
                else cell.status
            )
            out.append(
                f"- {label(_case_label(c))} at {label(cell.version)}: {status}: "
                f"{escape_md((cell.reason or '').splitlines()[0] if cell.reason else '')}"
            )
    if h.bisects:
        out += ["", "## Which commit made each change (`memaudit te-history --bisect`)", ""]
        out += bisect_table(h.bisects)
    if h.branch_points:
        out += [
            "",
            "## Releases and their branch points on main",
            "",
            "A bisect runs on main's first-parent line, where a release stands at its branch point. Cases whose "
            "saved state there is not the release's were changed on the release branch (a cherry-pick), which "
            "main's line cannot name:",
            "",
        ]
        for bp in h.branch_points:
            diff = bp["cases_differing_from_the_release"]
            out.append(
                f"- {label(bp['version'])} at `{bp['commit'][:12]}`: "
                + (
                    f"{len(diff)} cases differ: {', '.join(label(c) for c in diff)}"
                    if diff
                    else "every case as the release"
                )
            )
    return "\n".join(out) + "\n"


def bisect_table(bisects: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown table rows of bisect results (their ``to_dict`` form)."""
    out = [
        "| versions | case (and the cases it stands for) | range on main | first changed commit | PR | what changed | "
        "tested |",
        "|---|---|---|---|---|---|---:|",
    ]
    for b in bisects:
        pair = " → ".join(label(x) for x in b.get("pair", [])) or ""
        others = [c for c in b.get("cases", []) if c != b["case"]]
        case = label(b["case"]) + (f" (+{len(others)} more)" if others else "")
        if b.get("not_bisected"):
            out.append(f"| {pair} | {case} | | not bisected: {escape_md(b['not_bisected'])} | | | |")
            continue
        if b.get("first"):
            first = f"`{b['first'][:12]}` {escape_md(str(b.get('subject')))} ({escape_md(str(b.get('date')))})"
            pr = f"#{b['pr']}" if b.get("pr") else "none named"
        else:
            first = "not found: " + escape_md(", ".join(c[:12] for c in b.get("candidates", [])))
            pr = ""
        bef, aft = b.get("before") or {}, b.get("after") or {}
        what = f"{_state_text(bef)} → {_state_text(aft)}"
        rows = b.get("changes") or []
        if rows:
            what += ": " + escape_md(", ".join(f"{r['key']} ({r['delta']:+,} B)" for r in rows[:6]))
            if len(rows) > 6:
                what += f" and {len(rows) - 6} more"
        out.append(
            f"| {pair} | {case} | `{b['good'][:12]}..{b['bad'][:12]}` ({b['commits']} commits) | {first} | {pr} | "
            f"{what} | {len(b.get('probes', []))} |"
        )
    return out


def _state_text(s: dict[str, Any]) -> str:
    if s.get("status") != "ok":
        return f"{s.get('status')}"
    fused = "" if s.get("fused") is None else (" fused" if s["fused"] else " unfused")
    unread = "" if s.get("unread_bytes") is None else f", {s['unread_bytes']:,} B never read"
    return f"{fmt_bytes(s.get('saved_bytes'))} / {s.get('rows')} rows{fused}{unread}"


def bisect_markdown(result: BisectResult) -> str:
    """One bisect's answer as markdown: the commit, its PR, what changed, and every tested commit."""
    d = result.to_dict()
    out = [f"# Bisect: {escape_md(d['case'])}", ""]
    out += bisect_table([d])
    out += ["", "| commit | verdict | status | saved bytes | rows |", "|---|---|---|---:|---:|"]
    for p in d["probes"]:
        saved = "" if p["saved_bytes"] is None else f"{p['saved_bytes']:,}"
        rows = "" if p["rows"] is None else str(p["rows"])
        out.append(f"| `{p['commit'][:12]}` | {p['verdict']} | {escape_md(p['status'])} | {saved} | {rows} |")
    return "\n".join(out) + "\n"


def history_table(h: History) -> Table:
    """A rich table of saved bytes / rows per case and version."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title="saved bytes / rows per TE version", title_justify="left")
    t.add_column("case")
    for v in h.versions:
        t.add_column(Text(v.label), justify="right")
    for c in h.cases:
        cells = []
        for i, cell in enumerate(c.cells):
            changed = i and any(ch.after == cell.version for ch in c.changes)
            bad = cell.status != "ok" and known_failure(cell.status, cell.reason) is None
            cells.append(Text(_cell_text(cell), style="bold yellow" if changed else ("red" if bad else "")))
        t.add_row(Text(_case_label(c)), *cells)
    return t


def history_figure(h: History) -> Figure:
    """Saved bytes per version: one panel per shape, one line per (recipe, fused, G); an error
    cell is a gap, listed in the footnote."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, MultipleLocator

    MiB = 1024**2

    shapes = sorted({(c.shape.get("tokens", 0), c.shape.get("hidden", 0), c.shape.get("ffn", 0)) for c in h.cases})
    labels = [v.label for v in h.versions]
    fig = Figure(figsize=(max(7.0, 1.1 * len(labels) + 3), 4.2 * len(shapes)), layout="constrained")
    axes = fig.subplots(len(shapes), 1, squeeze=False)[:, 0]
    styles = {"nvfp4": "tab:purple", "mxfp8": "tab:blue", "fp8-current": "tab:green"}
    notes = []
    for ax, shape in zip(axes, shapes, strict=True):
        for c in [c for c in h.cases if (c.shape.get("tokens"), c.shape.get("hidden"), c.shape.get("ffn")) == shape]:
            ys = [cell.saved_bytes if cell.status == "ok" else None for cell in c.cells]
            xs = list(range(len(labels)))
            ax.plot(
                xs,
                [float("nan") if y is None else y for y in ys],
                marker="o" if c.groups == 1 else "s",
                linestyle="-" if c.fused else "--",
                color=styles.get(c.recipe, "tab:gray"),
                label=f"{c.recipe} {'fused' if c.fused else 'unfused'} G={c.groups}",
            )
            for cell in c.cells:
                if cell.status != "ok":
                    notes.append(f"{_case_label(c)} @ {cell.version}: {cell.status}")
        top = max(
            (
                cell.saved_bytes or 0
                for c in h.cases
                for cell in c.cells
                if (c.shape.get("tokens"), c.shape.get("hidden"), c.shape.get("ffn")) == shape
            ),
            default=0,
        )
        step = MiB  # a power of two MiB: about six labelled lines from 0 to the largest
        while step * 6 < top:
            step *= 2
        ax.set_ylim(0, max(top * 1.08, step))
        ax.yaxis.set_major_locator(MultipleLocator(step))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt_axis_bytes(v)))
        ax.xaxis.set_major_locator(FixedLocator(list(range(len(labels)))))
        ax.set_xticklabels(labels, rotation=20, ha="right")
        ax.set_ylabel("saved bytes")
        ax.set_title(f"T={shape[0]:,} H={shape[1]:,} F={shape[2]:,}", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=8, loc="outside right upper")  # one legend: every panel has the same lines
    fig.suptitle(f"Saved bytes per TE version (emulated {h.arch}, forward)", fontsize=11)
    if notes:  # as the figure's x label, so that the layout keeps room for it under the axes
        shown = notes[:8] + ([f"... and {len(notes) - 8} more cells that did not run"] if len(notes) > 8 else [])
        fig.supxlabel("no point (did not run): " + "; ".join(shown), fontsize=7, x=0.01, ha="left", wrap=True)
    return fig

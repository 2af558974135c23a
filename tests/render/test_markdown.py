"""The PR comment: tested structurally, by parsing it with markdown-it-py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
from _reports import (
    REF_BF16,
    TE_BF16,
    TE_FP8,
    TE_NVFP4,
    bf16_rows,
    copy_report,
    make_case,
    make_report,
    resize_row,
    sample_report,
)
from markdown_it import MarkdownIt
from markdown_it.token import Token

from memaudit.errors import UsageError
from memaudit.judge.baseline import compare_reports
from memaudit.render.markdown import GITHUB_LIMIT, md_escape, render_markdown
from memaudit.report import PathInfo
from memaudit.spec import CaseSpec
from memaudit.targets.registry import get_target

MD = MarkdownIt("commonmark").enable("table")
COMPARE_HEADER = ["case", "status", "saved now", "baseline", "delta", "delta %", "path", "by kind"]
RUN_HEADER = ["case", "status", "saved", "rows", "path", "by kind"]


def inline_text(tok: Token) -> str:
    return "".join(c.content for c in tok.children or [] if c.type in ("text", "text_special", "softbreak"))


@dataclass
class Block:
    open_tag: str
    summary: str
    tables: list[list[list[str]]] = field(default_factory=list)  # rows of cells, header first
    items: list[str] = field(default_factory=list)  # list items after the table
    paragraphs: list[str] = field(default_factory=list)
    cell_tokens: list[str] = field(default_factory=list)  # types of inline children inside cells


@dataclass
class Parsed:
    tokens: list[Token]
    blocks: list[Block]
    outside: list[str]  # paragraph / blockquote text outside <details>


def parse(text: str) -> Parsed:
    tokens = MD.parse(text)
    blocks: list[Block] = []
    outside: list[str] = []
    cur: Block | None = None
    table: list[list[str]] | None = None
    row: list[str] | None = None
    in_item = False
    for tok in tokens:
        if tok.type == "html_block" and tok.content.lstrip().startswith("<details"):
            assert cur is None, "nested or unclosed <details>"
            first, _, rest = tok.content.strip().partition("\n")
            cur = Block(open_tag=first, summary=rest.strip())
        elif tok.type == "html_block" and "</details>" in tok.content:
            assert cur is not None, "</details> without <details>"
            blocks.append(cur)
            cur = None
        elif tok.type == "table_open":
            table = []
        elif tok.type == "table_close":
            assert cur is not None, "table outside <details>"
            cur.tables.append(table)
            table = None
        elif tok.type == "tr_open":
            row = []
        elif tok.type == "tr_close":
            table.append(row)
            row = None
        elif tok.type == "list_item_open":
            in_item = True
        elif tok.type == "list_item_close":
            in_item = False
        elif tok.type == "inline":
            if row is not None:
                row.append(inline_text(tok))
                cur.cell_tokens += [c.type for c in tok.children or []]
            elif cur is not None and in_item:
                cur.items.append(inline_text(tok))
            elif cur is not None:
                cur.paragraphs.append(tok.content)
            else:
                outside.append(inline_text(tok) if not in_item else tok.content)
    assert cur is None, "unclosed <details>"
    return Parsed(tokens, blocks, outside)


def regressed_report():
    base = sample_report()
    cur = resize_row(base, TE_FP8, 4, +1)  # fc2.input data grows by one byte
    return base, cur, compare_reports(base, cur)


BUFFER_HEADER = ["operand", "kind", "orientation", "format", "shape", "before", "after", "Δ"]
UNCHANGED_HEADER = ["case", "status", "saved", "path"]


def tables(text: str) -> list[list[list[str]]]:
    """Every table of a comment, in order: rows of cell texts, header first."""
    out: list[list[list[str]]] = []
    row: list[str] | None = None
    for tok in MD.parse(text):
        if tok.type == "table_open":
            out.append([])
        elif tok.type == "tr_open":
            row = []
        elif tok.type == "tr_close":
            out[-1].append(row)
            row = None
        elif tok.type == "inline" and row is not None:
            row.append(inline_text(tok))
    return out


def details(text: str) -> list[str]:
    return [
        t.content.strip().split("\n")[1]
        for t in MD.parse(text)
        if t.type == "html_block" and t.content.lstrip().startswith("<details")
    ]


def test_marker_headline_and_the_unchanged_cases_collapsed() -> None:
    base = sample_report()
    cur = copy_report(base)
    text = render_markdown(cur, compare_reports(base, cur), name="h200-te-grouped-mlp")
    lines = text.splitlines()
    assert lines[0] == "<!-- memaudit:h200-te-grouped-mlp -->"
    assert lines[1].startswith("✅ **memaudit: no regression** · saved 0 B over 3 compared cases")
    assert "worst" not in lines[1]
    assert lines[1].endswith(" · not checked: nvfp4")  # its one case was skipped
    assert "###" not in text  # nothing changed: no section but the collapsed one
    # never a tick for a recipe that was not checked
    assert details(text)[0].startswith("<summary>Unchanged: 4 cases (")
    assert "nvfp4 (not checked)" in details(text)[0] and "nvfp4 ✅" not in details(text)[0]
    (table,) = tables(text)
    assert table[0] == UNCHANGED_HEADER and len(table) == 5
    fp8 = next(r for r in table if r[0] == TE_FP8)
    assert fp8[1] == "✅ unchanged" and fp8[3] == "unfused" and fp8[2].endswith("MiB)") and "," in fp8[2]
    nvfp4 = next(r for r in table if r[0] == TE_NVFP4)
    assert nvfp4[1].startswith("⏭️ skipped: ") and "✅" not in nvfp4[1]


def test_a_regression_comes_first_with_its_changed_buffers_in_exact_bytes() -> None:
    _, cur, cmp = regressed_report()
    text = render_markdown(cur, cmp, name="gate")
    lines = text.splitlines()
    assert cmp.saved_delta == 1
    assert lines[1].startswith("❌ **memaudit: 1 case regressed** · saved +1 B over 3 compared cases")
    assert f"worst: {TE_FP8} +1 B" in lines[1]
    assert text.index("### ❌ Regressions · 1 case") < text.index("<summary>Unchanged: 3 cases")
    buffers, unchanged = tables(text)
    assert buffers[0] == BUFFER_HEADER and len(buffers) == 2
    row = buffers[1]
    before = int(row[5].split(" B")[0].replace(",", ""))
    assert row[0] == "fc2.input" and row[1] == "data"
    assert row[6].startswith(f"{before + 1:,} B (") and row[7] == "+1 B"  # a one-byte change shows, exactly
    assert TE_FP8 not in [r[0] for r in unchanged]


def test_improvements_and_env_warning_are_listed() -> None:
    base = sample_report()
    cur = resize_row(base, TE_BF16, 1, -1024)
    cur.environment["device_class"] = "sm100"
    text = render_markdown(cur, compare_reports(base, cur))
    assert "device class differs" in text and "SM100" in text
    assert "### 📉 Improvements · 1 case" in text and "Regressions" not in text
    assert "· 1 improved" in text.splitlines()[1]
    buffers = tables(text)[0]
    assert buffers[0] == BUFFER_HEADER and buffers[1][0] == "activation.input"
    assert buffers[1][7] == "-1,024 B (-1.0 KiB)"


def test_skipped_error_and_missing_cells_show_their_reasons() -> None:
    base = sample_report()
    cur = copy_report(base)
    cur.cases = [c for c in cur.cases if c.id != REF_BF16]
    cur.cases[1] = make_case(TE_BF16, status="error", reason="cublas_gemm: Assertion failed")
    text = render_markdown(cur, compare_reports(base, cur))
    regressions = text.split("### ❌ Regressions")[1].split("<details>")[0]
    assert "❌ error: cublas\\_gemm: Assertion failed (was ok)" in regressions
    assert "❌ missing from the current report" in regressions
    unchanged = tables(text)[-1]
    skipped = next(r for r in unchanged if r[0] == TE_NVFP4)
    assert skipped[1].startswith("⏭️ skipped: Device compute capability 10.0")


def test_an_estimated_case_gets_no_tick() -> None:
    rep = make_report([make_case(REF_BF16)])
    rep.cases[0].path = PathInfo({"estimated": True})
    assert rep.cases[0].execution == "estimated"
    text = render_markdown(rep, compare_reports(rep, copy_report(rep)))
    assert "(not checked)" in details(text)[0] and "✅" not in tables(text)[0][1][1]


def test_cells_are_escaped() -> None:
    nasty = "a | b `code` <script>alert(1)</script> *x* _y_ [l](http://e) & \\ end\nline2"
    rep = make_report([make_case(REF_BF16), make_case(TE_NVFP4, status="skipped", reason=nasty)])
    shown = "⏭️ skipped: " + " ".join(nasty.split()).replace("http://", "http\u200d://")
    p = parse(render_markdown(rep, None))
    skipped = p.blocks[1].tables[0]
    assert len(skipped[1]) == len(skipped[0]) and skipped[1][1] == shown  # the pipe did not split the cell
    for b in p.blocks:
        assert set(b.cell_tokens) <= {"text", "text_special", "softbreak"}  # no html, code, emphasis, links
    text = render_markdown(rep, compare_reports(rep, copy_report(rep)))
    row = next(r for r in tables(text)[0] if r[0] == TE_NVFP4)
    assert len(row) == len(UNCHANGED_HEADER) and row[1] == shown
    body = "\n".join(line for line in text.splitlines() if not line.startswith("<sub>"))  # the footer is ours
    cells = [c.type for t in MD.parse(body) if t.type == "inline" for c in t.children or []]
    assert not {"html_inline", "code_inline", "link_open", "image", "em_open"} & set(cells)
    assert not any(t.type == "html_block" and "<script" in t.content for t in parse(render_markdown(rep)).tokens)


def test_run_mode_has_no_baseline_columns() -> None:
    rep = sample_report()
    rep.cases.append(make_case(REF_BF16.replace("/g1/", "/g2/"), status="error", reason="boom"))
    text = render_markdown(rep, None, name="reference")
    lines = text.splitlines()
    assert lines[0] == "<!-- memaudit:reference -->"
    assert lines[1].startswith("❌") and "1 error" in lines[1] and "no baseline" in lines[1]
    p = parse(text)
    assert len(p.blocks) == 4
    for b in p.blocks:
        assert b.tables[0][0] == RUN_HEADER
    ref = p.blocks[3]
    assert ref.open_tag == "<details open>"
    assert ref.tables[0][1][1] == "✅ ok" and ref.tables[0][1][3] == "4"
    assert ref.tables[0][2][1] == "❌ error: boom" and ref.tables[0][2][2] == "-"
    ok = render_markdown(sample_report(), None).splitlines()[1]
    assert ok.startswith("✅") and "1 skipped" in ok


def test_a_path_change_is_named() -> None:
    rep = make_report([make_case(REF_BF16)])
    assert tables(render_markdown(rep, compare_reports(rep, copy_report(rep))))[0][1][3] == "-"
    base = sample_report()
    base.case(TE_FP8).path = PathInfo({"fused": True})
    cur = copy_report(base)
    cur.case(TE_FP8).path = PathInfo({"fused": False})
    text = render_markdown(cur, compare_reports(base, cur))
    assert f"{TE_FP8}** · unfused (was fused)" in text.replace("\\", "")
    assert "fused path no longer used" in text


def big_pair(n_per_recipe: int, recipes=("bf16", "fp8-delayed", "fp8-current", "fp8-block")):
    cases = [
        make_case(
            CaseSpec.make(
                get_target("te-grouped-mlp"),
                r,
                8,
                tokens=1024 * (i + 1),
                hidden=4096,
                ffn=8192,
                options={"activation": "swiglu"},
            ).id,
            bf16_rows(64, 32, 16),
        )
        for r in recipes
        for i in range(n_per_recipe)
    ]
    base = make_report(cases)
    cur = copy_report(base)
    for c in cur.cases:  # every case regresses in every byte metric
        r = c.rows[0]
        c.rows[0] = dataclasses.replace(r, bytes=r.bytes + 1, storage_bytes=r.storage_bytes + 1)
        c.totals.saved_bytes += 1
    return base, cur


def test_fits_without_cutting_when_small() -> None:
    base, cur = big_pair(3)
    text = render_markdown(cur, compare_reports(base, cur))
    assert "✂️" not in text
    assert text.count("\n❌ **te-grouped-mlp/") == 12 and len(tables(text)) == 12


def test_cuts_finding_lists_first() -> None:
    base, cur = big_pair(12)  # 48 cases: the tables fit, the finding lists do not
    cmp = compare_reports(base, cur)
    full = render_markdown(cur, cmp, limit=10**9)
    text = render_markdown(cur, cmp, limit=len(full.encode()) - 1000)
    assert "Detail was cut" in text and "lists of findings left out" in text
    assert len(tables(text)) == 48 and "what the gate compared" not in text


def test_huge_comment_is_cut_under_the_limit_regressions_first() -> None:
    base, cur = big_pair(300)  # 1200 regressed cases
    cmp = compare_reports(base, cur)
    text = render_markdown(cur, cmp, name="huge")
    assert len(text.encode("utf-8")) <= GITHUB_LIMIT
    lines = text.splitlines()
    assert lines[0] == "<!-- memaudit:huge -->" and lines[1].startswith("❌")
    shown = len(tables(text))
    assert 10 < shown < 1200 and f"only the first {shown} of 1200 changed cases shown" in text
    assert "more case(s) not shown" in text


@pytest.mark.parametrize("limit", [1500, 3000, 6000])
def test_small_limits_are_respected(limit: int) -> None:
    _, cur, cmp = regressed_report()
    text = render_markdown(cur, cmp, limit=limit)
    assert len(text.encode("utf-8")) <= limit
    assert MD.parse(text)[0].content.strip() == "<!-- memaudit:default -->"
    assert text.splitlines()[1].startswith("❌")


@pytest.mark.parametrize("name", ["", "a b", "x-->y", "bad--name", "-lead"])
def test_bad_marker_name(name: str) -> None:
    with pytest.raises(UsageError) as info:
        render_markdown(sample_report(), None, name=name)
    assert info.value.key == "--name"


@pytest.mark.parametrize("name", ["te-grouped-mlp", "my_pkg.targets:make_mlp", "h200/te+fp8"])
def test_marker_names_of_targets_and_baselines(name: str) -> None:
    assert render_markdown(sample_report(), None, name=name).splitlines()[0] == f"<!-- memaudit:{name} -->"


# ---- user strings cannot act on GitHub: no link, image, mention or reference ------------------------------
HOSTILE = (
    "@octocat see [click](https://evil.example) ![pixel](https://evil.example/p.png) www.evil.example #1 a@b.co "
    "`x` <b>y</b>\u202e"
)
LINK_TOKENS = {"link_open", "image", "html_inline", "code_inline", "autolink"}


def _live(text: str) -> list[str]:
    """What GitHub would turn live in rendered text: mentions, bare URLs, www. links, #N references, emails."""
    import re

    return re.findall(r"@[A-Za-z0-9]|https?://|www\.|#[0-9]|\u202e", text)


def _inline_types(tokens: list[Token]) -> set[str]:
    """Inline token types, memaudit's own footer tags aside."""
    return {
        c.type
        for t in tokens
        if t.type == "inline"
        for c in t.children or []
        if not (c.type == "html_inline" and c.content in ("<sub>", "</sub>"))
    }


def test_environment_values_in_the_footer_are_text() -> None:
    rep = sample_report()
    rep.environment.update(device_class=HOSTILE, torch=HOSTILE, cuda="[x](javascript:alert(1))")
    rep.memaudit = HOSTILE
    for cmp in (None, compare_reports(sample_report(), rep)):
        text = render_markdown(rep, cmp)
        footer = [line for line in text.splitlines() if line.startswith("<sub>")]
        assert len(footer) == 1
        tokens = MD.parse(footer[0].removeprefix("<sub>").removesuffix("</sub>"))
        assert not _inline_types(tokens) & LINK_TOKENS, _inline_types(tokens)
        shown = "".join(
            c.content for t in tokens if t.type == "inline" for c in t.children or [] if c.type.startswith("text")
        )
        assert "octocat" in shown and not _live(shown), shown


def test_ids_reasons_and_findings_neither_mention_nor_link() -> None:
    base = sample_report()
    cur = copy_report(base)
    cur.cases[1] = make_case(TE_BF16, status="error", reason=HOSTILE)
    cur.cases[2] = make_case(TE_NVFP4, status="skipped", reason=HOSTILE)
    cur.environment["transformer_engine"] = HOSTILE  # an environment warning in the head of the comment
    text = render_markdown(cur, compare_reports(base, cur))
    tokens = MD.parse(text)
    assert not _inline_types(tokens) & LINK_TOKENS
    shown = " ".join(
        c.content for t in tokens if t.type == "inline" for c in t.children or [] if c.type.startswith("text")
    )
    html = " ".join(t.content for t in tokens if t.type == "html_block")
    assert shown.count("octocat") >= 3 and not _live(shown), [w for w in _live(shown)]
    assert not _live(html)


def test_a_comment_name_with_a_newline_or_control_character_is_refused() -> None:
    for bad in ("ok\n", "ok\nx", "a\x00", "n" * 101, "ok\r"):
        with pytest.raises(UsageError, match="--name"):
            render_markdown(sample_report(), None, name=bad)


@pytest.mark.parametrize(
    ("text", "shown"), [("0.1.0", "0.1.0"), ("12) x", "12) x"), ("# h", "# h"), ("- x", "- x"), ("+ x", "+ x")]
)
def test_a_leading_marker_is_escaped_so_that_it_shows_as_written(text: str, shown: str) -> None:
    """A cell or list item that starts like a list or heading marker renders as the text itself
    (GitHub-flavoured markdown through markdown-it): no list, no heading, no stray backslash."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(md_escape(text)).strip()
    assert html == f"<p>{shown}</p>", html


def test_the_footer_names_the_machine_an_emulation_ran_on() -> None:
    """An emulated answer says where it ran (``emulation.machine["host"]``): fake CUDA is not a GPU."""
    from pathlib import Path

    from memaudit.report import load_report

    report = load_report(Path(__file__).resolve().parents[2] / "reports" / "baseline" / "cpu-te-emulated.json")
    assert {c.emulation.host() for c in report.cases if c.emulation is not None} == {"no GPU (fake CUDA)"}
    assert "cases emulated sm100 on no GPU (fake CUDA) (TE&#39;s real Python" in render_markdown(report, None, name="x")

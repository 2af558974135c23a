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
from memaudit.render.markdown import GITHUB_LIMIT, render_markdown
from memaudit.report import PathInfo
from memaudit.spec import CaseSpec
from memaudit.units import fmt_delta

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


def test_marker_verdict_and_one_details_per_target_recipe() -> None:
    base = sample_report()
    cur = copy_report(base)
    text = render_markdown(cur, compare_reports(base, cur), name="h200-te-grouped-mlp")
    lines = text.splitlines()
    assert lines[0] == "<!-- memaudit:h200-te-grouped-mlp -->"
    assert lines[1].startswith("✅") and "no regression" in lines[1] and "0 B" in lines[1]
    assert lines[1].endswith(" · not checked: nvfp4")  # its one case was skipped
    p = parse(text)
    assert p.tokens[0].type == "html_block" and p.tokens[0].content.strip() == lines[0]
    assert [b.summary.split("</b>")[0] for b in p.blocks] == [
        "<summary>✅ <b>te-grouped-mlp · fp8-current",
        "<summary>✅ <b>te-grouped-mlp · bf16",
        "<summary>⏭️ <b>te-grouped-mlp · nvfp4",  # never a tick for a recipe that was not checked
        "<summary>✅ <b>reference · bf16",
    ]
    assert p.blocks[2].summary.endswith("— 1 case, not checked</summary>")
    for b in p.blocks:
        assert b.open_tag == "<details>"  # nothing failed: all collapsed
        assert len(b.tables) == 1
        assert b.tables[0][0] == COMPARE_HEADER
        assert len(b.tables[0]) == 2  # header + the one case
        assert all(len(r) == len(COMPARE_HEADER) for r in b.tables[0])
    fp8 = p.blocks[0].tables[0][1]
    assert fp8[0] == "g4/t4096-h1024-f2048/bf16"
    assert fp8[1] == "✅ unchanged"
    assert fp8[2] == fp8[3] and fp8[4] == "0 B" and fp8[6] == "unfused"
    assert "data 12.0 MiB" in fp8[7] and "scale_inv 8 B" in fp8[7]


def test_regression_verdict_table_and_named_buffer() -> None:
    _, cur, cmp = regressed_report()
    text = render_markdown(cur, cmp, name="gate")
    lines = text.splitlines()
    assert cmp.saved_delta == 1
    assert lines[1].startswith("❌") and f"saved bytes {fmt_delta(cmp.saved_delta)} " in lines[1]
    p = parse(text)
    fp8 = p.blocks[0]
    assert fp8.open_tag == "<details open>" and fp8.summary.startswith("<summary>❌")
    row = fp8.tables[0][1]
    assert row[1] == "❌ regression" and row[4] == "+1 B"
    assert "(+1 B)" in row[7] and row[7].startswith("tensor 32.0 MiB")
    assert "Regressions" in " ".join(fp8.paragraphs)
    assert any("operand fc2.input grew by 1 B" in i for i in fp8.items)
    # Unaffected groups stay collapsed and list nothing.
    assert all(b.open_tag == "<details>" and not b.items for b in p.blocks[1:])


def test_improvements_and_env_warning_are_listed() -> None:
    base = sample_report()
    cur = resize_row(base, TE_BF16, 1, -1024)
    cur.environment["device_class"] = "sm100"
    p = parse(render_markdown(cur, compare_reports(base, cur)))
    assert any("device class differs" in t and "SM100" in t for t in p.outside)
    bf16 = p.blocks[1]
    assert bf16.tables[0][1][1] == "✅ improvement" and bf16.tables[0][1][4] == "-1.0 KiB"
    assert "Improvements" in " ".join(bf16.paragraphs)
    assert any("operand activation.input shrank by 1.0 KiB" in i for i in bf16.items)


def test_skipped_error_and_missing_cells_show_their_reasons() -> None:
    base = sample_report()
    cur = copy_report(base)
    cur.cases = [c for c in cur.cases if c.id != REF_BF16]
    cur.cases[1] = make_case(TE_BF16, status="error", reason="cublas_gemm: Assertion failed")
    p = parse(render_markdown(cur, compare_reports(base, cur)))
    rows = {b.summary.split("<b>")[1].split("</b>")[0]: b.tables[0][1] for b in p.blocks}
    err = rows["te-grouped-mlp · bf16"]
    assert err[1] == "❌ error: cublas_gemm: Assertion failed (was ok)"
    assert err[2] == "-" and err[3] == "56.0 MiB" and err[4] == "-"
    skipped = rows["te-grouped-mlp · nvfp4"]
    assert skipped[1].startswith("⏭️ skipped: Device compute capability 10.0")
    missing = rows["reference · bf16"]
    assert missing[1] == "❌ missing from the current report" and missing[2] == "-" and missing[3] == "224.0 KiB"


def test_cells_are_escaped() -> None:
    nasty = "a | b `code` <script>alert(1)</script> *x* _y_ [l](http://e) & \\ end\nline2"
    rep = make_report([make_case(REF_BF16), make_case(TE_NVFP4, status="skipped", reason=nasty)])
    for cmp in (None, compare_reports(rep, copy_report(rep))):
        p = parse(render_markdown(rep, cmp))
        skipped = p.blocks[1].tables[0]
        assert len(skipped[1]) == len(skipped[0])  # the pipe did not split the cell
        assert skipped[1][1] == "⏭️ skipped: " + " ".join(nasty.split()).replace("http://", "http\u200d://")
        for b in p.blocks:
            assert set(b.cell_tokens) <= {"text", "text_special", "softbreak"}  # no html, code, emphasis, links
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


def test_path_column_only_when_a_case_has_a_path() -> None:
    rep = make_report([make_case(REF_BF16)])
    p = parse(render_markdown(rep, compare_reports(rep, copy_report(rep))))
    assert "path" not in p.blocks[0].tables[0][0]
    base = sample_report()
    base.case(TE_FP8).path = PathInfo({"fused": True})
    cur = copy_report(base)
    cur.case(TE_FP8).path = PathInfo({"fused": False})
    p = parse(render_markdown(cur, compare_reports(base, cur)))
    assert p.blocks[0].tables[0][1][6] == "unfused (was fused)"
    assert any("fused path no longer used" in i for i in p.blocks[0].items)


def big_pair(n_per_recipe: int, recipes=("bf16", "fp8-delayed", "fp8-current", "fp8-block")):
    cases = [
        make_case(CaseSpec.make("te-grouped-mlp", r, 8, tokens=1024 * (i + 1), hidden=4096, ffn=8192, options={"activation": "swiglu"}).id, bf16_rows(64, 32, 16))
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
    assert sum(len(b.tables[0]) - 1 for b in parse(text).blocks) == 12


def test_cuts_finding_lists_first() -> None:
    base, cur = big_pair(40)  # ~160 cases: the tables fit, the finding lists do not
    cmp = compare_reports(base, cur)
    text = render_markdown(cur, cmp)
    assert len(text) <= GITHUB_LIMIT
    p = parse(text)
    assert any("Detail was cut" in t and "lists of findings left out" in t for t in p.outside)
    assert sum(len(b.tables[0]) - 1 for b in p.blocks) == 160  # every case is still in a table
    assert all(not b.items for b in p.blocks)


def test_huge_comment_is_cut_under_the_limit_and_keeps_its_structure() -> None:
    base, cur = big_pair(300)  # 1200 regressed cases
    cmp = compare_reports(base, cur)
    text = render_markdown(cur, cmp, name="huge")
    assert len(text.encode("utf-8")) <= GITHUB_LIMIT
    lines = text.splitlines()
    assert lines[0] == "<!-- memaudit:huge -->" and lines[1].startswith("❌")
    p = parse(text)
    note = next(t for t in p.outside if "Detail was cut" in t)
    shown_groups = len(p.blocks)
    assert 1 <= shown_groups < 4 and f"only {shown_groups} of 4" in note
    last = p.blocks[-1]
    assert last.tables and any("not shown" in para for para in last.paragraphs)


@pytest.mark.parametrize("limit", [1500, 3000, 6000])
def test_small_limits_are_respected(limit: int) -> None:
    _, cur, cmp = regressed_report()
    text = render_markdown(cur, cmp, limit=limit)
    assert len(text.encode("utf-8")) <= limit
    p = parse(text)  # balanced <details>, tables inside them
    assert p.tokens[0].content.strip() == "<!-- memaudit:default -->"
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
HOSTILE = "@octocat see [click](https://evil.example) ![pixel](https://evil.example/p.png) www.evil.example #1 a@b.co `x` <b>y</b>\u202e"
LINK_TOKENS = {"link_open", "image", "html_inline", "code_inline", "autolink"}


def _live(text: str) -> list[str]:
    """What GitHub would turn live in rendered text: mentions, bare URLs, www. links, #N references, emails."""
    import re

    return re.findall(r"@[A-Za-z0-9]|https?://|www\.|#[0-9]|\u202e", text)


def _inline_types(tokens: list[Token]) -> set[str]:
    """Inline token types, memaudit's own footer tags aside."""
    return {c.type for t in tokens if t.type == "inline" for c in t.children or []
            if not (c.type == "html_inline" and c.content in ("<sub>", "</sub>"))}


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
        shown = "".join(c.content for t in tokens if t.type == "inline" for c in t.children or [] if c.type.startswith("text"))
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
    shown = " ".join(c.content for t in tokens if t.type == "inline" for c in t.children or [] if c.type.startswith("text"))
    html = " ".join(t.content for t in tokens if t.type == "html_block")
    assert shown.count("octocat") >= 3 and not _live(shown), [w for w in _live(shown)]
    assert not _live(html)


def test_a_comment_name_with_a_newline_or_control_character_is_refused() -> None:
    for bad in ("ok\n", "ok\nx", "a\x00", "n" * 101, "ok\r"):
        with pytest.raises(UsageError, match="--name"):
            render_markdown(sample_report(), None, name=bad)

"""The project's faces: a short README front page, a docs index that lists every page, links that
resolve, and no citations of our own issue tracker's numbers (readers outside it cannot follow them).

Each check is a function of the repository root, run on this tree and, as a control, on a small
tree made to break it."""

from __future__ import annotations

import re
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
MAX_README_LINES = 300

OWN_ISSUE = re.compile(r"\bissues? #?\d+\b", re.I)
"""A citation of an issue by number ("issue 28", "issues 27", "Issue #7")."""
EXTERNAL = re.compile(r"(?:PyTorch|pytorch/pytorch|TransformerEngine|NVIDIA/\S+|TE|cuDNN|CUTLASS|Triton)'?s?\s+$")
"""Words before a match that make it another project's issue, a real public reference (none today)."""


def markdown_files(root: Path) -> list[Path]:
    return [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").rglob("*.md"))]


def links(path: Path) -> list[str]:
    """Every link and image target of a markdown file (code spans and blocks hold none)."""
    out = []

    def walk(tokens: list) -> None:  # type: ignore[type-arg]
        for t in tokens:
            if t.type == "link_open":
                out.append(str(t.attrs.get("href", "")))
            elif t.type == "image":
                out.append(str(t.attrs.get("src", "")))
            if t.children:
                walk(t.children)

    walk(MarkdownIt().parse(path.read_text(encoding="utf-8")))
    return out


def local_target(path: Path, href: str) -> Path | None:
    """The file a relative link points at; None for a URL, a mail address or an anchor in the page."""
    if re.match(r"[a-z][a-z0-9+.-]*:", href, re.I) or href.startswith(("#", "//")):
        return None
    return (path.parent / href.split("#", 1)[0]).resolve()


def broken_links(root: Path) -> list[str]:
    return [
        f"{p.relative_to(root)}: {href}"
        for p in markdown_files(root)
        if p.exists()
        for href in links(p)
        if (t := local_target(p, href)) is not None and not t.exists()
    ]


def unindexed_pages(root: Path) -> list[str]:
    """Pages under docs/ that docs/README.md does not link to."""
    index = root / "docs" / "README.md"
    linked = {t for href in links(index) if (t := local_target(index, href)) is not None}
    return [
        str(p.relative_to(root))
        for p in sorted((root / "docs").rglob("*.md"))
        if p != index and p.resolve() not in linked
    ]


def cited_files(root: Path) -> list[Path]:
    """Every file a reader outside the project sees: the markdown, and the code, tests, benchmarks,
    scenarios and CI files (this test's own examples aside)."""
    code = [
        p
        for folder in ("memaudit", "tests", "bench", "scenarios", ".ci")
        if (root / folder).exists()
        for p in sorted((root / folder).rglob("*"))
        if p.is_file()
        and p.suffix in (".py", ".sh", ".toml", ".yml", ".md", "")
        and p.resolve() != Path(__file__).resolve()
        and "__pycache__" not in p.parts
    ]
    return [*markdown_files(root), *code, *(p for p in (root / "action.yml", root / "pyproject.toml") if p.exists())]


def own_issue_citations(root: Path) -> list[str]:
    out = []
    for p in cited_files(root):
        if not p.exists():
            continue
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            out += [
                f"{p.relative_to(root)}:{n}: {m.group(0)}"
                for m in OWN_ISSUE.finditer(line)
                if not EXTERNAL.search(line[: m.start()])
            ]
    return out


def readme_lines(root: Path) -> int:
    return len((root / "README.md").read_text(encoding="utf-8").splitlines())


# ---- this tree ------------------------------------------------------------------------------------------
def test_readme_is_a_front_page() -> None:
    assert readme_lines(ROOT) <= MAX_README_LINES


def test_readme_starts_with_the_two_set_up_commands() -> None:
    """The first block: one command runs the main job, one runs the tests (.ci/run runs the latter)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = next(t for t in MarkdownIt().parse(text) if t.type == "fence")
    commands = [line.split("#")[0].strip() for line in first.content.splitlines()]
    assert commands == ["bash .ci/setup && .venv/bin/memaudit run", "bash .ci/setup && .venv/bin/python -m pytest -q"]


def test_the_docs_index_links_every_page() -> None:
    assert (ROOT / "docs" / "README.md").exists()
    assert unindexed_pages(ROOT) == []


def test_every_relative_link_resolves() -> None:
    assert (ROOT / "CHANGELOG.md").exists()
    assert sum(len(links(p)) for p in markdown_files(ROOT)) >= 50  # the check reads links at all
    assert broken_links(ROOT) == []


def test_no_citations_of_our_own_issues() -> None:
    assert own_issue_citations(ROOT) == []


# ---- controls: each check fails where it should ------------------------------------------------------------
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_controls(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "README.md": "x\n" * (MAX_README_LINES + 1)
            + "[a](docs/guides/a.md) [gone](docs/gone.md) [w](https://example.com)\n",
            "CHANGELOG.md": "- Fixes (issue 28), see Issues #7; TE PR #3545; PyTorch issue 12345; `#1, #3`\n",
            "docs/README.md": "[a](guides/a.md#top) [self](#x)\n",
            "docs/guides/a.md": "![img](../examples/p.png) [b](../reference/b.md) `[not a link](nowhere.md)`\n",
            "docs/reference/b.md": "# b\n",
        },
    )
    assert readme_lines(root) > MAX_README_LINES
    assert unindexed_pages(root) == ["docs/reference/b.md"]
    assert broken_links(root) == ["README.md: docs/gone.md", "docs/guides/a.md: ../examples/p.png"]
    assert [c.rsplit(": ", 1)[1] for c in own_issue_citations(root)] == ["issue 28", "Issues #7"]

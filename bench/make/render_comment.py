"""Render a PR comment (GitHub-flavoured markdown) to HTML and screenshot it with headless Chromium.

markdown-it-py's GFM-like preset (tables, strikethrough) with raw HTML on, as GitHub allows
``<details>`` and ``<summary>``; a GitHub-like stylesheet. Usage:
python bench/make/render_comment.py docs/examples/pr3545-comment.md --png docs/examples/pr3545-comment.png
(needs markdown-it-py and a ``chromium`` on PATH).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from markdown_it import MarkdownIt

CSS = """
body { font-family: -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; font-size: 14px;
       line-height: 1.5; color: #1f2328; max-width: 1180px; margin: 16px; }
table { border-collapse: collapse; margin: 8px 0 16px; display: block; overflow: auto; }
th, td { border: 1px solid #d1d9e0; padding: 6px 13px; }
tr:nth-child(2n) { background: #f6f8fa; }
th { font-weight: 600; }
h3 { font-size: 1.25em; border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; margin-top: 24px; }
details { margin: 8px 0; } summary { cursor: pointer; }
sub { color: #59636e; }
code { background: #eff1f3; padding: .2em .4em; border-radius: 6px; font-size: 85%; }
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("markdown", type=Path)
    ap.add_argument("--png", type=Path, required=True)
    ap.add_argument("--html", type=Path)
    ap.add_argument("--width", type=int, default=1220)
    ap.add_argument("--height", type=int, default=1400)
    args = ap.parse_args()
    md = MarkdownIt("gfm-like", {"html": True, "linkify": False})
    body = md.render(args.markdown.read_text(encoding="utf-8"))
    page = f"<!doctype html><html><head><meta charset='utf-8'><style>{CSS}</style></head><body>{body}</body></html>"
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "comment.html"
        html.write_text(page, encoding="utf-8")
        if args.html:
            shutil.copyfile(html, args.html)
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            raise SystemExit("no chromium on PATH")
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--window-size={args.width},{args.height}",
                f"--screenshot={args.png.resolve()}",
                html.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()

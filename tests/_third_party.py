"""A package that is not memaudit, shipping a memaudit extension: ``memaudit_attn``.

Its extension (``memaudit_attn.ext:EXTENSION``, registered under ``memaudit.extensions`` by its
``.dist-info``) declares a target (``attn``: ``tests/shape_target.py``, shape seq x heads x head_dim),
a command (``memaudit attn-info``) and a doctor section, each by a ``"pkg.mod:name"`` string. The
package is written beside its metadata in a folder put on ``sys.path`` (or ``PYTHONPATH``)."""

from __future__ import annotations

from pathlib import Path

SHAPE_TARGET = Path(__file__).with_name("shape_target.py")
PACKAGE = "memaudit_attn"

EXT = f'''"""memaudit_attn's declaration: light, imports nothing but memaudit.extension."""
from memaudit.extension import Extension

EXTENSION = Extension(
    "attn",
    targets={{"attn": "{PACKAGE}.target:AttentionTarget"}},
    commands="{PACKAGE}.commands:register",
    doctor="{PACKAGE}.doctor:section",
)
'''

COMMANDS = '''"""memaudit attn-info: the attn target's dimensions."""
import typer


def register(app: typer.Typer) -> None:
    @app.command("attn-info")
    def attn_info(heads: int = typer.Option(2, help="Attention heads.")) -> None:
        """Say what the attn target audits."""
        typer.echo(f"attn: Q/K/V projections, {heads} heads")
'''

DOCTOR = '''"""The attn extension's doctor section."""
from rich.text import Text


def section() -> Text:
    return Text("attn extension: ready (Q/K/V projections on CPU)")
'''


def install(root: Path) -> Path:
    """Write the package and its metadata under ``root``/site; return that folder."""
    site = root / "site"
    pkg = site / PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('"""A package that ships a memaudit extension."""\n', encoding="utf-8")
    (pkg / "target.py").write_text(SHAPE_TARGET.read_text(encoding="utf-8"), encoding="utf-8")
    (pkg / "ext.py").write_text(EXT, encoding="utf-8")
    (pkg / "commands.py").write_text(COMMANDS, encoding="utf-8")
    (pkg / "doctor.py").write_text(DOCTOR, encoding="utf-8")
    info = site / f"{PACKAGE}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[memaudit.extensions]\nattn = {PACKAGE}.ext:EXTENSION\n", encoding="utf-8")
    return site

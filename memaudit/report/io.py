"""Reading and writing reports: inputs read with a clear error, outputs checked before anything
runs (never an input, a writable place), and written atomically (streamed for long reports)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

from memaudit.errors import UsageError
from memaudit.report.codec import decode_report, short_value, validate_report
from memaudit.report.model import MAX_DEPTH, CaseReport, Report


def read_input(path: str | os.PathLike[str], what: str = "file") -> str:
    """The UTF-8 text of an input file; a missing, unreadable or unnameable one is a UsageError naming it."""
    try:
        p = Path(path)
        if not p.is_file():
            raise UsageError(f"no such {what}", source=str(path))
        return p.read_text(encoding="utf-8")
    except UsageError:
        raise
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})", source=str(path)) from None
    except (OSError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot read: {_os_reason(exc)}", source=str(path)) from None


def _os_reason(exc: BaseException) -> str:
    """What the OS said, without the path it repeats (the message names it already)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read and validate a report file (:func:`decode_report`, :func:`validate_report`); every
    problem is a UsageError naming the file and where in it."""
    src = str(path)
    return validate_report(decode_report(read_input(path), src), source=src)


_SPECIAL = re.compile(r'[\[\]{}"\\]')


def check_depth(text: str, source: str) -> None:
    """Refuse TOML (or JSON) nested deeper than :data:`MAX_DEPTH` before a recursive parser sees it
    (strings in double quotes are skipped; only the bracket, brace, quote and backslash
    characters are visited). Reports are measured after decoding instead (:func:`_depth`)."""
    depth = worst = 0
    in_str = esc = False
    for m in _SPECIAL.finditer(text):
        ch = m.group()
        if in_str:
            if esc:
                esc = False  # (a backslash escapes only the next character, adjacent or not: close enough)
            elif ch == "\\":
                esc = m.end() == len(text) or text[m.end()] in '"\\'
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > worst:
                worst = depth
        elif ch in "]}":
            depth -= 1
    if worst > MAX_DEPTH:
        raise UsageError(f"nested {worst} levels deep (at most {MAX_DEPTH})", source=source)


def _file_identity(path: str | os.PathLike[str]) -> tuple[Path, tuple[int, int] | None]:
    """(resolved path, (device, inode) where the file exists): two spellings of one file, a
    symlink and its target, or two hard links have one identity."""
    p = Path(path)
    try:
        st = os.stat(p)
    except (OSError, ValueError):
        ino = None
    else:
        ino = (st.st_dev, st.st_ino)
    return p.resolve(), ino


def check_output(path: str | os.PathLike[str], key: str) -> Path:
    """Fail now (UsageError naming ``key`` and the path), before any work, if ``path`` cannot be
    written: a directory, a path under a file, a folder memaudit may not write, a name the OS
    refuses (a component over 255 bytes, a symlink loop). Returns the path a write goes to (a
    symlink's target: the link stays a link)."""
    try:
        return _check_output(path, key)
    except UsageError:
        raise
    except (OSError, RuntimeError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, a NUL byte: what the OS says
        raise UsageError(f"cannot write {short_value(str(path))}: {_os_reason(exc)}", key=key) from None


def _check_output(path: str | os.PathLike[str], key: str) -> Path:
    if (
        str(path) == "-"
    ):  # the convention for standard output, which holds memaudit's tables: refused, not a file named -
        raise UsageError(
            "'-' (standard output) is not an output memaudit writes: the console output goes there; "
            "name a file (./- for a file named -)",
            key=key,
        )
    p = Path(path)
    if p.is_symlink():
        p = p.resolve()  # a loop raises (RuntimeError or OSError); a dangling link names the file to make
    if p.is_dir():
        raise UsageError(f"{str(path)!r} is a directory; name a file", key=key)
    if p.exists() and not p.is_file():
        raise UsageError(f"{str(path)!r} exists and is not a regular file", key=key)
    if len(os.fsencode(p.name)) > _NAME_MAX - 20:  # the temp file beside it adds a few bytes
        raise UsageError(
            f"cannot write {short_value(str(path))}: its name is {len(os.fsencode(p.name))} bytes "
            f"(at most {_NAME_MAX - 20})",
            key=key,
        )
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"cannot write {str(path)!r}: {str(parent)!r} is a file, not a folder", key=key)
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"cannot write {str(path)!r}: no permission to write in {str(parent)!r}", key=key)
    try:  # the permission bits do not tell everything (root, /proc, read-only mounts): try it
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write {str(path)!r}: {exc.strerror or exc} in {str(parent)!r}", key=key) from None
    for part in p.relative_to(parent).parts:  # the folders a write will make, and the file itself
        if len(os.fsencode(part)) > _NAME_MAX:
            raise UsageError(
                f"cannot write {short_value(str(path))}: a name in it is {len(os.fsencode(part))} bytes "
                f"(at most {_NAME_MAX})",
                key=key,
            )
    return p


_NAME_MAX = 255
"""The longest file name (one path component, in bytes) on Linux and macOS file systems."""


def check_outputs(
    outputs: dict[str, str | os.PathLike[str] | None], inputs: dict[str, str | os.PathLike[str] | None] | None = None
) -> None:
    """:func:`check_output` for each given ``{key: path}``; and no output is an input or another
    output, however spelled (``sub/../x``, a symlink, a hard link: the same resolved path or the
    same inode). ``inputs`` are ``{what: path}`` of the files the command reads; one that does not
    exist (yet) is still compared by its resolved path."""
    seen: dict[Path | tuple[int, int], str] = {}
    for what, path in (inputs or {}).items():
        if path is None:
            continue
        try:
            resolved, ino = _file_identity(path)
        except (OSError, RuntimeError, ValueError):
            continue  # an input the OS cannot name is refused when it is read
        seen[resolved] = what
        if ino is not None:
            seen[ino] = what
    names = set((inputs or {}).keys())
    for key, path in outputs.items():
        if path is None:
            continue
        check_output(path, key)
        try:
            resolved, ino = _file_identity(path)
        except (OSError, RuntimeError, ValueError) as exc:
            raise UsageError(f"cannot write {short_value(str(path))}: {_os_reason(exc)}", key=key) from None
        other = seen.get(resolved) or (seen.get(ino) if ino is not None else None)
        if other is not None:
            if other in names:
                raise UsageError(
                    f"{str(path)!r} is also the input {other} ({str((inputs or {})[other])!r}): an output "
                    "never overwrites what memaudit reads; name another file",
                    key=key,
                )
            raise UsageError(f"{str(path)!r} is also given to {other}; name two files", key=key)
        seen[resolved] = key
        if ino is not None:
            seen[ino] = key


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (see ``atomic_write``)."""
    atomic_write(path, lambda f: f.write(text))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see ``atomic_write``)."""
    atomic_write(path, lambda f: f.write(data), binary=True)


def atomic_write(path: str | os.PathLike[str], write: Callable[[Any], object], *, binary: bool = False) -> None:
    """Call ``write(file)`` on a temp file in the same folder (UTF-8 text, or bytes with
    ``binary``), then rename it to ``path`` (through a symlink to its target). An OSError is a
    UsageError naming the path. The temp file's name is chosen before it is made, so that it is
    removed whenever the write does not finish: also on KeyboardInterrupt and SystemExit (the
    CLI turns SIGTERM into one), whenever they arrive."""
    p = Path(path)
    try:
        if p.is_symlink():
            p = p.resolve()  # a loop raises (RuntimeError or OSError); a dangling link names the file to make
        p.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot write: {_os_reason(exc)}", source=str(path)) from None
    stem = os.fsencode(p.name)[:200].decode("utf-8", "ignore")
    tmp = p.parent / f".{stem}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666
        )  # the umask applies
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write: {_os_reason(exc)}", source=str(path)) from None
        if isinstance(exc, UnicodeEncodeError):
            raise UsageError(f"cannot write: text that is not valid Unicode ({exc.reason})", source=str(path)) from None
        raise


def write_report(report: Report, path: str | os.PathLike[str]) -> None:
    """Write the report as JSON, atomically."""
    atomic_write_text(path, report.to_json())


def write_report_streaming(header: Report, cases: Iterable[CaseReport], path: str | os.PathLike[str]) -> int:
    """Write ``header`` (environment, version, created; its own ``cases`` are ignored) with
    ``cases`` as they are produced, atomically, holding one case in memory at a time. The bytes
    equal ``write_report`` of the same report. Returns the number of cases written."""
    head = dataclasses.replace(header, cases=[]).to_json()
    marker = '"cases": []'
    assert head.startswith("{\n " + marker), "sort_keys puts cases first"
    rest = head[len("{\n " + marker) :]
    count = 0

    def write(f: TextIO) -> None:
        nonlocal count
        f.write('{\n "cases": [')
        for case in cases:
            text = json.dumps(case.to_dict(), sort_keys=True, indent=1, ensure_ascii=False)
            del case  # released before the next one is made
            f.write(("\n" if count == 0 else ",\n") + "\n".join("  " + line for line in text.split("\n")))
            count += 1
        f.write("\n ]" if count else "]")
        f.write(rest)

    atomic_write(path, write)
    return count

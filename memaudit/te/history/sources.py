"""Where a version of TE's Python comes from, laid into a cache as an overlay tree.

An overlay tree is a directory holding ``transformer_engine/`` (TE's Python files only: no
compiled part, no C++ source) and a ``transformer_engine-VERSION.dist-info`` saying its version
(what TE's ``__version__`` and memaudit's environment read), plus ``memaudit-source.json``: what it
is (kind, label, version, commit, subject) and the SHA-256 of its files. A tree is made once, in a
temporary directory renamed into place, and reused by every later run.

- **release** ``2.17.1``: TE's pure-Python wheel ``transformer_engine-VERSION-py3-none-any.whl``
  from the package index (``pip download``), into ``CACHE/wheels/``, its Python extracted;
- **git** ``REV`` of a TE checkout the user points at: ``git archive`` of ``transformer_engine/``
  at that commit (Python files only), the version from its ``build_tools/VERSION.txt`` with the
  commit as local label (``2.20.0.dev0+gd0067d0da6cb``);
- **local** ``PATH``: a TE source tree (``transformer_engine/`` beside ``build_tools/VERSION.txt``,
  or beside a dist-info), copied so that editing it later changes no history;
- **installed**: the installed TE's own Python (no network needed).

No TE file is ever written into the project: the cache lives outside it (``--cache``,
``$MEMAUDIT_CACHE``, else ``$XDG_CACHE_HOME/memaudit`` or ``~/.cache/memaudit``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memaudit.errors import UsageError
from memaudit.te.history.compat import installed_te_dir

SOURCE_FILE = "memaudit-source.json"
PR_RE = re.compile(r"\(#(\d+)\)\s*$")
"""TE's squash-merge subjects end with the PR number: ``... (#3048)``."""


@dataclass(frozen=True)
class TESource:
    """One version of TE's Python, laid out as an overlay tree."""

    kind: str
    """``release``, ``git``, ``local`` or ``installed``."""
    label: str
    """How reports name it: ``2.17.1``, ``main``, ``d0067d0da6cb``."""
    version: str
    """The distribution version the tree declares (what the imported TE must report)."""
    tree: Path
    tree_sha256: str
    commit: str | None = None
    subject: str | None = None
    date: str | None = None

    @property
    def pr(self) -> int | None:
        """The PR number a git commit's subject names, if any."""
        m = PR_RE.search(self.subject or "")
        return int(m.group(1)) if m else None

    def describe(self) -> dict[str, Any]:
        """What a report's ``environment.te_source`` records (no machine path)."""
        d: dict[str, Any] = {
            "kind": self.kind,
            "label": self.label,
            "version": self.version,
            "tree_sha256": self.tree_sha256,
        }
        if self.commit is not None:
            d.update(commit=self.commit, subject=self.subject, date=self.date, pr=self.pr)
        return d

    @classmethod
    def read(cls, tree: Path) -> TESource:
        d = json.loads((tree / SOURCE_FILE).read_text(encoding="utf-8"))
        return cls(**{**d, "tree": tree})


def cache_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The cache for wheels and trees (created on first use); UsageError where it names something
    that is not a folder, or a folder that cannot be written."""
    if explicit is not None:
        path, key = Path(explicit).expanduser(), "--cache"
    elif os.environ.get("MEMAUDIT_CACHE"):
        path, key = Path(os.environ["MEMAUDIT_CACHE"]).expanduser(), "MEMAUDIT_CACHE"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path, key = Path(base) / "memaudit", "XDG_CACHE_HOME"
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise UsageError(f"not a folder: {existing}", key=key)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {existing}", key=key)
    return path


def tree_hash(tree: Path) -> str:
    """SHA-256 over the sorted relative paths and bytes of every file of ``tree/transformer_engine``."""
    h = hashlib.sha256()
    root = tree / "transformer_engine"
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _write_dist_info(tree: Path, version: str) -> None:
    info = tree / f"transformer_engine-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: transformer_engine\nVersion: {version}\n", encoding="utf-8"
    )


def _finish(tmp: Path, final: Path, **fields: Any) -> TESource:
    """Hash the tree, record what it is, and move it into place (another process may have won)."""
    src = TESource(tree=final, tree_sha256=tree_hash(tmp), **fields)
    d = asdict(src)
    del d["tree"]
    (tmp / SOURCE_FILE).write_text(json.dumps(d, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(final)
    except OSError:  # made meanwhile by another run
        shutil.rmtree(tmp, ignore_errors=True)
    return TESource.read(final)


def _tmpdir(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".tree-", dir=cache))


# ---- releases ------------------------------------------------------------------------------------

VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?([.a-z0-9]*)$")


def wheel_path(version: str, cache: Path) -> Path | None:
    """The cached wheel of ``version`` (``2.15`` finds ``2.15.0``), or None."""
    wheels = cache / "wheels"
    for v in (version, f"{version}.0"):
        p = wheels / f"transformer_engine-{v}-py3-none-any.whl"
        if p.is_file():
            return p
    return None


def download_wheel(version: str, cache: Path, *, timeout_s: float = 300) -> Path:
    """``pip download`` TE's pure-Python wheel of ``version`` into ``CACHE/wheels`` (once)."""
    if not VERSION_RE.match(version):
        raise UsageError(f"not a TE release version: {version!r} (e.g. 2.17.1)", key="--te")
    found = wheel_path(version, cache)
    if found is not None:
        return found
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(wheels),
        f"transformer_engine=={version}",
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise DownloadFailed(f"pip download of transformer_engine=={version} ran past {timeout_s:g} s") from None
    found = wheel_path(version, cache)
    if done.returncode != 0 or found is None:
        tail = [ln for ln in (done.stderr or done.stdout).strip().splitlines() if not ln.startswith("WARNING")]
        raise DownloadFailed(
            f"no pure-Python wheel of transformer_engine=={version} from the package index"
            + (f": {tail[-1]}" if tail else "")
        )
    return found


class DownloadFailed(RuntimeError):
    """A release's wheel could not be had (no network, no such version)."""


def release(version: str, cache: Path) -> TESource:
    """The overlay tree of a released version (its wheel downloaded once)."""
    wheel = download_wheel(version, cache)
    actual = wheel.name.split("-")[1]
    final = cache / "trees" / "release" / actual
    if (final / SOURCE_FILE).is_file():
        return TESource.read(final)
    tmp = _tmpdir(cache)
    with zipfile.ZipFile(wheel) as z:
        names = [
            n for n in z.namelist() if n.startswith(("transformer_engine/", f"transformer_engine-{actual}.dist-info/"))
        ]
        if "transformer_engine/pytorch/__init__.py" not in names:
            shutil.rmtree(tmp, ignore_errors=True)
            raise DownloadFailed(f"the wheel of transformer_engine {actual} carries no PyTorch Python code")
        for n in names:
            if n.endswith(".py") or ".dist-info/" in n:
                z.extract(n, tmp)
    return _finish(tmp, final, kind="release", label=actual, version=actual)


# ---- git revisions -------------------------------------------------------------------------------


def git(repo: Path, *args: str, binary: bool = False) -> Any:
    """Run git in ``repo`` (a checkout or a bare repository); its stdout."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False, timeout=300)
    except FileNotFoundError:
        raise UsageError("git is not installed", key="--te-repo") from None
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout if binary else done.stdout.decode(errors="replace")


class GitError(RuntimeError):
    """A git command on the user's TE checkout failed."""


def check_repo(repo: str | os.PathLike[str]) -> Path:
    """A TE git repository (checkout or bare) the user points at; UsageError otherwise."""
    path = Path(repo).expanduser()
    if not path.exists():
        raise UsageError(f"no such directory: {repo}", key="--te-repo")
    try:
        git(path, "rev-parse", "--git-dir")
    except GitError:
        raise UsageError(f"not a git repository: {repo}", key="--te-repo") from None
    return path


def resolve(repo: Path, rev: str, key: str = "--rev") -> str:
    """The full commit hash of ``rev``; UsageError naming it (and the flag ``key`` that gave it)
    where git does not know it."""
    try:
        return str(git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")).strip()
    except GitError:
        raise UsageError(f"unknown revision {rev!r} in the TE repository {repo}", key=key) from None


def rev_range(repo: Path, spec: str, key: str = "--rev") -> list[str]:
    """Commits of ``A..B`` (A included, then B's first-parent line after A, oldest first), or the one
    commit ``spec`` names."""
    if ".." not in spec:
        return [resolve(repo, spec, key)]
    a, b = spec.split("..", 1)
    first, last = resolve(repo, a, key), resolve(repo, b, key)
    line = str(git(repo, "rev-list", "--first-parent", "--reverse", f"{first}..{last}")).split()
    return [first, *line]


def commit_info(repo: Path, commit: str) -> tuple[str, str]:
    """(subject, ISO date) of a commit."""
    out = str(git(repo, "log", "-1", "--format=%s%x00%cs", commit)).rstrip("\n")
    subject, date = out.split("\0")
    return subject, date


def git_version(repo: Path, commit: str) -> str:
    """The distribution version of a commit: its ``build_tools/VERSION.txt`` plus ``+g`` and 12 hex digits."""
    from packaging.version import InvalidVersion, Version

    try:
        base = str(git(repo, "show", f"{commit}:build_tools/VERSION.txt")).strip()
        Version(base)
    except (GitError, InvalidVersion):
        base = "0"
    return f"{Version(base).public}+g{commit[:12]}"


def git_rev(repo: Path, rev: str, cache: Path, *, label: str | None = None) -> TESource:
    """The overlay tree of one git revision (``git archive`` of its Python, once per commit)."""
    commit = resolve(repo, rev)
    final = cache / "trees" / "git" / commit
    given = label or (rev if not re.fullmatch(r"[0-9a-f]{7,40}", rev) else commit[:12])
    if (final / SOURCE_FILE).is_file():
        src = TESource.read(final)
        return TESource(**{**asdict(src), "label": given})
    subject, date = commit_info(repo, commit)
    version = git_version(repo, commit)
    tmp = _tmpdir(cache)
    try:
        data = git(repo, "archive", "--format=tar", commit, "transformer_engine", binary=True)
    except GitError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise GitError(f"{commit[:12]} has no transformer_engine/ tree: {exc}") from None
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.endswith(".py")]
        tar.extractall(tmp, members=members, filter="data")
    if not (tmp / "transformer_engine" / "pytorch" / "__init__.py").is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        raise GitError(f"{commit[:12]} has no transformer_engine/pytorch Python package")
    _write_dist_info(tmp, version)
    return _finish(tmp, final, kind="git", label=given, version=version, commit=commit, subject=subject, date=date)


# ---- local trees and the installed TE -----------------------------------------------------------


def _copy_python(src: Path, dst: Path) -> None:
    for path in sorted(src.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        out = dst / "transformer_engine" / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)


def local(path: str | os.PathLike[str], cache: Path, *, version: str | None = None) -> TESource:
    """The overlay tree of a local TE source tree (copied; keyed by its contents)."""
    root = Path(path).expanduser()
    pkg = root / "transformer_engine"
    if not (pkg / "pytorch" / "__init__.py").is_file():
        raise UsageError(f"{path} holds no transformer_engine/pytorch package", key="--te-tree")
    if version is None:
        vfile = root / "build_tools" / "VERSION.txt"
        infos = sorted(root.glob("transformer_engine-*.dist-info"))
        if vfile.is_file():
            version = vfile.read_text(encoding="utf-8").strip()
        elif infos:
            version = infos[0].name[len("transformer_engine-") : -len(".dist-info")]
        else:
            raise UsageError(f"{path}: no build_tools/VERSION.txt or dist-info says its version", key="--te-tree")
    tmp = _tmpdir(cache)
    _copy_python(pkg, tmp)
    digest = tree_hash(tmp)
    from packaging.version import Version

    full = f"{Version(version).public}+local{digest[:12]}"
    final = cache / "trees" / "local" / digest
    if (final / SOURCE_FILE).is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        return TESource.read(final)
    _write_dist_info(tmp, full)
    return _finish(tmp, final, kind="local", label=root.name, version=full)


def installed(cache: Path) -> TESource:
    """The overlay tree of the installed TE's own Python."""
    from importlib import metadata

    version = metadata.version("transformer_engine")
    tmp = _tmpdir(cache)
    _copy_python(installed_te_dir(), tmp)
    digest = tree_hash(tmp)
    final = cache / "trees" / "installed" / f"{version}-{digest[:16]}"
    if (final / SOURCE_FILE).is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        return TESource.read(final)
    _write_dist_info(tmp, version)
    return _finish(tmp, final, kind="installed", label=f"{version} (installed)", version=version)

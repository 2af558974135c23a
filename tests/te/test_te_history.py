"""``memaudit te-history``: TE's saved state across its history (docs/investigations/te-history.md).

Offline: TE 2.20.2's own Python (installed) against a copy patched at test time with PR #3545's
change (../shared/docs/pr-3545.txt: NVFP4 fused inputs saved columnwise only), in a temporary git
repository of four commits; the bisect must name the patched commit. Released wheels are used where
the package index answers (else those tests skip, saying so). The committed history in
reports/te-history/ is checked against ``compare``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from memaudit.report import load_report
from memaudit.te.history import compat
from memaudit.te.history.cases import HistoryCase, default_cases

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "reports" / "te-history"
CASE = HistoryCase("nvfp4", 8, True, 4096, 1024, 2048)
PR3545_BEFORE = "            if not use_nvfp4:\n                for grouped_fc_x in (saved_fc1_x, saved_grouped_fc2_x):"
PR3545_AFTER = (
    "            if True:  # PR #3545: NVFP4 inputs saved columnwise only\n"
    "                for grouped_fc_x in (saved_fc1_x, saved_grouped_fc2_x):"
)

te_installed = pytest.importorskip("transformer_engine", reason="TE is not installed") is not None


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@pytest.fixture(scope="module")
def te_repo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A git repository of TE 2.20.2's Python: A (as installed), B (an unrelated file), C (PR
    #3545's change), D (another unrelated file); and a cache."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("te-history")
    repo = root / "TransformerEngine"
    src = compat.installed_te_dir()
    for path in src.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        out = repo / "transformer_engine" / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
    (repo / "build_tools").mkdir()
    (repo / "build_tools" / "VERSION.txt").write_text("2.20.2\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "TE 2.20.2's Python (#1)")
    (repo / "NOTES.md").write_text("unrelated\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "Docs only (#2)")
    fused = repo / "transformer_engine" / "pytorch" / "ops" / "fused" / "grouped_mlp.py"
    text = fused.read_text()
    assert PR3545_BEFORE in text, "TE's fused op no longer has the `if not use_nvfp4:` pruning exception"
    fused.write_text(text.replace(PR3545_BEFORE, PR3545_AFTER))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "[PyTorch] NVFP4 fused grouped MLP saves columnwise inputs only (#3545)")
    (repo / "NOTES.md").write_text("unrelated again\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "Docs again (#4)")
    commits = _git(repo, "rev-list", "--reverse", "main").split()
    return {"repo": repo, "cache": root / "cache", "commits": commits}


# ---- the compatibility layer, unit by unit --------------------------------------------------------


def test_scan_finds_tex_names_members_and_from_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "transformer_engine" / "pytorch"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text(
        "import transformer_engine_torch as tex\n"
        "from transformer_engine_torch import DType as D, bar\n"
        "x = tex.foo(1)\ny = tex.Enum.MEMBER\nz = D.kNew\n"
        "w = getattr(tex, 'dynamic', None)\n"
    )
    (tmp_path / "transformer_engine" / "jax").mkdir()
    (tmp_path / "transformer_engine" / "jax" / "b.py").write_text(
        "import transformer_engine_torch as tex\ntex.jaxonly()\n"
    )
    names = compat.scan_tex_names(tmp_path)
    assert names.names == {"foo", "Enum", "DType", "bar"}  # getattr by string and JAX are left out
    assert names.members == {("Enum", "MEMBER"), ("DType", "kNew")}


def test_placeholders_fill_only_what_is_missing_and_name_themselves() -> None:
    class DType:
        kFloat32 = 1

    tex = types.ModuleType("fake_tex")
    tex.DType = DType
    tex.real = lambda: "real"
    added = compat.fill_missing(
        tex, compat.TexNames({"real", "gone", "DType"}, {("DType", "kFloat32"), ("DType", "kOld")}), "2.20.2"
    )
    assert added == ["tex.gone", "tex.DType.kOld"]
    assert tex.real() == "real" and DType.kFloat32 == 1
    assert repr(DType.kOld) == "<missing tex.DType.kOld>"
    with pytest.raises(compat.MissingCompiled, match=r"tex.gone is not in the installed TE 2.20.2 extension"):
        tex.gone(1)


def test_registrations_are_read_from_the_module_source(tmp_path: Path) -> None:
    from memaudit.te.emulate.context import Registration, registrations

    f = tmp_path / "m.py"
    f.write_text(
        "if A.is_supported():\n    register_forward_fusion(fuse_a, prepend=True)\n"
        "if B.is_supported():\n    register_forward_backward_fusion(fuse_b)\nx = 1\n"
    )
    assert registrations(str(f)) == (
        Registration("A", "register_forward_fusion", "fuse_a", (("prepend", True),)),
        Registration("B", "register_forward_backward_fusion", "fuse_b", ()),
    )


def test_operand_layouts_of_older_te() -> None:
    """GroupedLinear saves 5 metadata entries from 2.19 (PR #3238), 3 in 2.16-2.18, 1 before."""
    from memaudit.te.capture import roles

    op = types.SimpleNamespace(num_groups=8, single_grouped_weight=False, _scale_bias=False)
    grouped = types.SimpleNamespace(use_grouped_tensor_path=True)
    split = types.SimpleNamespace()
    assert roles.meta_count(op, grouped, "fc1", 5 + 1 + 8) == 5
    assert roles.meta_count(op, grouped, "fc1", 3 + 1 + 8) == 3
    assert roles.meta_count(op, split, "fc1", 1 + 8 + 8) == 1
    assert roles.unfused_role(op, grouped, "fc1", 3, 3) == ("fc1.input", None)
    assert roles.unfused_role(op, grouped, "fc1", 3, 5) == ("fc1.input_offsets", None)
    early = types.SimpleNamespace(input_quantizer=object())
    early_roles = roles.early_fused_roles(op, early, "fc1", 2 + 8 + 3)
    assert early_roles is not None and early_roles[:2] == [("fc1.split_sizes", None), ("fc1.split_points", None)]
    assert early_roles[-3:] == [("fc1.input", None), ("fc1.input", None), ("fc1.input_offsets", None)]
    assert roles.early_fused_roles(op, grouped, "fc1", 13) is None


# ---- stand-ins per version family -----------------------------------------------------------------


def _standin_table() -> dict[str, Any]:
    from memaudit.te.emulate.families import FAMILY_STANDINS
    from memaudit.te.emulate.standins import STANDINS

    return {**STANDINS, **FAMILY_STANDINS}


def _tree(version: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if version == "installed":
        return compat.installed_te_dir().parent
    from memaudit.te.history.sources import DownloadFailed, cache_dir, release

    try:
        return release(version, cache_dir()).tree
    except DownloadFailed as exc:
        pytest.skip(f"TE {version}'s wheel could not be had here: {exc}")


@pytest.mark.parametrize("version", ["installed", "2.14.0", "2.16.1", "2.17.1", "2.19.0"])
def test_every_call_site_binds_to_its_stand_in(version: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The signature drift test: every call of a stand-in entry point in this TE version's Python
    passes arguments the stand-in accepts (and the installed TE calls each of 2.20.2's)."""
    from memaudit.te.emulate.families import call_sites

    table = _standin_table()
    tree = _tree(version, tmp_path_factory)
    sites = list(call_sites(tree, set(table)))
    problems = [why for s in sites if (why := s.binds(table[s.name])) is not None]
    assert not problems, "\n".join(problems)
    called = {s.name for s in sites}
    if version == "installed":  # every 2.20.2 stand-in is called, or read (gemm.py:627-630 calls through a variable)
        from memaudit.te.emulate.standins import STANDINS

        referenced = compat.scan_tex_names(tree).names | {n.split(".")[0] for n in called}
        missing = {n.split(".")[0] for n in STANDINS} - referenced
        assert not missing, missing
    assert called, f"no stand-in entry point is called in TE {version}'s Python"


def test_call_site_binding_catches_a_drift() -> None:
    from memaudit.te.emulate.families import CallSite, splits_to_offsets

    assert CallSite("splits_to_offsets", "f.py", 1, 2, (), False).binds(splits_to_offsets) is None
    why = CallSite("splits_to_offsets", "f.py", 7, 3, ("stride",), False).binds(splits_to_offsets)
    assert why is not None and "f.py:7" in why


def _compare_allocations() -> list[str]:
    """TE 2.20.2's TensorSpec allocation against memaudit's constructor-based one (the family of
    TE 2.18 and older), on fake CUDA."""
    import torch
    import transformer_engine.pytorch as te  # noqa: F401
    from transformer_engine.pytorch.dynamo.tensor_spec import TensorSpec
    from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer
    from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer
    from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer
    from transformer_engine_torch import DType

    from memaudit.te.emulate.allocation import by_constructor
    from memaudit.te.emulate.gates import emulated_arch

    out = []
    with emulated_arch("sm100"):
        makers = {
            "mxfp8": lambda: MXFP8Quantizer(DType.kFloat8E4M3),
            "nvfp4": lambda: NVFP4Quantizer(DType.kFloat4E2M1, with_rht=True),
            "fp8-current": lambda: Float8CurrentScalingQuantizer(DType.kFloat8E4M3, device=torch.device("cuda")),
        }
        for name, make in makers.items():
            for row, col in ((True, False), (False, True), (True, True)):
                for internal in (True, False):
                    q = make()
                    q.set_usage(rowwise=row, columnwise=col)
                    q.internal = internal
                    shape = (256, 512)
                    a = TensorSpec(shape, torch.bfloat16, q, device=torch.device("cuda")).create_tensor()
                    b = by_constructor(q, shape, torch.bfloat16, "cuda")

                    def inner(t: Any) -> dict[str, Any]:
                        return {k: (tuple(v.shape), v.dtype) for k, v in vars(t).items() if isinstance(v, torch.Tensor)}

                    if type(a) is not type(b) or inner(a) != inner(b):
                        out.append(
                            f"{name} row={row} col={col} internal={internal}: {type(a).__name__} {inner(a)} != "
                            f"{type(b).__name__} {inner(b)}"
                        )
                    out.append("checked")
    return out


def test_constructor_allocation_equals_tensor_spec() -> None:
    from memaudit.te.emulate.host import call_in_child, unavailable

    if unavailable():
        pytest.skip(unavailable())
    result = call_in_child("sm100", _compare_allocations)
    assert result.count("checked") == 18
    assert [r for r in result if r != "checked"] == []


# ---- sources, worker, history, bisect -------------------------------------------------------------


def test_git_tree_is_python_only_with_its_version_and_identity(te_repo: dict[str, Any]) -> None:
    from memaudit.te.history.sources import git_rev

    src = git_rev(te_repo["repo"], te_repo["commits"][2], te_repo["cache"])
    assert src.version == f"2.20.2+g{te_repo['commits'][2][:12]}" and src.pr == 3545
    files = [p for p in (src.tree / "transformer_engine").rglob("*") if p.is_file()]
    assert files and all(p.suffix == ".py" for p in files)
    again = git_rev(te_repo["repo"], te_repo["commits"][2], te_repo["cache"])
    assert again.tree_sha256 == src.tree_sha256
    other = git_rev(te_repo["repo"], te_repo["commits"][0], te_repo["cache"])
    assert other.tree_sha256 != src.tree_sha256


def test_a_tree_that_claims_another_version_is_an_error_cell(te_repo: dict[str, Any]) -> None:
    """Never the wrong version: the worker checks the version TE reports after the import."""
    from memaudit.te.history.history import run_version
    from memaudit.te.history.sources import SOURCE_FILE, git_rev

    src = git_rev(te_repo["repo"], te_repo["commits"][0], te_repo["cache"])
    liar = te_repo["cache"] / "liar"
    shutil.copytree(src.tree, liar, dirs_exist_ok=True)
    meta = json.loads((liar / SOURCE_FILE).read_text())
    meta["version"] = "2.17.1"
    (liar / SOURCE_FILE).write_text(json.dumps(meta))
    from memaudit.te.history.sources import TESource

    report, why = run_version(TESource.read(liar), [CASE])
    assert why is not None and "reports version" in why and "expected 2.17.1" in why, why
    assert [c.status for c in report.cases] == ["error"]


def test_bisect_names_the_commit_that_made_the_change(te_repo: dict[str, Any]) -> None:
    from memaudit.te.history.bisect import bisect

    a, _b, c, d = te_repo["commits"]
    result = bisect(te_repo["repo"], a, d, CASE, te_repo["cache"])
    assert result.first == c and result.pr == 3545 and result.candidates == [c]
    assert "columnwise inputs only" in (result.subject or "")
    removed = {(r.operand, r.kind, r.orientation) for r in result.changes if r.after is None}
    assert ("fc1.input", "data", "rowwise") in removed and ("fc1.input", "scale_inv", "rowwise") in removed
    assert ("fc2.input", "data", "rowwise") in removed
    assert all(r.delta < 0 for r in result.changes)
    assert result.before is not None and result.after is not None
    assert result.after.totals.saved_bytes < result.before.totals.saved_bytes
    assert {p.verdict for p in result.probes} <= {"old", "new"}


def test_bisect_names_its_flag_for_an_unknown_revision(te_repo: dict[str, Any], tmp_path: Path) -> None:
    done = _cli(
        "te-history",
        "--te-repo",
        str(te_repo["repo"]),
        "--bisect",
        "nosuchrev..main",
        "--case",
        CASE.id,
        "--out",
        str(tmp_path / "out"),
        "--cache",
        str(te_repo["cache"]),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--bisect: unknown revision 'nosuchrev'" in done.stderr
    assert not (tmp_path / "out").exists()


def test_bisect_refuses_a_range_without_a_change(te_repo: dict[str, Any]) -> None:
    from memaudit.errors import UsageError
    from memaudit.te.history.bisect import bisect

    a, b, _c, _d = te_repo["commits"]
    with pytest.raises(UsageError, match="same saved state"):
        bisect(te_repo["repo"], a, b, CASE, te_repo["cache"])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memaudit.cli.root", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_history_over_revisions_twice_is_byte_identical(te_repo: dict[str, Any], tmp_path: Path) -> None:
    repo, (a, _b, c, _d) = te_repo["repo"], te_repo["commits"]
    outs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        done = _cli(
            "te-history",
            "--te-repo",
            str(repo),
            "--rev",
            a,
            "--rev",
            c,
            "--case",
            CASE.id,
            "--out",
            str(out),
            "--cache",
            str(te_repo["cache"]),
            "--no-plot",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        outs.append(out)
    names = sorted(p.name for p in outs[0].iterdir())
    assert (
        names
        == sorted(p.name for p in outs[1].iterdir())
        == ["history.json", "history.md", f"te-{a[:12]}.json", f"te-{c[:12]}.json"]
    )
    for n in names:
        assert (outs[0] / n).read_bytes() == (outs[1] / n).read_bytes(), n
    h = json.loads((outs[0] / "history.json").read_text())
    (case,) = h["cases"]
    (change,) = case["changes"]
    assert change["what"] == "saved state" and change["saved_delta"] < 0
    assert {r["operand"] for r in change["rows"]} == {"fc1.input", "fc2.input"}
    for n in names:
        if n.startswith("te-"):
            report = load_report(outs[0] / n)  # every per-version report loads as a memaudit report
            assert report.environment["te_source"]["kind"] == "git"
    # compare between the two neighbours fails exactly because the saved state changed
    base, cur = outs[0] / f"te-{a[:12]}.json", outs[0] / f"te-{c[:12]}.json"
    assert _cli("compare", str(base), str(cur), "--fail-on", "change", "--allow-emulated").returncode == 1
    assert _cli("compare", str(base), str(base), "--fail-on", "change", "--allow-emulated").returncode == 0


def test_local_tree_against_the_installed_te(te_repo: dict[str, Any], tmp_path: Path) -> None:
    """--te-tree: the checkout's working tree (PR #3545's change applied) is copied, declares
    VERSION.txt's version with +local and its hash, and differs from the installed TE exactly by the
    rowwise input buffers PR #3545 prunes."""
    out = tmp_path / "out"
    done = _cli(
        "te-history",
        "--te-tree",
        str(te_repo["repo"]),
        "--installed",
        "--case",
        CASE.id,
        "--out",
        str(out),
        "--cache",
        str(te_repo["cache"]),
        "--no-plot",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    h = json.loads((out / "history.json").read_text())
    local, inst = h["versions"]
    assert local["source"]["kind"] == "local" and local["source"]["version"].startswith("2.20.2+local")
    assert inst["source"]["kind"] == "installed"
    report = load_report(out / local["report"])
    assert report.environment["transformer_engine"] == local["source"]["version"]
    (change,) = h["cases"][0]["changes"]
    assert change["before"] == local["label"] and change["saved_delta"] > 0
    assert {(r["operand"], r["orientation"]) for r in change["rows"] if r["before"] is None} == {
        ("fc1.input", "rowwise"),
        ("fc2.input", "rowwise"),
    }


def test_cli_refuses_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    afile = tmp_path / "afile"
    afile.write_text("")
    for args, needle in (
        (["--installed", "--cache", str(afile), "--out", str(out)], f"--cache: not a folder: {afile}"),
        (["--installed", "--out", str(afile)], f"--out: not a folder: {afile}"),
        (["--te", "2.x", "--out", str(out)], "--te"),
        (["--rev", "main", "--out", str(out)], "--rev needs --te-repo"),
        (["--te", "2.19.0", "--case", "nope", "--out", str(out)], "unknown case"),
        (["--te-repo", str(tmp_path), "--bisect", "a..b", "--out", str(out)], "not a git repository"),
        (["--installed", "--shape", "huge", "--out", str(out)], "unknown shape"),
        (["--installed", "--te-tree", str(tmp_path), "--out", str(out)], "holds no transformer_engine/pytorch package"),
        (["--installed"], "--out"),
    ):
        done = _cli("te-history", *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert needle in done.stderr + done.stdout, (needle, done.stderr)
    assert not out.exists()


def test_default_cases_are_the_issue_list() -> None:
    cases = default_cases()
    assert len(cases) == 20
    assert {(c.recipe, c.fused) for c in cases} == {
        ("nvfp4", True),
        ("mxfp8", True),
        ("nvfp4", False),
        ("mxfp8", False),
        ("fp8-current", False),
    }
    assert {c.groups for c in cases} == {1, 8}
    assert {(c.tokens, c.hidden, c.ffn) for c in cases} == {(4096, 1024, 2048), (82944, 3072, 1536)}


# ---- the committed history ------------------------------------------------------------------------


def _committed() -> dict[str, Any]:
    path = COMMITTED / "history.json"
    if not path.is_file():
        pytest.skip("reports/te-history/history.json is not committed")
    return json.loads(path.read_text())


def test_committed_reports_load_and_agree_with_the_history() -> None:
    h = _committed()
    assert len([v for v in h["versions"] if v["source"].get("kind") == "release"]) >= 4
    assert any(v["source"].get("kind") == "git" for v in h["versions"])
    reports = {v["label"]: load_report(COMMITTED / v["report"]) for v in h["versions"]}
    for case in h["cases"]:
        for cell in case["cells"]:
            c = reports[cell["version"]].case(case["id"])
            assert c is not None and c.status == cell["status"]
            if c.status == "ok":
                assert (c.totals.saved_bytes, len(c.rows)) == (cell["saved_bytes"], cell["rows"])


def test_compare_fails_exactly_where_the_committed_history_says_the_saved_state_changed() -> None:
    """For every neighbouring pair of committed versions and every case: ``compare --fail-on
    change`` finds a failing difference exactly where the saved bytes, the row count or the bytes
    per operand, kind or orientation changed (a row that only changed shape at equal bytes is a
    change of the history's saved state that compare does not gate on, and is reported as such)."""
    from memaudit.judge.baseline import compare_reports
    from memaudit.te.history.model import saved_state

    h = _committed()
    reports = [load_report(COMMITTED / v["report"]) for v in h["versions"]]
    checked = changed = 0
    for before, after in zip(reports, reports[1:], strict=False):
        cmp = compare_reports(before, after, fail_on="change", allow_emulated=True, allow_missing=True)
        for diff in cmp.cases:
            a, b = diff.baseline, diff.current
            if a is None or b is None or a.status != "ok" or b.status != "ok":
                continue
            checked += 1
            state_changed = saved_state(a) != saved_state(b)
            changed += state_changed
            if diff.regressed:
                assert state_changed, diff.id
            elif state_changed:
                assert a.totals.saved_bytes == b.totals.saved_bytes and len(a.rows) == len(b.rows), diff.id
    assert checked and changed


def test_compare_command_exits_nonzero_exactly_on_the_committed_pairs_that_changed() -> None:
    """``memaudit compare --fail-on change`` on every committed neighbouring pair: exit 1 where the
    history records a change between the two versions, 0 where it records none."""
    from typer.testing import CliRunner

    from memaudit.cli import app

    h = _committed()
    labels = [v["label"] for v in h["versions"]]
    files = {v["label"]: str(COMMITTED / v["report"]) for v in h["versions"]}
    codes = {}
    for a, b in zip(labels, labels[1:], strict=False):
        changed = any(ch["before"] == a and ch["after"] == b for c in h["cases"] for ch in c["changes"])
        done = CliRunner().invoke(app, ["compare", files[a], files[b], "--fail-on", "change", "--allow-emulated"])
        codes[(a, b)] = done.exit_code
        assert done.exit_code == (1 if changed else 0), (a, b, done.output[-2000:])
    assert 0 in codes.values() and 1 in codes.values(), codes


def test_committed_history_comes_out_of_its_reports_byte_for_byte() -> None:
    """history.json (less its recorded bisects) and history.md are made again from the committed
    per-version reports (``bench/make/te_history.py render``); the figure is left out (fonts differ)."""
    from memaudit.te.history.model import load, rebuild
    from memaudit.te.history.render import history_markdown

    _committed()
    h = rebuild(load(COMMITTED / "history.json"), COMMITTED)
    assert h.to_json() == (COMMITTED / "history.json").read_text(encoding="utf-8")
    assert history_markdown(h) == (COMMITTED / "history.md").read_text(encoding="utf-8")


def test_committed_bisects_name_prs_3048_and_3238() -> None:
    h = _committed()
    found = {b.get("pr") for b in h["bisects"] if b.get("first")}
    assert {3048, 3238} <= found, found

"""The CI recipe: the GitHub Action's script (``memaudit/gate.sh``) run locally, with a fake ``gh`` on
PATH that records every API call and serves the pull request's comments in pages, and (for the
exit-code matrix) a fake ``memaudit`` that exits with the code a test gives it. No network.

Checked: the sticky comment is updated when a comment with the marker exists (on any page, so the
lookup must paginate) and created when none does; the verdict for each exit code of ``run``,
``check`` and ``compare`` is the one docs/guides/ci.md's table gives; the real memaudit end to end (the
comment posted is ``compare --markdown``'s file); ``action.yml`` passes its inputs to the script,
installs the published name pinned to this version, and memaudit's own workflow uses the action.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "memaudit" / "gate.sh"
MARKER = "<!-- memaudit:base -->"

FAKE_GH = r'''#!PYTHON
"""A fake gh: records each call in $FAKE_GH_LOG (one JSON line) and answers from $FAKE_GH_PAGES."""
import json, os, sys
args = sys.argv[1:]
assert args[0] == "api", args
args = args[1:]
call = {"method": "GET", "paginate": False, "fields": {}}
rest = []
i = 0
while i < len(args):
    a = args[i]
    if a == "--paginate":
        call["paginate"] = True
    elif a in ("--method", "-X"):
        call["method"] = args[i + 1]; i += 1
    elif a in ("-F", "--field", "-f", "--raw-field"):
        k, v = args[i + 1].split("=", 1); i += 1
        call["fields"][k] = open(v[1:], encoding="utf-8").read() if v.startswith("@") else v
    elif a.startswith("-"):
        sys.exit(f"fake gh: unknown flag {a}")
    else:
        rest.append(a)
    i += 1
call["path"] = rest[0]
with open(os.environ["FAKE_GH_LOG"], "a", encoding="utf-8") as f:
    f.write(json.dumps(call) + "\n")
if os.environ.get("FAKE_GH_FAIL") == call["method"]:
    sys.exit("fake gh: HTTP 403: Resource not accessible by integration")
if call["path"] == "user":  # an installation token (GITHUB_TOKEN) may not read /user
    if not os.environ.get("FAKE_GH_LOGIN"):
        sys.exit("fake gh: HTTP 403: Resource not accessible by integration")
    print(json.dumps({"login": os.environ["FAKE_GH_LOGIN"]}))
    sys.exit(0)
if "/pulls/" in call["path"]:  # the pull request's changed files
    print(json.dumps([{"filename": f} for f in os.environ.get("FAKE_GH_FILES", "").split(",") if f]))
    sys.exit(0)
if call["method"] == "GET" and os.environ.get("FAKE_GH_HANG"):  # a call that never answers
    import time
    time.sleep(float(os.environ["FAKE_GH_HANG"]))
if call["method"] == "GET" and "FAKE_GH_LISTING" in os.environ:  # exit 0, but not JSON pages
    sys.stdout.buffer.write(open(os.environ["FAKE_GH_LISTING"], "rb").read())
    sys.exit(0)
if call["method"] == "GET":
    pages = json.load(open(os.environ["FAKE_GH_PAGES"], encoding="utf-8"))
    for page in (pages if call["paginate"] else pages[:1]):  # gh --paginate: one array per page, back to back
        sys.stdout.write(json.dumps(page))
    sys.stdout.write("\n")
else:
    print(json.dumps({"id": 999}))
'''

FAKE_MEMAUDIT = r'''#!PYTHON
"""A fake memaudit: `run` / `check` / `compare` exit with $FAKE_RUN_RC / $FAKE_CHECK_RC /
$FAKE_COMPARE_RC and write what the real one writes (run: --json unless it exits 2; compare:
--markdown and --benchmark-json unless it exits 2)."""
import json, os, sys
cmd, args = sys.argv[1], sys.argv[2:]
with open(os.environ["FAKE_MEMAUDIT_LOG"], "a", encoding="utf-8") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
rc = int(os.environ.get(f"FAKE_{cmd.upper()}_RC", "0"))
def opt(name):
    return args[args.index(name) + 1] if name in args else None
if rc != 2 and cmd == "run":
    open(opt("--json"), "w").write("{}")
if rc != 2 and cmd == "compare":
    open(opt("--markdown"), "w").write("<!-- memaudit:" + (opt("--name") or "base") + " -->\nverdict line\n")
    open(opt("--benchmark-json"), "w").write("[]")
sys.exit(rc)
'''


def _comment(i: int, body: str, login: str = "github-actions[bot]") -> dict:
    return {"id": i, "body": body, "user": {"login": login}}


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for name, text in (("gh", FAKE_GH), ("memaudit", FAKE_MEMAUDIT)):
        (d / name).write_text(text.replace("PYTHON", sys.executable), encoding="utf-8")
        (d / name).chmod(0o755)
    return d


def gate(
    tmp_path: Path, bin_dir: Path, *, pages: list[list[dict]] | None = None, real: bool = False, **env: str
) -> tuple[int, str, list[dict], list[list[str]]]:
    """Run memaudit/gate.sh in tmp_path/work; returns its exit code, output, gh calls, memaudit calls."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (tmp_path / "pages.json").write_text(json.dumps(pages if pages is not None else [[]]), encoding="utf-8")
    for log in ("gh.log", "memaudit.log"):
        (tmp_path / log).write_text("", encoding="utf-8")
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    if real:  # the real memaudit of this interpreter, the fake gh
        (bin_dir / "memaudit").unlink(missing_ok=True)
        path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MEMAUDIT", "GITHUB", "FAKE_"))}
    full.update(
        PATH=path,
        FAKE_GH_LOG=str(tmp_path / "gh.log"),
        FAKE_GH_PAGES=str(tmp_path / "pages.json"),
        FAKE_MEMAUDIT_LOG=str(tmp_path / "memaudit.log"),
        GITHUB_REPOSITORY="owner/repo",
        MEMAUDIT_BASELINE="base.json",
        MEMAUDIT_PYTHON=sys.executable,
        NO_COLOR="1",
        COLUMNS="120",
    )
    full.update(env)
    start = time.monotonic()
    done = subprocess.run(["bash", str(GATE)], cwd=work, env=full, capture_output=True, text=True, timeout=300)
    gate.seconds = time.monotonic() - start  # type: ignore[attr-defined]
    calls = [json.loads(x) for x in (tmp_path / "gh.log").read_text(encoding="utf-8").splitlines()]
    gate.files_calls = [c for c in calls if "/pulls/" in c["path"]]  # type: ignore[attr-defined]
    # who the token is and which files the PR changes: asked before the listing
    calls = [c for c in calls if c["path"] != "user" and "/pulls/" not in c["path"]]
    runs = [json.loads(x) for x in (tmp_path / "memaudit.log").read_text(encoding="utf-8").splitlines()]
    return done.returncode, done.stdout + done.stderr, calls, runs


# ---- the sticky comment ---------------------------------------------------------------------------
def test_a_pr_without_the_comment_gets_one_created(tmp_path: Path, bin_dir: Path) -> None:
    pages = [
        [_comment(i, f"a review comment {i}") for i in range(1, 101)],
        [_comment(101, "<!-- memaudit:other -->\nx")],
    ]
    rc, out, calls, _ = gate(tmp_path, bin_dir, pages=pages, MEMAUDIT_COMMENT="true", MEMAUDIT_PR="7")
    assert rc == 0, out
    assert [(c["method"], c["path"], c["paginate"]) for c in calls] == [
        ("GET", "repos/owner/repo/issues/7/comments?per_page=100", True),
        ("POST", "repos/owner/repo/issues/7/comments", False),
    ]
    assert calls[1]["fields"]["body"] == (tmp_path / "work" / "memaudit-out" / "comment.md").read_text(encoding="utf-8")
    assert calls[1]["fields"]["body"].startswith(MARKER)
    assert "created a comment" in out


def test_the_sticky_comment_on_a_later_page_is_updated(tmp_path: Path, bin_dir: Path) -> None:
    """The marker's comment is on page 2: a lookup that does not paginate would create a second one."""
    pages = [
        [_comment(i, f"comment {i}") for i in range(1, 101)],
        [_comment(150, "not it: " + MARKER), _comment(151, MARKER + "\nold verdict"), _comment(152, MARKER)],
    ]
    rc, out, calls, _ = gate(tmp_path, bin_dir, pages=pages, MEMAUDIT_COMMENT="true", MEMAUDIT_PR="7")
    assert rc == 0, out
    assert [(c["method"], c["path"]) for c in calls] == [
        ("GET", "repos/owner/repo/issues/7/comments?per_page=100"),
        ("PATCH", "repos/owner/repo/issues/comments/151"),  # the first comment that starts with the marker
    ]
    assert calls[1]["fields"]["body"].startswith(MARKER + "\nverdict line")
    assert "updated comment 151" in out


def test_the_marker_name_decides_which_comment(tmp_path: Path, bin_dir: Path) -> None:
    pages = [[_comment(1, MARKER), _comment(2, "<!-- memaudit:b200 -->\n")]]
    rc, out, calls, runs = gate(
        tmp_path, bin_dir, pages=pages, MEMAUDIT_COMMENT="true", MEMAUDIT_PR="7", MEMAUDIT_NAME="b200"
    )
    assert rc == 0 and calls[-1]["path"] == "repos/owner/repo/issues/comments/2", out
    assert runs[-1][runs[-1].index("--name") + 1] == "b200"


def test_the_pr_number_comes_from_the_event(tmp_path: Path, bin_dir: Path) -> None:
    (tmp_path / "event.json").write_text(json.dumps({"pull_request": {"number": 42}}), encoding="utf-8")
    rc, out, calls, _ = gate(tmp_path, bin_dir, MEMAUDIT_COMMENT="true", GITHUB_EVENT_PATH=str(tmp_path / "event.json"))
    assert rc == 0 and [c["path"] for c in calls][-1] == "repos/owner/repo/issues/42/comments", out


@pytest.mark.parametrize(
    "env",
    [{"MEMAUDIT_COMMENT": "false", "MEMAUDIT_PR": "7"}, {"MEMAUDIT_COMMENT": "true"}],
    ids=["comment-off", "not-a-pr"],
)
def test_no_comment_no_api_call(tmp_path: Path, bin_dir: Path, env: dict[str, str]) -> None:
    rc, out, calls, _ = gate(tmp_path, bin_dir, **env)
    assert rc == 0 and calls == [], out


@pytest.mark.parametrize("fail", ["POST", "GET"])
def test_a_comment_that_cannot_be_posted_warns_and_keeps_the_verdict(tmp_path: Path, bin_dir: Path, fail: str) -> None:
    for compare_rc in (0, 1):
        rc, out, calls, _ = gate(
            tmp_path,
            bin_dir,
            MEMAUDIT_COMMENT="true",
            MEMAUDIT_PR="7",
            FAKE_GH_FAIL=fail,
            FAKE_COMPARE_RC=str(compare_rc),
        )
        assert rc == compare_rc and "warning: could not" in out, out


# ---- the verdict for each exit code -------------------------------------------------------------------
# (first command's exit code, compare's exit code) -> the job's exit code, as docs/guides/ci.md's table says
RUN_MATRIX = [
    (0, 0, 0),
    (0, 1, 1),
    (0, 2, 2),
    (1, 0, 1),
    (1, 1, 1),
    (2, None, 2),
    (3, 0, 0),
    (3, 1, 1),
    (3, 2, 2),
    (4, 0, 4),
    (4, 1, 4),
    (137, 0, 137),
]


@pytest.mark.parametrize(("first", "compare", "job"), RUN_MATRIX, ids=[f"run{a}-compare{b}" for a, b, _ in RUN_MATRIX])
def test_the_verdict_after_run(tmp_path: Path, bin_dir: Path, first: int, compare: int | None, job: int) -> None:
    rc, out, _, runs = gate(
        tmp_path,
        bin_dir,
        MEMAUDIT_SCENARIO="grouped_mlp",
        MEMAUDIT_RUN_ARGS="--recipe nvfp4  --groups 8",
        FAKE_RUN_RC=str(first),
        FAKE_COMPARE_RC=str(compare or 0),
    )
    assert rc == job, out
    assert runs[0] == [
        "run",
        "--json",
        "memaudit-out/current.json",
        "--quiet",
        "--scenario",
        "grouped_mlp",
        "--recipe",
        "nvfp4",
        "--groups",
        "8",
    ]
    if compare is None:  # run exited 2 and wrote nothing: nothing to compare, the job fails
        assert len(runs) == 1 and "compare did not run" in out
    else:
        assert runs[1][:3] == ["compare", "base.json", "memaudit-out/current.json"]
    assert f"{'pass' if job == 0 else 'fail'}" in out.splitlines()[-1]


CHECK_MATRIX = [(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 0, 0), (3, 1, 1), (0, 1, 1), (0, 2, 2)]


@pytest.mark.parametrize(
    ("first", "compare", "job"), CHECK_MATRIX, ids=[f"check{a}-compare{b}" for a, b, _ in CHECK_MATRIX]
)
def test_the_verdict_after_check(tmp_path: Path, bin_dir: Path, first: int, compare: int, job: int) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "given.json").write_text("{}", encoding="utf-8")
    rc, out, _, runs = gate(
        tmp_path,
        bin_dir,
        MEMAUDIT_SCENARIO="s.toml",
        MEMAUDIT_REPORT="given.json",
        FAKE_CHECK_RC=str(first),
        FAKE_COMPARE_RC=str(compare),
    )
    assert rc == job, out
    assert runs[0] == ["check", "given.json", "--scenario", "s.toml"]
    assert runs[1][:3] == ["compare", "base.json", "given.json"]


@pytest.mark.parametrize(("compare", "job"), [(0, 0), (1, 1), (2, 2)])
def test_a_given_report_without_a_scenario_is_only_compared(
    tmp_path: Path, bin_dir: Path, compare: int, job: int
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "given.json").write_text("{}", encoding="utf-8")
    rc, out, _, runs = gate(tmp_path, bin_dir, MEMAUDIT_REPORT="given.json", FAKE_COMPARE_RC=str(compare))
    assert rc == job and [r[0] for r in runs] == ["compare"], out


def test_a_missing_report_fails(tmp_path: Path, bin_dir: Path) -> None:
    rc, out, _, runs = gate(tmp_path, bin_dir, MEMAUDIT_REPORT="nowhere.json")
    assert rc == 2 and runs == [] and "compare did not run" in out, out


def test_no_baseline_setting_is_bad_input(tmp_path: Path, bin_dir: Path) -> None:
    rc, out, _, runs = gate(tmp_path, bin_dir, MEMAUDIT_BASELINE="")
    assert rc == 2 and runs == [] and "MEMAUDIT_BASELINE" in out, out


def test_a_deferred_verdict_exits_0_and_leaves_it_in_the_outputs(tmp_path: Path, bin_dir: Path) -> None:
    (tmp_path / "out.txt").write_text("", encoding="utf-8")
    rc, out, _, _ = gate(
        tmp_path,
        bin_dir,
        FAKE_RUN_RC="3",
        FAKE_COMPARE_RC="1",
        MEMAUDIT_DEFER_EXIT="true",
        GITHUB_OUTPUT=str(tmp_path / "out.txt"),
    )
    assert rc == 0, out
    outputs = dict(line.split("=", 1) for line in (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines())
    assert outputs == {"run-rc": "3", "compare-rc": "1", "verdict": "fail", "exit": "1"}


# ---- end to end, the real memaudit ----------------------------------------------------------------------
def test_the_real_memaudit_end_to_end(tmp_path: Path, bin_dir: Path) -> None:
    """The reference scenario (CPU) against a baseline of itself, commented, then again with the
    comment found and updated."""
    work = tmp_path / "work"
    work.mkdir()
    memaudit = [sys.executable, "-m", "memaudit"]
    env = {**os.environ, "NO_COLOR": "1"}
    subprocess.run(
        [*memaudit, "run", "--scenario", "reference", "--json", "first.json", "--quiet"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run(
        [*memaudit, "baseline", "update", "first.json", "--into", "base.json"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    rc, out, calls, _ = gate(
        tmp_path, bin_dir, real=True, MEMAUDIT_SCENARIO="reference", MEMAUDIT_COMMENT="true", MEMAUDIT_PR="5"
    )
    assert rc == 0, out
    body = (work / "memaudit-out" / "comment.md").read_text(encoding="utf-8")
    assert body.startswith(MARKER) and "no regression" in body
    assert calls[-1]["method"] == "POST" and calls[-1]["fields"]["body"] == body
    assert json.loads((work / "memaudit-out" / "bench.json").read_text(encoding="utf-8"))
    rc, out, calls, _ = gate(
        tmp_path,
        bin_dir,
        pages=[[_comment(8, "lgtm"), _comment(9, body)]],
        real=True,
        MEMAUDIT_SCENARIO="reference",
        MEMAUDIT_COMMENT="true",
        MEMAUDIT_PR="5",
    )
    assert rc == 0, out
    assert [(c["method"], c["path"]) for c in calls] == [
        ("GET", "repos/owner/repo/issues/5/comments?per_page=100"),
        ("PATCH", "repos/owner/repo/issues/comments/9"),
    ]


# ---- action.yml and the workflow ---------------------------------------------------------------------------
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


def test_the_action_is_composite_and_runs_the_script() -> None:
    assert ACTION["runs"]["using"] == "composite"
    steps = {s.get("id", s["name"]): s for s in ACTION["runs"]["steps"]}
    assert steps["gate"]["run"] == 'bash "$GITHUB_ACTION_PATH/memaudit/gate.sh"'
    env = steps["gate"]["env"]
    for name in ("baseline", "scenario", "run-args", "report", "compare-args", "name", "out"):
        key = "MEMAUDIT_" + name.upper().replace("-", "_")
        assert env[key] == "${{ inputs." + name + " }}", key
    assert env["MEMAUDIT_DEFER_EXIT"] == "true" and steps["Verdict"]["if"] == "always()"
    assert "github.event_name == 'pull_request'" in env["MEMAUDIT_COMMENT"]
    # every env variable the script reads is documented at its top
    head = GATE.read_text(encoding="utf-8").split("set -uo pipefail")[0]
    for key in env:
        assert key in head or key == "GH_TOKEN", key


def test_the_action_installs_the_published_name_at_this_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert ACTION["inputs"]["package"]["default"] == f"{project['name']}=={project['version']}"
    install = next(s for s in ACTION["runs"]["steps"] if s["name"] == "Install memaudit")
    assert '"$PACKAGE"' in install["run"] and install["env"]["PACKAGE"] == "${{ inputs.package }}"


def test_the_projects_workflow_uses_the_action() -> None:
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "memaudit.yml").read_text(encoding="utf-8"))
    uses = [s for job in flow["jobs"].values() for s in job["steps"] if s.get("uses") == "./"]
    assert len(uses) == 1 and uses[0]["with"]["package"] == "."  # this checkout, not the published one
    assert set(uses[0]["with"]) <= set(ACTION["inputs"])


def test_the_docs_yaml_uses_the_action_with_its_inputs() -> None:
    tokens = MarkdownIt().parse((ROOT / "docs" / "guides" / "ci.md").read_text(encoding="utf-8"))
    blocks = [yaml.safe_load(t.content) for t in tokens if t.type == "fence" and t.info.strip() == "yaml"]
    steps = [
        s for b in blocks if isinstance(b, dict) for job in (b.get("jobs") or {}).values() for s in job.get("steps", [])
    ]
    used = [
        s
        for s in steps
        if re.fullmatch(r"[\w.-]+/[\w.-]+@\S+", s.get("uses", "")) and "with" in s and "baseline" in s["with"]
    ]
    assert used, "docs/guides/ci.md should show the action in use"
    for s in used:
        assert set(s["with"]) <= set(ACTION["inputs"]), s["with"]


# ---- the artifact's name ---------------------------------------------------------------------------------
def _artifact_name(tmp_path: Path, **env: str) -> str:
    """The action's 'Artifact name' step run as the runner would, with ``env`` as its expressions give it."""
    step = next(s for s in ACTION["runs"]["steps"] if s.get("id") == "artifact")
    out = tmp_path / "artifact-out.txt"
    out.write_text("", encoding="utf-8")
    full = {
        "PATH": os.environ["PATH"],
        "GITHUB_OUTPUT": str(out),
        "ARTIFACT": ACTION["inputs"]["artifact"]["default"],
        "NAME": "",
        "BASELINE": "reports/baseline/b200.json",
        "JOB": "gate",
        "INDEX": "0",
        "ATTEMPT": "1",
        **env,
    }
    subprocess.run(["bash", "-c", step["run"]], env=full, check=True, timeout=30)
    outputs = dict(line.split("=", 1) for line in out.read_text(encoding="utf-8").splitlines())
    return outputs["name"]


def test_the_default_artifact_name_is_unique_per_matrix_cell_and_gate(tmp_path: Path) -> None:
    """upload-artifact refuses a second artifact of one name in a run (HTTP 409): two matrix cells,
    two jobs, two gates in one job and a re-run each get their own name by default."""
    step = next(s for s in ACTION["runs"]["steps"] if s.get("id") == "artifact")
    assert step["env"]["INDEX"] == "${{ strategy.job-index }}" and step["env"]["JOB"] == "${{ github.job }}"
    upload = next(s for s in ACTION["runs"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["with"]["name"] == "${{ steps.artifact.outputs.name }}"
    names = [
        _artifact_name(tmp_path),
        _artifact_name(tmp_path, INDEX="1"),
        _artifact_name(tmp_path, JOB="other"),
        _artifact_name(tmp_path, NAME="h100"),
        _artifact_name(tmp_path, ATTEMPT="2"),
    ]
    assert len(set(names)) == len(names), names
    assert names[0] == "memaudit-b200-gate-0-1"
    assert _artifact_name(tmp_path, ARTIFACT="mine") == "mine"
    assert _artifact_name(tmp_path, ARTIFACT="") == ""  # none uploaded
    assert _artifact_name(tmp_path, ARTIFACT='a:b/c"d') == "a-b-c-d"


# ---- workflow hygiene in the YAML people copy ------------------------------------------------------------
def _yaml_blocks() -> list[str]:
    out = []
    for doc in (ROOT / "docs" / "guides" / "ci.md", ROOT / "README.md"):
        out += [
            t.content
            for t in MarkdownIt().parse(doc.read_text(encoding="utf-8"))
            if t.type == "fence" and t.info.strip() == "yaml"
        ]
    return [*out, (ROOT / ".github" / "workflows" / "memaudit.yml").read_text(encoding="utf-8")]


def test_every_third_party_action_is_pinned_by_sha_with_its_tag_in_a_comment() -> None:
    """GitHub's own actions (actions/...) and this repository (./) aside, a `uses:` names a full
    commit SHA and says its tag in a comment on the same line."""
    seen = 0
    for block in _yaml_blocks():
        for line in block.splitlines():
            m = re.match(r"\s*(?:-\s+)?uses:\s+(\S+)(.*)$", line)
            if m is None or m.group(1).startswith(("actions/", "./")):
                continue
            seen += 1
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", m.group(1)), line
            assert re.match(r"\s+#\s*v\d", m.group(2)), line
    assert seen >= 3


def test_a_self_hosted_job_in_the_docs_has_the_fork_guard_in_its_yaml() -> None:
    jobs = []
    for block in _yaml_blocks():
        doc = yaml.safe_load(block)
        if isinstance(doc, dict):
            jobs += [j for j in (doc.get("jobs") or {}).values() if "self-hosted" in str(j.get("runs-on"))]
    assert len(jobs) >= 2
    for job in jobs:
        assert "github.event.pull_request.head.repo.full_name == github.repository" in job.get("if", ""), job


# ---- hostile comment listings --------------------------------------------------------------------------
def test_a_marker_comment_by_someone_else_is_left_alone(tmp_path: Path, bin_dir: Path) -> None:
    """Anyone can post the marker first: only the bot's (or the token's own) comment is updated."""
    pages = [[_comment(5, MARKER + "\nhijacked", login="mallory"), _comment(6, MARKER + "\nold verdict")]]
    rc, out, calls, _ = gate(tmp_path, bin_dir, pages=pages, MEMAUDIT_COMMENT="true", MEMAUDIT_PR="7")
    assert rc == 0, out
    assert [(c["method"], c["path"]) for c in calls][-1] == ("PATCH", "repos/owner/repo/issues/comments/6"), out
    rc, out, calls, _ = gate(tmp_path, bin_dir, pages=[pages[0][:1]], MEMAUDIT_COMMENT="true", MEMAUDIT_PR="7")
    assert rc == 0 and [c["method"] for c in calls] == ["GET", "POST"], out  # a comment of its own
    # a personal token: its own login counts (from gh api user)
    pages = [[_comment(5, MARKER + "\nby the token's user", login="ci-user")]]
    rc, out, calls, _ = gate(
        tmp_path, bin_dir, pages=pages, MEMAUDIT_COMMENT="true", MEMAUDIT_PR="7", FAKE_GH_LOGIN="ci-user"
    )
    assert rc == 0 and calls[-1]["path"] == "repos/owner/repo/issues/comments/5", out


GARBAGE = {
    "html 502": b"<html><head><title>502 Bad Gateway</title></head><body>bad gateway</body></html>\n",
    "an object": b'{"message": "Not Found"}\n',
    "truncated": b'[{"id": 1, "body": "<!-- memaudit:base -->", "user": {"login": "github-actions[bot]"}}, '
    b'{"id": 2, "bo',
    "binary": bytes(range(256)) * 4,
    "ids that are not integers": b'[{"id": "1; rm -rf /", "body": "<!-- memaudit:base -->", '
    b'"user": {"login": "github-actions[bot]"}}]',
}


@pytest.mark.parametrize("kind", list(GARBAGE), ids=list(GARBAGE))
def test_an_unreadable_listing_posts_nothing(tmp_path: Path, bin_dir: Path, kind: str) -> None:
    """gh exits 0 but prints what is not JSON pages of comments: a warning, no traceback, and no
    second comment (which a POST would make), whatever the verdict."""
    (tmp_path / "listing").write_bytes(GARBAGE[kind])
    for compare_rc in (0, 1):
        rc, out, calls, _ = gate(
            tmp_path,
            bin_dir,
            MEMAUDIT_COMMENT="true",
            MEMAUDIT_PR="7",
            FAKE_GH_LISTING=str(tmp_path / "listing"),
            FAKE_COMPARE_RC=str(compare_rc),
        )
        assert rc == compare_rc, out
        assert "Traceback" not in out and "could not read the pull request's comments" in out, out
        assert [c["method"] for c in calls] == ["GET"], calls


def test_a_hung_gh_is_cut_off_and_posts_nothing(tmp_path: Path, bin_dir: Path) -> None:
    rc, out, calls, _ = gate(
        tmp_path,
        bin_dir,
        MEMAUDIT_COMMENT="true",
        MEMAUDIT_PR="7",
        FAKE_GH_HANG="120",
        MEMAUDIT_GH_TIMEOUT="2",
        FAKE_COMPARE_RC="1",
    )
    assert rc == 1, out
    assert gate.seconds < 30, gate.seconds  # type: ignore[attr-defined]
    assert "could not list the pull request's comments" in out and [c["method"] for c in calls] == ["GET"], out


# ---- multi-line inputs ----------------------------------------------------------------------------------------
def test_multi_line_args_keep_every_line(tmp_path: Path, bin_dir: Path) -> None:
    """`compare-args: |` in YAML gives one argument per line: none is dropped."""
    rc, out, _, runs = gate(
        tmp_path,
        bin_dir,
        MEMAUDIT_SCENARIO="reference",
        MEMAUDIT_RUN_ARGS="--recipe bf16\n--groups 1,2\n",
        MEMAUDIT_COMPARE_ARGS="-v\n--strict-env\n\t--tolerance 0\n",
    )
    assert rc == 0, out
    assert runs[0][-4:] == ["--recipe", "bf16", "--groups", "1,2"]
    assert runs[1][-4:] == ["-v", "--strict-env", "--tolerance", "0"]


# ---- what the comment says about the baseline ----------------------------------------------------------------
def test_the_comment_says_whether_the_pr_changed_the_baseline(tmp_path: Path, bin_dir: Path) -> None:
    for files, said in (
        ("src/x.py,base.json", "this pull request changes the baseline"),
        ("src/x.py", "this pull request does not change the baseline"),
    ):
        rc, out, _, runs = gate(tmp_path, bin_dir, MEMAUDIT_COMMENT="true", MEMAUDIT_PR="7", FAKE_GH_FILES=files)
        assert rc == 0, out
        assert gate.files_calls[0]["path"] == "repos/owner/repo/pulls/7/files?per_page=100"  # type: ignore[attr-defined]
        compare = runs[-1]
        assert compare[compare.index("--baseline-note") + 1] == said, compare
    rc, out, _, runs = gate(tmp_path, bin_dir, MEMAUDIT_COMMENT="false")  # no PR: nothing asked, nothing said
    assert "--baseline-note" not in runs[-1] and gate.files_calls == []  # type: ignore[attr-defined]


def test_the_real_comment_says_how_to_accept_and_where_the_baseline_came_from(tmp_path: Path) -> None:
    """compare --markdown: the baseline's file and blob id, and the exact command that accepts
    the current report, when something changed (and only then)."""
    ref = ROOT / "reports" / "cpu" / "reference.json"
    d = json.loads(ref.read_text(encoding="utf-8"))
    d["cases"][0]["reason"] = None
    changed = json.loads(json.dumps(d))
    changed["cases"] = changed["cases"][:-1]  # a case missing: a change
    (tmp_path / "cur.json").write_text(json.dumps(changed), encoding="utf-8")
    env = {**os.environ, "NO_COLOR": "1"}
    memaudit = [sys.executable, "-m", "memaudit", "compare", str(ref)]
    subprocess.run(
        [*memaudit, "cur.json", "--markdown", "c.md", "--allow-missing", "--baseline-note", "note <b>"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    body = (tmp_path / "c.md").read_text(encoding="utf-8")
    blob = subprocess.run(["git", "hash-object", str(ref)], capture_output=True, text=True, check=True).stdout.strip()
    assert f"Baseline: `{ref}` (blob {blob[:12]}" in body and "note &lt;b&gt;" in body, body[-800:]
    assert f"`memaudit baseline update cur.json --into {ref}`" in body, body[-800:]
    subprocess.run(
        [*memaudit, str(ref), "--markdown", "same.md"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=120,
        check=True,
    )
    same = (tmp_path / "same.md").read_text(encoding="utf-8")
    assert "Baseline: `" in same and "memaudit baseline update" not in same  # nothing to accept

#!/usr/bin/env bash
# memaudit's CI gate: run (or check) -> compare against the baseline -> sticky PR comment -> verdict.
#
# The GitHub Action (action.yml) runs this script. It ships inside memaudit (package data), so GitLab
# CI and a plain shell run the same one, found with
#   python -c 'import importlib.resources as r; print(r.files("memaudit") / "gate.sh")'
# (docs/guides/ci.md). Configured by environment variables:
#
#   MEMAUDIT_BASELINE      the committed baseline report (required)
#   MEMAUDIT_SCENARIO      a shipped scenario's name or a .toml path: `run --scenario` (or `check`)
#   MEMAUDIT_RUN_ARGS      more `memaudit run` arguments, split on spaces, tabs and newlines (every line)
#   MEMAUDIT_REPORT        an existing report to gate instead of running (judged by `check` when
#                          MEMAUDIT_SCENARIO is set too)
#   MEMAUDIT_COMPARE_ARGS  more `memaudit compare` arguments, split as run's (e.g. "--tolerance 0 --allow-missing")
#   MEMAUDIT_NAME          the comment's marker name (default: the baseline file's stem)
#   MEMAUDIT_OUT           the folder for current.json, comment.md, bench.json (default memaudit-out)
#   MEMAUDIT_COMMENT       true: post or update the sticky comment on the pull request (default false)
#   MEMAUDIT_PR            the pull request number (default: read from GITHUB_EVENT_PATH)
#   MEMAUDIT_COMMENT_AUTHORS  comma-separated logins whose marked comment may be updated (default
#                          github-actions[bot]; the token's own login, where `gh api user` gives it, too)
#   MEMAUDIT_GH_TIMEOUT    seconds each gh call may take (default 60): past it, the call failed
#   GITHUB_REPOSITORY      owner/name, for the comment (GitHub Actions sets it)
#   MEMAUDIT               the memaudit command (default memaudit); MEMAUDIT_PYTHON python (default python3)
#   MEMAUDIT_DEFER_EXIT    true: exit 0 and leave the verdict in GITHUB_OUTPUT (`exit`), so that later
#                          steps (an artifact upload) run before the job fails
#
# The verdict (docs/guides/ci.md has the table): the job fails when
#   run or check exits 1 (a budget failed or XPASSed, or nothing was judged), 2 (bad input),
#     4 (run: nothing was measured or emulated), or anything else but 0 and 3;
#   compare exits 1 (a regression) or 2 (bad input, a missing baseline included), or could not run
#     (no report).
# run / check exit 3 (a case ended in error, no budget failed) is left to compare, which fails on an
# error the baseline does not have. Posting the comment never changes the verdict: a failure to post
# (a fork's read-only token) is a warning.
set -uo pipefail

MEMAUDIT="${MEMAUDIT:-memaudit}"
PYTHON="${MEMAUDIT_PYTHON:-python3}"
OUT="${MEMAUDIT_OUT:-memaudit-out}"
BASELINE="${MEMAUDIT_BASELINE:-}"
SCENARIO="${MEMAUDIT_SCENARIO:-}"
REPORT="${MEMAUDIT_REPORT:-}"
COMMENT="${MEMAUDIT_COMMENT:-false}"
GH_TIMEOUT="${MEMAUDIT_GH_TIMEOUT:-60}"
# every line of a multi-line input (`run-args: |` in YAML), split on spaces, tabs and newlines
IFS=$' \t\n' read -r -d '' -a RUN_ARGS <<< "${MEMAUDIT_RUN_ARGS:-}" || true
IFS=$' \t\n' read -r -d '' -a COMPARE_ARGS <<< "${MEMAUDIT_COMPARE_ARGS:-}" || true

say() { printf 'memaudit gate: %s\n' "$*"; }
output() { if [ -n "${GITHUB_OUTPUT:-}" ]; then printf '%s=%s\n' "$1" "$2" >> "$GITHUB_OUTPUT"; fi; }
# gh with a time limit (MEMAUDIT_GH_TIMEOUT seconds): a hung API call is a failed one
gh_() {
  if command -v timeout > /dev/null 2>&1; then timeout -k 5 "$GH_TIMEOUT" gh "$@"; else gh "$@"; fi
}

if [ -z "$BASELINE" ]; then
  say "MEMAUDIT_BASELINE is not set (the baseline report to compare against)" >&2
  output verdict "bad input"; output exit 2
  [ "${MEMAUDIT_DEFER_EXIT:-false}" = true ] && exit 0
  exit 2
fi
mkdir -p "$OUT"

# 1. the report: run (measure) or check (judge an existing report against the scenario's budgets)
first=""; first_rc=""
if [ -z "$REPORT" ]; then
  REPORT="$OUT/current.json"
  args=(run --json "$REPORT" --quiet)
  [ -n "$SCENARIO" ] && args+=(--scenario "$SCENARIO")
  args+=("${RUN_ARGS[@]}")
  say "$MEMAUDIT ${args[*]}"
  "$MEMAUDIT" "${args[@]}"; first_rc=$?; first=run
elif [ -n "$SCENARIO" ]; then
  say "$MEMAUDIT check $REPORT --scenario $SCENARIO"
  "$MEMAUDIT" check "$REPORT" --scenario "$SCENARIO"; first_rc=$?; first=check
fi
[ -n "$first" ] && output "${first}-rc" "$first_rc"

# the pull request, for the comment (and whether it changed the baseline)
pr="${MEMAUDIT_PR:-}"
if [ -z "$pr" ] && [ -n "${GITHUB_EVENT_PATH:-}" ] && [ -f "${GITHUB_EVENT_PATH:-}" ]; then
  pr="$("$PYTHON" -c 'import json, sys; print((json.load(open(sys.argv[1])).get("pull_request") or {}).get("number") or "")' "$GITHUB_EVENT_PATH" 2> /dev/null)"
fi
baseline_note=""
if [ "$COMMENT" = true ] && [ -n "$pr" ] && [ -n "${GITHUB_REPOSITORY:-}" ]; then
  # the pull request's changed files (gh), against the baseline's path in the repository
  files="$OUT/.files.json"
  rel="$(git ls-files --full-name -- "$BASELINE" 2> /dev/null | head -n 1)"
  if gh_ api --paginate "repos/$GITHUB_REPOSITORY/pulls/$pr/files?per_page=100" > "$files" 2> /dev/null; then
    baseline_note="$(BASELINE_PATH="${rel:-$BASELINE}" "$PYTHON" -c '
import json, os, sys
try:
    text, pos, dec, names = open(sys.argv[1], encoding="utf-8").read(), 0, json.JSONDecoder(), set()
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        page, pos = dec.raw_decode(text, pos)
        names |= {f.get("filename") for f in page if isinstance(f, dict)}
except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError):
    sys.exit(0)  # unreadable: say nothing about it
path = os.path.normpath(os.environ["BASELINE_PATH"])
print("this pull request changes the baseline" if path in names else "this pull request does not change the baseline")
' "$files" 2> /dev/null)"
  fi
  rm -f "$files"
fi

# 2. compare (whatever step 1 said, as long as there is a report: the comment shows what changed)
compare_rc=""
if [ -f "$REPORT" ]; then
  args=(compare "$BASELINE" "$REPORT" --markdown "$OUT/comment.md" --benchmark-json "$OUT/bench.json" -v)
  [ -n "${MEMAUDIT_NAME:-}" ] && args+=(--name "$MEMAUDIT_NAME")
  [ -n "$baseline_note" ] && args+=(--baseline-note "$baseline_note")
  args+=("${COMPARE_ARGS[@]}")
  say "$MEMAUDIT ${args[*]}"
  "$MEMAUDIT" "${args[@]}"; compare_rc=$?
  output compare-rc "$compare_rc"
  if [ "$compare_rc" = 2 ] && [ ! -e "$BASELINE" ]; then
    say "no baseline at $BASELINE yet: create it from this run's report (docs/guides/ci.md, the first baseline):"
    say "  memaudit baseline update $REPORT --into $BASELINE"
  fi
else
  say "no report at $REPORT: nothing to compare"
fi

# 3. the sticky comment: found again by its hidden first line, over every page of the PR's comments
if [ "$COMMENT" = true ] && [ -f "$OUT/comment.md" ]; then
  if [ -z "$pr" ] || [ -z "${GITHUB_REPOSITORY:-}" ]; then
    say "not a pull request (no PR number or repository): no comment posted"
  else
    marker="$(head -n 1 "$OUT/comment.md")"
    listing="$OUT/.comments.json"
    me="$OUT/.user.json"
    id=""
    # whose comment may be updated: the token's own login (a personal token) and the Actions bot
    # (GITHUB_TOKEN, whose /user lookup is refused); anyone else's comment with the marker is left alone
    gh_ api user > "$me" 2> /dev/null || : > "$me"
    if gh_ api --paginate "repos/$GITHUB_REPOSITORY/issues/$pr/comments?per_page=100" > "$listing"; then
      # --paginate prints one JSON array per page, back to back; anything else is an unreadable
      # listing (an HTML error page, a truncated answer): exit 3, treated like a failed gh
      id="$(MARKER="$marker" AUTHORS="${MEMAUDIT_COMMENT_AUTHORS:-github-actions[bot]}" "$PYTHON" -c '
import json, os, sys
authors = set(os.environ["AUTHORS"].split(","))
try:
    me = json.loads(open(sys.argv[2], encoding="utf-8").read() or "null")
    if isinstance(me, dict) and isinstance(me.get("login"), str):
        authors.add(me["login"])
except (OSError, ValueError):
    pass
try:
    text, pos, dec = open(sys.argv[1], encoding="utf-8").read(), 0, json.JSONDecoder()
    found = None
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        page, pos = dec.raw_decode(text, pos)
        if not isinstance(page, list):
            raise ValueError(f"a page is a JSON {type(page).__name__}, not an array of comments")
        for c in page:
            if not isinstance(c, dict) or not isinstance(c.get("id"), int) or isinstance(c.get("id"), bool):
                raise ValueError("a comment without an integer id")
            user = c.get("user") if isinstance(c.get("user"), dict) else {}
            body = c.get("body") if isinstance(c.get("body"), str) else ""
            if found is None and body.startswith(os.environ["MARKER"]) and user.get("login") in authors:
                found = c["id"]
except (OSError, UnicodeDecodeError, ValueError) as exc:
    print(f"memaudit gate: the comment listing is not readable ({str(exc)[:200]})", file=sys.stderr)
    sys.exit(3)
if found is not None:
    print(found)
' "$listing" "$me")"
      read_rc=$?
      if [ "$read_rc" != 0 ]; then
        say "warning: could not read the pull request's comments; no comment posted (the verdict stands)"
      elif [ -n "$id" ]; then
        gh_ api --method PATCH "repos/$GITHUB_REPOSITORY/issues/comments/$id" -F "body=@$OUT/comment.md" > /dev/null \
          && say "updated comment $id" || say "warning: could not update comment $id (the verdict stands)"
      else
        gh_ api --method POST "repos/$GITHUB_REPOSITORY/issues/$pr/comments" -F "body=@$OUT/comment.md" > /dev/null \
          && say "created a comment" || say "warning: could not create the comment (a fork's read-only token?); the verdict stands"
      fi
      output comment-id "$id"
    else
      say "warning: could not list the pull request's comments (gh failed or ran past ${GH_TIMEOUT} s); no comment posted (the verdict stands)"
    fi
    rm -f "$listing" "$me"
  fi
fi

# 4. the verdict
code=0; why=()
case "$first_rc" in
  ""|0) ;;
  3) why+=("$first exited 3 (a case ended in error): left to compare") ;;
  1) code=1; why+=("$first exited 1 (a budget failed or XPASSed, or nothing was judged)") ;;
  2) code=2; why+=("$first exited 2 (bad input)") ;;
  4) code=4; why+=("$first exited 4 (nothing was measured or emulated: this runner cannot run what the gate checks)") ;;
  *) code="$first_rc"; why+=("$first exited $first_rc") ;;
esac
case "$compare_rc" in
  0) ;;
  "") [ "$code" = 0 ] && code=2; why+=("compare did not run (no report)") ;;
  1) [ "$code" = 0 ] && code=1; why+=("compare exited 1 (a regression)") ;;
  2) [ "$code" = 0 ] && code=2; why+=("compare exited 2 (bad input)") ;;
  *) [ "$code" = 0 ] && code="$compare_rc"; why+=("compare exited $compare_rc") ;;
esac
verdict=pass; [ "$code" != 0 ] && verdict=fail
say "${first:-report} exit ${first_rc:--}, compare exit ${compare_rc:--}: $verdict${why:+ (}$(IFS=';'; printf '%s' "${why[*]:-}" | sed 's/;/; /g')${why:+)}"
output verdict "$verdict"
output exit "$code"
if [ "${MEMAUDIT_DEFER_EXIT:-false}" = true ]; then exit 0; fi
exit "$code"

#!/usr/bin/env bash
# The nightly accuracy job, as a Jenkins or GitHub Actions step can call it.
#
#   examples/nightly.sh                 one host: run everything, report, diff against the baseline
#   SHARD=2/4 examples/nightly.sh run   one host of a CI matrix: its quarter of the run
#   examples/nightly.sh merge           after the matrix, with every shard's OUT copied together:
#                                       merge, diff against the baseline, report, exit code
#
# Environment (all optional):
#   DEVICE        cpu | cuda | npu (default cpu)
#   NPU_BACKEND   e.g. triton_experimental (with DEVICE=npu)
#   SELECT        selection and run options, as shell words, e.g. "--full --tag seed --mode train_step"
#   KEYWORD       a -k expression over each run's name, tags, size, dtype and mode, e.g. "seed and int64"
#   WORKERS       worker processes, one device each (default: 1)
#   TIMEOUT       seconds one case may run (default 1800)
#   OUT           results directory (default nightly)
#   BASELINE      last night's $OUT/results.json: only what changed since then fails the job
#   KNOWN_ISSUES  a known-issues TOML: triaged failures run as strict expected failures
#   HARNESS       how to call the harness (default: $HARNESS_PYTHON -m harness)
#   HARNESS_PYTHON  the Python that has the harness installed (default: the checkout's .venv/bin/python if
#                 there is one, else python3 on PATH)
#   RESUME        1: a retried job continues from its journal in $OUT (only into a run of the same
#                 setup: the harness refuses another); otherwise every night runs everything anew
#
# Failing runs are localized (--bisect), against a baseline only the new ones: only they pay for it. Each
# localized kernel is extracted into a verified repro under $OUT/repros/<shard>/ (--extract), which the
# report links. The
# merged JUnit counts a failure the baseline already had as a skip ("known in baseline"), so it agrees with
# the exit code.
# Exit code: 0 nothing new broke (or, without a baseline, nothing failed); 1 a new failure;
# 2 a setup or usage error; 128+N the run was stopped by signal N (the partial results are kept).
# Artifacts: $OUT/index.html (the report), $OUT/results.json (tomorrow's BASELINE), $OUT/junit.xml,
# $OUT/repros/ (the extracted repros of the night's new failures).
set -uo pipefail

phase=${1:-all}
DEVICE=${DEVICE:-cpu}
OUT=${OUT:-nightly}
WORKERS=${WORKERS:-1}
TIMEOUT=${TIMEOUT:-1800}
checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${HARNESS_PYTHON:-} ]]; then
    python=$HARNESS_PYTHON
elif [[ -x $checkout/.venv/bin/python ]]; then
    python=$checkout/.venv/bin/python
else
    python=$(command -v python3 || echo python3)
fi
if [[ -z ${HARNESS:-} ]]; then
    if ! "$python" -c "import harness.frontends.cli" >/dev/null 2>&1; then
        echo "error: $python cannot import the harness: set HARNESS_PYTHON to the Python it is installed in" \
             "(after the README's set-up, $checkout/.venv/bin/python)" >&2
        exit 2
    fi
    HARNESS="$python -m harness"
fi
mkdir -p "$OUT"

run_shard() {
    local name=${SHARD:+shard-${SHARD/\//-of-}}
    name=${name:-all}
    local args=(run --device "$DEVICE" --workers "$WORKERS" --timeout "$TIMEOUT" --bisect
                --json "$OUT/$name.json" --extract "$OUT/repros/$name")
    # Last night's repros and results in a reused workspace are not tonight's (a resumed job keeps those it made,
    # and its journal); tonight's results file exists only once tonight's run wrote it.
    [[ ${RESUME:-} == 1 ]] || rm -rf "${OUT:?}/repros/$name" "${OUT:?}/$name.json"
    [[ -n ${SHARD:-} ]] && args+=(--shard "$SHARD")
    [[ -n ${NPU_BACKEND:-} ]] && args+=(--npu-backend "$NPU_BACKEND")
    [[ -n ${KNOWN_ISSUES:-} ]] && args+=(--known-issues "$KNOWN_ISSUES")
    [[ -n ${KEYWORD:-} ]] && args+=(-k "$KEYWORD")
    # Against the baseline, --bisect localizes only the new failures.
    [[ -n ${BASELINE:-} && -f ${BASELINE:-} ]] && args+=(--baseline "$BASELINE")
    # A retried CI job continues from what its journal holds, when asked: a workspace reused from last
    # night must run its cases, not carry last night's records.
    [[ ${RESUME:-} == 1 && -s "$OUT/$name.jsonl" ]] && args+=(--resume "$OUT/$name.jsonl")
    # SELECT as shell words (quotes kept: SELECT="-k 'seed and int64'"), without running it as shell code.
    # The words are split first, into a variable: a SELECT that does not split (an unbalanced quote) stops the
    # job with one line, rather than running every case without the selection.
    local selected=() words
    if [[ -n ${SELECT:-} ]]; then
        words=$("$python" -c '
import shlex, sys
try:
    sys.stdout.write("\0".join(shlex.split(sys.argv[1])))
except ValueError as exc:
    sys.exit(f"SELECT is not a list of shell words ({exc}): {sys.argv[1]}")' "$SELECT" | tr '\0' '\036') \
            || return 2  # (pipefail: the split's own status)
        # Words joined by the record separator (no word holds one), split back into an array, newlines kept.
        [[ -n $words ]] && IFS=$'\036' read -r -d '' -a selected < <(printf '%s' "$words")
    fi
    # shellcheck disable=SC2086  # HARNESS is a word list on purpose
    $HARNESS "${args[@]}" "${selected[@]}"
    local code=$?
    # A divergence is judged at the merge (against the baseline); setup errors and signals stop here.
    (( code == 1 )) && code=0
    return $code
}

merge() {
    # One host merges the run it just made; a matrix's merge takes the shards copied together. (A workspace
    # reused from a matrix night keeps its shard files: they are not tonight's one-host run.)
    local parts=("$OUT/all.json")
    if [[ $phase == merge ]]; then
        parts=("$OUT"/shard-*.json)
        [[ -e ${parts[0]} ]] || parts=("$OUT/all.json")
    fi
    local args=(report "${parts[@]}" --json "$OUT/results.json" -o "$OUT/index.html" --junit "$OUT/junit.xml" --check)
    [[ -n ${BASELINE:-} && -f ${BASELINE:-} ]] && args+=(--baseline "$BASELINE")
    if [[ $phase == all ]]; then
        # One host: the run printed the totals and the baseline's changes of these very records already;
        # the merge says only what it wrote (and still gives the verdict as its exit code).
        # shellcheck disable=SC2086
        $HARNESS "${args[@]}" | grep -E '^(results|report|junit): '
        return "${PIPESTATUS[0]}"
    fi
    # shellcheck disable=SC2086
    $HARNESS "${args[@]}"
}

case $phase in
    run) run_shard ;;
    merge) merge ;;
    # The report is made even when the run stopped early: whatever finished is in it.
    # A usage error that ran nothing (an unknown option in SELECT) said its one line: no merge of a missing file.
    all) run_shard; code=$?
         [[ $code == 2 && ! -e "$OUT/all.json" ]] && exit 2
         merge; merged=$?; exit $(( code > merged ? code : merged )) ;;
    *) echo "usage: examples/nightly.sh [run|merge|all]" >&2; exit 2 ;;
esac

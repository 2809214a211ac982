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
#   SELECT        selection and run options, e.g. "--full --tag seed --mode train_step"
#   WORKERS       worker processes, one device each (default: 1)
#   TIMEOUT       seconds one case may run (default 1800)
#   OUT           results directory (default nightly)
#   BASELINE      last night's $OUT/results.json: only what changed since then fails the job
#   KNOWN_ISSUES  a known-issues TOML: triaged failures run as strict expected failures
#   HARNESS       how to call the harness (default: python -m harness)
#
# Exit code: 0 nothing new broke (or, without a baseline, nothing failed); 1 a new failure;
# 2 a setup or usage error; 128+N the run was stopped by signal N (the partial results are kept).
# Artifacts: $OUT/index.html (the report), $OUT/results.json (tomorrow's BASELINE), $OUT/junit*.xml.
set -uo pipefail

phase=${1:-all}
DEVICE=${DEVICE:-cpu}
OUT=${OUT:-nightly}
WORKERS=${WORKERS:-1}
TIMEOUT=${TIMEOUT:-1800}
HARNESS=${HARNESS:-python -m harness}
mkdir -p "$OUT"

run_shard() {
    local name=${SHARD:+shard-${SHARD/\//-of-}}
    name=${name:-all}
    local args=(run --device "$DEVICE" --workers "$WORKERS" --timeout "$TIMEOUT"
                --json "$OUT/$name.json" --junit "$OUT/junit-$name.xml")
    [[ -n ${SHARD:-} ]] && args+=(--shard "$SHARD")
    [[ -n ${NPU_BACKEND:-} ]] && args+=(--npu-backend "$NPU_BACKEND")
    [[ -n ${KNOWN_ISSUES:-} ]] && args+=(--known-issues "$KNOWN_ISSUES")
    # A rerun of the same shard (a retried CI job) continues from what its journal already holds.
    [[ -s "$OUT/$name.jsonl" ]] && args+=(--resume "$OUT/$name.jsonl")
    # shellcheck disable=SC2086  # SELECT and HARNESS are word lists on purpose
    $HARNESS "${args[@]}" ${SELECT:-}
    local code=$?
    # A divergence is judged at the merge (against the baseline); setup errors and signals stop here.
    (( code == 1 )) && code=0
    return $code
}

merge() {
    local parts=("$OUT"/shard-*.json)
    [[ -e ${parts[0]} ]] || parts=("$OUT/all.json")
    local args=(report "${parts[@]}" --json "$OUT/results.json" -o "$OUT/index.html" --check)
    [[ -n ${BASELINE:-} && -f ${BASELINE:-} ]] && args+=(--baseline "$BASELINE")
    # shellcheck disable=SC2086
    $HARNESS "${args[@]}"
}

case $phase in
    run) run_shard ;;
    merge) merge ;;
    # The report is made even when the run stopped early: whatever finished is in it.
    all) run_shard; code=$?; merge; merged=$?; exit $(( code > merged ? code : merged )) ;;
    *) echo "usage: examples/nightly.sh [run|merge|all]" >&2; exit 2 ;;
esac

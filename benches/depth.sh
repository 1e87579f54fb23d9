#!/usr/bin/env bash
# Cost in queue depth (issue 12, point 4): a submit that parks (the home's only slot held by a
# running turn) at each of DEPTHS parked rows, timed in one run, interleaved round by round so a
# swing of the disk hits every depth alike; medians and the ratio to the shallowest depth, and the
# median CPU time (user + system) of the submit process, which a loaded machine inflates less.
#
# The rows are made fast: one `sqlite3` transaction inserts DEPTH parked rows (each its own task,
# with its task and turn record, as generated names are) behind the held slot, rows the store
# treats like any other (schema 8's triggers count them). Every timed submit parks (it is
# checked), so each depth grows by ROUNDS rows during the run. No timed assertion: it prints figures (docs/PERFORMANCE.md,
# "Growth with the queue").
#
# Usage: benches/depth.sh            DEPTHS="10 10000 100000" ROUNDS=15 (env)
#        BIN=path uses that binary; otherwise the release binary is built first.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPTHS="${DEPTHS:-10 10000 100000}"
ROUNDS="${ROUNDS:-15}"
. benches/lib.sh # release_bin, need_sqlite3, wait_state, park_synthetic (the cd made the root current)
release_bin
need_sqlite3 depth.sh

work="$(mktemp -d)"
# wait_state, park_synthetic.
# Every parked row (the synthetic ones and the timed submits') is dropped before the held slot is
# released, so no runner goes on to start them, and the held turn is waited for (bounded) before
# its home is removed: a runner still finishing it wrote into the directory being removed.
cleanup() {
  local d h
  for d in $DEPTHS; do
    h="$work/home-$d"
    [ -e "$h/tollgate.db" ] && sqlite3 "$h/tollgate.db" "PRAGMA busy_timeout = 10000; DELETE FROM entries WHERE state = 'parked';" >/dev/null
    touch "$work/release-$d"
  done
  for d in $DEPTHS; do
    h="$work/home-$d"
    [ -e "$h/tollgate.db" ] && wait_state "$h" hold "completed|done"
  done
  rm -rf "$work"
}
trap cleanup EXIT

# The queue's bound (MAX_QUEUE_ROWS): the deepest home is filled to just below it, leaving room
# for the held turn, the untimed submit and the timed ones.
MAX_QUEUE_ROWS=100000
declare -A SAMPLES=() ROWS=()
for d in $DEPTHS; do
  rows=$d
  [ $((rows + 2 + ROUNDS)) -le "$MAX_QUEUE_ROWS" ] || rows=$((MAX_QUEUE_ROWS - 2 - ROUNDS))
  ROWS[$d]=$rows
  h="$work/home-$d"
  "$BIN" --home "$h" init --workers 1 >/dev/null
  "$BIN" --home "$h" submit --task hold -- sh -c "while [ ! -e '$work/release-$d' ]; do sleep 0.05; done" >/dev/null 2>&1
  wait_state "$h" hold running
  t0=$(date +%s%N)
  park_synthetic "$h" "$rows"
  t1=$(date +%s%N)
  echo "depth $d: $rows parked rows made in $(( (t1 - t0) / 1000000 )) ms" >&2
  # Untimed: the first parking submit of a home (a fresh task name's first lookups).
  out=$("$BIN" --home "$h" submit -- true 2>&1) || { echo "the first submit at depth $d failed: $out" >&2; exit 1; }
done

# CPU time (user + system) of each timed submit too, from bash's `times` (the shell's children,
# millisecond resolution): on a loaded machine the wall time mostly measures the wait for a core,
# the CPU time what the submit itself costs.
# (`times` must run in this shell, not in a `$(...)` subshell, to see its children.)
children_cpu_micros() {
  awk 'NR == 2 {
    n = split($1 " " $2, t, " "); s = 0
    for (i = 1; i <= n; i++) { split(t[i], p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] }
    printf "%d", s * 1000000 }' "$1"
}
declare -A CPU=()
for r in $(seq 1 "$ROUNDS"); do
  for d in $DEPTHS; do
    h="$work/home-$d"
    # Only the submit runs between the two `times` (bash's clock, no `date` child).
    times >"$work/times"
    t0=${EPOCHREALTIME/./}
    "$BIN" --home "$h" submit -- true >"$work/out" 2>&1 || true
    t1=${EPOCHREALTIME/./}
    times >"$work/times-after"
    c0=$(children_cpu_micros "$work/times")
    c1=$(children_cpu_micros "$work/times-after")
    out=$(cat "$work/out")
    grep -qE 'parked|queued' <<<"$out" || { echo "a submit at depth $d did not park: $out" >&2; exit 1; }
    SAMPLES[$d]+="$(( t1 - t0 )) "
    CPU[$d]+="$(( c1 - c0 )) "
  done
done

median_ms() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { printf "%.2f", a[int((NR + 1) / 2)] / 1000 }'; }

echo "binary: $BIN; $ROUNDS parking submits per depth, interleaved; one slot held; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s %10s %22s %14s %14s\n' "parked rows" "median ms" "x the cost at the first" "median CPU ms" "tollgate.db kB"
first=""
for d in $DEPTHS; do
  m=$(median_ms "${SAMPLES[$d]}")
  [ -n "$first" ] || first=$m
  cpu=$(median_ms "${CPU[$d]}")
  kb=$(du -ck "$work/home-$d"/tollgate.db* 2>/dev/null | awk 'END { print $1 }')
  printf '%-12s %10s %22s %14s %14s\n' "${ROWS[$d]}" "$m" "$(awk -v a="$first" -v b="$m" 'BEGIN { printf "%.2f", b / a }')" "$cpu" "$kb"
done

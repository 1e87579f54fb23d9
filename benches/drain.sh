#!/usr/bin/env bash
# Draining a deep queue (issue 12, point 4: "the steps must not need to load every parked row"):
# at each of DEPTHS parked rows, the time the runners take to run the first TURNS of them, one
# after another in WORKERS slots, each turn's finishing section starting the next parked row.
# benches/depth.sh times the parking submit; this times the other end of a row, the finish.
# No timed assertion: it prints figures (docs/PERFORMANCE.md, "Growth with the queue").
#
# Usage: benches/drain.sh                 DEPTHS="250 10000 100000" TURNS=200 WORKERS=2 (env;
#                                         every depth at least TURNS)
#        BIN=path uses that binary; otherwise the release binary is built first.
#        BASE_BIN=path also measures a second binary (e.g. main's), interleaved depth by depth.
#
# Each home: WORKERS slots held by `hold` turns, DEPTH synthetic parked rows of `true` behind them
# (benches/lib.sh, park_synthetic, one sqlite3 transaction), then the holds are released and the
# clock runs until TURNS of the parked rows have left the queue (`queue_meta.row_count`, polled
# every 10 ms from the sqlite3 shell). The rest of the rows are dropped before the home is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPTHS="${DEPTHS:-250 10000 100000}"
TURNS="${TURNS:-200}"
WORKERS="${WORKERS:-2}"
. benches/lib.sh # release_bin, need_sqlite3, wait_state, park_synthetic (the cd made the root current)
release_bin
need_sqlite3 drain.sh
MAX_QUEUE_ROWS=100000 # core/src/slots/queue.rs
for d in $DEPTHS; do
  [ "$d" -ge "$TURNS" ] || { echo "drain.sh: depth $d is below TURNS=$TURNS" >&2; exit 2; }
done

work="$(mktemp -d)"
cleanup() {
  local h
  for h in "$work"/*-*; do
    [ -d "$h" ] || continue
    [ -e "$h/tollgate.db" ] && sqlite3 "$h/tollgate.db" "PRAGMA busy_timeout = 10000; DELETE FROM entries WHERE state = 'parked';" >/dev/null 2>&1 || true
    touch "$h.release"
  done
  sleep 1 # the last runners finish their turn (a `true`) before the homes go
  rm -rf "$work"
}
trap cleanup EXIT

rows_left() { sqlite3 "$1/tollgate.db" "PRAGMA busy_timeout = 10000; SELECT row_count FROM queue_meta;" | tail -1; }

# One round: binary $1 (label $2) at depth $3; prints milliseconds for TURNS turns.
drain() {
  local bin="$1" label="$2" depth="$3" h rows n start left t0 t1 deadline
  h="$work/$label-$depth"
  rows=$depth
  [ $((rows + WORKERS)) -le "$MAX_QUEUE_ROWS" ] || rows=$((MAX_QUEUE_ROWS - WORKERS))
  "$bin" --home "$h" init --workers "$WORKERS" >/dev/null
  for n in $(seq 1 "$WORKERS"); do
    "$bin" --home "$h" submit --task "hold$n" -- sh -c "while [ ! -e '$h.release' ]; do sleep 0.01; done" >/dev/null 2>&1
  done
  BIN="$bin" wait_state "$h" hold1 running
  BIN="$bin" wait_state "$h" "hold$WORKERS" running
  park_synthetic "$h" "$rows"
  start=$(rows_left "$h")
  t0=${EPOCHREALTIME/./}
  touch "$h.release"
  deadline=$((t0 + 300000000))
  while :; do
    left=$(rows_left "$h")
    [ $((start - left)) -ge $((TURNS + WORKERS)) ] && break
    [ "${EPOCHREALTIME/./}" -lt "$deadline" ] || { echo "depth $depth ($label): only $((start - left)) rows left the queue in 300 s" >&2; exit 1; }
    sleep 0.01
  done
  t1=${EPOCHREALTIME/./}
  sqlite3 "$h/tollgate.db" "PRAGMA busy_timeout = 10000; DELETE FROM entries WHERE state = 'parked';" >/dev/null
  echo $(((t1 - t0) / 1000))
}

declare -A MS=()
tools=("new:$BIN")
[ -z "${BASE_BIN:-}" ] || tools+=("base:$BASE_BIN")
for d in $DEPTHS; do
  for t in "${tools[@]}"; do
    MS["${t%%:*}-$d"]=$(drain "${t#*:}" "${t%%:*}" "$d")
  done
done

echo "$TURNS turns of \`true\` drained from a queue of DEPTH parked rows, $WORKERS slots; load before the last round: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s' "parked rows"
for t in "${tools[@]}"; do printf '%16s %14s' "${t%%:*} ms" "${t%%:*} turns/s"; done
echo
for d in $DEPTHS; do
  printf '%-12s' "$d"
  for t in "${tools[@]}"; do
    ms=${MS["${t%%:*}-$d"]}
    printf '%16s %14s' "$ms" "$(awk -v n="$TURNS" -v ms="$ms" 'BEGIN { printf "%.1f", n * 1000 / ms }')"
  done
  echo
done

#!/usr/bin/env bash
# The home's database (tollgate.db) at its two durability settings side by side, in one run:
# `durability = "fsync"` (the default: a promise is synced before it is answered) against
# `durability = "os"` (commits left to the kernel; spec/store.md, "Durability"). (Earlier runs set
# the file store of earlier versions, queue.json under queue.lock, beside the database; no tollgate
# runs on it any more: its files are only imported, docs/PERFORMANCE.md keeps those figures.)
#
# For each setting it counts, with `strace -f -c`, the fsync-family calls (fsync, fdatasync,
# sync_file_range, msync, syncfs) and renames of
#   - a submit that parks (the only slot is held by a running turn),
#   - `submit -- true` until its runner has taken the slot over (the calls before the command's
#     exec in one trace of the submit and the runner it spawns), and for the whole turn,
# and times `submit --wait -- true` end to end (median of N) against spawning `true` directly.
# Then, with `durability = "fsync"`, a parking submit with 10 and with 10 000 rows parked (rows, task and
# turn records inserted with the `sqlite3` shell, each parked turn its own task, as generated
# names are): its syncs and its median wall time, and the ratio of the two times.
# No timed assertion anywhere: it prints figures (docs/PERFORMANCE.md, "Store"; spec/store.md).
#
# Usage: benches/store_fsync.sh [N]   (N timed runs, default 20; BIN=path uses that binary,
#        otherwise the release binary is built first)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-20}"
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN="${CARGO_TARGET_DIR:-target}/release/tollgate"
fi
command -v strace >/dev/null || { echo "strace is needed (apt-get install strace)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
SYNCS=fsync,fdatasync,sync_file_range,msync,syncfs,rename,renameat,renameat2
# wait_state, park_synthetic.
. benches/lib.sh # the cd above made the project root the working directory

# Prints "<sync calls> <renames>" from an strace -c summary file (the calls column is the 4th;
# the errors column, when present, comes after it).
counts() {
  awk '
    $NF ~ /^(fsync|fdatasync|sync_file_range|msync|syncfs)$/ { s += $4 }
    $NF ~ /^rename/ { r += $4 }
    END { printf "%d %d", s, r }' "$1"
}

# Milliseconds of wall time of "$@", median of N runs.
median_ms() {
  local samples=() i t0 t1
  for i in $(seq 1 "$N"); do
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s%N)
    samples+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${samples[@]}" | sort -n | awk '{ a[NR] = $1 } END { printf "%.1f", a[int((NR + 1) / 2)] / 1000 }'
}

measure() {
  local store="$1" home="$work/$1"
  "$BIN" --home "$home" init --workers 1 >/dev/null
  echo "durability = \"$store\"" >>"$home/tollgate.toml"
  "$BIN" --home "$home" submit --wait -- true >/dev/null 2>&1   # the home's files exist from here on

  # A submit that parks.
  "$BIN" --home "$home" submit --task hold -- sh -c "while [ ! -e '$work/release-$store' ]; do sleep 0.02; done" >/dev/null 2>&1
  wait_state "$home" hold running
  strace -f -c -e trace="$SYNCS" -o "$work/park-$store" "$BIN" --home "$home" submit --task parked -- true >/dev/null 2>&1
  read -r park_syncs park_renames <<<"$(counts "$work/park-$store")"
  touch "$work/release-$store"
  wait_state "$home" parked "completed|done"

  # `submit -- true`: strace follows the submit and the runner it spawns, in one time-ordered
  # trace; the calls before the command's exec are those until the runner took its slot over.
  strace -f -e trace="$SYNCS,execve" -o "$work/start-$store" "$BIN" --home "$home" submit --task started -- true >/dev/null 2>&1
  wait_state "$home" started "completed|done"
  read -r start_syncs start_renames all_syncs all_renames <<<"$(awk '
    /execve\("[^"]*\/true"/ { started = 1 }
    /(fsync|fdatasync|sync_file_range|msync|syncfs)\(/ { if (!started) s++; as++ }
    /rename[a-z0-9]*\(/ { if (!started) r++; ar++ }
    END { printf "%d %d %d %d", s, r, as, ar }' "$work/start-$store")"

  local wait_ms
  wait_ms=$(median_ms "$BIN" --home "$home" submit --wait -- true)
  printf '%-8s %12s %14s %14s %16s %14s %16s %18s\n' "$store" "$park_syncs" "$park_renames" "$start_syncs" "$start_renames" "$all_syncs" "$all_renames" "$wait_ms"
}

# A parking submit at DEPTH parked rows (the default durability): "<syncs> <median ms>".
depth() {
  local depth="$1" home="$work/depth-$1" i
  "$BIN" --home "$home" init --workers 1 >/dev/null
  "$BIN" --home "$home" submit --task hold -- sh -c "while [ ! -e '$work/release-depth-$depth' ]; do sleep 0.02; done" >/dev/null 2>&1
  wait_state "$home" hold running
  park_synthetic "$home" "$depth"
  strace -f -c -e trace="$SYNCS" -o "$work/depth-$depth.strace" "$BIN" --home "$home" submit -- true >/dev/null
  read -r syncs _ <<<"$(counts "$work/depth-$depth.strace")"
  local ms
  ms=$(median_ms "$BIN" --home "$home" submit -- true)
  # Drop every parked row (the synthetic ones and the timed submits') before the slot frees.
  sqlite3 "$home/tollgate.db" "PRAGMA busy_timeout = 10000; DELETE FROM entries WHERE state = 'parked';" >/dev/null
  touch "$work/release-depth-$depth"
  wait_state "$home" hold "completed|done"
  echo "$syncs $ms"
}

spawn_ms=$(median_ms true)
echo "binary: $BIN; N = $N; spawning \`true\` directly: $spawn_ms ms (median)"
printf '%-8s %12s %14s %14s %16s %14s %16s %18s\n' durability "park: syncs" "park: renames" "start: syncs" "start: renames" "turn: syncs" "turn: renames" "submit --wait ms"
measure fsync
measure os

if command -v sqlite3 >/dev/null; then
  read -r shallow_syncs shallow_ms <<<"$(depth 10)"
  read -r deep_syncs deep_ms <<<"$(depth 10000)"
  echo
  printf '%-22s %8s %10s\n' "parking submit, rows" syncs "median ms"
  printf '%-22s %8s %10s\n' 10 "$shallow_syncs" "$shallow_ms"
  printf '%-22s %8s %10s\n' 10000 "$deep_syncs" "$deep_ms"
  awk -v a="$shallow_ms" -v b="$deep_ms" 'BEGIN { printf "ratio 10 000 / 10: %.2f\n", b / a }'
else
  echo "sqlite3 (the shell) is not installed: the queue-depth comparison is skipped" >&2
fi

#!/usr/bin/env bash
# The home's store side by side (issue 12): the file store of earlier versions (queue.json under
# queue.lock, selected with TOLLGATE_FILE_STORE=1) against the database (tollgate.db), in one run.
#
# For each store it counts, with `strace -f -c`, the fsync-family calls (fsync, fdatasync,
# sync_file_range, msync, syncfs) and renames of
#   - a submit that parks (the only slot is held by a running turn),
#   - `submit -- true` until its runner has taken the slot over (the calls before the command's
#     exec in one trace of the submit and the runner it spawns), and for the whole turn,
# and times `submit --wait -- true` end to end (median of N) against spawning `true` directly.
# No timed assertion anywhere: it prints figures (docs/PERFORMANCE.md, "Store").
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

# Polls (at most 30 s) until `status` of home $1 shows a turn of task $2 in state $3.
wait_state() {
  local home="$1" task="$2" state="$3" i
  for i in $(seq 1 600); do
    if "$BIN" --home "$home" status "$task" 2>/dev/null | grep -q " $state "; then return 0; fi
    sleep 0.05
  done
  echo "timed out waiting for $task to be $state" >&2
  exit 1
}

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
  if [ "$store" = file ]; then export TOLLGATE_FILE_STORE=1; else unset TOLLGATE_FILE_STORE; fi
  "$BIN" --home "$home" init --workers 1 >/dev/null
  "$BIN" --home "$home" submit --wait -- true >/dev/null 2>&1   # the home's files exist from here on

  # A submit that parks.
  "$BIN" --home "$home" submit --task hold -- sh -c "while [ ! -e '$work/release-$store' ]; do sleep 0.02; done" >/dev/null 2>&1
  wait_state "$home" hold running
  strace -f -c -e trace="$SYNCS" -o "$work/park-$store" "$BIN" --home "$home" submit --task parked -- true >/dev/null 2>&1
  read -r park_syncs park_renames <<<"$(counts "$work/park-$store")"
  touch "$work/release-$store"
  wait_state "$home" parked done

  # `submit -- true`: strace follows the submit and the runner it spawns, in one time-ordered
  # trace; the calls before the command's exec are those until the runner took its slot over.
  strace -f -e trace="$SYNCS,execve" -o "$work/start-$store" "$BIN" --home "$home" submit --task started -- true >/dev/null 2>&1
  wait_state "$home" started done
  read -r start_syncs start_renames all_syncs all_renames <<<"$(awk '
    /execve\("[^"]*\/true"/ { started = 1 }
    /(fsync|fdatasync|sync_file_range|msync|syncfs)\(/ { if (!started) s++; as++ }
    /rename[a-z0-9]*\(/ { if (!started) r++; ar++ }
    END { printf "%d %d %d %d", s, r, as, ar }' "$work/start-$store")"

  local wait_ms
  wait_ms=$(median_ms "$BIN" --home "$home" submit --wait -- true)
  printf '%-8s %12s %14s %14s %16s %14s %16s %18s\n' "$store" "$park_syncs" "$park_renames" "$start_syncs" "$start_renames" "$all_syncs" "$all_renames" "$wait_ms"
}

spawn_ms=$(median_ms true)
echo "binary: $BIN; N = $N; spawning \`true\` directly: $spawn_ms ms (median)"
printf '%-8s %12s %14s %14s %16s %14s %16s %18s\n' store "park: syncs" "park: renames" "start: syncs" "start: renames" "turn: syncs" "turn: renames" "submit --wait ms"
measure file
measure sqlite

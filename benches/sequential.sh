#!/usr/bin/env bash
# One command at a time (issue 12, points 2 and 4): STEPS × STEP `submit -- true` into a paused
# home, nothing else running, so each submit is the database's only user. After every step it
# prints the CPU time per submit (user + system, bash's `time`, over the step's submits), the
# syncs and reads per submit (`strace -f -c` over MEASURED more submits, when strace is there) and
# the log's length. With BASE_BIN set, the same for that binary, interleaved step by step.
#
# What it shows (docs/PERFORMANCE.md, "One submit at a time in a paused home"): the cost must
# follow neither the number of submits ever made (the log's length is bounded: spec/store.md
# "The log's length") nor the depth (a paused home's repair takes no section: spec/slots.md "A
# paused home's look"). No timed assertion: it prints figures.
#
# Usage: benches/sequential.sh       STEPS=3 STEP=200 MEASURED=20 (env)
#        BIN=path uses that binary; otherwise the release binary is built first.
#        BASE_BIN=path adds a second binary (e.g. an earlier commit's) beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${STEPS:-3}"
STEP="${STEP:-200}"
MEASURED="${MEASURED:-20}"
. benches/lib.sh # release_bin
release_bin

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
have_strace=0
if command -v strace >/dev/null; then have_strace=1; else echo "sequential.sh: no strace: syncs and reads not counted"; fi

bins=("$BIN")
[ -n "${BASE_BIN:-}" ] && bins+=("$BASE_BIN")
for i in "${!bins[@]}"; do
  "${bins[$i]}" --home "$work/home-$i" init --workers 2 >/dev/null
  "${bins[$i]}" --home "$work/home-$i" pause >/dev/null
done

TIMEFORMAT='%U %S' # bash's `time`: user and system CPU seconds of the timed subshell and its children

printf '%-8s %-40s %12s %10s %10s %12s\n' submits binary "cpu/submit" fsync pread "log bytes"
for step in $(seq 1 "$STEPS"); do
  for i in "${!bins[@]}"; do
    bin="${bins[$i]}" home="$work/home-$i"
    { time (for _ in $(seq 1 "$STEP"); do "$bin" --home "$home" submit -- true >/dev/null; done); } 2>"$work/time"
    cpu_ms=$(awk -v n="$STEP" '{ printf "%.2f ms", ($1 + $2) * 1000 / n }' "$work/time")
    fsync=- pread=-
    if [ "$have_strace" = 1 ]; then
      strace -f -c -o "$work/strace" -e trace=fsync,fdatasync,pread64 \
        bash -c 'for _ in $(seq 1 "$3"); do "$1" --home "$2" submit -- true >/dev/null; done' _ "$bin" "$home" "$MEASURED"
      fsync=$(awk -v n="$MEASURED" '$NF == "fsync" || $NF == "fdatasync" { c += $4 } END { printf "%.2f", c / n }' "$work/strace")
      pread=$(awk -v n="$MEASURED" '$NF == "pread64" { c += $4 } END { printf "%.0f", c / n }' "$work/strace")
    fi
    log=$(stat -c %s "$home/tollgate.db-wal" 2>/dev/null || echo 0)
    printf '%-8s %-40s %12s %10s %10s %12s\n' "$((step * (STEP + MEASURED)))" "$bin" "$cpu_ms" "$fsync" "$pread" "$log"
  done
done

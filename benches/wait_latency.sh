#!/usr/bin/env bash
# `submit --wait -- true` end to end, median of N, for one or more tollgate binaries measured
# interleaved in the same run (so a before/after pair sees the same machine load), plus the cost
# of spawning `true` directly. Not a test: it prints figures for docs/PERFORMANCE.md.
#
#   benches/wait_latency.sh [N] [BIN...]     # N = 20, BIN = target/debug/tollgate by default
#   TOLLGATE_TEST_NO_WATCH=1 benches/wait_latency.sh 20   # the 1 s fallback poll instead of events
set -euo pipefail
N="${1:-20}"
shift || true
bins=("$@")
[ "${#bins[@]}" -gt 0 ] || bins=(target/debug/tollgate)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

declare -A samples
for b in "${!bins[@]}"; do
  mkdir -p "$work/$b"
  "${bins[$b]}" --home "$work/$b" submit --wait -- true >/dev/null 2>&1   # the home exists from here on
  samples[$b]=""
done
for _ in $(seq 1 "$N"); do
  for b in "${!bins[@]}"; do
    t0=$(date +%s%N)
    "${bins[$b]}" --home "$work/$b" submit --wait -- true >/dev/null 2>&1
    t1=$(date +%s%N)
    samples[$b]+="$(( (t1 - t0) / 1000 )) "
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { printf "%.1f", a[int((NR + 1) / 2)] / 1000 }'; }
spawn=""
for _ in $(seq 1 "$N"); do
  t0=$(date +%s%N); true_bin=$(command -v true); "$true_bin"; t1=$(date +%s%N)
  spawn+="$(( (t1 - t0) / 1000 )) "
done
echo "N = $N; load average: $(cut -d' ' -f1-3 /proc/loadavg); spawning true: $(echo "$spawn" | median) ms"
for b in "${!bins[@]}"; do
  echo "${bins[$b]}: submit --wait -- true median $(echo "${samples[$b]}" | median) ms"
done

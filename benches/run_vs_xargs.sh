#!/usr/bin/env bash
# tollgate run vs xargs -P2 vs GNU parallel -j2: 1000 items of `true`, two at a time.
# Usage: benches/run_vs_xargs.sh [N]   (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-1000}"
cargo build --release --quiet
BIN="${CARGO_TARGET_DIR:-target}/release/tollgate"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
{
  for i in $(seq 1 "$N"); do
    printf '[[item]]\nname = "i%d"\nrun = ["true"]\n\n' "$i"
  done
} > "$work/pack.toml"
for _ in $(seq 1 "$N"); do echo true; done > "$work/list"

# Best of five wall-clock runs, in seconds (the machine is shared; the minimum is the least noisy).
best() {
  local best_s=""
  for _ in 1 2 3 4 5; do
    local t0 t1 s
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    s=$(echo "$t1 - $t0" | bc -l)
    if [ -z "$best_s" ] || [ "$(echo "$s < $best_s" | bc -l)" = 1 ]; then best_s=$s; fi
  done
  printf '%.3f' "$best_s"
}

t_tollgate=$(best "$BIN" --home "$work/home" run "$work/pack.toml" --jobs 2)
t_subreaper=$(best env TOLLGATE_NO_CGROUP=1 "$BIN" --home "$work/home" run "$work/pack.toml" --jobs 2)
t_xargs=$(best sh -c "xargs -P2 -I{} sh -c '{}' < '$work/list'")
t_xargs_direct=$(best sh -c "xargs -P2 -n1 true < '$work/list'")
printf '%-34s %8s s\n' "tollgate run --jobs 2" "$t_tollgate"
printf '%-34s %8s s\n' "tollgate run --jobs 2 (subreaper)" "$t_subreaper"
printf '%-34s %8s s   ratio tollgate/xargs %.2f\n' "xargs -P2 -I{} sh -c '{}'" "$t_xargs" \
  "$(echo "$t_tollgate / $t_xargs" | bc -l)"
printf '%-34s %8s s   ratio tollgate/xargs %.2f\n' "xargs -P2 -n1 true (no shell)" "$t_xargs_direct" \
  "$(echo "$t_tollgate / $t_xargs_direct" | bc -l)"
if command -v parallel >/dev/null 2>&1; then
  t_parallel=$(best sh -c "parallel -j2 < '$work/list'")
  printf '%-34s %8s s   ratio tollgate/parallel %.2f\n' "parallel -j2" "$t_parallel" \
    "$(echo "$t_tollgate / $t_parallel" | bc -l)"
else
  echo "GNU parallel is not installed; skipped (apt-get install -y parallel)"
fi

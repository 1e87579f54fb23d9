#!/usr/bin/env bash
# tollgate side by side with its peers (issue 12, point 7 and "Targets"), in ONE run: every figure
# is a median of repeated rounds, the tools of a workload measured interleaved round by round, so
# the ratios compare like with like on a shared machine whose fsync latency drifts over minutes.
# Not a test: nothing asserts on time. Figures and their reading: docs/BENCHMARKS.md.
#
#   benches/peers.sh                       # everything (about 10 to 20 minutes on 2 cores)
#   ROUNDS=5 SKIP_PUEUE=1 benches/peers.sh # knobs below, all environment variables
#
# It builds tollgate in release (and its helper, benches/peers_helper.rs), installs the peers it
# needs with apt-get when they are missing (nq, task-spooler, GNU parallel, strace; as root, unless
# SKIP_INSTALL=1), and pueue with `cargo install --locked pueue` into target/peers-tools (Debian
# does not package it; SKIP_PUEUE=1 skips it with a message). pueue is looked for first at
# PUEUE_BIN (the `pueue` binary; `pueued` beside it), then on PATH, then in target/peers-tools/bin.
# A peer that cannot be had is skipped with a message saying how to get it.
#
# Workloads:
#   1. latency: `submit --wait -- true` end to end (default durability and `durability = "os"`)
#      vs spawning `true`, `tsp -f true`, `nq true` + `nq -w`;                      LAT_ROUNDS each
#   2. throughput: N x `true` on 4 slots, from the first submit until all are done, one submitting
#      loop: tollgate (fsync / os), nq (one serial queue: nq has no slot count), task-spooler
#      (`tsp -S 4`), pueue (`parallel 4`), and xargs -P4 / `parallel -j4` as the no-queue floor;
#      then LOOPS concurrent submitting loops for tollgate, nq and tsp;              ROUNDS each
#   3. depth: a submit that parks (1 slot, held) at each of DEPTHS parked rows, the rows made by
#      `peers_helper fill` through the library in one transaction (the queue's bound is 100 000
#      rows, so the deepest home holds 100 000 less the busy row and the timed submits); PARK_ROUNDS
#   4. fsync-family calls (strace -f: fsync, fdatasync, sync_file_range, msync, syncfs) of a
#      parking submit, of `submit -- true` until its runner has taken its slot over (the calls
#      before the command's execve) and of the whole turn, for both durabilities; and per accepted
#      delivery of `serve` (strace attached to serve during SERVE_TRACED deliveries, 16 connections)
#   5. serve: accepted deliveries/s, p50 and p99 at SERVE_CONNS connections (signed generic
#      deliveries, fresh ids, parked behind one held slot) vs the same server's 404 path, each
#      phase SERVE_SECS seconds or SERVE_MAX requests.
#
# Knobs (environment):
#   ROUNDS=3         rounds of workload 2 (median)          N=500          turns per round
#   LOOPS=8          concurrent submitting loops             LAT_ROUNDS=20  samples per tool in 1
#   PARK_ROUNDS=15   parking submits per depth               DEPTHS="10 10000 100000"
#   SERVE_CONNS="1 4 16"  SERVE_SECS=5  SERVE_MAX=5000  SERVE_TRACED=400
#   SKIP_LATENCY=1 SKIP_THROUGHPUT=1 SKIP_CONCURRENT=1 SKIP_DEPTH=1 SKIP_FSYNC=1 SKIP_SERVE=1
#                    skip a workload;  SKIP_PUEUE=1 / SKIP_NQ=1 / SKIP_TSP=1 / SKIP_PARALLEL=1
#                    skip a peer;  SKIP_INSTALL=1 installs nothing (missing peers are skipped)
#   BIN=path         this tollgate binary (no build; the helper is still built when workload 3
#                    or 5 runs)
#   BASE_BIN=path    a second tollgate binary (e.g. main's release build) measured beside BIN in
#                    workloads 1 and 2, interleaved round by round, as "base" (its rows and the
#                    ratio BIN / BASE_BIN in the report)
#   PUEUE_BIN=path   the pueue client to use (its daemon `pueued` in the same directory), e.g. one
#                    installed elsewhere with `cargo install --root DIR pueue`: DIR/bin/pueue
#   OUT=target/bench-peers.md   where the markdown report is written too (empty: stdout only)
#   WORK=dir         parent of the scratch directory (default target/: the project's disk, whose
#                    fsync latency is the one that matters; it is removed at the end)
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
ROOT=$PWD

ROUNDS="${ROUNDS:-3}"
N="${N:-500}"
LOOPS="${LOOPS:-8}"
LAT_ROUNDS="${LAT_ROUNDS:-20}"
PARK_ROUNDS="${PARK_ROUNDS:-15}"
DEPTHS="${DEPTHS:-10 10000 100000}"
SERVE_CONNS="${SERVE_CONNS:-1 4 16}"
SERVE_SECS="${SERVE_SECS:-5}"
SERVE_MAX="${SERVE_MAX:-5000}"
SERVE_TRACED="${SERVE_TRACED:-400}"
OUT="${OUT-target/bench-peers.md}"
SLOTS=4
MAX_QUEUE_ROWS=100000 # core/src/slots/queue.rs
skip() { [ -n "${!1:-}" ] && [ "${!1}" != 0 ]; }
say() { echo "peers.sh: $*" >&2; }

# ---------------------------------------------------------------------------------------------
# Build and install.
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"
if [ -z "${BIN:-}" ]; then
  say "building tollgate (release)"
  cargo build --release --quiet --bin tollgate
  BIN="$ROOT/${CARGO_TARGET_DIR:-target}/release/tollgate"
fi
# The helper fills deep queues (workload 3) and loads serve (workload 5): built only for them.
HELPER=
if ! skip SKIP_DEPTH || ! skip SKIP_SERVE; then
  say "building the helper (benches/peers_helper.rs)"
  HELPER=$(cargo bench --bench peers_helper --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*peers_helper[^"]*"' | tail -1 | cut -d'"' -f4)
  [ -x "$HELPER" ] || { say "could not build benches/peers_helper.rs (run: cargo bench --bench peers_helper --no-run)"; exit 2; }
fi

apt_install() { # $1 = command, $2 = Debian package
  command -v "$1" >/dev/null 2>&1 && return 0
  if skip SKIP_INSTALL || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "$1 is not installed: skipped (get it with: apt-get install $2)"
    return 1
  fi
  say "installing $2"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1; } ||
    { say "apt-get install $2 failed: $1 skipped"; return 1; }
  command -v "$1" >/dev/null 2>&1
}
HAVE_NQ=0 HAVE_TSP=0 HAVE_PARALLEL=0 HAVE_STRACE=0 HAVE_PUEUE=0
skip SKIP_NQ || { apt_install nq nq && HAVE_NQ=1; } || true
skip SKIP_TSP || { apt_install tsp task-spooler && HAVE_TSP=1; } || true
skip SKIP_PARALLEL || { apt_install parallel parallel && HAVE_PARALLEL=1; } || true
apt_install strace strace && HAVE_STRACE=1 || true
TOOLS="$ROOT/target/peers-tools"
if ! skip SKIP_PUEUE; then
  if [ -n "${PUEUE_BIN:-}" ]; then
    if [ -x "$PUEUE_BIN" ] && [ -x "$(dirname "$PUEUE_BIN")/pueued" ]; then
      export PATH="$(cd "$(dirname "$PUEUE_BIN")" && pwd):$PATH"
    else
      say "PUEUE_BIN=$PUEUE_BIN is not an executable pueue with pueued beside it: looking on PATH"
    fi
  fi
  export PATH="$PATH:$TOOLS/bin"
  if ! command -v pueued >/dev/null 2>&1 && ! skip SKIP_INSTALL; then
    if apt-cache show pueue >/dev/null 2>&1; then apt_install pueued pueue || true; fi
    if ! command -v pueued >/dev/null 2>&1; then
      say "installing pueue: cargo install --locked pueue (into $TOOLS, once; several minutes)"
      cargo install --locked --quiet --root "$TOOLS" pueue >/dev/null 2>&1 || say "cargo install pueue failed"
    fi
  fi
  if command -v pueued >/dev/null 2>&1 && command -v pueue >/dev/null 2>&1; then HAVE_PUEUE=1; else
    say "pueue is not installed: skipped (get it with: cargo install --locked --root target/peers-tools pueue)"
  fi
fi
TRUE_BIN=$(type -P true)

# ---------------------------------------------------------------------------------------------
# Scratch space, and the processes this script starts (stopped by their ids at exit).
mkdir -p "${WORK:-$ROOT/target}"
work=$(mktemp -d -p "${WORK:-$ROOT/target}" peers-work.XXXXXX)
TSP_SOCKETS=() PUEUE_CONFIGS=() PIDS=()
cleanup() {
  set +e
  for s in "${TSP_SOCKETS[@]}"; do TS_SOCKET="$s" tsp -K >/dev/null 2>&1; done
  for c in "${PUEUE_CONFIGS[@]}"; do pueue -c "$c" shutdown >/dev/null 2>&1; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# Microseconds since the epoch, without a fork.
now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
# The median of the numbers on stdin (one a line or space-separated).
median() { tr ' ' '\n' | awk 'NF' | sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ms() { awk -v us="$1" 'BEGIN { if (us == "-" || us == "") print "-"; else if (us < 10000) printf "%.2f", us / 1000; else printf "%.1f", us / 1000 }'; }
secs() { awk -v us="$1" 'BEGIN { if (us == "-") print "-"; else printf "%.2f", us / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (a == "-" || b == "-" || a == "" || b == "" || b == 0) print "-"; else printf f, a / b }'; }
declare -A S=()   # samples (microseconds), by key
add() { S[$1]="${S[$1]:-} $2"; }
med() { echo "${S[$1]:-}" | median; }

# A tollgate home with SLOTS workers and durability $2 (fsync | os).
tg_home() {
  "$BIN" --home "$1" init --workers "${3:-$SLOTS}" >/dev/null
  # (`config set` does not take durability: a top-level line of the file, before any table.)
  [ "$2" = fsync ] || echo "durability = \"$2\"" >>"$1/tollgate.toml"
  # (`config show` omits durability while it is the default.)
  local shown; shown=$("$BIN" --home "$1" config show | sed -n 's/^durability = "\([a-z]*\)".*/\1/p')
  [ "${shown:-fsync}" = "$2" ] || { say "durability $2 not in effect in $1 (config show: ${shown:-none})"; exit 1; }
}
# Polls (bounded: 60 s) until `status` of home $1 shows a turn of task $2 in state $3.
wait_state() {
  local i
  for i in $(seq 1 1200); do
    if "$BIN" --home "$1" status "$2" 2>/dev/null | grep -cE " ($3) " >/dev/null; then return 0; fi
    sleep 0.05
  done
  say "timed out waiting for task $2 to be $3 in $1"
  exit 1
}
# Waits for every turn whose id is printed in file $2 by `tollgate submit` in home $1.
tg_wait_all() {
  local ids
  ids=$(grep -ho '(id [0-9]*)' "$2" | tr -dc '0-9\n')
  [ "$(echo "$ids" | grep -c .)" = "$3" ] || { say "expected $3 submits in $2, found $(echo "$ids" | grep -c .)"; exit 1; }
  # shellcheck disable=SC2086
  "$BIN" --home "$1" wait $ids >"$2.wait" 2>&1 ||
    { say "tollgate wait failed in $1 (exit $?): $(grep -v ': completed' "$2.wait" | head -5)"
      local t; for t in $(grep -o '^tollgate: [^ ]* turn [0-9]*' "$2.wait" | awk '{ print $2 "/turns/" $4 }' | head -3); do
        say "runner.log of $t: $(tail -5 "$1/tasks/$t/runner.log" 2>&1)"; done
      exit 1; }
}
tsp_start() { TSP_SOCKETS+=("$1"); TS_SOCKET="$1" tsp -S "$2" >/dev/null; }
tsp_wait_all() { # every job of server $1 finished (tsp -w waits for one job)
  local ids i
  TS_SOCKET="$1" tsp -w >/dev/null 2>&1 || true
  for i in $(seq 1 100); do
    ids=$(TS_SOCKET="$1" tsp -l | awk 'NR > 1 && ($2 == "running" || $2 == "queued") { print $1 }')
    [ -z "$ids" ] && return 0
    for id in $ids; do TS_SOCKET="$1" tsp -w "$id" >/dev/null 2>&1 || true; done
  done
  say "task-spooler did not finish its jobs"; exit 1
}
pueue_start() { # $1 = directory; prints the config path
  local dir="$1"
  mkdir -p "$dir/data" "$dir/run"
  cat >"$dir/pueue.yml" <<EOF
shared:
  pueue_directory: $dir/data
  runtime_directory: $dir/run
  use_unix_socket: true
  unix_socket_path: $dir/run/pueue.socket
daemon:
  callback: null
client:
  restart_in_place: false
EOF
  PUEUE_CONFIGS+=("$dir/pueue.yml")
  pueued -c "$dir/pueue.yml" -d >/dev/null 2>&1
  local i
  for i in $(seq 1 200); do
    pueue -c "$dir/pueue.yml" status >/dev/null 2>&1 && break
    sleep 0.05
  done
  pueue -c "$dir/pueue.yml" parallel "$SLOTS" >/dev/null
}

# ---------------------------------------------------------------------------------------------
# Machine conditions.
dsync_ms() { # one 4 KiB O_DSYNC write on the scratch disk, median of 20 (dd)
  local f="$work/dsync" i t0 t1 v=""
  for i in $(seq 1 20); do
    t0=$(now_us); dd if=/dev/zero of="$f" bs=4k count=1 oflag=dsync conv=notrunc 2>/dev/null; t1=$(now_us)
    v+=" $((t1 - t0))"
  done
  rm -f "$f"; ms "$(echo "$v" | median)"
}
CONDITIONS_BEFORE="$(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -sr); $(nproc) cores; $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); load average $(cut -d' ' -f1-3 /proc/loadavg); other compilers running: $(pgrep -c -x rustc || true); scratch on $(df -T "$work" | awk 'NR == 2 { print $1 " (" $2 ")" }'); one 4 KiB O_DSYNC write: $(dsync_ms) ms"
say "conditions: $CONDITIONS_BEFORE"

# ---------------------------------------------------------------------------------------------
# 1. Latency of one turn end to end.
if ! skip SKIP_LATENCY; then
  say "1. latency: $LAT_ROUNDS rounds"
  tg_home "$work/lat-fsync" fsync
  tg_home "$work/lat-os" os
  "$BIN" --home "$work/lat-fsync" submit --wait -- true >/dev/null 2>&1 # the homes' files exist
  "$BIN" --home "$work/lat-os" submit --wait -- true >/dev/null 2>&1
  if [ -n "${BASE_BIN:-}" ]; then
    tg_home "$work/lat-base-fsync" fsync
    tg_home "$work/lat-base-os" os
    "$BASE_BIN" --home "$work/lat-base-fsync" submit --wait -- true >/dev/null 2>&1
    "$BASE_BIN" --home "$work/lat-base-os" submit --wait -- true >/dev/null 2>&1
  fi
  if [ "$HAVE_TSP" = 1 ]; then tsp_start "$work/lat-tsp.sock" 1; TS_SOCKET="$work/lat-tsp.sock" tsp -f true >/dev/null; fi
  for r in $(seq 1 "$LAT_ROUNDS"); do
    t0=$(now_us); "$TRUE_BIN"; t1=$(now_us); add lat_spawn $((t1 - t0))
    t0=$(now_us); "$BIN" --home "$work/lat-fsync" submit --wait -- true >/dev/null 2>&1; t1=$(now_us); add lat_tg $((t1 - t0))
    t0=$(now_us); "$BIN" --home "$work/lat-os" submit --wait -- true >/dev/null 2>&1; t1=$(now_us); add lat_tg_os $((t1 - t0))
    if [ -n "${BASE_BIN:-}" ]; then
      t0=$(now_us); "$BASE_BIN" --home "$work/lat-base-fsync" submit --wait -- true >/dev/null 2>&1; t1=$(now_us); add lat_tgb $((t1 - t0))
      t0=$(now_us); "$BASE_BIN" --home "$work/lat-base-os" submit --wait -- true >/dev/null 2>&1; t1=$(now_us); add lat_tgb_os $((t1 - t0))
    fi
    if [ "$HAVE_TSP" = 1 ]; then
      t0=$(now_us); TS_SOCKET="$work/lat-tsp.sock" TMPDIR="$work" tsp -f true >/dev/null; t1=$(now_us); add lat_tsp $((t1 - t0))
    fi
    if [ "$HAVE_NQ" = 1 ]; then
      t0=$(now_us); NQDIR="$work/lat-nq" nq -q true >/dev/null; NQDIR="$work/lat-nq" nq -w >/dev/null; t1=$(now_us); add lat_nq $((t1 - t0))
    fi
  done
fi

# ---------------------------------------------------------------------------------------------
# 2. Throughput: N x true on 4 slots, from the first submit until all are done.
# One round of tool $1 with $2 submitting loops: its wall time in microseconds in BURST_US.
burst() {
  local tool="$1" loops="$2" dir="$work/burst-$1-$2-$3" t0 t1 l lp=()
  # Loop l submits share(l) turns: N split over the loops, the remainder to the first ones.
  share() { echo $((N / loops + ($1 <= N % loops ? 1 : 0))); }
  case "$tool" in
    tg | tg_os | tgb | tgb_os) tg_home "$dir" "$(case "$tool" in tg | tgb) echo fsync ;; *) echo os ;; esac)" ;;
    tsp) mkdir -p "$dir"; tsp_start "$dir/sock" "$SLOTS" ;;
    pueue) pueue_start "$dir" ;;
    *) mkdir -p "$dir" ;;
  esac
  t0=$(now_us)
  case "$tool" in
    tg | tg_os | tgb | tgb_os)
      local bin="$BIN"
      case "$tool" in tgb*) bin="$BASE_BIN" ;; esac
      for l in $(seq 1 "$loops"); do
        ( for _ in $(seq 1 "$(share "$l")"); do "$bin" --home "$dir" submit -- true || echo "submit failed: exit $?"; done >"$dir.out$l" 2>&1 ) &
        lp+=($!)
      done
      wait "${lp[@]}"
      cat "$dir".out* >"$dir.ids"
      if grep -q '^submit failed' "$dir.ids"; then say "in $dir: $(grep -B1 '^submit failed' "$dir.ids" | head -4)"; exit 1; fi
      tg_wait_all "$dir" "$dir.ids" "$N" ;;
    nq)
      for l in $(seq 1 "$loops"); do
        ( for _ in $(seq 1 "$(share "$l")"); do NQDIR="$dir" nq -q true; done >/dev/null 2>&1 ) &
        lp+=($!)
      done
      wait "${lp[@]}"
      NQDIR="$dir" nq -w >/dev/null 2>&1 ;;
    tsp)
      for l in $(seq 1 "$loops"); do
        ( for _ in $(seq 1 "$(share "$l")"); do TS_SOCKET="$dir/sock" TMPDIR="$dir" tsp true; done >/dev/null 2>&1 ) &
        lp+=($!)
      done
      wait "${lp[@]}"
      tsp_wait_all "$dir/sock" ;;
    pueue)
      for _ in $(seq 1 "$N"); do pueue -c "$dir/pueue.yml" add -- true; done >/dev/null 2>&1
      pueue -c "$dir/pueue.yml" wait >/dev/null 2>&1 ;;
    xargs) seq 1 "$N" | xargs -P"$SLOTS" -n1 "$TRUE_BIN" ;;
    parallel) seq 1 "$N" | parallel --will-cite -j"$SLOTS" "$TRUE_BIN" ;;
  esac
  t1=$(now_us)
  case "$tool" in
    tsp) TS_SOCKET="$dir/sock" tsp -K >/dev/null 2>&1 || true ;;
    pueue) pueue -c "$dir/pueue.yml" shutdown >/dev/null 2>&1 || true ;;
  esac
  # pueued may still be writing its state while it shuts down: a second try, and never fatal.
  rm -rf "$dir" "$dir".out* "$dir.ids" 2>/dev/null || { sleep 1; rm -rf "$dir" || say "could not remove $dir"; }
  BURST_US=$((t1 - t0))
}
ONE_TOOLS="tg tg_os"
[ -n "${BASE_BIN:-}" ] && ONE_TOOLS+=" tgb tgb_os"
[ "$HAVE_NQ" = 1 ] && ONE_TOOLS+=" nq"
[ "$HAVE_TSP" = 1 ] && ONE_TOOLS+=" tsp"
[ "$HAVE_PUEUE" = 1 ] && ONE_TOOLS+=" pueue"
ONE_TOOLS+=" xargs"
[ "$HAVE_PARALLEL" = 1 ] && ONE_TOOLS+=" parallel"
MANY_TOOLS="tg tg_os"
[ -n "${BASE_BIN:-}" ] && MANY_TOOLS+=" tgb tgb_os"
[ "$HAVE_NQ" = 1 ] && MANY_TOOLS+=" nq"
[ "$HAVE_TSP" = 1 ] && MANY_TOOLS+=" tsp"
if ! skip SKIP_THROUGHPUT; then
  for r in $(seq 1 "$ROUNDS"); do
    for tool in $ONE_TOOLS; do
      say "2. throughput round $r/$ROUNDS: $tool, one loop"
      burst "$tool" 1 "$r"
      add "one_$tool" "$BURST_US"
    done
    if ! skip SKIP_CONCURRENT; then
      for tool in $MANY_TOOLS; do
        say "2. throughput round $r/$ROUNDS: $tool, $LOOPS loops"
        burst "$tool" "$LOOPS" "$r"
        add "many_$tool" "$BURST_US"
      done
    fi
  done
fi

# ---------------------------------------------------------------------------------------------
# 3. A submit that parks, at each depth.
declare -A DEPTH_ROWS=() DEPTH_DB=() FILL_FD=()
if ! skip SKIP_DEPTH; then
  for d in $DEPTHS; do
    rows=$d
    [ $((rows + 2 + PARK_ROUNDS)) -le "$MAX_QUEUE_ROWS" ] || rows=$((MAX_QUEUE_ROWS - 2 - PARK_ROUNDS))
    DEPTH_ROWS[$d]=$rows
    h="$work/depth-$d"
    tg_home "$h" fsync 1
    mkfifo "$h.hold"
    "$HELPER" fill "$h" "$rows" <"$h.hold" >"$h.ready" 2>&1 &
    PIDS+=($!)
    exec {fd}>"$h.hold"
    FILL_FD[$d]=$fd
    say "3. depth: filling $h with $rows parked rows"
    for _ in $(seq 1 1200); do grep -q '^ready' "$h.ready" && break; kill -0 "${PIDS[-1]}" 2>/dev/null || break; sleep 0.1; done
    grep -q '^ready' "$h.ready" || { say "the fill of $h failed: $(cat "$h.ready")"; exit 1; }
    "$BIN" --home "$h" submit -- true >/dev/null 2>&1 # untimed: the home's files exist from here on
  done
  for r in $(seq 1 "$PARK_ROUNDS"); do
    for d in $DEPTHS; do
      h="$work/depth-$d"
      t0=$(now_us); "$BIN" --home "$h" submit -- true >"$h.out" 2>&1; t1=$(now_us)
      grep -qE ' (parked|queued)' "$h.out" || { say "a submit at depth $d did not park: $(cat "$h.out")"; exit 1; }
      add "park_$d" $((t1 - t0))
    done
  done
  for d in $DEPTHS; do
    DEPTH_DB[$d]=$(du -ck "$work/depth-$d"/tollgate.db* 2>/dev/null | awk 'END { print $1 }')
    fd=${FILL_FD[$d]}; exec {fd}>&-
  done
fi

# ---------------------------------------------------------------------------------------------
# 4. fsync-family calls per operation.
SYNCS=fsync,fdatasync,sync_file_range,msync,syncfs
declare -A SYNC=()
if ! skip SKIP_FSYNC && [ "$HAVE_STRACE" = 1 ]; then
  for dur in fsync os; do
    say "4. fsync counts, durability $dur"
    h="$work/sync-$dur"
    tg_home "$h" "$dur" 1
    "$BIN" --home "$h" submit --wait -- true >/dev/null 2>&1
    "$BIN" --home "$h" submit --task hold -- sh -c "while [ ! -e '$h.release' ]; do sleep 0.02; done" >/dev/null 2>&1
    wait_state "$h" hold running
    strace -f -c -e trace="$SYNCS" -o "$h.park" "$BIN" --home "$h" submit --task parked -- true >/dev/null 2>&1
    SYNC[park_$dur]=$(awk '$NF ~ /^(fsync|fdatasync|sync_file_range|msync|syncfs)$/ { s += $4 } END { print s + 0 }' "$h.park")
    touch "$h.release"
    wait_state "$h" parked "completed|done"
    strace -f -e trace="$SYNCS,execve" -o "$h.start" "$BIN" --home "$h" submit --task started -- true >/dev/null 2>&1
    wait_state "$h" started "completed|done"
    read -r a b <<<"$(awk '
      /execve\("[^"]*\/true"/ { started = 1 }
      /(fsync|fdatasync|sync_file_range|msync|syncfs)\(/ { if (!started) s++; all++ }
      END { printf "%d %d", s, all }' "$h.start")"
    SYNC[start_$dur]=$a SYNC[turn_$dur]=$b
  done
elif ! skip SKIP_FSYNC; then
  say "strace is not installed: fsync counts skipped (apt-get install strace)"
fi

# ---------------------------------------------------------------------------------------------
# 5. serve: accepted deliveries per second vs the 404 path.
declare -A SRV=()
field() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { print $2 }'; }
if ! skip SKIP_SERVE; then
  h="$work/serve"
  tg_home "$h" fsync 1
  # Every accepted delivery parks behind the first, which holds the only slot until the home goes.
  cat >>"$h/tollgate.toml" <<EOF

[serve]
max_detached = 100000

[[route]]
path = "/hook"
adapter = "generic"
secret_env = "BENCH_SECRET"
task = "d-{scope}"
strategy = "concurrent=1024"
run = ["sh", "-c", "i=0; while [ -d '$h' ] && [ \$i -lt 6000 ]; do sleep 0.1; i=\$((i+1)); done"]
EOF
  export BENCH_SECRET=peers-bench-secret
  TOLLGATE_LOG=warn "$BIN" --home "$h" serve --listen 127.0.0.1:0 >"$h.listen" 2>"$h.log" &
  SERVE_PID=$!
  PIDS+=("$SERVE_PID")
  for _ in $(seq 1 200); do grep -q 'listening on' "$h.listen" && break; sleep 0.05; done
  addr=$(sed -n 's#.*listening on http://##p' "$h.listen" | head -1)
  [ -n "$addr" ] || { say "serve did not start: $(cat "$h.log")"; exit 1; }
  say "5. serve on $addr"
  for c in $SERVE_CONNS; do
    say "5. serve: $c connection(s)"
    SRV[404_$c]=$("$HELPER" load "$addr" 404 "$c" "$SERVE_SECS" 100000000 x)
    SRV[accept_$c]=$("$HELPER" load "$addr" accept "$c" "$SERVE_SECS" "$SERVE_MAX" "c$c")
  done
  if ! skip SKIP_FSYNC && [ "$HAVE_STRACE" = 1 ]; then
    say "4. fsync calls per accepted delivery (strace attached to serve)"
    strace -f -c -e trace="$SYNCS" -o "$h.strace" -p "$SERVE_PID" 2>/dev/null &
    STRACE_PID=$!
    sleep 1 # strace attaches to every thread before the first traced delivery
    SRV[traced]=$("$HELPER" load "$addr" accept 16 60 "$SERVE_TRACED" traced)
    kill -INT "$STRACE_PID"; wait "$STRACE_PID" 2>/dev/null || true
    SYNC[serve]=$(awk '$NF ~ /^(fsync|fdatasync|sync_file_range|msync|syncfs)$/ { s += $4 } END { print s + 0 }' "$h.strace")
  fi
  kill -TERM "$SERVE_PID" 2>/dev/null || true
fi
CONDITIONS_AFTER="load average $(cut -d' ' -f1-3 /proc/loadavg); other compilers running: $(pgrep -c -x rustc || true); one 4 KiB O_DSYNC write: $(dsync_ms) ms"

# ---------------------------------------------------------------------------------------------
# Report.
report() {
  local tg ref
  echo "# tollgate vs peers ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "- before: $CONDITIONS_BEFORE"
  echo "- after: $CONDITIONS_AFTER"
  [ -n "${BASE_BIN:-}" ] && echo "- base binary (rows \"base\"): $BASE_BIN"
  echo "- binary: $BIN ($(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo "?")); medians; ROUNDS=$ROUNDS N=$N LOOPS=$LOOPS LAT_ROUNDS=$LAT_ROUNDS PARK_ROUNDS=$PARK_ROUNDS"
  echo
  if ! skip SKIP_LATENCY; then
    echo "## 1. \`submit --wait -- true\` end to end (median of $LAT_ROUNDS, interleaved)"
    echo
    echo "| command | ms | × spawning \`true\` |"
    echo "|---|---|---|"
    local spawn; spawn=$(med lat_spawn)
    for k in spawn:"spawning \`true\`" tg:"tollgate \`submit --wait -- true\` (fsync)" tg_os:"tollgate \`submit --wait -- true\` (os)" tgb:"base \`submit --wait -- true\` (fsync)" tgb_os:"base \`submit --wait -- true\` (os)" tsp:"\`tsp -f true\`" nq:"\`nq true\` + \`nq -w\`"; do
      local m; m=$(med "lat_${k%%:*}")
      [ "$m" = - ] && continue
      echo "| ${k#*:} | $(ms "$m") | $(ratio "$m" "$spawn") |"
    done
    echo
  fi
  if ! skip SKIP_THROUGHPUT; then
    echo "## 2. $N × \`true\` on $SLOTS slots, first submit until all done (median of $ROUNDS, interleaved)"
    echo
    echo "| runner | one loop, s | $LOOPS loops, s |"
    echo "|---|---|---|"
    for k in tg:"tollgate (durability fsync)" tg_os:"tollgate (durability os)" tgb:"base (durability fsync)" tgb_os:"base (durability os)" nq:"nq (one serial queue)" tsp:"task-spooler (\`tsp -S $SLOTS\`)" pueue:"pueue (\`parallel $SLOTS\`)" xargs:"xargs -P$SLOTS (no queue)" parallel:"GNU \`parallel -j$SLOTS\` (no queue)"; do
      local a b; a=$(med "one_${k%%:*}"); b=$(med "many_${k%%:*}")
      [ "$a" = - ] && [ "$b" = - ] && continue
      echo "| ${k#*:} | $(secs "$a") | $(secs "$b") |"
    done
    echo
    echo "| ratio (wall time; < 1 means tollgate is faster) | one loop | $LOOPS loops |"
    echo "|---|---|---|"
    for pair in tg:nq tg:tsp tg_os:nq tg_os:tsp tg:tgb tg_os:tgb_os tgb:nq tgb_os:tsp; do
      tg=${pair%%:*} ref=${pair#*:}
      [ "$(med "one_$ref")" = - ] && continue
      local name; case "$tg" in tg) name="tollgate (fsync)" ;; tg_os) name="tollgate (os)" ;; tgb) name="base (fsync)" ;; *) name="base (os)" ;; esac
      echo "| $name / ${ref/tgb/base} | $(ratio "$(med "one_$tg")" "$(med "one_$ref")") | $(ratio "$(med "many_$tg")" "$(med "many_$ref")") |"
    done
    if [ "$(med one_pueue)" != - ]; then
      echo "| pueue / tollgate (fsync): how many times faster tollgate is | $(ratio "$(med one_pueue)" "$(med one_tg)") | |"
      echo "| pueue / tollgate (os) | $(ratio "$(med one_pueue)" "$(med one_tg_os)") | |"
    fi
    echo
  fi
  if ! skip SKIP_DEPTH; then
    echo "## 3. A submit that parks, by parked rows (median of $PARK_ROUNDS, interleaved; 1 slot held)"
    echo
    echo "| parked rows | ms | × the cost at the shallowest | tollgate.db + its WAL |"
    echo "|---|---|---|---|"
    local first=""
    for d in $DEPTHS; do
      local m; m=$(med "park_$d"); [ -n "$first" ] || first=$m
      echo "| ${DEPTH_ROWS[$d]} | $(ms "$m") | $(ratio "$m" "$first") | ${DEPTH_DB[$d]:-?} KiB |"
    done
    echo
  fi
  if ! skip SKIP_FSYNC && [ "$HAVE_STRACE" = 1 ]; then
    echo "## 4. fsync-family calls per operation (strace -f; fsync, fdatasync, sync_file_range, msync, syncfs)"
    echo
    echo "| operation | durability fsync | durability os |"
    echo "|---|---|---|"
    echo "| a submit that parks | ${SYNC[park_fsync]:-} | ${SYNC[park_os]:-} |"
    echo "| \`submit -- true\` until its runner took the slot over | ${SYNC[start_fsync]:-} | ${SYNC[start_os]:-} |"
    echo "| \`submit -- true\`, the whole turn | ${SYNC[turn_fsync]:-} | ${SYNC[turn_os]:-} |"
    if [ -n "${SYNC[serve]:-}" ]; then
      local n; n=$(field "${SRV[traced]}" ok)
      echo "| serve: per accepted delivery (${n} deliveries, 16 connections, traced) | $(awk -v s="${SYNC[serve]}" -v n="$n" 'BEGIN { if (n > 0) printf "%.2f (%d in all)", s / n, s; else print "-" }') | |"
    fi
    echo
  fi
  if ! skip SKIP_SERVE; then
    echo "## 5. serve on loopback: accepted deliveries vs the 404 path (${SERVE_SECS} s or $SERVE_MAX requests a phase)"
    echo
    echo "| connections | accepted/s | p50 ms | p99 ms | 404 req/s | 404 p99 ms | accepted / 404 | non-200 |"
    echo "|---|---|---|---|---|---|---|---|"
    for c in $SERVE_CONNS; do
      local a="${SRV[accept_$c]}" b="${SRV[404_$c]}"
      echo "| $c | $(field "$a" rps) | $(ms "$(field "$a" p50_us)") | $(ms "$(field "$a" p99_us)") | $(field "$b" rps) | $(ms "$(field "$b" p99_us)") | $(ratio "$(field "$a" rps)" "$(field "$b" rps)" %.4f) | $(( $(field "$a" other) + $(field "$a" errors) )) |"
    done
    echo
  fi
}
report | tee "${OUT:-/dev/null}"
[ -z "$OUT" ] || say "written to $OUT"

#!/usr/bin/env bash
# Fleet throughput (issue 14, acceptance "Benchmark"): N × `true` (500) spread over 3 hosts (three
# homes with distinct `host` settings on one PostgreSQL queue, each `workers = 4`: the global cap
# is 4), submitted by 3 concurrent loops, one per home; against the same N on one SQLite home with
# 4 workers, submitted by one loop and by 3 concurrent loops. One run, interleaved nowhere (each
# setup runs alone). Wall time is from the first submit to the queue being empty (its `entries`
# rows counted in the database; every turn then checked completed); the figure the issue asks for is the fleet's throughput relative to the
# single host's: single wall / fleet wall (target ≥ 0.8; River's users saw 0.5).
#
# PostgreSQL: TOLLGATE_BENCH_POSTGRES=postgres://… uses that server (a fresh queue in it);
# otherwise the script starts a throwaway cluster as .ci/run does (initdb as the `postgres` user
# when run as root, a unix socket in a temporary directory, stopped and removed at the end).
#
# POOLER=pgbouncer puts a pgbouncer in session mode (one server connection per tollgate process,
# handed back and reset with DISCARD ALL when it exits) between the hosts and the throwaway
# cluster, so the fleet's short processes stop paying a backend start and its cold caches each
# (docs/PERFORMANCE.md, "Fleet"; needs the `pgbouncer` binary, Debian package pgbouncer; only with
# the throwaway cluster: for your own server, point TOLLGATE_BENCH_POSTGRES at your pooler).
# STATEMENTS=1 (the script's own cluster only) loads pg_stat_statements and prints, for the fleet
# phase, the server's plans, planning and execution time (lock waits left out): the server's
# own account of the work per turn, steadier than the wall time.
# POOLER_RESET sets pgbouncer's server_reset_query (default DISCARD ALL, pgbouncer's own): with
# POOLER_RESET="RESET ALL" a server session keeps its prepared statements for the next tollgate
# process, so the part read is planned once per server session rather than once per process
# (spec/store.md, "A part read planned once per connection").
#
# Usage: benches/fleet.sh            N=500 (env); BIN=path uses that binary, otherwise
#        target/release/tollgate is built first.
# No timed assertion: it prints figures (docs/PERFORMANCE.md, "Fleet").
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-500}"
HOSTS=3
WORKERS=4
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet --bin tollgate
  BIN="${CARGO_TARGET_DIR:-target}/release/tollgate"
fi
BIN="$(realpath "$BIN")"
command -v python3 >/dev/null || { echo "fleet.sh reads status --json with python3" >&2; exit 2; }

work="$(mktemp -d /tmp/tollgate-fleet-bench.XXXXXX)"
PG_DIR=""
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
as_pg() { if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else (cd / && "$@"); fi; }
POOLER="${POOLER:-}"
cleanup() {
  if [ -n "$PG_DIR" ] && [ -f "$PG_DIR/pgbouncer.pid" ]; then
    kill "$(cat "$PG_DIR/pgbouncer.pid")" 2>/dev/null || true
  fi
  if [ -n "$PG_DIR" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

case "$POOLER" in
  "" | pgbouncer) ;;
  *) echo "POOLER=$POOLER: only pgbouncer is known" >&2; exit 2 ;;
esac
if [ -n "$POOLER" ] && [ -n "${TOLLGATE_BENCH_POSTGRES:-}" ]; then
  echo "POOLER=pgbouncer fronts the script's own cluster; with TOLLGATE_BENCH_POSTGRES, give your pooler's URL there instead" >&2
  exit 2
fi
if [ -n "${STATEMENTS:-}" ] && [ -n "${TOLLGATE_BENCH_POSTGRES:-}" ]; then
  echo "STATEMENTS=1 loads pg_stat_statements into the script's own cluster; for your own server, load it there and read pg_stat_statements yourself" >&2
  exit 2
fi
if [ -n "$POOLER" ] && ! command -v pgbouncer >/dev/null; then
  echo "POOLER=pgbouncer: no pgbouncer binary on PATH (Debian: apt-get install pgbouncer)" >&2
  exit 2
fi
if [ -n "${TOLLGATE_BENCH_POSTGRES:-}" ]; then
  URL="$TOLLGATE_BENCH_POSTGRES"
else
  [ -x "$PG_BIN/initdb" ] || { echo "no PostgreSQL server binaries in $PG_BIN (set PG_BIN or TOLLGATE_BENCH_POSTGRES)" >&2; exit 2; }
  PG_DIR="$(mktemp -d /tmp/tollgate-bench-pg.XXXXXX)"
  if [ "$(id -u)" = 0 ]; then chown postgres "$PG_DIR"; PG_USER=postgres; else PG_USER="$(id -un)"; fi
  as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U "$PG_USER" >"$PG_DIR/initdb.log" 2>&1 \
    || { cat "$PG_DIR/initdb.log" >&2; exit 1; }
  statements_opts=""
  [ -n "${STATEMENTS:-}" ] && statements_opts="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w \
    -o "-k $PG_DIR -c listen_addresses= -c max_connections=200 $statements_opts" start >/dev/null \
    || { cat "$PG_DIR/server.log" >&2; exit 1; }
  as_pg "$PG_BIN/createdb" -h "$PG_DIR" -U "$PG_USER" tollgate_bench
  URL="postgresql://$PG_USER@localhost/tollgate_bench?host=$PG_DIR"
  DIRECT_URL="$URL"
  if [ -n "${STATEMENTS:-}" ]; then
    as_pg "$PG_BIN/psql" -qAt "$URL" -c "CREATE EXTENSION pg_stat_statements" >/dev/null
  fi
  if [ -n "$POOLER" ]; then
    # Session mode: every statement tollgate sends (advisory transaction locks, named statements
    # inside a transaction) behaves as on a direct connection. Unix socket beside the cluster's.
    cat >"$PG_DIR/pgbouncer.ini" <<INI
[databases]
* = host=$PG_DIR
[pgbouncer]
listen_addr =
unix_socket_dir = $PG_DIR
listen_port = 6432
auth_type = trust
auth_file = $PG_DIR/pgbouncer.users
pool_mode = session
server_reset_query = ${POOLER_RESET:-DISCARD ALL}
max_client_conn = 500
default_pool_size = 40
logfile = $PG_DIR/pgbouncer.log
pidfile = $PG_DIR/pgbouncer.pid
INI
    printf '"%s" ""\n' "$PG_USER" >"$PG_DIR/pgbouncer.users"
    if [ "$(id -u)" = 0 ]; then chown postgres "$PG_DIR/pgbouncer.ini" "$PG_DIR/pgbouncer.users"; fi
    as_pg pgbouncer -d "$PG_DIR/pgbouncer.ini" || { cat "$PG_DIR/pgbouncer.log" >&2; exit 1; }
    for _ in $(seq 1 100); do [ -S "$PG_DIR/.s.PGSQL.6432" ] && break; sleep 0.05; done
    [ -S "$PG_DIR/.s.PGSQL.6432" ] || { echo "pgbouncer did not listen" >&2; cat "$PG_DIR/pgbouncer.log" >&2; exit 1; }
    URL="postgresql://$PG_USER@localhost:6432/tollgate_bench?host=$PG_DIR"
  fi
fi
case "$URL" in *\?*) SEP='&' ;; *) SEP='?' ;; esac
QUEUE="fleet-bench-$$-$(date +%s)"
STORE="${URL}${SEP}queue=$QUEUE"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# The rows left in home $1's queue, counted in its database directly (one cheap read, no
# tollgate command: `status --json TASK` lists only that task's rows, and `status` of every task
# reads all N tasks' records on every poll): SQLite's `entries` for a home of its own, the
# fleet queue's `entries` rows in PostgreSQL.
rows_left() {
  if [ "$1" = fleet ]; then
    as_pg "$PG_BIN/psql" -qAt "$URL" -c "SELECT count(*) FROM entries WHERE queue = '$QUEUE'"
  else
    python3 -c 'import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True, timeout=10)
print(db.execute("SELECT count(*) FROM entries").fetchone()[0])' "$1/tollgate.db"
  fi
}

# Polls (every 50 ms, at most 10 minutes) until the queue is empty ($1: a home, or `fleet`).
drain() {
  local i
  for i in $(seq 1 12000); do
    [ "$(rows_left "$1")" = 0 ] && return 0
    sleep 0.05
  done
  echo "$1 did not drain: $(rows_left "$1") rows left" >&2
  exit 1
}

# Checks (after the timing) that home $1 recorded $2 turns of tasks named $3-*, all completed.
check_completed() {
  "$BIN" --home "$1" status --json | python3 -c '
import json, sys
want, prefix = int(sys.argv[1]), sys.argv[2]
turns = [u for t in json.load(sys.stdin).get("tasks", []) if t["name"].startswith(prefix)
         for u in t.get("turns", [])]
done = sum(1 for u in turns if u.get("state") == "completed")
if len(turns) != want or done != want:
    sys.exit(f"{prefix}: {len(turns)} turns recorded, {done} completed, {want} submitted")' "$2" "$3-"
}

# Submits $3 × `true` to home $1, tasks named $2-<i> (each turn its own task).
submit_loop() {
  local home="$1" prefix="$2" count="$3" i
  for i in $(seq 1 "$count"); do
    "$BIN" --home "$home" submit --task "$prefix-$i" -- true >/dev/null
  done
}

# Splits N over $1 loops: prints the count of loop $2 (0-based).
share() { echo $(( N / $1 + ($2 < N % $1 ? 1 : 0) )); }

# Runs one setup: $1 its name, $2 what to drain (a home, or `fleet`), then home paths; one loop
# per home given (a home may repeat). Prints and sets WALL_MS.
run_setup() {
  local name="$1" queue="$2"; shift 2
  local homes=("$@") pids=() j t0 t1 loops
  loops=${#homes[@]}
  busy0=$(busy_ticks)
  t0=$(now_ms)
  for j in $(seq 0 $((loops - 1))); do
    submit_loop "${homes[$j]}" "$name-l$j" "$(share "$loops" "$j")" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  t1=$(now_ms)
  drain "$queue"
  WALL_MS=$(( $(now_ms) - t0 ))
  local busy_ms=$(( ($(busy_ticks) - busy0) * 1000 / $(getconf CLK_TCK) ))
  check_completed "${homes[0]}" "$N" "$name"
  echo "$name: $N turns, $loops submit loop(s): submits done in $(( t1 - t0 )) ms, all completed in $WALL_MS ms ($(python3 -c "print(f'{$N * 1000 / $WALL_MS:.1f}')") turns/s); CPU busy $(python3 -c "print(f'{$busy_ms / $N:.1f}')") ms per turn, every process of the machine"
}

# The machine's busy CPU time so far, in clock ticks (user, nice, system, irq, softirq of every
# core, from /proc/stat): the fleet is CPU-bound on a small machine, so CPU per turn is what a
# change to the per-turn work moves, whatever the lock waits and the tail of the drain do.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

# The fleet: three homes on one queue, distinct hosts, workers = 4 each (one global cap).
fleet=()
for h in $(seq 0 $((HOSTS - 1))); do
  home="$work/fleet-$h"
  "$BIN" --home "$home" init --workers "$WORKERS" >/dev/null
  printf 'store = "%s"\nhost = "bench-host-%s"\n' "$STORE" "$h" >>"$home/tollgate.toml"
  fleet+=("$home")
done
single="$work/single"
"$BIN" --home "$single" init --workers "$WORKERS" >/dev/null
single3="$work/single3"
"$BIN" --home "$single3" init --workers "$WORKERS" >/dev/null

echo "binary $BIN, N=$N, global cap $WORKERS, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), pooler ${POOLER:-none}${POOLER:+ (reset: ${POOLER_RESET:-DISCARD ALL})}"
run_setup single-sqlite-1-loop "$single" "$single"
single_ms=$WALL_MS
run_setup single-sqlite-3-loops "$single3" "$single3" "$single3" "$single3"
single3_ms=$WALL_MS
statements() {
  as_pg "$PG_BIN/psql" -qAt "$DIRECT_URL" -c "$1"
}
[ -n "${STATEMENTS:-}" ] && statements "SELECT pg_stat_statements_reset()" >/dev/null
run_setup fleet-postgres-3-hosts fleet "${fleet[@]}"
fleet_ms=$WALL_MS
if [ -n "${STATEMENTS:-}" ]; then
  echo "fleet-postgres-3-hosts, the server's statements (pg_stat_statements, the drain's polls included): $(statements \
    "SELECT sum(plans) || ' plans, ' || round(sum(total_plan_time)::numeric) || ' ms planning, ' ||
            round((sum(total_exec_time) FILTER (WHERE query NOT LIKE '%pg_advisory_xact_lock%'))::numeric)
            || ' ms execution (lock waits left out)' FROM pg_stat_statements")"
fi
python3 - "$single_ms" "$single3_ms" "$fleet_ms" <<'PY'
import sys
single, single3, fleet = (int(a) for a in sys.argv[1:])
print(f"fleet throughput / single host (1 loop):  {single / fleet:.2f}x")
print(f"fleet throughput / single host (3 loops): {single3 / fleet:.2f}x  (target >= 0.8x)")
PY

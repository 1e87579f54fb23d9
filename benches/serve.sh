#!/usr/bin/env bash
# serve's accept path against its own ceiling (issue 12, point 3; docs/BENCHMARKS.md "serve"):
# accepted deliveries per second, p50 and p99 at SERVE_CONNS (1 4 16) keep-alive connections vs the
# same server's 404 path, and the fsync-family calls per accepted delivery (strace -f -c attached
# to the running serve during SERVE_TRACED deliveries at 16 connections). It is the serve part of
# benches/peers.sh (same helper, same home, same route: every accepted turn parks behind one held
# slot, so the phase measures verify, admit, mark, group commit, 200; not runners), run alone.
#
#   benches/serve.sh                      # release build, report on stdout and target/bench-serve.md
#   SERVE_SECS=5 SERVE_MAX=5000 SERVE_TRACED=400 SERVE_CONNS="1 4 16" BIN=path benches/serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export SKIP_LATENCY=1 SKIP_THROUGHPUT=1 SKIP_CONCURRENT=1 SKIP_DEPTH=1
export SKIP_PUEUE=1 SKIP_NQ=1 SKIP_TSP=1 SKIP_PARALLEL=1 SKIP_INSTALL=1
export OUT="${OUT:-target/bench-serve.md}"
exec benches/peers.sh "$@"

# Shared by the benchmark scripts that drive a real home (benches/depth.sh, benches/drain.sh,
# benches/store_fsync.sh): source it from the project root. Bash only; it defines functions and
# starts nothing.

# Sets BIN to the release binary, building it first, unless BIN is given.
release_bin() {
  if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet --bin tollgate
    BIN="${CARGO_TARGET_DIR:-target}/release/tollgate"
  fi
}

# Exits (2) naming script $1 when the sqlite3 shell is missing.
need_sqlite3() {
  command -v sqlite3 >/dev/null || { echo "$1 needs the sqlite3 shell (apt-get install sqlite3)" >&2; exit 2; }
}

# Polls (at most 30 s) until `status` of home $1 shows a turn of task $2 in state $3.
wait_state() {
  local home="$1" task="$2" state="$3" i
  for i in $(seq 1 600); do
    if "$BIN" --home "$home" status "$task" 2>/dev/null | grep -qE " ($state) "; then return 0; fi
    sleep 0.05
  done
  echo "timed out waiting for $task to be $state in $home" >&2
  exit 1
}

# Parks $2 rows behind the held slot of home $1 (queue ids from 1 000 000 on, after every real
# row), each of its own task with a task and a turn record (as generated names are), in one
# `sqlite3` transaction: rows the store loads and checks like any other.
park_synthetic() {
  local home="$1" depth="$2"
  sqlite3 "$home/tollgate.db" >/dev/null <<SQL
PRAGMA busy_timeout = 10000;
BEGIN IMMEDIATE;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $depth)
INSERT INTO entries (queue_id, task, turn, enqueued_at_millis, state)
  SELECT 1000000 + i, 'bulk-' || i, 1,
         (SELECT coalesce(max(enqueued_at_millis), 0) FROM entries), 'parked' FROM n;
INSERT INTO tasks (name, next_turn, body)
  SELECT task, 2, json_object('name', task, 'next_turn', 2) FROM entries WHERE task LIKE 'bulk-%';
INSERT INTO turns (task, turn, short_id, settled, body)
  SELECT task, 1, queue_id, 0,
         json_object('task', task, 'turn', 1, 'argv', json_array('true'), 'id', queue_id)
  FROM entries WHERE task LIKE 'bulk-%';
UPDATE queue_meta SET next_queue_id = 1000000 + $depth + 1;
COMMIT;
SQL
}

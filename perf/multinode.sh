#!/usr/bin/env bash
# Several `fanfare serve` nodes on one PostgreSQL against one simulator (issue 14): for 1, 2 and 3 nodes on this
# machine, the bulk registration rate without the API (`fanfare import`: COPY on two connections), the registration
# rate through one node (POST /v1/tokens, batches of 10,000, two at once, into PostgreSQL), the
# makespan of one wave to every token (1,000,000 by default), the database work of that wave (statements
# from pg_stat_statements, WAL bytes), the database's bytes per registered token (table and indexes) and the
# largest node's resident memory, and the CPU registering took per token in the nodes and in PostgreSQL: the
# figures docs/deployment.md's capacity model starts from. The simulator is pinned to SIM_CPU, the nodes to CLIENT_CPU (with three
# nodes they share one core: the figures say what the coordination costs, not how far more machines scale).
# PostgreSQL runs unpinned. Prints one table; raw output in perf/out/<timestamp>-multinode/.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf/multinode.sh [options]      (each option also reads from the environment variable shown)
  -n, --nodes "LIST"   node counts to run                               NODES ("1 2 3")
  -t, --tokens N       tokens registered and waved to                   TOKENS (1000000)
  -s, --shards N       the cluster's shard count                        SHARDS (6)
  -l, --latency D      the simulator's latency                          LATENCY (0)
  -c, --concurrency N  registration requests in flight at once          CONCURRENCY (2)
      --out DIR        output directory                                 OUT (perf/out/<timestamp>-multinode)
      --no-build       use the existing release binary                  NO_BUILD=1
Also: FANFARE_BIN (use this binary, no build), SIM_CPU (1) and CLIENT_CPU (0), POSTGRES_BIN (directory of
initdb/pg_ctl/postgres; default the newest /usr/lib/postgresql/N/bin), PG_SETTINGS (the server's -c flags;
default "-c shared_buffers=2GB -c max_wal_size=8GB").
Needs PostgreSQL's server (apt-get install -y postgresql), python3, curl, jq, taskset.
USAGE
}

# shellcheck source=perf/lib.sh source-path=SCRIPTDIR/..
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODES="${NODES:-1 2 3}"
TOKENS="${TOKENS:-1000000}"
SHARDS="${SHARDS:-6}"
LATENCY="${LATENCY:-0}"
CONCURRENCY="${CONCURRENCY:-2}"
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)-multinode}"
while [ $# -gt 0 ]; do
    case "$1" in
        -n | --nodes) NODES="$2"; shift 2 ;;
        -t | --tokens) TOKENS="$2"; shift 2 ;;
        -s | --shards) SHARDS="$2"; shift 2 ;;
        -l | --latency) LATENCY="$2"; shift 2 ;;
        -c | --concurrency) CONCURRENCY="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option $1" ;;
    esac
done
[[ "$TOKENS" =~ ^[0-9]+$ ]] && [ "$TOKENS" -ge 10000 ] && [ $((TOKENS % 10000)) -eq 0 ] ||
    perf_die "--tokens must be a multiple of 10,000 (got $TOKENS)"
[[ "$CONCURRENCY" =~ ^[1-9][0-9]*$ ]] || perf_die "--concurrency must be a positive number (got $CONCURRENCY)"
[[ "$SHARDS" =~ ^[0-9]+$ ]] && [ "$SHARDS" -ge 1 ] || perf_die "--shards must be a positive number (got $SHARDS)"
for n in $NODES; do [[ "$n" =~ ^[1-9]$ ]] || perf_die "--nodes takes counts from 1 to 9 (got '$n')"; done

for tool in taskset curl jq python3; do command -v "$tool" >/dev/null 2>&1 || perf_die "'$tool' is missing"; done
if [ -z "${POSTGRES_BIN:-}" ]; then
    POSTGRES_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
fi
[ -x "${POSTGRES_BIN:-}/initdb" ] || perf_die "PostgreSQL's server programs not found (apt-get install -y postgresql, or POSTGRES_BIN=dir)"

mkdir -p "$OUT"
perf_warn_if_busy
perf_build
perf_write_environment "$OUT/environment.txt"
PERF_SIM_PIDS=()
NODE_PIDS=()
# PostgreSQL's files in a temporary directory: its user must reach them (the output directory may sit under a
# home directory it cannot enter).
PG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/fanfare-multinode-pg.XXXXXX")"

# PostgreSQL refuses to run as root: its programs run as the postgres user then.
as_postgres() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

stop_nodes() {
    local pid
    for pid in "${NODE_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${NODE_PIDS[@]}"; do
        for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    NODE_PIDS=()
}

cleanup() {
    stop_nodes
    perf_cleanup
    [ -d "$PG_DIR/data" ] && as_postgres "$POSTGRES_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    [ -f "$PG_DIR/log" ] && cp "$PG_DIR/log" "$OUT/postgres.log" 2>/dev/null || true
    rm -rf "$PG_DIR"
}
trap cleanup EXIT

# Durable as in production (fsync and synchronous_commit stay on); memory for the registry's indexes (1,000,000
# tokens are about 400 MB of table and indexes: the default 128 MB of shared buffers would make every insert a
# read) and room for a bulk load's WAL between checkpoints. docs/deployment.md says what a real server needs.
PG_SETTINGS="${PG_SETTINGS:--c shared_buffers=2GB -c max_wal_size=8GB}"

# --- PostgreSQL: initdb into the output directory, loopback, pg_stat_statements for the statement counts.
mkdir -p "$PG_DIR"
if [ "$(id -u)" = 0 ]; then chown postgres "$PG_DIR"; fi
PG_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
perf_log "initdb into $PG_DIR/data; PostgreSQL on 127.0.0.1:$PG_PORT"
as_postgres "$POSTGRES_BIN/initdb" -D "$PG_DIR/data" -A trust -U fanfare --no-sync >"$OUT/initdb.log" 2>&1 ||
    perf_die "initdb failed (see $OUT/initdb.log)"
as_postgres "$POSTGRES_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w \
    -o "-h 127.0.0.1 -p $PG_PORT -k $PG_DIR -c shared_preload_libraries=pg_stat_statements -c max_connections=200 $PG_SETTINGS" \
    start >/dev/null || perf_die "PostgreSQL did not start (see $PG_DIR/log)"
psql_run() { psql -X -q -t -A -h 127.0.0.1 -p "$PG_PORT" -U fanfare "$@"; }
command -v psql >/dev/null 2>&1 || psql() { "$POSTGRES_BIN/psql" "$@"; }

# --- The simulator (one for every run), and the tokens' request bodies (made once).
perf_start_simulator "$OUT/simulator" "$OUT/simulator.log" "$LATENCY" 1000
perf_log "simulator on 127.0.0.1:$SIM_PORT (latency $LATENCY)"
BODIES="$OUT/bodies"
mkdir -p "$BODIES"
python3 - "$TOKENS" "$BODIES" <<'PY'
import os, sys
count, out = int(sys.argv[1]), sys.argv[2]
for batch in range(count // 10000):
    rows = []
    for index in range(batch * 10000, (batch + 1) * 10000):
        token = os.urandom(80).hex()
        rows.append('{"token":"%s","kind":"update","channels":["match"],"activity_id":"a%d"}' % (token, index))
    with open(os.path.join(out, "%04d.json" % batch), "w") as f:
        f.write('{"tokens":[' + ",".join(rows) + "]}")
PY

serve_flags=(
    --endpoint "https://127.0.0.1:$SIM_PORT" --ca-file "$OUT/simulator/ca.pem" --auth-key "$OUT/simulator/AuthKey_$KEY_ID.p8"
    --key-id "$KEY_ID" --team-id "$TEAM_ID" --bundle-id "$BUNDLE_ID" --shards "$SHARDS" --lease 2s --log-format json
)

# CPU seconds (user + system) the given processes have used so far.
cpu_seconds() {
    local pid ticks=0 t
    for pid in "$@"; do
        t="$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)"
        ticks=$((ticks + t))
    done
    echo "$ticks / $(getconf CLK_TCK)" | bc -l
}
postgres_cpu() { cpu_seconds $(pgrep -x postgres || true); }

# --- Bulk registration without the API: `fanfare import` (COPY on two connections) into an empty database, the
# change-feed triggers included (no node runs, so nothing reads the feed). What one node's registry writes cost.
psql_run -d postgres -c "CREATE DATABASE fanfare_import" >/dev/null
perf_log "bulk import: $TOKENS tokens with fanfare import into an empty database"
db_cpu_before="$(postgres_cpu)"
import_started=$(date +%s.%N)
taskset -c "$CLIENT_CPU" /usr/bin/time -f '%U %S' -o "$OUT/import.time" "$FANFARE" import \
    --database "postgres://fanfare@127.0.0.1:$PG_PORT/fanfare_import" --bundle-id "$BUNDLE_ID" --connections 2 --quiet \
    "$BODIES"/*.json >"$OUT/import.out" 2>"$OUT/import.err" || perf_die "fanfare import failed (see $OUT/import.err)"
import_cpu="$(awk '{print $1 + $2}' "$OUT/import.time")"
import_ended=$(date +%s.%N)
IMPORT_RATE="$(echo "$TOKENS / ($import_ended - $import_started)" | bc -l | xargs printf '%.0f')"
IMPORT_DB_US="$(echo "($(postgres_cpu) - $db_cpu_before) * 1000000 / $TOKENS" | bc -l | xargs printf '%.1f')"
IMPORT_US="$(echo "$import_cpu * 1000000 / $TOKENS" | bc -l | xargs printf '%.1f')"
psql_run -d postgres -c "DROP DATABASE fanfare_import" >/dev/null

RESULTS="$OUT/results.tsv"
printf 'nodes\tregistration_per_s\tnode_cpu_us_per_token\tdb_cpu_us_per_token\tfeed_s\tdb_bytes_per_token\tmakespan_s\tpushes_per_s\tnode_cpu_us_per_push\tstatements\twal_bytes\tnode_rss_mb\n' >"$RESULTS"
for nodes in $NODES; do
    run="$OUT/nodes-$nodes"
    mkdir -p "$run"
    database="fanfare_$nodes"
    psql_run -d postgres -c "CREATE DATABASE $database" >/dev/null
    url="postgres://fanfare@127.0.0.1:$PG_PORT/$database"
    ports=()
    for i in $(seq "$nodes"); do
        taskset -c "$CLIENT_CPU" "$FANFARE" serve "${serve_flags[@]}" --database "$url" --node-id "node-$i" \
            --listen 127.0.0.1:0 >"$run/node-$i.out" 2>"$run/node-$i.err" &
        NODE_PIDS+=($!)
    done
    for i in $(seq "$nodes"); do
        port=""
        for _ in $(seq 600); do
            port="$(grep -m1 -o 'listening on http://[^ ]*' "$run/node-$i.out" 2>/dev/null | sed 's/.*://' || true)"
            [ -n "$port" ] && break
            sleep 0.1
        done
        [ -n "$port" ] || perf_die "node $i did not start (see $run/node-$i.err)"
        ports+=("$port")
    done
    held_total() {
        local total=0 p n
        for p in "${ports[@]}"; do
            n="$(curl -fsS "http://127.0.0.1:$p/readyz" 2>/dev/null | jq -r "[.cluster.$1] | add // 0" 2>/dev/null || echo 0)"
            total=$((total + ${n:-0}))
        done
        echo "$total"
    }
    for _ in $(seq 600); do [ "$(held_total 'held_shards | length')" -eq "$SHARDS" ] && break; sleep 0.1; done
    [ "$(held_total 'held_shards | length')" -eq "$SHARDS" ] || perf_die "the $nodes nodes did not lease all $SHARDS shards"

    perf_log "$nodes node(s): registering $TOKENS tokens through node 1"
    node_cpu_before="$(cpu_seconds "${NODE_PIDS[@]}")"
    db_cpu_before="$(postgres_cpu)"
    started=$(date +%s.%N)
    # CONCURRENCY requests in flight (a node writes up to two batches at once, on two connections).
    printf '%s\n' "$BODIES"/*.json | xargs -P "$CONCURRENCY" -I{} \
        curl -fsS -o /dev/null -H 'Content-Type: application/json' --data-binary "@{}" "http://127.0.0.1:${ports[0]}/v1/tokens" ||
        perf_die "registration failed (see $run/node-1.err)"
    registered=$(date +%s.%N)
    for _ in $(seq 6000); do [ "$(held_total shard_tokens)" -eq "$TOKENS" ] && break; sleep 0.1; done
    fed=$(date +%s.%N)
    # What registering cost, through to every node's shards (the change feed included), per token.
    node_cpu_us="$(echo "($(cpu_seconds "${NODE_PIDS[@]}") - $node_cpu_before) * 1000000 / $TOKENS" | bc -l | xargs printf '%.1f')"
    db_cpu_us="$(echo "($(postgres_cpu) - $db_cpu_before) * 1000000 / $TOKENS" | bc -l | xargs printf '%.1f')"
    [ "$(held_total shard_tokens)" -eq "$TOKENS" ] || perf_die "the nodes' shards did not fill from the change feed"

    # What the registry costs the database per token (the table with its indexes and TOAST).
    db_bytes="$(psql_run -d "$database" -c "SELECT pg_total_relation_size('tokens')")"
    psql_run -d "$database" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
    psql_run -d "$database" -c "SELECT pg_stat_statements_reset()" >/dev/null
    wal_before="$(psql_run -d "$database" -c 'SELECT pg_current_wal_lsn()')"
    node_cpu_before="$(cpu_seconds "${NODE_PIDS[@]}")"
    perf_log "$nodes node(s): one wave to $TOKENS tokens (published on node 1, followed on node $nodes)"
    wave="$(curl -fsS -H 'Content-Type: application/json' \
        --data "{\"event\":\"update\",\"timestamp\":$(date +%s),\"content_state\":{\"home\":1,\"away\":0}}" \
        "http://127.0.0.1:${ports[0]}/v1/channels/match/updates" | jq -r .wave_id)"
    last="${ports[$((nodes - 1))]}"
    for _ in $(seq 12000); do
        state="$(curl -fsS "http://127.0.0.1:$last/v1/waves/$wave" | jq -r .state)"
        [ "$state" = complete ] && break
        sleep 0.05
    done
    curl -fsS "http://127.0.0.1:$last/v1/waves/$wave" >"$run/wave.json"
    [ "$(jq -r .state "$run/wave.json")" = complete ] || perf_die "the wave did not complete in 10 minutes"
    wave_cpu_us="$(echo "($(cpu_seconds "${NODE_PIDS[@]}") - $node_cpu_before) * 1000000 / $TOKENS" | bc -l | xargs printf '%.2f')"
    wal_bytes="$(psql_run -d "$database" -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$wal_before')::bigint")"
    statements="$(psql_run -d "$database" -c "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '$database'")"
    psql_run -d "$database" -c "SELECT calls, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 100) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '$database' ORDER BY calls DESC LIMIT 15" >"$run/statements.txt"
    makespan="$(jq -r '.makespan_seconds' "$run/wave.json")"
    pushes_per_s="$(echo "$TOKENS / $makespan" | bc -l | xargs printf '%.0f')"
    # The largest node's resident memory after the wave: its shards' tokens, connections and wave state.
    rss_kb=0
    for pid in "${NODE_PIDS[@]}"; do
        kb="$(ps -o rss= -p "$pid" 2>/dev/null | tr -d ' ' || echo 0)"
        [ "${kb:-0}" -gt "$rss_kb" ] && rss_kb="$kb"
    done
    registration_rate="$(echo "$TOKENS / ($registered - $started)" | bc -l | xargs printf '%.0f')"
    feed_lag="$(echo "$fed - $registered" | bc -l | xargs printf '%.2f')"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$nodes" "$registration_rate" "$node_cpu_us" "$db_cpu_us" "$feed_lag" "$((db_bytes / TOKENS))" \
        "$makespan" "$pushes_per_s" "$wave_cpu_us" "$statements" "$wal_bytes" "$((rss_kb / 1024))" >>"$RESULTS"
    stop_nodes
done

echo
echo "several nodes: $TOKENS tokens, $SHARDS shards, simulator latency $LATENCY, $CONCURRENCY registration requests at once (raw: $OUT)"
echo "bulk import (fanfare import, COPY on 2 connections, no API): $IMPORT_RATE tokens/s; CPU per token: importer $IMPORT_US µs, PostgreSQL $IMPORT_DB_US µs"
column -t -s $'\t' "$RESULTS"

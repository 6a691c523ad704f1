#!/usr/bin/env bash
# The service's API (issue 9) against `fanfare serve --simulator` with a 0-latency simulator, measured from
# outside: registration through POST /v1/tokens in batches of 10,000 (wrk), publish -> first push at APNs
# (perf/api-first-push.py against the simulator's accepted-push log), and single pushes through POST /v1/push
# at a fixed rate (h2load --rps). The service (with its in-process simulator) is pinned to SIM_CPU, every load
# generator to CLIENT_CPU. Prints one table; raw output in perf/out/<timestamp>-api/.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf/api.sh [options]            (each option also reads from the environment variable shown)
  -b, --batches N      registration batches (10,000 fresh tokens each)   BATCHES (40)
  -T, --threads N      wrk threads = connections for registration       REG_CONNECTIONS (2)
  -a, --audience N     tokens of each first-push channel                AUDIENCE (1000)
  -C, --channels N     first-push channels (taken in turn)              CHANNELS (50)
  -w, --waves N        updates published for the first-push figures     WAVES (500)
  -r, --rate N         POST /v1/push requests per second                RATE (1000)
  -c, --clients N      h2load connections for POST /v1/push             PUSH_CLIENTS (10)
  -s, --seconds N      how long POST /v1/push runs                       PUSH_SECONDS (20)
      --out DIR        output directory                                 OUT (perf/out/<timestamp>-api)
      --no-build       use the existing release binary                  NO_BUILD=1
Also: FANFARE_BIN (use this binary, no build), SIM_CPU (1) and CLIENT_CPU (0), KEEP_LOG=1 (keep the
simulator's accepted-push log, ~190 MB with the defaults).
Needs wrk (apt-get install -y wrk), h2load (nghttp2-client), python3, curl, jq, taskset.
USAGE
}

# shellcheck source=perf/lib.sh source-path=SCRIPTDIR/..
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BATCHES="${BATCHES:-40}"
REG_CONNECTIONS="${REG_CONNECTIONS:-2}"
AUDIENCE="${AUDIENCE:-1000}"
CHANNELS="${CHANNELS:-50}"
WAVES="${WAVES:-500}"
RATE="${RATE:-1000}"
PUSH_CLIENTS="${PUSH_CLIENTS:-10}"
PUSH_SECONDS="${PUSH_SECONDS:-20}"
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)-api}"
while [ $# -gt 0 ]; do
    case "$1" in
        -b | --batches) BATCHES="$2"; shift 2 ;;
        -T | --threads) REG_CONNECTIONS="$2"; shift 2 ;;
        -a | --audience) AUDIENCE="$2"; shift 2 ;;
        -C | --channels) CHANNELS="$2"; shift 2 ;;
        -w | --waves) WAVES="$2"; shift 2 ;;
        -r | --rate) RATE="$2"; shift 2 ;;
        -c | --clients) PUSH_CLIENTS="$2"; shift 2 ;;
        -s | --seconds) PUSH_SECONDS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option $1" ;;
    esac
done

perf_require_tools
for tool in wrk python3 curl; do
    command -v "$tool" >/dev/null 2>&1 || perf_die "'$tool' is missing (apt-get install -y wrk python3 curl)"
done
[ $((BATCHES % REG_CONNECTIONS)) -eq 0 ] || perf_die "--batches ($BATCHES) must be a multiple of --threads ($REG_CONNECTIONS)"
[ $((RATE % PUSH_CLIENTS)) -eq 0 ] || perf_die "--rate ($RATE) must be a multiple of --clients ($PUSH_CLIENTS)"

perf_build
mkdir -p "$OUT"
perf_write_environment "$OUT/environment.txt"
echo "wrk: $(wrk -v 2>&1 | head -n1)" >>"$OUT/environment.txt"
perf_warn_if_busy

SERVE_PID=""
stop_service() {
    [ -n "$SERVE_PID" ] || return 0
    kill -TERM "$SERVE_PID" 2>/dev/null || true
    for _ in $(seq 300); do
        kill -0 "$SERVE_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$SERVE_PID" 2>/dev/null || true
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=""
}
trap 'stop_service; rm -f "$OUT"/registry.db*' EXIT

# start_service LOG [flags...]: the service and its in-process simulator (0 latency) on SIM_CPU, on the run's
# registry; sets SERVE_PID and BASE once /readyz answers 200.
start_service() {
    local log="$1"
    shift
    taskset -c "$SIM_CPU" "$FANFARE" serve --simulator --simulator-latency 0 --workers 1 --listen 127.0.0.1:0 \
        --database "$OUT/registry.db" --log-level warning "$@" >"$log" 2>&1 &
    SERVE_PID=$!
    BASE=""
    for _ in $(seq 1200); do
        BASE="$(grep -m1 -o 'listening on http://[0-9.:]*' "$log" 2>/dev/null | sed 's/listening on //' || true)"
        [ -n "$BASE" ] && curl -sf "$BASE/readyz" >/dev/null 2>&1 && return
        kill -0 "$SERVE_PID" 2>/dev/null || { cat "$log" >&2; perf_die "fanfare serve exited during start-up"; }
        sleep 0.1
    done
    perf_die "fanfare serve was not ready within 120 s (log: $log)"
}

start_service "$OUT/serve.log" --simulator-log "$OUT/accepted.jsonl"
perf_log "fanfare serve at $BASE (CPU $SIM_CPU); load from CPU $CLIENT_CPU"

# 1. Registration: BATCHES bodies of 10,000 fresh random tokens, REG_CONNECTIONS at a time. Each answer
#    means the batch is in SQLite (one transaction, synchronous=FULL) and loaded into the engine.
perf_log "registration: $BATCHES batches of 10,000 over $REG_CONNECTIONS connections (wrk)"
per_thread=$((BATCHES / REG_CONNECTIONS))
# wrk sleeps for all of -d even when every thread has stopped, so -d is only a bound: once the engine has every
# token (and wrk has read the last answers), SIGINT makes wrk print its results at once.
taskset -c "$CLIENT_CPU" wrk -t "$REG_CONNECTIONS" -c "$REG_CONNECTIONS" -d "$((BATCHES * 3 + 30))s" --timeout 60s \
    -s "$PERF_DIR/api-register.lua" "$BASE" -- 10000 "$per_thread" "$RANDOM" 100 >"$OUT/register.wrk.txt" 2>&1 &
wrk_pid=$!
while kill -0 "$wrk_pid" 2>/dev/null; do
    if [ "$(curl -sf "$BASE/readyz" | jq .tokens)" -ge $((BATCHES * 10000)) ] 2>/dev/null; then
        sleep 1
        kill -INT "$wrk_pid" 2>/dev/null || true
        break
    fi
    sleep 0.2
done
wait "$wrk_pid" || { cat "$OUT/register.wrk.txt" >&2; perf_die "wrk failed"; }
register="$(grep -m1 '^{"batches_ok"' "$OUT/register.wrk.txt")" || perf_die "no result line from wrk (see $OUT/register.wrk.txt)"
echo "$register" >"$OUT/register.json"
[ "$(jq .batches_bad <<<"$register")" = 0 ] || perf_die "registration answers other than 200: $(jq -r .first_bad <<<"$register")"
loaded="$(curl -sf "$BASE/readyz" | jq .tokens)"
[ "$loaded" = "$(jq .tokens <<<"$register")" ] ||
    perf_die "the engine has $loaded tokens after registering $(jq .tokens <<<"$register")"

# 2. Publish -> first push at APNs, one wave at a time, a channel again only after 1.1 s (the engine's
#    one-update-per-second-per-activity interval would otherwise be what is measured).
perf_log "publish -> first push: $WAVES updates, in turn to $CHANNELS channels of $AUDIENCE tokens"
taskset -c "$CLIENT_CPU" python3 "$PERF_DIR/api-first-push.py" "$BASE" "$OUT/accepted.jsonl" "$CHANNELS" \
    "$AUDIENCE" "$WAVES" "$OUT/first-push.json" >"$OUT/first-push.out" 2>&1 ||
    { cat "$OUT/first-push.out" >&2; perf_die "the first-push driver failed"; }

# 3. POST /v1/push at RATE requests/s: h2load over HTTP/1.1, PUSH_CLIENTS connections at RATE/PUSH_CLIENTS
#    each, one request in flight per connection; per-request latency from its log file.
perf_log "POST /v1/push: $RATE/s for $PUSH_SECONDS s over $PUSH_CLIENTS connections (h2load --rps)"
printf '{"token":"4%s","event":"update","content_state":{"home":1,"away":0}}' \
    "$(od -An -v -tx1 -N 40 /dev/urandom | tr -d ' \n' | cut -c2-)" >"$OUT/push.json"
taskset -c "$CLIENT_CPU" timeout --signal=TERM --kill-after=10 "$RUN_TIMEOUT" "$H2LOAD" --h1 -c "$PUSH_CLIENTS" \
    --rps "$((RATE / PUSH_CLIENTS))" -D "$PUSH_SECONDS" -d "$OUT/push.json" -H 'content-type: application/json' \
    --log-file="$OUT/push.h2load.log" "$BASE/v1/push" >"$OUT/push.h2load.txt" 2>&1 ||
    { cat "$OUT/push.h2load.txt" >&2; perf_die "h2load failed"; }
push_rate="$(awk '/^finished in/ { for (i = 1; i <= NF; i++) if ($(i + 1) ~ /^req\/s/) { print $i; exit } }' "$OUT/push.h2load.txt")"
push_total="$(awk '/^requests:/ { print $2; exit }' "$OUT/push.h2load.txt")"
push_2xx="$(awk '/^status codes:/ { print $3; exit }' "$OUT/push.h2load.txt")"
read -r push_p50 push_p99 < <(awk -F'\t' '{ print $3 }' "$OUT/push.h2load.log" | perf_percentiles /dev/stdin)
stop_service

# Durable means back after a restart: the same registry, loaded again.
perf_log "restarting the service on the same registry"
start_service "$OUT/serve-restart.log"
expected=$(($(jq .tokens <<<"$register") + CHANNELS * AUDIENCE))
reloaded="$(curl -sf "$BASE/readyz" | jq .tokens)"
stop_service
[ "$reloaded" = "$expected" ] || perf_die "after a restart the service loaded $reloaded tokens, not $expected"

logged="$(grep -c '"content-state":{"away":0,"home":1}' "$OUT/accepted.jsonl" || true)"
first="$(cat "$OUT/first-push.json")"
{
    printf '%-58s %-12s %-14s %s\n' "measurement" "target" "result" "detail"
    printf '%-58s %-12s %-14s %s\n' "registration, batches of 10,000, durable (tokens/s)" ">= 100,000" \
        "$(jq .tokens_per_second <<<"$register")" \
        "$(jq -r '"\(.tokens) tokens in \(.seconds|.*1000|round/1000) s, all back after a restart; per batch p50 \(.p50_ms) ms, p99 \(.p99_ms) ms"' <<<"$register")"
    printf '%-58s %-12s %-14s %s\n' "publish -> first push at APNs, p99 (ms, upper bound)" "<= 5" \
        "$(jq .http_to_first_push_ms.p99 <<<"$first")" \
        "$(jq -r '"p50 \(.http_to_first_push_ms.p50), max \(.http_to_first_push_ms.max); \(.waves) waves of \(.audience) over \(.channels) channels; log in whole ms, rounded up"' <<<"$first")"
    printf '%-58s %-12s %-14s %s\n' "publish -> first APNs answer (wave report), p99 (ms)" "<= 5" \
        "$(jq .first_ack_ms.p99 <<<"$first")" \
        "$(jq -r '"p50 \(.first_ack_ms.p50), max \(.first_ack_ms.max); 202 answered in p50 \(.publish_answer_ms.p50), p99 \(.publish_answer_ms.p99)"' <<<"$first")"
    printf '%-58s %-12s %-14s %s\n' "POST /v1/push at $RATE/s, p99 (ms)" "<= 10" "$push_p99" \
        "p50 $push_p50; achieved $push_rate req/s, $push_2xx of $push_total 2xx, $logged accepted by the simulator"
} | tee "$OUT/table.txt"
# The accepted-push log is ~190 MB with the defaults: kept only on request.
[ "${KEEP_LOG:-0}" = 1 ] || rm -f "$OUT/accepted.jsonl"
perf_log "raw output in $OUT"

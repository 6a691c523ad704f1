#!/usr/bin/env bash
# Server side by side: ONE h2load load against `fanfare simulate` and against nghttpd, each server pinned to
# the same core in turn, h2load to the other. Same connections, streams, body, headers, tokens and request
# count. Prints one table (server, requests/s, server CPU us per request, h2load CPU us per request) and the
# simulator/nghttpd ratio. nghttpd serves an empty file per token path and checks nothing; the simulator
# does everything APNs does (JWT check, cached per token string; path, headers and JSON body validation;
# the accepted-push bookkeeping). See perf/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: perf/compare-server.sh [options]   (each option also reads from the environment variable shown)
  -c, --connections N   h2load connections                          CONNECTIONS (4)
  -m, --streams N       streams in flight per connection            STREAMS (1000)
  -n, --requests N      requests per run                            REQUESTS (400000)
  -r, --repeats N       runs per server; the median run is reported REPEATS (3)
      --tokens N        distinct 80-byte device tokens              TOKENS (10000)
      --out DIR         output directory                            OUT (perf/out/<timestamp>-compare-server)
      --no-build        use the existing release binary             NO_BUILD=1
Also: FANFARE_BIN (use this binary, no build), SIM_CPU (1: both servers), CLIENT_CPU (0: h2load), H2LOAD,
NGHTTPD (/usr/sbin/nghttpd), RUN_TIMEOUT (600 s).
EOF
}

# shellcheck source=perf/lib.sh source-path=SCRIPTDIR/..
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNECTIONS="${CONNECTIONS:-4}"
STREAMS="${STREAMS:-1000}"
REQUESTS="${REQUESTS:-400000}"
REPEATS="${REPEATS:-3}"
TOKENS="${TOKENS:-10000}"
NGHTTPD="${NGHTTPD:-/usr/sbin/nghttpd}"
OUT="${OUT:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        -c|--connections) CONNECTIONS="$2"; shift 2 ;;
        -m|--streams) STREAMS="$2"; shift 2 ;;
        -n|--requests) REQUESTS="$2"; shift 2 ;;
        -r|--repeats) REPEATS="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option '$1'" ;;
    esac
done
for value in "$CONNECTIONS" "$STREAMS" "$REQUESTS" "$REPEATS" "$TOKENS"; do
    [[ "$value" =~ ^[1-9][0-9]*$ ]] || perf_die "connections, streams, requests, repeats and tokens must be positive integers"
done

perf_require_tools
[ -x "$NGHTTPD" ] || perf_die "nghttpd not found at $NGHTTPD (apt-get install -y nghttp2-server)"
command -v python3 >/dev/null 2>&1 || perf_die "python3 is missing (it picks nghttpd's free port)"
perf_build
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)-compare-server}"
mkdir -p "$OUT/runs"
NGHTTPD_PID=""
stop_nghttpd() {
    [ -n "$NGHTTPD_PID" ] || return 0
    kill -TERM "$NGHTTPD_PID" 2>/dev/null || true
    wait "$NGHTTPD_PID" 2>/dev/null || true
    NGHTTPD_PID=""
}
trap 'stop_nghttpd; perf_cleanup' EXIT
trap 'exit 130' INT TERM
STATE_DIR="$OUT/sim-state"

perf_write_environment "$OUT/environment.txt"
{
    echo "nghttpd: $("$NGHTTPD" --version 2>&1 | head -n1)"
    echo "connections: $CONNECTIONS  streams: $STREAMS  requests: $REQUESTS  tokens: $TOKENS  repeats: $REPEATS"
    echo "pinning: each server in turn on CPU $SIM_CPU, h2load on CPU $CLIENT_CPU"
} >>"$OUT/environment.txt"
perf_warn_if_busy
perf_log "writing into $OUT"

# The body: a 100-byte Live Activity update (padded in a content-state field to exactly 100 bytes).
head='{"aps":{"timestamp":1800000000,"event":"update","content-state":{"home":2,"away":1,"minute":"67'
tail='"}}}'
pad=$((100 - ${#head} - ${#tail}))
[ "$pad" -ge 0 ] || perf_die "the body template is over 100 bytes"
body="$head$(printf '%*s' "$pad" '' | tr ' ' 'x')$tail"
printf '%s' "$body" >"$OUT/body.json"
[ "$(wc -c <"$OUT/body.json")" -eq 100 ] || perf_die "body.json is not 100 bytes"
jq -e . "$OUT/body.json" >/dev/null || perf_die "body.json is not JSON"
perf_make_tokens "$TOKENS" "$OUT/tokens.txt"

# The simulator first: it also makes the certificate nghttpd serves and the provider key h2load's JWT comes from.
sim_flags=()
[ "$STREAMS" -gt 1000 ] && sim_flags=(--max-streams "$STREAMS")
# h2load opens every connection with -m streams before it reads the server's SETTINGS, so the simulator
# announces that many from the start (nghttpd does with -m).
perf_start_simulator "$STATE_DIR" "$OUT/simulator.log" 0 "$STREAMS" "${sim_flags[@]}"
perf_log "simulator pid $SIM_PID on 127.0.0.1:$SIM_PORT (CPU $SIM_CPU)"
sed "s|^|https://127.0.0.1:$SIM_PORT/3/device/|" "$OUT/tokens.txt" >"$OUT/simulator-uris.txt"

# nghttpd: an empty file per token path (a 200 with no body, as APNs answers), TLS with the simulator's
# certificate, one worker, the same stream limit.
htdocs="$OUT/htdocs"
mkdir -p "$htdocs/3/device"
(cd "$htdocs/3/device" && xargs touch <"$OUT/tokens.txt")
NGHTTPD_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
taskset -c "$SIM_CPU" "$NGHTTPD" -a 127.0.0.1 -n 1 -m "$STREAMS" -d "$htdocs" \
    "$NGHTTPD_PORT" "$STATE_DIR/server-key.pem" "$STATE_DIR/server.pem" >"$OUT/nghttpd.log" 2>&1 &
NGHTTPD_PID=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$NGHTTPD_PORT") 2>/dev/null && break
    kill -0 "$NGHTTPD_PID" 2>/dev/null || { cat "$OUT/nghttpd.log" >&2; perf_die "nghttpd exited during start-up"; }
    sleep 0.1
done
perf_log "nghttpd pid $NGHTTPD_PID on 127.0.0.1:$NGHTTPD_PORT (CPU $SIM_CPU)"
sed "s|^|https://127.0.0.1:$NGHTTPD_PORT/3/device/|" "$OUT/tokens.txt" >"$OUT/nghttpd-uris.txt"

# Each server is idle (a few ticks) while the other is measured: the idle one is stopped with SIGSTOP so the
# measured server has its core to itself.
runs="$OUT/runs.tsv"
printf 'repeat\tserver\t%s\tserver_cpu_us_per_request\n' "$PERF_RESULT_HEADER" >"$runs"
run_server() {  # run_server NAME PID URIS REPEAT
    local name="$1" pid="$2" uris="$3" r="$4" other before after line
    if [ "$name" = simulator ]; then other="$NGHTTPD_PID"; else other="$SIM_PID"; fi
    kill -STOP "$other"
    before="$(perf_process_ticks "$pid")"
    line="$(perf_run_h2load "h2load" "$OUT/runs" "$name-$r" "$CONNECTIONS" "$STREAMS" "$REQUESTS" "$OUT/body.json" "$uris")"
    after="$(perf_process_ticks "$pid")"
    kill -CONT "$other"
    kill -0 "$pid" 2>/dev/null || perf_die "$name died during run $r (see $OUT)"
    local server_cpu
    server_cpu="$(awk -v a="$before" -v b="$after" -v hz="$(getconf CLK_TCK)" -v n="$REQUESTS" 'BEGIN {
        if (a == "nan" || b == "nan") print "nan"; else printf "%.3f", (b - a) * 1e6 / hz / n }')"
    printf '%s\t%s\t%s\t%s\n' "$r" "$name" "$line" "$server_cpu" >>"$runs"
    echo "$line" | awk -F'\t' -v r="$r" -v s="$name" -v c="$server_cpu" '{
        printf "  run %s  %-10s %9.0f requests/s  server %s us/request  h2load %s us/request  2xx %s%%  exit %s\n", r, s, $3, c, $4, $7, $12 }' >&2
}

for r in $(seq "$REPEATS"); do
    # Alternate the order so neither server always runs first.
    if [ $((r % 2)) -eq 1 ]; then order=(simulator nghttpd); else order=(nghttpd simulator); fi
    perf_log "repeat $r/$REPEATS: ${order[*]}"
    for server in "${order[@]}"; do
        if [ "$server" = simulator ]; then
            run_server simulator "$SIM_PID" "$OUT/simulator-uris.txt" "$r"
        else
            run_server nghttpd "$NGHTTPD_PID" "$OUT/nghttpd-uris.txt" "$r"
        fi
    done
done

stop_nghttpd
perf_stop_simulator "$SIM_PID"

{
    echo "h2load -c $CONNECTIONS -m $STREAMS -n $REQUESTS -t 1, a $(wc -c <"$OUT/body.json")-byte body to $TOKENS 80-byte tokens"
    echo "each server pinned to CPU $SIM_CPU (the other one stopped meanwhile), h2load to CPU $CLIENT_CPU; median of $REPEATS runs (by requests/s)"
    echo
    # runs.tsv columns: repeat server tool pushes rate cpu p50 p99 ok fail wall user sys exit server_cpu
    tail -n +2 "$runs" | sort -t$'\t' -k2,2 -k5,5g | awk -F'\t' '
        { n[$2]++; rows[$2, n[$2]] = $0 }
        END {
            printf "%-10s %12s %26s %26s %8s\n", "server", "requests/s", "server CPU us/request", "h2load CPU us/request", "2xx %"
            for (s = 1; s <= 2; s++) {
                name = (s == 1) ? "simulator" : "nghttpd"
                if (!(name in n)) continue
                split(rows[name, int((n[name] + 1) / 2)], f, "\t")
                printf "%-10s %12.0f %26s %26s %8s\n", name, f[5], f[15], f[6], f[9]
                rate[name] = f[5]; cpu[name] = f[15]
            }
            print ""
            if (cpu["nghttpd"] + 0 > 0 && rate["nghttpd"] + 0 > 0)
                printf "simulator / nghttpd: server CPU per request x%.2f, requests/s x%.2f\n", cpu["simulator"] / cpu["nghttpd"], rate["simulator"] / rate["nghttpd"]
            print "server CPU us/request = the server process'"'"'s user + sys CPU over the run (from /proc/PID/stat) x 1e6 / requests"
            print "h2load CPU us/request = h2load'"'"'s user + sys CPU x 1e6 / requests"
        }'
    refused="$(sed -n 's/^streams refused: //p' "$OUT/simulator.log" | head -n1)"
    [ -n "$refused" ] && echo "simulator: streams refused: $refused"
    echo "raw outputs: $OUT"
} | tee "$OUT/table.txt"

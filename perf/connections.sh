#!/usr/bin/env bash
# The connection sweep: `fanfare load` and h2load at 1, 4, 16 and 64 connections x 1,000 streams against
# `fanfare simulate` (pinned to one core, each client to the other), a fresh simulator per tool and point so
# its summary counts exactly that run's refused streams. A client that keeps to the advertised stream limit
# must see none refused (the simulator's own injected refusals are off here). Writes connections.csv and
# connections.png. See perf/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: perf/connections.sh [options]    (each option also reads from the environment variable shown)
  -c, --connections "LIST"  connection counts                 CONNECTIONS_LIST ("1 4 16 64")
  -m, --streams N           streams per connection            STREAMS (1000)
  -l, --latency L           simulator latency                 LATENCY (20ms)
  -n, --pushes N            pushes per point, at least        PUSHES (200000); raised to
                            connections x streams x 5 so every point runs several rounds
      --tokens N            distinct 80-byte device tokens    TOKENS (10000)
      --out DIR             output directory                  OUT (perf/out/<timestamp>-connections)
      --no-build            use the existing release binary   NO_BUILD=1
Also: FANFARE_BIN, SIM_CPU (1), CLIENT_CPU (0), H2LOAD, RUN_TIMEOUT (600 s).
EOF
}

# shellcheck source=perf/lib.sh source-path=SCRIPTDIR/..
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNECTIONS_LIST="${CONNECTIONS_LIST:-1 4 16 64}"
STREAMS="${STREAMS:-1000}"
LATENCY="${LATENCY:-20ms}"
PUSHES="${PUSHES:-200000}"
TOKENS="${TOKENS:-10000}"
OUT="${OUT:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        -c|--connections) CONNECTIONS_LIST="$2"; shift 2 ;;
        -m|--streams) STREAMS="$2"; shift 2 ;;
        -l|--latency) LATENCY="$2"; shift 2 ;;
        -n|--pushes) PUSHES="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option '$1'" ;;
    esac
done
for value in $CONNECTIONS_LIST "$STREAMS" "$PUSHES" "$TOKENS"; do
    [[ "$value" =~ ^[1-9][0-9]*$ ]] || perf_die "connections, streams, pushes and tokens must be positive integers"
done

perf_require_tools
perf_build
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)-connections}"
mkdir -p "$OUT/runs"
trap perf_cleanup EXIT
trap 'exit 130' INT TERM
STATE_DIR="$OUT/sim-state"
started=$SECONDS

perf_write_environment "$OUT/environment.txt"
echo "connections: $CONNECTIONS_LIST  streams: $STREAMS  latency: $LATENCY  pushes: >= $PUSHES  tokens: $TOKENS" >>"$OUT/environment.txt"
perf_warn_if_busy
perf_log "writing into $OUT"

perf_capture_body "$OUT"
perf_make_tokens "$TOKENS" "$OUT/tokens.txt"

csv="$OUT/connections.csv"
echo "tool,connections,streams,latency,pushes,pushes_per_s,p50_ms,p99_ms,client_cpu_us_per_push,sim_cpu_us_per_push,ok_2xx_pct,failures,streams_refused,most_streams_at_once,wall_s" >"$csv"

# One run of TOOL at C connections against a fresh simulator; appends a CSV row.
run_point() {  # run_point TOOL C N
    local tool="$1" c="$2" n="$3" point="$1-c$2" line refused most
    local sim_flags=()
    [ "$STREAMS" -gt 1000 ] && sim_flags=(--max-streams "$STREAMS")
    # h2load opens every connection with -m streams before it reads SETTINGS: announce them from the start
    # for it. fanfare load gets APNs' own start (one stream until the first 200, then the limit).
    local initial=1
    [ "$tool" = h2load ] && initial="$STREAMS"
    perf_start_simulator "$STATE_DIR" "$OUT/simulator-$point.log" "$LATENCY" "$initial" "${sim_flags[@]}"
    if [ "$tool" = h2load ]; then
        sed "s|^|https://127.0.0.1:$SIM_PORT/3/device/|" "$OUT/tokens.txt" >"$OUT/h2load-uris.txt"
        line="$(perf_measured perf_run_h2load h2load "$OUT/runs" "$point" "$c" "$STREAMS" "$n" "$OUT/body.json" "$OUT/h2load-uris.txt")"
    else
        line="$(perf_measured perf_run_fanfare fanfare "$OUT/runs" "$point" "$c" "$STREAMS" "$n" "$TOKENS")"
    fi
    perf_stop_simulator "$SIM_PID"
    refused="$(awk -F': ' '/^streams refused/ { split($2, a, " "); print a[1] }' "$OUT/simulator-$point.log")"
    most="$(awk -F': ' '/^most streams at once/ { print $2 }' "$OUT/simulator-$point.log")"
    echo "$line" | awk -F'\t' -v OFS=, -v c="$c" -v m="$STREAMS" -v lat="$LATENCY" -v r="${refused:-nan}" -v most="${most:-nan}" '{
        print $1, c, m, lat, $2, $3, $5, $6, $4, $13, $7, $8, r, most, $9 }' >>"$csv"
    echo "$line" | awk -F'\t' -v p="$point" -v r="${refused:-?}" '{
        printf "  %-14s %9.0f pushes/s  p50 %s ms  p99 %s ms  client %s us/push  2xx %s%%  refused %s  exit %s\n", p, $3, $5, $6, $4, $7, r, $12 }' >&2
}

points=0
for c in $CONNECTIONS_LIST; do
    n="$PUSHES"
    [ $((c * STREAMS * 5)) -gt "$n" ] && n=$((c * STREAMS * 5))
    perf_log "c=$c x m=$STREAMS at $LATENCY: $n pushes per tool"
    run_point h2load "$c" "$n"
    run_point fanfare "$c" "$n"
    points=$((points + 1))
done

if perf_ensure_gnuplot "$OUT"; then
    awk -F, 'NR > 1 { rate[$2, $1] = $6; ref[$2, $1] = $13; if (!($2 in seen)) { seen[$2] = 1; order[++k] = $2 } }
        END {
            print "connections fanfare_rate h2load_rate fanfare_refused h2load_refused"
            for (i = 1; i <= k; i++) { c = order[i]; print c, rate[c, "fanfare"], rate[c, "h2load"], ref[c, "fanfare"], ref[c, "h2load"] }
        }' "$csv" >"$OUT/connections-plot.dat"
    cat >"$OUT/connections.gnuplot" <<EOF
set terminal pngcairo size 1100,800 font "sans,10"
set output "$OUT/connections.png"
set datafile missing "nan"
set key autotitle columnhead above horizontal
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set grid ytics
set multiplot layout 2,1 title "connections x $STREAMS streams, simulator latency $LATENCY (simulator on CPU $SIM_CPU, client on CPU $CLIENT_CPU)"
set title "throughput"
set ylabel "pushes/s"
set yrange [0:*]
plot "$OUT/connections-plot.dat" using 2:xtic(1) title "fanfare load" lc rgb "#d95f02", "" using 3 title "h2load" lc rgb "#1b9e77"
set title "streams the simulator refused (a client within the advertised limit should see 0)"
set ylabel "refused"
plot "$OUT/connections-plot.dat" using 4:xtic(1) title "fanfare load" lc rgb "#d95f02", "" using 5 title "h2load" lc rgb "#1b9e77"
unset multiplot
EOF
    gnuplot "$OUT/connections.gnuplot" 2>"$OUT/gnuplot.err" || perf_log "gnuplot failed: see $OUT/gnuplot.err"
fi

column -s, -t <"$csv" | tee "$OUT/connections.txt"
echo "$points points in $((SECONDS - started)) s; raw outputs: $OUT"
[ -f "$OUT/connections.png" ] && echo "plot: $OUT/connections.png"

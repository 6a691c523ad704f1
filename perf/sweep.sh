#!/usr/bin/env bash
# Sweeps connections x streams x simulator latency with `fanfare load` and h2load against `fanfare simulate`
# (simulator pinned to one core, clients to the other), and writes sweep.csv and sweep.png. See perf/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: perf/sweep.sh [options]          (each option also reads from the environment variable shown)
  -c, --connections "LIST"  connections per client          CONNECTIONS_LIST ("1 4 8")
  -m, --streams "LIST"      streams per connection          STREAMS_LIST ("100 1000")
  -l, --latency "LIST"      simulator latencies             LATENCY_LIST ("0 20ms")
  -n, --pushes N            pushes per point, at most       SWEEP_PUSHES (50000)
      --rounds N            with a latency, pushes per point are at most
                            connections x streams x N (keeps slow points short)   ROUNDS (100)
      --tokens N            distinct device tokens          TOKENS (10000)
      --out DIR             output directory                OUT (perf/out/<timestamp>-sweep)
      --no-build            use the existing release binary NO_BUILD=1
Also: FANFARE_BIN, SIM_CPU (1), CLIENT_CPU (0), H2LOAD, RUN_TIMEOUT (600 s). gnuplot is installed with
apt-get when missing and running as root; without it the CSV is still written.
EOF
}

# shellcheck source=perf/lib.sh source-path=SCRIPTDIR/..
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNECTIONS_LIST="${CONNECTIONS_LIST:-1 4 8}"
STREAMS_LIST="${STREAMS_LIST:-100 1000}"
LATENCY_LIST="${LATENCY_LIST:-0 20ms}"
SWEEP_PUSHES="${SWEEP_PUSHES:-50000}"
ROUNDS="${ROUNDS:-100}"
TOKENS="${TOKENS:-10000}"
OUT="${OUT:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        -c|--connections) CONNECTIONS_LIST="$2"; shift 2 ;;
        -m|--streams) STREAMS_LIST="$2"; shift 2 ;;
        -l|--latency) LATENCY_LIST="$2"; shift 2 ;;
        -n|--pushes) SWEEP_PUSHES="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option '$1'" ;;
    esac
done
for value in $CONNECTIONS_LIST $STREAMS_LIST "$SWEEP_PUSHES" "$ROUNDS" "$TOKENS"; do
    [[ "$value" =~ ^[1-9][0-9]*$ ]] || perf_die "connections, streams, pushes, rounds and tokens must be positive integers"
done

perf_require_tools
perf_build
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)-sweep}"
mkdir -p "$OUT/runs"
trap perf_cleanup EXIT
trap 'exit 130' INT TERM
STATE_DIR="$OUT/sim-state"
started=$SECONDS

perf_write_environment "$OUT/environment.txt"
{
    echo "connections: $CONNECTIONS_LIST  streams: $STREAMS_LIST  latency: $LATENCY_LIST"
    echo "pushes per point: at most $SWEEP_PUSHES; with a latency at most connections x streams x $ROUNDS"
} >>"$OUT/environment.txt"
perf_warn_if_busy
perf_log "writing into $OUT"
have_gnuplot=1
perf_ensure_gnuplot "$OUT" || have_gnuplot=0

perf_capture_body "$OUT"
perf_make_tokens "$TOKENS" "$OUT/tokens.txt"

runs="$OUT/runs.tsv"
printf 'kind\tconnections\tstreams\tlatency\t%s\n' "$PERF_RESULT_HEADER" >"$runs"
csv="$OUT/sweep.csv"
echo "tool,connections,streams,latency,pushes,pushes_per_s,p50_ms,p99_ms,cpu_us_per_push,cpu_us_per_push_net,startup_cpu_s,ok_2xx_pct,failures,sim_cpu_us_per_push,wall_s,loadavg_1m" >"$csv"

# One CSV row from a measured run and a start-up run (one push per connection) of the same tool and point.
# cpu_us_per_push_net leaves the start-up cost out: small points (few pushes) would otherwise be dominated
# by process start and TLS handshakes. For h2load the latency percentiles come from a separate --log-file run.
csv_row() {  # csv_row MEASURED STARTUP C M LATENCY [LATENCY_RUN]
    local percentiles="${6:-$1}"
    awk -F'\t' -v OFS=, -v c="$3" -v m="$4" -v lat="$5" '
        FILENAME == ARGV[1] { tool = $1; n = $2; rate = $3; cpu = $4; ok = $7; fail = $8; wall = $9; user = $10; sys = $11; sim = $13; load = $14 }
        FILENAME == ARGV[2] { sn = $2; scpu = $10 + $11; sbad = ($10 == "nan") }
        FILENAME == ARGV[3] { p50 = $5; p99 = $6 }
        END {
            net = (user == "nan" || sbad || n <= sn) ? "nan" : sprintf("%.3f", ((user + sys) - scpu) * 1e6 / (n - sn))
            print tool, c, m, lat, n, (rate == "nan" ? rate : sprintf("%.1f", rate)), p50, p99, cpu, net, (sbad ? "nan" : sprintf("%.2f", scpu)), ok, fail, sim, wall, load
        }' <(echo "$1") <(echo "$2") <(echo "$percentiles") >>"$csv"
}

record() {  # record KIND C M LATENCY LINE
    printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$runs"
    echo "$5" | awk -F'\t' -v k="$1" '{ printf "    %-16s %-8s %8.0f pushes/s  %7s us/push  p50 %s ms  p99 %s ms  2xx %s%%  exit %s\n", k, $1, $3, $4, $5, $6, $7, $12 }' >&2
}

points=0
for latency in $LATENCY_LIST; do
    for m in $STREAMS_LIST; do
        # h2load opens its connections with -m streams before reading SETTINGS: announce m from the start.
        sim_flags=()
        [ "$m" -gt 1000 ] && sim_flags=(--max-streams "$m")
        perf_start_simulator "$STATE_DIR" "$OUT/simulator-$latency-m$m.log" "$latency" "$m" "${sim_flags[@]}"
        sed "s|^|https://127.0.0.1:$SIM_PORT/3/device/|" "$OUT/tokens.txt" >"$OUT/h2load-uris.txt"
        for c in $CONNECTIONS_LIST; do
            n="$SWEEP_PUSHES"
            if [ "$latency" != 0 ] && [ $((c * m * ROUNDS)) -lt "$n" ]; then n=$((c * m * ROUNDS)); fi
            point="c$c-m$m-$latency"
            perf_log "point $point: $n pushes (simulator 127.0.0.1:$SIM_PORT)"
            args=("$c" "$m")

            h2="$(perf_measured perf_run_h2load h2load "$OUT/runs" "h2load-$point" "${args[@]}" "$n" "$OUT/body.json" "$OUT/h2load-uris.txt")"
            record measured "$c" "$m" "$latency" "$h2"
            h2lat="$(perf_measured perf_run_h2load "h2load --log-file" "$OUT/runs" "h2load-latency-$point" "${args[@]}" "$n" \
                "$OUT/body.json" "$OUT/h2load-uris.txt" "$OUT/runs/h2load-latency-$point.log")"
            record latency "$c" "$m" "$latency" "$h2lat"
            h2start="$(perf_measured perf_run_h2load h2load "$OUT/runs" "h2load-startup-$point" "${args[@]}" "$c" "$OUT/body.json" "$OUT/h2load-uris.txt")"
            record startup "$c" "$m" "$latency" "$h2start"
            csv_row "$h2" "$h2start" "$c" "$m" "$latency" "$h2lat"

            ff="$(perf_measured perf_run_fanfare fanfare "$OUT/runs" "fanfare-$point" "${args[@]}" "$n" "$TOKENS")"
            record measured "$c" "$m" "$latency" "$ff"
            ffstart="$(perf_measured perf_run_fanfare fanfare "$OUT/runs" "fanfare-startup-$point" "${args[@]}" "$c" "$TOKENS")"
            record startup "$c" "$m" "$latency" "$ffstart"
            csv_row "$ff" "$ffstart" "$c" "$m" "$latency"

            kill -0 "$SIM_PID" 2>/dev/null || perf_die "the simulator died (log: $OUT/simulator-$latency-m$m.log)"
            points=$((points + 1))
        done
        perf_stop_simulator "$SIM_PID"
    done
done

# Plot: one cluster per point, fanfare next to h2load; pushes/s, p99 (log scale) and net CPU per push.
plotdata="$OUT/sweep-plot.dat"
awk -F, 'NR > 1 {
        key = "c" $2 " m" $3 " " ($4 == "0" ? "0ms" : $4)
        if (!(key in seen)) { seen[key] = 1; order[++k] = key }
        rate[key, $1] = $6; p99[key, $1] = $8; cpu[key, $1] = $10
    }
    END {
        print "point fanfare_rate h2load_rate fanfare_p99 h2load_p99 fanfare_cpu h2load_cpu"
        for (i = 1; i <= k; i++) {
            p = order[i]
            printf "\"%s\" %s %s %s %s %s %s\n", p, rate[p, "fanfare"], rate[p, "h2load"], p99[p, "fanfare"], p99[p, "h2load"], cpu[p, "fanfare"], cpu[p, "h2load"]
        }
    }' "$csv" >"$plotdata"

if [ "$have_gnuplot" = 1 ]; then
    cat >"$OUT/sweep.gnuplot" <<EOF
set terminal pngcairo size 1400,1200 font "sans,10"
set output "$OUT/sweep.png"
set datafile missing "nan"
set key autotitle columnhead above horizontal
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set xtics rotate by -25 nomirror
set lmargin 12
set rmargin 8
set xrange [-0.6:$points - 0.4]
set multiplot layout 3,1 title "fanfare load vs h2load on fanfare simulate (simulator on CPU $SIM_CPU, client on CPU $CLIENT_CPU; $(cut -d' ' -f1 /proc/loadavg) load avg at end)"
set title "throughput"
set ylabel "pushes/s"
set yrange [0:*]
plot "$plotdata" using 2:xtic(1) title "fanfare load" lc rgb "#d95f02", "" using 3 title "h2load" lc rgb "#1b9e77"
set title "p99 latency (log scale)"
set ylabel "p99 ms"
set logscale y
set yrange [*:*]
plot "$plotdata" using 4:xtic(1) title "fanfare load" lc rgb "#d95f02", "" using 5 title "h2load (--log-file run)" lc rgb "#1b9e77"
unset logscale y
set title "client CPU per push, start-up cost left out"
set ylabel "CPU us/push"
set yrange [0:*]
plot "$plotdata" using 6:xtic(1) title "fanfare load" lc rgb "#d95f02", "" using 7 title "h2load" lc rgb "#1b9e77"
unset multiplot
EOF
    gnuplot "$OUT/sweep.gnuplot" 2>"$OUT/gnuplot.err" || perf_log "gnuplot failed: see $OUT/gnuplot.err"
fi

column -s, -t <"$csv" | tee "$OUT/sweep.txt"
echo "$points points in $((SECONDS - started)) s; raw outputs: $OUT"
[ -f "$OUT/sweep.png" ] && echo "plot: $OUT/sweep.png"
exit 0

#!/usr/bin/env bash
# Side by side: h2load and `fanfare load` against ONE `fanfare simulate`, same connections, streams, body,
# tokens and push count. The simulator is pinned to one core, each client (run one after the other) to the
# other, and each client's CPU time (user + sys) is divided by its push count. See perf/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: perf/compare.sh [options]        (each option also reads from the environment variable shown)
  -c, --connections N   connections per client                     CONNECTIONS (4)
  -m, --streams N       streams in flight per connection           STREAMS (1000)
  -n, --pushes N        pushes per run                             PUSHES (400000)
  -l, --latency L       simulator latency: 0, 20ms, uniform:a-b,   LATENCY (0)
                        longtail:median,p99
  -r, --repeats N       runs per tool; the median run is reported  REPEATS (3)
      --tokens N        distinct device tokens (both tools)        TOKENS (10000)
      --ring-setups S   fanfare rows, one per FANFARE_RING_SETUP   RING_SETUPS (default)
                        value, e.g. "plain cooperative defer"; "default" leaves it unset
      --out DIR         output directory                           OUT (perf/out/<timestamp>)
      --no-build        use the existing release binary            NO_BUILD=1
Also: FANFARE_BIN (use this binary, no build), SIM_CPU (1), CLIENT_CPU (0), H2LOAD, RUN_TIMEOUT (600 s).
EOF
}

# shellcheck source=perf/lib.sh source-path=SCRIPTDIR/..
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNECTIONS="${CONNECTIONS:-4}"
STREAMS="${STREAMS:-1000}"
PUSHES="${PUSHES:-400000}"
LATENCY="${LATENCY:-0}"
REPEATS="${REPEATS:-3}"
TOKENS="${TOKENS:-10000}"
RING_SETUPS="${RING_SETUPS:-default}"
OUT="${OUT:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        -c|--connections) CONNECTIONS="$2"; shift 2 ;;
        -m|--streams) STREAMS="$2"; shift 2 ;;
        -n|--pushes) PUSHES="$2"; shift 2 ;;
        -l|--latency) LATENCY="$2"; shift 2 ;;
        -r|--repeats) REPEATS="$2"; shift 2 ;;
        --tokens) TOKENS="$2"; shift 2 ;;
        --ring-setups) RING_SETUPS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option '$1'" ;;
    esac
done
for value in "$CONNECTIONS" "$STREAMS" "$PUSHES" "$REPEATS" "$TOKENS"; do
    [[ "$value" =~ ^[1-9][0-9]*$ ]] || perf_die "connections, streams, pushes, repeats and tokens must be positive integers"
done

perf_require_tools
perf_build
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)-compare}"
mkdir -p "$OUT/runs"
trap perf_cleanup EXIT
trap 'exit 130' INT TERM
STATE_DIR="$OUT/sim-state"

perf_write_environment "$OUT/environment.txt"
{
    echo "connections: $CONNECTIONS  streams: $STREAMS  pushes: $PUSHES  tokens: $TOKENS  latency: $LATENCY  repeats: $REPEATS"
    echo "ring setups: $RING_SETUPS"
} >>"$OUT/environment.txt"
perf_warn_if_busy
perf_log "writing into $OUT"

perf_capture_body "$OUT"
body_bytes="$BODY_BYTES"
perf_make_tokens "$TOKENS" "$OUT/tokens.txt"

# h2load opens every connection with -m streams before it reads the server's SETTINGS, so the simulator
# announces that many from the start (for both tools, to keep them on equal terms).
sim_flags=()
[ "$STREAMS" -gt 1000 ] && sim_flags=(--max-streams "$STREAMS")
perf_start_simulator "$STATE_DIR" "$OUT/simulator.log" "$LATENCY" "$STREAMS" "${sim_flags[@]}"
perf_log "simulator pid $SIM_PID on 127.0.0.1:$SIM_PORT (CPU $SIM_CPU), latency $LATENCY, body $body_bytes bytes"
sed "s|^|https://127.0.0.1:$SIM_PORT/3/device/|" "$OUT/tokens.txt" >"$OUT/h2load-uris.txt"

runs="$OUT/runs.tsv"
printf 'repeat\t%s\n' "$PERF_RESULT_HEADER" >"$runs"

check_simulator() {
    kill -0 "$SIM_PID" 2>/dev/null || { tail -n 30 "$OUT/simulator.log" >&2; perf_die "the simulator died (log: $OUT/simulator.log)"; }
}

run_tool() {  # run_tool TOOL REPEAT
    local tool="$1" r="$2" line
    case "$tool" in
        h2load)
            line="$(perf_measured perf_run_h2load h2load "$OUT/runs" "h2load-$r" "$CONNECTIONS" "$STREAMS" "$PUSHES" \
                "$OUT/body.json" "$OUT/h2load-uris.txt")" ;;
        fanfare:*)
            local ring="${tool#fanfare:}" name="fanfare"
            [ "$ring" = default ] || name="fanfare[$ring]"
            line="$(perf_measured perf_run_fanfare "$name" "$OUT/runs" "fanfare-$ring-$r" "$CONNECTIONS" "$STREAMS" "$PUSHES" \
                "$TOKENS" "$ring")" ;;
    esac
    printf '%s\t%s\n' "$r" "$line" >>"$runs"
    echo "$line" | awk -F'\t' -v r="$r" '{ printf "  run %s  %-18s %8.0f pushes/s  %6s us/push (simulator %s)  p50 %s ms  p99 %s ms  2xx %s%%  exit %s  load %s\n", r, $1, $3, $4, $13, $5, $6, $7, $12, $14 }' >&2
    check_simulator
}

tools=(h2load)
for ring in $RING_SETUPS; do tools+=("fanfare:$ring"); done
for r in $(seq "$REPEATS"); do
    # Alternate the order so that neither tool always runs first on a freshly warmed simulator.
    order=("${tools[@]}")
    if [ $((r % 2)) -eq 0 ]; then
        order=()
        for ((i = ${#tools[@]} - 1; i >= 0; i--)); do order+=("${tools[$i]}"); done
    fi
    perf_log "repeat $r/$REPEATS: ${order[*]}"
    for tool in "${order[@]}"; do run_tool "$tool" "$r"; done
done

# h2load prints only min/mean/max latency; one more run with --log-file gives its p50/p99. That run is
# kept out of h2load's CPU and rate numbers because the log costs it one write(2) per request.
perf_log "h2load --log-file run (for h2load's p50/p99)"
line="$(perf_measured perf_run_h2load "h2load --log-file" "$OUT/runs" "h2load-latency" "$CONNECTIONS" "$STREAMS" "$PUSHES" \
    "$OUT/body.json" "$OUT/h2load-uris.txt" "$OUT/runs/h2load-latency.log")"
printf 'latency\t%s\n' "$line" >>"$runs"
check_simulator

# What each client spends before and after its pushes (process start, TLS handshakes, tokens, shut-down):
# one push per connection. It is part of the per-push CPU above, spread over --pushes.
perf_log "start-up cost runs (one push per connection)"
line="$(perf_run_h2load "h2load" "$OUT/runs" "h2load-startup" "$CONNECTIONS" "$STREAMS" "$CONNECTIONS" \
    "$OUT/body.json" "$OUT/h2load-uris.txt")"
printf 'startup\t%s\n' "$(perf_add_simulator_cpu "$line" nan nan)" >>"$runs"
for ring in $RING_SETUPS; do
    name="fanfare"
    [ "$ring" = default ] || name="fanfare[$ring]"
    line="$(perf_run_fanfare "$name" "$OUT/runs" "fanfare-$ring-startup" "$CONNECTIONS" "$STREAMS" "$CONNECTIONS" \
        "$TOKENS" "$ring")"
    printf 'startup\t%s\n' "$(perf_add_simulator_cpu "$line" nan nan)" >>"$runs"
done
check_simulator

perf_stop_simulator "$SIM_PID"

# The median run per tool (by pushes/s), then the table and the ratios.
{
    echo "connections $CONNECTIONS x streams $STREAMS, $PUSHES pushes of $body_bytes bytes to $TOKENS tokens, simulator latency $LATENCY"
    echo "simulator pinned to CPU $SIM_CPU, clients to CPU $CLIENT_CPU; median of $REPEATS runs per tool (by pushes/s)"
    echo
    tail -n +2 "$runs" | sort -t$'\t' -k2,2 -k4,4g | awk -F'\t' -v pushes="$PUSHES" '
        function row(tool, rate, cpu, p50, p99, ok, fail, sim) {
            printf "%-20s %10s %19s %9s %9s %8s %9s %16s\n", tool, rate, cpu, p50, p99, ok, fail, sim
        }
        function fmt(v, f) { return (v == "nan" || v == "") ? "n/a" : sprintf(f, v) }
        $1 == "startup" { startup[$2] = $11 + $12; next }
        { n[$2]++; rows[$2, n[$2]] = $0 }
        $1 == "latency" { lp50 = $6; lp99 = $7 }
        END {
            # h2load first, then the fanfare rows, then the latency-only h2load run.
            if ("h2load" in n) order[++tools] = "h2load"
            for (key in n) if (key ~ /^fanfare/) fanfares[++nf] = key
            for (i = 1; i <= nf; i++) for (j = i + 1; j <= nf; j++) if (fanfares[j] < fanfares[i]) { x = fanfares[i]; fanfares[i] = fanfares[j]; fanfares[j] = x }
            for (i = 1; i <= nf; i++) order[++tools] = fanfares[i]
            if ("h2load --log-file" in n) order[++tools] = "h2load --log-file"
            row("tool", "pushes/s", "client CPU us/push", "p50 ms", "p99 ms", "2xx %", "failures", "sim CPU us/push")
            for (t = 1; t <= tools; t++) {
                tool = order[t]
                split(rows[tool, int((n[tool] + 1) / 2)], f, "\t")
                p50 = f[6]; p99 = f[7]
                if (tool == "h2load") { p50 = lp50; p99 = lp99; tool = "h2load (1)" }
                row(tool, fmt(f[4], "%.0f"), fmt(f[5], "%.2f"), fmt(p50, "%.2f"), fmt(p99, "%.2f"), fmt(f[8], "%.2f"), f[9], fmt(f[14], "%.2f"))
                if (f[2] == "fanfare" || f[2] ~ /^fanfare\[/) { frate[f[2]] = f[4]; fcpu[f[2]] = f[5] }
                if (f[2] == "h2load") { hrate = f[4]; hcpu = f[5] }
            }
            print ""
            for (t = 1; t <= tools; t++) {
                name = order[t]
                if ((name in frate) && hcpu + 0 > 0 && hrate + 0 > 0)
                    printf "%s / h2load: CPU per push x%.2f, pushes/s x%.2f\n", name, fcpu[name] / hcpu, frate[name] / hrate
            }
            print ""
            printf "start-up CPU (one push per connection, included above):"
            for (t = 1; t <= tools; t++) if (order[t] in startup)
                printf "  %s %.2f s (%.2f us/push over %d)", order[t], startup[order[t]], startup[order[t]] * 1e6 / pushes, pushes
            print ""
            print "(1) h2load prints no percentiles: its p50/p99 come from the extra \"h2load --log-file\" run;"
            print "    its other numbers from runs without the log (which costs h2load one write(2) per request)."
            print "client CPU us/push = (user + sys CPU seconds of the whole client process) x 1e6 / pushes;"
            print "sim CPU us/push = the simulator process'"'"'s CPU over the same run / pushes (near 1e6 / pushes/s: simulator-bound)"
        }'
    refused="$(sed -n 's/^streams refused: //p' "$OUT/simulator.log" | head -n1)"
    [ -n "$refused" ] && echo "simulator: streams refused: $refused"
    echo "raw outputs: $OUT"
} | tee "$OUT/table.txt"

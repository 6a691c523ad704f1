#!/usr/bin/env bash
# The fan-out target (issue 4): one update to a 1,000,000-token channel, through the engine and the built-in
# simulator with 20 ms latency, every token accounted for. The demo pins the simulator's thread to the last
# CPU and the engine's workers to the others. Prints registration rate, load time, shard memory per token,
# and the wave's makespan and pushes/s. Durable waves (issue 11): by default the wave runs with progress
# checkpoints on and off, alternating, and the script prints both makespans and the difference (target
# <= 2 %); raw output in perf/out/<timestamp>/fanout-<on|off>-<repeat>.txt.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf/fanout.sh [options]         (each option also reads from the environment variable shown)
  -t, --tokens N       tokens in the channel               TOKENS (1000000)
  -l, --latency L      simulator latency                   LATENCY (20ms)
  -w, --workers N      engine worker threads (shards)      WORKERS (1)
  -c, --connections N  connections per worker, or auto:    CONNECTIONS (auto)
                       the autoscaler picks (default)
  -m, --streams N      streams per connection              STREAMS (1000)
      --checkpoints M  both, on or off: runs with wave      CHECKPOINTS (both)
                       progress checkpoints on and/or off
  -r, --repeats N      runs per checkpoint mode            REPEATS (1)
                       (with both: on, off, off, on, ...)
      --out DIR        output directory                    OUT (perf/out/<timestamp>)
      --no-build       use the existing release binary     NO_BUILD=1
Also: FANFARE_BIN (use this binary, no build).
USAGE
}

# shellcheck source=perf/lib.sh source-path=SCRIPTDIR/..
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TOKENS="${TOKENS:-1000000}"
LATENCY="${LATENCY:-20ms}"
WORKERS="${WORKERS:-1}"
CONNECTIONS="${CONNECTIONS:-auto}"
STREAMS="${STREAMS:-1000}"
CHECKPOINTS="${CHECKPOINTS:-both}"
REPEATS="${REPEATS:-1}"
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)}"
while [ $# -gt 0 ]; do
    case "$1" in
        -t | --tokens) TOKENS="$2"; shift 2 ;;
        -l | --latency) LATENCY="$2"; shift 2 ;;
        -w | --workers) WORKERS="$2"; shift 2 ;;
        -c | --connections) CONNECTIONS="$2"; shift 2 ;;
        -m | --streams) STREAMS="$2"; shift 2 ;;
        --checkpoints) CHECKPOINTS="$2"; shift 2 ;;
        -r | --repeats) REPEATS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option $1" ;;
    esac
done

case "$CHECKPOINTS" in
    both | on | off) ;;
    *) perf_die "--checkpoints takes both, on or off, not '$CHECKPOINTS'" ;;
esac
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || perf_die "--repeats takes a positive integer, not '$REPEATS'"

perf_build
mkdir -p "$OUT"
perf_log "one wave to $TOKENS tokens, latency $LATENCY, $WORKERS worker(s) x $CONNECTIONS connections x $STREAMS streams, checkpoints $CHECKPOINTS, $REPEATS repeat(s)"

# "2.85 s" or "850 ms" (the demo's makespan cell) -> milliseconds.
to_ms() { awk -v value="$1" -v unit="$2" 'BEGIN { printf "%.1f", unit == "s" ? value * 1000 : value }'; }

# run_demo MODE REPEAT: one demo run; appends "MODE makespan_ms" to $OUT/makespans.tsv.
run_demo() {
    local mode="$1" repeat="$2" text="$OUT/fanout-$1-$2.txt" flags=()
    [ "$mode" = off ] && flags=(--no-checkpoints)
    [ "$CONNECTIONS" = auto ] || flags+=(--connections "$CONNECTIONS")
    perf_log "run $repeat, checkpoints $mode"
    /usr/bin/time -f "process: %U s user, %S s sys, %e s wall, %M KiB max RSS" \
        "$FANFARE" demo --scenario wave --tokens "$TOKENS" --latency "$LATENCY" --workers "$WORKERS" \
        --streams "$STREAMS" --database "$OUT/fanout.db" ${flags[@]+"${flags[@]}"} \
        >"$text" 2>&1 || { tail -20 "$text" >&2; perf_die "the demo failed (see $text)"; }
    rm -f "$OUT"/fanout.db*
    echo "--- checkpoints $mode, run $repeat"
    grep -E "^registered|^engine|^durable|^connections|^process" "$text"
    local row
    row="$(grep -E "^ +1  final" "$text")"
    # The row's last cell is the broadcast part ("-": this wave has none); makespan and pushes/s come before it.
    echo "$row" | awk '{ printf "wave: targeted %s, delivered %s, makespan %s %s, %s pushes/s\n", $5, $6, $(NF-3), $(NF-2), $(NF-1) }'
    grep -E "every targeted token accounted" "$text"
    grep -q "every targeted token accounted for in every wave: yes" "$text" || perf_die "the wave was not fully accounted for (see $text)"
    printf '%s\t%s\n' "$mode" "$(to_ms "$(echo "$row" | awk '{ print $(NF-3) }')" "$(echo "$row" | awk '{ print $(NF-2) }')")" \
        >>"$OUT/makespans.tsv"
}

: >"$OUT/makespans.tsv"
for repeat in $(seq 1 "$REPEATS"); do
    case "$CHECKPOINTS" in
        both)
            # Alternating (on off, off on, ...) so a drift in the machine's load hits both modes alike.
            if [ $((repeat % 2)) = 1 ]; then run_demo on "$repeat"; run_demo off "$repeat"
            else run_demo off "$repeat"; run_demo on "$repeat"; fi ;;
        *) run_demo "$CHECKPOINTS" "$repeat" ;;
    esac
done

echo ""
# Per mode: median and mean of the makespans; the overhead from the medians (one slow run moves a mean a lot on
# a shared machine) and from the means.
summary() {
    local mode="$1"
    awk -F '\t' -v mode="$mode" '$1 == mode { print $2 }' "$OUT/makespans.tsv" | sort -n |
        awk '{ v[NR] = $1; sum += $1; all = all " " $1 }
            END { if (NR == 0) exit; median = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                  printf "%.1f %.1f %d%s\n", median, sum / NR, NR, all }'
}
for mode in on off; do
    line="$(summary "$mode")"
    [ -n "$line" ] || continue
    read -r median mean count runs <<<"$line"
    printf 'checkpoints %-3s makespan median %s ms, mean %s ms over %s run(s): %s\n' "$mode" "$median" "$mean" "$count" "$runs"
    eval "median_$mode=$median mean_$mode=$mean"
done
if [ -n "${median_on:-}" ] && [ -n "${median_off:-}" ]; then
    awk -v on="$median_on" -v off="$median_off" -v mon="$mean_on" -v moff="$mean_off" 'BEGIN {
        printf "checkpoint overhead: %+.2f %% of the makespan by median, %+.2f %% by mean (on vs off; target <= 2 %%)\n",
            (on - off) / off * 100, (mon - moff) / moff * 100 }'
fi
echo "target: makespan <= 3 s for 1,000,000 tokens at 20 ms latency (issue 4)"

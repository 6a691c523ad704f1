#!/usr/bin/env bash
# The fan-out target (issue 4): one update to a 1,000,000-token channel, through the engine and the built-in
# simulator with 20 ms latency, every token accounted for. The demo pins the simulator's thread to the last
# CPU and the engine's workers to the others. Prints registration rate, load time, shard memory per token,
# and the wave's makespan and pushes/s; raw output in perf/out/<timestamp>/fanout.txt.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf/fanout.sh [options]         (each option also reads from the environment variable shown)
  -t, --tokens N       tokens in the channel               TOKENS (1000000)
  -l, --latency L      simulator latency                   LATENCY (20ms)
  -w, --workers N      engine worker threads (shards)      WORKERS (1)
  -c, --connections N  connections per worker              CONNECTIONS (4)
  -m, --streams N      streams per connection              STREAMS (1000)
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
CONNECTIONS="${CONNECTIONS:-4}"
STREAMS="${STREAMS:-1000}"
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)}"
while [ $# -gt 0 ]; do
    case "$1" in
        -t | --tokens) TOKENS="$2"; shift 2 ;;
        -l | --latency) LATENCY="$2"; shift 2 ;;
        -w | --workers) WORKERS="$2"; shift 2 ;;
        -c | --connections) CONNECTIONS="$2"; shift 2 ;;
        -m | --streams) STREAMS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option $1" ;;
    esac
done

perf_build
mkdir -p "$OUT"
perf_log "one wave to $TOKENS tokens, latency $LATENCY, $WORKERS worker(s) x $CONNECTIONS connections x $STREAMS streams"
/usr/bin/time -f "process: %U s user, %S s sys, %e s wall, %M KiB max RSS" \
    "$FANFARE" demo --scenario wave --tokens "$TOKENS" --latency "$LATENCY" --workers "$WORKERS" \
    --connections "$CONNECTIONS" --streams "$STREAMS" --database "$OUT/fanout.db" >"$OUT/fanout.txt" 2>&1 ||
    { tail -20 "$OUT/fanout.txt" >&2; perf_die "the demo failed (see $OUT/fanout.txt)"; }
rm -f "$OUT"/fanout.db*

grep -E "^registered|^engine|^process" "$OUT/fanout.txt"
row="$(grep -E "^ +1  final" "$OUT/fanout.txt")"
echo "$row" | awk '{ printf "wave: targeted %s, delivered %s, makespan %s %s, %s pushes/s\n", $5, $6, $(NF-2), $(NF-1), $NF }'
grep -E "every targeted token accounted" "$OUT/fanout.txt"
echo "target: makespan <= 3 s for 1,000,000 tokens at 20 ms latency (issue 4)"

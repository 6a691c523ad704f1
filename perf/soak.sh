#!/usr/bin/env bash
# Bounded memory in a long run (issue 10): the fan-out engine against the in-process simulator for MINUTES
# (30 by default) at about TOKENS pushes/s (one wave per channel every second), replacing CHURN of the tokens
# every second and opening a new channel every 20 s. Samples the process's RSS and prints its growth after
# the warm-up; fails when it grows more than MAX_GROWTH percent. Raw output in perf/out/<timestamp>/soak.txt.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf/soak.sh [options]           (each option also reads from the environment variable shown)
  -m, --minutes M      how long to run                     MINUTES (30)
  -t, --tokens N       tokens (= pushes per second)        TOKENS (50000)
      --churn F        share replaced per second           CHURN (0.01)
      --warmup M       minutes before the RSS baseline     WARMUP (a sixth of the run, at least 1)
      --sample S       seconds between RSS samples         SAMPLE (10)
  -l, --latency L      simulator latency                   LATENCY (uniform:5ms-15ms)
  -w, --workers N      engine worker threads (shards)      WORKERS (1)
  -c, --connections N  connections per worker              CONNECTIONS (4)
      --max-growth P   allowed RSS growth after warm-up, % MAX_GROWTH (5)
      --out DIR        output directory                    OUT (perf/out/<timestamp>)
      --no-build       use the existing release binary     NO_BUILD=1
Also: FANFARE_BIN (use this binary, no build).
USAGE
}

# shellcheck source=perf/lib.sh source-path=SCRIPTDIR/..
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MINUTES="${MINUTES:-30}"
TOKENS="${TOKENS:-50000}"
CHURN="${CHURN:-0.01}"
WARMUP="${WARMUP:-}"
SAMPLE="${SAMPLE:-10}"
LATENCY="${LATENCY:-uniform:5ms-15ms}"
WORKERS="${WORKERS:-1}"
CONNECTIONS="${CONNECTIONS:-4}"
MAX_GROWTH="${MAX_GROWTH:-5}"
OUT="${OUT:-$PERF_DIR/out/$(date +%Y%m%d-%H%M%S)}"
while [ $# -gt 0 ]; do
    case "$1" in
        -m | --minutes) MINUTES="$2"; shift 2 ;;
        -t | --tokens) TOKENS="$2"; shift 2 ;;
        --churn) CHURN="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --sample) SAMPLE="$2"; shift 2 ;;
        -l | --latency) LATENCY="$2"; shift 2 ;;
        -w | --workers) WORKERS="$2"; shift 2 ;;
        -c | --connections) CONNECTIONS="$2"; shift 2 ;;
        --max-growth) MAX_GROWTH="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; perf_die "unknown option $1" ;;
    esac
done

perf_build
mkdir -p "$OUT"
perf_log "soak: $MINUTES min, $TOKENS tokens, churn $CHURN/s, latency $LATENCY, $WORKERS worker(s) x $CONNECTIONS connections"
warmup_flag=()
[ -n "$WARMUP" ] && warmup_flag=(--warmup-minutes "$WARMUP")
# --minimum-interval 0: every token gets the update of every second, so the rate is TOKENS pushes/s.
set +e
: >"$OUT/soak.txt"
/usr/bin/time -f "process: %U s user, %S s sys, %e s wall, %M KiB max RSS" \
    "$FANFARE" demo --scenario soak --minutes "$MINUTES" --tokens "$TOKENS" --churn "$CHURN" --sample-seconds "$SAMPLE" \
    "${warmup_flag[@]}" --latency "$LATENCY" --workers "$WORKERS" --connections "$CONNECTIONS" --minimum-interval 0 \
    --database "$OUT/soak.db" >"$OUT/soak.txt" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null' INT TERM
tail -n +1 -f --pid="$pid" "$OUT/soak.txt" | grep --line-buffered -E "^ +[0-9]+ s |^soak|^warm-up"
wait "$pid"
status=$?
set -e
rm -f "$OUT"/soak.db*
[ "$status" -eq 0 ] || { tail -20 "$OUT/soak.txt" >&2; perf_die "the soak run failed (exit $status; see $OUT/soak.txt)"; }
grep -E "^process" "$OUT/soak.txt" || true
growth="$(sed -n 's/.*growth \([-+][0-9.]*\) %.*/\1/p' "$OUT/soak.txt" | tail -1)"
[ -n "$growth" ] || perf_die "no RSS growth in the output (see $OUT/soak.txt)"
grep -q "every retained wave balanced: yes" "$OUT/soak.txt" || perf_die "a wave was not balanced (see $OUT/soak.txt)"
if awk -v g="$growth" -v max="$MAX_GROWTH" 'BEGIN { exit !(g <= max) }'; then
    echo "soak: RSS growth after warm-up ${growth} % (limit ${MAX_GROWTH} %): passed"
else
    perf_die "RSS grew ${growth} % after warm-up (limit ${MAX_GROWTH} %; see $OUT/soak.txt)"
fi

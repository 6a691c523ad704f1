#!/usr/bin/env bash
# The fault campaign of issue 24 at full size: three `fanfare serve` nodes on one real PostgreSQL (initdb into a
# temporary directory), `fanfare simulate` with its channel-management API, a mixed audience (update tokens and
# broadcast subscriptions on a linked channel), one wave, and one fault per scenario while it runs (kill -9 of a
# node; a node stopped past its lease; PostgreSQL crash-stopped and started; PostgreSQL frozen; one node cut from
# PostgreSQL; a fourth node joining; a rolling restart). The scenarios are the test suite's
# (Tests/ServiceTests/Chaos), which the test command runs short; this runs them with FANFARE_CHAOS=full and prints
# the table docs/deployment.md shows. Each scenario's checks must pass (the run fails otherwise).
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: perf/chaos.sh [options]
  --size short|full   the campaign's size (FANFARE_CHAOS; default full: 100,000 tokens, 10,000 subscribers)
  --keep              keep each scenario's directory (the nodes' logs, the accepted-push log)
  --no-build          use the test bundle already built
Needs PostgreSQL's server programs (apt-get install -y postgresql); scripts/test installs them.
USAGE
}

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SIZE=full
NO_BUILD="${NO_BUILD:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE="$2"; shift 2 ;;
        --keep) export FANFARE_KEEP_TEST_DIR=1; shift ;;
        --no-build) NO_BUILD=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; echo "error: unknown option $1" >&2; exit 64 ;;
    esac
done
case "$SIZE" in short | full) ;; *) echo "error: --size is short or full (got '$SIZE')" >&2; exit 64 ;; esac

if [ -z "$NO_BUILD" ]; then swift build --build-tests >&2; fi
BIN="$(swift build --show-bin-path)"
[ -x "$BIN/FanfarePackageTests.xctest" ] || { echo "error: no test bundle in $BIN: run without --no-build" >&2; exit 1; }
OUT="perf/out/$(date +%Y%m%d-%H%M%S)-chaos"
mkdir -p "$OUT"

echo "[$(date +%H:%M:%S)] running the $SIZE campaign; output in $OUT/run.log" >&2
status=0
FANFARE_CHAOS="$SIZE" "$BIN/FanfarePackageTests.xctest" --testing-library swift-testing \
    --filter "aFaultMidWaveLosesNothing" >"$OUT/run.log" 2>&1 || status=$?

{
    echo "Command: perf/chaos.sh --size $SIZE ($(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores)"
    echo
    echo "| fault, mid-wave | makespan | duplicates | broadcasts sent | API errors | 503 refusals | node restarts | time to recover |"
    echo "|---|---|---|---|---|---|---|---|"
    grep -o "chaos $SIZE: |.*" "$OUT/run.log" | sed "s/^chaos $SIZE: //"
} | tee "$OUT/table.md"
if [ "$status" -ne 0 ]; then
    grep -E "recorded an issue" "$OUT/run.log" | head -20 >&2 || true
    echo "error: the campaign failed (exit $status): see $OUT/run.log" >&2
fi
exit "$status"

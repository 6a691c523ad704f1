# shellcheck shell=bash disable=SC2034  # variables here are read by the sourcing scripts
# Shared by perf/compare.sh and perf/sweep.sh: build, simulator lifecycle, one client run, parsing.
# Sourced, not executed. Every function writes its raw output under the directory it is given, so a run
# can always be re-read from perf/out/<timestamp>/ afterwards.

PERF_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$PERF_DIR/.." && pwd)"

# Cores: the simulator gets one, every client the other, so a client never competes with the server it
# measures. Override for machines with more cores.
SIM_CPU="${SIM_CPU:-1}"
CLIENT_CPU="${CLIENT_CPU:-0}"
SCRATCH_PATH="${SCRATCH_PATH:-$REPO_DIR/.build-perf}"
H2LOAD="${H2LOAD:-/usr/bin/h2load}"
# A client run that takes longer than this is killed and reported as failed (a hang must not stall the script).
RUN_TIMEOUT="${RUN_TIMEOUT:-600}"
TEAM_ID="TEAMID0001"
KEY_ID="FANFARE001"
BUNDLE_ID="com.example.fanfare"
TOPIC="$BUNDLE_ID.push-type.liveactivity"

perf_die() { echo "error: $*" >&2; exit 1; }
perf_log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

perf_require_tools() {
    local tool
    for tool in taskset /usr/bin/time timeout jq awk sort od; do
        command -v "$tool" >/dev/null 2>&1 || perf_die "'$tool' is missing (apt-get install -y util-linux time coreutils jq)"
    done
    [ -x "$H2LOAD" ] || perf_die "h2load not found at $H2LOAD (apt-get install -y nghttp2-client)"
    local cpus
    cpus="$(nproc --all)"
    [ "$SIM_CPU" -lt "$cpus" ] && [ "$CLIENT_CPU" -lt "$cpus" ] ||
        perf_die "SIM_CPU=$SIM_CPU / CLIENT_CPU=$CLIENT_CPU but this machine has $cpus CPUs"
    [ "$SIM_CPU" != "$CLIENT_CPU" ] || perf_die "SIM_CPU and CLIENT_CPU must differ"
}

# Sets FANFARE to the release binary. FANFARE_BIN=path skips the build; NO_BUILD=1 uses an existing one.
perf_build() {
    if [ -n "${FANFARE_BIN:-}" ]; then
        [ -x "$FANFARE_BIN" ] || perf_die "FANFARE_BIN=$FANFARE_BIN is not an executable"
        FANFARE="$FANFARE_BIN"
        return
    fi
    FANFARE="$SCRATCH_PATH/release/fanfare"
    if [ "${NO_BUILD:-0}" = 1 ] && [ -x "$FANFARE" ]; then return; fi
    # SwiftPM is incremental, so this is quick when nothing changed. Other people may be saving files in
    # the same tree; SwiftPM then stops with "was modified during the build", which a retry fixes.
    local attempt log="${TMPDIR:-/tmp}/fanfare-perf-build.$$.log"
    for attempt in 1 2 3; do
        perf_log "swift build -c release --product fanfare --scratch-path $SCRATCH_PATH (attempt $attempt)"
        if (cd "$REPO_DIR" && swift build -c release --product fanfare --scratch-path "$SCRATCH_PATH") >"$log" 2>&1; then
            rm -f "$log"
            [ -x "$FANFARE" ] || perf_die "build succeeded but $FANFARE is missing"
            return
        fi
        grep -q "modified during the build" "$log" || break
        sleep 5
    done
    grep -E "error:" "$log" | head -20 >&2
    perf_die "release build failed (full log: $log)"
}

# Simulators this shell started; perf_cleanup stops them all (installed as an EXIT trap by the scripts).
PERF_SIM_PIDS=()

# perf_start_simulator STATE_DIR LOG LATENCY INITIAL_STREAMS [extra simulate flags...]
# Starts `fanfare simulate` on a free port, pinned to SIM_CPU; sets SIM_PID and SIM_PORT.
perf_start_simulator() {
    local state="$1" log="$2" latency="$3" initial="$4"
    shift 4
    mkdir -p "$state"
    taskset -c "$SIM_CPU" "$FANFARE" simulate --listen 127.0.0.1:0 --state-dir "$state" --cpus "$SIM_CPU" \
        --latency "$latency" --initial-streams "$initial" "$@" >"$log" 2>&1 &
    SIM_PID=$!
    PERF_SIM_PIDS+=("$SIM_PID")
    local waited=0 line
    while :; do
        line="$(grep -m1 -o 'simulating APNs on https://[^ ]*' "$log" 2>/dev/null || true)"
        if [ -n "$line" ]; then
            SIM_PORT="${line##*:}"
            return
        fi
        if ! kill -0 "$SIM_PID" 2>/dev/null; then
            cat "$log" >&2
            perf_die "the simulator exited during start-up (log: $log)"
        fi
        [ "$waited" -lt 600 ] || perf_die "the simulator did not report its address within 60 s (log: $log)"
        sleep 0.1
        waited=$((waited + 1))
    done
}

# Stops one simulator with SIGTERM (it then prints its summary into its log); SIGKILL after 15 s.
perf_stop_simulator() {
    local pid="$1"
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        perf_log "simulator $pid ignored SIGTERM for 15 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    perf_forget_simulator "$pid"
}

perf_forget_simulator() {
    local kept=() p
    for p in "${PERF_SIM_PIDS[@]}"; do [ "$p" = "$1" ] || kept+=("$p"); done
    PERF_SIM_PIDS=("${kept[@]}")
}

perf_cleanup() {
    local pid
    for pid in "${PERF_SIM_PIDS[@]}"; do perf_stop_simulator "$pid"; done
    PERF_SIM_PIDS=()
}

# perf_make_tokens COUNT FILE: COUNT random 80-byte device tokens (the usual Live Activity size), hex.
perf_make_tokens() {
    od -An -v -tx1 -w80 -N $(($1 * 80)) /dev/urandom | tr -d ' ' >"$2"
    [ "$(wc -l <"$2")" -eq "$1" ] || perf_die "could not write $1 tokens to $2"
}

# perf_capture_body DIR: the exact body `fanfare load` sends, taken from a throwaway simulator's accepted-push
# log, so h2load posts the same bytes. Writes DIR/body.json and sets BODY_BYTES.
perf_capture_body() {
    local dir="$1"
    local state="$dir/sim-state" log="$dir/body-capture-simulator.log" accepted="$dir/body-capture-accepted.jsonl"
    rm -f "$accepted"
    # --duration makes the simulator exit by itself, which flushes the accepted-push log.
    perf_start_simulator "$state" "$log" 0 1 --duration 3 --log "$accepted"
    local pid="$SIM_PID"
    taskset -c "$CLIENT_CPU" "$FANFARE" load --endpoint "https://127.0.0.1:$SIM_PORT" --ca-file "$state/ca.pem" \
        --auth-key "$state/AuthKey_$KEY_ID.p8" --key-id "$KEY_ID" --team-id "$TEAM_ID" --bundle-id "$BUNDLE_ID" \
        --connections 1 --streams 1 --pushes 1 --tokens 1 --json >"$dir/body-capture-load.json" 2>&1 ||
        perf_die "fanfare load could not send one push to the simulator (see $dir/body-capture-load.json)"
    wait "$pid" 2>/dev/null || true
    perf_forget_simulator "$pid"
    [ -s "$accepted" ] || perf_die "the simulator logged no accepted push (see $log)"
    head -n1 "$accepted" | jq -cj .payload >"$dir/body.json"
    [ -s "$dir/body.json" ] && [ "$(head -c1 "$dir/body.json")" = "{" ] ||
        perf_die "no JSON payload in $accepted"
    BODY_BYTES="$(wc -c <"$dir/body.json")"
}

# perf_percentiles FILE: nearest-rank p50 and p99 (ms) of the microsecond values in FILE, "p50 p99".
perf_percentiles() {
    sort -n "$1" | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan nan"; exit }
        i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++; if (i50 < 1) i50 = 1
        i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++; if (i99 < 1) i99 = 1
        printf "%.3f %.3f\n", v[i50] / 1000, v[i99] / 1000 }'
}

# CPU seconds (user + sys) from a /usr/bin/time -f "%e %U %S" file: "wall user sys".
perf_read_time() {
    tail -n1 "$1" | awk 'NF == 3 && $1 ~ /^[0-9.]+$/ { print $1, $2, $3; ok = 1 } END { if (!ok) print "nan nan nan" }'
}

# One result line, tab-separated, in the order of PERF_RESULT_HEADER.
# The last two columns are added by perf_add_simulator_cpu.
PERF_RESULT_HEADER="tool	pushes	pushes_per_s	cpu_us_per_push	p50_ms	p99_ms	ok_2xx_pct	failures	wall_s	user_s	sys_s	exit	sim_cpu_us_per_push	loadavg_1m"
perf_result_line() {
    # tool pushes rate ok_count p50 p99 wall user sys exit
    awk -v tool="$1" -v n="$2" -v rate="$3" -v ok="$4" -v p50="$5" -v p99="$6" -v wall="$7" -v user="$8" -v sys="$9" -v rc="${10}" 'BEGIN {
        cpu = (user == "nan" || n == 0) ? "nan" : sprintf("%.3f", (user + sys) * 1e6 / n)
        okp = (ok == "nan" || n == 0) ? "nan" : sprintf("%.3f", ok * 100 / n)
        fail = (ok == "nan") ? "nan" : n - ok
        printf "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tool, n, rate, cpu, p50, p99, okp, fail, wall, user, sys, rc }'
}

# perf_run_h2load NAME DIR PREFIX C M N BODY URIS [LATENCY_LOG]: runs h2load pinned to CLIENT_CPU and prints a
# result line. h2load prints only min/mean/max latency, so p50/p99 need LATENCY_LOG (--log-file), which
# costs h2load one write(2) per request: pass it only on runs whose CPU is not the point.
perf_run_h2load() {
    local name="$1" dir="$2" prefix="$3" c="$4" m="$5" n="$6" body="$7" uris="$8" latency_log="${9:-}"
    local out="$dir/$prefix.out" timefile="$dir/$prefix.time" rc=0
    local extra=()
    [ -n "$latency_log" ] && extra=(--log-file="$latency_log")
    local jwt
    jwt="$("$FANFARE" token --auth-key "$STATE_DIR/AuthKey_$KEY_ID.p8" --key-id "$KEY_ID" --team-id "$TEAM_ID")"
    taskset -c "$CLIENT_CPU" /usr/bin/time -f "%e %U %S" -o "$timefile" \
        timeout --signal=TERM --kill-after=10 "$RUN_TIMEOUT" \
        "$H2LOAD" -n "$n" -c "$c" -m "$m" -t 1 -d "$body" -i "$uris" "${extra[@]}" \
        -H "authorization: bearer $jwt" -H "apns-topic: $TOPIC" -H "apns-push-type: liveactivity" \
        -H "apns-priority: 5" >"$out" 2>&1 || rc=$?
    local rate ok p50="nan" p99="nan" wall user sys
    rate="$(awk '/^finished in/ { for (i = 1; i <= NF; i++) if ($(i + 1) ~ /^req\/s/) { print $i; exit } }' "$out")"
    ok="$(awk '/^status codes:/ { print $3; exit }' "$out")"
    if [ -n "$latency_log" ] && [ -s "$latency_log" ]; then
        read -r p50 p99 < <(awk -F'\t' '{ print $3 }' "$latency_log" | perf_percentiles /dev/stdin)
    fi
    read -r wall user sys < <(perf_read_time "$timefile")
    perf_result_line "$name" "$n" "${rate:-nan}" "${ok:-nan}" "$p50" "$p99" "$wall" "$user" "$sys" "$rc"
}

# perf_run_fanfare NAME DIR PREFIX C M N TOKENS [RING_SETUP]: runs `fanfare load` pinned to CLIENT_CPU with
# TOKENS random 80-byte tokens of its own. (Not --tokens-file: its parser costs ~25 us of CPU per token at
# start-up, 0.25 s for 10,000, which would be charged to the pushes; the simulator accepts any token, so
# the same count and size of tokens is the fair match for h2load's list.)
perf_run_fanfare() {
    local name="$1" dir="$2" prefix="$3" c="$4" m="$5" n="$6" tokens="$7" ring="${8:-}"
    local out="$dir/$prefix.json" timefile="$dir/$prefix.time" rc=0
    local env=()
    [ -n "$ring" ] && [ "$ring" != default ] && env=(env "FANFARE_RING_SETUP=$ring")
    taskset -c "$CLIENT_CPU" /usr/bin/time -f "%e %U %S" -o "$timefile" \
        timeout --signal=TERM --kill-after=10 "$RUN_TIMEOUT" "${env[@]}" \
        "$FANFARE" load --endpoint "https://127.0.0.1:$SIM_PORT" --ca-file "$STATE_DIR/ca.pem" \
        --auth-key "$STATE_DIR/AuthKey_$KEY_ID.p8" --key-id "$KEY_ID" --team-id "$TEAM_ID" --bundle-id "$BUNDLE_ID" \
        --threads 1 --connections "$c" --streams "$m" --pushes "$n" --tokens "$tokens" --token-bytes 80 --cpus "$CLIENT_CPU" --json \
        >"$out" 2>"$dir/$prefix.err" || rc=$?
    local rate="nan" ok="nan" p50="nan" p99="nan" wall user sys
    if jq -e .pushes_per_second "$out" >/dev/null 2>&1; then
        read -r rate ok p50 p99 < <(jq -r '[.pushes_per_second, .delivered, .latency_ms.p50, .latency_ms.p99] | @tsv' "$out")
    fi
    read -r wall user sys < <(perf_read_time "$timefile")
    perf_result_line "$name" "$n" "$rate" "$ok" "$p50" "$p99" "$wall" "$user" "$sys" "$rc"
}

# CPU clock ticks (user + sys) a process has used so far, from /proc/PID/stat; "nan" once it is gone.
perf_process_ticks() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo nan; return; }
    echo "${stat##*) }" | awk '{ print $12 + $13 }'
}

# perf_add_simulator_cpu LINE TICKS_BEFORE TICKS_AFTER: appends the simulator's CPU us per push and the
# 1-minute load average to a result line (both explain a rate: a saturated or shared simulator core).
perf_add_simulator_cpu() {
    awk -F'\t' -v OFS='\t' -v a="$2" -v b="$3" -v hz="$(getconf CLK_TCK)" -v load="$(cut -d' ' -f1 /proc/loadavg)" '{
        sim = (a == "nan" || b == "nan" || $2 == 0) ? "nan" : sprintf("%.3f", (b - a) * 1e6 / hz / $2)
        print $0, sim, load }' <<<"$1"
}

# perf_measured RUN_FUNCTION ARGS...: runs perf_run_h2load/perf_run_fanfare and appends the simulator's CPU
# per push over that run (the simulator must be SIM_PID) and the load average.
perf_measured() {
    local before line
    before="$(perf_process_ticks "$SIM_PID")"
    line="$("$@")"
    perf_add_simulator_cpu "$line" "$before" "$(perf_process_ticks "$SIM_PID")"
}

# A few facts that make a result readable later.
perf_write_environment() {
    {
        echo "date: $(date -Iseconds)"
        echo "host: $(uname -sr), $(nproc --all) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
        echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "fanfare: $FANFARE ($(cd "$REPO_DIR" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$REPO_DIR" && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ', with uncommitted changes'))"
        echo "h2load: $("$H2LOAD" --version 2>&1 | head -n1)"
        echo "pinning: simulator on CPU $SIM_CPU, clients on CPU $CLIENT_CPU"
    } >"$1"
}

# Warn when other work is running: every number below is then noisy.
perf_warn_if_busy() {
    awk -v cpus="$(nproc --all)" '{ if ($1 > 0.5) printf "note: load average %s before starting: other processes share these CPUs, expect noisy numbers\n", $1 }' /proc/loadavg >&2
}

# perf_ensure_gnuplot DIR: gnuplot for the plots, installed with apt-get when missing and running as root.
perf_ensure_gnuplot() {
    command -v gnuplot >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        perf_log "installing gnuplot-nox for the plot"
        if (apt-get install -y -qq gnuplot-nox || { apt-get update -qq && apt-get install -y -qq gnuplot-nox; }) \
            >"$1/apt-gnuplot.log" 2>&1; then
            return 0
        fi
    fi
    perf_log "gnuplot is missing (apt-get install -y gnuplot-nox): writing the CSV only"
    return 1
}

-- wrk script for perf/api.sh: POST /v1/tokens with batches of fresh update tokens, one connection per thread.
--   wrk -t T -c T -d D -s perf/api-register.lua URL -- BATCH BATCHES_PER_THREAD SEED CHANNELS
-- Each thread builds its bodies before its first request (random 32-byte tokens, channels perf-reg-0..N-1),
-- sends each once, one at a time, and stops after the last answer. wrk's own rate divides by -d, which also counts the time
-- after the threads stopped, so the rate is measured here: from the first request sent to the last answer
-- received (CLOCK_MONOTONIC), over the answers that were 200 with the whole batch registered.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } fanfare_timespec;
int clock_gettime(int clock_id, fanfare_timespec *tp);
]]
local function now_us()
    local ts = ffi.new("fanfare_timespec")
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC: the same clock in every thread
    return tonumber(ts.tv_sec) * 1000000 + tonumber(ts.tv_nsec) / 1000
end

local threads = {}
local next_id = 0

function setup(thread)
    thread:set("id", next_id)
    next_id = next_id + 1
    table.insert(threads, thread)
end

local bodies = {}
local batch, count
local answered, ok, bad = 0, 0, 0
local first_us, last_us = nil, nil

function init(args)
    batch = tonumber(args[1]) or 10000
    count = tonumber(args[2]) or 10
    local seed = tonumber(args[3]) or 1
    local channels = tonumber(args[4]) or 100
    math.randomseed(seed * 1000 + id)
    local hex = {}
    for b = 1, count do
        local items = {}
        for k = 1, batch do
            for w = 1, 16 do hex[w] = string.format("%04x", math.random(0, 0xffff)) end
            -- First digit 2..f: never the simulator's 0410/0400 prefixes that answer 410/400.
            local token = string.format("%x", math.random(2, 15)) .. table.concat(hex):sub(2)
            items[k] = string.format('{"token":"%s","kind":"update","channels":["perf-reg-%d"],"activity_id":"a%d-%d-%d-%d"}',
                token, (b * batch + k) % channels, seed, id, b, k)
        end
        bodies[b] = '{"tokens":[' .. table.concat(items, ",") .. ']}'
    end
end

function request()
    -- The body follows the answers, not the calls: wrk may build a request it then does not send (it did so
    -- for the first request of the first thread here), and a body sent twice would be a re-registration.
    if first_us == nil then first_us = now_us() end
    local body = bodies[math.min(answered + 1, count)]
    return wrk.format("POST", "/v1/tokens", { ["Content-Type"] = "application/json" }, body)
end

function response(status, headers, body)
    answered = answered + 1
    last_us = now_us()
    if status == 200 and tonumber(body:match('"registered"%s*:%s*(%d+)')) == batch then
        ok = ok + 1
    else
        bad = bad + 1
        if bad == 1 then wrk.thread:set("first_bad", status .. " " .. tostring(body):sub(1, 300)) end
    end
    wrk.thread:set("batch", batch)
    wrk.thread:set("ok", ok)
    wrk.thread:set("bad", bad)
    wrk.thread:set("first_us", first_us)
    wrk.thread:set("last_us", last_us)
    if answered >= count then wrk.thread:stop() end
end

function done(summary, latency, requests)
    local first, last, oks, bads, note, b = nil, nil, 0, 0, "", 0
    for _, thread in ipairs(threads) do
        b = thread:get("batch") or b
        local f, l = thread:get("first_us"), thread:get("last_us")
        if f and (first == nil or f < first) then first = f end
        if l and (last == nil or l > last) then last = l end
        oks = oks + (thread:get("ok") or 0)
        bads = bads + (thread:get("bad") or 0)
        note = thread:get("first_bad") or note
    end
    local seconds = (first and last and last > first) and (last - first) / 1e6 or 0
    io.write(string.format(
        '{"batches_ok":%d,"batches_bad":%d,"tokens":%d,"seconds":%.6f,"tokens_per_second":%.0f,' ..
        '"p50_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,"socket_errors":%d,"first_bad":"%s"}\n',
        oks, bads, oks * b, seconds, seconds > 0 and oks * b / seconds or 0,
        latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
        summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
        (note:gsub('[\\"]', "'"):gsub("%c", " "))))
end

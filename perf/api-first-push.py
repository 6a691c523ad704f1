#!/usr/bin/env python3
"""perf/api.sh's publish -> first push measurement (standard library only).

    api-first-push.py BASE_URL ACCEPTED_LOG CHANNELS AUDIENCE WAVES OUT_JSON

Registers AUDIENCE tokens on each of CHANNELS channels (perf-first-push-<n>) through the API, then publishes
WAVES updates one after the other, each once the previous wave is complete (so none is superseded), going round
the channels. The engine holds a newer state back until a second has passed since the activity's last push
(`minimumInterval`, Apple's "about one update per second per activity"), which would be measured instead of the
engine's dispatch: so a channel gets its next update only 1.1 s after its previous one. Writes percentiles to
OUT_JSON:

- `http_to_first_push_ms`: from just before the POST is written to the first push of that wave in the built-in
  simulator's accepted-push log (APNs has the push). The log's `time` is in whole milliseconds, so each sample
  is (log time + 1 ms) - send time: an upper bound, never flattering.
- `first_ack_ms`: the wave report's `time_to_first_ack_seconds` (from the engine's publish to APNs' first
  answer): the engine's own view, with nanosecond resolution.
- `publish_answer_ms`: the POST's own latency (until its 202 is read).

Each update carries its sequence number in `content_state`, which is how the log's lines are matched to waves.
"""

import http.client
import json
import os
import secrets
import sys
import time
from urllib.parse import urlparse


def percentile(values, p):
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def summary(values):
    return {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3),
            "max": round(max(values), 3), "samples": len(values)}


def main():
    base, accepted_log, channels, audience, waves, out = sys.argv[1:7]
    channels, audience, waves = int(channels), int(audience), int(waves)
    url = urlparse(base)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    events = http.client.HTTPConnection(url.hostname, url.port, timeout=60)

    def call(method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        return response.status, payload

    names = [f"perf-first-push-{n}" for n in range(channels)]
    for channel in names:
        for start in range(0, audience, 10_000):
            items = [{"token": "3" + secrets.token_hex(32)[1:], "kind": "update", "channels": [channel],
                      "activity_id": f"{channel}-{i}"} for i in range(start, min(audience, start + 10_000))]
            status, payload = call("POST", "/v1/tokens", {"tokens": items})
            if status != 200:
                sys.exit(f"api-first-push: registering failed: {status} {payload[:300]!r}")

    sent_ns, answered_ms, first_ack_ms, wave_ids = {}, [], [], {}
    last_publish = {}
    for sequence in range(waves):
        channel = names[sequence % channels]
        if channel in last_publish:
            time.sleep(max(0.0, last_publish[channel] + 1.1 - time.monotonic()))
        last_publish[channel] = time.monotonic()
        body = {"event": "update", "content_state": {"perf_sequence": sequence}}
        data = json.dumps(body).encode()
        before = time.time_ns()
        connection.request("POST", f"/v1/channels/{channel}/updates", body=data,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        after = time.time_ns()
        if response.status != 202:
            sys.exit(f"api-first-push: publish {sequence} failed: {response.status} {payload[:300]!r}")
        wave = json.loads(payload)["wave_id"]
        sent_ns[sequence] = before
        wave_ids[sequence] = wave
        answered_ms.append((after - before) / 1e6)
        # Wait for the wave's `complete` event (one quiet request, rather than polling the server's core).
        events.request("GET", f"/v1/waves/{wave}/events", headers={"Accept": "text/event-stream"})
        stream = events.getresponse()
        if stream.status != 200:
            sys.exit(f"api-first-push: events of wave {wave}: {stream.status} {stream.read()[:300]!r}")
        if b"event: complete" not in stream.read():
            sys.exit(f"api-first-push: the events of wave {wave} ended without `complete`")
        status, payload = call("GET", f"/v1/waves/{wave}")
        report = json.loads(payload)
        if status != 200 or report["state"] != "complete":
            sys.exit(f"api-first-push: wave {wave} is not complete after its complete event: {report}")
        if report["delivered"] != audience:
            sys.exit(f"api-first-push: wave {wave} delivered {report['delivered']} of {audience}: {report}")
        first_ack_ms.append(report["time_to_first_ack_seconds"] * 1000)

    # Every push of a complete wave was written to the log before its answer left the simulator.
    first_logged_ms = {}
    with open(accepted_log, "rb") as log:
        for line in log:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            state = (record.get("payload") or {}).get("aps", {}).get("content-state", {})
            sequence = state.get("perf_sequence") if isinstance(state, dict) else None
            if sequence is None:
                continue
            if sequence not in first_logged_ms or record["time"] < first_logged_ms[sequence]:
                first_logged_ms[sequence] = record["time"]
    missing = [s for s in sent_ns if s not in first_logged_ms]
    if missing:
        sys.exit(f"api-first-push: no accepted push in {accepted_log} for updates {missing[:10]}")
    to_first_push = [first_logged_ms[s] + 1 - sent_ns[s] / 1e6 for s in sent_ns]

    result = {
        "channels": channels, "audience": audience, "waves": waves,
        "http_to_first_push_ms": summary(to_first_push),
        "first_ack_ms": summary(first_ack_ms),
        "publish_answer_ms": summary(answered_ms),
    }
    with open(out, "w") as file:
        json.dump(result, file, indent=2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

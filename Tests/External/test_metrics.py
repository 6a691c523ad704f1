"""GET /metrics read by prometheus_client's text-format parser, checked against the wave reports of the API."""

import math

from prometheus_client.parser import text_string_to_metric_families

from conftest import random_token, wait_until


def scrape(service):
    response = service.request("GET", "/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain"), response.headers["Content-Type"]
    families = {}
    # The parser raises on anything that is not the text format (0.0.4).
    for family in text_string_to_metric_families(response.text):
        assert family.name not in families, f"{family.name} appears twice"
        families[family.name] = family
    return families


def value(families, sample_name, **labels):
    """The sample's value (0 when the labelled series does not exist yet, as for a counter never incremented)."""
    family_name = sample_name[:-len("_total")] if sample_name.endswith("_total") else sample_name
    for suffix in ("_sum", "_count", "_bucket"):
        if sample_name.endswith(suffix) and sample_name[:-len(suffix)] in families:
            family_name = sample_name[:-len(suffix)]
    family = families.get(family_name)
    assert family is not None, f"no metric {sample_name} in /metrics"
    for sample in family.samples:
        if sample.name == sample_name and all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    return 0


def test_metrics_match_the_wave_reports(start_service):
    service = start_service(simulator_latency="0")
    # A match channel with 40 tokens APNs calls unregistered (410), and a second channel with two updates in a
    # row (the second supersedes the first for tokens it has not reached).
    match = [random_token("0410") if i < 40 else random_token() for i in range(3_000)]
    other = [random_token() for _ in range(1_500)]
    service.register(match, ["match-42"], batch=1_000)
    service.register(other, ["match-17"])
    waves = [service.publish("match-42"),
             service.publish("match-17", content_state={"home": 1}),
             service.publish("match-17", content_state={"home": 2})]
    reports = [service.wait_complete(wave) for wave in waves]
    # One single push outside any channel, answered 200 by the simulator.
    single = service.request("POST", "/v1/push", json={"token": random_token(), "event": "update",
                                                       "content_state": {"home": 3}})
    assert single.status_code == 200 and single.json()["status"] == 200, single.text

    invalidated = sum(report["invalidated"] for report in reports)
    assert invalidated == 40
    registered = len(match) + len(other) - invalidated
    # The dead tokens leave the registry on the registry thread after the wave, and completed waves are
    # counted by the service's wave monitor (every 100 ms): wait for both.
    def settled():
        families = scrape(service)
        done = (value(families, "fanfare_registry_tokens") == registered and
                value(families, "fanfare_waves_completed_total") == len(waves))
        return families if done else None
    families = wait_until(settled, 60, f"fanfare_registry_tokens = {registered} and {len(waves)} waves completed")

    assert value(families, "fanfare_waves_published_total") == len(waves)
    assert value(families, "fanfare_waves_running") == 0
    assert value(families, "fanfare_invalid_tokens_removed_total") == invalidated

    # Every targeted token's outcome, by outcome.
    for outcome in ("delivered", "failed", "superseded", "expired", "invalidated"):
        expected = sum(report[outcome] for report in reports)
        assert value(families, "fanfare_wave_outcomes_total", outcome=outcome) == expected, outcome
    assert sum(report["targeted"] for report in reports) == len(match) + 2 * len(other)

    # Push attempts as the client counts them: the waves' sends plus the single push.
    sent = sum(report["sent"] for report in reports) + 1
    pushes = {outcome: value(families, "fanfare_pushes_total", outcome=outcome)
              for outcome in ("delivered", "rejected", "failed")}
    assert sum(pushes.values()) == sent, pushes
    assert pushes["delivered"] == sum(report["delivered"] for report in reports) + 1
    assert pushes["rejected"] == invalidated

    failed_by_reason = {}
    for report in reports:
        for reason, count in report["failed_by_reason"].items():
            failed_by_reason[reason] = failed_by_reason.get(reason, 0) + count
    for reason, count in failed_by_reason.items():
        assert value(families, "fanfare_push_failures_total", reason=reason) == count, reason

    # One makespan per wave that got an answer (a wave superseded before any push has none).
    makespans = [report["makespan_seconds"] for report in reports if report.get("makespan_seconds") is not None]
    assert value(families, "fanfare_wave_makespan_seconds_count") == len(makespans)
    assert math.isclose(value(families, "fanfare_wave_makespan_seconds_sum"), sum(makespans), rel_tol=1e-6)
    assert value(families, "fanfare_wave_content_age_seconds_count") == len(waves)
    for name in ("fanfare_wave_makespan_seconds", "fanfare_http_request_duration_seconds"):
        check_histogram(families[name])

    # The API's own requests: the registration batches, by route and status.
    assert value(families, "fanfare_http_requests_total", route="/v1/tokens", method="POST", status="200") == 3 + 1
    assert value(families, "fanfare_http_requests_total", route="/v1/channels/{channel}/updates", method="POST",
                 status="202") == len(waves)
    assert value(families, "fanfare_apns_connections_open") >= 1
    assert value(families, "fanfare_pushes_in_flight") == 0

    # Counter and unit names follow the Prometheus conventions.
    for family in families.values():
        if family.type == "counter":
            assert all(sample.name.endswith("_total") for sample in family.samples), family.name
        assert family.name.startswith("fanfare_"), family.name


def check_histogram(family):
    """Buckets are cumulative and the +Inf bucket equals the count, for every label set."""
    series = {}
    for sample in family.samples:
        key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        series.setdefault(key, {"buckets": [], "count": None})
        if sample.name.endswith("_bucket"):
            series[key]["buckets"].append((float(sample.labels["le"]), sample.value))
        elif sample.name.endswith("_count"):
            series[key]["count"] = sample.value
    assert series, f"{family.name} has no samples"
    for key, data in series.items():
        buckets = sorted(data["buckets"])
        counts = [count for _, count in buckets]
        assert counts == sorted(counts), f"{family.name}{key}: buckets are not cumulative"
        assert buckets and math.isinf(buckets[-1][0]) and buckets[-1][1] == data["count"], f"{family.name}{key}"

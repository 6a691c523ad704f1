import FanfareSimulator

/// Parses `250ms`, `2s`, `1.5s`, `800us`, `100ns` into nanoseconds.
public func parseDuration(_ text: String, flag: String) throws(UsageError) -> Int64 {
    let units: [(String, Double)] = [("ns", 1), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9), ("m", 60e9)]
    for (suffix, scale) in units where text.hasSuffix(suffix) {
        let number = text.dropLast(suffix.count)
        // Up to a year: larger values (or inf, nan) would overflow the nanosecond count.
        if let value = Double(number), value >= 0, value.isFinite, value * scale <= 365 * 86_400e9 {
            return Int64(value * scale)
        }
    }
    throw UsageError("\(flag) '\(text)' is not a duration like 20ms, 1.5s or 500us")
}

/// `--latency` grammar: `0`, `20ms` (fixed), `uniform:10ms-30ms`, `longtail:20ms,200ms` (median, p99).
func parseLatency(_ text: String) throws(UsageError) -> LatencyModel {
    if text == "0" || text == "none" { return .none }
    if text.hasPrefix("uniform:") {
        let parts = text.dropFirst(8).split(separator: "-")
        guard parts.count == 2 else {
            throw UsageError("--latency '\(text)': expected uniform:MIN-MAX, e.g. uniform:10ms-30ms")
        }
        let low = try parseDuration(String(parts[0]), flag: "--latency")
        let high = try parseDuration(String(parts[1]), flag: "--latency")
        guard low <= high else { throw UsageError("--latency '\(text)': MIN must not exceed MAX") }
        return .uniform(minNanoseconds: low, maxNanoseconds: high)
    }
    if text.hasPrefix("longtail:") {
        let parts = text.dropFirst(9).split(separator: ",")
        guard parts.count == 2 else {
            throw UsageError("--latency '\(text)': expected longtail:MEDIAN,P99, e.g. longtail:20ms,200ms")
        }
        let median = try parseDuration(String(parts[0]), flag: "--latency")
        let p99 = try parseDuration(String(parts[1]), flag: "--latency")
        guard median > 0, p99 >= median else { throw UsageError("--latency '\(text)': need 0 < MEDIAN <= P99") }
        return .longTail(medianNanoseconds: median, p99Nanoseconds: p99)
    }
    return .fixed(nanoseconds: try parseDuration(text, flag: "--latency"))
}

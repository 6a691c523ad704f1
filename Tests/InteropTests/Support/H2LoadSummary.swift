// Reading h2load's end-of-run summary (nghttp2 1.52), e.g.
//
//   finished in 25.43ms, 7865.96 req/s, 304.34KB/s
//   requests: 200 total, 200 started, 200 done, 200 succeeded, 0 failed, 0 errored, 0 timeout
//   status codes: 200 2xx, 0 3xx, 0 4xx, 0 5xx
import Foundation

/// The counts h2load prints when a run finishes.
struct H2LoadSummary: Equatable, CustomStringConvertible {
    var total = 0
    var started = 0
    var done = 0
    var succeeded = 0
    var failed = 0
    var errored = 0
    var timeout = 0
    var status2xx = 0
    var status3xx = 0
    var status4xx = 0
    var status5xx = 0
    /// From the "finished in …" line; for information only (tests never assert on speed).
    var requestsPerSecond = 0.0
    var finishedLine = ""

    var description: String {
        "\(finishedLine)\nrequests: \(total) total, \(started) started, \(done) done, \(succeeded) succeeded, "
            + "\(failed) failed, \(errored) errored, \(timeout) timeout\n"
            + "status codes: \(status2xx) 2xx, \(status3xx) 3xx, \(status4xx) 4xx, \(status5xx) 5xx"
    }

    /// Parses h2load's stdout; nil when the `requests:` or `status codes:` line is missing (h2load failed
    /// before its summary, e.g. it could not connect).
    init?(parsing output: String) {
        var sawRequests = false
        var sawStatuses = false
        for line in output.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if line.hasPrefix("finished in ") {
                finishedLine = line
                // "finished in 25.43ms, 7865.96 req/s, 304.34KB/s"
                let fields = line.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                if fields.count >= 2, fields[1].hasSuffix(" req/s") {
                    requestsPerSecond = Double(fields[1].dropLast(" req/s".count)) ?? 0
                }
            } else if line.hasPrefix("requests: ") {
                let counts = Self.labelledCounts(line.dropFirst("requests: ".count))
                guard let total = counts["total"], let started = counts["started"], let done = counts["done"],
                    let succeeded = counts["succeeded"], let failed = counts["failed"], let errored = counts["errored"]
                else { return nil }
                self.total = total
                self.started = started
                self.done = done
                self.succeeded = succeeded
                self.failed = failed
                self.errored = errored
                timeout = counts["timeout"] ?? 0
                sawRequests = true
            } else if line.hasPrefix("status codes: ") {
                let counts = Self.labelledCounts(line.dropFirst("status codes: ".count))
                guard let ok = counts["2xx"], let redirect = counts["3xx"], let client = counts["4xx"],
                    let server = counts["5xx"]
                else { return nil }
                status2xx = ok
                status3xx = redirect
                status4xx = client
                status5xx = server
                sawStatuses = true
            }
        }
        guard sawRequests && sawStatuses else { return nil }
    }

    /// "200 total, 200 started, 0 failed" → ["total": 200, "started": 200, "failed": 0].
    private static func labelledCounts(_ text: Substring) -> [String: Int] {
        var counts: [String: Int] = [:]
        for field in text.split(separator: ",") {
            let parts = field.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count == 2, let value = Int(parts[0]) else { continue }
            counts[String(parts[1])] = value
        }
        return counts
    }
}

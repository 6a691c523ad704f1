import FanfareCore

// The faults the simulator injects on purpose (besides its APNs rules), each with its command-line spelling.
// Draws come from the worker's seeded PRNG, so a run with the same seed and traffic injects the same faults.

/// One injected failure: with `probability`, an otherwise valid push gets `reason` instead of 200.
public struct FaultRule: Sendable, Equatable, CustomStringConvertible {
    public var reason: APNsReason
    /// In `0...1`. Rules are tried in order on one uniform draw, so their probabilities add up.
    public var probability: Double

    public init(reason: APNsReason, probability: Double) {
        self.reason = reason
        self.probability = probability
    }

    /// Parses `Reason:probability`, e.g. `TooManyRequests:0.01` or `Unregistered:0.001`.
    public init(parsing text: String) throws(SimulatorConfigurationError) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw .badFaultRule(text) }
        try self.init(reasonText: parts[0], probabilityText: parts[1], whole: text)
    }

    fileprivate init(
        reasonText: Substring, probabilityText: Substring, whole text: String
    ) throws(SimulatorConfigurationError) {
        guard let reason = APNsReason(rawValue: String(reasonText)) else {
            throw .unknownFaultReason(String(reasonText))
        }
        guard let probability = parseProbability(probabilityText) else { throw .badFaultRule(text) }
        self.init(reason: reason, probability: probability)
    }

    public var description: String { "\(reason.rawValue):\(probability)" }
}

/// A fault that switches on for a window and off again: during the last `length` of every `period`, an
/// otherwise valid push gets `rule.reason` with `rule.probability` (on top of, and drawn before, the steady
/// `faults`). Both windows count requests decided by one worker, or time since the worker's first request.
/// The quiet part comes first, so a fresh simulator accepts its first pushes.
public struct FaultBurst: Sendable, Equatable, CustomStringConvertible {
    /// A length of a burst or of its period.
    public enum Window: Sendable, Equatable {
        /// Requests decided by the worker.
        case requests(Int)
        /// Time since the worker decided its first request.
        case nanoseconds(Int64)
    }

    public var rule: FaultRule
    /// How long each burst lasts (same unit as `period`, not longer).
    public var length: Window
    /// Bursts repeat every `period`.
    public var period: Window

    public init(rule: FaultRule, length: Window, period: Window) {
        self.rule = rule
        self.length = length
        self.period = period
    }

    /// Parses `Reason:probability:LENGTH/PERIOD`, both counts of requests (`ServiceUnavailable:1:200/2000`)
    /// or both durations (`TooManyRequests:0.5:100ms/1s`).
    public init(parsing text: String) throws(SimulatorConfigurationError) {
        let expected =
            "Reason:probability:LENGTH/PERIOD with LENGTH and PERIOD both request counts or both durations (e.g. ServiceUnavailable:1:200/2000 or TooManyRequests:0.5:100ms/1s)"
        let bad = SimulatorConfigurationError.badSpelling(what: "fault burst", text: text, expected: expected)
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw bad }
        let rule = try FaultRule(reasonText: parts[0], probabilityText: parts[1], whole: text)
        let windows = parts[2].split(separator: "/", omittingEmptySubsequences: false)
        guard windows.count == 2 else { throw bad }
        if let length = Int(windows[0]), let period = Int(windows[1]) {
            self.init(rule: rule, length: .requests(length), period: .requests(period))
        } else if let length = LatencyModel.parseDuration(String(windows[0])),
            let period = LatencyModel.parseDuration(String(windows[1]))
        {
            self.init(rule: rule, length: .nanoseconds(length), period: .nanoseconds(period))
        } else {
            throw bad
        }
        if let problem { throw .invalid(field: "faultBursts", problem: "'\(text)': \(problem)") }
    }

    /// Why the burst cannot work, or nil.
    public var problem: String? {
        guard rule.probability >= 0 && rule.probability <= 1 else { return "probability must be in 0...1" }
        switch (length, period) {
        case (.requests(let length), .requests(let period)):
            return length >= 1 && period >= length ? nil : "needs 1 <= length <= period"
        case (.nanoseconds(let length), .nanoseconds(let period)):
            return length >= 1 && period >= length ? nil : "needs 0 < length <= period"
        default:
            return "length and period must both be request counts or both durations"
        }
    }

    /// Whether the burst is on after `requests` decided requests and `elapsed` nanoseconds.
    @inline(__always)
    func isActive(requests: Int, elapsed: Int64) -> Bool {
        switch (length, period) {
        case (.requests(let length), .requests(let period)):
            return requests % period >= period - length
        case (.nanoseconds(let length), .nanoseconds(let period)):
            return elapsed % period >= period - length
        default:
            return false
        }
    }

    public var description: String {
        func text(_ window: Window) -> String {
            switch window {
            case .requests(let count): "\(count)"
            case .nanoseconds(let nanoseconds): "\(nanoseconds)ns"
            }
        }
        return "\(rule):\(text(length))/\(text(period))"
    }
}

/// Abrupt disconnects: a share of connections is reset (TCP RST, no GOAWAY, no TLS close_notify) right after
/// its `afterRequests`-th request is decided. Responses already handed to the kernel arrive; the rest of
/// what the connection had in flight does not: requests decided but not yet answered (accepted and logged,
/// their answer lost), and requests not yet decided (never processed).
public struct ConnectionResetRule: Sendable, Equatable, CustomStringConvertible {
    /// Share of connections (drawn once per connection) that get reset.
    public var probability: Double
    /// Requests decided on the connection before the reset (the last of them is never answered).
    public var afterRequests: Int

    public init(probability: Double, afterRequests: Int) {
        self.probability = probability
        self.afterRequests = afterRequests
    }

    /// Parses `probability:requests`, e.g. `0.5:1000`.
    public init(parsing text: String) throws(SimulatorConfigurationError) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let probability = parseProbability(parts[0]), let after = Int(parts[1]), after >= 1
        else {
            throw .badSpelling(
                what: "connection reset", text: text,
                expected: "probability:requests with a probability in 0...1 and at least 1 request (e.g. 0.5:1000)")
        }
        self.init(probability: probability, afterRequests: after)
    }

    public var description: String { "\(probability):\(afterRequests)" }
}

/// Late answers: a share of requests is decided at once (an accepted push is logged) but answered only
/// after `delayNanoseconds`, e.g. past a client's request deadline. Drawn per request, instead of the
/// latency model.
public struct HeldResponseRule: Sendable, Equatable, CustomStringConvertible {
    public var probability: Double
    public var delayNanoseconds: Int64

    public init(probability: Double, delayNanoseconds: Int64) {
        self.probability = probability
        self.delayNanoseconds = delayNanoseconds
    }

    /// Parses `probability:duration`, e.g. `0.001:30s`.
    public init(parsing text: String) throws(SimulatorConfigurationError) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let probability = parseProbability(parts[0]),
            let delay = LatencyModel.parseDuration(String(parts[1])), delay > 0
        else {
            throw .badSpelling(
                what: "held responses", text: text,
                expected: "probability:duration with a probability in 0...1 and a positive duration (e.g. 0.001:30s)")
        }
        self.init(probability: probability, delayNanoseconds: delay)
    }

    public var description: String { "\(probability):\(delayNanoseconds)ns" }
}

/// A probability written as a decimal in 0...1.
func parseProbability(_ text: Substring) -> Double? {
    guard let value = Double(text), value >= 0, value <= 1 else { return nil }
    return value
}

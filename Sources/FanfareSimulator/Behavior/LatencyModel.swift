#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How long the simulator waits before answering a request (the server schedules the response on its
/// timer wheel). Sampling allocates nothing; randomness comes from the worker's seeded PRNG.
public enum LatencyModel: Sendable, Equatable {
    /// Answer at once.
    case none
    /// Always the same delay.
    case fixed(nanoseconds: Int64)
    /// Uniform in `min...max`.
    case uniform(minNanoseconds: Int64, maxNanoseconds: Int64)
    /// Log-normal with the given median and 99th percentile (a long right tail, like a real service).
    /// Samples are capped at 10 × p99 so one draw cannot stall a stream for minutes.
    case longTail(medianNanoseconds: Int64, p99Nanoseconds: Int64)

    /// z-score of the 99th percentile of the standard normal distribution.
    static let p99ZScore = 2.326_347_874_040_841

    /// One delay in nanoseconds (≥ 0).
    public func sample<R: RandomNumberGenerator>(using random: inout R) -> Int64 {
        switch self {
        case .none:
            return 0
        case .fixed(let nanoseconds):
            return max(0, nanoseconds)
        case .uniform(let low, let high):
            guard high > low else { return max(0, low) }
            return max(0, low + Int64(random.next() % UInt64(high - low + 1)))
        case .longTail(let median, let p99):
            guard median > 0 else { return 0 }
            guard p99 > median else { return median }
            let sigma = log(Double(p99) / Double(median)) / Self.p99ZScore
            let value = Double(median) * exp(sigma * Self.standardNormal(using: &random))
            return Int64(min(value, 10 * Double(p99)))
        }
    }

    /// One standard-normal draw (Box–Muller; the second variate is discarded to keep the model stateless).
    static func standardNormal<R: RandomNumberGenerator>(using random: inout R) -> Double {
        // u1 in (0, 1] so log(u1) is finite.
        let u1 = (Double(random.next() >> 11) + 1) * 0x1p-53
        let u2 = Double(random.next() >> 11) * 0x1p-53
        return (-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2)
    }

    /// Validates the parameters; a description of the problem, or nil.
    var problem: String? {
        switch self {
        case .none:
            return nil
        case .fixed(let nanoseconds):
            return nanoseconds < 0 ? "latency must not be negative" : nil
        case .uniform(let low, let high):
            return low < 0 || high < low ? "uniform latency needs 0 <= min <= max" : nil
        case .longTail(let median, let p99):
            return median <= 0 || p99 < median ? "long-tail latency needs 0 < median <= p99" : nil
        }
    }
}

extension LatencyModel {
    /// Parses a command-line spelling: `none`, `fixed:5ms`, `uniform:1ms-5ms`, `longtail:2ms-40ms`
    /// (median-p99). Durations take `ns`, `us`, `ms` or `s`.
    public init(parsing text: String) throws(SimulatorConfigurationError) {
        let lowered = text.lowercased()
        if lowered == "none" || lowered == "0" {
            self = .none
            return
        }
        let parts = lowered.split(separator: ":", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { throw Self.badSpelling(text) }
        let bounds = parts[1].split(separator: "-", omittingEmptySubsequences: false).map(String.init)
        let values = bounds.compactMap(Self.parseDuration)
        guard values.count == bounds.count else { throw Self.badSpelling(text) }
        let model: LatencyModel
        switch (parts[0], values.count) {
        case ("fixed", 1): model = .fixed(nanoseconds: values[0])
        case ("uniform", 2): model = .uniform(minNanoseconds: values[0], maxNanoseconds: values[1])
        case ("longtail", 2): model = .longTail(medianNanoseconds: values[0], p99Nanoseconds: values[1])
        default: throw Self.badSpelling(text)
        }
        if let problem = model.problem { throw .invalid(field: "latency", problem: problem) }
        self = model
    }

    private static func badSpelling(_ text: String) -> SimulatorConfigurationError {
        .invalid(
            field: "latency",
            problem:
                "'\(text)' is not none, fixed:<d>, uniform:<min>-<max> or longtail:<median>-<p99> (e.g. longtail:2ms-40ms)"
        )
    }

    /// `250us` → 250 000 ns. Nil for a missing or unknown unit or a negative/non-numeric amount.
    static func parseDuration(_ text: String) -> Int64? {
        let units: [(String, Double)] = [("ns", 1), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
        for (suffix, scale) in units where text.hasSuffix(suffix) {
            guard let amount = Double(text.dropLast(suffix.count)), amount >= 0, amount.isFinite else { return nil }
            return Int64((amount * scale).rounded())
        }
        return nil
    }
}

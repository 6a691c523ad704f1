#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A wall-clock instant, in nanoseconds since the UNIX epoch.
///
/// Every time-dependent rule (JWT age, token refresh interval, per-token rate windows, 410 timestamps)
/// takes an instant as an argument instead of reading a clock, so tests inject time and a worker reads
/// the clock once per event-loop tick.
public struct SimulatorInstant: Sendable, Hashable, Comparable {
    public var nanosecondsSinceEpoch: Int64

    public init(nanosecondsSinceEpoch: Int64) {
        self.nanosecondsSinceEpoch = nanosecondsSinceEpoch
    }

    public init(seconds: Int64, nanoseconds: Int64 = 0) {
        self.nanosecondsSinceEpoch = seconds * 1_000_000_000 + nanoseconds
    }

    /// Whole seconds since the epoch (JWT `iat` units).
    public var seconds: Int64 { nanosecondsSinceEpoch / 1_000_000_000 }
    /// Milliseconds since the epoch (the unit of the 410 `timestamp`).
    public var milliseconds: Int64 { nanosecondsSinceEpoch / 1_000_000 }

    public func adding(seconds: Int64) -> SimulatorInstant {
        SimulatorInstant(nanosecondsSinceEpoch: nanosecondsSinceEpoch + seconds * 1_000_000_000)
    }

    public static func < (lhs: SimulatorInstant, rhs: SimulatorInstant) -> Bool {
        lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch
    }

    /// The real time (`CLOCK_REALTIME`); a vDSO call, no syscall in practice.
    public static func now() -> SimulatorInstant {
        var spec = timespec()
        let result = clock_gettime(CLOCK_REALTIME, &spec)
        precondition(result == 0, "clock_gettime(CLOCK_REALTIME) failed")
        return SimulatorInstant(seconds: Int64(spec.tv_sec), nanoseconds: Int64(spec.tv_nsec))
    }
}

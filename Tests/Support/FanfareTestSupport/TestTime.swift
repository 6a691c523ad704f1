// How long tests wait: liveness bounds, never speed claims.
//
// A bound says how long a test waits for something that must happen before it calls it a hang. Bounds are
// generous, named, and multiplied by one setting, FANFARE_TEST_TIME_SCALE (default 1): a slow or loaded machine
// runs `FANFARE_TEST_TIME_SCALE=3 scripts/test` and gets a slower run that still passes. Behaviour under test
// (a push's deadline, a PING timeout, a lease) is configured by the test, not scaled here.
import Foundation

public enum TestTime {
    /// FANFARE_TEST_TIME_SCALE, read once: a number from 1 to 100.
    public static let scale: Double = {
        guard let text = ProcessInfo.processInfo.environment["FANFARE_TEST_TIME_SCALE"], !text.isEmpty else { return 1 }
        guard let value = Double(text), value >= 1, value <= 100 else {
            FileHandle.standardError.write(
                Data("FANFARE_TEST_TIME_SCALE must be a number from 1 to 100 (got '\(text)'); unset it for 1\n".utf8))
            exit(64)
        }
        return value
    }()

    /// `duration` times the scale.
    public static func scaled(_ duration: Duration) -> Duration { duration * scale }
}

/// The named liveness bounds, before scaling: every helper that waits (`eventually`, `ChildProcess.run`, the
/// process and HTTP helpers of the test targets) scales the bound it is given.
public enum Liveness {
    /// Something a test waits for: answers to its pushes, a wave's completion, a count or a state.
    public static let condition: Duration = .seconds(60)
    /// A child process to come up (listening, ready) or to exit after it was asked to.
    public static let process: Duration = .seconds(120)
    /// A whole command a test runs to its end (a fanfare subcommand, h2load, nghttp, psql, initdb).
    public static let command: Duration = .seconds(180)
}

/// Polls `condition` every few milliseconds until it holds or `timeout` (scaled) passes; a throw counts as
/// "not yet". A hang guard: the condition decides, never the time.
public func eventually(
    timeout: Duration = Liveness.condition, _ condition: () async throws -> Bool
) async -> Bool {
    let deadline = ContinuousClock.now + TestTime.scaled(timeout)
    while ContinuousClock.now < deadline {
        if (try? await condition()) == true { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return (try? await condition()) == true
}

import Foundation
import Glibc

/// The wall-clock and CPU time of each phase of a demo run, for the line that ends it: on a shared or small
/// machine the wall time alone does not say whether a phase was slow or waited for the CPU.
final class DemoPhases {
    struct Phase {
        let name: String
        let wallSeconds: Double
        /// User + system time of the whole process (every thread: engine, simulator, registry) in the phase.
        let cpuSeconds: Double
    }

    private(set) var phases: [Phase] = []
    private let runStarted = ContinuousClock.now
    private var phaseStarted = ContinuousClock.now
    private var phaseCPUStartedSeconds = DemoPhases.processCPUSeconds()

    /// Ends the running phase under `name` (the next one starts now) and returns its wall-clock seconds.
    @discardableResult
    func end(_ name: String) -> Double {
        let now = ContinuousClock.now
        let cpuSeconds = Self.processCPUSeconds()
        let phase = Phase(
            name: name, wallSeconds: Self.seconds(now - phaseStarted), cpuSeconds: cpuSeconds - phaseCPUStartedSeconds)
        phases.append(phase)
        phaseStarted = now
        phaseCPUStartedSeconds = cpuSeconds
        return phase.wallSeconds
    }

    /// `phases (wall / CPU): registration 6.6 / 7.0 s, ...; total 25.1 s wall, 33.9 s CPU`.
    var summary: String {
        let total = Self.seconds(ContinuousClock.now - runStarted)
        let cpu = Self.processCPUSeconds()
        let parts = phases.map { "\($0.name) \(Self.format($0.wallSeconds)) / \(Self.format($0.cpuSeconds)) s" }
        return "phases (wall / CPU): \(parts.joined(separator: ", ")); total \(Self.format(total)) s wall, "
            + "\(Self.format(cpu)) s CPU (user + sys, every thread of the process)"
    }

    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    private static func format(_ seconds: Double) -> String {
        String(format: seconds < 10 ? "%.2f" : "%.1f", seconds)
    }
}

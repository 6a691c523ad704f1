@testable import FanfareClient
import FanfareCore
@testable import FanfareFanout
import Foundation
import Testing

/// A rule a seeded schedule broke: where, and the steps that led there. The seed replays it exactly.
struct ScheduleFailure: Error, CustomStringConvertible {
    /// "shard" or "engine": which schedule (`scripts/simulate-shard --only <schedule>` runs it alone).
    let schedule: String
    let seed: UInt64
    let step: Int
    let what: String
    let lastSteps: [String]

    var description: String {
        "\(schedule) schedule, seed \(seed), step \(step): \(what)\n"
            + "  replay: FANFARE_SCHEDULE_SEED=\(seed) scripts/simulate-shard --only \(schedule)\n  last steps:\n    "
            + lastSteps.joined(separator: "\n    ")
    }
}

/// The last steps of a schedule and its first broken rule (later ones follow from it and say less).
struct ScheduleLog {
    let schedule: String
    let seed: UInt64
    private(set) var step = 0
    private var history: [String] = []
    private(set) var failure: ScheduleFailure?

    init(schedule: String, seed: UInt64) {
        self.schedule = schedule
        self.seed = seed
    }

    mutating func nextStep() { step += 1 }

    mutating func note(_ text: String) {
        history.append("\(step): \(text)")
        if history.count > 40 { history.removeFirst(history.count - 40) }
    }

    mutating func fail(_ what: String) {
        guard failure == nil else { return }
        failure = ScheduleFailure(schedule: schedule, seed: seed, step: step, what: what, lastSteps: history)
    }

    /// Throws the broken rule, if any.
    func check() throws {
        if let failure { throw failure }
    }
}

/// Which seeds a schedule test runs: `FANFARE_SCHEDULE_SEED` alone, else `FANFARE_SCHEDULE_SEEDS` of them from
/// `FANFARE_SCHEDULE_FIRST_SEED` (default: seeds 1...`defaultCount`); `FANFARE_SCHEDULE_STEPS` steps each.
enum ScheduleSeeds {
    static func run(_ schedule: String, defaultCount: UInt64, body: (_ seed: UInt64, _ steps: Int) throws -> Void) {
        let environment = ProcessInfo.processInfo.environment
        func number(_ name: String) -> UInt64? { environment[name].flatMap { UInt64($0) } }
        let seeds: [UInt64]
        if let one = number("FANFARE_SCHEDULE_SEED") {
            seeds = [one]
        } else {
            let first = number("FANFARE_SCHEDULE_FIRST_SEED") ?? 1
            seeds = Array(first..<first + (number("FANFARE_SCHEDULE_SEEDS") ?? defaultCount))
        }
        let steps = Int(number("FANFARE_SCHEDULE_STEPS") ?? 400)
        // A seed that traps (an assertion in the code under test) ends the process before it can be named:
        // with FANFARE_SCHEDULE_TRACE set, each seed is named as it starts (scripts/simulate-shard shows the last).
        let trace = environment["FANFARE_SCHEDULE_TRACE"] != nil
        var failures = 0
        for (done, seed) in seeds.enumerated() {
            if trace {
                print("\(schedule) schedule: seed \(seed)")
                fflush(nil)  // every C stream: the line must be out before a trap
            }
            do {
                try body(seed, steps)
            } catch {
                failures += 1
                Issue.record("\(error)")
                if failures == 3 { break }  // the first few say enough; each replays from its seed
            }
            if seeds.count >= 1_000 && (done + 1) % 1_000 == 0 {
                print("\(schedule) schedules: \(done + 1) of \(seeds.count) seeds run, \(failures) failed")
            }
        }
    }
}

extension SeededRandom {
    /// What APNs (or the connection) answered a push: mostly 200, then every kind of refusal and failure.
    /// `badTokenPercent`: that share more of BadDeviceToken / DeviceTokenNotForTopic (an engine pointed at the
    /// wrong environment or app), enough to open the invalid-token breaker.
    mutating func apnsAnswer(badTokenPercent: Int = 0) -> PushDisposition {
        if badTokenPercent > 0 && chance(badTokenPercent) {
            return ShardDriver.rejected(chance(70) ? .badDeviceToken : .deviceTokenNotForTopic)
        }
        switch weighted([60, 5, 5, 2, 8, 5, 4, 3, 2, 2, 2, 2]) {
        case 0: return .delivered
        case 1:
            // A 410 may be older than the token's registration (stale news), or newer.
            let timestamp: Int64? = chance(50) ? nil : Int64(pick([1_000, 2_000_000_000])) * 1000
            return ShardDriver.rejected(.unregistered, timestamp: timestamp)
        case 2: return ShardDriver.rejected(.badDeviceToken)
        case 3: return ShardDriver.rejected(.deviceTokenNotForTopic)
        case 4: return ShardDriver.rejected(.tooManyRequests)
        case 5: return ShardDriver.rejected(chance(50) ? .internalServerError : .serviceUnavailable)
        case 6: return .failed(.deadlineExceeded)
        case 7: return .failed(.unconfirmed(cause: "connection reset"))
        case 8: return .failed(.resendLimitReached(lastCause: "refused"))
        case 9: return ShardDriver.rejected(.badTopic)
        case 10: return ShardDriver.rejected(.payloadTooLarge)
        default: return ShardDriver.rejected(.expiredProviderToken)
        }
    }
}

/// A seeded schedule: random steps, the rules checked after each, then everything settled and checked once more.
protocol SeededSchedule: AnyObject {
    var log: ScheduleLog { get set }
    func takeStep()
    /// What holds after every step.
    func check()
    /// Lets everything finish, then checks what must hold at the end.
    func settle()
}

extension SeededSchedule {
    /// Runs `steps` random steps, then lets everything settle; throws the first broken rule.
    func run(steps: Int) throws {
        for _ in 0..<steps {
            log.nextStep()
            takeStep()
            check()
            try log.check()
        }
        settle()
        try log.check()
    }
}

extension InvalidTokenBreakerConfiguration {
    /// A breaker as a seed draws it: on or off, its window, how many suspects and what share open it.
    static func seeded(using random: inout SeededRandom) -> InvalidTokenBreakerConfiguration {
        var configuration = InvalidTokenBreakerConfiguration()
        configuration.isEnabled = random.chance(60)
        configuration.window = random.int(8...40)
        configuration.minimumSuspects = random.int(2...8)
        configuration.maximumShare = random.pick([0.2, 0.5])
        return configuration
    }
}

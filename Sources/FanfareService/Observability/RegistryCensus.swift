import FanfareStorage
import Synchronization

/// The registry's token count for `/readyz` and `/metrics`. Those are asked by load balancers and scrapers, at
/// any rate and without a key, and a count holds the registry's connection, the one checkpoints and publishes
/// wait for: so at most one count runs at a time, and a reading answers every probe for `maximumAge`.
/// A reading also stays ten times as long as its count took, so counts hold that connection at most a tenth of
/// the time however large the registry. A write through this node's API (`invalidate`) makes the next probe
/// count again, so a caller that registered reads its own write. Writes elsewhere (other nodes, `fanfare
/// import`, pruning) show within the age.
package final class RegistryCensus: Sendable {
    private struct Reading {
        var outcome: Result<Int, RegistryError>
        var takenAt: ContinuousClock.Instant
        /// How long the count took.
        var took: Duration
        /// `State.writes` when the count began: a write after that may be missing from it.
        var writes: UInt64
    }

    private struct State {
        var reading: Reading?
        /// Writes through this node's API so far (`invalidate`).
        var writes: UInt64 = 0
        /// Probes waiting for the count in flight (nil: none in flight).
        var waiting: [CheckedContinuation<Void, Never>]?
    }

    private let state = Mutex(State())
    private let maximumAge: Duration
    /// Counts the registry (on a blocking thread); throws `RegistryError`, or a problem when the service stops.
    private let count: @Sendable () async throws -> Int

    package init(maximumAge: Duration = .seconds(1), count: @escaping @Sendable () async throws -> Int) {
        self.maximumAge = maximumAge
        self.count = count
    }

    /// A registration or removal through this node's API went through: the next probe counts again.
    package func invalidate() { state.withLock { $0.writes &+= 1 } }

    /// The token count: the last reading while it is fresh and no write of this node came after its start; else
    /// a new count, one at a time (a probe that finds one in flight waits for it, then looks again).
    package func tokens() async throws -> Int {
        while true {
            let now = ContinuousClock.now
            enum Next {
                case answer(Result<Int, RegistryError>)
                case wait
                case count(writes: UInt64)
            }
            let next = state.withLock { state -> Next in
                if let reading = state.reading, reading.writes == state.writes, now - reading.takenAt < keep(reading) {
                    return .answer(reading.outcome)
                }
                if state.waiting != nil { return .wait }
                state.waiting = []
                return .count(writes: state.writes)
            }
            switch next {
            case .answer(let outcome): return try outcome.get()
            case .wait:
                await withCheckedContinuation { continuation in
                    let inFlight = state.withLock { state -> Bool in
                        guard state.waiting != nil else { return false }
                        state.waiting?.append(continuation)
                        return true
                    }
                    if !inFlight { continuation.resume() }
                }
            case .count(let writes):
                let outcome: Result<Int, RegistryError>
                do {
                    outcome = .success(try await count())
                } catch let error as RegistryError {
                    outcome = .failure(error)
                } catch {
                    finish(nil)  // the service is stopping: nothing to keep
                    throw error
                }
                finish(Reading(outcome: outcome, takenAt: now, took: ContinuousClock.now - now, writes: writes))
                return try outcome.get()
            }
        }
    }

    /// How long `reading` answers probes: a failure no longer than `maximumAge` (the database may be back).
    private func keep(_ reading: Reading) -> Duration {
        if case .failure = reading.outcome { return maximumAge }
        return max(maximumAge, reading.took * 10)
    }

    /// Keeps `reading` (nil: none) and wakes the probes that waited for it (they look again).
    private func finish(_ reading: Reading?) {
        let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            if let reading { state.reading = reading }
            defer { state.waiting = nil }
            return state.waiting ?? []
        }
        for continuation in waiting { continuation.resume() }
    }
}

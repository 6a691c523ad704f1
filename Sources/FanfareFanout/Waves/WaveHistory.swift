import Synchronization

/// The waves `FanoutEngine.waves` shows: every unfinished wave, and the newest `retained` complete ones
/// (dropped earlier once `maximumAge` past their completion). Bounded, so a long run does not keep every
/// report it ever made; its own lock, so reading it never holds up a publish.
final class WaveHistory: Sendable {
    private struct State {
        /// In id order (the engine appends under its control lock, in id order).
        var waves: [Wave] = []
        var appendedSincePrune = 0
    }

    private let state = Mutex(State())
    let retained: Int
    /// ns; nil keeps complete waves by count only.
    let maximumAge: UInt64?

    init(retained: Int, maximumAge: UInt64?) {
        self.retained = retained
        self.maximumAge = maximumAge
    }

    /// Pruning walks the list once per `pruneEvery` appends, so a publish costs O(1) amortised.
    private var pruneEvery: Int { max(64, retained / 4) }

    func append(_ wave: Wave) {
        state.withLock { state in
            state.waves.append(wave)
            state.appendedSincePrune += 1
            if state.appendedSincePrune >= pruneEvery { prune(&state) }
        }
    }

    /// The retained waves, oldest first.
    var recent: [Wave] {
        state.withLock { state in
            prune(&state)
            return state.waves
        }
    }

    /// A retained wave by id.
    func wave(id: UInt64) -> Wave? {
        state.withLock { state in
            var low = 0
            var high = state.waves.count
            while low < high {
                let middle = (low + high) / 2
                if state.waves[middle].id < id { low = middle + 1 } else { high = middle }
            }
            return low < state.waves.count && state.waves[low].id == id ? state.waves[low] : nil
        }
    }

    private func prune(_ state: inout State) {
        state.appendedSincePrune = 0
        let now = monotonicNow()
        var completeToKeep = retained
        var kept = 0
        var keep = Array(repeating: false, count: state.waves.count)
        // Newest first: the first `retained` complete waves (young enough) stay, and every unfinished one.
        for index in state.waves.indices.reversed() {
            let wave = state.waves[index]
            guard let completedAt = wave.completedAt else {
                keep[index] = true
                continue
            }
            if completeToKeep > 0 && (maximumAge.map { now &- completedAt < $0 } ?? true) {
                keep[index] = true
                completeToKeep -= 1
            }
        }
        for index in state.waves.indices where keep[index] {
            state.waves[kept] = state.waves[index]
            kept += 1
        }
        state.waves.removeLast(state.waves.count - kept)
    }
}

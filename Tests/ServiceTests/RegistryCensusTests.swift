// Issue 24: `/readyz` and `/metrics` counted the registry on its one connection (the one checkpoints and
// publishes use) at every probe, with no key: load-balancer probes, or anyone, could queue counts ahead of the
// waves. `RegistryCensus` runs at most one count at a time and answers probes from a fresh reading.
import FanfareService
import FanfareStorage
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@Suite(.ownThread) struct RegistryCensusTests {
    /// A registry count the test holds until it lets it finish, counting how often it was asked.
    final class HeldCount: Sendable {
        let started = Atomic<Int>(0)
        private let gate = Mutex<(open: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))
        let result = Mutex<Result<Int, RegistryError>>(.success(42))

        func count() async throws -> Int {
            started.add(1, ordering: .relaxed)
            await withCheckedContinuation { continuation in
                let open = gate.withLock { gate -> Bool in
                    if !gate.open { gate.waiting.append(continuation) }
                    return gate.open
                }
                if open { continuation.resume() }
            }
            return try result.withLock { $0 }.get()
        }

        func open() {
            let waiting = gate.withLock { gate in
                gate.open = true
                defer { gate.waiting = [] }
                return gate.waiting
            }
            for continuation in waiting { continuation.resume() }
        }
    }

    @Test func fiftyProbesAtOnceRunOneCountAndAFreshReadingAnswersTheNext() async throws {
        let held = HeldCount()
        let census = RegistryCensus(maximumAge: .seconds(3600)) { try await held.count() }
        let answers = Task {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<50 { group.addTask { try await census.tokens() } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
        }
        #expect(await eventually { held.started.load(ordering: .relaxed) == 1 })
        held.open()
        let values = try await answers.value
        #expect(values.count == 50 && values.allSatisfy { $0 == 42 })
        #expect(held.started.load(ordering: .relaxed) == 1, "one count for fifty probes")

        // Fresh: answered without counting. A write through the API: the next probe counts again.
        #expect(try await census.tokens() == 42)
        #expect(held.started.load(ordering: .relaxed) == 1)
        held.result.withLock { $0 = .success(43) }
        census.invalidate()
        #expect(try await census.tokens() == 43)
        #expect(held.started.load(ordering: .relaxed) == 2)
    }

    @Test func aDatabaseOutOfReachIsTheProbesAnswerUntilACountWorksAgain() async throws {
        let held = HeldCount()
        held.open()
        let census = RegistryCensus(maximumAge: .zero) { try await held.count() }
        held.result.withLock { $0 = .failure(.unavailable("cannot connect to PostgreSQL")) }
        await #expect(throws: RegistryError.unavailable("cannot connect to PostgreSQL")) {
            _ = try await census.tokens()
        }
        held.result.withLock { $0 = .success(7) }
        #expect(try await census.tokens() == 7, "a reading is kept no longer than its age (here none)")
    }
}

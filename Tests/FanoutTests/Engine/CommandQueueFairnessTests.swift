// The engine's command queue is fair: while publishers keep it full, single pushes and registrations still get
// through, each within a liveness bound (a final of a tournament is a machine whose publishers never pause).
import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareIO
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

@Suite(.ownThread) struct CommandQueueFairnessTests {
    @Test func singlePushesAndRegistrationsProgressWhilePublishersKeepTheQueueFull() async throws {
        var simulator = SimulatorConfiguration()
        simulator.latency = .fixed(nanoseconds: 2_000_000)
        let fixture = try FanoutFixture(simulator)
        defer { fixture.harness.shutdown() }
        for publisher in 0..<2 {
            try fixture.store.register(
                FanoutFixture.registrations(publisher * 1_000..<publisher * 1_000 + 500, channel: "flood-\(publisher)"))
        }
        // A small queue, so the publishers fill their half of it at once.
        let engine = try fixture.engine { $0.commandQueueCapacity = 64 }
        defer { engine.shutdown() }
        let stop = Atomic<Bool>(false)
        let published = Atomic<Int>(0)
        var threads: [Thread] = []
        for publisher in 0..<2 {
            // Flat out: no pause between publishes, a refusal (back-pressure, too many unfinished waves) retried at once.
            threads.append(
                Thread {
                    var timestamp: Int64 = 1_800_000_000
                    while !stop.load(ordering: .relaxed) {
                        timestamp += 1
                        if (try? engine.publish(
                            try scoreUpdate(channel: "flood-\(publisher)", timestamp: timestamp, home: 0, away: 0)))
                            != nil
                        {
                            published.add(1, ordering: .relaxed)
                        }
                    }
                })
        }
        for thread in threads { thread.start() }
        defer {
            stop.store(true, ordering: .relaxed)
            for thread in threads { thread.join() }
        }
        #expect(await eventually { published.load(ordering: .relaxed) >= 50 }, "the publishers never got going")

        // Each single push and each registration, one after another while the flood goes on, gets through.
        var content = LiveActivityContent(event: .update, timestamp: 1_800_000_000)
        content.contentState = try RawJSON(validating: #"{"home":0,"away":0}"#)
        for round in 0..<20 {
            let result = try await engine.push(content, to: longToken(100_000 + round))
            #expect(result.isDelivered, "single push \(round): \(result.disposition)")
            try await BlockingHandOff.run(name: "register") {
                try engine.register(
                    FanoutFixture.registrations(200_000 + round * 10..<200_000 + round * 10 + 10, channel: "late"))
            }
        }
        let summary = await engine.channelSummary("late")
        #expect(
            summary?.updateTokens == 200,
            "registrations applied to the shards: \(String(describing: summary?.updateTokens))")
        #expect(
            published.load(ordering: .relaxed) >= 100,
            "the flood went on meanwhile (\(published.load(ordering: .relaxed)) waves)")
    }
}

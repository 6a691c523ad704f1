// The per-push data path without copies: a producer writes each push straight into the stream slot it is sent
// from (`PushProducer.poll(now:into:)`), and a handler reads each result in place (`pushCompleted(inPlace:)`).
// Both have value forms with defaults (`poll(now:)`, `pushCompleted(_:)`): producers and handlers written for
// either form get every push, exactly once, with the same fields.
import FanfareClient
import FanfareCore
import FanfareSimulator
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Synchronization
import Testing

/// Hands out `total` token pushes; `inPlace` picks which of the two poll forms it implements.
private final class CountingProducer: PushProducer, @unchecked Sendable {
    let total: Int
    let payload: PushPayload
    let inPlace: Bool
    private var sequence = 0  // the worker's thread only
    let inPlaceCalls = Atomic<Int>(0)

    init(total: Int, payload: PushPayload, inPlace: Bool) {
        self.total = total
        self.payload = payload
        self.inPlace = inPlace
    }

    private func next() -> PushJob? {
        guard sequence < total else { return nil }
        // Every third push carries its own apns-id, the rest get the client's.
        let id = sequence % 3 == 0 ? PushIdentifier(String(format: "00000000-0000-4000-8000-%012x", sequence)) : nil
        let job = PushJob(
            token: makeToken(sequence % 500), payload: payload, priority: .normal, apnsID: id, cookie: UInt64(sequence))
        sequence += 1
        return job
    }

    func poll(now: UInt64) -> ProducerPoll {
        guard let job = next() else { return .finished }
        return .push(job)
    }

    func poll(now: UInt64, into job: UnsafeMutablePointer<PushJob>) -> ProducerStatus {
        guard inPlace else {
            // The protocol's default: the value form, moved into the slot.
            switch poll(now: now) {
            case .push(let produced):
                job.initialize(to: produced)
                return .produced
            case .wait(let until): return .wait(until: until)
            case .finished: return .finished
            }
        }
        inPlaceCalls.add(1, ordering: .relaxed)
        guard let produced = next() else { return .finished }
        job.initialize(to: produced)
        return .produced
    }
}

/// Records results through the in-place call (reading each field from the completion) or the value call.
private final class RecordingHandler: PushResultHandler {
    let inPlace: Bool
    private let results = Mutex<[PushResult]>([])
    let inPlaceCalls = Atomic<Int>(0)
    /// Completions whose fields read one by one differed from their `result`.
    let mismatches = Atomic<Int>(0)

    init(inPlace: Bool) { self.inPlace = inPlace }

    func pushCompleted(_ result: PushResult) {
        results.withLock { $0.append(result) }
    }

    func pushCompleted(inPlace completion: borrowing PushCompletion) {
        guard inPlace else {
            pushCompleted(completion.result)
            return
        }
        inPlaceCalls.add(1, ordering: .relaxed)
        // Field by field, so a field the completion reads wrongly shows as a mismatch with `result`.
        var result = PushResult(
            cookie: completion.cookie, target: completion.target, disposition: completion.disposition,
            apnsID: completion.apnsID,
            resends: completion.resends, latencyNanoseconds: completion.latencyNanoseconds, worker: completion.worker)
        result.possibleDuplicate = completion.possibleDuplicate
        let whole = completion.result
        let same =
            whole.cookie == result.cookie && whole.target == result.target && whole.apnsID == result.apnsID
            && whole.disposition == result.disposition && whole.resends == result.resends
            && whole.worker == result.worker
            && whole.latencyNanoseconds == result.latencyNanoseconds
            && whole.possibleDuplicate == result.possibleDuplicate
        if !same { mismatches.add(1, ordering: .relaxed) }  // checked by the test (this is a worker thread)
        results.withLock { $0.append(result) }
    }

    var all: [PushResult] { results.withLock { $0 } }
}

@Suite(.ownThread) struct InPlaceDataPathTests {
    @Test(
        "producers and handlers of either form: every push ends once, with its own token, cookie and apns-id",
        arguments: [(true, true), (true, false), (false, true), (false, false)])
    func everyPushOnce(producerInPlace: Bool, handlerInPlace: Bool) async throws {
        var simulator = SimulatorConfiguration()
        simulator.faults = [FaultRule(reason: .badDeviceToken, probability: 0.01)]
        // Refused streams were never processed: the client resends them (through its pending queue, the path
        // beside the in-place one).
        simulator.refusedStreamProbability = 0.01
        let harness = try TestHarness(simulator)
        defer { harness.shutdown() }
        var configuration = try harness.clientConfiguration()
        configuration.connectionsPerWorker = 2
        configuration.maxConcurrentStreamsPerConnection = 100
        configuration.maxResends = 20
        let total = 3_000
        let producer = CountingProducer(total: total, payload: try updatePayload(), inPlace: producerInPlace)
        let handler = RecordingHandler(inPlace: handlerInPlace)
        let client = try APNsClient(configuration: configuration, resultHandler: handler, producers: [producer])
        defer { client.shutdown() }
        #expect(await eventually(timeout: .seconds(120)) { handler.all.count >= total })
        #expect(client.producersFinished)

        let results = handler.all
        #expect(results.count == total, "one result per push")
        let byCookie = Dictionary(
            results.map { ($0.cookie, $0) },
            uniquingKeysWith: { first, _ in
                Issue.record("cookie \(first.cookie) reported twice")
                return first
            })
        #expect(Set(byCookie.keys) == Set(0..<UInt64(total)))
        for (cookie, result) in byCookie {
            #expect(result.token == makeToken(Int(cookie) % 500), "cookie \(cookie) came back with another token")
            if cookie % 3 == 0 {
                #expect(result.apnsID.description == String(format: "00000000-0000-4000-8000-%012x", Int(cookie)))
            }
            if case .failed = result.disposition { Issue.record("cookie \(cookie) failed: \(result.disposition)") }
        }
        #expect(Set(results.map(\.apnsID.description)).count == total, "every push has its own apns-id")
        #expect(results.contains { $0.resends > 0 }, "some pushes were refused and resent")
        #expect(results.contains { !$0.isDelivered } && results.contains(where: \.isDelivered))
        #expect((producer.inPlaceCalls.load(ordering: .relaxed) > 0) == producerInPlace)
        #expect(handler.inPlaceCalls.load(ordering: .relaxed) == (handlerInPlace ? total : 0))
        #expect(handler.mismatches.load(ordering: .relaxed) == 0)
    }
}

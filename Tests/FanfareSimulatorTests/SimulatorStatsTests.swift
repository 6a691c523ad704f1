import FanfareCore
import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct SimulatorStatsTests {
    func sample() -> SimulatorStats {
        var stats = SimulatorStats()
        for _ in 0..<3 { stats.record(.accept, bodyBytes: 100) }
        stats.record(.reject(.unregistered, timestamp: 5), bodyBytes: 50)
        stats.record(.reject(.badDeviceToken, timestamp: nil), bodyBytes: 10)
        stats.record(.reject(.badDeviceToken, timestamp: nil), bodyBytes: 10)
        stats.connectionsOpened = 2
        stats.connectionsClosed = 1
        stats.goAwaysSent = 1
        return stats
    }

    @Test func recordsCountsByReasonStatusAndBytes() {
        let stats = sample()
        #expect(stats.accepted == 3)
        #expect(stats.count(of: .badDeviceToken) == 2)
        #expect(stats.count(of: .unregistered) == 1)
        #expect(stats.count(of: .shutdown) == 0)
        #expect(stats.count(status: 200) == 3)
        #expect(stats.count(status: 400) == 2)
        #expect(stats.count(status: 410) == 1)
        #expect(stats.totalResponses == 6)
        #expect(stats.requestBodyBytes == 370)
        #expect(stats.acceptedPayloadBytes == 300)
    }

    @Test func mergeAddsEveryCounter() {
        var total = sample()
        total.merge(sample())
        #expect(total.accepted == 6)
        #expect(total.count(of: .badDeviceToken) == 4)
        #expect(total.requestBodyBytes == 740)
        #expect(total.connectionsOpened == 4)
        #expect(total.goAwaysSent == 2)
    }

    @Test func summaryListsResponsesByStatusThenReason() {
        let lines = sample().summary().split(separator: "\n").map(String.init)
        #expect(Array(lines.prefix(3)) == ["200 OK: 3", "400 BadDeviceToken: 2", "410 Unregistered: 1"])
        #expect(lines.contains("total responses: 6"))
        #expect(lines.contains("connections opened: 2"))
        #expect(lines.contains("GOAWAYs sent: 1"))
        #expect(!lines.contains { $0.contains("Shutdown") })
    }

    @Test func summaryJSONParses() throws {
        let json = try #require(
            try JSONSerialization.jsonObject(with: Data(sample().summaryJSON().utf8)) as? [String: Any]
        )
        #expect(json["accepted"] as? Int == 3)
        #expect(json["rejected"] as? Int == 3)
        #expect((json["byStatus"] as? [String: Int]) == ["200": 3, "400": 2, "410": 1])
        #expect((json["byReason"] as? [String: Int]) == ["BadDeviceToken": 2, "Unregistered": 1])
        #expect(json["connectionsClosed"] as? Int == 1)
    }

    @Test func boardMergesTheLatestSnapshotOfEachWorker() async {
        let board = SimulatorStatsBoard(workerCount: 3)
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<3 {
                group.addTask {
                    var local = SimulatorStats()
                    for round in 1...50 {
                        local.record(.accept, bodyBytes: 1)
                        if round % 10 == 0 { board.publish(worker: worker, local) }
                    }
                }
            }
        }
        #expect(board.total().accepted == 150)
        #expect(board.snapshot(worker: 1).accepted == 50)
        var later = board.snapshot(worker: 1)
        later.record(.reject(.shutdown, timestamp: nil), bodyBytes: 0)
        board.publish(worker: 1, later)
        #expect(board.total().count(of: .shutdown) == 1)
        #expect(board.total().accepted == 150)
    }
}

@Suite(.ownThread) struct ErrorResponseBodyTests {
    func body(_ reason: APNsReason, _ timestamp: Int64?) -> String {
        let bodies = ErrorResponseBodies.shared
        var buffer = [UInt8](repeating: 0, count: bodies.maximumByteCount)
        let count = buffer.withUnsafeMutableBytes { bodies.write(reason: reason, timestamp: timestamp, into: $0) }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    @Test func exactBytes() {
        #expect(body(.badDeviceToken, nil) == #"{"reason":"BadDeviceToken"}"#)
        #expect(body(.unregistered, 1_750_000_000_123) == #"{"reason":"Unregistered","timestamp":1750000000123}"#)
        #expect(body(.expiredToken, 0) == #"{"reason":"ExpiredToken","timestamp":0}"#)
    }

    @Test func decisionsWriteTheirBodyAndAcceptWritesNothing() {
        var buffer = [UInt8](repeating: 0, count: 128)
        let accepted = buffer.withUnsafeMutableBytes { ErrorResponseBodies.shared.write(.accept, into: $0) }
        #expect(accepted == 0)
        let count = buffer.withUnsafeMutableBytes {
            ErrorResponseBodies.shared.write(.reject(.tooManyRequests, timestamp: nil), into: $0)
        }
        #expect(String(decoding: buffer[0..<count], as: UTF8.self) == #"{"reason":"TooManyRequests"}"#)
    }

    @Test(arguments: APNsReason.allCases)
    func everyReasonWritesParsableJSONWithinTheMaximum(_ reason: APNsReason) throws {
        let text = body(reason, Int64.max)
        #expect(text.utf8.count <= ErrorResponseBodies.shared.maximumByteCount)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(json["reason"] as? String == reason.rawValue)
    }

    @Test func reasonTableMatchesAllCases() {
        #expect(ReasonTable.all == APNsReason.allCases)
        for (index, reason) in APNsReason.allCases.enumerated() {
            #expect(ReasonTable.index(of: reason) == index)
        }
    }
}

import FanfareCore
import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct AcceptedPushLogTests {
    func temporaryPath(_ name: String) -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fanfare-sim-tests-\(getpid())")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("\(name)-\(UUID().uuidString).jsonl").path
        return path
    }

    func lines(_ path: String) throws -> [[String: Any]] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasSuffix("\n"))
        return try text.split(separator: "\n").map { line in
            try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        }
    }

    let apnsID = "123e4567-e89b-42d3-a456-426614174000"

    @Test func oneParsableLinePerAcceptedPush() throws {
        let path = temporaryPath("basic")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let log = try AcceptedPushLog(path: path)
        var request = TestRequest.valid(token: Fixtures.token80)
        request.set("apns-collapse-id", "score")
        request.body = "{\n  \"aps\" : {\"event\": \"update\", \"content-state\": {\"home\": 2}}\n}"
        let head = request.head()
        try withBytes(apnsID) { try log.append(head, apnsID: $0, now: Fixtures.now) }
        var second = TestRequest.valid()
        second.remove("apns-priority")
        second.remove("apns-expiration")
        let secondHead = second.head()
        try withBytes(apnsID) { try log.append(secondHead, apnsID: $0, now: Fixtures.now.adding(seconds: 1)) }
        try log.close()

        let records = try lines(path)
        #expect(records.count == 2)
        let first = records[0]
        #expect(first["time"] as? Int64 == Fixtures.now.milliseconds)
        #expect(first["token"] as? String == Fixtures.token80)
        #expect(first["topic"] as? String == Fixtures.liveActivityTopic)
        #expect(first["push-type"] as? String == "liveactivity")
        #expect(first["priority"] as? Int == 10)
        #expect(first["apns-id"] as? String == apnsID)
        #expect(first["expiration"] as? Int == 0)
        #expect(first["collapse-id"] as? String == "score")
        let payload = try #require(first["payload"] as? [String: Any])
        let aps = try #require(payload["aps"] as? [String: Any])
        #expect(aps["event"] as? String == "update")
        #expect((aps["content-state"] as? [String: Int]) == ["home": 2])

        let other = records[1]
        #expect(other["priority"] as? Int == 10)  // absent header: APNs default
        #expect(other["expiration"] is NSNull)
        #expect(other["collapse-id"] is NSNull)
        #expect(other["time"] as? Int64 == Fixtures.now.milliseconds + 1000)
    }

    @Test func headerValuesAreEscaped() throws {
        let path = temporaryPath("escape")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let log = try AcceptedPushLog(path: path)
        var head = TestRequest.valid().head()
        // Raw bytes: quote, backslash, newline, control byte, valid UTF-8, and an invalid byte.
        let collapse: [UInt8] = Array("a\"b\\c\nd".utf8) + [0x01] + Array("é".utf8) + [0xFF]
        Array("apns-collapse-id".utf8).withUnsafeBytes { name in
            collapse.withUnsafeBytes { head.add(name: name, value: $0) }
        }
        try withBytes(apnsID) { try log.append(head, apnsID: $0, now: Fixtures.now) }
        try log.close()
        let records = try lines(path)
        #expect(records.count == 1)
        #expect(records[0]["collapse-id"] as? String == "a\"b\\c\nd\u{01}é\u{FFFD}")
    }

    @Test func invalidJSONBodiesAreLoggedAsText() throws {
        let path = temporaryPath("text")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let log = try AcceptedPushLog(path: path)
        var request = TestRequest.valid()
        request.body = "not \"json\"\n"
        let head = request.head()
        try withBytes(apnsID) { try log.append(head, apnsID: $0, now: Fixtures.now) }
        try log.close()
        let records = try lines(path)
        #expect(records[0]["payload"] is NSNull)
        #expect(records[0]["payload-text"] as? String == "not \"json\"\n")
    }

    @Test func broadcastRecordsCarryTheChannel() throws {
        let path = temporaryPath("broadcast")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let log = try AcceptedPushLog(path: path)
        let head = TestRequest.validBroadcast().head()
        try withBytes(apnsID) { try log.append(head, apnsID: $0, now: Fixtures.now) }
        try log.close()
        let record = try lines(path)[0]
        #expect(record["token"] is NSNull)
        #expect(record["channel-id"] as? String == "dHdvLXdheS1jaGFubmVsLWlk")
        #expect(record["priority"] as? Int == 5)
    }

    @Test func recordsStayInTheBufferUntilFlushAndFullBuffersFlushWholeLines() throws {
        let path = temporaryPath("buffer")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let log = try AcceptedPushLog(path: path, bufferCapacity: AcceptedPushLog.minimumBufferCapacity)
        let head = TestRequest.valid().head()
        try withBytes(apnsID) { try log.append(head, apnsID: $0, now: Fixtures.now) }
        #expect(try String(contentsOfFile: path, encoding: .utf8).isEmpty)
        try log.flush()
        #expect(try lines(path).count == 1)
        // Enough records to fill the small buffer several times: every flush must hold whole lines.
        for _ in 0..<500 { try withBytes(apnsID) { try log.append(head, apnsID: $0, now: Fixtures.now) } }
        #expect(try lines(path).count > 1)
        try log.close()
        #expect(try lines(path).count == 501)
        #expect(log.recordCount == 501)
    }

    @Test func hasBufferedRecordsSaysWhenAFlushIsDue() throws {
        let path = temporaryPath("pending")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let log = try AcceptedPushLog(path: path)
        #expect(!log.hasBufferedRecords)
        let head = TestRequest.valid().head()
        try withBytes(apnsID) { try log.append(head, apnsID: $0, now: Fixtures.now) }
        #expect(log.hasBufferedRecords)
        try log.flush()
        #expect(!log.hasBufferedRecords)
        #expect(try lines(path).count == 1)
    }

    /// A writer killed in the middle of a write(2) leaves a line cut short; the next log on the file ends it,
    /// so new records start on lines of their own and only the cut line fails to parse.
    @Test func aLineCutShortByAKilledWriterIsEndedOnReopen() throws {
        let path = temporaryPath("cut")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = try AcceptedPushLog(path: path)
        let head = TestRequest.valid().head()
        try withBytes(apnsID) { try first.append(head, apnsID: $0, now: Fixtures.now) }
        try first.close()
        let whole = try String(contentsOfFile: path, encoding: .utf8)
        try (whole + #"{"time":1750000000000,"token":"ab"#).write(toFile: path, atomically: false, encoding: .utf8)

        let second = try AcceptedPushLog(path: path)
        try withBytes(apnsID) { try second.append(head, apnsID: $0, now: Fixtures.now) }
        try second.close()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let rows = text.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(rows.count == 4 && rows[3].isEmpty, "\(text)")
        #expect(rows[1] == #"{"time":1750000000000,"token":"ab"#)
        #expect(rows[2] == rows[0], "the new record is whole and on its own line")
        // A file that ends with a newline (or is empty) is left alone.
        let third = try AcceptedPushLog(path: path)
        try third.close()
        #expect(try String(contentsOfFile: path, encoding: .utf8) == text)
    }

    @Test func severalWritersCanShareOneFile() async throws {
        let path = temporaryPath("shared")
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    let log = try AcceptedPushLog(path: path, bufferCapacity: AcceptedPushLog.minimumBufferCapacity)
                    let head = TestRequest.valid(token: Fixtures.hexToken(bytes: 32, seed: writer)).head()
                    for _ in 0..<300 {
                        try withBytes("123e4567-e89b-42d3-a456-426614174000") {
                            try log.append(head, apnsID: $0, now: Fixtures.now)
                        }
                    }
                    try log.close()
                }
            }
            try await group.waitForAll()
        }
        let records = try lines(path)
        #expect(records.count == 1200)
        for writer in 0..<4 {
            let token = Fixtures.hexToken(bytes: 32, seed: writer)
            #expect(records.filter { $0["token"] as? String == token }.count == 300)
        }
    }

    @Test func openingAnImpossiblePathThrowsADescriptiveError() {
        #expect {
            _ = try AcceptedPushLog(path: "/nonexistent-directory-fanfare/log.jsonl")
        } throws: { error in
            guard let error = error as? AcceptedPushLogError, case .cannotOpen = error else { return false }
            return error.description.contains("/nonexistent-directory-fanfare/log.jsonl")
        }
    }
}

import FanfareCore
import FanfareTestSupport
import Foundation
import Synchronization
import Testing
@testable import FanfareSimulator

/// Ids from a fixed list, in order (then random ones).
private final class ScriptedIDs: Sendable {
    private let ids: Mutex<[BroadcastChannelID]>

    init(_ texts: [String]) throws {
        ids = Mutex(try texts.map { try BroadcastChannelID($0) })
    }

    func next() -> BroadcastChannelID {
        ids.withLock { $0.isEmpty ? BroadcastChannels.randomID() : $0.removeFirst() }
    }
}

private func temporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "fanfare-channels-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

private let bundle = "com.example.fanfare"
private let idA = "AAAAAAAAAAAAAAAAAAAAAA=="
private let idB = "BBBBBBBBBBBBBBBBBBBBBB=="
private let idC = "CCCCCCCCCCCCCCCCCCCCCC=="

@Suite(.ownThread) struct BroadcastChannelsTests {
    @Test func randomIDsAreSixteenBytesInStandardBase64() {
        var seenSpecial = Set<Character>()
        for _ in 0..<2000 {
            let text = BroadcastChannels.randomID().description
            #expect(text.count == 24 && text.hasSuffix("=="))
            #expect(Data(base64Encoded: text)?.count == 16)
            seenSpecial.formUnion(text.filter { $0 == "/" || $0 == "+" })
        }
        #expect(seenSpecial == ["/", "+"], "ids use the whole alphabet")
    }

    @Test func aDeletedIDIsNeverIssuedAgainEvenAfterARestart() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = ChannelStateFile(path: directory + "/channels")
        let ids = try ScriptedIDs([idA, idA, idB])
        let channels = try BroadcastChannels(
            environment: .production, maxChannelsPerApp: 10, file: file, makeID: ids.next)
        #expect(try channels.create(bundleID: bundle, storagePolicy: 0).id.description == idA)
        #expect(channels.delete(try BroadcastChannelID(idA), bundleID: bundle))
        #expect(
            try channels.create(bundleID: bundle, storagePolicy: 1).id.description == idB, "A was issued once: skipped")

        #expect(channels.hasUnsavedChanges)
        #expect(channels.persist() == nil && !channels.hasUnsavedChanges)

        let restartedIDs = try ScriptedIDs([idA, idB, idC])
        let restarted = try BroadcastChannels(
            environment: .production, maxChannelsPerApp: 10, file: file, makeID: restartedIDs.next)
        #expect(restarted.list(bundleID: bundle).map(\.description) == [idB])
        #expect(restarted.channel(try BroadcastChannelID(idB), bundleID: bundle)?.storagePolicy == 1)
        #expect(try restarted.create(bundleID: bundle, storagePolicy: 0).id.description == idC)
        #expect(!FileManager.default.fileExists(atPath: directory + "/channels.tmp"))
    }

    @Test func theCapIsPerAppAndEnvironment() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = ChannelStateFile(path: directory + "/channels")
        let production = try BroadcastChannels(environment: .production, maxChannelsPerApp: 3, file: file)
        for _ in 0..<3 { _ = try production.create(bundleID: bundle, storagePolicy: 0) }
        #expect(throws: BroadcastChannelError.limitReached(3)) {
            try production.create(bundleID: bundle, storagePolicy: 0)
        }
        _ = try production.create(bundleID: "com.example.other", storagePolicy: 0)
        #expect(production.persist() == nil)
        // A sandbox simulator on the same file: production's channels are not its own.
        let sandbox = try BroadcastChannels(environment: .sandbox, maxChannelsPerApp: 3, file: file)
        #expect(sandbox.list(bundleID: bundle).isEmpty)
        let productionID = try #require(production.list(bundleID: bundle).first)
        #expect(sandbox.channel(productionID, bundleID: bundle) == nil)
        #expect(!sandbox.delete(productionID, bundleID: bundle))
        for _ in 0..<3 { _ = try sandbox.create(bundleID: bundle, storagePolicy: 1) }
        #expect(sandbox.count == 7, "the file keeps both environments")
    }

    /// A save that fails puts the table back to the file's state; the ids handed out stay issued.
    @Test func changesThatCannotBeSavedAreUndone() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/channels"
        let ids = try ScriptedIDs([idA, idB])
        let channels = try BroadcastChannels(
            environment: .production, maxChannelsPerApp: 10, file: ChannelStateFile(path: path), makeID: ids.next)
        _ = try channels.create(bundleID: bundle, storagePolicy: 0)
        #expect(channels.persist() == nil)
        // A directory where the temporary file goes: the next save cannot write it.
        try FileManager.default.createDirectory(atPath: path + ".tmp", withIntermediateDirectories: false)
        _ = try channels.create(bundleID: bundle, storagePolicy: 1)
        #expect(channels.delete(try BroadcastChannelID(idA), bundleID: bundle))
        let problem = try #require(channels.persist())
        #expect(problem.contains(path + ".tmp"))
        #expect(channels.list(bundleID: bundle).map(\.description) == [idA], "back to the file's state")
        #expect(!channels.hasUnsavedChanges)
        #expect(channels.issuedCount == 2, "ids once answered are never issued again")
    }

    @Test(arguments: [
        ("", 1, "the last line is cut short"),
        ("fanfare-simulator-channels 2\n", 1, "not 'fanfare-simulator-channels 1'"),
        ("fanfare-simulator-channels 1\nchannel production 0 \(idA) com.example.fanfare", 2, "cut short"),
        ("fanfare-simulator-channels 1\nchannel production 2 \(idA) com.example.fanfare\n", 2, "storage policy '2'"),
        ("fanfare-simulator-channels 1\nchannel staging 0 \(idA) com.example.fanfare\n", 2, "environment 'staging'"),
        ("fanfare-simulator-channels 1\nchannel production 0 not-base64! com.example.fanfare\n", 2, "bad channel id"),
        ("fanfare-simulator-channels 1\nchannel production 0 \(idA)\n", 2, "a channel line is"),
        ("fanfare-simulator-channels 1\ndeleted \(idA)\ndeleted \(idA)\n", 3, "twice"),
        ("fanfare-simulator-channels 1\nrenamed \(idA)\n", 2, "unknown record"),
    ])
    func aDamagedFileIsAnErrorNamingTheFileAndLine(text: String, line: Int, problem: String) throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/channels"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        #expect {
            _ = try BroadcastChannels(
                environment: .production, maxChannelsPerApp: 10, file: ChannelStateFile(path: path))
        } throws: { error in
            guard let error = error as? ChannelStateFileError, case .damaged(let named, let at, _) = error else {
                return false
            }
            return named == path && at == line && error.description.contains(problem)
                && error.description.contains(path)
        }
    }

    @Test func theFileIsWhatSaveWrote() throws {
        let id = try BroadcastChannelID(idA)
        let saved = SavedChannels(
            channels: [BroadcastChannel(id: id, environment: .sandbox, bundleID: bundle, storagePolicy: 1)],
            issued: [id, try BroadcastChannelID(idB)])
        let bytes = ChannelStateFile.render(saved)
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == "fanfare-simulator-channels 1\nchannel sandbox 1 \(idA) \(bundle)\ndeleted \(idB)\n")
        #expect(try ChannelStateFile(path: "x").parse(bytes) == saved)
    }
}

@Suite(.ownThread) struct ChannelCreateRequestTests {
    @Test(arguments: [
        (
            #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#,
            ChannelCreateRequest.Parsed.request(.init(storagePolicy: 0))
        ),
        (#" { "push-type" : "LiveActivity" , "message-storage-policy" : 1 } "#, .request(.init(storagePolicy: 1))),
        ("{", .rejected(.badRequestPayload)),
        (#"{"message-storage-policy":0,}"#, .rejected(.badRequestPayload)),
        ("7", .rejected(.badRequestParams)),
        (
            #"{"message-storage-policy":0,"message-storage-policy":1,"push-type":"LiveActivity"}"#,
            .rejected(.badRequestParams)
        ),
        (#"{"message-storage-policy":0.0,"push-type":"LiveActivity"}"#, .rejected(.badRequestParams)),
        (#"{"message-storage-policy":-1,"push-type":"LiveActivity"}"#, .rejected(.badRequestParams)),
        (#"{"message-storage-policy":1,"push-type":"liveactivity"}"#, .rejected(.invalidPushType)),
        (#"{"message-storage-policy":1,"push-type":null}"#, .rejected(.invalidPushType)),
        (#"{"message-storage-policy":1}"#, .rejected(.missingPushType)),
    ])
    func bodies(text: String, expected: ChannelCreateRequest.Parsed) {
        let parsed = withBytes(text) { ChannelCreateRequest.parse($0) }
        #expect(parsed == expected, "\(text)")
    }
}

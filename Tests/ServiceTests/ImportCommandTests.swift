// `fanfare import` as a child process: token batch files into a SQLite file and into PostgreSQL, a bad file in
// the middle (nothing of it written, the files before it kept), and a running cluster node that picks the
// imported tokens up from the change feed.
import FanfareSQLite
import FanfareStorage
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite("fanfare import (child processes)", .serialized, .ownThread)
struct ImportCommandTests {
    static func directory() throws -> String {
        let directory = NSTemporaryDirectory() + "fanfare-import-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    static func write(_ body: String, to path: String) throws {
        try body.write(toFile: path, atomically: true, encoding: .utf8)
    }

    @Test(
        "SQLite: files in batches, a push-to-start token and a broadcast subscription; a bad file writes nothing and stops"
    )
    func importsIntoSQLiteAndStopsAtABadFile() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Self.write(registrationBody(0..<2_500, channel: "match"), to: directory + "/a.json")
        try Self.write(
            #"{"tokens":[{"token":"\#(tokenHex(9_000))","kind":"push-to-start","channels":["match"],"device_id":"d","attributes_type":"MatchAttributes"},"#
                + #"{"kind":"broadcast","channels":["match"],"activity_id":"act-b"}]}"#, to: directory + "/b.json")
        // Bad in its second item: the first must not be written either.
        try Self.write(
            #"{"tokens":[{"token":"\#(tokenHex(9_001))","kind":"update","channels":["match"],"activity_id":"x"},"#
                + #"{"token":"\#(tokenHex(9_002))","kind":"update","channels":["match"]}]}"#,
            to: directory + "/bad.json")
        try Self.write(registrationBody(3_000..<3_100, channel: "match"), to: directory + "/after.json")
        let database = directory + "/fanfare.db"

        let first = try await ServeProcess.run(
            ["--database", database, "--bundle-id", ServiceKeys.bundleID, "--batch", "1000", "a.json", "b.json"],
            directory: directory, command: "import")
        #expect(first.status == 0, "\(first.errors)")
        #expect(first.output.contains("2501 tokens registered from 2 files"), "\(first.output)")
        #expect(first.output.contains("1 broadcast subscriptions"), "\(first.output)")

        let second = try await ServeProcess.run(
            ["--database", database, "--bundle-id", ServiceKeys.bundleID, "bad.json", "after.json"],
            directory: directory,
            command: "import")
        #expect(second.status == 65)
        #expect(
            second.errors.contains("bad.json") && second.errors.contains("tokens[1]")
                && second.errors.contains("activity_id"), "\(second.errors)")
        #expect(second.errors.contains("nothing of it was written"), "\(second.errors)")

        let missing = try await ServeProcess.run(
            ["--database", database, "--bundle-id", ServiceKeys.bundleID, "nowhere.json"], directory: directory,
            command: "import")
        #expect(missing.status == 66 && missing.errors.contains("nowhere.json"), "\(missing.errors)")
        let badArguments = try await ServeProcess.run(
            ["--database", database, "--bundle-id", ServiceKeys.bundleID, "--batch", "0", "a.json"],
            directory: directory,
            command: "import")
        #expect(badArguments.status == 64, "\(badArguments.errors)")

        let store = try SQLiteTokenStore(path: database)
        defer { try? store.close() }
        #expect(try store.count() == 2_501, "a.json and b.json's token; nothing of bad.json, nothing after it")
        #expect(try store.subscriptionCounts(bundleID: ServiceKeys.bundleID, environment: .production) == ["match": 1])
    }

    @Test(
        "PostgreSQL: a running node takes the imported tokens into its shards from the change feed; subscriptions, links and the ledger work"
    )
    func importsIntoPostgresWhileANodeRuns() async throws {
        let postgres = try await PostgresServiceProcessTests.onOwnThread { try PostgresServer() }
        defer { postgres.stop() }
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let simulator = try await SimulateProcess([], directory: directory)
        let node = try await ServeProcess(
            simulator.serveArguments + [
                "--listen", "127.0.0.1:0", "--database", postgres.url, "--shards", "2", "--join", "0s",
            ],
            directory: directory, name: "node")
        let client = node.client
        #expect(
            await eventually(timeout: .seconds(120)) { try await client.get("/readyz").status == 200 },
            "\(node.errors.suffix(2000))")

        for (index, start) in stride(from: 0, to: 20_000, by: 5_000).enumerated() {
            try Self.write(registrationBody(start..<start + 5_000, channel: "match"), to: directory + "/\(index).json")
        }
        let imported = try await ServeProcess.run(
            [
                "--database", postgres.url, "--bundle-id", ServiceKeys.bundleID, "--batch", "2500", "--connections",
                "2",
                "0.json", "1.json", "2.json", "3.json",
            ],
            directory: directory, command: "import")
        #expect(imported.status == 0, "\(imported.errors)")
        #expect(imported.output.contains("20000 tokens registered from 4 files"), "\(imported.output)")
        #expect(try postgres.psql("SELECT count(*) FROM tokens") == "20000")
        let fed = await eventually(timeout: .seconds(60)) {
            try await client.get("/readyz").json?["cluster"].flatMap { ($0 as? [String: Any])?["shard_tokens"] as? Int }
                == 20_000
        }
        #expect(fed, "the node's shards hold every imported token")

        // Broadcast subscriptions are kept on PostgreSQL too: from a file, and through the API in a batch with
        // a token.
        try Self.write(
            #"{"tokens":[{"kind":"broadcast","channels":["match"],"activity_id":"act-b"}]}"#,
            to: directory + "/sub.json")
        let subscribed = try await ServeProcess.run(
            ["--database", postgres.url, "--bundle-id", ServiceKeys.bundleID, "sub.json"], directory: directory,
            command: "import")
        #expect(subscribed.status == 0, "\(subscribed.errors)")
        #expect(try postgres.psql("SELECT count(*) FROM broadcast_subscriptions") == "1")
        let mixed = try await client.post(
            "/v1/tokens",
            json:
                #"{"tokens":[{"token":"\#(tokenHex(50_000))","kind":"update","channels":["match"],"activity_id":"a"},"#
                + #"{"kind":"broadcast","channels":["match"],"activity_id":"act-c"}]}"#)
        #expect(mixed.status == 200, "\(mixed)")
        #expect(try postgres.psql("SELECT count(*) FROM tokens") == "20001")
        #expect(try postgres.psql("SELECT count(*) FROM subscription_channels WHERE channel = 'match'") == "2")
        // A link to a given APNs channel, kept in the database for every node.
        let link = try await client.put(
            "/v1/channels/match/broadcast", json: #"{"storage_policy":0,"channel_id":"bWF0Y2gtY2hhbm5lbA=="}"#)
        #expect(link.status == 200, "\(link)")
        #expect(try postgres.psql("SELECT channel_id FROM broadcast_links") == "bWF0Y2gtY2hhbm5lbA==")
        let channel = try await client.get("/v1/channels/match")
        #expect(channel.json?["broadcast_subscribers"] as? Int == 2, "\(channel)")
        // The ledger: an unregistered token's history.
        #expect(try await client.post("/v1/tokens/delete", json: #"{"tokens":["\#(tokenHex(50_000))"]}"#).status == 200)
        let ledger = try await client.get("/v1/tokens/\(tokenHex(50_000))")
        #expect(ledger.status == 200 && ledger.text.contains("unregistered"), "\(ledger)")

        node.signal(SIGTERM)
        #expect(await node.waitForExit() == 0, "\(node.errors.suffix(2000))")
        await simulator.stop()
    }
}

// `BroadcastChannelManager` (the client's own HTTP/2 session over TLS on its io_uring thread) against the
// simulator's channel management listener: create, read, list, delete; request ids given and generated; APNs'
// rejections with their reason, action and request id; a server that is not there or never answers.
import FanfareClient
import FanfareCore
import FanfareIO
import FanfareSimulator
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Foundation
import Glibc
import Testing

@Suite(.ownThread) struct ChannelManagerTests {
    @Test func createReadListDelete() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let manager = try harness.channelManager()
        defer { manager.shutdown() }
        let stored = try await manager.create(storagePolicy: .mostRecentMessageStored)
        let unstored = try await manager.create(storagePolicy: .noMessageStored)
        #expect(stored != unstored)
        #expect(
            try await manager.read(stored)
                == BroadcastChannelInfo(storagePolicy: .mostRecentMessageStored, pushType: "LiveActivity"))
        #expect(try await manager.read(unstored).storagePolicy == .noMessageStored)
        #expect(try await manager.list() == [stored, unstored])
        try await manager.delete(stored)
        #expect(try await manager.list() == [unstored])
        do {
            _ = try await manager.read(stored)
            Issue.record("a deleted channel was read")
        } catch {
            #expect(error.status == 400)
            #expect(error.reason == .channelNotRegistered)
            #expect(error.action == .fixConfiguration)
            #expect(error.operation == .read(stored))
        }
        await harness.shutdown()
        let stats = harness.simulator.managementStatistics()
        #expect(stats.accepted == 7)  // 2 creates, 2 reads, 2 lists, 1 delete
        #expect(stats.count(of: .channelNotRegistered) == 1)
    }

    @Test func requestIDsAreSentAndComeBack() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let manager = try harness.channelManager()
        defer { manager.shutdown() }
        let given = try #require(PushIdentifier("5e0d8a3c-2b8f-4f3e-9c1a-0f6e2d4b7a91"))
        let created = try await manager.perform(.create(.noMessageStored), requestID: given)
        #expect(created.requestID == given)
        #expect(created.status == 201)
        let channel = try #require(created.createdChannel)
        let generated = try await manager.perform(.read(channel))
        #expect(generated.requestID != given)
        #expect(generated.status == 200)
        let deleted = try await manager.perform(.delete(channel), requestID: given)
        #expect(deleted.status == 204)
        #expect(deleted.requestID == given)
        // A rejection keeps the request id too.
        do {
            _ = try await manager.perform(.delete(channel), requestID: given)
            Issue.record("a channel was deleted twice")
        } catch {
            #expect(error.requestID == given)
            #expect(error.reason == .channelNotRegistered)
            #expect("\(error)".contains(given.description))
        }
    }

    /// Calls from many tasks at once share the connection (and its stream limit) and each ends once.
    @Test func concurrentCallsEachEndOnce() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let manager = try harness.channelManager { $0.maximumConcurrentCalls = 4 }
        defer { manager.shutdown() }
        let created = try await withThrowingTaskGroup(of: BroadcastChannelID.self) { group in
            for index in 0..<40 {
                group.addTask {
                    try await manager.create(
                        storagePolicy: index % 2 == 0 ? .noMessageStored : .mostRecentMessageStored)
                }
            }
            var all: [BroadcastChannelID] = []
            for try await channel in group { all.append(channel) }
            return all
        }
        #expect(Set(created).count == 40)
        #expect(Set(try await manager.list()) == Set(created))
    }

    @Test func anUntrustedKeyIsRejectedWithItsReason() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let unknown = try ProviderTokenSigner(
            privateKeyPEMFile: harness.keys.unknownPrivateKeyFile, keyID: Fixture.keyID, teamID: Fixture.teamID)
        let manager = try harness.channelManager(signer: unknown)
        defer { manager.shutdown() }
        do {
            _ = try await manager.list()
            Issue.record("an untrusted key listed channels")
        } catch {
            #expect(error.status == 403)
            #expect(error.reason == .invalidProviderToken)
            #expect(error.action == .fixConfiguration)
        }
    }

    @Test func aBroadcastOnACreatedChannelIsDelivered() async throws {
        let harness = try TestHarness(management: true)
        defer { harness.shutdown() }
        let manager = try harness.channelManager()
        defer { manager.shutdown() }
        let channel = try await manager.create(storagePolicy: .noMessageStored)
        let client = try harness.startClient(try harness.clientConfiguration(), collector: ResultCollector())
        let payload = try BroadcastPublishTests.broadcastPayload(minute: 5)
        let result = try await client.send(PushJob(channel: channel, payload: payload, priority: .normal))
        #expect(result.isDelivered, "\(result.disposition)")
        // Storage policy 0 takes only apns-expiration 0.
        let late = try await client.send(
            PushJob(channel: channel, payload: payload, priority: .normal, expiration: 1_900_000_000))
        guard case .rejected(400, .badExpirationDate?, _, .fixConfiguration, _) = late.disposition else {
            Issue.record("expected 400 BadExpirationDate, got \(late.disposition)")
            return
        }
        try await manager.delete(channel)
        let gone = try await client.send(PushJob(channel: channel, payload: payload, priority: .immediate))
        guard case .rejected(400, .channelNotRegistered?, _, _, _) = gone.disposition else {
            Issue.record("expected 400 ChannelNotRegistered, got \(gone.disposition)")
            return
        }
    }

    @Test func nobodyListeningIsATransportError() async throws {
        // A port that was just free: the connect is refused.
        let (socket, bound) = try Sockets.listen(on: try SocketAddress(ip: "127.0.0.1", port: 0))
        let port = bound.port
        Sockets.close(socket)
        var configuration = ChannelManagementConfiguration(
            host: "127.0.0.1", port: port, tls: SharedKeys.shared.clientTLS, providerTokens: nil,
            bundleID: Fixture.bundleID)
        configuration.requestTimeout = .seconds(20)
        let manager = try BroadcastChannelManager(configuration: configuration)
        defer { manager.shutdown() }
        do {
            _ = try await manager.list()
            Issue.record("listed channels on a closed port")
        } catch {
            guard case .transport(_, mayHaveBeenProcessed: false) = error.kind else {
                Issue.record("expected a transport error, got \(error)")
                return
            }
            #expect(error.action == .retryLater)
        }
    }

    /// A server that accepts the TCP connection and never speaks: the call ends at its deadline.
    @Test func aServerThatNeverAnswersEndsTheCallAtItsDeadline() async throws {
        let (socket, bound) = try Sockets.listen(on: try SocketAddress(ip: "127.0.0.1", port: 0))
        defer { Sockets.close(socket) }
        let port = bound.port
        var configuration = ChannelManagementConfiguration(
            host: "127.0.0.1", port: port, tls: SharedKeys.shared.clientTLS, providerTokens: nil,
            bundleID: Fixture.bundleID)
        configuration.requestTimeout = .milliseconds(300)
        configuration.connectTimeout = .seconds(60)
        let manager = try BroadcastChannelManager(configuration: configuration)
        defer { manager.shutdown() }
        do {
            _ = try await manager.create(storagePolicy: .noMessageStored)
            Issue.record("a silent server created a channel")
        } catch {
            #expect(error.kind == .timedOut, "\(error)")
        }
    }

    @Test func shutdownEndsWaitingCalls() async throws {
        let (socket, bound) = try Sockets.listen(on: try SocketAddress(ip: "127.0.0.1", port: 0))
        defer { Sockets.close(socket) }
        let port = bound.port
        let configuration = ChannelManagementConfiguration(
            host: "127.0.0.1", port: port, tls: SharedKeys.shared.clientTLS, providerTokens: nil,
            bundleID: Fixture.bundleID)
        let manager = try BroadcastChannelManager(configuration: configuration)
        async let listed = manager.list()
        try await Task.sleep(for: .milliseconds(50))
        manager.shutdown()
        do {
            _ = try await listed
            Issue.record("listed channels on a silent server")
        } catch let error as ChannelManagementError {
            #expect(error.kind == .shutDown, "\(error)")
        }
        do {
            _ = try await manager.list()
            Issue.record("a call after shutdown was taken")
        } catch {
            #expect(error.kind == .shutDown)
        }
    }
}

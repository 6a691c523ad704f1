import FanfareTestSupport
import Foundation
import Testing
@testable import FanfareTLS

/// A CA + localhost server chain and a server context, generated once per test.
private struct Fixture {
    let directory: TemporaryDirectory
    let files: GeneratedCertificates
    let server: TLSContext

    init() throws {
        directory = try TemporaryDirectory()
        files = try CertificateAuthority.generateLocalhostChain(in: directory.path)
        server = try TLSContext.server(certificateFile: files.certificateFile, privateKeyFile: files.privateKeyFile)
    }

    func trustingClient() throws -> TLSContext {
        try TLSContext.client(caFile: files.caCertificateFile)
    }
}

@Suite(.ownThread) struct TLSConnectionTests {
    @Test func handshakeNegotiatesH2AndCarriesPlaintextBothWays() throws {
        let fixture = try Fixture()
        let client = try TLSConnection(client: fixture.trustingClient(), serverName: "localhost")
        let server = try TLSConnection(server: fixture.server)
        #expect(!client.isHandshakeComplete)

        let states = handshake(client: client, server: server)
        #expect(states.client == .complete)
        #expect(states.server == .complete)
        #expect(client.isHandshakeComplete && server.isHandshakeComplete)
        #expect(client.negotiatedProtocol == "h2")
        #expect(server.negotiatedProtocol == "h2")
        #expect(!client.isResumedSession)

        let request = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        #expect(send(request, from: client, to: server) == request)
        let response = Array("response bytes".utf8)
        #expect(send(response, from: server, to: client) == response)

        // 100 KB spans several 16 KiB records; it must arrive intact.
        let large = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        #expect(send(large, from: client, to: server) == large)
        #expect(send(large, from: server, to: client) == large)
    }

    @Test func readWithNothingBufferedWantsMore() throws {
        let fixture = try Fixture()
        let client = try TLSConnection(client: fixture.trustingClient(), serverName: "localhost")
        let server = try TLSConnection(server: fixture.server)
        #expect(handshake(client: client, server: server) == (.complete, .complete))
        #expect(readOnce(server) == .wantMore)
        #expect(client.takeCiphertext(into: UnsafeMutableRawBufferPointer(start: nil, count: 0)) == 0)
    }

    @Test func shutdownDeliversCloseNotify() throws {
        let fixture = try Fixture()
        let client = try TLSConnection(client: fixture.trustingClient(), serverName: "localhost")
        let server = try TLSConnection(server: fixture.server)
        #expect(handshake(client: client, server: server) == (.complete, .complete))
        client.shutdown()
        #expect(client.pendingCiphertextCount > 0)
        transferCiphertext(from: client, to: server)
        #expect(readOnce(server) == .closed)
    }

    @Test func sessionFromFirstConnectionResumesTheNext() throws {
        let fixture = try Fixture()
        let context = try fixture.trustingClient()
        let first = try TLSConnection(client: context, serverName: "localhost")
        let firstServer = try TLSConnection(server: fixture.server)
        #expect(handshake(client: first, server: firstServer) == (.complete, .complete))
        // TLS 1.3 tickets are processed by the client's first read.
        _ = send(Array("ping".utf8), from: firstServer, to: first)
        let session = try #require(first.session)

        let second = try TLSConnection(client: context, serverName: "localhost", resuming: session)
        let secondServer = try TLSConnection(server: fixture.server)
        #expect(handshake(client: second, server: secondServer) == (.complete, .complete))
        #expect(second.isResumedSession)
        #expect(second.negotiatedProtocol == "h2")
    }

    @Test(arguments: ["127.0.0.1", "::1", "[::1]"])
    func ipAddressServerNamesMatchIPSubjectAltNames(_ address: String) throws {
        let fixture = try Fixture()
        let client = try TLSConnection(client: fixture.trustingClient(), serverName: address)
        let server = try TLSConnection(server: fixture.server)
        #expect(handshake(client: client, server: server) == (.complete, .complete))
    }

    @Test func wrongHostnameFailsWithReadableVerifyMessage() throws {
        let fixture = try Fixture()
        let client = try TLSConnection(client: fixture.trustingClient(), serverName: "api.push.apple.com")
        let server = try TLSConnection(server: fixture.server)
        let states = handshake(client: client, server: server)
        let failure = try #require(states.client.failure)
        #expect(failure.kind == .peerCertificateRejected)
        #expect(failure.message == "certificate verify failed: hostname mismatch (peer 'api.push.apple.com')")
        // The client's alert reaches the server, which fails too instead of hanging.
        #expect(states.server.failure != nil)
        #expect(client.advanceHandshake() == states.client)  // failure is sticky
    }

    @Test func wrongIPAddressFails() throws {
        let fixture = try Fixture()
        let client = try TLSConnection(client: fixture.trustingClient(), serverName: "10.9.8.7")
        let server = try TLSConnection(server: fixture.server)
        let failure = try #require(handshake(client: client, server: server).client.failure)
        #expect(failure.message == "certificate verify failed: IP address mismatch (peer '10.9.8.7')")
    }

    @Test func untrustedCAFails() throws {
        let fixture = try Fixture()
        let client = try TLSConnection(client: TLSContext.client(), serverName: "localhost")
        let server = try TLSConnection(server: fixture.server)
        let states = handshake(client: client, server: server)
        let failure = try #require(states.client.failure)
        #expect(failure.kind == .peerCertificateRejected)
        #expect(
            failure.message == "certificate verify failed: unable to get local issuer certificate (peer 'localhost')")
        let serverFailure = try #require(states.server.failure)
        #expect(serverFailure.message.contains("unknown ca"), "\(serverFailure.message)")
    }

    @Test func verifyPeerFalseAcceptsAnUntrustedServer() throws {
        let fixture = try Fixture()
        let client = try TLSConnection(client: TLSContext.client(verifyPeer: false), serverName: "wrong.example")
        let server = try TLSConnection(server: fixture.server)
        #expect(handshake(client: client, server: server) == (.complete, .complete))
    }

    @Test func clientNotOfferingH2IsRejectedByTheServer() throws {
        let fixture = try Fixture()
        let http1Client = try TLSContext.client(
            caFile: fixture.files.caCertificateFile, verifyPeer: true, certificateFile: nil, privateKeyFile: nil,
            offeredProtocols: ["http/1.1"]
        )
        let client = try TLSConnection(client: http1Client, serverName: "localhost")
        let server = try TLSConnection(server: fixture.server)
        let states = handshake(client: client, server: server)
        let serverFailure = try #require(states.server.failure)
        #expect(serverFailure.message.contains("no application protocol"), "\(serverFailure.message)")
        let clientFailure = try #require(states.client.failure)
        #expect(clientFailure.kind == .protocolError)
        #expect(clientFailure.message.contains("no application protocol"), "\(clientFailure.message)")
    }

    @Test func clientWithoutALPNIsRejectedByTheServer() throws {
        let fixture = try Fixture()
        let noALPN = try TLSContext.client(
            caFile: fixture.files.caCertificateFile, verifyPeer: true, certificateFile: nil, privateKeyFile: nil,
            offeredProtocols: []
        )
        let client = try TLSConnection(client: noALPN, serverName: "localhost")
        let server = try TLSConnection(server: fixture.server)
        let states = handshake(client: client, server: server)
        let serverFailure = try #require(states.server.failure)
        #expect(serverFailure.kind == .applicationProtocolNotNegotiated)
        #expect(serverFailure.message == "client did not offer ALPN h2: no ALPN protocol was selected (client)")
        #expect(states.client.failure != nil)  // ours requires h2 as well
    }

    @Test func serverNotSelectingH2IsRejectedByTheClient() throws {
        let fixture = try Fixture()
        let plainServer = try TLSContext.server(
            certificateFile: fixture.files.certificateFile, privateKeyFile: fixture.files.privateKeyFile,
            selectsH2: false
        )
        let client = try TLSConnection(client: fixture.trustingClient(), serverName: "localhost")
        let server = try TLSConnection(server: plainServer)
        let states = handshake(client: client, server: server)
        let failure = try #require(states.client.failure)
        #expect(failure.kind == .applicationProtocolNotNegotiated)
        #expect(failure.message == "peer did not negotiate ALPN h2: no ALPN protocol was selected (peer 'localhost')")
        #expect(client.negotiatedProtocol == nil)
        // Plaintext calls after a failure report the same failure rather than trapping.
        #expect(readOnce(client) == .failed(failure))
    }

    @Test func invalidServerNameIsASetupError() throws {
        let fixture = try Fixture()
        #expect(throws: TLSSetupError.invalidServerName("")) {
            try TLSConnection(client: fixture.trustingClient(), serverName: "")
        }
    }
}

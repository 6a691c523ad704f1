import CURing
import FanfareIO
import FanfareTestSupport
import Testing

@Suite("IOLoop sockets over loopback", .ownThread)
struct SocketIOTests {
    @Test func listenOnPortZeroReportsTheRealPort() throws {
        let (fd, bound) = try Sockets.listen(on: SocketAddress.loopbackIPv4(port: 0))
        defer { Sockets.close(fd) }
        #expect(bound.port != 0)
        #expect(bound.isIPv4)
        #expect(bound.description == "127.0.0.1:\(bound.port)")
        #expect(Sockets.localAddress(of: fd) == bound)
    }

    @Test func listeningTwiceOnOnePortNamesTheBindFailure() throws {
        let (fd, bound) = try Sockets.listen(on: SocketAddress.loopbackIPv4(port: 0))
        defer { Sockets.close(fd) }
        let error = #expect(throws: IOError.self) { try Sockets.listen(on: bound) }
        #expect(error?.errno == EADDRINUSE)
        #expect(error?.description.hasPrefix("bind \(bound) failed: ") == true)
    }

    @Test func echoesSeveralHundredKilobytesBothWays() throws {
        let loop = try IOLoop()
        let server = try EchoServer(loop: loop)
        let client = try StreamClient(address: server.address, size: 300 * 1024 + 123, chunk: 16 * 1024)
        client.start(loop: loop, address: server.address)

        #expect(try runLoop(loop) { client.isDone })
        #expect(client.connectResult == 0)
        #expect(server.accepted == 1)
        #expect(client.sent == client.payload.count)
        #expect(server.bytesEchoed == client.payload.count)
        #expect(client.echoMatches)
        #expect(client.errors.isEmpty)
    }

    @Test func echoWorksOnAPlainRingToo() throws {
        // What a kernel without SINGLE_ISSUER/DEFER_TASKRUN gets.
        let loop = try IOLoop(entries: 64, ringSetup: .plain)
        let server = try EchoServer(loop: loop)
        let client = try StreamClient(address: server.address, size: 100 * 1024, chunk: 8 * 1024)
        client.start(loop: loop, address: server.address)
        #expect(try runLoop(loop) { client.isDone })
        #expect(client.echoMatches)
    }

    @Test func servesTwoHundredConcurrentConnections() throws {
        let loop = try IOLoop()
        let server = try EchoServer(loop: loop)
        var clients: [StreamClient] = []
        for i in 0..<200 {
            let client = try StreamClient(
                address: server.address, size: 2_000 + i, chunk: 1_024, seed: i, closeWhenDone: true)
            client.start(loop: loop, address: server.address)
            clients.append(client)
        }

        #expect(try runLoop(loop, maxTicks: 10_000) { clients.allSatisfy { $0.closed } && server.finished == 200 })
        #expect(server.accepted == 200)
        #expect(clients.allSatisfy { $0.connectResult == 0 })
        #expect(clients.allSatisfy { $0.echoMatches })
        // Every client closed after its echo, so every server connection saw a 0-byte recv.
        #expect(server.peerClosed == 200)
        #expect(server.acceptErrors.isEmpty)
        // Closed server connections were unregistered: only the listener and nothing else remains.
        #expect(loop.registeredHandlerCount == 1)
    }

    @Test func closingThePeerGivesAZeroByteRecv() throws {
        let loop = try IOLoop()
        let (listenFD, bound) = try Sockets.listen(on: SocketAddress.loopbackIPv4(port: 0))
        defer { Sockets.close(listenFD) }
        let listener = Recorder()
        let listenerID = loop.register(listener)
        loop.acceptMultishot(fd: listenFD, handler: listenerID, tag: 1)

        let connector = Recorder()
        let connectorID = loop.register(connector)
        let clientFD = try Sockets.makeTCPSocket(for: bound)
        loop.connect(fd: clientFD, to: bound, handler: connectorID, tag: 2)
        #expect(try runLoop(loop) { !listener.completions.isEmpty && !connector.completions.isEmpty })
        try #require(connector.completions.first?.result == 0)
        let acceptedFD = try #require(listener.completions.first?.result)
        try #require(acceptedFD >= 0)
        #expect(listener.completions[0].flags & IORING_CQE_F_MORE != 0)

        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 512, alignment: 16)
        defer { buffer.deallocate() }
        let reader = Recorder()
        let readerID = loop.register(reader)
        loop.recv(fd: acceptedFD, into: buffer, handler: readerID, tag: 3)
        Sockets.close(clientFD)

        #expect(try runLoop(loop) { !reader.completions.isEmpty })
        #expect(reader.completions.map(\.tag) == [3])
        #expect(reader.completions.first?.result == 0)
        #expect(reader.completions.first.map { $0.flags & IORING_CQE_F_MORE } == 0)
        Sockets.close(acceptedFD)
        loop.cancel(fd: listenFD)
        #expect(try runLoop(loop) { listener.completions.last?.result == -ECANCELED })
    }

    @Test func connectingToAClosedPortIsRefused() throws {
        let (fd, bound) = try Sockets.listen(on: SocketAddress.loopbackIPv4(port: 0))
        Sockets.close(fd)  // nobody listens there any more
        let loop = try IOLoop()
        let recorder = Recorder()
        let id = loop.register(recorder)
        let socket = try Sockets.makeTCPSocket(for: bound)
        defer { Sockets.close(socket) }
        loop.connect(fd: socket, to: bound, handler: id, tag: 9)
        #expect(try runLoop(loop) { !recorder.completions.isEmpty })
        #expect(recorder.completions == [Recorder.Completion(tag: 9, result: -ECONNREFUSED, flags: 0)])
        #expect(IOError.describe(errno: ECONNREFUSED) == "Connection refused (ECONNREFUSED)")
    }

    @Test func sendToAClosedPeerFailsWithoutSIGPIPE() throws {
        let loop = try IOLoop()
        let (a, b) = try makeSocketPair()
        defer { Sockets.close(a) }
        Sockets.close(b)
        let recorder = Recorder()
        let id = loop.register(recorder)
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 16)
        defer { bytes.deallocate() }
        fillPattern(bytes, seed: 1)
        loop.send(fd: a, from: UnsafeRawBufferPointer(bytes), handler: id, tag: 4)
        #expect(try runLoop(loop) { !recorder.completions.isEmpty })
        #expect(recorder.completions.first?.result == -EPIPE)  // and the process is still alive
    }
}

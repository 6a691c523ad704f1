import CURing
import FanfareIO
import FanfareTestSupport
import Glibc
import Testing

@Suite("IOLoop batching and handler lifecycle", .ownThread)
struct BatchingAndLifecycleTests {
    @Test func sendsQueuedInOneTickCostOneSubmit() throws {
        let loop = try IOLoop()
        let (a, b) = try makeSocketPair()
        defer {
            Sockets.close(a)
            Sockets.close(b)
        }
        let sender = Recorder()
        let senderID = loop.register(sender)
        let message = UnsafeMutableRawBufferPointer.allocate(byteCount: 100, alignment: 16)
        defer { message.deallocate() }
        fillPattern(message, seed: 3)
        try loop.runOnce(maxWait: 0)  // settle the loop's own eventfd read

        let sends = 32
        for _ in 0..<sends {
            loop.send(fd: a, from: UnsafeRawBufferPointer(message), handler: senderID, tag: 1)
        }
        #expect(loop.queuedSubmissions == sends)
        let before = loop.submitCalls
        try loop.runOnce(maxWait: 1_000_000_000)
        #expect(loop.submitCalls - before == 1)
        #expect(loop.queuedSubmissions == 0)

        #expect(try runLoop(loop) { sender.completions.count == sends })
        #expect(sender.completions.allSatisfy { $0.result == 100 })

        // The other end got every byte.
        let inbox = UnsafeMutableRawBufferPointer.allocate(byteCount: sends * 100, alignment: 16)
        defer { inbox.deallocate() }
        var received = 0
        let receiver = Recorder()
        let receiverID = loop.register(receiver)
        receiver.onCompletion = { completion, loop in
            guard completion.result > 0 else { return }
            received += Int(completion.result)
            if received < inbox.count {
                loop.recv(
                    fd: b, into: UnsafeMutableRawBufferPointer(rebasing: inbox[received...]), handler: receiverID,
                    tag: 2)
            }
        }
        loop.recv(fd: b, into: inbox, handler: receiverID, tag: 2)
        #expect(try runLoop(loop) { received == inbox.count })
        for i in 0..<sends {
            #expect(UnsafeRawBufferPointer(rebasing: inbox[(i * 100)..<((i + 1) * 100)]).elementsEqual(message))
        }
    }

    @Test func aFullSubmissionQueueIsFlushedAndNothingIsLost() throws {
        let loop = try IOLoop(entries: 8)
        #expect(loop.submissionQueueEntries == 8)
        let (a, b) = try makeSocketPair()
        defer {
            Sockets.close(a)
            Sockets.close(b)
        }
        let sender = Recorder()
        let id = loop.register(sender)
        let byte = UnsafeMutableRawBufferPointer.allocate(byteCount: 1, alignment: 1)
        defer { byte.deallocate() }
        byte[0] = 0x5A
        let before = loop.submitCalls
        for _ in 0..<100 {
            loop.send(fd: a, from: UnsafeRawBufferPointer(byte), handler: id, tag: 1)
        }
        #expect(loop.submitCalls - before >= 100 / 8)  // the SQ filled up and was flushed along the way
        #expect(try runLoop(loop) { sender.completions.count == 100 })
        #expect(sender.completions.allSatisfy { $0.result == 1 })
        #expect(loop.inFlightOperations == 1)  // only the loop's own eventfd read remains
    }

    @Test func unregisteringKeepsTheHandlerAliveUntilItsOperationsComplete() throws {
        let loop = try IOLoop()
        let (a, b) = try makeSocketPair()
        defer {
            Sockets.close(a)
            Sockets.close(b)
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 16)
        defer { buffer.deallocate() }
        weak var weakRecorder: Recorder?
        let id: IOHandlerID
        do {
            let recorder = Recorder()
            weakRecorder = recorder
            id = loop.register(recorder)
            loop.recv(fd: a, into: buffer, handler: id, tag: 1)
        }
        try loop.runOnce(maxWait: 0)
        #expect(loop.inFlightOperations(for: id) == 1)
        loop.unregister(id)
        #expect(!loop.isRegistered(id))
        #expect(weakRecorder != nil)  // the kernel still holds a recv into its buffer

        loop.cancel(fd: a)
        let dropped = loop.droppedCompletions
        #expect(try runLoop(loop) { weakRecorder == nil })
        #expect(loop.droppedCompletions == dropped + 1)
        #expect(loop.inFlightOperations(for: id) == 0)

        // The freed slot is reused with a new generation; the old ID stays stale.
        let next = Recorder()
        let nextID = loop.register(next)
        #expect(nextID != id)
        #expect(loop.isRegistered(nextID))
        #expect(!loop.isRegistered(id))
    }

    @Test func anAcceptedSocketForAnUnregisteredListenerIsClosed() throws {
        let loop = try IOLoop()
        let (listenFD, bound) = try Sockets.listen(on: SocketAddress.loopbackIPv4(port: 0))
        defer { Sockets.close(listenFD) }
        let listener = Recorder()
        let listenerID = loop.register(listener)
        loop.acceptMultishot(fd: listenFD, handler: listenerID, tag: 1)
        try loop.runOnce(maxWait: 0)
        loop.unregister(listenerID)  // the multishot accept is still armed

        let connector = Recorder()
        let connectorID = loop.register(connector)
        let clientFD = try Sockets.makeTCPSocket(for: bound)
        defer { Sockets.close(clientFD) }
        loop.connect(fd: clientFD, to: bound, handler: connectorID, tag: 2)
        let dropped = loop.droppedCompletions
        #expect(try runLoop(loop) { loop.droppedCompletions > dropped && !connector.completions.isEmpty })
        #expect(listener.completions.isEmpty)

        // The loop closed the accepted fd, so the client sees end-of-stream.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16, alignment: 16)
        defer { buffer.deallocate() }
        loop.recv(fd: clientFD, into: buffer, handler: connectorID, tag: 3)
        #expect(try runLoop(loop) { connector.completions.count == 2 })
        #expect(connector.completions.last?.result == 0)
        loop.cancel(fd: listenFD)
        #expect(try runLoop(loop) { loop.inFlightOperations == 1 })
    }

    @Test func shutdownCancelsEverythingInFlight() throws {
        let loop = try IOLoop()
        let (a, b) = try makeSocketPair()
        defer {
            Sockets.close(a)
            Sockets.close(b)
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 16)
        defer { buffer.deallocate() }
        let recorder = Recorder()
        let id = loop.register(recorder)
        loop.recv(fd: a, into: buffer, handler: id, tag: 1)
        loop.recv(fd: b, into: buffer, handler: id, tag: 2)
        try loop.runOnce(maxWait: 0)
        try loop.shutdown()
        #expect(loop.inFlightOperations == 0)
        #expect(Set(recorder.completions.map(\.tag)) == [1, 2])
        #expect(recorder.completions.allSatisfy { $0.result == -ECANCELED })
    }

    @Test func ringDescriptionNamesTheChosenSetup() throws {
        let loop = try IOLoop(entries: 16)
        #expect(loop.completionQueueEntries == 64)
        #expect(loop.ringDescription.hasPrefix("io_uring 16/64 entries"))
        let compatible = try IOLoop(entries: 16, ringSetup: .compatible)
        #expect(compatible.setupFlags & IORING_SETUP_DEFER_TASKRUN == 0)
    }

    /// Two sockets become readable in the same tick; the first completion's handler replies. With eager
    /// submission the reply is in the kernel (and readable by the peer) before the second completion runs;
    /// without it, the reply waits in the SQ until the tick is over.
    @Test(arguments: [true, false])
    func aReplyQueuedByAHandlerLeavesBeforeTheRestOfTheTick(eager: Bool) throws {
        let loop = try IOLoop()
        loop.submitsEagerly = eager
        let (a1, b1) = try makeSocketPair()
        let (a2, b2) = try makeSocketPair()
        defer { for fd in [a1, b1, a2, b2] { Sockets.close(fd) } }
        let inbox = UnsafeMutableRawBufferPointer.allocate(byteCount: 2 * 16, alignment: 16)
        defer { inbox.deallocate() }
        let reply = UnsafeMutableRawBufferPointer.allocate(byteCount: 4, alignment: 16)
        defer { reply.deallocate() }
        fillPattern(reply, seed: 9)
        try loop.runOnce(maxWait: 0)  // settle the loop's own eventfd read

        var byte: UInt8 = 1
        for fd in [b1, b2] { #expect(Glibc.write(fd, &byte, 1) == 1) }
        let recorder = Recorder()
        let id = loop.register(recorder)
        var queuedAtSecond = -1
        var peerHadReplyAtSecond = false
        recorder.onCompletion = { [unowned recorder] completion, loop in  // (a strong capture is a cycle)
            guard completion.tag == 1 || completion.tag == 2 else { return }
            if recorder.completions.count == 1 {
                // Reply on the socket that just became readable.
                loop.send(fd: completion.tag == 1 ? a1 : a2, from: UnsafeRawBufferPointer(reply), handler: id, tag: 3)
            } else if queuedAtSecond < 0 {
                queuedAtSecond = loop.queuedSubmissions
                let peer = recorder.completions[0].tag == 1 ? b1 : b2
                var scratch = (UInt32(0))
                peerHadReplyAtSecond =
                    withUnsafeMutableBytes(of: &scratch) { Glibc.recv(peer, $0.baseAddress, 4, Int32(MSG_DONTWAIT)) }
                    == 4
            }
        }
        loop.recv(fd: a1, into: UnsafeMutableRawBufferPointer(rebasing: inbox[0..<16]), handler: id, tag: 1)
        loop.recv(fd: a2, into: UnsafeMutableRawBufferPointer(rebasing: inbox[16..<32]), handler: id, tag: 2)
        #expect(try runLoop(loop) { queuedAtSecond >= 0 })
        #expect(queuedAtSecond == (eager ? 0 : 1))
        #expect(peerHadReplyAtSecond == eager)
        #expect(try runLoop(loop) { !recorder.completions(tag: 3).isEmpty })
        #expect(recorder.completions(tag: 3).first?.result == 4)
    }
}

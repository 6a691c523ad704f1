import CURing
import Glibc

// Operations: each one prepares an SQE now; the SQEs go to the kernel in one batch at the next tick.
// The completion arrives as `ioCompleted(tag:result:flags:)` on the handler, `result < 0` being `-errno`.
extension IOLoop {
    /// Connects a socket (from `Sockets.makeTCPSocket`). The address is copied by the loop, so it only has
    /// to be valid during this call.
    public func connect(
        fd: Int32, address: UnsafePointer<sockaddr>, length: socklen_t, handler: IOHandlerID, tag: UInt8
    ) {
        assertOwner()
        checkRegistered(handler)
        precondition(
            length > 0 && Int(length) <= MemoryLayout<sockaddr_storage>.size,
            "IOLoop.connect: bad address length \(length)")
        // The kernel copies the address when it consumes the SQE (IORING_FEAT_SUBMIT_STABLE); the loop's
        // copies are recycled after each submit. Make room for both the copy and the SQE up front.
        if connectAddressesUsed == IOLoop.connectAddressSlots || io_uring_sq_space_left(ring) == 0 {
            submitQueuedNow()
        }
        let copy = connectAddresses + connectAddressesUsed
        connectAddressesUsed += 1
        UnsafeMutableRawPointer(copy).copyMemory(from: address, byteCount: Int(length))
        let sqe = nextSQE()
        io_uring_prep_connect(sqe, fd, UnsafeRawPointer(copy).assumingMemoryBound(to: sockaddr.self), length)
        commit(sqe, handler: handler, kind: .connect, tag: tag)
    }

    /// Connects a socket to `address` (copied by the loop).
    public func connect(fd: Int32, to address: SocketAddress, handler: IOHandlerID, tag: UInt8) {
        address.withSockaddr { pointer, length in
            connect(fd: fd, address: pointer, length: length, handler: handler, tag: tag)
        }
    }

    /// Accepts connections on a listening socket until cancelled: one completion per connection, whose
    /// `result` is the new fd (non-blocking, close-on-exec). When a completion lacks `IORING_CQE_F_MORE`
    /// the multishot ended (error or cancel) and the caller must re-arm it.
    public func acceptMultishot(fd: Int32, handler: IOHandlerID, tag: UInt8) {
        assertOwner()
        checkRegistered(handler)
        let sqe = nextSQE()
        io_uring_prep_multishot_accept(sqe, fd, nil, nil, Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue))
        commit(sqe, handler: handler, kind: .accept, tag: tag)
    }

    /// Receives up to `buffer.count` bytes. `result == 0` means the peer closed the connection.
    public func recv(fd: Int32, into buffer: UnsafeMutableRawBufferPointer, handler: IOHandlerID, tag: UInt8) {
        assertOwner()
        checkRegistered(handler)
        precondition(
            buffer.count > 0 && buffer.count <= Int(UInt32.max), "IOLoop.recv: bad buffer size \(buffer.count)")
        let sqe = nextSQE()
        io_uring_prep_recv(sqe, fd, buffer.baseAddress, buffer.count, 0)
        commit(sqe, handler: handler, kind: .recv, tag: tag)
    }

    /// Sends `buffer` with MSG_NOSIGNAL (a closed peer gives `-EPIPE`, not SIGPIPE). A stream socket may
    /// take fewer bytes than offered: `result` is the count sent, and the caller sends the rest.
    public func send(fd: Int32, from buffer: UnsafeRawBufferPointer, handler: IOHandlerID, tag: UInt8) {
        assertOwner()
        checkRegistered(handler)
        precondition(
            buffer.count > 0 && buffer.count <= Int(UInt32.max), "IOLoop.send: bad buffer size \(buffer.count)")
        let sqe = nextSQE()
        io_uring_prep_send(sqe, fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
        commit(sqe, handler: handler, kind: .send, tag: tag)
    }

    /// Closes `fd` through the ring. Cancel its pending operations first: a pending recv keeps the socket
    /// open in the kernel.
    public func close(fd: Int32, handler: IOHandlerID, tag: UInt8) {
        assertOwner()
        checkRegistered(handler)
        let sqe = nextSQE()
        io_uring_prep_close(sqe, fd)
        commit(sqe, handler: handler, kind: .close, tag: tag)
    }

    /// Cancels every pending operation on `fd` (IORING_ASYNC_CANCEL_FD | ALL). Each cancelled operation
    /// still completes, usually with `-ECANCELED` (or with its real result if it finished first). The
    /// cancel request's own completion is internal.
    public func cancel(fd: Int32) {
        assertOwner()
        let sqe = nextSQE()
        io_uring_prep_cancel_fd(sqe, fd, UInt32(IORING_ASYNC_CANCEL_ALL))
        io_uring_sqe_set_data64(
            sqe, OperationToken(slot: OperationToken.internalSlot, generation: 0, kind: .cancel, tag: 0).raw)
        inFlightOperations += 1
    }

    /// SQEs prepared but not yet handed to the kernel.
    public var queuedSubmissions: Int { Int(io_uring_sq_ready(ring)) }

    // MARK: - Plumbing

    @inline(__always)
    func checkRegistered(_ handler: IOHandlerID) {
        precondition(handlers.isRegistered(handler), "IOLoop: operation for \(handler), which is not registered")
    }

    @inline(__always)
    func commit(_ sqe: UnsafeMutablePointer<io_uring_sqe>, handler: IOHandlerID, kind: OperationKind, tag: UInt8) {
        io_uring_sqe_set_data64(
            sqe, OperationToken(slot: handler.index, generation: handler.generation, kind: kind, tag: tag).raw)
        handlers.operationStarted(index: Int(handler.index))
        inFlightOperations += 1
    }

    /// The next free SQE; when the SQ is full, what is queued is submitted first (without waiting).
    @inline(__always)
    func nextSQE() -> UnsafeMutablePointer<io_uring_sqe> {
        if let sqe = io_uring_get_sqe(ring) { return sqe }
        submitQueuedNow()
        guard let sqe = io_uring_get_sqe(ring) else {
            preconditionFailure("IOLoop: no free SQE right after submitting the queue")
        }
        return sqe
    }

    /// Hands every queued SQE to the kernel now, without waiting. EBUSY/EAGAIN means the CQ is
    /// overcommitted: completions are copied out (into the staging queue, dispatched later) and the submit
    /// is retried.
    func submitQueuedNow() {
        var attempts = 0
        while io_uring_sq_ready(ring) > 0 {
            attempts += 1
            precondition(attempts < 100_000, "IOLoop: the kernel keeps refusing submissions")
            submitCalls &+= 1
            let result = io_uring_submit(ring)
            if result >= 0 { continue }
            switch -result {
            case EINTR:
                continue
            case EBUSY, EAGAIN:
                if reapIntoStaging(limit: staged.freeSpace) == 0 {
                    _ = io_uring_get_events(ring)  // run deferred task work, flush overflowed CQEs
                    reapIntoStaging(limit: staged.freeSpace)
                }
            default:
                preconditionFailure("IOLoop: io_uring_submit failed: \(IOError.describe(errno: -result))")
            }
        }
        connectAddressesUsed = 0
    }
}

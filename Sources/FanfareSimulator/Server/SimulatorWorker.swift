import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS
import Glibc
import Synchronization

/// One simulator thread: a listener, its connections, a pool of request heads, the validator and stats.
///
/// Everything here runs on the worker's thread except `requestStop`, `requestGoAway` and
/// `publishedStats`, which other threads call.
final class SimulatorWorker: IOHandler, @unchecked Sendable {
    private enum Tag: UInt8 { case accept = 1, wake }

    typealias StreamState = StreamSlots.State

    /// What the worker's listener serves: pushes (`/3/device`, `/4/broadcasts`) or the channel-management API
    /// (`/1/apps`, apns-spec.md §8.2; its own port, as APNs has it on another host and port).
    enum Role { case push, management }

    let index: Int
    let role: Role
    let configuration: SimulatorConfiguration
    let options: APNsSimulator.Options
    let bufferSizes: TransportBufferSizes
    /// Unowned: the loop holds the worker (a registered handler) and lives as long as the worker's thread; a
    /// strong reference back made a cycle that kept both after shutdown (LeakSanitizer).
    @exclusivity(unchecked) private(set) unowned(unsafe) var loop: IOLoop!
    @exclusivity(unchecked) private var handlerID: IOHandlerID!
    private let listenerFD: Int32
    @exclusivity(unchecked) private var acceptArmed = false
    @exclusivity(unchecked) private var listenerClosed = false
    let headPool: RequestHeadPool
    /// Most streams this worker holds at once (`Options.maxStreamsPerWorker`, or unlimited).
    private let maxStreams: Int
    @exclusivity(unchecked) private var slots: StreamSlots
    @exclusivity(unchecked) private var validator: RequestValidator
    /// The validator's apps (the accepted-push log names each push's).
    private let apps: SimulatedAppTable
    /// Management workers only.
    private let management: ManagementRequestValidator?
    private let channels: BroadcastChannels?
    /// Response bodies larger than a slot's room (management lists), by slot; freed with the stream.
    @exclusivity(unchecked) private var overflowBodies: [Int: UnsafeMutableRawBufferPointer] = [:]
    @exclusivity(unchecked) private var random: SimulatorRandom
    private let verifier: any ProviderTokenVerifying
    private let log: AcceptedPushLog?
    @exclusivity(unchecked) var stats = SimulatorStats()
    @exclusivity(unchecked) private(set) var acceptErrors = 0
    private let published = Mutex(SimulatorStats())
    /// High-water marks over this worker's connections (see `SimulatorStreamConcurrency`); written by the
    /// worker only when a connection sets a new record, read by any thread.
    private let maxOpenStreams = Atomic<Int>(0)
    private let maxOpenStreamsBeforeFirstAccept = Atomic<Int>(0)
    @exclusivity(unchecked) private var lastPublish: UInt64 = 0
    @exclusivity(unchecked) private var connections: [UInt32: SimulatorConnection] = [:]
    @exclusivity(unchecked) private var nextSerial: UInt32 = 1
    @exclusivity(unchecked) private var wallClock = SimulatorInstant(nanosecondsSinceEpoch: 0)
    private let stopRequested = Atomic<Bool>(false)
    private let goAwayRequested = Atomic<Int>(0)  // 0 none, 1 + reason index
    @exclusivity(unchecked) private var stopping = false
    private let stoppedFlag = Atomic<Bool>(false)
    /// Nil until `attach` ran on the worker's thread, which may be after `APNsSimulator.init` returned:
    /// atomic, since other threads read it.
    var waker: IOWaker? { wakerReference.load() }
    private let wakerReference = AtomicLazyReference<IOWaker>()

    init(
        index: Int, role: Role = .push, configuration: SimulatorConfiguration, options: APNsSimulator.Options,
        listenerFD: Int32,
        log: AcceptedPushLog?, channels: BroadcastChannels? = nil
    ) {
        self.index = index
        self.role = role
        self.configuration = configuration
        self.options = options
        self.listenerFD = listenerFD
        self.log = log
        bufferSizes = TransportBufferSizes()
        // One connection's worth of heads to start with; more as connections fill up (see acquireStream).
        maxStreams = options.maxStreamsPerWorker ?? Int(Int32.max)
        let capacity = min(
            maxStreams, StreamSlots.rounded(options.preallocatedStreamsPerWorker ?? configuration.maxConcurrentStreams))
        // Heads sized by the configuration: payload limits above the defaults still get their JSON checked.
        headPool = RequestHeadPool(
            capacity: capacity, arenaCapacity: configuration.requestHeadArenaBytes,
            bodyCapacity: configuration.requestBodyCapacity)
        slots = StreamSlots(capacity: capacity)
        validator = RequestValidator(configuration: configuration, worker: index, channels: channels)
        apps = validator.apps
        self.channels = role == .management ? channels : nil
        management =
            role == .management
            ? channels.map { ManagementRequestValidator(configuration: configuration, channels: $0) } : nil
        random = SimulatorRandom(seed: configuration.seed ^ 0x5EED, stream: UInt64(index) + 1000)
        verifier = options.verifier ?? RejectAllVerifier()
    }

    deinit {
        for body in overflowBodies.values { body.deallocate() }
        if !acceptArmed { closeListener() }
    }

    /// Runs once on the worker's thread (IOThread setup).
    func attach(to loop: IOLoop) {
        self.loop = loop
        _ = wakerReference.storeIfNil(loop.waker)
        handlerID = loop.register(self)
        loop.addTickHandler(handlerID)
        loop.setWakeHandler(handlerID, tag: Tag.wake.rawValue)
        armAccept()
    }

    private func armAccept() {
        guard !stopping else { return }
        acceptArmed = true
        loop.acceptMultishot(fd: listenerFD, handler: handlerID, tag: Tag.accept.rawValue)
    }

    // MARK: - Control from other threads

    func requestStop() {
        stopRequested.store(true, ordering: .releasing)
        waker?.wake()
    }

    var isStopped: Bool { stoppedFlag.load(ordering: .acquiring) }

    func requestGoAway(reason: APNsReason?) {
        let code = reason.map { (APNsReason.allCases.firstIndex(of: $0) ?? 0) + 2 } ?? 1
        goAwayRequested.store(code, ordering: .releasing)
        waker?.wake()
    }

    func publishedStats() -> SimulatorStats {
        published.withLock { $0 }
    }

    /// Any thread: the stream high-water marks so far.
    func publishedStreamConcurrency() -> SimulatorStreamConcurrency {
        SimulatorStreamConcurrency(
            maxOpenStreams: maxOpenStreams.load(ordering: .relaxed),
            maxOpenStreamsBeforeFirstAccept: maxOpenStreamsBeforeFirstAccept.load(ordering: .relaxed))
    }

    /// A connection reached a new per-connection record of open streams (worker thread only).
    func noteStreamConcurrency(open: Int, beforeFirstAccept: Int) {
        if open > maxOpenStreams.load(ordering: .relaxed) { maxOpenStreams.store(open, ordering: .relaxed) }
        if beforeFirstAccept > maxOpenStreamsBeforeFirstAccept.load(ordering: .relaxed) {
            maxOpenStreamsBeforeFirstAccept.store(beforeFirstAccept, ordering: .relaxed)
        }
    }

    func flushLog() {
        flushAcceptedLog()
    }

    /// Writes the accepted pushes decided so far to the log file (one `write(2)`), before any of their 200s
    /// can leave: connections call this before producing output. Cheap when nothing is buffered.
    @inline(__always)
    func flushAcceptedLog() {
        guard let log, log.hasBufferedRecords else { return }
        do {
            try log.flush()
        } catch {
            stats.acceptedLogWriteFailures += 1
        }
    }

    /// Management worker: makes the channel changes decided so far durable before any answer leaves
    /// (connections call this before producing output). False when the save failed: the table is back to the
    /// file's state, and every connection of this worker is reset so none of the answers to the forgotten
    /// changes leaves (the caller must not send).
    func persistChannels() -> Bool {
        guard let channels, channels.hasUnsavedChanges else { return true }
        guard channels.persist() != nil else { return true }
        stats.channelSaveFailures += 1
        for connection in Array(connections.values) { connection.transport.reset() }
        return false
    }

    // MARK: - IOHandler

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {
        switch Tag(rawValue: tag) {
        case .accept:
            if result >= 0 {
                accept(fd: result)
            } else if result != -ECANCELED && !stopping {
                acceptErrors += 1
            }
            if flags & IOLoop.completionFlagMore == 0 {
                acceptArmed = false
                if !stopping { armAccept() } else { closeListener() }
            }
        case .wake, nil:
            break
        }
    }

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {}

    func tick(loop: IOLoop) {
        if !stopping && stopRequested.load(ordering: .acquiring) { beginStop() }
        let goAway = goAwayRequested.exchange(0, ordering: .acquiring)
        if goAway != 0 {
            let reason = goAway >= 2 ? APNsReason.allCases[goAway - 2] : nil
            for connection in connections.values { connection.sendGoAway(reason: reason) }
        }
        if loop.now &- lastPublish > 20_000_000 || stopping {
            lastPublish = loop.now
            let snapshot = stats
            published.withLock { $0 = snapshot }
        }
        if stopping && connections.isEmpty && !acceptArmed && !stoppedFlag.load(ordering: .relaxed) {
            flushAcceptedLog()
            stoppedFlag.store(true, ordering: .releasing)
        }
    }

    private func beginStop() {
        stopping = true
        // The listener closes once its accept is cancelled, so clients connecting now are refused at once
        // instead of waiting in the backlog of a simulator that will never accept them.
        if acceptArmed { loop.cancel(fd: listenerFD) } else { closeListener() }
        for connection in connections.values { connection.shutDown() }
    }

    private func closeListener() {
        guard !listenerClosed else { return }
        listenerClosed = true
        Sockets.close(listenerFD)
    }

    // MARK: - Connections

    private func accept(fd: Int32) {
        guard !stopping else {
            Sockets.close(fd)
            return
        }
        let tls: TLSConnection
        do {
            tls = try TLSConnection(server: options.tls)
        } catch {
            Sockets.close(fd)
            return
        }
        let serial = nextSerial
        nextSerial = nextSerial == UInt32.max ? 1 : nextSerial + 1
        let connection = SimulatorConnection(worker: self, serial: serial, tls: tls)
        connections[serial] = connection
        let remote = Sockets.peerAddress(of: fd)?.description ?? "unknown peer"
        connection.start(fd: fd, remote: remote)
    }

    func connectionClosed(_ connection: SimulatorConnection) {
        connections.removeValue(forKey: connection.serial)
    }

    func makeAuthState() -> ConnectionAuthState {
        ConnectionAuthState(policy: configuration.providerTokenPolicy, verifier: verifier)
    }

    // MARK: - Streams

    /// A slot for a new stream. When every slot is busy the pool grows by a chunk (an allocation, only when
    /// this worker's concurrency reaches a new high), so a stream within each connection's advertised
    /// limit is refused only above `maxStreamsPerWorker`.
    func acquireStream(connection: SimulatorConnection, streamID: Int32) -> Int? {
        if headPool.available == 0 && headPool.capacity < maxStreams { growStreams() }
        guard let slot = headPool.acquire() else { return nil }  // refused; counted when the reset is sent
        slots.state(slot).pointee = StreamState(owner: connection.serial, streamID: streamID)
        let inUse = headPool.capacity - headPool.available
        if inUse > stats.maxStreamsInUse { stats.maxStreamsInUse = inUse }
        return slot
    }

    private func growStreams() {
        let target = min(maxStreams, headPool.capacity + StreamSlots.slotsPerChunk)
        slots.grow(to: target)
        headPool.grow(to: target)
        stats.streamPoolGrowths += 1
    }

    func releaseStream(_ slot: Int) {
        if role == .management, let body = overflowBodies.removeValue(forKey: slot) { body.deallocate() }
        slots.state(slot).pointee = StreamState()
        headPool.release(slot)
    }

    func streamState(_ slot: Int) -> UnsafeMutablePointer<StreamState> { slots.state(slot) }

    /// The response body prepared by `decide` (empty: none).
    func responseBody(slot: Int) -> UnsafeRawBufferPointer {
        let count = Int(slots.state(slot).pointee.bodyCount)
        if role == .management, let body = overflowBodies[slot] {
            return UnsafeRawBufferPointer(start: body.baseAddress, count: count)
        }
        return UnsafeRawBufferPointer(start: slots.response(slot) + StreamSlots.bodyOffset, count: count)
    }

    // MARK: - Injected faults (decided on this thread, from the worker's seeded PRNG)

    /// Whether to refuse a new stream (REFUSED_STREAM before it is read).
    func drawRefusedStream() -> Bool {
        let probability = configuration.refusedStreamProbability
        guard probability > 0, random.nextUnitInterval() < probability else { return false }
        stats.streamsRefusedInjected += 1
        return true
    }

    /// For a new connection: after how many decided requests it is reset, or nil.
    func drawConnectionReset() -> Int? {
        guard let rule = configuration.connectionReset, rule.probability > 0,
            random.nextUnitInterval() < rule.probability
        else { return nil }
        return rule.afterRequests
    }

    /// How long to wait before answering a decided request: a held response's delay, else the latency model.
    func responseDelay() -> UInt64 {
        if let held = configuration.heldResponses, held.probability > 0, random.nextUnitInterval() < held.probability {
            stats.responsesHeld += 1
            return UInt64(held.delayNanoseconds)
        }
        return UInt64(max(0, configuration.latency.sample(using: &random)))
    }

    /// Decides the stream's answer and prepares its response bytes (apns-id echo, error JSON).
    func decide(slot: Int, connection: SimulatorConnection) -> SimulatorDecision {
        if wallClock.nanosecondsSinceEpoch == 0 || loop.now != lastClockTick {
            wallClock = SimulatorInstant.now()
            lastClockTick = loop.now
        }
        if let management { return decideManagement(slot: slot, connection: connection, validator: management) }
        let head = headPool.head(at: slot)
        let decision = validator.decide(head.pointee, auth: connection.auth, now: wallClock)
        stats.record(decision, bodyBytes: head.pointee.bodyByteCount)
        let state = slots.state(slot)
        state.pointee.status = Int16(decision.status)
        let base = slots.response(slot)
        let isBroadcast = validator.lastWasBroadcast
        // apns-id: echo a valid one from the request, otherwise generate one (APNs does the same).
        let apnsID = UnsafeMutableRawBufferPointer(start: base + StreamSlots.apnsIDOffset, count: 36)
        if let sent = head.pointee.value(.apnsID), APNsIDGenerator.isValidAPNsID(sent) {
            apnsID.copyMemory(from: sent)
            for index in 0..<36 where apnsID[index] >= 0x41 && apnsID[index] <= 0x46 { apnsID[index] += 0x20 }
        } else {
            MessageIDWriter.writeRandomUUID(into: apnsID, using: &random)
        }
        if isBroadcast {
            // apns-request-id: the request's when valid, else the apns-id (one id for the one request).
            state.pointee.kind = .broadcast
            let requestID = UnsafeMutableRawBufferPointer(start: base + StreamSlots.requestIDOffset, count: 36)
            if let sent = head.pointee.value(.apnsRequestID), APNsIDGenerator.isValidAPNsID(sent) {
                Self.copyLowercased(sent, into: requestID)
            } else {
                requestID.copyMemory(from: UnsafeRawBufferPointer(apnsID))
            }
        }
        switch decision {
        case .accept:
            state.pointee.accepted = true
            state.pointee.bodyCount = 0
            if configuration.environment == .sandbox && !isBroadcast {
                MessageIDWriter.writeRandomUUID(
                    into: UnsafeMutableRawBufferPointer(start: base + StreamSlots.uniqueIDOffset, count: 36),
                    using: &random)
            }
            if log != nil { logAccepted(head, apnsID: UnsafeRawBufferPointer(apnsID), auth: connection.auth) }
        case .reject:
            state.pointee.accepted = false
            let body = UnsafeMutableRawBufferPointer(
                start: base + StreamSlots.bodyOffset, count: StreamSlots.responseStride - StreamSlots.bodyOffset)
            state.pointee.bodyCount = Int32(ErrorResponseBodies.shared.write(decision, into: body))
        }
        return decision
    }
    @exclusivity(unchecked) private var lastClockTick: UInt64 = 0

    /// Buffers an accepted push's record, with where it arrived and the key it came with; written
    /// (`flushAcceptedLog`) before its 200 can leave.
    private func logAccepted(
        _ head: UnsafeMutablePointer<RequestHead>, apnsID: UnsafeRawBufferPointer, auth: ConnectionAuthState
    ) {
        guard let log else { return }
        let identity = auth.currentIdentity
        let app = validator.lastApp
        let origin = AcceptedPushOrigin(
            environment: configuration.environment, bundleID: app >= 0 ? apps.bundle(app) : nil,
            keyID: identity?.keyID, teamID: identity?.teamID)
        do {
            try log.append(head.pointee, apnsID: apnsID, now: wallClock, origin: origin)
        } catch {
            stats.acceptedLogWriteFailures += 1
        }
    }

    private static func copyLowercased(
        _ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer
    ) {
        destination.copyMemory(from: source)
        for index in 0..<destination.count where destination[index] >= 0x41 && destination[index] <= 0x46 {
            destination[index] += 0x20
        }
    }

    /// A management request (create, read, list, delete): decided against the shared channels; the answer
    /// carries `apns-request-id`, `apns-channel-id` on a 201, and a JSON body on a 200 or an error.
    private func decideManagement(
        slot: Int, connection: SimulatorConnection, validator: ManagementRequestValidator
    ) -> SimulatorDecision {
        let head = headPool.head(at: slot)
        let decision = validator.decide(head.pointee, auth: connection.auth, now: wallClock)
        let simulated = decision.simulatorDecision
        stats.record(simulated, bodyBytes: head.pointee.bodyByteCount)
        let state = slots.state(slot)
        state.pointee.kind = .management
        state.pointee.status = Int16(decision.status)
        state.pointee.accepted = decision.reason == nil
        let base = slots.response(slot)
        let requestID = UnsafeMutableRawBufferPointer(start: base + StreamSlots.apnsIDOffset, count: 36)
        if let sent = head.pointee.value(.apnsRequestID), APNsIDGenerator.isValidAPNsID(sent) {
            Self.copyLowercased(sent, into: requestID)
        } else {
            MessageIDWriter.writeRandomUUID(into: requestID, using: &random)
        }
        state.pointee.channelIDCount = 0
        if let id = decision.channelID {
            id.withUnsafeBytes { bytes in
                assert(bytes.count <= StreamSlots.channelIDCapacity)  // our own ids: 24 bytes
                (base + StreamSlots.channelIDOffset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
                state.pointee.channelIDCount = UInt8(bytes.count)
            }
        }
        let room = StreamSlots.responseStride - StreamSlots.bodyOffset
        if decision.reason != nil {
            let body = UnsafeMutableRawBufferPointer(start: base + StreamSlots.bodyOffset, count: room)
            state.pointee.bodyCount = Int32(ErrorResponseBodies.shared.write(simulated, into: body))
        } else if decision.body.count <= room {
            decision.body.withUnsafeBytes { bytes in
                if bytes.count > 0 {
                    (base + StreamSlots.bodyOffset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
                }
            }
            state.pointee.bodyCount = Int32(decision.body.count)
        } else {
            let body = UnsafeMutableRawBufferPointer.allocate(byteCount: decision.body.count, alignment: 1)
            decision.body.withUnsafeBytes { body.copyMemory(from: $0) }
            if let previous = overflowBodies.updateValue(body, forKey: slot) { previous.deallocate() }
            state.pointee.bodyCount = Int32(clamping: decision.body.count)
        }
        return simulated
    }

    /// Writes the stream's response header block: `:status` (indexed from the static table when it is there),
    /// the ids as literals never indexed (a new value on every response), the content type from the table.
    func writeResponseHeaders(
        slot: Int, contentType: HPACKCachedField, table: inout HPACKEncoderTable, writer: inout HPACKBlockWriter
    ) {
        let state = slots.state(slot).pointee
        let base = UnsafeRawPointer(slots.response(slot))
        if let index = HPACKStaticTable.statusIndex(Int(state.status)) {
            writer.writeIndexed(index)
        } else {
            writer.writeLiteralWithoutIndexing(
                nameIndex: HPACKStaticTable.statusNameIndex, value: StatusText.bytes(Int(state.status)), huffman: false)
        }
        let id = UnsafeRawBufferPointer(start: base + StreamSlots.apnsIDOffset, count: 36)
        switch state.kind {
        case .push:
            writer.writeLiteralNeverIndexed(name: Self.apnsIDName, value: id)
            if state.accepted && configuration.environment == .sandbox {
                writer.writeLiteralNeverIndexed(
                    name: Self.uniqueIDName,
                    value: UnsafeRawBufferPointer(start: base + StreamSlots.uniqueIDOffset, count: 36))
            }
        case .broadcast:
            writer.writeLiteralNeverIndexed(name: Self.apnsIDName, value: id)
            writer.writeLiteralNeverIndexed(
                name: Self.requestIDName,
                value: UnsafeRawBufferPointer(start: base + StreamSlots.requestIDOffset, count: 36))
        case .management:
            // Management answers name the request apns-request-id, not apns-id (§7.5).
            writer.writeLiteralNeverIndexed(name: Self.requestIDName, value: id)
            if state.channelIDCount > 0 {
                writer.writeLiteralNeverIndexed(
                    name: Self.channelIDName,
                    value: UnsafeRawBufferPointer(
                        start: base + StreamSlots.channelIDOffset, count: Int(state.channelIDCount)))
            }
        }
        if state.bodyCount > 0 { table.write(contentType, into: &writer) }
    }

    private static let apnsIDName: StaticString = "apns-id"
    private static let uniqueIDName: StaticString = "apns-unique-id"
    private static let requestIDName: StaticString = "apns-request-id"
    private static let channelIDName: StaticString = "apns-channel-id"
}

extension HPACKBlockWriter {
    /// A literal never indexed (§6.2.3) with a new name: how the simulator sends per-response ids.
    @inline(__always)
    mutating func writeLiteralNeverIndexed(name: StaticString, value: UnsafeRawBufferPointer) {
        writeLiteralNeverIndexed(
            name: UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount), value: value)
    }
}

/// `:status` values as static three-byte strings (the response header writer reads them without copying).
enum StatusText {
    nonisolated(unsafe) private static let table: UnsafeMutablePointer<UInt8> = {
        let pointer = UnsafeMutablePointer<UInt8>.allocate(capacity: 600 * 3)
        for status in 0..<600 {
            pointer[status * 3] = UInt8(48 + status / 100)
            pointer[status * 3 + 1] = UInt8(48 + (status / 10) % 10)
            pointer[status * 3 + 2] = UInt8(48 + status % 10)
        }
        return pointer
    }()

    static func bytes(_ status: Int) -> UnsafeRawBufferPointer {
        precondition(status >= 100 && status < 600)  // our own decisions' statuses
        return UnsafeRawBufferPointer(start: table + status * 3, count: 3)
    }
}

/// Used when the simulator has no provider public key: every JWT is invalid.
struct RejectAllVerifier: ProviderTokenVerifying {
    func verify(jwt: UnsafeRawBufferPointer) -> VerifiedProviderToken? { nil }
}

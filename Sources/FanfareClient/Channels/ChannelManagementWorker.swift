import FanfareCore
import FanfareHTTP2
import FanfareIO
import FanfareTLS
import Synchronization

/// The loop side of `BroadcastChannelManager`: calls arrive in `inbox` from any thread, wait in `waiting`
/// until the connection has a free stream, and end on this thread. Everything but `inbox` and the stop flags
/// is confined to the manager's thread.
final class ChannelManagementWorker: IOHandler, @unchecked Sendable {
    private enum TimerTag: UInt8 { case sweep = 1 }
    /// How often deadlines and idleness are checked.
    static let sweepInterval: UInt64 = 50_000_000
    /// Sends of one call after connections ended with it provably unprocessed.
    static let maximumResends = 3

    let configuration: ChannelManagementConfiguration
    /// The CONNECT tunnel every connection opens first, when the configuration has a proxy (made once).
    let tunnel: ProxyTunnel?
    private let resolver: HostResolver
    private let inbox = Mutex<(calls: [ChannelManagementCall], closed: Bool)>(([], false))
    private let wakerReference = AtomicLazyReference<IOWaker>()
    private let stopRequested = Atomic<Bool>(false)
    private let stoppedFlag = Atomic<Bool>(false)

    @exclusivity(unchecked) private(set) unowned(unsafe) var loop: IOLoop!
    @exclusivity(unchecked) private var handlerID: IOHandlerID!
    @exclusivity(unchecked) private var waiting: [ChannelManagementCall] = []
    @exclusivity(unchecked) private var connection: ChannelManagementConnection?
    /// Connections closing (their transport still finishing), kept alive until `transportClosed`.
    @exclusivity(unchecked) private var closing: [ChannelManagementConnection] = []
    @exclusivity(unchecked) private var resolving = false
    @exclusivity(unchecked) private var stopping = false
    @exclusivity(unchecked) private var lastCallAt: UInt64 = 0

    init(configuration: ChannelManagementConfiguration, resolver: HostResolver) {
        self.configuration = configuration
        self.resolver = resolver
        tunnel = configuration.tunnel
    }

    func attach(to loop: IOLoop) {
        self.loop = loop
        _ = wakerReference.storeIfNil(loop.waker)
        handlerID = loop.register(self)
        loop.addTickHandler(handlerID)
        loop.setWakeHandler(handlerID, tag: 0)
        loop.schedule(at: loop.now &+ Self.sweepInterval, handler: handlerID, tag: TimerTag.sweep.rawValue, cookie: 0)
    }

    // MARK: - Any thread

    /// Takes a call; false once the manager is stopping (the caller ends it).
    func enqueue(_ call: ChannelManagementCall) -> Bool {
        let taken = inbox.withLock { state in
            guard !state.closed else { return false }
            state.calls.append(call)
            return true
        }
        if taken { wakerReference.load()?.wake() }
        return taken
    }

    func requestStop() {
        inbox.withLock { $0.closed = true }
        stopRequested.store(true, ordering: .releasing)
        wakerReference.load()?.wake()
    }

    var isStopped: Bool { stoppedFlag.load(ordering: .acquiring) }

    /// After the thread ended: every call still held ends as `.shutDown`.
    func finishRemainingAfterStop() {
        let left = inbox.withLock { state in
            defer { state.calls.removeAll() }
            return state.calls
        }
        for call in left + waiting { call.fail(.shutDown) }
        waiting.removeAll()
        connection?.failAll(.shutDown)
        for old in closing { old.failAll(.shutDown) }
    }

    // MARK: - Loop thread

    func tick(loop: IOLoop) {
        if !stopping && stopRequested.load(ordering: .acquiring) { beginStop() }
        let arrived = inbox.withLock { state in
            defer { state.calls.removeAll(keepingCapacity: true) }
            return state.calls
        }
        if !arrived.isEmpty {
            lastCallAt = loop.now
            waiting.append(contentsOf: arrived)
        }
        takeResolved()
        if stopping {
            for call in waiting { call.fail(.shutDown) }
            waiting.removeAll()
            if connection == nil && closing.isEmpty && !resolving { stoppedFlag.store(true, ordering: .releasing) }
            return
        }
        pump()
    }

    /// The key new connections sign with (a rotation's current one, when the configuration follows one).
    var currentProviderTokens: ProviderTokenSource? {
        configuration.providerKeys?.current ?? configuration.providerTokens
    }

    /// Opens a connection when calls wait and none is there; hands waiting calls to a ready one.
    private func pump() {
        guard !waiting.isEmpty else { return }
        if let connection, connection.isIdle, connection.providerTokens !== currentProviderTokens {
            // The key was rotated: a connection keeps its first key, so once its calls are done the next one goes
            // on a new connection (calls are rare here; until then the old key, still valid, signs them).
            retire(connection, reason: "the provider key was rotated")
        }
        guard let connection else {
            if !resolving { openConnection() }
            return
        }
        guard connection.isReady else { return }
        while !waiting.isEmpty, connection.hasFreeSlot {
            let call = waiting.removeFirst()
            if call.isFinished { continue }
            if !connection.submit(call) {
                waiting.insert(call, at: 0)
                retire(connection, reason: "the connection takes no more requests")
                return
            }
        }
    }

    private func openConnection() {
        if let fixed = configuration.connectAddresses {
            connect(to: configuration.addressFamilies.apply(to: fixed))
            return
        }
        resolving = true
        resolver.resolve(
            host: configuration.dialHost, port: configuration.dialPort, preference: configuration.addressFamilies
        ) { [self] result in
            resolvedBox.withLock { $0 = result }
            wakerReference.load()?.wake()
        }
    }
    private let resolvedBox = Mutex<Result<[SocketAddress], IOError>?>(nil)

    private func takeResolved() {
        guard resolving,
            let result = resolvedBox.withLock({ box in
                defer { box = nil }
                return box
            })
        else { return }
        resolving = false
        switch result {
        case .success(let addresses): connect(to: addresses)
        case .failure(let error): failWaiting(cause: "cannot resolve \(dialName): \(error)")
        }
    }

    /// Tries `addresses` in order (the next at once when a connect fails).
    private func connect(to addresses: [SocketAddress]) {
        guard !stopping, !addresses.isEmpty else {
            if addresses.isEmpty {
                failWaiting(cause: "\(dialName) has no address of the families asked for")
            }
            return
        }
        let tls: TLSConnection
        do {
            tls = try TLSConnection(client: configuration.tls, serverName: configuration.host)
        } catch {
            failWaiting(cause: "TLS: \(error)")
            return
        }
        let newConnection = ChannelManagementConnection(
            worker: self, tls: tls, remainingAddresses: Array(addresses.dropFirst()))
        connection = newConnection
        newConnection.start(address: addresses[0])
    }

    /// What connections dial, for messages.
    private var dialName: String { configuration.proxy.map { "proxy \($0.name)" } ?? configuration.host }

    private func failWaiting(cause: String) {
        for call in waiting { call.fail(.transport(cause, mayHaveBeenProcessed: false)) }
        waiting.removeAll()
    }

    private func retire(_ old: ChannelManagementConnection, reason: String) {
        if connection === old { connection = nil }
        if !closing.contains(where: { $0 === old }) { closing.append(old) }
        old.close(reason: reason)
    }

    // MARK: - From the connection

    func connectionReady(_ ready: ChannelManagementConnection) {
        pump()
    }

    /// A request never reached the server (never written, refused, above a GOAWAY's last stream): it goes
    /// first in line for the next connection.
    func requeue(_ call: ChannelManagementCall, cause: String) {
        call.resends += 1
        if stopping {
            call.fail(.shutDown)
        } else if call.resends > Self.maximumResends {
            call.fail(.transport(cause, mayHaveBeenProcessed: false))
        } else {
            waiting.insert(call, at: 0)
        }
    }

    /// A GOAWAY: the connection takes no new calls; the next ones open a fresh connection.
    func connectionDraining(_ draining: ChannelManagementConnection) {
        if connection === draining { connection = nil }
        if !closing.contains(where: { $0 === draining }) { closing.append(draining) }
    }

    func connectionClosed(_ closed: ChannelManagementConnection, cause: String, established: Bool, connectFailed: Bool)
    {
        closing.removeAll { $0 === closed }
        if connection === closed {
            connection = nil
            if connectFailed && !closed.remainingAddresses.isEmpty && !stopping {
                connect(to: closed.remainingAddresses)  // the host's next address, at once
                return
            }
            // A connection that never came up fails what waits (no reconnect loop behind the caller's back);
            // one that worked is replaced on demand.
            if !established { failWaiting(cause: cause) }
        }
        if stopping && connection == nil && closing.isEmpty && !resolving {
            stoppedFlag.store(true, ordering: .releasing)
        }
        if !stopping { pump() }
    }

    private func beginStop() {
        stopping = true
        for call in waiting { call.fail(.shutDown) }
        waiting.removeAll()
        if let connection { retire(connection, reason: "the manager is shutting down") }
    }

    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop) {}

    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop) {
        guard tag == TimerTag.sweep.rawValue else { return }
        let now = loop.now
        takeResolved()
        // Calls past their deadline end now, waiting or in flight (their streams are cancelled).
        if waiting.contains(where: { now >= $0.deadline }) {
            for call in waiting where now >= call.deadline { call.fail(.timedOut) }
            waiting.removeAll { $0.isFinished }
        }
        connection?.sweep(now: now)
        for old in closing { old.sweep(now: now) }
        if let connection, connection.isIdle, waiting.isEmpty,
            now &- max(lastCallAt, connection.lastActivityAt) >= configuration.idleTimeout.nanoseconds
        {
            retire(connection, reason: "idle for \(configuration.idleTimeout)")
        }
        if !stopping || connection != nil || !closing.isEmpty {
            loop.schedule(at: now &+ Self.sweepInterval, handler: handlerID, tag: TimerTag.sweep.rawValue, cookie: 0)
        }
        if !stopping { pump() }
    }
}

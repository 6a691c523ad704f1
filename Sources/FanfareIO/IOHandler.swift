/// A long-lived object (a connection, a listener) that receives the loop's completions and timers.
///
/// Every call happens on the loop's thread. A handler must not keep a strong reference to the loop it is
/// registered with (the loop keeps the handler): use `unowned` or the `loop` argument.
public protocol IOHandler: AnyObject {
    /// An operation finished. `result` is what the syscall returns: a byte count, an accepted fd, 0, or
    /// `-errno` when negative. `flags` are the CQE flags (`IORING_CQE_F_MORE` on multishot completions).
    /// Also called with `result == 0, flags == 0` for the wake-up set by `IOLoop.setWakeHandler`.
    func ioCompleted(tag: UInt8, result: Int32, flags: UInt32, loop: IOLoop)
    /// A timer set with `IOLoop.schedule` reached its deadline.
    func timerFired(tag: UInt8, cookie: UInt64, loop: IOLoop)
    /// Called at the end of every tick once added with `IOLoop.addTickHandler` (e.g. flush a send buffer).
    func tick(loop: IOLoop)
}

extension IOHandler {
    public func tick(loop: IOLoop) {}
}

/// A registered handler: its slot in the loop's table and the slot's generation at registration.
public struct IOHandlerID: Hashable, Sendable, CustomStringConvertible {
    let index: UInt32
    let generation: UInt32

    public var description: String { "handler#\(index).\(generation)" }
}

/// A scheduled timer: its slot in the loop's timer table and that slot's generation.
public struct IOTimerID: Hashable, Sendable, CustomStringConvertible {
    let index: UInt32
    let generation: UInt32

    public var description: String { "timer#\(index).\(generation)" }
}

/// Permission to send that ends: a shard leased from a cluster of nodes sends only until its lease's end, less a
/// margin (docs/deployment.md). A transport holding one checks it with a fresh clock reading right before each
/// send it submits, so a process stopped (SIGSTOP, a frozen VM) after producing and before sending sends nothing
/// once it resumes past that end. One clock reading per send submitted, none when there is no end.
public protocol SendingLease: AnyObject {
    /// The monotonic instant (`IOLoop.monotonicNanoseconds()`) sending must stop at; `.max`: never.
    var sendsUntil: UInt64 { get }
}

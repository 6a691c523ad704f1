import Glibc

/// How a node takes part in a cluster of `fanfare serve` nodes on one PostgreSQL (docs/deployment.md).
public struct ClusterConfiguration: Sendable {
    /// Unique among the nodes (a host name, a pod name). Leases are held in its name.
    public var nodeID: String
    /// The cluster's shard count, fixed when the first node starts (more than nodes: leases move one shard at a
    /// time). Every node's engine has this many shards (`client.workerCount`).
    public var shardCount: Int
    /// How long a lease lasts on the database's clock without renewal: also about how long a dead node's shards
    /// wait before another node takes them.
    public var leaseDuration: Duration = .seconds(6)
    /// A node stops sending a shard this long before its lease ends (its own clock against the database's);
    /// nil: a quarter of the lease, at most 1 s.
    public var safetyMargin: Duration? = nil

    /// The margin in use.
    public var margin: Duration { safetyMargin ?? min(.seconds(1), leaseDuration / 4) }
    /// A starting node announces itself and waits this long before taking leases, so that nodes started
    /// together see each other and share the shards (nil: one lease duration).
    public var joinWindow: Duration? = nil
    /// How often the feeds are read without a notification (notifications are lost while disconnected).
    public var pollInterval: Duration = .milliseconds(500)
    /// Registry change-feed rows older than this are pruned, except those a live node has not read yet.
    public var changeRetention: Duration = .seconds(600)
    /// Rebalancing: how long a shard handed to a joining node may take to drain and write its last checkpoint
    /// before it is handed over anyway (the taker then resumes from its last durable checkpoint).
    public var handoverTimeout: Duration = .seconds(10)

    public init(nodeID: String, shardCount: Int) {
        self.nodeID = nodeID
        self.shardCount = shardCount
    }

    /// `<host name>-<process id>`: unique on a machine and across hosts with distinct names.
    public static func defaultNodeID() -> String {
        var name = [CChar](repeating: 0, count: 256)
        let host =
            gethostname(&name, name.count) == 0
            ? String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "node"
        let printable = host.unicodeScalars.filter { $0.value > 0x20 && $0.value < 0x7F }.map(String.init).joined()
        return "\(printable.isEmpty ? "node" : String(printable.prefix(100)))-\(getpid())"
    }

    /// Renewals come three times per lease, so two may fail before it ends.
    public var renewInterval: Duration { leaseDuration / 3 }

    /// Throws the first setting that cannot work.
    public func validate() throws(ClusterError) {
        guard !nodeID.isEmpty, nodeID.utf8.count <= 200, nodeID.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw .invalidConfiguration("node id '\(nodeID)' must be 1-200 printable ASCII characters without spaces")
        }
        guard (1...4096).contains(shardCount) else {
            throw .invalidConfiguration("shard count \(shardCount) must be in 1...4096")
        }
        guard leaseDuration >= .seconds(1) && leaseDuration <= .seconds(600) else {
            throw .invalidConfiguration("lease duration \(leaseDuration) must be in 1 s...600 s")
        }
        guard margin >= .zero && margin * 3 < leaseDuration else {
            throw .invalidConfiguration(
                "safety margin \(margin) must be at least 0 and under a third of the lease (\(leaseDuration))")
        }
        if let joinWindow, joinWindow < .zero || joinWindow > .seconds(3600) {
            throw .invalidConfiguration("join window \(joinWindow) must be in 0...3600 s")
        }
        guard pollInterval >= .milliseconds(10) && pollInterval <= .seconds(60) else {
            throw .invalidConfiguration("poll interval \(pollInterval) must be in 10 ms...60 s")
        }
    }
}

/// Why a node could not join or run in its cluster.
public enum ClusterError: Error, Sendable, CustomStringConvertible {
    case invalidConfiguration(String)
    /// The database refused or failed (joining, leases).
    case database(String)
    /// The engine is not set up for leased shards, or has another shard count.
    case engine(String)

    public var description: String {
        switch self {
        case .invalidConfiguration(let problem): return "cluster: \(problem)"
        case .database(let problem): return "cluster: \(problem)"
        case .engine(let problem): return "cluster: \(problem)"
        }
    }
}

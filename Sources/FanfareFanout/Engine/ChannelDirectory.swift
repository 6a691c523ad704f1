/// The engine's channels, under its control lock: name ↔ id (the id every shard indexes its audiences by and
/// push cookies carry in 15 bits), the newest timestamp published on each, and the last command that named it.
///
/// Ids of forgotten channels are reused, so `FanoutEngine.maximumChannels` bounds the channels in use at one
/// time, not every channel since the start. A channel is forgotten after a `ChannelSweep` in which no shard
/// used it and no command named it since the sweep was queued.
struct ChannelDirectory {
    private struct Entry {
        var name: String
        /// The newest `content.timestamp` published (older updates are refused); nil before the first.
        var latestTimestamp: Int64?
        /// The command sequence of the last command that named it.
        var lastMention: UInt64
        /// Registrations that took its id and have not queued their command yet (durable write in between):
        /// the id must not be forgotten meanwhile.
        var pins = 0
    }

    private var ids: [String: UInt16] = [:]
    private var entries: [Entry?] = []
    private var freeIDs: [UInt16] = []
    let limit: Int

    init(limit: Int) { self.limit = limit }

    var count: Int { ids.count }

    func id(of name: String) -> UInt16? { ids[name] }

    /// The names of the channels tracked now, sorted.
    var names: [String] { ids.keys.sorted() }

    /// Whether `names` fit: the new ones among them plus the known ones stay within `limit`.
    func canAdmit(_ names: some Sequence<String>) -> Bool {
        var new = Set<String>()
        for name in names where ids[name] == nil { new.insert(name) }
        return ids.count + new.count <= limit
    }

    /// The id of `name`, adding it if new (the caller checked `canAdmit`), marked as named by command
    /// `sequence`; `pin` keeps it from being forgotten until `unpin`.
    mutating func mention(_ name: String, sequence: UInt64, pin: Bool = false) -> UInt16 {
        let id = assign(name, sequence: sequence)
        if pin { entries[Int(id)]!.pins += 1 }
        return id
    }

    /// A command naming the pinned channel `id` is queued now (command `sequence`).
    mutating func unpin(_ id: UInt16, sequence: UInt64) {
        entries[Int(id)]!.pins -= 1
        entries[Int(id)]!.lastMention = max(entries[Int(id)]!.lastMention, sequence)
    }

    private mutating func assign(_ name: String, sequence: UInt64) -> UInt16 {
        if let id = ids[name] {
            entries[Int(id)]!.lastMention = sequence
            return id
        }
        precondition(ids.count < limit, "channel admitted past the limit")
        let id: UInt16
        if let free = freeIDs.popLast() {
            id = free
            entries[Int(id)] = Entry(name: name, latestTimestamp: nil, lastMention: sequence)
        } else {
            id = UInt16(entries.count)
            entries.append(Entry(name: name, latestTimestamp: nil, lastMention: sequence))
        }
        ids[name] = id
        return id
    }

    func latestTimestamp(of name: String) -> Int64? {
        ids[name].flatMap { entries[Int($0)]!.latestTimestamp }
    }

    mutating func setLatestTimestamp(_ timestamp: Int64, of id: UInt16) {
        entries[Int(id)]!.latestTimestamp = timestamp
    }

    /// After a sweep every shard answered: forgets the channels no shard uses and no command named since the
    /// sweep was queued. Returns how many were forgotten.
    @discardableResult
    mutating func forget(after sweep: ChannelSweep) -> Int {
        let used = sweep.usedChannels
        var forgotten = 0
        for id in entries.indices {
            guard let entry = entries[id], entry.pins == 0, !used.contains(UInt16(id)),
                entry.lastMention < sweep.sequence
            else { continue }
            ids[entry.name] = nil
            entries[id] = nil
            freeIDs.append(UInt16(id))
            forgotten += 1
        }
        // Drop trailing free ids so the table shrinks back.
        while let last = entries.last, last == nil { entries.removeLast() }
        freeIDs.removeAll { Int($0) >= entries.count }
        return forgotten
    }
}

import FanfareCore

/// The bundle ids a simulator serves, by app index (`SimulatorConfiguration.servedBundleIDs`), kept in one
/// allocation so that a request's topic or path is matched, and an accepted push's app logged, without allocating.
///
/// Immutable after init, so one table may be read by several threads (`@unchecked Sendable` for the raw storage).
final class SimulatedAppTable: @unchecked Sendable {
    let bundleIDs: [String]
    private let storage: UnsafeMutableRawBufferPointer
    /// `bundleIDs[i]`'s bytes are `storage[starts[i]..<starts[i + 1]]`.
    private let starts: [Int]

    init(bundleIDs: [String]) {
        self.bundleIDs = bundleIDs
        var starts = [0]
        for bundleID in bundleIDs { starts.append(starts[starts.count - 1] + bundleID.utf8.count) }
        self.starts = starts
        storage = .allocate(byteCount: max(1, starts[starts.count - 1]), alignment: 1)
        for (index, bundleID) in bundleIDs.enumerated() {
            for (offset, byte) in bundleID.utf8.enumerated() { storage[starts[index] + offset] = byte }
        }
    }

    convenience init(_ configuration: SimulatorConfiguration) {
        self.init(bundleIDs: configuration.servedBundleIDs)
    }

    deinit { storage.deallocate() }

    var count: Int { bundleIDs.count }

    /// App `index`'s bundle id bytes (valid as long as the table).
    func bundle(_ index: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: storage.baseAddress! + starts[index], count: starts[index + 1] - starts[index])
    }

    /// The app whose bundle id `topic` is, alone or with a push-type suffix, and which suffix. When two apps match
    /// (`com.example.app` + `.voip` and an app `com.example.app.voip`), the longer bundle id wins: it names the topic
    /// exactly.
    func match(topic: UnsafeRawBufferPointer) -> (app: Int, kind: TopicKind)? {
        var found: (app: Int, kind: TopicKind)?
        var foundLength = -1
        for index in 0..<bundleIDs.count {
            let bundle = bundle(index)
            guard bundle.count > foundLength, let kind = TopicKind.classify(topic: topic, bundle: bundle) else {
                continue
            }
            found = (index, kind)
            foundLength = bundle.count
        }
        return found
    }
}

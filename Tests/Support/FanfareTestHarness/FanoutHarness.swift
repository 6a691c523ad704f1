// A fan-out engine on a real SQLite registry file, pushing to the harness's real simulator over loopback.
import FanfareClient
import FanfareCore
import FanfareFanout
import FanfareSQLite
import FanfareStorage
import FanfareSimulator
import FanfareTestSupport
import Foundation
import Logging
import Metrics
import Synchronization
import Testing

/// Collects invalidation reports from the engine's registry thread.
package final class InvalidationCollector: Sendable {
    package init() {}

    private let reports = Mutex<[InvalidationReport]>([])
    package func record(_ report: InvalidationReport) { reports.withLock { $0.append(report) } }
    package var all: [InvalidationReport] { reports.withLock { $0 } }
}

package struct FanoutFixture {
    package let harness: TestHarness
    package let databasePath: String
    package let store: SQLiteTokenStore
    package let invalidations = InvalidationCollector()

    package init(_ simulator: SimulatorConfiguration = SimulatorConfiguration(), databasePath: String? = nil) throws {
        harness = try TestHarness(simulator)
        self.databasePath = databasePath ?? harness.directory + "/fanfare.db"
        store = try SQLiteTokenStore(path: self.databasePath)
    }

    /// An engine on this fixture's store and simulator: test-sized retries, no minimum interval unless asked.
    package func engine(
        connections: Int = 2, streams: Int = 1000, minimumInterval: Duration? = nil,
        retryDelays: [Duration] = [.milliseconds(10), .milliseconds(20), .milliseconds(40)],
        configure: (inout FanoutConfiguration) -> Void = { _ in }
    ) throws -> FanoutEngine {
        var client = try harness.clientConfiguration()
        client.connectionsPerWorker = connections
        client.maxConcurrentStreamsPerConnection = streams
        var configuration = FanoutConfiguration(client: client, bundleID: Fixture.bundleID, environment: .production)
        configuration.minimumInterval = minimumInterval
        configuration.retryDelays = retryDelays
        configure(&configuration)
        let invalidations = self.invalidations
        return try FanoutEngine(
            configuration: configuration, store: store, onInvalidation: { invalidations.record($0) })
    }

    /// Update tokens (80 bytes) following `channel`.
    package static func registrations(
        _ range: Range<Int>, channel: String, kind: TokenKind = .update, salt: UInt64 = 0, frequent: Bool = false
    ) -> [TokenRegistration] {
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        return range.map { index in
            TokenRegistration(
                token: longToken(index, salt: salt), kind: kind,
                activityID: kind == .update ? "activity-\(index)" : nil,
                deviceID: kind == .pushToStart ? "device-\(index)" : nil,
                attributesType: kind == .pushToStart ? "MatchAttributes" : nil, bundleID: Fixture.bundleID,
                environment: .production, frequentUpdates: frequent, channels: [channel], createdAt: now)
        }
    }
}

/// A distinct 80-byte token per index (the size Live Activity tokens are seen at).
package func longToken(_ index: Int, salt: UInt64 = 0) -> DeviceToken {
    var bytes: [UInt8] = []
    for part in 0..<3 {
        makeToken(index, salt: salt &+ UInt64(part) &* 0x1234_5678_9ABC).withUnsafeBytes {
            bytes.append(contentsOf: $0)
        }
    }
    return try! DeviceToken(bytes: bytes.prefix(80))
}

package func scoreUpdate(
    channel: String, timestamp: Int64, home: Int, away: Int, alert: Bool = false, priority: UpdatePriority = .auto
)
    throws -> ChannelUpdate
{
    var content = LiveActivityContent(event: .update, timestamp: timestamp)
    content.contentState = try RawJSON(validating: #"{"home":\#(home),"away":\#(away)}"#)
    if alert { content.alert = LiveActivityAlert(title: .plain("Goal!"), body: .plain("\(home)-\(away)")) }
    return ChannelUpdate(channel: channel, content: content, priority: priority)
}

extension AcceptedRecord {
    /// The `timestamp` inside the accepted payload.
    package var payloadTimestamp: Int? {
        guard let range = line.range(of: "\"timestamp\":") else { return nil }
        return Int(line[range.upperBound...].prefix { $0.isNumber })
    }
}

/// Keeps what the engine logs (a swift-log handler of its own: no process-wide bootstrap).
package final class LogRecorder: Sendable {
    package init() {}

    private let lines = Mutex<[(Logger.Level, String)]>([])
    package func append(_ level: Logger.Level, _ line: String) { lines.withLock { $0.append((level, line)) } }
    package var all: [(level: Logger.Level, line: String)] { lines.withLock { $0.map { (level: $0.0, line: $0.1) } } }

    package var logger: Logger {
        let recorder = self
        return Logger(label: "test.fanout") { _ in RecordingLogHandler(recorder: recorder) }
    }
}

package struct RecordingLogHandler: LogHandler {
    package let recorder: LogRecorder
    package var metadata: Logger.Metadata = [:]
    package var logLevel: Logger.Level = .trace
    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    package func log(event: LogEvent) { recorder.append(event.level, "\(event.message)") }
}

/// Keeps the engine's metrics (passed as `FanoutConfiguration.metricsFactory`, not bootstrapped globally).
package final class MetricsRecorder: MetricsFactory, Sendable {
    package init() {}

    package final class Value: CounterHandler, RecorderHandler, TimerHandler, Sendable {
        private let value = Mutex<Double>(0)
        package var current: Double { value.withLock { $0 } }
        package func increment(by amount: Int64) { value.withLock { $0 += Double(amount) } }
        package func reset() { value.withLock { $0 = 0 } }
        package func record(_ value: Int64) { self.value.withLock { $0 = Double(value) } }
        package func record(_ value: Double) { self.value.withLock { $0 = value } }
        package func recordNanoseconds(_ duration: Int64) { value.withLock { $0 = Double(duration) } }
    }

    private let values = Mutex<[String: Value]>([:])
    private func value(_ label: String) -> Value {
        values.withLock { values in
            if let value = values[label] { return value }
            let value = Value()
            values[label] = value
            return value
        }
    }

    package subscript(label: String) -> Double? { values.withLock { $0[label]?.current } }

    package func makeCounter(label: String, dimensions: [(String, String)]) -> CounterHandler { value(label) }
    package func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> RecorderHandler {
        value(label)
    }
    package func makeTimer(label: String, dimensions: [(String, String)]) -> TimerHandler { value(label) }
    package func destroyCounter(_ handler: CounterHandler) {}
    package func destroyRecorder(_ handler: RecorderHandler) {}
    package func destroyTimer(_ handler: TimerHandler) {}
}

extension Wave {
    /// Waits for completion with a hang guard (not a timing assertion).
    package func completionWithin(_ timeout: Duration) async -> Bool {
        await eventually(timeout: timeout) { self.isComplete }
    }
}

// What every cluster test reads from the simulator, and what every take-over of a shard must leave behind.
import FanfareFanout
import FanfareTestHarness
import Testing

enum TakeOverChecks {
    /// The simulator's accepted pushes: per token, the apns-ids of its pushes in order.
    static func accepted(_ harness: TestHarness) throws -> [String: [String]] {
        var byToken: [String: [String]] = [:]
        for record in try harness.acceptedLog() {
            guard let token = record.string("token"), let id = record.string("apns-id") else { continue }
            byToken[token, default: []].append(id)
        }
        return byToken
    }

    /// A wave whose shards changed hands: one outcome per token, every token reached, at most `duplicateBound`
    /// tokens sent again (what ran past the last durable checkpoints), each resend with its first apns-id.
    /// Returns how many tokens were sent more than once.
    @discardableResult
    static func expectOutcome(
        _ report: WaveReport, _ harness: TestHarness, count: Int, duplicateBound: Int,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Int {
        #expect(
            report.targeted == count && report.delivered == count && report.accounted == count, "\(report)",
            sourceLocation: sourceLocation)
        let log = try accepted(harness)
        #expect(log.count == count, "every token reached", sourceLocation: sourceLocation)
        let duplicates = log.values.filter { $0.count > 1 }
        #expect(
            duplicates.count <= duplicateBound, "\(duplicates.count) tokens sent twice (at most \(duplicateBound))",
            sourceLocation: sourceLocation)
        #expect(
            duplicates.allSatisfy { Set($0).count == 1 }, "a resend carries its first attempt's apns-id",
            sourceLocation: sourceLocation)
        return duplicates.count
    }
}

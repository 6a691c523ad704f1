// What every take-over of a shard must leave behind, as the cluster tests check it.
import FanfareFanout
import FanfareTestHarness
import Testing

enum TakeOverChecks {

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
        let log = try harness.acceptedIDsByToken()
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

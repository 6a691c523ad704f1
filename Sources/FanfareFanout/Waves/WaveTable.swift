/// Renders wave reports as a fixed-width text table (the demo's and operators' view of a match).
public enum WaveTable {
    /// One row per report; `labels` (by wave id) say what each update was.
    public static func render(_ reports: [WaveReport], labels: [UInt64: String] = [:]) -> String {
        let header = [
            "wave", "channel", "update", "targeted", "delivered", "superseded", "downgraded", "invalidated", "failed",
            "expired", "1st ack", "makespan", "pushes/s", "broadcast",
        ]
        var rows = [header]
        for report in reports {
            rows.append([
                "\(report.id)\(marker(report.state))", report.channel, labels[report.id] ?? report.event.rawValue,
                group(report.targeted), group(report.delivered), group(report.superseded), group(report.downgraded),
                group(report.invalidated), group(report.failed), group(report.expired),
                milliseconds(report.timeToFirstAck),
                milliseconds(report.makespan), report.pushesPerSecond > 0 ? group(Int(report.pushesPerSecond)) : "-",
                broadcast(report.broadcast),
            ])
        }
        var widths = Array(repeating: 0, count: header.count)
        for row in rows { for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) } }
        let leftAligned: Set<Int> = [1, 2, header.count - 1]
        var lines: [String] = []
        for (index, row) in rows.enumerated() {
            var cells: [String] = []
            for (column, cell) in row.enumerated() {
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                cells.append(leftAligned.contains(column) ? cell + padding : padding + cell)
            }
            lines.append(cells.joined(separator: "  "))
            if index == 0 { lines.append(String(repeating: "-", count: lines[0].count)) }
        }
        if reports.contains(where: { $0.state == .running }) { lines.append("* still running") }
        if reports.contains(where: { $0.state == .interrupted }) {
            lines.append("~ interrupted by a shutdown: the next start on the same wave store resumes it")
        }
        if reports.contains(where: { $0.broadcast != nil }) {
            lines.append(
                "broadcast: one request to the channel's APNs broadcast channel for its subscribed activities "
                    + "(outcome, subscribed activities it reaches, requests, priority); the other columns count per-token pushes"
            )
        }
        if reports.contains(where: { $0.state == .paused }) {
            lines.append("! paused: the invalid-token breaker is open (FanoutEngine.breakerState)")
        }
        return lines.joined(separator: "\n")
    }

    /// "delivered → 400 (1 × p10)", "superseded → 400 (0)", "-" without a broadcast.
    static func broadcast(_ report: BroadcastReport?) -> String {
        guard let report else { return "-" }
        var outcome = report.outcome.description
        if let reason = report.failureReason, report.outcome == .failed { outcome += " \(reason)" }
        let priority = report.priority.map { " × p\($0)" } ?? ""
        return "\(outcome) → \(group(report.subscribers)) (\(report.requests)\(priority))"
    }

    static func marker(_ state: WaveState) -> String {
        switch state {
        case .running: return "*"
        case .paused: return "!"
        case .complete: return ""
        case .interrupted: return "~"
        }
    }

    /// 1234567 → "1,234,567".
    public static func group(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (index, character) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(character)
        }
        return value < 0 ? "-" + out : out
    }

    static func milliseconds(_ nanoseconds: UInt64?) -> String {
        guard let nanoseconds else { return "-" }
        let ms = Double(nanoseconds) / 1e6
        return ms >= 1000 ? String(format: "%.2f s", ms / 1000) : String(format: "%.0f ms", ms)
    }
}

import Foundation

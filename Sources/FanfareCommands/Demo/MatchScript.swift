import FanfareCore
import FanfareFanout

/// What the demo plays: a few matches with kick-off, clock ticks, goals (one burst of overlapping ones that
/// latest-state-wins has to sort out) and the final whistle, on a timeline in seconds from kick-off.
struct MatchScript {
    struct Step {
        /// Seconds after the start of play.
        let at: Double
        let channel: String
        let label: String
        let make: (_ timestamp: Int64) throws -> ChannelUpdate
    }

    let steps: [Step]

    /// `matches` channels named match-1...; match-1 is the featured one with the goal burst.
    static func match(channels: [String], dismissAfter: Int64) -> MatchScript {
        var steps: [Step] = []
        for channel in channels {
            steps.append(
                Step(at: 0, channel: channel, label: "kick-off (push-to-start)") { timestamp in
                    var content = LiveActivityContent(event: .start, timestamp: timestamp)
                    content.contentState = try RawJSON(validating: #"{"home":0,"away":0,"minute":0}"#)
                    content.alert = LiveActivityAlert(title: .plain("Kick-off"), body: .plain("\(channel) has started"))
                    content.attributesType = "MatchAttributes"
                    content.attributes = try RawJSON(validating: #"{"match":"\#(channel)"}"#)
                    return ChannelUpdate(channel: channel, content: content, priority: .auto)
                })
        }
        func score(
            _ at: Double, _ channel: String, _ label: String, home: Int, away: Int, minute: Int, alert: String?
        ) -> Step {
            Step(at: at, channel: channel, label: label) { timestamp in
                var content = LiveActivityContent(event: .update, timestamp: timestamp)
                content.contentState = try RawJSON(
                    validating: #"{"home":\#(home),"away":\#(away),"minute":\#(minute)}"#)
                if let alert {
                    content.alert = LiveActivityAlert(title: .plain(alert), body: .plain("\(home)-\(away)"))
                }
                // Clock ticks go at priority 5 and never spend the budget; goals use auto (10 while it lasts).
                return ChannelUpdate(channel: channel, content: content, priority: alert == nil ? .normal : .auto)
            }
        }
        let featured = channels[0]
        let second = channels.count > 1 ? channels[1] : featured
        let third = channels.count > 2 ? channels[2] : featured
        steps += [
            score(1.0, featured, "clock 10'", home: 0, away: 0, minute: 10, alert: nil),
            score(2.0, second, "goal 0-1", home: 0, away: 1, minute: 14, alert: "Goal!"),
            score(3.0, featured, "goal 1-0", home: 1, away: 0, minute: 23, alert: "Goal!"),
            score(4.0, third, "clock 30'", home: 0, away: 0, minute: 30, alert: nil),
            // The burst: a goal, VAR takes it back, then the equaliser — 300 ms apart, faster than a wave.
            score(5.0, featured, "goal 2-0", home: 2, away: 0, minute: 41, alert: "Goal!"),
            score(5.3, featured, "VAR: no goal 1-0", home: 1, away: 0, minute: 42, alert: "Goal disallowed"),
            score(5.6, featured, "goal 1-1", home: 1, away: 1, minute: 43, alert: "Goal!"),
            score(7.0, second, "clock 60'", home: 0, away: 1, minute: 60, alert: nil),
        ]
        // With fewer than three matches the featured one stands in for the missing ones, and its own score wins
        // (a dictionary literal with a repeated key traps: `--matches 2` did).
        var finals: [String: (Int, Int)] = [:]
        for (channel, score) in [(third, (0, 0)), (second, (0, 1)), (featured, (1, 1))] { finals[channel] = score }
        for channel in channels {
            let (home, away) = finals[channel] ?? (0, 0)
            steps.append(
                Step(at: 9.0, channel: channel, label: "full time (end)") { timestamp in
                    var content = LiveActivityContent(event: .end, timestamp: timestamp)
                    content.contentState = try RawJSON(validating: #"{"home":\#(home),"away":\#(away),"minute":90}"#)
                    content.alert = LiveActivityAlert(title: .plain("Full time"), body: .plain("\(home)-\(away)"))
                    content.dismissalDate = timestamp + dismissAfter
                    return ChannelUpdate(channel: channel, content: content, priority: .auto)
                })
        }
        return MatchScript(steps: steps.sorted { $0.at < $1.at })
    }

    /// One update to one channel: the fan-out benchmark (a 1,000,000-token wave).
    static func singleWave(channel: String) -> MatchScript {
        MatchScript(steps: [
            Step(at: 0, channel: channel, label: "goal 1-0") { timestamp in
                var content = LiveActivityContent(event: .update, timestamp: timestamp)
                content.contentState = try RawJSON(validating: #"{"home":1,"away":0,"minute":23}"#)
                content.alert = LiveActivityAlert(title: .plain("Goal!"), body: .plain("1-0"))
                return ChannelUpdate(channel: channel, content: content, priority: .auto)
            }
        ])
    }
}

import FanfareTestSupport
import Testing

/// Random schedules over several shards behind the engine's routing (`EngineSchedule`). The test command runs
/// seeds 1...300; `scripts/simulate-shard --only engine` runs any range or replays one (FANFARE_SCHEDULE_SEED).
@Suite(.ownThread) struct EngineScheduleTests {
    @Test func randomSchedulesKeepEveryRule() {
        var coverage = EngineSchedule.Coverage()
        ScheduleSeeds.run("engine", defaultCount: 300) { seed, steps in
            let schedule = EngineSchedule(seed: seed)
            defer { coverage = coverage + schedule.coverage }
            try schedule.run(steps: steps)
        }
        print("engine schedules exercised: \(coverage.description)")
        // A schedule that reaches none of these checks nothing of them: the generator must keep reaching them.
        #expect(coverage.wavePushes > 0 && coverage.wavesCompleted > 0)
    }
}

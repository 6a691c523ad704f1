// The autoscaler's rule with made-up measurements and a made-up clock: scale up when credit-bound (by
// Little's law, in steps), never past the maximum, back off after failures, hold when CPU-bound or while
// connections come up, scale down after the idle time, never below the minimum.
import FanfareClient
import FanfareTLS
import FanfareTestHarness
import FanfareTestSupport
import Testing

@Suite(.ownThread) struct ConnectionAutoscalerTests {
    private static let interval: UInt64 = 250_000_000
    private static let ms: UInt64 = 1_000_000

    private func autoscaler(
        minimum: Int = 1, maximum: Int = 16, step: Int = 4, idle: Duration = .seconds(1)
    ) -> ConnectionAutoscaler {
        ConnectionAutoscaler(
            settings: ConnectionAutoscaling(
                minimumConnections: minimum, maximumConnections: maximum, decisionInterval: .milliseconds(250),
                idleTimeout: idle,
                maximumNewConnections: step),
            backoffMinimum: .milliseconds(100), backoffMaximum: .seconds(1))
    }

    /// `connections` × `limit` streams full the whole interval at a round trip of `roundTrip` ms, the worker
    /// busy `cpu` of the time.
    private func creditBound(
        connections: Int, limit: Int = 100, roundTrip: Double = 50, cpu: Double = 0.1, ready: Int? = nil
    )
        -> ConnectionAutoscaler.Sample
    {
        let inFlight = connections * limit
        let completions = Int(Double(inFlight) / (roundTrip / 1000) * 0.25)
        return ConnectionAutoscaler.Sample(
            elapsed: Self.interval, creditBound: Self.interval, inFlightTime: Double(inFlight) * Double(Self.interval),
            peakInFlight: inFlight, completions: completions, cpuTime: UInt64(cpu * Double(Self.interval)),
            connections: connections, readyConnections: ready ?? connections, streamLimit: limit)
    }

    private func quiet(connections: Int, peak: Int, limit: Int = 100) -> ConnectionAutoscaler.Sample {
        ConnectionAutoscaler.Sample(
            elapsed: Self.interval, creditBound: 0, inFlightTime: Double(peak) * Double(Self.interval) / 2,
            peakInFlight: peak,
            completions: peak, cpuTime: Self.interval / 100, connections: connections, readyConnections: connections,
            streamLimit: limit)
    }

    @Test func creditBoundScalesUpByLittlesLawInSteps() {
        var scaler = autoscaler(step: 4)
        // 2 connections × 100 streams at 50 ms: 4,000 pushes/s with 10 % CPU, so the worker could send
        // 40,000/s: 2,000 in flight = 20 connections wanted; 4 more at most per decision.
        #expect(
            scaler.decide(now: Self.interval, creditBound(connections: 2)) == .scaleUp(by: 4, reason: scaler.lastReason)
        )
        #expect(scaler.lastReason.contains("wants 16 connections"), "\(scaler.lastReason)")  // capped at the maximum
        // The 6 came up within the interval: the next decision only measures them, the one after decides.
        #expect(scaler.decide(now: 2 * Self.interval, creditBound(connections: 6)) == .hold)
        #expect(scaler.lastReason.contains("measuring"), "\(scaler.lastReason)")
        #expect(
            scaler.decide(now: 3 * Self.interval, creditBound(connections: 6))
                == .scaleUp(by: 4, reason: scaler.lastReason))
        // At half CPU it could send twice its rate: 2 × 2 connections' worth = 4 wanted, 2 more.
        var second = autoscaler(step: 4)
        guard case .scaleUp(let by, _) = second.decide(now: Self.interval, creditBound(connections: 2, cpu: 0.5)) else {
            Issue.record("expected a scale-up: \(second.lastReason)")
            return
        }
        #expect(by == 2, "\(second.lastReason)")
    }

    @Test func aScaleUpThatDidNotRaiseTheRateStopsScalingUp() {
        var scaler = autoscaler(step: 4, idle: .seconds(2))
        var now = Self.interval
        guard case .scaleUp(4, _) = scaler.decide(now: now, creditBound(connections: 2)) else {
            Issue.record("expected a scale-up: \(scaler.lastReason)")
            return
        }
        // 6 connections came up (one interval measuring the ramp, then a settled one) ...
        now += Self.interval
        #expect(scaler.decide(now: now, creditBound(connections: 6, ready: 4)) == .hold)
        now += Self.interval
        #expect(scaler.decide(now: now, creditBound(connections: 6)) == .hold)
        #expect(scaler.lastReason.contains("measuring"), "\(scaler.lastReason)")
        // ... and carry the rate 2 did: 600 in flight at a 150 ms round trip. The server is the limit.
        now += Self.interval
        #expect(scaler.decide(now: now, creditBound(connections: 6, roundTrip: 150)) == .hold)
        #expect(scaler.lastReason.contains("the server or network is the limit"), "\(scaler.lastReason)")
        now += Self.interval
        #expect(scaler.decide(now: now, creditBound(connections: 6, roundTrip: 150)) == .hold)
        #expect(scaler.plateauUntil - now == 3 * Self.interval, "4 decision intervals from the one before")
        // After that it tries again (a noisy interval must not stop it for long) ...
        now = scaler.plateauUntil
        guard case .scaleUp(4, _) = scaler.decide(now: now, creditBound(connections: 6, roundTrip: 150)) else {
            Issue.record("expected another try: \(scaler.lastReason)")
            return
        }
        // ... (the interval after a scale-up only measures, even with every new connection up at once) ...
        now += Self.interval
        #expect(scaler.decide(now: now, creditBound(connections: 10, roundTrip: 250)) == .hold)
        #expect(scaler.lastReason.contains("measuring"), "\(scaler.lastReason)")
        // ... and when that did not help either, waits twice as long (at most the idle time, 2 s here).
        now += Self.interval
        #expect(scaler.decide(now: now, creditBound(connections: 10, roundTrip: 250)) == .hold)
        #expect(scaler.plateauUntil - now == 8 * Self.interval, "\(scaler.lastReason)")
        now = scaler.plateauUntil
        guard case .scaleUp = scaler.decide(now: now, creditBound(connections: 10, roundTrip: 250)) else {
            Issue.record("expected another try: \(scaler.lastReason)")
            return
        }
        // A scale-up that did raise the rate (10 → 14 connections at the same round trip) goes on.
        now += Self.interval
        #expect(scaler.decide(now: now, creditBound(connections: 14, roundTrip: 250)) == .hold)
        #expect(scaler.lastReason.contains("measuring"), "\(scaler.lastReason)")
        now += Self.interval
        guard case .scaleUp(2, _) = scaler.decide(now: now, creditBound(connections: 14, roundTrip: 250)) else {
            Issue.record("the rate rose with the connections: \(scaler.lastReason)")
            return
        }
    }

    @Test func neverPastTheMaximum() {
        var scaler = autoscaler(maximum: 6, step: 4)
        guard case .scaleUp(let by, _) = scaler.decide(now: Self.interval, creditBound(connections: 4)) else {
            Issue.record("expected a scale-up: \(scaler.lastReason)")
            return
        }
        #expect(by == 2)
        #expect(scaler.decide(now: 2 * Self.interval, creditBound(connections: 6)) == .hold)
        #expect(scaler.lastReason.contains("maximum"), "\(scaler.lastReason)")
    }

    @Test func holdsWhileConnectionsComeUpOrTheCPUIsTheLimit() {
        var scaler = autoscaler()
        #expect(scaler.decide(now: Self.interval, creditBound(connections: 4, ready: 3)) == .hold)
        #expect(scaler.lastReason.contains("waiting for 1"), "\(scaler.lastReason)")
        // The first interval with all of them up still measured their ramp.
        #expect(scaler.decide(now: 2 * Self.interval, creditBound(connections: 4)) == .hold)
        #expect(scaler.lastReason.contains("measuring"), "\(scaler.lastReason)")
        #expect(scaler.decide(now: 2 * Self.interval, creditBound(connections: 4, cpu: 0.95)) == .hold)
        #expect(scaler.lastReason.contains("CPU-bound"), "\(scaler.lastReason)")
        // Credit-bound for a moment only (a quarter of the interval): not the limit.
        var brief = creditBound(connections: 4)
        brief.creditBound = Self.interval / 4
        #expect(scaler.decide(now: 3 * Self.interval, brief) == .hold)
    }

    @Test func failedConnectionsBackScaleUpsOffExponentially() {
        var scaler = autoscaler()
        var now = Self.interval
        scaler.connectionFailed(now: now)
        #expect(scaler.backoff == 100 * Self.ms)
        #expect(scaler.decide(now: now + 50 * Self.ms, creditBound(connections: 2)) == .hold)
        #expect(scaler.lastReason.contains("backing off"))
        now += 100 * Self.ms
        guard case .scaleUp = scaler.decide(now: now, creditBound(connections: 2)) else {
            Issue.record("the back-off ended: \(scaler.lastReason)")
            return
        }
        // Each further failure doubles the wait, up to the maximum (1 s here).
        var waits: [UInt64] = []
        for _ in 0..<6 {
            scaler.connectionFailed(now: now)
            waits.append(scaler.backoff / Self.ms)
            #expect(scaler.decide(now: scaler.holdUntil - 1, creditBound(connections: 2)) == .hold)
            now = scaler.holdUntil
        }
        #expect(waits == [200, 400, 800, 1000, 1000, 1000])
        // A new connection that proves usable starts the back-off over.
        scaler.connectionProvedUsable()
        scaler.connectionFailed(now: now)
        #expect(scaler.backoff == 100 * Self.ms)
    }

    @Test func idleConnectionsGoAfterTheIdleTimeNeverBelowTheMinimum() {
        var scaler = autoscaler(minimum: 2, idle: .seconds(1))
        var now: UInt64 = 0
        var connections = 5
        var downs = 0
        // Peak 150 in flight: fits in fewer connections at half their 100-stream limit while 150 × 2 ≤ (n-1) × 100.
        for _ in 0..<40 {
            now += Self.interval
            switch scaler.decide(now: now, quiet(connections: connections, peak: 150)) {
            case .scaleDown:
                connections -= 1
                downs += 1
            case .scaleUp: Issue.record("scaled up while idle")
            case .hold: break
            }
        }
        // 5 → 4 after a second of low use, 4 → 3 after another (the idle time starts over after each), and
        // there it stays: 2 connections at half their limit (100) would not carry the peak of 150.
        #expect(connections == 3)
        #expect(downs == 2)
        #expect(scaler.lastReason.contains("not the limit"), "\(scaler.lastReason)")

        // With nothing in flight it goes down to the minimum and no further.
        var empty = autoscaler(minimum: 2, idle: .seconds(1))
        connections = 8
        now = 0
        for _ in 0..<100 {
            now += Self.interval
            if case .scaleDown = empty.decide(now: now, quiet(connections: connections, peak: 0)) { connections -= 1 }
        }
        #expect(connections == 2)
    }

    @Test func idleTimeRestartsWhenLoadReturns() {
        var scaler = autoscaler(minimum: 1, idle: .seconds(1))
        var now: UInt64 = 0
        for _ in 0..<3 {
            now += Self.interval
            #expect(scaler.decide(now: now, quiet(connections: 4, peak: 0)) == .hold)
        }
        now += Self.interval
        _ = scaler.decide(now: now, creditBound(connections: 4, cpu: 0.95))  // busy again
        for _ in 0..<4 {
            now += Self.interval
            #expect(scaler.decide(now: now, quiet(connections: 4, peak: 0)) == .hold, "\(scaler.lastReason)")
        }
        now += Self.interval
        guard case .scaleDown = scaler.decide(now: now, quiet(connections: 4, peak: 0)) else {
            Issue.record("a full idle time passed: \(scaler.lastReason)")
            return
        }
    }

    @Test func settingsAreValidated() throws {
        let base = try ClientConfiguration(
            host: "localhost", port: 443, tls: .client(), providerTokens: nil,
            topic: "com.example.app.push-type.liveactivity")
        for (settings, field) in [
            (ConnectionAutoscaling(minimumConnections: 0), "autoscaling.minimumConnections"),
            (ConnectionAutoscaling(minimumConnections: 4, maximumConnections: 2), "autoscaling.maximumConnections"),
            (ConnectionAutoscaling(decisionInterval: .milliseconds(1)), "autoscaling.decisionInterval"),
            (ConnectionAutoscaling(idleTimeout: .seconds(-1)), "autoscaling.idleTimeout"),
            (ConnectionAutoscaling(maximumNewConnections: 0), "autoscaling.maximumNewConnections"),
            (ConnectionAutoscaling(cpuBoundShare: 1.5), "autoscaling.cpuBoundShare"),
            (ConnectionAutoscaling(maximumConnections: 2000), "autoscaling.maximumConnections"),
        ] {
            var configuration = base
            configuration.autoscaling = settings
            let error = #expect(throws: ClientConfigurationError.self) { try configuration.validate() }
            guard case .invalid(let named, _) = error else {
                Issue.record("\(String(describing: error)) for \(field)")
                continue
            }
            #expect(named == field)
        }
        var tooManyStreams = base
        tooManyStreams.autoscaling = ConnectionAutoscaling(maximumConnections: 1024)
        tooManyStreams.maxConcurrentStreamsPerConnection = 2000
        #expect(throws: ClientConfigurationError.self) { try tooManyStreams.validate() }
        var good = base
        good.autoscaling = .standard
        try good.validate()
    }
}

// A full push through the real data plane: PushProducer → PushWorker → APNsConnection (Fanfare's own HTTP/2
// client session and HPACK, FanfareHTTP2.HTTP2ClientSession; TLS over io_uring) → loopback → APNsSimulator
// (nghttp2 server session) → 200 → PushResultHandler. Each iteration sends 1000 pushes over one warmed-up
// connection with 100 streams in flight and waits until all 1000 are answered, so every row is per 1000 pushes
// (a per-push malloc count below 1 would round to 0 in a per-push table).
//
// The malloc interposer counts the whole process, so two variants:
// - 1000PushesInProcessSimulator: the simulator runs in this process (as the brief and the end-to-end tests set it
//   up): mallocs are client + simulator.
// - 1000PushesSimulatorInChildProcess: the same simulator runs in a child process (this executable started again
//   in simulator mode), so mallocs are the client's alone: the steady-state allocation count of one push.
// Both are at 0 and their thresholds are 0: the client's HTTP/2 framing and HPACK allocate nothing per push, and
// OpenSSL's per-call allocations in SSL_read_ex/SSL_write_ex come from a per-thread cache (CFanfareCryptoPool;
// see README.md), which a program opts into as the `fanfare` binary does: first thing, before OpenSSL runs.
import Benchmark
import FanfareTLS

let benchmarks: @Sendable () -> Void = {
    OpenSSLAllocationCache.install()
    if let directory = SimulatorChild.requestedDirectory {
        SimulatorChild.run(directory: directory)  // this process is the child: serve until stdin closes, then exit
    }

    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 5,
        scalingFactor: .one,
        maxDuration: .seconds(2),
        maxIterations: 400,
        // The count can move a little with how writes batch (whatever OpenSSL's cache does not serve is allocated
        // per SSL_read/SSL_write call, not per push), so allow 50 per 1000 pushes: one new allocation per push
        // (+1000) still fails the check.
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 50])]
    )

    Benchmark("1000PushesInProcessSimulator", configuration: configuration) { benchmark, rig in
        rig.send(pushes: RoundTripRig.pushesPerIteration, benchmark: benchmark)
    } setup: {
        try RoundTripRig(simulator: .inProcess)
    } teardown: {
        RoundTripRig.shutDownAll()
    }

    Benchmark("1000PushesSimulatorInChildProcess", configuration: configuration) { benchmark, rig in
        rig.send(pushes: RoundTripRig.pushesPerIteration, benchmark: benchmark)
    } setup: {
        try RoundTripRig(simulator: .childProcess)
    } teardown: {
        RoundTripRig.shutDownAll()
    }

    // 1000 broadcast publishes on one channel (POST /4/broadcasts/apps/<bundle id>, apns-channel-id, the answer's
    // apns-request-id read) over the same data plane, the simulator in a child process: the client's count alone.
    // (In this process the simulator's channel lookup would add its own allocations.)
    Benchmark("1000BroadcastsSimulatorInChildProcess", configuration: configuration) { benchmark, rig in
        rig.send(pushes: RoundTripRig.pushesPerIteration, benchmark: benchmark)
    } setup: {
        try RoundTripRig(simulator: .childProcess, broadcast: true)
    } teardown: {
        RoundTripRig.shutDownAll()
    }
}

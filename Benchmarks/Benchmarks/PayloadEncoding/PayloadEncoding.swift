import Benchmark
import FanfareCore

let benchmarks: @Sendable () -> Void = {
    Benchmark("x") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(1) }
    }
}

// Every test runs on a thread of its own, not on the Swift concurrency pool.
//
// Swift Testing runs tests as tasks on the cooperative pool, which has one thread per core. A test that waits
// synchronously (a shutdown joining threads, a child process, PostgreSQL, a sleep) holds one of those threads;
// on a 2-core machine two such tests stop every other test, and timers elsewhere fire on work that was never
// slow. With `.ownThread` on a suite, each of its test cases (and the child tasks it makes) runs on a thread
// made for it, so whatever it blocks is its own. Unstructured `Task {}`s a test starts still run on the pool:
// they must not block. scripts/test checks that every top-level suite has the trait.
import Foundation
import Testing

public struct OwnThreadTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    /// A scope per test case; none for a suite itself (its tests get theirs).
    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let executor = TestThreadExecutor()
        defer { executor.finish() }
        let times = TestTimesLog.shared
        let started = ContinuousClock.now
        defer { times?.record(test: test, testCase: testCase, started: started, ended: ContinuousClock.now) }
        try await withTaskExecutorPreference(executor) { try await function() }
    }
}

/// With FANFARE_TEST_TIMES=<file>, each test case's own running time (from its start on its thread to its end,
/// not counting the time it waited for a free slot) is appended to the file: seconds, a tab, when it started
/// (seconds since the first test of the process started), a tab, the test's id. scripts/test lists the slowest
/// from it.
final class TestTimesLog: @unchecked Sendable {
    static let shared: TestTimesLog? = {
        guard let path = ProcessInfo.processInfo.environment["FANFARE_TEST_TIMES"], !path.isEmpty else { return nil }
        // Appended to: scripts/test runs several test processes into one file.
        if !FileManager.default.fileExists(atPath: path) {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
        }
        guard let handle = FileHandle(forWritingAtPath: path) else { return nil }
        handle.seekToEndOfFile()
        return TestTimesLog(handle: handle)
    }()

    private let handle: FileHandle
    private let lock = NSLock()
    private let origin = ContinuousClock.now

    private init(handle: FileHandle) { self.handle = handle }

    func record(test: Test, testCase: Test.Case?, started: ContinuousClock.Instant, ended: ContinuousClock.Instant) {
        func seconds(_ duration: Duration) -> Double {
            Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        }
        var name = test.id.description
        if testCase?.isParameterized == true { name += " (one of its cases)" }
        let line =
            String(format: "%.3f\t%.3f\t", seconds(ended - started), seconds(started - origin))
            + name.replacingOccurrences(of: "\n", with: " ") + "\n"
        lock.lock()
        handle.write(Data(line.utf8))
        lock.unlock()
    }
}

extension Trait where Self == OwnThreadTrait {
    /// Runs each test case of the suite on a thread of its own (see OwnThreadTrait.swift).
    public static var ownThread: Self { OwnThreadTrait() }
}

/// A task executor with one thread: runs the jobs enqueued to it in order. After `finish()`, the thread ends
/// once its queue is empty, and jobs that still arrive (a continuation resumed late) go to the global executor.
final class TestThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []  // guarded by `condition`
    private var finished = false  // guarded by `condition`

    init() {
        let thread = Thread { [self] in run() }
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        condition.lock()
        if finished {
            condition.unlock()
            globalConcurrentExecutor.enqueue(job)
            return
        }
        jobs.append(UnownedJob(job))
        condition.signal()
        condition.unlock()
    }

    func finish() {
        condition.lock()
        finished = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        // Shown by top, gdb and perf: a busy test thread is a test's own work.
        try? "swift-test".write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
        while true {
            condition.lock()
            while jobs.isEmpty && !finished { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let batch = jobs
            jobs.removeAll(keepingCapacity: true)
            condition.unlock()
            for job in batch { job.runSynchronously(on: asUnownedTaskExecutor()) }
        }
    }
}

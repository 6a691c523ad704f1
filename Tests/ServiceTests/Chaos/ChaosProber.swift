// What a client sees during a fault: GET /v1/waves/{id} on every running node every 250 ms. A 200 is an answer,
// a 503 with Retry-After a clear refusal (counted apart); any other status, or no answer from a node that is
// running and was not stopped on purpose, is an API error.
import FanfareTestSupport
import Foundation
import Glibc

final class ChaosProber: @unchecked Sendable {
    private let lock = NSLock()
    private var errorsSeen: [String] = []
    private var refusalsSeen = 0
    private var answersSeen = 0
    /// Node runs the scenario froze (SIGSTOP) or cut: what they fail to answer is the fault, not an API error.
    private var excused: Set<ObjectIdentifier> = []
    private var task: Task<Void, Never>?

    var errors: [String] { lock.withLock { errorsSeen } }
    var refusals: Int { lock.withLock { refusalsSeen } }
    var answers: Int { lock.withLock { answersSeen } }

    func excuse(_ node: ServeProcess) { lock.withLock { _ = excused.insert(ObjectIdentifier(node)) } }

    func start(_ cluster: ChaosCluster, wave: Int) {
        task = Task { [self] in
            while !Task.isCancelled {
                await withTaskGroup(of: Void.self) { group in
                    for (name, node) in cluster.running {
                        group.addTask { await self.probe(name, node, wave: wave) }
                    }
                }
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
    }

    func stop() async {
        task?.cancel()
        await task?.value
    }

    private func probe(_ name: String, _ node: ServeProcess, wave: Int) async {
        var client = node.client
        client.timeout = TestTime.scaled(.seconds(30))
        do {
            let response = try await client.get("/v1/waves/\(wave)")
            lock.withLock {
                if response.status == 200 {
                    answersSeen += 1
                } else if response.status == 503 && response.header("retry-after") != nil {
                    refusalsSeen += 1
                } else {
                    errorsSeen.append("\(name): \(response.status) \(response.text.prefix(300))")
                }
            }
        } catch {
            let excusedNow = lock.withLock { excused.contains(ObjectIdentifier(node)) }
            // A node that exited meanwhile (killed, or a lost lease) is down, and one that refuses connections
            // (its listener closed for a graceful stop) is not taking requests: a load balancer's health check
            // sends elsewhere. A connection taken and then dropped, or left unanswered, is an error.
            let refused = "\(error)".hasSuffix("errno \(ECONNREFUSED)")
            guard node.process.isRunning && !excusedNow && !refused else { return }
            lock.withLock { errorsSeen.append("\(name): no answer: \(error)") }
        }
    }
}

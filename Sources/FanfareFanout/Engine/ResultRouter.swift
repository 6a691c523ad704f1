import FanfareClient
import FanfareCore

/// Sends each result to the shard that owns its token, on the worker thread that finished it (the same one).
final class ResultRouter: PushResultHandler, @unchecked Sendable {
    private let shards: [Shard]
    private let observer: (@Sendable (PushResult) -> Void)?
    init(shards: [Shard], observer: (@Sendable (PushResult) -> Void)?) {
        self.shards = shards
        self.observer = observer
    }

    func pushCompleted(_ result: PushResult) {
        observer?(result)
        shards[result.worker].pushCompleted(result, now: monotonicNow())
    }

    func pushCompleted(inPlace completion: borrowing PushCompletion) {
        guard observer == nil else {
            pushCompleted(completion.result)
            return
        }
        shards[completion.worker].pushCompleted(completion, now: monotonicNow())
    }
}

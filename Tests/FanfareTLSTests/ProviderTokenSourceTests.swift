import FanfareTestSupport
import Synchronization
import Testing
@testable import FanfareTLS

/// A settable clock for `ProviderTokenSource`.
private final class ManualClock: Sendable {
    private let seconds: Atomic<Int64>

    init(_ start: Int64) { seconds = Atomic(start) }

    func set(_ value: Int64) { seconds.store(value, ordering: .relaxed) }

    var read: @Sendable () -> Int64 { { [self] in seconds.load(ordering: .relaxed) } }
}

@Suite(.ownThread) struct ProviderTokenSourceTests {
    private let directory: TemporaryDirectory
    private let signer: ProviderTokenSigner
    private let verifier: ProviderTokenVerifier

    init() throws {
        directory = try TemporaryDirectory()
        try ProviderKeyGenerator.generate(
            privateKeyFile: directory.file("a.p8"), publicKeyFile: directory.file("a.pub"))
        signer = try ProviderTokenSigner(
            privateKeyPEMFile: directory.file("a.p8"), keyID: "KEYAAAAAAA", teamID: "TEAM000001")
        verifier = try ProviderTokenVerifier(publicKeyPEMFile: directory.file("a.pub"))
    }

    @Test func remintsOnlyAfterTheInterval() throws {
        let clock = ManualClock(1_000_000)
        let source = ProviderTokenSource(signer: signer, refreshInterval: 40 * 60, clock: clock.read)
        let first = source.current()
        #expect(first.issuedAt == 1_000_000)
        #expect(source.generation == 1)

        clock.set(1_000_000 + 40 * 60 - 1)
        #expect(source.current() == first)
        #expect(source.current() == first)
        #expect(source.generation == 1)

        clock.set(1_000_000 + 40 * 60)
        let second = source.current()
        #expect(second.issuedAt == 1_000_000 + 40 * 60)
        #expect(second.jwt != first.jwt)
        #expect(source.generation == 2)
        #expect(try verifier.verify(second.jwt).get().issuedAt == second.issuedAt)

        #expect(source.current() == second)
        #expect(source.snapshot().generation == 2)
        #expect(source.generation == 2)
    }

    @Test func forceRefreshHonoursTheRejectedGeneration() throws {
        let clock = ManualClock(500)
        let source = ProviderTokenSource(signer: signer, clock: clock.read)
        let first = source.snapshot()
        clock.set(600)
        #expect(source.forceRefresh(ifGeneration: first.generation))
        #expect(source.generation == 2)
        #expect(source.current().issuedAt == 600)
        // A second connection reporting the same stale token does not cause another re-mint.
        #expect(!source.forceRefresh(ifGeneration: first.generation))
        #expect(source.generation == 2)
        #expect(source.forceRefresh())
        #expect(source.generation == 3)
        #expect(source.lastMintFailure == nil)
    }

    @Test func replaceSignerMintsWithTheNewKeyAtOnce() throws {
        let clock = ManualClock(10_000)
        let source = ProviderTokenSource(signer: signer, clock: clock.read)
        try ProviderKeyGenerator.generate(
            privateKeyFile: directory.file("b.p8"), publicKeyFile: directory.file("b.pub"))
        let newSigner = try ProviderTokenSigner(
            privateKeyPEMFile: directory.file("b.p8"), keyID: "KEYBBBBBBB", teamID: "TEAM000001")
        clock.set(10_005)
        try source.replaceSigner(newSigner)
        #expect(source.generation == 2)
        let token = source.current()
        #expect(token.keyID == "KEYBBBBBBB")
        #expect(token.issuedAt == 10_005)
        #expect(
            try ProviderTokenVerifier(publicKeyPEMFile: directory.file("b.pub")).verify(token.jwt).get().keyID
                == "KEYBBBBBBB")
        #expect(verifier.verify(token.jwt) == .failure(.badSignature))
        // The schedule restarts from the new token.
        clock.set(10_005 + 40 * 60 - 1)
        #expect(source.current() == token)
    }

    @Test func concurrentReadersShareOneRemint() async throws {
        let clock = ManualClock(0)
        let source = ProviderTokenSource(signer: signer, clock: clock.read)
        clock.set(60 * 60)
        let tokens = await withTaskGroup(of: ProviderToken.self) { group in
            for _ in 0..<8 { group.addTask { source.current() } }
            return await group.reduce(into: [ProviderToken]()) { $0.append($1) }
        }
        #expect(Set(tokens.map(\.jwt)).count == 1)
        #expect(source.generation == 2)
    }
}

import FanfareClient
import FanfareCore
@testable import FanfareFanout
import FanfareTestHarness
import FanfareTestSupport
import Synchronization
import Testing
import Glibc
import Foundation

@Suite(.ownThread) struct ShardStructureTests {
    @Test func theDueLaneReleasesInOrderAndGrows() {
        var lane = DueLane(delay: 10, capacity: 4)
        for index in 0..<100 { lane.push(UInt64(index), at: UInt64(index)) }
        #expect(lane.count == 100)
        #expect(lane.popDue(now: 0) == 0)
        var popped: [UInt64] = []
        while let ref = lane.popDue(now: 49) { popped.append(ref) }
        #expect(popped == Array(1...49))
        #expect(lane.nextDue == 50)
        for index in 100..<130 { lane.push(UInt64(index), at: UInt64(index)) }
        popped.removeAll()
        while let ref = lane.popDue(now: .max) { popped.append(ref) }
        #expect(popped == Array(50..<130))
        #expect(lane.isEmpty)
    }

    @Test func theTokenIndexFindsInsertsAndRemoves() {
        var table = TokenTable()
        defer { table.deallocate() }  // a Shard frees its table in deinit; this test owns one directly
        var index = TokenSlotIndex(capacity: 16)
        let tokens = (0..<20_000).map { makeToken($0, salt: 3, byteCount: 80) }
        var slots: [UInt32] = []
        for token in tokens {
            let slot = table.insert(token, flags: [], registeredAtSeconds: 1, channelSet: 0)
            index.insert(token, slot: slot, in: table)
            slots.append(slot)
        }
        #expect(index.count == tokens.count)
        #expect(!slots.contains(TokenTable.vacant), "slot 0 is the vacant sentinel")
        for (position, token) in tokens.enumerated() { #expect(index.find(token, in: table) == slots[position]) }
        for token in tokens[0..<10_000] { #expect(index.remove(token, in: table) != nil) }
        #expect(index.find(tokens[5], in: table) == nil)
        #expect(index.find(tokens[15_000], in: table) == slots[15_000])
        #expect(index.remove(tokens[5], in: table) == nil)
        #expect(index.count == 10_000)
        #expect(table.token(slots[42]) == tokens[42])
    }

    @Test func aShardKeepsItsTokensCompact() {
        // 200k 80-byte tokens in one channel: the columns, index and audience stay under 150 bytes per token.
        let driver = ShardDriver()
        let count = 200_000
        driver.shard.reserve(tokens: count)
        for index in 0..<count {
            driver.shard.register(
                RegistrationBatch.Entry(
                    token: makeToken(index, byteCount: 80), pushToStart: false, frequentUpdates: false,
                    registeredAtSeconds: 1,
                    channels: [0])
            )
        }
        let perToken = Double(driver.shard.memoryBytes) / Double(count)
        #expect(perToken < 150, "\(perToken) bytes per token")
    }
}

import FanfareTestSupport
import Testing
@testable import FanfareSimulator

@Suite(.ownThread) struct RequestHeadTests {
    @Test(arguments: RequestHeaderField.allCases)
    func everyFieldNameIsRecognisedAndStored(_ field: RequestHeaderField) {
        var name = ""
        field.name.withUTF8Buffer { name = String(decoding: $0, as: UTF8.self) }
        #expect(withBytes(name) { RequestHeaderField.recognise($0) } == field)
        var head = RequestHead()
        head.add(name, "value-\(field.rawValue)")
        let stored = head.string(field)
        #expect(stored == "value-\(field.rawValue)")
        let present = head.isPresent(field)
        #expect(present)
    }

    @Test(arguments: [
        "", "x", "apns-ids", "apns-topik", ":methods", "Apns-Topic", "apns-collapse-ie", "apns-zzzzzz-id",
        "authorisation",
    ])
    func otherNamesAreIgnored(_ name: String) {
        #expect(withBytes(name) { RequestHeaderField.recognise($0) } == nil)
    }

    @Test func unknownHeadersCountTowardsTheHeaderListSizeOnly() {
        var head = RequestHead()
        head.add("x-custom", "12345")
        head.add("apns-topic", "t")
        let (count, size) = (head.headerCount, head.headerListSize)
        #expect(count == 2)
        #expect(size == (8 + 5 + 32) + (10 + 1 + 32))
        let custom = head.hasDuplicateHeaders
        #expect(!custom)
    }

    @Test func aRepeatedHeaderKeepsTheFirstValueAndIsFlagged() {
        var head = RequestHead()
        head.add("apns-priority", "5")
        head.add("apns-priority", "10")
        let (value, duplicated, any) = (
            head.string(.apnsPriority), head.isDuplicated(.apnsPriority), head.hasDuplicateHeaders
        )
        #expect(value == "5")
        #expect(duplicated)
        #expect(any)
    }

    @Test func anEmptyValueIsPresentAndEmpty() {
        var head = RequestHead()
        head.add("apns-topic", "")
        let value = head.value(.apnsTopic)
        #expect(value?.count == 0)
    }

    @Test func valuesThatDoNotFitAreOversizedAndLaterSmallOnesStillFit() {
        var head = RequestHead(arenaCapacity: 16)
        head.add("apns-topic", "0123456789")
        head.add("authorization", "bearer abcdefghij")
        head.add("apns-priority", "10")
        let (topic, priority) = (head.string(.apnsTopic), head.string(.apnsPriority))
        #expect(topic == "0123456789")
        #expect(priority == "10")
        guard case .oversized(let byteCount) = head.lookup(.authorization) else {
            Issue.record("authorization should be oversized")
            return
        }
        #expect(byteCount == 17)
        let authorization = head.value(.authorization)
        #expect(authorization == nil)
    }

    @Test func bodyIsCountedAndStoredUpToCapacity() {
        var head = RequestHead(bodyCapacity: 10)
        head.appendBody("hello")
        var (count, stored, full) = (
            head.bodyByteCount, String(decoding: head.body, as: UTF8.self), head.isBodyFullyStored
        )
        #expect(count == 5 && stored == "hello" && full)
        head.appendBody(" world!")
        (count, stored, full) = (head.bodyByteCount, String(decoding: head.body, as: UTF8.self), head.isBodyFullyStored)
        #expect(count == 12 && stored == "hello worl" && !full)
        head.appendBody(count: 8)
        let total = head.bodyByteCount
        #expect(total == 20)
    }

    @Test func resetForgetsEverything() {
        var head = RequestHead()
        head.add("apns-topic", "a")
        head.add("apns-topic", "b")
        head.appendBody("{}")
        head.reset()
        let (present, duplicates, body, size) = (
            head.isPresent(.apnsTopic), head.hasDuplicateHeaders, head.bodyByteCount, head.headerListSize
        )
        #expect(!present && !duplicates && body == 0 && size == 0)
        head.add("apns-topic", "c")
        let topic = head.string(.apnsTopic)
        #expect(topic == "c")
    }

    @Test func poolHandsOutEachSlotOnceAndResetsHeads() {
        let pool = RequestHeadPool(capacity: 3, arenaCapacity: 64, bodyCapacity: 16)
        let a = pool.acquire()
        let b = pool.acquire()
        let c = pool.acquire()
        #expect(Set([a, b, c].compactMap { $0 }) == [0, 1, 2])
        #expect(pool.acquire() == nil)
        #expect(pool.available == 0)
        pool.head(at: b!).pointee.add("apns-topic", "x")
        let stored = pool.head(at: b!).pointee.string(.apnsTopic)
        #expect(stored == "x")
        pool.release(b!)
        #expect(pool.available == 1)
        let again = pool.acquire()
        #expect(again == b)
        let present = pool.head(at: again!).pointee.isPresent(.apnsTopic)
        #expect(!present)
    }

    @Test func aGrownPoolKeepsItsHeadsAndHandsOutTheNewSlots() {
        let pool = RequestHeadPool(capacity: 2, arenaCapacity: 64, bodyCapacity: 16)
        let a = pool.acquire()!
        pool.head(at: a).pointee.add("apns-topic", "kept")
        let b = pool.acquire()!
        #expect(pool.acquire() == nil)
        pool.grow(to: 5)
        #expect(pool.capacity == 5 && pool.available == 3)
        let kept = pool.head(at: a).pointee.string(.apnsTopic)
        #expect(kept == "kept", "a head in use survives the move")
        let new = (0..<3).compactMap { _ in pool.acquire() }
        #expect(new == [2, 3, 4])
        #expect(pool.acquire() == nil)
        for slot in new + [a, b] { pool.release(slot) }
        #expect(pool.available == 5)
        pool.grow(to: 3)  // never shrinks
        #expect(pool.capacity == 5)
        // A released old slot is handed out before the new ones after another grow.
        let again = pool.acquire()!
        pool.grow(to: 6)
        let next = pool.acquire()!
        #expect(next != 5 && next != again, "free slots from before the grow come first")
    }

    @Test func streamSlotsGrowByWholeChunksAtStableAddresses() {
        var slots = StreamSlots(capacity: 10)
        #expect(slots.capacity == StreamSlots.slotsPerChunk)
        let response = slots.response(3)
        response.storeBytes(of: 0xAB, as: UInt8.self)
        slots.state(3).pointee.streamID = 7
        slots.grow(to: StreamSlots.slotsPerChunk * 40)  // past the first chunk table
        #expect(slots.capacity == StreamSlots.slotsPerChunk * 40)
        #expect(slots.response(3) == response, "nghttp2 may hold a pointer into a response across a grow")
        #expect(slots.response(3).load(as: UInt8.self) == 0xAB)
        #expect(slots.state(3).pointee.streamID == 7)
        #expect(slots.state(StreamSlots.slotsPerChunk * 40 - 1).pointee.owner == 0)
        #expect(
            StreamSlots.rounded(1) == StreamSlots.slotsPerChunk
                && StreamSlots.rounded(257) == 2 * StreamSlots.slotsPerChunk)
    }

    @Test func routes() {
        #expect(withBytes("/3/device/abc") { RequestRoute.classify(path: $0) } == .device)
        #expect(withBytes("/3/device/") { RequestRoute.classify(path: $0) } == .deviceWithoutToken)
        #expect(withBytes("/3/device") { RequestRoute.classify(path: $0) } == .unknown)
        #expect(withBytes("/4/broadcasts/apps/com.a") { RequestRoute.classify(path: $0) } == .broadcast)
        #expect(withBytes("/4/broadcasts/apps/") { RequestRoute.classify(path: $0) } == .unknown)
        #expect(withBytes("/") { RequestRoute.classify(path: $0) } == .unknown)
        #expect(
            withBytes("/3/device/abc") { String(decoding: RequestRoute.deviceToken(inPath: $0), as: UTF8.self) }
                == "abc")
    }
}

// What the client writes per push before its HEADERS frame leaves: a fresh `apns-id` and the request's complete
// HPACK header block, written by Fanfare's own HTTP/2 client session (FanfareHTTP2: HPACKBlockWriter into the
// TLS plaintext buffer, HPACKEncoderTable for the fields that repeat on every request). The block is written by
// `APNsRequestHeaders.write`, the very function `APNsConnection.http2WriteRequestHeaders` calls (FanfareClient,
// `@_spi(Benchmarks)`): :method POST and :scheme https indexed, :path as a literal whose value is the Huffman
// code of "/3/device/" + the token's hex written straight from the token bytes, :authority, authorization,
// apns-push-type, apns-topic and apns-priority from the encoder table (steady state: already in the server's
// dynamic table, one index byte each), apns-id raw behind a precomputed prefix, and apns-expiration optionally.
// Also a wave push's apns-id, derived from (wave id, token) (`PushIdentifier.waveID`, SHA-1 in pure Swift).
// Expected: 0 mallocs.
import Benchmark
@_spi(Benchmarks) import FanfareClient
import FanfareCore
import FanfareHTTP2

let benchmarks: @Sendable () -> Void = {
    // 1000 operations per iteration (the `*` rows are per operation); about 1 s per benchmark.
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    // One push's header block: apns-id generated (as `APNsConnection.submit` does for a push without one), then
    // the block as `HTTP2ClientSession` + `http2WriteRequestHeaders` write it, without apns-expiration.
    Benchmark("HeaderBlock", configuration: configuration) { benchmark, request in
        for _ in benchmark.scaledIterations {
            let count = request.writeBlock(expiration: nil)
            blackHole(request.block.load(fromByteOffset: count - 1, as: UInt8.self))
        }
    } setup: {
        try RequestHeaders()
    }

    // The same with `apns-expiration` (a literal with a new name, Huffman-coded name and digits).
    Benchmark("HeaderBlockWithExpiration", configuration: configuration) { benchmark, request in
        for iteration in benchmark.scaledIterations {
            let count = request.writeBlock(expiration: 1_735_689_600 + Int64(iteration))
            blackHole(request.block.load(fromByteOffset: count - 1, as: UInt8.self))
        }
    } setup: {
        try RequestHeaders()
    }

    // A broadcast's header block (POST /4/broadcasts/apps/<bundle id>): path, authority, authorization, push type
    // and priority indexed, apns-channel-id, apns-request-id and apns-expiration as raw literals.
    Benchmark("BroadcastHeaderBlock", configuration: configuration) { benchmark, request in
        for _ in benchmark.scaledIterations {
            let count = request.writeBroadcastBlock()
            blackHole(request.block.load(fromByteOffset: count - 1, as: UInt8.self))
        }
    } setup: {
        try RequestHeaders()
    }

    Benchmark("APNsID", configuration: configuration) { benchmark, request in
        for _ in benchmark.scaledIterations {
            request.writeAPNsID()
            blackHole(request.apnsID.load(fromByteOffset: APNsIDGenerator.byteCount - 1, as: UInt8.self))
        }
    } setup: {
        try RequestHeaders()
    }

    // A wave push's apns-id, as the fan-out shard sets it on the job: `PushIdentifier.waveID`, the version-5 UUID
    // of (wave id, token), for an 80-byte token (namespace + wave + token = 104 bytes: two SHA-1 blocks) and for
    // the longest token, 100 bytes (three blocks). The wave id changes every operation, as tokens do in a wave.
    Benchmark("WaveAPNsID", configuration: configuration) { benchmark, ids in
        for iteration in benchmark.scaledIterations {
            ids.job.pointee.apnsID = PushIdentifier.waveID(wave: UInt64(iteration), token: ids.token80)
            blackHole(ids.job.pointee.apnsID)
        }
    } setup: {
        try WaveIdentifiers()
    }

    Benchmark("WaveAPNsIDLongestToken", configuration: configuration) { benchmark, ids in
        for iteration in benchmark.scaledIterations {
            ids.job.pointee.apnsID = PushIdentifier.waveID(wave: UInt64(iteration), token: ids.token100)
            blackHole(ids.job.pointee.apnsID)
        }
    } setup: {
        try WaveIdentifiers()
    }

    // The client's `apns-expiration` digits.
    Benchmark("ExpirationDecimal", configuration: configuration) { benchmark, request in
        for iteration in benchmark.scaledIterations {
            let count = APNsRequestHeaders.writeDecimal(1_735_689_600 + Int64(iteration), to: request.digits)
            blackHole(request.digits.load(fromByteOffset: count - 1, as: UInt8.self))
        }
    } setup: {
        try RequestHeaders()
    }
}

/// Stands in for one `APNsConnection` with its `HTTP2ClientSession`: the encoder table with the repeated fields
/// registered as `transportEstablished` registers them (token auth, as Live Activity providers use), a header
/// block buffer the size the session reserves, and one stream slot's push job.
final class RequestHeaders {
    /// `HTTP2ClientSession.maxRequestHeaderBlock`: what the session reserves in the plaintext buffer per block.
    static let blockCapacity = HTTP2ClientSession.maxRequestHeaderBlock

    private var table: HPACKEncoderTable
    private let fields: APNsRequestHeaders.RepeatedFields
    /// The stream slot's job (`RequestSlots` keeps jobs in place too): an 80-byte token, the length Live Activity
    /// tokens have in practice, and PushJob's default priority (immediate).
    let job: UnsafeMutablePointer<PushJob>
    /// A broadcast's job slot: a 24-character channel id, priority 5, expiration 0.
    let broadcastJob: UnsafeMutablePointer<PushJob>
    var identifiers = APNsIDGenerator(seed: 0xFA4FA4E)
    let block = UnsafeMutableRawPointer.allocate(byteCount: RequestHeaders.blockCapacity, alignment: 16)
    let apnsID = UnsafeMutableRawPointer.allocate(byteCount: 40, alignment: 8)
    let digits = UnsafeMutableRawPointer.allocate(byteCount: 24, alignment: 8)

    init() throws {
        let token = try DeviceToken(bytes: (0..<80).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) })
        job = .allocate(capacity: 1)
        job.initialize(to: PushJob(token: token, payload: try PushPayload(#"{"aps":{}}"#), apnsID: PushIdentifier()))
        var table = HPACKEncoderTable(maximumSize: 4096)  // as HTTP2ClientSession.init
        fields = APNsRequestHeaders.RepeatedFields(
            authority: "api.push.apple.com", usesProviderTokens: true, pushType: "liveactivity",
            topic: "com.example.app.push-type.liveactivity", broadcastBundleID: "com.example.app",
            register: { table.register(nameIndex: $0, name: $1, value: $2) })
        broadcastJob = .allocate(capacity: 1)
        broadcastJob.initialize(
            to: PushJob(
                channel: try BroadcastChannelID("dHN0LTEyMzQ1Njc4OTAxMg=="), payload: try PushPayload(#"{"aps":{}}"#), priority: .normal,
                apnsID: PushIdentifier()))
        // A provider token's length (ES256 JWT: header.claims.signature, base64url), as `refreshAuthorization`
        // sets it.
        let jwt = "eyJhbGciOiJFUzI1NiIsImtpZCI6IkFCQzEyM0RFRkcifQ."
            + "eyJpc3MiOiJERUYxMjNHSElKIiwiaWF0IjoxNzM1Njg5NjAwfQ."
            + String(repeating: "MEUCIQDx7kbYz9", count: 6)
        table.update(fields.authorization!, value: "bearer \(jwt)")
        self.table = table

        // The connection's first request inserts the repeated fields; every later one sends them indexed.
        // Both blocks are checked with the session's own decoder (setup only, not measured).
        var decoder = HPACKDecoder()
        let first = try decodeBlock(writeBlock(expiration: nil), with: &decoder)
        let firstID = job.pointee.apnsID!.description
        let steady = try decodeBlock(writeBlock(expiration: 1_735_689_600), with: &decoder)
        precondition(self.table.entryCount == 5, "the repeated fields are not indexed after one block")
        // :method :scheme :path :authority authorization apns-push-type apns-topic apns-priority apns-id [expiration]
        precondition(first.fields.count == 9 && steady.fields.count == 10 && steady.count < first.count)
        precondition(Array(steady.fields[0..<8]) == Array(first.fields[0..<8]))
        precondition(steady.fields[2] == ":path: /3/device/\(token.hexString)")
        precondition(steady.fields[4] == "authorization: bearer \(jwt)" && steady.fields[7] == "apns-priority: 10")
        precondition(first.fields[8] == "apns-id: \(firstID)" && steady.fields[8] == "apns-id: \(job.pointee.apnsID!)")
        precondition(firstID != job.pointee.apnsID!.description && steady.fields[9] == "apns-expiration: 1735689600")
        // A broadcast after that: its path is inserted once, then everything repeated is one index byte.
        _ = try decodeBlock(writeBroadcastBlock(), with: &decoder)
        let broadcast = try decodeBlock(writeBroadcastBlock(), with: &decoder)
        precondition(broadcast.fields[2] == ":path: /4/broadcasts/apps/com.example.app" && broadcast.fields.count == 10)
        precondition(broadcast.fields[7] == "apns-channel-id: dHN0LTEyMzQ1Njc4OTAxMg==" && broadcast.fields[9] == "apns-expiration: 0")
        precondition(broadcast.fields[8] == "apns-request-id: \(broadcastJob.pointee.apnsID!)")
    }

    deinit {
        job.deinitialize(count: 1)
        job.deallocate()
        broadcastJob.deinitialize(count: 1)
        broadcastJob.deallocate()
        block.deallocate()
        apnsID.deallocate()
        digits.deallocate()
    }

    /// The fields of the block just written (`count` bytes), decoded as "name: value".
    private func decodeBlock(_ count: Int, with decoder: inout HPACKDecoder) throws -> (count: Int, fields: [String]) {
        var fields: [String] = []
        try decoder.decode(UnsafeRawBufferPointer(start: block, count: count)) { name, value in
            fields.append(String(decoding: name, as: UTF8.self) + ": " + String(decoding: value, as: UTF8.self))
        }
        return (count, fields)
    }

    @inline(__always)
    func writeAPNsID() {
        identifiers.write(to: apnsID)
    }

    /// One request's header block, as `HTTP2ClientSession` writes it; returns its length. First the apns-id, as
    /// `APNsConnection.submit` gives a push without one a fresh id (written here into the job's identifier in
    /// place: `PushIdentifier` is its 36 bytes of text, `withUnsafeMutableBytes` being internal), then
    /// `beginBlock` and the delegate's `APNsRequestHeaders.write`.
    @inline(__always)
    func writeBlock(expiration: Int64?) -> Int {
        withUnsafeMutableBytes(of: &job.pointee.apnsID!) { identifiers.write(to: $0.baseAddress!) }
        job.pointee.expiration = expiration
        var writer = HPACKBlockWriter(destination: block, capacity: Self.blockCapacity)
        table.beginBlock(&writer)
        APNsRequestHeaders.write(job, fields: fields, table: &table, writer: &writer)
        return writer.count
    }
}

extension RequestHeaders {
    /// A broadcast's header block with a fresh request id, as the session writes it; returns its length.
    @inline(__always)
    func writeBroadcastBlock() -> Int {
        withUnsafeMutableBytes(of: &broadcastJob.pointee.apnsID!) { identifiers.write(to: $0.baseAddress!) }
        var writer = HPACKBlockWriter(destination: block, capacity: Self.blockCapacity)
        table.beginBlock(&writer)
        APNsRequestHeaders.write(broadcastJob, fields: fields, table: &table, writer: &writer)
        return writer.count
    }
}

/// The tokens and the job slot of the `WaveAPNsID` benchmarks. Setup checks one id against the value Python's
/// hashlib/uuid gives (the recipe in `PushIdentifier.waveID`'s documentation).
final class WaveIdentifiers {
    let token80: DeviceToken
    let token100: DeviceToken
    let job: UnsafeMutablePointer<PushJob>

    init() throws {
        token80 = try DeviceToken(bytes: (0..<80).map { UInt8(truncatingIfNeeded: 5 + 13 * $0) })
        token100 = try DeviceToken(bytes: (0..<100).map { UInt8(truncatingIfNeeded: 9 + 13 * $0) })
        job = .allocate(capacity: 1)
        job.initialize(to: PushJob(token: token80, payload: try PushPayload(#"{"aps":{}}"#)))
        // Python: ns = uuid.UUID("314bf00d-1ac8-5df6-b187-865dac19318b"); token = bytes((5 + 13 * i) & 0xff for i in
        // range(80)); uuid.UUID(bytes=hashlib.sha1(ns.bytes + (0x0123456789abcdef).to_bytes(8, "big")
        // + token).digest()[:16], version=5)
        precondition(
            PushIdentifier.waveID(wave: 0x0123_4567_89AB_CDEF, token: token80).description
                == "9ad4bba8-2b05-54df-8d31-c311c3a6a3a3")
        precondition(PushIdentifier.waveID(wave: .max, token: token100).description == "00f429ce-740b-5396-a010-7ddfba165f64")
    }

    deinit {
        job.deinitialize(count: 1)
        job.deallocate()
    }
}

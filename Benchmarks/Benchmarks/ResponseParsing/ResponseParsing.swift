// Reading an APNs answer. First its HEADERS block: Fanfare's HTTP/2 client session decodes it with its own
// `HPACKDecoder` (FanfareHTTP2) and hands each field to the connection, which keeps only `:status`
// (`DecodeHeaders200`, `DecodeHeaders400`: 0 mallocs). Then the outcome: a 200 has no body and goes straight
// to `PushOutcome.classify(status: 200, body: nil)`; an error answer carries `{"reason":"…"}` that
// `APNsErrorBody.parse` reads into a `String?`. A reason of up to 15 UTF-8 bytes fits Swift's inline
// small-string form; a longer one ("ExpiredProviderToken", 20 bytes) needs one heap allocation per parsed
// error. Both are measured and gated at what they cost today.
import Benchmark
import FanfareCore
import FanfareHTTP2

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let benchmarks: @Sendable () -> Void = {
    // 1000 parses or classifications per iteration (the `*` rows are per operation); about 1 s each. Malloc
    // counts are exact here, so no tolerance: any change from Thresholds/ fails the check.
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000,
        thresholds: [.mallocCountTotal: BenchmarkThresholds(absolute: [.p90: 0])]
    )

    // Every successful push: `:status: 200` (static index 8) and `apns-id` (a literal without indexing, name and
    // 36-character UUID value Huffman-coded), decoded and handed to the connection's header callback.
    Benchmark(
        "DecodeHeaders200", configuration: configuration
    ) { benchmark, headers in
        for _ in benchmark.scaledIterations {
            blackHole(headers.decode(headers.ok))
        }
    } setup: {
        ResponseHeaders()
    }

    // An error answer's headers: `:status: 400` (static index 12), `apns-id`, and `content-type:
    // application/json` (a literal without indexing, static name 31, Huffman-coded value).
    Benchmark(
        "DecodeHeaders400", configuration: configuration
    ) { benchmark, headers in
        for _ in benchmark.scaledIterations {
            blackHole(headers.decode(headers.badRequest))
        }
    } setup: {
        ResponseHeaders()
    }

    Benchmark(
        "Classify200NoBody", configuration: configuration
    ) { benchmark, _ in
        for iteration in benchmark.scaledIterations {
            // The status comes from the wire; keep the optimizer from folding the call away.
            let outcome = PushOutcome.classify(status: 200 &+ (iteration & 0x1000), body: nil)
            blackHole(outcome.isDelivered)
        }
    } setup: {
        ErrorBodies()
    }

    Benchmark(
        "ParseUnregistered", configuration: configuration
    ) { benchmark, bodies in
        for _ in benchmark.scaledIterations {
            let body = APNsErrorBody.parse(bodies.unregistered)
            blackHole(body?.timestamp)
        }
    } setup: {
        ErrorBodies()
    }

    Benchmark(
        "ParseExpiredProviderToken", configuration: configuration
    ) { benchmark, bodies in
        for _ in benchmark.scaledIterations {
            let body = APNsErrorBody.parse(bodies.expiredProviderToken)
            blackHole(body?.reason?.utf8.count)
        }
    } setup: {
        ErrorBodies()
    }

    Benchmark(
        "Classify410Unregistered", configuration: configuration
    ) { benchmark, bodies in
        for _ in benchmark.scaledIterations {
            let outcome = PushOutcome.classify(status: 410, body: bodies.parsedUnregistered)
            blackHole(outcome.action)
        }
    } setup: {
        ErrorBodies()
    }

    Benchmark(
        "ParseAndClassify410", configuration: configuration
    ) { benchmark, bodies in
        for _ in benchmark.scaledIterations {
            let outcome = PushOutcome.classify(status: 410, body: APNsErrorBody.parse(bodies.unregistered))
            blackHole(outcome.action)
        }
    } setup: {
        ErrorBodies()
    }
}

/// Response bodies as the connection holds them: the DATA payloads Fanfare's HTTP/2 client session hands over,
/// copied into a buffer the connection owns (the stream slot's body).
final class ErrorBodies {
    let unregistered: UnsafeRawBufferPointer
    let expiredProviderToken: UnsafeRawBufferPointer
    let parsedUnregistered: APNsErrorBody

    init() {
        unregistered = Self.copy(#"{"reason":"Unregistered","timestamp":1735689600000}"#)
        expiredProviderToken = Self.copy(#"{"reason":"ExpiredProviderToken"}"#)
        parsedUnregistered = APNsErrorBody.parse(unregistered)!
        precondition(parsedUnregistered.knownReason == .unregistered && parsedUnregistered.timestamp == 1_735_689_600_000)
        precondition(APNsErrorBody.parse(expiredProviderToken)?.knownReason == .expiredProviderToken)
    }

    private static func copy(_ text: String) -> UnsafeRawBufferPointer {
        let bytes = Array(text.utf8)
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
        storage.copyBytes(from: bytes)
        return UnsafeRawBufferPointer(storage)
    }

    deinit {
        UnsafeMutableRawBufferPointer(mutating: unregistered).deallocate()
        UnsafeMutableRawBufferPointer(mutating: expiredProviderToken).deallocate()
    }
}

/// Typical APNs response header blocks, encoded once with `HPACKBlockWriter`, and one connection's decoder. The
/// per-field callback mirrors `APNsConnection.http2ResponseHeader` (internal to FanfareClient): keep `:status`,
/// parsed into the stream slot, ignore the rest.
final class ResponseHeaders {
    private static let statusName: StaticString = ":status"
    static let apnsID = "5d1b4a0e-6f2c-4b8e-9a3d-7c2e1f0b8a64"

    private var decoder = HPACKDecoder()  // as HTTP2ClientSession.init (default settings)
    let ok: UnsafeRawBufferPointer
    let badRequest: UnsafeRawBufferPointer
    /// Stands in for the stream slot's `status` field.
    let status = UnsafeMutablePointer<Int32>.allocate(capacity: 1)

    init() {
        status.initialize(to: 0)
        ok = Self.block { writer in
            writer.writeIndexed(HPACKStaticTable.status200)
            Self.writeAPNsID(&writer)
        }
        badRequest = Self.block { writer in
            writer.writeIndexed(HPACKStaticTable.status400)
            Self.writeAPNsID(&writer)
            Array("application/json".utf8).withUnsafeBytes {
                writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.contentType, value: $0, huffman: true)
            }
        }
        // Check the blocks with a separate decoder (setup only, not measured): fields, order, Huffman coding.
        var check = HPACKDecoder()
        precondition(Self.fields(ok, &check) == [":status: 200", "apns-id: \(Self.apnsID)"])
        precondition(
            Self.fields(badRequest, &check)
                == [":status: 400", "apns-id: \(Self.apnsID)", "content-type: application/json"])
        // indexed :status, 0x00, Huffman name (H bit, 5 octets for "apns-id"), Huffman value (H bit, < 36 octets)
        precondition(ok[1] == 0x00 && ok[2] == 0x85 && ok[8] & 0x80 != 0 && Int(ok[8] & 0x7F) < 36)
        precondition(decode(ok) == 200 && decode(badRequest) == 400)
    }

    deinit {
        UnsafeMutableRawBufferPointer(mutating: ok).deallocate()
        UnsafeMutableRawBufferPointer(mutating: badRequest).deallocate()
        status.deallocate()
    }

    /// Decodes one response header block as `HTTP2ClientSession` does; returns the `:status` recorded.
    @inline(__always)
    func decode(_ block: UnsafeRawBufferPointer) -> Int32 {
        let status = self.status
        status.pointee = 0
        do {
            try decoder.decode(block) { name, value in
                // APNsConnection.http2ResponseHeader: ":status" is the only field the outcome needs.
                guard name.count == 7, memcmp(name.baseAddress!, Self.statusName.utf8Start, 7) == 0 else { return }
                status.pointee = Int32(HTTP2.parseDecimal(value.baseAddress!.assumingMemoryBound(to: UInt8.self), value.count))
            }
        } catch {
            fatalError("response header block did not decode: \(error)")
        }
        return status.pointee
    }

    /// `apns-id` as a literal without indexing with a new name; `HPACKBlockWriter` Huffman-codes name and value
    /// (both come out shorter).
    private static func writeAPNsID(_ writer: inout HPACKBlockWriter) {
        Array("apns-id".utf8).withUnsafeBytes { name in
            Array(apnsID.utf8).withUnsafeBytes { value in
                writer.writeLiteralWithoutIndexing(name: name, value: value)
            }
        }
    }

    private static func block(_ body: (inout HPACKBlockWriter) -> Void) -> UnsafeRawBufferPointer {
        let storage = UnsafeMutableRawPointer.allocate(byteCount: 256, alignment: 16)
        var writer = HPACKBlockWriter(destination: storage, capacity: 256)
        body(&writer)
        return UnsafeRawBufferPointer(start: storage, count: writer.count)
    }

    private static func fields(_ block: UnsafeRawBufferPointer, _ decoder: inout HPACKDecoder) -> [String] {
        var fields: [String] = []
        try! decoder.decode(block) { name, value in
            fields.append(String(decoding: name, as: UTF8.self) + ": " + String(decoding: value, as: UTF8.self))
        }
        return fields
    }
}

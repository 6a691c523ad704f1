// HPACK from a hostile peer (RFC 7541): arbitrary header blocks through `HPACKDecoder`, checked against
// nghttp2's inflater and against a decoder that skips unwanted values (the client's `reportsOnlyStatus`);
// and the encoder side (`HPACKEncoderTable` + `HPACKBlockWriter`) driven by the input, whose blocks must
// decode to exactly the fields written.
//
// Input: one config byte, then a program.
//   config bit 0: 0 = decode arbitrary blocks, 1 = encoder round trip
//   decode mode, bits 1-2: table size we advertise (4096, 256, 100, 0); bit 3: the decoder is created with
//     that size (no differential: nghttp2 starts at 4096) instead of starting at 4096 and lowering it
//   decode program: op byte, then: op % 4 == 0 → lower/raise the table size (u16), else → a block (chunk)
import CNghttp2Reference
import FanfareHTTP2
import FuzzSupport

#if canImport(Glibc)
import Glibc
#endif

@main
enum FuzzHPACK {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let config = input.byte()
    if config & 1 == 0 {
        decodeBlocks(&input, config: config)
    } else {
        encodeAndDecode(&input, config: config)
    }
    return 0
}

let tableSizes = [4096, 256, 100, 0]

struct Field: Equatable, CustomStringConvertible {
    var name: [UInt8]
    var value: [UInt8]

    var description: String { "\(String(decoding: name, as: UTF8.self)): \(String(decoding: value, as: UTF8.self))" }
}

// MARK: - Arbitrary blocks

/// Errors that come from our limits rather than from malformed input: nghttp2 may accept such a block.
func isLimit(_ error: HPACKError) -> Bool {
    switch error {
    case .stringTooLong, .headerListTooLarge, .integerOverflow, .destinationTooSmall: true
    default: false
    }
}

func decodeBlocks(_ input: inout FuzzInput, config: UInt8) {
    let advertised = tableSizes[Int(config >> 1) & 3]
    let differential = config & 8 == 0
    let initial = differential ? 4096 : advertised
    var full = HPACKDecoder(maximumTableSize: initial)
    var filtered = HPACKDecoder(maximumTableSize: initial)
    let reference = NGHTTP2Inflater()
    if differential {
        full.setMaximumTableSize(advertised)
        filtered.setMaximumTableSize(advertised)
        reference.changeTableSize(advertised)
    }
    var current = advertised
    while !input.isAtEnd {
        if input.byte() % 4 == 0 {
            // SETTINGS_HEADER_TABLE_SIZE acknowledged: at most the decoder's initial size.
            current = input.uint16() % (initial + 1)
            full.setMaximumTableSize(current)
            filtered.setMaximumTableSize(current)
            if differential { reference.changeTableSize(current) }
            continue
        }
        let block = input.chunk()
        let ours = decode(&full, block, onlyStatus: false)
        let skipping = decode(&filtered, block, onlyStatus: true)
        switch (ours, skipping) {
        case (.success(let fields), .success(let reported)):
            require(isStatusSubsequence(reported, of: fields), "skipping decoder reported \(reported), full \(fields)")
        case (.success, .failure(let error)):
            require(error == .headerListTooLarge, "the skipping decoder failed (\(error)) where the full one did not")
        case (.failure, _):
            break  // skipped values are not checked for valid Huffman codes: the skipping decoder may go on
        }
        if differential {
            let theirs = reference.inflate(block)
            switch (ours, theirs) {
            case (.success(let fields), .success(let expected)):
                require(fields == expected, "fields differ from nghttp2: ours \(fields), nghttp2 \(expected)")
            case (.success(let fields), .failure(let failure)):
                require(false, "nghttp2 rejects (\(failure.code)) a block we decode to \(fields)")
            case (.failure(let error), .success(let expected)):
                require(isLimit(error), "we reject (\(error)) a block nghttp2 decodes to \(expected)")
            case (.failure, .failure):
                break
            }
        }
        guard case .success = ours else { return }  // a decoding error ends the connection
        guard case .success = skipping else { return }
    }
}

func decode(_ decoder: inout HPACKDecoder, _ block: UnsafeRawBufferPointer, onlyStatus: Bool) -> Result<[Field], HPACKError> {
    var fields: [Field] = []
    do {
        try decoder.decode(block, wantsValue: { !onlyStatus || isStatus($0) }) { name, value in
            fields.append(Field(name: Array(name), value: Array(value)))
        }
        return .success(fields)
    } catch {
        return .failure(error)
    }
}

func isStatus(_ name: UnsafeRawBufferPointer) -> Bool { name.elementsEqual(":status".utf8) }

/// `reported` is `fields` with some non-`:status` fields left out.
func isStatusSubsequence(_ reported: [Field], of fields: [Field]) -> Bool {
    var next = 0
    for field in fields {
        if next < reported.count && reported[next] == field {
            next += 1
        } else if field.name.elementsEqual(":status".utf8) {
            return false
        }
    }
    return next == reported.count
}

/// nghttp2's HPACK decoder.
final class NGHTTP2Inflater {
    private let inflater: OpaquePointer

    init() {
        var pointer: OpaquePointer?
        precondition(nghttp2_hd_inflate_new(&pointer) == 0)
        inflater = pointer!
    }

    deinit { nghttp2_hd_inflate_del(inflater) }

    func changeTableSize(_ size: Int) {
        precondition(nghttp2_hd_inflate_change_table_size(inflater, size) == 0)
    }

    struct Failure: Error { var code: Int }

    func inflate(_ block: UnsafeRawBufferPointer) -> Result<[Field], Failure> {
        var fields: [Field] = []
        let storage = Array(block) + [0]  // never a nil pointer; only block.count octets are offered
        return storage.withUnsafeBufferPointer { buffer in
            var offset = 0
            while true {
                var field = nghttp2_nv()
                var flags: Int32 = 0
                let consumed = nghttp2_hd_inflate_hd2(inflater, &field, &flags, buffer.baseAddress! + offset, block.count - offset, 1)
                if consumed < 0 { return .failure(Failure(code: consumed)) }
                offset += consumed
                if flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) != 0 {
                    fields.append(
                        Field(
                            name: Array(UnsafeBufferPointer(start: field.name, count: field.namelen)),
                            value: Array(UnsafeBufferPointer(start: field.value, count: field.valuelen))))
                }
                if flags & Int32(NGHTTP2_HD_INFLATE_FINAL.rawValue) != 0 {
                    nghttp2_hd_inflate_end_headers(inflater)
                    return .success(fields)
                }
                if consumed == 0 && flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) == 0 { return .failure(Failure(code: -1)) }
            }
        }
    }
}

// MARK: - Encoder round trip

/// Round trip program (after the config byte): encoder capacity (byte % 4 → 4096, 256, 100, 0), the
/// number of registered fields (1...8) and each one's name (static index or a lowercase name chunk) and
/// value chunk, then ops:
///   0: the peer's SETTINGS_HEADER_TABLE_SIZE (u16 % 4097)
///   1: a block: count byte, then per field a kind byte and its data
///   2: a registered field's new value (a re-minted JWT)
func encodeAndDecode(_ input: inout FuzzInput, config: UInt8) {
    var table = HPACKEncoderTable(maximumSize: tableSizes[Int(input.byte()) & 3])
    var decoder = HPACKDecoder(maximumTableSize: 4096, maximumHeaderListSize: 1 << 20)
    var registered: [(field: HPACKCachedField, name: [UInt8], value: String)] = []
    for _ in 0..<(Int(input.byte()) % 8 + 1) {
        let selector = input.byte()
        let name: String
        let nameIndex: Int?
        if selector < 61 {
            nameIndex = Int(selector) + 1
            name = HPACKStaticTable.entry(nameIndex!).nameString
        } else {
            nameIndex = nil
            name = lowercaseName(input.chunk())
        }
        let value = String(decoding: input.take(Int(input.byte())), as: UTF8.self)
        registered.append((table.register(nameIndex: nameIndex, name: name, value: value), Array(name.utf8), value))
    }
    let capacity = 1 << 16
    let buffer = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    defer { buffer.deallocate() }
    while !input.isAtEnd {
        switch input.byte() % 3 {
        case 0:
            let size = input.uint16() % 4097
            table.setMaximumSize(size)
            decoder.setMaximumTableSize(size)
        case 1:
            var writer = HPACKBlockWriter(destination: buffer, capacity: capacity)
            table.beginBlock(&writer)
            var expected: [Field] = []
            for _ in 0..<(Int(input.byte()) % 16) {
                writeField(&input, &writer, &table, registered, &expected)
            }
            var decoded: [Field] = []
            do {
                try decoder.decode(writer.writtenBytes) { name, value in decoded.append(Field(name: Array(name), value: Array(value))) }
            } catch {
                require(false, "our decoder rejects our encoder's block: \(error)")
            }
            require(decoded == expected, "round trip: wrote \(expected), decoded \(decoded)")
        default:
            let slot = Int(input.byte()) % registered.count
            let value = String(decoding: input.take(Int(input.byte())), as: UTF8.self)
            table.update(registered[slot].field, value: value)
            registered[slot].value = value
        }
    }
}

/// Field kinds: 0 a registered field; 1 a static entry, indexed; 2 literal without indexing, static name;
/// 3 literal without indexing, new name; 4 `:path` from a prefix and the hex of bytes (the token writer).
func writeField(
    _ input: inout FuzzInput, _ writer: inout HPACKBlockWriter, _ table: inout HPACKEncoderTable,
    _ registered: [(field: HPACKCachedField, name: [UInt8], value: String)], _ expected: inout [Field]
) {
    switch input.byte() % 5 {
    case 0:
        let entry = registered[Int(input.byte()) % registered.count]
        table.write(entry.field, into: &writer)
        expected.append(Field(name: entry.name, value: Array(entry.value.utf8)))
    case 1:
        let index = Int(input.byte()) % 61 + 1
        writer.writeIndexed(index)
        let entry = HPACKStaticTable.entry(index)
        expected.append(Field(name: Array(entry.name), value: Array(entry.value)))
    case 2:
        let index = Int(input.byte()) % 61 + 1
        let value = input.take(Int(input.byte()))
        writer.writeLiteralWithoutIndexing(nameIndex: index, value: value, huffman: input.bool())
        expected.append(Field(name: Array(HPACKStaticTable.entry(index).name), value: Array(value)))
    case 3:
        let name = Array(lowercaseName(input.take(Int(input.byte()) % 64)).utf8)
        let value = input.take(Int(input.byte()))
        name.withUnsafeBytes { writer.writeLiteralWithoutIndexing(name: $0, value: value) }
        expected.append(Field(name: name, value: Array(value)))
    default:
        let prefix = input.take(Int(input.byte()) % 16)
        let token = input.take(Int(input.byte()) % 128)
        writer.writeLiteralWithoutIndexing(nameIndex: HPACKStaticTable.path, valuePrefix: prefix, hexOf: token)
        let hex = token.flatMap { byte in [hexDigit(byte >> 4), hexDigit(byte & 0xF)] }
        expected.append(Field(name: Array(":path".utf8), value: Array(prefix) + hex))
    }
}

func hexDigit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? 0x30 + nibble : 0x61 + nibble - 10 }

/// HTTP/2 names are lowercase (the writer asserts it); any other octet may appear.
func lowercaseName(_ bytes: UnsafeRawBufferPointer) -> String {
    String(decoding: bytes.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
}

// MARK: - Seeds

/// Blocks from nghttp2's deflater (every representation, Huffman and not, evictions, size updates),
/// the RFC 7541 appendix C examples, and round-trip programs.
func seeds() -> [Seed] {
    var seeds: [Seed] = []
    // RFC 7541 C.3 (requests without Huffman) and C.6 (responses with Huffman, table size 256).
    let c3 = [
        "828684410f7777772e6578616d706c652e636f6d",
        "828684be58086e6f2d6361636865",
        "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
    ]
    let c6 = [
        "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
        "4883640effc1c0bf",
        "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
    ]
    seeds.append(Seed("rfc7541-c3", decodeProgram(config: 0, blocks: c3.map(bytes(hex:)))))
    seeds.append(Seed("rfc7541-c6-256", decodeProgram(config: 0b010, blocks: c6.map(bytes(hex:)))))
    seeds.append(Seed("rfc7541-c6-256-created", decodeProgram(config: 0b1010, blocks: c6.map(bytes(hex:)))))
    // An APNs response sequence as nghttp2 (the simulator's framer) encodes it, apns-id never indexed.
    let deflater = NGHTTP2Deflater()
    var blocks: [[UInt8]] = []
    for status in ["200", "400", "200", "410", "429"] {
        var fields = [(":status", status, false), ("apns-id", "0b1cde6a-7b3c-4c6f-9a39-3f3f1ec3c1a\(status.last!)", true)]
        if status != "200" { fields.append(("content-type", "application/json", false)) }
        blocks.append(deflater.deflate(fields))
    }
    seeds.append(Seed("apns-responses", decodeProgram(config: 0, blocks: blocks)))
    seeds.append(Seed("apns-responses-small-table", decodeProgram(config: 0b1100, blocks: blocks)))
    // Table size changes between blocks: the next block must start with an update.
    let small = NGHTTP2Deflater()
    small.changeTableSize(100)
    var program = FuzzInputWriter()
    program.byte(0)
    program.byte(0)  // op: table size
    program.uint16(100)
    for _ in 0..<3 {
        program.byte(1)
        program.chunk(small.deflate([("x-long", String(repeating: "v", count: 40), false), ("x-short", "w", false)]))
    }
    seeds.append(Seed("size-update-evictions", program.bytes))
    // Round trips: an APNs client's repeated fields (with a JWT change) under several table sizes.
    for (name, capacity, settings) in [("roundtrip-4096", 0, 4096), ("roundtrip-256", 1, 256), ("roundtrip-0", 3, 0)] {
        var trip = FuzzInputWriter()
        trip.byte(1)
        trip.byte(UInt8(capacity))
        trip.byte(3)  // four registered fields
        trip.byte(0)  // :authority
        trip.byte(18)
        trip.raw("api.push.apple.com".utf8)
        trip.byte(22)  // authorization (static index 23)
        trip.byte(60)
        trip.raw(String(repeating: "j", count: 60).utf8)
        trip.byte(200)
        trip.chunk("apns-topic")
        trip.byte(20)
        trip.raw("com.example.app.push".utf8)
        trip.byte(200)
        trip.chunk("apns-push-type")
        trip.byte(12)
        trip.raw("liveactivity".utf8)
        trip.byte(0)
        trip.uint16(settings)
        for round in 0..<3 {
            trip.byte(1)
            trip.byte(7)
            var next: UInt8 = 0
            for kind: UInt8 in [1, 4, 0, 0, 0, 0, 3] {
                trip.byte(kind)
                switch kind {
                case 1: trip.byte(2)
                case 4:
                    trip.byte(10)
                    trip.raw("/3/device/".utf8)
                    trip.byte(32)
                    trip.raw((0..<32).map { UInt8($0 * 7 + round) })
                case 0:
                    trip.byte(next)
                    next += 1
                default:
                    trip.byte(7)
                    trip.raw("apns-id".utf8)
                    trip.byte(36)
                    trip.raw("0b1cde6a-7b3c-4c6f-9a39-3f3f1ec3c1a0".utf8)
                }
            }
            trip.byte(2)  // a new JWT
            trip.byte(1)
            trip.byte(60)
            trip.raw(String(repeating: "k", count: 60).utf8)
        }
        seeds.append(Seed(name, trip.bytes))
    }
    return seeds
}

func decodeProgram(config: UInt8, blocks: [[UInt8]]) -> [UInt8] {
    var program = FuzzInputWriter()
    program.byte(config)
    for block in blocks {
        program.byte(1)
        program.chunk(block)
    }
    return program.bytes
}

func bytes(hex: String) -> [UInt8] {
    let digits = Array(hex.utf8).map { $0 <= 0x39 ? $0 - 0x30 : $0 - 0x61 + 10 }
    return stride(from: 0, to: digits.count, by: 2).map { digits[$0] << 4 | digits[$0 + 1] }
}

/// nghttp2's HPACK encoder, for seeds.
final class NGHTTP2Deflater {
    private let deflater: OpaquePointer

    init() {
        var pointer: OpaquePointer?
        precondition(nghttp2_hd_deflate_new(&pointer, 4096) == 0)
        deflater = pointer!
    }

    deinit { nghttp2_hd_deflate_del(deflater) }

    func changeTableSize(_ size: Int) {
        precondition(nghttp2_hd_deflate_change_table_size(deflater, size) == 0)
    }

    func deflate(_ fields: [(String, String, Bool)]) -> [UInt8] {
        let names = fields.map { strdup($0.0)! }
        let values = fields.map { strdup($0.1)! }
        defer { (names + values).forEach { free($0) } }
        var list = fields.indices.map { index in
            nghttp2_nv(
                name: UnsafeMutableRawPointer(names[index]).assumingMemoryBound(to: UInt8.self),
                value: UnsafeMutableRawPointer(values[index]).assumingMemoryBound(to: UInt8.self),
                namelen: strlen(names[index]), valuelen: strlen(values[index]),
                flags: UInt8(fields[index].2 ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue))
        }
        let bound = nghttp2_hd_deflate_bound(deflater, &list, list.count)
        var output = [UInt8](repeating: 0, count: bound)
        let written = nghttp2_hd_deflate_hd(deflater, &output, bound, &list, list.count)
        precondition(written >= 0)
        return Array(output[0..<written])
    }
}

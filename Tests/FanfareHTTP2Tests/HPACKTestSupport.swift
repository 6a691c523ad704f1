import CNghttp2

import FanfareCore
@testable import FanfareHTTP2

/// A decoded (or intended) header field, compared by octets.
struct Header: Equatable, CustomStringConvertible {
    var name: [UInt8]
    var value: [UInt8]

    init(_ name: String, _ value: String) {
        self.name = Array(name.utf8)
        self.value = Array(value.utf8)
    }

    init(name: [UInt8], value: [UInt8]) {
        self.name = name
        self.value = value
    }

    var description: String {
        "\(String(decoding: name, as: UTF8.self)): \(String(decoding: value, as: UTF8.self))"
    }
}

/// Seeded, so a failing differential case replays.
typealias SeededGenerator = SplitMix64

enum HPACKTestSupport {
    /// Octets from hex text; spaces are ignored.
    static func bytes(hex: String) -> [UInt8] {
        let digits = hex.filter { !$0.isWhitespace }.utf8.map { byte -> UInt8 in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: fatalError("not hex: \(hex)")
            }
        }
        precondition(digits.count % 2 == 0)
        return stride(from: 0, to: digits.count, by: 2).map { digits[$0] << 4 | digits[$0 + 1] }
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String($0 >> 4, radix: 16) + String($0 & 0xF, radix: 16) }.joined()
    }

    static func randomBytes(_ count: Int, using generator: inout SeededGenerator) -> [UInt8] {
        (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    /// Runs `body` on a block writer over a fresh buffer and returns what it wrote.
    static func writeBlock(capacity: Int = 16 * 1024, _ body: (inout HPACKBlockWriter) -> Void) -> [UInt8] {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(capacity, 1), alignment: 16)
        defer { buffer.deallocate() }
        var writer = HPACKBlockWriter(destination: buffer, capacity: capacity)
        body(&writer)
        return Array(writer.writtenBytes)
    }

    /// Decodes one block with `decoder`, collecting the fields.
    static func decode(_ decoder: inout HPACKDecoder, _ block: [UInt8]) throws(HPACKError) -> [Header] {
        var fields: [Header] = []
        try withBytes(block) { (raw) throws(HPACKError) in
            try decoder.decode(raw) { name, value in
                fields.append(Header(name: Array(name), value: Array(value)))
            }
        }
        return fields
    }

    /// The error decoding `block` with a fresh decoder throws, if any.
    static func decodeError(
        _ block: [UInt8], maximumTableSize: Int = 4096, maximumHeaderListSize: Int = 64 * 1024
    ) -> HPACKError? {
        var decoder = HPACKDecoder(maximumTableSize: maximumTableSize, maximumHeaderListSize: maximumHeaderListSize)
        do {
            _ = try decode(&decoder, block)
            return nil
        } catch {
            return error
        }
    }

    /// The decoder's dynamic table, newest first.
    static func dynamicTable(_ decoder: borrowing HPACKDecoder) -> [Header] {
        (0..<decoder.dynamicTableCount).map {
            let entry = decoder.dynamicTableEntry($0)
            return Header(name: Array(entry.name), value: Array(entry.value))
        }
    }

    static func huffmanEncode(_ bytes: [UInt8]) -> [UInt8] {
        let bits = bytes.withUnsafeBytes { HPACKHuffman.bitCount($0) }
        let count = HPACKHuffman.byteCount(bitCount: bits)
        var output = [UInt8](repeating: 0, count: count)
        let written = output.withUnsafeMutableBytes { destination in
            bytes.withUnsafeBytes { source in
                var writer = HuffmanBitWriter(destination: destination.baseAddress!)
                writer.append(source)
                return writer.finish()
            }
        }
        precondition(written == count)
        return output
    }

    static func huffmanDecode(_ bytes: [UInt8], capacity: Int? = nil) throws(HPACKError) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: max(capacity ?? bytes.count * 8 / 5, 1))
        let count = try withBytes(bytes) { (source) throws(HPACKError) -> Int in
            try withMutableBytes(&output) { (destination) throws(HPACKError) -> Int in
                try HPACKHuffmanDecoder.decode(
                    source,
                    into: UnsafeMutableRawBufferPointer(rebasing: destination[0..<(capacity ?? destination.count)]))
            }
        }
        return Array(output[0..<count])
    }

    /// `withUnsafeBytes` with a typed error (the standard one rethrows untyped).
    static func withBytes<R>(
        _ bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(HPACKError) -> R
    ) throws(HPACKError) -> R {
        let result: Result<R, HPACKError> = bytes.withUnsafeBytes { raw in
            do throws(HPACKError) { return .success(try body(raw)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    static func withMutableBytes<R>(
        _ bytes: inout [UInt8], _ body: (UnsafeMutableRawBufferPointer) throws(HPACKError) -> R
    ) throws(HPACKError) -> R {
        let result: Result<R, HPACKError> = bytes.withUnsafeMutableBytes { raw in
            do throws(HPACKError) { return .success(try body(raw)) } catch { return .failure(error) }
        }
        return try result.get()
    }
}

// MARK: - nghttp2's HPACK, the reference implementation for the differential tests

/// nghttp2's HPACK decoder (`nghttp2_hd_inflater`).
final class NGHTTP2Inflater {
    private let inflater: OpaquePointer

    init() {
        var pointer: OpaquePointer?
        precondition(nghttp2_hd_inflate_new(&pointer) == 0)
        inflater = pointer!
    }

    deinit { nghttp2_hd_inflate_del(inflater) }

    /// Our SETTINGS_HEADER_TABLE_SIZE, as acknowledged by the peer.
    func changeTableSize(_ size: Int) {
        precondition(nghttp2_hd_inflate_change_table_size(inflater, size) == 0)
    }

    /// The block's fields, or the nghttp2 error code.
    func inflate(_ block: [UInt8]) -> Result<[Header], NGHTTP2Error> {
        var fields: [Header] = []
        // A non-empty buffer so the pointer is never nil; only `block.count` octets are offered.
        let storage = block + [0]
        return storage.withUnsafeBufferPointer { buffer in
            var offset = 0
            while true {
                var field = nghttp2_nv()
                var flags: Int32 = 0
                let consumed = nghttp2_hd_inflate_hd2(
                    inflater, &field, &flags, buffer.baseAddress! + offset, block.count - offset, 1)
                if consumed < 0 { return .failure(NGHTTP2Error(code: consumed)) }
                offset += consumed
                if flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) != 0 {
                    fields.append(
                        Header(
                            name: Array(UnsafeBufferPointer(start: field.name, count: field.namelen)),
                            value: Array(UnsafeBufferPointer(start: field.value, count: field.valuelen))))
                }
                if flags & Int32(NGHTTP2_HD_INFLATE_FINAL.rawValue) != 0 {
                    nghttp2_hd_inflate_end_headers(inflater)
                    return .success(fields)
                }
                if consumed == 0 && flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) == 0 {
                    return .failure(NGHTTP2Error(code: -1))
                }
            }
        }
    }
}

/// nghttp2's HPACK encoder (`nghttp2_hd_deflater`).
final class NGHTTP2Deflater {
    private let deflater: OpaquePointer

    /// `maximumTableSize`: the most the deflater uses, whatever the peer allows.
    init(maximumTableSize: Int) {
        var pointer: OpaquePointer?
        precondition(nghttp2_hd_deflate_new(&pointer, maximumTableSize) == 0)
        deflater = pointer!
    }

    deinit { nghttp2_hd_deflate_del(deflater) }

    /// The peer's SETTINGS_HEADER_TABLE_SIZE.
    func changeTableSize(_ size: Int) {
        precondition(nghttp2_hd_deflate_change_table_size(deflater, size) == 0)
    }

    /// Static and dynamic table entry (1-based), as nghttp2 sees it.
    func tableEntry(_ index: Int) -> Header? {
        guard let entry = nghttp2_hd_deflate_get_table_entry(deflater, index) else { return nil }
        return Header(
            name: Array(UnsafeBufferPointer(start: entry.pointee.name, count: entry.pointee.namelen)),
            value: Array(UnsafeBufferPointer(start: entry.pointee.value, count: entry.pointee.valuelen)))
    }

    /// Encodes one block; `neverIndexed[i]` marks field i sensitive (NGHTTP2_NV_FLAG_NO_INDEX).
    func deflate(_ fields: [Header], neverIndexed: [Bool]) -> [UInt8] {
        var copies: [UnsafeMutablePointer<UInt8>] = []
        defer { copies.forEach { $0.deallocate() } }
        func copy(_ bytes: [UInt8]) -> UnsafeMutablePointer<UInt8> {
            let pointer = UnsafeMutablePointer<UInt8>.allocate(capacity: max(bytes.count, 1))
            pointer.initialize(from: bytes, count: bytes.count)
            copies.append(pointer)
            return pointer
        }
        var list = fields.enumerated().map { index, field in
            nghttp2_nv(
                name: copy(field.name), value: copy(field.value), namelen: field.name.count,
                valuelen: field.value.count,
                flags: UInt8(neverIndexed[index] ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue))
        }
        let bound = nghttp2_hd_deflate_bound(deflater, &list, list.count)
        var output = [UInt8](repeating: 0, count: bound)
        let written = output.withUnsafeMutableBufferPointer {
            nghttp2_hd_deflate_hd(deflater, $0.baseAddress!, bound, &list, list.count)
        }
        precondition(written >= 0, "nghttp2_hd_deflate_hd failed: \(written)")
        return Array(output[0..<written])
    }
}

struct NGHTTP2Error: Error, Equatable {
    var code: Int
}

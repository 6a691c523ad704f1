// FanfareCore's JSON: the strict validator (caller-supplied content-state and attributes, `RawJSON`), the
// APNs error-body parser (bytes from the server: response bodies and GOAWAY debug data) and the writer.
// Checked: whatever the parser accepts the validator accepts, as an object; `RawJSON` agrees with the
// validator; errors point inside the input; the writer's output for any string or finite double is valid
// JSON that reads back to the same value.
//
// Input: mode byte, then the bytes. Mode % 3: 0 validate and parse; 1 write the bytes as a JSON string
// (and as the reason of an error body); 2 write each 8 bytes as a double.
import FanfareCore
import FuzzSupport

@main
enum FuzzJSON {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let mode = input.byte() % 3
    let bytes = input.rest()
    switch mode {
    case 0: validateAndParse(bytes)
    case 1: writeString(bytes)
    default: writeDoubles(bytes)
    }
    return 0
}

func validateAndParse(_ bytes: UnsafeRawBufferPointer) {
    let anyValue = JSONValidator.validate(bytes)
    let object = JSONValidator.validate(bytes, requireObject: true, allowNull: true)
    let objectWithoutNull = JSONValidator.validate(bytes, requireObject: true, allowNull: false)
    for error in [anyValue, object, objectWithoutNull].compactMap({ $0 }) {
        require(error.offset >= 0 && error.offset <= bytes.count, "error offset \(error.offset) outside \(bytes.count) bytes")
        require(!error.description.isEmpty, "an error without a description")
    }
    if anyValue != nil { require(object != nil && objectWithoutNull != nil, "stricter checks accept what the plain one refuses") }
    if object != nil { require(objectWithoutNull != nil, "refusing nulls accepted what allowing them refused") }
    do {
        let raw = try RawJSON(validatingBytes: bytes, requireObject: true, allowNull: false)
        require(objectWithoutNull == nil && raw.isObject && raw.bytes.elementsEqual(bytes), "RawJSON accepted \(Array(bytes))")
    } catch {
        require(error == objectWithoutNull, "RawJSON's error \(error) differs from the validator's \(String(describing: objectWithoutNull))")
    }
    if let body = APNsErrorBody.parse(bytes) {
        require(object == nil, "the error-body parser accepted what the validator refuses: \(object!)")
        if let reason = body.reason {
            require(APNsReason(reasonString: reason).map { $0.rawValue == reason || reason == "Service Unavailable" } ?? true, "reason \(reason)")
        }
        _ = PushOutcome.classify(status: 400, body: body).description
    }
}

func writeString(_ bytes: UnsafeRawBufferPointer) {
    let capacity = bytes.count * 6 + 64
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 1)
    defer { buffer.deallocate() }
    var writer = JSONWriter(buffer: buffer)
    writer.beginObject()
    writer.key("reason")
    writer.string(utf8: bytes)
    writer.endObject()
    require(!writer.overflowed && writer.isComplete, "a \(bytes.count)-byte string needed \(writer.count) bytes")
    let written = writer.writtenBytes
    require(JSONValidator.validate(written, requireObject: true, allowNull: false) == nil, "the writer wrote invalid JSON: \(Array(written))")
    let body = APNsErrorBody.parse(written)
    require(body != nil, "the writer's object does not parse: \(Array(written))")
    // Well-formed text comes back as it was. (Ill-formed UTF-8 becomes U+FFFD, one per byte; Swift's
    // String(decoding:) replaces maximal subparts, so those need not compare equal.)
    if let text = String(validating: bytes, as: UTF8.self) {
        require(body?.reason == text, "string round trip: \(Array(bytes)) came back as \(String(describing: body?.reason))")
    }
    var counting = JSONWriter.counting()
    counting.beginObject()
    counting.key("reason")
    counting.string(utf8: bytes)
    counting.endObject()
    require(counting.count == writer.count, "counting writer measured \(counting.count), wrote \(writer.count)")
}

func writeDoubles(_ bytes: UnsafeRawBufferPointer) {
    var offset = 0
    while offset + 8 <= bytes.count {
        let value = Double(bitPattern: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        offset += 8
        guard value.isFinite else { continue }
        var storage = [UInt8](repeating: 0, count: 64)
        let text: [UInt8] = storage.withUnsafeMutableBytes { buffer in
            var writer = JSONWriter(buffer: buffer)
            writer.double(value)
            require(!writer.overflowed && writer.isComplete, "double \(value) needed \(writer.count) bytes")
            require(JSONValidator.validate(writer.writtenBytes) == nil, "double \(value) written as invalid JSON \(Array(writer.writtenBytes))")
            return Array(writer.writtenBytes)
        }
        let back = Double(String(decoding: text, as: UTF8.self))
        require(back == value || (back == 0 && value == 0), "double \(value) written as \(String(decoding: text, as: UTF8.self))")
    }
}

// MARK: - Seeds

func seeds() -> [Seed] {
    func seed(_ name: String, mode: UInt8, _ text: String) -> Seed { Seed(name, [mode] + Array(text.utf8)) }
    return [
        seed("error-body", mode: 0, #"{"reason":"BadDeviceToken"}"#),
        seed("error-body-410", mode: 0, #"{"reason":"Unregistered","timestamp":1700000000123}"#),
        seed("escapes", mode: 0, #"{"reason":"Bad\u0044evice\nToken","re\u0061son":"x","a":[1,-2.5e+3,true,false,null,{"b":"\ud83d\ude00"}]}"#),
        seed("content-state", mode: 0, #" { "home" : 2, "away" : 1, "scorers" : ["A. Player", "B. Player"], "minute" : 67.5 } "#),
        seed("nested", mode: 0, String(repeating: "[", count: 64) + String(repeating: "]", count: 64)),
        seed("too-deep", mode: 0, String(repeating: "{\"a\":", count: 65) + "1" + String(repeating: "}", count: 65)),
        seed("bad-surrogate", mode: 0, #"{"reason":"\udc00"}"#),
        seed("string", mode: 1, "Tor! \u{2028} \"quoted\" \\ \u{1F600} \u{0001}"),
        Seed("string-ill-formed", [1, 0x41, 0xC3, 0x28, 0xE2, 0x82, 0xF0, 0x9F, 0x98, 0xFF, 0xED, 0xA0, 0x80, 0x42]),
        Seed("doubles", [2] + [0.1, 5.0, 1e-5, 1e20, -0.0, 123456.789, .leastNonzeroMagnitude, .greatestFiniteMagnitude]
            .flatMap { withUnsafeBytes(of: $0.bitPattern) { Array($0) } }),
    ]
}

// Device token hex (`DeviceToken(hexUTF8:)` on the `:path` bytes, `DeviceToken(hex:)` on CLI and API
// strings) and raw token bytes. Checked: both parsers agree; a parsed token's hex is the input lowercased
// and parses back to the same token; the error names the first non-hex byte or the right length; tokens
// from raw bytes round-trip through their hex.
//
// Input: the bytes to parse as hex; the same bytes are also tried as a raw token.
import FanfareCore
import FuzzSupport

@main
enum FuzzDeviceToken {
    static func main() {
        runFuzzer(testOneInput, seeds: seeds)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = FuzzInput(data, size).bytes
    let fromUTF8 = Result { () throws(DeviceTokenError) in try DeviceToken(hexUTF8: bytes) }
    // The String parser sees ill-formed UTF-8 as U+FFFD; both must then report the same offset.
    let text = String(decoding: bytes, as: UTF8.self)
    let fromString = Result { () throws(DeviceTokenError) in try DeviceToken(hex: text) }
    let firstInvalid = bytes.firstIndex { !isHexDigit($0) }
    switch fromUTF8 {
    case .success(let token):
        require(firstInvalid == nil, "accepted a non-hex byte at \(firstInvalid!)")
        require(fromString == .success(token), "String parser disagrees: \(fromString)")
        require(token.hexCount == bytes.count && token.byteCount * 2 == bytes.count, "lengths \(token.hexCount) for \(bytes.count) digits")
        let lowercase = bytes.map { $0 >= 0x41 && $0 <= 0x46 ? $0 | 0x20 : $0 }
        require(Array(token.hexString.utf8) == lowercase, "hex \(token.hexString) for \(lowercase)")
        let written = [UInt8](unsafeUninitializedCapacity: token.hexCount) { buffer, count in
            count = token.writeLowercaseHex(to: UnsafeMutableRawPointer(buffer.baseAddress!))
        }
        require(written == lowercase, "writeLowercaseHex wrote \(written)")
        require((try? DeviceToken(hex: token.hexString)) == token, "hex does not parse back")
        let raw = token.withUnsafeBytes { Array($0) }
        require((try? DeviceToken(bytes: raw)) == token, "raw bytes do not make the same token")
        require(token.shardHash == (try! DeviceToken(bytes: raw)).shardHash, "shard hash is not stable")
    case .failure(let error):
        switch fromString {
        case .success: require(false, "String parser accepted what the UTF-8 parser refused (\(error))")
        case .failure(let stringError):
            if case .invalidCharacter(_, let offset) = error {
                require(offset == firstInvalid, "invalid character reported at \(offset), first is \(String(describing: firstInvalid))")
                guard case .invalidCharacter(_, let stringOffset) = stringError else {
                    return fail("String parser reported \(stringError) for \(error)")
                }
                require(stringOffset == offset, "String parser reported offset \(stringOffset), UTF-8 \(offset)")
            } else {
                require(firstInvalid == nil, "\(error) although byte \(firstInvalid!) is not hex")
                require(stringError == error, "String parser reported \(stringError), UTF-8 \(error)")
                let digits = bytes.count
                switch error {
                case .empty: require(digits == 0, "empty for \(digits) digits")
                case .oddLength(let count): require(count == digits && digits % 2 == 1, "odd length \(count) for \(digits)")
                case .tooShort(let count): require(count == digits / 2 && count < DeviceToken.minimumByteCount, "too short \(count)")
                case .tooLong(let count): require(count == digits / 2 && count > DeviceToken.maximumByteCount, "too long \(count)")
                case .invalidCharacter: break
                }
            }
            require(!error.description.isEmpty, "an error without a description")
        }
    }
    // Any 32...100 raw bytes are a token; its hex parses back to it.
    if let token = try? DeviceToken(bytes: Array(bytes)) {
        require((try? DeviceToken(hex: token.hexString)) == token, "raw token's hex does not parse back")
    }
    return 0
}

func fail(_ message: String) -> Int32 {
    require(false, message)
    return 0
}

func isHexDigit(_ byte: UInt8) -> Bool {
    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x46) || (byte >= 0x61 && byte <= 0x66)
}

func seeds() -> [Seed] {
    [
        Seed("token-32", Array(String(repeating: "0123456789abcdef", count: 4).utf8)),
        Seed("token-80-uppercase", Array(String(repeating: "A1B2C3D4E5", count: 16).utf8)),
        Seed("token-100", Array(String(repeating: "f", count: 200).utf8)),
        Seed("too-long", Array(String(repeating: "9", count: 202).utf8)),
        Seed("odd", Array("abc".utf8)),
        Seed("bad-character", Array((String(repeating: "00", count: 20) + "zz").utf8)),
        Seed("multibyte", Array("00ff\u{00E9}\u{1F600}".utf8) + [0xFF, 0xC3]),
    ]
}

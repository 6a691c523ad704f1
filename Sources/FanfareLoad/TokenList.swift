import FanfareCore
import Foundation

/// The tokens a load run cycles through: generated (random bytes, fixed length) or read from a file.
public enum TokenList {
    public struct FileError: Error, CustomStringConvertible {
        public let description: String
    }

    /// `count` random tokens of `byteLength` bytes (Live Activity tokens are usually 80), reproducible by seed.
    public static func generate(count: Int, byteLength: Int = 80, seed: UInt64 = 1) -> [DeviceToken] {
        precondition(count > 0)
        precondition((DeviceToken.minimumByteCount...DeviceToken.maximumByteCount).contains(byteLength))
        var random = SplitMix64(seed: seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed)
        var tokens: [DeviceToken] = []
        tokens.reserveCapacity(count)
        var bytes = [UInt8](repeating: 0, count: byteLength)
        for _ in 0..<count {
            for index in 0..<byteLength { bytes[index] = UInt8(truncatingIfNeeded: random.next()) }
            tokens.append(try! DeviceToken(bytes: bytes))
        }
        return tokens
    }

    /// One hex token per line; blank lines and `#` comments are skipped. Errors name the line.
    public static func load(path: String) throws(FileError) -> [DeviceToken] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw FileError(description: "cannot read tokens file '\(path)'")
        }
        var tokens: [DeviceToken] = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            do {
                tokens.append(try DeviceToken(hex: trimmed))
            } catch {
                throw FileError(description: "\(path):\(number + 1): \(error)")
            }
        }
        guard !tokens.isEmpty else { throw FileError(description: "tokens file '\(path)' has no tokens") }
        return tokens
    }
}

/// Reads a fuzz input as a little program: bytes, 16-bit numbers and length-prefixed chunks. Reading past
/// the end yields zeros and empty chunks, so every input means something.
public struct FuzzInput {
    public let bytes: UnsafeRawBufferPointer
    public private(set) var offset = 0

    public init(_ data: UnsafePointer<UInt8>?, _ size: Int) {
        bytes = UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size)
    }

    public init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    public var isAtEnd: Bool { offset >= bytes.count }
    public var remainingCount: Int { max(0, bytes.count - offset) }

    public mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }

    public mutating func bool() -> Bool { byte() & 1 == 1 }

    /// Big-endian.
    public mutating func uint16() -> Int { Int(byte()) << 8 | Int(byte()) }

    public mutating func uint32() -> UInt32 { UInt32(uint16()) << 16 | UInt32(uint16()) }

    /// Up to `count` bytes (fewer at the end).
    public mutating func take(_ count: Int) -> UnsafeRawBufferPointer {
        let taken = min(max(count, 0), remainingCount)
        defer { offset += taken }
        return taken == 0 ? UnsafeRawBufferPointer(start: nil, count: 0) : UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + taken])
    }

    /// A chunk written by `FuzzInputWriter.chunk`: a 16-bit length, then that many bytes.
    public mutating func chunk() -> UnsafeRawBufferPointer { take(uint16()) }

    /// Everything not read yet.
    public mutating func rest() -> UnsafeRawBufferPointer { take(remainingCount) }
}

/// Builds inputs in `FuzzInput`'s format, for seeds.
public struct FuzzInputWriter {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public mutating func byte(_ value: UInt8) { bytes.append(value) }

    public mutating func bool(_ value: Bool) { bytes.append(value ? 1 : 0) }

    public mutating func uint16(_ value: Int) {
        precondition(value >= 0 && value <= 0xFFFF)
        bytes.append(UInt8(value >> 8))
        bytes.append(UInt8(value & 0xFF))
    }

    public mutating func uint32(_ value: UInt32) {
        uint16(Int(value >> 16))
        uint16(Int(value & 0xFFFF))
    }

    public mutating func raw(_ value: some Sequence<UInt8>) { bytes.append(contentsOf: value) }

    public mutating func chunk(_ value: some Collection<UInt8>) {
        uint16(value.count)
        bytes.append(contentsOf: value)
    }

    public mutating func chunk(_ text: String) { chunk(Array(text.utf8)) }
}

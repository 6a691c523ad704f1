import FanfareTestSupport
import Testing

@testable import FanfareCore

@Suite("apns-id generation", .ownThread)
struct APNsIDTests {
    static let hexDigits = Set("0123456789abcdef".utf8)

    @Test("ids are canonical lowercase version-4 UUIDs")
    func format() {
        var generator = APNsIDGenerator()
        for _ in 0..<1000 {
            let id = Array(generator.nextString().utf8)
            #expect(id.count == 36)
            for (index, byte) in id.enumerated() {
                if [8, 13, 18, 23].contains(index) {
                    #expect(byte == UInt8(ascii: "-"))
                } else {
                    #expect(Self.hexDigits.contains(byte))
                }
            }
            #expect(id[14] == UInt8(ascii: "4"))  // version
            #expect(Set("89ab".utf8).contains(id[19]))  // RFC 4122 variant
            #expect(id.withUnsafeBytes { APNsIDGenerator.isValidAPNsID($0) })
        }
    }

    @Test("the branch-free digit conversion matches String(radix: 16) for every nibble pattern")
    func hexDigitConversion() {
        var values: [UInt32] = [
            0, 1, 0x9, 0xA, 0xF, 0x10, 0xFFFF_FFFF, 0x0123_4567, 0x89AB_CDEF, 0xA0A0_A0A0, 0x9F9F_9F9F,
        ]
        var generator = APNsIDGenerator(seed: 7)
        for _ in 0..<1000 { values.append(UInt32(truncatingIfNeeded: generator.next())) }
        for value in values {
            var digits = APNsIDGenerator.hexDigits(value)
            let text = withUnsafeBytes(of: &digits) { String(decoding: $0, as: UTF8.self) }
            let expected = String(repeating: "0", count: 8 - String(value, radix: 16).count) + String(value, radix: 16)
            #expect(text == expected, "\(value)")
        }
    }

    @Test("isValidAPNsID agrees with a plain reference for every byte at every position, both modes")
    func validationIsExhaustive() {
        func reference(_ bytes: [UInt8], requireLowercase: Bool) -> Bool {
            guard bytes.count == 36 else { return false }
            for (index, byte) in bytes.enumerated() {
                if [8, 13, 18, 23].contains(index) {
                    if byte != UInt8(ascii: "-") { return false }
                } else {
                    let lowercase = (48...57).contains(byte) || (97...102).contains(byte)
                    let uppercase = (65...70).contains(byte)
                    if !(lowercase || (!requireLowercase && uppercase)) { return false }
                }
            }
            return true
        }
        let base = Array("0aa1b2c3-d4e5-4607-9829-3a4b5c6d7e8f".utf8)
        for position in 0..<36 {
            for value in 0...255 {
                var bytes = base
                bytes[position] = UInt8(value)
                for requireLowercase in [false, true] {
                    let fast = bytes.withUnsafeBytes {
                        APNsIDGenerator.isValidAPNsID($0, requireLowercase: requireLowercase)
                    }
                    #expect(
                        fast == reference(bytes, requireLowercase: requireLowercase),
                        "position \(position), byte \(value)")
                }
            }
        }
        #expect(!Array(base.dropLast()).withUnsafeBytes { APNsIDGenerator.isValidAPNsID($0) })
        #expect(
            Array("0AA1B2C3-D4E5-4607-9829-3A4B5C6D7E8F".utf8).withUnsafeBytes { APNsIDGenerator.isValidAPNsID($0) })
        #expect(
            !Array("0AA1B2C3-D4E5-4607-9829-3A4B5C6D7E8F".utf8).withUnsafeBytes {
                APNsIDGenerator.isValidAPNsID($0, requireLowercase: true)
            })
    }

    @Test("10,000 ids are all different")
    func uniqueness() {
        var generator = APNsIDGenerator()
        var seen = Set<String>()
        for _ in 0..<10_000 {
            seen.insert(generator.nextString())
        }
        #expect(seen.count == 10_000)
    }

    @Test("write(to:) writes exactly 36 bytes")
    func writesInPlace() {
        var generator = APNsIDGenerator(seed: 7)
        var buffer = [UInt8](repeating: 0xEE, count: 40)
        buffer.withUnsafeMutableBytes { generator.write(to: $0.baseAddress! + 2) }
        #expect(buffer[0..<2] == [0xEE, 0xEE])
        #expect(buffer[38...] == [0xEE, 0xEE])
        #expect(buffer[2..<38].withUnsafeBytes { APNsIDGenerator.isValidAPNsID($0) })
    }

    @Test("seeded generators are reproducible; differently seeded ones differ")
    func seeding() {
        var a = APNsIDGenerator(seed: 42)
        var b = APNsIDGenerator(seed: 42)
        var c = APNsIDGenerator(seed: 43)
        let fromA = (0..<5).map { _ in a.nextString() }
        #expect(fromA == (0..<5).map { _ in b.nextString() })
        #expect(fromA != (0..<5).map { _ in c.nextString() })
        var system1 = APNsIDGenerator()
        var system2 = APNsIDGenerator()
        #expect(system1.next() != system2.next())
    }

    @Test("the PRNG is xoshiro256** (reference outputs for state 1, 2, 3, 4)")
    func knownAnswer() {
        var generator = APNsIDGenerator(state: (1, 2, 3, 4))
        #expect(generator.next() == 11520)
        #expect(generator.next() == 0)
        #expect(generator.next() == 1_509_978_240)
        #expect(generator.next() == 1_215_971_899_390_074_240)
        var zero = APNsIDGenerator(state: (0, 0, 0, 0))
        #expect((0..<4).contains { _ in zero.next() != 0 })  // the all-zero state is repaired
    }

    @Test(
        "isValidAPNsID accepts the canonical form in either case only",
        arguments: [
            ("123e4567-e89b-12d3-a456-426614174000", true),
            ("123E4567-E89B-12D3-A456-426614174000", true),
            ("00000000-0000-0000-0000-000000000000", true),
            ("123e4567e89b12d3a456426614174000", false),
            ("123e4567-e89b-12d3-a456-42661417400", false),
            ("123e4567-e89b-12d3-a456-4266141740000", false),
            ("123e4567-e89b-12d3-a456_426614174000", false),
            ("123e4567-e89b-12d3-a4566-42661417400", false),
            ("g23e4567-e89b-12d3-a456-426614174000", false),
            ("{23e4567-e89b-12d3-a456-42661417400}", false),
            ("", false),
        ])
    func validation(id: String, valid: Bool) {
        #expect(APNsIDGenerator.isValidAPNsID(id) == valid)
        #expect(Array(id.utf8).withUnsafeBytes { APNsIDGenerator.isValidAPNsID($0) } == valid)
    }
}

import FanfareCore
import FanfareStorage
import NIOCore
import PostgresNIO

/// Reads the columns of one stored row of the wave tables strictly, as `StoredWaveColumns` does for SQLite: the
/// database is input (other nodes, other versions, hands with psql), so a NULL where a value belongs, a negative
/// count or a malformed encoding is a `.storage` error naming the row, never a trap.
struct PostgresWaveColumns: WaveRowColumns {
    let row: PostgresRandomAccessRow
    /// What the messages call the row, e.g. "wave 7".
    let name: String

    init(_ row: PostgresRow, name: (PostgresRandomAccessRow) -> String) {
        self.row = row.makeRandomAccess()
        self.name = name(self.row)
    }

    /// "wave <id in column 0>" (or "a wave" when even the id cannot be read).
    static func waveName(_ row: PostgresRandomAccessRow) -> String {
        (try? row[0].decode(Int64.self)).map { "wave \($0)" } ?? "a wave"
    }

    func integer(_ column: Int, _ field: String) throws -> Int64 {
        try value(column, field, Int64.self)
    }

    func optionalInteger(_ column: Int, _ field: String) throws -> Int64? {
        try value(column, field, Int64?.self)
    }

    /// A count or size: not negative.
    func count(_ column: Int, _ field: String) throws -> Int {
        let value = try integer(column, field)
        guard value >= 0, let count = Int(exactly: value) else { throw corrupt(field, "is negative (\(value))") }
        return count
    }

    /// Nanoseconds: not negative, or NULL.
    func optionalNanoseconds(_ column: Int, _ field: String) throws -> UInt64? {
        guard let value = try optionalInteger(column, field) else { return nil }
        guard value >= 0 else { throw corrupt(field, "is negative (\(value))") }
        return UInt64(value)
    }

    func flag(_ column: Int, _ field: String) throws -> Bool {
        try value(column, field, Bool.self)
    }

    func text(_ column: Int, _ field: String) throws -> String {
        try value(column, field, String.self)
    }

    func optionalText(_ column: Int, _ field: String) throws -> String? {
        try value(column, field, String?.self)
    }

    func bytes(_ column: Int, _ field: String) throws -> [UInt8] {
        Array(try value(column, field, ByteBuffer.self).readableBytesView)
    }

    func optionalBytes(_ column: Int, _ field: String) throws -> [UInt8]? {
        try value(column, field, ByteBuffer?.self).map { Array($0.readableBytesView) }
    }

    func environment(_ column: Int) throws -> APNsEnvironment {
        let value = try value(column, "environment", Int16.self)
        guard let raw = UInt8(exactly: value), let environment = APNsEnvironment(rawValue: raw) else {
            throw corrupt("environment", "is unknown (\(value))")
        }
        return environment
    }

    func startKeys(_ column: Int) throws -> [UInt64] {
        let bytes = Array(try value(column, "start_keys", ByteBuffer.self).readableBytesView)
        let decoded = bytes.withUnsafeBytes { raw in
            Result { () throws(WaveColumnEncoding.Malformed) in try WaveColumnEncoding.startKeys(raw) }
        }
        switch decoded {
        case .success(let keys): return keys
        case .failure(let malformed): throw corrupt("start_keys", malformed.reason)
        }
    }

    func failureCounts(_ column: Int) throws -> [String: Int] {
        let text = try text(column, "failed_by_reason")
        do {
            return try WaveColumnEncoding.failureCounts(text)
        } catch {
            throw corrupt("failed_by_reason", error.reason)
        }
    }

    func corrupt(_ field: String, _ problem: String) -> RegistryError {
        .storage("\(name) is corrupt in the database: \(field) \(problem)")
    }

    private func value<T: PostgresDecodable>(_ column: Int, _ field: String, _: T.Type) throws -> T {
        guard column < row.count else { throw corrupt(field, "is missing from the row") }
        let cell = row[column]
        guard cell.bytes != nil || T.self is any ExpressibleByNilLiteral.Type else { throw corrupt(field, "is NULL") }
        do { return try cell.decode(T.self) } catch { throw corrupt(field, "cannot be read as \(T.self)") }
    }
}

import FanfareStorage
import GRDBSQLite

/// Reads the columns of one stored row of the wave tables strictly: the file is input, so a value of the wrong
/// type, a negative count or a malformed encoding is a `.storage` error naming the row, never a trap and never a
/// silent conversion (SQLite would read a TEXT as 0 where an INTEGER belongs).
struct StoredWaveColumns: WaveRowColumns {
    let row: RawStatement
    /// What the messages call the row, e.g. "wave 7".
    let name: String

    func integer(_ column: Int, _ field: String) throws -> Int64 {
        guard row.type(Int32(column)) == SQLITE_INTEGER else { throw corrupt(field, "is not an integer") }
        return row.int64(Int32(column))
    }

    func optionalInteger(_ column: Int, _ field: String) throws -> Int64? {
        if row.type(Int32(column)) == SQLITE_NULL { return nil }
        return try integer(column, field)
    }

    /// A count or size: an integer, not negative.
    func count(_ column: Int, _ field: String) throws -> Int {
        let value = try integer(column, field)
        guard value >= 0, let count = Int(exactly: value) else { throw corrupt(field, "is negative (\(value))") }
        return count
    }

    /// Nanoseconds: an integer, not negative, or NULL.
    func optionalNanoseconds(_ column: Int, _ field: String) throws -> UInt64? {
        guard let value = try optionalInteger(column, field) else { return nil }
        guard value >= 0 else { throw corrupt(field, "is negative (\(value))") }
        return UInt64(value)
    }

    func flag(_ column: Int, _ field: String) throws -> Bool {
        switch try integer(column, field) {
        case 0: return false
        case 1: return true
        case let value: throw corrupt(field, "is \(value), not 0 or 1")
        }
    }

    func text(_ column: Int, _ field: String) throws -> String {
        guard row.type(Int32(column)) == SQLITE_TEXT, let text = row.string(Int32(column)) else {
            throw corrupt(field, "is not text")
        }
        return text
    }

    func optionalText(_ column: Int, _ field: String) throws -> String? {
        if row.type(Int32(column)) == SQLITE_NULL { return nil }
        return try text(column, field)
    }

    func bytes(_ column: Int, _ field: String) throws -> [UInt8] {
        guard row.type(Int32(column)) == SQLITE_BLOB else { throw corrupt(field, "is not a BLOB") }
        return [UInt8](row.blob(Int32(column)))
    }

    func optionalBytes(_ column: Int, _ field: String) throws -> [UInt8]? {
        if row.type(Int32(column)) == SQLITE_NULL { return nil }
        return try bytes(column, field)
    }

    func environment(_ column: Int) throws -> APNsEnvironment {
        let value = try integer(column, "environment")
        guard let raw = UInt8(exactly: value), let environment = APNsEnvironment(rawValue: raw) else {
            throw corrupt("environment", "is unknown (\(value))")
        }
        return environment
    }

    func startKeys(_ column: Int) throws -> [UInt64] {
        guard row.type(Int32(column)) == SQLITE_BLOB else { throw corrupt("start_keys", "is not a BLOB") }
        do {
            return try WaveColumnEncoding.startKeys(row.blob(Int32(column)))
        } catch {
            throw corrupt("start_keys", error.reason)
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
}

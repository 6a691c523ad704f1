import FanfareStorage
import Foundation
import GRDB
import GRDBSQLite

/// A statement GRDB prepared and caches, driven through the SQLite C API for the per-row loops (registering,
/// loading). GRDB's `execute(arguments:)` and `Row` cost an argument array, boxed values and a row object per
/// call, several microseconds per token; binding and reading columns directly costs next to nothing.
///
/// Use it only inside a GRDB access (`write`, `read`) on the connection that prepared it, and always leave it
/// reset (`run()` does; after `step()` call `reset()`, typically in a `defer`).
struct RawStatement {
    /// Kept so the prepared statement outlives this value; GRDB finalizes it.
    private let statement: Statement
    private let handle: OpaquePointer
    private let connection: OpaquePointer
    /// A value SQLite refused to bind (longer than its length limit): the next `step` throws instead of running
    /// with the parameter unset.
    private let refusedBind = RefusedBind()

    private final class RefusedBind {
        var byteCount: UInt64?
    }

    init(_ db: Database, sql: String) throws {
        statement = try db.cachedStatement(sql: sql)
        handle = statement.sqliteStatement
        connection = db.sqliteConnection!
    }

    // MARK: Binding (1-based indices, as in SQL). Values are copied by SQLite (SQLITE_TRANSIENT).

    func bind(_ index: Int32, _ value: Int64) {
        sqlite3_bind_int64(handle, index, value)
    }

    func bind(_ index: Int32, _ value: Int64?) {
        guard let value else {
            sqlite3_bind_null(handle, index)
            return
        }
        sqlite3_bind_int64(handle, index, value)
    }

    func bind(_ index: Int32, _ value: Bool) {
        sqlite3_bind_int64(handle, index, value ? 1 : 0)
    }

    func bind(_ index: Int32, _ value: String?) {
        guard var value else {
            sqlite3_bind_null(handle, index)
            return
        }
        value.withUTF8 { utf8 in
            // An empty buffer may have no address, and SQLite binds a nil pointer as NULL, not as ''.
            guard let pointer = utf8.baseAddress, !utf8.isEmpty else {
                sqlite3_bind_text(handle, index, "", 0, transient)
                return
            }
            let text = UnsafeRawPointer(pointer).assumingMemoryBound(to: CChar.self)
            // The 64-bit call: a length past Int32.max is refused by SQLite (SQLITE_TOOBIG), not a trap here.
            let code = sqlite3_bind_text64(handle, index, text, UInt64(utf8.count), transient, UInt8(SQLITE_UTF8))
            if code != SQLITE_OK { refusedBind.byteCount = UInt64(utf8.count) }
        }
    }

    func bind(_ index: Int32, blob: UnsafeRawBufferPointer) {
        guard let pointer = blob.baseAddress, !blob.isEmpty else {
            sqlite3_bind_zeroblob(handle, index, 0)
            return
        }
        if sqlite3_bind_blob64(handle, index, pointer, UInt64(blob.count), transient) != SQLITE_OK {
            refusedBind.byteCount = UInt64(blob.count)
        }
    }

    func bind(_ index: Int32, blob: [UInt8]) {
        blob.withUnsafeBytes { bind(index, blob: $0) }
    }

    // MARK: Execution

    /// Steps once: true when a row is ready to read, false when the statement is done.
    func step() throws -> Bool {
        if let byteCount = refusedBind.byteCount {
            refusedBind.byteCount = nil
            throw DatabaseError(
                resultCode: .SQLITE_TOOBIG, message: "a value of \(byteCount) bytes is longer than SQLite stores",
                sql: statement.sql)
        }
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw failure(code)
        }
    }

    /// Runs a statement that returns no rows, then resets it.
    func run() throws {
        defer { reset() }
        while try step() {}
    }

    /// Runs an `INSERT OR IGNORE` of `rows` rows and fails unless every row was inserted (nothing is expected
    /// to conflict; OR IGNORE only spares SQLite its statement journal).
    func runInserting(rows: Int) throws {
        try run()
        guard changes == rows else {
            throw DatabaseError(
                resultCode: .SQLITE_CONSTRAINT,
                message: "only \(changes) of \(rows) rows were inserted (conflicting ids; is the file corrupt?)",
                sql: statement.sql)
        }
    }

    /// Makes the statement ready to bind and run again (its error, if any, was reported by `step`).
    func reset() {
        sqlite3_reset(handle)
    }

    // MARK: Reading the current row (0-based columns)

    /// The storage class of a column of the current row: SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB
    /// or SQLITE_NULL (`int64`, `string` and `blob` convert silently; strict readers check this first).
    func type(_ column: Int32) -> Int32 {
        sqlite3_column_type(handle, column)
    }

    func int64(_ column: Int32) -> Int64 {
        sqlite3_column_int64(handle, column)
    }

    func string(_ column: Int32) -> String? {
        guard let text = sqlite3_column_text(handle, column) else { return nil }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    /// The bytes of a BLOB column, valid until the next step or reset.
    func blob(_ column: Int32) -> UnsafeRawBufferPointer {
        let pointer = sqlite3_column_blob(handle, column)
        return UnsafeRawBufferPointer(start: pointer, count: Int(sqlite3_column_bytes(handle, column)))
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE on this connection (not counting trigger changes).
    var changes: Int { Int(sqlite3_changes(connection)) }

    private func failure(_ code: Int32) -> DatabaseError {
        DatabaseError(
            resultCode: ResultCode(rawValue: code), message: String(cString: sqlite3_errmsg(connection)),
            sql: statement.sql)
    }

    /// SQLITE_TRANSIENT: SQLite copies the value before the bind call returns.
    private var transient: sqlite3_destructor_type {
        unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)
    }
}

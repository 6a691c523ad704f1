// Helpers shared by the FanfareTLS tests: temp directories, running the openssl CLI, and pumping
// ciphertext between two in-memory TLS connections.
import FanfareTestSupport
import Foundation
@testable import FanfareTLS

/// A fresh directory under /tmp, removed when the value is released.
final class TemporaryDirectory {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "fanfare-tls-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    func file(_ name: String) -> String { path + "/" + name }

    @discardableResult
    func write(_ name: String, _ contents: String) throws -> String {
        try contents.write(toFile: file(name), atomically: true, encoding: .utf8)
        return file(name)
    }

    func write(_ name: String, bytes: [UInt8]) throws -> String {
        try Data(bytes).write(to: URL(fileURLWithPath: file(name)))
        return file(name)
    }
}

struct ProcessResult {
    let status: Int32
    let output: String  // stdout and stderr together
}

/// Runs `openssl <arguments>` and waits for it.
func runOpenSSL(_ arguments: [String]) throws -> ProcessResult {
    let run = try ChildProcess.run("/usr/bin/env", ["openssl"] + arguments, mergeOutputs: true)
    return ProcessResult(status: run.status, output: run.stdout)
}

/// Base64url (unpadded) → bytes through Foundation, independent of the module's own decoder.
func foundationBase64URLDecode(_ text: Substring) -> Data? {
    var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while base64.count % 4 != 0 { base64 += "=" }
    return Data(base64Encoded: base64)
}

/// Moves every pending ciphertext byte from `source` to `destination`; returns how many moved.
@discardableResult
func transferCiphertext(from source: TLSConnection, to destination: TLSConnection) -> Int {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 1)
    defer { buffer.deallocate() }
    var moved = 0
    while source.pendingCiphertextCount > 0 {
        let count = source.takeCiphertext(into: buffer)
        precondition(count > 0)
        destination.receiveCiphertext(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        moved += count
    }
    return moved
}

/// Drives both handshakes, shuttling ciphertext, until neither side is still in progress (or
/// the round limit says they are stuck).
func handshake(client: TLSConnection, server: TLSConnection) -> (client: TLSHandshakeState, server: TLSHandshakeState) {
    var clientState = TLSHandshakeState.inProgress
    var serverState = TLSHandshakeState.inProgress
    for _ in 0..<16 {
        clientState = client.advanceHandshake()
        transferCiphertext(from: client, to: server)
        serverState = server.advanceHandshake()
        transferCiphertext(from: server, to: client)
        if clientState != .inProgress && serverState != .inProgress { break }
    }
    return (clientState, serverState)
}

/// Writes `bytes` on `sender` (looping over partial writes), delivers the ciphertext, and reads
/// everything `receiver` can decrypt. Also delivers whatever the receiver's reads produced
/// (TLS 1.3 tickets) back to the sender, as an event loop would.
func send(_ bytes: [UInt8], from sender: TLSConnection, to receiver: TLSConnection) -> [UInt8] {
    var offset = 0
    while offset < bytes.count {
        let result = bytes.withUnsafeBytes { sender.writePlaintext(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
        guard case .bytes(let count) = result, count > 0 else { preconditionFailure("write failed: \(result)") }
        offset += count
    }
    transferCiphertext(from: sender, to: receiver)
    var received: [UInt8] = []
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1000, alignment: 1)
    defer { buffer.deallocate() }
    readLoop: while true {
        switch receiver.readPlaintext(into: buffer) {
        case .bytes(let count): received.append(contentsOf: buffer[..<count])
        case .wantMore: break readLoop
        case .closed, .failed: preconditionFailure("unexpected end of stream")
        }
    }
    transferCiphertext(from: receiver, to: sender)
    return received
}

/// One read on `connection` after its pending input, for checking close/fail outcomes.
func readOnce(_ connection: TLSConnection) -> TLSReadResult {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1000, alignment: 1)
    defer { buffer.deallocate() }
    return connection.readPlaintext(into: buffer)
}

extension TLSHandshakeState {
    var failure: TLSFailure? {
        if case .failed(let failure) = self { return failure }
        return nil
    }
}

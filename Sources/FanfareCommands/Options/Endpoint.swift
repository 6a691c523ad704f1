import FanfareCore

/// An `https://host[:port]` endpoint given on the command line.
public struct Endpoint: Sendable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    static let production = Endpoint(host: "api.push.apple.com", port: 443)
    static let sandbox = Endpoint(host: "api.sandbox.push.apple.com", port: 443)

    /// Parses `https://host[:port]`, `host[:port]` or `[v6]:port`.
    public init(parsing text: String, allowPortZero: Bool = false) throws(UsageError) {
        let minimumPort: UInt16 = allowPortZero ? 0 : 1
        var rest = Substring(text)
        if rest.hasPrefix("https://") {
            rest = rest.dropFirst(8)
        } else if rest.contains("://") {
            throw UsageError("--endpoint '\(text)' must use https:// (APNs speaks HTTP/2 over TLS only)")
        }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.isEmpty else { throw UsageError("--endpoint '\(text)' has no host") }
        var host = rest
        var port: UInt16 = 443
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw UsageError("--endpoint '\(text)': unclosed '[' in an IPv6 address")
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                guard let value = UInt16(after.dropFirst()), value >= minimumPort else {
                    throw UsageError("--endpoint '\(text)': bad port")
                }
                port = value
            } else if !after.isEmpty {
                throw UsageError("--endpoint '\(text)': unexpected text after the IPv6 address")
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            guard let value = UInt16(rest[rest.index(after: colon)...]), value >= minimumPort else {
                throw UsageError("--endpoint '\(text)': the port must be a number from 1 to 65535")
            }
            port = value
        }
        guard !host.isEmpty, !host.contains("/") else {
            throw UsageError("--endpoint '\(text)': expected https://host[:port]")
        }
        self.host = String(host)
        self.port = port
    }

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    public var description: String {
        port == 443 ? "https://\(host)" : "https://\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }
}

/// A command-line mistake: printed as one line, exit code 64 (EX_USAGE).
public struct UsageError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

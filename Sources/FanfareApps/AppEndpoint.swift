import FanfareStorage

/// Where an app's pushes (or its channel-management calls) go in one environment: a host and port, reached over
/// TLS. Written `https://HOST:PORT` in the apps file (`https://[::1]:2197` for IPv6).
public struct AppEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Apple's push host for `environment` (apns-spec.md §1.1).
    public static func apple(_ environment: APNsEnvironment) -> AppEndpoint {
        AppEndpoint(
            host: environment == .production ? "api.push.apple.com" : "api.sandbox.push.apple.com", port: 443)
    }

    /// Apple's broadcast channel management host for `environment` (apns-spec.md §8.2).
    public static func appleChannelManagement(_ environment: APNsEnvironment) -> AppEndpoint {
        environment == .production
            ? AppEndpoint(host: "api-manage-broadcast.push.apple.com", port: 2196)
            : AppEndpoint(host: "api-manage-broadcast.sandbox.push.apple.com", port: 2195)
    }

    /// An endpoint, or what is wrong with its text.
    enum Parsed {
        case success(AppEndpoint)
        case failure(String)
    }

    /// `https://HOST:PORT` or `https://HOST` (port 443).
    static func parse(_ text: String) -> Parsed {
        let prefix = "https://"
        guard text.lowercased().hasPrefix(prefix) else {
            return .failure("'\(text.prefix(100))' must be https://HOST:PORT (APNs is reached over TLS only)")
        }
        var rest = Substring(text.dropFirst(prefix.count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.isEmpty, !rest.contains("/"), !rest.contains("@") else {
            return .failure("'\(text.prefix(100))' must be https://HOST:PORT, without a path or user")
        }
        var host = rest
        var port = 443
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return .failure("'\(text.prefix(100))': unclosed '['") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let value = Int(after.dropFirst()) else {
                    return .failure("'\(text.prefix(100))': the port must follow ']:'")
                }
                port = value
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            guard let value = Int(rest[rest.index(after: colon)...]) else {
                return .failure("'\(text.prefix(100))': the port is not a number")
            }
            port = value
        }
        guard !host.isEmpty else { return .failure("'\(text.prefix(100))' has no host") }
        guard (1...65535).contains(port) else { return .failure("'\(text.prefix(100))': port must be in 1...65535") }
        return .success(AppEndpoint(host: String(host), port: port))
    }

    public var description: String { host.contains(":") ? "https://[\(host)]:\(port)" : "https://\(host):\(port)" }
}

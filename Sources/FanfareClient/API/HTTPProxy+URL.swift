import FanfareCore

/// A proxy URL that does not say an HTTP proxy with a port. Its text never repeats the URL's credentials.
public struct HTTPProxyURLError: Error, Equatable, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

extension HTTPProxy {
    /// Parses `http://[user:password@]host:port[/]`: a host name, an IPv4 address or `[IPv6]`, and a port (proxies
    /// have no usual one). User and password are percent-decoded (RFC 3986 §2.1), so `@`, `:` and `%` can be in
    /// them as `%40`, `%3A` and `%25`.
    public init(url text: String) throws(HTTPProxyURLError) {
        guard let schemeEnd = text.firstRange(of: "://") else {
            throw HTTPProxyURLError("must be http://host:port (or http://user:password@host:port)")
        }
        switch text[..<schemeEnd.lowerBound].lowercased() {
        case "http": break
        case "https":
            throw HTTPProxyURLError(
                "https:// proxies (TLS to the proxy) are not supported: give the proxy's http://host:port (TLS to APNs "
                    + "runs end to end through the tunnel either way)")
        default:
            throw HTTPProxyURLError("only http:// proxies (HTTP CONNECT) are supported")
        }
        var rest = text[schemeEnd.upperBound...]
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.contains(where: { $0 == "/" || $0 == "?" || $0 == "#" }) else {
            throw HTTPProxyURLError("has a path, query or fragment: give http://host:port only")
        }
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            guard let colon = userInfo.firstIndex(of: ":") else {
                throw HTTPProxyURLError("the credentials must be user:password")
            }
            username = try Self.percentDecoded(userInfo[..<colon])
            password = try Self.percentDecoded(userInfo[userInfo.index(after: colon)...])
        }
        let (host, port) = try Self.hostAndPort(rest)
        self.init(host: host, port: port, username: username, password: password)
    }

    /// `text` with whatever stands between `://` and the last `@` replaced by `***`: safe to print.
    public static func redacting(_ text: String) -> String {
        guard let schemeEnd = text.firstRange(of: "://"), let at = text[schemeEnd.upperBound...].lastIndex(of: "@")
        else {
            return PrintableText.escaping(text, limit: 256)
        }
        return PrintableText.escaping(String(text[..<schemeEnd.upperBound]) + "***" + text[at...], limit: 256)
    }

    private static func hostAndPort(_ text: Substring) throws(HTTPProxyURLError) -> (String, UInt16) {
        var host: Substring
        var portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else {
                throw HTTPProxyURLError("unclosed '[' in an IPv6 address")
            }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else {
                throw HTTPProxyURLError("unexpected text after the IPv6 address")
            }
            portText = after.isEmpty ? nil : after.dropFirst()
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        } else {
            host = text
        }
        guard !host.isEmpty else { throw HTTPProxyURLError("has no host") }
        guard let portText else {
            throw HTTPProxyURLError("has no port: give http://host:port (proxies often listen on 3128 or 8080)")
        }
        guard let port = UInt16(portText), port != 0 else {
            throw HTTPProxyURLError("the port must be a number from 1 to 65535")
        }
        guard isHostName(String(host)), !(host.contains(":") && !text.hasPrefix("[")) else {
            throw HTTPProxyURLError(
                "'\(PrintableText.escaping(String(host), limit: 64))' is not a host name, an IPv4 address or [IPv6]")
        }
        return (String(host), port)
    }

    private static func percentDecoded(_ text: Substring) throws(HTTPProxyURLError) -> String {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                throw HTTPProxyURLError("the credentials have a '%' not followed by two hex digits")
            }
            bytes.append(high << 4 | low)
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw HTTPProxyURLError("the credentials are not UTF-8 once percent-decoded")
        }
        return decoded
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

// Turns OpenSSL's thread-local error queue into one readable line for our error messages.
import COpenSSL

enum OpenSSLErrorQueue {
    /// Empties the queue so the next failure reports only its own reasons.
    static func clear() {
        ERR_clear_error()
    }

    /// Pops every queued error and joins their reasons ("no certificate or crl found; ..."),
    /// keeping OpenSSL's extra detail text (e.g. "Expecting: ANY PRIVATE KEY") and dropping repeats.
    /// Returns `fallback` when the queue was empty.
    static func drain(fallback: String = "unknown OpenSSL error") -> String {
        var reasons: [String] = []
        while true {
            var data: UnsafePointer<CChar>? = nil
            var flags: Int32 = 0
            let code = ERR_get_error_all(nil, nil, nil, &data, &flags)
            if code == 0 { break }
            var reason = reasonText(code)
            if let data, flags & ERR_TXT_STRING != 0 {
                let detail = String(cString: data)
                if !detail.isEmpty { reason += " (\(detail))" }
            }
            if !reasons.contains(reason) { reasons.append(reason) }
        }
        return reasons.isEmpty ? fallback : reasons.joined(separator: "; ")
    }

    private static func reasonText(_ code: UInt) -> String {
        if let reason = ERR_reason_error_string(code) {
            return String(cString: reason)
        }
        // No registered reason string: fall back to the full "error:XXXXXXXX:lib:func:reason" form.
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}

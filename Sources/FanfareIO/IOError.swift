import CURing
import Glibc

/// A failed system call (or name lookup), with the errno and a one-line, human-readable explanation.
public struct IOError: Error, CustomStringConvertible, Sendable {
    /// What was attempted, e.g. `io_uring_queue_init_params` or `bind 127.0.0.1:8443`.
    public let operation: String
    /// The errno value (positive), or 0 when the failure is not an errno (getaddrinfo, a missing feature).
    public let errno: Int32
    public let description: String

    /// `operation failed: <strerror> (ENAME)`, plus an optional hint saying what to fix.
    public init(operation: String, errno: Int32, hint: String? = nil) {
        self.operation = operation
        self.errno = errno
        var text = "\(operation) failed: \(IOError.describe(errno: errno))"
        if let hint { text += "; \(hint)" }
        self.description = text
    }

    /// A failure that is not described by an errno; `message` is the whole description.
    public init(operation: String, message: String, errno: Int32 = 0) {
        self.operation = operation
        self.errno = errno
        self.description = message
    }

    /// `Connection refused (ECONNREFUSED)`; the errno's name is left out when it is not a common one.
    public static func describe(errno code: Int32) -> String {
        let text = strerror(code).map { String(cString: $0) } ?? "errno \(code)"
        if let name = name(ofErrno: code) { return "\(text) (\(name))" }
        return "\(text) (errno \(code))"
    }

    /// The symbolic name of the errno values a network event loop meets; nil for the rest.
    public static func name(ofErrno code: Int32) -> String? {
        switch code {
        case EPERM: return "EPERM"
        case ENOENT: return "ENOENT"
        case EINTR: return "EINTR"
        case EIO: return "EIO"
        case EBADF: return "EBADF"
        case EAGAIN: return "EAGAIN"
        case ENOMEM: return "ENOMEM"
        case EACCES: return "EACCES"
        case EFAULT: return "EFAULT"
        case EBUSY: return "EBUSY"
        case EEXIST: return "EEXIST"
        case EINVAL: return "EINVAL"
        case ENFILE: return "ENFILE"
        case EMFILE: return "EMFILE"
        case ENOSPC: return "ENOSPC"
        case EPIPE: return "EPIPE"
        case ENOSYS: return "ENOSYS"
        case ETIME: return "ETIME"
        case ENOTSOCK: return "ENOTSOCK"
        case EOPNOTSUPP: return "EOPNOTSUPP"
        case EAFNOSUPPORT: return "EAFNOSUPPORT"
        case EADDRINUSE: return "EADDRINUSE"
        case EADDRNOTAVAIL: return "EADDRNOTAVAIL"
        case ENETDOWN: return "ENETDOWN"
        case ENETUNREACH: return "ENETUNREACH"
        case ECONNABORTED: return "ECONNABORTED"
        case ECONNRESET: return "ECONNRESET"
        case ENOBUFS: return "ENOBUFS"
        case EISCONN: return "EISCONN"
        case ENOTCONN: return "ENOTCONN"
        case ETIMEDOUT: return "ETIMEDOUT"
        case ECONNREFUSED: return "ECONNREFUSED"
        case EHOSTUNREACH: return "EHOSTUNREACH"
        case EALREADY: return "EALREADY"
        case EINPROGRESS: return "EINPROGRESS"
        case ECANCELED: return "ECANCELED"
        default: return nil
        }
    }
}

/// A reference the sessions hold without reference counting: the transport and the delegate, called several
/// times per request (a retain/release pair per call was ~20% of the client's CPU). The session's owner keeps
/// the object alive for the session's whole life. A base class rather than a protocol for the same reason: an
/// existential cannot be held this way.
struct HTTP2Unretained<Object: AnyObject> {
    private let reference: Unmanaged<Object>

    init(_ object: Object) {
        reference = Unmanaged.passUnretained(object)
    }

    @inline(__always)
    func with<Result>(_ body: (Object) -> Result) -> Result {
        reference._withUnsafeGuaranteedRef(body)
    }
}

import CURing

extension IOLoop {
    /// `IORING_CQE_F_MORE`: a multishot operation stays armed after this completion.
    public static let completionFlagMore: UInt32 = UInt32(IORING_CQE_F_MORE)
}

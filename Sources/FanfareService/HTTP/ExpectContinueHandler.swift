import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// Answers `Expect: 100-continue` with an interim 100, so clients that wait for it before sending a body
/// (curl does for bodies over 1 KiB, for a second) send at once. A body that announces more than the service
/// takes gets no 100: `BodyLimitMiddleware` answers 413 without reading it.
final class ExpectContinueHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private let maxBodyBytes: Int

    init(maxBodyBytes: Int) { self.maxBodyBytes = maxBodyBytes }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var request) = unwrapInboundIn(data), let expect = request.headerFields[.expect],
            expect.lowercased() == "100-continue"
        else {
            context.fireChannelRead(data)
            return
        }
        request.headerFields[.expect] = nil
        let announced = request.headerFields[.contentLength].flatMap { Int($0) } ?? 0
        if announced <= maxBodyBytes {
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
        context.fireChannelRead(wrapInboundOut(.head(request)))
    }
}

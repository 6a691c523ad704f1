/// The operator page served at `GET /`: one self-contained HTML document (inline CSS and JavaScript, no CDN,
/// no build step) for broadcast operators during a match. It shows the service's readiness, the live waves as
/// large progress bars (delivered / superseded / failed / expired-or-invalidated of targeted), the channels of
/// the engine (audience, latest timestamp, live waves) and the recent waves as a table.
///
/// It polls `GET /readyz`, `GET /v1/waves` and `GET /v1/channels` every 2 s and follows up to three
/// running waves through `GET /v1/waves/{id}/events`, read with `fetch` rather than `EventSource` so that the
/// API key can go in the `Authorization: Bearer` header. When the API answers 401 or 403 the page asks for a
/// key and keeps it in the tab's session storage. Everything from the API is inserted as text, never as HTML.
///
/// The page is `OperatorPage.html` beside this file, so HTML, CSS and JavaScript tools read it as what it is.
/// SwiftPM embeds it in the code (`resources: [.embedInCode(…)]` in Package.swift) rather than copying it into
/// a resource bundle: `fanfare` stays one file that runs wherever it is copied, with no `Bundle.module` lookup
/// that would fail at run time beside a binary moved without its bundle directory.
package enum OperatorPage {
    /// The document's bytes (UTF-8), as served.
    package static let bytes: [UInt8] = PackageResources.OperatorPage_html

    package static var html: String { String(decoding: bytes, as: UTF8.self) }
}

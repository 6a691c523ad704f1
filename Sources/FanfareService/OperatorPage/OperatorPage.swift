/// The operator page served at `GET /`: one self-contained HTML document (no CDN, no build step) that shows
/// channels and live and recent waves, fed by the API and the waves' Server-Sent Events.
package enum OperatorPage {
    package static let html = #"""
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>Fanfare</title></head>
        <body><h1>Fanfare</h1><p>Operator page: being written.</p></body></html>
        """#
}

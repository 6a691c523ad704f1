import FanfareTestSupport
import Testing

@testable import FanfareHTTP2

@Suite("HPACK static table", .ownThread)
struct HPACKStaticTableTests {
    @Test("matches nghttp2's static table entry for entry")
    func matchesNghttp2() {
        let deflater = NGHTTP2Deflater(maximumTableSize: 4096)
        for index in 1...HPACKStaticTable.count {
            let entry = HPACKStaticTable.entry(index)
            #expect(
                deflater.tableEntry(index) == Header(name: Array(entry.name), value: Array(entry.value)),
                "index \(index)")
        }
        #expect(deflater.tableEntry(62) == nil)
    }

    @Test("named indices point at the right entries")
    func namedIndices() {
        func field(_ index: Int) -> String {
            "\(HPACKStaticTable.entry(index).nameString) \(HPACKStaticTable.entry(index).valueString)"
        }
        #expect(field(HPACKStaticTable.authority) == ":authority ")
        #expect(field(HPACKStaticTable.methodGET) == ":method GET")
        #expect(field(HPACKStaticTable.methodPOST) == ":method POST")
        #expect(field(HPACKStaticTable.path) == ":path /")
        #expect(field(HPACKStaticTable.schemeHTTP) == ":scheme http")
        #expect(field(HPACKStaticTable.schemeHTTPS) == ":scheme https")
        #expect(field(HPACKStaticTable.status200) == ":status 200")
        #expect(field(HPACKStaticTable.status204) == ":status 204")
        #expect(field(HPACKStaticTable.status400) == ":status 400")
        #expect(field(HPACKStaticTable.status404) == ":status 404")
        #expect(field(HPACKStaticTable.status500) == ":status 500")
        #expect(field(HPACKStaticTable.authorization) == "authorization ")
        #expect(field(HPACKStaticTable.contentLength) == "content-length ")
        #expect(field(HPACKStaticTable.contentType) == "content-type ")
        #expect(field(HPACKStaticTable.date) == "date ")
        #expect(field(HPACKStaticTable.retryAfter) == "retry-after ")
        #expect(field(HPACKStaticTable.server) == "server ")
        #expect(field(HPACKStaticTable.userAgent) == "user-agent ")
    }

    @Test("looks up names and name-value pairs")
    func lookups() {
        #expect(HPACKStaticTable.index(name: ":status") == 8)
        #expect(HPACKStaticTable.index(name: ":status", value: "404") == 13)
        #expect(HPACKStaticTable.index(name: "www-authenticate") == 61)
        #expect(HPACKStaticTable.index(name: "apns-id") == nil)
        #expect(HPACKStaticTable.index(name: ":method", value: "PUT") == nil)
    }
}

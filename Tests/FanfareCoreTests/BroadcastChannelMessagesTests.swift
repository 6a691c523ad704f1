import FanfareCore
import FanfareTestSupport
import Testing

/// The channel management bodies (apns-spec.md §8.2): written exactly, read strictly where it matters and
/// leniently about members APNs may add; whatever a server sends gives a value or a clear error, never a trap.
@Suite(.ownThread) struct BroadcastChannelMessagesTests {
    func info(_ text: String) -> Result<BroadcastChannelInfo, ChannelBodyError> {
        Array(text.utf8).withUnsafeBytes { bytes in
            do throws(ChannelBodyError) { return .success(try BroadcastChannelMessages.parseInfo(bytes)) } catch {
                return .failure(error)
            }
        }
    }

    func list(_ text: String) -> Result<[String], ChannelBodyError> {
        Array(text.utf8).withUnsafeBytes { bytes in
            do throws(ChannelBodyError) {
                return .success(try BroadcastChannelMessages.parseChannelList(bytes).map(\.description))
            } catch { return .failure(error) }
        }
    }

    @Test func theCreateBodyIsWhatAppleDocuments() {
        #expect(
            String(decoding: BroadcastChannelMessages.createBody(storagePolicy: .noMessageStored), as: UTF8.self)
                == #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#)
        #expect(
            String(
                decoding: BroadcastChannelMessages.createBody(storagePolicy: .mostRecentMessageStored), as: UTF8.self)
                == #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
    }

    @Test func readAnswers() {
        #expect(
            info(#"{"message-storage-policy": 1, "push-type": "LiveActivity"}"#)
                == .success(.init(storagePolicy: .mostRecentMessageStored, pushType: "LiveActivity")))
        // Members APNs might add are skipped, whatever their shape; escapes in keys are resolved.
        #expect(
            info(
                #" {"extra":{"a":[1,{"b":null}]},"message\u002dstorage-policy":0,"push-type":"LiveActivity","n":-1.5e3} "#
            )
                == .success(.init(storagePolicy: .noMessageStored, pushType: "LiveActivity")))
        for bad in [
            #"{"message-storage-policy":2,"push-type":"LiveActivity"}"#,
            #"{"message-storage-policy":"1","push-type":"LiveActivity"}"#,
            #"{"message-storage-policy":1.0,"push-type":"LiveActivity"}"#, #"{"push-type":"LiveActivity"}"#,
            #"{"message-storage-policy":1}"#,
            #"{"message-storage-policy":1,"push-type":7}"#,
            #"{"message-storage-policy":99999999999999999999999,"push-type":"x"}"#,
            "", "[]", "{", #"{"message-storage-policy":1,"push-type":"LiveActivity"} x"#, "\u{0}",
            String(repeating: "[", count: 200),
        ] {
            guard case .failure(let error) = info(bad) else {
                Issue.record("accepted \(bad)")
                continue
            }
            #expect(!error.description.isEmpty)
        }
    }

    @Test func aPushTypeWithControlCharactersIsMadePrintable() throws {
        let parsed = try info(#"{"message-storage-policy":0,"push-type":"Live\u001b[2JActivity"}"#).get()
        #expect(!parsed.pushType.unicodeScalars.contains { $0.value < 0x20 })
    }

    @Test func listAnswers() {
        #expect(list("") == .success([]))
        #expect(list(" \n") == .success([]))
        #expect(list(#"{"channels":[]}"#) == .success([]))
        #expect(
            list(#"{"channels":["dHN0LTEyMzQ1Njc4OTAxMg==","a2lja29mZi8rLzEyMzQ1Ng=="],"next":null}"#)
                == .success(["dHN0LTEyMzQ1Njc4OTAxMg==", "a2lja29mZi8rLzEyMzQ1Ng=="]))
        // A JSON escape of '/' is still the same id.
        #expect(list(#"{"channels":["a2lja29mZi\/rLzEyMzQ1Ng=="]}"#) == .success(["a2lja29mZi/rLzEyMzQ1Ng=="]))
        for bad in [
            #"{"channels":[1]}"#, #"{"channels":["not base64!"]}"#, #"{"channels":"x"}"#, #"{"chans":[]}"#,
            #"{"channels":["a",]}"#,
            #"{"channels":[""]}"#, "null", #"{"channels":["\#(String(repeating: "A", count: 200))"]}"#,
        ] {
            guard case .failure(let error) = list(bad) else {
                Issue.record("accepted \(bad)")
                continue
            }
            #expect(!error.description.isEmpty)
        }
    }
}

import FanfareCore
import FanfareHTTP2

/// The header block of one push request, exactly as every stream sends it (apns-spec §2). One function,
/// used by `APNsConnection` and by the benchmarks, so what they measure is what is sent.
@_spi(Benchmarks) public enum APNsRequestHeaders {
    /// Fields that repeat on every request: after its first use each goes out as a one-byte HPACK index.
    /// Trivial values only (no array), so copying this struct costs no retain.
    public struct RepeatedFields: Sendable {
        public let authority: HPACKCachedField
        /// Nil with certificate authentication.
        public let authorization: HPACKCachedField?
        public let pushType: HPACKCachedField
        public let topic: HPACKCachedField
        public let priorityPowerSaving: HPACKCachedField
        public let priorityNormal: HPACKCachedField
        public let priorityImmediate: HPACKCachedField
        /// Broadcasts: `:path /4/broadcasts/apps/<bundle id>` and `apns-push-type: liveactivity` (the same
        /// field as `pushType` when that is `liveactivity`). Fixed per connection; a field enters the server's
        /// table on its first use, so a connection that sends no broadcast never spends table room on them.
        public let broadcastPath: HPACKCachedField
        public let broadcastPushType: HPACKCachedField
        /// Whether a broadcast's request id goes in `apns-id` rather than `apns-request-id`.
        public let broadcastIDInAPNsID: Bool

        /// Registers the fields with `register(nameIndex, name, value)` (a session's or a bare table's). The
        /// authorization value is set later, per provider token.
        public init(
            authority: String, usesProviderTokens: Bool, pushType: String, topic: String,
            broadcastBundleID: String = "", broadcastRequestIDHeader: BroadcastRequestIDHeader = .apnsRequestID,
            register: (Int?, String, String) -> HPACKCachedField
        ) {
            self.authority = register(HPACKStaticTable.authority, ":authority", authority)
            authorization = usesProviderTokens ? register(HPACKStaticTable.authorization, "authorization", "") : nil
            self.pushType = register(nil, "apns-push-type", pushType)
            self.topic = register(nil, "apns-topic", topic)
            priorityPowerSaving = register(nil, "apns-priority", "1")
            priorityNormal = register(nil, "apns-priority", "5")
            priorityImmediate = register(nil, "apns-priority", "10")
            broadcastPath = register(HPACKStaticTable.path, ":path", APNsPath.broadcast(bundleID: broadcastBundleID))
            broadcastPushType =
                pushType == "liveactivity" ? self.pushType : register(nil, "apns-push-type", "liveactivity")
            broadcastIDInAPNsID = broadcastRequestIDHeader == .apnsID
        }
    }

    static let pathPrefix: StaticString = "/3/device/"
    /// Literal without indexing, new name "apns-id", then a raw 36-byte value's length (RFC 7541 §6.2.2).
    static let apnsIDFieldPrefix: StaticString = "\u{0}\u{7}apns-id\u{24}"
    /// Literal without indexing, new name "apns-expiration" (15 bytes, sent raw); the value follows.
    static let expirationFieldPrefix: StaticString = "\u{0}\u{F}apns-expiration"
    /// Literal without indexing, new name "apns-collapse-id" (16 bytes, sent raw); the value follows.
    static let collapseIDFieldPrefix: StaticString = "\u{0}\u{10}apns-collapse-id"

    /// Literal without indexing, new name "apns-request-id" (15 bytes), then a raw 36-byte value's length.
    static let requestIDFieldPrefix: StaticString = "\u{0}\u{F}apns-request-id\u{24}"
    /// Literal without indexing, new name "apns-channel-id" (15 bytes, sent raw); the value follows.
    static let channelIDFieldPrefix: StaticString = "\u{0}\u{F}apns-channel-id"

    /// Writes `job`'s request headers (its `apnsID` must be set). Read in place: `job` is not copied.
    @inline(__always)
    public static func write(
        _ job: UnsafePointer<PushJob>, fields: RepeatedFields, table: inout HPACKEncoderTable,
        writer: inout HPACKBlockWriter
    ) {
        writer.writeIndexed(HPACKStaticTable.methodPOST)
        writer.writeIndexed(HPACKStaticTable.schemeHTTPS)
        let token: DeviceToken
        switch job.pointee.target {
        case .device(let device): token = device
        case .channel(let channel):
            writeBroadcast(job, channel: channel, fields: fields, table: &table, writer: &writer)
            return
        }
        // :path = /3/device/<lowercase hex token>, Huffman-coded straight from the token's bytes.
        token.withUnsafeBytes { token in
            writer.writeLiteralWithoutIndexing(
                nameIndex: HPACKStaticTable.path, valuePrefix: bytes(pathPrefix), hexOf: token)
        }
        table.write(fields.authority, into: &writer)
        if let authorization = fields.authorization { table.write(authorization, into: &writer) }
        table.write(fields.pushType, into: &writer)
        table.write(fields.topic, into: &writer)
        switch job.pointee.priority {
        case .powerSaving: table.write(fields.priorityPowerSaving, into: &writer)
        case .normal: table.write(fields.priorityNormal, into: &writer)
        case .immediate: table.write(fields.priorityImmediate, into: &writer)
        }
        // apns-id goes raw: Huffman would save 9 of its 36 bytes for more CPU than the rest of the block.
        assert(PushIdentifier.byteCount == 0x24, "the prefix encodes a 36-byte value")
        writer.writeRaw(bytes(apnsIDFieldPrefix))
        job.pointee.apnsID!.withUnsafeBytes { writer.writeRaw($0) }
        if let expiration = job.pointee.expiration { writeExpiration(expiration, into: &writer) }
        if var collapseID = job.pointee.collapseID {
            // APNs allows 64 bytes; one more is kept so a longer id reaches APNs as too long (400
            // BadCollapseId) instead of being cut to 64 bytes that might collapse with other pushes.
            collapseID.withUTF8 { utf8 in
                let kept = UnsafeRawBufferPointer(
                    rebasing: UnsafeRawBufferPointer(utf8)[0..<min(utf8.count, CollapseID.maximumByteCount + 1)])
                writer.writeRaw(bytes(collapseIDFieldPrefix))
                writer.writeInteger(kept.count, prefixBits: 7, firstByteFlags: 0)
                writer.writeRaw(kept)
            }
        }
    }

    /// A broadcast (apns-spec.md §8.3): the fixed path, authority, authorization, push type and priority as
    /// table indexes; `apns-channel-id`, the request id and `apns-expiration` (always, 0 when unset) as raw
    /// literals without indexing; no `apns-topic` (APNs refuses a topic here).
    static func writeBroadcast(
        _ job: UnsafePointer<PushJob>, channel: BroadcastChannelID, fields: RepeatedFields,
        table: inout HPACKEncoderTable,
        writer: inout HPACKBlockWriter
    ) {
        table.write(fields.broadcastPath, into: &writer)
        table.write(fields.authority, into: &writer)
        if let authorization = fields.authorization { table.write(authorization, into: &writer) }
        table.write(fields.broadcastPushType, into: &writer)
        // `APNsClient.submit` refuses priority 1 on a broadcast; a job that got here anyway says 10.
        table.write(job.pointee.priority == .normal ? fields.priorityNormal : fields.priorityImmediate, into: &writer)
        channel.withUnsafeBytes { id in
            writer.writeRaw(bytes(channelIDFieldPrefix))
            writer.writeInteger(id.count, prefixBits: 7, firstByteFlags: 0)
            writer.writeRaw(id)
        }
        writer.writeRaw(bytes(fields.broadcastIDInAPNsID ? apnsIDFieldPrefix : requestIDFieldPrefix))
        job.pointee.apnsID!.withUnsafeBytes { writer.writeRaw($0) }
        writeExpiration(job.pointee.expiration ?? 0, into: &writer)
    }

    @inline(__always)
    static func writeExpiration(_ expiration: Int64, into writer: inout HPACKBlockWriter) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { scratch in
            // The name is precomputed; the digits go raw (Huffman would save 2 or 3 of ~10 bytes).
            let count = writeDecimal(expiration, to: scratch.baseAddress!)
            writer.writeRaw(bytes(expirationFieldPrefix))
            writer.writeInteger(count, prefixBits: 7, firstByteFlags: 0)
            writer.writeRaw(UnsafeRawBufferPointer(rebasing: scratch[0..<count]))
        }
    }

    /// The most bytes one request's header block can take with these repeated values, whatever the push
    /// carries (a 100-byte token, a 65-byte collapse id, a 19-digit expiration, a pending table-size update).
    public static func largestBlock(
        authority: String, authorizationLength: Int, pushType: String, topic: String, broadcastBundleID: String = ""
    ) -> Int {
        func literal(_ name: String, _ valueCount: Int) -> Int {
            HPACKBlockWriter.literalBound(nameCount: name.utf8.count, valueCount: valueCount)
        }
        let tableSizeUpdates =
            2 * HPACKBlockWriter.integerLength(HPACKEncoderTable.defaultDecoderMaximum, prefixBits: 5)
        let broadcast =
            tableSizeUpdates + 2
            + literal(":path", APNsPath.broadcast(bundleID: broadcastBundleID).utf8.count)
            + literal(":authority", authority.utf8.count)
            + (authorizationLength > 0 ? literal("authorization", authorizationLength) : 0)
            + literal("apns-push-type", 12)
            + literal("apns-priority", 2)
            + literal("apns-channel-id", BroadcastChannelID.maximumByteCount)
            + requestIDFieldPrefix.utf8CodeUnitCount + PushIdentifier.byteCount
            + literal("apns-expiration", 19)
        let device =
            tableSizeUpdates + 2  // :method, :scheme
            + literal(":path", pathPrefix.utf8CodeUnitCount + 2 * DeviceToken.maximumByteCount)
            + literal(":authority", authority.utf8.count)
            + (authorizationLength > 0 ? literal("authorization", authorizationLength) : 0)
            + literal("apns-push-type", pushType.utf8.count)
            + literal("apns-topic", topic.utf8.count)
            + literal("apns-priority", 2)
            + apnsIDFieldPrefix.utf8CodeUnitCount + PushIdentifier.byteCount
            + literal("apns-expiration", 19)
            + literal("apns-collapse-id", CollapseID.maximumByteCount + 1)
        return max(device, broadcast)
    }

    /// Writes `value` (negative values as 0) in decimal; returns the digit count (at most 19).
    public static func writeDecimal(_ value: Int64, to destination: UnsafeMutableRawPointer) -> Int {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of scratch, reversed digits
        var remaining = UInt64(max(0, value))
        var count = 0
        withUnsafeMutableBytes(of: &digits) { scratch in
            repeat {
                scratch[count] = UInt8(48 + remaining % 10)
                remaining /= 10
                count += 1
            } while remaining > 0
            for index in 0..<count {
                destination.storeBytes(of: scratch[count - 1 - index], toByteOffset: index, as: UInt8.self)
            }
        }
        return count
    }

    @inline(__always)
    static func bytes(_ string: StaticString) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: string.utf8Start, count: string.utf8CodeUnitCount)
    }
}

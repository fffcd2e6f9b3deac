import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS

/// One client connection: its authentication, its stream limit, GOAWAY. Lives on the connection's
/// event loop; it is also the last handler of the connection pipeline (HTTP/2 frames of stream 0 in,
/// SETTINGS and GOAWAY out).
final class HTTP2Connection: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    let core: HTTP2Core
    let id: Int
    private let advertiser: SettingsAdvertiser
    private var context: ChannelHandlerContext?
    private let validator = APNsRequestValidator()

    /// The stream limit this connection enforces itself (REFUSED_STREAM beyond it); NIO's own limit is
    /// set above it because NIO treats an excess stream as a connection error.
    private(set) var allowedStreams = 1
    private var activeStreams = 0
    private var highestStreamID = 0
    private var goAwayLastStreamID: Int?
    private var closing = false

    private enum CertificateState { case unknown, none, topic(String), unreadable }
    private var certificate = CertificateState.unknown

    private struct CurrentToken {
        var jwt: Substring
        var teamID: String
        var keyID: String
        var issuedAt: Int64
        var adoptedAt: ContinuousClock.Instant
    }
    private var token: CurrentToken?
    private var random: SplitMix64
    private var lineScratch: [UInt8] = []

    /// NIO enforces this many; we advertise and enforce `allowedStreams`. The margin lets a client that
    /// overshoots by a few streams get REFUSED_STREAM (Apple's answer) instead of NIO's PROTOCOL_ERROR.
    static let streamMargin = 100

    init(core: HTTP2Core, advertiser: SettingsAdvertiser) {
        self.core = core
        self.advertiser = advertiser
        id = core.nextConnectionNumber()
        random = SplitMix64(seed: core.faults.seed &+ UInt64(id) &* 0x9E37_79B9)
    }

    /// TLS is in place: adds the HTTP/2 handler (its multiplexer gives each stream a `RequestHandler`)
    /// and this connection's own handlers.
    static func configure(channel: any Channel, core: HTTP2Core) throws {
        let advertiser = SettingsAdvertiser()
        let connection = HTTP2Connection(core: core, advertiser: advertiser)
        var settings = NIOHTTP2Handler.ConnectionConfiguration()
        settings.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: core.configuration.maxConcurrentStreams + streamMargin),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16384),
        ]
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(advertiser)
        let loopBound = NIOLoopBound(connection, eventLoop: channel.eventLoop)
        _ = try sync.configureHTTP2Pipeline(
            mode: .server, connectionConfiguration: settings, streamConfiguration: .init()
        ) { stream in
            stream.eventLoop.makeCompletedFuture {
                let connection = loopBound.value
                let streamID = Int(try stream.syncOptions!.getOption(HTTP2StreamChannelOptions.streamID))
                if connection.admit(streamID: streamID) {
                    try stream.pipeline.syncOperations.addHandler(RequestHandler(connection: connection, streamID: streamID))
                } else {
                    try stream.pipeline.syncOperations.addHandler(RefuseStreamHandler())
                }
            }
        }
        try sync.addHandler(connection)
        core.register(connection.id, channel: channel, connection: connection)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}  // stream-0 frames: NIO has handled them

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            core.count { $0.connections += 1 }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOSSLError || error is BoringSSLError {
            core.count { $0.handshakeFailures += 1 }
            context.close(promise: nil)
            return
        }
        // HTTP/2 protocol errors: NIO has already sent GOAWAY or RST_STREAM as the RFC asks; a
        // connection-level one closes the connection. Nothing here may bring the process down.
        core.logger.debug("HTTP/2 connection error", metadata: ["connection": "\(id)", "error": "\(error)"])
    }

    func channelInactive(context: ChannelHandlerContext) {
        core.unregister(id)
        context.fireChannelInactive()
    }

    // MARK: streams

    /// A new stream: admitted while fewer than `allowedStreams` are open and no GOAWAY excludes it.
    func admit(streamID: Int) -> Bool {
        highestStreamID = max(highestStreamID, streamID)
        if let last = goAwayLastStreamID, streamID > last {
            core.count { $0.refusedStreams += 1 }
            return false
        }
        guard activeStreams < allowedStreams else {
            core.count { $0.refusedStreams += 1 }
            return false
        }
        activeStreams += 1
        return true
    }

    /// An admitted stream has closed (answered, reset, or the connection went away).
    func streamEnded() {
        activeStreams -= 1
        if goAwayLastStreamID != nil, activeStreams == 0 { closeNow() }
    }

    // MARK: connection behaviour

    /// After the first request with valid auth: SETTINGS_MAX_CONCURRENT_STREAMS goes from 1 to the
    /// configured limit.
    private func raiseStreamLimit() {
        guard allowedStreams == 1, core.configuration.maxConcurrentStreams != 1, let context else { return }
        allowedStreams = core.configuration.maxConcurrentStreams
        advertiser.advertised = UInt32(allowedStreams)
        let frame = HTTP2Frame(
            streamID: .rootStream,
            payload: .settings(.settings([
                HTTP2Setting(parameter: .maxConcurrentStreams, value: allowedStreams + Self.streamMargin)
            ])))
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }

    /// GOAWAY `{"reason":"Shutdown"}` naming the highest stream this connection has seen: every stream
    /// up to it is answered, none above it is processed; the connection closes when the last is answered.
    func goAway() {
        guard goAwayLastStreamID == nil, !closing, let context else { return }
        goAwayLastStreamID = highestStreamID
        core.count { $0.goAways += 1 }
        var data = context.channel.allocator.buffer(capacity: core.shutdownBody.count)
        data.writeBytes(core.shutdownBody)
        let frame = HTTP2Frame(
            streamID: .rootStream,
            payload: .goAway(lastStreamID: HTTP2StreamID(highestStreamID), errorCode: .noError, opaqueData: data))
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        if activeStreams == 0 { closeNow() }
    }

    /// Abrupt close: no GOAWAY, no pending response.
    func drop() {
        core.count { $0.abruptCloses += 1 }
        closing = true
        context?.channel.close(mode: .all, promise: nil)
    }

    private func closeNow() {
        guard !closing, let context else { return }
        closing = true
        // Flush first so the last responses and the GOAWAY leave before the close.
        context.channel.flush()
        context.channel.close(promise: nil)
    }

    // MARK: requests

    enum Outcome {
        case accept(apnsID: String, after: AfterAccept)
        case reject(APNsReason, apnsID: String, timestamp: Int64?)
        /// A stream above the GOAWAY's last stream id: RST_STREAM REFUSED_STREAM, nothing recorded.
        case refuse
    }

    enum AfterAccept { case none, goAway, drop }

    /// Apple's contract, then authentication, then the fault script; records what it accepts.
    func process(headers: HPACKHeaders, payload: [UInt8], streamID: Int) -> Outcome {
        if let last = goAwayLastStreamID, streamID > last { return .refuse }
        let certTopic = certificateTopic()
        if case .unreadable = certificate { return reject(.badCertificate, nil) }
        let regular = headers.lazy.filter { !$0.name.hasPrefix(":") }.map { ($0.name, $0.value) }
        let request: APNsRequest
        switch validator.validate(
            method: headers.first(name: ":method"), path: headers.first(name: ":path"), headers: regular,
            payload: payload, requireTopic: certTopic == nil)
        {
        case .failure(let rejection):
            let sentID = headers.first(name: APNsHeader.id).flatMap { APNsRequestValidator.isCanonicalUUID($0) ? $0 : nil }
            return reject(rejection.reason, sentID)
        case .success(let r): request = r
        }
        let apnsID = request.apnsID ?? makeUUID()
        let bundle = request.topic.flatMap { request.effectivePushType.bundleID(fromTopic: $0) }

        // Authentication.
        let app: String
        let auth: String
        if let certTopic {
            // mdm topics are not the bundle id; everything else must be the certificate's app.
            if let bundle, bundle != certTopic, request.pushType != .mdm { return reject(.topicDisallowed, apnsID) }
            app = certTopic
            auth = "cert:" + certTopic
        } else {
            guard let authorization = request.authorization else { return reject(.missingProviderToken, apnsID) }
            switch checkToken(authorization) {
            case .failure(let reason): return reject(reason, apnsID)
            case .success(let t): auth = "token:\(t.teamID)/\(t.keyID)"
            }
            app = bundle ?? request.topic ?? ""
        }
        raiseStreamLimit()

        // The fault script.
        let token = request.token
        if core.invalidTokens.contains(token) { return reject(.badDeviceToken, apnsID) }
        if let owner = core.tokenTopics[token], owner != app { return reject(.deviceTokenNotForTopic, apnsID) }
        if let stamp = core.unregistered[token] { return reject(.unregistered, apnsID, timestamp: stamp) }
        if core.expiredTokens.contains(token) { return reject(.expiredToken, apnsID) }
        let nowMillis = Int64(Date().timeIntervalSince1970 * 1000)
        if core.overTokenRate(token, nowMillis: nowMillis) || core.draw(core.faults.tooManyRequestsRate) {
            return reject(.tooManyRequests, apnsID)
        }
        if core.draw(core.faults.internalServerErrorRate) { return reject(.internalServerError, apnsID) }
        if core.draw(core.faults.serviceUnavailableRate) { return reject(.serviceUnavailable, apnsID) }

        // Accepted.
        if core.recorder.isEnabled {
            let record = HTTP2Record(
                time: nowMillis, connection: id, stream: streamID, app: app, token: token.hex,
                payloadHash: PayloadFacts.hash(payload), jobID: PayloadFacts.jobID(in: payload), apnsID: apnsID,
                collapseID: request.collapseID, pushType: request.pushType?.rawValue, priority: request.priority?.rawValue,
                expiration: request.expiration, auth: auth)
            lineScratch.removeAll(keepingCapacity: true)
            record.appendLine(to: &lineScratch)
            core.recorder.append(lines: lineScratch, records: [record])
        }
        core.count { $0.byStatus[200, default: 0] += 1 }
        let n = core.nextAccepted()
        var after = AfterAccept.none
        if let every = core.faults.dropEvery, n % every == 0 {
            after = .drop
        } else if let every = core.faults.shutdownEvery, n % every == 0 {
            after = .goAway
        }
        return .accept(apnsID: apnsID, after: after)
    }

    private func reject(_ reason: APNsReason, _ apnsID: String?, timestamp: Int64? = nil) -> Outcome {
        core.count {
            $0.byStatus[reason.status, default: 0] += 1
            $0.byReason[reason.rawValue, default: 0] += 1
        }
        return .reject(reason, apnsID: apnsID ?? makeUUID(), timestamp: timestamp)
    }

    /// The app topic of the client certificate, read once per connection (nil: no certificate, token auth).
    private func certificateTopic() -> String? {
        switch certificate {
        case .topic(let t): return t
        case .none, .unreadable: return nil
        case .unknown:
            let peer = try? context?.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
            if let peer {
                if let topic = (try? peer.toDERBytes()).flatMap({ CertificateTopic.topic(fromDER: $0) }) {
                    certificate = .topic(topic)
                    return topic
                }
                certificate = .unreadable
                return nil
            }
            certificate = .none
            return nil
        }
    }

    /// `authorization: bearer <JWT>`. The verified token is kept per connection, so the signature is
    /// checked once per token, not per request; its age is checked every time.
    private func checkToken(_ header: String) -> Result<(teamID: String, keyID: String), APNsReason> {
        let scheme = header.prefix(7)
        guard scheme == "bearer " || scheme == "Bearer " else { return .failure(.invalidProviderToken) }
        let jwt = header.dropFirst(7)
        let now = Int64(Date().timeIntervalSince1970)
        if let current = token, current.jwt == jwt {
            if now - current.issuedAt > core.verifier.maxAge { return .failure(.expiredProviderToken) }
            return .success((current.teamID, current.keyID))
        }
        switch core.verifier.verify(jwt, now: now) {
        case .malformed, .unknownKey, .badSignature: return .failure(.invalidProviderToken)
        case .expired: return .failure(.expiredProviderToken)
        case .valid(let keyID, let teamID, let issuedAt):
            let clock = ContinuousClock.now
            if let current = token {
                // "The key ID in the provider token isn't related to the key ID of the token used in the
                // first push of this connection": another team's key on the same connection.
                if current.teamID != teamID { return .failure(.unrelatedKeyIdInToken) }
                // Same key and iat: the same token signed again (ES256 signatures are randomised), not
                // an update.
                if current.keyID == keyID, current.issuedAt == issuedAt {
                    token?.jwt = jwt
                    return .success((teamID, keyID))
                }
                let interval = core.configuration.tokenRefreshIntervalSeconds
                if clock - current.adoptedAt < .nanoseconds(Int64(interval * 1e9)) {
                    return .failure(.tooManyProviderTokenUpdates)
                }
            }
            token = CurrentToken(jwt: jwt, teamID: teamID, keyID: keyID, issuedAt: issuedAt, adoptedAt: clock)
            return .success((teamID, keyID))
        }
    }

    /// A random (version 4) UUID from the connection's seeded generator, uppercase as Apple's.
    private func makeUUID() -> String {
        let a = random.next()
        let b = random.next()
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            bytes[i] = UInt8(truncatingIfNeeded: a >> (8 * UInt64(i)))
            bytes[8 + i] = UInt8(truncatingIfNeeded: b >> (8 * UInt64(i)))
        }
        bytes[6] = bytes[6] & 0x0F | 0x40
        bytes[8] = bytes[8] & 0x3F | 0x80
        let digits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(36)
        for (i, byte) in bytes.enumerated() {
            if i == 4 || i == 6 || i == 8 || i == 10 { out.append(UInt8(ascii: "-")) }
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Rewrites SETTINGS_MAX_CONCURRENT_STREAMS in the SETTINGS frames NIO writes to the value this
/// connection advertises (1 until the first authenticated request, then the configured limit), while
/// NIO itself enforces a higher one; see `HTTP2Connection.streamMargin`. Sits between TLS and the
/// HTTP/2 handler and follows frame boundaries through the outbound byte stream.
final class SettingsAdvertiser: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    var advertised: UInt32 = 1
    /// Bytes of the current frame's payload still to pass.
    private var skip = 0
    /// A frame header split across writes (NIO does not do that today; followed anyway).
    private var partialHeader: [UInt8] = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var buffer = unwrapOutboundIn(data)
        var i = buffer.readerIndex
        let end = buffer.writerIndex
        while i < end {
            if skip > 0 {
                let n = min(skip, end - i)
                skip -= n
                i += n
                continue
            }
            var header: [UInt8]
            if !partialHeader.isEmpty || end - i < 9 {
                let n = min(9 - partialHeader.count, end - i)
                partialHeader += buffer.getBytes(at: i, length: n) ?? []
                i += n
                guard partialHeader.count == 9 else { break }
                header = partialHeader
                partialHeader = []
            } else {
                header = buffer.getBytes(at: i, length: 9) ?? []
                i += 9
            }
            let length = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
            let isSettings = header[3] == 0x4 && header[4] & 0x1 == 0
            // NIO writes a SETTINGS frame's header and payload in one buffer, so the payload is here.
            if isSettings, end - i >= length {
                var p = i
                while p + 6 <= i + length {
                    if buffer.getInteger(at: p, as: UInt16.self) == 0x3 {
                        buffer.setInteger(advertised, at: p + 2)
                    }
                    p += 6
                }
            }
            skip = length
        }
        context.write(wrapOutboundOut(buffer), promise: promise)
    }
}

/// A stream beyond the limit: RST_STREAM REFUSED_STREAM ("the stream was not processed"), so the client
/// may retry it.
final class RefuseStreamHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private var refused = false

    func channelActive(context: ChannelHandlerContext) {
        refuse(context: context)
        context.fireChannelActive()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { refuse(context: context) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    private func refuse(context: ChannelHandlerContext) {
        guard !refused else { return }
        refused = true
        context.writeAndFlush(wrapOutboundOut(.rstStream(.refusedStream)), promise: nil)
    }
}

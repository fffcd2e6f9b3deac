import APNsProtocol
import APNsTransport
import Foundation
import GatewaySimulator
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS

/// One client connection, at the frame level: `NIOHTTP2Handler` runs without a stream multiplexer
/// and hands this handler the frames of every stream. It assembles each request from its HEADERS and
/// DATA, answers it on the connection channel, and flushes once per read burst. (A multiplexer gives
/// each stream a Channel and a pipeline of its own, which cost more than everything else the simulator
/// does per request: docs/benchmarks.md §4.) It also owns the connection's authentication, its stream
/// limit and GOAWAY. Lives on the connection's event loop.
final class HTTP2Connection: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    let core: HTTP2Core
    let id: Int
    private let advertiser: SettingsAdvertiser
    private var context: ChannelHandlerContext?
    private let validator = APNsRequestValidator()

    /// The stream limit this connection enforces itself (REFUSED_STREAM beyond it); NIO's own limit is
    /// set above it because NIO treats an excess stream as a connection error.
    private(set) var allowedStreams: Int
    private var streamLimitRaised = false
    private var highestStreamID: HTTP2StreamID = .rootStream
    private var goAwayLastStreamID: Int?
    private var closing = false

    /// A request being read: its header block and its body (bounded).
    private struct RequestStream {
        var headers: HPACKHeaders
        var payload: [UInt8] = []
        var answered = false
        /// Body bytes read since this stream's flow-control window was last topped up.
        var unacknowledged = 0
    }
    /// The admitted streams, until NIO reports each closed (`StreamClosedEvent`: answered, reset by
    /// either side, or the connection gone). Their number is what the stream limit counts.
    private var streams: [HTTP2StreamID: RequestStream] = [:]

    /// Without a multiplexer NIO leaves inbound flow control to this handler: the connection window is
    /// opened wide at the first frame and topped up with what was read; a stream's window is topped up
    /// only for a body larger than one window (answered 413 once it ends).
    private var windowOpened = false
    private var connectionUnacknowledged = 0
    static let initialConnectionWindow = 1 << 30
    static let connectionWindowTopUp = 1 << 20
    static let streamWindowTopUp = 1 << 15
    /// HTTP/2's initial window, for the connection and (unless SETTINGS change it) each stream.
    static let defaultWindow = 65535

    /// Something was written since the last flush (flushed at the end of the read burst).
    private var needsFlush = false
    /// Records of this read burst, handed to the writer in one batch before the answers leave.
    var pendingLines: [UInt8] = []
    var pendingRecords: [HTTP2Record] = []

    /// More than any push type may carry (5120 for voip): a longer body is answered 413 from the
    /// bytes kept, and the rest is read and dropped, so a huge body costs no memory.
    static let bodyLimit = APNsPushType.voip.maxPayloadBytes + 1

    private enum CertificateState {
        case unknown, none
        case topic(String, auth: String)
        case unreadable
    }
    private var certificate = CertificateState.unknown

    private struct CurrentToken {
        var jwt: Substring
        var teamID: String
        var keyID: String
        /// `token:<team>/<key id>`, made once per token rather than once per record.
        var auth: String
        var issuedAt: Int64
        var adoptedAt: ContinuousClock.Instant
    }
    private var token: CurrentToken?
    var random: SplitMix64

    /// NIO enforces this many; we advertise and enforce `allowedStreams`. The margin lets a client that
    /// overshoots by a few streams get REFUSED_STREAM (Apple's answer) instead of NIO's PROTOCOL_ERROR.
    static let streamMargin = 100

    init(core: HTTP2Core, advertiser: SettingsAdvertiser) {
        self.core = core
        self.advertiser = advertiser
        id = core.nextConnectionNumber()
        allowedStreams = core.configuration.initialMaxConcurrentStreams
        advertiser.advertised = UInt32(allowedStreams)
        random = SplitMix64(seed: core.faults.seed &+ UInt64(id) &* 0x9E37_79B9)
    }

    /// TLS is in place: adds the HTTP/2 handler (frame level, no multiplexer) and this connection.
    static func configure(channel: any Channel, core: HTTP2Core) throws {
        let advertiser = SettingsAdvertiser()
        let connection = HTTP2Connection(core: core, advertiser: advertiser)
        advertiser.connection = connection
        var settings = NIOHTTP2Handler.ConnectionConfiguration()
        // Checked by `RequestHeaderBlock` in the pass that reads the request (our answers are well formed).
        settings.headerBlockValidation = .disabled
        settings.initialSettings = [
            HTTP2Setting(
                parameter: .maxConcurrentStreams,
                value: max(core.configuration.initialMaxConcurrentStreams, core.configuration.maxConcurrentStreams) + streamMargin),
            HTTP2Setting(parameter: .maxHeaderListSize, value: 16384),
        ]
        if let window = core.faults.flowControlWindow {
            settings.initialSettings.append(HTTP2Setting(parameter: .initialWindowSize, value: window))
        }
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(advertiser)
        try sync.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: settings, streamConfiguration: .init()))
        try sync.addHandler(connection)
        core.register(connection.id, channel: channel, connection: connection)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent {
            if streams.removeValue(forKey: closed.streamID) != nil { streamEnded() }
            return
        }
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
        // HTTP/2 protocol errors: NIO has already sent GOAWAY or RST_STREAM as the RFC asks (a reset
        // stream's end comes as StreamClosedEvent); a connection-level one closes the connection.
        // Nothing here may bring the process down.
        core.logger.debug("HTTP/2 connection error", metadata: ["connection": "\(id)", "error": "\(error)"])
    }

    func channelInactive(context: ChannelHandlerContext) {
        commitRecords()
        core.unregister(id)
        context.fireChannelInactive()
    }

    // MARK: frames

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if !windowOpened {
            // NIO passes frames up only after the client's preface: the connection is established.
            windowOpened = true
            // With tight flow control (a fault), the connection window stays at HTTP/2's default.
            if core.faults.flowControlWindow == nil {
                write(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: Self.initialConnectionWindow)), context)
            }
        }
        switch frame.payload {
        case .headers(let h): receivedHeaders(h, stream: frame.streamID, context: context)
        case .data(let d): receivedData(d, stream: frame.streamID, context: context)
        default: break  // SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY: NIO has acted on them.
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        let topUp = core.faults.flowControlWindow == nil ? Self.connectionWindowTopUp : Self.defaultWindow / 2
        if connectionUnacknowledged >= topUp {
            write(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: connectionUnacknowledged)), context)
            connectionUnacknowledged = 0
        }
        if needsFlush { flush(context) }
        context.fireChannelReadComplete()
    }

    private func receivedHeaders(_ h: HTTP2Frame.FramePayload.Headers, stream id: HTTP2StreamID, context: ChannelHandlerContext) {
        if id > highestStreamID {
            // A new stream (a client's stream ids only grow).
            highestStreamID = id
            guard admit(streamID: Int(id)) else {
                write(HTTP2Frame(streamID: id, payload: .rstStream(.refusedStream)), context)
                return
            }
            streams[id] = RequestStream(headers: h.headers)
            if h.endStream { finish(id, context: context) }
        } else if h.endStream, let index = streams.index(forKey: id), !streams.values[index].answered {
            // Trailers, which APNs does not use, ending the request.
            finish(id, context: context)
        }
    }

    private func receivedData(_ d: HTTP2Frame.FramePayload.Data, stream id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard case .byteBuffer(let bytes) = d.data else { return }
        // What the frame took from the windows: its data, its padding and the pad-length byte.
        let length = bytes.readableBytes + (d.paddingBytes.map { $0 + 1 } ?? 0)
        connectionUnacknowledged += length
        guard let index = streams.index(forKey: id), !streams.values[index].answered else { return }
        let kept = streams.values[index].payload.count
        if kept < Self.bodyLimit {
            let take = min(bytes.readableBytes, Self.bodyLimit - kept)
            streams.values[index].payload.append(contentsOf: bytes.readableBytesView.prefix(take))
        }
        if d.endStream {
            finish(id, context: context)
            return
        }
        streams.values[index].unacknowledged += length
        let unacknowledged = streams.values[index].unacknowledged
        // Tight flow control (a fault) returns every DATA frame at once: the client waits on it, not stalls.
        if unacknowledged >= (core.faults.flowControlWindow == nil ? Self.streamWindowTopUp : 1) {
            streams.values[index].unacknowledged = 0
            write(HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: unacknowledged)), context)
        }
    }

    /// The request on `id` is complete: process it and answer (after the scripted delay, if any).
    private func finish(_ id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let index = streams.index(forKey: id) else { return }
        streams.values[index].answered = true
        let headers = streams.values[index].headers
        let payload = streams.values[index].payload
        streams.values[index].payload = []
        // From here on `streams` may change under us: writing an answer closes its stream.
        let outcome = process(headers: headers, payload: payload, streamID: Int(id))
        let faults = core.faults
        let delay = faults.responseDelayMillis + core.drawMillis(upTo: faults.responseDelayMaxMillis)
        if delay > 0 {
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .milliseconds(Int64(delay))) {
                let (connection, context) = loopBound.value
                connection.answer(outcome, stream: id, context: context)
                if connection.needsFlush { connection.flush(context) }
            }
        } else {
            answer(outcome, stream: id, context: context)
        }
    }

    private func answer(_ outcome: Outcome, stream id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard !closing else { return }
        switch outcome {
        case .refuse:
            write(HTTP2Frame(streamID: id, payload: .rstStream(.refusedStream)), context)
        case .reset:
            write(HTTP2Frame(streamID: id, payload: .rstStream(.internalError)), context)
        case .noAnswer:
            break
        case .malformed:
            write(HTTP2Frame(streamID: id, payload: .rstStream(.protocolError)), context)
        case .channel(let status, let headers, let body):
            var head = HPACKHeaders([(":status", String(status))])
            for (name, value) in headers { head.add(name: name, value: value) }
            if !body.isEmpty {
                head.add(name: "content-type", value: "application/json")
                head.add(name: "content-length", value: String(body.count))
            }
            write(HTTP2Frame(streamID: id, payload: .headers(.init(headers: head, endStream: body.isEmpty))), context)
            if !body.isEmpty {
                var buffer = context.channel.allocator.buffer(capacity: body.count)
                buffer.writeBytes(body)
                write(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(buffer), endStream: true))), context)
            }
        case .accept(let apnsID, let after):
            if after == .drop {
                drop()
                return
            }
            // A fresh apns-id each time: not indexed, so HPACK neither searches nor churns its table for it.
            var head = HPACKHeaders()
            head.add(name: ":status", value: "200")
            head.add(name: APNsHeader.id, value: apnsID, indexing: .nonIndexable)
            if core.configuration.sandbox { head.add(name: APNsHeader.uniqueID, value: makeUUID(), indexing: .nonIndexable) }
            write(HTTP2Frame(streamID: id, payload: .headers(.init(headers: head, endStream: true))), context)
            if after == .goAway { goAway() }
        case .reject(let reason, let apnsID, let timestamp):
            writeRefusal(status: reason.status, body: APNsErrorBody(reason: reason, timestamp: timestamp), apnsID: apnsID, id, context)
        case .rejectUnlisted(let text, let apnsID):
            writeRefusal(status: 400, body: APNsErrorBody(reasonText: text), apnsID: apnsID, id, context)
        }
    }

    private func writeRefusal(status: Int, body: APNsErrorBody, apnsID: String, _ id: HTTP2StreamID, _ context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: 64)
        body.encode(into: &buffer)
        var head = HPACKHeaders([
            (":status", String(status)), (APNsHeader.id, apnsID), ("content-type", "application/json"),
            ("content-length", String(buffer.readableBytes)),
        ])
        if core.configuration.sandbox { head.add(name: APNsHeader.uniqueID, value: makeUUID()) }
        write(HTTP2Frame(streamID: id, payload: .headers(.init(headers: head, endStream: false))), context)
        write(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(buffer), endStream: true))), context)
    }

    private func write(_ frame: HTTP2Frame, _ context: ChannelHandlerContext) {
        needsFlush = true
        context.write(wrapOutboundOut(frame), promise: nil)
    }

    /// (The records of the burst are committed on the way out: `SettingsAdvertiser.flush`.)
    private func flush(_ context: ChannelHandlerContext) {
        needsFlush = false
        context.flush()
    }

    func commitRecords() {
        guard !pendingLines.isEmpty || !pendingRecords.isEmpty else { return }
        core.recorder.append(lines: pendingLines, records: pendingRecords)
        pendingLines.removeAll(keepingCapacity: true)
        pendingRecords.removeAll(keepingCapacity: true)
    }

    // MARK: streams

    /// A new stream: admitted while fewer than `allowedStreams` are open and no GOAWAY excludes it.
    func admit(streamID: Int) -> Bool {
        if let last = goAwayLastStreamID, streamID > last {
            core.count { $0.refusedStreams += 1 }
            return false
        }
        guard streams.count < allowedStreams else {
            core.count { $0.refusedStreams += 1 }
            return false
        }
        return true
    }

    /// An admitted stream has closed (answered, reset, or the connection went away).
    private func streamEnded() {
        if goAwayLastStreamID != nil, streams.isEmpty { closeNow() }
    }

    // MARK: connection behaviour

    /// After the first request with valid auth: SETTINGS_MAX_CONCURRENT_STREAMS goes from the initial
    /// limit (Apple's 1) to the configured one.
    func raiseStreamLimit() {
        guard !streamLimitRaised, let context else { return }
        streamLimitRaised = true
        guard core.configuration.maxConcurrentStreams != allowedStreams else { return }
        allowedStreams = core.configuration.maxConcurrentStreams
        advertiser.advertised = UInt32(allowedStreams)
        let frame = HTTP2Frame(
            streamID: .rootStream,
            payload: .settings(
                .settings([
                    HTTP2Setting(parameter: .maxConcurrentStreams, value: allowedStreams + Self.streamMargin)
                ])))
        write(frame, context)
    }

    /// GOAWAY `{"reason":"Shutdown"}` naming the highest stream this connection has seen: every stream
    /// up to it is answered, none above it is processed; the connection closes when the last is answered.
    func goAway() {
        guard goAwayLastStreamID == nil, !closing, let context else { return }
        goAwayLastStreamID = Int(highestStreamID)
        core.count { $0.goAways += 1 }
        var data = context.channel.allocator.buffer(capacity: core.shutdownBody.count)
        data.writeBytes(core.shutdownBody)
        let frame = HTTP2Frame(
            streamID: .rootStream, payload: .goAway(lastStreamID: highestStreamID, errorCode: .noError, opaqueData: data))
        write(frame, context)
        flush(context)
        if streams.isEmpty { closeNow() }
    }

    /// Abrupt close: no GOAWAY, no pending response (what was accepted is recorded).
    func drop() {
        commitRecords()
        core.count { $0.abruptCloses += 1 }
        closing = true
        context?.channel.close(mode: .all, promise: nil)
    }

    private func closeNow() {
        guard !closing, let context else { return }
        closing = true
        // Flush first so the last responses and the GOAWAY leave before the close.
        flush(context)
        context.channel.close(promise: nil)
    }

    // MARK: requests

    enum Outcome {
        case accept(apnsID: String, after: AfterAccept)
        case reject(APNsReason, apnsID: String, timestamp: Int64?)
        /// 400 with a `reason` Apple does not document.
        case rejectUnlisted(String, apnsID: String)
        /// A stream above the GOAWAY's last stream id: RST_STREAM REFUSED_STREAM, nothing recorded.
        case refuse
        /// A malformed header block (RFC 9113 § 8.1.1): RST_STREAM PROTOCOL_ERROR, nothing recorded.
        case malformed
        /// `reset_stream_rate`: RST_STREAM INTERNAL_ERROR, nothing recorded.
        case reset
        /// `never_answer_tokens`: no answer at all, nothing recorded.
        case noAnswer
        /// A channel management answer (`ChannelManagement.swift`): status, headers, body (may be empty).
        case channel(status: Int, headers: [(String, String)], body: [UInt8])
    }

    enum AfterAccept { case none, goAway, drop }

    /// Apple's contract, then authentication, then the fault script; records what it accepts.
    func process(headers: HPACKHeaders, payload: [UInt8], streamID: Int) -> Outcome {
        if let last = goAwayLastStreamID, streamID > last { return .refuse }
        guard let block = RequestHeaderBlock(headers) else { return .malformed }
        let certTopic = certificateTopic()
        if case .unreadable = certificate { return reject(.badCertificate, nil) }
        let regular = block.fields
        // Channel management (`/1/apps/…`, Apple's api-manage-broadcast hosts) is served on this same
        // endpoint: the simulator stands for both kinds of host.
        if let path = block.path, let resource = APNsChannelManagement.resource(path: path[...]) {
            return channelRequest(resource, method: block.method ?? "", fields: regular, body: payload, certificateTopic: certTopic)
        }
        // Broadcast (`/4/broadcasts/apps/<bundle id>`, `Broadcast.swift`): on the provider API's hosts.
        if let path = block.path, let bundle = APNsBroadcast.bundleID(path: path[...]) {
            return broadcastRequest(
                bundleID: String(bundle), method: block.method ?? "", fields: regular, payload: payload, streamID: streamID,
                certificateTopic: certTopic)
        }
        let request: APNsRequest
        switch validator.validate(
            method: block.method, path: block.path, headers: regular, payload: payload, requireTopic: certTopic == nil)
        {
        case .failure(let rejection):
            let sentID = regular.first { $0.0 == APNsHeader.id }.flatMap { APNsRequestValidator.isCanonicalUUID($0.1) ? $0.1 : nil }
            return reject(rejection.reason, sentID)
        case .success(let r): request = r
        }
        let apnsID = request.apnsID ?? makeUUID()
        let nowMillis = Int64(Date().timeIntervalSince1970 * 1000)
        let app: String
        let auth: String
        switch authenticate(request, certificateTopic: certTopic, apnsID: apnsID, nowMillis: nowMillis) {
        case .app(let a, let how):
            app = a
            auth = how
        case .refused(let outcome):
            return outcome
        }
        raiseStreamLimit()
        if let fault = scriptedFault(token: request.token, app: app, apnsID: apnsID, nowMillis: nowMillis) { return fault }
        return accept(
            request, app: app, auth: auth, apnsID: apnsID, payload: payload, streamID: streamID, nowMillis: nowMillis)
    }

    /// Who a request is from, or the answer that refuses it.
    private enum Authenticated {
        case app(String, auth: String)
        case refused(Outcome)
    }

    /// A certificate connection sends for the certificate's app only; a token connection for the
    /// topic's app, with a provider token `checkToken` accepts.
    private func authenticate(
        _ request: APNsRequest, certificateTopic certTopic: (topic: String, auth: String)?, apnsID: String, nowMillis: Int64
    ) -> Authenticated {
        let bundle = request.topic.flatMap { request.effectivePushType.bundleID(fromTopic: $0) }
        if let certTopic {
            // mdm topics are not the bundle id; everything else must be the certificate's app.
            if let bundle, bundle != certTopic.topic, request.pushType != .mdm { return .refused(reject(.topicDisallowed, apnsID)) }
            // Live Activity and location pushes need token auth (`APNsPushType.requiresTokenAuthentication`:
            // "The location push type supports only token-based authentication"): a certificate's topics
            // never include their topics, so the simulator answers as for a topic the certificate does
            // not cover.
            if request.effectivePushType.requiresTokenAuthentication { return .refused(reject(.topicDisallowed, apnsID)) }
            return .app(certTopic.topic, auth: certTopic.auth)
        }
        guard let authorization = request.authorization else { return .refused(reject(.missingProviderToken, apnsID)) }
        switch checkToken(authorization, now: nowMillis / 1000) {
        case .failure(let reason): return .refused(reject(reason, apnsID))
        case .success(let auth): return .app(bundle ?? request.topic ?? "", auth: auth)
        }
    }

    /// The fault script's answer for an authenticated request (nil: none, accept it): the token's
    /// scripted state first, then the configured rates.
    private func scriptedFault(token: DeviceToken, app: String, apnsID: String, nowMillis: Int64) -> Outcome? {
        if core.invalidTokens.contains(token) { return reject(.badDeviceToken, apnsID) }
        if let owner = core.tokenTopics[token], owner != app { return reject(.deviceTokenNotForTopic, apnsID) }
        if let stamp = core.unregistered[token] { return reject(.unregistered, apnsID, timestamp: stamp) }
        if core.expiredTokens.contains(token) { return reject(.expiredToken, apnsID) }
        if let text = core.unlistedReasons[token] {
            core.count { $0.byStatus[400, default: 0] += 1 }
            return .rejectUnlisted(text, apnsID: apnsID)
        }
        if core.overTokenRate(token, nowMillis: nowMillis) || (core.ratesApplyNow() && core.draw(core.faults.tooManyRequestsRate)) {
            return reject(.tooManyRequests, apnsID)
        }
        if core.neverAnswerTokens.contains(token) {
            core.count { $0.unansweredStreams += 1 }
            return .noAnswer
        }
        let rates = core.ratesApplyNow()
        if rates, core.draw(core.faults.resetStreamRate) {
            core.count { $0.resetStreams += 1 }
            if core.configuration.keepRecordsInMemory { core.resetTimes.withLock { $0[token, default: []].append(nowMillis) } }
            return .reset
        }
        if rates, core.draw(core.faults.internalServerErrorRate) { return reject(.internalServerError, apnsID) }
        if rates, core.draw(core.faults.serviceUnavailableRate) { return reject(.serviceUnavailable, apnsID) }
        return nil
    }

    /// Accepted: recorded in this read burst's batch (committed before the answers are flushed), and
    /// counted, which decides whether a scripted drop or GOAWAY follows.
    private func accept(
        _ request: APNsRequest, app: String, auth: String, apnsID: String, payload: [UInt8], streamID: Int, nowMillis: Int64
    ) -> Outcome {
        if core.recorder.isEnabled {
            let accepted = AcceptedRequest(
                time: nowMillis, connection: id, stream: streamID, app: app, token: request.token,
                payloadHash: AcceptedRequest.hash(payload), jobID: PayloadFacts.jobID(in: payload), apnsID: apnsID,
                collapseID: request.collapseID, pushType: request.pushType?.rawValue, priority: request.priority?.rawValue,
                expiration: request.expiration, auth: auth)
            if core.configuration.recordsPath != nil { accepted.appendLine(to: &pendingLines) }
            if core.configuration.keepRecordsInMemory { pendingRecords.append(accepted.record) }
        }
        // The 200s are counted by this atomic, not under the totals' lock.
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
    func certificateTopic() -> (topic: String, auth: String)? {
        switch certificate {
        case .topic(let t, let auth): return (t, auth)
        case .none, .unreadable: return nil
        case .unknown:
            let peer = try? context?.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
            if let peer {
                if let topic = (try? peer.toDERBytes()).flatMap({ CertificateTopic.topic(fromDER: $0) }) {
                    certificate = .topic(topic, auth: "cert:" + topic)
                    return (topic, "cert:" + topic)
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
    /// Answers the record's `auth` (`token:<team>/<key id>`) or the reason for refusing.
    func checkToken(_ header: String, now: Int64) -> Result<String, APNsReason> {
        let scheme = header.prefix(7)
        guard scheme == "bearer " || scheme == "Bearer " else { return .failure(.invalidProviderToken) }
        let jwt = header.dropFirst(7)
        if let current = token, current.jwt == jwt {
            if now - current.issuedAt > core.verifier.maxAge { return .failure(.expiredProviderToken) }
            return .success(current.auth)
        }
        switch core.verifier.verify(jwt, now: now) {
        case .malformed, .unknownKey, .badSignature: return .failure(.invalidProviderToken)
        case .expired: return .failure(.expiredProviderToken)
        case .valid(let keyID, let teamID, let issuedAt):
            // A key restricted to the other environment (`key_environments`): Apple's
            // BadEnvironmentKeyIdInToken, "The key ID in the provider token doesn't match the environment".
            if let only = core.faults.keyEnvironments[keyID], only != (core.configuration.sandbox ? "sandbox" : "production") {
                return .failure(.badEnvironmentKeyIdInToken)
            }
            let clock = ContinuousClock.now
            if let current = token {
                // "The key ID in the provider token isn't related to the key ID of the token used in the
                // first push of this connection": another team's key on the same connection.
                if current.teamID != teamID { return .failure(.unrelatedKeyIdInToken) }
                // Same key and iat: the same token signed again (ES256 signatures are randomised), not
                // an update.
                if current.keyID == keyID, current.issuedAt == issuedAt {
                    token?.jwt = jwt
                    return .success(current.auth)
                }
                let interval = core.configuration.tokenRefreshIntervalSeconds
                if clock - current.adoptedAt < .nanoseconds(Int64(interval * 1e9)) {
                    return .failure(.tooManyProviderTokenUpdates)
                }
            }
            let auth = "token:\(teamID)/\(keyID)"
            token = CurrentToken(jwt: jwt, teamID: teamID, keyID: keyID, auth: auth, issuedAt: issuedAt, adoptedAt: clock)
            return .success(auth)
        }
    }

    /// A random (version 4) UUID from the connection's seeded generator, uppercase as Apple's.
    func makeUUID() -> String {
        let a = random.next()
        let b = random.next()
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<8 {
            bytes[i] = UInt8(truncatingIfNeeded: a >> (8 * UInt64(i)))
            bytes[8 + i] = UInt8(truncatingIfNeeded: b >> (8 * UInt64(i)))
        }
        bytes[6] = bytes[6] & 0x0F | 0x40
        bytes[8] = bytes[8] & 0x3F | 0x80
        return APNsID.string(uuidBytes: bytes)
    }
}

/// Rewrites SETTINGS_MAX_CONCURRENT_STREAMS in the SETTINGS frames NIO writes to the value this
/// connection advertises (1 until the first authenticated request, then the configured limit), while
/// NIO itself enforces a higher one; see `HTTP2Connection.streamMargin`. Sits between TLS and the
/// HTTP/2 handler and follows frame boundaries through the outbound byte stream. Being the last
/// handler before TLS, it also hands the connection's pending records to the writer before any flush
/// (NIO's HTTP/2 handler flushes on its own at the end of a read burst): a client that has its answer
/// finds the notification recorded. And it gathers the frames written between two flushes into one
/// buffer: TLS seals each write it is given as a record of its own, and a read burst's answers are
/// many frames of ~50 bytes.
final class SettingsAdvertiser: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    var advertised: UInt32 = 1
    weak var connection: HTTP2Connection?
    private var gathered: ByteBuffer?
    private var promises: [EventLoopPromise<Void>] = []

    func flush(context: ChannelHandlerContext) {
        connection?.commitRecords()
        if let bytes = gathered {
            gathered = nil
            var promise: EventLoopPromise<Void>?
            if !promises.isEmpty {
                promise = context.eventLoop.makePromise()
                let waiting = promises
                promises.removeAll()
                promise!.futureResult.whenComplete { result in
                    for p in waiting { p.completeWith(result) }
                }
            }
            context.write(wrapOutboundOut(bytes), promise: promise)
        }
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        // What was never flushed is dropped, as the channel would drop it.
        gathered = nil
        let waiting = promises
        promises.removeAll()
        for p in waiting { p.fail(ChannelError.ioOnClosedChannel) }
        context.close(mode: mode, promise: promise)
    }
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
        if gathered == nil {
            gathered = context.channel.allocator.buffer(capacity: max(4096, buffer.readableBytes))
        }
        gathered!.writeBuffer(&buffer)
        if let promise { promises.append(promise) }
    }
}

import APNsProtocol
import APNsTransport
import Foundation
import NIOCore
import NIOSSL
import NIOTLS

/// One gateway connection: decodes frames, applies the fault script, records what it accepts, and
/// answers the first bad frame with an error response before closing (spec 003: "APNs returns an
/// error-response packet and closes the connection. Any notifications that you sent after the
/// malformed notification using the same connection are discarded").
final class GatewayConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let core: SimulatorCore
    private let id: Int
    private var app: String?
    private var decoder: GatewayFrameDecoder
    /// The identifier of the last notification accepted: what a status-10 response names.
    private var lastProcessed: UInt32 = 0
    private var closing = false
    private var context: ChannelHandlerContext?

    // Scratch space reused across reads.
    private var lines: [UInt8] = []
    private var batch: [AcceptedNotification] = []

    init(core: SimulatorCore, channel: any Channel) {
        self.core = core
        id = core.nextConnectionNumber()
        decoder = GatewayFrameDecoder(limits: core.limits)
        core.register(id, channel: channel, handler: self)
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tls = event as? TLSUserEvent, case .handshakeCompleted = tls {
            let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
            app = (try? certificate?.toDERBytes()).flatMap { CertificateTopic.topic(fromDER: $0) }
            core.count { $0.connections += 1 }
            core.logger.debug("gateway connection", metadata: ["connection": "\(id)", "app": "\(app ?? "-")"])
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOSSLError || error is BoringSSLError { core.count { $0.handshakeFailures += 1 } }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        core.unregister(id)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        let buffer = unwrapInboundIn(data)
        buffer.withUnsafeReadableBytes { decoder.append($0) }
        while !closing, let event = decoder.next() {
            switch event {
            case .notification(let n): process(n, context: context)
            case .rejected(let r):
                if let response = r.errorResponse {
                    respondAndClose(response, context: context)
                } else {
                    // Command 0: "APNs responds by severing the connection", no error response.
                    core.count { $0.silentlyClosed += 1 }
                    closeQuietly(context: context)
                }
            }
        }
        flushRecords()
    }

    private func process(_ n: ReceivedNotification, context: ChannelHandlerContext) {
        let position = core.nextArrival()
        let identifier = n.identifier ?? 0
        guard let app else {
            respondAndClose(ErrorResponse(status: .missingTopic, identifier: identifier), context: context)
            return
        }
        if core.invalidTokens.contains(n.token) {
            respondAndClose(ErrorResponse(status: .invalidToken, identifier: identifier), context: context)
            return
        }
        if core.faults.processingErrorAt.contains(position) || core.drawProcessingError() {
            respondAndClose(ErrorResponse(status: .processingError, identifier: identifier), context: context)
            return
        }
        if let id = n.identifier { lastProcessed = id }
        let now = Date().timeIntervalSince1970
        if core.recorder.isEnabled {
            let record = AcceptedNotification(
                time: Int64(now * 1000), connection: id, app: app, token: n.token.hex, identifier: n.identifier,
                command: n.command, payloadHash: PayloadFacts.hash(n.payload), jobID: PayloadFacts.jobID(in: n.payload))
            RecordWriter<AcceptedNotification>.appendLine(record, to: &lines)
            batch.append(record)
        }
        pendingAccepted += 1
        if core.uninstalledTokens.contains(n.token) {
            core.queueFeedback(app: app, token: n.token, time: UInt32(now))
        }
        // Counted over the whole simulator, so "every N" holds however many connections share the load.
        let acceptedOverall = core.nextAccepted()
        if let every = core.faults.shutdownEvery, acceptedOverall % every == 0 {
            respondAndClose(ErrorResponse(status: .shutdown, identifier: lastProcessed), context: context)
        } else if let every = core.faults.dropEvery, acceptedOverall % every == 0 {
            core.count { $0.abruptDrops += 1 }
            closeQuietly(context: context)
        }
    }

    private var pendingAccepted = 0

    private func flushRecords() {
        if pendingAccepted > 0 {
            let n = pendingAccepted
            core.count { $0.accepted += n }
            pendingAccepted = 0
        }
        if !batch.isEmpty {
            core.recorder.append(lines: lines, records: batch)
            lines.removeAll(keepingCapacity: true)
            batch.removeAll(keepingCapacity: true)
        }
    }

    /// Status 10 on demand (signal or `shutdownConnections()`).
    func shutdown() {
        guard let context, !closing else { return }
        respondAndClose(ErrorResponse(status: .shutdown, identifier: lastProcessed), context: context)
    }

    /// Records go out before the connection closes, so a peer that sees the close can count on them.
    private func respondAndClose(_ response: ErrorResponse, context: ChannelHandlerContext) {
        closing = true
        flushRecords()
        core.count { $0.rejectedByStatus[response.status.rawValue, default: 0] += 1 }
        var out = context.channel.allocator.buffer(capacity: ErrorResponse.size)
        FrameEncoder.writeErrorResponse(response, into: &out)
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(out)).whenComplete { _ in loopBound.value.close(promise: nil) }
    }

    private func closeQuietly(context: ChannelHandlerContext) {
        closing = true
        flushRecords()
        context.close(promise: nil)
    }
}

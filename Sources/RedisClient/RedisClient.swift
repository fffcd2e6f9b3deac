import CHiredis
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import TimeUnits

/// A connection to one Redis server: a SwiftNIO channel (plain TCP, or TLS with swift-nio-ssl for
/// `rediss://`) on an event loop, speaking RESP through hiredis's reply parser (``RedisChannelHandler``).
///
/// The actor runs on its channel's event loop (its executor is the loop's), so a call writes into the
/// channel and is resumed by its reply without changing threads, and no connection owns a thread. Calls
/// made while others wait are written at once behind them (pipelined on the channel); each call is one
/// flush: a pipeline writes all its commands into one buffer.
///
/// When the server goes away, a call does not fail: it reconnects with exponential back-off (jitter,
/// cap) and sends its commands again, until ``RedisReconnectPolicy/maximumWait``. A reply lost with the
/// connection means the commands may or may not have run, so callers must send commands that are safe
/// to repeat (the pipeline's stores, in the `Redis` module, are: batch markers, lease owners, newest-wins writes).
///
/// The connection is opened lazily by the first call (or by ``connect()``, which fails fast instead).
/// How a round trip already written waits for its reply when its task is cancelled.
public enum RedisWait {
    /// False (the default): it waits for the reply (or the command timeout), so a cancelled caller
    /// still knows whether what it wrote was done (a feedback poller stopping mid-read records what it
    /// read). True, for a task that a stop may abandon (the pipeline's lanes at the drain deadline): the
    /// wait ends at once with `CancellationError`, and whatever the command did stays done in Redis.
    @TaskLocal public static var endsOnCancellation = false
}

public actor RedisClient {
    /// Counts of what this client did, for tests and metrics.
    public struct Statistics: Sendable, Hashable {
        /// Flushes of commands followed by reading their replies: one per pipeline or script call in the
        /// steady state, one more for the AUTH/SELECT handshake of each connection.
        public var roundTrips = 0
        public var commands = 0
        public var connects = 0
        /// Calls that had to wait for the server (a failed attempt followed by a retry).
        public var retries = 0
    }

    public nonisolated let configuration: RedisConfiguration
    private nonisolated let eventLoop: any EventLoop
    private nonisolated let executor: any SerialExecutor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    private enum State {
        case idle
        /// Opening (TCP, TLS handshake, AUTH/SELECT): calls arriving meanwhile wait for the same one.
        case connecting(EventLoopFuture<any Channel>)
        case connected(any Channel)
    }
    private var state = State.idle
    /// Made from ``RedisConfiguration/tls`` at the first connect (reading the files once), then kept.
    private var tlsContext: NIOSSLContext?
    private var logger: Logger
    private var random = SystemRandomNumberGenerator()
    public private(set) var statistics = Statistics()

    /// `eventLoopGroup`: where the connection's channel (and this actor) runs; one loop of it is picked.
    public init(
        configuration: RedisConfiguration, logger: Logger = Logger(label: "apns.redis"),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.configuration = configuration
        self.eventLoop = eventLoopGroup.next()
        self.executor = eventLoop.executor
        var logger = logger
        logger[metadataKey: "redis.endpoint"] = "\(configuration.endpoint)"
        logger[metadataKey: "redis.db"] = "\(configuration.database)"
        if configuration.tls != nil { logger[metadataKey: "redis.tls"] = "true" }
        self.logger = logger
    }

    public init(url: String, logger: Logger = Logger(label: "apns.redis")) throws {
        self.init(configuration: try RedisConfiguration(url: url), logger: logger)
    }

    deinit {
        if case .connected(let channel) = state { channel.close(promise: nil) }
    }

    /// Connects now (if not connected) without retrying: lets a process fail at start-up on a wrong
    /// address, password or certificate instead of waiting in its first call.
    public func connect() async throws {
        _ = try await connectIfNeeded()
    }

    /// Closes the connection; the next call opens a new one.
    public func close() {
        if case .connected(let channel) = state { channel.close(promise: nil) }
        state = .idle
    }

    /// Sends one command; an error reply throws ``RedisError/server(_:)``.
    @discardableResult
    public func send(_ command: RedisCommand) async throws -> RedisReply {
        let reply = try await pipeline([command])[0]
        if case .error(let message) = reply { throw RedisError.server(message) }
        return reply
    }

    /// Sends all `commands` in one round trip and returns their replies in order; error replies are
    /// returned in place (``RedisReply/error(_:)``). Retried as a whole when the connection drops.
    public func pipeline(_ commands: [RedisCommand]) async throws -> [RedisReply] {
        if commands.isEmpty { return [] }
        return try await withReconnect(commands.count == 1 ? commands[0].name : "pipeline") { channel in
            let replies = try await roundTrip(commands, on: channel)
            // A server still loading its dataset answers every command with LOADING: wait for it.
            if case .error(let message) = replies[0], RedisError.server(message).isTransient {
                throw RedisError.server(message)
            }
            return replies
        }
    }

    /// Runs `script` by `EVALSHA`; on `NOSCRIPT` (first use, or the server restarted and lost its script
    /// cache) loads it and runs it again in the same round trip. An error reply throws.
    public func eval(_ script: RedisScript, keys: [String] = [], arguments: RedisArguments = RedisArguments()) async throws -> RedisReply {
        try await eval(script, keys: RedisArguments(keys), arguments: arguments)
    }

    public func eval(_ script: RedisScript, keys: RedisArguments, arguments: RedisArguments) async throws -> RedisReply {
        let evalsha = RedisCommand(evalsha: script, keys: keys, arguments: arguments)
        return try await withReconnect("evalsha") { channel in
            var reply = try await roundTrip([evalsha], on: channel)[0]
            if case .error(let message) = reply, message.hasPrefix("NOSCRIPT") {
                logger.debug("loading script", metadata: ["redis.script": "\(script.sha1)"])
                let replies = try await roundTrip([RedisCommand("SCRIPT", "LOAD", script.source), evalsha], on: channel)
                if case .error(let message) = replies[0] { throw RedisError.server(message) }
                reply = replies[1]
            }
            if case .error(let message) = reply { throw RedisError.server(message) }
            return reply
        }
    }

    // MARK: - Connection and retries

    private func withReconnect<T>(_ operation: String, _ body: (any Channel) async throws -> T) async throws -> T {
        let clock = ContinuousClock()
        let start = clock.now
        var attempt = 0
        while true {
            var used: (any Channel)?
            do {
                let channel = try await connectIfNeeded()
                used = channel
                let result = try await body(channel)
                if attempt > 0 {
                    logger.info(
                        "redis call succeeded after waiting for the server",
                        metadata: [
                            "redis.operation": "\(operation)", "redis.attempts": "\(attempt + 1)",
                        ])
                }
                return result
            } catch let error as RedisError where error.isTransient {
                if case .connection = error, let used { drop(used) }
                attempt += 1
                statistics.retries += 1
                let delay = try configuration.reconnect.retryDelay(
                    operation, attempt: attempt, waited: clock.now - start, failure: "\(error)", server: "redis", logger: logger,
                    using: &random)
                try await Task.sleep(for: delay)
            }
        }
    }

    /// Forgets `channel` after it failed a call, unless a newer connection replaced it meanwhile (calls
    /// pipelined on one channel all fail with it; only the first one's reconnect counts).
    private func drop(_ channel: any Channel) {
        channel.close(promise: nil)
        if case .connected(let current) = state, current === channel { state = .idle }
    }

    private func connectIfNeeded() async throws -> any Channel {
        switch state {
        // A connection the server closed while idle is replaced here, without a failed call.
        case .connected(let channel) where channel.isActive: return channel
        case .connected: state = .idle
        case .connecting(let opening): return try await opening.get()
        case .idle: break
        }
        let promise = eventLoop.makePromise(of: (any Channel).self)
        state = .connecting(promise.futureResult)
        do {
            let channel = try await open()
            guard case .connecting(let opening) = state, opening === promise.futureResult else {
                // close() was called meanwhile.
                channel.close(promise: nil)
                throw RedisError.connection("the connection was closed while it opened")
            }
            state = .connected(channel)
            promise.succeed(channel)
            return channel
        } catch {
            if case .connecting(let opening) = state, opening === promise.futureResult { state = .idle }
            promise.fail(error)
            throw error
        }
    }

    /// A new channel, connected, TLS handshake done, authenticated and in its database.
    private func open() async throws -> any Channel {
        let endpoint = configuration.endpoint
        var tlsSettings: (context: NIOSSLContext, serverName: String?)?
        if let settings = configuration.tls {
            if tlsContext == nil { tlsContext = try settings.makeContext() }
            tlsSettings = (tlsContext!, settings.serverName(forHost: configuration.host))
        }
        let tls = tlsSettings
        let ready = eventLoop.makePromise(of: Void.self)
        let commandTimeout = TimeAmount(configuration.commandTimeout)
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(TimeAmount(configuration.connectTimeout))
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelInitializer { channel in
                do {
                    let handlers = channel.pipeline.syncOperations
                    if let tls {
                        try handlers.addHandler(NIOSSLClientHandler(context: tls.context, serverHostname: tls.serverName))
                    }
                    try handlers.addHandler(
                        RedisChannelHandler(commandTimeout: commandTimeout, ready: ready, tls: tls != nil, endpoint: endpoint))
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.connect(host: configuration.host, port: configuration.port).get()
            try await ready.futureResult.get()
        } catch {
            ready.fail(error)
            let error = RedisChannelHandler.redisError(error, endpoint: endpoint)
            if case .tls = error {
                logger.error("redis TLS handshake failed", metadata: ["redis.url": "\(configuration.redactedURL)", "error": "\(error)"])
            }
            throw error
        }

        // AUTH and SELECT pipelined: one round trip per (re)connect.
        var handshake: [RedisCommand] = []
        if let password = configuration.password {
            if let username = configuration.username {
                handshake.append(RedisCommand("AUTH", username, password))
            } else {
                handshake.append(RedisCommand("AUTH", password))
            }
        }
        if configuration.database != 0 {
            handshake.append(RedisCommand("SELECT", String(configuration.database)))
        }
        if !handshake.isEmpty {
            do {
                let replies = try await roundTrip(handshake, on: channel)
                for (command, reply) in zip(handshake, replies) {
                    guard case .error(let message) = reply else { continue }
                    if RedisError.server(message).isTransient { throw RedisError.server(message) }
                    // The message never contains the password; the command name says which step failed.
                    throw RedisError.authentication("\(command.name): \(message)")
                }
            } catch {
                channel.close(promise: nil)
                throw error
            }
        }
        statistics.connects += 1
        logger.debug("connected to redis", metadata: ["redis.url": "\(configuration.redactedURL)"])
        return channel
    }

    /// Writes every command into one buffer and flushes it once; returns their replies, in order.
    private func roundTrip(_ commands: [RedisCommand], on channel: any Channel) async throws -> [RedisReply] {
        // This actor runs on the channel's loop, so this is the channel's state now, not a guess: a
        // closed channel's handler is gone, and a request written there would wait forever.
        guard channel.isActive else { throw RedisError.connection("Server closed the connection") }
        var capacity = 0
        for command in commands { capacity += command.arguments.respCapacity }
        var bytes = channel.allocator.buffer(capacity: capacity)
        for command in commands { command.arguments.writeRESP(into: &bytes) }
        let promise = eventLoop.makePromise(of: [RedisReply].self)
        statistics.roundTrips += 1
        statistics.commands += commands.count
        channel.writeAndFlush(RedisRequest(bytes: bytes, count: commands.count, promise: promise), promise: nil)
        guard RedisWait.endsOnCancellation else { return try await promise.futureResult.get() }
        // A cancelled caller stops waiting (a stop never waits out the command timeout); the reply, when
        // it comes, completes a promise nobody reads (a second completion is ignored).
        return try await withTaskCancellationHandler {
            try await promise.futureResult.get()
        } onCancel: {
            promise.fail(CancellationError())
        }
    }
}

extension RedisReply {
    /// Copies a hiredis reply tree into Swift values (the caller frees the C reply).
    init(_ reply: UnsafeMutablePointer<redisReply>) {
        let r = reply.pointee
        func bytes() -> [UInt8] {
            guard let str = r.str, r.len > 0 else { return [] }
            return Array(UnsafeRawBufferPointer(start: str, count: r.len))
        }
        switch r.type {
        case REDIS_REPLY_STATUS: self = .status(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_ERROR: self = .error(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_INTEGER: self = .integer(Int64(r.integer))
        case REDIS_REPLY_STRING: self = .bulk(bytes())
        case REDIS_REPLY_ARRAY:
            var elements: [RedisReply] = []
            elements.reserveCapacity(r.elements)
            for index in 0..<r.elements {
                if let element = r.element[index] { elements.append(RedisReply(element)) } else { elements.append(.null) }
            }
            self = .array(elements)
        default: self = .null
        }
    }
}

extension RedisConnection {
    /// `INFO <section>` as field → value (e.g. `used_memory`), for measurements and checks.
    public func info(_ section: String) async throws -> [String: String] {
        let text = try await send(RedisCommand("INFO", section)).string ?? ""
        var result: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2 { result[String(parts[0])] = String(parts[1]) }
        }
        return result
    }
}

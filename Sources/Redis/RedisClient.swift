import CHiredis
import Foundation
import Logging
import TimeUnits

/// A connection to one Redis server, over hiredis.
///
/// The actor runs on a thread of its own (``RedisThreadExecutor``): hiredis blocks, and blocking belongs
/// off Swift's cooperative pool. Each call is one round trip: a pipeline appends all its commands, then
/// reads all replies.
///
/// When the server goes away, a call does not fail: it reconnects with exponential back-off (jitter,
/// cap) and sends its commands again, until ``RedisReconnectPolicy/maximumWait``. A reply lost with the
/// connection means the commands may or may not have run, so callers must send commands that are safe
/// to repeat; the operations of ``PipelineStore`` are (batch markers, lease owners, newest-wins writes).
///
/// The connection is opened lazily by the first call (or by ``connect()``, which fails fast instead).
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
    private nonisolated let executor: RedisThreadExecutor
    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    /// Only touched on the actor's thread (and in `deinit`, when no one else can).
    private var connection = Connection()
    private var context: UnsafeMutablePointer<redisContext>? {
        get { connection.context }
        set { connection.context = newValue }
    }
    private var logger: Logger
    private var random = SystemRandomNumberGenerator()
    public private(set) var statistics = Statistics()

    public init(configuration: RedisConfiguration, logger: Logger = Logger(label: "apns.redis")) {
        self.configuration = configuration
        self.executor = RedisThreadExecutor(name: "redis \(configuration.host):\(configuration.port)")
        var logger = logger
        logger[metadataKey: "redis.endpoint"] = "\(configuration.host):\(configuration.port)"
        logger[metadataKey: "redis.db"] = "\(configuration.database)"
        self.logger = logger
    }

    public init(url: String, logger: Logger = Logger(label: "apns.redis")) throws {
        self.init(configuration: try RedisConfiguration(url: url), logger: logger)
    }

    deinit {
        if let context = connection.context { redisFree(context) }
        executor.shutdown()
    }

    /// Connects now (if not connected) without retrying: lets a process fail at start-up on a wrong
    /// address or password instead of waiting in its first call.
    public func connect() throws {
        _ = try connectIfNeeded()
    }

    /// Closes the connection; the next call opens a new one.
    public func close() {
        if let context {
            redisFree(context)
            self.context = nil
        }
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
        return try await withReconnect(commands.count == 1 ? commands[0].name : "pipeline") { context in
            let replies = try roundTrip(commands, on: context)
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
        return try await withReconnect("evalsha") { context in
            var reply = try roundTrip([evalsha], on: context)[0]
            if case .error(let message) = reply, message.hasPrefix("NOSCRIPT") {
                logger.debug("loading script", metadata: ["redis.script": "\(script.sha1)"])
                let replies = try roundTrip([RedisCommand("SCRIPT", "LOAD", script.source), evalsha], on: context)
                if case .error(let message) = replies[0] { throw RedisError.server(message) }
                reply = replies[1]
            }
            if case .error(let message) = reply { throw RedisError.server(message) }
            return reply
        }
    }

    // MARK: - Connection and retries

    private func withReconnect<T>(_ operation: String, _ body: (UnsafeMutablePointer<redisContext>) throws -> T) async throws -> T {
        let clock = ContinuousClock()
        let start = clock.now
        var attempt = 0
        while true {
            do {
                let context = try connectIfNeeded()
                let result = try body(context)
                if attempt > 0 {
                    logger.info(
                        "redis call succeeded after waiting for the server",
                        metadata: [
                            "redis.operation": "\(operation)", "redis.attempts": "\(attempt + 1)",
                        ])
                }
                return result
            } catch let error as RedisError where error.isTransient {
                if case .connection = error { close() }
                attempt += 1
                statistics.retries += 1
                let waited = clock.now - start
                if let maximumWait = configuration.reconnect.maximumWait, waited >= maximumWait {
                    logger.error(
                        "redis unavailable, giving up",
                        metadata: [
                            "redis.operation": "\(operation)", "redis.waited_ms": "\(waited.milliseconds)",
                            "error": "\(error)",
                        ])
                    throw RedisError.unavailable(waited: waited, lastError: "\(error)")
                }
                let delay = configuration.reconnect.delay(attempt: attempt, using: &random)
                // The first failure is worth a warning; the next ones of the same outage only at debug,
                // so a long outage does not flood the log.
                logger.log(
                    level: attempt == 1 ? .warning : .debug, "redis call failed, retrying",
                    metadata: [
                        "redis.operation": "\(operation)", "redis.attempt": "\(attempt)",
                        "redis.retry_in_ms": "\(delay.milliseconds)", "error": "\(error)",
                    ])
                try await Task.sleep(for: delay)
            }
        }
    }

    private func connectIfNeeded() throws -> UnsafeMutablePointer<redisContext> {
        if let context { return context }
        guard let context = redisConnectWithTimeout(configuration.host, Int32(configuration.port), configuration.connectTimeout.timeval)
        else {
            throw RedisError.connection("cannot allocate a hiredis context")
        }
        if context.pointee.err != 0 {
            let message = Self.errorText(context)
            redisFree(context)
            throw RedisError.connection(message)
        }
        _ = redisSetTimeout(context, configuration.commandTimeout.timeval)
        _ = redisEnableKeepAlive(context)

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
                let replies = try roundTrip(handshake, on: context)
                for (command, reply) in zip(handshake, replies) {
                    guard case .error(let message) = reply else { continue }
                    if RedisError.server(message).isTransient { throw RedisError.server(message) }
                    // The message never contains the password; the command name says which step failed.
                    throw RedisError.authentication("\(command.name): \(message)")
                }
            } catch {
                redisFree(context)
                throw error
            }
        }
        self.context = context
        statistics.connects += 1
        logger.debug("connected to redis", metadata: ["redis.url": "\(configuration.redactedURL)"])
        return context
    }

    /// Appends every command, then reads every reply: one flush, one wait.
    private func roundTrip(_ commands: [RedisCommand], on context: UnsafeMutablePointer<redisContext>) throws -> [RedisReply] {
        for command in commands {
            let status = command.arguments.withRESP { resp in
                redisAppendFormattedCommand(context, resp.baseAddress?.assumingMemoryBound(to: CChar.self), resp.count)
            }
            if status != REDIS_OK { throw RedisError.connection(Self.errorText(context)) }
        }
        statistics.roundTrips += 1
        statistics.commands += commands.count
        var replies: [RedisReply] = []
        replies.reserveCapacity(commands.count)
        for _ in commands {
            var raw: UnsafeMutableRawPointer?
            guard redisGetReply(context, &raw) == REDIS_OK, let raw else {
                throw RedisError.connection(Self.errorText(context))
            }
            replies.append(RedisReply(raw.assumingMemoryBound(to: redisReply.self)))
            freeReplyObject(raw)
        }
        return replies
    }

    private static func errorText(_ context: UnsafeMutablePointer<redisContext>) -> String {
        let text = withUnsafeBytes(of: context.pointee.errstr) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if text.isEmpty { return "connection error \(context.pointee.err)" }
        return text
    }
}

/// The hiredis context. `@unchecked Sendable` only so the actor's `deinit` may free it: all other
/// access happens on the actor's own thread.
private struct Connection: @unchecked Sendable {
    var context: UnsafeMutablePointer<redisContext>?
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

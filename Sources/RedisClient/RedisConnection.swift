/// The calls the pipeline makes to Redis, whether it is one server (``RedisClient``) or a Redis Cluster
/// (``RedisCluster``, which routes each call to the node owning its keys' slot).
///
/// The shapes are ``RedisClient``'s: a command, a pipeline of commands (one round trip per node, replies
/// in order, error replies in place), a script by `EVALSHA` with its keys declared. On a cluster every
/// key of one command or script must hash to one slot (give them a common `{hash tag}`): a call that
/// spans slots is a programming error (``RedisClusterError/crossSlot(command:slots:)``) and is not sent.
public protocol RedisConnection: AnyObject, Sendable {
    /// Connects now without retrying, so a process fails at start on a wrong address or password.
    func connect() async throws
    /// Closes the connection(s); the next call opens new ones.
    func close() async
    /// One command; an error reply throws ``RedisError/server(_:)``.
    @discardableResult
    func send(_ command: RedisCommand) async throws -> RedisReply
    /// All `commands`, replies in order, error replies returned in place.
    func pipeline(_ commands: [RedisCommand]) async throws -> [RedisReply]
    /// `script` by `EVALSHA` (loaded on `NOSCRIPT`); an error reply throws. `keys` are the script's
    /// `KEYS`, as arguments (the pipeline's scripts take thousands: no String per key).
    func eval(_ script: RedisScript, keys: RedisArguments, arguments: RedisArguments) async throws -> RedisReply
    /// A command without keys of its own (`SCAN` over a key pattern) sent where `key` lives: on a cluster,
    /// the primary owning `key`'s slot; on one server, that server. An error reply throws.
    @discardableResult
    func send(_ command: RedisCommand, routedBy key: String) async throws -> RedisReply
    /// For logs and error messages: the server's or the cluster's address, without the password.
    var redactedDescription: String { get }
}

extension RedisConnection {
    // ``RedisClient``'s default arguments, for callers holding `any RedisConnection` (a protocol
    // requirement cannot declare defaults; overloads that differ in labels do not shadow it).
    public func eval(_ script: RedisScript, arguments: RedisArguments) async throws -> RedisReply {
        try await eval(script, keys: RedisArguments(), arguments: arguments)
    }

    public func eval(_ script: RedisScript, keys: [String]) async throws -> RedisReply {
        try await eval(script, keys: RedisArguments(keys), arguments: RedisArguments())
    }

    public func eval(_ script: RedisScript, keys: [String], arguments: RedisArguments) async throws -> RedisReply {
        try await eval(script, keys: RedisArguments(keys), arguments: arguments)
    }
}

extension RedisClient: RedisConnection {
    @discardableResult
    public func send(_ command: RedisCommand, routedBy key: String) async throws -> RedisReply {
        try await send(command)
    }

    public nonisolated var redactedDescription: String { configuration.redactedURL }
}

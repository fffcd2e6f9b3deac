// The generic client is part of this module's interface (connections, replies, scripts, configuration):
// modules that `import Redis` keep seeing it without importing `RedisClient` themselves.
@_exported import RedisClient

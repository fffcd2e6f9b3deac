import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Turns a host name into the addresses a connection may use. Asked again at every (re)connect, so a
/// front end that left DNS is left too, and the connections of an app spread over every address
/// (`HTTP2Connection.address(among:slot:failures:)`) rather than all going to the first.
public protocol HostResolver: Sendable {
    func resolve(host: String, port: Int, on eventLoop: any EventLoop) -> EventLoopFuture<[SocketAddress]>
}

/// The system's resolver (`getaddrinfo`), run on NIO's blocking-I/O thread pool: never on an event loop.
public struct SystemHostResolver: HostResolver {
    public init() {}

    public struct Failure: Error, CustomStringConvertible {
        public var host: String
        public var message: String
        public var description: String { "cannot resolve \(host): \(message)" }
    }

    public func resolve(host: String, port: Int, on eventLoop: any EventLoop) -> EventLoopFuture<[SocketAddress]> {
        NIOThreadPool.singleton.runIfActive(eventLoop: eventLoop) { try Self.lookUp(host: host, port: port) }
    }

    static func lookUp(host: String, port: Int) throws -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if canImport(Glibc)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let list else {
            throw Failure(host: host, message: String(cString: gai_strerror(rc)))
        }
        defer { freeaddrinfo(list) }
        var out: [SocketAddress] = []
        var next: UnsafeMutablePointer<addrinfo>? = list
        while let ai = next {
            if let addr = ai.pointee.ai_addr {
                switch ai.pointee.ai_family {
                case AF_INET:
                    out.append(addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { SocketAddress($0.pointee, host: host) })
                case AF_INET6:
                    out.append(addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { SocketAddress($0.pointee, host: host) })
                default:
                    break
                }
            }
            next = ai.pointee.ai_next
        }
        if out.isEmpty { throw Failure(host: host, message: "no IPv4 or IPv6 address") }
        return out
    }
}

extension HTTP2Connection {
    /// The address connection `slot` of a host uses: the addresses in a stable order (the resolver's
    /// may rotate), the slot's own, moved on by one after each failed connect so a dead front end
    /// is not tried forever. Connection k of n over one host lands on address k mod count.
    static func address(among addresses: [SocketAddress], slot: Int, failures: Int) -> SocketAddress? {
        guard !addresses.isEmpty else { return nil }
        var unique: [String: SocketAddress] = [:]
        for a in addresses { unique["\(a.ipAddress ?? "")|\(a.port ?? 0)"] = a }
        let sorted = unique.sorted { $0.key < $1.key }.map(\.value)
        return sorted[(slot + failures) % sorted.count]
    }
}

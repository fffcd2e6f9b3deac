/// The registrations' and suppressions' role of the store (the feedback poller, the registration events):
/// newest-wins writes in the token tags, through the settle's tag-writes script (``SettleStore/applyTagWrites(_:)``).
struct RegistrationStore: StoreRole {
    let settle: SettleStore
    var runner: StoreRunner { settle.runner }

    /// Applies registration events: `registered`, the language and the recipient profile are written only
    /// when the event is at least as new as the stored registration, so a registration lifts an older
    /// suppression and a stale one changes nothing; one without a language (a profile) keeps the stored
    /// one. One round trip on a single Redis (one call per token slot on a cluster).
    func applyRegistrations(_ registrations: [Registration]) async throws {
        if registrations.isEmpty { return }
        var parts = TagWritesSet(keys: keys)
        for registration in registrations {
            parts.update(app: registration.app, tokenHex: registration.tokenHex) {
                $0.register(
                    tokenHex: registration.tokenHex, at: registration.registeredAt, language: registration.language ?? "",
                    profile: registration.profile)
            }
        }
        try await settle.applyTagWrites(parts.parts)
    }

    /// The recipient profile stored for a token (``RedisKeys/profile(tag:)``): its time zone and user, each
    /// nil when the newest registration naming a profile left it empty, both nil when none named one.
    func profile(app: String, tokenHex: String) async throws -> (timeZone: String?, user: String?) {
        let reply = try await command(RedisCommand("HGET", keys.profile(app: app, tokenHex: tokenHex), RedisKeys.tokenField(tokenHex)))
        guard let stored = reply.string else { return (nil, nil) }
        // Cut at the first newline's byte: the time zone has none, the user may.
        let cut = stored.utf8.firstIndex(of: UInt8(ascii: "\n")) ?? stored.utf8.endIndex
        let zone = String(stored[..<cut])
        let user = cut == stored.utf8.endIndex ? "" : String(stored[stored.utf8.index(after: cut)...])
        return (zone.isEmpty ? nil : zone, user.isEmpty ? nil : user)
    }

    /// Suppresses tokens (`{<p>:<app>:<n>}:suppressed` token → `<epoch>:<reason>`), keeping the newest
    /// time of each token. For the feedback poller: one round trip per batch of tuples (one call per
    /// token slot on a cluster).
    func suppress(_ suppressions: [Suppression]) async throws {
        if suppressions.isEmpty { return }
        var parts = TagWritesSet(keys: keys)
        for suppression in suppressions {
            parts.update(app: suppression.app, tokenHex: suppression.tokenHex) {
                $0.suppress(tokenHex: suppression.tokenHex, at: suppression.at, reason: suppression.reason)
            }
        }
        try await settle.applyTagWrites(parts.parts)
    }
}

/// Tag writes by token tag, in first-seen order.
struct TagWritesSet {
    let keys: RedisKeys
    private(set) var parts: [TagWrites] = []
    private var index: [TagID: Int] = [:]

    init(keys: RedisKeys) { self.keys = keys }

    /// Applies `body` to the writes of the tag of `tokenHex` of `app`, created on first use.
    mutating func update(app: String, tokenHex: String, _ body: (inout TagWrites) -> Void) {
        body(&parts[position(app: app, tokenHex: tokenHex)])
    }

    private mutating func position(app: String, tokenHex: String) -> Int {
        let id = TagID(app: app, bucket: keys.tokenBucket(tokenHex))
        if let known = index[id] { return known }
        parts.append(TagWrites(keys: keys, tag: keys.tokenTag(app: app, bucket: id.bucket), marker: nil))
        index[id] = parts.count - 1
        return parts.count - 1
    }
}

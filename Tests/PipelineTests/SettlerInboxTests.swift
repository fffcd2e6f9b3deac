import Kafka
import Redis
import Testing

@testable import Pipeline

/// The settler's inbox hands out at most about `outcomesPerTake` outcomes per take (one settle call), and
/// never splits what one stage put: a message's offset is released with its outcome, never before it.
@Suite struct SettlerInboxTests {
    private func item(_ range: Range<Int>, received: Int = 0) -> SettlerInbox.Item {
        var item = SettlerInbox.Item()
        for n in range {
            item.outcomes.append(SettledOutcome(jobID: "j\(n)", app: "a", tokenHex: "", kind: .accepted))
            item.refs.append(MessageRef(topic: "t", partition: 0, offset: Int64(n)))
        }
        item.events.received = received
        return item
    }

    @Test func takesAreCappedAndKeepOutcomesWithTheirOffsets() async throws {
        let inbox = SettlerInbox(outcomesPerTake: 100)
        // The settler is behind: 10 batches of 30 and one of 250 pile up.
        for b in 0..<10 { inbox.put(item(b * 30..<(b + 1) * 30, received: 30)) }
        inbox.put(item(300..<550, received: 250))
        inbox.close()
        var takes: [SettlerInbox.Item] = []
        while let t = await inbox.take() { takes.append(t) }
        // 90 + 90 + 90 + 30 (the next 30 would pass the cap), then the large batch whole.
        #expect(takes.map(\.outcomes.count) == [90, 90, 90, 30, 250])
        for t in takes {
            // Each take's offsets are exactly its outcomes' (nothing released ahead of its outcome).
            #expect(t.outcomes.map(\.fingerprint) == t.refs.map { JobFingerprint(jobID: "j\($0.offset)") })
            #expect(t.events.received == t.outcomes.count)
        }
        #expect(takes.flatMap(\.refs).map(\.offset) == (0..<550).map(Int64.init), "in order, each once")
    }

    @Test func takeReturnsWhatIsPutThenNilOnceClosed() async throws {
        let inbox = SettlerInbox()
        async let taken = inbox.take()
        inbox.put(item(0..<3))
        #expect(await taken?.outcomes.count == 3)
        inbox.close()
        #expect(await inbox.take() == nil)
    }
}

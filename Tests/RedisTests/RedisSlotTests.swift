import Redis
import Testing

/// Vectors from the Redis Cluster specification and from `CLUSTER KEYSLOT` of a cluster-enabled
/// redis-server 7 (so the grouping matches the server's routing exactly).
@Suite struct RedisSlotTests {
    @Test func crc16IsXMODEM() {
        #expect(RedisSlot.crc16("123456789") == 0x31C3)
        #expect(RedisSlot.crc16("") == 0)
    }

    @Test func slotsMatchTheServer() {
        #expect(RedisSlot(key: "123456789").value == 0x31C3 % 16_384)
        #expect(RedisSlot(key: "123456789").value == 12_739)
        #expect(RedisSlot(key: "foo").value == 12_182)
        #expect(RedisSlot(key: "bar").value == 5_061)
        #expect(RedisSlot(key: "hello").value == 866)
        #expect(RedisSlot(key: "{apns:app:7}:dedup").value == 11_351)
    }

    @Test func hashTagsFollowTheSpecification() {
        #expect(RedisSlot(key: "{user1000}.following") == RedisSlot(key: "{user1000}.followers"))
        #expect(RedisSlot(key: "{user1000}.following").value == 3_443)
        // An empty `{}` is no tag: the whole key is hashed.
        #expect(RedisSlot(key: "foo{}{bar}").value == 8_363)
        // The tag ends at the first `}` after the first `{`.
        #expect(RedisSlot(key: "foo{{bar}}zap").value == 4_015)
        #expect(RedisSlot(key: "foo{bar}{zap}") == RedisSlot(key: "bar"))
        // An unclosed `{` is no tag.
        #expect(RedisSlot(key: "foo{bar") == RedisSlot(key: "foo{bar"))
        #expect(RedisSlot(key: "x{") != RedisSlot(key: "x"))
    }
}

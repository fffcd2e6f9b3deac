import Testing

@testable import Redis

/// Which dedup sets were given their expiry in the last minute: a set is reported given only after it
/// was marked, per table and sub-bucket, and everything is forgotten a minute after the first look-up.
@Suite struct DedupExpiriesTests {
    @Test func remembersEachTableAndSubBucketForAMinute() {
        let expiries = DedupExpiries()
        let now: Int64 = 1_764_000_000
        let sets = [DedupSetID(table: 1, subBucket: 0), DedupSetID(table: 1, subBucket: 255), DedupSetID(table: 3, subBucket: 64)]
        for set in sets { #expect(!expiries.isGiven(set, now: now)) }
        expiries.markGiven(sets)
        for set in sets { #expect(expiries.isGiven(set, now: now + 59)) }
        // Neighbours of a marked bit, a table between two marked ones and one never seen: not given.
        for other in [
            DedupSetID(table: 1, subBucket: 1), DedupSetID(table: 1, subBucket: 254), DedupSetID(table: 3, subBucket: 63),
            DedupSetID(table: 3, subBucket: 4095), DedupSetID(table: 2, subBucket: 0), DedupSetID(table: 9, subBucket: 0),
        ] {
            #expect(!expiries.isGiven(other, now: now + 59), "\(other)")
        }
        // A minute on, every set is asked for again (a set may have lost its expiry meanwhile).
        for set in sets { #expect(!expiries.isGiven(set, now: now + 60)) }
        expiries.markGiven([sets[2]])
        #expect(expiries.isGiven(sets[2], now: now + 61) && !expiries.isGiven(sets[0], now: now + 61))
        // A clock that steps back forgets too, rather than trusting marks from its future.
        #expect(!expiries.isGiven(sets[2], now: now))
    }
}

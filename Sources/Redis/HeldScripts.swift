/// The scripts of held jobs (design §2.11–§2.13, ``PipelineStore/deferJobs(_:nowMs:enforcingCaps:)``).
///
/// A held slot's scripts (`heldCheck`, `heldStore`, `heldRoom`, `heldUsage`, `heldDue`, `heldRemove`) run over
/// groups of one tag `{<p>:held:<n>}` each: a campaign's sorted set there and the shard's byte counts,
/// `{<p>:held:<n>}:bytes`, campaign → `<bytes> <epoch ms of its last hold>`. A count whose last hold is older
/// than the retention belongs to a sorted set that has expired: it no longer counts, and is removed by
/// the next write. The shard scripts' header: enforce (`1`/`0`), the shard's share of a campaign's cap and
/// of the total, the cost per job beyond its bytes, the retention (ms).
extension Scripts {
    /// Lua shared by the shard scripts, after ``helpers``.
    private static let heldHelpers =
        helpers + #"""
            local function serverMs()
              local t = redis.call('TIME')
              return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            end
            -- The shard's live byte counts: campaign → bytes, and their total; stale ones removed if `prune`.
            local function shardBytes(hash, now, retention, prune)
              local all = redis.call('HGETALL', hash)
              local bytes, total, stale = {}, 0, {}
              for x = 1, #all, 2 do
                local b, at = string.match(all[x + 1], '^(%d+) (%d+)$')
                b, at = tonumber(b), tonumber(at)
                if not b or not at or at + retention < now then
                  stale[#stale + 1] = all[x]
                else
                  bytes[all[x]] = b
                  total = total + b
                end
              end
              if prune and #stale > 0 then redis.call('HDEL', hash, unpack(stale)) end
              return bytes, total
            end
            -- A campaign holding nothing in the shard may hold one job of any size, and a shard holding
            -- nothing one job of any campaign: a cap smaller than a job never stops a campaign for good.
            local function fits(enforce, camp, total, size, campCap, totalCap)
              if not enforce then return true end
              return (camp == 0 or camp + size <= campCap) and (total == 0 or total + size <= totalCap)
            end
            local enforce, campCap, totalCap = ARGV[1] == '1', tonumber(ARGV[2]), tonumber(ARGV[3])
            local overhead, retention = tonumber(ARGV[4]), tonumber(ARGV[5])
            -- The check of `heldCheck` and `heldStore`, per member in order: `E` held already (or earlier in
            -- the group), `F` its shard at a cap (and every later one of the group: a token's jobs keep
            -- their order), else `fit`, counted. Returns the flags, the fitting members' indexes and the
            -- campaign's bytes in the shard with them.
            local function admit(zset, hash, name, members, now, fit)
              local found = mget('ZMSCORE', zset, members)
              local bytes, total = shardBytes(hash, now, retention, true)
              local camp = bytes[name] or 0
              local flags, fitting, full, seen = {}, {}, false, {}
              for j = 1, #members do
                local m = members[j]
                if found[j] or seen[m] then
                  flags[j] = 'E'
                elseif full then
                  flags[j] = 'F'
                else
                  local size = #m + overhead
                  if fits(enforce, camp, total, size, campCap, totalCap) then
                    flags[j] = fit; seen[m] = true
                    fitting[#fitting + 1] = j
                    camp = camp + size; total = total + size
                  else
                    full = true; flags[j] = 'F'
                  end
                end
              end
              return flags, fitting, camp
            end

            """#

    /// Groups: KEYS sorted set, bytes; ARGV campaign, n, n stored members. Per member, in order: `E` held
    /// already, `R` there is room for it, `F` its shard is at a cap (and every later one of the group: a
    /// token's jobs keep their order). Writes nothing (but stale counts).
    static let heldCheck = RedisScript(
        heldHelpers + #"""
            local now = serverMs()
            local out, k, i = {}, 0, 7
            for g = 1, tonumber(ARGV[6]) do
              local zset, hash = KEYS[k + 1], KEYS[k + 2]
              k = k + 2
              local name, n = ARGV[i], tonumber(ARGV[i + 1])
              i = i + 2
              local members = {}
              for j = 1, n do members[j] = ARGV[i + j - 1] end
              i = i + n
              local flags = admit(zset, hash, name, members, now, 'R')
              out[g] = table.concat(flags)
            end
            return out
            """#)

    /// Groups: KEYS sorted set, bytes; ARGV campaign, n, then n × (score, stored member). Stores the members
    /// not held yet while they fit (checked again: another process may have filled the shard since a
    /// check), and counts their bytes. Per member: `N` stored, `E` held already, `F` at a cap. The sorted
    /// set and the counts live the retention from this hold.
    static let heldStore = RedisScript(
        heldHelpers + #"""
            local now = serverMs()
            local out, k, i = {}, 0, 7
            for g = 1, tonumber(ARGV[6]) do
              local zset, hash = KEYS[k + 1], KEYS[k + 2]
              k = k + 2
              local name, n = ARGV[i], tonumber(ARGV[i + 1])
              i = i + 2
              local members, scores = {}, {}
              for j = 1, n do
                scores[j] = ARGV[i + 2 * j - 2]
                members[j] = ARGV[i + 2 * j - 1]
              end
              i = i + 2 * n
              local flags, fitting, camp = admit(zset, hash, name, members, now, 'N')
              local adds = {}
              for _, j in ipairs(fitting) do
                adds[#adds + 1] = scores[j]; adds[#adds + 1] = members[j]
              end
              if #adds > 0 then
                for from = 1, #adds, 1000 do
                  redis.call('ZADD', zset, unpack(adds, from, math.min(#adds, from + 999)))
                end
                redis.call('PEXPIRE', zset, retention)
                redis.call('HSET', hash, name, string.format('%d %d', camp, now))
                redis.call('PEXPIRE', hash, retention)
              end
              out[g] = table.concat(flags)
            end
            return out
            """#)

    /// Groups: KEYS bytes; ARGV n, then n × (campaign, size). Per job `1` when it would fit in the shard now
    /// (each on its own), else `0`. Writes nothing.
    static let heldRoom = RedisScript(
        heldHelpers + #"""
            local now = serverMs()
            local out, i = {}, 7
            for g = 1, tonumber(ARGV[6]) do
              local n = tonumber(ARGV[i])
              i = i + 1
              local bytes, total = shardBytes(KEYS[g], now, retention, false)
              local flags = {}
              for j = 1, n do
                local camp, size = bytes[ARGV[i]] or 0, tonumber(ARGV[i + 1])
                i = i + 2
                flags[j] = fits(enforce, camp, total, size, campCap, totalCap) and '1' or '0'
              end
              out[g] = table.concat(flags)
            end
            return out
            """#)

    /// KEYS: the campaign index, then per deferral its pace key. ARGV: now (ms), the deferrals, then per
    /// deferral: campaign, rate (0: a hold), not-before (ms), the flags of its messages (``heldCheck``'s;
    /// empty for a hold). Lists each campaign that may hold something in `{<p>}:deferred`. Answers per
    /// deferral the slots (ms) of its `R` messages, in order, -1 for a slot due now (admitted, not held);
    /// nothing for a hold.
    ///
    /// Pacing: the pace key holds the campaign's next free slot in microseconds. The `R` messages take
    /// consecutive slots from max(next, now, not-before), 1e6 / rate µs apart; a message held already (`E`)
    /// or at a cap (`F`) takes none. An idle campaign accumulates no credit.
    static let heldReserve = RedisScript(
        #"""
        local now = tonumber(ARGV[1])
        local out, at = {}, 3
        for d = 1, tonumber(ARGV[2]) do
          local name, rate, notBefore, flags = ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), ARGV[at + 3]
          at = at + 4
          local slots, holds = {}, rate == 0
          if rate > 0 then
            local pace = KEYS[1 + d]
            local step = math.floor(1000000 / rate)
            if step < 1 then step = 1 end
            local slot = tonumber(redis.call('GET', pace) or '0')
            if slot < now * 1000 then slot = now * 1000 end
            if slot < notBefore * 1000 then slot = notBefore * 1000 end
            local took = false
            for j = 1, #flags do
              if string.byte(flags, j) == 82 then
                if slot <= now * 1000 then
                  slots[#slots + 1] = -1
                else
                  slots[#slots + 1] = math.floor(slot / 1000)
                  holds = true
                end
                slot = slot + step
                took = true
              end
            end
            if took then redis.call('SET', pace, string.format('%d', slot), 'PX', 86400000) end
          end
          if holds then redis.call('SADD', KEYS[1], name) end
          out[d] = slots
        end
        return out
        """#)

    /// Groups: KEYS one sorted set (a shard's, or an older version's in `{<p>}`); ARGV the most to read.
    /// Header: now (ms). Per group the members due, the earliest first.
    static let heldDue = RedisScript(
        #"""
        local out = {}
        for g = 1, tonumber(ARGV[2]) do
          out[g] = redis.call('ZRANGEBYSCORE', KEYS[g], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2 + g])
        end
        return out
        """#)

    /// Groups: KEYS sorted set, bytes; ARGV campaign, n, n stored members. Header: the cost per job.
    /// Removes the members (those still there) and their bytes; per group the jobs the campaign still holds
    /// in the shard (its count is dropped at 0).
    static let heldRemove = RedisScript(
        helpers + #"""
            local overhead = tonumber(ARGV[1])
            local out, k, i = {}, 0, 3
            for g = 1, tonumber(ARGV[2]) do
              local zset, hash = KEYS[k + 1], KEYS[k + 2]
              k = k + 2
              local name, n = ARGV[i], tonumber(ARGV[i + 1])
              i = i + 2
              if n > 0 then
                local members = {}
                for j = 1, n do members[j] = ARGV[i + j - 1] end
                i = i + n
                local found = mget('ZMSCORE', zset, members)
                local gone, freed = {}, 0
                for j = 1, n do
                  if found[j] then
                    gone[#gone + 1] = members[j]
                    freed = freed + #members[j] + overhead
                  end
                end
                for from = 1, #gone, 500 do
                  redis.call('ZREM', zset, unpack(gone, from, math.min(#gone, from + 499)))
                end
                local current = freed > 0 and redis.call('HGET', hash, name)
                if current then
                  local b, at = string.match(current, '^(%d+) (%d+)$')
                  local left = (tonumber(b) or 0) - freed
                  if left < 0 then left = 0 end
                  redis.call('HSET', hash, name, string.format('%d %s', left, at or '0'))
                end
              end
              local card = redis.call('ZCARD', zset)
              if card == 0 then redis.call('HDEL', hash, name) end
              out[g] = card
            end
            return out
            """#)

    /// KEYS: the campaign index, the campaign's sorted set of an older version. ARGV: campaign, the jobs it
    /// still holds in its shards, the released members of the older set. Removes those; drops the campaign
    /// from the index once it holds nothing anywhere.
    static let heldUnlist = RedisScript(
        #"""
        for from = 3, #ARGV, 500 do
          redis.call('ZREM', KEYS[2], unpack(ARGV, from, math.min(#ARGV, from + 499)))
        end
        if tonumber(ARGV[2]) == 0 and redis.call('ZCARD', KEYS[2]) == 0 then redis.call('SREM', KEYS[1], ARGV[1]) end
        return 1
        """#)

    /// Groups: KEYS bytes, then one sorted set per campaign; ARGV n, n campaigns. Per group, per campaign:
    /// its jobs and bytes in the shard. Writes nothing.
    static let heldUsage = RedisScript(
        #"""
        local out, k, i = {}, 0, 2
        for g = 1, tonumber(ARGV[1]) do
          local hash = KEYS[k + 1]
          local n = tonumber(ARGV[i])
          local r = {}
          for j = 1, n do
            local card = redis.call('ZCARD', KEYS[k + 1 + j])
            local bytes = 0
            if card > 0 then
              local current = redis.call('HGET', hash, ARGV[i + j])
              if current then bytes = tonumber(string.match(current, '^(%d+) ')) or 0 end
            end
            r[#r + 1] = card
            r[#r + 1] = bytes
          end
          k = k + 1 + n
          i = i + 1 + n
          out[g] = r
        end
        return out
        """#)

    /// KEYS: the lock. ARGV: owner, lease ms. 1 when this owner holds it (taken or renewed).
    static let lockRelease = RedisScript(
        #"""
        local holder = redis.call('GET', KEYS[1])
        if holder and holder ~= ARGV[1] then return 0 end
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
        return 1
        """#)

    /// KEYS: the lock. ARGV: owner.
    static let unlockRelease = RedisScript(
        #"""
        if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
        return 1
        """#)
}

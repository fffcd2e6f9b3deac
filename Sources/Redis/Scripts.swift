/// The Lua scripts. Each runs atomically and is one `EVALSHA`: one round trip per batch. Key names are
/// computed in Swift (``RedisKeys``) and passed in, so the layout is spelled in one place. (That, and the
/// mix of per-app and global keys in one call, means these scripts target a single Redis server or
/// primary, not Redis Cluster.)
enum Scripts {
    /// Gate. ARGV: owner, call, lease-ms, heartbeat-prefix, #buckets, bucket-prefix…, #apps,
    /// (suppressed-key registered-key lang-key)…, then per job: lease-key app-index token member sub-bucket.
    /// Returns a flat array: per job a code (1 admitted, 2 deduped, 3 in flight in this process,
    /// 4 suppressed, 5 admitted by taking over the lease of a dead process, 6 in flight in another live
    /// process) and a value: the language for 1 and 5 (nil when none), the lease holder for 6.
    ///
    /// A lease's value is `<owner>/<call>`: the owner is the process (its heartbeat key
    /// `<heartbeat-prefix><owner>` lives while the process does), the call is this gate call, so a retry
    /// of the call after a lost reply recognises (and refreshes) its own leases, while another batch of
    /// the same process holding the id is still in flight. A lease whose owner's heartbeat is gone is
    /// void: that process died between gate and settle, and its job is taken over at once instead of
    /// waiting out the lease.
    static let gate = RedisScript(#"""
        local owner, call, leaseMs, heartbeatPrefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
        local mine = owner .. '/' .. call
        local i = 5
        local nb = tonumber(ARGV[i]); i = i + 1
        local buckets = {}
        for b = 1, nb do buckets[b] = ARGV[i]; i = i + 1 end
        local na = tonumber(ARGV[i]); i = i + 1
        local apps = {}
        for a = 1, na do apps[a] = { ARGV[i], ARGV[i + 1], ARGV[i + 2] }; i = i + 3 end
        local out, admittedInBatch, alive = {}, {}, {}
        while i <= #ARGV do
          local lease, app, token, member, sub = ARGV[i], apps[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
          i = i + 5
          local code, lang = 1, false
          for b = 1, nb do
            if redis.call('SISMEMBER', buckets[b] .. sub, member) == 1 then code = 2; break end
          end
          if code == 1 then
            if admittedInBatch[lease] then
              code = 3
            elseif not redis.call('SET', lease, mine, 'NX', 'PX', leaseMs) then
              local held = redis.call('GET', lease)
              if held == mine then
                -- A retry of this very call (its reply was lost): its own lease.
                redis.call('PEXPIRE', lease, leaseMs)
              else
                local holder = held and string.match(held, '^([^/]+)/')
                if not holder or holder == owner then
                  -- Another batch of this process (or a lease of unknown form): in flight.
                  code = 3
                else
                  -- Another process's lease: void if its heartbeat lapsed (it died). NOTE: the heartbeat
                  -- key is not in the lease's hash slot, so this read is cross-slot under Redis Cluster
                  -- (issue 15 reworks the key layout).
                  if alive[holder] == nil then alive[holder] = redis.call('EXISTS', heartbeatPrefix .. holder) == 1 end
                  if alive[holder] then
                    code = 6; lang = holder
                  else
                    redis.call('SET', lease, mine, 'PX', leaseMs)
                    code = 5
                  end
                end
              end
            end
          end
          if code == 1 or code == 5 then
            local s = redis.call('HGET', app[1], token)
            if s then
              local t = tonumber(string.match(s, '^(%d+)'))
              local r = redis.call('HGET', app[2], token)
              local rt = r and tonumber(r)
              -- Suppressed unless registered strictly after the suppression time.
              if not (t and rt and rt > t) then code = 4; redis.call('DEL', lease) end
            end
          end
          if code == 1 or code == 5 then
            admittedInBatch[lease] = true
            lang = redis.call('HGET', app[3], token)
          end
          out[#out + 1] = code
          out[#out + 1] = lang
        end
        return out
        """#)

    /// Applies one batch of writes; used by settle, suppress, registrations and published counts.
    /// ARGV sections, each led by its entry count:
    ///   marker-key ('' for none), marker-ttl-s;
    ///   #sadd (key member)…;  #expireat (key epoch)…;
    ///   #suppress (hash token epoch value)…      newest time wins;
    ///   #register (reg-hash lang-hash token epoch lang)…  newest time wins; lang '' = keep;
    ///   #del (key)…;  #hincrby (key field delta)…;  #expire (key seconds)…;  #hset (key field value)…
    /// Returns { applied (0 when the marker existed: a replay), largest dedup set touched }.
    static let apply = RedisScript(#"""
        local i = 1
        local function take() local v = ARGV[i]; i = i + 1; return v end
        local marker, markerTTL = take(), take()
        if marker ~= '' and not redis.call('SET', marker, '1', 'NX', 'EX', markerTTL) then
          return { 0, 0 }
        end
        local largest = 0
        for _ = 1, tonumber(take()) do
          local key = take(); local member = take()
          redis.call('SADD', key, member)
          local n = redis.call('SCARD', key)
          if n > largest then largest = n end
        end
        for _ = 1, tonumber(take()) do
          local key = take(); local at = take()
          redis.call('EXPIREAT', key, at)
        end
        for _ = 1, tonumber(take()) do
          local key = take(); local token = take(); local t = tonumber(take()); local value = take()
          local current = redis.call('HGET', key, token)
          local ct = current and tonumber(string.match(current, '^(%d+)'))
          if not ct or t > ct then redis.call('HSET', key, token, value) end
        end
        for _ = 1, tonumber(take()) do
          local reg = take(); local langKey = take(); local token = take(); local ts = take(); local lang = take()
          local t = tonumber(ts)
          local current = redis.call('HGET', reg, token)
          local ct = current and tonumber(current)
          if not ct or t >= ct then
            redis.call('HSET', reg, token, ts)
            if lang ~= '' then redis.call('HSET', langKey, token, lang) end
          end
        end
        for _ = 1, tonumber(take()) do redis.call('DEL', take()) end
        for _ = 1, tonumber(take()) do
          local key = take(); local field = take(); local delta = take()
          redis.call('HINCRBY', key, field, delta)
        end
        for _ = 1, tonumber(take()) do
          local key = take(); local seconds = take()
          redis.call('EXPIRE', key, seconds)
        end
        for _ = 1, tonumber(take()) do
          local key = take(); local field = take(); local value = take()
          redis.call('HSET', key, field, value)
        end
        return { 1, largest }
        """#)
}

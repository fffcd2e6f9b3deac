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

    /// Records published jobs of a campaign. ARGV: marker-key, marker-ttl-s, campaign-hash, messages,
    /// marks-ttl-s, then per job: mark-set member. Adds `messages` to `published` and the number of job
    /// ids never published before (their fingerprint added to a mark set) to `jobs`; every mark set
    /// touched lives marks-ttl-s from now. Returns the number added to `jobs`, or -1 when the marker
    /// existed (a replay of this call: nothing done).
    static let publish = RedisScript(#"""
        if not redis.call('SET', ARGV[1], '1', 'NX', 'EX', ARGV[2]) then return -1 end
        local hash, messages, ttl = ARGV[3], ARGV[4], ARGV[5]
        local new, touched = 0, {}
        for i = 6, #ARGV, 2 do
          new = new + redis.call('SADD', ARGV[i], ARGV[i + 1])
          touched[ARGV[i]] = true
        end
        for key in pairs(touched) do redis.call('EXPIRE', key, ttl) end
        redis.call('HINCRBY', hash, 'published', messages)
        redis.call('HINCRBY', hash, 'jobs', new)
        return new
        """#)

    /// Applies one batch of writes; used by settle, suppress, registrations and published counts.
    /// ARGV sections, each led by its entry count:
    ///   marker-key ('' for none), marker-ttl-s;
    ///   #sadd (key member)…;  #expireat (key epoch)…;
    ///   #suppress (hash token epoch value)…      newest time wins;
    ///   #register (reg-hash lang-hash token epoch lang)…  newest time wins; lang '' = keep;
    ///   #del (key)…;  #hincrby (key field delta)…;  #expire (key seconds)…;  #hset (key field value)…;
    ///   counted-ttl-s, #campaigns (campaign-hash counted-set first-add #accepted #others (field member)…)…
    /// Returns { applied (0 when the marker existed: a replay), largest dedup set touched }.
    ///
    /// The progress section counts each job of a campaign once in the campaign's `jobs_*` fields
    /// (`docs/design.md §4.4`), whatever the redeliveries. An accepted job (its dedup record's entry in
    /// the #sadd section) counts when that SADD added its fingerprint (the id was never accepted before)
    /// and its fingerprint is not in the campaign's counted set; any other outcome counts when the SADD
    /// of its fingerprint to the counted set adds it. So the dedup record is the mark of accepted jobs
    /// (no extra call, no extra byte), the counted set that of the others; one SMISMEMBER per campaign
    /// and batch (when the set exists) checks the accepted ones against it. Swift sends only a job's
    /// first outcome in the batch here (a later one in the same batch cannot be its first settlement).
    static let apply = RedisScript(#"""
        local i = 1
        local function take() local v = ARGV[i]; i = i + 1; return v end
        local marker, markerTTL = take(), take()
        if marker ~= '' and not redis.call('SET', marker, '1', 'NX', 'EX', markerTTL) then
          return { 0, 0 }
        end
        local largest, added = 0, {}
        local addsBase = i  -- the member of add a is ARGV[addsBase + 2a]
        for a = 1, tonumber(take()) do
          local key = take(); local member = take()
          added[a] = redis.call('SADD', key, member)
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
        -- Per-job progress (see above). Per campaign: its accepted jobs' dedup records are the #sadd
        -- entries first-add … first-add + #accepted - 1 (Swift puts them together), so an accepted job
        -- costs no argument here; other outcomes come as (field member).
        local countedTTL = take()
        for _ = 1, tonumber(take()) do
          local hash, counted = take(), take()
          local first, na, no = tonumber(take()), tonumber(take()), tonumber(take())
          local last = first + na - 1
          local counts, total = {}, 0
          local accepted = 0
          if na > 0 and redis.call('EXISTS', counted) == 1 then
            -- Accepted jobs counted before with another outcome (e.g. a dead letter published again):
            -- SMISMEMBER in chunks (Lua's stack), not a call per job.
            local marked = {}
            for from = first, last, 1000 do
              local chunk = {}
              for a = from, math.min(last, from + 999) do chunk[#chunk + 1] = ARGV[addsBase + 2 * a] end
              local found = redis.call('SMISMEMBER', counted, unpack(chunk))
              for k = 1, #chunk do if found[k] == 1 then marked[chunk[k]] = true end end
            end
            for a = first, last do
              if added[a] == 1 and not marked[ARGV[addsBase + 2 * a]] then accepted = accepted + 1 end
            end
          else
            for a = first, last do accepted = accepted + added[a] end
          end
          if accepted > 0 then counts['jobs_accepted'] = accepted; total = accepted end
          for _ = 1, no do
            local field, member = take(), take()
            if redis.call('SADD', counted, member) == 1 then
              counts[field] = (counts[field] or 0) + 1
              total = total + 1
            end
          end
          if no > 0 then redis.call('EXPIRE', counted, countedTTL) end
          for field, n in pairs(counts) do redis.call('HINCRBY', hash, field, n) end
          if total > 0 then redis.call('HINCRBY', hash, 'jobs_settled', total) end
        end
        return { 1, largest }
        """#)
}

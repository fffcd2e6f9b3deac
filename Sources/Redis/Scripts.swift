/// The Lua scripts. Each is one `EVALSHA`; key names are computed in Swift (``RedisKeys``) and every key a
/// script touches comes in `KEYS` (Redis Cluster requires it), referred to from `ARGV` by index.
///
/// A call carries one or more **groups**; every key of a group shares one hash tag (``RedisSlot``). Under
/// Redis Cluster, ``PipelineStore`` sends the groups of one slot per call (to the node owning it); on a
/// single Redis it may send all groups of a batch in one call. Either way the groups and their key lists
/// are the same: the scripts loop over groups and never mix keys of two groups.
///
/// Cost: the scripts make batch-level calls where Redis allows them (HMGET per hash and group,
/// the leases as fields of one hash per group: one HMGET, one HSET and, in the settle, one HDEL; one
/// SCARD per group; a dedup set's EXPIREAT once per process and minute), and take no index argument per
/// job, so the per-job calls are the dedup probes and the dedup record's SADD. Redis's cost per call (a
/// Lua `redis.call` or a pipelined command alike, ~1–1.5 µs on the 2-core test machine) makes those most of
/// what is left.
enum Scripts {
    /// Lua helpers shared by the scripts (prepended to their source), after the constants of the
    /// settle's add flags (``DedupAddFlag``).
    static let helpers = DedupAddFlag.luaConstants + helperFunctions

    private static let helperFunctions = #"""
        -- Globals read once per call: each use of a global is a table lookup, of a local a register
        -- (in the per-job loops that is measurable: ops/bench e2e's redis-server row).
        local rcall, tonumber, unpack, KEYS, ARGV = redis.call, tonumber, unpack, KEYS, ARGV
        local function mget(cmd, key, fields, n)
          -- HMGET (or any multi-field read) of fields[1..n] (n: #fields when not given) in chunks: Lua's C
          -- stack limits unpack(). A group's fields usually fit in one call, whose reply is the answer as
          -- it is (no copy per field).
          n = n or #fields
          if n == 0 then return {} end
          if n <= 1000 then return rcall(cmd, key, unpack(fields, 1, n)) end
          local out = {}
          for from = 1, n, 1000 do
            local got = rcall(cmd, key, unpack(fields, from, math.min(n, from + 999)))
            for x = 1, #got do out[from + x - 1] = got[x] end
          end
          return out
        end
        local function delAll(keys)
          for from = 1, #keys, 1000 do
            local chunk = {}
            for x = from, math.min(#keys, from + 999) do chunk[#chunk + 1] = keys[x] end
            rcall('DEL', unpack(chunk))
          end
        end

        """#

    /// Gate. ARGV: owner, call, lease-ms, #probes, #groups, then per group: #jobs, #voids, wants (a
    /// bitmask: 1 when a job of the group has localized alerts, else no language is read; 2 when the
    /// audience rules need the recipients' registered profiles, else none is read), then
    /// (job-index void-lease)… for the leases Swift found void, then per job: token (empty for a broadcast:
    /// no suppression, registration or language is read for it), member. KEYS per group:
    /// suppressed, registered, lang, inflight (the group's lease hash), then per job its #probes dedup keys
    /// (its sub-bucket in each live time bucket, newest first; a key repeats when two jobs share a set),
    /// then, with wants bit 2, the group's profile hash.
    /// Returns per group { codes, (job-index value)… }: codes has a digit per job, a ``GateAnswer`` (its
    /// Lua constants are generated from that enum: `ADMITTED`, `DEDUPED`, …); the values are the language
    /// for admitted and taken-over jobs (when there is one) and the lease's value for a job in flight
    /// in another process; under the negative job index, an admitted job's stored profile.
    ///
    /// Leases are fields of the tag's hash `inflight` (job fingerprint → `<owner>/<call>/<expiry ms>`, the
    /// expiry on the server's clock, `TIME`): one HMGET and one HSET per group instead of a key, a `SET NX
    /// PX` and a `DEL` per job. A lease past its expiry is free. The owner is the process, the
    /// call this gate call, so a retry of the call after a lost reply recognises (and refreshes) its own
    /// leases, while another batch of the same process holding the id is still in flight. Whether another
    /// owner is alive (its heartbeat key) is not read here: that key is in no job's slot. The script
    /// answers 6 with the lease's value; Swift reads the heartbeats and, for a dead owner, gates the job
    /// again with that value as its void lease: the lease is taken over only if it still holds exactly
    /// that value (so a lease renewed or re-taken in between is never stolen). The hash itself expires
    /// with its longest lease (a write extends its expiry, never shortens it), and each write samples two fields and deletes them if expired (a
    /// crashed process's lease whose job never comes back), so it holds little more than the leases in
    /// flight.
    static let gate = RedisScript(
        helpers + GateAnswer.luaConstants + #"""
            local match, ssub = string.match, string.sub
            local owner, call, leaseMs, nb = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
            local mine = owner .. '/' .. call .. '/'
            local nmine = #mine
            local time = rcall('TIME')
            local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
            local lease = mine .. (nowMs + leaseMs)
            local function expired(value)
              local at = tonumber(match(value, '/(%d+)$'))
              return not at or at <= nowMs
            end
            local out = {}
            local k, i = 0, 6
            for g = 1, tonumber(ARGV[5]) do
              local nj, nv, wants = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
              local wantsLanguage, wantsProfile = wants % 2 == 1, wants >= 2
              i = i + 3
              local supKey, regKey, langKey, leaseKey = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
              k = k + 4
              local voids
              if nv > 0 then
                voids = {}
                for _ = 1, nv do voids[tonumber(ARGV[i])] = ARGV[i + 1]; i = i + 2 end
              end
              local base = i
              -- Dedup: the job's probes, newest bucket first; the jobs not found go on. Job j's token is
              -- ARGV[base + 2j - 2], its member ARGV[base + 2j - 1].
              local codes, open, members, no = {}, {}, {}, 0
              for j = 1, nj do
                local member, code = ARGV[i + 1], ADMITTED
                for b = k + 1, k + nb do
                  if rcall('SISMEMBER', KEYS[b], member) == 1 then code = DEDUPED; break end
                end
                k = k + nb
                codes[j] = code
                if code == ADMITTED then no = no + 1; open[no] = j; members[no] = member end
                i = i + 2
              end
              -- The profile hash, last of the group's keys, only when a rule asks for it.
              local profileKey
              if wantsProfile then k = k + 1; profileKey = KEYS[k] end
              local values, result = {}, {}
              if no > 0 then
                -- Leases: one HMGET for the group.
                local held = mget('HMGET', leaseKey, members, no)
                local firstOf, dupOf = {}, nil
                local cands, candMembers, tokens, nc, hasChannel = {}, {}, {}, 0, false
                for x = 1, no do
                  local j, member, h = open[x], members[x], held[x]
                  local free = not h
                  if firstOf[member] then
                    free = false; codes[j] = IN_FLIGHT; dupOf = dupOf or {}; dupOf[j] = firstOf[member]
                  elseif h then
                    if expired(h) or ssub(h, 1, nmine) == mine then
                      -- Lapsed, or this very call's own (a retry after a lost reply).
                      free = true
                    elseif voids and voids[j] == h then
                      -- Swift found this holder dead; the lease is unchanged since: take it over.
                      free = true; codes[j] = TAKEN_OVER
                    else
                      local holder = match(h, '^([^/]+)/')
                      if not holder or holder == owner then codes[j] = IN_FLIGHT else codes[j] = IN_FLIGHT_ELSEWHERE; values[j] = h end
                    end
                  end
                  if free then
                    firstOf[member] = j
                    nc = nc + 1
                    local t = ARGV[base + 2 * j - 2]
                    cands[nc] = j; candMembers[nc] = member; tokens[nc] = t
                    if t == '' then hasChannel = true end
                  end
                end
                if nc > 0 then
                  -- Suppressed unless registered strictly after the suppression time: one HMGET for the group,
                  -- of the jobs with a token (a broadcast's is empty: a channel is never suppressed). A group
                  -- without broadcasts, nearly every one, reads its tokens as they are.
                  local probeX, probeTokens, np = nil, tokens, nc
                  if hasChannel then
                    probeX, probeTokens, np = {}, {}, 0
                    for x = 1, nc do
                      if tokens[x] ~= '' then np = np + 1; probeX[np] = x; probeTokens[np] = tokens[x] end
                    end
                  end
                  local suppressed
                  if np > 0 then
                    local sup = mget('HMGET', supKey, probeTokens, np)
                    local supX, supTimes, regFields, ns = nil, nil, nil, 0
                    for y = 1, np do
                      if sup[y] then
                        if ns == 0 then supX, supTimes, regFields = {}, {}, {} end
                        ns = ns + 1
                        local x = probeX and probeX[y] or y
                        supX[ns] = x
                        supTimes[ns] = tonumber(match(sup[y], '^(%d+)'))
                        regFields[ns] = tokens[x]
                      end
                    end
                    if ns > 0 then
                      suppressed = {}
                      local reg = mget('HMGET', regKey, regFields, ns)
                      for y = 1, ns do
                        local t, rt = supTimes[y], reg[y] and tonumber(reg[y])
                        if not (t and rt and rt > t) then suppressed[supX[y]] = true; codes[cands[supX[y]]] = SUPPRESSED end
                      end
                    end
                  end
                  local leased, leasedTokens, nl = cands, tokens, nc
                  local writes, nw = {}, 0
                  if suppressed then
                    leased, leasedTokens, nl = {}, {}, 0
                    for x = 1, nc do
                      if not suppressed[x] then nl = nl + 1; leased[nl] = cands[x]; leasedTokens[nl] = tokens[x] end
                    end
                  end
                  for x = 1, nc do
                    if not (suppressed and suppressed[x]) then
                      writes[nw + 1] = candMembers[x]; writes[nw + 2] = lease; nw = nw + 2
                    end
                  end
                  if nw > 0 then
                    for from = 1, nw, 1000 do
                      rcall('HSET', leaseKey, unpack(writes, from, math.min(nw, from + 999)))
                    end
                    -- The hash outlives its longest lease (processes may run with different lease lengths):
                    -- extend its expiry, or give it one if it has none (just created; -1). PTTL rather than
                    -- PEXPIRE's GT/NX options, which need Redis 7.0 (a single Redis may be 6.2).
                    if rcall('PTTL', leaseKey) < leaseMs then rcall('PEXPIRE', leaseKey, leaseMs) end
                    local sample = rcall('HRANDFIELD', leaseKey, 2, 'WITHVALUES')
                    for x = 1, #sample, 2 do
                      if expired(sample[x + 1]) then rcall('HDEL', leaseKey, sample[x]) end
                    end
                    if wantsProfile then
                      -- Who the recipients are (the audience rules): under the negative index.
                      local profileX, profileTokens, npr = {}, {}, 0
                      for x = 1, nl do
                        if leasedTokens[x] ~= '' then npr = npr + 1; profileX[npr] = x; profileTokens[npr] = leasedTokens[x] end
                      end
                      if npr > 0 then
                        local profiles = mget('HMGET', profileKey, profileTokens, npr)
                        for y = 1, npr do if profiles[y] then values[-leased[profileX[y]]] = profiles[y] end end
                      end
                    end
                    if not wantsLanguage then
                      -- No job of the group has localized alerts: a language would change nothing.
                    elseif not hasChannel then
                      local langs = mget('HMGET', langKey, leasedTokens, nl)
                      for x = 1, nl do
                        local l = langs[x]
                        if l then values[leased[x]] = l end
                      end
                    else
                      local langX, langTokens, nt = {}, {}, 0
                      for x = 1, nl do
                        if leasedTokens[x] ~= '' then nt = nt + 1; langX[nt] = x; langTokens[nt] = leasedTokens[x] end
                      end
                      if nt > 0 then
                        local langs = mget('HMGET', langKey, langTokens, nt)
                        for y = 1, nt do if langs[y] then values[leased[langX[y]]] = langs[y] end end
                      end
                    end
                  end
                end
                -- A second copy in the call shares the fate of the first when that one was suppressed.
                if dupOf then
                  for j, first in pairs(dupOf) do
                    if codes[first] == SUPPRESSED then codes[j] = SUPPRESSED end
                  end
                end
              end
              result[1] = table.concat(codes)
              local nr = 1
              for j, v in pairs(values) do result[nr + 1] = j; result[nr + 2] = v; nr = nr + 2 end
              out[g] = result
            end
            return out
            """#)

    /// The writes of one tag: a settle batch's part (dedup records, lease releases, suppressions) or
    /// registrations and suppressions. ARGV from `i`: marker-ttl-s, #groups, then per group: has-marker
    /// ('1'/'0'), #adds, #expire, #releases, #suppress, #register, dedup-expire-at, then the adds' members,
    /// the other released members, the add-indexes whose set gets its expiry, (token epoch value)…,
    /// (token epoch lang profile)…. KEYS per group: [marker], suppressed, registered, lang, inflight,
    /// [profile, when #register > 0], then one dedup key per add (repeated when two adds share a set).
    ///
    /// Every add's member is also released (an accepted job held a lease), with the other released
    /// members, in one HDEL. A dedup set's expiry is the end of its time bucket + the retention, the same
    /// for every write: Swift asks for it once per set and minute (``DedupExpiries``), not per job.
    ///
    /// Returns per group { flags, sampled set size }: flags has a ``DedupAddFlag`` digit per add, `ADDED`
    /// ('1') when its SADD added the member (the job id was never accepted before), else `NOT_ADDED`
    /// ('0'). With a marker, the first run stores flags
    /// in it and a replay (the marker exists) writes nothing and returns the stored flags: so a settle
    /// retried after a crash between its parts still counts each job exactly once.
    /// Suppressions: the newest time wins. Registrations: written when at least as new as the stored one;
    /// lang '' = keep; profile (`<time zone>\n<user>`, the recipient's, ``RedisKeys/profile(tag:)``) '' =
    /// keep, else it replaces the stored one whole.
    private static let tagWritesFunction = #"""
        local function tagWrites(k, i)
          local markerTTL = ARGV[i]
          local out, starts = {}, {}
          local ng = tonumber(ARGV[i + 1])
          i = i + 2
          for g = 1, ng do
            local hasMarker = ARGV[i] == '1'
            local nAdd, nExp, nRel, nSup, nReg = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
            local expireAt = ARGV[i + 6]
            i = i + 7
            local marker
            if hasMarker then k = k + 1; marker = KEYS[k] end
            local supKey, regKey, langKey, leaseKey = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
            local dk, profileKey = k + 4, nil
            -- The profile hash comes only with registrations (a settle part, nearly every group, has none).
            if nReg > 0 then profileKey = KEYS[k + 5]; dk = k + 5 end
            k = dk + nAdd
            starts[g] = i
            local stored = marker and rcall('GET', marker)
            if stored then
              -- 'a': every add added (the usual case, stored in one byte); else 'r' and the flags.
              out[g] = { stored == 'a' and string.rep(ADDED, nAdd) or string.sub(stored, 2), 0 }
              i = i + nAdd + nExp + nRel + 3 * nSup + 4 * nReg
            else
              -- flags: made at the first add that added nothing (nearly every add adds).
              local flags, sample, allAdded = nil, 0, true
              for a = 1, nAdd do
                local key = KEYS[dk + a]
                if rcall('SADD', key, ARGV[i + a - 1]) == 1 then
                  if flags then flags[a] = ADDED end
                  -- One set per group and batch is enough to notice sets outgrowing the intset encoding.
                  if sample == 0 then sample = rcall('SCARD', key) end
                else
                  if not flags then flags = {}; for b = 1, a - 1 do flags[b] = ADDED end end
                  flags[a] = NOT_ADDED; allAdded = false
                end
              end
              -- The leases of the batch's jobs, the adds' members then the others (contiguous in ARGV):
              -- one HDEL straight from ARGV.
              local released = nAdd + nRel
              for from = i, i + released - 1, 1000 do
                rcall('HDEL', leaseKey, unpack(ARGV, from, math.min(i + released - 1, from + 999)))
              end
              i = i + released
              for _ = 1, nExp do rcall('EXPIREAT', KEYS[dk + tonumber(ARGV[i])], expireAt); i = i + 1 end
              for _ = 1, nSup do
                local token, t, value = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
                i = i + 3
                local current = rcall('HGET', supKey, token)
                local ct = current and tonumber(string.match(current, '^(%d+)'))
                if not ct or t > ct then rcall('HSET', supKey, token, value) end
              end
              for _ = 1, nReg do
                local token, ts, lang, profile = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
                i = i + 4
                local current = rcall('HGET', regKey, token)
                local ct = current and tonumber(current)
                if not ct or tonumber(ts) >= ct then
                  rcall('HSET', regKey, token, ts)
                  if lang ~= '' then rcall('HSET', langKey, token, lang) end
                  if profile ~= '' then rcall('HSET', profileKey, token, profile) end
                end
              end
              local result = allAdded and string.rep(ADDED, nAdd) or table.concat(flags)
              if marker then
                rcall('SET', marker, allAdded and 'a' or 'r' .. result, 'EX', markerTTL)
              end
              out[g] = { result, sample }
            end
          end
          return out, k, i, starts
        end

        """#

    /// The counters of a batch, all in the tag `{<p>}`. ARGV from `i`: has-marker, marker-ttl-s,
    /// #hincrby (key-index field delta)…, #expire (key-index seconds)…, #hset (key-index field value)…,
    /// counted-ttl-s, #campaigns (hash-index counted-index #ranges #members #others (group from to)…
    /// [the members as one argument `m1,m2,…`, when #members > 0] (field member)…)…. KEYS from `k`: [marker], then the keys the indexes name (1 = the first
    /// after the marker). Returns 1, or 0 when the marker existed (a replay: nothing done).
    ///
    /// Per-job progress (`docs/design.md §4.4`): each job of a campaign counts once in `jobs_*`. An accepted
    /// job counts when the SADD of its dedup record added it and its fingerprint is not in the campaign's
    /// counted set (one SMISMEMBER per campaign and batch, only when that set exists). The accepted jobs
    /// come as ranges of add positions of a tag part that ran in the same script (`tagOut[group]`'s flags;
    /// the members are read from that part's ARGV, `starts[group]`): no argument per job. On the cluster
    /// path the parts ran in earlier calls: Swift resolved their flags and sends the added members. Any
    /// other outcome counts when its fingerprint is not in the counted set yet (one SMISMEMBER and one SADD
    /// per campaign and batch; Swift sends a job id once per batch and campaign).
    private static let countersFunction = #"""
        local function counters(k, i, tagOut, starts)
          local function take() local v = ARGV[i]; i = i + 1; return v end
          local hasMarker, markerTTL = take() == '1', take()
          if hasMarker then
            k = k + 1
            if not rcall('SET', KEYS[k], '1', 'NX', 'EX', markerTTL) then return 0 end
          end
          for _ = 1, tonumber(take()) do
            local key = KEYS[k + tonumber(take())]; local field = take(); local delta = take()
            rcall('HINCRBY', key, field, delta)
          end
          for _ = 1, tonumber(take()) do
            local key = KEYS[k + tonumber(take())]; local seconds = take()
            rcall('EXPIRE', key, seconds)
          end
          for _ = 1, tonumber(take()) do
            local key = KEYS[k + tonumber(take())]; local field = take(); local value = take()
            rcall('HSET', key, field, value)
          end
          local countedTTL = take()
          for _ = 1, tonumber(take()) do
            local hash, counted = KEYS[k + tonumber(take())], KEYS[k + tonumber(take())]
            local nr, nm, no = tonumber(take()), tonumber(take()), tonumber(take())
            local ranges = {}
            for r = 1, 3 * nr do ranges[r] = tonumber(take()) end
            local packed = nm > 0 and take() or ''
            local accepted = nm
            for r = 1, 3 * nr, 3 do
              local _, ones = string.gsub(string.sub(tagOut[ranges[r]][1], ranges[r + 1], ranges[r + 2]), ADDED, '')
              accepted = accepted + ones
            end
            local counts, total = {}, 0
            if accepted > 0 and rcall('EXISTS', counted) == 1 then
              -- Accepted jobs counted before with another outcome (e.g. a dead letter published again).
              local added = {}
              for m in string.gmatch(packed, '[^,]+') do added[#added + 1] = m end
              for r = 1, 3 * nr, 3 do
                local flags, start = tagOut[ranges[r]][1], starts[ranges[r]]
                for a = ranges[r + 1], ranges[r + 2] do
                  if string.byte(flags, a) == ADDED_BYTE then added[#added + 1] = ARGV[start + a - 1] end
                end
              end
              local found = mget('SMISMEMBER', counted, added)
              accepted = 0
              for x = 1, #added do if found[x] == 0 then accepted = accepted + 1 end end
            end
            if accepted > 0 then counts['jobs_accepted'] = accepted; total = accepted end
            if no > 0 then
              local fields, members = {}, {}
              for o = 1, no do fields[o] = take(); members[o] = take() end
              local found = mget('SMISMEMBER', counted, members)
              local new = {}
              for o = 1, no do
                if found[o] == 0 then
                  counts[fields[o]] = (counts[fields[o]] or 0) + 1
                  total = total + 1
                  new[#new + 1] = members[o]
                end
              end
              for from = 1, #new, 1000 do rcall('SADD', counted, unpack(new, from, math.min(#new, from + 999))) end
              rcall('EXPIRE', counted, countedTTL)
            end
            for field, n in pairs(counts) do rcall('HINCRBY', hash, field, n) end
            if total > 0 then rcall('HINCRBY', hash, 'jobs_settled', total) end
          end
          return 1
        end

        """#

    /// ``tagWritesFunction`` as a script: ARGV and KEYS as described there, from the first.
    static let tagWrites = RedisScript(
        helpers + tagWritesFunction + #"""
            local out = tagWrites(0, 1)
            return out
            """#)

    /// ``countersFunction`` as a script; the accepted jobs' groups are 0 (resolved by Swift).
    static let counters = RedisScript(
        helpers + countersFunction + #"""
            return counters(0, 1, {}, {})
            """#)

    /// A whole settle batch in one call, for a single Redis (which lets one script touch many slots):
    /// KEYS[1] the counters' marker, then the tag parts then the counters, KEYS and ARGV of
    /// ``tagWritesFunction`` followed by those of ``countersFunction``: the key lists the cluster path
    /// sends in separate calls (the parts here without markers of their own). Returns { tag parts'
    /// results, counters' result }, or { {}, 0 } when the marker exists (a replay: nothing written, not
    /// even a lease released that another process may hold since).
    static let settle = RedisScript(
        helpers + tagWritesFunction + countersFunction + #"""
            if rcall('EXISTS', KEYS[1]) == 1 then return { {}, 0 } end
            local tagOut, k, i, starts = tagWrites(1, 1)
            return { tagOut, counters(k, i, tagOut, starts) }
            """#)

    /// Records published jobs of a campaign; every key in the tag `{<p>}`. KEYS: marker, campaign hash,
    /// then the mark sets. ARGV: marker-ttl-s, messages, marks-ttl-s, #expire, the mark-set-indexes to
    /// give their expiry (Swift asks once per set and minute), then per mark set: its index (1 = the first
    /// mark set), #members, the members (one SADD per set). Adds `messages` to `published` and the number of job ids never published
    /// before (their fingerprint added to a mark set) to `jobs`; the sets named live marks-ttl-s from
    /// now. Returns the number added to `jobs`, or -1 when the marker existed (a replay of this call:
    /// nothing done).
    static let publish = RedisScript(
        #"""
        if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return -1 end
        local hash, messages, ttl, nExp = KEYS[2], ARGV[2], ARGV[3], tonumber(ARGV[4])
        local new = 0
        local i = 5 + nExp
        while i <= #ARGV do
          local n = tonumber(ARGV[i + 1])
          new = new + redis.call('SADD', KEYS[2 + tonumber(ARGV[i])], unpack(ARGV, i + 2, i + 1 + n))
          i = i + 2 + n
        end
        for x = 5, 4 + nExp do redis.call('EXPIRE', KEYS[2 + tonumber(ARGV[x])], ttl) end
        redis.call('HINCRBY', hash, 'published', messages)
        redis.call('HINCRBY', hash, 'jobs', new)
        return new
        """#)

    /// A gate call's written mark, fenced by the heartbeat it was gated under (design §2.4). KEYS: the
    /// owner's heartbeat, the mark (one slot: the mark's tag is the heartbeat's key). ARGV: the heartbeat's
    /// value when the call was gated (empty: set the mark whatever it holds), lease ms. 0 when the
    /// heartbeat holds another value or none: it lapsed since, so another process may have taken the
    /// call's jobs over and read no mark. Set after that, the mark would let the call be written
    /// uncounted (ops/fleet: a host cut off 15 s sent ~3 000 duplicates, ~1 400 uncounted).
    static let markWritten = RedisScript(
        #"""
        if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
        redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
        return 1
        """#)
}

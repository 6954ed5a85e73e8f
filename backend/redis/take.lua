-- ratelimitd: decide calls on their counters, atomically. A port of
-- backend.State (backend/algorithm.go) and of the call rules of
-- backend.Decide, decision for decision: every number is a double, as
-- Go's float64 arithmetic there is, and times are whole microseconds
-- since the Unix epoch.
--
-- The protocol's constants are named in script.go; this table mirrors
-- them, and TestScriptProtocol checks that the two agree.
local P = {
  -- ops
  TAKE = 0, -- decide each call whole
  PART = 1, -- decide a Cluster slot's share as if the call were admitted; return stamps
  REFUND = 2, -- give back hits that PART took, and report the results afresh
  -- a record's flags: the algorithm + MODE_SHIFT * the mode, plus
  -- CWO (consume_when_over), and on REFUND GIVE (give back its hits) and
  -- WAS_OVER (the request was over)
  MODE_SHIFT = 8, CWO = 32, GIVE = 64, WAS_OVER = 128,
  -- algorithms and modes
  SLIDING = 0, FIXED = 1, LOG = 2, BUCKET = 3, GCRA = 4,
  ENFORCE = 0, SHADOW = 1, QUOTA = 2,
  -- binary formats (struct, little-endian)
  HEADER = '<BdI4', -- op, now (µs; 0: read Redis TIME), number of calls
  CALL = '<I4', -- a call's number of requests; its records follow
  RECORD = '<BI4I4I4dddd', -- flags, requests, burst, group, window µs, hits, stamp, GCRA interval µs
  RESULT = '<Bddd', -- over, remaining, reset µs, retry µs
  STAMPED = '<Bdddd', -- RESULT and the stamp a refund needs (PART)
  STATE = '<ddd', -- a counter's value: T, N, P (tokens in N for token_bucket)
  LOG_HEADER = '<d', -- a sliding log's first element: the sum of its hits
  LOG_ENTRY = '<dd', -- each further element: time, hits; oldest first
  MAX_LOG = 10000,
}
local MAX_T = 2^62 -- saturation of times, as Go saturates int64 math

-- KEYS: one counter key per request, calls one after the other (a key may
-- repeat: one counter). ARGV[1]: HEADER, then per call CALL and its
-- records. The reply is a string: RESULT (STAMPED on PART) per request.
--
-- Counters: a key holds STATE, or for sliding_log a list: LOG_HEADER,
-- then LOG_ENTRY per instant that counted hits. A log's header may be
-- missing (a script cut short between two writes): its sum is then
-- recounted. The key's layout version, algorithm and window are in the
-- key itself.

local floor, min, max, fmod = math.floor, math.min, math.max, math.fmod
local unpack, pack = struct.unpack, struct.pack
local SLIDING, FIXED, LOG, BUCKET, GCRA = P.SLIDING, P.FIXED, P.LOG, P.BUCKET, P.GCRA
local ENFORCE, QUOTA = P.ENFORCE, P.QUOTA
local MAX_LOG = P.MAX_LOG

local blob = ARGV[1]
local op, now, ncalls, off = unpack(P.HEADER, blob)
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The requests of the call being decided, by index: reused from call to
-- call, so that a batch builds no table per request.
local K, ALG, MODE, CWO, GIVE, WASO = {}, {}, {}, {}, {}, {}
local R, B, G, W, H, STAMP, IV = {}, {}, {}, {}, {}, {}, {}
local OVER, GOVER, TOOK = {}, {}, {}

-- States, one per distinct key, loaded on first use and kept for the
-- whole run: later calls of a batch see earlier ones. A window's state
-- is {t, n, p}; a log's is {log = true, n, len, hdr, first}.
local states = {}
local dirty, ndirty = {}, 0

-- log_at returns the list index of a log's i-th entry (0 is the oldest).
local function log_at(st, i)
  if st.hdr then return i + 1 end
  return i
end

-- log_entries returns the entries i..j (0-based, inclusive) of a log.
local function log_entries(st, key, i, j)
  return redis.call('LRANGE', key, log_at(st, i), log_at(st, j))
end

local function load(i)
  local key = K[i]
  local st = states[key]
  if st then return st end
  if ALG[i] == LOG then
    st = { log = true, n = 0, len = 0, hdr = false }
    local first = redis.pcall('LINDEX', key, 0)
    if type(first) == 'table' then
      redis.call('DEL', key) -- not a list: a fresh log
    elseif first then
      st.len = redis.call('LLEN', key)
      if #first == 8 then
        st.hdr, st.len = true, st.len - 1
        st.n = unpack(P.LOG_HEADER, first)
      else
        -- The header is missing: recount.
        for _, e in ipairs(redis.call('LRANGE', key, 0, -1)) do
          local _, c = unpack(P.LOG_ENTRY, e)
          st.n = st.n + c
        end
        st.changed = true
      end
    end
  else
    st = { t = 0, n = 0, p = 0 }
    local v = redis.pcall('GET', key)
    if type(v) == 'string' and #v == 24 then
      st.t, st.n, st.p = unpack(P.STATE, v)
    end
  end
  st.key = key
  states[key] = st
  return st
end

-- mark records that st must be saved under request i's limit.
local function mark(st, i)
  st.alg, st.w, st.r, st.b = ALG[i], W[i], R[i], B[i]
  if not st.dirty then
    st.dirty = true
    ndirty = ndirty + 1
    dirty[ndirty] = st
  end
end

-- log_oldest returns the time and hits of a log's oldest entry.
local function log_oldest(st)
  if not st.first then
    st.first = { unpack(P.LOG_ENTRY, redis.call('LINDEX', st.key, log_at(st, 0))) }
  end
  return st.first[1], st.first[2]
end

-- log_newest returns the time and hits of a log's newest entry, or 0, 0.
local function log_newest(st)
  if st.len == 0 then return 0, 0 end
  local t, c = unpack(P.LOG_ENTRY, redis.call('LINDEX', st.key, -1))
  return t, c
end

-- advance brings st to at without changing any decision. A log drops its
-- expired entries from Redis: only ever at now.
local function advance(st, i, at)
  local a, w = ALG[i], W[i]
  if a == FIXED or a == SLIDING then
    local start = at - fmod(at, w)
    if start <= st.t then return end
    if a == SLIDING and start == st.t + w then st.p = st.n else st.p = 0 end
    st.t, st.n = start, 0
  elseif a == LOG then
    local k = 0
    while k < st.len do
      local t, c = log_oldest(st)
      if t > at - w then break end
      st.n = max(st.n - c, 0)
      k = k + 1
      if k < st.len then
        st.first = { unpack(P.LOG_ENTRY, redis.call('LINDEX', st.key, log_at(st, k))) }
      end
    end
    if k > 0 then
      -- Drop the header too; save writes it back.
      redis.call('LTRIM', st.key, log_at(st, k), -1)
      st.len, st.hdr, st.first, st.changed = st.len - k, false, nil, true
      if st.len == 0 then st.first = nil end
    end
  elseif a == BUCKET then
    if st.t == 0 then
      st.t, st.n = at, B[i] -- a fresh bucket starts full; n holds the tokens
    elseif at > st.t then
      st.n = min(B[i], st.n + (at - st.t) * R[i] / w)
      st.t = at
    end
  end
end

local function weighted_prev(st, i, at)
  local w = W[i]
  local elapsed = min(max(at - st.t, 0), w)
  return st.p * (w - elapsed) / w
end

-- log_admits reports whether a log would admit hits at x > now, without
-- changing it: the entries that x - w expires no longer count.
local function log_admits(st, i, x, hits)
  local n, k = st.n, 0
  while k < st.len do
    local chunk = log_entries(st, st.key, k, min(k + 63, st.len - 1))
    for _, e in ipairs(chunk) do
      local t, c = unpack(P.LOG_ENTRY, e)
      if t > x - W[i] then return n + hits <= R[i] end
      n = max(n - c, 0)
    end
    k = k + #chunk
  end
  return n + hits <= R[i]
end

local function admits(st, i, at, hits)
  if R[i] == 0 then return false end
  local a = ALG[i]
  if a == LOG and at > now then return log_admits(st, i, at, hits) end
  advance(st, i, at)
  if a == FIXED or a == LOG then
    return st.n + hits <= R[i]
  elseif a == SLIDING then
    return st.n + hits + weighted_prev(st, i, at) <= R[i]
  elseif a == BUCKET then
    return st.n >= hits
  elseif a == GCRA then
    if hits > B[i] then return false end
    return max(st.t, at) - at <= (B[i] - hits) * IV[i]
  end
  return false
end

-- add counts hits without checking the limit; it returns the stamp a
-- refund needs: the window's start, or the log entry's time.
local function add(st, i, hits)
  if R[i] == 0 or hits == 0 then return 0 end
  advance(st, i, now)
  local a = ALG[i]
  if a == FIXED or a == SLIDING then
    st.n = st.n + hits
    return st.t
  elseif a == LOG then
    local last, c = log_newest(st)
    local t = max(now, last)
    if st.len > 0 and (last == t or st.len == MAX_LOG) then
      redis.call('LSET', st.key, -1, pack(P.LOG_ENTRY, t, c + hits))
      if st.len == 1 then st.first = nil end
    else
      redis.call('RPUSH', st.key, pack(P.LOG_ENTRY, t, hits))
      st.len = st.len + 1
      if st.len == 1 then st.first = nil end
    end
    st.n = st.n + hits
    st.changed = true
    return t
  elseif a == BUCKET then
    st.n = st.n - hits
  elseif a == GCRA then
    st.t = min(max(st.t, now) + hits * IV[i], MAX_T)
  end
  return 0
end

-- refund gives back hits that add counted at stamp, if they still count.
local function refund(st, i, hits, stamp)
  if R[i] == 0 or hits == 0 then return end
  advance(st, i, now)
  local a = ALG[i]
  if a == FIXED or a == SLIDING then
    if st.t == stamp then st.n = max(st.n - hits, 0) end
  elseif a == LOG then
    -- Newest first: the entry is most likely the newest.
    local k = st.len
    while k > 0 do
      local from = max(k - 64, 0)
      local chunk = log_entries(st, st.key, from, k - 1)
      for j = #chunk, 1, -1 do
        local t, c = unpack(P.LOG_ENTRY, chunk[j])
        if t == stamp then
          local back = min(hits, c)
          st.n = max(st.n - back, 0)
          st.changed = true
          if c - back == 0 then
            redis.call('LREM', st.key, -1, chunk[j])
            st.len, st.first = st.len - 1, nil
          else
            redis.call('LSET', st.key, log_at(st, from + j - 1), pack(P.LOG_ENTRY, t, c - back))
            if from + j - 1 == 0 then st.first = nil end
          end
          return
        end
      end
      k = from
    end
  elseif a == BUCKET then
    st.n = min(st.n + hits, B[i])
  elseif a == GCRA then
    st.t = max(st.t - hits * IV[i], now)
  end
end

local function ceil_div(tokens, i)
  if tokens <= 0 then return 0 end
  return math.ceil(tokens * W[i] / R[i])
end

local function window_end(i, at)
  return at - fmod(at, W[i]) + W[i]
end

-- retry_at returns the first instant from which hits more would be
-- admitted, or false if hits exceed what the limit can ever admit.
local function retry_at(st, i, hits)
  local a, w, r = ALG[i], W[i], R[i]
  if a == FIXED then
    return st.t + w, hits <= r
  elseif a == SLIDING then
    if hits > r then return 0, false end
    local t, prev, room = st.t, st.p, 0
    if st.n + hits <= r then
      room = r - (st.n + hits)
    else
      t, prev, room = st.t + w, st.n, r - hits
    end
    if prev == 0 then return t, true end
    return t + w - floor(min(room * w / prev, w)), true
  elseif a == LOG then
    if hits > r then return 0, false end
    local need = st.n + hits - r
    if need <= 0 then return now, true end
    local k = 0
    while k < st.len do
      local chunk = log_entries(st, st.key, k, min(k + 63, st.len - 1))
      for _, e in ipairs(chunk) do
        local t, c = unpack(P.LOG_ENTRY, e)
        if c >= need then return t + w, true end
        need = need - c
      end
      k = k + #chunk
    end
    return now, true
  elseif a == BUCKET then
    if hits > B[i] then return 0, false end
    return now + ceil_div(hits - st.n, i), true
  elseif a == GCRA then
    if hits > B[i] then return 0, false end
    return max(st.t, now) - (B[i] - hits) * IV[i], true
  end
  return now, true
end

local function retry_after(st, i, hits)
  local at, possible = retry_at(st, i, hits)
  if not possible then return W[i] end
  -- The closed forms may be a microsecond off either way, as in Go: step
  -- until admits agrees, on a copy of the state.
  at = max(at, now + 1)
  local function ok(x)
    if st.log then return admits(st, i, x, hits) end
    return admits({ t = st.t, n = st.n, p = st.p }, i, x, hits)
  end
  for _ = 1, 4 do
    if at > now + 1 and ok(at - 1) then at = at - 1 else break end
  end
  for _ = 1, 4 do
    if not ok(at) then at = at + 1 else break end
  end
  return at - now
end

local function pos(x) return max(min(x, MAX_T), 0) end

-- result returns request i's result.
local function result(st, i, over)
  if R[i] == 0 then
    local reset = window_end(i, now) - now
    return 1, 0, reset, reset
  end
  advance(st, i, now)
  local a, w = ALG[i], W[i]
  local remaining, reset = 0, 0
  if a == FIXED then
    remaining, reset = max(R[i] - st.n, 0), st.t + w - now
  elseif a == SLIDING then
    local left = R[i] - (st.n + weighted_prev(st, i, now))
    if left > 0 then remaining = floor(left) end
    reset = st.t + w - now
  elseif a == LOG then
    remaining = max(R[i] - st.n, 0)
    if st.len > 0 then reset = log_oldest(st) + w - now end
  elseif a == BUCKET then
    if st.n > 0 then remaining = floor(st.n) end
    reset = ceil_div(B[i] - st.n, i)
  elseif a == GCRA then
    local tat = max(st.t, now)
    local room = B[i] * IV[i] - (tat - now)
    if room > 0 then remaining = floor(room / IV[i]) end
    reset = tat - now
  end
  local retry = 0
  if over then retry = retry_after(st, i, H[i]) end
  return over and 1 or 0, remaining, pos(reset), pos(retry)
end

-- save writes st back, to expire when it is as good as fresh (see
-- backend.State.Expiry), under the limit that last marked it.
local function save(st)
  local a, w = st.alg, st.w
  local expiry = st.t -- GCRA: the TAT
  if a == FIXED then
    expiry = st.t + w
  elseif a == SLIDING then
    expiry = st.t + 2 * w
  elseif a == LOG then
    expiry = log_newest(st) + w
  elseif a == BUCKET and st.b - st.n > 0 then
    expiry = st.t + math.ceil((st.b - st.n) * w / st.r)
  end
  local ttl = expiry - now
  if ttl <= 0 or (a == LOG and st.len == 0) then
    redis.call('DEL', st.key)
    return
  end
  -- (a TTL under 10^13 ms prints as an integer, which SET needs)
  local ms = min(math.ceil(ttl / 1000), 9e12)
  if a == LOG then
    if st.changed then
      local h = pack(P.LOG_HEADER, st.n)
      if st.hdr then redis.call('LSET', st.key, 0, h) else redis.call('LPUSH', st.key, h) end
    end
    redis.call('PEXPIRE', st.key, ms)
  else
    redis.call('SET', st.key, pack(P.STATE, st.t, st.n, st.p), 'PX', ms)
  end
end

local out, nout = {}, 0

-- decide decides the call of n requests just read, into out.
local function decide(n)
  if op == P.REFUND then
    for i = 1, n do
      if R[i] > 0 and GIVE[i] then
        local st = load(i)
        refund(st, i, H[i], STAMP[i])
        mark(st, i)
      end
    end
    for i = 1, n do
      nout = nout + 1
      out[nout] = pack(P.RESULT, result(R[i] > 0 and load(i) or nil, i, WASO[i]))
    end
    return
  end

  -- Decide: earlier admitted requests of this call on one counter count
  -- as taken.
  for i = 1, n do
    local hits = H[i]
    for j = 1, i - 1 do
      if K[j] == K[i] and not OVER[j] then hits = hits + H[j] end
    end
    if R[i] == 0 then
      OVER[i] = true
    else
      local st = load(i)
      OVER[i] = not admits(st, i, now, hits)
      -- A refill is a float step: keep it, as the memory store does, so
      -- that both round the same way however often they are asked.
      if ALG[i] == BUCKET then mark(st, i) end
    end
  end

  -- Groups are adjacent: GOVER[i] says whether i's group is over. The
  -- call is refused when an enforced group is over, or when it has quota
  -- groups and all of them are over; a PART decides as if admitted.
  local refused, quota, quota_under = false, false, false
  local i = 1
  while i <= n do
    local j, o = i, false
    while j <= n and G[j] == G[i] do
      o = o or OVER[j]
      j = j + 1
    end
    for k = i, j - 1 do GOVER[k] = o end
    if MODE[i] == ENFORCE then
      refused = refused or o
    elseif MODE[i] == QUOTA then
      quota, quota_under = true, quota_under or not o
    end
    i = j
  end
  if op == P.PART then
    refused = false
  else
    refused = refused or (quota and not quota_under)
  end

  for i = 1, n do
    TOOK[i] = 0
    if R[i] > 0 and (CWO[i] or (not refused and not GOVER[i])) then
      local st = load(i)
      TOOK[i] = add(st, i, H[i])
      if H[i] > 0 then mark(st, i) end
    end
  end

  for i = 1, n do
    nout = nout + 1
    local st = R[i] > 0 and load(i) or nil
    if op == P.PART then
      local o, rem, reset, retry = result(st, i, OVER[i])
      out[nout] = pack(P.STAMPED, o, rem, reset, retry, TOOK[i])
    else
      out[nout] = pack(P.RESULT, result(st, i, OVER[i]))
    end
  end
end

local kbase = 0
for _ = 1, ncalls do
  local n
  n, off = unpack(P.CALL, blob, off)
  for i = 1, n do
    local f
    f, R[i], B[i], G[i], W[i], H[i], STAMP[i], IV[i], off = unpack(P.RECORD, blob, off)
    K[i] = KEYS[kbase + i]
    ALG[i] = f % P.MODE_SHIFT
    MODE[i] = floor(f / P.MODE_SHIFT) % 4
    CWO[i] = floor(f / P.CWO) % 2 == 1
    GIVE[i] = floor(f / P.GIVE) % 2 == 1
    WASO[i] = floor(f / P.WAS_OVER) % 2 == 1
  end
  decide(n)
  kbase = kbase + n
end
for d = 1, ndirty do save(dirty[d]) end
return table.concat(out)

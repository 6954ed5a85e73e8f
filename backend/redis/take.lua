-- ratelimitd: decide calls on their counters, atomically. A port of the
-- Go reference in package backend, decision for decision: the algorithms
-- of backend.State (algorithm.go, with State.Refund), and the call rules
-- of backend.Decide and backend.DecidePart (decide.go). Every number is a
-- double, as Go's float64 arithmetic there is, and times are whole
-- microseconds since the Unix epoch. Unlike backend.State, whose windows
-- stand still when the clock steps back, a window here is the one of the
-- clock (Redis TIME): a clock that steps back counts in an earlier window.
--
-- The protocol. KEYS holds one counter key per request, the calls one
-- after the other (a key may repeat: one counter). ARGV[1] is binary:
-- HEADER, then per call CALL and a RECORD per request, or a
-- COMPACT_RECORD per request when CALL's number has the COMPACT bit. A
-- FAST or FAST_LEASED run, whose calls are all compact, takes the lean
-- path (fast); other runs read compact records into the general path's
-- tables. The reply is a string: a result per request, a RESULT on FAST
-- and REFUND runs, a LEASED on TAKE, FAST_LEASED and a LEASED_STAMPED on
-- PART (the lease that a
-- concurrency take counted or a renew moved to, else 0, and on PART the
-- stamp a refund needs). The table P names the protocol's constants;
-- script.go names the same, and TestScriptProtocol checks that the two
-- agree.
--
-- Counters. The key's layout version, algorithm and window are in the
-- key itself. A fixed or sliding window counts each window under a key
-- of its own, the counter key, '@' and the window's number (its start ÷
-- its length), an integer that INCRBY raises: one command per request,
-- which keeps the TTL set when the window's key is created. A token
-- bucket or GCRA key holds STATE. A sliding log is a list: LOG_HEADER,
-- then a LOG_ENTRY per instant that counted hits, oldest first, so that a
-- call reads and writes a few elements, never the whole log; its header
-- may be missing (dropped with expired entries, and written back when the
-- script saves the log), and its sum is then recounted. A concurrency
-- limit's leases are a log too, whose entries have stamps of their own,
-- and whose header, LEASE_HEADER, also holds the newest stamp it gave,
-- the list's length and its oldest entry, so that an acquire or a release
-- reads one element before it writes.
--
-- A run reads every counter but the logs with one MGET (one per 4,096
-- counters) before it decides. The keys of windows are not in KEYS, but
-- share their counter key's hash tag, and so its Cluster slot.
--
-- Loading. On Redis 7.0 and later, this chunk is a function library:
-- Redis runs it once, at FUNCTION LOAD, and each FCALL calls take. On
-- older Redis it is a script that Redis runs whole on every EVALSHA,
-- defining every function afresh.
local P = {
  TAKE = 0, -- decide each call whole
  PART = 1, -- decide a Cluster slot's share as if the call were admitted, with stamps
  REFUND = 2, -- give back what PART took on GIVE requests; report the results afresh
  FAST = 3, -- TAKE, on calls that are all COMPACT: the lean path (see fast)
  FAST_LEASED = 4, -- FAST, on calls that hold concurrency limits: LEASED replies
  COMPACT = 2147483648, -- set in CALL's number: the call's records are COMPACT_RECORDs
  -- set too in a CROSS run's CALL: the call is a PART (STAMPED replies)
  PART_CALL = 1073741824,
  -- a CROSS run's reply to each call starts with STATUS: DONE, then its
  -- results; or ELSEWHERE, then REASON and Redis's error, having written
  -- nothing
  DONE = 0, ELSEWHERE = 1,
  NOT_TAKEN = -1, -- the stamp of a CROSS PART request whose hits do not count
  -- a record's flags: algorithm + MODE_SHIFT * mode, plus these bits
  MODE_SHIFT = 8, CWO = 32, GIVE = 64, WAS_OVER = 128,
  SLIDING = 0, FIXED = 1, LOG = 2, BUCKET = 3, GCRA = 4, CONC = 5,
  ENFORCE = 0, SHADOW = 1, QUOTA = 2,
  -- a record's op: what the request does to its counter (backend.Op)
  OP_TAKE = 0, OP_GIVE_BACK = 1, OP_RENEW = 2,
  -- struct formats, little-endian
  HEADER = '<BdI4', -- op, now (µs; 0: read Redis TIME), number of calls
  CALL = '<I4', -- the call's number of requests
  -- flags, op, requests, burst, group, window µs, hits, stamp (a refund's; a
  -- give-back's or renew's lease), GCRA interval µs
  RECORD = '<BBI4I4I4dddd',
  -- a window request, enforced, not consume_when_over, on a counter of
  -- its own in its call: refused exactly when one of the call's is over;
  -- or so a concurrency limit's take or give-back, followed by COMPACT_LEASE
  COMPACT_RECORD = '<BI4dd', -- flags (the algorithm), requests, window µs, hits
  COMPACT_LEASE = '<Bd', -- op (OP_TAKE or OP_GIVE_BACK), the lease given back (0: none named)
  RESULT = '<Bddd', -- over, remaining, reset µs, retry µs
  STAMPED = '<Bdddd', -- RESULT, then the stamp a refund needs (a CROSS run's PART call)
  LEASED = '<Bdddd', -- RESULT, then the lease (TAKE)
  LEASED_STAMPED = '<Bddddd', -- LEASED, then the stamp a refund needs (PART)
  STATUS = '<B', -- a CROSS run's call status
  REASON = '<I4', -- the length of the error that follows
  STATE = '<ddd', -- a bucket's or GCRA's T, N, P (the tokens in N for a token bucket)
  LOG_HEADER = '<d', -- the sum of the log's hits
  -- a concurrency log's header: the sum, the newest stamp given, the
  -- number of leases, and the oldest lease's stamp and hits (0 and 0 if none)
  LEASE_HEADER = '<ddddd',
  LOG_ENTRY = '<dd', -- a time and the hits counted then
  MAX_LOG = 10000, -- the most entries of a log; further hits fold into the newest
}
local MAX_T = 2^62 -- saturation of times, as Go saturates int64 math
-- MGET_CHUNK bounds the keys of one MGET (see prefetch).
local MGET_CHUNK = 4096
-- MAX_COUNT saturates a window's count well within a Redis integer
-- (under 2^63), so that an INCRBY to it stays within one even when the
-- count read (past 2^53) was rounded, and so does the lean path's INCRBY
-- of up to a limit's 2^32 hits on a saturated count.
local MAX_COUNT = 2^62

-- Library functions, bound by take on its first run: a function library
-- may use nothing but the redis API while it loads.
local floor, ceil, min, max, fmod, unpack, pack, concat, tunpack, format, find, call, pcall, type, tonumber, ipairs

-- The run's op and clock, and its keys' grace, set by take.
local op, now, grace = P.TAKE, 0, 0
local fast -- the lean path, defined below

-- Each algorithm is a table of functions of (st, r, ...), where st is a
-- counter's state ({t, n, p}, or a log's) and r a request:
--   advance(st, r, at)          brings st to at without changing any decision
--   admits(st, r, at, hits)     whether hits more fit at at (st advanced)
--   add(st, r, hits)            counts hits at now; returns the stamp a refund needs
--   refund(st, r, hits, stamp)  gives back hits that add counted at stamp, if they still count
--   give_back(st, r, hits, lease) gives hits back, never past the limit (backend.State.GiveBack)
--   result(st, r)               remaining and reset (µs) at now
--   retry_at(st, r, hits)       the first instant hits more fit (a closed form), and false if never
--   expiry(st)                  when st is as good as fresh, under the limit it was saved with

-- A window's state is loaded at the window of now (see load), so only
-- admits, which probes later instants too, advances it.
local function window_add(st, _, hits)
  st.n = st.n + hits
  return st.t
end
local function window_refund(st, _, hits, stamp)
  if st.t == stamp then st.n = max(st.n - hits, 0) end
end
local function window_give_back(st, _, hits) st.n = max(st.n - hits, 0) end

local fixed = {} -- T: the window's start; N: its count
fixed.add, fixed.refund, fixed.give_back = window_add, window_refund, window_give_back
function fixed.advance(st, r, at)
  local start = at - fmod(at, r.w)
  if start > st.t then st.t, st.n = start, 0 end
end
function fixed.admits(st, r, at, hits)
  fixed.advance(st, r, at)
  return st.n + hits <= r.r
end
function fixed.result(st, r) return max(r.r - st.n, 0), st.t + r.w - now end
function fixed.retry_at(st, r, hits) return st.t + r.w, hits <= r.r end
function fixed.expiry(st) return st.t + st.w end

local sliding = {} -- T: the window's start; N: its count; P: the previous window's
sliding.add, sliding.refund, sliding.give_back = window_add, window_refund, window_give_back
function sliding.advance(st, r, at)
  local w = r.w
  local start = at - fmod(at, w)
  if start <= st.t then return end
  if start == st.t + w then st.p = st.n else st.p = 0 end
  st.t, st.n = start, 0
end
function sliding.weighted_prev(st, r, at)
  local w = r.w
  return st.p * (w - min(max(at - st.t, 0), w)) / w
end
function sliding.admits(st, r, at, hits)
  sliding.advance(st, r, at)
  return st.n + hits + sliding.weighted_prev(st, r, at) <= r.r
end
function sliding.result(st, r)
  local left, remaining = r.r - (st.n + sliding.weighted_prev(st, r, now)), 0
  if left > 0 then remaining = floor(left) end
  return remaining, st.t + r.w - now
end
function sliding.retry_at(st, r, hits)
  if hits > r.r then return 0, false end
  -- While the count fits, wait for the previous window's weight to fall;
  -- otherwise for the next window, where this one's count is weighted.
  local w, t, prev, room = r.w, st.t, st.p, 0
  if st.n + hits <= r.r then
    room = r.r - (st.n + hits)
  else
    t, prev, room = st.t + w, st.n, r.r - hits
  end
  if prev == 0 then return t, true end
  return t + w - floor(min(room * w / prev, w)), true
end
function sliding.expiry(st) return st.t + 2 * st.w end

-- ceil_div returns the µs a bucket of rate per w takes to refill tokens.
local function ceil_div(tokens, rate, w)
  if tokens <= 0 then return 0 end
  return ceil(tokens * w / rate)
end

local bucket = {} -- T: the last refill; N: the tokens (a fresh bucket is full)
function bucket.advance(st, r, at)
  if st.t == 0 then
    st.t, st.n = at, r.b
  elseif at > st.t then
    st.n = min(r.b, st.n + (at - st.t) * r.r / r.w)
    st.t = at
  end
end
function bucket.admits(st, r, at, hits)
  bucket.advance(st, r, at)
  return st.n >= hits
end
function bucket.add(st, r, hits)
  bucket.advance(st, r, now)
  st.n = st.n - hits
  return 0
end
function bucket.refund(st, r, hits)
  bucket.advance(st, r, now)
  st.n = min(st.n + hits, r.b)
end
bucket.give_back = bucket.refund
function bucket.result(st, r)
  bucket.advance(st, r, now)
  local remaining = 0
  if st.n > 0 then remaining = floor(st.n) end
  return remaining, ceil_div(r.b - st.n, r.r, r.w)
end
function bucket.retry_at(st, r, hits)
  if hits > r.b then return 0, false end
  return now + ceil_div(hits - st.n, r.r, r.w), true
end
function bucket.expiry(st) return st.t + ceil_div(st.b - st.n, st.r, st.w) end

local gcra = {} -- T: the theoretical arrival time; r.iv: the emission interval
function gcra.advance() end
function gcra.admits(st, r, at, hits)
  if hits > r.b then return false end
  return max(st.t, at) - at <= (r.b - hits) * r.iv
end
function gcra.add(st, r, hits)
  st.t = min(max(st.t, now) + hits * r.iv, MAX_T)
  return 0
end
function gcra.refund(st, r, hits) st.t = max(st.t - hits * r.iv, now) end
gcra.give_back = gcra.refund
function gcra.result(st, r)
  local tat, remaining = max(st.t, now), 0
  local room = r.b * r.iv - (tat - now)
  if room > 0 then remaining = floor(room / r.iv) end
  return remaining, tat - now
end
function gcra.retry_at(st, r, hits)
  if hits > r.b then return 0, false end
  return max(st.t, now) - (r.b - hits) * r.iv, true
end
function gcra.expiry(st) return st.t end

-- A sliding log's state: n (the sum of its hits), len (its entries), hdr
-- (whether its list starts with the header), first (its oldest entry,
-- once read), changed (whether the header must be written) and counted
-- (whether add or refund changed an entry, and so maybe its TTL). Its
-- entries are read and written in Redis as the call goes.
local log = {}
-- at returns the list index of the log's i-th entry (0: the oldest).
function log.at(st, i)
  if st.hdr then return i + 1 end
  return i
end
function log.entry(st, i)
  return unpack(P.LOG_ENTRY, call('LINDEX', st.key, log.at(st, i)))
end
function log.oldest(st)
  if not st.first then st.first = { log.entry(st, 0) } end
  return st.first[1], st.first[2]
end
function log.newest(st)
  if st.len == 0 then return 0, 0 end
  return unpack(P.LOG_ENTRY, call('LINDEX', st.key, -1))
end
-- each calls f(time, hits) on the entries from the oldest until it
-- returns true, 64 entries a read.
function log.each(st, f)
  local k = 0
  while k < st.len do
    local chunk = call('LRANGE', st.key, log.at(st, k), log.at(st, min(k + 63, st.len - 1)))
    for _, e in ipairs(chunk) do
      if f(unpack(P.LOG_ENTRY, e)) then return end
    end
    k = k + #chunk
  end
end
-- load reads the log at key; head, when given, is its first element as
-- LINDEX read it (false: no key).
function log.load(key, head)
  local st = { n = 0, len = 0, hdr = false, first = false, changed = false, counted = false, key = key, f = log,
                dirty = false, hw = 0, last = false }
  if head == nil then head = pcall('LINDEX', key, 0) end
  if type(head) == 'table' then
    call('DEL', key) -- not a list: a fresh log
  elseif head and #head == 40 then
    local t, c
    st.hdr, st.n, st.hw, st.len, t, c = true, unpack(P.LEASE_HEADER, head)
    if st.len > 0 then st.first = { t, c } end
  elseif head then
    st.len = call('LLEN', key)
    if #head == 8 then
      st.hdr, st.len, st.n = true, st.len - 1, unpack(P.LOG_HEADER, head)
    else
      log.each(st, function(_, c) st.n = st.n + c end)
      st.changed = true
    end
  end
  return st
end
-- advance drops the expired entries, only ever at now (admits probes
-- later instants without changing the log).
function log.advance(st, r, at)
  local k, cut, kept = 0, at - r.w, false
  while k < st.len do
    local t, c
    if k == 0 then t, c = log.oldest(st) else t, c = log.entry(st, k) end
    if t > cut then
      kept = { t, c } -- the oldest left
      break
    end
    st.n, k = max(st.n - c, 0), k + 1
  end
  if k > 0 then
    call('LTRIM', st.key, log.at(st, k), -1) -- the header goes too; save writes it back
    st.len, st.hdr, st.first, st.changed = st.len - k, false, kept, true
  end
end
function log.admits(st, r, at, hits)
  if at > now then
    local n, cut = st.n, at - r.w
    log.each(st, function(t, c)
      if t > cut then return true end
      n = max(n - c, 0)
    end)
    return n + hits <= r.r
  end
  log.advance(st, r, at)
  return st.n + hits <= r.r
end
function log.add(st, r, hits)
  log.advance(st, r, now)
  local last, c = log.newest(st)
  local t = max(now, last)
  if st.len > 0 and (last == t or st.len == P.MAX_LOG) then
    call('LSET', st.key, -1, pack(P.LOG_ENTRY, t, c + hits))
  else
    call('RPUSH', st.key, pack(P.LOG_ENTRY, t, hits))
    st.len = st.len + 1
  end
  if st.len == 1 then st.first = false end
  st.n, st.changed, st.counted = st.n + hits, true, true
  return t
end
-- take removes up to hits from the entry stamped stamp, dropping it when
-- it empties, and returns how many it removed (0: no such entry); it
-- leaves st.n, and the TTL (counted), to the caller.
function log.take(st, stamp, hits)
  -- Newest first: the entry is most likely the newest.
  local k = st.len
  while k > 0 do
    local from = max(k - 64, 0)
    local chunk = call('LRANGE', st.key, log.at(st, from), log.at(st, k - 1))
    for j = #chunk, 1, -1 do
      local t, c = unpack(P.LOG_ENTRY, chunk[j])
      if t < stamp then return 0 end -- times increase: none is stamped so
      if t == stamp then
        local back = min(hits, c)
        if back == c then
          call('LREM', st.key, -1, chunk[j]) -- entries are unique: their times are
          st.len = st.len - 1
        else
          call('LSET', st.key, log.at(st, from + j - 1), pack(P.LOG_ENTRY, t, c - back))
        end
        if from + j == 1 then st.first = false end -- the oldest changed
        st.last, st.changed = false, true
        return back
      end
    end
    k = from
  end
  return 0
end
function log.refund(st, r, hits, stamp)
  log.advance(st, r, now)
  local back = log.take(st, stamp, hits)
  if back > 0 then st.n, st.counted = max(st.n - back, 0), true end
end
-- drop_newest removes up to hits from the newest entries, dropping those
-- it empties.
function log.drop_newest(st, hits)
  local back = 0
  while back < hits and st.len > 0 do
    local t, c = unpack(P.LOG_ENTRY, call('LINDEX', st.key, -1))
    local d = min(hits - back, c)
    back = back + d
    if st.len == 1 then st.first = false end -- the oldest changes
    if d == c then
      call('RPOP', st.key)
      st.len = st.len - 1
    else
      call('LSET', st.key, -1, pack(P.LOG_ENTRY, t, c - d))
    end
  end
  if back > 0 then st.n, st.last, st.changed = max(st.n - back, 0), false, true end
  return back
end
function log.give_back(st, r, hits)
  log.advance(st, r, now)
  if log.drop_newest(st, hits) > 0 then st.counted = true end
end
function log.result(st, r)
  log.advance(st, r, now)
  local reset = 0
  if st.len > 0 then reset = log.oldest(st) + r.w - now end
  return max(r.r - st.n, 0), reset
end
function log.retry_at(st, r, hits)
  if hits > r.r then return 0, false end
  local need = st.n + hits - r.r -- hits that must expire first
  if need <= 0 then return now, true end
  local at = now
  log.each(st, function(t, c)
    if c >= need then
      at = t + r.w
      return true
    end
    need = need - c
  end)
  return at, true
end
function log.expiry(st) return log.newest(st) + st.w end

-- A concurrency limit's leases (backend.State's Concurrency): a log whose
-- entries are leases, each stamped max(now, hw + 1), hw being the newest
-- stamp it gave (Go's State.T), kept in its header. Its state also keeps
-- last, the newest lease's stamp once known (false: read it), and its
-- TTL is set only when a lease is added (counted), so that a release
-- runs as few commands as it can: a TTL longer than the state needs
-- changes no decision.
local conc = {}
conc.advance, conc.admits, conc.result, conc.retry_at = log.advance, log.admits, log.result, log.retry_at
-- stamp_lease returns a new lease's stamp, and makes it the newest given.
local function stamp_lease(st)
  st.hw = max(now, st.hw + 1)
  return st.hw
end
function conc.add(st, r, hits)
  log.advance(st, r, now)
  local t = stamp_lease(st)
  if st.len == P.MAX_LOG then
    -- Past the limit only (consume_when_over): fold into the newest, as a log does.
    local _, c = log.newest(st)
    call('LSET', st.key, -1, pack(P.LOG_ENTRY, t, c + hits))
  else
    call('RPUSH', st.key, pack(P.LOG_ENTRY, t, hits))
    st.len = st.len + 1
  end
  if st.len == 1 then st.first = { t, hits } end -- (a log of one entry never folds)
  st.n, st.last, st.changed, st.counted = st.n + hits, t, true, true
  return t
end
function conc.refund(st, r, hits, stamp)
  log.refund(st, r, hits, stamp)
  -- Never given to the caller: its stamp may be given again (see Go's Refund).
  if stamp == st.hw then st.hw, st.changed = stamp - 1, true end
end
function conc.give_back(st, r, hits, lease)
  log.advance(st, r, now)
  if lease == 0 then
    log.drop_newest(st, hits)
    return
  end
  -- Most releases give back the hits they took: try that entry first,
  -- one command, else look for the lease.
  if hits > 0 and call('LREM', st.key, -1, pack(P.LOG_ENTRY, lease, hits)) == 1 then
    conc.removed(st, lease, hits)
  else
    conc.find_back(st, lease)
  end
end
-- removed records that the entry of the lease stamped lease, of hits,
-- went from the log (LREM).
function conc.removed(st, lease, hits)
  st.len, st.last, st.changed = st.len - 1, false, true
  if st.first and st.first[1] == lease then st.first = false end
  st.n = max(st.n - hits, 0)
end
-- find_back gives back the lease stamped lease, wherever it is in the
-- log (st advanced), if it is held.
function conc.find_back(st, lease)
  st.n = max(st.n - log.take(st, lease, MAX_T), 0)
end
-- renew moves the lease stamped lease to a new stamp, and returns it, or
-- false if no lease is stamped so.
function conc.renew(st, r, lease)
  log.advance(st, r, now)
  local c = log.take(st, lease, MAX_T)
  if c == 0 then return false end
  local t = stamp_lease(st)
  call('RPUSH', st.key, pack(P.LOG_ENTRY, t, c))
  st.len = st.len + 1
  if st.len == 1 then st.first = { t, c } end
  st.last, st.counted = t, true
  return t
end
function conc.expiry(st)
  if st.len == 0 then return st.hw + 1 end
  return max((st.last or log.newest(st)) + st.w, st.hw + 1)
end
-- load reads the log at key (see log.load): without its header, the
-- newest stamp given is its newest lease's.
function conc.load(key, head)
  local st = log.load(key, head)
  if not st.hdr and st.len > 0 then st.hw = log.newest(st) end
  return st
end

local algorithms = { [P.SLIDING] = sliding, [P.FIXED] = fixed, [P.LOG] = log, [P.BUCKET] = bucket, [P.GCRA] = gcra,
                     [P.CONC] = conc }

-- The run's counters, one state per distinct key, loaded on first use and
-- kept for the whole run: later calls of a batch see earlier ones.
local states, dirty = {}, {} -- set by take; dirty.n states to save, in order
-- vals: the values that take read with one MGET, by key name; false for
-- a missing key.
local vals = {}

-- suffix returns the suffixes of the window keys of now for windows of
-- w µs, {'@' .. number, '@' .. number - 1, start}: printing a number
-- costs more than the rest, so they are kept from run to run (a function
-- library keeps them; EVALSHA starts afresh) while now is in the window,
-- for at most MAX_SUFFIXES window lengths.
local suffixes, nsuffixes, MAX_SUFFIXES = {}, 0, 64
local function suffix(w)
  local sfx = suffixes[w]
  if sfx and now >= sfx[3] and now < sfx[3] + w then return sfx end
  if not sfx then
    if nsuffixes == MAX_SUFFIXES then suffixes, nsuffixes = {}, 0 end
    nsuffixes = nsuffixes + 1
  end
  local t = now - fmod(now, w)
  sfx = { '@' .. (t / w), '@' .. (t / w - 1), t } -- (a window's number prints as an integer)
  suffixes[w] = sfx
  return sfx
end

-- window_names sets r.cur (the name of the key that counts the window of
-- now) and on a sliding window r.prev (the previous window's), and the
-- window's start r.t.
local function window_names(r)
  local sfx = suffix(r.w)
  r.t, r.cur = sfx[3], r.key .. sfx[1]
  if r.f == sliding then r.prev = r.key .. sfx[2] end
end

-- count reads a window's count from vals.
local function count(name)
  local v = vals[name]
  if v then return tonumber(v) end
  return 0
end

local function load(r)
  local st = states[r.key]
  if st then return st end
  local f = r.f
  if f == log then
    st = log.load(r.key)
  elseif f == conc then
    st = conc.load(r.key)
  elseif f == fixed or f == sliding then
    local n = count(r.cur)
    st = { t = r.t, n = n, p = 0, n0 = n, cur = r.cur, key = r.key, f = f, w = r.w, r = r.r, b = r.b, dirty = false }
    if f == sliding then st.p = count(r.prev) end
  else
    st = { t = 0, n = 0, p = 0, key = r.key, f = f, w = r.w, r = r.r, b = r.b, dirty = false }
    local v = vals[r.key]
    if v and #v == 24 then st.t, st.n, st.p = unpack(P.STATE, v) end
  end
  states[r.key] = st
  return st
end

-- mark records that st must be saved, under r's limit.
local function mark(st, r)
  st.f, st.w, st.r, st.b = r.f, r.w, r.r, r.b
  if not st.dirty then
    st.dirty = true
    dirty.n = dirty.n + 1
    dirty[dirty.n] = st
  end
end

-- int formats a whole number for a command: Lua prints 10^14 and above
-- with an exponent. The common ones are kept: printing costs.
local ints = {}
local function int(x)
  local s = ints[x]
  if s then return s end
  s = format('%.0f', x)
  if x >= 0 and x < 1000 then ints[x] = s end
  return s
end

-- ms_until returns the ms from now until at (µs), under 10^13 so that
-- it prints as an integer, which SET and PEXPIRE need.
local function ms_until(at)
  return min(ceil((at - now) / 1000), 9e12)
end

-- ttl returns the ms until st is as good as fresh.
local function ttl(st)
  return ms_until(st.f.expiry(st))
end

-- GRACE is how many ms a key outlives its state when the caller gives
-- the clock (HEADER's now; redis.Options.Now, for tests on a manual
-- clock): Redis expires keys on its own clock, which then runs apart
-- from the one the script decides on, and a key whose state is fresh a
-- millisecond later on the caller's clock would vanish a real millisecond
-- later. A state kept past its time decides as a fresh one, so the grace
-- changes no decision. On Redis's clock (now = 0, the daemon's case) a
-- key expires as its state turns fresh.
local GRACE = 1000

local function save(st)
  local f = st.f
  if f == fixed or f == sliding then
    -- The window's count: INCRBY keeps its TTL, set when it is created.
    -- A count saturates below what a Redis integer holds, as Go's
    -- saturates: INCRBY fails past it.
    local n, n0 = min(st.n, MAX_COUNT), min(st.n0, MAX_COUNT)
    if n ~= n0 then
      call('INCRBY', st.cur, int(n - n0))
      if st.n0 == 0 then call('PEXPIRE', st.cur, int(ttl(st) + grace)) end
    end
    return
  end
  if f == conc then
    -- Its entries are all live (advanced at now), so only an empty log
    -- can be as good as fresh: when now passes its newest stamp.
    if st.len == 0 and st.hw + 1 <= now then
      call('DEL', st.key)
      return
    end
    if st.changed then
      local ot, oc = 0, 0
      if st.len > 0 then ot, oc = log.oldest(st) end
      local h = pack(P.LEASE_HEADER, st.n, st.hw, st.len, ot, oc)
      if st.hdr then
        call('LSET', st.key, 0, h)
      else
        call('LPUSH', st.key, h)
        if st.len == 0 then st.counted = true end -- a key of its own again: give it its TTL
      end
    end
    if st.counted then call('PEXPIRE', st.key, int(ttl(st) + grace)) end
    return
  end
  local ms = ttl(st)
  if ms <= 0 or (f == log and st.len == 0) then
    call('DEL', st.key)
    return
  end
  if f ~= log then
    call('SET', st.key, pack(P.STATE, st.t, st.n, st.p), 'PX', int(ms + grace))
    return
  end
  if st.changed then
    local h = pack(P.LOG_HEADER, st.n)
    if st.hdr then call('LSET', st.key, 0, h) else call('LPUSH', st.key, h) end
  end
  -- A log that only dropped entries keeps its newest, so its TTL.
  if st.counted then call('PEXPIRE', st.key, int(ms + grace)) end
end

local function retry_after(st, r, hits)
  local f = r.f
  local at, possible = f.retry_at(st, r, hits)
  if not possible then return r.w end
  -- The closed forms may be a microsecond off either way, as in Go: step
  -- until admits agrees, on a copy of the state (a log probes unchanged).
  at = max(at, now + 1)
  local function ok(x)
    if f == log or f == conc then return log.admits(st, r, x, hits) end
    return f.admits({ t = st.t, n = st.n, p = st.p }, r, x, hits)
  end
  for _ = 1, 4 do
    if at > now + 1 and ok(at - 1) then at = at - 1 else break end
  end
  for _ = 1, 4 do
    if not ok(at) then at = at + 1 else break end
  end
  return at - now
end

-- result returns r's result: over, remaining, reset and retry.
local function result(r, over)
  if r.r == 0 then
    local reset = r.w - fmod(now, r.w) -- a ban: the window's end
    return 1, 0, reset, reset
  end
  local st = r.st or load(r)
  local remaining, reset = r.f.result(st, r)
  -- A log whose header went (dropped with expired entries, or missing)
  -- is saved even if the call counted nothing on it: else every later
  -- run recounts the whole log.
  if st.changed then mark(st, r) end
  local retry = 0
  if over then retry = retry_after(st, r, r.h) end
  return over and 1 or 0, remaining, reset, retry -- (the store clamps reset and retry)
end

local out = {} -- set by take: the packed results

-- The requests of the run, by index: their tables are reused from run to
-- run (a function library keeps them).
local reqs = {}

-- outcome returns r's result as decide reports it (rule 4 of Go's
-- Decide; opResult in decide.go): a give-back is never over and waits
-- for nothing, even on a ban; a failed renew waits only when its hits do
-- not fit now.
local function outcome(r, over)
  if r.op == P.OP_GIVE_BACK then
    local _, remaining, reset = result(r, false)
    return 0, remaining, reset, 0
  end
  if r.op == P.OP_RENEW and over and r.r > 0 then
    local st = r.st or load(r)
    local wait = not r.f.admits(st, r, now, r.h)
    if r.f == bucket then mark(st, r) end -- a refill: see decide
    r.st = st
    local _, remaining, reset, retry = result(r, wait)
    return 1, remaining, reset, retry
  end
  return result(r, over)
end

-- decide decides a call, the n requests after reqs[base], into out.
local function decide(base, n)
  if op == P.REFUND then
    -- Newest first, so that a concurrency limit takes back every stamp
    -- (see Go's State.Refund).
    for i = base + n, base + 1, -1 do
      local r = reqs[i]
      if r.r > 0 and r.give and r.h > 0 then
        local st = load(r)
        r.f.refund(st, r, r.h, r.stamp)
        mark(st, r)
      end
    end
    for i = base + 1, base + n do out[#out + 1] = pack(P.RESULT, outcome(reqs[i], reqs[i].waso)) end
    return
  end

  -- Give-backs and renews first, whatever the takes decide; a renew is
  -- over when its lease is not held. (Their stamp field holds the lease.)
  for i = base + 1, base + n do
    local r = reqs[i]
    r.over, r.lease, r.took = false, 0, 0
    if r.op ~= P.OP_TAKE then
      r.st = false
      if r.r > 0 then
        local st = load(r)
        r.st = st
        if r.op == P.OP_GIVE_BACK then
          if r.h > 0 or (r.f == conc and r.stamp ~= 0) then r.f.give_back(st, r, r.h, r.stamp) end
        elseif r.f == conc and r.stamp ~= 0 then
          local t = conc.renew(st, r, r.stamp)
          if t then r.lease = t else r.over = true end
        else
          r.over = true -- nothing to renew
        end
        mark(st, r)
      else
        r.over = r.op == P.OP_RENEW
      end
    end
  end

  -- Over: earlier admitted takes of this call on one counter count as
  -- taken.
  local any = false -- whether any take is over
  for i = base + 1, base + n do
    local r = reqs[i]
    if r.op == P.OP_TAKE then
      local hits = r.h
      for j = base + 1, i - 1 do
        if reqs[j].key == r.key and reqs[j].op == P.OP_TAKE and not reqs[j].over then hits = hits + reqs[j].h end
      end
      if r.r == 0 then
        r.over, r.st = true, false
      else
        local st = load(r)
        r.over, r.st = not r.f.admits(st, r, now, hits), st
        -- A refill is a float step: keep it, as the memory store does, so
        -- that both round the same way however often they are asked.
        if r.f == bucket then mark(st, r) end
      end
      any = any or r.over
    end
  end

  -- Groups are adjacent. The call is refused when an enforced group is
  -- over, or when it has quota groups and all of them are over; a PART
  -- decides as if admitted. Only takes decide: a group of give-backs or
  -- renews is never over, and no quota group.
  local refused, quota, quota_under = false, false, false
  local i, last = base + 1, base + n
  while i <= last do
    if not any then
      reqs[i].gover, i = false, i + 1 -- nothing is over: no group is
    else
      local j, over = i, false
      while j <= last and reqs[j].g == reqs[i].g do
        over = over or (reqs[j].over and reqs[j].op == P.OP_TAKE)
        j = j + 1
      end
      for k = i, j - 1 do reqs[k].gover = over end
      local mode = reqs[i].mode
      if reqs[i].op ~= P.OP_TAKE then mode = P.SHADOW end -- decides nothing
      if mode == P.ENFORCE then
        refused = refused or over
      elseif mode == P.QUOTA then
        quota, quota_under = true, quota_under or not over
      end
      i = j
    end
  end
  refused = op == P.TAKE and (refused or (quota and not quota_under))

  for k = base + 1, last do
    local r = reqs[k]
    if r.op == P.OP_TAKE and r.r > 0 and r.h > 0 and (r.cwo or (not refused and not r.gover)) then
      r.took = r.f.add(r.st, r, r.h)
      if r.f == conc then r.lease = r.took end
      mark(r.st, r)
    end
  end

  for k = base + 1, last do
    local r = reqs[k]
    local over, remaining, reset, retry = outcome(r, r.over)
    if op == P.PART then
      out[#out + 1] = pack(P.LEASED_STAMPED, over, remaining, reset, retry, r.lease, r.took)
    else
      out[#out + 1] = pack(P.LEASED, over, remaining, reset, retry, r.lease)
    end
  end
end

-- windows decides a call of the n requests after reqs[base] on fixed or
-- sliding windows of distinct counters (the common case) as decide would,
-- in straight-line code: the arithmetic of fixed's and sliding's
-- functions, without their calls. It reports false, having changed
-- nothing, for a call it leaves to decide: another shape, or more than
-- one request and one of them over (groups and modes then matter).
local function windows(base, n)
  local last = base + n
  for i = base + 1, last do
    local r = reqs[i]
    if r.r == 0 or (r.f ~= sliding and r.f ~= fixed) or r.op ~= P.OP_TAKE then return false end
    for j = base + 1, i - 1 do
      if reqs[j].key == r.key then return false end
    end
    local st = states[r.key] or load(r)
    local w = r.w
    r.wp = st.p * (w - min(max(now - st.t, 0), w)) / w -- sliding's weighted_prev; 0 on a fixed window
    r.over = st.n + r.h + r.wp > r.r
    if r.over and n > 1 then return false end
  end
  for i = base + 1, last do
    local r = reqs[i]
    local st, h, over = states[r.key], r.h, r.over
    -- Alone, a request consumes unless it is over (its group is the call).
    if h > 0 and (r.cwo or not over) then
      st.n = st.n + h
      mark(st, r)
    end
    local remaining, left, retry = 0, r.r - (st.n + r.wp), 0
    if left > 0 then remaining = floor(left) end
    if over then retry = retry_after(st, r, h) end
    out[#out + 1] = pack(P.LEASED, over and 1 or 0, remaining, st.t + r.w - now, retry, 0)
  end
  return true
end

-- The lean path's requests, by index in the run, as parallel arrays
-- reused from run to run: limit, window µs, hits, the name of the window
-- key of now (a concurrency limit's: its counter key), the window's
-- start, the previous window's count's index in prevs (0 on a fixed
-- window and a concurrency limit), then as the run decides: the previous
-- window's weighted count, the count before the request's call, whether
-- it is over, and whether INCRBY raised its count. A concurrency limit's
-- request (fconc) also has its op and lease (COMPACT_LEASE), a request
-- table for conc's functions, and as the run decides its log's state
-- and the lease it took.
local fr, fw, fh, fcur, ft, fpi = {}, {}, {}, {}, {}, {}
local fwp, fn, fover, fraised = {}, {}, {}, {}
local fconc, fop, flease, freq, fst, ftook = {}, {}, {}, {}, {}, {}
-- A concurrency limit's log, when its header decides the request alone:
-- its first element as read (false: no key), whether it has a header,
-- and the header's fields (fn: the sum; see LEASE_HEADER).
local fhead, fhdr, fhw, flen, fot, foc = {}, {}, {}, {}, {}, {}

-- lease_read reads the log of the lean path's i-th request, a concurrency
-- limit's. When its header decides alone (the log is fresh, or its
-- oldest lease has not lapsed and it is not full), it leaves the fields
-- in fhdr, fn, fhw, flen, fot and foc, and fst[i] false; else it loads
-- the log's state for conc's functions into fst[i].
local function lease_read(i)
  local key = fcur[i]
  local head = pcall('LINDEX', key, 0)
  fhead[i], fst[i] = head, false
  if not head then
    fhdr[i], fn[i], fhw[i], flen[i], fot[i], foc[i] = false, 0, 0, 0, 0, 0
    return
  end
  if type(head) == 'string' and #head == 40 then
    local n, hw, len, ot, oc = unpack(P.LEASE_HEADER, head)
    if (len == 0 or ot > now - fw[i]) and len < P.MAX_LOG then
      fhdr[i], fn[i], fhw[i], flen[i], fot[i], foc[i] = true, n, hw, len, ot, oc
      return
    end
  end
  fst[i] = conc.load(key, head)
end

-- fast decides the ncalls calls of a FAST run, compact all (their
-- records from blob's offset off, the counter of the run's i-th request
-- in keys[i + ko]), as take's general path would, and returns the packed
-- results. A compact call is refused exactly when one of its requests is
-- over, and consumes every hit otherwise; so each request raises its
-- window's count with INCRBY at once, which tells its count, and a
-- refused call gives its hits back. A window key that INCRBY creates gets
-- its window's TTL, as save gives it, or goes again when its call is
-- refused. (A refused call therefore writes each count twice, up and back
-- down, where the general path writes nothing, and Redis replicates both;
-- the store's local cache answers repeated refusals without Redis.) A
-- request of no hits, or of more than its limit, which INCRBY must not
-- count (nor, past 2^63, could), reads its count with GET. The rare over
-- request's retry falls back to retry_after.
--
-- A concurrency limit's request (a take, or a give-back by lease or
-- anonymous) is decided on its log alone, as conc's functions decide
-- it: a take reads the log's header (one LINDEX) and is over when its
-- hits do not fit; once its call is admitted it pushes its lease and
-- writes the header and the TTL; a give-back by lease reads the header,
-- removes its lease's entry (one LREM, when it gives back the hits it
-- took) and writes the header. That is done here in straight-line code
-- on the header's fields; the rest (a log whose oldest lease lapsed, or
-- full, or without a header; an over take, whose retry needs the log's
-- entries; an anonymous give-back, a lease not found so, or the oldest)
-- runs conc's functions on the log's state. Each log is saved as its
-- call ends, so that a later call of the run reads it afresh. On a
-- FAST_LEASED run (leased) every request replies LEASED.
--
-- On one slot (cross false) one MGET reads the previous windows of the
-- sliding ones, and the reply is a RESULT per request. A CROSS run
-- (cross true, see cross) holds keys of many slots, which one command
-- must not mix: a call reads the previous window of each of its sliding
-- requests with a GET, then raises its windows. Redis checks every
-- command of a script, and refuses one on a key of a slot that the node
-- does not serve, or is moving, before running it (and keeps what the
-- script wrote before). A call that meets such a refusal gives back what
-- it raised, as a refused call does (its earlier keys are local: their
-- commands passed), and replies ELSEWHERE and Redis's error, having
-- written nothing that lasts. Nothing can move a slot during the run
-- (Redis runs one script at a time). Checking ownership this way costs
-- no command of its own: a fixed window's request runs one command, a
-- sliding one's two, the least that reading the previous window allows
-- across slots. Each call's reply starts with a status byte; a PART
-- call's requests reply STAMPED, the stamp of a request whose hits count
-- being its window's start, else NOT_TAKEN.
local prevs, sizes, pcount, results, parts, bad = {}, {}, {}, {}, {}, {} -- fast's, reused too
function fast(keys, blob, off, ncalls, ko, cross, leased)
  local np, total = 0, 0
  for c = 1, ncalls do
    local n
    n, off = unpack(P.CALL, blob, off)
    n = n - P.COMPACT
    parts[c] = n >= P.PART_CALL
    if parts[c] then n = n - P.PART_CALL end
    sizes[c] = n
    for _ = 1, n do
      total = total + 1
      local i, a, w = total
      a, fr[i], w, fh[i], off = unpack(P.COMPACT_RECORD, blob, off)
      fw[i], fpi[i], fconc[i] = w, 0, a == P.CONC
      if fconc[i] then
        fop[i], flease[i], off = unpack(P.COMPACT_LEASE, blob, off)
        fcur[i], ft[i] = keys[i + ko], 0
        local r = freq[i]
        if not r then
          r = { f = conc }
          freq[i] = r
        end
        r.w, r.r, r.h = w, fr[i], fh[i]
      else
        local sfx = suffix(w)
        local key = keys[i + ko]
        fcur[i], ft[i] = key .. sfx[1], sfx[3]
        if a == P.SLIDING then
          np = np + 1
          prevs[np], fpi[i] = key .. sfx[2], np
        end
      end
    end
  end
  if not cross then
    for from = 1, np, MGET_CHUNK do
      local to = min(from + MGET_CHUNK - 1, np)
      local got = call('MGET', tunpack(prevs, from, to))
      for k = from, to do
        local v = got[k - from + 1]
        pcount[k] = v and tonumber(v) or 0
      end
    end
  end

  local last, nres = 0, 0
  for c = 1, ncalls do
    local first, refused = last + 1, false
    last = last + sizes[c]
    bad[c] = false
    if cross then
      for i = first, last do
        local p = fpi[i]
        if p > 0 then
          local v = pcall('GET', prevs[p])
          if type(v) == 'table' then
            -- As below: only a key of a slot the node does not serve
            -- sends the call elsewhere; any other error fails the run.
            if not find(v.err, 'Script attempted to', 1, true) then error(v) end
            bad[c] = v.err
            break
          end
          pcount[p] = v and tonumber(v) or 0
        end
      end
    end
    if not bad[c] then
      for i = first, last do
        if fconc[i] then
          -- A take reads its log and decides; a give-back, which the
          -- call's verdict does not change, waits for the call's end.
          fraised[i], fover[i], ftook[i] = false, false, 0
          if fop[i] == P.OP_TAKE then
            lease_read(i)
            if not fst[i] and fn[i] + fh[i] > fr[i] then fst[i] = conc.load(fcur[i], fhead[i]) end
            local st = fst[i]
            if st then fover[i] = not conc.admits(st, freq[i], now, fh[i]) end
            refused = refused or fover[i]
          end
        else
          local h, r, wp = fh[i], fr[i], 0
          if fpi[i] > 0 then
            local w = fw[i]
            wp = pcount[fpi[i]] * (w - (now - ft[i])) / w -- now is within the window: now - t in [0, w)
          end
          local n, v
          fraised[i] = h > 0 and h <= r
          if fraised[i] then v = pcall('INCRBY', fcur[i], int(h)) else v = pcall('GET', fcur[i]) end
          if type(v) == 'table' then
            -- Give back what the call raised, so that no key it created is
            -- left without its TTL. A key of a slot the node does not serve
            -- (a CROSS run): the call goes elsewhere, unwritten. A key that
            -- does not hold a count (another client's), or one past 2^63
            -- (saturated by an older build): fail the run (earlier calls
            -- stay counted, as a run cut short does).
            for k = first, i - 1 do
              if fraised[k] and call('INCRBY', fcur[k], int(-fh[k])) == 0 then call('DEL', fcur[k]) end
            end
            if cross and find(v.err, 'Script attempted to', 1, true) then
              bad[c] = v.err
              break
            end
            error(v)
          end
          if fraised[i] then
            n = v - h
          else
            n = v and tonumber(v) or 0
          end
          local over = n + h + wp > r
          fwp[i], fn[i], fover[i] = wp, n, over
          refused = refused or over
        end
      end
    end
    if bad[c] then
      nres = nres + 1
      results[nres] = pack(P.STATUS, P.ELSEWHERE) .. pack(P.REASON, #bad[c]) .. bad[c]
    else
      for i = first, last do
        if fconc[i] then
          local r, h, key, lease = freq[i], fh[i], fcur[i], flease[i]
          if fop[i] == P.OP_GIVE_BACK then
            lease_read(i)
            if not fst[i] and (not fhdr[i] or lease == 0 or h == 0 or lease == fot[i]) then
              fst[i] = conc.load(key, fhead[i])
            end
            local st = fst[i]
            if st then
              if h > 0 or lease ~= 0 then conc.give_back(st, r, h, lease) end
            elseif call('LREM', key, -1, pack(P.LOG_ENTRY, lease, h)) == 1 then
              -- (conc.removed: the oldest stays, and so the TTL)
              fn[i], flen[i] = max(fn[i] - h, 0), flen[i] - 1
              call('LSET', key, 0, pack(P.LEASE_HEADER, fn[i], fhw[i], flen[i], fot[i], foc[i]))
            else
              st = conc.load(key, fhead[i])
              fst[i] = st
              conc.find_back(st, lease)
            end
          elseif not refused and h > 0 then
            local st = fst[i]
            if st then
              ftook[i] = conc.add(st, r, h)
            else
              -- conc.add, then save
              local t, w = max(now, fhw[i] + 1), fw[i]
              call('RPUSH', key, pack(P.LOG_ENTRY, t, h))
              local len = flen[i] + 1
              if len == 1 then fot[i], foc[i] = t, h end
              fn[i], fhw[i], flen[i], ftook[i] = fn[i] + h, t, len, t
              local head = pack(P.LEASE_HEADER, fn[i], t, len, fot[i], foc[i])
              if fhdr[i] then call('LSET', key, 0, head) else call('LPUSH', key, head) end
              call('PEXPIRE', key, int(ms_until(max(t + w, t + 1)) + grace))
            end
          end
        elseif fraised[i] then
          local h = fh[i]
          if refused then
            if call('INCRBY', fcur[i], int(-h)) == 0 then call('DEL', fcur[i]) end
          else
            local n = fn[i]
            if n == 0 then
              local w = fw[i]
              local expiry = ft[i] + w
              if fpi[i] > 0 then expiry = expiry + w end
              call('PEXPIRE', fcur[i], int(ms_until(expiry) + grace))
            end
            fn[i] = n + h
          end
        end
      end
      if cross then
        nres = nres + 1
        results[nres] = pack(P.STATUS, P.DONE)
      end
      for i = first, last do
        local n, wp, r, w, t, over = fn[i], fwp[i], fr[i], fw[i], ft[i], refused and fover[i]
        local remaining, reset, retry, lease = 0, t + w - now, 0, 0
        if fconc[i] then
          local st, q = fst[i], freq[i]
          lease = ftook[i]
          if not st then
            -- log.result on the header's fields (never over: see above)
            remaining, reset = max(r - fn[i], 0), 0
            if flen[i] > 0 then reset = fot[i] + w - now end
          else
            -- As decide's outcome, then save: a give-back is always
            -- saved, a take when it counted or its log changed (see
            -- result).
            remaining, reset = log.result(st, q)
            if over then retry = retry_after(st, q, fh[i]) end
            if fop[i] == P.OP_GIVE_BACK or lease ~= 0 or st.changed then
              st.f, st.w = conc, w
              save(st)
            end
          end
        else
          local left = r - (n + wp)
          if left > 0 then remaining = floor(left) end
          if over then
            local f, p = fixed, 0
            if fpi[i] > 0 then f, p = sliding, pcount[fpi[i]] end
            retry = retry_after({ t = t, n = n, p = p }, { f = f, w = w, r = r, h = fh[i] }, fh[i])
          end
        end
        nres = nres + 1
        if leased then
          results[nres] = pack(P.LEASED, over and 1 or 0, remaining, reset, retry, lease)
        elseif parts[c] then
          local stamp = P.NOT_TAKEN
          if fraised[i] and not refused then stamp = t end
          results[nres] = pack(P.STAMPED, over and 1 or 0, remaining, reset, retry, stamp)
        else
          results[nres] = pack(P.RESULT, over and 1 or 0, remaining, reset, retry)
        end
      end
    end
  end
  return concat(results, '', 1, nres)
end

-- prefetch reads into vals, with one MGET per MGET_CHUNK names, the
-- counters of the first total requests but for sliding logs (lists): the
-- windows' counts, and the buckets' and GCRA's states.
local function prefetch(total)
  local names, seen = {}, {}
  local function want(name)
    if not seen[name] then
      seen[name] = true
      names[#names + 1] = name
    end
  end
  for i = 1, total do
    local r = reqs[i]
    local f = r.f
    if r.r > 0 and f ~= log and f ~= conc then
      if f == fixed or f == sliding then
        window_names(r)
        want(r.cur)
        if f == sliding then want(r.prev) end
      else
        want(r.key)
      end
    end
  end
  -- At most MGET_CHUNK names an MGET: Lua unpacks 8,000 values at most.
  for from = 1, #names, MGET_CHUNK do
    local to = min(from + MGET_CHUNK - 1, #names)
    local got = call('MGET', tunpack(names, from, to))
    for k = from, to do vals[names[k]] = got[k - from + 1] end
  end
end

-- start binds the library's functions on the first run, and reads a
-- run's header from blob: it returns the number of calls and the offset
-- of the first.
local function start(blob)
  if not floor then
    floor, ceil, min, max, fmod = math.floor, math.ceil, math.min, math.max, math.fmod
    unpack, pack, concat, tunpack, format, find = struct.unpack, struct.pack, table.concat, _G.unpack, string.format, string.find
    call, pcall, type, tonumber, ipairs = redis.call, redis.pcall, _G.type, _G.tonumber, _G.ipairs
  end
  local ncalls, off
  op, now, ncalls, off = unpack(P.HEADER, blob)
  grace = GRACE
  if now == 0 then
    local t = call('TIME')
    now, grace = tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
  end
  return ncalls, off
end

-- cross decides a CROSS run (see fast): args[1] is the run's argument,
-- a FAST one, and the counter keys follow, in args rather than in KEYS so
-- that Redis Cluster does not refuse keys of several slots. Its function
-- is registered with the allow-cross-slot-keys flag (Redis 7.0 and later),
-- and the store sends it to the node that serves the keys.
local function cross(args)
  local ncalls, off = start(args[1])
  return fast(args, args[1], off, ncalls, 1, true, false)
end

-- take decides the calls of blob (ARGV[1]) on the counters keys (KEYS),
-- and returns the packed results.
local function take(keys, blob)
  local ncalls, off = start(blob)
  if op == P.FAST or op == P.FAST_LEASED then return fast(keys, blob, off, ncalls, 0, false, op == P.FAST_LEASED) end
  states, dirty, out, vals = {}, { n = 0 }, {}, {}

  -- Read every call's requests, then their counters, then decide.
  local sizes, total = {}, 0
  for c = 1, ncalls do
    local n
    n, off = unpack(P.CALL, blob, off)
    local compact = n >= P.COMPACT
    if compact then n = n - P.COMPACT end
    sizes[c] = n
    for k = 1, n do
      total = total + 1
      local r = reqs[total]
      if not r then
        r = { key = false, f = false, mode = 0, cwo = false, give = false, waso = false, r = 0, b = 0, g = 0, w = 0,
              h = 0, stamp = 0, iv = 0, over = false, gover = false, took = 0, st = false, t = 0, cur = false,
              prev = false, wp = 0, op = 0, lease = 0 }
        reqs[total] = r
      end
      local flags
      if compact then
        -- Enforced, in groups of their own (a compact call is refused
        -- when one is over, whatever the groups).
        flags, r.r, r.w, r.h, off = unpack(P.COMPACT_RECORD, blob, off)
        r.b, r.g, r.stamp, r.iv, r.op = r.r, k, 0, 0, P.OP_TAKE
        if flags == P.CONC then r.op, r.stamp, off = unpack(P.COMPACT_LEASE, blob, off) end
      else
        flags, r.op, r.r, r.b, r.g, r.w, r.h, r.stamp, r.iv, off = unpack(P.RECORD, blob, off)
      end
      r.key = keys[total]
      local a = flags % P.MODE_SHIFT -- (arithmetic, not floor: no call)
      r.f = algorithms[a]
      r.mode = (flags % P.CWO - a) / P.MODE_SHIFT
      r.cwo = flags % P.GIVE >= P.CWO
      r.give = flags % P.WAS_OVER >= P.GIVE
      r.waso = flags >= P.WAS_OVER
      r.st = false
    end
  end
  prefetch(total)
  local base = 0
  for c = 1, ncalls do
    local n = sizes[c]
    if op ~= P.TAKE or not windows(base, n) then decide(base, n) end
    base = base + n
  end
  for d = 1, dirty.n do save(dirty[d]) end
  local reply = concat(out)
  states, dirty, out, vals = nil, nil, nil, nil -- nothing kept from run to run but reqs' tables and suffixes
  return reply
end

-- script.go ends this chunk: as a function library (FUNCTION LOAD), it
-- registers take; as a script (EVAL), it calls it.

-- ratelimitd: decide one call on its counters, atomically. A port of
-- backend.State (backend/algorithm.go), decision for decision: every
-- number is a double, as Go's float64 arithmetic there is, and times are
-- whole microseconds since the Unix epoch.
--
-- KEYS: one counter key per request (a key may repeat: one counter).
-- ARGV[1]: now in µs, or "" to read Redis TIME (the one clock of all replicas).
-- ARGV[2]: "take" decides the whole call; "part" decides a cluster slot's
--   share of a call as if the call were admitted, and returns stamps for
--   "refund", which gives back hits "part" took when the call was refused;
--   "multi" decides several calls, one after the other (see the end).
-- ARGV[3 + 7*(i-1) ...]: per request i: flags (algorithm + 8*mode +
--   32*consume_when_over, and for "refund" 64*give_back + 128*was_over),
--   requests, window µs, burst, hits, group, stamp.
-- Returns 4 numbers per request (over, remaining, reset µs, retry µs), and
-- on "part" a fifth: the stamp that a refund of it needs.

local SLIDING, FIXED, LOG, BUCKET, GCRA = 0, 1, 2, 3, 4
local ENFORCE, SHADOW, QUOTA = 0, 1, 2
local MAX_LOG = 10000
local MAX_T = 2^62 -- saturation of times, as Go saturates int64 math

local op = ARGV[2]
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end


-- States, one per distinct key, loaded on first use. A value starts with
-- its algorithm's digit; a value of another algorithm is a fresh state.
local states = {}

local function load(r)
  local st = states[r.key]
  if st then return st end
  st = { t = 0, n = 0, p = 0, ts = {}, ns = {}, h = 1 }
  local v = redis.call('GET', r.key)
  if v and string.byte(v, 1) == 48 + r.alg then
    if r.alg == LOG then
      st.n = struct.unpack('<d', v, 2)
      local pos, k = 10, 0
      while pos < #v do
        k = k + 1
        st.ts[k], st.ns[k], pos = struct.unpack('<dd', v, pos)
      end
    else
      st.t, st.n, st.p = struct.unpack('<ddd', v, 2)
    end
  end
  states[r.key] = st
  return st
end

local function copy(st)
  return { t = st.t, n = st.n, p = st.p, ts = st.ts, ns = st.ns, h = st.h }
end

-- advance brings st to now without changing any decision.
local function advance(st, r, at)
  local a, w = r.alg, r.w
  if a == FIXED or a == SLIDING then
    local start = at - math.fmod(at, w)
    if start <= st.t then return end
    if a == SLIDING and start == st.t + w then st.p = st.n else st.p = 0 end
    st.t, st.n = start, 0
  elseif a == LOG then
    while st.h <= #st.ts and st.ts[st.h] <= at - w do
      st.n = math.max(st.n - st.ns[st.h], 0)
      st.h = st.h + 1
    end
  elseif a == BUCKET then
    if st.t == 0 then
      st.t, st.n = at, r.b -- a fresh bucket starts full; n holds the tokens
    elseif at > st.t then
      st.n = math.min(r.b, st.n + (at - st.t) * r.r / w)
      st.t = at
    end
  end
end

local function weighted_prev(st, r, at)
  local elapsed = math.min(math.max(at - st.t, 0), r.w)
  return st.p * (r.w - elapsed) / r.w
end

local function admits(st, r, at, hits)
  if r.r == 0 then return false end
  advance(st, r, at)
  local a = r.alg
  if a == FIXED or a == LOG then
    return st.n + hits <= r.r
  elseif a == SLIDING then
    return st.n + hits + weighted_prev(st, r, at) <= r.r
  elseif a == BUCKET then
    return st.n >= hits
  elseif a == GCRA then
    if hits > r.b then return false end
    return math.max(st.t, at) - at <= (r.b - hits) * r.iv
  end
  return false
end

local function newest(st)
  if st.h > #st.ts then return 0 end
  return st.ts[#st.ts]
end

-- add counts hits without checking the limit; it returns the stamp a
-- refund needs: the window's start, or the log entry's time.
local function add(st, r, hits)
  if r.r == 0 or hits == 0 then return 0 end
  advance(st, r, now)
  local a = r.alg
  if a == FIXED or a == SLIDING then
    st.n = st.n + hits
    return st.t
  elseif a == LOG then
    local t = math.max(now, newest(st))
    local last, count = #st.ts, #st.ts - st.h + 1
    if count > 0 and (st.ts[last] == t or count == MAX_LOG) then
      st.ts[last], st.ns[last] = t, st.ns[last] + hits
    else
      st.ts[last + 1], st.ns[last + 1] = t, hits
    end
    st.n = st.n + hits
    return t
  elseif a == BUCKET then
    st.n = st.n - hits
  elseif a == GCRA then
    st.t = math.min(math.max(st.t, now) + hits * r.iv, MAX_T)
  end
  return 0
end

-- refund gives back hits that add counted at stamp, if they still count.
local function refund(st, r, hits, stamp)
  if r.r == 0 or hits == 0 then return end
  advance(st, r, now)
  local a = r.alg
  if a == FIXED or a == SLIDING then
    if st.t == stamp then st.n = math.max(st.n - hits, 0) end
  elseif a == LOG then
    for i = #st.ts, st.h, -1 do
      if st.ts[i] == stamp then
        local back = math.min(hits, st.ns[i])
        st.ns[i], st.n = st.ns[i] - back, math.max(st.n - back, 0)
        if st.ns[i] == 0 then
          table.remove(st.ts, i)
          table.remove(st.ns, i)
        end
        return
      end
    end
  elseif a == BUCKET then
    st.n = math.min(st.n + hits, r.b)
  elseif a == GCRA then
    st.t = math.max(st.t - hits * r.iv, now)
  end
end

local function ceil_div(tokens, r)
  if tokens <= 0 then return 0 end
  return math.ceil(tokens * r.w / r.r)
end

local function window_end(r, at)
  return at - math.fmod(at, r.w) + r.w
end

-- retry_at returns the first instant from which hits more would be
-- admitted, or false if hits exceed what the limit can ever admit.
local function retry_at(st, r, hits)
  local a, w = r.alg, r.w
  if a == FIXED then
    return st.t + w, hits <= r.r
  elseif a == SLIDING then
    if hits > r.r then return 0, false end
    local t, prev, room = st.t, st.p, 0
    if st.n + hits <= r.r then
      room = r.r - (st.n + hits)
    else
      t, prev, room = st.t + w, st.n, r.r - hits
    end
    if prev == 0 then return t, true end
    return t + w - math.floor(math.min(room * w / prev, w)), true
  elseif a == LOG then
    if hits > r.r then return 0, false end
    local need = st.n + hits - r.r
    if need <= 0 then return now, true end
    for i = st.h, #st.ts do
      if st.ns[i] >= need then return st.ts[i] + w, true end
      need = need - st.ns[i]
    end
    return now, true
  elseif a == BUCKET then
    if hits > r.b then return 0, false end
    return now + ceil_div(hits - st.n, r), true
  elseif a == GCRA then
    if hits > r.b then return 0, false end
    return math.max(st.t, now) - (r.b - hits) * r.iv, true
  end
  return now, true
end

local function retry_after(st, r, hits)
  local at, possible = retry_at(st, r, hits)
  if not possible then return r.w end
  -- The closed forms may be a microsecond off either way, as in Go: step
  -- until admits agrees.
  at = math.max(at, now + 1)
  local function ok(x) return admits(copy(st), r, x, hits) end
  for _ = 1, 4 do
    if at > now + 1 and ok(at - 1) then at = at - 1 else break end
  end
  for _ = 1, 4 do
    if not ok(at) then at = at + 1 else break end
  end
  return at - now
end

local function pos(x) return math.max(math.min(x, MAX_T), 0) end

-- result appends r's result to out.
local function result(out, st, r, over)
  if r.r == 0 then
    local reset = window_end(r, now) - now
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = 1, 0, reset, reset
    return
  end
  advance(st, r, now)
  local a, w = r.alg, r.w
  local remaining, reset = 0, 0
  if a == FIXED then
    remaining, reset = math.max(r.r - st.n, 0), st.t + w - now
  elseif a == SLIDING then
    local left = r.r - (st.n + weighted_prev(st, r, now))
    if left > 0 then remaining = math.floor(left) end
    reset = st.t + w - now
  elseif a == LOG then
    remaining = math.max(r.r - st.n, 0)
    if st.h <= #st.ts then reset = st.ts[st.h] + w - now end
  elseif a == BUCKET then
    if st.n > 0 then remaining = math.floor(st.n) end
    reset = ceil_div(r.b - st.n, r)
  elseif a == GCRA then
    local tat = math.max(st.t, now)
    local room = r.b * r.iv - (tat - now)
    if room > 0 then remaining = math.floor(room / r.iv) end
    reset = tat - now
  end
  local retry = 0
  if over then retry = retry_after(st, r, r.hits) end
  out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = over and 1 or 0, remaining, pos(reset), pos(retry)
end

local function expiry(st, r)
  local a, w = r.alg, r.w
  if a == FIXED then return st.t + w
  elseif a == SLIDING then return st.t + 2 * w
  elseif a == LOG then return newest(st) + w
  elseif a == BUCKET then return st.t + ceil_div(r.b - st.n, r)
  end
  return st.t
end

local function save(st, r)
  local ttl = expiry(st, r) - now
  if ttl <= 0 or (r.alg == LOG and st.h > #st.ts) then
    redis.call('DEL', r.key)
    return
  end
  local v
  if r.alg == LOG then
    local parts = { tostring(LOG), struct.pack('<d', st.n) }
    for i = st.h, #st.ts do parts[#parts + 1] = struct.pack('<dd', st.ts[i], st.ns[i]) end
    v = table.concat(parts)
  else
    v = tostring(r.alg) .. struct.pack('<ddd', st.t, st.n, st.p)
  end
  -- (a TTL under 10^13 ms prints as an integer, which SET needs)
  redis.call('SET', r.key, v, 'PX', math.min(math.ceil(ttl / 1000), 9e12))
end

-- parse returns the n requests whose keys start after KEYS[kbase] and
-- whose fields start at ARGV[abase].
local function parse(kbase, abase, n)
  local reqs = {}
  for i = 1, n do
    local o = abase + 7 * (i - 1)
    local flags = tonumber(ARGV[o])
    local r = {
      key = KEYS[kbase + i],
      alg = flags % 8,
      mode = math.floor(flags / 8) % 4,
      cwo = math.floor(flags / 32) % 2 == 1,
      give = math.floor(flags / 64) % 2 == 1, -- refund: give back its hits
      was_over = flags >= 128, -- refund: the request was over
      r = tonumber(ARGV[o + 1]),
      w = tonumber(ARGV[o + 2]),
      hits = tonumber(ARGV[o + 4]),
      group = tonumber(ARGV[o + 5]),
      stamp = tonumber(ARGV[o + 6]),
    }
    local b = tonumber(ARGV[o + 3])
    if b == 0 then b = r.r end
    r.b = b
    if r.alg == GCRA and r.r > 0 then
      -- the emission interval: ceil(w / r), exactly
      local iv = math.floor((r.w + r.r - 1) / r.r)
      while iv * r.r < r.w do iv = iv + 1 end
      while iv > 1 and (iv - 1) * r.r >= r.w do iv = iv - 1 end
      r.iv = iv
    end
    reqs[i] = r
  end
  return reqs
end

local out = {}
local dirty = {}

-- decide decides one call (op "take", "part" or "refund") into out.
local function decide(op, reqs)
  local n = #reqs
  if op == 'refund' then
    for i = 1, n do
      local r = reqs[i]
      if r.r > 0 and r.give then
        refund(load(r), r, r.hits, r.stamp)
        dirty[r.key] = r
      end
    end
    for i = 1, n do
      local r = reqs[i]
      result(out, r.r > 0 and load(r) or nil, r, r.was_over)
    end
    return
  end

  -- Decide: earlier requests of this call on one counter count as taken.
  local over = {}
  for i = 1, n do
    local r = reqs[i]
    local hits = r.hits
    for j = 1, i - 1 do
      if reqs[j].key == r.key and not over[j] then hits = hits + reqs[j].hits end
    end
    if r.r == 0 then
      over[i] = true
    else
      over[i] = not admits(load(r), r, now, hits)
      -- A refill is a float step: keep it, as the memory store does, so
      -- that both round the same way however often they are asked.
      if r.alg == BUCKET then dirty[r.key] = r end
    end
  end

  -- group_over[g]: whether any request of group g is over.
  local group_over = {}
  for i = 1, n do
    local g = reqs[i].group
    group_over[g] = group_over[g] or over[i]
  end

  -- refused applies backend.Refused; a "part" decides as if admitted.
  local refused = false
  if op == 'take' then
    local quota, quota_under = false, false
    for g, o in pairs(group_over) do
      local mode
      for i = 1, n do
        if reqs[i].group == g then mode = reqs[i].mode break end
      end
      if mode == ENFORCE and o then refused = true end
      if mode == QUOTA then
        quota = true
        quota_under = quota_under or not o
      end
    end
    refused = refused or (quota and not quota_under)
  end

  local stamps = {}
  for i = 1, n do
    local r = reqs[i]
    stamps[i] = 0
    if r.r > 0 and (r.cwo or (not refused and not group_over[r.group])) then
      stamps[i] = add(load(r), r, r.hits)
      if r.hits > 0 then dirty[r.key] = r end
    end
  end

  for i = 1, n do
    local r = reqs[i]
    result(out, r.r > 0 and load(r) or nil, r, over[i])
    if op == 'part' then out[#out + 1] = stamps[i] end
  end
end

if op == 'multi' then
  -- ARGV[3]: the number of calls; then per call its number of requests
  -- and their fields. Calls are decided one after the other, each
  -- atomically: a batch of concurrent calls in one script run.
  local kbase, abase = 0, 4
  for _ = 1, tonumber(ARGV[3]) do
    local n = tonumber(ARGV[abase])
    decide('take', parse(kbase, abase + 1, n))
    kbase, abase = kbase + n, abase + 1 + 7 * n
  end
else
  decide(op, parse(0, 3, #KEYS))
end
for key, r in pairs(dirty) do save(states[key], r) end
return out

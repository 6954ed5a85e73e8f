-- ratelimitd: exchange replicas' shares of one RLQS bucket, atomically
-- (backend.ShareStore). KEYS[1] is the bucket's hash: one field per
-- replica, named after it, whose value is ENTRY. ARGV[1] is the prefix of
-- the replicas' notification channels, ARGV[2] the bucket's name; then
-- come the call's requests on the bucket, in order, two arguments each:
-- the replica's name and REQUEST. The reply is an array, a string per
-- request: REPLY (the grant, and the µs until the first of the other live
-- entries expires, 0 for none), then the other live entries' demands,
-- each a '<d'.
-- Numbers travel as binary doubles, never as Lua numbers, which Redis
-- would truncate to integers (and +Inf with them). Times are µs since
-- the Unix epoch.
--
-- Per request, the script drops the expired fields, sums the other
-- fields' grants, grants min(want, max(0, limit - others)), writes the
-- replica's field (or deletes it on a zero TTL), and keeps the key until
-- its latest field expires. When that changed the replica's field (added
-- or removed it, changed its grant or demands, or made it expire sooner),
-- it publishes the
-- bucket's name on the channel of every other replica with a live field
-- (ARGV[1] .. its name), so that they exchange the bucket again.
local P = {
  REQUEST = '<dddd', -- limit, want, TTL µs, now (µs; 0: read Redis TIME); then the demands, each a '<d'
  ENTRY = '<dd', -- the grant, the expiry µs; then the demands, each a '<d'
  ENTRY_SIZE = 16, -- bytes of ENTRY before the demands
  REQUEST_SIZE = 32, -- bytes of REQUEST before the demands
  REPLY = '<dd', -- the grant, the µs until the first other live entry expires (0: none); then the demands
}

-- GRACE is how many ms the key outlives its latest field when the caller
-- gives the clock (for tests on a manual clock), as in take.lua: Redis
-- expires keys on its own clock, which then runs apart from the script's.
local GRACE = 1000

-- exchange applies one request of replica, arg its REQUEST, to key, and
-- returns its reply.
local function exchange(key, channels, bucket, replica, arg)
  local limit, want, ttl, now = struct.unpack(P.REQUEST, arg)
  local grace = GRACE
  if now == 0 then
    local t = redis.call('TIME')
    now, grace = tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
  end

  local fields = redis.call('HGETALL', key)
  local others, latest, soonest, own = 0, 0, 0, nil
  local out, dead, peers = { '' }, {}, {}
  for i = 1, #fields, 2 do
    local name, v = fields[i], fields[i + 1]
    local grant, expiry = struct.unpack(P.ENTRY, v)
    if expiry <= now then
      dead[#dead + 1] = name
    elseif name == replica then
      own = v
    else
      others = others + grant
      latest = math.max(latest, expiry)
      if soonest == 0 or expiry < soonest then
        soonest = expiry
      end
      out[#out + 1] = string.sub(v, P.ENTRY_SIZE + 1)
      peers[#peers + 1] = name
    end
  end
  for i = 1, #dead, 1000 do -- HDEL in chunks, within Lua's stack
    redis.call('HDEL', key, unpack(dead, i, math.min(i + 999, #dead)))
  end

  local granted, changed = 0, false
  if ttl > 0 then
    granted = math.max(0, math.min(want, limit - others))
    local expiry = now + ttl
    local demands = string.sub(arg, P.REQUEST_SIZE + 1)
    redis.call('HSET', key, replica, struct.pack(P.ENTRY, granted, expiry) .. demands)
    latest = math.max(latest, expiry)
    -- The grant, the expiry and the demands as they were: an entry that
    -- expires sooner frees its grant sooner, which the others must hear.
    if own == nil then
      changed = true
    else
      local was, lasts = struct.unpack(P.ENTRY, own)
      changed = was ~= granted or expiry < lasts or string.sub(own, P.ENTRY_SIZE + 1) ~= demands
    end
  elseif own then
    redis.call('HDEL', key, replica)
    changed = true
  end
  if changed then
    for _, name in ipairs(peers) do
      redis.call('PUBLISH', channels .. name, bucket)
    end
  end
  if latest > 0 then
    -- Whole ms, under 10^13 so that it prints as an integer.
    redis.call('PEXPIRE', key, string.format('%.0f', math.min(math.ceil((latest - now) / 1000), 9e12) + grace))
  end
  local left = 0
  if soonest > 0 then
    left = soonest - now
  end
  out[1] = struct.pack(P.REPLY, granted, left)
  return table.concat(out)
end

local replies = {}
for i = 3, #ARGV, 2 do
  replies[#replies + 1] = exchange(KEYS[1], ARGV[1], ARGV[2], ARGV[i], ARGV[i + 1])
end
return replies

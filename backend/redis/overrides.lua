-- ratelimitd: change or read the operators' runtime overrides
-- (backend.OverrideStore), and note counter resets, atomically. KEYS[1]
-- is a hash of the records by id, KEYS[2] the set's version, an integer,
-- KEYS[3] the reset notes, a list; all share a hash tag, so that Redis
-- Cluster keeps them in one slot. ARGV[1] names the op:
--   put ID RECORD MAX  stores RECORD under ID unless the hash holds MAX
--                      records already and none under ID; replies
--                      {1, version} when stored, {0, version} when not
--   delete ID          removes ID's record; replies {1, version} when it
--                      was there, {0, version} when not (nothing changed)
--   reset KEYS MAX     notes that the counters KEYS (opaque to the
--                      script) were reset: appends "VERSION KEYS" to the
--                      notes, under a new version, and keeps the last MAX
--                      notes; replies the version
--   read               replies {version, {id, record, ...}, {note, ...}}
-- A reset changes no record, but raises the version, so that replicas
-- polling it read the notes and forget what they cached of those
-- counters (see Store.Overrides).
-- A missing version is 0: no change was ever made. The first change
-- starts it at Redis TIME in µs, so that a set that was lost (FLUSHALL, a
-- new Redis) starts again past every version it had before: its replicas,
-- polling with the version they last saw, never take the new set for the
-- old one. Versions stay well within a double's exact integers (2^53).
local records, version, notes = KEYS[1], KEYS[2], KEYS[3]

local function current()
  return tonumber(redis.call('GET', version) or '0')
end

local function bump()
  if redis.call('EXISTS', version) == 0 then
    local t = redis.call('TIME')
    redis.call('SET', version, t[1] .. string.format('%06d', tonumber(t[2])))
  end
  return redis.call('INCR', version)
end

local op = ARGV[1]
if op == 'put' then
  if redis.call('HEXISTS', records, ARGV[2]) == 0 and redis.call('HLEN', records) >= tonumber(ARGV[4]) then
    return { 0, current() }
  end
  redis.call('HSET', records, ARGV[2], ARGV[3])
  return { 1, bump() }
elseif op == 'delete' then
  if redis.call('HDEL', records, ARGV[2]) == 0 then return { 0, current() } end
  return { 1, bump() }
elseif op == 'reset' then
  local v = bump()
  redis.call('RPUSH', notes, string.format('%.0f', v) .. ' ' .. ARGV[2])
  redis.call('LTRIM', notes, -tonumber(ARGV[3]), -1)
  return v
elseif op == 'read' then
  return { current(), redis.call('HGETALL', records), redis.call('LRANGE', notes, 0, -1) }
end
return redis.error_reply('ERR overrides.lua: unknown op ' .. tostring(op))

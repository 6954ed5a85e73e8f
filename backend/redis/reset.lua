-- ratelimitd: forget counters (backend.Resetter). KEYS are counter keys,
-- named as take.lua names them; ARGV[1] is now in µs (0: read Redis
-- TIME, as take.lua does), and ARGV[1 + i] the window in µs of KEYS[i]'s
-- limit. A sliding log, a token bucket and GCRA keep their state under
-- the counter key itself; a fixed or sliding window counts each window
-- under the counter key, '@' and the window's number (its start ÷ its
-- length), written as take.lua writes it. The script deletes the counter
-- key and the keys of the window of now and of the one before, which a
-- sliding window weighs: older windows weigh nothing, and expire. The
-- keys of one run share a hash tag (one Cluster slot), as take.lua's do.
-- The reply is how many keys were deleted.
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local deleted = 0
for i, key in ipairs(KEYS) do
  local w = tonumber(ARGV[i + 1])
  local t = now - math.fmod(now, w)
  deleted = deleted + redis.call('DEL', key, key .. '@' .. (t / w), key .. '@' .. (t / w - 1))
end
return deleted

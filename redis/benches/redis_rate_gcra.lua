-- The comparison: GCRA as redis_rate (go-redis) describes its algorithm, written
-- here from that description: times as float seconds since 2017-01-01, the
-- theoretical arrival time stored as a float, EX expiry in whole seconds.
-- KEYS[1] key; ARGV: burst, rate, period (s), cost. Reply: {allowed units,
-- remaining, retry_after (s, string), reset_after (s, string)}.
local burst, rate, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local interval = period / rate
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + t[2] / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval * cost
local diff = now - (new_tat - interval * burst)
if diff < 0 then
  return {0, 0, tostring(-diff), tostring(tat - now)}
end
local reset_after = new_tat - now
if reset_after > 0 then
  redis.call('SET', KEYS[1], new_tat, 'EX', math.ceil(reset_after))
end
return {cost, math.floor(diff / interval), '-1', tostring(reset_after)}

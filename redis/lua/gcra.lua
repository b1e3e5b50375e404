-- sluicegate GCRA: token bucket, leaky bucket meter, shaper reservation, lease.
--
-- KEYS[1]  the limit's key; its value is F, the instant (integer microseconds of
--          Redis TIME) at which the bucket is full again. Absent = full.
-- ARGV[1]  T, the emission interval in whole microseconds (period / amount, rounded up)
-- ARGV[2]  b, the burst (bucket capacity)
-- ARGV[3]  n, the cost (0 = peek)
-- ARGV[4]  max delay in microseconds (the shaper's slack; 0 for the bucket)
-- ARGV[5]  mode: 'c' consume, 'p' peek at cost n (never writes), 'l' lease up to n
--
-- Admit iff (F - now)+ + n*T - b*T <= max delay; then F = max(F, now) + n*T, stored
-- with PX = time until F, when the key decides exactly like an absent one. Nothing
-- is written on a denial. Every value stays below 2^53 (the client checks b*T), so
-- Lua's doubles hold them exactly.
--
-- Reply: {allowed, remaining, retry_after_us, reset_after_us, limit, now_us,
--         delay_us, granted}
local t = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local slack = tonumber(ARGV[4])
local mode = ARGV[5]

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- floor(a / b) for integers a >= 0, b > 0 below 2^53, corrected for the rounding
-- of the double division.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local tau = burst * t
local f = tonumber(redis.call('GET', KEYS[1]) or '0')
local base = f
if base < now then base = now end
local debt = base - now
local size = tau + slack

if mode == 'l' then
  -- A lease takes what is there, up to n; with nothing there it is a denial of one.
  local room = size - debt
  local avail = 0
  if room > 0 then avail = idiv(room, t) end
  if avail < n then n = avail end
  if n == 0 then n = 1 end
end

local need = n * t
local delay = debt + need - tau
if delay < 0 then delay = 0 end

if delay <= slack then
  local new_debt = debt + need
  local room = size - new_debt
  local remaining = 0
  if room > 0 then remaining = idiv(room, t) end
  if n > 0 and mode ~= 'p' then
    redis.call('SET', KEYS[1], string.format('%d', base + need),
      'PX', string.format('%d', idiv(new_debt + 999, 1000)))
  end
  local granted = n
  if mode == 'p' then granted = 0 end
  return {1, remaining, 0, new_debt, burst, now, delay, granted}
end

local room = size - debt
local remaining = 0
if room > 0 then remaining = idiv(room, t) end
return {0, remaining, delay - slack, debt, burst, now, 0, 0}

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
--         delay_us, granted}; limit = b + floor(max delay / T)
--
-- Written for its cost inside the server, which every check pays (no closure or
-- helper function is made or called per run):
-- * `s + 0` turns a numeric string into its number by the same conversion as
--   tonumber(s), at a fraction of the price of calling tonumber.
-- * floor(a / b) for integers 0 <= a < 2^53, 0 < b < 2^53 is q - q % 1 with q = a / b:
--   the division is correctly rounded, and below 2^53 a quotient short of an integer
--   k is short of it by at least 1/b, more than half a double's spacing near k, so
--   it never rounds up to k; q % 1 is q's exact fractional part. No correction needed.
-- * string.format('%d', x), for the SET's two arguments only: they must be exact
--   decimal strings, and Lua's own number-to-string keeps 14 digits.
local t = ARGV[1] + 0
local burst = ARGV[2] + 0
local n = ARGV[3] + 0
local slack = ARGV[4] + 0
local mode = ARGV[5]

local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]

local tau = burst * t
local size = tau + slack
-- The reported limit is the largest grant, b + floor(slack / T) (the shaper's;
-- b for the buckets), so remaining <= limit.
local limit = burst + (slack - slack % t) / t
-- base = max(F, now), debt = base - now
local base, debt = now, 0
local f = redis.call('GET', KEYS[1])
if f then
  f = f + 0
  if f > now then base, debt = f, f - now end
end

if mode == 'l' then
  -- A lease takes what is there, up to n; with nothing there it is a denial of one.
  local avail = 0
  local room = size - debt
  if room > 0 then avail = room / t; avail = avail - avail % 1 end
  if avail < n then n = avail end
  if n == 0 then n = 1 end
end

local need = n * t
local new_debt = debt + need
local delay = new_debt - tau
if delay < 0 then delay = 0 end

if delay <= slack then
  -- Admitted: new_debt <= tau + slack = size, so the room left is never negative.
  local remaining = (size - new_debt) / t
  remaining = remaining - remaining % 1
  if mode == 'p' then
    return {1, remaining, 0, new_debt, limit, now, delay, 0}
  end
  if n > 0 then
    -- PX = ceil(new_debt / 1000) ms
    local ms = (new_debt + 999) / 1000
    redis.call('SET', KEYS[1], string.format('%d', base + need),
      'PX', string.format('%d', ms - ms % 1))
  end
  return {1, remaining, 0, new_debt, limit, now, delay, n}
end

local remaining = 0
local room = size - debt
if room > 0 then remaining = room / t; remaining = remaining - remaining % 1 end
return {0, remaining, delay - slack, debt, limit, now, 0, 0}

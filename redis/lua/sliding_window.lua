-- sluicegate sliding window counter: the current aligned window's count plus the
-- previous window's, weighted by how much of it the sliding window still covers.
--
-- KEYS[1]  the limit's key; its value is "index:previous:current". Absent = empty.
-- ARGV[1]  W, the window in whole microseconds
-- ARGV[2]  limit
-- ARGV[3]  n, the cost (0 = peek)
-- ARGV[4]  mode: 'c' consume, 'p' peek at cost n (never writes), 'l' lease up to n
--
-- Admit iff prev * (W - elapsed) + (cur + n) * W <= limit * W, exactly: with the
-- estimate ceil(prev * (W - elapsed) / W) + cur (rounded up), estimate + n <= limit.
-- Those products pass 2^53 (a double's exact integers) for large limits and
-- windows, so they are never formed as doubles: muldiv below computes
-- floor(a * b / c) exactly. The client keeps the limit, W and every sum here below
-- 2^53. The key expires (PX) when the window after the stored one ends, when it
-- decides exactly like an absent one. Nothing is written on a denial. A lease
-- charges min(n, limit - estimate) units to the window it is decided in, as one
-- consume of that many; with none left it is a denial of one unit.
--
-- Reply: {allowed, remaining, retry_after_us, reset_after_us, limit, now_us, 0, granted}
--
-- Written for its cost inside the server (as gcra.lua, which explains each):
-- `s + 0` converts a numeric string as tonumber does, cheaper; floor(a / b) for
-- integers 0 <= a, 0 < b, a + b < 2^53 is q - q % 1 with q = a / b (the division
-- is correctly rounded and never rounds up to the next integer there);
-- string.format('%d') only for the SET's exact decimal arguments.
local w = ARGV[1] + 0
local limit = ARGV[2] + 0
local n = ARGV[3] + 0
local mode = ARGV[4]

local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]

local stored, prev, cur = 0, 0, 0
local raw = redis.call('GET', KEYS[1])
if raw then
  local i, p, c = string.match(raw, '^(%d+):(%d+):(%d+)$')
  if i then
    stored, prev, cur = i + 0, p + 0, c + 0
  end
end

local now_index = now / w
now_index = now_index - now_index % 1
local index = stored
if (cur == 0 and prev == 0) or now_index > stored + 1 then
  index, prev, cur = now_index, 0, 0
elseif now_index == stored + 1 then
  index, prev, cur = now_index, cur, 0
end
local elapsed = 0
if index == now_index then elapsed = now - index * w end

local function until_(at)
  if at > now then return at - now end
  return 0
end

-- Exact products of integers below 2^54, as three base-2^18 digits each: the
-- partial products stay below 2^38, far inside a double's exact range.
local B = 262144
-- 1 if a * b > c * d, -1 if less, 0 if equal.
local function cmp(a, b, c, d)
  local a0 = a % B; a = (a - a0) / B
  local a1 = a % B; local a2 = (a - a1) / B
  local b0 = b % B; b = (b - b0) / B
  local b1 = b % B; local b2 = (b - b1) / B
  local c0 = c % B; c = (c - c0) / B
  local c1 = c % B; local c2 = (c - c1) / B
  local d0 = d % B; d = (d - d0) / B
  local d1 = d % B; local d2 = (d - d1) / B
  -- Digit k of x*y - u*v (signed, |digit| < 2^40), then carries from the bottom:
  -- the sign of the difference is the sign of its top non-zero normalized digit.
  local r = {
    a0 * b0 - c0 * d0,
    a0 * b1 + a1 * b0 - c0 * d1 - c1 * d0,
    a0 * b2 + a1 * b1 + a2 * b0 - c0 * d2 - c1 * d1 - c2 * d0,
    a1 * b2 + a2 * b1 - c1 * d2 - c2 * d1,
    a2 * b2 - c2 * d2,
  }
  local carry = 0
  for k = 1, 4 do
    local v = r[k] + carry
    local digit = v % B -- in [0, B): Lua's % takes the divisor's sign
    r[k] = digit
    carry = (v - digit) / B
  end
  r[5] = r[5] + carry
  for k = 5, 1, -1 do
    if r[k] > 0 then return 1 end
    if r[k] < 0 then return -1 end
  end
  return 0
end

-- floor(a * b / c) for integers 0 <= a, b < 2^53, 0 < c, when the result is
-- below 2^53: from the double estimate, corrected by exact comparisons (the
-- estimate is off by a few units at most).
local function muldiv(a, b, c)
  local p = a * b
  if p < 9007199254740992 then
    local q = p / c
    return q - q % 1
  end
  local q = p / c
  q = q - q % 1
  while q > 0 and cmp(q, c, a, b) > 0 do q = q - 1 end
  while cmp(q + 1, c, a, b) <= 0 do q = q + 1 end
  return q
end

-- ceil(a * b / c), under the same conditions.
local function muldiv_ceil(a, b, c)
  local q = muldiv(a, b, c)
  local p = a * b
  if p < 9007199254740992 then
    if q * c < p then q = q + 1 end
  elseif cmp(a, b, q, c) > 0 then
    q = q + 1
  end
  return q
end
-- (end of the exact arithmetic)

-- Smallest elapsed e with ceil(count * (W - e) / W) <= k, i.e.
-- count * (W - e) <= k * W.
local function earliest(count, k)
  if count == 0 or k >= count then return 0 end
  return w - muldiv(k, w, count)
end

-- Time until the estimate is at most x.
local function until_at_most(x)
  local start = index * w
  if cur > x then
    return until_(start + w + earliest(cur, x))
  end
  local e = earliest(prev, x - cur)
  if e < elapsed then e = elapsed end
  return until_(start + e)
end

-- ceil(prev * (W - elapsed) / W) + cur
local estimate = muldiv_ceil(prev, w - elapsed, w) + cur
if mode == 'l' then
  local avail = limit - estimate
  if avail < n then n = avail end
  if n <= 0 then n = 1 end
end

if estimate + n <= limit then
  cur = cur + n
  if n > 0 and mode ~= 'p' then
    -- PX = max(1, ceil(time until the window after `index` ends / 1000)) ms
    local ms = (until_((index + 2) * w) + 999) / 1000
    ms = ms - ms % 1
    if ms < 1 then ms = 1 end
    redis.call('SET', KEYS[1], string.format('%d:%d:%d', index, prev, cur),
      'PX', string.format('%d', ms))
  end
  local granted = n
  if mode == 'p' then granted = 0 end
  return {1, limit - (estimate + n), 0, until_at_most(0), limit, now, 0, granted}
end

local remaining = limit - estimate
if remaining < 0 then remaining = 0 end
return {0, remaining, until_at_most(limit - n), until_at_most(0), limit, now, 0, 0}

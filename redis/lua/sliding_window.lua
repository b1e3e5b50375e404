-- sluicegate sliding window counter: the current aligned window's count plus the
-- previous window's, weighted by how much of it the sliding window still covers.
--
-- KEYS[1]  the limit's key; its value is "index:previous:current". Absent = empty.
-- ARGV[1]  W, the window in whole microseconds
-- ARGV[2]  limit
-- ARGV[3]  n, the cost (0 = peek)
-- ARGV[4]  mode: 'c' consume, 'p' peek at cost n (never writes), 'l' lease up to n
--
-- estimate = floor(prev * (W - elapsed) / W) + cur; admit iff estimate + n <= limit.
-- The client checks (limit + 1) * W < 2^53, so every product here is exact in a
-- double. The key expires (PX) when the window after the stored one ends, when it
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

-- Smallest elapsed e with floor(count * (W - e) / W) <= k.
local function earliest(count, k)
  if count == 0 then return 0 end
  local q = ((k + 1) * w - 1) / count
  local e = w - (q - q % 1)
  if e < 0 then return 0 end
  return e
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

local estimate = prev * (w - elapsed) / w
estimate = estimate - estimate % 1 + cur
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

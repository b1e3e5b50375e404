-- sluicegate fixed window: at most `limit` units per window, windows aligned to
-- multiples of the window length on Redis TIME.
--
-- KEYS[1]  the limit's key; its value is "index:count" (window index = now / W).
--          Absent = empty window.
-- ARGV[1]  W, the window in whole microseconds
-- ARGV[2]  limit
-- ARGV[3]  n, the cost (0 = peek)
-- ARGV[4]  mode: 'c' consume, 'p' peek at cost n (never writes), 'l' lease up to n
--
-- Admit iff count + n <= limit in the current window; a stored window later than
-- now's (Redis TIME went back, e.g. after a failover) is decided as the stored
-- window: no time has passed. The key expires (PX) when its window ends, when it
-- decides exactly like an absent one. Nothing is written on a denial. A lease
-- charges min(n, limit - count) units to the window it is decided in, as one
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

local stored, count = 0, 0
local raw = redis.call('GET', KEYS[1])
if raw then
  local i, c = string.match(raw, '^(%d+):(%d+)$')
  if i then
    stored, count = i + 0, c + 0
  end
end

local now_index = now / w
now_index = now_index - now_index % 1
local index = stored
if count == 0 or now_index > stored then
  index, count = now_index, 0
end
local to_end = (index + 1) * w - now
if to_end < 0 then to_end = 0 end

if mode == 'l' then
  local avail = limit - count
  if avail < n then n = avail end
  if n <= 0 then n = 1 end
end

if count + n <= limit then
  local after = count + n
  local reset = 0
  if after > 0 then reset = to_end end
  if n > 0 and mode ~= 'p' then
    -- PX = max(1, ceil(to_end / 1000)) ms
    local ms = (to_end + 999) / 1000
    ms = ms - ms % 1
    if ms < 1 then ms = 1 end
    redis.call('SET', KEYS[1], string.format('%d:%d', index, after),
      'PX', string.format('%d', ms))
  end
  local granted = n
  if mode == 'p' then granted = 0 end
  return {1, limit - after, 0, reset, limit, now, 0, granted}
end

local remaining = limit - count
if remaining < 0 then remaining = 0 end
return {0, remaining, to_end, to_end, limit, now, 0, 0}

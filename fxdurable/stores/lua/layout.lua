-- The compare-and-sets of a Redis store's layout marker (fxdurable/stores/_redis_layout.py).
--
-- KEYS: p:schema (the floor: the oldest layout of code that may open the store), p:layout (the
-- layout; absent: equal to the floor), p:migrating (the token of the migrator that claimed the
-- next step; a TTL the migrator renews, so a dead migrator's claim lapses on its own).
-- ARGV[1] is the operation, the rest its arguments; each returns 1 if it wrote, 0 if its
-- condition did not hold (then it wrote nothing):
--   claim LAYOUT TOKEN TTL_MS    the marker is at LAYOUT and no claim is held: claim
--   renew TOKEN TTL_MS           TOKEN holds the claim: extend it
--   advance TOKEN LAYOUT FLOOR   TOKEN holds the claim and the marker is at LAYOUT - 1: move
--                                the marker to LAYOUT and FLOOR, drop the claim
--   release TOKEN                TOKEN holds the claim: drop it

local op = ARGV[1]

local function layout()
  return tonumber(redis.call('GET', KEYS[2]) or redis.call('GET', KEYS[1]) or '0')
end

if op == 'claim' then
  if layout() ~= tonumber(ARGV[2]) then
    return 0
  end
  if redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4]) then
    return 1
  end
  return 0
end

if redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return 0
end
if op == 'renew' then
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  return 1
end
if op == 'advance' then
  if layout() ~= tonumber(ARGV[3]) - 1 then
    return 0
  end
  redis.call('SET', KEYS[1], ARGV[4])
  if ARGV[3] == ARGV[4] then  -- layout equal to the floor: p:layout absent, as a new store's
    redis.call('DEL', KEYS[2])
  else
    redis.call('SET', KEYS[2], ARGV[3])
  end
elseif op ~= 'release' then
  return redis.error_reply('layout.lua: unknown operation ' .. tostring(op))
end
redis.call('DEL', KEYS[3])
return 1

-- The commit of one fxdurable transaction (see fxdurable/stores/redis.py).
--
-- Two callers. The scripted path (fxdurable/stores/_redis_cached_tx.py) sends it alone: its
-- conditions carry everything the transaction read (session versions, raw values), so the
-- check and the writes are one atomic step. The WATCH path sends it inside MULTI/EXEC after
-- the WATCHes of what it read, so it only checks the records it wrote without reading.
-- Every condition first, then every write, then the session versions: each session a write
-- touched has its version (p:sv:<sid>) bumped once. A failed condition returns {its number}
-- (1-based) and writes nothing but its token's record (below); success returns
-- {0, sid, version, sid, version, ...}.
--
-- A commit carries a token (one per commit, random): its reply is recorded under p:tok:<token>
-- for a TTL (the only keys with one), and a script that finds its token recorded returns
-- {-1, the recorded reply as JSON} and does nothing else. So a commit sent again after its
-- answer was lost (a dropped connection, a client timeout) never applies twice: the resend
-- learns what the first one did, and a first one that arrives after its resend finds the
-- resend's outcome. A fence (mode "f") records {-2}, "not applied", for a token not yet
-- recorded, and writes nothing else: the WATCH path, whose conditions do not carry its
-- reads, cannot resend its writes, so it fences the lost one off and runs again. A check
-- with no token (a read's validation) records nothing.
--
-- ARGV: the key prefix; the token ("": none), its TTL in seconds, the mode ("c" commit,
-- "f" fence); the number of conditions, then per condition: kind, key index,
-- field, expected; the number of bumps, then per bump: kind, argument; then the writes to
-- the end of ARGV, each: argument count, command, key index, arguments.
--   condition kind "k": a string key; "h": a hash field; "z": a sorted-set score (field is
--     the score) -- expected "" must be absent, otherwise the JSON record's "version";
--   "s": as "k", for a session record read from a cache (a failure means: read again);
--   "v": a session version key, expected its value (absent counts as 0);
--   "r": a string key, expected its raw value; "f": a hash field, expected its raw value
--     ("" for both: must be absent).
--   bump kind "s": the argument is the session id; "o": the argument is the index of a key
--     holding a JSON record whose "session_id" names the session (absent: no bump).

local prefix, token, ttl, mode = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local tokkey = prefix .. ":tok:" .. token

local function settle(reply)
  if token ~= "" then
    redis.call("SET", tokkey, cjson.encode(reply), "EX", ttl)
  end
  return reply
end

if token ~= "" then
  local done = redis.call("GET", tokkey)
  if done then
    return {-1, done}
  end
  if mode == "f" then
    return settle({-2})
  end
end

local ncond = tonumber(ARGV[5])
local i = 6
for c = 1, ncond do
  local kind, key, field, expected = ARGV[i], KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  local current
  if kind == "k" or kind == "s" or kind == "r" then
    current = redis.call("GET", key)
  elseif kind == "h" or kind == "f" then
    current = redis.call("HGET", key, field)
  elseif kind == "v" then
    current = redis.call("GET", key) or "0"
  else
    current = redis.call("ZCOUNT", key, field, field) > 0
  end
  if kind == "v" then
    if current ~= expected then
      return settle({c})
    end
  elseif kind == "r" or kind == "f" then
    if (current or "") ~= expected then
      return settle({c})
    end
  elseif expected == "" then
    if current then
      return settle({c})
    end
  elseif not current or cjson.decode(current)["version"] ~= tonumber(expected) then
    return settle({c})
  end
end

local nbumps = tonumber(ARGV[i])
local bumps = {}
for b = 1, nbumps do
  bumps[b] = {ARGV[i + 1 + (b - 1) * 2], ARGV[i + 2 + (b - 1) * 2]}
end
i = i + 1 + nbumps * 2

while i <= #ARGV do
  local nargs = tonumber(ARGV[i])
  local command, key = ARGV[i + 1], KEYS[tonumber(ARGV[i + 2])]
  redis.call(command, key, unpack(ARGV, i + 3, i + 2 + nargs))
  i = i + 3 + nargs
end

local out, seen = {0}, {}
for _, bump in ipairs(bumps) do
  local sid = bump[2]
  if bump[1] == "o" then
    sid = nil
    local raw = redis.call("GET", KEYS[tonumber(bump[2])])
    if raw then
      sid = cjson.decode(raw)["session_id"]
      if type(sid) ~= "string" then
        sid = nil
      end
    end
  end
  if sid and not seen[sid] then
    seen[sid] = true
    out[#out + 1] = sid
    out[#out + 1] = redis.call("INCR", prefix .. ":sv:" .. sid)
  end
end
return settle(out)

-- One read of the Redis store's scripted path (see fxdurable/stores/_redis_cache.py): each
-- command's reply together with the version of the session its key belongs to, taken in
-- the same atomic step, so a reader can tell whether what it holds is still current.
--
-- ARGV: the key prefix, then per read: owner kind, owner argument, argument count, command,
-- key index, arguments. Owner kind "s": the argument is the session id; "o": the argument
-- is the index of a key holding a JSON record whose "session_id" names the session; "-":
-- no session. Command "" asks for the session's version alone (no key, no arguments).
-- Returns per read three entries: the session id (nil: none), its version (absent: 0), and
-- the command's reply (nil for a version alone).

local prefix = ARGV[1]
local out = {}
local i = 2
while i <= #ARGV do
  local kind, arg, nargs, command = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local sid = false
  if kind == "s" then
    sid = arg
  elseif kind == "o" then
    local raw = redis.call("GET", KEYS[tonumber(arg)])
    if raw then
      sid = cjson.decode(raw)["session_id"]
      if type(sid) ~= "string" then
        sid = false
      end
    end
  end
  local version = false
  if sid then
    version = tonumber(redis.call("GET", prefix .. ":sv:" .. sid) or "0")
  end
  local reply = false
  if command ~= "" then
    reply = redis.call(command, KEYS[tonumber(ARGV[i + 4])], unpack(ARGV, i + 5, i + 4 + nargs))
    i = i + 5 + nargs
  else
    i = i + 4
  end
  out[#out + 1] = sid
  out[#out + 1] = version
  out[#out + 1] = reply
end
return out

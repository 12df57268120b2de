-- The commit of one fxdurable transaction (see fxdurable/stores/redis.py).
--
-- It runs inside MULTI/EXEC, after the WATCHes of everything the transaction read, so it
-- only checks the conditions the transaction could not check from its own reads (records
-- it wrote without reading them first): every condition first, then every write. A failed
-- condition returns its number (1-based) and writes nothing; success returns 0.
--
-- ARGV: the number of conditions, then per condition: kind, key index, field, expected;
-- then the writes to the end of ARGV, each: argument count, command, key index, arguments.
--   kind "k": a string key; "h": a hash field; "z": a sorted-set score (field is the score).
--   expected "": must be absent; otherwise the JSON record's current "version".

local ncond = tonumber(ARGV[1])
local i = 2
for c = 1, ncond do
  local kind, key, field, expected = ARGV[i], KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  local current
  if kind == "k" then
    current = redis.call("GET", key)
  elseif kind == "h" then
    current = redis.call("HGET", key, field)
  else
    current = redis.call("ZCOUNT", key, field, field) > 0
  end
  if expected == "" then
    if current then
      return c
    end
  elseif not current or cjson.decode(current)["version"] ~= tonumber(expected) then
    return c
  end
end

while i <= #ARGV do
  local nargs = tonumber(ARGV[i])
  local command, key = ARGV[i + 1], KEYS[tonumber(ARGV[i + 2])]
  redis.call(command, key, unpack(ARGV, i + 3, i + 2 + nargs))
  i = i + 3 + nargs
end
return 0

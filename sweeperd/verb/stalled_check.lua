-- EMQ.STALLED.CHECK (docs/keyspace.md#what-a-sweep-does) as a script, for servers that cannot load the module.
-- KEYS[1]  active: zset, job id -> lease deadline (ms since the Unix epoch, server clock)
-- KEYS[2]  pending: zset a recovered job is added to with score 0
-- KEYS[3]  dead: zset a dead job is added to with score 0
-- ARGV[1]  prefix: the queue's key prefix; rows are <prefix>job:<id>, the metric <prefix>metrics:failed
-- ARGV[2]  max_stalled: a positive 64-bit integer, the stall budget
-- ARGV[3]  limit: a positive 64-bit integer, how many expired leases one call takes at most
-- Replies {recovered ids, dead ids} in selection order; ghosts are listed nowhere.
-- Every read and verdict comes before the first write: a refusal writes nothing.
-- Lua numbers are doubles: a stalled value of at most 15 characters (|n| < 10^15 < 2^53) is
-- counted as a plain number, exactly; anything wider goes through decimal-string arithmetic.
-- Writes are grouped by key as the module groups them: the selection leaves active in one
-- command, one HSET a row, one ZADD a target (in chunks of BATCH members), one HINCRBY by the
-- number of deaths.

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local NOT_AN_INTEGER = 'ERR hash value is not an integer'
local OVERFLOW = 'ERR increment or decrement would overflow'
local LLONG_MAX = '9223372036854775807'
local LLONG_MIN_MAGNITUDE = '9223372036854775808'
local BATCH = 1000 -- members per ZADD: unpack stays far below Lua's 8,000 stack slots

-- a <= b for two digit strings without leading zeros
local function magnitude_le(a, b)
  if #a ~= #b then return #a < #b end
  return a <= b
end

-- Redis' string2ll: '0', or an optional '-' then 1-9 then digits, within 64 bits
local function is_int64(raw)
  if raw == '0' then return true end
  if #raw == 0 or #raw >= 21 or not string.find(raw, '^%-?[1-9][0-9]*$') then return false end
  if string.sub(raw, 1, 1) == '-' then
    return magnitude_le(string.sub(raw, 2), LLONG_MIN_MAGNITUDE)
  end
  return magnitude_le(raw, LLONG_MAX)
end

local function is_positive(raw)
  return is_int64(raw) and raw ~= '0' and string.sub(raw, 1, 1) ~= '-'
end

-- the sum of two non-negative digit strings
local function add_digits(a, b)
  local out, carry = {}, 0
  for i = 0, math.max(#a, #b) - 1 do
    local da = i < #a and tonumber(string.sub(a, #a - i, #a - i)) or 0
    local db = i < #b and tonumber(string.sub(b, #b - i, #b - i)) or 0
    local d = da + db + carry
    carry = d >= 10 and 1 or 0
    out[#out + 1] = d % 10
  end
  if carry == 1 then out[#out + 1] = 1 end
  return string.reverse(table.concat(out))
end

-- a positive digit string less one
local function decrement_digits(a)
  local i = #a
  while string.sub(a, i, i) == '0' do i = i - 1 end
  local head = string.sub(a, 1, i - 1) .. tostring(tonumber(string.sub(a, i, i)) - 1)
  local digits = head .. string.rep('9', #a - i)
  return (string.gsub(digits, '^0+(%d)', '%1'))
end

-- a valid int64 string plus one (the caller has ruled out LLONG_MAX)
local function increment(raw)
  if string.sub(raw, 1, 1) ~= '-' then return add_digits(raw, '1') end
  local magnitude = decrement_digits(string.sub(raw, 2))
  return magnitude == '0' and '0' or '-' .. magnitude
end

-- s >= max_stalled, for an int64 string s and a positive max_stalled
local function reaches(s, max_stalled)
  if s == '0' or string.sub(s, 1, 1) == '-' then return false end
  return magnitude_le(max_stalled, s)
end

-- a value HINCRBY takes, as a Lua number, when it is at most 15 characters long; nil otherwise
local function small_int64(raw)
  if #raw <= 15 and (raw == '0' or string.find(raw, '^%-?[1-9][0-9]*$')) then
    return tonumber(raw)
  end
  return nil
end

-- a counted member: 'dead' or 'recovered' and s = stalled + 1 as written, or nil and the refusal.
-- On the fast path n + 1 <= 10^15 is exact, and so is n + 1 >= max_number: max_number is
-- max_stalled rounded to a double, exact up to 2^53 and above it still above any such n + 1.
local function count_stall(stalled, max_stalled, max_number)
  local n = small_int64(stalled)
  if n then
    n = n + 1
    return n >= max_number and 'dead' or 'recovered', string.format('%d', n)
  end
  if not is_int64(stalled) then return nil, NOT_AN_INTEGER end
  if stalled == LLONG_MAX then return nil, OVERFLOW end
  local s = increment(stalled)
  return reaches(s, max_stalled) and 'dead' or 'recovered', s
end

local function key_type(key)
  return redis.call('TYPE', key)['ok']
end

local function zset_or_none(key)
  local t = key_type(key)
  return t == 'zset' or t == 'none'
end

local function now_ms()
  local t = redis.call('TIME')
  return t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
end

local function server_epoch()
  local info = redis.call('INFO', 'server')
  local _, field_end = string.find(info, 'run_id:', 1, true) -- a plain search: no pattern scan
  return field_end and string.match(info, '^%x+', field_end + 1)
end

-- the keys the write pass touches must take its writes; nil when they do
local function check_targets(pending, dead, metrics, nrecovered, ndead)
  if nrecovered > 0 and not zset_or_none(pending) then return WRONGTYPE end
  if ndead == 0 then return nil end
  if not zset_or_none(dead) then return WRONGTYPE end
  local t = key_type(metrics)
  if t ~= 'hash' and t ~= 'none' then return WRONGTYPE end
  local count = redis.call('HGET', metrics, 'count') or '0'
  if not is_int64(count) then return NOT_AN_INTEGER end
  if string.sub(count, 1, 1) ~= '-'
    and not magnitude_le(add_digits(count, string.format('%d', ndead)), LLONG_MAX) then
    return OVERFLOW
  end
  return nil
end

-- ZADD key 0 <id> ... for every id, in chunks of BATCH
local function add_all_at_zero(key, ids)
  for first = 1, #ids, BATCH do
    local args, n = {}, 0
    for i = first, math.min(first + BATCH - 1, #ids) do
      args[n + 1], args[n + 2], n = '0', ids[i], n + 2
    end
    redis.call('ZADD', key, unpack(args, 1, n))
  end
end

if #KEYS ~= 3 or #ARGV ~= 3 then
  return redis.error_reply("ERR wrong number of arguments for 'emq.stalled.check' command")
end
local active, pending, dead = KEYS[1], KEYS[2], KEYS[3]
local prefix, max_stalled, limit = ARGV[1], ARGV[2], ARGV[3]
if not is_positive(max_stalled) then
  return redis.error_reply('ERR max_stalled must be a positive integer')
end
if not is_positive(limit) then return redis.error_reply('ERR limit must be a positive integer') end
if not zset_or_none(active) then return redis.error_reply(WRONGTYPE) end

-- read pass: every member judged, in selection order, the first refusal refusing the call
local now, epoch, max_number = now_ms(), server_epoch(), tonumber(max_stalled)
local ids = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', '0', limit)
local job = prefix .. 'job:'
local rows, verdicts, values, recovered, died, nrecovered, ndied = {}, {}, {}, {}, {}, 0, 0
local verdict_of, value_of = {}, {} -- each stalled value seen: its verdict and s, judged once
for i = 1, #ids do
  local id = ids[i]
  local row = job .. id
  local got = redis.pcall('HMGET', row, 'group', 'lease_epoch', 'stalled')
  if got['err'] then
    if string.sub(got['err'], 1, 9) ~= 'WRONGTYPE' then -- refused otherwise: the ACL's line
      redis.call('HMGET', row, 'group', 'lease_epoch', 'stalled')
    end
    return redis.error_reply('WRONGTYPE job ' .. id .. ' is not a hash')
  end
  local group, lease_epoch, stalled = got[1], got[2], got[3]
  local verdict, value = 'exempt', nil
  if not (group or lease_epoch or stalled) and redis.call('EXISTS', row) == 0 then
    verdict = 'ghost'
  elseif group then
    return redis.error_reply('EMQLANE job ' .. id .. ' is a lane row')
  elseif not lease_epoch or lease_epoch == epoch then
    stalled = stalled or '0'
    verdict, value = verdict_of[stalled], value_of[stalled]
    if not verdict then
      verdict, value = count_stall(stalled, max_stalled, max_number)
      if not verdict then return redis.error_reply(value) end
      verdict_of[stalled], value_of[stalled] = verdict, value
    end
  end
  rows[i], verdicts[i], values[i] = row, verdict, value
  if verdict == 'dead' then
    ndied = ndied + 1
    died[ndied] = id
  elseif verdict ~= 'ghost' then
    nrecovered = nrecovered + 1
    recovered[nrecovered] = id
  end
end
local metrics = prefix .. 'metrics:failed'
local refusal = check_targets(pending, dead, metrics, nrecovered, ndied)
if refusal then return redis.error_reply(refusal) end

-- An ACL user that may read but not write would stop the write pass halfway (a script's
-- writes are not undone): refuse before the first write instead, naming the command.
if #ids > 0 and redis.acl_check_cmd then
  local checks = {
    {'ZREMRANGEBYRANK', active, '0', '0'}, {'HSET', job .. ids[1], 'state', 'pending'},
    {'ZADD', pending, '0', ids[1]}, {'ZADD', dead, '0', ids[1]},
    {'HINCRBY', metrics, 'count', '1'},
  }
  for _, check in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(check)) then
      return redis.error_reply('NOPERM this user has no permissions to run the \'' ..
        string.lower(check[1]) .. '\' command')
    end
  end
end

-- write pass, grouped by key in the module's order: active, the rows, pending, dead, the metric
-- The selection is exactly active's first #ids ranks (every score <= now sorts before any
-- later one) and nothing has been written since: removing that rank range removes exactly
-- the selected ids, as ZREM of each would, without looking each one up again.
if #ids > 0 then redis.call('ZREMRANGEBYRANK', active, '0', string.format('%d', #ids - 1)) end
for i = 1, #ids do
  local verdict = verdicts[i]
  if verdict == 'exempt' then
    redis.call('HSET', rows[i], 'state', 'pending')
  elseif verdict == 'recovered' then
    redis.call('HSET', rows[i], 'stalled', values[i], 'state', 'pending')
  elseif verdict == 'dead' then
    redis.call('HSET', rows[i], 'stalled', values[i], 'state', 'dead', 'last_error', 'stalled')
  end
end
add_all_at_zero(pending, recovered)
add_all_at_zero(dead, died)
if ndied > 0 then redis.call('HINCRBY', metrics, 'count', string.format('%d', ndied)) end
return {recovered, died}

-- EMQ.STALLED.CHECK (SPEC §3) as a script, for servers that cannot load the module.
-- KEYS[1]  active: zset, job id -> lease deadline (ms since the Unix epoch, server clock)
-- KEYS[2]  pending: zset a recovered job is added to with score 0
-- KEYS[3]  dead: zset a dead job is added to with score 0
-- ARGV[1]  prefix: the queue's key prefix; rows are <prefix>job:<id>, the metric <prefix>metrics:failed
-- ARGV[2]  max_stalled: a positive 64-bit integer, the stall budget
-- ARGV[3]  limit: a positive 64-bit integer, how many expired leases one call takes at most
-- Replies {recovered ids, dead ids} in selection order; ghosts are listed nowhere.
-- Every read and verdict comes before the first write: a refusal writes nothing.
-- Lua numbers are doubles, so 64-bit integers are handled as decimal strings.

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local NOT_AN_INTEGER = 'ERR hash value is not an integer'
local OVERFLOW = 'ERR increment or decrement would overflow'
local LLONG_MAX = '9223372036854775807'
local LLONG_MIN_MAGNITUDE = '9223372036854775808'

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
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

-- one selected member: a verdict table, or an error text refusing the whole call
local function judge(prefix, id, epoch, max_stalled)
  local row = prefix .. 'job:' .. id
  local got = redis.pcall('HMGET', row, 'group', 'lease_epoch', 'stalled')
  if got['err'] then return nil, 'WRONGTYPE job ' .. id .. ' is not a hash' end
  local group, lease_epoch, stalled = got[1], got[2], got[3]
  if not (group or lease_epoch or stalled) and redis.call('EXISTS', row) == 0 then
    return {id = id, row = row, verdict = 'ghost'}
  end
  if group then return nil, 'EMQLANE job ' .. id .. ' is a lane row' end
  if lease_epoch and lease_epoch ~= epoch then
    return {id = id, row = row, verdict = 'exempt'}
  end
  stalled = stalled or '0'
  if not is_int64(stalled) then return nil, NOT_AN_INTEGER end
  if stalled == LLONG_MAX then return nil, OVERFLOW end
  local s = increment(stalled)
  return {id = id, row = row, stalled = s, verdict = reaches(s, max_stalled) and 'dead' or 'recovered'}
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

local now, epoch = now_ms(), server_epoch()
local plan, recovered, died = {}, {}, {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', '0', limit)) do
  local judged, refusal = judge(prefix, id, epoch, max_stalled)
  if refusal then return redis.error_reply(refusal) end
  plan[#plan + 1] = judged
  if judged.verdict == 'dead' then
    died[#died + 1] = id
  elseif judged.verdict ~= 'ghost' then
    recovered[#recovered + 1] = id
  end
end
local metrics = prefix .. 'metrics:failed'
local refusal = check_targets(pending, dead, metrics, #recovered, #died)
if refusal then return redis.error_reply(refusal) end

for _, m in ipairs(plan) do
  redis.call('ZREM', active, m.id)
  if m.verdict == 'exempt' then
    redis.call('HSET', m.row, 'state', 'pending')
    redis.call('ZADD', pending, 0, m.id)
  elseif m.verdict == 'recovered' then
    redis.call('HSET', m.row, 'stalled', m.stalled, 'state', 'pending')
    redis.call('ZADD', pending, 0, m.id)
  elseif m.verdict == 'dead' then
    redis.call('HSET', m.row, 'stalled', m.stalled, 'state', 'dead', 'last_error', 'stalled')
    redis.call('ZADD', dead, 0, m.id)
    redis.call('HINCRBY', metrics, 'count', 1)
  end
end
return {recovered, died}

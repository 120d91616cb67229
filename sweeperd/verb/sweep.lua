-- One counted sweep and its accounting, atomically: this text follows a local function
-- `verb(KEYS, ARGV)` (the module's EMQ.STALLED.CHECK, or its Lua port) in one script.
-- KEYS[1]  active: zset, job id -> lease deadline (ms since the Unix epoch, server clock)
-- KEYS[2]  pending: zset
-- KEYS[3]  dead: zset
-- KEYS[4]  metrics:failed: hash, field count
-- KEYS[5]  sweep-guard: never read or written. A key of the queue's slot that never exists, so
--          that from CLUSTER SETSLOT <slot> MIGRATING on the server refuses the whole script
--          (TRYAGAIN while the slot's keys are split between the two nodes, ASK once none is
--          left here) instead of running it on the source while a reshard moves the queue's
--          rows: the verb opens rows without the cluster's check, and a row already moved
--          would read as missing and its lease be dropped as a ghost.
-- ARGV[1]  prefix: the queue's key prefix; rows are <prefix>job:<id>
-- ARGV[2]  max_stalled: the stall budget, passed to the verb as given
-- ARGV[3]  limit: leases the call takes at most, passed to the verb as given
-- ARGV[4]  bound: ms; `expired` counts leases with a deadline at or before it; 0 = now
-- ARGV[5]  listed: ids listed at most per list when the call took more (0 = every id)
-- ARGV[6]  brief: '1' lets a call that finds nothing due (bound 0) reply after one read (see
--          below): no INFO, no counts, nothing written, as the verb writes nothing then either
--          (absent or '0': every call replies whole)
-- Replies {verdict, stats}:
--   verdict  the verb's error reply unchanged, or {recovered, dead, exempt, ghosts, ghost_ids}:
--            the verb's two lists, the recovered ids whose lease_epoch is not the run_id, how
--            many ids it removed from active that had no row, and those of them among the first
--            `listed` ids it selected (the verb lists ghosts nowhere: they are found as the ids
--            of the selection's head, read before it, that neither list holds); when the call
--            took more than `listed`, each list cut to its first `listed` ids and the three
--            full counts after: {recovered, dead, exempt, ghosts, ghost_ids, #rec, #dead, #exempt}
--   stats    {run_id, now, expired, active, pending, dead, failed count, earliest deadline,
--            server time, delay}: read after the verb; a count of a key of the wrong type is
--            false; the earliest deadline is the lowest score left in active (due or not, as
--            the server writes it; false when none is left), when the queue is due next; the
--            server time is the microseconds this script ran; the delay is how long after its
--            deadline the call took its oldest lease: ms as text (from 1970 for a deadline
--            before it, -inf too), false when the call took none
-- A brief reply (ARGV[6], nothing due) is {now, earliest deadline} alone, in place of
-- {verdict, stats}: the verdict is the verb's empty one, the server time and counts unread;
-- for an empty active set {0, false}: no deadline to compare, the clock unread.
-- Reads only, but for what the verb writes: the verb's refusal writes nothing.
-- Exempt is judged by each recovered id's lease_epoch, which the verb never writes. Where a call
-- may recover most of what it takes (max_stalled above 1), one SORT_RO reads the epochs of
-- active's first due leases in rank order before the verb; when the verb then took exactly its
-- recovered ids (no ghost, no death) and no more than were read, its recovered list is those
-- ranks in order and the i-th epoch is the i-th id's. Any other call reads each recovered id's
-- epoch by its own HGET: the same result. The SORT_RO is not sent where it cannot serve: an
-- active small enough to be a listpack (SORT would turn it into a skiplist for good), a user
-- without +sort_ro and +object|encoding or who may not read every key (%R~*), a Redis 7.0
-- Cluster (SORT's GET is refused there), a prefix holding SORT's '*'.

local LLONG_MAX = '9223372036854775807'

-- the limit as a number when the verb takes it (a positive 64-bit integer), else nil
local function positive_limit(raw)
  if not string.find(raw, '^[1-9][0-9]*$') then return nil end
  if #raw > #LLONG_MAX or (#raw == #LLONG_MAX and raw > LLONG_MAX) then return nil end
  return tonumber(raw)
end

-- Nothing due: the verb would select nothing, write nothing and reply {{}, {}} (once its two
-- arguments pass), so a brief call stops at active's first lease, before anything else is
-- defined or read. Any other case (a refused argument, active of the wrong type, a lease due)
-- goes the whole way below.
if ARGV[6] == '1' and ARGV[4] == '0' and positive_limit(ARGV[2]) and positive_limit(ARGV[3]) then
  local first_lease = redis.pcall('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if not first_lease['err'] and #first_lease == 0 then return {0, false} end
  if not first_lease['err'] then
    local t = redis.call('TIME')
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if #first_lease == 0 or tonumber(first_lease[2]) > now_ms then
      return {now_ms, first_lease[2] or false}
    end
  end
end

-- a read of a key that may have the wrong type: false then; any other refusal (an ACL user
-- without the command) fails the script, naming the command
local function read(command, key, ...)
  local n = redis.pcall(command, key, ...)
  if type(n) ~= 'table' or not n['err'] then return n end
  if string.sub(n['err'], 1, 9) == 'WRONGTYPE' then return false end
  error({err = n['err'] .. ' (' .. command .. ')'})
end

local function count(command, key, ...)
  local n = read(command, key, ...)
  if type(n) == 'table' then return false end
  return n
end

local function first(ids, n)
  local out = {}
  for i = 1, math.min(n, #ids) do out[i] = ids[i] end
  return out
end

-- the ids of `head` (the selection's first ids, in order) that neither verdict list holds: as
-- the lists keep the selection's order, a head id the verb did not drop as a ghost is among
-- their first #head ids
local function dropped(head, recovered, died)
  local kept, out = {}, {}
  for i = 1, math.min(#head, #recovered) do kept[recovered[i]] = true end
  for i = 1, math.min(#head, #died) do kept[died[i]] = true end
  for i = 1, #head do
    if not kept[head[i]] then out[#out + 1] = head[i] end
  end
  return out
end

local EPOCHS_PAGE = 1000  -- epochs one SORT_RO reads at most: its reply is one Lua table

-- redis.pcall(command...)'s reply, or nil where the user may not send it (checked first: a
-- refused command would write the ACL LOG on every call), the server does not know it, or it
-- refuses it
local function allowed_read(command)
  local checked, allowed = pcall(redis.acl_check_cmd, unpack(command))
  if not (checked and allowed) then return nil end
  local reply = redis.pcall(unpack(command))
  if type(reply) == 'table' and reply['err'] then return nil end
  return reply
end

-- the lease_epochs (false: none) of active's first leases due by `now_ms`, in rank order, as
-- many as the verb will take and at most EPOCHS_PAGE; nil when not read
local function epochs_by_rank(active, rows, max_stalled, limit, now_ms)
  local wanted = positive_limit(limit)
  if max_stalled == '1' or not (wanted and redis.acl_check_cmd) then return nil end
  if string.find(rows, '*', 1, true) then return nil end
  if allowed_read({'OBJECT', 'ENCODING', active}) ~= 'skiplist' then return nil end
  local due = redis.pcall('ZCOUNT', active, '-inf', now_ms)
  if type(due) ~= 'number' then return nil end
  local n = math.min(wanted, due, EPOCHS_PAGE)
  if n == 0 then return nil end
  return allowed_read({'SORT_RO', active, 'BY', 'nosort', 'LIMIT', '0', string.format('%d', n),
                       'GET', rows .. '*->lease_epoch'})
end

local function micros()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The clock of the server time: Redis 7.0 answers TIME inside a script with the time now, and
-- gives scripts no os.clock; Valkey 9 (and Redis from 7.2) answer every TIME with the time the
-- script started, so there the server process's CPU time (os.clock, where given) measures how
-- long the call ran. Where neither does, server_us is 0 and the call's round trip stands in.
local cpu_clock = (rawget(_G, 'os') or {}).clock
local function ran_us()
  if cpu_clock then return math.floor(cpu_clock() * 1000000) end
  return micros()
end

local call, active = redis.call, KEYS[1]
-- An ACL user without a read the accounting needs would see the verb write and the sweep
-- fail uncounted: refuse before the verb instead, naming the command.
if redis.acl_check_cmd then
  local checks = {
    {'INFO', 'server'}, {'HGET', KEYS[4], 'count'}, {'HGET', ARGV[1] .. 'job:', 'lease_epoch'},
    {'ZCOUNT', active, '0', '0'}, {'ZRANGE', active, '0', '0'}, {'ZCARD', KEYS[2]},
    {'ZRANGEBYSCORE', active, '0', '0'},
  }
  for _, check in ipairs(checks) do
    if not redis.acl_check_cmd(unpack(check)) then
      return {redis.error_reply('NOPERM this user has no permissions to run the \'' ..
        string.lower(check[1]) .. '\' command'), false}
    end
  end
end
local started = micros()
local started_ms = string.format('%d', math.floor(started / 1000))
local clock_started = cpu_clock and ran_us() or started
local rows = ARGV[1] .. 'job:'
local before = count('ZCARD', active)
-- active's first lease {id, deadline} before the verb (false: none): the first the verb takes
local earliest = before and before > 0 and call('ZRANGE', active, 0, 0, 'WITHSCORES')
local due = earliest and tonumber(earliest[2]) <= math.floor(started / 1000)
local epochs = due and epochs_by_rank(active, rows, ARGV[2], ARGV[3], started_ms)
local listed = tonumber(ARGV[5])
local head = {}  -- the first ids the verb will select: its ghosts among them are named
local wanted = positive_limit(ARGV[3])
if due and wanted then
  -- the limit as given: as a Lua number, one from 1e17 on would be sent as 1e+17
  local n = (listed > 0 and listed < wanted) and string.format('%d', listed) or ARGV[3]
  head = call('ZRANGEBYSCORE', active, '-inf', started_ms, 'LIMIT', 0, n)
end
local verdict = verb({KEYS[1], KEYS[2], KEYS[3]}, {ARGV[1], ARGV[2], ARGV[3]})
local run_id = string.match(call('INFO', 'server'), 'run_id:(%x+)')
local now = math.floor(micros() / 1000)

local taken = 0
if not verdict['err'] then
  local recovered, died, exempt = verdict[1], verdict[2], {}
  taken = before - redis.call('ZCARD', active)
  local by_rank = epochs and #recovered == taken and taken <= #epochs
  for i = 1, #recovered do
    local epoch
    if by_rank then
      epoch = epochs[i]
    else
      epoch = call('HGET', rows .. recovered[i], 'lease_epoch')
    end
    if epoch and epoch ~= run_id then exempt[#exempt + 1] = recovered[i] end
  end
  local ghosts = taken - #recovered - #died
  local ghost_ids = ghosts > 0 and dropped(head, recovered, died) or {}
  verdict = {recovered, died, exempt, ghosts, ghost_ids}
  if listed > 0 and #recovered + #died > listed then  -- counts, and the first ids only
    verdict = {first(recovered, listed), first(died, listed), first(exempt, listed), ghosts,
               ghost_ids, #recovered, #died, #exempt}
  end
end

local bound = ARGV[4] == '0' and now or ARGV[4]
local delay = false
if taken > 0 then  -- never below 0: the verb's clock may have read a moment after `started`
  local since = math.max(0, tonumber(earliest[2]))  -- a deadline before 1970 counts from 1970
  delay = string.format('%.17g', math.max(0, started / 1000 - since))
end
-- a call that took nothing wrote nothing: active's first lease is still the one read before
local left = earliest
if taken > 0 then left = read('ZRANGE', active, 0, 0, 'WITHSCORES') end
return {verdict, {
  run_id,
  now,
  count('ZCOUNT', active, '-inf', bound),
  count('ZCARD', active),
  count('ZCARD', KEYS[2]),
  count('ZCARD', KEYS[3]),
  count('HGET', KEYS[4], 'count'),
  left and left[2] or false,
  ran_us() - clock_started,
  delay,
}}

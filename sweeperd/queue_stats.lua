-- A queue's numbers after a sweep, read in one call (reads only).
-- KEYS[1]  active: zset, job id -> lease deadline (ms, server clock)
-- KEYS[2]  pending: zset
-- KEYS[3]  dead: zset
-- KEYS[4]  metrics:failed: hash, field count
-- ARGV[1]  now: ms; leases with a deadline at or before it are expired
-- Replies {expired, active, pending, dead, failed count or false}.
return {
  redis.call('ZCOUNT', KEYS[1], '-inf', ARGV[1]),
  redis.call('ZCARD', KEYS[1]),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('HGET', KEYS[4], 'count'),
}

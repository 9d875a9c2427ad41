package fleet

import "github.com/redis/go-redis/v9"

// The scripts run on Redis's clock (TIME, in milliseconds), so that
// replicas' clocks need not agree. Each touches only one backend's two keys,
// which share a hash tag: a backend's budget lives in one Cluster slot.
//
// A budget is a GCRA bucket (the generic cell rate algorithm, as
// go-redis/redis_rate and rwz/redis-gcra keep it): its state is one
// theoretical arrival time (TAT). Booking n tokens moves the TAT on by n
// emission intervals; the booking may go once the TAT, less the burst, is
// not ahead of now. redis_rate's AllowN refuses what it cannot allow now
// and books one key a call; a batch here books requests, tokens and a
// concurrency lease at once and is told how long to wait rather than
// refused (rate.Limiter's ReserveN, fleet-wide), so that it never asks
// twice. Refunds move the TAT back. The TAT never lags now by more than
// the burst, so a quiet spell banks at most one burst.
//
// The state hash (KEYS[1]) holds: rt, tt: the request and token TATs;
// rs, ts: tokens booked so far (to tell what was booked after a reading);
// f: the adaptive factor on configured rates (1, halved on a 429, climbing
// back after successes); ll: when f was last halved; sc: successes since f
// last moved; pu: paused until (a Retry-After); ou: held open until (a
// replica's breaker). The lease set (KEYS[2]) holds one member per
// batch upstream or about to go, scored by its expiry.

// gcra is shared by the scripts: the emission interval of a budget.
const gcraLua = `
local function interval(per, adaptive, f)
  if adaptive == 1 then per = per * f end
  return 60000 / per
end
`

// acquireScript books a batch: a lease, its requests and its tokens.
//
// ARGV: member, ttl ms, slots, then per budget (requests, tokens): per
// minute, burst, adaptive (0/1), need.
//
// Returns {"ok", delay ms, leases held, requests left, tokens left,
// requests booked, tokens booked} (an empty "left" when the budget is
// unknown); {"pause", ms}; {"open", ms}; {"busy", ms until the oldest
// lease expires, leases held}.
var acquireScript = redis.NewScript(gcraLua + `
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local s = redis.call('HMGET', KEYS[1], 'rt', 'tt', 'rs', 'ts', 'f', 'pu', 'ou')
local f = tonumber(s[5]) or 1
local ou = tonumber(s[7]) or 0
if ou > now then return {'open', tostring(ou - now)} end
local pu = tonumber(s[6]) or 0
if pu > now then return {'pause', tostring(pu - now)} end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local held = redis.call('ZCARD', KEYS[2])
local slots = tonumber(ARGV[3])
if slots > 0 and held >= slots then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {'busy', tostring(tonumber(first[2]) - now), held}
end
local delay = 0
local tats = {}
local left = {'', ''}
for i = 0, 1 do
  local per, burst = tonumber(ARGV[4 + i * 4]), tonumber(ARGV[5 + i * 4])
  local adaptive, need = tonumber(ARGV[6 + i * 4]), tonumber(ARGV[7 + i * 4])
  if per > 0 then
    local iv = interval(per, adaptive, f)
    local tat = math.max(tonumber(s[1 + i]) or now, now)
    local nt = tat + need * iv
    delay = math.max(delay, nt - burst * iv - now)
    tats[i + 1] = nt
    left[i + 1] = tostring(burst - (nt - now) / iv)
  end
end
if tats[1] then redis.call('HSET', KEYS[1], 'rt', tostring(tats[1])) end
if tats[2] then redis.call('HSET', KEYS[1], 'tt', tostring(tats[2])) end
local rs = redis.call('HINCRBY', KEYS[1], 'rs', ARGV[7])
local ts = redis.call('HINCRBY', KEYS[1], 'ts', ARGV[11])
redis.call('ZADD', KEYS[2], now + delay + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], 86400000)
redis.call('PEXPIRE', KEYS[2], 86400000)
return {'ok', tostring(delay), held + 1, left[1], left[2], rs, ts}
`)

// releaseScript ends a booking: the lease goes, what the batch did not use
// is refunded, and what the upstream said is learned for the fleet.
//
// ARGV: member; per budget (requests, tokens): per minute, burst,
// adaptive, booked, used, remaining reading (-1: none), booked counter at
// the booking; then rate limited (0/1), retry-after ms, succeeded (0/1),
// open ms, floor, step, successes per step, ms between two halvings.
//
// Returns {leases held, factor}.
var releaseScript = redis.NewScript(gcraLua + `
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
redis.call('ZREM', KEYS[2], ARGV[1])
local s = redis.call('HMGET', KEYS[1], 'rt', 'tt', 'rs', 'ts', 'f', 'pu', 'ou', 'll', 'sc')
local f = tonumber(s[5]) or 1
local names = {{'rt', 'rs'}, {'tt', 'ts'}}
for i = 0, 1 do
  local b = 2 + i * 7
  local per, burst, adaptive = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local booked, used = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local rem, at = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  local spent = tonumber(s[3 + i]) or 0
  if booked ~= used then
    spent = redis.call('HINCRBY', KEYS[1], names[i + 1][2], used - booked)
  end
  if per > 0 then
    local iv = interval(per, adaptive, f)
    local tat = tonumber(s[1 + i]) or now
    local nt = tat - (booked - used) * iv
    if rem >= 0 then
      -- Drain to what the upstream said is left, less what was booked
      -- since the reading's batch (the upstream had not counted it).
      local target = math.max(rem - math.max(spent - at, 0), 0)
      local have = burst - (math.max(nt, now) - now) / iv
      if have > target then nt = now + (burst - target) * iv end
    end
    if nt ~= tat then redis.call('HSET', KEYS[1], names[i + 1][1], tostring(nt)) end
  end
end
local limited, retry, ok, open = tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18]), tonumber(ARGV[19])
if limited == 1 then
  if retry > 0 and now + retry > (tonumber(s[6]) or 0) then
    redis.call('HSET', KEYS[1], 'pu', tostring(now + retry))
  end
  if now - (tonumber(s[8]) or 0) >= tonumber(ARGV[23]) then
    f = math.max(tonumber(ARGV[20]), f / 2)
    redis.call('HSET', KEYS[1], 'f', tostring(f), 'll', tostring(now), 'sc', 0)
  end
elseif ok == 1 then
  local sc = redis.call('HINCRBY', KEYS[1], 'sc', 1)
  if sc >= tonumber(ARGV[22]) then
    redis.call('HSET', KEYS[1], 'sc', 0)
    if f < 1 then
      f = math.min(1, f + tonumber(ARGV[21]))
      redis.call('HSET', KEYS[1], 'f', tostring(f))
    end
  end
end
if open > 0 and now + open > (tonumber(s[7]) or 0) then
  redis.call('HSET', KEYS[1], 'ou', tostring(now + open))
end
return {redis.call('ZCARD', KEYS[2]), tostring(f)}
`)

// renewScript extends this replica's leases (ARGV[2..]) by the TTL
// (ARGV[1] ms); a lease already gone stays gone.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local exp = now + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', 'GT', exp, ARGV[i])
end
return #ARGV - 1
`)

// heartbeatScript books this replica (ARGV[1]) as alive for the TTL
// (ARGV[2] ms) with its description (ARGV[3]), drops members whose
// heartbeat lapsed, and returns the members and their descriptions:
// {id, info, id, info, ...}.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(gone) do redis.call('HDEL', KEYS[2], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], 86400000)
redis.call('PEXPIRE', KEYS[2], 86400000)
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local out = {}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
end
return out
`)

// leaveScript takes this replica (ARGV[1]) out of the fleet at once.
var leaveScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
`)

// peekScript reads a backend's shared state for the status page:
// {now, rt, tt, rs, ts, f, pu, ou, lease, expiry, lease, expiry, ...}.
var peekScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local s = redis.call('HMGET', KEYS[1], 'rt', 'tt', 'rs', 'ts', 'f', 'pu', 'ou')
local out = {tostring(now)}
for i = 1, 7 do out[#out + 1] = s[i] or '' end
local ls = redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf', 'WITHSCORES')
for _, v in ipairs(ls) do out[#out + 1] = v end
return out
`)

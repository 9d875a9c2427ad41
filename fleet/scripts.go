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
// replica's breaker); wn: the waiters' arrival counter. The lease set
// (KEYS[2]) holds one member per batch upstream or about to go, scored by
// its expiry.

// The waiters. A booking that finds every lease taken does not poll: it
// waits in the backend's queue (KEYS[3], a sorted set scored by arrival:
// first come, first served across the fleet), with what it asks in the
// waiter hash (KEYS[4]: member -> JSON {x: expiry, ch: its replica's
// channel, s: slots, t: ttl ms, a: the eight rate arguments}). Whoever
// frees a slot (a release, or a booking or heartbeat that finds a lease
// expired) books the head waiter in the same script, exactly as its own
// booking would have, stores the answer in the waiter hash ({r: answer,
// at: when}) and PUBLISHes it on the waiter's replica's channel: one
// message to one replica, the waiter makes no round trip of its own. A
// message lost (pub/sub does not store) is found by the replica's next
// heartbeat, which renews its waiters as it renews its leases and reads
// back the answers handed to them. A waiter whose replica died lapses
// with its expiry; a lease handed to it lapses with the lease's TTL,
// as any lease of a dead replica. While the fleet is paused or held open,
// every waiter is told so (rare: a 429 or an open breaker) and books
// again when it may.

// The scripts' shared functions: the emission interval of a budget, the
// clock, lease expiry, a booking, and the hand-off to waiters. KEYS: the
// state hash, the lease set, the waiter queue, the waiter hash.
const sharedLua = `
local function interval(per, adaptive, f)
  if adaptive == 1 then per = per * f end
  return 60000 / per
end

local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + t[2] / 1000
end

-- expire drops the leases whose TTL passed, and the answers handed to
-- them while they waited.
local function expire(now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  if #gone > 0 then
    for _, m in ipairs(gone) do redis.call('HDEL', KEYS[4], m) end
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  end
end

-- book takes a lease for member (ttl ms) and books its requests and
-- tokens: a = {per minute, burst, adaptive, need} for requests, then
-- tokens. Returns the answer {'ok', delay ms, leases held, requests left,
-- tokens left, requests booked, tokens booked}, all strings.
local function book(now, member, ttl, a)
  local s = redis.call('HMGET', KEYS[1], 'rt', 'tt', 'f')
  local f = tonumber(s[3]) or 1
  local delay = 0
  local tats = {}
  local left = {'', ''}
  for i = 0, 1 do
    local per, burst, adaptive, need = a[1 + i * 4], a[2 + i * 4], a[3 + i * 4], a[4 + i * 4]
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
  local rs = redis.call('HINCRBY', KEYS[1], 'rs', a[4])
  local ts = redis.call('HINCRBY', KEYS[1], 'ts', a[8])
  redis.call('ZADD', KEYS[2], now + delay + ttl, member)
  redis.call('PEXPIRE', KEYS[1], 86400000)
  redis.call('PEXPIRE', KEYS[2], 86400000)
  return {'ok', tostring(delay), tostring(redis.call('ZCARD', KEYS[2])), left[1], left[2], tostring(rs), tostring(ts)}
end

local function notify(ch, member, answer)
  local msg = {member}
  for _, v in ipairs(answer) do msg[#msg + 1] = v end
  redis.call('PUBLISH', ch, cjson.encode(msg))
end

-- handoff gives the free slots to the waiters, first come first served:
-- each is booked, its answer stored and published to its replica. While
-- the fleet is paused or held open, every waiter is told so instead.
local function handoff(now)
  local s = redis.call('HMGET', KEYS[1], 'pu', 'ou')
  local pu, ou = tonumber(s[1]) or 0, tonumber(s[2]) or 0
  local stop = nil
  if ou > now then stop = {'open', tostring(ou - now)} elseif pu > now then stop = {'pause', tostring(pu - now)} end
  while true do
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)
    if #head == 0 then return end
    local m = head[1]
    local raw = redis.call('HGET', KEYS[4], m)
    local w = raw and cjson.decode(raw)
    if not w or not w.x or w.x < now then
      -- gone, or its replica stopped renewing it
      redis.call('ZREM', KEYS[3], m)
      if raw then redis.call('HDEL', KEYS[4], m) end
    elseif stop then
      redis.call('ZREM', KEYS[3], m)
      redis.call('HDEL', KEYS[4], m)
      notify(w.ch, m, stop)
    else
      if w.s > 0 and redis.call('ZCARD', KEYS[2]) >= w.s then return end
      redis.call('ZREM', KEYS[3], m)
      local r = book(now, m, w.t, w.a)
      redis.call('HSET', KEYS[4], m, cjson.encode({r = r, at = now}))
      notify(w.ch, m, r)
    end
  end
end
`

// acquireScript books a batch: a lease, its requests and its tokens; or,
// when every lease is taken (or others wait already), queues it.
//
// ARGV: member, ttl ms, slots, then per budget (requests, tokens): per
// minute, burst, adaptive (0/1), need; then the replica's channel.
//
// Returns (all strings) the answer {"ok", delay ms, leases held, requests
// left, tokens left, requests booked, tokens booked} (an empty "left"
// when the budget is unknown); {"pause", ms}; {"open", ms}; {"queued",
// ms until the oldest lease expires, leases held}.
var acquireScript = redis.NewScript(sharedLua + `
local now = clock()
local s = redis.call('HMGET', KEYS[1], 'pu', 'ou')
local ou = tonumber(s[2]) or 0
if ou > now then return {'open', tostring(ou - now)} end
local pu = tonumber(s[1]) or 0
if pu > now then return {'pause', tostring(pu - now)} end
expire(now)
handoff(now)
local ttl, slots = tonumber(ARGV[2]), tonumber(ARGV[3])
local a = {}
for i = 1, 8 do a[i] = tonumber(ARGV[3 + i]) end
local held = redis.call('ZCARD', KEYS[2])
if redis.call('ZCARD', KEYS[3]) == 0 and (slots <= 0 or held < slots) then
  return book(now, ARGV[1], ttl, a)
end
local n = redis.call('HINCRBY', KEYS[1], 'wn', 1)
redis.call('ZADD', KEYS[3], n, ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], cjson.encode({x = now + ttl, ch = ARGV[12], s = slots, t = ttl, a = a}))
redis.call('PEXPIRE', KEYS[3], 86400000)
redis.call('PEXPIRE', KEYS[4], 86400000)
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local wait = 0
if first[2] then wait = tonumber(first[2]) - now end
return {'queued', tostring(wait), tostring(held)}
`)

// releaseScript ends a booking: the lease goes, what the batch did not use
// is refunded, and what the upstream said is learned for the fleet; the
// slot goes to the head waiter.
//
// ARGV: member; per budget (requests, tokens): per minute, burst,
// adaptive, booked, used, remaining reading (-1: none), booked counter at
// the booking; then rate limited (0/1), retry-after ms, succeeded (0/1),
// open ms, floor, step, successes per step, ms between two halvings.
//
// Returns {leases held, factor}.
var releaseScript = redis.NewScript(sharedLua + `
local now = clock()
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
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
expire(now)
handoff(now)
return {redis.call('ZCARD', KEYS[2]), tostring(f)}
`)

// renewScript extends this replica's leases and waiters (ARGV[2..]) by
// the TTL (ARGV[1] ms); a lease already gone stays gone. It hands slots
// freed by expired leases to the waiters, and returns, for the members
// that wait or waited: the answer handed to them (its delay less the time
// since, as JSON [member, answer...]), or ["member", "gone"] when one is
// neither queued nor leased: the heartbeat's fallback for a lost message.
var renewScript = redis.NewScript(sharedLua + `
local now = clock()
local exp = now + tonumber(ARGV[1])
expire(now)
handoff(now)
local out = {}
for i = 2, #ARGV do
  local m = ARGV[i]
  local raw = redis.call('HGET', KEYS[4], m)
  local w = raw and cjson.decode(raw)
  if w and w.r then
    local r = w.r
    r[2] = tostring(math.max(0, tonumber(r[2]) - (now - w.at)))
    local msg = {m}
    for _, v in ipairs(r) do msg[#msg + 1] = v end
    out[#out + 1] = cjson.encode(msg)
  elseif w and redis.call('ZSCORE', KEYS[3], m) then
    w.x = exp
    redis.call('HSET', KEYS[4], m, cjson.encode(w))
  end
  redis.call('ZADD', KEYS[2], 'XX', 'GT', exp, m)
  if not (w and (w.r or w.x)) and not redis.call('ZSCORE', KEYS[2], m) then
    out[#out + 1] = cjson.encode({m, 'gone'})
  end
end
return out
`)

// cancelScript takes a waiter (ARGV[1]) out of the queue. Returns
// {"gone"} when it was still waiting (or was never queued), or the answer
// handed to it: then it holds a lease, which its replica must release.
var cancelScript = redis.NewScript(`
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[4], ARGV[1])
  return {'gone'}
end
local raw = redis.call('HGET', KEYS[4], ARGV[1])
if raw then
  local w = cjson.decode(raw)
  if w.r then return w.r end
end
return {'gone'}
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
